"""Window patches ("im2col") and their transpose ("col2im"), the building blocks of the
matmul formulations of convolutions and of pooling gradients (see ``choices.py``).

A window op reads, for output position ``o`` and window offset ``k`` (a multi-index
over every axis; batch and feature axes have a window of 1), the element
``xp[o * stride + k * dilation]`` of the operand padded as the op pads it (``xp``).

* ``patches(x, ...)`` gathers those elements into one tensor: the output shape with
  one extra axis of size ``prod(window)`` (offsets in row-major order) inserted at
  ``axis``. It is a pad and ``prod(window)`` strided slices: no gather, no zeros
  multiplied, and a matmul against it is a plain ``dot_general``.
* ``col2im(y, ...)`` is its adjoint: the sum, for every element of ``x``, of the
  entries of ``y`` that read it: one term per window offset, the offset's slab of ``y``
  padded into place (interior padding ``stride - 1``, so nothing multiplies inserted
  zeros), added up. When windows do not overlap (window ≤ stride, a patch embedding or
  a 2×2 pool) the offsets interleave with the output positions: one transpose.
  Grouping overlapping offsets by stride phase (a transpose of ``y`` padded to whole
  strides, then ``ceil(window / stride)`` blocks) was measured slower: IREE 3.13 runs
  that transpose with size-2 inner axes at ~8 GB/s, and the CNN's gradient spent
  1.3 ms of 5.1 in it (per-offset terms: 4.1 ms; MobileNet 1.26 → 0.97 ms).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from . import hlo
from .mlir import elem, ir, shape, tensor_type


class Windows:
    """Window geometry over every axis of an operand: sizes, strides, (low, high) padding,
    window dilation. Lists have one entry per axis."""

    def __init__(self, window: Sequence[int], strides: Sequence[int], padding: Sequence[tuple[int, int]],
                 dilation: Sequence[int]) -> None:
        self.window, self.strides = list(window), list(strides)
        self.padding, self.dilation = [tuple(p) for p in padding], list(dilation)

    @property
    def taps(self) -> int:
        return math.prod(self.window)

    @property
    def disjoint(self) -> bool:
        """No two windows share an element, and no window skips one (window ≤ stride, no dilation)."""
        return all(k <= s and (d == 1 or k == 1) for k, s, d in zip(self.window, self.strides, self.dilation))

    def padded(self, x_shape: Sequence[int]) -> list[int]:
        return [d + lo + hi for d, (lo, hi) in zip(x_shape, self.padding)]

    def output(self, x_shape: Sequence[int]) -> list[int]:
        return [hlo.window_output(d, k, s, lo, hi, 1, dl)
                for d, k, s, (lo, hi), dl in zip(x_shape, self.window, self.strides, self.padding, self.dilation)]

    def offsets(self) -> list[tuple[int, ...]]:
        return list(itertools.product(*[range(k) for k in self.window]))


def _with_taps(v: ir.Value, axis: int) -> ir.Value:
    s = list(shape(v))
    return hlo.reshape(v, s[:axis] + [1] + s[axis:])


def patches(x: ir.Value, pad_value: ir.Value, w: Windows, axis: int) -> ir.Value:
    """``out[..o.., k, ..o..] = xp[o * stride + k * dilation]``: the taps axis at ``axis``."""
    rank, xs = len(shape(x)), shape(x)
    xp = hlo.pad(x, pad_value, [lo for lo, _ in w.padding], [hi for _, hi in w.padding], [0] * rank)
    out = w.output(xs)
    if w.disjoint:
        return _disjoint_patches(xp, pad_value, out, w, axis)
    taps = []
    for k in w.offsets():
        start = [ki * d for ki, d in zip(k, w.dilation)]
        limit = [st + (o - 1) * s + 1 if o else st for st, o, s in zip(start, out, w.strides)]
        taps.append(_with_taps(hlo.slice(xp, start, limit, w.strides), axis))
    return taps[0] if len(taps) == 1 else hlo.concatenate(taps, axis)


def _disjoint_patches(xp: ir.Value, pad_value: ir.Value, out: list[int], w: Windows, axis: int) -> ir.Value:
    """Windows that do not overlap (window ≤ stride, a patch embedding or a 2×2 pool): a
    reshape to (position, phase) pairs, a slice of each window and one transpose."""
    rank = len(out)
    full = [o * s for o, s in zip(out, w.strides)]
    grow = [max(0, f - d) for f, d in zip(full, shape(xp))]
    if any(grow):
        xp = hlo.pad(xp, pad_value, [0] * rank, grow, [0] * rank)
    xp = hlo.slice(xp, [0] * rank, full, [1] * rank)
    blocks = hlo.reshape(xp, [d for o, s in zip(out, w.strides) for d in (o, s)])
    blocks = hlo.slice(blocks, [0] * (2 * rank), [d for o, k in zip(out, w.window) for d in (o, k)],
                       [1] * (2 * rank))
    order = [2 * i for i in range(axis)] + [2 * i + 1 for i in range(rank)] + [2 * i for i in range(axis, rank)]
    return hlo.reshape(hlo.transpose(blocks, order), out[:axis] + [w.taps] + out[axis:])


def unpad(xp: ir.Value, padding: Sequence[tuple[int, int]], interior: Sequence[int] | None = None) -> ir.Value:
    """Undo ``pad(x, low, high, interior - 1)`` on a cotangent: grow where the pad cropped, then
    slice (strided by ``interior``)."""
    rank = len(padding)
    if any(lo < 0 or hi < 0 for lo, hi in padding):
        zero = hlo.zeros(tensor_type([], elem(xp)))
        xp = hlo.pad(xp, zero, [max(0, -lo) for lo, _ in padding], [max(0, -hi) for _, hi in padding], [0] * rank)
    lo = [max(0, p[0]) for p in padding]
    limit = [d - max(0, p[1]) for d, p in zip(shape(xp), padding)]
    return hlo.slice(xp, lo, limit, interior or [1] * rank)


def col2im(y: ir.Value, x_shape: Sequence[int], w: Windows, axis: int) -> ir.Value:
    """The adjoint of ``patches``: an ``x_shape`` tensor (the padding's share dropped)."""
    rank = len(x_shape)
    ys = list(shape(y))
    out = ys[:axis] + ys[axis + 1:]
    # Name every axis: ("o", i) an output position, ("k", i) a window offset along axis i.
    labels = [("o", i) for i in range(axis)] + [("k", i) for i in range(rank)] + \
             [("o", i) for i in range(axis, rank)]
    y = hlo.reshape(y, out[:axis] + list(w.window) + out[axis:])
    zero = hlo.zeros(tensor_type([], elem(y)))
    if w.disjoint:
        total = _disjoint(y, labels, out, w, w.padded(x_shape), zero)
    else:
        total = _per_offset(y, labels, out, w, w.padded(x_shape), zero)
    return unpad(total, w.padding)


def _per_offset(y: ir.Value, labels: list, out: list[int], w: Windows, xp: list[int], zero: ir.Value) -> ir.Value:
    """One interior-padded term per window offset (any dilation)."""
    rank, total = len(out), None
    ys = shape(y)
    order = [labels.index(("o", i)) for i in range(rank)]
    for k in w.offsets():
        start = [k[i] if kind == "k" else 0 for kind, i in labels]
        limit = [k[i] + 1 if kind == "k" else d for (kind, i), d in zip(labels, ys)]
        term = hlo.transpose(hlo.slice(y, start, limit, [1] * len(ys)), order + [a for a in range(len(ys))
                                                                                  if a not in order])
        term = hlo.reshape(term, out)
        low = [ki * d for ki, d in zip(k, w.dilation)]
        high = [p - lo - ((o - 1) * s + 1 if o else 0) for p, lo, o, s in zip(xp, low, out, w.strides)]
        term = hlo.pad(term, zero, low, high, [s - 1 for s in w.strides])
        total = term if total is None else hlo.add(total, term)
    return total


def _disjoint(y: ir.Value, labels: list, out: list[int], w: Windows, xp: list[int], zero: ir.Value) -> ir.Value:
    """Windows that do not overlap (window ≤ stride on every axis): offset ``k`` of output
    ``o`` lands on ``o * s + k``, so one transpose interleaves offsets with outputs."""
    rank = len(out)
    grow = [w.strides[i] - w.window[i] if kind == "k" else 0 for kind, i in labels]
    y = hlo.pad(y, zero, [0] * len(labels), grow, [0] * len(labels))
    order = [labels.index(t) for i in range(rank) for t in (("o", i), ("k", i))]
    block = hlo.reshape(hlo.transpose(y, order), [o * s for o, s in zip(out, w.strides)])
    return hlo.pad(block, zero, [0] * rank, [p - o * s for p, o, s in zip(xp, out, w.strides)], [0] * rank)
