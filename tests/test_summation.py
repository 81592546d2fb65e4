"""Large float32 sums against float64 (passes/lowering/summation.py, applied on every compile).

IREE 3.13 sums sequentially: before the blocked sums, 64 M uniform [0, 1) float32 values summed
to half their total and 4 M to 2e-5 relative error. Each case here is compiled and run; the
bound, 1e-6 relative, is XLA's order of error on the same sums (≤ 7e-8 measured).
"""
from __future__ import annotations

import numpy as np
import pytest

import irgrad as ig
from irgrad.passes.lowering.legalize import legalize_text
from irgrad.passes.lowering.summation import THRESHOLD

from hostprogram import largest_buffer

F32 = np.float32
TOLERANCE = 1e-6


def relative_error(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-30)))


@ig.function
def total(x):
    return ig.reduce_sum(x)


@ig.function
def sum_of_squares(x):
    return ig.reduce_sum(ig.square(x))


@pytest.mark.parametrize("n", [4 << 20, 64 << 20], ids=["4M", "64M"])
def test_a_large_uniform_sum_is_within_1e_6_of_float64(n):
    x = np.random.default_rng(n).random(n, dtype=F32)
    assert relative_error(total(x), x.astype(np.float64).sum()) < TOLERANCE


def test_the_sum_of_squares_of_a_2048_square_normal_matrix():
    b = np.random.default_rng(1).standard_normal((2048, 2048), dtype=F32)
    b64 = b.astype(np.float64)
    assert relative_error(sum_of_squares(b), (b64 * b64).sum()) < TOLERANCE


def test_gradients_that_sum_over_a_large_batch():
    """A dense layer over 2^20 examples: the bias gradient sums 2^20 cotangents (``ones · ct``)
    and the weight gradient contracts over the batch (``xᵀ · ct``); the loss is a batch mean."""
    rng = np.random.default_rng(2)
    n = 1 << 20
    x = rng.random((n, 8), dtype=F32)
    w = (rng.standard_normal((8, 4)) * 0.3).astype(F32)
    b = rng.standard_normal(4).astype(F32)

    @ig.function
    def loss_and_grads(x, w, b):
        loss = ig.reduce_mean(ig.square(x @ w + b))
        return loss, ig.gradients(loss, [w, b])

    loss, (dw, db) = loss_and_grads(x, w, b)
    x64, w64, b64 = (a.astype(np.float64) for a in (x, w, b))
    z = x64 @ w64 + b64
    ct = 2 * z / z.size
    assert relative_error(loss, (z * z).mean()) < TOLERANCE
    assert relative_error(db, ct.sum(0)) < TOLERANCE
    assert relative_error(dw, x64.T @ ct) < TOLERANCE


# ----- the rewrite's shapes: every branch against numpy, on sizes just past the threshold -----------

def _run(text: str, *args):
    return ig.load(ig.compile(text).vmfb)["main"](*args)


def _reduce_module(shape, dims, init=0.0):
    s = "x".join(map(str, shape)) + "x"
    out = "".join(f"{n}x" for i, n in enumerate(shape) if i not in dims)
    return f"""
func.func @main(%x: tensor<{s}f32>) -> tensor<{out}f32> {{
  %init = stablehlo.constant dense<{init}> : tensor<f32>
  %r = stablehlo.reduce(%x init: %init) applies stablehlo.add across dimensions = {list(dims)}
       : (tensor<{s}f32>, tensor<f32>) -> tensor<{out}f32>
  return %r : tensor<{out}f32>
}}"""


@pytest.mark.parametrize("shape,dims,init", [
    ((1031,), [0], 0.0),                      # a prime length: blocks and a tail
    ((4, 3 * THRESHOLD + 5, 3), [1], 0.0),    # a middle dimension, kept dims on both sides
    ((3 * THRESHOLD + 1, 7), [0], 2.5),       # a leading dimension (a bias gradient's sum), an init value
    ((40, 9, 30), [0, 2], 0.0),               # two dimensions, neither alone past the threshold
    ((6, 70, 80), [0, 1, 2], -1.0),           # everything: the inner dimension first, then the partials flat
    ((2, 2, 300), [0, 1, 2], 0.0),            # everything, the inner dimension split
])
def test_blocked_sums_equal_the_sum(shape, dims, init):
    text = _reduce_module(shape, dims, init)
    assert legalize_text(text).count("stablehlo.reduce") > 1  # the blocked form is what runs
    x = np.random.default_rng(3).standard_normal(shape).astype(F32)
    want = x.astype(np.float64).sum(axis=tuple(dims)) + init
    np.testing.assert_allclose(_run(text, x), want, rtol=1e-5, atol=1e-4)


def test_a_blocked_sum_takes_its_operands_producer_in_its_first_reduce():
    """A mean-squared error over 256x128x128: IREE computes the squares inside the blocked sum's
    first reduce (over the operand's inner dimension, no reshape before it), so no buffer of the
    operand's size is allocated; the operand reshaped flat first made a 16 MiB temporary."""
    t = "tensor<256x128x128xf32>"
    text = f"""func.func @main(%a: {t}, %b: {t}) -> tensor<f32> {{
  %d = stablehlo.subtract %a, %b : {t}
  %s = stablehlo.multiply %d, %d : {t}
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce(%s init: %z) applies stablehlo.add across dimensions = [0, 1, 2] : ({t}, tensor<f32>) -> tensor<f32>
  return %r : tensor<f32>
}}"""
    assert largest_buffer(text) < (1 << 20)  # the partial sums (128 KiB), the result
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal((256, 128, 128)).astype(F32) for _ in range(2))
    want = np.square(a.astype(np.float64) - b).sum()
    assert relative_error(_run(text, a, b), want) < TOLERANCE


def test_a_large_sum_of_a_broadcast_product_compiles():
    """IREE 3.13's vector.contract bug (tests/fixtures/iree313_vector_contract_reduce.mlir) at a
    size past the threshold: sum(mean(x, 0) * x) blocked, its last partials reduced flat."""
    a, b = 40, 60
    text = f"""func.func @main(%x: tensor<{a}x{b}xf32>) -> tensor<f32> {{
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %n = stablehlo.constant dense<{a}.0> : tensor<{b}xf32>
  %s = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<{a}x{b}xf32>, tensor<f32>) -> tensor<{b}xf32>
  %m = stablehlo.divide %s, %n : tensor<{b}xf32>
  %r = stablehlo.reshape %m : (tensor<{b}xf32>) -> tensor<1x{b}xf32>
  %bb = stablehlo.broadcast_in_dim %r, dims = [0, 1] : (tensor<1x{b}xf32>) -> tensor<{a}x{b}xf32>
  %p = stablehlo.multiply %bb, %x : tensor<{a}x{b}xf32>
  %t = stablehlo.reduce(%p init: %zero) applies stablehlo.add across dimensions = [0, 1] : (tensor<{a}x{b}xf32>, tensor<f32>) -> tensor<f32>
  return %t : tensor<f32>
}}"""
    x = np.random.default_rng(6).standard_normal((a, b)).astype(F32)
    x64 = x.astype(np.float64)
    assert relative_error(_run(text, x), (x64.mean(0) * x64).sum()) < TOLERANCE


def test_a_short_sum_and_a_float64_sum_are_left_alone():
    assert legalize_text(_reduce_module((THRESHOLD,), [0])).count("stablehlo.reduce") == 1
    long64 = _reduce_module((4 * THRESHOLD,), [0]).replace("f32", "f64")
    assert legalize_text(long64).count("stablehlo.reduce") == 1


@pytest.mark.parametrize("lhs,rhs,dims", [
    ((5 * THRESHOLD + 3,), (5 * THRESHOLD + 3, 6), "contracting_dims = [0] x [0]"),  # ones · x, a tail
    ((2, 4 * THRESHOLD, 3), (2, 4 * THRESHOLD, 5),
     "batching_dims = [0] x [0], contracting_dims = [1] x [1]"),                        # batched xᵀ · ct
    ((3, 2, 700), (700, 2, 4), "contracting_dims = [1, 2] x [1, 0]"),  # two contracting dims
    ((8, 24, 24), (8, 24, 24, 16), "contracting_dims = [0, 1, 2] x [0, 1, 2]"),  # a bias sum over NHW, merged
    ((5, 40, 30), (40, 30, 3), "contracting_dims = [1, 2] x [0, 1]"),  # adjacent in both: merged
    ((6, 40, 30), (30, 40, 6, 2), "contracting_dims = [0, 1, 2] x [2, 1, 0]"),  # adjacent in one only
])
def test_long_contractions_are_chunked_and_equal_the_product(lhs, rhs, dims):
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal(lhs).astype(F32), rng.standard_normal(rhs).astype(F32)
    spec = dims.replace("contracting_dims = ", "").replace("batching_dims = ", "")
    eq = {
        "[0] x [0]": "i,ij->j",
        "[0] x [0], [1] x [1]": "bki,bkj->bij",
        "[1, 2] x [1, 0]": "ijk,kjl->il",
        "[0, 1, 2] x [0, 1, 2]": "abc,abcj->j",
        "[1, 2] x [0, 1]": "iab,abj->ij",
        "[0, 1, 2] x [2, 1, 0]": "abc,cbaj->j",
    }[spec]
    want = np.einsum(eq, a.astype(np.float64), b.astype(np.float64))
    out = "x".join(map(str, want.shape)) + "x" if want.ndim else ""
    t = lambda s: "tensor<" + "x".join(map(str, s)) + "xf32>"  # noqa: E731
    text = f"""
func.func @main(%a: {t(lhs)}, %b: {t(rhs)}) -> tensor<{out}f32> {{
  %r = stablehlo.dot_general %a, %b, {dims} : ({t(lhs)}, {t(rhs)}) -> tensor<{out}f32>
  return %r : tensor<{out}f32>
}}"""
    legal = legalize_text(text)
    assert "stablehlo.reduce" in legal  # the chunks summed: the chunked form runs
    if spec == "[0, 1, 2] x [0, 1, 2]":  # the three dims as one, cut into 18 contiguous chunks of 256 rows
        assert "tensor<18x256x16xf32>" in legal, legal
    np.testing.assert_allclose(_run(text, a, b), want, rtol=1e-5, atol=1e-4)
