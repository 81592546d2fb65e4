"""Builders for StableHLO ops: the one place where ``Operation.create`` is called.

Every builder inserts at the ambient ``ir.InsertionPoint`` with the ambient
``ir.Location`` and returns the new op's result value(s). Result types are
computed here from the operand types; callers that want user-facing errors
(the frontend) check shapes before calling.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

from .mlir import context, elem, element_type, ir, is_float_type, shape, tensor_type

Value = ir.Value


# ----- attributes ----------------------------------------------------------------

def i64_array(values: Sequence[int]) -> ir.Attribute:
    return ir.DenseI64ArrayAttr.get([int(v) for v in values])


def i64(value: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))


@lru_cache(maxsize=None)
def _parsed(text: str) -> ir.Attribute:
    with context():
        return ir.Attribute.parse(text)


def attr(text: str) -> ir.Attribute:
    """A parsed (and cached) attribute such as ``#stablehlo<comparison_direction LT>``."""
    return _parsed(text)


def read_i64_array(op: ir.Operation, name: str) -> list[int]:
    a = op.attributes[name]
    return list(ir.DenseI64ArrayAttr(a))


def read_int(op: ir.Operation, name: str) -> int:
    return ir.IntegerAttr(op.attributes[name]).value


def _create(name: str, results: Sequence[ir.Type], operands: Sequence[Value],
            attributes: dict | None = None, regions: int = 0) -> ir.Operation:
    return ir.Operation.create(name, results=list(results), operands=list(operands),
                               attributes=attributes or {}, regions=regions)


# ----- constants -----------------------------------------------------------------

def splat(value: float | int | bool, type_: ir.Type) -> Value:
    """A constant tensor of ``type_`` with every element equal to ``value``."""
    et = elem(type_)
    if is_float_type(et):
        scalar = ir.FloatAttr.get(et, float(value))
    elif ir.IntegerType(et).width == 1:
        scalar = ir.IntegerAttr.get(et, 1 if value else 0)
    else:
        scalar = ir.IntegerAttr.get(et, int(value))
    dense = ir.DenseElementsAttr.get_splat(type_, scalar)
    return _create("stablehlo.constant", [type_], [], {"value": dense}).result


def zeros(type_: ir.Type) -> Value:
    return splat(0, type_)


def ones(type_: ir.Type) -> Value:
    return splat(1, type_)


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


def binary(name: str, a: Value, b: Value) -> Value:
    """An elementwise op on two operands of the same type (add, multiply...)."""
    return _create(name, [a.type], [a, b]).result


def add(a: Value, b: Value) -> Value:
    return binary("stablehlo.add", a, b)


def subtract(a: Value, b: Value) -> Value:
    return binary("stablehlo.subtract", a, b)


def multiply(a: Value, b: Value) -> Value:
    return binary("stablehlo.multiply", a, b)


def divide(a: Value, b: Value) -> Value:
    return binary("stablehlo.divide", a, b)


def negate(x: Value) -> Value:
    return unary("stablehlo.negate", x)


def compare_type_of(element: ir.Type) -> str:
    if is_float_type(element):
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


def convert(x: Value, element: ir.Type) -> Value:
    if elem(x) == element:
        return x
    return _create("stablehlo.convert", [tensor_type(shape(x), element)], [x]).result


# ----- shapes ----------------------------------------------------------------------

def broadcast_in_dim(x: Value, shape_: Sequence[int], dims: Sequence[int]) -> Value:
    return _create("stablehlo.broadcast_in_dim", [tensor_type(shape_, elem(x))], [x],
                   {"broadcast_dimensions": i64_array(dims)}).result


def identity(x: Value) -> Value:
    """A distinct value equal to ``x`` (a same-shape reshape; canonicalization removes it)."""
    return _create("stablehlo.reshape", [x.type], [x]).result


def reshape(x: Value, shape_: Sequence[int]) -> Value:
    if tuple(shape_) == shape(x):
        return x
    return _create("stablehlo.reshape", [tensor_type(shape_, elem(x))], [x]).result


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
    s = [lo + hi + d + max(0, d - 1) * it for d, lo, hi, it in zip(shape(x), low, high, interior)]
    return _create("stablehlo.pad", [tensor_type(s, elem(x))], [x, value], {
        "edge_padding_low": i64_array(low), "edge_padding_high": i64_array(high),
        "interior_padding": i64_array(interior)}).result


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
    """``stablehlo.reduce`` of one operand over ``dims`` with an add/mul/max/min body."""
    dims = sorted(int(d) for d in dims)
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
    fmt = lambda xs: "[" + ", ".join(str(int(x)) for x in xs) + "]"  # noqa: E731
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
