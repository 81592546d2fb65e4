"""``ig.nn``: activations, softmax losses, NHWC convolution and pooling (TensorFlow semantics)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..framework import Tensor
from ..passes.ir import hlo
from ..passes.ir.mlir import tensor_type
from ..passes.rules.composites import RELU
from .. import dtypes
from .array_ops import (_constant_value, broadcast_to, concat, gather, ones_like, stop_gradient,
                        unary_composite, zeros_like)
from .core import constant_tensor, convert_to_tensor, element, emit, normalize_axis, require, stack
from .math_ops import (add, cast, divide, exp, greater, greater_equal, less, log, log1p, maximum, minimum, multiply,
                       negative, rsqrt, sqrt, subtract, where)
from .math_ops import pow as pow_
from .reduce_ops import reduce_max, reduce_mean, reduce_sum


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


def _layout(n: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Convolution dimension numbers for channels-last input/output and [*spatial, I, O] filters."""
    io = (0, n + 1, *range(1, n + 1))
    return io, (n + 1, n, *range(n)), io


def _conv(x: Tensor, w: Tensor, n: int, strides, padding, dilations, name: str) -> Tensor:
    """An ``n``-D convolution of channels-last ``x`` with ``[*spatial, in / groups, out]`` filters."""
    if x.ndim != n + 2 or w.ndim != n + 2:
        raise ValueError(f"{name}: input must have rank {n + 2} (channels last) and filters rank {n + 2}, got "
                         f"shapes {tuple(x.shape)} and {tuple(w.shape)}")
    channels, in_per_group, out_channels = x.shape[-1], w.shape[-2], w.shape[-1]
    if in_per_group == 0 or channels % in_per_group or out_channels % (channels // in_per_group):
        raise ValueError(f"{name}: input depth {channels} is not a multiple of the filters' input depth "
                         f"{in_per_group} (or output depth {out_channels} is not divisible by the groups)")
    s = _per_spatial(strides, n, "strides", n + 2)
    d = _per_spatial(dilations, n, "dilations", n + 2)
    pads = _padding(padding, x.shape[1:-1], w.shape[:-2], s, d, name)
    return emit(name, lambda: hlo.convolution(
        x.value, w.value, _layout(n), strides=s, padding=pads, lhs_dilation=[1] * n, rhs_dilation=d,
        feature_group_count=channels // in_per_group))


def conv2d(input, filters, strides, padding, data_format="NHWC", dilations=None, name=None) -> Tensor:  # noqa: A002
    """2-D convolution of NHWC ``input`` with HWIO ``filters`` (groups when I divides the channels)."""
    _check_nhwc(data_format, "conv2d")
    return _conv(convert_to_tensor(input), _filters(input, filters), 2, strides, padding, dilations, name or "Conv2D")


def _filters(input, filters) -> Tensor:  # noqa: A002
    return convert_to_tensor(filters, convert_to_tensor(input).dtype)


def conv1d(input, filters, stride, padding, data_format="NWC", dilations=None, name=None) -> Tensor:  # noqa: A002
    """1-D convolution of ``[batch, width, in]`` ``input`` with ``[width, in, out]`` ``filters``:
    TensorFlow's ``tf.nn.conv1d`` (``stride`` an int or a list of 1 or 3; padding ``"SAME"``,
    ``"VALID"`` or explicit pairs). One ``stablehlo.convolution``.

    Gradient (TensorFlow's, through ``Conv2D``): the transposed convolutions of ``ct``.
    """
    _check_nhwc(data_format, "conv1d")
    return _conv(convert_to_tensor(input), _filters(input, filters), 1, stride, padding, dilations, name or "conv1d")


def conv3d(input, filters, strides, padding, data_format="NDHWC", dilations=None, name=None) -> Tensor:  # noqa: A002
    """3-D convolution of NDHWC ``input`` with ``[d, h, w, in, out]`` ``filters``: TensorFlow's
    ``tf.nn.conv3d`` (``strides``: an int, 3 ints, or 5 with batch and channel 1).

    Gradient (TensorFlow's ``Conv3D``): the transposed convolutions of ``ct``.
    """
    _check_nhwc(data_format, "conv3d")
    return _conv(convert_to_tensor(input), _filters(input, filters), 3, strides, padding, dilations, name or "Conv3D")


def conv2d_transpose(input, filters, output_shape, strides, padding="SAME", data_format="NHWC",  # noqa: A002
                     dilations=None, name=None) -> Tensor:
    """The transpose (gradient) of ``conv2d``: TensorFlow's ``tf.nn.conv2d_transpose``.

    ``input`` is NHWC, ``filters`` ``[h, w, out, in]`` (``conv2d``'s filters for the forward
    convolution from ``output_shape`` to ``input``), ``output_shape`` the static NHWC shape of
    the result: the convolution of that shape with ``filters``, ``strides`` and ``padding``
    must give ``input``'s spatial size. One ``stablehlo.convolution`` with ``lhs_dilation``
    (the strides) and the filters reversed.

    Gradient (TensorFlow's ``Conv2DBackpropInput``): ``conv2d`` of ``ct`` to ``input``, the
    filter gradient to ``filters``.
    """
    _check_nhwc(data_format, "conv2d_transpose")
    name = name or "conv2d_transpose"
    x = convert_to_tensor(input)
    w = _filters(x, filters)
    require(x, name, floating=True)
    if isinstance(output_shape, Tensor):
        value = _constant_value(output_shape)
        if value is None:
            raise TypeError(f"{name}: output_shape must be static (Python ints or a constant)")
        output_shape = value.tolist()
    out = [int(v) for v in output_shape]
    if x.ndim != 4 or w.ndim != 4 or len(out) != 4:
        raise ValueError(f"{name}: input and output_shape must be NHWC (rank 4) and filters [h, w, out, in], got "
                         f"{tuple(x.shape)}, {out} and {tuple(w.shape)}")
    if x.shape[3] != w.shape[3] or out[3] != w.shape[2] or out[0] != x.shape[0]:
        raise ValueError(f"{name}: filters {tuple(w.shape)} take {w.shape[3]} input and give {w.shape[2]} output "
                         f"channels; input {tuple(x.shape)} and output_shape {out} disagree")
    s = _per_spatial(strides, 2, "strides", 4)
    d = _per_spatial(dilations, 2, "dilations", 4)
    pads = _padding(padding, out[1:3], w.shape[0:2], s, d, name)
    tpads = []
    for i in range(2):
        k = (w.shape[i] - 1) * d[i] + 1
        lo, hi = pads[i]
        m = hlo.window_output(out[i + 1], w.shape[i], s[i], lo, hi, 1, d[i])
        if m != x.shape[i + 1]:
            raise ValueError(f"{name}: a convolution of output_shape {out} with these filters, strides and padding "
                             f"gives spatial size {m} in dimension {i + 1}, but input has {x.shape[i + 1]}")
        rest = out[i + 1] + lo + hi - k - (m - 1) * s[i]
        tpads.append((k - 1 - lo, k - 1 - hi + rest))
    spec = ((0, 3, 1, 2), (2, 3, 0, 1), (0, 3, 1, 2))
    return emit(name, lambda: hlo.convolution(
        x.value, hlo.reverse(w.value, [0, 1]), spec, strides=[1, 1], padding=tpads, lhs_dilation=s,
        rhs_dilation=d))


def depthwise_conv2d(input, filter, strides, padding, data_format=None, dilations=None, name=None) -> Tensor:  # noqa: A002
    """Each input channel convolved with its own ``channel_multiplier`` filters: TensorFlow's
    ``tf.nn.depthwise_conv2d`` (NHWC ``input``, ``filter`` ``[h, w, in, multiplier]``; output
    channel ``k * multiplier + j``).

    Lowered as the sum over the ``h * w`` filter taps of a strided slice of the padded input
    times that tap's weights (elementwise ops IREE fuses), not as a grouped
    ``stablehlo.convolution``: IREE 3.13 miscompiles the grouped convolution's filter gradient
    on Vulkan and fails to compile some small strided ones on the CPU.

    Gradient (TensorFlow's ``DepthwiseConv2dNative``, the same numbers): each tap's slice
    cotangent padded back to the input, and the tap's weights' cotangent summed over the batch
    and the positions.
    """
    _check_nhwc(data_format, "depthwise_conv2d")
    name = name or "depthwise"
    x = convert_to_tensor(input)
    w = _filters(x, filter)
    if x.ndim != 4 or w.ndim != 4 or w.shape[2] != x.shape[3]:
        raise ValueError(f"{name}: input must be NHWC and filter [h, w, {x.shape[-1] if x.ndim else '?'}, "
                         f"multiplier], got {tuple(x.shape)} and {tuple(w.shape)}")
    if not x.shape.is_fully_defined:
        raise ValueError(f"{name}: needs a static shape, got {tuple(x.shape)}")
    s = _per_spatial(strides, 2, "strides", 4)
    d = _per_spatial(dilations, 2, "dilations", 4)
    pads = _padding(padding, x.shape[1:3], w.shape[0:2], s, d, name)
    b, c, m = x.shape[0], x.shape[3], w.shape[3]
    out = [hlo.window_output(x.shape[1 + i], w.shape[i], s[i], *pads[i], 1, d[i]) for i in range(2)]
    full = [b, *out, c, m]

    def build():
        zero = hlo.zeros(tensor_type([], element(x.dtype)))
        xp = hlo.pad_or_crop(x.value, zero, [0, pads[0][0], pads[1][0], 0], [0, pads[0][1], pads[1][1], 0],
                             [0] * 4)
        total = None
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                start = [0, i * d[0], j * d[1], 0]
                limit = [b, start[1] + (out[0] - 1) * s[0] + 1, start[2] + (out[1] - 1) * s[1] + 1, c]
                window = hlo.slice(xp, start, limit, [1, *s, 1])
                tap = hlo.reshape(hlo.slice(w.value, [i, j, 0, 0], [i + 1, j + 1, c, m], [1] * 4), [c, m])
                term = hlo.multiply(hlo.broadcast_in_dim(window, full, [0, 1, 2, 3]),
                                    hlo.broadcast_in_dim(tap, full, [3, 4]))
                total = term if total is None else hlo.add(total, term)
        return hlo.reshape(total, [b, *out, c * m])

    if min(out) <= 0:
        raise ValueError(f"{name}: the filter {tuple(w.shape)} does not fit the padded input {tuple(x.shape)}")
    return emit(name, build)


def separable_conv2d(input, depthwise_filter, pointwise_filter, strides, padding, data_format=None,  # noqa: A002
                     dilations=None, name=None) -> Tensor:
    """A depthwise convolution then a 1x1 convolution mixing the channels: TensorFlow's
    ``tf.nn.separable_conv2d`` (``pointwise_filter`` ``[1, 1, in * multiplier, out]``).

    Gradient: through the two convolutions.
    """
    _check_nhwc(data_format, "separable_conv2d")
    depthwise = depthwise_conv2d(input, depthwise_filter, strides, padding, dilations=dilations)
    p = _filters(depthwise, pointwise_filter)
    if p.ndim != 4 or p.shape[0] != 1 or p.shape[1] != 1:
        raise ValueError(f"separable_conv2d: pointwise_filter must be [1, 1, in, out], got {tuple(p.shape)}")
    return _conv(depthwise, p, 2, 1, "VALID", None, name or "separable_conv2d")


def bias_add(value, bias, data_format=None, name=None) -> Tensor:
    """``value + bias`` with the 1-D ``bias`` along the channel dimension: the last one
    (``data_format`` ``None`` or ``"N...C"``) or the second (``"NC..."``): TensorFlow's
    ``tf.nn.bias_add``.

    Gradient (TensorFlow's ``BiasAddGrad``): ``ct`` to ``value``, ``ct`` summed over every other
    dimension to ``bias``.
    """
    name = name or "BiasAdd"
    x = convert_to_tensor(value)
    b = convert_to_tensor(bias, x.dtype)
    require(x, name, numeric=True)
    if b.ndim != 1 or x.ndim < 2:
        raise ValueError(f"{name}: bias must be 1-D and value at least 2-D, got {tuple(b.shape)} and "
                         f"{tuple(x.shape)}")
    channel = 1 if data_format is not None and str(data_format).startswith("NC") else x.ndim - 1
    if b.shape[0] != x.shape[channel]:
        raise ValueError(f"{name}: bias of size {b.shape[0]} for {x.shape[channel]} channels (dimension {channel} "
                         f"of {tuple(x.shape)})")
    if not x.shape.is_fully_defined:
        raise ValueError(f"{name}: needs a static shape, got {tuple(x.shape)}")
    return emit(name, lambda: hlo.add(x.value, hlo.broadcast_in_dim(b.value, list(x.shape), [channel])))


def _pool(kind: str, input, ksize, strides, padding, data_format, name: str, n: int = 2,  # noqa: A002
          dilations=None) -> Tensor:
    _check_nhwc(data_format, name)
    x = convert_to_tensor(input)
    require(x, name, numeric=True)
    if x.ndim != n + 2:
        raise ValueError(f"{name}: input must have rank {n + 2} (channels last), got shape {tuple(x.shape)}")
    k = _per_spatial(ksize, n, "ksize", n + 2)
    s = _per_spatial(strides, n, "strides", n + 2)
    d = _per_spatial(dilations, n, "dilations", n + 2)
    pads = [(0, 0)] + _padding(padding, x.shape[1:-1], k, s, d, name) + [(0, 0)]
    window, stride, dilation = [1, *k, 1], [1, *s, 1], [1, *d, 1]
    scalar = tensor_type([], element(x.dtype))
    ones = [1] * (n + 2)

    def build():
        init = hlo.splat(hlo.reduce_init(kind, element(x.dtype)), scalar)
        pooled = hlo.reduce_window(x.value, init, kind, window, stride, pads, ones, dilation)
        if kind == "max":
            return pooled
        # Average over the elements inside the input (TensorFlow excludes SAME padding).
        counts = hlo.reduce_window(hlo.ones(x.value.type), hlo.zeros(scalar), "add", window, stride, pads, ones,
                                   dilation)
        return hlo.divide(pooled, counts)

    return emit(name, build)


def max_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None) -> Tensor:  # noqa: A002
    return _pool("max", input, ksize, strides, padding, data_format, name or "MaxPool2d")


def avg_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None) -> Tensor:  # noqa: A002
    x = convert_to_tensor(input)
    require(x, "avg_pool2d", floating=True)
    return _pool("add", x, ksize, strides, padding, data_format, name or "AvgPool2D")


def max_pool1d(input, ksize, strides, padding, data_format="NWC", name=None) -> Tensor:  # noqa: A002
    """The maximum of each window of ``[batch, width, channels]`` ``input``: TensorFlow's
    ``tf.nn.max_pool1d``. One ``stablehlo.reduce_window``.

    Gradient (TensorFlow's ``MaxPoolGrad``): ``ct`` to the first maximum of each window.
    """
    return _pool("max", input, ksize, strides, padding, data_format, name or "MaxPool1d", n=1)


def avg_pool1d(input, ksize, strides, padding, data_format="NWC", name=None) -> Tensor:  # noqa: A002
    """The mean of each window of ``[batch, width, channels]`` ``input`` (SAME padding left out
    of the count): TensorFlow's ``tf.nn.avg_pool1d``.

    Gradient (TensorFlow's ``AvgPoolGrad``): ``ct`` spread evenly over each window.
    """
    x = convert_to_tensor(input)
    require(x, "avg_pool1d", floating=True)
    return _pool("add", x, ksize, strides, padding, data_format, name or "AvgPool1D", n=1)


def pool(input, window_shape, pooling_type, strides=None, padding="VALID", data_format=None,  # noqa: A002
         dilations=None, name=None) -> Tensor:
    """N-D max or average pooling (``pooling_type`` ``"MAX"`` or ``"AVG"``) over the spatial
    dimensions of channels-last ``input``: TensorFlow's ``tf.nn.pool``. ``window_shape``,
    ``strides`` and ``dilations`` hold one int per spatial dimension.

    Gradient: as ``max_pool1d`` / ``avg_pool1d``.
    """
    x = convert_to_tensor(input)
    n = x.ndim - 2
    if n < 1:
        raise ValueError(f"pool: input must have rank >= 3 (channels last), got shape {tuple(x.shape)}")
    kind = {"MAX": "max", "AVG": "add"}.get(str(pooling_type).upper())
    if kind is None:
        raise ValueError(f"pool: pooling_type must be 'MAX' or 'AVG', got {pooling_type!r}")
    if kind == "add":
        require(x, "pool", floating=True)
    if len(list(window_shape)) != n:
        raise ValueError(f"pool: window_shape {list(window_shape)} needs {n} entries")
    return _pool(kind, x, list(window_shape), strides, padding, data_format, name or "pool", n=n,
                 dilations=dilations)


# ----- norms (TensorFlow's clip_ops) -------------------------------------------------------------

def clip_by_norm(t, clip_norm, axes=None, name=None) -> Tensor:
    """``t * clip_norm / max(l2norm(t), clip_norm)``, the L2 norm over ``axes`` (all by
    default): TensorFlow's ``tf.clip_by_norm``, written as TensorFlow writes it (a zero norm
    takes a safe branch, so its gradient is finite).

    Gradient: through that composition, as TensorFlow's; at ``l2norm == clip_norm`` the tie
    goes to the norm (``maximum``'s convention).
    """
    values = convert_to_tensor(t)
    require(values, "clip_by_norm", floating=True)
    if isinstance(clip_norm, (int, float, np.integer, np.floating)):
        clip = constant_tensor(max(float(clip_norm), 0.0), values.dtype)
    else:
        clip = maximum(convert_to_tensor(clip_norm, values.dtype), constant_tensor(0, values.dtype))
    if clip.ndim:
        raise ValueError(f"clip_by_norm: clip_norm must be a scalar, got shape {tuple(clip.shape)}")
    l2sum = reduce_sum(multiply(values, values), axes, keepdims=True)
    pred = greater(l2sum, 0)
    l2sum_safe = where(pred, l2sum, ones_like(l2sum))
    l2norm = where(pred, sqrt(l2sum_safe), l2sum)
    return divide(multiply(values, clip), maximum(l2norm, clip), name=name or "clip_by_norm")


def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None) -> tuple[list, Tensor]:
    """Every tensor of ``t_list`` scaled by ``clip_norm / max(global_norm, clip_norm)``:
    TensorFlow's ``tf.clip_by_global_norm``. Returns ``(clipped list, global_norm)``; ``None``
    entries stay ``None``. The global norm is ``sqrt(sum of every squared entry)`` unless
    ``use_norm`` gives it; an infinite or NaN norm makes every entry NaN, as in TensorFlow.

    Gradient: through that composition, as TensorFlow's.
    """
    if isinstance(t_list, Tensor) or not isinstance(t_list, (list, tuple)):
        raise TypeError("clip_by_global_norm: t_list must be a list of tensors")
    values = [convert_to_tensor(v) if v is not None else None for v in t_list]
    present = [v for v in values if v is not None]
    if use_norm is None:
        if not present:
            raise ValueError("clip_by_global_norm: t_list holds no tensor")
        halves = [multiply(reduce_sum(multiply(v, v)), constant_tensor(0.5, v.dtype)) for v in present]
        use_norm = sqrt(multiply(reduce_sum(stack(halves)), constant_tensor(2.0, halves[0].dtype)),
                        name="global_norm")
    use_norm = convert_to_tensor(use_norm)
    clip = convert_to_tensor(clip_norm, use_norm.dtype)
    one = constant_tensor(1.0, use_norm.dtype)
    scale_for_finite = multiply(clip, minimum(divide(one, use_norm), divide(one, clip)))
    scale = add(scale_for_finite, subtract(use_norm, use_norm))
    clipped = [multiply(v, cast(scale, v.dtype), name=f"{name or 'clip_by_global_norm'}_{i}") if v is not None
               else None for i, v in enumerate(values)]
    return clipped, use_norm





# ----- normalization ---------------------------------------------------------------------------

def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, name=None) -> Tensor:
    """``(x - mean) * scale / sqrt(variance + variance_epsilon) + offset``, broadcasting like
    numpy: TensorFlow's ``tf.nn.batch_normalization``, computed as TensorFlow writes it
    (``inv = rsqrt(variance + eps) * scale``; ``x * inv + (offset - mean * inv)``). ``offset``
    and ``scale`` may be ``None``.

    Gradient: through that composition (TensorFlow's), to every input.
    """
    x = convert_to_tensor(x)
    require(x, "batch_normalization", floating=True)
    mean, variance = convert_to_tensor(mean, x.dtype), convert_to_tensor(variance, x.dtype)
    inv = rsqrt(add(variance, convert_to_tensor(variance_epsilon, x.dtype)))
    if scale is not None:
        inv = multiply(inv, convert_to_tensor(scale, x.dtype))
    shift = negative(multiply(mean, inv)) if offset is None else subtract(convert_to_tensor(offset, x.dtype),
                                                                          multiply(mean, inv))
    return add(multiply(x, inv), shift, name=name or "batchnorm")


def fused_batch_norm(x, scale, offset, mean=None, variance=None, epsilon=0.001, data_format="NHWC",
                     is_training=True, name=None, exponential_avg_factor=1.0) -> tuple[Tensor, Tensor, Tensor]:
    """Batch normalization over every dimension but the last (channels) of a 4-D or 5-D
    ``x``: TensorFlow's ``tf.compat.v1.nn.fused_batch_norm``. Returns ``(y, mean, variance)``.

    Training (``is_training=True``): ``y`` normalizes with the batch's mean and (biased)
    variance; the returned statistics are the running ones TensorFlow returns:
    ``(1 - f) * mean + f * batch_mean`` and the same of the batch's unbiased (n / (n - 1))
    variance, ``f = exponential_avg_factor`` (``mean`` and ``variance`` are needed only when
    ``f != 1``). Inference: ``y`` normalizes with ``mean`` and ``variance``, returned as given.
    ``x`` may be float16 or bfloat16 (computed in float32, as TensorFlow does); ``scale``,
    ``offset``, ``mean`` and ``variance`` are float32.

    Gradient (TensorFlow's ``FusedBatchNormGradV3``): to ``x`` (through the batch statistics in
    training), ``scale`` and ``offset``; none to ``mean`` and ``variance``, and none from the
    returned statistics.
    """
    name = name or "FusedBatchNormV3"
    if data_format not in ("NHWC", "NDHWC", None):
        raise ValueError(f"{name}: only channels-last data_format (NHWC, NDHWC) is supported, got {data_format!r}")
    x = convert_to_tensor(x)
    if x.ndim not in (4, 5):
        raise ValueError(f"{name}: x must have rank 4 or 5, got shape {tuple(x.shape)}")
    if x.dtype.name not in ("float32", "float16", "bfloat16"):
        raise TypeError(f"{name}: x must be float32, float16 or bfloat16 (as TensorFlow's kernel), got "
                        f"{x.dtype.name}")
    xf = cast(x, "float32")
    scale, offset = convert_to_tensor(scale, "float32"), convert_to_tensor(offset, "float32")
    f = float(exponential_avg_factor)
    if (not is_training or f != 1.0) and (mean is None or variance is None):
        raise ValueError(f"{name}: mean and variance are needed when is_training is False or "
                         "exponential_avg_factor != 1")
    axes = list(range(x.ndim - 1))
    eps = constant_tensor(epsilon, dtypes.float32)
    if is_training:
        batch_mean = reduce_mean(xf, axes)
        centered = subtract(xf, batch_mean)
        batch_var = reduce_mean(multiply(centered, centered), axes)
        y = add(multiply(multiply(centered, rsqrt(add(batch_var, eps))), scale), offset)
        n = x.shape.num_elements() // x.shape[-1]
        unbiased = multiply(batch_var, constant_tensor(n / max(n - 1, 1), dtypes.float32))
        if f != 1.0:
            keep = constant_tensor(1.0 - f, dtypes.float32)
            ff = constant_tensor(f, dtypes.float32)
            batch_mean = add(multiply(keep, convert_to_tensor(mean, "float32")), multiply(ff, batch_mean))
            unbiased = add(multiply(keep, convert_to_tensor(variance, "float32")), multiply(ff, unbiased))
        running_mean, running_var = stop_gradient(batch_mean), stop_gradient(unbiased)
    else:
        running_mean = stop_gradient(convert_to_tensor(mean, "float32"))
        running_var = stop_gradient(convert_to_tensor(variance, "float32"))
        y = add(multiply(multiply(subtract(xf, running_mean), rsqrt(add(running_var, eps))), scale), offset)
    return cast(y, x.dtype, name=name), running_mean, running_var


def local_response_normalization(input, depth_radius=5, bias=1.0, alpha=1.0, beta=0.5, name=None) -> Tensor:  # noqa: A002
    """``input / (bias + alpha * sqr_sum) ** beta`` with ``sqr_sum`` the sum of squares over the
    ``2 * depth_radius + 1`` channels around each one: TensorFlow's
    ``tf.nn.local_response_normalization`` (4-D NHWC ``input``). The window sum is one
    ``stablehlo.reduce_window``.

    Gradient (TensorFlow's ``LRNGrad``, the exact derivative): through that composition.
    """
    name = name or "LRN"
    x = convert_to_tensor(input)
    require(x, name, floating=True)
    if x.ndim != 4:
        raise ValueError(f"{name}: input must be 4-D (NHWC), got shape {tuple(x.shape)}")
    r = int(depth_radius)
    sq = multiply(x, x)
    scalar = tensor_type([], element(x.dtype))
    window = [1, 1, 1, 2 * r + 1]
    sqr_sum = emit(name, lambda: hlo.reduce_window(sq.value, hlo.zeros(scalar), "add", window, [1] * 4,
                                                   [(0, 0), (0, 0), (0, 0), (r, r)], [1] * 4, [1] * 4))
    denom = pow_(add(constant_tensor(bias, x.dtype), multiply(constant_tensor(alpha, x.dtype), sqr_sum)),
                 constant_tensor(beta, x.dtype))
    return divide(x, denom, name=name)



def embedding_lookup(params, ids, max_norm=None, name=None) -> Tensor:
    """The rows of ``params`` at integer ``ids``: TensorFlow's ``tf.nn.embedding_lookup``; the
    result has shape ``ids.shape + params.shape[1:]``.

    ``params`` is a tensor or a list of shards split along the first dimension as
    TensorFlow's ``"div"`` strategy splits (the first ``rows % shards`` shards one row
    longer): the lookup is in their concatenation. With ``max_norm`` each row found is
    clipped to that L2 norm (``clip_by_norm``).

    Gradient (TensorFlow's ``GatherV2``): ``ct`` scatter-added into the rows; none to ``ids``.
    """
    name = name or "embedding_lookup"
    if isinstance(params, (list, tuple)):
        shards = [convert_to_tensor(p) for p in params]
        if not shards:
            raise ValueError(f"{name}: params is an empty list")
        total = sum(p.shape[0] for p in shards)
        want = [total // len(shards) + (1 if i < total % len(shards) else 0) for i in range(len(shards))]
        if [p.shape[0] for p in shards] != want:
            raise ValueError(f"{name}: shards of {[p.shape[0] for p in shards]} rows are not TensorFlow's 'div' "
                             f"split of {total} rows ({want})")
        table = concat(shards, 0)
    else:
        table = convert_to_tensor(params)
    rows = gather(table, ids, name=name)
    if max_norm is None:
        return rows
    axes = list(range(convert_to_tensor(ids).ndim, rows.ndim))
    return clip_by_norm(rows, max_norm, axes=axes or None)


# ----- dropout ---------------------------------------------------------------------------------

def _mix(h: hlo.Value) -> hlo.Value:
    """A 32-bit integer hash (Wellons' "lowbias32"): every output bit depends on every input bit."""
    def shifted(v, k):
        return hlo.binary("stablehlo.xor", v, hlo.binary("stablehlo.shift_right_logical", v, hlo.splat(k, v.type)))
    h = hlo.multiply(shifted(h, 16), hlo.splat(0x7FEB352D, h.type))
    h = hlo.multiply(shifted(h, 15), hlo.splat(0x846CA68B - (1 << 32), h.type))
    return shifted(h, 16)


def dropout(x, rate, noise_shape=None, seed=None, name=None) -> Tensor:
    """Each element of ``x`` zeroed with probability ``rate``, the others scaled by
    ``1 / (1 - rate)``: TensorFlow's ``tf.nn.dropout``. ``noise_shape`` (broadcasting to ``x``)
    shares one draw among the elements it broadcasts over.

    ``seed`` is required: a Python int or an integer scalar tensor (pass a new one each step,
    e.g. the step counter, for fresh masks: the mask is a pure function of the seed and the
    position). The bits come from a counter-based hash of (seed, position) computed in the
    module (no state, same mask on every target), not from TensorFlow's Philox: the mask is
    not TensorFlow's for the same seed, only its distribution is.

    Gradient (TensorFlow's, through its ``SelectV2``): ``ct / (1 - rate)`` where kept, 0
    elsewhere; none to ``seed``.
    """
    name = name or "dropout"
    x = convert_to_tensor(x)
    require(x, name, floating=True)
    if seed is None:
        raise ValueError(f"{name}: irgrad's dropout needs a seed (a Python int or an integer tensor): its mask is "
                         "a function of the seed, so pass a different one each step for fresh masks")
    rate = float(rate)
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"{name}: rate must be in [0, 1), got {rate}")
    if not x.shape.is_fully_defined:
        raise ValueError(f"{name}: needs a static shape, got {tuple(x.shape)}")
    shape = list(x.shape) if noise_shape is None else [int(d) for d in noise_shape]
    if len(shape) != x.ndim or any(d not in (1, n) for d, n in zip(shape, x.shape)):
        raise ValueError(f"{name}: noise_shape {shape} does not broadcast to {tuple(x.shape)}")
    s = convert_to_tensor(seed)
    if not s.dtype.is_integer or s.ndim:
        raise TypeError(f"{name}: seed must be an integer scalar, got {s.dtype.name} {tuple(s.shape)}")
    s = cast(s, "int32")
    size = 1
    for d in shape:
        size *= d

    def build():
        ty = tensor_type([size], element(dtypes.int32))
        key = _mix(hlo.broadcast_in_dim(_mix(hlo.add(s.value, hlo.splat(0x3C6EF372, s.value.type))), [size], []))
        bits = _mix(hlo.binary("stablehlo.xor", hlo.iota([size], element(dtypes.int32), 0), key))
        bits = _mix(hlo.add(bits, key))
        top = hlo.binary("stablehlo.shift_right_logical", bits, hlo.splat(8, ty))
        unit = hlo.splat(2.0 ** -24, tensor_type([size], "float32"))
        u = hlo.multiply(hlo.convert(top, element(dtypes.float32)), unit)
        return hlo.reshape(u, shape)

    uniform = emit(name, build)
    keep = greater_equal(uniform, constant_tensor(rate, dtypes.float32))
    keep = broadcast_to(keep, list(x.shape))
    scaled = multiply(x, constant_tensor(1.0 / (1.0 - rate), x.dtype))
    return where(keep, scaled, zeros_like(scaled), name=name)
