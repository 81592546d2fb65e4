"""Every gradient choice the frontend makes is in the emitted StableHLO: ``ig.gradients`` in
process and ``irgrad.passes.differentiate`` on ``f.lower().mlir`` (what ``irgrad grad`` and
``irgrad compile --grad`` run) give the same numbers."""
from __future__ import annotations

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes


def _both(fn, *args):
    """(in-process gradients, gradients of the exported module) of ``fn`` at ``args``."""
    specs = [ig.TensorSpec(a.shape, ig.as_dtype(a.dtype)) for a in args]
    f = ig.function(fn, input_signature=specs)
    lowered = f.lower()
    exported = ig.compile(passes.differentiate(lowered.mlir, lowered.name, grad=True)).load()
    outside = exported[f"{lowered.name}_grad"].call_flat(*args)

    @ig.function(input_signature=specs)
    def inside(*xs):
        return ig.gradients(fn(*xs), list(xs))

    return [np.asarray(g) for g in inside(*args)], [np.asarray(g) for g in outside]


def test_relu_at_zero_and_nan():
    x = np.array([-1.0, 0.0, np.nan, 2.0], np.float32)
    inside, outside = _both(lambda x: ig.reduce_sum(ig.nn.relu(x)), x)
    np.testing.assert_array_equal(inside[0], [0.0, 0.0, 0.0, 1.0])  # TensorFlow's ReluGrad
    np.testing.assert_array_equal(outside[0], inside[0])


def test_one_hot_on_and_off_values_get_no_gradient():
    idx = np.array([0, 2, 1], np.int32)
    on, off = np.array(2.0, np.float32), np.array(-1.0, np.float32)
    fn = lambda on, off: ig.reduce_sum(ig.one_hot(idx, 3, on_value=on, off_value=off) * 3.0)  # noqa: E731
    specs = [ig.TensorSpec([], ig.float32)] * 2
    f = ig.function(fn, input_signature=specs)

    @ig.function(input_signature=specs)
    def inside(on, off):
        return ig.gradients(fn(on, off), [on, off], unconnected_gradients="zero")

    lowered = f.lower()
    exported = ig.compile(passes.differentiate(lowered.mlir, lowered.name, grad=True)).load()
    outside = exported[f"{lowered.name}_grad"].call_flat(on, off)
    assert [float(g) for g in inside(on, off)] == [0.0, 0.0]
    assert [float(g) for g in outside] == [0.0, 0.0]


@pytest.mark.parametrize("x", [np.array([-1.5, 0.0, 0.5, 3.0], np.float64)])
def test_relu_times_x_agrees(x):
    inside, outside = _both(lambda x: ig.reduce_sum(ig.nn.relu(x) * x), x)
    np.testing.assert_allclose(inside[0], [0.0, 0.0, 1.0, 6.0])
    np.testing.assert_allclose(outside[0], inside[0])


@ig.RegisterGradient("test_ir_agreement.TanhTimesTen")
def _tanh_times_ten(op, grad):
    y = op.outputs[0]
    return grad * (1 - y * y) * 10.0


ig.no_gradient("test_ir_agreement.NoGradient")


def _overridden(x):
    graph = ig.get_default_graph()
    with graph.gradient_override_map({"stablehlo.tanh": "test_ir_agreement.TanhTimesTen",
                                      "stablehlo.exponential": "test_ir_agreement.NoGradient"}):
        y = ig.tanh(x)
        z = ig.exp(x)
    return ig.reduce_sum(y + z * 0.5 + ig.sin(x))


def test_overridden_tanh_and_a_no_gradient_override():
    x = np.array([-0.7, 0.0, 0.4], np.float32)
    inside, outside = _both(_overridden, x)
    np.testing.assert_allclose(inside[0], 10 * (1 - np.tanh(x) ** 2) + np.cos(x), rtol=1e-6)
    np.testing.assert_allclose(outside[0], inside[0], rtol=1e-6)
