"""Adjoint rules of indexing ops: gather, scatter, dynamic (update) slices, sort,
top_k and selecting (argmax-style) variadic reduces.

Conventions:
* ``gather`` clamps its start indices into the operand (StableHLO semantics);
  its adjoint scatter-adds at the same clamped indices, so duplicate indices
  accumulate.
* ``scatter`` skips a whole update window that would leave the operand (XLA's
  behaviour, JAX's ``mode="drop"``): such updates get a zero cotangent. With a
  "replace" update computation and duplicate indices, every duplicate gets the
  cotangent of the written window (which one wins is implementation-defined).
* ``dynamic_slice`` / ``dynamic_update_slice`` clamp their starts; the adjoints
  reuse the same starts with the same clamping.
* selection (``sort``, ``top_k``, argmax-style ``reduce``): the cotangent goes
  back to the position the forward op took each value from; among tied
  elements of a reduce, to the first in row-major order.
"""
from __future__ import annotations

import numpy as np

from . import hlo
from .control_flow import inline_region
from .hlo import GATHER_FIELDS, SCATTER_FIELDS, broadcast_in_dim, compare, select
from .mlir import dtype_name, elem, ir, is_float, shape, tensor_type
from .forward import by_transposition, linear
from .registry import adjoint, missing, tangent


def _size(v: ir.Value) -> int:
    return int(np.prod(shape(v), dtype=np.int64))


def _per_index(indices: ir.Value, ivd: int, values: list[int]) -> ir.Value:
    """values[k] for entry k of every index vector, shaped like ``indices``."""
    vector = hlo.constant(np.array(values, dtype=dtype_name(elem(indices))), dtype_name(elem(indices)))
    if ivd == len(shape(indices)):  # an implicit trailing index vector of size 1
        return broadcast_in_dim(hlo.reshape(vector, []), shape(indices), [])
    return broadcast_in_dim(vector, shape(indices), [ivd])


def _dimension_numbers(op: ir.Operation, name: str, fields) -> dict:
    """The gather/scatter dimension numbers, with absent fields empty and index_vector_dim 0."""
    return {**{f: [] for f in fields}, "index_vector_dim": 0, **hlo.read_struct(op, name)}


def _index_column(indices: ir.Value, ivd: int, k: int) -> ir.Value:
    """Entry k of every index vector (shaped like indices without dimension ivd)."""
    s = shape(indices)
    if ivd == len(s):
        return indices
    column = hlo.slice(indices, [k if i == ivd else 0 for i in range(len(s))],
                       [k + 1 if i == ivd else n for i, n in enumerate(s)], [1] * len(s))
    return hlo.reshape(column, [n for i, n in enumerate(s) if i != ivd])


def _last_starts(x: ir.Value, sizes: list[int], starts: list[int]) -> list[int]:
    """The largest start of each indexed dimension that keeps the window inside x."""
    return [shape(x)[k] - sizes[k] for k in starts]


# ----- gather and scatter ------------------------------------------------------------

@adjoint("stablehlo.gather")
def _gather(op, cts):
    """d operand = scatter-add(zeros, clamped start indices, ct)"""
    x, indices = op.operands
    d = _dimension_numbers(op, "dimension_numbers", GATHER_FIELDS)
    sizes = hlo.read_i64_array(op, "slice_sizes")
    last = _per_index(indices, d["index_vector_dim"], _last_starts(x, sizes, d["start_index_map"]))
    clamped = hlo.binary("stablehlo.minimum", hlo.binary("stablehlo.maximum", indices, hlo.zeros(indices.type)), last)
    indexed = set(d["start_index_map"]) | set(d["operand_batching_dims"])
    if any(size != (1 if i in indexed else n) for i, (size, n) in enumerate(zip(sizes, shape(x)))):
        return _scatter_elements(x, clamped, cts[0], d, sizes), None
    dims = {s: d[g] for s, g in zip(SCATTER_FIELDS, GATHER_FIELDS)}
    return hlo.scatter(hlo.zeros(x.type), clamped, cts[0], dims, "add"), None


def _scatter_elements(x, starts, ct, d, sizes) -> ir.Value:
    """The gather adjoint as a scatter of single elements (IREE 3.13 compiles scatters only
    with windows of size 1 along indexed dimensions and full along the others): element e
    of ct goes to start[batch(e)] + offset(e), or to batch(e) along batching dimensions."""
    ivd, out = d["index_vector_dim"], shape(ct)
    batch_dims = [i for i in range(len(out)) if i not in d["offset_dims"]]  # the index dims but ivd, in order
    index_dims = [i for i in range(len(shape(starts))) if i != ivd]
    windowed = [i for i in range(len(sizes)) if i not in d["collapsed_slice_dims"] + d["operand_batching_dims"]]
    offset_of, it = dict(zip(windowed, d["offset_dims"])), elem(starts)
    coords = []
    for dim in range(len(sizes)):
        coord = hlo.iota(out, it, offset_of[dim]) if dim in offset_of else hlo.zeros(tensor_type(out, it))
        if dim in d["start_index_map"]:
            column = _index_column(starts, ivd, d["start_index_map"].index(dim))
            coord = hlo.add(coord, broadcast_in_dim(column, out, batch_dims))
        elif dim in d["operand_batching_dims"]:
            e = d["start_indices_batching_dims"][d["operand_batching_dims"].index(dim)]
            coord = hlo.iota(out, it, batch_dims[index_dims.index(e)])
        coords.append(hlo.reshape(coord, [_size(ct), 1]))
    every = list(range(len(sizes)))
    flat = {"inserted_window_dims": every, "scatter_dims_to_operand_dims": every, "index_vector_dim": 1}
    return hlo.scatter(hlo.zeros(x.type), hlo.concatenate(coords, 1), hlo.reshape(ct, [_size(ct)]), flat, "add")


def _scatter_kind(op: ir.Operation) -> str | None:
    block = op.regions[0].blocks[0]
    body = [o.operation for o in block.operations]
    a, b = block.arguments
    if len(body) == 1 and list(body[0].operands) == [b]:
        return "replace"
    if len(body) == 2 and body[0].name == "stablehlo.add" and set(body[0].operands) == {a, b}:
        return "add"
    return None


@adjoint("stablehlo.scatter")
def _scatter(op, cts):
    """add: d operand = ct; replace: ct with the written windows zeroed;
    d updates = gather(ct) at the update windows, 0 for windows that were dropped"""
    kind = _scatter_kind(op) if len(op.operands) == 3 else None
    if kind is None:
        raise missing(op, " with this update computation (add and replace are supported)")
    (ct,) = cts
    x, indices, updates = op.operands
    d = _dimension_numbers(op, "scatter_dimension_numbers", SCATTER_FIELDS)
    window = iter([shape(updates)[i] for i in d["update_window_dims"]])
    skip = set(d["inserted_window_dims"]) | set(d["input_batching_dims"])
    sizes = [1 if i in skip else next(window) for i in range(len(shape(x)))]
    gathered = hlo.gather(ct, indices, {g: d[s] for s, g in zip(SCATTER_FIELDS, GATHER_FIELDS)}, sizes)
    ivd, starts = d["index_vector_dim"], d["scatter_dims_to_operand_dims"]
    ok = hlo.binary("stablehlo.and", compare(indices, hlo.zeros(indices.type), "GE"),
                    compare(indices, _per_index(indices, ivd, _last_starts(x, sizes, starts)), "LE"))
    ok = hlo.reduce(ok, [ivd] if ivd < len(shape(indices)) else [], "and")
    scatter_dims = [i for i in range(len(shape(updates))) if i not in d["update_window_dims"]]
    dupdates = select(broadcast_in_dim(ok, shape(updates), scatter_dims), gathered, hlo.zeros(updates.type))
    dx = ct if kind == "add" else hlo.scatter(ct, indices, hlo.zeros(updates.type), d, "replace")
    return dx, None, dupdates


# ----- dynamic slices ------------------------------------------------------------------

@adjoint("stablehlo.dynamic_slice")
def _dynamic_slice(op, cts):
    """d x = dynamic_update_slice(zeros, ct, starts)"""
    x, *starts = op.operands
    return (hlo.dynamic_update_slice(hlo.zeros_like(x), cts[0], starts), *[None] * len(starts))


@adjoint("stablehlo.dynamic_update_slice")
def _dynamic_update_slice(op, cts):
    """d x = dynamic_update_slice(ct, zeros, starts); d update = dynamic_slice(ct, starts)"""
    (ct,) = cts
    x, update, *starts = op.operands
    d_update = hlo.dynamic_slice(ct, starts, shape(update))  # read before ct's window is zeroed
    dx = hlo.dynamic_update_slice(ct, hlo.zeros(update.type), starts)
    return (dx, d_update, *[None] * len(starts))


# ----- selections: sort, top_k, argmax-style reduce --------------------------------------

def _private_iota(op: ir.Operation, shape_, dim: int) -> ir.Value:
    """An iota along ``dim`` plus 1 + the number of sorts in ``op``'s function. IREE 3.13
    corrupts a constant operand shared by two sorts (JAX's argsort iotas, say): the offset
    gives every adjoint sort an index constant of its own. Only the order matters."""
    sorts = []

    def count(o: ir.Operation) -> ir.WalkResult:
        if o.name == "stablehlo.sort":
            sorts.append(1)
        return ir.WalkResult.ADVANCE

    f = op
    while f is not None and f.name != "func.func":
        f = f.parent
    if f is not None:
        f.operation.walk(count)
    iota = hlo.iota(shape_, ir.IntegerType.get_signless(32), dim)
    return hlo.add(iota, hlo.splat(1 + len(sorts), iota.type))


@adjoint("stablehlo.sort")
def _sort(op, cts):
    """perm = the forward sort applied to an iota; d operand_k = ct_k sorted by perm"""
    dim = hlo.read_int(op, "dimension")
    operands = list(op.operands)
    iota = _private_iota(op, shape(operands[0]), dim)
    stable = hlo.read_bool(op, "is_stable")
    forward, block = hlo.sort([*operands, iota], dim, stable)
    with ir.InsertionPoint(block):
        hlo.return_(inline_region(op, 0, list(block.arguments)[:-2]), "stablehlo.return")
    live = [k for k, ct in enumerate(cts) if ct is not None]
    back, block = hlo.sort([forward.results[-1], *[cts[k] for k in live]], dim)
    with ir.InsertionPoint(block):
        hlo.return_([compare(block.arguments[0], block.arguments[1], "LT")], "stablehlo.return")
    moved = dict(zip(live, list(back.results)[1:]))
    return tuple(moved.get(k) for k in range(len(operands)))


@adjoint("chlo.top_k")
def _top_k(op, cts):
    """d x = ct of the values scatter-added at their indices along the last axis"""
    ct = cts[0]
    x, indices = op.operands[0], op.results[1]
    n = shape(x)[-1]
    rows, k = _size(x) // n, shape(indices)[-1]
    flat_idx = hlo.reshape(indices, [rows, k])
    offset = hlo.multiply(hlo.iota([rows, k], elem(indices), 0), hlo.splat(n, flat_idx.type))
    where = hlo.reshape(hlo.add(flat_idx, offset), [rows * k, 1])
    flat = hlo.scatter(hlo.zeros(tensor_type([rows * n], elem(x))), where, hlo.reshape(ct, [rows * k]),
                       {"inserted_window_dims": [0], "scatter_dims_to_operand_dims": [0], "index_vector_dim": 1})
    return (hlo.reshape(flat, shape(x)),)


def _is_selection(op: ir.Operation, n: int) -> bool:
    """Whether the reducer returns, for each k, acc_k, x_k or a select between them."""
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    returned = list(list(block.operations)[-1].operation.operands)
    for k, v in enumerate(returned):
        pair = {args[k], args[n + k]}
        if v in pair:
            continue
        owner = v.owner if isinstance(v, ir.OpResult) else None
        if owner is None or owner.name != "stablehlo.select" or set(list(owner.operands)[1:]) != pair:
            return False
    return True


def selection_reduce(op: ir.Operation, cts) -> tuple:
    """reduce of (x_0, ..., x_{n-1}) whose body selects (argmax: (value, iota)): d x_k = ct_k at the
    first element equal to every output, the winner; the init values get nothing."""
    n = len(op.operands) // 2
    xs = list(op.operands)[:n]
    if not _is_selection(op, n):
        raise missing(op, " with this reduction body")
    dims = hlo.read_i64_array(op, "dimensions")
    full = shape(xs[0])
    spread = lambda v: broadcast_in_dim(v, full, [d for d in range(len(full)) if d not in dims])  # noqa: E731
    hit = compare(xs[0], spread(op.results[0]), "EQ")
    for x, y in zip(xs[1:], list(op.results)[1:]):
        hit = hlo.binary("stablehlo.and", hit, compare(x, spread(y), "EQ"))
    i32 = ir.IntegerType.get_signless(32)
    order = hlo.reshape(hlo.iota([_size(xs[0])], i32, 0), full)
    first = hlo.reduce(select(hit, order, hlo.splat(np.iinfo(np.int32).max, order.type)), dims, "min")
    winner = compare(order, spread(first), "EQ")
    grads = [select(winner, spread(ct), hlo.zeros(x.type)) if ct is not None and is_float(x) else None
             for x, ct in zip(xs, cts)]
    return (*grads, *[None] * n)


tangent("stablehlo.gather", "stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice")(linear)
tangent("stablehlo.sort", "chlo.top_k")(by_transposition)


@tangent("stablehlo.scatter")
def _scatter_tangent(op, ts):
    """add and replace scatters are linear in (operand, updates): the scatter of the tangents"""
    kind = _scatter_kind(op) if len(op.operands) == 3 else None
    return (linear if kind is not None else by_transposition)(op, ts)
