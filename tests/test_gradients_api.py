"""``ig.gradients``: the seed documents' examples and TensorFlow's semantics, exactly."""
from __future__ import annotations

import numpy as np
import pytest

import irgrad as ig
from irgrad.passes.transforms.registry import RULES


# ----- the tf.gradients page, with ig in place of tf -------------------------------------

def test_seed_stop_gradients_partial_derivative():
    @ig.function
    def example():
        a = ig.constant(0.)
        b = 2 * a
        return ig.gradients(a + b, [a, b], stop_gradients=[a, b])

    assert [float(g) for g in example()] == [1.0, 1.0]


def test_seed_total_derivative():
    @ig.function
    def example():
        a = ig.constant(0.)
        b = 2 * a
        return ig.gradients(a + b, [a, b])

    assert [float(g) for g in example()] == [3.0, 1.0]


def test_seed_stop_gradient_op_is_equivalent():
    @ig.function
    def example():
        a = ig.stop_gradient(ig.constant(0.))
        b = ig.stop_gradient(2 * a)
        return ig.gradients(a + b, [a, b])

    assert [float(g) for g in example()] == [1.0, 1.0]


def test_seed_unconnected_gradients():
    @ig.function
    def example(use_zero):
        a = ig.ones([1, 2])
        b = ig.ones([3, 1])
        if use_zero:
            return ig.gradients([b], [a], unconnected_gradients='zero')
        else:
            return ig.gradients([b], [a], unconnected_gradients='none')

    assert example(False) == [None]
    (zero,) = example(True)
    assert zero.shape == (1, 2) and zero.dtype == np.float32
    np.testing.assert_array_equal(zero, [[0., 0.]])


def test_seed_cost_example():
    @ig.function
    def example():
        Ws = ig.constant(0.)
        bs = 2 * Ws
        cost = Ws + bs  # This is just an example. Please ignore the formulas.
        g = ig.gradients(cost, [Ws, bs])
        dCost_dW, dCost_db = g
        return dCost_dW, dCost_db

    dw, db = example()
    assert (float(dw), float(db)) == (3.0, 1.0)


def test_unconnected_gradients_enum_and_strings():
    @ig.function
    def f(x):
        y = ig.ones([2])
        return (ig.gradients(y, x, unconnected_gradients=ig.UnconnectedGradients.ZERO),
                ig.gradients(y, x, unconnected_gradients=ig.UnconnectedGradients.NONE))

    zero, none = f(np.ones(3, np.float32))
    np.testing.assert_array_equal(zero[0], np.zeros(3))
    assert none == [None]


# ----- gradients_util semantics ---------------------------------------------------------

def test_grad_ys_none_seeds_ones_of_y_shape():
    @ig.function
    def f(x):
        y = ig.reshape(x, [2, 3]) * 3.0
        return ig.gradients(y, x)[0], ig.gradients(y, x, grad_ys=ig.ones([2, 3]))[0]

    a, b = f(np.arange(6, dtype=np.float32))
    np.testing.assert_array_equal(a, np.full(6, 3.0))
    np.testing.assert_array_equal(a, b)


def test_grad_ys_weights_each_y():
    @ig.function
    def f(x):
        y1, y2 = x * 2.0, x * x
        return ig.gradients([y1, y2], x, grad_ys=[np.array([1., 10.], np.float32), ig.constant([3., 0.])])

    (g,) = f(np.array([1.0, 2.0], np.float32))
    np.testing.assert_array_equal(g, [2 * 1 + 3 * 2 * 1, 2 * 10 + 0])


def test_x_in_both_xs_and_stop_gradients_gets_its_gradient():
    @ig.function
    def f(x):
        h = x * x
        y = h * 3.0
        return ig.gradients(y, [x, h], stop_gradients=[h], unconnected_gradients="zero")

    gx, gh = f(np.array([2.0], np.float32))
    np.testing.assert_array_equal(gh, [3.0])  # h's own gradient
    np.testing.assert_array_equal(gx, [0.0])  # nothing flows through the stopped h


def test_integer_tensors_are_constants():
    @ig.function
    def f(x, k):
        y = x * ig.cast(k, ig.float32)
        i = k * 2
        return (ig.gradients(y, [x, k]), ig.gradients(i, k), ig.gradients(i, k, unconnected_gradients="zero"),
                ig.gradients(ig.cast(ig.cast(x, ig.int32), ig.float32), x))

    (gx, gk), (gi,), (gi_zero,), (through_int,) = f(np.ones(2, np.float32), np.array([3, 4], np.int32))
    np.testing.assert_array_equal(gx, [3.0, 4.0])
    assert gk is None and gi is None and through_int is None
    np.testing.assert_array_equal(gi_zero, [0, 0])


def test_same_x_twice_gets_the_same_gradient():
    @ig.function
    def f(x):
        return ig.gradients(ig.sin(x), [x, x])

    g1, g2 = f(np.array([0.0, 1.0], np.float32))
    np.testing.assert_array_equal(g1, g2)
    np.testing.assert_allclose(g1, np.cos([0.0, 1.0]), rtol=1e-6)


def test_gradients_of_y_wrt_itself_is_the_seed():
    @ig.function
    def f(x):
        y = x * 2.0
        return ig.gradients(y, y), ig.gradients(y, y, grad_ys=ig.constant([5., 6.])), ig.gradients([y, y * 3.0], y)

    (a,), (b,), (c,) = f(np.ones(2, np.float32))
    np.testing.assert_array_equal(a, [1.0, 1.0])
    np.testing.assert_array_equal(b, [5.0, 6.0])
    np.testing.assert_array_equal(c, [4.0, 4.0])


def test_several_ys_sum_their_gradients():
    @ig.function
    def f(x):
        return ig.gradients([x * 2.0, ig.reduce_sum(x * x)], x)

    (g,) = f(np.array([1.0, 3.0], np.float32))
    np.testing.assert_array_equal(g, [4.0, 8.0])


@pytest.mark.parametrize("method", [None, ig.AggregationMethod.ADD_N, ig.AggregationMethod.DEFAULT,
                                    ig.AggregationMethod.EXPERIMENTAL_TREE,
                                    ig.AggregationMethod.EXPERIMENTAL_ACCUMULATE_N, 0, 1, 2])
def test_aggregation_methods_give_equal_numbers(method):
    @ig.function
    def f(x):
        y = x * 1.0 + x * 2.0 + x * 3.0 + x * 4.0 + ig.sin(x)
        return ig.gradients(y, x, aggregation_method=method)[0]

    x = np.array([0.5, 1.0], np.float32)
    np.testing.assert_allclose(f(x), 10.0 + np.cos(x), rtol=1e-6)


def test_tree_aggregation_builds_a_balanced_sum():
    def final_sum(method):
        out = {}

        def f(x):
            y = ig.add(ig.add(ig.add(x * 1.0, x * 2.0), x * 3.0), x * 4.0)
            out["g"] = ig.gradients(y, x, aggregation_method=method)[0]
            return out["g"]

        ig.function(f).lower(ig.TensorSpec([2]))
        return out["g"]

    def depth(t):
        return 1 + max((depth(i) for i in t.op.inputs), default=0) if t.op.type == "stablehlo.add" else 0

    assert depth(final_sum(ig.AggregationMethod.ADD_N)) == 3             # ((a + b) + c) + d
    assert depth(final_sum(ig.AggregationMethod.EXPERIMENTAL_TREE)) == 2  # (a + b) + (c + d)


def test_gate_gradients_groups_with_optimization_barrier():
    def f(a, b):
        return ig.gradients(ig.reduce_sum(a * b), [a, b], gate_gradients=True)

    fn = ig.function(f)
    text = fn.lower(ig.TensorSpec([3]), ig.TensorSpec([3])).mlir
    assert "stablehlo.optimization_barrier" in text
    ga, gb = fn(np.array([1., 2., 3.], np.float32), np.array([4., 5., 6.], np.float32))
    np.testing.assert_array_equal(ga, [4., 5., 6.])
    np.testing.assert_array_equal(gb, [1., 2., 3.])


def test_name_prefixes_gradient_op_locations():
    def f(x):
        return ig.gradients(ig.tanh(x), x, name="my_grads")[0]

    text = ig.function(f).lower(ig.TensorSpec([3])).mlir
    assert 'loc("my_grads/tanh_grad"' in text


def test_gradients_are_symbolic_and_composable():
    @ig.function
    def penalty(x, w):
        y = ig.reduce_sum(ig.tanh(x * w))
        (gx,) = ig.gradients(y, [x])
        gp = ig.reduce_sum(gx * gx)          # gradient penalty
        (dgp_dw,) = ig.gradients(gp, [w])    # differentiate through the gradient
        return gx, gp, dgp_dw

    x = np.array([0.3, -0.4], np.float32)
    w = np.array([1.5, 0.5], np.float32)
    gx, gp, dgp_dw = penalty(x, w)
    t = np.tanh(x * w)
    np.testing.assert_allclose(gx, w * (1 - t ** 2), rtol=1e-5)
    np.testing.assert_allclose(gp, np.sum((w * (1 - t ** 2)) ** 2), rtol=1e-5)
    # d/dw [w (1 - t^2)]^2 = 2 g (1 - t^2 - 2 w t (1 - t^2) x)
    g = w * (1 - t ** 2)
    np.testing.assert_allclose(dgp_dw, 2 * g * ((1 - t ** 2) - 2 * w * t * (1 - t ** 2) * x), rtol=1e-4)


def test_tf1_graph_and_session():
    with ig.Graph().as_default() as g:
        x = ig.placeholder(ig.float32, shape=[3])
        y = ig.reduce_sum(x * x)
        (gx,) = ig.gradients(y, x)
        assert ig.get_default_graph() is g
        with ig.Session() as sess:
            out = sess.run({"y": y, "g": gx}, feed_dict={x: np.array([1., 2., 3.], np.float32)})
    assert float(out["y"]) == 14.0
    np.testing.assert_array_equal(out["g"], [2., 4., 6.])


# ----- errors ------------------------------------------------------------------------

def _trace(fn, *specs):
    return ig.function(fn).lower(*(specs or (ig.TensorSpec([2]),)))


def test_grad_ys_length_mismatch():
    with pytest.raises(ValueError, match="Passed 2 grad_ys for 1 ys"):
        _trace(lambda x: ig.gradients(x * 2.0, x, grad_ys=[ig.ones([2]), ig.ones([2])]))


def test_grad_ys_shape_mismatch():
    with pytest.raises(ValueError, match=r"grad_ys\[0\] has shape \(3,\).*\(2,\)"):
        _trace(lambda x: ig.gradients(x * 2.0, x, grad_ys=ig.ones([3])))


def test_grad_ys_dtype_mismatch_is_type_error():
    with pytest.raises(TypeError, match="float64.*float32"):
        _trace(lambda x: ig.gradients(x * 2.0, x, grad_ys=ig.ones([2], ig.float64)))


def test_unknown_unconnected_gradients_lists_accepted_values():
    with pytest.raises(ValueError, match="'zero'"):
        _trace(lambda x: ig.gradients(x, x, unconnected_gradients="ZERO"))
    with pytest.raises(ValueError, match="none"):
        _trace(lambda x: ig.gradients(x, x, unconnected_gradients="nonsense"))


def test_unknown_aggregation_method_lists_accepted_values():
    with pytest.raises(ValueError, match="EXPERIMENTAL_TREE"):
        _trace(lambda x: ig.gradients(x * 2.0, x, aggregation_method=7))


def test_missing_adjoint_rule_is_lookup_error_naming_op_and_location(monkeypatch):
    monkeypatch.delitem(RULES, "stablehlo.sine")
    with pytest.raises(LookupError, match=r"stablehlo\.sine.*my_sine"):
        _trace(lambda x: ig.gradients(ig.sin(x, name="my_sine") * 2.0, x))


def test_gradients_outside_graph_is_runtime_error():
    x = None
    with pytest.raises(RuntimeError, match="ig.function"):
        ig.gradients(x, x)


def test_op_outside_graph_is_runtime_error():
    with pytest.raises(RuntimeError, match="@ig.function"):
        ig.sin(np.ones(2))


def test_exception_while_tracing_reaches_caller_unchanged():
    class Boom(Exception):
        pass

    def f(x):
        raise Boom("from user code")

    with pytest.raises(Boom, match="from user code"):
        ig.function(f)(np.ones(2, np.float32))
