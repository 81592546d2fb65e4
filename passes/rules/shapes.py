"""Adjoint rules of data-movement ops.

``broadcast_in_dim`` is the one place where broadcasting is undone: its
adjoint sums the cotangent over the dimensions the broadcast created or
expanded. Elementwise rules never unbroadcast.
"""
from __future__ import annotations

from ..ir import hlo
from ..lowering.choices import sum_by_vecmat
from ..lowering.dynamic_shapes import annotate_nonexpanding, element_size, enclosing_function, same_size
from ..ir.hlo import DYNAMIC, read_i64_array
from ..ir.mlir import elem, ir, is_float_type, shape, tensor_type
from ..transforms.forward import diagonal, linear
from ..transforms.batching import Batcher, MissingBatchingRule, elementwise, plus1, prepended, remake
from ..transforms.registry import MissingAdjointError, adjoint, batching, missing, nondifferentiable, tangent


def _sum(ct, dims):
    """ct summed over ``dims``: ``ones · ct`` where ``choices.sum_by_vecmat`` says so.

    Factors that do not vary along ``dims`` are taken out of the sum (``_factored``)."""
    dims = sorted(dims)
    factored = _factored(ct, dims)
    if factored is not None:
        return factored
    ys = shape(ct)
    if all(ys[d] == 1 for d in dims) or not hlo.is_static(ct) or not sum_by_vecmat(ys, dims, is_float_type(elem(ct))):
        return hlo.reduce_sum(ct, dims)
    ones = hlo.ones(tensor_type([ys[d] for d in dims], elem(ct)))
    return hlo.dot_general(ones, ct, [], [], list(range(len(dims))), dims)


def _factored(ct, dims):
    """``Σ_dims ct`` with ct's last op moved out of the sum, where that op is ``negate``, a
    ``multiply`` / ``divide`` by a broadcast that does not vary along ``dims``, or an ``add`` of
    two such: ``Σ -u = -Σ u``, ``Σ u·b(a) = a·Σ u``; None otherwise. A batch norm's adjoint sums
    ``-2·b(dvar)·(x - mean)``: as ``-2·dvar·Σ(x - mean)`` the sum reads a tensor that exists
    anyway, and the full-size products are left to the one consumer that fuses them
    (IREE materialises a product read by a sum and by another op: a dispatch each)."""
    if not isinstance(ct, ir.OpResult) or not hlo.is_static(ct) or all(shape(ct)[d] == 1 for d in dims):
        return None
    op = ct.owner.operation
    if op.name == "stablehlo.negate":
        return hlo.negate(_sum(op.operands[0], dims))
    if op.name == "stablehlo.add":  # a cotangent reaching one value twice: a·b + b·a
        parts = [_factored(v, dims) for v in op.operands]
        return None if any(p is None for p in parts) else hlo.add(*parts)
    if op.name not in ("stablehlo.multiply", "stablehlo.divide"):
        return None
    for i in ((0, 1) if op.name == "stablehlo.multiply" else (1,)):
        factor = _along(op.operands[i], dims)
        if factor is not None:
            summed = _sum(op.operands[1 - i], dims)
            return hlo.multiply(summed, factor) if op.name == "stablehlo.multiply" else hlo.divide(summed, factor)
    return None


def _along(v, dims):
    """``v``, a ``broadcast_in_dim`` constant along ``dims``, as the tensor of the other
    dimensions (in order); None when ``v`` is not one."""
    if not isinstance(v, ir.OpResult) or v.owner.operation.name != "stablehlo.broadcast_in_dim":
        return None
    op = v.owner.operation
    a, mapped = op.operands[0], read_i64_array(op, "broadcast_dimensions")
    xs, ys = shape(a), shape(v)
    if any(n < 0 for n in xs) or any(d in dims and xs[i] != 1 for i, d in enumerate(mapped)):
        return None
    kept = [d for d in range(len(ys)) if d not in dims]
    inner = [i for i, d in enumerate(mapped) if d not in dims]
    if sorted(inner, key=lambda i: mapped[i]) != inner:
        return None  # a transposing broadcast: left in the sum
    a = hlo.reshape(a, [xs[i] for i in inner])
    return hlo.broadcast_in_dim(a, [ys[d] for d in kept], [kept.index(mapped[i]) for i in inner])


@adjoint("stablehlo.broadcast_in_dim")
def _broadcast_in_dim(op, cts):
    """dx = reshape(sum of ct over new and expanded dims)"""
    (ct,) = cts
    x = op.operands[0]
    return (hlo.reshape(_unbroadcast(ct, read_i64_array(op, "broadcast_dimensions"), shape(x)), shape(x)),)


def _unbroadcast(ct, dims, xs):
    """``ct`` summed over the dims a broadcast of an ``xs``-shaped operand along ``dims`` added
    or expanded from size 1, the kept dims in the operand's order (not yet reshaped to ``xs``)."""
    ys = shape(ct)
    summed = [d for d in range(len(ys)) if d not in dims]
    summed += [d for i, d in enumerate(dims) if xs[i] == 1 and ys[d] != 1]
    total = _sum(ct, summed)
    # The kept dims may be permuted relative to x's order.
    kept = [d for d in dims if d not in summed]
    order = sorted(range(len(kept)), key=lambda i: kept[i])
    return hlo.transpose(total, [order.index(i) for i in range(len(kept))]) if kept != sorted(kept) else total


@adjoint("stablehlo.dynamic_broadcast_in_dim")
def _dynamic_broadcast_in_dim(op, cts):
    """as broadcast_in_dim: dx = ct summed over the new dims and the size-1 dims it expands. A
    dynamic operand dim must be known not to expand (``dynamic_shapes`` proves it where it can):
    whether it was 1 is a run-time fact that the adjoint's shape cannot follow."""
    (ct,) = cts
    x = op.operands[0]
    dims = read_i64_array(op, "broadcast_dimensions")
    xs = shape(x)

    def known():
        return set(read_i64_array(op, "known_nonexpanding_dimensions")) \
            if "known_nonexpanding_dimensions" in op.attributes else set()

    unknown = [i for i, n in enumerate(xs) if n == hlo.DYNAMIC and i not in known()]
    if unknown:
        annotate_nonexpanding(enclosing_function(op))
        unknown = [i for i, n in enumerate(xs) if n == hlo.DYNAMIC and i not in known()]
    if unknown:
        raise MissingAdjointError(
            f"No adjoint rule for 'stablehlo.dynamic_broadcast_in_dim' at {op.location} when operand dimension "
            f"{unknown[0]} ({x.type}) may be a size-1 broadcast only known at run time: give the op "
            f"known_nonexpanding_dimensions, or broadcast from a static size.")
    total = _unbroadcast(ct, dims, xs)
    if shape(total) != xs:
        total = hlo.reshape(total, xs) if hlo.is_static(total) else _dynamic_reshape(total, x)
    return (total, None)


def _dynamic_reshape(v, ref):
    """``v`` reshaped to ``ref``'s run-time shape."""
    return hlo.dynamic_reshape(v, [hlo.dimension_size(ref, d) if n == hlo.DYNAMIC else n
                                   for d, n in enumerate(shape(ref))])


@adjoint("stablehlo.dynamic_reshape")
def _dynamic_reshape_rule(op, cts):
    """dx = reshape(ct, x's run-time shape); the shape operand gets nothing"""
    x = op.operands[0]
    return (hlo.reshape(cts[0], shape(x)) if hlo.is_static(x) else _dynamic_reshape(cts[0], x)), None


@adjoint("stablehlo.broadcast")
def _broadcast(op, cts):
    """the older broadcast prepends dims: sum them away"""
    (ct,) = cts
    added = len(shape(ct)) - len(shape(op.operands[0]))
    return (_sum(ct, range(added)),)


@adjoint("stablehlo.set_dimension_size")
def _set_dimension_size(op, cts):
    """static shapes: the op is an identity on the operand; the size gets nothing"""
    return cts[0], None


@adjoint("stablehlo.reduce_precision")
def _reduce_precision(op, cts):
    """straight through: dx = ct (rounding has zero derivative almost everywhere; JAX's choice)"""
    return (cts[0],)


@adjoint("stablehlo.reshape")
def _reshape(op, cts):
    """dx = reshape(ct, x.shape)"""
    return (hlo.reshape(cts[0], shape(op.operands[0])),)


@adjoint("stablehlo.transpose")
def _transpose(op, cts):
    """dx = transpose(ct, inverse permutation)"""
    perm = read_i64_array(op, "permutation")
    inverse = [perm.index(i) for i in range(len(perm))]
    return (hlo.transpose(cts[0], inverse),)


@adjoint("stablehlo.reverse")
def _reverse(op, cts):
    """dx = reverse(ct)"""
    return (hlo.reverse(cts[0], read_i64_array(op, "dimensions")),)


@adjoint("stablehlo.concatenate")
def _concatenate(op, cts):
    """each operand gets its slice of ct"""
    (ct,) = cts
    dim = hlo.read_int(op, "dimension")
    s = shape(ct)
    grads, offset = [], 0
    for x in op.operands:
        n = shape(x)[dim]
        start = [0] * len(s)
        limit = list(s)
        start[dim], limit[dim] = offset, offset + n
        grads.append(hlo.slice(ct, start, limit, [1] * len(s)))
        offset += n
    return tuple(grads)


@adjoint("stablehlo.slice")
def _slice(op, cts):
    """dx = ct scattered back into zeros: pad with stride-1 interior padding"""
    (ct,) = cts
    x = op.operands[0]
    start = read_i64_array(op, "start_indices")
    strides = read_i64_array(op, "strides")
    xs, cs = shape(x), shape(ct)
    if 0 in cs:
        return (hlo.zeros(x.type),)
    high = [d - lo - ((n - 1) * st + 1) for d, lo, n, st in zip(xs, start, cs, strides)]
    zero = hlo.zeros(hlo.tensor_type([], hlo.elem(ct)))
    return (hlo.pad(ct, zero, start, high, [st - 1 for st in strides]),)


@adjoint("stablehlo.real_dynamic_slice")
def _real_dynamic_slice(op, cts):
    """dx = ct written back into zeros: at its starts (a dynamic_update_slice) where every stride
    is 1 (JAX's dynamic_index_in_dim, torch-mlir's x[:, t]); else padded back as slice's, which
    needs constant starts and strides and a run-time dimension sliced whole"""
    (ct,) = cts
    x, start, limit, strides = op.operands
    xs, cs = shape(x), shape(op.results[0])
    steps = [element_size(strides, d) for d in range(len(xs))]
    if 0 in cs:
        return hlo.zeros_like(x), None, None, None
    if steps == [1] * len(xs):
        firsts = [hlo.reshape(hlo.slice(start, [d], [d + 1], [1]), []) for d in range(len(xs))]
        return hlo.dynamic_update_slice(hlo.zeros_like(x), ct, firsts), None, None, None
    low = []
    for d in range(len(xs)):
        first = element_size(start, d)
        if first is None or steps[d] is None:
            raise missing(op, f" whose start or stride along dimension {d} is known only at run time")
        if DYNAMIC in (xs[d], cs[d]) and not (first == 0 and steps[d] == 1 and same_size(limit, d, x)):
            raise missing(op, f" over a dynamic dimension: dimension {d} of operand 0 ({x.type}) must be "
                              "sliced whole")
        low.append(first)
    high = [0 if n == DYNAMIC else n - lo - ((c - 1) * st + 1) for n, lo, c, st in zip(xs, low, cs, steps)]
    zero = hlo.zeros(hlo.tensor_type([], hlo.elem(ct)))
    return hlo.pad(ct, zero, low, high, [st - 1 for st in steps]), None, None, None


@adjoint("stablehlo.pad")
def _pad(op, cts):
    """dx = the strided interior of ct; d padding_value = sum(ct) - sum(dx)"""
    (ct,) = cts
    x, value = op.operands
    low = read_i64_array(op, "edge_padding_low")
    high = read_i64_array(op, "edge_padding_high")
    interior = read_i64_array(op, "interior_padding")
    # Negative edge padding cropped x: grow ct back with zeros first.
    zero = hlo.zeros(hlo.tensor_type([], hlo.elem(ct)))
    if any(v < 0 for v in low + high):
        ct = hlo.pad(ct, zero, [max(0, -v) for v in low], [max(0, -v) for v in high], [0] * len(low))
        low, high = [max(0, v) for v in low], [max(0, v) for v in high]
    cs = shape(ct)
    dx = hlo.slice(ct, low, [d - h for d, h in zip(cs, high)], [i + 1 for i in interior]) if hlo.is_static(ct) \
        else hlo.crop(ct, low, high, [i + 1 for i in interior])
    all_ct, all_dx = range(len(cs)), range(len(shape(dx)))
    dvalue = hlo.subtract(hlo.reduce_sum(ct, all_ct), hlo.reduce_sum(dx, all_dx))
    return dx, dvalue


@adjoint("stablehlo.optimization_barrier")
def _optimization_barrier(op, cts):
    """identity on every operand"""
    return tuple(cts)


tangent("stablehlo.broadcast_in_dim", "stablehlo.broadcast", "stablehlo.set_dimension_size", "stablehlo.reshape",
        "stablehlo.transpose", "stablehlo.reverse", "stablehlo.concatenate", "stablehlo.slice", "stablehlo.pad",
        "stablehlo.optimization_barrier", "stablehlo.dynamic_broadcast_in_dim", "stablehlo.dynamic_reshape",
        "stablehlo.real_dynamic_slice")(linear)
# reduce_precision's adjoint passes the cotangent straight through; its tangent does the same.
tangent("stablehlo.reduce_precision")(diagonal)
batching("stablehlo.reduce_precision")(elementwise)

# A run-time size: an integer, no derivative.
nondifferentiable("stablehlo.get_dimension_size")


# ----- batching ------------------------------------------------------------------------------

@batching("stablehlo.optimization_barrier")
def _barrier_batched(b: Batcher, op):
    """each value keeps its own batching"""
    xs = b.operands(op)
    new = remake(op, xs, [x.type for x in xs])
    return [b.mark([r])[0] if x in b.batched else r for x, r in zip(xs, new.results)]


@batching("stablehlo.broadcast_in_dim")
def _broadcast_in_dim_batched(b: Batcher, op):
    (x,) = b.operands(op)
    dims = [0, *plus1(hlo.read_i64_array(op, "broadcast_dimensions"))]
    return b.mark([hlo.broadcast_in_dim(x, [b.size, *shape(op.result)], dims)])


@batching("stablehlo.reshape")
def _reshape_batched(b: Batcher, op):
    (x,) = b.operands(op)
    return b.mark([hlo.reshape(x, [b.size, *shape(op.result)])])


@batching("stablehlo.transpose")
def _transpose_batched(b: Batcher, op):
    (x,) = b.operands(op)
    return b.mark([hlo.transpose(x, [0, *plus1(hlo.read_i64_array(op, "permutation"))])])


@batching("stablehlo.reverse")
def _reverse_batched(b: Batcher, op):
    (x,) = b.operands(op)
    return b.mark([hlo.reverse(x, plus1(hlo.read_i64_array(op, "dimensions")))])


@batching("stablehlo.slice")
def _slice_batched(b: Batcher, op):
    (x,) = b.operands(op)
    attrs = {**prepended(op, "start_indices", 0), **prepended(op, "limit_indices", b.size),
             **prepended(op, "strides", 1)}
    return b.mark(remake(op, [x], [b.type(op.result)], attrs).results)


@batching("stablehlo.pad")
def _pad_batched(b: Batcher, op):
    x, value = b.operands(op)
    if value in b.batched:
        raise MissingBatchingRule(op, "batched padding value")
    attrs = {**prepended(op, "edge_padding_low", 0), **prepended(op, "edge_padding_high", 0),
             **prepended(op, "interior_padding", 0)}
    return b.mark(remake(op, [x, value], [b.type(op.result)], attrs).results)


@batching("stablehlo.concatenate")
def _concatenate_batched(b: Batcher, op):
    return b.mark([hlo.concatenate(b.operands(op, lift=True), hlo.read_int(op, "dimension") + 1)])
