"""``ig.nn``: activations, softmax losses, NHWC convolution and pooling (TensorFlow semantics)."""
from __future__ import annotations

from collections.abc import Sequence

from ..framework import Tensor
from ..passes.ir import hlo
from ..passes.ir.mlir import tensor_type
from ..passes.rules.composites import RELU
from .array_ops import stop_gradient, unary_composite
from .core import convert_to_tensor, element, emit, normalize_axis, require
from .math_ops import (divide, exp, less, log, log1p, minimum, multiply, negative, subtract,
                       where)
from .reduce_ops import reduce_max, reduce_sum


# ----- activations --------------------------------------------------------------------------

def relu(features, name=None) -> Tensor:
    """max(0, x) with TensorFlow's gradient dy * (x > 0): 0 at 0 and at NaN. Lowered to
    ``stablehlo.composite "irgrad.relu"``, so an exported module keeps that gradient."""
    x = convert_to_tensor(features)
    return unary_composite(RELU, x, lambda v: hlo.binary("stablehlo.maximum", hlo.like(0, v), v), "relu",
                           name or "Relu")


_SOFTPLUS_THRESHOLD = {"float64": 40.0, "float32": 20.0}


def softplus(features, name=None) -> Tensor:
    """log(1 + exp(x)); its gradient is sigmoid(x) everywhere (no NaN for large x)."""
    x = convert_to_tensor(features)
    require(x, "softplus", floating=True)
    t = _SOFTPLUS_THRESHOLD.get(x.dtype.name, 10.0)
    # The clamped branch keeps exp finite where the other branch is selected.
    return where(less(x, t), log1p(exp(minimum(x, t))), x, name=name or "Softplus")


def _axis(x: Tensor, axis: int, op: str) -> int:
    return normalize_axis(axis, x.ndim, op)


def log_softmax(logits, axis=-1, name=None) -> Tensor:
    x = convert_to_tensor(logits)
    require(x, "log_softmax", floating=True)
    axis = _axis(x, axis, "log_softmax")
    shifted = subtract(x, stop_gradient(reduce_max(x, axis, keepdims=True)))
    return subtract(shifted, log(reduce_sum(exp(shifted), axis, keepdims=True)), name=name or "LogSoftmax")


def softmax(logits, axis=-1, name=None) -> Tensor:
    x = convert_to_tensor(logits)
    require(x, "softmax", floating=True)
    axis = _axis(x, axis, "softmax")
    e = exp(subtract(x, stop_gradient(reduce_max(x, axis, keepdims=True))))
    return divide(e, reduce_sum(e, axis, keepdims=True), name=name or "Softmax")


def softmax_cross_entropy_with_logits(labels, logits, axis=-1, name=None) -> Tensor:
    """-sum(labels * log_softmax(logits)) over ``axis`` (gradients reach labels too, as TF v2)."""
    logits = convert_to_tensor(logits)
    labels = convert_to_tensor(labels, logits.dtype)
    if tuple(labels.shape) != tuple(logits.shape):
        raise ValueError(f"softmax_cross_entropy_with_logits: labels shape {tuple(labels.shape)} and logits "
                         f"shape {tuple(logits.shape)} must be equal")
    axis = _axis(logits, axis, "softmax_cross_entropy_with_logits")
    return negative(reduce_sum(multiply(labels, log_softmax(logits, axis)), axis),
                    name=name or "softmax_cross_entropy_with_logits")


# ----- convolution and pooling ----------------------------------------------------------------

def _per_spatial(value, n: int, what: str, full_rank: int | None = None) -> list[int]:
    """A stride/ksize/dilation given as int, n ints, or full-rank NHWC list (batch/channel = 1)."""
    if value is None:
        return [1] * n
    if isinstance(value, int):
        return [value] * n
    value = [int(v) for v in value]
    if len(value) == 1:
        return value * n
    if len(value) == n:
        return value
    if full_rank is not None and len(value) == full_rank:
        if value[0] != 1 or value[-1] != 1:
            raise ValueError(f"{what}: the batch and channel entries of {value} must be 1")
        return value[1:-1]
    raise ValueError(f"{what} must be an int or a list of 1, {n} or {n + 2} ints, got {value}")


def _padding(padding, sizes: Sequence[int], windows: Sequence[int], strides: Sequence[int],
             dilations: Sequence[int], what: str) -> list[tuple[int, int]]:
    """TensorFlow's SAME/VALID (or explicit) padding for each spatial dimension."""
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            return [(0, 0)] * len(sizes)
        if mode != "SAME":
            raise ValueError(f"{what}: padding must be 'SAME', 'VALID' or explicit pairs, got {padding!r}")
        pads = []
        for size, window, stride, dilation in zip(sizes, windows, strides, dilations):
            effective = (window - 1) * dilation + 1
            out = -(-size // stride)
            total = max((out - 1) * stride + effective - size, 0)
            pads.append((total // 2, total - total // 2))
        return pads
    pairs = [tuple(int(v) for v in p) for p in padding]
    if len(pairs) == len(sizes) + 2:
        pairs = pairs[1:-1]
    if len(pairs) != len(sizes) or any(len(p) != 2 for p in pairs):
        raise ValueError(f"{what}: explicit padding needs one (low, high) pair per dimension, got {padding}")
    return pairs


def _check_nhwc(data_format: str, what: str) -> None:
    if data_format not in ("NHWC", "NWC", "NDHWC", None):
        raise ValueError(f"{what}: only channels-last data_format (NHWC) is supported, got {data_format!r}")


def conv2d(input, filters, strides, padding, data_format="NHWC", dilations=None, name=None) -> Tensor:  # noqa: A002
    """2-D convolution of NHWC ``input`` with HWIO ``filters`` (groups when I divides the channels)."""
    _check_nhwc(data_format, "conv2d")
    x = convert_to_tensor(input)
    w = convert_to_tensor(filters, x.dtype)
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"conv2d: input must be NHWC (rank 4) and filters HWIO (rank 4), got shapes "
                         f"{tuple(x.shape)} and {tuple(w.shape)}")
    channels, in_per_group, out_channels = x.shape[3], w.shape[2], w.shape[3]
    if in_per_group == 0 or channels % in_per_group or out_channels % (channels // in_per_group):
        raise ValueError(f"conv2d: input depth {channels} is not a multiple of the filters' input depth "
                         f"{in_per_group} (or output depth {out_channels} is not divisible by the groups)")
    s = _per_spatial(strides, 2, "strides", 4)
    d = _per_spatial(dilations, 2, "dilations", 4)
    pads = _padding(padding, x.shape[1:3], w.shape[0:2], s, d, "conv2d")
    spec = ((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
    return emit(name or "Conv2D", lambda: hlo.convolution(
        x.value, w.value, spec, strides=s, padding=pads, lhs_dilation=[1, 1], rhs_dilation=d,
        feature_group_count=channels // in_per_group))


def _pool(kind: str, input, ksize, strides, padding, data_format, name: str) -> Tensor:  # noqa: A002
    _check_nhwc(data_format, name)
    x = convert_to_tensor(input)
    require(x, name, numeric=True)
    if x.ndim != 4:
        raise ValueError(f"{name}: input must be NHWC (rank 4), got shape {tuple(x.shape)}")
    k = _per_spatial(ksize, 2, "ksize", 4)
    s = _per_spatial(strides, 2, "strides", 4)
    pads = [(0, 0)] + _padding(padding, x.shape[1:3], k, s, [1, 1], name) + [(0, 0)]
    window, stride = [1, *k, 1], [1, *s, 1]
    scalar = tensor_type([], element(x.dtype))

    def build():
        init = hlo.splat(hlo.reduce_init(kind, element(x.dtype)), scalar)
        pooled = hlo.reduce_window(x.value, init, kind, window, stride, pads, [1] * 4, [1] * 4)
        if kind == "max":
            return pooled
        # Average over the elements inside the input (TensorFlow excludes SAME padding).
        ones = hlo.ones(x.value.type)
        counts = hlo.reduce_window(ones, hlo.zeros(scalar), "add", window, stride, pads, [1] * 4, [1] * 4)
        return hlo.divide(pooled, counts)

    return emit(name, build)


def max_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None) -> Tensor:  # noqa: A002
    return _pool("max", input, ksize, strides, padding, data_format, name or "MaxPool2d")


def avg_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None) -> Tensor:  # noqa: A002
    x = convert_to_tensor(input)
    require(x, "avg_pool2d", floating=True)
    return _pool("add", x, ksize, strides, padding, data_format, name or "AvgPool2D")


