"""``stablehlo.cholesky`` and ``stablehlo.triangular_solve``: IREE 3.13 refuses both on
llvm-cpu; irgrad lowers them to loops at compile time (``passes/rules/linalg.py``) and
differentiates the ops themselves (Murray's Cholesky adjoint, the transposed solve).

Forward values against numpy, adjoints and tangents against float64 central differences
(``gradcheck.check_module``), every ``triangular_solve`` attribute combination, batch
dimensions, second order, and the batching rule against a loop over the batch.
"""
from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes
from gradcheck import check_fn, check_module

N = 3
RNG = np.random.default_rng(7)


def _t(shape, dtype="f64"):
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>"


def _spd(batch=(), n=N, dtype=np.float64):
    a = RNG.standard_normal((*batch, n, n))
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


def _cholesky_module(lower: bool, batch=(), dtype="f64") -> str:
    t = _t((*batch, N, N), dtype)
    return f"""func.func @f(%a: {t}) -> {t} {{
  %0 = stablehlo.cholesky %a, lower = {str(lower).lower()} : {t}
  return %0 : {t}
}}"""


def _solve(i: int, a: str, b: str, bshape, left, lower, unit, transpose, dtype="f64") -> str:
    bt = _t(bshape, dtype)
    at = _t((*bshape[:-2], N, N), dtype)
    return (f'  %x{i} = "stablehlo.triangular_solve"({a}, {b}) {{left_side = {str(left).lower()}, '
            f'lower = {str(lower).lower()}, unit_diagonal = {str(unit).lower()}, '
            f'transpose_a = #stablehlo<transpose {transpose}>}} : ({at}, {bt}) -> {bt}\n')


def _reference_solve(a, b, left, lower, unit, transpose):
    m = np.tril(a) if lower else np.triu(a)
    if unit:
        m = m - np.einsum("...ii->...i", m)[..., None] * np.eye(a.shape[-1]) + np.eye(a.shape[-1])
    if transpose != "NO_TRANSPOSE":
        m = np.swapaxes(m, -1, -2)
    if left:
        return np.linalg.solve(m, b)
    return np.swapaxes(np.linalg.solve(np.swapaxes(m, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)


def _run(text, *args):
    return [np.asarray(r) for r in ig.compile(text).load()["f"].call_flat(*args)]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_plain_iree_refuses_and_irgrad_compiles_cholesky(tmp_path, dtype):
    """The reason for the lowering: iree-compile alone rejects the op."""
    text = _cholesky_module(True, (2,), dtype)
    src = tmp_path / "chol.mlir"
    src.write_text(text)
    iree = subprocess.run([str(Path(sys.executable).parent / "iree-compile"), str(src), "--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
                           "-o", str(tmp_path / "x.vmfb")], capture_output=True, text=True)
    assert iree.returncode != 0 and "stablehlo.cholesky" in iree.stderr
    a = _spd((2,), dtype=np.float32 if dtype == "f32" else np.float64)
    garbage = a + np.triu(RNG.standard_normal(a.shape), 1).astype(a.dtype)  # the upper triangle is not read
    (out,) = _run(text, garbage)
    np.testing.assert_allclose(out, np.linalg.cholesky(a), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lower", [True, False])
def test_cholesky_adjoint_and_tangent(lower):
    a = _spd((2,))
    a = a + (np.triu if lower else np.tril)(RNG.standard_normal(a.shape), 1 if lower else -1)
    check_module(_cholesky_module(lower, (2,)), [a])


@pytest.mark.parametrize("left", [True, False])
def test_triangular_solve_every_attribute(left):
    """All twelve (lower, unit_diagonal, transpose_a) combinations on one side in one module,
    batched: values against numpy, then the adjoint and tangent of all twelve at once."""
    bshape = (2, N, 2) if left else (2, 2, N)
    combos = list(itertools.product((True, False), (True, False), ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT")))
    body = "".join(_solve(i, "%a", "%b", bshape, left, lo, un, tr) for i, (lo, un, tr) in enumerate(combos))
    outs = ", ".join(f"%x{i}" for i in range(len(combos)))
    types = ", ".join([_t(bshape)] * len(combos))
    text = (f"func.func @f(%a: {_t((2, N, N))}, %b: {_t(bshape)}) -> ({types}) {{\n{body}"
            f"  return {outs} : {types}\n}}")
    a = RNG.standard_normal((2, N, N)) + 3 * np.eye(N)
    b = RNG.standard_normal(bshape)
    got = _run(text, a, b)
    for (lo, un, tr), g in zip(combos, got):
        np.testing.assert_allclose(g, _reference_solve(a, b, left, lo, un, tr), rtol=1e-10, atol=1e-10)
    check_module(text, [a, b])


CHOLESKY_SOLVE = f"""func.func @f(%a: {_t((N, N))}, %b: {_t((N, 2))}) -> tensor<f64> {{
  %at = stablehlo.transpose %a, dims = [1, 0] : ({_t((N, N))}) -> {_t((N, N))}
  %g = stablehlo.dot_general %a, %at, contracting_dims = [1] x [0] : ({_t((N, N))}, {_t((N, N))}) -> {_t((N, N))}
  %n = stablehlo.constant dense<{float(N)}> : {_t((N,))}
  %d = stablehlo.broadcast_in_dim %n, dims = [1] : ({_t((N,))}) -> {_t((N, N))}
  %i0 = stablehlo.iota dim = 0 : tensor<{N}x{N}xi32>
  %i1 = stablehlo.iota dim = 1 : tensor<{N}x{N}xi32>
  %eq = stablehlo.compare EQ, %i0, %i1 : (tensor<{N}x{N}xi32>, tensor<{N}x{N}xi32>) -> tensor<{N}x{N}xi1>
  %z = stablehlo.constant dense<0.0> : {_t((N, N))}
  %eye = stablehlo.select %eq, %d, %z : tensor<{N}x{N}xi1>, {_t((N, N))}
  %s = stablehlo.add %g, %eye : {_t((N, N))}
  %l = stablehlo.cholesky %s, lower = true : {_t((N, N))}
{_solve(0, "%l", "%b", (N, 2), True, True, False, "NO_TRANSPOSE")}{_solve(1, "%l", "%x0", (N, 2), True, True, False, "TRANSPOSE")}\
  %sq = stablehlo.multiply %x1, %x1 : {_t((N, 2))}
  %zero = stablehlo.constant dense<0.0> : tensor<f64>
  %r = stablehlo.reduce(%sq init: %zero) applies stablehlo.add across dimensions = [0, 1] : ({_t((N, 2))}, tensor<f64>) -> tensor<f64>
  return %r : tensor<f64>
}}"""


def _cholesky_solve_loss(a, b):
    s = a @ a.T + N * np.eye(N)
    return float(np.sum(np.linalg.solve(s, b) ** 2))


def test_cholesky_solve_loss_compiles_and_differentiates():
    """loss = sum(solve(chol(A Aᵀ + n I), b)²): value, @f_grad against central differences
    of numpy's loss, and the checker on the vjp/jvp."""
    a, b = RNG.standard_normal((N, N)), RNG.standard_normal((N, 2))
    text = passes.differentiate(CHOLESKY_SOLVE, "f", with_value=True)
    assert "stablehlo.cholesky" in text  # differentiated on the op; the loops come at compile time
    module = ig.compile(text).load()
    value, ga, gb = (np.asarray(r) for r in module["f_grad"].call_flat(a, b))
    assert value == pytest.approx(_cholesky_solve_loss(a, b), rel=1e-12)
    eps = 1e-6
    for x, g, k in ((a, ga, 0), (b, gb, 1)):
        num = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            d = np.zeros_like(x)
            d[idx] = eps
            args = [a, b]
            args[k] = x + d
            plus = _cholesky_solve_loss(*args)
            args[k] = x - d
            num[idx] = (plus - _cholesky_solve_loss(*args)) / (2 * eps)
        np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-8)
    check_module(CHOLESKY_SOLVE, [a, b])


def test_second_order_through_the_adjoint_solves():
    """The gradient's own triangular_solves differentiate again: @f_grad checked as a function."""
    a, b = RNG.standard_normal((N, N)), RNG.standard_normal((N, 2))
    first = passes.differentiate(CHOLESKY_SOLVE, "f", grad=True)
    check_module(first, [a, b], func="f_grad", jvp=False, rtol=1e-5)


def test_batching_rules_equal_a_loop():
    text = (f"func.func @f(%a: {_t((N, N))}, %b: {_t((N, 2))}) -> ({_t((N, N))}, {_t((N, 2))}) {{\n"
            f"  %l = stablehlo.cholesky %a, lower = true : {_t((N, N))}\n"
            + _solve(0, "%l", "%b", (N, 2), True, True, False, "TRANSPOSE")
            + f"  return %l, %x0 : {_t((N, N))}, {_t((N, 2))}\n}}")
    module = ig.compile(passes.vectorize(text, "f", None, 2)).load()
    a, b = _spd((2,)), RNG.standard_normal((2, N, 2))
    got = module["f_batched"].call_flat(a, b)
    for k in range(2):
        want = module["f"].call_flat(a[k], b[k])
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g)[k], w, rtol=1e-12, atol=1e-12)


def test_complex_cholesky_is_refused_with_the_op_named():
    text = """func.func @f(%a: tensor<2x2xcomplex<f32>>) -> tensor<2x2xcomplex<f32>> {
  %0 = stablehlo.cholesky %a, lower = true : tensor<2x2xcomplex<f32>>
  %1 = stablehlo.real %0 : (tensor<2x2xcomplex<f32>>) -> tensor<2x2xf32>
  return %0 : tensor<2x2xcomplex<f32>>
}"""
    with pytest.raises((passes.MissingAdjointError, ValueError), match="cholesky|complex"):
        passes.differentiate(text, "f", wrt=[0])


# ----- ig.linalg (issue 42): TensorFlow's ops, their gradients checked numerically ------------------
# TensorFlow's recorded values and gradients: tests/fixtures/tf/cases_linalg.py.

def _well_conditioned(*shape):
    return RNG.standard_normal(shape) + 3 * np.eye(shape[-1])


def test_lu_family_gradients():
    """inv and solve (both ways) through the LU composite's adjoint and tangent; det and slogdet
    in reverse mode (their forward mode: test_lu_forward_mode)."""
    a, b = _well_conditioned(2, 3, 3), RNG.standard_normal((2, 3, 2))

    def fn(a, b):
        return [ig.linalg.inv(a), ig.linalg.inv(a, adjoint=True), ig.linalg.solve(a, b),
                ig.linalg.solve(a, b, adjoint=True)]

    check_fn(fn, a, b)
    check_fn(lambda a: [ig.linalg.det(a), ig.linalg.slogdet(a)[1]], a, both=False)


@pytest.mark.parametrize("op", [lambda a: [ig.linalg.det(a), ig.linalg.slogdet(a)[1]],
                                lambda a: [ig.linalg.lu(a)[0]]], ids=["det", "lu"])
def test_lu_forward_mode(op):
    """The jvp of lu's own result, det and slogdet, checked with the reverse mode. IREE 3.13
    failed to compile it ("failed to schedule execution partitions without cyclic
    dependencies": a strict xfail here) until modules with loops were compiled for one named
    device (``runtime.compiler._place_on_one_device``, issue 43)."""
    check_fn(op, _well_conditioned(2, 3, 3))


def test_lu_values_and_its_own_gradient():
    """lu's packed factors reproduce a[p] = L U (pivoting on a tiny leading entry), and the
    gradient of a function of the packed factors is right."""
    a = _well_conditioned(2, 4, 4)
    a[:, 0, 0] = 1e-3
    lu, p = ig.function(lambda x: ig.linalg.lu(x))(a)
    lu, p = np.asarray(lu), np.asarray(p)
    lower = np.tril(lu, -1) + np.eye(4)
    np.testing.assert_allclose(np.take_along_axis(a, p[..., None], 1), lower @ np.triu(lu), atol=1e-12)
    assert (p[:, 0] != 0).all()
    check_fn(lambda x: [ig.linalg.lu(x)[0]], a, both=False)


def test_cholesky_family_gradients():
    """cholesky (of a symmetrised input: TensorFlow's gradient is symmetric), cholesky_solve,
    logdet and triangular_solve."""
    x, b = RNG.standard_normal((2, 3, 3)), RNG.standard_normal((2, 3, 2))

    def fn(x, b):
        s = ig.matmul(x, x, transpose_b=True) + ig.constant(3 * np.eye(3))
        chol = ig.linalg.cholesky(s)
        return [chol, ig.linalg.cholesky_solve(chol, b), ig.linalg.logdet(s),
                ig.linalg.triangular_solve(s, b, lower=False, adjoint=True)]

    check_fn(fn, x, b)


def test_eigh_gradients():
    """eigh reads the lower triangle; its TensorFlow gradient (lower-triangular) is the true
    derivative of that. Eigenvectors sign-normalised."""
    a = RNG.standard_normal((2, 4, 4))
    a = a + np.swapaxes(a, -1, -2)

    def fn(a):
        e, v = ig.linalg.eigh(a)
        return [e, v * ig.sign(ig.reduce_sum(v, axis=-2, keepdims=True)), ig.linalg.eigvalsh(a)]

    check_fn(fn, a)


@pytest.mark.parametrize("shape", [(2, 4, 3), (3, 5), (3, 3)], ids=["deep", "wide", "square"])
def test_qr_and_svd_gradients(shape):
    a = RNG.standard_normal(shape)

    def fn(a):
        q, r = ig.linalg.qr(a)
        s, u, v = ig.linalg.svd(a)
        signs = ig.sign(ig.reduce_sum(u, axis=-2, keepdims=True))
        return [q, r, s, u * signs, v * signs, ig.linalg.svd(a, compute_uv=False)]

    check_fn(fn, a)


def test_full_matrices_values_and_gradients():
    """qr(full_matrices) of a wide matrix and svd(full_matrices) with |m - n| = 1 differentiate
    (TensorFlow's rules); the cases TensorFlow refuses raise NotImplementedError, as there."""
    a = RNG.standard_normal((3, 4))

    def fn(a):
        q, r = ig.linalg.qr(a, full_matrices=True)
        s, u, v = ig.linalg.svd(a, full_matrices=True)
        signs = ig.sign(ig.reduce_sum(u, axis=-2, keepdims=True))
        return [q, r, s, u * signs]

    check_fn(fn, a)
    deep = ig.TensorSpec([4, 2], ig.float64)

    def qr_full(x):
        return ig.gradients(ig.reduce_sum(ig.linalg.qr(x, full_matrices=True)[0]), x)

    def svd_full(x):
        return ig.gradients(ig.reduce_sum(ig.linalg.svd(x, full_matrices=True)[1]), x)

    for f in (qr_full, svd_full):
        with pytest.raises(NotImplementedError, match="full_matrices"):
            ig.function(f).lower(deep)


def test_structure_ops_gradients():
    a, b, w = RNG.standard_normal((2, 3, 4)), RNG.standard_normal((2, 4)), RNG.standard_normal((4, 3))

    def fn(a, b, w):
        return [ig.linalg.band_part(a, 0, 1), ig.linalg.diag(b, k=-1), ig.linalg.diag_part(a, k=1),
                ig.linalg.set_diag(a, b[:, :3]), ig.linalg.trace(a[:, :, :3]), ig.linalg.matvec(a, b),
                ig.linalg.tensordot(a, w, 1)]

    check_fn(fn, a, b, w, both=False)


def test_decompositions_under_vectorized_map():
    """The composites batch (their decompositions batched): equal to the batched op."""
    a = RNG.standard_normal((3, 4, 4))
    a = a + np.swapaxes(a, -1, -2) + 8 * np.eye(4)

    def one(m):
        return [ig.linalg.eigh(m)[0], ig.linalg.svd(m, compute_uv=False), ig.linalg.det(m), ig.abs(ig.linalg.qr(m)[1])]

    mapped = ig.function(lambda x: ig.vectorized_map(one, x))(a)
    direct = ig.function(one)(a)
    for m, d in zip(mapped, direct):
        np.testing.assert_allclose(np.asarray(m), np.asarray(d), rtol=1e-12, atol=1e-12)


@pytest.mark.vulkan
def test_float32_runs_on_vulkan():
    """Every decomposition and its gradient in float32 on Vulkan (the loops are plain StableHLO),
    against the CPU."""
    def fn(a):
        s = ig.matmul(a, a, transpose_b=True) + 4.0 * ig.linalg.eye(4)
        loss = (ig.reduce_sum(ig.linalg.eigh(s)[0]) + ig.reduce_sum(ig.linalg.svd(a, compute_uv=False))
                + ig.reduce_sum(ig.linalg.qr(a)[1]) + ig.linalg.det(s) + ig.reduce_sum(ig.linalg.inv(s))
                + ig.linalg.logdet(s))
        return loss, ig.gradients(loss, a)[0]

    a = RNG.standard_normal((4, 4)).astype(np.float32)
    cpu = ig.function(fn, target="llvm-cpu")(a)
    gpu = ig.function(fn, target="vulkan")(a)
    for c, g in zip(cpu, gpu):
        np.testing.assert_allclose(np.asarray(g), np.asarray(c), rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("call, error, match", [
    (lambda x: ig.linalg.inv(x[:, :2]), ValueError, "square"),
    (lambda x: ig.linalg.det(ig.cast(x, ig.int32)), TypeError, "floating-point"),
    (lambda x: ig.linalg.band_part(x, ig.constant(1), 0), TypeError, "num_lower"),
    (lambda x: ig.linalg.diag_part(x, k=(0, 1)), NotImplementedError, "band of diagonals"),
    (lambda x: ig.linalg.solve(x, x[:2]), ValueError, "do not match"),
    (lambda x: ig.linalg.tensordot(x, x, [[0], [0, 1]]), ValueError, "axes"),
])
def test_bad_input_is_refused_precisely(call, error, match):
    with pytest.raises(error, match=match):
        ig.function(call).lower(ig.TensorSpec([3, 3], ig.float32))


JAX_EIGH = """module @jit_eigh {
  func.func public @main(%arg0: tensor<3x3xf64>) -> (tensor<3xf64>, tensor<3x3xf64>) {
    %0:2 = call @eigh(%arg0) : (tensor<3x3xf64>) -> (tensor<3xf64>, tensor<3x3xf64>)
    return %0#0, %0#1 : tensor<3xf64>, tensor<3x3xf64>
  }
  func.func private @eigh(%arg0: tensor<3x3xf64>) -> (tensor<3xf64>, tensor<3x3xf64>) {
    %0 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<3x3xf64>) -> tensor<3x3xf64>
    %1 = stablehlo.add %arg0, %0 : tensor<3x3xf64>
    %cst = stablehlo.constant dense<2.000000e+00> : tensor<3x3xf64>
    %3 = stablehlo.divide %1, %cst : tensor<3x3xf64>
    %4:3 = stablehlo.custom_call @lapack_dsyevd_ffi(%3) {backend_config = "", mhlo.backend_config = {mode = 86 : ui8, uplo = UPLO : ui8}, output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [0], operand_index = 0, operand_tuple_indices = []>]} : (tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3xf64>, tensor<i32>)
    %c = stablehlo.constant dense<0> : tensor<i32>
    %6 = stablehlo.compare EQ, %4#2, %c, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %nan = stablehlo.constant dense<0x7FF8000000000000> : tensor<3xf64>
    %9 = stablehlo.broadcast_in_dim %6, dims = [] : (tensor<i1>) -> tensor<3xi1>
    %14 = stablehlo.select %9, %4#1, %nan : tensor<3xi1>, tensor<3xf64>
    %sq = stablehlo.multiply %4#0, %4#0 : tensor<3x3xf64>
    return %14, %sq : tensor<3xf64>, tensor<3x3xf64>
  }
}"""


@pytest.mark.parametrize("uplo", [76, 85], ids=["L", "U"])
def test_jax_cpu_eigh_call_becomes_the_eigh_composite(uplo):
    """JAX's CPU ``eigh`` (``custom_call @lapack_dsyevd_ffi``, as jax.jit(jnp.linalg.eigh) lowers
    it; layouts and sharding attributes left out) compiles and differentiates: irgrad replaces
    the call by its eigh composite (eigenvalues, and the squares of the eigenvectors, which do
    not depend on their signs)."""
    text = JAX_EIGH.replace("UPLO", str(uplo))
    a = RNG.standard_normal((3, 3))
    e, vv = (np.asarray(r) for r in ig.compile(text).load()["main"].call_flat(a))
    w, v = np.linalg.eigh((a + a.T) / 2)
    np.testing.assert_allclose(e, w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(vv, v * v, rtol=1e-10, atol=1e-12)
    assert "irgrad.linalg.eigh" in passes.differentiate(text, "main", grad=False, vjp=True)
    check_module(text, [a], func="main")


JAX_SVD = """module @jit_svd {
  func.func public @main(%arg0: tensor<4x3xf64>) -> (tensor<3xf64>, tensor<UxUxf64>, tensor<VxVxf64>) {
    %0:5 = stablehlo.custom_call @lapack_dgesdd_ffi(%arg0) {backend_config = "", mhlo.backend_config = {mode = MODE : ui8}, output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [0], operand_index = 0, operand_tuple_indices = []>]} : (tensor<4x3xf64>) -> (tensor<4x3xf64>, tensor<3xf64>, tensor<4xUxf64>, tensor<Vx3xf64>, tensor<i32>)
    %u = stablehlo.dot_general %0#2, %0#2, contracting_dims = [1] x [1] : (tensor<4xUxf64>, tensor<4xUxf64>) -> tensor<4x4xf64>
    %v = stablehlo.dot_general %0#3, %0#3, contracting_dims = [0] x [0] : (tensor<Vx3xf64>, tensor<Vx3xf64>) -> tensor<3x3xf64>
    %us = stablehlo.slice %u [0:U, 0:U] : (tensor<4x4xf64>) -> tensor<UxUxf64>
    %vs = stablehlo.slice %v [0:V, 0:V] : (tensor<3x3xf64>) -> tensor<VxVxf64>
    return %0#1, %us, %vs : tensor<3xf64>, tensor<UxUxf64>, tensor<VxVxf64>
  }
}"""


@pytest.mark.parametrize("mode, u, v", [(83, 3, 3), (65, 4, 3), (78, 4, 3)], ids=["S", "A", "N"])
def test_jax_cpu_svd_call_becomes_the_svd_composite(mode, u, v):
    """JAX's CPU ``svd`` (``custom_call @lapack_dgesdd_ffi``; reduced, full, values only) becomes
    irgrad's svd composite: the singular values and the sign-free projectors ``u uᵀ``, ``vᵀ v``
    against numpy, and (reduced) their gradient against central differences."""
    text = JAX_SVD.replace("MODE", str(mode)).replace("U", str(u)).replace("V", str(v))
    a = RNG.standard_normal((4, 3))
    s, uu, vv = (np.asarray(r) for r in ig.compile(text).load()["main"].call_flat(a))
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-12)
    if mode == 78:
        assert not uu.any() and not vv.any()
        return
    un, _, vn = np.linalg.svd(a, full_matrices=mode == 65)
    np.testing.assert_allclose(uu, (un @ un.T)[:u, :u], atol=1e-12)
    np.testing.assert_allclose(vv, (vn.T @ vn)[:v, :v], atol=1e-12)
    if mode == 83:
        check_module(text, [a], func="main")
