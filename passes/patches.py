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
  entries of ``y`` that read it. Offsets are grouped by stride phase: along an axis
  with stride ``s``, offset ``k = q * s + r`` lands on ``(o + q) * s + r``, so the
  offsets sharing ``q`` interleave with the output positions into one block (a
  reshape), shifted by ``q * s``. That is ``prod(ceil(window / stride))`` shifted
  blocks added up (one block when windows do not overlap) instead of a strided
  convolution over inserted zeros. With a window dilation it falls back to one
  interior-padded term per offset.
"""
from __future__ import annotations

import itertools
import math
from typing import Sequence

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
    taps = []
    for k in w.offsets():
        start = [ki * d for ki, d in zip(k, w.dilation)]
        limit = [st + (o - 1) * s + 1 if o else st for st, o, s in zip(start, out, w.strides)]
        taps.append(_with_taps(hlo.slice(xp, start, limit, w.strides), axis))
    return taps[0] if len(taps) == 1 else hlo.concatenate(taps, axis)


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
    out, taps = ys[:axis] + ys[axis + 1:], w.window
    zero = hlo.zeros(tensor_type([], elem(y)))
    xp = w.padded(x_shape)
    # y with its taps axis unflattened and moved last: [out..., k_0, ..., k_{rank-1}]
    perm = [i for i in range(rank + 1) if i != axis] + [axis]
    y = hlo.reshape(hlo.transpose(y, perm), out + taps)
    if any(d != 1 for d, k in zip(w.dilation, taps) if k > 1):
        total = _per_offset(y, out, xp, w, zero)
    else:
        total = _by_phase(y, out, xp, w, zero)
    return unpad(total, w.padding)


def _per_offset(y: ir.Value, out: list[int], xp: list[int], w: Windows, zero: ir.Value) -> ir.Value:
    """One interior-padded term per window offset (any dilation)."""
    rank, total = len(out), None
    for k in w.offsets():
        start = [0] * rank + list(k)
        term = hlo.reshape(hlo.slice(y, start, out + [ki + 1 for ki in k], [1] * (2 * rank)), out)
        low = [ki * d for ki, d in zip(k, w.dilation)]
        high = [p - lo - ((o - 1) * s + 1 if o else 0) for p, lo, o, s in zip(xp, low, out, w.strides)]
        term = hlo.pad(term, zero, low, high, [s - 1 for s in w.strides])
        total = term if total is None else hlo.add(total, term)
    return total


def _by_phase(y: ir.Value, out: list[int], xp: list[int], w: Windows, zero: ir.Value) -> ir.Value:
    """Offsets ``q * s + r`` sharing ``q`` form one block of stride-interleaved outputs."""
    rank = len(out)
    blocks = [-(-k // s) for k, s in zip(w.window, w.strides)]  # q ranges
    # pad every taps axis to blocks * stride, then split it into (q, r)
    y = hlo.pad(y, zero, [0] * (2 * rank), [0] * rank + [q * s - k for q, s, k in zip(blocks, w.strides, w.window)],
                [0] * (2 * rank))
    split = out + [d for q, s in zip(blocks, w.strides) for d in (q, s)]
    y = hlo.reshape(y, split)
    # [out..., (q_i, r_i)...] -> [q..., (o_i, r_i)...]
    q_axes = [rank + 2 * i for i in range(rank)]
    interleaved = [a for i in range(rank) for a in (i, rank + 2 * i + 1)]
    y = hlo.transpose(y, q_axes + interleaved)
    total = None
    for q in itertools.product(*[range(b) for b in blocks]):
        size = [1] * rank + [d for o, s in zip(out, w.strides) for d in (o, s)]
        block = hlo.slice(y, list(q) + [0] * (2 * rank), [qi + 1 for qi in q] + size[rank:], [1] * (3 * rank))
        block = hlo.reshape(block, [o * s for o, s in zip(out, w.strides)])
        low = [qi * s for qi, s in zip(q, w.strides)]
        high = [p - lo - o * s for p, lo, o, s in zip(xp, low, out, w.strides)]
        term = hlo.pad(block, zero, low, high, [0] * rank)
        total = term if total is None else hlo.add(total, term)
    return total
