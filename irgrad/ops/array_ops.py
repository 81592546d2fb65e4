"""Constants, shape manipulation, slicing and Python indexing, ``stop_gradient``."""
from __future__ import annotations

import builtins
from collections.abc import Callable


import numpy as np

from .. import dtypes
from ..framework import Tensor
from ..passes.ir import hlo
from ..passes.ir.mlir import elem, ir
from ..passes.rules.composites import STOP_GRADIENT
from .core import (as_numpy, broadcast_shape, constant_tensor, convert_to_tensor, current_graph, element, emit,
                   normalize_axes, normalize_axis, same_dtype)


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
    perm = list(reversed(range(rank))) if perm is None else [int(p) % rank if rank else 0 for p in perm]
    if sorted(perm) != list(range(rank)):
        raise ValueError(f"transpose: {perm} is not a permutation of the {rank} dimensions of {tuple(x.shape)}")
    if perm == list(range(rank)):
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
    return emit(name, lambda: hlo.broadcast_in_dim(x.value, shape, range(offset, len(shape))))


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
        dims = [("x", i) for i in range(rank)]
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
        return _reshape_keeping(x, [("x", i) for i in range(x.ndim) if i not in axes], name or "Squeeze")
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
    return [x[tuple(index + [i])] for i in range(x.shape[axis])]


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
            count = len(range(first, stop, step))
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
    """``params`` slices at integer ``indices`` along ``axis``: shape
    ``params.shape[:axis] + indices.shape + params.shape[axis + 1:]``.

    Out-of-range indices are clamped (StableHLO's gather), not an error.
    """
    x = convert_to_tensor(params)
    idx = convert_to_tensor(indices)
    if not idx.dtype.is_integer:
        raise TypeError(f"gather: indices must be integers, got {idx.dtype.name}")
    if batch_dims:
        raise ValueError("gather: batch_dims other than 0 is not supported")
    axis = normalize_axis(0 if axis is None else axis, x.ndim, "gather")
    r = idx.ndim
    dims = {"offset_dims": list(range(axis)) + list(range(axis + r, x.ndim - 1 + r)),
            "collapsed_slice_dims": [axis], "start_index_map": [axis], "index_vector_dim": r}
    sizes = [1 if i == axis else d for i, d in enumerate(x.shape)]
    return emit(name or "GatherV2", lambda: hlo.gather(x.value, idx.value, dims, sizes))


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
    kept = [d for d in range(rank) if d != axis]

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


__all__ = [
    "constant", "fill", "zeros", "ones", "zeros_like", "ones_like", "reshape", "transpose",
    "broadcast_to", "expand_dims", "squeeze", "concat", "unstack", "slice", "getitem",
    "stop_gradient", "shape", "rank", "size", "gather", "one_hot",
]
