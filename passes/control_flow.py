"""Adjoint rules of control flow and calls: ``stablehlo.case`` / ``if`` / ``while``
and the opaque ``stablehlo.custom_call``.

``func.call`` has no rule: the module-level pass inlines every callee, also
calls nested in while/case regions, before differentiating.

Region bodies are differentiated by the same driver (:func:`.backprop.backprop`),
run on a copy of the region placed inside the adjoint op and restricted to
that copy's block. A region reads values defined above it (StableHLO allows
implicit capture); those *captured* values get cotangents too: the driver
passes them to these rules after the op's operands (see ``op_inputs``).

* ``case`` / ``if``: an op of the same kind on the same (saved) index whose
  branch k recomputes branch k and returns its adjoint for every float
  captured value, zeros for the values branch k does not use.
* ``while`` with a trip count ``n`` known at compile time (JAX's ``fori_loop``
  and ``scan``): a short loop (``choices.unroll_loop``) is unrolled in place and
  differentiated as straight-line code. Otherwise a copy of the loop takes the
  forward loop's place and records, at every iteration, the carries and the
  non-elementwise values the adjoint reads (``tape[t]``; loop-invariant carries are
  not recorded); a reverse loop over ``t = n-1 .. 0`` reads them, recomputes the
  elementwise rest and applies the body's adjoint, carrying the carries' cotangents
  and accumulating the captured values'. A loop whose trip count cannot be proven
  static raises :class:`DynamicTripCountError` (a ValueError) naming its location.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from . import hlo
from .regions import inline_region
from .backprop import backprop, backprop_local, captured_values, op_inputs
from .choices import unroll_loop
from .mlir import elem, ir, is_float, shape, tensor_type
from .forward import Replaced, by_transposition, in_place, jvp
from .registry import adjoint, missing, tangent


class DynamicTripCountError(ValueError):
    """A ``stablehlo.while`` on the gradient path whose trip count is not static."""


def _in_block(block: ir.Block) -> Callable[[ir.Operation], bool]:
    return lambda o: o.block == block


def _scalar(value: int, element: str = "int32") -> ir.Value:
    return hlo.splat(value, tensor_type([], element))


def _inside(o: ir.Operation, op: ir.Operation) -> bool:
    while o is not None:
        if o == op:
            return True
        o = o.parent
    return False


def isolate(op: ir.Operation) -> None:
    """Pass the values ``op``'s regions capture through one optimization_barrier placed
    before ``op``. IREE 3.13 otherwise fails at run time on some adjoint ``case`` ops
    fed by a forward ``case`` ("OUT_OF_RANGE ... hal.command_buffer", see
    tests/fixtures/iree313_copy_buffer_bug.mlir); the barrier only fixes an evaluation order."""
    captured = captured_values(op)
    if not captured:
        return
    with ir.InsertionPoint(op), op.location:
        fenced = hlo.optimization_barrier(captured)
    for old, new in zip(captured, fenced):
        for use in list(old.uses):
            if _inside(use.owner, op):
                use.owner.operands[use.operand_number] = new


# ----- branches --------------------------------------------------------------------

def _branch_adjoints(op: ir.Operation, cts, make) -> list[ir.Value | None]:
    """One cotangent per captured value from an op ``make(types, n)`` that dispatches like ``op``."""
    captured = captured_values(op)
    wrt = [v for v in captured if is_float(v)]
    if not wrt:
        return [None] * len(captured)
    new, blocks = make([v.type for v in wrt], len(op.regions))
    for k, block in enumerate(blocks):
        with ir.InsertionPoint(block):
            outs = inline_region(op, k, [])
            grads = backprop(outs, list(cts), wrt, allow=_in_block(block))
            hlo.return_([g if g is not None else hlo.zeros(v.type) for g, v in zip(grads, wrt)], "stablehlo.return")
    isolate(new)
    results = iter(new.results)
    return [next(results) if is_float(v) else None for v in captured]


@adjoint("stablehlo.case")
def _case(op, cts):
    """d captured = case(index){branch k: adjoint of branch k, 0 for values it does not use}"""
    index = op.operands[0]
    return (None, *_branch_adjoints(op, cts, lambda types, n: hlo.case(index, types, n)))


@adjoint("stablehlo.if")
def _if(op, cts):
    """d captured = if(pred){adjoint of the true branch} else {adjoint of the false branch}"""
    pred = op.operands[0]
    return (None, *_branch_adjoints(op, cts, lambda types, n: hlo.if_(pred, types)))


# ----- loops -------------------------------------------------------------------------

_IDENTITIES = ("stablehlo.reshape", "stablehlo.convert", "stablehlo.bitcast_convert")


def _skip_identity(v: ir.Value) -> ir.Value:
    """Look through same-type reshapes/converts (TensorFlow's export wraps loop carries in them)."""
    while isinstance(v, ir.OpResult) and v.owner.name in _IDENTITIES and v.owner.operands[0].type == v.type:
        v = v.owner.operands[0]
    return v


def _constant_int(v: ir.Value) -> int | None:
    """A scalar integer constant's value (None for anything else)."""
    c = _scalar_constant(v)
    return c if isinstance(c, int) else None


def _scalar_constant(v: ir.Value) -> int | np.floating | None:
    """A scalar constant's value: a Python int, or a numpy float of the constant's own type
    (so that a float loop is counted in the arithmetic it runs in); None for anything else."""
    return hlo.scalar_constant(_skip_identity(v))


_SWAPPED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "NE": "NE", "EQ": "EQ"}


def trip_count(op: ir.Operation) -> int:
    """n for a counted loop: carry i starts at a constant, the condition compares i with a
    constant (LT, LE, GT, GE or NE), and the body returns i + constant step."""
    cond, body = op.regions[0].blocks[0], op.regions[1].blocks[0]
    pred = _skip_identity(list(cond.operations)[-1].operation.operands[0])
    cmp = pred.owner if isinstance(pred, ir.OpResult) else None
    if cmp is not None and cmp.name == "stablehlo.compare":
        lhs, rhs = (_skip_identity(v) for v in cmp.operands)
        direction = hlo.read_direction(cmp)
        if isinstance(rhs, ir.BlockArgument) and rhs.owner == cond:
            lhs, rhs, direction = rhs, lhs, _SWAPPED[direction]
        if isinstance(lhs, ir.BlockArgument) and lhs.owner == cond:
            k = lhs.arg_number
            start, bound = _scalar_constant(op.operands[k]), _scalar_constant(rhs)
            step = _step(body, k)
            if None not in (start, bound, step) and step != 0:
                n = _count(start, bound, step, direction)
                if n is not None:
                    return n
    raise DynamicTripCountError(
        f"stablehlo.while at {op.location} has a data-dependent trip count: reverse mode needs a "
        "loop counted from a constant, compared with a constant bound and stepped by a constant "
        "(lax.fori_loop / lax.scan); rewrite it with a static trip count")


def _step(body: ir.Block, k: int) -> int | None:
    nxt = _skip_identity(list(body.operations)[-1].operation.operands[k])
    if not isinstance(nxt, ir.OpResult) or nxt.owner.name != "stablehlo.add":
        return None
    a, b = (_skip_identity(v) for v in nxt.owner.operands)
    counter = body.arguments[k]
    return _scalar_constant(b) if a == counter else _scalar_constant(a) if b == counter else None


MAX_SIMULATED_STEPS = 1 << 20


def _count(start, bound, step, direction: str) -> int | None:
    """Iterations of ``for (i = start; i <direction> bound; i += step)``; None if unbounded."""
    if not all(isinstance(c, int) for c in (start, bound, step)):
        return _simulate(start, bound, step, direction)
    if direction == "NE":
        q, r = divmod(bound - start, step)
        return q if r == 0 and q >= 0 else None
    if direction in ("LT", "LE") and step > 0:  # ceil((end - start) / step)
        return max(0, -((start - bound - (direction == "LE")) // step))
    if direction in ("GT", "GE") and step < 0:  # ceil((start - end) / -step)
        return max(0, -((bound - (direction == "GE") - start) // -step))
    return None


def _simulate(start, bound, step, direction: str) -> int | None:
    """A float counter, counted in its own arithmetic (``0.1`` steps do not land on ``1.0``)."""
    dtype = next(c for c in (start, bound, step) if not isinstance(c, int)).dtype
    i, bound, step = dtype.type(start), dtype.type(bound), dtype.type(step)
    test = {"LT": np.less, "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal,
            "NE": np.not_equal}.get(direction)
    if test is None:
        return None
    with np.errstate(all="ignore"):
        for n in range(MAX_SIMULATED_STEPS + 1):
            if not test(i, bound):
                return n
            i = dtype.type(i + step)
    return None


def _varying(op: ir.Operation) -> list[int]:
    """Carries the body changes (the others keep their initial value in every iteration)."""
    body = op.regions[1].blocks[0]
    returned = list(body.operations)[-1].operation.operands
    return [k for k, v in enumerate(returned) if _skip_identity(v) != body.arguments[k]]


def _tape_type(v: ir.Value, n: int) -> ir.Type:
    return tensor_type([n, *shape(v)], elem(v))


def _record(op: ir.Operation, keep: list[int], residuals: list[tuple[int, int]], n: int) -> list[ir.Value]:
    """A copy of ``op`` that also stacks carry k (k in ``keep``) as ``tape_k[t] = carry_k(t)``
    and result j of the body's i-th op ((i, j) in ``residuals``) as ``tape[t]``. It takes the
    place of ``op`` (built before it, it replaces its results), so the forward loop runs once."""
    m = len(op.operands)
    body_ops = list(op.regions[1].blocks[0].operations)
    stacked = [op.operands[k] for k in keep] + [body_ops[i].results[j] for i, j in residuals]
    tapes = [hlo.zeros(_tape_type(v, n)) for v in stacked]
    loop, cond, body = hlo.while_([*op.operands, *tapes, _scalar(0)])
    with ir.InsertionPoint(cond):
        hlo.return_(inline_region(op, 0, list(cond.arguments)[:m]), "stablehlo.return")
    with ir.InsertionPoint(body):
        args = list(body.arguments)
        t, zero = args[-1], _scalar(0)
        copied: list[ir.Operation] = []
        outs = inline_region(op, 1, args[:m], copied)
        values = [args[k] for k in keep] + [copied[i].results[j] for i, j in residuals]
        recorded = [hlo.dynamic_update_slice(tape, hlo.reshape(v, [1, *shape(v)]), [t] + [zero] * len(shape(v)))
                    for tape, v in zip(args[m:-1], values)]
        hlo.return_([*outs, *recorded, hlo.add(t, _scalar(1))], "stablehlo.return")
    for old, new in zip(op.results, loop.results):
        old.replace_all_uses_with(new)
    return list(loop.results)[m:-1]


def _top(o: ir.Operation, block: ir.Block) -> ir.Operation:
    """The ancestor of ``o`` (or ``o``) that lies in ``block``."""
    o = o.operation
    while o.block != block:
        o = o.parent.operation
    return o


# Ops the reverse loop recomputes from recorded values rather than record themselves: IREE
# fuses them into the adjoint's own elementwise work, while every recorded value costs a
# tape write per forward step and a read per reverse step.
_RECOMPUTED = {f"stablehlo.{name}" for name in (
    "add", "subtract", "multiply", "divide", "negate", "abs", "sign", "maximum", "minimum", "select",
    "compare", "convert", "clamp", "exponential", "exponential_minus_one", "log", "log_plus_one", "tanh",
    "logistic", "sqrt", "rsqrt", "sine", "cosine", "and", "or", "not", "reshape", "broadcast_in_dim",
    "transpose", "slice", "dynamic_slice", "iota", "constant")}


def _residuals(body: ir.Block, recomputed: list[ir.Operation]) -> list[tuple[int, int, ir.Value]]:
    """The results of recomputed forward ops to record, (op index, result index, value): those
    the adjoint ops read, where elementwise and shape ops are recomputed from their operands
    (recursively) and the rest (contractions, reductions, regions...) are recorded."""
    where = {r: (i, j) for i, o in enumerate(recomputed) for j, r in enumerate(o.results)}
    own = set(recomputed)
    needed = [r for r in where if any(_top(use.owner, body) not in own for use in r.uses)]
    seen, found = set(), []
    while needed:
        v = needed.pop()
        if v in seen:
            continue
        seen.add(v)
        o = v.owner.operation
        if o.name in _RECOMPUTED:
            needed.extend(x for x in o.operands if x in where)
        else:
            found.append((*where[v], v))
    return found


def _read(block: ir.Block, values: Sequence[ir.Value]) -> list[bool]:
    """Whether each of ``values`` feeds ``block``'s terminator through ops of the block."""
    seen: set[ir.Value] = set()
    stack = list(list(block.operations)[-1].operation.operands)
    while stack:
        v = stack.pop()
        if v not in seen:
            seen.add(v)
            if isinstance(v, ir.OpResult) and v.owner.operation.block == block:
                stack.extend(op_inputs(v.owner.operation))
    return [v in seen for v in values]


def _reverse_loop(op, cts, n, tapes, floats, wrt):
    """The reverse loop over t = n-1 .. 0; returns (loop, its body, the carries it recomputes
    from, the recomputed forward ops, t)."""
    m = len(op.operands)
    seeds = [cts[k] if cts[k] is not None else hlo.zeros(op.operands[k].type) for k in floats]
    loop, cond, body = hlo.while_([_scalar(0), *seeds, *[hlo.zeros(v.type) for v in wrt]])
    with ir.InsertionPoint(cond):
        hlo.return_([hlo.compare(cond.arguments[0], _scalar(n), "LT")], "stablehlo.return")
    with ir.InsertionPoint(body):
        j, *state = body.arguments
        ct, acc = state[:len(floats)], state[len(floats):]
        t, zero = hlo.subtract(_scalar(n - 1), j), _scalar(0)
        carries = [hlo.reshape(hlo.dynamic_slice(tapes[k], [t] + [zero] * len(shape(v)), [1, *shape(v)]), shape(v))
                   if k in tapes else hlo.identity(v) for k, v in enumerate(op.operands)]
        recomputed: list[ir.Operation] = []
        outs = inline_region(op, 1, carries, recomputed)
        seed_of = dict(zip(floats, ct))
        grads = backprop(outs, [seed_of.get(k) for k in range(m)], [carries[k] for k in floats] + wrt,
                         allow=_in_block(body))
        grads = [g if g is not None else hlo.zeros(v.type) for g, v in zip(grads, ct + acc)]
        new_acc = [hlo.accumulate(a, g) for a, g in zip(acc, grads[len(floats):])]
        hlo.return_([hlo.add(j, _scalar(1)), *grads[:len(floats)], *new_acc], "stablehlo.return")
    return loop, body, carries, recomputed, t


def _unrolled(op: ir.Operation, cts, n: int, captured: list[ir.Value]) -> list:
    """A short loop: n copies of the body replace it, and their adjoint is straight-line code."""
    with ir.InsertionPoint(op):
        carries = list(op.operands)
        for _ in range(n):
            carries = inline_region(op, 1, carries)
    for old, new in zip(op.results, carries):
        old.replace_all_uses_with(new)
    # A value can be both an operand and captured (an outer carry that initialises an inner
    # loop and is read by its body): its whole cotangent goes to its first position only.
    inputs = [*op.operands, *captured]
    unique = list(dict.fromkeys(inputs))
    total = dict(zip(unique, backprop_local(carries, list(cts), unique)))
    return [total.pop(v) if v in total else None for v in inputs]


@adjoint("stablehlo.while")
def _while(op, cts):
    """for t = n-1 .. 0: (d carry, d captured += ...) = body adjoint at the carries of iteration t"""
    n = trip_count(op)
    m = len(op.operands)
    captured = captured_values(op)
    floats = [k for k in range(m) if is_float(op.operands[k])]
    wrt = [v for v in captured if is_float(v)]
    if n == 0:
        return (*[cts[k] if k in floats else None for k in range(m)], *[None] * len(captured))
    if unroll_loop(n, len(op.regions[1].blocks[0].operations)):
        return _unrolled(op, cts, n, captured)
    # Build the reverse loop on placeholder tapes, then record only the carries it reads.
    tapes = {k: hlo.zeros(_tape_type(op.operands[k], n)) for k in _varying(op)}
    loop, body, carries, recomputed, t = _reverse_loop(op, cts, n, tapes, floats, wrt)
    # The forward values the adjoint reads are recorded too (JAX's residuals) where recomputing
    # them is not elementwise work (see _RECOMPUTED): the reverse body reads them from tapes
    # and the recomputation it no longer needs is dead.
    residuals = _residuals(body, recomputed)
    placeholders = []
    with ir.InsertionPoint(recomputed[0] if recomputed else list(body.operations)[-1]):
        for _, _, r in residuals:
            tape = hlo.zeros(_tape_type(r, n))
            placeholders.append(tape)
            read = hlo.reshape(hlo.dynamic_slice(tape, [t] + [_scalar(0)] * len(shape(r)), [1, *shape(r)]), shape(r))
            for use in list(r.uses):
                use.owner.operands[use.operand_number] = read
    keep = [k for k, read in zip(tapes, _read(body, [carries[k] for k in tapes])) if read]
    with ir.InsertionPoint(op):
        recorded = _record(op, keep, [(i, j) for i, j, _ in residuals], n)
    for placeholder, tape in zip([tapes[k] for k in keep] + placeholders, recorded):
        placeholder.replace_all_uses_with(tape)
    results = list(loop.results)[1:]
    d_carry = dict(zip(floats, results[:len(floats)]))
    d_captured = dict(zip(wrt, results[len(floats):]))
    return (*[d_carry.get(k) for k in range(m)], *[d_captured.get(v) for v in captured])


# ----- opaque calls --------------------------------------------------------------------

@adjoint("stablehlo.custom_call")
def _custom_call(op, cts):
    """opaque to irgrad: no adjoint (LookupError naming the call target)"""
    target = hlo.read_str(op, "call_target_name")
    raise missing(op, f" (call target @{target})")


# ----- tangents ------------------------------------------------------------------------
#
# A region op's tangent is the same region op carrying the tangents too: each region is
# copied into the new op and differentiated there by the forward driver, with the tangents
# of the values it captures read from above. In place (the module pass) the new op takes
# the old one's place, so the forward work runs once.

def _region_tangents(op: ir.Operation, k: int, args: Sequence[ir.Value], targs: Sequence,
                     t_captured: dict) -> tuple[list[ir.Value], list]:
    """Copy region ``k`` of ``op`` here with ``args``; (its results, their tangents)."""
    outs = inline_region(op, k, args)
    seeds = {**t_captured, **{a: t for a, t in zip(args, targs) if t is not None}}
    block = ir.InsertionPoint.current.block
    return outs, jvp(outs, list(seeds), list(seeds.values()), in_place=True, allow=_in_block(block))


def _replacing(op: ir.Operation, new: ir.Operation, floats: list[int]) -> Replaced:
    m = len(op.results)
    results = list(new.results)
    tangents = dict(zip(floats, results[m:]))
    if in_place():
        for old, value in zip(op.results, results[:m]):
            old.replace_all_uses_with(value)
    return Replaced(results[:m], [tangents.get(k) for k in range(m)])


@tangent("stablehlo.while")
def _while_tangent(op, ts):
    """while carrying (carries, their tangents): the body's tangent step in the same loop"""
    m = len(op.operands)
    captured = dict(zip(op_inputs(op)[m:], ts[m:]))
    t_captured = {v: t for v, t in captured.items() if t is not None}
    floats = [k for k in range(m) if is_float(op.operands[k])]
    init = [*op.operands, *[ts[k] if ts[k] is not None else hlo.zeros(op.operands[k].type) for k in floats]]
    loop, cond, body = hlo.while_(init)
    with ir.InsertionPoint(cond):
        hlo.return_(inline_region(op, 0, list(cond.arguments)[:m]), "stablehlo.return")
    with ir.InsertionPoint(body):
        args = list(body.arguments)
        targs = dict(zip(floats, args[m:]))
        outs, touts = _region_tangents(op, 1, args[:m], [targs.get(k) for k in range(m)], t_captured)
        touts = [touts[k] if touts[k] is not None else hlo.zeros(outs[k].type) for k in floats]
        hlo.return_([*outs, *touts], "stablehlo.return")
    return _replacing(op, loop, floats)


def _branch_tangents(op, ts, make) -> Replaced:
    n = len(op.operands)
    t_captured = {v: t for v, t in zip(op_inputs(op)[n:], ts[n:]) if t is not None}
    floats = [k for k, r in enumerate(op.results) if is_float(r)]
    types = [r.type for r in op.results] + [op.results[k].type for k in floats]
    new, blocks = make(types, len(op.regions))
    for k, block in enumerate(blocks):
        with ir.InsertionPoint(block):
            outs, touts = _region_tangents(op, k, [], [], t_captured)
            touts = [touts[j] if touts[j] is not None else hlo.zeros(outs[j].type) for j in floats]
            hlo.return_([*outs, *touts], "stablehlo.return")
    isolate(new)
    return _replacing(op, new, floats)


@tangent("stablehlo.case")
def _case_tangent(op, ts):
    """case(index){branch k and its tangent}"""
    index = op.operands[0]
    return _branch_tangents(op, ts, lambda types, n: hlo.case(index, types, n))


@tangent("stablehlo.if")
def _if_tangent(op, ts):
    """if(pred){true branch and its tangent} else {false branch and its tangent}"""
    pred = op.operands[0]
    return _branch_tangents(op, ts, lambda types, n: hlo.if_(pred, types))


tangent("stablehlo.custom_call")(by_transposition)
