"""Complex arrays through irgrad's runtime: complex<f32>/complex<f64> arguments and results
of a compiled module are called with numpy complex64/complex128 arrays (no real view), their
gradients (TensorFlow's convention, dL/dx + i dL/dy) come back complex, and ``irgrad run``,
``inspect`` and ``grad --list-args`` read and print them."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

import irgrad as ig
from irgrad import passes
from irgrad import runtime as rt
from irgrad.cli import app
from irgrad.runtime.signature import TensorType, parse_declaration
from irgrad.values import format_array, parse_input, parse_type

try:  # click < 8.2 mixes stderr into stdout unless told not to
    RUNNER = CliRunner(mix_stderr=False)
except TypeError:
    RUNNER = CliRunner()

# Complex in, complex out, both widths, and a real result of complex inputs.
ELEMENTWISE = """
func.func @f(%z: tensor<3xcomplex<f32>>, %w: tensor<2x2xcomplex<f64>>) -> (tensor<3xcomplex<f32>>, tensor<2x2xcomplex<f64>>, tensor<3xf32>) {
  %0 = stablehlo.multiply %z, %z : tensor<3xcomplex<f32>>
  %1 = stablehlo.exponential %w : tensor<2x2xcomplex<f64>>
  %2 = stablehlo.abs %z : (tensor<3xcomplex<f32>>) -> tensor<3xf32>
  return %0, %1, %2 : tensor<3xcomplex<f32>>, tensor<2x2xcomplex<f64>>, tensor<3xf32>
}
"""

# A real loss of a complex argument: sum(|z|^2 * w) + sum(real(z * c)), c a complex constant
# argument (not differentiated).
LOSS = """
func.func @loss(%z: tensor<4xcomplex<f32>>, %w: tensor<4xf32>, %c: tensor<4xcomplex<f32>>) -> tensor<f32> {
  %a = stablehlo.abs %z : (tensor<4xcomplex<f32>>) -> tensor<4xf32>
  %s = stablehlo.multiply %a, %a : tensor<4xf32>
  %p = stablehlo.multiply %s, %w : tensor<4xf32>
  %zc = stablehlo.multiply %z, %c : tensor<4xcomplex<f32>>
  %re = stablehlo.real %zc : (tensor<4xcomplex<f32>>) -> tensor<4xf32>
  %t = stablehlo.add %p, %re : tensor<4xf32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce(%t init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
  return %r : tensor<f32>
}
"""

RNG = np.random.default_rng(34)


def crandn(*shape, dtype=np.complex64):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


@pytest.fixture(scope="module", autouse=True)
def cache_dir(isolated_cache_dir):
    return isolated_cache_dir


@pytest.fixture(scope="module")
def elementwise():
    return rt.load(rt.compile(ELEMENTWISE).vmfb)


@pytest.fixture(scope="module")
def loss_module():
    text = passes.differentiate(LOSS, "loss", wrt=[0, 1], with_value=True, vjp=True)
    return rt.load(rt.compile(text).vmfb)


def test_signature_types():
    assert TensorType.from_mlir("tensor<3xcomplex<f32>>") == TensorType((3,), "complex64")
    assert TensorType.from_mlir("tensor<?x2xcomplex<f64>>") == TensorType((None, 2), "complex128")
    assert TensorType.from_mlir("tensor<complex<f32>>") == TensorType((), "complex64")
    assert str(TensorType((2, 2), "complex128")) == "2x2xcomplex<f64>"
    assert TensorType.from_mlir("tensor<2x3xf32>") == TensorType((2, 3), "float32")
    for bad in ("tensor<3xcomplex<f16>>", "tensor<3xcomplex<i32>>", "tensor<*xf32>", "tensor<2x3>", "tuple<f32>"):
        with pytest.raises(ValueError, match="unsupported type"):
            TensorType.from_mlir(bad)
    sig = parse_declaration("f", "sync func @f(%input0: tensor<3xcomplex<f32>>, %input1: tensor<2xf32>) -> "
                                 "(%output0: tensor<complex<f64>>)")
    assert sig.inputs == (TensorType((3,), "complex64"), TensorType((2,), "float32"))
    assert sig.outputs == (TensorType((), "complex128"),)
    assert "complex64" in rt.DTYPES and "complex128" in rt.DTYPES


def test_complex_values_match_numpy(elementwise):
    sig = elementwise.functions["f"]
    assert [t.dtype for t in sig.inputs] == ["complex64", "complex128"]
    assert [t.dtype for t in sig.outputs] == ["complex64", "complex128", "float32"]
    z, w = crandn(3), crandn(2, 2, dtype=np.complex128)
    sq, ex, ab = elementwise["f"](z, w)
    assert sq.dtype == np.complex64 and ex.dtype == np.complex128 and ab.dtype == np.float32
    np.testing.assert_allclose(sq, z * z, rtol=1e-6)
    np.testing.assert_allclose(ex, np.exp(w), rtol=1e-13)
    np.testing.assert_allclose(ab, np.abs(z), rtol=1e-6)
    # Non-contiguous and byte-swapped complex arrays are the same numbers.
    z6 = crandn(6)
    np.testing.assert_allclose(elementwise["f"](z6[::2], w.astype(">c16"))[0], z6[::2] ** 2, rtol=1e-6)


def test_python_complex_scalars_and_lists(elementwise):
    # Python complex numbers, floats and ints convert to complex dtypes.
    sq, ex, _ = elementwise["f"]([1 + 2j, 3, 0.5j], [[0.0, 1j], [1, -1.5]])
    np.testing.assert_allclose(sq, np.array([1 + 2j, 3, 0.5j]) ** 2, rtol=1e-6)
    np.testing.assert_allclose(ex, np.exp([[0.0, 1j], [1, -1.5]]), rtol=1e-13)


def test_wrong_dtypes_are_type_errors(elementwise):
    z, w = crandn(3), crandn(2, 2, dtype=np.complex128)
    f = elementwise["f"]
    with pytest.raises(TypeError, match="argument 0: expected dtype complex64, got float32"):
        f(z.real.copy(), w)
    with pytest.raises(TypeError, match="argument 1: expected dtype complex128, got complex64"):
        f(z, w.astype(np.complex64))
    with pytest.raises(TypeError, match="argument 0: expected dtype complex64, got complex128"):
        f(z.astype(np.complex128), w)
    with pytest.raises(ValueError, match=r"argument 0: expected shape \(3,\), got \(4,\)"):
        f(crandn(4), w)
    with pytest.raises(TypeError, match="cannot convert"):
        f(["a", "b", "c"], w)


def test_python_complex_converts_to_complex_only():
    """A Python complex number (or list of them) is no float: it never silently loses its
    imaginary part."""
    m = rt.load(rt.compile("""
func.func @g(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.add %x, %x : tensor<2xf32>
  return %0 : tensor<2xf32>
}""").vmfb)
    with pytest.raises(TypeError, match="cannot convert complex128 values to float32"):
        m["g"]([1 + 1j, 2.0])
    with pytest.raises(TypeError, match="expected dtype float32, got complex64"):
        m["g"](crandn(2))


def test_complex_gradient_called_directly(loss_module):
    """@loss_vjp with complex arrays in and out: under TensorFlow's convention the gradient of
    sum(|z|^2 w) + sum(re(z c)) is 2 w z + conj(c), and of w it is |z|^2."""
    assert [t.dtype for t in loss_module.functions["loss_vjp"].outputs] == ["float32", "complex64", "float32"]
    z, w, c = crandn(4), RNG.standard_normal(4).astype(np.float32), crandn(4)
    value, dz, dw = loss_module["loss_vjp"](z, w, c, np.float32(1.0))
    np.testing.assert_allclose(value, np.sum(np.abs(z) ** 2 * w + (z * c).real), rtol=1e-5)
    assert dz.dtype == np.complex64
    np.testing.assert_allclose(dz, 2 * w * z + np.conj(c), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dw, np.abs(z) ** 2, rtol=1e-5)
    # Finite differences along the real and the imaginary part of one element.
    eps = 1e-3
    for k, direction in ((0, 1.0), (2, 1j)):
        e = np.zeros(4, np.complex128)
        e[k] = direction
        up = loss_module["loss"](z + (eps * e).astype(np.complex64), w, c)
        down = loss_module["loss"](z - (eps * e).astype(np.complex64), w, c)
        part = dz[k].real if direction == 1.0 else dz[k].imag
        assert abs((up - down) / (2 * eps) - part) < 1e-2 * max(1.0, abs(part))


def test_ig_load_of_a_saved_artifact(tmp_path):
    art = rt.compile(passes.differentiate(LOSS, "loss", wrt=[0]))
    path = tmp_path / "loss.vmfb"
    art.save(path)
    m = ig.load(str(path))
    z, w, c = crandn(4), np.ones(4, np.float32), np.zeros(4, np.complex64)
    np.testing.assert_allclose(m["loss_grad"](z, w, c), 2 * z, rtol=1e-6)


def test_values_complex_text():
    assert parse_type("2xcomplex<f32>") == ((2,), "complex64")
    assert parse_type("complex<f64>") == ((), "complex128")
    assert parse_type("3x2xcf64") == ((3, 2), "complex64")  # iree-run-module's spelling
    assert parse_type("cf128") == ((), "complex128")
    [a] = parse_input("3xcomplex<f32>=1+2j,-3,0.5j")
    assert a.dtype == np.complex64
    np.testing.assert_array_equal(a, [1 + 2j, -3, 0.5j])
    [b] = parse_input("2xcomplex<f64>=1-2i")
    np.testing.assert_array_equal(b, [1 - 2j, 1 - 2j])
    z = np.array([[1 + 2j, -3 - 1e-9j], [np.inf, -0.5j]], np.complex64)
    text = format_array(z, "complex<f32>")
    assert text == "2x2xcomplex<f32>=[1+2j -3-1E-09j][INF+0j -0-0.5j]"
    np.testing.assert_array_equal(parse_input(text)[0], z)  # what run prints reads back
    with pytest.raises(ValueError, match="bad complex number '1\\+2k'"):
        parse_input("2xcomplex<f32>=1+2k")
    with pytest.raises(ValueError, match="unknown element type 'complex<f16>'"):
        parse_input("2xcomplex<f16>=1")


def test_cli_run_inspect_and_npz(tmp_path):
    src = tmp_path / "loss.mlir"
    src.write_text(LOSS)
    art = tmp_path / "loss.vmfb"
    result = RUNNER.invoke(app, ["grad", str(src), "--list-args"])
    assert result.exit_code == 0, result.output
    assert "4xcomplex<f32>   complex: differentiable" in result.stdout
    result = RUNNER.invoke(app, ["compile", str(src), "--grad", "--wrt", "0", "-o", str(art)])
    assert result.exit_code == 0, result.output
    result = RUNNER.invoke(app, ["inspect", str(art)])
    assert result.exit_code == 0, result.output
    assert "loss_grad(4xcomplex<f32>, 4xf32, 4xcomplex<f32>) -> (d_arg0: 4xcomplex<f32>)" in result.stdout
    args = ["run", str(art), "-f", "loss_grad", "--input", "4xcomplex<f32>=1+2j,3-1j,0.5j,-2",
            "--input", "4xf32=1,2,3,4", "--input", "4xcomplex<f32>=0"]
    result = RUNNER.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "4xcomplex<f32>=2+4j 12-4j 0+3j -16+0j" in result.stdout
    out = tmp_path / "out.npz"
    result = RUNNER.invoke(app, [*args, "--output", f"@{out}"])
    assert result.exit_code == 0, result.output
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["d_arg0"], np.array([2 + 4j, 12 - 4j, 3j, -16], np.complex64))
    # The same arguments from a .npz, by position.
    npz = tmp_path / "args.npz"
    np.savez(npz, np.array([1 + 2j, 3 - 1j, 0.5j, -2], np.complex64), np.arange(1, 5, dtype=np.float32),
             np.zeros(4, np.complex64))
    result = RUNNER.invoke(app, ["run", str(art), "-f", "loss_grad", "--input", f"@{npz}"])
    assert result.exit_code == 0, result.output
    assert "4xcomplex<f32>=2+4j 12-4j 0+3j -16+0j" in result.stdout
    # A real array where a complex one is due: one line, non-zero exit.
    result = RUNNER.invoke(app, ["run", str(art), "-f", "loss_grad", "--input", "4xf32=1",
                                 "--input", "4xf32=1,2,3,4", "--input", "4xcomplex<f32>=0"])
    assert result.exit_code != 0
    assert "expected dtype complex64, got float32" in result.stderr
