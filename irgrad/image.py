"""``ig.image``: image ops (NHWC, TensorFlow 2 semantics)."""
from __future__ import annotations

import numpy as np

from . import dtypes
from .framework import Tensor
from .ops.array_ops import constant, expand_dims, gather, squeeze
from .ops.core import convert_to_tensor
from .ops.math_ops import add, cast, multiply, subtract

_METHODS = ("bilinear", "nearest")


class ResizeMethod:
    """The ``method`` names ``ig.image.resize`` takes (TensorFlow's ``tf.image.ResizeMethod``)."""

    BILINEAR = "bilinear"
    NEAREST_NEIGHBOR = "nearest"


def _bilinear_weights(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TensorFlow's half-pixel-centre interpolation for one axis, in float32 as its kernel
    computes it: (lower index, upper index, weight of the upper)."""
    scale = np.float32(n_in) / np.float32(n_out)
    at = (np.arange(n_out, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5)
    below = np.floor(at)
    lower = np.maximum(below.astype(np.int64), 0)
    upper = np.minimum(np.ceil(at).astype(np.int64), n_in - 1)
    return lower.astype(np.int32), upper.astype(np.int32), (at - below).astype(np.float32)


def _nearest_index(n_in: int, n_out: int) -> np.ndarray:
    """TensorFlow's half-pixel-centre nearest neighbour: ``min(floor((i + 0.5) * scale), n - 1)``."""
    scale = np.float32(n_in) / np.float32(n_out)
    at = np.floor((np.arange(n_out, dtype=np.float32) + np.float32(0.5)) * scale).astype(np.int64)
    return np.clip(at, 0, n_in - 1).astype(np.int32)


def _lerp(x: Tensor, n_out: int, axis: int) -> Tensor:
    lower, upper, weight = _bilinear_weights(x.shape[axis], n_out)
    lo = gather(x, constant(lower), axis=axis)
    hi = gather(x, constant(upper), axis=axis)
    shape = [1] * x.ndim
    shape[axis] = n_out
    return add(lo, multiply(subtract(hi, lo), constant(weight.reshape(shape))))


def resize(images, size, method=ResizeMethod.BILINEAR, preserve_aspect_ratio=False, antialias=False,
           name=None) -> Tensor:
    """``images`` (``[batch, h, w, c]`` or ``[h, w, c]``) resized to ``size = [new_h, new_w]``:
    TensorFlow 2's ``tf.image.resize``, half-pixel centres.

    ``method``: ``"bilinear"`` (the result is float32, whatever the input's dtype, as
    TensorFlow's) or ``"nearest"`` (the input's dtype). The sample positions and weights are
    TensorFlow's, computed when tracing; the resize is gathers of rows and columns (bilinear:
    the width first, then the height, as TensorFlow's kernel mixes them).

    Raises:
        ValueError: another method, ``antialias`` or ``preserve_aspect_ratio`` (not supported),
            or a ``size`` that is not two positive ints.

    Gradient (TensorFlow's ``ResizeBilinearGrad`` / ``ResizeNearestNeighborGrad``): each output's
    cotangent added back to the pixels it was read from, with the same weights (cast back to
    the input's float dtype).
    """
    method = str(method).lower()
    if method not in _METHODS:
        raise ValueError(f"resize: method must be one of {_METHODS}, got {method!r}")
    if antialias or preserve_aspect_ratio:
        raise ValueError("resize: antialias and preserve_aspect_ratio are not supported")
    x = convert_to_tensor(images)
    if x.ndim not in (3, 4):
        raise ValueError(f"resize: images must be [batch, h, w, c] or [h, w, c], got shape {tuple(x.shape)}")
    if not x.shape.is_fully_defined:
        raise ValueError(f"resize: needs a static shape, got {tuple(x.shape)}")
    new = [int(v) for v in (size.tolist() if isinstance(size, np.ndarray) else size)]
    if len(new) != 2 or min(new) <= 0:
        raise ValueError(f"resize: size must be two positive ints, got {new}")
    single = x.ndim == 3
    if single:
        x = expand_dims(x, 0)
    if method == "nearest":
        out = gather(gather(x, constant(_nearest_index(x.shape[1], new[0])), axis=1),
                     constant(_nearest_index(x.shape[2], new[1])), axis=2)
    else:
        if x.dtype != dtypes.float32:
            if x.dtype.is_bool:
                raise TypeError("resize: bilinear resizing of bool images is not defined")
            x = cast(x, dtypes.float32)
        out = _lerp(_lerp(x, new[1], 2), new[0], 1)
    if single:
        out = squeeze(out, [0])
    return out


__all__ = ["ResizeMethod", "resize"]
