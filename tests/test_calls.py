"""Calling an ``ig.function`` with an ``input_signature`` (issue 40, item 3): a repeated call
with numpy arrays of the signature's dtypes and shapes goes straight to the loaded module, as
calls without a signature do; anything else takes the checked way, with its precise errors.
``benchmarks/bench_calls.py`` measures both forms against ``jax.jit``."""
from __future__ import annotations

import numpy as np
import pytest

import irgrad as ig


def test_signature_calls_after_the_first_run_the_module_with_the_arrays_given():
    f = ig.function(lambda x, a: x * 2.0 + ig.reduce_sum(a), input_signature=[ig.TensorSpec([3]),
                                                                               ig.TensorSpec([2, 2])])
    assert f._sig_runner is None
    np.testing.assert_array_equal(f([1, 2, 3], np.ones((2, 2), np.float32)), [6, 8, 10])  # lists: converted
    assert f._sig_runner is not None
    rng = np.random.default_rng(0)
    for _ in range(3):  # arrays of the signature's dtype and shape: the direct way, new values each time
        x, a = rng.standard_normal(3).astype(np.float32), rng.standard_normal((2, 2)).astype(np.float32)
        np.testing.assert_allclose(f(x, a), x * 2 + a.sum(), rtol=1e-6)
    strided = np.arange(6, dtype=np.float32)[::2]  # not contiguous
    np.testing.assert_array_equal(f(strided, np.zeros((2, 2), np.float32)), [0, 4, 8])
    np.testing.assert_array_equal(f(a=np.zeros((2, 2), np.float32), x=np.ones(3, np.float32)), [2, 2, 2])
    assert f.trace_count == 1


def test_signature_calls_keep_their_precise_errors_after_the_direct_way_is_set():
    f = ig.function(lambda x: x * 2.0, input_signature=[ig.TensorSpec([2, 3], ig.float32)])
    f(np.ones((2, 3), np.float32))
    assert f._sig_runner is not None
    with pytest.raises(ValueError, match=r"argument 0 has shape \(3, 2\), but the input_signature expects \(2, 3\)"):
        f(np.ones((3, 2), np.float32))
    with pytest.raises(TypeError, match="argument 0 has dtype float64, but the input_signature expects float32"):
        f(np.ones((2, 3), np.float64))
    with pytest.raises(TypeError, match="too many positional arguments"):
        f(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match="missing a required argument"):
        f()
    np.testing.assert_array_equal(f(np.full((2, 3), 2, np.float32)), np.full((2, 3), 4))


def test_a_dynamic_dimension_takes_every_size_the_direct_way():
    f = ig.function(lambda x: ig.reduce_sum(x, axis=1), input_signature=[ig.TensorSpec([None, 2])])
    for rows in (1, 4, 3):
        x = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)
        np.testing.assert_array_equal(f(x), x.sum(axis=1))
    with pytest.raises(ValueError, match=r"shape \(4, 3\).*\(None, 2\)"):
        f(np.ones((4, 3), np.float32))
    with pytest.raises(ValueError, match=r"shape \(2,\).*\(None, 2\)"):
        f(np.ones(2, np.float32))
    assert f.trace_count == 1


def test_signature_calls_read_and_update_variables_and_pack_their_results():
    v = ig.Variable(np.zeros(2, np.float32))

    @ig.function(input_signature=[ig.TensorSpec([2]), ig.TensorSpec([], ig.int32)])
    def step(x, n):
        v.assign_add(x)
        return {"v": v.read_value(), "pair": (n + 1, None)}

    for i in range(3):
        out = step([1.0, 1.0], i)  # Python values: the checked way
        np.testing.assert_array_equal(out["v"], [i + 1, i + 1])
        assert int(out["pair"][0]) == i + 1 and out["pair"][1] is None
    for n in (np.array(7, np.int32), np.int32(8)):  # a 0-d array, a numpy scalar: the direct way
        out = step(np.full(2, 2.0, np.float32), n)
        assert int(out["pair"][0]) == n + 1
    np.testing.assert_array_equal(out["v"], [7, 7])
    assert int(step(np.zeros(2, np.float32), np.int64(1))["pair"][0]) == 2  # another dtype: converted, checked
    np.testing.assert_array_equal(v.numpy(), [7, 7])
