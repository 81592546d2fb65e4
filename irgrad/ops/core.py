"""Conversion to tensors, dtype and broadcasting rules shared by every op."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import dtypes
from ..framework import Tensor, get_default_graph, has_default_graph, HOW_TO_TRACE
from ..passes.ir import hlo
from ..passes.ir.mlir import element_type, ir


def current_graph():
    if not has_default_graph():
        raise RuntimeError(HOW_TO_TRACE)
    return get_default_graph()


def _check_graph(t: Tensor, graph) -> Tensor:
    """``t`` in ``graph``: captured when it comes from an enclosing graph."""
    return t if t.graph is graph else graph.capture(t)


def as_numpy(value, dtype: dtypes.DType | None) -> tuple[np.ndarray, dtypes.DType]:
    """A Python/numpy value as an array of ``dtype`` (or TensorFlow's default dtype)."""
    target = dtype or dtypes.default_dtype_of(value)
    arr = np.asarray(value)
    if arr.dtype == object:
        raise TypeError(f"cannot convert {type(value).__name__} to a tensor: {value!r}")
    np_dtype = np.float32 if target == dtypes.bfloat16 else target.as_numpy_dtype
    converted = arr.astype(np_dtype)
    if arr.size and arr.dtype.kind in "fc" and (target.is_integer or target.is_bool):
        if not np.array_equal(converted.astype(arr.dtype), arr):
            raise TypeError(f"cannot convert {value!r} to a tensor of dtype {target.name} without losing "
                            "its value")
    if arr.size and arr.dtype.kind in "iu" and target.is_integer and not np.array_equal(converted, arr):
        raise TypeError(f"value {value!r} does not fit in dtype {target.name}")
    return converted, target


def constant_tensor(value, dtype: dtypes.DType | None = None, name: str = "Const") -> Tensor:
    graph = current_graph()
    arr, dt = as_numpy(value, dtype)
    with graph.op_scope(name):
        return Tensor(hlo.constant(arr, dt.name), graph)


def convert_to_tensor(value, dtype=None, name: str = "Const") -> Tensor:
    """``value`` as an ``ig.Tensor`` of the current graph: TensorFlow's ``tf.convert_to_tensor``.

    A tensor is returned as is (one of an enclosing graph is captured); an ``ig.Variable`` is
    read (in a traced function: its module argument); a list or tuple holding tensors is
    stacked (``ig.stack``); any other Python or numpy value becomes a constant, of TensorFlow's
    dtype for it when ``dtype`` is ``None``: a Python float is float32, an int int32 (int64 when
    it does not fit), a bool bool, and a numpy array keeps its dtype.

    Args:
        value: a tensor, variable, Python number, bool, nested list, or numpy array.
        dtype: the dtype wanted (anything ``ig.as_dtype`` takes), or ``None``.
        name: the constant's name in the graph.

    Raises:
        ValueError: a tensor or variable of another ``dtype``: no cast is made (``ig.cast`` does).
        TypeError: a value that cannot be a tensor (a string, an object), or that ``dtype`` cannot
            hold without losing it (``1.5`` as int32, ``300`` as int8).
        RuntimeError: no default graph (outside ``ig.function`` and ``Graph.as_default()``).
    """
    dtype = dtypes.as_dtype(dtype) if dtype is not None else None
    graph = current_graph()
    if isinstance(value, Tensor):
        value = _check_graph(value, graph)
        if dtype is not None and value.dtype != dtype:
            raise ValueError(f"Tensor conversion requested dtype {dtype.name} for tensor {value.name!r} "
                             f"with dtype {value.dtype.name}")
        return value
    read = getattr(value, "_as_graph_tensor", None)
    if read is not None:
        t = read(graph)
        if dtype is not None and t.dtype != dtype:
            raise ValueError(f"Tensor conversion requested dtype {dtype.name} for a variable of dtype "
                             f"{t.dtype.name}")
        return t
    if isinstance(value, (list, tuple)) and any(_is_tensor_like(v) for v in _flat(value)):
        return stack([convert_to_tensor(v, dtype) for v in value])
    return constant_tensor(value, dtype, name)


def _is_tensor_like(v) -> bool:
    return isinstance(v, Tensor) or hasattr(v, "_as_graph_tensor")


def _flat(value):
    for v in value:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        else:
            yield v


def convert_pair(x, y, op: str) -> tuple[Tensor, Tensor]:
    """TensorFlow's rule: a non-tensor takes the tensor's dtype; two tensors must agree."""
    tx, ty = _is_tensor_like(x), _is_tensor_like(y)
    if tx and ty:
        x, y = convert_to_tensor(x), convert_to_tensor(y)
        if x.dtype != y.dtype:
            raise TypeError(f"{op}: x has dtype {x.dtype.name} but y has dtype {y.dtype.name}; "
                            f"irgrad does not promote dtypes (cast one with ig.cast)")
        return x, y
    if tx:
        x = convert_to_tensor(x)
        return x, convert_to_tensor(y, x.dtype)
    if ty:
        y = convert_to_tensor(y)
        return convert_to_tensor(x, y.dtype), y
    x = convert_to_tensor(x)
    return x, convert_to_tensor(y, x.dtype)


def broadcast_shape(a: Sequence[int | None], b: Sequence[int | None], op: str) -> tuple[int | None, ...]:
    """numpy broadcasting of two shapes, or ValueError naming both and the op. A run-time
    dimension (``None``) meets 1 or another ``None`` as itself; against a size n > 1 it must be
    n (TensorFlow's rule): the result has n."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da is None or db is None:
            out.append(db if da is None and db not in (1, None) else da if db is None and da != 1 else None)
            continue
        if da != db and da != 1 and db != 1:
            raise ValueError(f"{op}: incompatible shapes {tuple(a)} and {tuple(b)} (dimension "
                             f"{da} vs {db} cannot be broadcast)")
        out.append(da if db == 1 else db)
    return tuple(reversed(out))


def run_time_sizes(shape: Sequence[int | None], tensors: Sequence[Tensor]) -> list:
    """``shape`` with each ``None`` replaced by the run-time size (a scalar i32 value) of a
    tensor's dimension aligned with it from the right (numpy broadcasting) that is ``None`` too."""
    sizes: list = []
    for i, d in enumerate(shape):
        if d is not None:
            sizes.append(d)
            continue
        k = len(shape) - i
        t = next((t for t in tensors if t.ndim >= k and t.shape[t.ndim - k] is None), None)
        if t is None:
            raise ValueError(f"dimension {i} of shape {tuple(shape)} is known only at run time and no operand "
                             "has it")
        sizes.append(hlo.dimension_size(t.value, t.ndim - k))
    return sizes


def broadcast_value(t: Tensor, shape: Sequence[int | None], *others: Tensor) -> ir.Value:
    """``t`` broadcast to ``shape`` with one broadcast_in_dim (call inside an op scope). A
    dimension of ``shape`` known only at run time (``None``) takes its size from ``t`` or
    ``others`` (the op's other operands)."""
    shape = tuple(shape)
    s = tuple(t.shape)
    if s == shape:
        return t.value
    offset = len(shape) - len(s)
    if None in shape:
        return hlo.dynamic_broadcast(t.value, run_time_sizes(shape, (t, *others)), range(offset, len(shape)))
    return hlo.broadcast_in_dim(t.value, shape, range(offset, len(shape)))


def emit(name: str, build: Callable[..., ir.Value | Sequence[ir.Value]], graph=None):
    """Run ``build()`` inside an op scope of the current graph; wrap results as tensors."""
    graph = graph or current_graph()
    with graph.op_scope(name):
        out = build()
    values = [out] if isinstance(out, ir.Value) else list(out)
    if graph.gradient_overrides:
        values = graph.apply_gradient_overrides(values)
    if isinstance(out, ir.Value):
        return Tensor(values[0], graph)
    return [Tensor(v, graph) for v in values]


def normalize_axis(axis: int, rank: int, op: str) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"{op}: axis {axis} is out of range for a tensor of rank {rank}")
    return axis % rank


def normalize_axes(axis, rank: int, op: str) -> list[int]:
    if axis is None:
        return list(range(rank))
    if isinstance(axis, Tensor):
        raise TypeError(f"{op}: axis must be a Python int or list of ints, not a tensor")
    axes = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    out = sorted({normalize_axis(int(a), rank, op) for a in axes})
    return out


def element(dtype: dtypes.DType) -> ir.Type:
    return element_type(dtype.name)


def require(t: Tensor, op: str, *, floating: bool = False, numeric: bool = False) -> None:
    if floating and not t.dtype.is_floating:
        raise TypeError(f"{op}: expected a floating-point tensor, got {t.dtype.name} ({t.name!r})")
    if numeric and t.dtype.is_bool:
        raise TypeError(f"{op}: expected a numeric tensor, got bool ({t.name!r})")


def same_dtype(tensors: list[Tensor], op: str) -> list[Tensor]:
    """``tensors``, checked non-empty and of one dtype (TypeError naming ``op`` otherwise)."""
    if not tensors:
        raise ValueError(f"{op}: needs at least one tensor")
    for t in tensors[1:]:
        if t.dtype != tensors[0].dtype:
            raise TypeError(f"{op}: mixed dtypes {tensors[0].dtype.name} and {t.dtype.name}")
    return tensors


def stack(values, axis=0, name="stack") -> Tensor:
    """``values`` (tensors of one shape) joined along a new dimension ``axis`` (``tf.stack``):
    the result has rank one more.

    Gradient: ``ct`` sliced back along ``axis``, one slice per input.
    """
    tensors = same_dtype([convert_to_tensor(v) for v in values], name)
    shape = tuple(tensors[0].shape)
    for t in tensors[1:]:
        if tuple(t.shape) != shape:
            raise ValueError(f"{name}: shapes {shape} and {tuple(t.shape)} must be equal")
    rank = len(shape) + 1
    if not -rank <= axis < rank:
        raise ValueError(f"{name}: axis {axis} out of range for rank {rank}")
    axis %= rank
    new = list(shape)
    new.insert(axis, 1)
    return emit(name, lambda: hlo.concatenate([hlo.reshape(t.value, new) for t in tensors], axis))
