"""ig.random's stateless ops and the initializers on them.

TensorFlow's own numbers (equal bits for uniform, float64 normals and categorical; float32
normals to a rounding of sin/cos/log) are recorded in tests/fixtures/tf/cases_linalg.py. Here:
Philox4x32-10 against its published known-answer vectors, determinism, distribution
properties of large samples, the initializers' ranges, no gradient, the refusals, and a
Vulkan compile.
"""
from __future__ import annotations

import numpy as np
import pytest

import irgrad as ig
from irgrad.passes.ir import hlo
from irgrad.ops.core import emit
from irgrad.passes.ir.mlir import ir, tensor_type


def test_philox_known_answers():
    """Random123's kat_vectors for philox4x32-10 (counter, key) -> output."""
    vectors = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
         (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
    ]

    def fn(c, k):
        def build():
            u32 = ir.IntegerType.get_unsigned(32)
            cs = [ir.Operation.create("stablehlo.bitcast_convert", results=[tensor_type([], u32)],
                                      operands=[hlo.reshape(hlo.slice(c.value, [i], [i + 1], [1]), [])]).result
                  for i in range(4)]
            ks = [ir.Operation.create("stablehlo.bitcast_convert", results=[tensor_type([], u32)],
                                      operands=[hlo.reshape(hlo.slice(k.value, [i], [i + 1], [1]), [])]).result
                  for i in range(2)]
            out = ig.random.philox(cs, ks)
            return hlo.concatenate([hlo.reshape(ir.Operation.create(
                "stablehlo.bitcast_convert", results=[tensor_type([], ir.IntegerType.get_signless(32))],
                operands=[w]).result, [1]) for w in out], 0)
        return emit("philox", build)

    f = ig.function(fn)
    for counter, key, want in vectors:
        got = np.asarray(f(np.array(counter, np.uint32).view(np.int32), np.array(key, np.uint32).view(np.int32)))
        assert got.view(np.uint32).tolist() == list(want)


SAMPLES = 20000


@pytest.fixture(scope="module")
def draws():
    @ig.function
    def fn(seed, other):
        return [ig.random.stateless_uniform([SAMPLES], seed), ig.random.stateless_normal([SAMPLES], seed),
                ig.random.stateless_truncated_normal([SAMPLES], seed, mean=1.0, stddev=2.0),
                ig.random.stateless_categorical(ig.math.log(ig.constant([[0.2, 0.5, 0.3]])), SAMPLES, seed),
                ig.random.stateless_uniform([SAMPLES], other), ig.random.stateless_uniform([SAMPLES], seed),
                ig.random.stateless_uniform([SAMPLES], seed, minval=-3, maxval=4, dtype=ig.int32)]
    return [np.asarray(r) for r in fn(np.array([7, 11], np.int32), np.array([7, 12], np.int32))]


def test_distributions(draws):
    u, n, t, c, _, _, k = draws
    assert u.dtype == np.float32 and 0 <= u.min() and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    assert abs(n.mean()) < 0.03 and abs(n.std() - 1) < 0.02
    assert np.all(np.abs(t - 1.0) < 4.0) and abs(t.mean() - 1.0) < 0.05
    assert abs(t.std() - 2 * 0.8796) < 0.05  # a normal truncated at 2 sigma
    freq = np.bincount(c[0], minlength=3) / SAMPLES
    np.testing.assert_allclose(freq, [0.2, 0.5, 0.3], atol=0.015)
    assert c.dtype == np.int64 and k.dtype == np.int32 and k.min() == -3 and k.max() == 3


def test_determinism(draws):
    u, _, _, _, other, again, _ = draws
    np.testing.assert_array_equal(u, again)
    assert not np.array_equal(u, other)


def test_initializers():
    @ig.function
    def fn():
        init = ig.keras.initializers
        return [init.GlorotUniform(seed=1)([200, 100]), init.HeNormal(seed=2)([3, 3, 20, 30]),
                ig.initializers.glorot_normal(seed=3)([100, 100]), init.HeUniform()([50, 10])]

    gu, hn, gn, hu = (np.asarray(r) for r in fn())
    assert np.abs(gu).max() <= np.sqrt(6 / 300) and abs(gu.std() - np.sqrt(2 / 300)) < 0.003
    assert abs(hn.std() - np.sqrt(2 / 180)) < 0.01 and np.abs(hn).max() < 2 * np.sqrt(2 / 180) / 0.8796 + 1e-6
    assert gn.dtype == np.float32 and abs(gn.std() - 0.1) < 0.005
    assert np.abs(hu).max() <= np.sqrt(6 / 50)


def test_no_gradient():
    @ig.function
    def fn(x):
        y = x * ig.random.stateless_normal([3], [1, 2])
        return ig.gradients(y, x), ig.gradients(ig.random.stateless_uniform([3], [1, 2]), x)

    g, none = fn(np.ones(3, np.float32))
    assert np.asarray(g[0]).shape == (3,) and none == [None]


@pytest.mark.parametrize("call, error, match", [
    (lambda: ig.random.stateless_normal([2], [1, 2, 3]), ValueError, "shape \\[2\\]"),
    (lambda: ig.random.stateless_normal([2], [1.0, 2.0]), TypeError, "int32 or int64"),
    (lambda: ig.random.stateless_normal([2], [1, 2], dtype=ig.int32), TypeError, "dtype"),
    (lambda: ig.random.stateless_uniform([2], [1, 2], dtype=ig.int32), ValueError, "minval and maxval"),
    (lambda: ig.random.stateless_categorical(ig.constant([1.0, 2.0]), 3, [1, 2]), ValueError, "2-D"),
    (lambda: ig.random.stateless_uniform([2], [1, 2], alg="threefry"), ValueError, "alg"),
])
def test_bad_input_is_refused_precisely(call, error, match):
    with pytest.raises(error, match=match):
        ig.function(call).lower()


@pytest.mark.vulkan
def test_vulkan_draws_the_same_numbers():
    """The same bits on Vulkan as on the CPU (integer Philox; float32 normals to rounding)."""
    def fn(seed):
        return (ig.random.stateless_uniform([4, 5], seed), ig.random.stateless_normal([4, 5], seed),
                ig.random.stateless_truncated_normal([6], seed),
                ig.random.stateless_categorical(ig.zeros([2, 3]), 4, seed, dtype=ig.int32))

    seed = np.array([5, -6], np.int32)
    cpu = [np.asarray(r) for r in ig.function(fn, target="llvm-cpu")(seed)]
    gpu = [np.asarray(r) for r in ig.function(fn, target="vulkan")(seed)]
    np.testing.assert_array_equal(gpu[0], cpu[0])
    np.testing.assert_array_equal(gpu[3], cpu[3])
    for c, g in zip(cpu[1:3], gpu[1:3]):
        np.testing.assert_allclose(g, c, rtol=1e-5, atol=1e-5)
