"""Complex numbers, FFTs, Cholesky, triangular solves and einsum in modules exported by JAX
and TensorFlow, differentiated by irgrad and compared with the peers' own gradients
(issue 34). The fixtures (``fixtures/jax_spectral``, ``fixtures/tf_spectral``; how each was
made is in its README) hold the arguments, the forward value and the peer's gradient in
TensorFlow's convention (``dL/dx + i dL/dy`` for a complex argument; JAX's ``jax.grad`` is
its conjugate, stored conjugated). Neither JAX nor TensorFlow is imported here.

Also: JAX's CPU LAPACK calls (``custom_call @lapack_?potrf_ffi`` / ``@lapack_?trsm_ffi``)
rewritten to ``stablehlo.cholesky`` / ``triangular_solve`` (``passes/lowering/lapack.py``), with
LAPACK's ``info`` and untouched triangle.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes
from irgrad.passes.lowering.lapack import rewrite_lapack_calls
from irgrad.passes.ir.mlir import parse_module

FIXTURES = Path(__file__).parent / "fixtures"
PRODUCERS = {"jax": FIXTURES / "jax_spectral", "tf": FIXTURES / "tf_spectral"}
RTOL = 1e-4
# Gradient entries far below the largest are compared absolutely, at this fraction of it.
ATOL_FRACTION = 1e-5

CASES = [(producer, p.stem) for producer, folder in PRODUCERS.items() for p in sorted(folder.glob("*.mlir"))]


def _data(producer: str, name: str) -> dict[str, np.ndarray]:
    with np.load(PRODUCERS[producer] / f"{name}.npz") as z:
        return {k: z[k] for k in z.files}


def _numbered(data: dict, prefix: str) -> list[np.ndarray]:
    out = []
    while f"{prefix}{len(out)}" in data:
        out.append(data[f"{prefix}{len(out)}"])
    return out


@functools.cache
def _compiled(producer: str, name: str):
    text = (PRODUCERS[producer] / f"{name}.mlir").read_text()
    return ig.compile(passes.differentiate(text, "main", with_value=True)).load()


def max_relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want| (the whole array's scale)."""
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    return float(np.max(np.abs(np.asarray(got, np.complex128) - want))) / (scale or 1.0) if want.size else 0.0


def test_fixtures_present():
    assert sum(p == "jax" for p, _ in CASES) >= 8
    assert sum(p == "tf" for p, _ in CASES) >= 6
    for producer, name in CASES:
        data = _data(producer, name)
        assert len(_numbered(data, "grad")) == len(data["wrt"]) >= 1, name


@pytest.mark.parametrize("producer,name", CASES, ids=[f"{p}-{n}" for p, n in CASES])
def test_gradient_matches_peer(producer, name):
    data = _data(producer, name)
    args, want = _numbered(data, "arg"), _numbered(data, "grad")
    value, *grads = _compiled(producer, name)["main_grad"].call_flat(*args)
    np.testing.assert_allclose(value, data["out0"], rtol=RTOL, atol=1e-5 * max(1.0, float(np.abs(data["out0"]))))
    assert len(grads) == len(want)
    for k, (got, ref) in enumerate(zip(grads, want)):
        assert got.dtype == ref.dtype, f"{name}: d arg{data['wrt'][k]} is {got.dtype}, the peer's {ref.dtype}"
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL_FRACTION * float(np.max(np.abs(ref))),
                                   err_msg=f"{producer} {name}: d arg{data['wrt'][k]}")


def test_jax_grad_is_the_conjugate():
    """The stored references really are conj(jax.grad) for complex arguments, so the check above
    is a check of the convention (irgrad's complex gradient would fail against jax.grad's own)."""
    data = _data("jax", "complex_abs2")
    assert np.iscomplexobj(data["grad0"])
    np.testing.assert_array_equal(data["grad0"], np.conj(data["jax_grad0"]))
    _, got, _ = _compiled("jax", "complex_abs2")["main_grad"].call_flat(*_numbered(data, "arg"))
    assert max_relative_error(got, data["jax_grad0"]) > 0.1


def test_the_peers_agree_up_to_conjugation():
    """Fixtures of the same name were made from the same arguments: TensorFlow's gradient of a
    complex argument is the conjugate of jax.grad's, equal to the conjugated reference."""
    # (triangular_solves differs between the two: JAX's has a right-side solve, TF's an adjoint.)
    shared = sorted(({n for p, n in CASES if p == "jax"} & {n for p, n in CASES if p == "tf"}) - {"triangular_solves"})
    complex_ones = 0
    for name in shared:
        j, t = _data("jax", name), _data("tf", name)
        for k, arg in enumerate(_numbered(j, "arg")):
            np.testing.assert_array_equal(arg, t[f"arg{k}"])
        for k, ref in enumerate(_numbered(t, "grad")):
            np.testing.assert_allclose(j[f"grad{k}"], ref, rtol=1e-4, atol=1e-5 * float(np.max(np.abs(ref))))
            if np.iscomplexobj(ref):
                complex_ones += 1
                assert max_relative_error(j[f"jax_grad{k}"], ref) > 0.1  # jax.grad's own: conjugated
    assert complex_ones >= 3


def peer_table() -> list[tuple[str, str, float]]:
    """(module, producer, max relative error of irgrad's gradients against the peer's)."""
    rows = []
    for producer, name in CASES:
        data = _data(producer, name)
        _, *grads = _compiled(producer, name)["main_grad"].call_flat(*_numbered(data, "arg"))
        rows.append((name, producer, max(max_relative_error(g, r) for g, r in zip(grads, _numbered(data, "grad")))))
    return rows


# ----- JAX's LAPACK calls ----------------------------------------------------------------

POTRF = """
func.func @main(%a: tensor<2x3x3xf32>) -> (tensor<2x3x3xf32>, tensor<2xi32>) {
  %0:2 = stablehlo.custom_call @lapack_spotrf_ffi(%a) {mhlo.backend_config = {uplo = UPLO : ui8}, operand_layouts = [dense<[1, 2, 0]> : tensor<3xindex>], result_layouts = [dense<[1, 2, 0]> : tensor<3xindex>, dense<0> : tensor<1xindex>]} : (tensor<2x3x3xf32>) -> (tensor<2x3x3xf32>, tensor<2xi32>)
  return %0#0, %0#1 : tensor<2x3x3xf32>, tensor<2xi32>
}
"""

TRSM = """
func.func @main(%a: tensor<3x3xf64>, %b: tensor<3x2xf64>) -> tensor<3x2xf64> {
  %0 = stablehlo.custom_call @lapack_dtrsm_ffi(%a, %b) {mhlo.backend_config = {diag = DIAG : ui8, side = 76 : ui8, trans_x = TRANS : ui8, uplo = UPLO : ui8}} : (tensor<3x3xf64>, tensor<3x2xf64>) -> tensor<3x2xf64>
  return %0 : tensor<3x2xf64>
}
"""


def _potrf_reference(a: np.ndarray, lower: bool) -> tuple[np.ndarray, int]:
    """LAPACK's potrf, unblocked: the factor in one triangle, the other as given, and info."""
    n = a.shape[0]
    m = (a if lower else a.T).astype(np.float64).copy()
    for j in range(n):
        ajj = m[j, j] - m[j, :j] @ m[j, :j]
        if not ajj > 0:
            out = (m if lower else m.T)
            return out, j + 1
        m[j, j] = np.sqrt(ajj)
        m[j + 1:, j] = (m[j + 1:, j] - m[j + 1:, :j] @ m[j, :j]) / m[j, j]
    return (m if lower else m.T), 0


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_potrf_call_is_cholesky_with_info(uplo):
    text = POTRF.replace("UPLO", str(ord(uplo)))
    module = parse_module(text)
    assert rewrite_lapack_calls(module) == 1
    assert "custom_call" not in str(module) and "stablehlo.cholesky" in str(module)
    rng = np.random.default_rng(5)
    g = rng.standard_normal((3, 3))
    good = (g @ g.T + 3 * np.eye(3)).astype(np.float32)
    good[0, 2] += 7.0 if uplo == "L" else 0.0  # the triangle LAPACK does not read: kept as given
    good[2, 0] += 7.0 if uplo == "U" else 0.0
    bad = np.array([[4, 2, 1], [2, 1, 0], [1, 0, 2]], np.float32)  # leading 2x2 minor singular: info 2
    factor, info = ig.compile(text).load()["main"](np.stack([good, bad]))
    want, want_info = _potrf_reference(good, uplo == "L")
    np.testing.assert_allclose(factor[0], want, rtol=1e-5, atol=1e-6)
    assert info.tolist() == [0, _potrf_reference(bad, uplo == "L")[1]] == [0, 2]


@pytest.mark.parametrize("uplo,trans,diag", [("L", "N", "N"), ("L", "T", "U"), ("U", "N", "U"), ("U", "C", "N")])
def test_trsm_call_is_triangular_solve(uplo, trans, diag):
    text = TRSM.replace("UPLO", str(ord(uplo))).replace("TRANS", str(ord(trans))).replace("DIAG", str(ord(diag)))
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((3, 3)) + 3 * np.eye(3), rng.standard_normal((3, 2))
    m = np.tril(a) if uplo == "L" else np.triu(a)
    if diag == "U":
        np.fill_diagonal(m, 1.0)
    op = m if trans == "N" else m.T
    x = ig.compile(text).load()["main"](a, b)
    np.testing.assert_allclose(x, np.linalg.solve(op, b), rtol=1e-12)
    d = ig.compile(passes.differentiate(text, "main")).load()["main_grad"](a, b)
    # d/db of sum(x) = op^-T 1; d/da is -x̄ xᵀ-like, masked: check b's against numpy.
    np.testing.assert_allclose(d[1], np.linalg.solve(op.T, np.ones((3, 2))), rtol=1e-12)


def test_unknown_lapack_calls_are_refused_by_name():
    text = """
func.func @main(%a: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %0:3 = stablehlo.custom_call @lapack_sgetrf_ffi(%a) : (tensor<3x3xf32>) -> (tensor<3x3xf32>, tensor<3xi32>, tensor<i32>)
  return %0#0 : tensor<3x3xf32>
}"""
    with pytest.raises(LookupError, match="lapack_sgetrf_ffi"):
        passes.differentiate(text, "main")
    # A potrf call without the attributes JAX writes is left alone, and refused by name.
    with pytest.raises(LookupError, match="lapack_spotrf_ffi"):
        passes.differentiate(POTRF.replace("mhlo.backend_config = {uplo = UPLO : ui8}, ", ""), "main")


if __name__ == "__main__":  # the report's table
    for module, producer, err in peer_table():
        print(f"| {module} | {producer} | {err:.1e} |")
