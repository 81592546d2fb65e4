"""tf.custom_gradient's documented examples, registered gradients, and the IR convention."""
from __future__ import annotations

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes
from irgrad.passes.transforms.registry import RULES
from gradcheck import check_fn, check_module


# ----- the tf.custom_gradient page, with ig in place of tf ------------------------------------

def log1pexp_plain(x):
    return ig.math.log(1 + ig.exp(x))


@ig.custom_gradient
def log1pexp(x):
    e = ig.exp(x)

    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))
    return ig.math.log(1 + e), grad


def test_seed_log1pexp_is_nan_without_custom_gradient():
    @ig.function
    def f(x):
        return ig.gradients(log1pexp_plain(x), x)[0]

    assert np.isnan(f(np.float32(100.)))


def test_seed_log1pexp_custom_gradient_is_one_at_100():
    @ig.function
    def f(x):
        y = log1pexp(x)
        return ig.gradients(y, x)[0]

    assert float(f(np.float32(100.))) == 1.0
    np.testing.assert_allclose(f(np.float32(0.5)), 1 / (1 + np.exp(-0.5)), rtol=1e-6)


@ig.custom_gradient
def bar(x, y):
    def grad(upstream):
        dz_dx = y
        dz_dy = x
        return upstream * dz_dx, upstream * dz_dy
    z = x * y
    return z, grad


def test_seed_bar_with_persistent_tape():
    @ig.function
    def f():
        x = ig.constant(2.0, dtype=ig.float32)
        y = ig.constant(3.0, dtype=ig.float32)
        with ig.GradientTape(persistent=True) as tape:
            tape.watch(x)
            tape.watch(y)
            z = bar(x, y)
        return z, tape.gradient(z, x), tape.gradient(z, y)

    z, dx, dy = f()
    assert (float(z), float(dx), float(dy)) == (6.0, 3.0, 2.0)


def test_seed_linear_poly_with_variables():
    weights = ig.Variable(np.ones([2], np.float32))  # Trainable variable weights

    @ig.custom_gradient
    def linear_poly(x):
        # Creating polynomial
        poly = weights[1] * x + weights[0]

        def grad_fn(dpoly, variables):
            # dy/dx = weights[1] and we need to left multiply dpoly
            grad_xs = dpoly * weights[1]  # Scalar gradient

            grad_vars = []  # To store gradients of passed variables
            assert variables is not None
            assert len(variables) == 1
            assert variables[0] is weights
            # Manually computing dy/dweights
            dy_dw = dpoly * ig.stack([x ** 1, x ** 0])
            grad_vars.append(ig.reduce_sum(ig.reshape(dy_dw, [2, -1]), axis=1))
            return grad_xs, grad_vars
        return poly, grad_fn

    @ig.function
    def f(x):
        with ig.GradientTape(persistent=True) as tape:
            tape.watch(x)
            poly = linear_poly(x)
        return poly, tape.gradient(poly, x), tape.gradient(poly, weights)

    poly, dx, dw = f(np.array([1., 2., 3.], np.float32))
    np.testing.assert_array_equal(poly, [2., 3., 4.])
    np.testing.assert_array_equal(dx, [1., 1., 1.])
    np.testing.assert_array_equal(dw, [6., 3.])


def test_seed_stop_gradient_around_an_op_without_gradient(monkeypatch):
    # irgrad has no tf.random.shuffle; an op whose adjoint rule is removed plays its part.
    monkeypatch.delitem(RULES, "stablehlo.reverse")

    @ig.custom_gradient
    def test_func_with_stop_grad(x):
        def _inner_func():
            # Avoid exception during the forward pass
            return ig.stop_gradient(x[::-1])
        res = _inner_func()

        def grad(upstream):
            return upstream  # Arbitrarily defined custom gradient
        return res, grad

    @ig.function
    def f(x):
        with ig.GradientTape() as g:
            g.watch(x)
            res = test_func_with_stop_grad(x)
        return g.gradient(res, x)

    np.testing.assert_array_equal(f(np.array([0.3, 0.5], np.float32)), [1., 1.])


def test_nested_custom_gradient_is_not_the_second_derivative():
    """TensorFlow's nested semantics: grad_grad_fn differentiates grad_fn w.r.t. dy only."""
    @ig.custom_gradient
    def op(x):
        y = x * x

        @ig.custom_gradient
        def grad_fn(dy):
            gdy = dy * 2.0 * x

            def grad_grad_fn(ddy):  # Not the 2nd order gradient of op w.r.t. x.
                return ddy * 100.0
            return gdy, grad_grad_fn
        return y, grad_fn

    @ig.function
    def f(x):
        y = op(x)
        (g,) = ig.gradients(y, x)
        return g, ig.gradients(g, x), ig.gradients(g, x, unconnected_gradients="zero")

    g, d2, d2_zero = f(np.float32(3.0))
    assert float(g) == 6.0
    # g depends on x only through the inner custom gradient's *captured* x, which gets no
    # gradient: d g / d x is unconnected, exactly as grad_grad_fn only returns d/d dy.
    assert d2 == [None] and float(d2_zero[0]) == 0.0


def test_nested_custom_gradient_fused_backprop_pattern():
    """The page's op_with_fused_backprop: an inner custom gradient supplies the second order."""
    @ig.custom_gradient
    def op_with_fused_backprop(x):
        y = ig.sin(x)
        x_grad = ig.cos(x)

        def first_order_gradient(dy):
            @ig.custom_gradient
            def first_order_custom(unused_x):
                def second_order_and_transpose(ddy):
                    return ddy * -ig.sin(x) * 10.0   # a deliberately scaled second order
                return x_grad, second_order_and_transpose
            return dy * first_order_custom(x)
        return y, first_order_gradient

    @ig.function
    def f(x):
        (g,) = ig.gradients(op_with_fused_backprop(x), x)
        (h,) = ig.gradients(g, x)
        return g, h

    g, h = f(np.float32(0.5))
    np.testing.assert_allclose(g, np.cos(0.5), rtol=1e-6)
    np.testing.assert_allclose(h, -np.sin(0.5) * 10.0, rtol=1e-6)


def test_custom_gradient_multiple_inputs_and_outputs():
    @ig.custom_gradient
    def two(x, y):
        def grad(da, db):
            return da + db, da * 10.0
        return (x + y, x * y), grad

    @ig.function
    def f(x, y):
        a, b = two(x, y)
        return ig.gradients([a, b], [x, y])

    gx, gy = f(np.float32(2.0), np.float32(3.0))
    assert (float(gx), float(gy)) == (2.0, 10.0)


def test_wrong_gradient_count_is_value_error():
    @ig.custom_gradient
    def f(x, y):
        return x * y, lambda dz: dz  # one gradient for two inputs

    with pytest.raises(ValueError, match="expected to return 2 gradients, but returned 1"):
        ig.function(lambda x: f(x, x)).lower(ig.TensorSpec([]))


def test_variables_without_variables_keyword_is_type_error():
    v = ig.Variable(np.float32(2.0))

    @ig.custom_gradient
    def f(x):
        return x * v, lambda dz: dz * v

    with pytest.raises(TypeError, match="keyword argument 'variables'"):
        ig.function(f).lower(ig.TensorSpec([]))


def test_second_derivative_through_custom_gradient_differentiates_grad_fn():
    @ig.custom_gradient
    def cube(x):
        def grad(dy):
            return dy * 3.0 * x * x
        return x * x * x, grad

    @ig.function
    def f(x):
        (g,) = ig.gradients(cube(x), x)
        return g, ig.gradients(g, x)[0]

    g, h = f(np.float32(2.0))
    assert (float(g), float(h)) == (12.0, 12.0)


# ----- the IR convention survives in saved modules --------------------------------------

def test_irgrad_grad_on_saved_module_uses_the_custom_gradient():
    @ig.custom_gradient
    def fake_sin(x):
        return ig.sin(x), lambda dy: dy * 2.0   # deliberately not cos(x)

    text = ig.export(lambda x: fake_sin(x) * 3.0, ig.TensorSpec([3]), name="model")
    assert '"irgrad.custom_gradient"' in text
    graded = passes.differentiate(text, "model")
    module = ig.compile(graded).load()
    np.testing.assert_array_equal(module["model_grad"](np.array([0., 1., 2.], np.float32)), [6., 6., 6.])


def test_stop_gradient_region_in_saved_module():
    text = ig.export(lambda x: ig.stop_gradient(x * x) + x, ig.TensorSpec([2]), name="model")
    assert '"irgrad.stop_gradient"' in text
    module = ig.compile(passes.differentiate(text)).load()
    np.testing.assert_array_equal(module["model_grad"](np.array([3., 4.], np.float32)), [1., 1.])


def test_foreign_producer_custom_gradient_convention():
    """A module written by hand (another producer) following the README's convention."""
    text = """
func.func private @fwd(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.exponential %x : tensor<2xf32>
  return %0 : tensor<2xf32>
}
func.func private @bwd(%dy: tensor<2xf32>, %x: tensor<2xf32>) -> tensor<2xf32> {
  %c = stablehlo.constant dense<7.0> : tensor<2xf32>
  %0 = stablehlo.multiply %dy, %c : tensor<2xf32>
  return %0 : tensor<2xf32>
}
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.composite "irgrad.custom_gradient" %x {decomposition = @fwd, composite_attributes = {grad = @bwd}} : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}"""
    module = ig.compile(passes.differentiate(text, "main", with_value=True)).load()
    value, grad = module["main_grad"](np.array([0., 1.], np.float32))
    np.testing.assert_allclose(value, np.exp([0., 1.]), rtol=1e-6)
    np.testing.assert_array_equal(grad, [7., 7.])


def test_unknown_composite_is_differentiated_through_its_decomposition():
    text = """
func.func private @my_gelu_like(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.multiply %x, %x : tensor<3xf32>
  return %0 : tensor<3xf32>
}
func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.composite "acme.square" %x {decomposition = @my_gelu_like} : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}"""
    module = ig.compile(passes.differentiate(text)).load()
    np.testing.assert_array_equal(module["main_grad"](np.array([1., 2., 3.], np.float32)), [2., 4., 6.])


# ----- RegisterGradient, gradient_override_map, no_gradient, grad_pass_through -----------

@ig.RegisterGradient("TestTanhTimesTen")
def _tanh_times_ten(op, grad):
    y = op.outputs[0]
    return grad * (1 - y * y) * 10.0


def test_gradient_override_map_uses_registered_gradient():
    @ig.function
    def f(x):
        with ig.get_default_graph().gradient_override_map({"stablehlo.tanh": "TestTanhTimesTen"}):
            y = ig.tanh(x)
        z = ig.tanh(x)  # outside the map: the built-in rule
        return ig.gradients(y, x)[0], ig.gradients(z, x)[0]

    x = np.array([0.0, 0.5], np.float32)
    custom, builtin = f(x)
    np.testing.assert_allclose(custom, 10 * (1 - np.tanh(x) ** 2), rtol=1e-6)
    np.testing.assert_allclose(builtin, 1 - np.tanh(x) ** 2, rtol=1e-6)


def test_register_gradient_errors():
    with pytest.raises(KeyError):
        ig.RegisterGradient("TestTanhTimesTen")(lambda op, g: g)      # already registered
    with pytest.raises(KeyError):
        ig.RegisterGradient("stablehlo.tanh")(lambda op, g: g)        # built-in op type
    with pytest.raises(TypeError):
        ig.RegisterGradient(42)


def test_override_to_unregistered_name_is_lookup_error_at_gradient_time():
    def f(x):
        with ig.get_default_graph().gradient_override_map({"stablehlo.sine": "NobodyRegisteredThis"}):
            y = ig.sin(x)
        return ig.gradients(y, x)

    fn = ig.function(lambda x: ig.sin(x))
    fn.lower(ig.TensorSpec([2]))  # building the op alone is fine
    with pytest.raises(LookupError, match="NobodyRegisteredThis"):
        ig.function(f).lower(ig.TensorSpec([2]))


def test_register_gradient_under_a_new_op_type_name():
    ig.RegisterGradient("test.sine_as_minus_one")(lambda op, g: -g)

    @ig.function
    def f(x):
        with ig.get_default_graph().gradient_override_map({"stablehlo.sine": "test.sine_as_minus_one"}):
            y = ig.sin(x) * 2.0
        return ig.gradients(y, x)[0]

    np.testing.assert_array_equal(f(np.array([1.0], np.float32)), [-2.0])


def test_registered_gradient_with_the_wrong_number_of_gradients_is_a_value_error():
    ig.RegisterGradient("test.two_for_one")(lambda op, g: [g, g])

    def f(x):
        with ig.get_default_graph().gradient_override_map({"stablehlo.tanh": "test.two_for_one"}):
            return ig.tanh(x)

    with pytest.raises(ValueError, match=r"'test.two_for_one' for 'stablehlo.tanh' returned 2 gradients, "
                                         r"expected 1 \(one per input\)"):
        ig.function(f).lower(ig.TensorSpec([2]))


def test_no_gradient_gives_none_without_error():
    ig.no_gradient("test.NoGradOp")

    @ig.function
    def f(x):
        with ig.get_default_graph().gradient_override_map({"stablehlo.exponential": "test.NoGradOp"}):
            y = ig.exp(x)
        return ig.gradients(y, x), ig.gradients(y + x, x)

    (none,), (only_x,) = f(np.array([1.0], np.float32))
    assert none is None
    np.testing.assert_array_equal(only_x, [1.0])
    with pytest.raises(KeyError):
        ig.no_gradient("test.NoGradOp")


def test_grad_pass_through():
    @ig.function
    def f(x):
        y = ig.grad_pass_through(lambda t: ig.round(t * 4.0) / 4.0)(x)   # a quantizer
        return y, ig.gradients(y * 3.0, x)[0]

    y, g = f(np.array([0.3, 0.6], np.float32))
    np.testing.assert_array_equal(y, [0.25, 0.5])
    np.testing.assert_array_equal(g, [3.0, 3.0])


def test_grad_pass_through_variable_assign():
    v = ig.Variable(np.float32(0.0))

    @ig.function
    def f(x):
        z = ig.grad_pass_through(v.assign)(x)
        return ig.gradients(z * 5.0, x)[0]

    assert float(f(np.float32(2.0))) == 5.0
    assert float(v.numpy()) == 2.0


# ----- recompute_grad ------------------------------------------------------------------------

def _cell(h, w):
    z = h @ w
    return ig.tanh(z) * ig.sigmoid(z @ w) / (1.0 + ig.reduce_sum(z * z, axis=1, keepdims=True))


def test_recompute_grad_has_the_plain_functions_values_and_gradients():
    """Same forward, gradients and second derivatives as the function it wraps, exactly;
    and the numeric checker on it (ig.gradients and the module pass)."""
    rng = np.random.default_rng(0)
    h, w = rng.normal(size=(3, 4)), rng.normal(size=(4, 4)) * 0.5
    recomputed = ig.recompute_grad(_cell)

    @ig.function
    def both(h, w):
        out = []
        for cell in (_cell, recomputed):
            y = ig.reduce_sum(cell(h, w) ** 2)
            dh, dw = ig.gradients(y, [h, w])
            out += [y, dh, dw, ig.gradients(ig.reduce_sum(dh * dh), w)[0]]
        return out

    plain, again = np.split(np.array(both(h, w), dtype=object), 2)
    for a, b in zip(plain, again):
        np.testing.assert_allclose(b, a, rtol=1e-13, atol=1e-13)
    check_fn(recomputed, h, w)


def test_recompute_grad_differentiates_the_variables_it_reads():
    v = ig.Variable(np.array([[0.5, -0.2], [0.3, 0.8]]))
    x = np.array([[1.0, 2.0]])

    @ig.function
    def grads(x):
        y = ig.reduce_sum(ig.recompute_grad(lambda x: ig.tanh(x @ v))(x) ** 2)
        z = ig.reduce_sum(ig.tanh(x @ v) ** 2)
        return ig.gradients(y, [x, v]), ig.gradients(z, [x, v])

    recomputed, plain = grads(x)
    for a, b in zip(plain, recomputed):
        np.testing.assert_allclose(b, a, rtol=1e-13)


@pytest.mark.loop_forms("looped", reason="300 iterations: past the unrolling budget")
def test_recompute_grad_in_a_loop_body_records_its_inputs_only(loop_form):
    """300 iterations of a cell: the reverse pass records h and the reduction at every step
    (the products it recomputes); with the cell under recompute_grad, h only."""
    def run(cell):
        def f(h, w):
            return ig.while_loop(lambda i, h: i < 300, lambda i, h: (i + 1, cell(h, w)), (0, h))[1]
        return f

    args = [np.full((2, 4), 0.1), np.eye(4) * 0.9 + 0.05]
    plain, recomputed = (passes.differentiate(ig.function(run(c)).lower(*args).mlir)
                         for c in (_cell, ig.recompute_grad(_cell)))
    assert plain.count("stablehlo.dynamic_update_slice") == 2
    assert recomputed.count("stablehlo.dynamic_update_slice") == 1
    check_module(ig.function(run(ig.recompute_grad(_cell))).lower(*args).mlir, args)
