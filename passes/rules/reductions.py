"""Adjoint rules of ``stablehlo.reduce`` with add, multiply, max and min bodies.

Max/min convention (TensorFlow's ``reduce_max`` gradient): the cotangent is
divided equally among the elements that tie for the extremum (the init value
counts as one more candidate).
"""
from __future__ import annotations

from ..ir import hlo
from ..ir.hlo import broadcast_in_dim, compare, divide, multiply, select, splat
from ..ir.mlir import elem, ir, is_float, shape
from .indexing import selection_reduce
from ..transforms.forward import by_transposition, linear
from ..transforms.batching import Batcher, MissingBatchingRule, plus1, remake
from ..transforms.registry import adjoint, batching, missing, tangent

_BODY_KINDS = {"stablehlo.add": "add", "stablehlo.multiply": "mul",
               "stablehlo.maximum": "max", "stablehlo.minimum": "min"}


def reduce_kind(op: ir.Operation) -> str | None:
    """add/mul/max/min when ``op``'s body is one such binary op of its two arguments."""
    block = op.regions[0].blocks[0]
    body = list(block.operations)
    if len(op.operands) != 2 or len(body) != 2:
        return None
    combine, ret = body
    args = list(block.arguments)
    if set(combine.operands) != set(args) or list(ret.operands) != [combine.results[0]]:
        return None
    return _BODY_KINDS.get(combine.name)


def _indicator(pred: ir.Value, like: ir.Type) -> ir.Value:
    """1.0 where ``pred`` holds, else 0.0 (a select: IREE's vmvx cannot convert i1 to f64)."""
    if hlo.is_static(pred):
        return select(pred, splat(1, like), splat(0, like))
    return select(pred, hlo.fill(1, pred, elem(like)), hlo.fill(0, pred, elem(like)))


def _is_constant(v: ir.Value) -> bool:
    return isinstance(v, ir.OpResult) and v.owner.name == "stablehlo.constant"


def _kept(op: ir.Operation, rank: int) -> tuple[list[int], list[int]]:
    dims = hlo.read_i64_array(op, "dimensions")
    return dims, [d for d in range(rank) if d not in dims]


def decoupled_kinds(op: ir.Operation) -> list[str] | None:
    """For a reduce of several operands whose body reduces each operand on its own (JAX's
    reduce of (max of floats, min of ints)): each operand's add/mul/max/min; else None."""
    n = len(op.results)
    block = op.regions[0].blocks[0]
    args, body = list(block.arguments), list(block.operations)
    if n < 2 or len(body) != n + 1:
        return None
    kinds = []
    for k, v in enumerate(body[-1].operands):
        combine = v.owner if isinstance(v, ir.OpResult) else None
        if combine is None or set(combine.operands) != {args[k], args[n + k]} or combine.name not in _BODY_KINDS:
            return None
        kinds.append(_BODY_KINDS[combine.name])
    return kinds


@adjoint("stablehlo.reduce")
def _reduce(op, cts):
    """add: dx = broadcast(ct); max/min: ct split among ties; mul: product of the others;
    several operands reduced each on its own: each so"""
    n = len(op.results)
    kinds = decoupled_kinds(op)
    if kinds is not None:
        grads = [_reduce_one(kinds[k], op, op.operands[k], op.operands[n + k], op.results[k], cts[k])
                 if cts[k] is not None and is_float(op.operands[k]) else (None, None) for k in range(n)]
        return (*[g[0] for g in grads], *[g[1] for g in grads])
    if len(op.operands) > 2:  # several operands: an argmax-style selection (indexing.py)
        return selection_reduce(op, cts)
    kind = reduce_kind(op)
    if kind is None:
        raise missing(op, " with this reduction body")
    return _reduce_one(kind, op, *op.operands, op.results[0], cts[0])


def _reduce_one(kind: str, op: ir.Operation, x: ir.Value, init: ir.Value, y: ir.Value, ct: ir.Value):
    """(d x, d init) of ``y``, the reduction ``kind`` of ``x`` from ``init`` over ``op``'s dimensions."""
    dims, kept = _kept(op, len(shape(x)))
    spread = lambda v: hlo.broadcast_like(v, x, kept)  # noqa: E731
    need_init = not _is_constant(init)
    all_dims = range(len(shape(ct)))
    if kind == "add":
        dinit = hlo.reduce_sum(ct, all_dims) if need_init else None
        return spread(ct), dinit
    if kind in ("max", "min"):
        hit = _indicator(compare(x, spread(y), "EQ"), x.type)
        init_hit = _indicator(compare(hlo.broadcast_like(init, y, []), y, "EQ"), y.type)
        count = hlo.add(hlo.reduce_sum(hit, dims), init_hit)
        share = divide(ct, count)
        dinit = hlo.reduce_sum(multiply(share, init_hit), all_dims) if need_init else None
        return multiply(spread(share), hit), dinit
    return _reduce_prod(x, init, y, ct, dims, spread, need_init)


def _reduce_prod(x, init, y, ct, dims, spread, need_init):
    """d x_i = ct * prod_{j != i} x_j, exact when some x_j are zero"""
    zero, one = splat(0, x.type), splat(1, x.type)
    is_zero = compare(x, zero, "EQ")
    zeros = hlo.reduce_sum(_indicator(is_zero, x.type), dims)
    nonzero_x = select(is_zero, one, x)
    prod_nonzero = multiply(hlo.reduce(nonzero_x, dims, "mul"), broadcast_in_dim(init, shape(y), []))
    no_zero = spread(compare(zeros, splat(0, zeros.type), "EQ"))
    one_zero = spread(compare(zeros, splat(1, zeros.type), "EQ"))
    others = select(no_zero, divide(spread(prod_nonzero), nonzero_x),
                    select(one_zero, select(is_zero, spread(prod_nonzero), zero), zero))
    dx = multiply(spread(ct), others)
    dinit = None
    if need_init:
        prod_x = hlo.reduce(x, dims, "mul")
        dinit = hlo.reduce_sum(multiply(ct, prod_x), range(len(shape(ct))))
    return dx, dinit


@tangent("stablehlo.reduce")
def _reduce_tangent(op, ts):
    """a sum is linear: the sum of the tangents; max/min/product: through the adjoint"""
    return (linear if reduce_kind(op) == "add" else by_transposition)(op, ts)


# ----- batching ------------------------------------------------------------------------------

def inputs_and_inits(b: Batcher, op) -> tuple[list[ir.Value], list[ir.Value]]:
    n = len(op.operands) // 2
    xs = b.operands(op)
    if any(v in b.batched for v in xs[n:]):
        raise MissingBatchingRule(op, "batched initial values")
    return [b.lift(x) for x in xs[:n]], xs[n:]


@batching("stablehlo.reduce")
def _reduce_batched(b: Batcher, op):
    xs, inits = inputs_and_inits(b, op)
    attrs = {"dimensions": hlo.i64_array(plus1(hlo.read_i64_array(op, "dimensions")))}
    return b.mark(remake(op, [*xs, *inits], [b.type(r) for r in op.results], attrs).results)
