"""Complex values under TensorFlow's convention (``passes/transforms/backprop.py``): for a real loss L
and z = x + iy the gradient is ∂L/∂x + i ∂L/∂y (JAX's is its conjugate).

Every rule is checked against complex finite differences (``complexcheck.py``: directions
along the real parts, the imaginary parts, and both), forward mode included; ``fft`` in all
four kinds, natively compiled by IREE (float32, one power-of-two dimension) and lowered to
DFT products (other lengths, several dimensions, float64), values against numpy.
"""
from __future__ import annotations

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes
from complexcheck import check_complex_module, real_view, split

RNG = np.random.default_rng(3)
C = "tensor<3xcomplex<f64>>"
R = "tensor<3xf64>"


def _c(*shape, dtype=np.complex128):
    return ((RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)) * 0.6).astype(dtype)


def _unary(op: str, out: str = C) -> str:
    return f"""func.func @f(%z: {C}) -> {out} {{
  %0 = {op} %z : ({C}) -> {out}
  return %0 : {out}
}}"""


@pytest.mark.parametrize("op", ["exponential", "log", "negate", "tanh", "sine", "cosine", "log_plus_one",
                                "exponential_minus_one"])
def test_holomorphic_unary(op):
    check_complex_module(_unary(f"stablehlo.{op}"), [_c(3) + (1.0 if op == "log" else 0)])


@pytest.mark.parametrize("op", ["real", "imag", "abs"])
def test_complex_to_real(op):
    check_complex_module(_unary(f"stablehlo.{op}", R), [_c(3)])


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide"])
def test_binary(op):
    text = f"""func.func @f(%a: {C}, %b: {C}) -> {C} {{
  %0 = stablehlo.{op} %a, %b : {C}
  return %0 : {C}
}}"""
    check_complex_module(text, [_c(3), _c(3) + 1.5])


def test_chlo_conj():
    """conj(z) · exp(z) (TensorFlow exports conj as chlo.conj): its adjoint is conj(ct), its tangent conj(t)."""
    text = f"""func.func @f(%z: {C}) -> {C} {{
  %0 = "chlo.conj"(%z) : ({C}) -> {C}
  %1 = stablehlo.exponential %z : {C}
  %2 = stablehlo.multiply %0, %1 : {C}
  return %2 : {C}
}}"""
    check_complex_module(text, [_c(3)])


def test_complex_conj_and_a_real_loss_mixing_everything():
    """complex(x, y), conj as JAX exports it (complex(real, -imag)), |z|, a contraction, a sum,
    and real arguments beside complex ones."""
    text = f"""func.func @f(%x: {R}, %y: {R}, %w: tensor<3x2xcomplex<f64>>) -> (tensor<f64>, tensor<2xcomplex<f64>>) {{
  %z = stablehlo.complex %x, %y : {C}
  %re = stablehlo.real %z : ({C}) -> {R}
  %im = stablehlo.imag %z : ({C}) -> {R}
  %nim = stablehlo.negate %im : {R}
  %cz = stablehlo.complex %re, %nim : {C}
  %p = stablehlo.multiply %z, %cz : {C}
  %e = stablehlo.exponential %z : {C}
  %s = stablehlo.add %p, %e : {C}
  %d = stablehlo.dot_general %s, %w, contracting_dims = [0] x [0] : ({C}, tensor<3x2xcomplex<f64>>) -> tensor<2xcomplex<f64>>
  %a = stablehlo.abs %d : (tensor<2xcomplex<f64>>) -> tensor<2xf64>
  %zero = stablehlo.constant dense<0.0> : tensor<f64>
  %l = stablehlo.reduce(%a init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<2xf64>, tensor<f64>) -> tensor<f64>
  %t = stablehlo.transpose %d, dims = [0] : (tensor<2xcomplex<f64>>) -> tensor<2xcomplex<f64>>
  return %l, %t : tensor<f64>, tensor<2xcomplex<f64>>
}}"""
    check_complex_module(text, [RNG.standard_normal(3), RNG.standard_normal(3), _c(3, 2)])


def test_convention_is_tensorflows_not_jaxs():
    """L = Σ|z|²: TensorFlow's gradient is 2z, JAX's 2·conj(z)."""
    text = f"""func.func @f(%z: {C}) -> tensor<f64> {{
  %a = stablehlo.abs %z : ({C}) -> {R}
  %s = stablehlo.multiply %a, %a : {R}
  %zero = stablehlo.constant dense<0.0> : tensor<f64>
  %l = stablehlo.reduce(%s init: %zero) applies stablehlo.add across dimensions = [0] : ({R}, tensor<f64>) -> tensor<f64>
  return %l : tensor<f64>
}}"""
    z = _c(3)
    module = ig.compile(real_view(passes.differentiate(text, "f"))).load()
    re, im = module["f_grad"].call_flat(*split([z])[0])
    np.testing.assert_allclose(np.asarray(re) + 1j * np.asarray(im), 2 * z, rtol=1e-12)


def test_unsupported_complex_op_is_refused_not_wrong():
    text = f"""func.func @f(%z: {C}) -> {C} {{
  %0 = stablehlo.sqrt %z : {C}
  %1 = stablehlo.sign %0 : {C}
  return %1 : {C}
}}"""
    with pytest.raises(passes.MissingAdjointError, match="complex values"):
        passes.differentiate(text, "f")
    with pytest.raises(LookupError, match="complex values"):
        passes.differentiate(text, "f", grad=False, jvp=True)


# ----- fft ---------------------------------------------------------------------------------

def _fft_module(kind: str, in_shape, lengths, part: str) -> tuple[str, tuple]:
    out_shape = list(in_shape)
    if kind == "RFFT":
        out_shape[-1] = lengths[-1] // 2 + 1
    if kind == "IRFFT":
        out_shape[-1] = lengths[-1]
    cin = part if kind == "RFFT" else f"complex<{part}>"
    cout = part if kind == "IRFFT" else f"complex<{part}>"
    ti = f"tensor<{'x'.join(map(str, in_shape))}x{cin}>"
    to = f"tensor<{'x'.join(map(str, out_shape))}x{cout}>"
    text = f"""func.func @f(%a: {ti}) -> {to} {{
  %0 = stablehlo.fft %a, type = {kind}, length = {list(lengths)} : ({ti}) -> {to}
  return %0 : {to}
}}"""
    return text, tuple(out_shape)


def _numpy_fft(kind, x, lengths):
    axes = tuple(range(-len(lengths), 0))
    return {"FFT": lambda: np.fft.fftn(x, axes=axes), "IFFT": lambda: np.fft.ifftn(x, axes=axes),
            "RFFT": lambda: np.fft.rfftn(x, axes=axes),
            "IRFFT": lambda: np.fft.irfftn(x, s=lengths, axes=axes)}[kind]()


def _fft_input(kind, in_shape, part):
    dtype = np.float32 if part == "f32" else np.float64
    if kind == "RFFT":
        return RNG.standard_normal(in_shape).astype(dtype)
    return _c(*in_shape, dtype=np.complex64 if part == "f32" else np.complex128)


CASES = [  # (in_shape, lengths, part): native in IREE, then lowered (odd length, 2-D, float64)
    ((2, 8), [8], "f32"), ((2, 6), [6], "f64"), ((3, 4), [3, 4], "f64"), ((5,), [5], "f64"), ((2, 8), [8], "f64")]


@pytest.mark.parametrize("kind", ["FFT", "IFFT", "RFFT", "IRFFT"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_fft_values_and_gradients(kind, case):
    in_shape, lengths, part = CASES[case]
    if kind == "IRFFT":
        in_shape = (*in_shape[:-1], lengths[-1] // 2 + 1)
    text, _ = _fft_module(kind, in_shape, lengths, part)
    x = _fft_input(kind, in_shape, part)
    if kind == "IRFFT":  # a half spectrum numpy reads as we do: real zero (and Nyquist) bins
        x[..., 0] = x[..., 0].real
        if lengths[-1] % 2 == 0:
            x[..., -1] = x[..., -1].real
    module = ig.compile(real_view(text)).load()
    got = [np.asarray(r) for r in module["f"].call_flat(*split([x])[0])]
    value = got[0] + 1j * got[1] if len(got) == 2 else got[0]
    tol = 1e-4 if part == "f32" else 1e-10
    np.testing.assert_allclose(value, _numpy_fft(kind, x.astype(np.complex128 if kind != "RFFT" else np.float64),
                                                 lengths), rtol=tol, atol=tol)
    if part == "f32":
        check_complex_module(text, [x], eps=1e-2, rtol=2e-3, atol=1e-4)
    else:
        check_complex_module(text, [x])


def test_spectral_layer_gradient():
    """A Fourier-layer shape: RFFT, a complex weight on the kept modes, IRFFT, a real loss."""
    text = """func.func @f(%x: tensor<2x6xf64>, %w: tensor<4xcomplex<f64>>) -> tensor<f64> {
  %s = stablehlo.fft %x, type = RFFT, length = [6] : (tensor<2x6xf64>) -> tensor<2x4xcomplex<f64>>
  %wb = stablehlo.broadcast_in_dim %w, dims = [1] : (tensor<4xcomplex<f64>>) -> tensor<2x4xcomplex<f64>>
  %m = stablehlo.multiply %s, %wb : tensor<2x4xcomplex<f64>>
  %y = stablehlo.fft %m, type = IRFFT, length = [6] : (tensor<2x4xcomplex<f64>>) -> tensor<2x6xf64>
  %t = stablehlo.tanh %y : tensor<2x6xf64>
  %sq = stablehlo.multiply %t, %t : tensor<2x6xf64>
  %zero = stablehlo.constant dense<0.0> : tensor<f64>
  %l = stablehlo.reduce(%sq init: %zero) applies stablehlo.add across dimensions = [0, 1] : (tensor<2x6xf64>, tensor<f64>) -> tensor<f64>
  return %l : tensor<f64>
}"""
    check_complex_module(text, [RNG.standard_normal((2, 6)), _c(4)])


def test_fft_batching_rule_equals_a_loop():
    text, _ = _fft_module("FFT", (6,), [6], "f64")
    module = ig.compile(real_view(passes.vectorize(text, "f", None, 2))).load()
    x = _c(2, 6)
    got = module["f_batched"].call_flat(*split([x])[0])
    for k in range(2):
        want = module["f"].call_flat(*split([x[k]])[0])
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g)[k], w, rtol=1e-12, atol=1e-12)


def test_complex_elementwise_batching_equals_a_loop():
    text = f"""func.func @f(%a: {C}, %x: {R}) -> ({R}, {C}) {{
  %e = stablehlo.exponential %a : {C}
  %z = stablehlo.complex %x, %x : {C}
  %m = stablehlo.multiply %e, %z : {C}
  %r = stablehlo.abs %m : ({C}) -> {R}
  return %r, %m : {R}, {C}
}}"""
    module = ig.compile(real_view(passes.vectorize(text, "f", None, 2))).load()
    a, x = _c(2, 3), RNG.standard_normal((2, 3))
    got = module["f_batched"].call_flat(*split([a, x])[0])
    for k in range(2):
        want = module["f"].call_flat(*split([a[k], x[k]])[0])
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g)[k], w, rtol=1e-12, atol=1e-12)


def test_complex_loop_carry_is_refused_with_the_op_named():
    text = f"""func.func @f(%z: {C}) -> {C} {{
  %i0 = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.while(%i = %i0, %w = %z) : tensor<i32>, {C}
    cond {{
      %n = stablehlo.constant dense<2> : tensor<i32>
      %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    }} do {{
      %one = stablehlo.constant dense<1> : tensor<i32>
      %j = stablehlo.add %i, %one : tensor<i32>
      %v = stablehlo.multiply %w, %w : {C}
      stablehlo.return %j, %v : tensor<i32>, {C}
    }}
  return %r#1 : {C}
}}"""
    with pytest.raises(passes.MissingAdjointError, match="stablehlo.while.*complex values"):
        passes.differentiate(text, "f")
