"""Builders for StableHLO ops: the one place where ``Operation.create`` is called.

Every builder inserts at the ambient ``ir.InsertionPoint`` with the ambient
``ir.Location`` and returns the new op's result value(s). Result types are
computed here from the operand types; callers that want user-facing errors
(the frontend) check shapes before calling.
"""
from __future__ import annotations

import itertools

import re
from functools import cache
from typing import NamedTuple
from collections.abc import Sequence

import numpy as np

from ...boundary import struct_fields
from .mlir import context, elem, element_type, ir, is_float_type, shape, tensor_type

Value = ir.Value


# ----- attributes ----------------------------------------------------------------

def i64_array(values: Sequence[int]) -> ir.Attribute:
    return ir.DenseI64ArrayAttr.get([int(v) for v in values])


def i64(value: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))


@cache
def _parsed(text: str) -> ir.Attribute:
    with context():
        return ir.Attribute.parse(text)


def _int_list(values: Sequence[int]) -> str:
    """``[1, 2]``: the list syntax inside StableHLO struct attributes."""
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def attr(text: str) -> ir.Attribute:
    """A parsed (and cached) attribute such as ``#stablehlo<comparison_direction LT>``."""
    return _parsed(text)


def read_i64_array(op: ir.Operation, name: str) -> list[int]:
    a = op.attributes[name]
    return list(ir.DenseI64ArrayAttr(a))


def read_int(op: ir.Operation, name: str) -> int:
    return ir.IntegerAttr(op.attributes[name]).value


def read_str(op: ir.Operation, name: str) -> str:
    return ir.StringAttr(op.attributes[name]).value


def read_float(op: ir.Operation, name: str) -> float:
    return ir.FloatAttr(op.attributes[name]).value


def read_bool(op: ir.Operation, name: str, default: bool = False) -> bool:
    """An optional boolean attribute."""
    return ir.BoolAttr(op.attributes[name]).value if name in op.attributes else default


def read_bools(op: ir.Operation, name: str) -> list[bool]:
    """An optional ``array<i1: ...>`` attribute (empty when absent)."""
    return list(ir.DenseBoolArrayAttr(op.attributes[name])) if name in op.attributes else []


def scalar_constant(v: Value) -> int | np.floating | None:
    """A scalar ``stablehlo.constant``'s value: a Python int, or a numpy float of the
    constant's own type; None for anything else."""
    if not isinstance(v, ir.OpResult) or v.owner.name != "stablehlo.constant" or shape(v) != ():
        return None
    value = v.owner.attributes["value"]
    et = elem(v)
    if is_float_type(et):
        dtype = np.dtype({16: np.float16, 32: np.float32, 64: np.float64}.get(ir.FloatType(et).width, object))
        return dtype.type(ir.DenseFPElementsAttr(value)[0]) if dtype.kind == "f" else None
    if isinstance(et, ir.IntegerType):
        return int(list(ir.DenseIntElementsAttr(value))[0])
    return None


def _create(name: str, results: Sequence[ir.Type], operands: Sequence[Value],
            attributes: dict | None = None, regions: int = 0) -> ir.Operation:
    return ir.Operation.create(name, results=list(results), operands=list(operands),
                               attributes=attributes or {}, regions=regions)


# ----- constants -----------------------------------------------------------------

def splat(value: float | int | bool, type_: ir.Type) -> Value:
    """A constant tensor of ``type_`` with every element equal to ``value``."""
    et = elem(type_)
    if is_complex_type(et):  # a complex scalar from numpy (the bindings have no complex attribute), broadcast
        scalar_type = tensor_type([], et)
        bits = ir.FloatType(part_type(et)).width
        dense = ir.DenseElementsAttr.get(np.array(complex(value), dtype=np.complex128 if bits == 64 else np.complex64),
                                         type=scalar_type)
        c = _create("stablehlo.constant", [scalar_type], [], {"value": dense}).result
        return c if not shape(type_) else broadcast_in_dim(c, shape(type_), [])
    if is_float_type(et):
        scalar = ir.FloatAttr.get(et, float(value))
    elif ir.IntegerType(et).width == 1:
        scalar = ir.IntegerAttr.get(et, 1 if value else 0)
    else:
        scalar = ir.IntegerAttr.get(et, int(value))
    dense = ir.DenseElementsAttr.get_splat(type_, scalar)
    return _create("stablehlo.constant", [type_], [], {"value": dense}).result


def is_zero_constant(v: Value) -> bool:
    """Whether ``v`` is a splat zero ``stablehlo.constant`` (or zeros of a run-time shape)."""
    if isinstance(v, ir.OpResult) and v.owner.operation.name == "stablehlo.dynamic_broadcast_in_dim":
        v = v.owner.operation.operands[0]
    if not isinstance(v, ir.OpResult) or v.owner.operation.name != "stablehlo.constant":
        return False
    dense = ir.DenseElementsAttr(v.owner.operation.attributes["value"])
    if not dense.is_splat:
        return False
    return getattr(dense.get_splat_value(), "value", None) == 0


def like(value: float | int, v: Value) -> Value:
    """A constant with ``v``'s type, every element ``value`` (sized at run time from ``v``
    where its shape is dynamic)."""
    return splat(value, v.type) if is_static(v) else fill(value, v)


def shape_of(ref: Value) -> Value:
    """``ref``'s shape as a 1-D i32 tensor: constants and ``get_dimension_size``s, concatenated
    (the form ``dynamic_shapes`` reads)."""
    parts = [reshape(dimension_size(ref, d), [1]) if n == DYNAMIC else constant(np.array([n], np.int32), "int32")
             for d, n in enumerate(shape(ref))]
    return concatenate(parts, 0) if len(parts) > 1 else parts[0] if parts else constant(np.zeros(0, np.int32), "int32")


def fill(value: float | int, ref: Value, element: ir.Type | None = None) -> Value:
    """``value`` everywhere in ``ref``'s run-time shape (``element`` type, default ``ref``'s)."""
    return broadcast_like(splat(value, tensor_type([], element or elem(ref))), ref, [])


def broadcast_like(x: Value, ref: Value, dims: Sequence[int]) -> Value:
    """``broadcast_in_dim(x, ref's shape, dims)`` also where ``ref``'s shape is only known at run
    time. A dynamic dimension of ``x`` is taken to be the size of ``ref``'s (it was derived from
    it: a reduction, a cotangent), so it is marked non-expanding, as IREE 3.13 needs."""
    if is_static(ref):
        return broadcast_in_dim(x, shape(ref), dims)
    nonexpanding = [i for i, n in enumerate(shape(x)) if n != 1]
    return _create("stablehlo.dynamic_broadcast_in_dim", [tensor_type(shape(ref), elem(x))], [x, shape_of(ref)],
                   {"broadcast_dimensions": i64_array(dims),
                    "known_nonexpanding_dimensions": i64_array(nonexpanding)}).result


def extent(sizes: Sequence[int | Value]) -> Value:
    """A 1-D i32 shape tensor from ints and scalar i32 run-time sizes."""
    parts = [reshape(d, [1]) if isinstance(d, Value) else constant(np.array([d], np.int32), "int32") for d in sizes]
    return concatenate(parts, 0) if len(parts) > 1 else parts[0] if parts else constant(np.zeros(0, np.int32), "int32")


def dynamic_broadcast(x: Value, sizes: Sequence[int | Value], dims: Sequence[int]) -> Value:
    """``broadcast_in_dim(x, sizes, dims)`` where some ``sizes`` are scalar i32 run-time values.
    A dimension of ``x`` that is not 1 is marked non-expanding (it is the size it lands on)."""
    out = tensor_type([DYNAMIC if isinstance(d, Value) else d for d in sizes], elem(x))
    nonexpanding = [i for i, n in enumerate(shape(x)) if n != 1]
    return _create("stablehlo.dynamic_broadcast_in_dim", [out], [x, extent(sizes)],
                   {"broadcast_dimensions": i64_array(dims),
                    "known_nonexpanding_dimensions": i64_array(nonexpanding)}).result


def zeros(type_: ir.Type) -> Value:
    return splat(0, type_)


def ones(type_: ir.Type) -> Value:
    return splat(1, type_)


DYNAMIC = ir.ShapedType.get_dynamic_size()


def is_static(v: Value) -> bool:
    return all(d != DYNAMIC for d in shape(v))


def dimension_size(x: Value, dimension: int) -> Value:
    """``stablehlo.get_dimension_size``: a dimension's run-time size, a scalar i32."""
    return _create("stablehlo.get_dimension_size", [tensor_type([], ir.IntegerType.get_signless(32))], [x],
                   {"dimension": i64(dimension)}).result


_DISTINCT = itertools.count(1)


def dynamic_splat(value: float | int, dims: Sequence[int | Value], element: ir.Type, opaque: bool = False) -> Value:
    """``value`` everywhere in a shape whose sizes are ints or scalar i32 values known only at
    run time: a ``dynamic_broadcast_in_dim`` (the dimensions given as values are dynamic in
    its type).

    Each call makes a tensor no other call's can be merged with: a run-time size ``d`` enters
    as ``select(d < 0, -k, d)`` (= ``d``) with ``k`` unique to the call. These tensors start
    the loop carries that tapes and accumulators are written into in place, and IREE 3.13
    lets two loops (or two carries) that start from one such tensor share its buffer: the
    writes of one land in the other (wrong numbers, or an out-of-range access at run time)."""
    # The extent is computed elementwise, [static sizes] + d * e_i, never concatenated: IREE 3.13
    # (local-task) copies a dimension out of a concatenated extent for the host with no barrier
    # after the dispatch that writes it, and the host read a stale size about once in 2,000
    # calls (RESOURCE_EXHAUSTED on hal.device.queue.alloca, or a tape of the wrong length).
    #
    # ``opaque``: the value itself is ``value + 0 * d`` for such a ``d``, not a constant (a
    # gradient's seeds: IREE 3.13 got the dynamic JAX LSTM's gradient wrong when seeded with a
    # broadcast constant of a run-time shape, right with ones it cannot see as a constant). Not
    # by default: a value read from a size inside a loop is a value the loop's adjoint records.
    i32_type = ir.IntegerType.get_signless(32)
    rank = len(dims)
    scalar_type = tensor_type([], element)
    fill = splat(value, scalar_type)
    extent = constant(np.array([0 if isinstance(d, Value) else d for d in dims], np.int32), "int32")
    for p, d in enumerate(dims):
        if isinstance(d, Value):
            tag = splat(-(next(_DISTINCT) % (1 << 30)) - 1, d.type)
            size = select(compare(d, splat(0, d.type), "LT"), tag, d)
            if opaque and is_float_type(element) and fill.owner.operation.name == "stablehlo.constant":
                fill = add(fill, multiply(splat(0, scalar_type), convert(size, element)))
            d = convert(size, i32_type)
            unit = constant(np.eye(rank, dtype=np.int32)[p], "int32")
            extent = add(extent, multiply(broadcast_in_dim(d, [rank], []), unit))
    out = tensor_type([DYNAMIC if isinstance(d, Value) else d for d in dims], element)
    return _create("stablehlo.dynamic_broadcast_in_dim", [out], [fill, extent],
                   {"broadcast_dimensions": i64_array([])}).result


def zeros_like(v: Value) -> Value:
    """Zeros of ``v``'s type, also where its shape is only known at run time."""
    if is_static(v):
        return zeros(v.type)
    return dynamic_splat(0, [dimension_size(v, d) if s == DYNAMIC else s for d, s in enumerate(shape(v))], elem(v))


def constant(array: np.ndarray, dtype: str) -> Value:
    """A dense constant of numpy-style ``dtype`` from ``array`` (already cast)."""
    array = np.asarray(array)
    type_ = tensor_type(array.shape, dtype)
    flat = array.reshape(-1)
    if flat.size and np.all(flat == flat[0]) and not (dtype.startswith("float") and np.isnan(flat[0])):
        return splat(flat[0].item(), type_)
    if dtype == "bfloat16":  # numpy has no bfloat16: build f32 and convert
        return convert(constant(array.astype(np.float32), "float32"), element_type("bfloat16"))
    if dtype == "bool":
        array = array.astype(np.bool_)
    dense = ir.DenseElementsAttr.get(np.ascontiguousarray(array), type=type_)
    return _create("stablehlo.constant", [type_], [], {"value": dense}).result


def iota(shape_: Sequence[int], element: ir.Type, dimension: int) -> Value:
    return _create("stablehlo.iota", [tensor_type(shape_, element)], [],
                   {"iota_dimension": i64(dimension)}).result


# ----- elementwise -----------------------------------------------------------------

def unary(name: str, x: Value) -> Value:
    """An elementwise op with one operand and the operand's type (tanh, exponential...)."""
    return _create(name, [x.type], [x]).result


def tie(v: Value, anchor: Value, element: int = 0) -> Value:
    """``v`` plus ``-0 · is_finite(anchor[0...])``: ``v`` to the bit (inf and NaN in ``anchor``
    included), but a value that depends on ``anchor``, which no folder removes: what orders a
    computation after ``anchor`` without an optimization barrier. ``element`` picks another
    element of ``anchor`` (row-major), for ties of one value that CSE must not merge."""
    at = [int(i) for i in np.unravel_index(element, shape(anchor))] if shape(anchor) else []
    first = reshape(slice(anchor, at, [i + 1 for i in at], [1] * len(at)), [])
    finite = convert(is_finite(first), elem(v))
    return add(v, broadcast_in_dim(multiply(finite, like(-0.0, finite)), list(shape(v)), []))


def is_finite(x: Value) -> Value:
    """``stablehlo.is_finite``: i1, false where ``x`` is inf or NaN."""
    return _create("stablehlo.is_finite", [tensor_type(shape(x), ir.IntegerType.get_signless(1))], [x]).result


def binary(name: str, a: Value, b: Value) -> Value:
    """An elementwise op on two operands of the same type (add, multiply...)."""
    return _create(name, [a.type], [a, b]).result


def add(a: Value, b: Value) -> Value:
    return binary("stablehlo.add", a, b)


def accumulate(a: Value, b: Value) -> Value:
    """``a + b`` for cotangents. A term that is a slice written into zeros (the adjoint of
    dynamic_slice, e.g. one step of a scan over its input) is added in place:
    ``a + dus(0, u, i) = dus(a, ds(a, i) + u, i)``, so a loop that accumulates one slice per
    step does O(slice) work per step, not O(whole tensor)."""
    for full, sparse in ((a, b), (b, a)):
        if isinstance(sparse, ir.OpResult) and sparse.owner.operation.name == "stablehlo.dynamic_update_slice":
            base, update, *starts = sparse.owner.operation.operands
            if is_zero_constant(base) and full.type == sparse.type and is_static(update):
                here = dynamic_slice(full, starts, shape(update))
                return dynamic_update_slice(full, add(here, update), starts)
    return add(a, b)


def subtract(a: Value, b: Value) -> Value:
    return binary("stablehlo.subtract", a, b)


def multiply(a: Value, b: Value) -> Value:
    return binary("stablehlo.multiply", a, b)


def divide(a: Value, b: Value) -> Value:
    return binary("stablehlo.divide", a, b)


def negate(x: Value) -> Value:
    return unary("stablehlo.negate", x)


def compare_type_of(element: ir.Type) -> str:
    if is_float_type(element) or is_complex_type(element):
        return "FLOAT"
    it = ir.IntegerType(element)
    if it.width == 1 or it.is_unsigned:
        return "UNSIGNED"
    return "SIGNED"


def compare(a: Value, b: Value, direction: str) -> Value:
    """``stablehlo.compare`` (EQ, NE, LT, LE, GT, GE) -> tensor of i1."""
    result = tensor_type(shape(a), ir.IntegerType.get_signless(1))
    return _create("stablehlo.compare", [result], [a, b], {
        "comparison_direction": attr(f"#stablehlo<comparison_direction {direction}>"),
        "compare_type": attr(f"#stablehlo<comparison_type {compare_type_of(elem(a))}>"),
    }).result


def select(pred: Value, on_true: Value, on_false: Value) -> Value:
    return _create("stablehlo.select", [on_true.type], [pred, on_true, on_false]).result


def clamp(lo: Value, x: Value, hi: Value) -> Value:
    return _create("stablehlo.clamp", [x.type], [lo, x, hi]).result


def is_complex_type(element: ir.Type) -> bool:
    return isinstance(element.maybe_downcast(), ir.ComplexType)


def part_type(element: ir.Type) -> ir.Type:
    """The element type of a complex type's real and imaginary parts."""
    return ir.ComplexType(element).element_type


def real(z: Value) -> Value:
    return _create("stablehlo.real", [tensor_type(shape(z), part_type(elem(z)))], [z]).result


def imag(z: Value) -> Value:
    return _create("stablehlo.imag", [tensor_type(shape(z), part_type(elem(z)))], [z]).result


def complex_(re: Value, im: Value) -> Value:
    """``stablehlo.complex``: ``re + i im``."""
    return _create("stablehlo.complex", [tensor_type(shape(re), ir.ComplexType.get(elem(re)))], [re, im]).result


def conj(z: Value) -> Value:
    """The complex conjugate (``z`` itself when it is real)."""
    if not is_complex_type(elem(z)):
        return z
    return complex_(real(z), negate(imag(z)))


def convert(x: Value, element: ir.Type) -> Value:
    if elem(x) == element:
        return x
    return _create("stablehlo.convert", [tensor_type(shape(x), element)], [x]).result


# ----- shapes ----------------------------------------------------------------------

def broadcast_in_dim(x: Value, shape_: Sequence[int], dims: Sequence[int]) -> Value:
    return _create("stablehlo.broadcast_in_dim", [tensor_type(shape_, elem(x))], [x],
                   {"broadcast_dimensions": i64_array(dims)}).result


def identity(x: Value) -> Value:
    """A distinct value equal to ``x`` (a same-shape reshape, or a same-type convert for a
    run-time shape, which reshape does not take; canonicalization removes either)."""
    return _create("stablehlo.reshape" if is_static(x) else "stablehlo.convert", [x.type], [x]).result


def reshape(x: Value, shape_: Sequence[int]) -> Value:
    if tuple(shape_) == shape(x):
        return x
    return _create("stablehlo.reshape", [tensor_type(shape_, elem(x))], [x]).result


def dynamic_reshape(x: Value, sizes: Sequence[int | Value]) -> Value:
    """``x`` reshaped to ``sizes``: ints, or scalar i32 values known at run time."""
    parts = [reshape(d, [1]) if isinstance(d, Value) else constant(np.array([d], np.int32), "int32") for d in sizes]
    extent = concatenate(parts, 0) if len(parts) > 1 else parts[0]
    out = tensor_type([DYNAMIC if isinstance(d, Value) else d for d in sizes], elem(x))
    return _create("stablehlo.dynamic_reshape", [out], [x, extent]).result


def transpose(x: Value, perm: Sequence[int]) -> Value:
    perm = [int(p) for p in perm]
    if perm == list(range(len(perm))):
        return x
    s = shape(x)
    return _create("stablehlo.transpose", [tensor_type([s[p] for p in perm], elem(x))], [x],
                   {"permutation": i64_array(perm)}).result


def reverse(x: Value, dims: Sequence[int]) -> Value:
    if not dims:
        return x
    return _create("stablehlo.reverse", [x.type], [x], {"dimensions": i64_array(dims)}).result


def slice(x: Value, start: Sequence[int], limit: Sequence[int], strides: Sequence[int]) -> Value:  # noqa: A001
    out = [max(0, -(-(hi - lo) // st)) for lo, hi, st in zip(start, limit, strides)]
    return _create("stablehlo.slice", [tensor_type(out, elem(x))], [x], {
        "start_indices": i64_array(start), "limit_indices": i64_array(limit),
        "strides": i64_array(strides)}).result


def concatenate(xs: Sequence[Value], dimension: int) -> Value:
    s = list(shape(xs[0]))
    s[dimension] = sum(shape(x)[dimension] for x in xs)
    return _create("stablehlo.concatenate", [tensor_type(s, elem(xs[0]))], list(xs),
                   {"dimension": i64(dimension)}).result


def pad(x: Value, value: Value, low: Sequence[int], high: Sequence[int], interior: Sequence[int]) -> Value:
    s = [DYNAMIC if d == DYNAMIC else lo + hi + d + max(0, d - 1) * it
         for d, lo, hi, it in zip(shape(x), low, high, interior)]
    return _create("stablehlo.pad", [tensor_type(s, elem(x))], [x, value], {
        "edge_padding_low": i64_array(low), "edge_padding_high": i64_array(high),
        "interior_padding": i64_array(interior)}).result


def pad_or_crop(x: Value, value: Value, low: Sequence[int], high: Sequence[int], interior: Sequence[int]) -> Value:
    """``pad`` whose negative edges crop, also for operands with run-time dimensions (IREE 3.13
    refuses a negative ``pad`` of those): the positive part padded, the rest cut by a
    ``real_dynamic_slice``."""
    if is_static(x) or all(lo >= 0 for lo in low) and all(hi >= 0 for hi in high):
        return pad(x, value, low, high, interior)
    p = pad(x, value, [max(0, lo) for lo in low], [max(0, hi) for hi in high], interior)
    return crop(p, [max(0, -lo) for lo in low], [max(0, -hi) for hi in high], [1] * len(low))


def real_dynamic_slice(x: Value, start: Value, limit: Value, strides: Value, out: Sequence[int]) -> Value:
    """``x[start:limit:strides]`` with run-time bounds (1-D integer tensors); ``out`` the result shape."""
    return _create("stablehlo.real_dynamic_slice", [tensor_type(list(out), elem(x))], [x, start, limit, strides]).result


def crop(x: Value, low: Sequence[int], high: Sequence[int], strides: Sequence[int]) -> Value:
    """``x[low : size - high : strides]`` in every dimension, run-time sizes included (a
    ``real_dynamic_slice``, which IREE 3.13 compiles, where ``x`` has them)."""
    xs = shape(x)
    if is_static(x):
        return slice(x, low, [n - hi for n, hi in zip(xs, high)], strides)
    limit = [n - hi if n != DYNAMIC else dimension_size(x, d) if not hi else
             subtract(dimension_size(x, d), splat(hi, tensor_type([], ir.IntegerType.get_signless(32))))
             for d, (n, hi) in enumerate(zip(xs, high))]
    out = [n if n == DYNAMIC else max(0, -(-(n - hi - lo) // st)) for n, lo, hi, st in zip(xs, low, high, strides)]
    return real_dynamic_slice(x, constant(np.array(low, np.int32), "int32"), extent(limit),
                              constant(np.array(strides, np.int32), "int32"), out)


def dynamic_slice(x: Value, starts: Sequence[Value], sizes: Sequence[int]) -> Value:
    """``stablehlo.dynamic_slice``: ``starts`` are scalar integer tensors (clamped by StableHLO)."""
    return _create("stablehlo.dynamic_slice", [tensor_type(sizes, elem(x))], [x, *starts],
                   {"slice_sizes": i64_array(sizes)}).result


def dynamic_update_slice(x: Value, update: Value, starts: Sequence[Value]) -> Value:
    return _create("stablehlo.dynamic_update_slice", [x.type], [x, update, *starts]).result


# ----- control flow -----------------------------------------------------------------

def while_(operands: Sequence[Value]) -> tuple[ir.Operation, ir.Block, ir.Block]:
    """``stablehlo.while`` carrying ``operands``: returns (op, cond block, body block).

    The caller fills both blocks (their arguments are the carried values) and ends
    each with ``return_(..., "stablehlo.return")``.
    """
    types = [v.type for v in operands]
    op = _create("stablehlo.while", types, operands, regions=2)
    cond = op.regions[0].blocks.append(*types)
    body = op.regions[1].blocks.append(*types)
    return op, cond, body


def case(index: Value, result_types: Sequence[ir.Type], branches: int) -> tuple[ir.Operation, list[ir.Block]]:
    """``stablehlo.case`` on a scalar i32 ``index``: returns (op, one empty block per branch)."""
    op = _create("stablehlo.case", result_types, [index], regions=branches)
    return op, [op.regions[i].blocks.append() for i in range(branches)]


# ----- reductions ------------------------------------------------------------------

REDUCERS = {"add": "stablehlo.add", "mul": "stablehlo.multiply",
            "max": "stablehlo.maximum", "min": "stablehlo.minimum",
            "and": "stablehlo.and", "or": "stablehlo.or"}


def reduce_init(kind: str, element: ir.Type) -> float | int | bool:
    """The identity of a reduction kind for an element type."""
    if kind in ("add", "or"):
        return 0
    if kind in ("mul", "and"):
        return 1
    if is_float_type(element):
        return -np.inf if kind == "max" else np.inf
    it = ir.IntegerType(element)
    if it.width == 1:
        return kind == "min"
    bits = it.width
    if it.is_unsigned:
        return 0 if kind == "max" else (1 << bits) - 1
    return -(1 << (bits - 1)) if kind == "max" else (1 << (bits - 1)) - 1


def reduce(x: Value, dims: Sequence[int], kind: str) -> Value:
    """``stablehlo.reduce`` of one operand over ``dims`` with an add/mul/max/min body.
    Dimensions of size 1 are reshaped away, not reduced."""
    xs = shape(x)
    dims = sorted(int(d) for d in dims)
    if any(xs[d] == 1 for d in dims):
        kept = [i for i, n in enumerate(xs) if not (i in dims and n == 1)]
        x = reshape(x, [xs[i] for i in kept]) if is_static(x) else \
            dynamic_reshape(x, [dimension_size(x, i) if xs[i] == DYNAMIC else xs[i] for i in kept])
        dims = [d - sum(1 for e in dims if e < d and xs[e] == 1) for d in dims if xs[d] != 1]
    if not dims:
        return x
    et = elem(x)
    scalar = tensor_type([], et)
    init = splat(reduce_init(kind, et), scalar)
    out = [d for i, d in enumerate(shape(x)) if i not in dims]
    op = _create("stablehlo.reduce", [tensor_type(out, et)], [x, init],
                 {"dimensions": i64_array(dims)}, regions=1)
    block = op.regions[0].blocks.append(scalar, scalar)
    with ir.InsertionPoint(block):
        r = binary(REDUCERS[kind], block.arguments[0], block.arguments[1])
        return_([r], "stablehlo.return")
    return op.result


def reduce_sum(x: Value, dims: Sequence[int]) -> Value:
    return reduce(x, dims, "add")


# ----- contractions ----------------------------------------------------------------

def dot_general(a: Value, b: Value, lhs_batch: Sequence[int], rhs_batch: Sequence[int],
                lhs_contract: Sequence[int], rhs_contract: Sequence[int],
                element: ir.Type | None = None) -> Value:
    """``stablehlo.dot_general``: result dims are batch, lhs free, rhs free."""
    sa, sb = shape(a), shape(b)
    lfree = [d for i, d in enumerate(sa) if i not in lhs_batch and i not in lhs_contract]
    rfree = [d for i, d in enumerate(sb) if i not in rhs_batch and i not in rhs_contract]
    out = [sa[i] for i in lhs_batch] + lfree + rfree
    fmt = _int_list
    dims = attr(
        f"#stablehlo.dot<lhs_batching_dimensions = {fmt(lhs_batch)}, "
        f"rhs_batching_dimensions = {fmt(rhs_batch)}, "
        f"lhs_contracting_dimensions = {fmt(lhs_contract)}, "
        f"rhs_contracting_dimensions = {fmt(rhs_contract)}>")
    return _create("stablehlo.dot_general", [tensor_type(out, element or elem(a))], [a, b],
                   {"dot_dimension_numbers": dims}).result


# ----- structure -------------------------------------------------------------------

def optimization_barrier(values: Sequence[Value]) -> list[Value]:
    op = _create("stablehlo.optimization_barrier", [v.type for v in values], list(values))
    return list(op.results)


def return_(values: Sequence[Value], name: str = "func.return") -> None:
    _create(name, [], list(values))


def call(callee: str, args: Sequence[Value], result_types: Sequence[ir.Type]) -> list[Value]:
    op = _create("func.call", result_types, args, {"callee": ir.FlatSymbolRefAttr.get(callee)})
    return list(op.results)


def func(name: str, arg_types: Sequence[ir.Type], result_types: Sequence[ir.Type],
         private: bool = False) -> tuple[ir.Operation, ir.Block]:
    """A ``func.func`` with an empty entry block (the caller adds the return)."""
    attrs = {"sym_name": ir.StringAttr.get(name),
             "function_type": ir.TypeAttr.get(ir.FunctionType.get(list(arg_types), list(result_types)))}
    if private:
        attrs["sym_visibility"] = ir.StringAttr.get("private")
    op = _create("func.func", [], [], attrs, regions=1)
    block = op.regions[0].blocks.append(*arg_types)
    return op, block


def set_function_type(func_op: ir.Operation, arg_types: Sequence[ir.Type], result_types: Sequence[ir.Type]) -> None:
    with func_op.context:
        func_op.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(list(arg_types), list(result_types)))


def composite(name: str, operands: Sequence[Value], result_types: Sequence[ir.Type],
              decomposition: str, attributes: dict[str, ir.Attribute] | None = None) -> list[Value]:
    """``stablehlo.composite`` whose semantics are those of ``@decomposition``."""
    attrs = {"name": ir.StringAttr.get(name),
             "decomposition": ir.FlatSymbolRefAttr.get(decomposition)}
    if attributes:
        attrs["composite_attributes"] = ir.DictAttr.get(attributes)
    op = _create("stablehlo.composite", result_types, operands, attrs)
    return list(op.results)


# ----- windows, convolutions, indexing, sorting, branches ----------------------------

# IREE ships no StableHLO Python bindings (no ``iree.compiler.dialects.stablehlo``: no typed
# ``DotDimensionNumbers`` / ``GatherDimensionNumbers`` / ``ScatterDimensionNumbers`` /
# ``ConvDimensionNumbers`` accessors), so struct attributes are read from their printed form,
# by ``boundary.struct_fields`` (the one reader, which the runtime shares) and, for convolution
# layouts, one regular expression below.
GATHER_FIELDS = ("offset_dims", "collapsed_slice_dims", "operand_batching_dims",
                 "start_indices_batching_dims", "start_index_map", "index_vector_dim")
SCATTER_FIELDS = ("update_window_dims", "inserted_window_dims", "input_batching_dims",
                  "scatter_indices_batching_dims", "scatter_dims_to_operand_dims", "index_vector_dim")


def read_struct(op: ir.Operation, name: str) -> dict[str, list[int] | int]:
    """The fields of a StableHLO struct attribute such as ``#stablehlo.gather<...>``."""
    return struct_fields(op.attributes[name])


class DotDimensions(NamedTuple):
    """A ``dot_general``'s dimension numbers, each a list of operand dimensions."""

    lhs_batch: list[int]
    rhs_batch: list[int]
    lhs_contract: list[int]
    rhs_contract: list[int]


def dot_dimensions(op: ir.Operation) -> DotDimensions:
    """The dimension numbers of a ``dot_general``, or of the older ``dot`` (lhs's last
    dimension contracted with rhs's first): the one reader of dot dimension numbers."""
    if op.name == "stablehlo.dot":
        return DotDimensions([], [], [len(shape(op.operands[0])) - 1], [0])
    fields = read_struct(op, "dot_dimension_numbers")
    return DotDimensions(*(list(fields.get(f"{side}_{kind}_dimensions", []))  # type: ignore[arg-type]
                           for kind in ("batching", "contracting") for side in ("lhs", "rhs")))


def read_conv_layouts(op: ir.Operation) -> list[list[str]]:
    """The three layouts of ``#stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>``
    (no typed accessor: see above)."""
    text = str(op.attributes["dimension_numbers"])
    return [[t.strip() for t in layout.split(",")] for layout in re.findall(r"\[([^\]]*)\]", text)]


def read_direction(op: ir.Operation) -> str:
    """A ``stablehlo.compare``'s direction: ``EQ``, ``NE``, ``LT``, ``LE``, ``GT`` or ``GE``."""
    return str(op.attributes["comparison_direction"]).split()[-1].rstrip(">")


def struct_attr(kind: str, fields: dict, order: Sequence[str]) -> ir.Attribute:
    """``#stablehlo.<kind><...>`` from a field dict (empty lists left out)."""
    parts = []
    for key in order:
        value = fields.get(key, [])
        if isinstance(value, int):
            parts.append(f"{key} = {value}")
        elif value:
            parts.append(f"{key} = [{', '.join(str(int(v)) for v in value)}]")
    return attr(f"#stablehlo.{kind}<{', '.join(parts)}>")


def read_i64s(op: ir.Operation, name: str, default: Sequence[int]) -> list[int]:
    """An optional ``array<i64: ...>`` attribute, ``default`` when absent."""
    return read_i64_array(op, name) if name in op.attributes else list(default)


def read_padding(op: ir.Operation, name: str, rank: int) -> list[tuple[int, int]]:
    """An optional ``dense<...> : tensor<Nx2xi64>`` (low, high) padding attribute."""
    if name not in op.attributes:
        return [(0, 0)] * rank
    flat = list(ir.DenseIntElementsAttr(op.attributes[name]))
    return [(flat[2 * i], flat[2 * i + 1]) for i in range(len(flat) // 2)]


def padding_attr(pads: Sequence[tuple[int, int]]) -> ir.Attribute:
    array = np.asarray(pads, dtype=np.int64).reshape(-1, 2)
    return ir.DenseElementsAttr.get(array, type=tensor_type(array.shape, "int64"))


def window_output(size: int, window: int, stride: int, low: int, high: int,
                  base_dilation: int = 1, window_dilation: int = 1) -> int:
    """Number of window positions along one dimension (reduce_window, convolution); a run-time
    size (``DYNAMIC``) stays one."""
    if size == DYNAMIC:
        return DYNAMIC
    padded = (size - 1) * base_dilation + 1 + low + high if size else low + high
    span = (window - 1) * window_dilation + 1
    return 0 if padded < span else (padded - span) // stride + 1


def convolution(lhs: Value, rhs: Value, spec: Sequence[Sequence[int]], *, strides: Sequence[int],
                padding: Sequence[tuple[int, int]], lhs_dilation: Sequence[int], rhs_dilation: Sequence[int],
                feature_group_count: int = 1, batch_group_count: int = 1,
                precision: ir.Attribute | None = None, element: ir.Type | None = None) -> Value:
    """``stablehlo.convolution``. ``spec`` = (lhs, rhs, out) layouts, each as
    (batch | kernel-output-feature, feature | kernel-input-feature, *spatial) dimension numbers."""
    (lb, lf, *ls), (ro, ri, *rs), (ob, of, *os_) = spec
    xs, ws = shape(lhs), shape(rhs)
    out = [0] * len(xs)
    out[ob], out[of] = xs[lb] if xs[lb] == DYNAMIC else xs[lb] // batch_group_count, ws[ro]
    for i, (a, b, c) in enumerate(zip(ls, rs, os_)):
        out[c] = window_output(xs[a], ws[b], strides[i], *padding[i], lhs_dilation[i], rhs_dilation[i])
    fmt = _int_list
    dims = attr(
        f"#stablehlo.conv<raw input_batch_dimension = {lb}, input_feature_dimension = {lf}, "
        f"input_spatial_dimensions = {fmt(ls)}, kernel_input_feature_dimension = {ri}, "
        f"kernel_output_feature_dimension = {ro}, kernel_spatial_dimensions = {fmt(rs)}, "
        f"output_batch_dimension = {ob}, output_feature_dimension = {of}, output_spatial_dimensions = {fmt(os_)}>")
    attrs = {"window_strides": i64_array(strides), "padding": padding_attr(padding),
             "lhs_dilation": i64_array(lhs_dilation), "rhs_dilation": i64_array(rhs_dilation),
             "dimension_numbers": dims, "feature_group_count": i64(feature_group_count),
             "batch_group_count": i64(batch_group_count)}
    if precision is not None:
        attrs["precision_config"] = precision
    return _create("stablehlo.convolution", [tensor_type(out, element or elem(lhs))], [lhs, rhs], attrs).result


def _reduce_window_op(xs: Sequence[Value], inits: Sequence[Value], window: Sequence[int],
                      strides: Sequence[int], padding: Sequence[tuple[int, int]],
                      base_dilations: Sequence[int], window_dilations: Sequence[int]) -> ir.Operation:
    out = [window_output(*args) for args in zip(shape(xs[0]), window, strides, [p[0] for p in padding],
                                                   [p[1] for p in padding], base_dilations, window_dilations)]
    attrs = {"window_dimensions": i64_array(window), "window_strides": i64_array(strides),
             "base_dilations": i64_array(base_dilations), "window_dilations": i64_array(window_dilations),
             "padding": padding_attr(padding)}
    return _create("stablehlo.reduce_window", [tensor_type(out, elem(x)) for x in xs], [*xs, *inits],
                   attrs, regions=1)


def reduce_window(x: Value, init: Value, kind: str, window: Sequence[int], strides: Sequence[int],
                  padding: Sequence[tuple[int, int]], base_dilations: Sequence[int],
                  window_dilations: Sequence[int]) -> Value:
    """``stablehlo.reduce_window`` of one operand with an add/mul/max/min body (``init``: a scalar)."""
    op = _reduce_window_op([x], [init], window, strides, padding, base_dilations, window_dilations)
    block = op.regions[0].blocks.append(init.type, init.type)
    with ir.InsertionPoint(block):
        return_([binary(REDUCERS[kind], block.arguments[0], block.arguments[1])], "stablehlo.return")
    return op.result


def reduce_window_arg(x: Value, index: Value, init: Value, init_index: Value, kind: str,
                      window: Sequence[int], strides: Sequence[int], padding: Sequence[tuple[int, int]],
                      base_dilations: Sequence[int], window_dilations: Sequence[int]) -> tuple[Value, Value]:
    """(max or min of each window, ``index`` of its first winner): a variadic reduce_window."""
    op = _reduce_window_op([x, index], [init, init_index], window, strides, padding,
                           base_dilations, window_dilations)
    block = op.regions[0].blocks.append(init.type, init_index.type, init.type, init_index.type)
    a, ai, b, bi = block.arguments
    with ir.InsertionPoint(block):
        tie = binary("stablehlo.and", compare(a, b, "EQ"), compare(ai, bi, "LT"))
        take = binary("stablehlo.or", compare(a, b, "GT" if kind == "max" else "LT"), tie)
        return_([select(take, a, b), select(take, ai, bi)], "stablehlo.return")
    return op.results[0], op.results[1]


def gather(x: Value, indices: Value, dims: dict, slice_sizes: Sequence[int]) -> Value:
    """``stablehlo.gather``; ``dims`` holds the ``#stablehlo.gather`` fields (GATHER_FIELDS)."""
    ivd = dims["index_vector_dim"]
    batch = iter([d for i, d in enumerate(shape(indices)) if i != ivd])
    skip = set(dims.get("collapsed_slice_dims", [])) | set(dims.get("operand_batching_dims", []))
    offsets = [s for i, s in enumerate(slice_sizes) if i not in skip]
    offset_dims = dims.get("offset_dims", [])
    rank = len(shape(indices)) - (ivd < len(shape(indices))) + len(offsets)
    pos = iter(offsets)
    out = [next(pos) if i in offset_dims else next(batch) for i in range(rank)]
    return _create("stablehlo.gather", [tensor_type(out, elem(x))], [x, indices], {
        "dimension_numbers": struct_attr("gather", dims, GATHER_FIELDS),
        "slice_sizes": i64_array(slice_sizes)}).result


def scatter(x: Value, indices: Value, updates: Value, dims: dict, kind: str = "add") -> Value:
    """``stablehlo.scatter`` of one operand (SCATTER_FIELDS in ``dims``): ``add``
    accumulates duplicate indices, ``replace`` overwrites (the last update wins in IREE),
    ``mul``/``max``/``min`` combine them so."""
    op = _create("stablehlo.scatter", [x.type], [x, indices, updates],
                 {"scatter_dimension_numbers": struct_attr("scatter", dims, SCATTER_FIELDS)}, regions=1)
    scalar = tensor_type([], elem(x))
    block = op.regions[0].blocks.append(scalar, scalar)
    with ir.InsertionPoint(block):
        a, b = block.arguments
        return_([b if kind == "replace" else binary(REDUCERS[kind], a, b)], "stablehlo.return")
    return op.result


def sort(operands: Sequence[Value], dimension: int, is_stable: bool = False) -> tuple[ir.Operation, ir.Block]:
    """``stablehlo.sort``: (op, its empty comparator block: two scalar arguments per operand)."""
    op = _create("stablehlo.sort", [v.type for v in operands], operands,
                 {"dimension": i64(dimension), "is_stable": ir.BoolAttr.get(is_stable)}, regions=1)
    scalars = [tensor_type([], elem(v)) for v in operands for _ in (0, 1)]
    return op, op.regions[0].blocks.append(*scalars)


def if_(pred: Value, result_types: Sequence[ir.Type]) -> tuple[ir.Operation, list[ir.Block]]:
    """``stablehlo.if`` on a scalar i1: (op, [true block, false block])."""
    op = _create("stablehlo.if", result_types, [pred], regions=2)
    return op, [op.regions[i].blocks.append() for i in range(2)]
