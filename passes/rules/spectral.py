"""``stablehlo.fft``: FFT, IFFT, RFFT and IRFFT over the last ``len(fft_length)`` dimensions.

Adjoints under TensorFlow's complex convention (``backprop.py``), ``N`` the product of
``fft_length``:

* FFT: ``dz = N · IFFT(ct)``; IFFT: ``dz = FFT(ct) / N`` (the transforms are complex-linear,
  the adjoint is the conjugate transpose of the DFT matrix);
* RFFT (real ``x``, the half spectrum): ``dx = real(N · IFFT(ct padded with zeros to the full
  last length))``;
* IRFFT (the half spectrum to a real signal): ``dz = RFFT(ct) · w / N`` with the half-spectrum
  weights ``w`` = 1 for the zero frequency (and the Nyquist one of an even length), 2 for the
  others, which stand for themselves and their mirror images. The imaginary parts of those
  weight-1 bins are not read, and their gradient comes out real.

The transforms are linear: the tangent is the op applied to the tangent.

IREE 3.13 compiles one-dimensional float32 transforms of a power-of-two length on llvm-cpu
and refuses the others ("failed to legalize operation 'stablehlo.fft'": a length of 6, two
dimensions), or fails on complex<f64> inside its own lowering ("'arith.mulf' op requires the
same type for all operands and results"). :func:`lower_fft` computes those as DFTs: per
dimension a product with the (cos, sin) matrices, in real arithmetic, exact up to rounding
(``O(n²)`` per dimension: meant for the small sizes spectral layers use).
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import hlo
from ..transforms.backprop import COMPLEX_AWARE
from ..transforms.forward import linear
from ..ir.mlir import dtype_name, elem, ir, is_float_type, shape, tensor_type
from ..transforms.batching import leading_batch
from ..transforms.registry import adjoint, batching, tangent

Value = ir.Value


def fft_type(op: ir.Operation) -> str:
    return str(op.attributes["fft_type"]).split()[-1].rstrip(">")


def fft(x: Value, kind: str, lengths: list[int]) -> Value:
    """A ``stablehlo.fft`` op of ``kind`` over the last ``len(lengths)`` dimensions of ``x``."""
    s = list(shape(x))
    if kind == "RFFT":
        s[-1] = lengths[-1] // 2 + 1
        element = ir.ComplexType.get(elem(x))
    elif kind == "IRFFT":
        s[-1] = lengths[-1]
        element = hlo.part_type(elem(x))
    else:
        element = elem(x)
    return ir.Operation.create("stablehlo.fft", results=[tensor_type(s, element)], operands=[x], attributes={
        "fft_type": hlo.attr(f"#stablehlo<fft_type {kind}>"),
        "fft_length": hlo.i64_array(lengths)}).result


def _scale(x: Value, factor: float) -> Value:
    return hlo.multiply(x, hlo.like(factor, x))


def _half_weights(like: Value, n: int) -> Value:
    """The half-spectrum weights along the last dimension of ``like`` (real, ``like``'s parts)."""
    m = shape(like)[-1]
    w = np.full(m, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    part = hlo.part_type(elem(like))
    row = hlo.constant(w.astype(dtype_name(part)), dtype_name(part))
    full = hlo.broadcast_in_dim(row, list(shape(like)), [len(shape(like)) - 1])
    return hlo.complex_(full, hlo.zeros(full.type))


@adjoint("stablehlo.fft")
def _fft(op, cts):
    """FFT: N·IFFT(ct); IFFT: FFT(ct)/N; RFFT: real(N·IFFT(pad(ct))); IRFFT: RFFT(ct)·w/N"""
    (ct,) = cts
    kind = fft_type(op)
    lengths = hlo.read_i64_array(op, "fft_length")
    n = math.prod(lengths)
    if kind == "FFT":
        return (_scale(fft(ct, "IFFT", lengths), n),)
    if kind == "IFFT":
        return (_scale(fft(ct, "FFT", lengths), 1 / n),)
    if kind == "RFFT":
        rank = len(shape(ct))
        high = [0] * (rank - 1) + [lengths[-1] - shape(ct)[-1]]
        full = hlo.pad(ct, hlo.zeros(tensor_type([], elem(ct))), [0] * rank, high, [0] * rank)
        return (_scale(hlo.real(fft(full, "IFFT", lengths)), n),)
    spectrum = fft(ct, "RFFT", lengths)
    return (_scale(hlo.multiply(spectrum, _half_weights(spectrum, lengths[-1])), 1 / n),)


tangent("stablehlo.fft")(linear)
# FFT already transforms its trailing dimensions only: one more leading one is a batch.
batching("stablehlo.fft")(leading_batch)
COMPLEX_AWARE.add("stablehlo.fft")


# ----- lowering: DFTs for the forms IREE 3.13 does not compile ----------------------------------

def _native(op: ir.Operation) -> bool:
    """Whether IREE 3.13 compiles this fft on llvm-cpu: one float32 dimension of 2^k."""
    lengths = hlo.read_i64_array(op, "fft_length")
    part = elem(op.operands[0])
    if not is_float_type(part):
        part = hlo.part_type(part)
    return len(lengths) == 1 and str(part) == "f32" and lengths[0] & (lengths[0] - 1) == 0


def _along(x: Value, matrix: np.ndarray, dim: int) -> Value:
    """``matrix @ x`` along dimension ``dim`` of the real ``x`` (``matrix``: [out, in])."""
    rank = len(shape(x))
    w = hlo.constant(matrix.astype(dtype_name(elem(x))), dtype_name(elem(x)))
    y = hlo.dot_general(x, w, [], [], [dim], [1])  # x's other dimensions, then out
    perm = list(range(dim)) + [rank - 1] + list(range(dim, rank - 1))
    return hlo.transpose(y, perm)


def _dft(n: int, sign: float, out: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    k = np.arange(out if out is not None else n)[:, None]
    angle = sign * 2 * np.pi * ((k * np.arange(n)[None, :]) % n) / n
    return np.cos(angle), np.sin(angle)


def _complex_dft(re: Value, im: Value, dim: int, n: int, inverse: bool) -> tuple[Value, Value]:
    c, s = _dft(n, 1.0 if inverse else -1.0)
    if inverse:
        c, s = c / n, s / n
    return (hlo.subtract(_along(re, c, dim), _along(im, s, dim)),
            hlo.add(_along(im, c, dim), _along(re, s, dim)))


def lower_fft(op: ir.Operation) -> Value | None:
    """The transform as DFT products (``None`` where IREE compiles the op itself)."""
    if _native(op) or not hlo.is_static(op.operands[0]):
        return None
    kind = fft_type(op)
    lengths = hlo.read_i64_array(op, "fft_length")
    x = op.operands[0]
    rank = len(shape(x))
    dims = list(range(rank - len(lengths), rank))
    if kind in ("FFT", "IFFT"):
        re, im = hlo.real(x), hlo.imag(x)
        for d, n in zip(dims, lengths):
            re, im = _complex_dft(re, im, d, n, kind == "IFFT")
        return hlo.complex_(re, im)
    if kind == "RFFT":
        c, s = _dft(lengths[-1], -1.0, lengths[-1] // 2 + 1)
        re, im = _along(x, c, dims[-1]), _along(x, s, dims[-1])
        for d, n in zip(dims[:-1], lengths[:-1]):
            re, im = _complex_dft(re, im, d, n, False)
        return hlo.complex_(re, im)
    re, im = hlo.real(x), hlo.imag(x)
    for d, n in zip(dims[:-1], lengths[:-1]):
        re, im = _complex_dft(re, im, d, n, True)
    n = lengths[-1]
    c, s = _dft(n, 1.0, shape(x)[-1])
    w = np.full(shape(x)[-1], 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    c, s = (c * w[:, None] / n).T, (s * w[:, None] / n).T  # [n, half]: x_t = Σ_k w_k (re_k cos - im_k sin) / n
    return hlo.subtract(_along(re, c, dims[-1]), _along(im, s, dims[-1]))


def lower_complex_pad(op: ir.Operation) -> Value | None:
    """A complex ``pad`` as the complex of the padded parts: iree-compile 3.13 crashes (a stack
    dump, no diagnostic) on ``stablehlo.pad`` of complex<f32> (the adjoint of a slice, of RFFT).
    ``None`` for a real pad."""
    x, value = op.operands
    if not hlo.is_complex_type(elem(x)):
        return None
    low, high, interior = (hlo.read_i64_array(op, k) for k in
                           ("edge_padding_low", "edge_padding_high", "interior_padding"))
    parts = [hlo.pad(part(x), part(value), low, high, interior) for part in (hlo.real, hlo.imag)]
    return hlo.complex_(*parts)


__all__ = ["fft", "fft_type", "lower_fft", "lower_complex_pad"]
