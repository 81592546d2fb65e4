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
  entries of ``y`` that read it. When windows do not overlap (window ≤ stride, a
  patch embedding or a 2×2 pool) the offsets interleave with the output positions:
  one transpose. Otherwise ``window_sum``: by stride phase (``xp[s·p + r]``), a sum
  of plain slices of ``y`` padded once, the phases interleaved by a select on their
  index and a reshape. IREE fuses all of it into one elementwise dispatch (and a
  pad); a term per offset, interior-padded into place, cost a copy dispatch each
  (9 per 3×3 convolution, 3 × 2 per 3×3 pool), and grouping by phase with
  transposes ran at ~8 GB/s (size-2 inner axes). With ``patches`` stacked the same
  way (a select on the taps' index, not a concatenate), the CNN benchmark's gradient
  went from 107 IREE dispatches to 42 and from grad/fwd 4.15 to 2.66; the ResNet
  block's from 3.55 to 1.48 (``benchmarks/README.md``).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from ..ir import hlo
from ..ir.mlir import elem, ir, shape, tensor_type


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


def tap_slices(x: ir.Value, pad_value: ir.Value, w: Windows) -> list[ir.Value]:
    """One strided slice of the padded operand per window offset (row-major order), each of
    the output's shape: ``tap[k][o] = xp[o * stride + k * dilation]``."""
    xp = pad_operand(x, pad_value, w)
    return [tap_slice(xp, k, w, w.output(shape(x))) for k in w.offsets()]


def pad_operand(x: ir.Value, pad_value: ir.Value, w: Windows) -> ir.Value:
    """``xp``: the operand padded as the window op pads it."""
    return hlo.pad(x, pad_value, [lo for lo, _ in w.padding], [hi for _, hi in w.padding], [0] * len(shape(x)))


def tap_slice(xp: ir.Value, offset: Sequence[int], w: Windows, out: Sequence[int]) -> ir.Value:
    """``xp[o * stride + offset * dilation]`` for every output position ``o`` (``out``, the
    output's shape): the tap at one window offset."""
    start = [ki * d for ki, d in zip(offset, w.dilation)]
    limit = [st + (o - 1) * s + 1 if o else st for st, o, s in zip(start, out, w.strides)]
    return hlo.slice(xp, start, limit, w.strides)


def patches(x: ir.Value, pad_value: ir.Value, w: Windows, axis: int) -> ir.Value:
    """``out[..o.., k, ..o..] = xp[o * stride + k * dilation]``: the taps axis at ``axis``."""
    if w.disjoint:
        rank = len(shape(x))
        xp = hlo.pad(x, pad_value, [lo for lo, _ in w.padding], [hi for _, hi in w.padding], [0] * rank)
        return _disjoint_patches(xp, pad_value, w.output(shape(x)), w, axis)
    taps = tap_slices(x, pad_value, w)
    if len(taps) == 1:
        return _with_taps(taps[0], axis)
    out = list(shape(taps[0]))
    full = out[:axis] + [len(taps)] + out[axis:]
    dims = [i if i < axis else i + 1 for i in range(len(out))]
    return _select_stack(taps, full, dims, hlo.iota(full, ir.IntegerType.get_signless(32), axis))


def _select_stack(values: list[ir.Value], full: list[int], dims: list[int], index: ir.Value) -> ir.Value:
    """``values[i]`` (broadcast to ``full`` along ``dims``) where ``index == i``: a
    concatenation IREE fuses into one elementwise dispatch with its operands' slices,
    where ``stablehlo.concatenate`` costs a copy dispatch per operand."""
    z = None
    for number in reversed(range(len(values))):
        v = hlo.broadcast_in_dim(values[number], full, dims)
        z = v if z is None else hlo.select(hlo.compare(index, hlo.splat(number, index.type), "EQ"), v, z)
    return z


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
    ys = list(shape(y))
    out = ys[:axis] + ys[axis + 1:]
    zero = hlo.zeros(tensor_type([], elem(y)))
    if w.disjoint:
        # Name every axis: ("o", i) an output position, ("k", i) a window offset along axis i.
        labels = [("o", i) for i in range(axis)] + [("k", i) for i in range(len(x_shape))] + \
                 [("o", i) for i in range(axis, len(x_shape))]
        y = hlo.reshape(y, out[:axis] + list(w.window) + out[axis:])
        return unpad(_disjoint(y, labels, out, w, w.padded(x_shape), zero), w.padding)
    yp = pad_windows(y, x_shape, w, zero, skip=axis)
    size = phase_shape(x_shape, w)

    def term(tap: int, start: list[int]) -> ir.Value:
        return hlo.reshape(window_slice(yp, start[:axis] + [tap] + start[axis:], size[:axis] + [1] + size[axis:]),
                           size)
    return window_sum(term, x_shape, w, elem(y))


class _Phases:
    """Which positions of the padded operand ``window_sum`` computes, along each axis: the
    phase positions ``p0 ≤ p < p0 + size`` (``xp[s·p + r]``) covering the unpadded operand,
    and the padding (``low``, ``high``) that makes every term a plain slice of an
    output-shaped tensor: window ``o`` is at ``o + low``."""

    def __init__(self, x_shape: Sequence[int], w: Windows) -> None:
        padded, out = w.padded(x_shape), w.output(x_shape)
        reach = [(k - 1) * d // s for k, d, s in zip(w.window, w.dilation, w.strides)]
        # The padded positions [begin, end) that are elements of the operand.
        self.begin = [max(lo, 0) for lo, _ in w.padding]
        self.end = [min(lo + n, p) for (lo, _), n, p in zip(w.padding, x_shape, padded)]
        self.p0 = [b // s for b, s in zip(self.begin, w.strides)]
        self.size = [max(0, -(-e // s) - p) for e, s, p in zip(self.end, w.strides, self.p0)]
        self.low = [max(0, q - p) for q, p in zip(reach, self.p0)]
        self.high = [max(0, p + n - o) for p, n, o in zip(self.p0, self.size, out)]


def phase_shape(x_shape: Sequence[int], w: Windows) -> list[int]:
    """The shape of every ``window_sum`` term."""
    return _Phases(x_shape, w).size


def pad_windows(v: ir.Value, x_shape: Sequence[int], w: Windows, value: ir.Value, skip: int | None = None) -> ir.Value:
    """An output-shaped tensor (an extra axis at ``skip`` left alone) padded so that
    ``window_sum``'s terms are plain slices of it."""
    ph = _Phases(x_shape, w)
    low, high = ph.low, ph.high
    if skip is not None:
        low, high = low[:skip] + [0] + low[skip:], high[:skip] + [0] + high[skip:]
    if not any(low) and not any(high):
        return v
    return hlo.pad(v, value, low, high, [0] * len(low))


def window_slice(v: ir.Value, start: Sequence[int], size: Sequence[int]) -> ir.Value:
    """``v[start : start + size]``: one term of ``window_sum`` from a ``pad_windows`` tensor."""
    return hlo.slice(v, start, [b + n for b, n in zip(start, size)], [1] * len(size))


def window_sum(term, x_shape: Sequence[int], w: Windows, element: ir.Type) -> ir.Value:
    """The ``x_shape`` tensor whose element ``i`` sums, over every window ``o`` and offset
    ``k`` reading it (``o·s + k·d = i + low``), the value of window ``o`` at offset ``k``;
    ``term(k, start)`` gives offset ``k``'s values (``k`` flat, row-major) for windows
    ``p - (k·d - r) / s``, as a ``phase_shape`` slice at ``start`` of a ``pad_windows``
    tensor.

    By stride phase: ``xp[s·p + r]`` is reached by the offsets with ``k·d ≡ r (mod s)``,
    from window ``p - (k·d - r) / s``. Each phase is a sum of slices, the phases are
    interleaved by a select on their index and a reshape: elementwise work IREE fuses
    into one dispatch, where a padded term per offset costs a copy each."""
    ph, rank = _Phases(x_shape, w), len(x_shape)
    offsets = w.offsets()
    phases = []
    for r in itertools.product(*[range(s) for s in w.strides]):
        total = None
        for tap, k in enumerate(offsets):
            lands = [ki * d - ri for ki, d, ri in zip(k, w.dilation, r)]
            if any(n < 0 or n % s for n, s in zip(lands, w.strides)):
                continue
            t = term(tap, [p + low - n // s for p, low, n, s in zip(ph.p0, ph.low, lands, w.strides)])
            total = t if total is None else hlo.add(total, t)
        phases.append(hlo.zeros(tensor_type(ph.size, element)) if total is None else total)
    total = phases[0] if len(phases) == 1 else _interleave(phases, ph.size, w.strides)
    # total covers padded positions [p0·s, (p0 + size)·s): keep the operand's, zeros where
    # a negative padding cut it.
    first = [b - p * s for b, p, s in zip(ph.begin, ph.p0, w.strides)]
    last = [e - p * s for e, p, s in zip(ph.end, ph.p0, w.strides)]
    if any(f or n * s != e for f, n, s, e in zip(first, ph.size, w.strides, last)):
        total = hlo.slice(total, first, last, [1] * rank)
    cut = [(b - lo, lo + n - e) for b, e, (lo, _), n in zip(ph.begin, ph.end, w.padding, x_shape)]
    if any(a or b for a, b in cut):
        total = hlo.pad(total, hlo.zeros(tensor_type([], element)), [a for a, _ in cut], [b for _, b in cut],
                        [0] * rank)
    return total


def _interleave(phases: list[ir.Value], size: list[int], strides: list[int]) -> ir.Value:
    """``z[s·p + r] = phases[r][p]`` (``r`` a multi-index, row-major): every phase broadcast
    to (position, phase) axes, a select on the phase index, one reshape."""
    full, dims, index = [], [], None
    i32 = ir.IntegerType.get_signless(32)
    for n, s in zip(size, strides):
        dims.append(len(full))
        full += [n, s] if s > 1 else [n]
    for axis, s in enumerate(strides):
        if s > 1:
            digit = hlo.iota(full, i32, dims[axis] + 1)
            index = digit if index is None else hlo.add(hlo.multiply(index, hlo.splat(s, digit.type)), digit)
    return hlo.reshape(_select_stack(phases, full, dims, index), [n * s for n, s in zip(size, strides)])


def _disjoint(y: ir.Value, labels: list, out: list[int], w: Windows, xp: list[int], zero: ir.Value) -> ir.Value:
    """Windows that do not overlap (window ≤ stride on every axis): offset ``k`` of output
    ``o`` lands on ``o * s + k``, so one transpose interleaves offsets with outputs."""
    rank = len(out)
    grow = [w.strides[i] - w.window[i] if kind == "k" else 0 for kind, i in labels]
    y = hlo.pad(y, zero, [0] * len(labels), grow, [0] * len(labels))
    order = [labels.index(t) for i in range(rank) for t in (("o", i), ("k", i))]
    block = hlo.reshape(hlo.transpose(y, order), [o * s for o, s in zip(out, w.strides)])
    return hlo.pad(block, zero, [0] * rank, [p - o * s for p, o, s in zip(xp, out, w.strides)], [0] * rank)
