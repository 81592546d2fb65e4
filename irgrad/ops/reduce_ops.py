"""Reductions (``axis``/``keepdims`` as in TensorFlow) and contractions."""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..framework import Tensor
from ..passes.ir import hlo
from ..custom_gradient import attach_gradient
from ..passes.ir.mlir import ir, tensor_type
from .array_ops import concat, fill, gather, ones_like, reshape, slice, stop_gradient, transpose, zeros
from .core import (broadcast_shape, broadcast_value, convert_pair, convert_to_tensor, current_graph, element, emit,
                   normalize_axes, normalize_axis, require, run_time_sizes)
from .math_ops import (abs, add, binary_op, cast, divide, divide_no_nan, equal, exp, floor, greater, greater_equal,
                       identity, is_finite, less, log, log1p, logical_and, maximum, multiply, negative, not_equal, pow,
                       rsqrt, sqrt, square, squared_difference, subtract, where)


def _reduce(kind: str, input_tensor, axis, keepdims: bool, name: str) -> Tensor:
    x = convert_to_tensor(input_tensor)
    if kind in ("add", "mul"):
        require(x, name, numeric=True)
    axes = normalize_axes(axis, x.ndim, name)
    out = emit(name, lambda: hlo.reduce(x.value, axes, kind)) if axes else x
    if keepdims:
        kept = [1 if i in axes else d for i, d in enumerate(x.shape)]
        if None in kept:  # a run-time size: each kept dimension is the reduced tensor's
            return emit(name, lambda: hlo.dynamic_reshape(out.value, run_time_sizes(kept, [x])))
        out = reshape(out, kept)
    return out


def reduce_sum(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Sum over ``axis`` (an int, a list, or ``None``: every dimension) (``tf.reduce_sum``);
    ``keepdims`` keeps the reduced dimensions with size 1. Float sums of many terms are blocked
    for accuracy when compiled.

    Gradient: ``ct`` broadcast back over the reduced dimensions.
    """
    return _reduce("add", input_tensor, axis, keepdims, name or "Sum")


def reduce_prod(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Product over ``axis`` (``None``: every dimension) (``tf.reduce_prod``); ``keepdims`` as
    ``reduce_sum``.

    Gradient: ``ct`` times the product of the other elements (zeros included).
    """
    return _reduce("mul", input_tensor, axis, keepdims, name or "Prod")


def reduce_max(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Maximum over ``axis`` (``None``: every dimension) (``tf.reduce_max``); ``keepdims`` as
    ``reduce_sum``.

    Gradient: ``ct`` divided equally among the elements that tie for the maximum, as TensorFlow.
    """
    return _reduce("max", input_tensor, axis, keepdims, name or "Max")


def reduce_min(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Minimum over ``axis`` (``None``: every dimension) (``tf.reduce_min``); ``keepdims`` as
    ``reduce_sum``.

    Gradient: ``ct`` divided equally among the elements that tie for the minimum, as TensorFlow.
    """
    return _reduce("min", input_tensor, axis, keepdims, name or "Min")


def reduce_any(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Logical or of a bool tensor over ``axis`` (``None``: every dimension) (``tf.reduce_any``);
    ``keepdims`` as ``reduce_sum``. Not differentiable.
    """
    return _reduce("or", convert_to_tensor(input_tensor, dtypes.bool_), axis, keepdims, name or "Any")


def reduce_all(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Logical and of a bool tensor over ``axis`` (``None``: every dimension) (``tf.reduce_all``);
    ``keepdims`` as ``reduce_sum``. Not differentiable.
    """
    return _reduce("and", convert_to_tensor(input_tensor, dtypes.bool_), axis, keepdims, name or "All")


def reduce_mean(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """The mean over ``axis``: TensorFlow's ``tf.reduce_mean``.

    Args:
        input_tensor: a numeric tensor (bool raises ``TypeError``).
        axis: an int, a list of ints (negative count from the end), or ``None``: every
            dimension. Python ints only (a tensor raises ``TypeError``).
        keepdims: keep each reduced dimension with size 1.
        name: the op's name in the graph.

    Returns:
        The sum divided by the number of elements reduced, of ``input_tensor``'s dtype: integer
        tensors use integer division, as in TensorFlow. A dimension known only at run time is
        counted at run time.

    Gradient: ``ct`` divided by the count, broadcast back over the reduced dimensions.
    """
    x = convert_to_tensor(input_tensor)
    axes = normalize_axes(axis, x.ndim, "Mean")
    total = reduce_sum(x, axes, keepdims, name=name or "Mean")
    if any(x.shape[a] is None for a in axes):  # the count is known at run time
        def count_value():
            n = hlo.convert(hlo.dimension_size(x.value, axes[0]), element(x.dtype))
            for a in axes[1:]:
                n = hlo.multiply(n, hlo.convert(hlo.dimension_size(x.value, a), element(x.dtype)))
            return n
        return binary_op("stablehlo.divide", total, emit("Mean", count_value), "Mean")
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    if count == 1:
        return total
    return binary_op("stablehlo.divide", total, count, "Mean")


def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False,
           name=None) -> Tensor:
    """The matrix product of the last two dimensions of ``a`` and ``b``: TensorFlow's ``tf.linalg.matmul``.

    Leading (batch) dimensions broadcast like numpy, so ``[5, 2, 3] @ [3, 4]`` is ``[5, 2, 4]``;
    ``a @ b`` is the same op. One ``stablehlo.dot_general``.

    Args:
        a: a numeric tensor of rank >= 2.
        b: the same, of ``a``'s dtype (a Python value takes ``a``'s).
        transpose_a: multiply by ``a``'s transpose (of its last two dimensions).
        transpose_b: the same for ``b``.
        adjoint_a: the same as ``transpose_a`` (irgrad has no complex dtypes).
        adjoint_b: the same as ``transpose_b``.
        name: the op's name in the graph.

    Raises:
        ValueError: an operand of rank < 2 (TensorFlow's rule too; use ``ig.einsum`` or
            ``ig.reduce_sum(a * b, -1)`` for vectors), inner dimensions that differ, or batch
            dimensions that do not broadcast.
        TypeError: operands of different dtypes (no promotion: ``ig.cast``), or bool.

    Gradient: ``ct @ b^T`` and ``a^T @ ct``, summed over broadcast batch dimensions.
    """
    name = name or "MatMul"
    a, b = convert_pair(a, b, name)
    require(a, name, numeric=True)
    transpose_a = transpose_a or adjoint_a
    transpose_b = transpose_b or adjoint_b
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"{name}: both operands need rank >= 2, got shapes {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    ka = a.shape[-2] if transpose_a else a.shape[-1]
    kb = b.shape[-1] if transpose_b else b.shape[-2]
    if ka != kb:
        raise ValueError(f"{name}: inner dimensions differ: shapes {tuple(a.shape)} and {tuple(b.shape)} "
                         f"(transpose_a={transpose_a}, transpose_b={transpose_b})")
    batch = broadcast_shape(a.shape[:-2], b.shape[:-2], name)
    nb = len(batch)
    if ka == 0:  # an empty sum (IREE 3.13 crashes on a zero-size contraction)
        m = a.shape[-1] if transpose_a else a.shape[-2]
        n = b.shape[-2] if transpose_b else b.shape[-1]
        return zeros(tuple(batch) + (m, n), a.dtype, name=name)

    def build():
        av = _to_batch(a, batch, b)
        bv = _to_batch(b, batch, a)
        bd = list(range(nb))
        return hlo.dot_general(av, bv, bd, bd, [nb if transpose_a else nb + 1],
                               [nb + 1 if transpose_b else nb])

    return emit(name, build)


def _to_batch(t: Tensor, batch, *others: Tensor) -> hlo.Value:
    shape = tuple(batch) + tuple(t.shape[-2:])
    if tuple(t.shape) == shape:
        return t.value
    return broadcast_value(t, shape, *others)


def einsum(equation: str, *inputs, name=None) -> Tensor:
    """Einstein summation over one or two operands (more are contracted left to right).

    Each label is a batch, contracted, free or summed dimension; two operands
    become one ``dot_general`` plus transposes and reductions. Repeated labels
    within one operand (diagonals) are not supported.
    """
    name = name or "einsum"
    if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
        inputs = tuple(inputs[0])
    tensors = [convert_to_tensor(t) for t in inputs]
    for t in tensors[1:]:
        if t.dtype != tensors[0].dtype:
            raise TypeError(f"einsum: mixed dtypes {tensors[0].dtype.name} and {t.dtype.name}")
    eq = equation.replace(" ", "")
    if "->" in eq:
        lhs, out = eq.split("->")
    else:
        lhs = eq
        counts = {c: lhs.count(c) for c in lhs if c.isalpha()}
        out = "".join(sorted(c for c, n in counts.items() if n == 1))
    specs = lhs.split(",")
    if len(specs) != len(tensors):
        raise ValueError(f"einsum: {equation!r} names {len(specs)} operands, got {len(tensors)}")
    if "." in eq:
        raise ValueError("einsum: ellipsis ('...') is not supported")
    for spec, t in zip(specs, tensors):
        if len(spec) != t.ndim:
            raise ValueError(f"einsum: {spec!r} has {len(spec)} labels for an operand of shape {tuple(t.shape)}")
        if len(set(spec)) != len(spec):
            raise ValueError(f"einsum: repeated label in {spec!r} (diagonals) is not supported")
    if len(set(out)) != len(out) or any(c not in lhs for c in out):
        raise ValueError(f"einsum: bad output labels {out!r} in {equation!r}")
    size = {}
    for spec, t in zip(specs, tensors):
        for c, d in zip(spec, t.shape):
            if size.setdefault(c, d) != d:
                raise ValueError(f"einsum: label {c!r} has sizes {size[c]} and {d}")
    while len(tensors) > 1:
        rest = "".join(specs[2:]) + out
        (a, b), (sa, sb) = tensors[:2], specs[:2]
        keep = "".join(c for c in dict.fromkeys(sa + sb) if c in rest)
        t, s = _einsum_pair(a, sa, b, sb, keep, name)
        tensors, specs = [t] + tensors[2:], [s] + specs[2:]
    t, s = _einsum_sum(tensors[0], specs[0], out, name)
    return transpose(t, [s.index(c) for c in out]) if s != out else t


def _einsum_sum(t: Tensor, spec: str, keep: str, name: str) -> tuple[Tensor, str]:
    """Sum away the labels of ``spec`` not in ``keep``."""
    gone = [i for i, c in enumerate(spec) if c not in keep]
    if not gone:
        return t, spec
    return reduce_sum(t, gone, name=name), "".join(c for c in spec if c in keep)


def _einsum_pair(a: Tensor, sa: str, b: Tensor, sb: str, keep: str, name: str) -> tuple[Tensor, str]:
    a, sa = _einsum_sum(a, sa, keep + sb, name)
    b, sb = _einsum_sum(b, sb, keep + sa, name)
    batch = [c for c in sa if c in sb and c in keep]
    contract = [c for c in sa if c in sb and c not in keep]
    afree = [c for c in sa if c not in sb]
    bfree = [c for c in sb if c not in sa]

    def build():
        return hlo.dot_general(a.value, b.value, [sa.index(c) for c in batch], [sb.index(c) for c in batch],
                               [sa.index(c) for c in contract], [sb.index(c) for c in contract])

    return emit(name, build), "".join(batch + afree + bfree)


# ----- log-sum-exp, moments and norms -----

def reduce_logsumexp(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """``log(reduce_sum(exp(x), axis))`` computed stably (``tf.math.reduce_logsumexp``): the
    maximum over ``axis`` (0 where it is not finite) is subtracted first and added back.

    Gradient: ``ct * softmax(x)`` over ``axis`` (the maximum is a stopped constant, as in
    TensorFlow's composition).
    """
    name = name or "ReduceLogSumExp"
    x = convert_to_tensor(input_tensor)
    require(x, name, floating=True)
    axes = normalize_axes(axis, x.ndim, name)
    raw_max = reduce_max(x, axes, keepdims=True)
    my_max = stop_gradient(where(is_finite(raw_max), raw_max, 0.0))
    result = log(reduce_sum(exp(subtract(x, my_max)), axes, keepdims=keepdims))
    if not keepdims:
        my_max = reshape(my_max, [d for i, d in enumerate(x.shape) if i not in axes])
    return add(result, my_max, name=name)


def reduce_variance(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """The (biased) variance over ``axis``: ``reduce_mean(square(x - mean))``
    (``tf.math.reduce_variance``). Floating-point only (``TypeError`` for integers, as
    TensorFlow).

    Gradient: ``ct * 2 (x - mean) / n`` (TensorFlow's composition, differentiated).
    """
    name = name or "reduce_variance"
    x = convert_to_tensor(input_tensor)
    if not x.dtype.is_floating:
        raise TypeError(f"{name}: input must be either real or complex, got {x.dtype.name}")
    means = reduce_mean(x, axis, keepdims=True)
    return reduce_mean(square(subtract(x, means)), axis, keepdims=keepdims, name=name)


def reduce_std(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """The standard deviation over ``axis``: ``sqrt(reduce_variance(x, axis))``
    (``tf.math.reduce_std``). Floating-point only.

    Gradient: ``ct * (x - mean) / (n std)``; NaN where the standard deviation is 0, as in
    TensorFlow.
    """
    return sqrt(reduce_variance(input_tensor, axis, keepdims), name=name or "reduce_std")


def reduce_euclidean_norm(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """``sqrt(reduce_sum(x**2, axis))`` (``tf.math.reduce_euclidean_norm``). Integer tensors
    give the integer part of the norm, as TensorFlow's kernel (computed in float64).

    Gradient: ``ct * x / norm`` (TensorFlow's ``_EuclideanNormGrad``): NaN where the norm is 0.
    """
    name = name or "EuclideanNorm"
    x = convert_to_tensor(input_tensor)
    require(x, name, numeric=True)
    if x.dtype.is_integer:
        wide = cast(x, dtypes.float64)
        return cast(floor(sqrt(reduce_sum(multiply(wide, wide), axis, keepdims))), x.dtype, name=name)
    return sqrt(reduce_sum(multiply(x, x), axis, keepdims), name=name)


_VECTOR_NORMS = ("euclidean", "fro", 1, 2, np.inf)


def norm(tensor, ord="euclidean", axis=None, keepdims=None, name=None) -> Tensor:  # noqa: A002
    """A vector or matrix norm (``tf.norm``, ``tf.linalg.norm``), composed as TensorFlow does.

    Args:
        tensor: a floating-point tensor.
        ord: ``'euclidean'`` / ``'fro'`` / 2 (the square root of the sum of squares), 1, ``np.inf``
            or any positive ``p`` for vectors (``sum(|x|**p)**(1/p)``); ``'fro'``/``'euclidean'``,
            1 (largest column sum) or ``np.inf`` (largest row sum) for matrices.
        axis: ``None`` (the whole tensor as one vector), an int (vectors along it), or two ints
            (matrices over them).
        keepdims: keep the reduced dimensions with size 1.
        name: the op's name in the graph.

    Raises:
        ValueError: an unsupported ``ord`` or ``axis`` (as TensorFlow's messages), or the matrix
            2-norm, which needs a singular value decomposition (``ig.linalg``).

    Gradient: that of the composition (``x / norm`` for the Euclidean norm, NaN at 0, as
    TensorFlow; ties of the max norms go to the first maximum, as ``reduce_max``).
    """
    name = name or "norm"
    keepdims = bool(keepdims)
    is_matrix = isinstance(axis, (tuple, list)) and len(axis) == 2
    if is_matrix:
        axis = tuple(axis)
        if not all(isinstance(a, (int, np.integer)) for a in axis) or axis[0] == axis[1]:
            raise ValueError(f"'axis' must be None, an integer, or a tuple of 2 unique integers, got {axis}")
        if ord not in ("euclidean", "fro", 1, 2, np.inf):
            raise ValueError(f"'ord' must be a supported matrix norm in ['euclidean', 'fro', 1, 2, inf], "
                             f"got {ord}")
        if ord == 2:
            raise ValueError("norm: the matrix 2-norm (ord=2 with two axes) needs a singular value "
                             "decomposition, which ig.norm does not lower; use ord='fro', 1 or inf")
    else:
        if not (axis is None or isinstance(axis, (int, np.integer))):
            raise ValueError(f"'axis' must be None, an integer, or a tuple of 2 unique integers, got {axis}")
        if ord not in _VECTOR_NORMS and (isinstance(ord, str) or not np.isreal(ord) or ord <= 0):
            raise ValueError(f"'ord' must be a supported vector norm, got {ord}")
        axis = None if axis is None else (int(axis),)
    x = convert_to_tensor(tensor)
    require(x, name, floating=True)
    if ord in ("fro", "euclidean", 2, 2.0):
        result = sqrt(reduce_sum(multiply(x, x), axis, keepdims=True))
    else:
        result = abs(x)
        if ord == 1:
            result = reduce_sum(result, None if axis is None else axis[0], keepdims=True)
            if is_matrix:
                result = reduce_max(result, axis[-1], keepdims=True)
        elif ord == np.inf:
            if is_matrix:
                result = reduce_sum(result, axis[1], keepdims=True)
            result = reduce_max(result, None if axis is None else axis[0], keepdims=True)
        else:
            p = convert_to_tensor(float(ord), x.dtype)
            result = pow(reduce_sum(pow(result, p), axis, keepdims=True), divide(1.0, p))
    if not keepdims:
        gone = list(range(x.ndim)) if axis is None else normalize_axes(list(axis), x.ndim, name)
        result = reshape(result, [d for i, d in enumerate(result.shape) if i not in gone])
    return identity(result, name=name)


def l2_normalize(x, axis=None, epsilon=1e-12, name=None, dim=None) -> Tensor:
    """``x / sqrt(max(reduce_sum(x**2, axis), epsilon))`` (``tf.math.l2_normalize``,
    ``tf.nn.l2_normalize``); ``dim`` is the deprecated name of ``axis``.

    Gradient: that of the composition (below ``epsilon`` the norm is a constant, as in
    TensorFlow).
    """
    axis = dim if axis is None else axis
    x = convert_to_tensor(x)
    require(x, "l2_normalize", floating=True)
    square_sum = reduce_sum(square(x), axis, keepdims=True)
    x_inv_norm = rsqrt(maximum(square_sum, convert_to_tensor(epsilon, x.dtype)))
    return multiply(x, x_inv_norm, name=name or "l2_normalize")


def moments(x, axes, shift=None, keepdims=False, name=None) -> tuple[Tensor, Tensor]:
    """``(mean, variance)`` of ``x`` over ``axes`` (``tf.nn.moments``); float16 is computed in
    float32 and cast back, as TensorFlow. ``shift`` is unused, as in TensorFlow 2.

    Gradient: the variance is ``reduce_mean(squared_difference(x, stop_gradient(mean)))``, as
    in TensorFlow, so the mean gets no gradient through it.
    """
    del shift
    x = convert_to_tensor(x)
    require(x, "moments", floating=True)
    y = cast(x, dtypes.float32) if x.dtype == dtypes.float16 else x
    axes = normalize_axes(axes, x.ndim, "moments")
    mean = reduce_mean(y, axes, keepdims=True, name="mean")
    variance = reduce_mean(squared_difference(y, stop_gradient(mean)), axes, keepdims=True, name="variance")
    if not keepdims:
        kept = [d for i, d in enumerate(x.shape) if i not in axes]
        mean, variance = reshape(mean, kept), reshape(variance, kept)
    if x.dtype == dtypes.float16:
        return cast(mean, dtypes.float16), cast(variance, dtypes.float16)
    return mean, variance


# ----- arg reductions -----

def _arg_reduce(kind: str, x, axis, output_type, name: str) -> Tensor:
    x = convert_to_tensor(x)
    require(x, name, numeric=True)
    output_type = dtypes.as_dtype(output_type)
    if output_type not in (dtypes.int32, dtypes.int64, dtypes.int16, dtypes.uint16):
        raise TypeError(f"{name}: output_type must be int16, uint16, int32 or int64, got {output_type.name}")
    if x.ndim == 0:
        raise ValueError(f"{name}: the input must have rank >= 1 (a scalar has no axis to reduce)")
    axis = normalize_axis(0 if axis is None else int(axis), x.ndim, name)
    n = x.shape[axis]
    if n is None:
        raise ValueError(f"{name}: the size of axis {axis} must be known when tracing")
    reduce = reduce_max if kind == "max" else reduce_min
    if x.dtype.is_floating:  # TensorFlow's kernel skips NaNs (its comparisons with them are false)
        x = where(not_equal(x, x), float("-inf") if kind == "max" else float("inf"), x)
    best = reduce(x, axis, keepdims=True)
    shape = [1] * x.ndim
    shape[axis] = n
    index = reshape(emit(name, lambda: hlo.iota([n], element(output_type), 0)), shape)
    # (all NaN: every position holds the masked value, so the answer is 0, as TensorFlow's)
    return reduce_min(where(equal(x, best), index, convert_to_tensor(n, output_type)), axis, name=name)


def argmax(input, axis=None, output_type=dtypes.int64, name=None) -> Tensor:  # noqa: A002
    """The index of the largest value along ``axis`` (``tf.math.argmax``); ``axis=None`` means 0,
    as TensorFlow. Ties give the smallest index; NaNs are skipped (0 when all are NaN), as
    TensorFlow's kernel.

    Args:
        input: a numeric tensor of rank >= 1.
        axis: a Python int (negative counts from the end).
        output_type: int64 (TensorFlow's default) or int32 (also int16/uint16).
        name: the op's name in the graph.

    Not differentiable (an integer result).
    """
    return _arg_reduce("max", input, axis, output_type, name or "ArgMax")


def argmin(input, axis=None, output_type=dtypes.int64, name=None) -> Tensor:  # noqa: A002
    """The index of the smallest value along ``axis`` (``tf.math.argmin``); ``axis=None`` means 0.
    Ties give the smallest index; NaNs are skipped, as ``argmax``. Not differentiable."""
    return _arg_reduce("min", input, axis, output_type, name or "ArgMin")


# ----- scans -----

def _scan(x: Tensor, axis, kind: str, exclusive: bool, reverse: bool, name: str) -> Tensor:
    """Cumulative ``kind`` (add/mul) along ``axis``: one ``reduce_window`` whose window spans the
    axis, padded with the identity on the side the scan starts from."""
    if isinstance(axis, Tensor):
        raise TypeError(f"{name}: axis must be a Python int, not a tensor")
    axis = normalize_axis(int(axis), x.ndim, name)
    n = x.shape[axis]
    if n is None:
        raise ValueError(f"{name}: the size of axis {axis} must be known when tracing")
    if n == 0:
        return x
    rank = x.ndim
    window = [1] * rank
    window[axis] = n
    pads = [(0, 0)] * rank
    pad = n if exclusive else n - 1
    pads[axis] = (0, pad) if reverse else (pad, 0)
    scalar = tensor_type([], element(x.dtype))

    def build():
        init = hlo.splat(hlo.reduce_init(kind, element(x.dtype)), scalar)
        out = hlo.reduce_window(x.value, init, kind, window, [1] * rank, pads, [1] * rank, [1] * rank)
        if not exclusive:
            return out
        start = [0] * rank
        start[axis] = 1 if reverse else 0
        limit = list(x.shape)
        limit[axis] = start[axis] + n
        return hlo.slice(out, start, limit, [1] * rank)

    return emit(name, build)


def cumsum(x, axis=0, exclusive=False, reverse=False, name=None) -> Tensor:
    """The cumulative sum along ``axis`` (``tf.math.cumsum``): ``[a, b, c]`` gives
    ``[a, a + b, a + b + c]``; ``exclusive`` gives ``[0, a, a + b]``, ``reverse`` scans from the
    end (``[a + b + c, b + c, c]``). Numeric tensors; ``axis`` a Python int. The window spans the
    axis, so the work grows with the square of its length (fine for sequence lengths in the
    thousands).

    Gradient: ``cumsum(ct, axis, exclusive, not reverse)`` (TensorFlow's ``_CumsumGrad``).
    """
    x = convert_to_tensor(x)
    require(x, "cumsum", numeric=True)
    return _scan(x, axis, "add", exclusive, reverse, name or "Cumsum")


def cumprod(x, axis=0, exclusive=False, reverse=False, name=None) -> Tensor:
    """The cumulative product along ``axis`` (``tf.math.cumprod``); ``exclusive`` and ``reverse``
    as ``cumsum`` (an exclusive product starts from 1).

    Gradient (TensorFlow's ``_CumprodGrad``, kept by a custom-gradient composite):
    ``divide_no_nan(cumsum(y * ct, axis, exclusive, not reverse), x)``: exact where ``x`` has no
    zeros; where ``x == 0`` the gradient is 0 (TensorFlow's convention, not the derivative).
    """
    name = name or "Cumprod"
    x = convert_to_tensor(x)
    require(x, name, numeric=True)
    y = _scan(x, axis, "mul", exclusive, reverse, name)
    if not x.dtype.is_floating:
        return y

    def grad(dy):
        out = cumsum(multiply(y, dy), axis, exclusive=exclusive, reverse=not reverse)
        return divide_no_nan(out, x)

    return attach_gradient(current_graph(), y, [x], [], grad, name)


def cumulative_logsumexp(x, axis=0, exclusive=False, reverse=False, name=None) -> Tensor:
    """``log(cumsum(exp(x)))`` along ``axis`` (``tf.math.cumulative_logsumexp``); ``exclusive``
    (the first element is ``-inf``) and ``reverse`` as ``cumsum``. Floating-point only.

    Computed as TensorFlow's kernel does, without overflow or underflow: ``log(e^a + e^b) =
    max(a, b) + log1p(exp(-|a - b|))`` combined over the axis in ``ceil(log2(n))`` steps
    (Hillis-Steele: step ``k`` combines each element with the one ``2^k`` before it).

    Gradient (TensorFlow's ``_CumulativeLogsumexpGrad``, kept by a custom-gradient composite):
    ``exp(cumulative_logsumexp(log(ct+) - y, reversed) + x) - exp(cumulative_logsumexp(log(ct-)
    - y, reversed) + x)``, the positive and negative parts of ``ct`` taken apart in log space.
    """
    name = name or "CumulativeLogsumexp"
    x = convert_to_tensor(x)
    require(x, name, floating=True)
    if isinstance(axis, Tensor):
        raise TypeError(f"{name}: axis must be a Python int, not a tensor")
    axis = normalize_axis(int(axis), x.ndim, name)
    if x.shape[axis] is None:
        raise ValueError(f"{name}: the size of axis {axis} must be known when tracing")
    y = _logsumexp_scan(x, axis, exclusive, reverse)
    lowest = float(np.finfo(np.float32 if x.dtype == dtypes.bfloat16 else x.dtype.as_numpy_dtype).min)

    def grad(dy):
        log_pos = where(greater(dy, 0), log(dy), lowest)
        log_neg = where(less(dy, 0), log(negative(dy)), lowest)
        back = lambda g: exp(add(_logsumexp_scan(subtract(g, y), axis, exclusive, not reverse), x))  # noqa: E731
        return subtract(back(log_pos), back(log_neg))

    return attach_gradient(current_graph(), y, [x], [], grad, name)


def _log_add_exp(a: Tensor, b: Tensor) -> Tensor:
    m = maximum(a, b)
    return where(equal(m, float("-inf")), m, add(m, log1p(exp(negative(abs(subtract(a, b)))))))


def _shifted(x: Tensor, axis: int, k: int, reverse: bool) -> Tensor:
    """``x`` moved ``k`` places along ``axis`` (towards the end; the start with ``reverse``),
    ``-inf`` filling the places vacated."""
    n = x.shape[axis]
    pad_shape = [min(k, n) if i == axis else d for i, d in enumerate(x.shape)]
    filler = cast(fill(pad_shape, np.float32(-np.inf)), x.dtype)
    if k >= n:
        return filler
    begin = [0] * x.ndim
    size = [-1] * x.ndim
    size[axis] = n - k
    if reverse:
        begin[axis] = k
        return concat([slice(x, begin, size), filler], axis)
    return concat([filler, slice(x, begin, size)], axis)


def _logsumexp_scan(x: Tensor, axis: int, exclusive: bool, reverse: bool) -> Tensor:
    n, k = x.shape[axis], 1
    if exclusive:
        x = _shifted(x, axis, 1, reverse)
    while k < n:
        x = _log_add_exp(x, _shifted(x, axis, k, reverse))
        k *= 2
    return x


# ----- segments -----

def _static_ids(segment_ids) -> np.ndarray | None:
    """``segment_ids``' values when known while tracing (a Python/numpy value or a constant)."""
    if isinstance(segment_ids, Tensor):
        owner = segment_ids.value.owner if isinstance(segment_ids.value, ir.OpResult) else None
        if owner is None or owner.name != "stablehlo.constant":
            return None
        values = [int(v) for v in ir.DenseIntElementsAttr(owner.attributes["value"])]  # a splat too: every element
        return np.array(values, np.int64).reshape(tuple(segment_ids.shape))
    if hasattr(segment_ids, "_as_graph_tensor"):
        return None
    return np.asarray(segment_ids)


def _segment_setup(data, segment_ids, num_segments, name: str) -> tuple[Tensor, Tensor, int]:
    x = convert_to_tensor(data)
    require(x, name, numeric=True)
    ids = convert_to_tensor(segment_ids)
    if not ids.dtype.is_integer:
        raise TypeError(f"{name}: segment_ids must be int32 or int64, got {ids.dtype.name}")
    if tuple(x.shape[:ids.ndim]) != tuple(ids.shape) or None in ids.shape:
        raise ValueError(f"{name}: segment_ids' shape {tuple(ids.shape)} must be a prefix of data's shape "
                         f"{tuple(x.shape)}")
    if isinstance(num_segments, Tensor):
        known = _static_ids(num_segments)
        if known is None:
            raise ValueError(f"{name}: num_segments must be known when tracing (a Python int): it is the "
                             "result's first dimension")
        num_segments = known
    num = int(np.asarray(num_segments))
    if num < 0:
        raise ValueError(f"{name}: num_segments must be >= 0, got {num}")
    return x, ids, num


def _scatter_segments(kind: str, x: Tensor, ids: Tensor, num: int, name: str) -> Tensor:
    """``stablehlo.scatter`` of ``x``'s slices into ``num`` segments. An id outside ``[0, num)``
    goes to one extra segment that is sliced off (IREE 3.13 writes out-of-bounds scatter
    updates instead of dropping them), so its slice is dropped and gets no gradient."""
    x, ids = convert_to_tensor(x), convert_to_tensor(ids)  # captured when used by a gradient function
    inside = logical_and(greater_equal(ids, convert_to_tensor(0, ids.dtype)),
                         less(ids, convert_to_tensor(num, ids.dtype)))
    ids = where(inside, ids, convert_to_tensor(num, ids.dtype))
    rest = list(x.shape[ids.ndim:])
    et = element(x.dtype)
    if kind == "add":
        fill = 0
    else:
        info = np.finfo if x.dtype.is_floating else np.iinfo
        np_dtype = np.float32 if x.dtype == dtypes.bfloat16 else x.dtype.as_numpy_dtype
        fill = info(np_dtype).min if kind == "max" else info(np_dtype).max
    dims = {"update_window_dims": list(range(ids.ndim, x.ndim)), "inserted_window_dims": [0],
            "scatter_dims_to_operand_dims": [0], "index_vector_dim": ids.ndim}

    def build():
        out = hlo.scatter(hlo.splat(fill, tensor_type([num + 1, *rest], et)), ids.value, x.value, dims, kind)
        return hlo.slice(out, [0] * (1 + len(rest)), [num, *rest], [1] * (1 + len(rest)))

    return emit(name, build)


def _positive_ids(ids: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    """(ids clipped at 0, ``ids >= 0`` shaped to broadcast against ``x``)."""
    clipped = maximum(ids, convert_to_tensor(0, ids.dtype))
    positive = reshape(greater_equal(ids, convert_to_tensor(0, ids.dtype)),
                       list(ids.shape) + [1] * (x.ndim - ids.ndim))
    return clipped, positive


def _gather_drop_negatives(params: Tensor, clipped: Tensor, positive: Tensor) -> Tensor:
    gathered = gather(params, clipped)
    return where(positive, gathered, convert_to_tensor(0, gathered.dtype))


def _segment_extreme(kind: str, x: Tensor, ids: Tensor, num: int, name: str) -> Tensor:
    """unsorted segment max/min with TensorFlow's gradient (``_UnsortedSegmentMinOrMaxGrad``)."""
    y = _scatter_segments(kind, x, ids, num, name)
    if not x.dtype.is_floating:
        return y

    def grad(dy):
        clipped, positive = _positive_ids(ids, x)
        selected = logical_and(equal(x, _gather_drop_negatives(y, clipped, positive)), positive)
        counts = _scatter_segments("add", cast(selected, dy.dtype), ids, num, name)
        # divide_no_nan: an empty segment's count is 0 and no element reads it; its tangent (this
        # function transposed) is then 0, not 0 / 0.
        shared = _gather_drop_negatives(divide_no_nan(dy, counts), clipped, positive)
        return where(selected, shared, convert_to_tensor(0, x.dtype))

    return attach_gradient(current_graph(), y, [x], [], grad, name)


def unsorted_segment_sum(data, segment_ids, num_segments, name=None) -> Tensor:
    """Sums of ``data``'s slices by segment (``tf.math.unsorted_segment_sum``): ``result[s]`` is
    the sum of the ``data[i...]`` with ``segment_ids[i...] == s``.

    Args:
        data: a numeric tensor.
        segment_ids: an int32/int64 tensor whose shape is a prefix of ``data``'s; ids in any order.
            An id out of ``[0, num_segments)`` (a negative one, say) drops its slice.
        num_segments: the number of segments, a Python int (the result's first dimension).
        name: the op's name in the graph.

    Returns:
        Shape ``[num_segments] + data.shape[segment_ids.ndim:]``; empty segments are 0. One
        ``stablehlo.scatter`` (add).

    Gradient: ``gather(ct, segment_ids)``, 0 for dropped ids (TensorFlow's
    ``_GatherDropNegatives``).
    """
    name = name or "UnsortedSegmentSum"
    x, ids, num = _segment_setup(data, segment_ids, num_segments, name)
    return _scatter_segments("add", x, ids, num, name)


def unsorted_segment_max(data, segment_ids, num_segments, name=None) -> Tensor:
    """Maxima of ``data``'s slices by segment (``tf.math.unsorted_segment_max``); arguments as
    ``unsorted_segment_sum``. An empty segment holds the dtype's lowest value (``-3.4e38`` for
    float32, not ``-inf``), as TensorFlow.

    Gradient (TensorFlow's ``_UnsortedSegmentMinOrMaxGrad``, a custom-gradient composite):
    ``ct`` shared equally among the elements equal to their segment's maximum.
    """
    name = name or "UnsortedSegmentMax"
    x, ids, num = _segment_setup(data, segment_ids, num_segments, name)
    return _segment_extreme("max", x, ids, num, name)


def unsorted_segment_min(data, segment_ids, num_segments, name=None) -> Tensor:
    """Minima of ``data``'s slices by segment (``tf.math.unsorted_segment_min``); an empty
    segment holds the dtype's largest value. Gradient: as ``unsorted_segment_max``."""
    name = name or "UnsortedSegmentMin"
    x, ids, num = _segment_setup(data, segment_ids, num_segments, name)
    return _segment_extreme("min", x, ids, num, name)


def _segment_counts(x: Tensor, ids: Tensor, num: int) -> Tensor:
    """max(number of ids in each segment, 1), shaped to broadcast against the result."""
    ones = ones_like(ids, dtype=x.dtype)
    counts = maximum(_scatter_segments("add", ones, ids, num, "segment_count"), convert_to_tensor(1, x.dtype))
    return reshape(counts, [num] + [1] * (x.ndim - ids.ndim))


def unsorted_segment_mean(data, segment_ids, num_segments, name=None) -> Tensor:
    """Means of ``data``'s slices by segment (``tf.math.unsorted_segment_mean``): the segment sum
    divided by ``max(count, 1)`` (empty segments are 0). Arguments as ``unsorted_segment_sum``.

    Gradient: ``gather(ct / count, segment_ids)``, 0 for dropped ids.
    """
    name = name or "UnsortedSegmentMean"
    x, ids, num = _segment_setup(data, segment_ids, num_segments, name)
    require(x, name, floating=True)
    return divide(_scatter_segments("add", x, ids, num, name), _segment_counts(x, ids, num), name=name)


def _sorted_ids(data, segment_ids, name: str) -> tuple[Tensor, Tensor, int, np.ndarray]:
    known = _static_ids(segment_ids)
    if known is None:
        raise ValueError(f"{name}: the number of segments (the result's first dimension) is the last "
                         "segment id + 1, so segment_ids must be known when tracing (a Python list, numpy "
                         f"array or constant); with run-time ids use unsorted_{name.lower()} and num_segments")
    known = np.asarray(known)
    if known.ndim != 1:
        raise ValueError(f"{name}: segment_ids must be 1-D, got shape {known.shape}")
    if known.size and (known.min() < 0 or np.any(np.diff(known) < 0)):
        raise ValueError(f"{name}: segment_ids must be sorted and non-negative, got {known.tolist()}")
    num = int(known.max()) + 1 if known.size else 0
    x, ids, num = _segment_setup(data, known.astype(np.int32 if known.dtype != np.int64 else np.int64), num,
                                 name)
    return x, ids, num, np.bincount(known, minlength=num)


def segment_sum(data, segment_ids, name=None) -> Tensor:
    """Sums of ``data``'s rows by sorted segment (``tf.math.segment_sum``): ``result[s]`` sums the
    rows ``i`` with ``segment_ids[i] == s``; the result has ``segment_ids[-1] + 1`` rows, empty
    ones 0.

    ``segment_ids``: a sorted, non-negative 1-D list of ``data.shape[0]`` ints known when
    tracing (Python, numpy or a constant: the result's shape depends on them). For ids known
    only at run time use ``ig.math.unsorted_segment_sum`` with ``num_segments``.

    Raises:
        ValueError: ids that are not known when tracing, not 1-D, not sorted or negative.

    Gradient: ``gather(ct, segment_ids)`` (TensorFlow's ``_SegmentSumGrad``).
    """
    name = name or "SegmentSum"
    x, ids, num, _ = _sorted_ids(data, segment_ids, name)
    return _scatter_segments("add", x, ids, num, name)


def segment_mean(data, segment_ids, name=None) -> Tensor:
    """Means of ``data``'s rows by sorted segment (``tf.math.segment_mean``); ``segment_ids`` as
    ``segment_sum``; empty segments are 0.

    Gradient: ``gather(ct / count, segment_ids)`` (TensorFlow's ``_SegmentMeanGrad``).
    """
    name = name or "SegmentMean"
    x, ids, num, counts = _sorted_ids(data, segment_ids, name)
    require(x, name, floating=True)
    scale = convert_to_tensor(np.maximum(counts, 1).reshape([num] + [1] * (x.ndim - 1)), x.dtype)
    return divide(_scatter_segments("add", x, ids, num, name), scale, name=name)


def _sorted_extreme(kind: str, data, segment_ids, name: str) -> Tensor:
    x, ids, num, counts = _sorted_ids(data, segment_ids, name)
    y = _segment_extreme(kind, x, ids, num, name)
    if counts.all():
        return y
    empty = convert_to_tensor((counts == 0).reshape([num] + [1] * (x.ndim - 1)))
    return where(empty, convert_to_tensor(0, x.dtype), y, name=name)


def segment_max(data, segment_ids, name=None) -> Tensor:
    """Maxima of ``data``'s rows by sorted segment (``tf.math.segment_max``); ``segment_ids`` as
    ``segment_sum``; empty segments are 0, as TensorFlow.

    Gradient (TensorFlow's ``_SegmentMinOrMaxGrad``): ``ct`` shared equally among the rows' elements
    that tie for their segment's maximum.
    """
    return _sorted_extreme("max", data, segment_ids, name or "SegmentMax")


def segment_min(data, segment_ids, name=None) -> Tensor:
    """Minima of ``data``'s rows by sorted segment (``tf.math.segment_min``); empty segments are 0.
    Gradient: as ``segment_max``."""
    return _sorted_extreme("min", data, segment_ids, name or "SegmentMin")
