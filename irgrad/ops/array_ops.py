"""Constants, shape manipulation, slicing and Python indexing, ``stop_gradient``."""
from __future__ import annotations

import builtins
import collections
from collections.abc import Callable


import numpy as np

from .. import dtypes
from ..framework import Tensor
from ..passes.ir import hlo
from ..passes.ir.mlir import elem, ir
from ..passes.ir.mlir import shape as value_shape
from ..passes.rules.composites import STOP_GRADIENT
from .core import (as_numpy, broadcast_shape, constant_tensor, convert_to_tensor, current_graph, element, emit,
                   normalize_axes, normalize_axis, require, same_dtype)


# ----- constants -----

def constant(value, dtype=None, shape=None, name="Const") -> Tensor:
    """A tensor holding ``value``, embedded in the module: TensorFlow's ``tf.constant``.

    Args:
        value: a Python number, bool, nested list, or numpy array; a tensor raises
            ``TypeError`` (``ig.identity`` copies one).
        dtype: the dtype; ``None`` gives TensorFlow's for ``value`` (a Python float is float32,
            an int int32, a numpy array keeps its own). A value the dtype cannot hold without
            losing it (``1.5`` as int32) raises ``TypeError``.
        shape: the result's shape: a one-element ``value`` is repeated to fill it, one with as
            many elements is reshaped to it, anything else raises ``TypeError``.
        name: the op's name in the graph.

    Gradient: none (a constant).

    Example: ``ig.constant(0.5, shape=[2, 3])``, ``ig.constant([[1, 2], [3, 4]], ig.int64)``.
    """
    dtype = dtypes.as_dtype(dtype) if dtype is not None else None
    if isinstance(value, Tensor):
        raise TypeError("ig.constant takes a Python or numpy value; use ig.identity for a tensor")
    arr, dt = as_numpy(value, dtype)
    if shape is not None:
        shape = tuple(int(d) for d in shape)
        if arr.size == 1:
            arr = np.full(shape, arr.reshape(()), dtype=arr.dtype)
        elif arr.size == int(np.prod(shape)):
            arr = arr.reshape(shape)
        else:
            raise TypeError(f"constant: value of shape {arr.shape} cannot fill shape {shape}")
    return constant_tensor(arr, dt, name)


def fill(dims, value, name="Fill") -> Tensor:
    """A tensor of shape ``dims`` with every element ``value``: TensorFlow's ``tf.fill``.

    The dtype is ``value``'s (a Python float gives float32, an int int32, a numpy scalar its
    own). ``dims`` is a list of Python ints (irgrad's ``fill`` is a constant: a shape tensor, as
    TensorFlow takes, is not supported) and ``value`` a Python or numpy scalar. For a shape of
    another tensor, use ``ig.ones_like(t) * value``.

    Gradient: none (a constant).
    """
    value_arr, dt = as_numpy(value, None)
    return constant(value_arr, dt, shape=dims, name=name)


def zeros(shape, dtype=dtypes.float32, name="zeros") -> Tensor:
    """A tensor of ``shape`` filled with 0: TensorFlow's ``tf.zeros``.

    ``shape`` is a Python int or a list of ints (a tensor raises ``TypeError``, a negative size
    ``ValueError``); ``dtype`` is float32 by default. For the shape of another tensor, including
    one known only at run time, use ``ig.zeros_like``.
    """
    return constant(0, dtypes.as_dtype(dtype), shape=_static_shape(shape), name=name)


def ones(shape, dtype=dtypes.float32, name="ones") -> Tensor:
    """A tensor of ``shape`` filled with 1: TensorFlow's ``tf.ones``.

    ``shape`` is a Python int or a list of ints (a tensor raises ``TypeError``, a negative size
    ``ValueError``); ``dtype`` is float32 by default. For the shape of another tensor, including
    one known only at run time, use ``ig.ones_like``.
    """
    return constant(1, dtypes.as_dtype(dtype), shape=_static_shape(shape), name=name)


def zeros_like(input, dtype=None, name="zeros_like") -> Tensor:  # noqa: A002
    """Zeros of ``input``'s shape, of ``dtype`` or ``input``'s (``tf.zeros_like``); a shape known only
    at run time is read at run time.
    """
    x = convert_to_tensor(input)
    if not x.shape.is_fully_defined:
        return _filled_like(x, 0, dtype, name)
    return zeros(x.shape, dtype or x.dtype, name=name)


def ones_like(input, dtype=None, name="ones_like") -> Tensor:  # noqa: A002
    """Ones of ``input``'s shape, of ``dtype`` or ``input``'s (``tf.ones_like``); a shape known only
    at run time is read at run time.
    """
    x = convert_to_tensor(input)
    if not x.shape.is_fully_defined:
        return _filled_like(x, 1, dtype, name)
    return ones(x.shape, dtype or x.dtype, name=name)


def _filled_like(x: Tensor, value, dtype, name: str) -> Tensor:
    """``value`` in ``x``'s run-time shape."""
    et = element(dtypes.as_dtype(dtype or x.dtype))
    return emit(name, lambda: hlo.fill(value, x.value, et))


def _static_shape(shape) -> tuple[int, ...]:
    if isinstance(shape, Tensor):
        raise TypeError("shapes must be static (Python ints), not tensors")
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise ValueError(f"negative dimension in shape {dims}")
    return dims


# ----- shapes -----

def reshape(tensor, shape, name=None) -> Tensor:
    """``tensor``'s elements in row-major order under a new ``shape`` (``tf.reshape``); one
    dimension may be -1, inferred from the element count.

    Gradient: ``ct`` reshaped back to the input's shape.
    """
    x = convert_to_tensor(tensor)
    dims = list(_static_shape_allowing_minus_one(shape))
    if not x.shape.is_fully_defined:
        return _reshape_dynamic(x, dims, name or "Reshape")
    size = x.shape.num_elements()
    if dims.count(-1) > 1:
        raise ValueError(f"reshape: at most one -1 in shape {dims}")
    if -1 in dims:
        known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise ValueError(f"reshape: cannot reshape a tensor with {size} elements to shape {dims}")
        dims[dims.index(-1)] = size // known
    if int(np.prod(dims, dtype=np.int64)) != size:
        raise ValueError(f"reshape: cannot reshape a tensor with {size} elements to shape {dims} "
                         f"({int(np.prod(dims, dtype=np.int64))} elements)")
    if tuple(dims) == tuple(x.shape):
        return x
    return emit(name or "Reshape", lambda: hlo.reshape(x.value, dims))


def _reshape_dynamic(x: Tensor, dims: list[int], name: str) -> Tensor:
    """``reshape`` of a tensor with run-time dimensions: a ``-1`` takes the run-time remainder
    (the element count over the static sizes asked for); without one, the sizes are static."""
    if dims.count(-1) > 1:
        raise ValueError(f"{name}: at most one -1 in shape {dims}")
    known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
    static = int(np.prod([d for d in x.shape if d is not None], dtype=np.int64))
    if -1 not in dims or known == 0:
        raise ValueError(f"{name}: a tensor of shape {tuple(x.shape)} (sizes known at run time) can only be "
                         f"reshaped with a -1 that takes them, not to {dims}")
    if static % known == 0:
        # The run-time dimensions stay whole: -1 = their product * (static // known).
        def build():
            i32 = hlo.tensor_type([], "int32")
            n = hlo.splat(static // known, i32)
            for i, d in enumerate(x.shape):
                if d is None:
                    n = hlo.multiply(n, hlo.dimension_size(x.value, i))
            return hlo.dynamic_reshape(x.value, [n if d == -1 else d for d in dims])
    else:
        def build():
            i32 = hlo.tensor_type([], "int32")
            n = hlo.splat(static, i32)
            for i, d in enumerate(x.shape):
                if d is None:
                    n = hlo.multiply(n, hlo.dimension_size(x.value, i))
            return hlo.dynamic_reshape(x.value, [hlo.divide(n, hlo.splat(known, i32)) if d == -1 else d
                                                 for d in dims])
    return emit(name, build)


def _reshape_keeping(x: Tensor, dims: list, name: str) -> Tensor:
    """``x`` reshaped to ``dims`` (ints, or ``("x", i)`` for ``x``'s dimension ``i``)."""
    if x.shape.is_fully_defined:
        return emit(name, lambda: hlo.reshape(x.value, [x.shape[d[1]] if isinstance(d, tuple) else d for d in dims]))

    def build():
        return hlo.dynamic_reshape(x.value, [
            (hlo.dimension_size(x.value, d[1]) if x.shape[d[1]] is None else x.shape[d[1]])
            if isinstance(d, tuple) else d for d in dims])
    return emit(name, build)


def _static_shape_allowing_minus_one(shape) -> tuple[int, ...]:
    if isinstance(shape, Tensor):
        raise TypeError("shapes must be static (Python ints), not tensors")
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(d) for d in shape)


def transpose(a, perm=None, name=None) -> Tensor:
    """Dimensions permuted: result dimension ``i`` is ``a``'s dimension ``perm[i]``
    (``tf.transpose``); ``perm=None`` reverses them.

    Gradient: ``ct`` transposed by the inverse permutation.
    """
    x = convert_to_tensor(a)
    rank = x.ndim
    perm = list(reversed(builtins.range(rank))) if perm is None else [int(p) % rank if rank else 0 for p in perm]
    if sorted(perm) != list(builtins.range(rank)):
        raise ValueError(f"transpose: {perm} is not a permutation of the {rank} dimensions of {tuple(x.shape)}")
    if perm == list(builtins.range(rank)):
        return x
    return emit(name or "transpose", lambda: hlo.transpose(x.value, perm))


def broadcast_to(input, shape, name=None) -> Tensor:  # noqa: A002
    """``input`` broadcast to ``shape`` by numpy's rules (``tf.broadcast_to``).

    Gradient: ``ct`` summed over the broadcast dimensions.
    """
    x = convert_to_tensor(input)
    shape = _static_shape(shape)
    name = name or "BroadcastTo"
    if broadcast_shape(x.shape, shape, name) != tuple(shape):
        raise ValueError(f"{name}: cannot broadcast shape {tuple(x.shape)} to {tuple(shape)}")
    if tuple(shape) == tuple(x.shape):
        return x
    offset = len(shape) - x.ndim
    return emit(name, lambda: hlo.broadcast_in_dim(x.value, shape, builtins.range(offset, len(shape))))


def expand_dims(input, axis, name=None) -> Tensor:  # noqa: A002
    """``input`` with a dimension of size 1 inserted at ``axis`` (``tf.expand_dims``; negative
    ``axis`` counts from the end of the result).

    Gradient: ``ct`` reshaped back.
    """
    x = convert_to_tensor(input)
    rank = x.ndim
    if not -rank - 1 <= axis <= rank:
        raise ValueError(f"expand_dims: axis {axis} out of range for rank {rank}")
    axis = axis % (rank + 1)
    if not x.shape.is_fully_defined:
        dims = [("x", i) for i in builtins.range(rank)]
        dims.insert(axis, 1)
        return _reshape_keeping(x, dims, name or "ExpandDims")
    dims = list(x.shape)
    dims.insert(axis, 1)
    return emit(name or "ExpandDims", lambda: hlo.reshape(x.value, dims))


def squeeze(input, axis=None, name=None) -> Tensor:  # noqa: A002
    """``input`` without its size-1 dimensions, or only those in ``axis`` (``tf.squeeze``);
    naming a dimension whose size is not 1 raises ``ValueError``.

    Gradient: ``ct`` reshaped back.
    """
    x = convert_to_tensor(input)
    if axis is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    else:
        axes = normalize_axes(axis, x.ndim, "squeeze")
        for a in axes:
            if x.shape[a] != 1:
                raise ValueError(f"squeeze: cannot squeeze dimension {a} of size {x.shape[a]} "
                                 f"in shape {tuple(x.shape)}")
    dims = [d for i, d in enumerate(x.shape) if i not in axes]
    if len(dims) == x.ndim:
        return x
    if not x.shape.is_fully_defined:
        return _reshape_keeping(x, [("x", i) for i in builtins.range(x.ndim) if i not in axes], name or "Squeeze")
    return emit(name or "Squeeze", lambda: hlo.reshape(x.value, dims))


def concat(values, axis, name="concat") -> Tensor:
    """``values`` joined along the existing dimension ``axis`` (``tf.concat``); every other
    dimension must agree.

    Gradient: ``ct`` sliced back into one piece per input.
    """
    tensors = same_dtype([convert_to_tensor(v) for v in values], name)
    if len(tensors) == 1:
        return tensors[0]
    rank = tensors[0].ndim
    axis = normalize_axis(axis, rank, name)
    for t in tensors[1:]:
        if t.ndim != rank or any(a != b for i, (a, b) in enumerate(zip(t.shape, tensors[0].shape)) if i != axis):
            raise ValueError(f"{name}: shapes {tuple(tensors[0].shape)} and {tuple(t.shape)} differ outside "
                             f"axis {axis}")
    return emit(name, lambda: hlo.concatenate([t.value for t in tensors], axis))


def unstack(value, num=None, axis=0, name="unstack") -> list[Tensor]:
    """The slices of ``value`` along ``axis`` as a list of ``num`` tensors of one rank less
    (``tf.unstack``); ``num`` defaults to that dimension's static size.

    Gradient: the slices' cotangents stacked back.
    """
    x = convert_to_tensor(value)
    axis = normalize_axis(axis, x.ndim, name)
    index = [builtins.slice(None)] * axis
    return [x[tuple(index + [i])] for i in builtins.range(x.shape[axis])]


# ----- slicing -----

def slice(input_, begin, size, name=None) -> Tensor:  # noqa: A001
    """The block of ``input_`` starting at ``begin`` of extent ``size``: TensorFlow's ``tf.slice``.

    ``input_`` is a tensor of static shape.

    Args:
        begin: one Python int per dimension, the first index taken.
        size: one Python int per dimension, the number taken; ``-1`` takes everything from
            ``begin[i]`` to the end.
        name: the op's name in the graph (``"Slice"``).

    Returns:
        A tensor of shape ``size`` (with each ``-1`` resolved), one ``stablehlo.slice``.

    Raises:
        ValueError: ``begin`` or ``size`` of the wrong length, or a block outside the tensor.

    TF-compat: ``begin`` and ``size`` must be static (tensors are refused); for an offset known
    only at run time use ``ig.gather``. Gradient: ``ct`` padded with zeros back to the input's
    shape.
    """
    x = convert_to_tensor(input_)
    begin = [int(b) for b in begin]
    size = [int(s) for s in size]
    if len(begin) != x.ndim or len(size) != x.ndim:
        raise ValueError(f"slice: begin and size need {x.ndim} entries for shape {tuple(x.shape)}")
    limit = []
    for d, (b, s, n) in enumerate(zip(begin, size, x.shape)):
        e = n if s == -1 else b + s
        if not 0 <= b <= e <= n:
            raise ValueError(f"slice: begin {b} size {s} out of bounds for dimension {d} of size {n}")
        limit.append(e)
    return emit(name or "Slice", lambda: hlo.slice(x.value, begin, limit, [1] * x.ndim))


def getitem(x: Tensor, key) -> Tensor:
    """``x[key]``: Python indexing of a tensor, as TensorFlow's ``Tensor.__getitem__`` (strided slices).

    ``key`` holds ints (negative count from the end; each removes its dimension), slices with
    any step (negative steps included), ``None`` / ``ig.newaxis`` (a new dimension of size 1)
    and at most one ``...``; missing trailing dimensions are taken whole. A lone integer tensor,
    numpy array or list is a gather along the first axis (``ig.gather(x, key)``: out-of-range
    indices are clamped, not an error). Indexing needs ``x``'s static shape.

    Raises:
        ValueError: an int out of range, more indices than dimensions, or two ``...``.
        TypeError: an index tensor mixed with other indices (use ``ig.gather``), or an index of
            another kind (floats; bool masks, whose result shape depends on the data).

    Gradient: ``ct`` put back in place in zeros of ``x``'s shape (a gather's: scatter-added, so
    repeated indices sum).

    Example: ``x[0]``, ``x[:, ::-1]``, ``x[..., 1:3, ig.newaxis]``, ``x[indices]``.
    """
    if not isinstance(key, tuple):
        key = (key,)
    if len(key) == 1 and (isinstance(key[0], (Tensor, np.ndarray, list)) or hasattr(key[0], "_as_graph_tensor")):
        return gather(x, key[0], axis=0)  # x[indices]: TensorFlow's gather along the first axis
    for k in key:
        if isinstance(k, (Tensor, np.ndarray, list)) or hasattr(k, "_as_graph_tensor"):
            raise TypeError("indexing with tensors mixed with other indices is not supported: use ig.gather")
        if not (k is None or k is Ellipsis or isinstance(k, (int, np.integer, builtins.slice))):
            raise TypeError(f"unsupported index {k!r}: use ints, slices, None/newaxis or Ellipsis")
    n_ellipsis = sum(k is Ellipsis for k in key)
    if n_ellipsis > 1:
        raise ValueError("an index can only have a single ellipsis ('...')")
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    if consumed > x.ndim:
        raise ValueError(f"too many indices for a tensor of shape {tuple(x.shape)}")
    if n_ellipsis:
        i = key.index(Ellipsis)
        key = key[:i] + (builtins.slice(None),) * (x.ndim - consumed) + key[i + 1:]
    else:
        key = key + (builtins.slice(None),) * (x.ndim - consumed)

    start, limit, strides, reversed_dims, out_shape = [], [], [], [], []
    dim = 0
    for k in key:
        if k is None:
            out_shape.append(1)
            continue
        n = x.shape[dim]
        if isinstance(k, builtins.slice):
            first, stop, step = k.indices(n)
            count = len(builtins.range(first, stop, step))
            if step < 0:
                reversed_dims.append(dim)
                first, step = n - 1 - first, -step
            start.append(first)
            limit.append(first + (count - 1) * step + 1 if count else first)
            strides.append(step)
            out_shape.append(count)
        else:
            i = int(k)
            if not -n <= i < n:
                raise ValueError(f"index {i} is out of bounds for dimension {dim} of size {n}")
            i %= n
            start.append(i)
            limit.append(i + 1)
            strides.append(1)
        dim += 1

    def build():
        v = hlo.reverse(x.value, reversed_dims)
        if start != [0] * len(start) or limit != list(x.shape) or any(s != 1 for s in strides):
            v = hlo.slice(v, start, limit, strides)
        return hlo.reshape(v, out_shape)

    return emit("strided_slice", build)


# ----- gathers ------

def gather(params, indices, validate_indices=None, axis=None, batch_dims=0, name=None) -> Tensor:
    """``params`` slices at integer ``indices`` along ``axis``: TensorFlow's ``tf.gather``.

    The result has shape ``params.shape[:axis] + indices.shape[batch_dims:] + params.shape[axis + 1:]``.
    With ``batch_dims = b`` the first ``b`` dimensions of ``params`` and ``indices`` are batch
    dimensions (equal sizes): row ``i`` of the batch gathers from ``params[i]`` with
    ``indices[i]``. ``axis`` defaults to ``batch_dims``; both may be negative.

    Raises:
        TypeError: non-integer ``indices``.
        ValueError: ``batch_dims`` above ``axis`` or the rank of ``indices``, or batch dimensions
            of different sizes.

    TF-compat: out-of-range indices are clamped (StableHLO's gather); TensorFlow's CPU kernel
    raises. Gradient (TensorFlow's ``GatherV2``): ``ct`` scatter-added at the indices, so
    repeated indices sum; none reaches ``indices``.
    """
    x = convert_to_tensor(params)
    idx = convert_to_tensor(indices)
    if not idx.dtype.is_integer:
        raise TypeError(f"gather: indices must be integers, got {idx.dtype.name}")
    name = name or "GatherV2"
    b = _batch_dims(batch_dims, idx.ndim, name)
    axis = normalize_axis(b if axis is None else axis, x.ndim, name)
    if b > axis:
        raise ValueError(f"{name}: batch_dims ({b}) must be less than or equal to axis ({axis})")
    _check_batch(x, idx, b, name)
    r = idx.ndim - b
    if not b:
        dims = {"offset_dims": list(builtins.range(axis)) + list(builtins.range(axis + r, x.ndim - 1 + r)),
                "collapsed_slice_dims": [axis], "start_index_map": [axis], "index_vector_dim": idx.ndim}
        sizes = [1 if i == axis else d for i, d in enumerate(x.shape)]
        return emit(name, lambda: hlo.gather(x.value, idx.value, dims, sizes))
    # Batch dimensions: every index vector gets its batch coordinates prepended (iotas).
    dims = {"offset_dims": list(builtins.range(b, axis)) + list(builtins.range(axis + r, x.ndim - 1 + r)),
            "collapsed_slice_dims": [*builtins.range(b), axis], "start_index_map": [*builtins.range(b), axis],
            "index_vector_dim": idx.ndim}  # the batch coordinates and the index, a vector per position
    sizes = [1 if i < b or i == axis else d for i, d in enumerate(x.shape)]
    return emit(name, lambda: hlo.gather(x.value, _with_batch_coordinates(idx, b, scalar=True), dims, sizes))


def _batch_dims(batch_dims, rank: int, name: str) -> int:
    b = int(batch_dims)
    if b < 0:
        b += rank
    if not 0 <= b <= rank:
        raise ValueError(f"{name}: batch_dims {batch_dims} is out of range for indices of rank {rank}")
    return b


def _check_batch(x: Tensor, idx: Tensor, b: int, name: str) -> None:
    _static_or_raise(x, name)
    _static_or_raise(idx, name)
    if x.ndim < b or tuple(x.shape[:b]) != tuple(idx.shape[:b]):
        raise ValueError(f"{name}: the first batch_dims={b} dimensions of params {tuple(x.shape)} and indices "
                         f"{tuple(idx.shape)} must be equal")


def _with_batch_coordinates(idx: Tensor, b: int, scalar: bool) -> ir.Value:
    """Index vectors along a new last dimension: the ``b`` batch coordinates (iotas over the
    first ``b`` dimensions) then ``idx``'s own entries (a scalar per position when ``scalar``,
    else ``idx``'s last dimension)."""
    et = elem(idx.value)
    out = list(idx.shape) if scalar else list(idx.shape[:-1])
    vectors = hlo.reshape(idx.value, [*out, 1]) if scalar else idx.value
    parts = [hlo.reshape(hlo.iota(out, et, k), [*out, 1]) for k in builtins.range(b)]
    return hlo.concatenate([*parts, vectors], len(out))


def _static_or_raise(x: Tensor, name: str) -> None:
    if not x.shape.is_fully_defined:
        raise ValueError(f"{name}: needs a static shape, got {tuple(x.shape)} (a dimension known only at run time)")


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None, name=None) -> Tensor:
    """A one-hot encoding of integer ``indices``: TensorFlow's ``tf.one_hot``.

    The result has ``indices``' shape with a new dimension of size ``depth`` inserted at
    ``axis``; an entry is ``on_value`` where its position along that dimension equals the index,
    ``off_value`` elsewhere. An index outside ``[0, depth)`` gives all ``off_value``, as in
    TensorFlow.

    Args:
        indices: an integer tensor or value (``TypeError`` otherwise).
        depth: a Python int.
        on_value: the value for a hit (1 by default).
        off_value: the value elsewhere (0 by default).
        axis: where the new dimension goes; ``-1`` (the default) appends it. Out of range for
            the result's rank raises ``ValueError``.
        dtype: the result's dtype: by default ``on_value``'s, else float32.
        name: the op's name in the graph.

    Not differentiable (as TensorFlow's ``OneHot``): no gradient reaches ``on_value`` or
    ``off_value``.

    Example: ``ig.one_hot(labels, 10)`` is ``[batch, 10]`` float32 for int ``labels`` of shape ``[batch]``.
    """
    idx = convert_to_tensor(indices)
    if not idx.dtype.is_integer:
        raise TypeError(f"one_hot: indices must be integers, got {idx.dtype.name}")
    dtype = dtypes.as_dtype(dtype) if dtype is not None else (
        convert_to_tensor(on_value).dtype if on_value is not None else dtypes.float32)
    on = convert_to_tensor(1 if on_value is None else on_value, dtype)
    off = convert_to_tensor(0 if off_value is None else off_value, dtype)
    rank = idx.ndim + 1
    axis = -1 if axis is None else axis
    if not -rank <= axis < rank:
        raise ValueError(f"one_hot: axis {axis} out of range for output rank {rank}")
    axis %= rank
    out = list(idx.shape)
    out.insert(axis, int(depth))
    kept = [d for d in builtins.range(rank) if d != axis]

    def build():
        hot = hlo.compare(hlo.iota(out, elem(idx.value), axis),
                          hlo.broadcast_in_dim(idx.value, out, kept), "EQ")
        return hlo.select(hot, hlo.broadcast_in_dim(on.value, out, []), hlo.broadcast_in_dim(off.value, out, []))

    # TensorFlow's OneHot is not differentiable: on_value / off_value get no gradient, in the IR too.
    on, off = stop_gradient(on), stop_gradient(off)
    return emit(name or "one_hot", build)


# ----- gradient markers -----

def stop_gradient(input, name=None) -> Tensor:  # noqa: A002
    """The value of ``input``; no gradient flows through it.

    Lowered to ``stablehlo.composite "irgrad.stop_gradient"`` whose
    decomposition is the identity, so the mark survives into saved modules
    and IREE compiles it to nothing.
    """
    return unary_composite(STOP_GRADIENT, convert_to_tensor(input), lambda v: v, "identity", name or "StopGradient")


def unary_composite(kind: str, x: Tensor, body: Callable[[ir.Value], ir.Value], key: str, name: str) -> Tensor:
    """``stablehlo.composite kind (x)`` whose decomposition is ``body`` (one private function
    per ``key`` and type): the op carries its gradient rule (``passes/rules/composites.py``) into the IR."""
    graph = current_graph()
    t = x.value.type

    def build(fname: str) -> None:
        _, block = hlo.func(fname, [t], [t], private=True)
        with ir.InsertionPoint(block):
            hlo.return_([body(block.arguments[0])])

    fname = graph.private_function(f"{key}_{_type_key(t)}", build)
    return emit(name, lambda: hlo.composite(kind, [x.value], [t], fname))[0]


def _type_key(t: ir.Type) -> str:
    return str(t).replace("tensor<", "").replace(">", "").replace(",", "_")


def shape(input, out_type=dtypes.int32, name=None) -> Tensor:  # noqa: A002
    """``input``'s shape as a 1-D integer tensor: TensorFlow's ``tf.shape``.

    irgrad reads the shape when tracing, so the result is a constant of ``out_type`` (int32 by
    default, or int64). It needs a fully static shape; ``input.shape`` (an ``ig.TensorShape``)
    gives the same as Python ints. TF-compat: ``tf.shape`` reads the shape at run time, which
    irgrad's ``shape`` does not, so it cannot stand for a dimension known only at run time.
    """
    x = convert_to_tensor(input)
    return constant(np.array(x.shape, dtype=dtypes.as_dtype(out_type).as_numpy_dtype), out_type,
                    name=name or "Shape")


def rank(input, name=None) -> Tensor:  # noqa: A002
    """The number of dimensions of ``input`` as an int32 scalar tensor (``tf.rank``): a
    constant, since irgrad's ranks are static.
    """
    return constant(convert_to_tensor(input).ndim, dtypes.int32, name=name or "Rank")


def size(input, out_type=dtypes.int32, name=None) -> Tensor:  # noqa: A002
    """The number of elements of ``input`` as a scalar tensor of ``out_type`` (``tf.size``):
    a constant for a static shape.
    """
    return constant(convert_to_tensor(input).shape.num_elements(), out_type, name=name or "Size")



# ----- gathers and scatters by index vectors ------

def gather_nd(params, indices, batch_dims=0, name=None) -> Tensor:
    """Slices of ``params`` at index vectors: TensorFlow's ``tf.gather_nd``.

    ``indices``' last dimension ``m`` indexes the first ``m`` dimensions of ``params`` after the
    ``batch_dims`` batch dimensions; the result has shape
    ``indices.shape[:-1] + params.shape[batch_dims + m:]``.

    TF-compat: out-of-range index vectors are clamped (StableHLO's gather); TensorFlow's CPU
    kernel raises. Gradient (TensorFlow's ``GatherNd``): ``ct`` scatter-added at the index
    vectors (``ig.scatter_nd``); none reaches ``indices``.
    """
    x = convert_to_tensor(params)
    idx = _indices(indices, "gather_nd")
    name = name or "GatherNd"
    if idx.ndim < 1:
        raise ValueError(f"{name}: indices must have rank >= 1, got a scalar")
    b = _batch_dims(batch_dims, idx.ndim - 1, name)
    _check_batch(x, idx, b, name)
    m = idx.shape[-1]
    if b + m > x.ndim:
        raise ValueError(f"{name}: index vectors of length {m} (after {b} batch dimensions) index a tensor of "
                         f"rank {x.ndim}")
    lead = idx.ndim - 1
    dims = {"offset_dims": list(builtins.range(lead, lead + x.ndim - b - m)),
            "collapsed_slice_dims": list(builtins.range(b + m)), "start_index_map": list(builtins.range(b + m)),
            "index_vector_dim": lead}
    sizes = [1 if i < b + m else d for i, d in enumerate(x.shape)]
    if not b:
        return emit(name, lambda: hlo.gather(x.value, idx.value, dims, sizes))
    return emit(name, lambda: hlo.gather(x.value, _with_batch_coordinates(idx, b, scalar=False), dims, sizes))


def _indices(indices, name: str) -> Tensor:
    idx = convert_to_tensor(indices)
    if not idx.dtype.is_integer:
        raise TypeError(f"{name}: indices must be integers, got {idx.dtype.name}")
    _static_or_raise(idx, name)
    return idx


def _scatter(kind: str, x: Tensor, idx: Tensor, updates: Tensor, name: str) -> Tensor:
    """``x`` with ``updates`` combined in (``kind``: add, replace, max, min) at ``idx``'s index vectors."""
    x, idx, updates = convert_to_tensor(x), convert_to_tensor(idx), convert_to_tensor(updates)  # captured in a grad_fn
    _static_or_raise(x, name)
    if idx.ndim < 1:
        raise ValueError(f"{name}: indices must have rank >= 1, got a scalar")
    m, lead = idx.shape[-1], idx.ndim - 1
    if m > x.ndim:
        raise ValueError(f"{name}: index vectors of length {m} index a tensor of rank {x.ndim}")
    want = tuple(idx.shape[:-1]) + tuple(x.shape[m:])
    if tuple(updates.shape) != want:
        raise ValueError(f"{name}: updates must have shape indices.shape[:-1] + shape[{m}:] = {want}, got "
                         f"{tuple(updates.shape)}")
    if updates.dtype != x.dtype:
        raise TypeError(f"{name}: updates of dtype {updates.dtype.name} for a tensor of dtype {x.dtype.name}")
    dims = {"update_window_dims": list(builtins.range(lead, lead + x.ndim - m)),
            "inserted_window_dims": list(builtins.range(m)), "scatter_dims_to_operand_dims": list(builtins.range(m)),
            "index_vector_dim": lead}
    return emit(name, lambda: hlo.scatter(x.value, idx.value, updates.value, dims, kind))


def scatter_nd(indices, updates, shape, name=None) -> Tensor:
    """Zeros of ``shape`` with ``updates`` added at ``indices``' index vectors: TensorFlow's
    ``tf.scatter_nd``. Repeated index vectors sum.

    ``shape`` is static (Python ints, or a constant); ``updates`` has shape
    ``indices.shape[:-1] + shape[indices.shape[-1]:]``.

    TF-compat: out-of-range index vectors are skipped (StableHLO's scatter); TensorFlow's CPU
    kernel raises. Gradient (TensorFlow's ``ScatterNd``): ``gather_nd(ct, indices)`` to
    ``updates``.
    """
    name = name or "ScatterNd"
    idx = _indices(indices, name)
    u = convert_to_tensor(updates)
    zeros_ = zeros(_static_shape(_shape_value(shape, name)), u.dtype)
    return _scatter("add", zeros_, idx, u, name)


def _shape_value(shape, name: str):
    if isinstance(shape, Tensor):
        value = _constant_value(shape)
        if value is None:
            raise TypeError(f"{name}: the shape must be static (Python ints or a constant), not a computed tensor")
        return value.tolist()
    return shape


def _constant_value(t: Tensor) -> np.ndarray | None:
    """The value of ``t`` when it is a ``stablehlo.constant`` (else ``None``)."""
    v = t.value
    if not isinstance(v, ir.OpResult) or v.owner.name != "stablehlo.constant":
        return None
    dense = ir.DenseElementsAttr(v.owner.attributes["value"])
    np_dtype = np.bool_ if t.dtype.is_bool else t.dtype.as_numpy_dtype
    if dense.is_splat:
        return np.full(tuple(t.shape), dense.get_splat_value().value, dtype=np_dtype)
    if t.dtype.is_bool:
        bits = ir.DenseIntElementsAttr(dense)  # i1 elements: read one by one (numpy sees them bit-packed)
        return np.array([bool(bits[i]) for i in builtins.range(len(bits))]).reshape(tuple(t.shape))
    return np.array(dense).reshape(tuple(t.shape))


def tensor_scatter_nd_update(tensor, indices, updates, name=None) -> Tensor:
    """``tensor`` with the elements or slices at ``indices``' index vectors replaced by
    ``updates``: TensorFlow's ``tf.tensor_scatter_nd_update``.

    ``updates`` has shape ``indices.shape[:-1] + tensor.shape[indices.shape[-1]:]``. With a
    repeated index vector one of its updates is written (IREE: the last; TensorFlow leaves the
    order unspecified).

    TF-compat: out-of-range index vectors are skipped (StableHLO's scatter); TensorFlow's CPU
    kernel raises. Gradient (TensorFlow's ``TensorScatterUpdate``, carried in the IR as a custom
    gradient): ``ct`` with zeros at the updated positions to ``tensor``, and
    ``gather_nd(ct, indices)`` to every update, the overwritten ones among repeated indices too.
    """
    name = name or "TensorScatterUpdate"
    x = convert_to_tensor(tensor)
    idx = _indices(indices, name)
    u = convert_to_tensor(updates, x.dtype)
    if not x.dtype.is_floating:
        return _scatter("replace", x, idx, u, name)
    from ..custom_gradient import custom_gradient  # noqa: PLC0415 (custom_gradient imports the ops)

    @custom_gradient
    def update(x, idx, u):
        def grad(dy):
            return _scatter("replace", dy, idx, zeros_like(u), name), None, gather_nd(dy, idx)
        return _scatter("replace", x, idx, u, name), grad

    return update(x, idx, u)


def _scatter_into(kind: str, tensor, indices, updates, name: str) -> Tensor:
    x = convert_to_tensor(tensor)
    return _scatter(kind, x, _indices(indices, name), convert_to_tensor(updates, x.dtype), name)


def tensor_scatter_nd_add(tensor, indices, updates, name=None) -> Tensor:
    """``tensor`` with ``updates`` added at ``indices``' index vectors (repeated ones sum):
    TensorFlow's ``tf.tensor_scatter_nd_add``.

    Gradient (TensorFlow's ``TensorScatterAdd``): ``ct`` to ``tensor``, ``gather_nd(ct,
    indices)`` to ``updates``.
    """
    return _scatter_into("add", tensor, indices, updates, name or "TensorScatterAdd")


def tensor_scatter_nd_sub(tensor, indices, updates, name=None) -> Tensor:
    """``tensor`` with ``updates`` subtracted at ``indices``' index vectors:
    TensorFlow's ``tf.tensor_scatter_nd_sub``.

    Gradient (TensorFlow's ``TensorScatterSub``): ``ct`` to ``tensor``, ``-gather_nd(ct,
    indices)`` to ``updates``.
    """
    name = name or "TensorScatterSub"
    x = convert_to_tensor(tensor)
    u = convert_to_tensor(updates, x.dtype)
    return _scatter("add", x, _indices(indices, name), emit(name, lambda: hlo.negate(u.value)), name)


def tensor_scatter_nd_max(tensor, indices, updates, name=None) -> Tensor:
    """The elementwise maximum of ``tensor`` and the ``updates`` at ``indices``' index vectors:
    TensorFlow's ``tf.tensor_scatter_nd_max``.

    Gradient (TensorFlow's ``TensorScatterMax``): ``ct`` split equally among ``tensor`` and the
    updates equal to the result at each position.
    """
    return _scatter_into("max", tensor, indices, updates, name or "TensorScatterMax")


def tensor_scatter_nd_min(tensor, indices, updates, name=None) -> Tensor:
    """The elementwise minimum of ``tensor`` and the ``updates`` at ``indices``' index vectors:
    TensorFlow's ``tf.tensor_scatter_nd_min``.

    Gradient (TensorFlow's ``TensorScatterMin``): ``ct`` split equally among ``tensor`` and the
    updates equal to the result at each position.
    """
    return _scatter_into("min", tensor, indices, updates, name or "TensorScatterMin")


# ----- rearranging ------

def tile(input, multiples, name=None) -> Tensor:  # noqa: A002
    """``input`` repeated ``multiples[i]`` times along dimension ``i``: TensorFlow's ``tf.tile``.

    ``multiples`` holds one static int per dimension (a constant tensor is read).

    Gradient (TensorFlow's ``Tile``): ``ct`` summed over the copies.
    """
    x = convert_to_tensor(input)
    name = name or "Tile"
    _static_or_raise(x, name)
    reps = [int(m) for m in _static_shape(_shape_value(multiples, name))]
    if len(reps) != x.ndim:
        raise ValueError(f"{name}: multiples needs {x.ndim} entries for shape {tuple(x.shape)}, got {reps}")
    if all(m == 1 for m in reps):
        return x
    spread = [v for m, d in zip(reps, x.shape) for v in (m, d)]
    out = [m * d for m, d in zip(reps, x.shape)]

    def build():
        wide = hlo.broadcast_in_dim(x.value, spread, [2 * i + 1 for i in builtins.range(x.ndim)])
        return hlo.reshape(wide, out)

    return emit(name, build)


def _pairs(paddings, rank: int, name: str) -> list[tuple[int, int]]:
    if isinstance(paddings, Tensor):
        value = _constant_value(paddings)
        if value is None:
            raise TypeError(f"{name}: paddings must be static (Python ints or a constant), not a computed tensor")
        paddings = value
    arr = np.asarray(paddings)
    if arr.shape != (rank, 2):
        raise ValueError(f"{name}: paddings must have shape ({rank}, 2), got {arr.shape}")
    pairs = [(int(a), int(b)) for a, b in arr]
    if any(a < 0 or b < 0 for a, b in pairs):
        raise ValueError(f"{name}: paddings must be non-negative, got {pairs}")
    return pairs


def pad(tensor, paddings, mode="CONSTANT", constant_values=0, name=None) -> Tensor:
    """``tensor`` padded by ``paddings[i] = [before, after]`` along dimension ``i``: TensorFlow's
    ``tf.pad``.

    ``mode`` (any case): ``"CONSTANT"`` fills with ``constant_values``; ``"REFLECT"`` mirrors
    without the edge (each padding below the dimension's size); ``"SYMMETRIC"`` mirrors with
    it (up to the size).

    Gradient (TensorFlow's ``Pad``/``PadV2``/``MirrorPad``): ``ct`` sliced back to the input, the
    mirrored copies' cotangents added to their sources; none reaches ``constant_values``.
    """
    x = convert_to_tensor(tensor)
    name = name or "Pad"
    _static_or_raise(x, name)
    pairs = _pairs(paddings, x.ndim, name)
    mode = str(mode).upper()
    if mode == "CONSTANT":
        value = stop_gradient(convert_to_tensor(constant_values, x.dtype))
        if value.ndim:
            raise ValueError(f"{name}: constant_values must be a scalar, got shape {tuple(value.shape)}")
        return emit(name, lambda: hlo.pad(x.value, value.value, [a for a, _ in pairs], [b for _, b in pairs],
                                          [0] * x.ndim))
    if mode not in ("REFLECT", "SYMMETRIC"):
        raise ValueError(f"{name}: mode must be 'CONSTANT', 'REFLECT' or 'SYMMETRIC', got {mode!r}")
    edge = 1 if mode == "REFLECT" else 0
    for d, ((a, b), n) in enumerate(zip(pairs, x.shape)):
        if a > n - edge or b > n - edge:
            raise ValueError(f"{name}: {mode} paddings {pairs[d]} must be at most {n - edge} for dimension {d} of "
                             f"size {n}")

    def build():
        v = x.value
        for d, (a, b) in enumerate(pairs):
            if not a and not b:
                continue
            n = value_shape(v)[d]

            def part(lo: int, hi: int, v=v, d=d):
                start = [lo if i == d else 0 for i in builtins.range(x.ndim)]
                limit = [hi if i == d else s for i, s in enumerate(value_shape(v))]
                return hlo.reverse(hlo.slice(v, start, limit, [1] * x.ndim), [d])

            pieces = ([part(edge, edge + a)] if a else []) + [v] + ([part(n - edge - b, n - edge)] if b else [])
            v = hlo.concatenate(pieces, d)
        return v

    return emit(name, build)


def split(value, num_or_size_splits, axis=0, num=None, name="split") -> list[Tensor]:
    """``value`` cut along ``axis`` into pieces: TensorFlow's ``tf.split``.

    ``num_or_size_splits`` is an int ``n`` (``n`` equal pieces; the size must divide) or a list
    of sizes, one of which may be -1 (the rest).

    Gradient (TensorFlow's ``Split``/``SplitV``): the pieces' cotangents concatenated (zeros for
    unused pieces).
    """
    x = convert_to_tensor(value)
    _static_or_raise(x, name)
    axis = normalize_axis(int(axis), x.ndim, name)
    n = x.shape[axis]
    splits = num_or_size_splits
    if isinstance(splits, Tensor):
        const = _constant_value(splits)
        if const is None:
            raise TypeError(f"{name}: num_or_size_splits must be static (an int, a list or a constant)")
        splits = const.tolist()
    if isinstance(splits, (int, np.integer)):
        k = int(splits)
        if k <= 0 or n % k:
            raise ValueError(f"{name}: cannot split dimension {axis} of size {n} into {k} equal pieces")
        sizes = [n // k] * k
    else:
        sizes = [int(s) for s in splits]
        if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
            raise ValueError(f"{name}: size_splits {sizes} may hold one -1 and otherwise non-negative sizes")
        if -1 in sizes:
            rest = n - sum(s for s in sizes if s != -1)
            if rest < 0:
                raise ValueError(f"{name}: size_splits {sizes} exceed dimension {axis} of size {n}")
            sizes[sizes.index(-1)] = rest
        if sum(sizes) != n:
            raise ValueError(f"{name}: size_splits {sizes} must sum to dimension {axis}'s size {n}")
    if num is not None and int(num) != len(sizes):
        raise ValueError(f"{name}: num={num} but {len(sizes)} pieces")
    out, start = [], 0
    for s in sizes:
        begin = [start if i == axis else 0 for i in builtins.range(x.ndim)]
        size = [s if i == axis else d for i, d in enumerate(x.shape)]
        out.append(slice(x, begin, size, name=name))
        start += s
    return out


def reverse(tensor, axis, name=None) -> Tensor:
    """``tensor`` with the dimensions in ``axis`` (an int or a list) reversed: TensorFlow's
    ``tf.reverse``.

    Gradient (TensorFlow's ``ReverseV2``): ``ct`` reversed alike.
    """
    x = convert_to_tensor(tensor)
    axes = normalize_axes([axis] if isinstance(axis, (int, np.integer)) else list(axis), x.ndim, "reverse")
    if not axes:
        return x
    return emit(name or "ReverseV2", lambda: hlo.reverse(x.value, axes))


def roll(input, shift, axis, name=None) -> Tensor:  # noqa: A002
    """Elements shifted by ``shift`` along ``axis``, wrapping around: TensorFlow's ``tf.roll``.

    ``shift`` and ``axis`` are ints or lists of one length (shifts of one axis add up). A
    static shift is two slices and a concatenation; a shift tensor (int32/int64, a scalar with
    an int ``axis`` or a vector) is read at run time: a gather at ``(i - shift) mod n``.

    Gradient (TensorFlow's ``Roll``): ``ct`` rolled back by ``-shift``.
    """
    x = convert_to_tensor(input)
    name = name or "Roll"
    _static_or_raise(x, name)
    axes = [int(axis)] if isinstance(axis, (int, np.integer)) else [int(a) for a in axis]
    axes = [normalize_axis(a, x.ndim, name) for a in axes]
    if isinstance(shift, Tensor) or hasattr(shift, "_as_graph_tensor"):
        s = convert_to_tensor(shift)
        if not s.dtype.is_integer or s.ndim > 1 or (s.ndim == 1 and s.shape[0] != len(axes)) or \
                (s.ndim == 0 and len(axes) != 1):
            raise ValueError(f"{name}: a shift tensor must be an integer scalar (one axis) or vector (one entry "
                             f"per axis), got {s.dtype.name} {tuple(s.shape)} for axes {axes}")
        from .math_ops import mod, subtract  # noqa: PLC0415
        for k, a in enumerate(axes):
            n = x.shape[a]
            step = s if s.ndim == 0 else s[k]
            where_from = mod(subtract(constant(np.arange(n), s.dtype), step), n)
            x = gather(x, where_from, axis=a, name=name)
        return x
    shifts = [int(shift)] if isinstance(shift, (int, np.integer)) else [int(v) for v in shift]
    if len(shifts) != len(axes):
        raise ValueError(f"{name}: shift {shifts} and axis {axes} must have one length")
    total = {a: 0 for a in axes}
    for a, v in zip(axes, shifts):
        total[a] += v

    def build():
        v = x.value
        for a, t in total.items():
            n = x.shape[a]
            k = t % n if n else 0
            if not k:
                continue
            v = hlo.concatenate([_cut(v, a, n - k, n), _cut(v, a, 0, n - k)], a)
        return v

    return emit(name, build)


def _cut(v: ir.Value, axis: int, lo: int, hi: int) -> ir.Value:
    """``v[..., lo:hi, ...]`` along ``axis``."""
    dims = value_shape(v)
    return hlo.slice(v, [lo if i == axis else 0 for i in builtins.range(len(dims))],
                     [hi if i == axis else d for i, d in enumerate(dims)], [1] * len(dims))


def repeat(input, repeats, axis=None, name=None) -> Tensor:  # noqa: A002
    """Each element (``axis=None``: of the flattened input) or slice along ``axis`` repeated
    ``repeats`` times: TensorFlow's ``tf.repeat``.

    ``repeats`` is an int or one static int per slice (a constant tensor is read); repeats
    computed at run time give a shape that depends on the data, which irgrad refuses.

    Gradient: the copies' cotangents summed (a gather's scatter-add).
    """
    x = convert_to_tensor(input)
    name = name or "Repeat"
    _static_or_raise(x, name)
    if isinstance(repeats, Tensor):
        const = _constant_value(repeats)
        if const is None:
            raise ValueError(f"{name}: repeats computed at run time give a result whose shape depends on the data; "
                             "pass Python ints")
        repeats = const
    if axis is None:
        x = reshape(x, [-1])
        axis = 0
    axis = normalize_axis(int(axis), x.ndim, name)
    reps = np.asarray(repeats, np.int64).reshape(-1)
    n = x.shape[axis]
    if reps.size not in (1, n) or (reps < 0).any():
        raise ValueError(f"{name}: repeats must be one non-negative int or {n} of them, got {reps.tolist()}")
    where_from = np.repeat(np.arange(n, dtype=np.int32), np.broadcast_to(reps, (n,)))
    return gather(x, constant(where_from, dtypes.int32), axis=axis, name=name)


def range(start, limit=None, delta=1, dtype=None, name="range") -> Tensor:  # noqa: A001
    """The numbers ``start, start + delta, ...`` below ``limit``: TensorFlow's ``tf.range``
    (``range(n)`` counts from 0).

    The bounds are Python numbers (a constant tensor is read): a length computed at run time
    depends on the data, which irgrad's shapes cannot express. The dtype is ``dtype``, else
    TensorFlow's: float32 if any bound is a float, else int32.

    Not differentiable (a constant).
    """
    bounds = [start, limit, delta]
    for i, b in enumerate(bounds):
        if isinstance(b, Tensor):
            const = _constant_value(b)
            if const is None:
                raise ValueError(f"{name}: bounds computed at run time give a length that depends on the data; "
                                 "pass Python numbers")
            bounds[i] = const.item()
    start, limit, delta = bounds
    if limit is None:
        start, limit = 0, start
    if delta == 0:
        raise ValueError(f"{name}: delta must not be 0")
    if dtype is None:
        dtype = dtypes.float32 if any(isinstance(b, (float, np.floating)) for b in (start, limit, delta)) \
            else dtypes.int32
    dtype = dtypes.as_dtype(dtype)
    values = np.arange(start, limit, delta, dtype=np.float64 if dtype.is_floating else np.int64)
    return constant(values.astype(dtype.as_numpy_dtype), dtype, name=name)


def linspace(start, stop, num, axis=0, name=None) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop`` (both included): TensorFlow's
    ``tf.linspace``.

    ``start`` and ``stop`` are float scalars or tensors of one shape (then the values run along
    a new dimension at ``axis``); ``num`` is a static int. The ends are ``start`` and ``stop``
    exactly, the others ``start + i * (stop - start) / (num - 1)``, as TensorFlow computes them.

    Gradient: through that formula (TensorFlow's ``linspace`` is the same composition).
    """
    from .math_ops import add, divide, multiply, subtract  # noqa: PLC0415
    name = name or "LinSpace"
    a = convert_to_tensor(start)
    b = convert_to_tensor(stop, a.dtype)
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(f"{name}: start {tuple(a.shape)} and stop {tuple(b.shape)} must have one shape")
    if not a.dtype.is_floating:
        raise TypeError(f"{name}: start and stop must be floats, got {a.dtype.name}")
    n = int(num)
    if n < 0:
        raise ValueError(f"{name}: num must be non-negative, got {n}")
    axis = normalize_axis(int(axis), a.ndim + 1, name)
    ea, eb = expand_dims(a, axis), expand_dims(b, axis)
    delta = divide(subtract(eb, ea), constant(max(n - 1, 1), a.dtype))
    steps = [1] * (a.ndim + 1)
    steps[axis] = max(n - 2, 0)
    middle = add(ea, multiply(constant(np.arange(1, max(n - 1, 1), dtype=a.dtype.as_numpy_dtype).reshape(steps),
                                       a.dtype), delta))
    whole = concat([ea, middle, eb], axis)
    size = list(whole.shape)
    size[axis] = n
    return slice(whole, [0] * whole.ndim, size, name=name)


def meshgrid(*args, **kwargs) -> list[Tensor]:
    """Coordinate grids from 1-D tensors: TensorFlow's ``tf.meshgrid``. ``indexing="xy"`` (the
    default) swaps the first two output dimensions (Cartesian), ``"ij"`` does not (matrix).

    Gradient: each grid's cotangent summed back onto its vector.
    """
    indexing = kwargs.pop("indexing", "xy")
    name = kwargs.pop("name", "meshgrid")
    if kwargs:
        raise TypeError(f"{name}: unexpected keyword arguments {sorted(kwargs)}")
    if indexing not in ("xy", "ij"):
        raise ValueError(f"{name}: indexing must be 'xy' or 'ij', got {indexing!r}")
    xs = [reshape(convert_to_tensor(a), [-1]) for a in args]
    sizes = [x.shape[0] for x in xs]
    dim_of = list(builtins.range(len(xs)))
    if indexing == "xy" and len(xs) > 1:
        dim_of[0], dim_of[1] = 1, 0
    out_shape = [0] * len(xs)
    for i, d in enumerate(dim_of):
        out_shape[d] = sizes[i]
    return [emit(name, lambda x=x, d=d: hlo.broadcast_in_dim(x.value, out_shape, [d])) for x, d in zip(xs, dim_of)]


def sequence_mask(lengths, maxlen=None, dtype=dtypes.bool_, name=None) -> Tensor:
    """``mask[..., j] = j < lengths[...]`` with a new last dimension of ``maxlen``:
    TensorFlow's ``tf.sequence_mask``, as bools or cast to ``dtype``.

    ``maxlen`` is a static int; without it, ``max(lengths)`` is used when ``lengths`` is a
    constant (lengths computed at run time would give a shape that depends on the data:
    ``ValueError``).

    Not differentiable.
    """
    name = name or "SequenceMask"
    n = convert_to_tensor(lengths)
    if not n.dtype.is_integer:
        raise TypeError(f"{name}: lengths must be integers, got {n.dtype.name}")
    _static_or_raise(n, name)
    if maxlen is None:
        const = _constant_value(n)
        if const is None:
            raise ValueError(f"{name}: without maxlen the width is max(lengths), which depends on the data; pass "
                             "maxlen")
        maxlen = int(const.max()) if const.size else 0
    elif isinstance(maxlen, Tensor):
        const = _constant_value(maxlen)
        if const is None:
            raise ValueError(f"{name}: maxlen must be static (a Python int or a constant)")
        maxlen = int(const)
    out = [*n.shape, int(maxlen)]

    def build():
        return hlo.compare(hlo.iota(out, elem(n.value), len(out) - 1),
                           hlo.broadcast_in_dim(n.value, out, builtins.range(n.ndim)), "LT")

    mask = emit(name, build)
    dtype = dtypes.as_dtype(dtype)
    if dtype.is_bool:
        return mask
    from .math_ops import cast  # noqa: PLC0415
    return cast(mask, dtype)


def boolean_mask(tensor, mask, axis=None, name="boolean_mask") -> Tensor:
    """The slices of ``tensor`` where ``mask`` is true: TensorFlow's ``tf.boolean_mask``.

    ``mask`` (rank ``k``) covers dimensions ``axis .. axis + k - 1`` of ``tensor`` (``axis``
    defaults to 0); they become one dimension holding the selected slices in row-major order.

    irgrad needs the mask's value when tracing (a Python/numpy bool array or a constant
    tensor): the result's shape is the number of true entries. A mask computed at run time
    gives a shape that depends on the data, which irgrad's static shapes cannot express
    (TensorFlow's XLA compiler refuses it too): ``ValueError``; ``ig.where(mask, x, 0)``
    keeps the shape instead.

    Gradient (TensorFlow's, through its gather): ``ct`` put back at the selected positions,
    zeros elsewhere.
    """
    x = convert_to_tensor(tensor)
    _static_or_raise(x, name)
    if isinstance(mask, Tensor) or hasattr(mask, "_as_graph_tensor"):
        m = convert_to_tensor(mask)
        value = _constant_value(m)
        if value is None:
            raise ValueError(f"{name}: the mask {m.name!r} is computed at run time, so the result's shape would "
                             "depend on the data, which irgrad's static shapes cannot express; pass the mask as "
                             "a Python/numpy bool array, or keep the shape with ig.where(mask, x, 0)")
    else:
        value = np.asarray(mask)
    if value.dtype != np.bool_:
        raise TypeError(f"{name}: the mask must be bool, got {value.dtype}")
    k = value.ndim
    axis = 0 if axis is None else normalize_axis(int(axis), x.ndim, name)
    if k == 0:
        raise ValueError(f"{name}: the mask must have rank >= 1")
    if tuple(x.shape[axis:axis + k]) != value.shape:
        raise ValueError(f"{name}: mask shape {value.shape} must match dimensions {axis}..{axis + k - 1} of "
                         f"tensor shape {tuple(x.shape)}")
    flat = reshape(x, [*x.shape[:axis], int(np.prod(value.shape)), *x.shape[axis + k:]])
    picked = np.flatnonzero(value.reshape(-1)).astype(np.int32)
    return gather(flat, constant(picked, dtypes.int32), axis=axis, name=name)


# ----- sorting ------

def _sort_op(x: Tensor, operands: list, axis: int, descending: bool) -> list:
    """A stable ``stablehlo.sort`` of ``operands`` along ``axis`` by the first, ``x``."""
    op, block = hlo.sort(operands, axis, is_stable=True)
    with ir.InsertionPoint(block):
        a, b = block.arguments[0], block.arguments[1]
        hlo.return_([hlo.compare(a, b, "GT" if descending else "LT")], "stablehlo.return")
    return list(op.results)


def _sorted_values(x: Tensor, axis: int, descending: bool, name: str) -> Tensor:
    """``x`` sorted along ``axis``: a sort of ``x`` alone (its adjoint sorts an iota of its own)."""
    _static_or_raise(x, name)
    return emit(name, lambda: _sort_op(x, [x.value], axis, descending)[0])


def _sort_order(x: Tensor, axis: int, descending: bool, name: str) -> Tensor:
    """The int32 positions that sort ``x`` stably along ``axis`` (ties: the lower first). A sort of
    (``x``, iota) whose values are never used, so no adjoint replays it: IREE 3.13 corrupts a
    constant operand shared by two sorts (see ``passes/rules/indexing.py``'s ``_private_iota``)."""
    _static_or_raise(x, name)
    # Two sorts of one iota constant break too: each sort of a graph gets its own, offset by
    # minus its number (the adjoints' private iotas are offset the other way), added back after.
    graph = current_graph()
    k = graph.__dict__.get("_irgrad_sort_orders", 0) + 1
    graph.__dict__["_irgrad_sort_orders"] = k

    def build():
        iota = hlo.iota(list(x.shape), ir.IntegerType.get_signless(32), axis)
        offset = hlo.splat(k, iota.type)
        return hlo.add(_sort_op(x, [x.value, hlo.subtract(iota, offset)], axis, descending)[1], offset)

    return emit(name, build)


def _direction(direction: str, name: str) -> bool:
    d = str(direction).upper()
    if d not in ("ASCENDING", "DESCENDING"):
        raise ValueError(f"{name}: direction must be 'ASCENDING' or 'DESCENDING', got {direction!r}")
    return d == "DESCENDING"


def sort(values, axis=-1, direction="ASCENDING", name=None) -> Tensor:
    """``values`` sorted along ``axis``: TensorFlow's ``tf.sort``. One stable ``stablehlo.sort``.

    Gradient (TensorFlow's, through its ``TopKV2``): each cotangent goes back to the position
    its value came from; tied values keep their order (the first in the input comes first).
    """
    x = convert_to_tensor(values)
    name = name or "sort"
    require(x, name, numeric=True)
    return _sorted_values(x, normalize_axis(int(axis), x.ndim, name), _direction(direction, name), name)


def argsort(values, axis=-1, direction="ASCENDING", stable=False, name=None) -> Tensor:
    """The int32 positions that sort ``values`` along ``axis``: TensorFlow's ``tf.argsort``.
    irgrad's sort is always stable (ties: the lower position first, as TensorFlow's results).

    Not differentiable (integer output).
    """
    x = convert_to_tensor(values)
    name = name or "argsort"
    require(x, name, numeric=True)
    return _sort_order(x, normalize_axis(int(axis), x.ndim, name), _direction(direction, name), name)


TopKV2 = collections.namedtuple("TopKV2", ["values", "indices"])


def top_k(input, k=1, sorted=True, index_type=dtypes.int32, name=None) -> TopKV2:  # noqa: A002
    """The ``k`` largest entries along the last dimension and their positions: TensorFlow's
    ``tf.math.top_k`` (a ``(values, indices)`` named tuple). Ties: the lower position first.
    The entries are always sorted (``sorted=False`` allows any order).

    Gradient (TensorFlow's ``TopKV2``): each value's cotangent goes to the position it came
    from; none reaches ``indices``.
    """
    x = convert_to_tensor(input)
    name = name or "TopKV2"
    require(x, name, numeric=True)
    if x.ndim < 1:
        raise ValueError(f"{name}: input must have rank >= 1")
    n = x.shape[-1]
    k = int(k)
    if not 0 <= k <= n:
        raise ValueError(f"{name}: k={k} must be in [0, {n}] (the last dimension)")
    values, order = _sorted_values(x, x.ndim - 1, True, name), _sort_order(x, x.ndim - 1, True, name)
    index = [builtins.slice(None)] * (x.ndim - 1) + [builtins.slice(0, k)]
    indices = order[tuple(index)]
    index_type = dtypes.as_dtype(index_type)
    if index_type != dtypes.int32:
        from .math_ops import cast  # noqa: PLC0415
        indices = cast(indices, index_type)
    return TopKV2(values[tuple(index)], indices)


def searchsorted(sorted_sequence, values, side="left", out_type=dtypes.int32, name=None) -> Tensor:
    """For each of ``values``, the position in ``sorted_sequence`` (sorted along its last
    dimension) where it would be inserted: TensorFlow's ``tf.searchsorted``. ``side="left"``
    counts the entries below the value, ``"right"`` those not above it. Leading dimensions of
    the two match (one search per row).

    Not differentiable (integer output).
    """
    name = name or "searchsorted"
    seq = convert_to_tensor(sorted_sequence)
    v = convert_to_tensor(values, seq.dtype)
    _static_or_raise(seq, name)
    _static_or_raise(v, name)
    if side not in ("left", "right"):
        raise ValueError(f"{name}: side must be 'left' or 'right', got {side!r}")
    if seq.ndim < 1 or seq.ndim != v.ndim or tuple(seq.shape[:-1]) != tuple(v.shape[:-1]):
        raise ValueError(f"{name}: sorted_sequence {tuple(seq.shape)} and values {tuple(v.shape)} must have one "
                         "rank and equal leading dimensions")
    out_type = dtypes.as_dtype(out_type)
    lead, n, m = list(v.shape[:-1]), seq.shape[-1], v.shape[-1]
    full = [*lead, m, n]
    r = len(lead)

    def build():
        a = hlo.broadcast_in_dim(seq.value, full, [*builtins.range(r), r + 1])
        b = hlo.broadcast_in_dim(v.value, full, [*builtins.range(r), r])
        below = hlo.compare(a, b, "LT" if side == "left" else "LE")
        et = element(out_type)
        return hlo.reduce(hlo.convert(below, et), [r + 1], "add")

    return emit(name, build)


# ----- constants and norms ------

def eye(num_rows, num_columns=None, batch_shape=None, dtype=dtypes.float32, name=None) -> Tensor:
    """An identity matrix ``num_rows x num_columns`` (square by default), repeated over
    ``batch_shape``: TensorFlow's ``tf.eye``. Not differentiable (a constant).
    """
    dtype = dtypes.as_dtype(dtype)
    m = np.eye(int(num_rows), int(num_rows if num_columns is None else num_columns),
               dtype=np.float32 if dtype == dtypes.bfloat16 else dtype.as_numpy_dtype)
    if batch_shape is not None:
        m = np.broadcast_to(m, (*_static_shape(batch_shape), *m.shape)).copy()
    return constant(m, dtype, name=name or "eye")


# ----- space and depth ------

def _block(input, block_size, data_format, name: str) -> tuple[Tensor, int]:  # noqa: A002
    if data_format not in ("NHWC", None):
        raise ValueError(f"{name}: only data_format='NHWC' is supported, got {data_format!r}")
    x = convert_to_tensor(input)
    _static_or_raise(x, name)
    if x.ndim != 4:
        raise ValueError(f"{name}: input must be NHWC (rank 4), got shape {tuple(x.shape)}")
    bs = int(block_size)
    if bs < 2:
        raise ValueError(f"{name}: block_size must be at least 2, got {bs}")
    return x, bs


def depth_to_space(input, block_size, data_format="NHWC", name=None) -> Tensor:  # noqa: A002
    """Blocks of depth moved into space: ``[b, h, w, c]`` becomes ``[b, h*s, w*s, c/s²]``
    (TensorFlow's ``tf.nn.depth_to_space``, NHWC).

    Gradient (TensorFlow's ``DepthToSpace``): ``space_to_depth`` of ``ct``.
    """
    name = name or "DepthToSpace"
    x, s = _block(input, block_size, data_format, name)
    b, h, w, c = x.shape
    if c % (s * s):
        raise ValueError(f"{name}: depth {c} is not divisible by block_size² = {s * s}")
    c2 = c // (s * s)
    return reshape(transpose(reshape(x, [b, h, w, s, s, c2]), [0, 1, 3, 2, 4, 5]), [b, h * s, w * s, c2], name=name)


def space_to_depth(input, block_size, data_format="NHWC", name=None) -> Tensor:  # noqa: A002
    """Blocks of space moved into depth: ``[b, h, w, c]`` becomes ``[b, h/s, w/s, c*s²]``
    (TensorFlow's ``tf.nn.space_to_depth``, NHWC).

    Gradient (TensorFlow's ``SpaceToDepth``): ``depth_to_space`` of ``ct``.
    """
    name = name or "SpaceToDepth"
    x, s = _block(input, block_size, data_format, name)
    b, h, w, c = x.shape
    if h % s or w % s:
        raise ValueError(f"{name}: height {h} and width {w} must be divisible by block_size {s}")
    return reshape(transpose(reshape(x, [b, h // s, s, w // s, s, c]), [0, 1, 3, 2, 4, 5]),
                   [b, h // s, w // s, c * s * s], name=name)


__all__ = [
    "constant", "fill", "zeros", "ones", "zeros_like", "ones_like", "reshape", "transpose",
    "broadcast_to", "expand_dims", "squeeze", "concat", "unstack", "slice", "getitem",
    "stop_gradient", "shape", "rank", "size", "gather", "one_hot",
    "gather_nd", "scatter_nd", "tensor_scatter_nd_update", "tensor_scatter_nd_add", "tensor_scatter_nd_sub",
    "tensor_scatter_nd_max", "tensor_scatter_nd_min", "tile", "pad", "split", "reverse", "roll", "repeat",
    "range", "linspace", "meshgrid", "sequence_mask", "boolean_mask", "sort", "argsort", "top_k",
    "searchsorted", "eye", "depth_to_space", "space_to_depth",
]
