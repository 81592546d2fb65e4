"""Hessians, Hessian-vector products, Jacobians, GradientTape and Variables."""
from __future__ import annotations

import re

import numpy as np
import pytest

import irgrad as ig

from gradcheck import check_vjp


def _quadratic(n):
    @ig.function
    def f(x, a):
        y = 0.5 * ig.reduce_sum(x * ig.reshape(a @ ig.reshape(x, [n, 1]), [n]))
        return ig.hessians(y, x)[0]
    return f


@pytest.mark.parametrize("n", [3, 200])
def test_hessian_of_quadratic_form(n):
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n)).astype(np.float32)
    x = rng.standard_normal(n).astype(np.float32)
    h = _quadratic(n)(x, a)
    assert h.shape == (n, n)
    np.testing.assert_allclose(h, (a + a.T) / 2, rtol=1e-5, atol=1e-5)


def _op_count(text: str) -> int:
    return len(re.findall(r"= stablehlo\.|= \"?stablehlo\.|stablehlo\.\w+ ", text))


def test_hessian_ir_size_does_not_grow_with_n():
    small = _quadratic(3).lower(ig.TensorSpec([3]), ig.TensorSpec([3, 3])).mlir
    large = _quadratic(200).lower(ig.TensorSpec([200]), ig.TensorSpec([200, 200])).mlir
    assert "stablehlo.while" not in large  # vectorized rows, not a loop over them
    assert _op_count(large) <= _op_count(small)
    assert len(large.splitlines()) <= len(small.splitlines())


def test_hessians_of_several_xs_and_unconnected():
    @ig.function
    def f(x, y):
        z = ig.reduce_sum(x * x * x) + ig.reduce_sum(y) * 2.0
        return ig.hessians(z, [x, y])

    hx, hy = f(np.array([1.0, 2.0], np.float32), np.ones((2, 2), np.float32))
    np.testing.assert_allclose(hx, np.diag([6.0, 12.0]), rtol=1e-6)
    assert hy.shape == (2, 2, 2, 2) and not hy.any()  # linear in y


def test_hessian_agrees_with_finite_differences_of_the_gradient():
    """Second derivatives through the checker: each Hessian row is a VJP of the gradient."""
    fn = ig.function(lambda x: ig.gradients(ig.reduce_sum(ig.tanh(x) * ig.sin(x * 2.0)), x)[0])
    hess = ig.function(lambda x: ig.hessians(ig.reduce_sum(ig.tanh(x) * ig.sin(x * 2.0)), x)[0])
    x = np.array([0.3, -0.7, 1.1])
    h = hess(x)
    check_vjp(lambda a: [fn(a)], lambda a, cts: [h.T @ cts[0]], [x], what="hessian rows")


def test_hessian_vector_product():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 4)).astype(np.float32)
    v = rng.standard_normal(4).astype(np.float32)

    @ig.function
    def hvp(x, a, v):
        y = 0.5 * ig.reduce_sum(x * ig.reshape(a @ ig.reshape(x, [4, 1]), [4]))
        return ig.hessian_vector_product(y, [x], [v])

    (out,) = hvp(np.ones(4, np.float32), a, v)
    np.testing.assert_allclose(out, (a + a.T) @ v / 2, rtol=1e-5)


def test_hessian_vector_product_length_mismatch():
    with pytest.raises(ValueError, match="same length"):
        ig.function(lambda x: ig.hessian_vector_product(x * x, [x], [x, x])).lower(ig.TensorSpec([2]))


def test_jacobian_shapes_lists_and_unconnected():
    @ig.function
    def f(x, w):
        y = ig.tanh(x @ w)                      # (2, 4)
        return (ig.jacobian(y, x), ig.jacobian(y, [x, w]), ig.jacobian(y, ig.ones([3])),
                ig.jacobian(y, ig.ones([3]), unconnected_gradients="zero"))

    x = np.array([[0.1, 0.2, 0.3], [0.4, -0.5, 0.6]], np.float32)
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    jx, (jx2, jw), none, zero = f(x, w)
    assert jx.shape == (2, 4, 2, 3) and jw.shape == (2, 4, 3, 4)
    np.testing.assert_array_equal(jx, jx2)
    t = 1 - np.tanh(x @ w) ** 2
    expected = np.zeros((2, 4, 2, 3), np.float32)
    for i in range(2):
        for j in range(4):
            expected[i, j, i, :] = t[i, j] * w[:, j]
    np.testing.assert_allclose(jx, expected, rtol=1e-5, atol=1e-6)
    assert none is None
    assert zero.shape == (2, 4, 3) and not zero.any()


# ----- GradientTape -----------------------------------------------------------------------

def test_tape_watch_persistent_and_unwatched():
    @ig.function
    def f(x, y):
        with ig.GradientTape(persistent=True) as tape:
            tape.watch(x)
            z = x * x * y
        w = z * 3.0  # recorded by no tape
        return tape.gradient(z, x), tape.gradient(z, y), tape.gradient(w, x), tape.gradient(z, [x, y])

    dx, dy, outside, both = f(np.array([1., 2.], np.float32), np.array([3., 4.], np.float32))
    np.testing.assert_array_equal(dx, [6., 16.])
    assert dy is None and outside is None
    np.testing.assert_array_equal(both[0], dx)
    assert both[1] is None


def test_non_persistent_tape_used_twice_is_runtime_error():
    def f(x):
        with ig.GradientTape() as tape:
            tape.watch(x)
            y = x * x
        tape.gradient(y, x)
        return tape.gradient(y, x)

    with pytest.raises(RuntimeError, match="non-persistent"):
        ig.function(f).lower(ig.TensorSpec([2]))


def test_tape_watches_accessed_trainable_variables():
    v = ig.Variable(np.array([1., 2.], np.float32))
    frozen = ig.Variable(np.array([5.], np.float32), trainable=False)

    @ig.function
    def f(x):
        with ig.GradientTape(persistent=True) as tape:
            y = ig.reduce_sum(v * x) + ig.reduce_sum(frozen)
        with ig.GradientTape(watch_accessed_variables=False) as quiet:
            y2 = ig.reduce_sum(v * x)
        return tape.gradient(y, [v, frozen]), quiet.gradient(y2, v), len(tape.watched_variables())

    (dv, dfrozen), quiet, n = f(np.array([3., 4.], np.float32))
    np.testing.assert_array_equal(dv, [3., 4.])
    assert dfrozen is None and quiet is None and n == 1


def test_tape_output_gradients_unconnected_and_stop_recording():
    @ig.function
    def f(x):
        with ig.GradientTape(persistent=True) as tape:
            tape.watch(x)
            y = x * 2.0
            with tape.stop_recording():
                hidden = x * 100.0
            z = y + hidden
        return (tape.gradient(y, x, output_gradients=ig.constant([1., 10.])),
                tape.gradient(z, x),
                tape.gradient(y, ig.ones([2]), unconnected_gradients=ig.UnconnectedGradients.ZERO))

    weighted, through, zero = f(np.array([1., 1.], np.float32))
    np.testing.assert_array_equal(weighted, [2., 20.])
    np.testing.assert_array_equal(through, [2., 2.])   # the unrecorded branch contributes nothing
    np.testing.assert_array_equal(zero, [0., 0.])


def test_tape_jacobian_and_nested_tapes_for_second_order():
    @ig.function
    def f(x):
        with ig.GradientTape() as outer:
            outer.watch(x)
            with ig.GradientTape() as inner:
                inner.watch(x)
                y = x * x * x
            g = inner.gradient(y, x)
        with ig.GradientTape() as jt:
            jt.watch(x)
            z = ig.sin(x)
        return g, outer.gradient(g, x), jt.jacobian(z, x)

    x = np.array([1., 2.], np.float32)
    g, h, j = f(x)
    np.testing.assert_array_equal(g, 3 * x ** 2)
    np.testing.assert_array_equal(h, 6 * x)
    np.testing.assert_allclose(j, np.diag(np.cos(x)), rtol=1e-6)


# ----- Variables --------------------------------------------------------------------------

def test_variables_are_arguments_and_assignments_apply_after_the_call():
    v = ig.Variable(np.array([1., 2.], np.float32), name="v")
    counter = ig.Variable(np.int32(0))

    @ig.function
    def step(x):
        before = v * 1.0
        v.assign_add(x)
        v.assign_sub(ig.constant([0.5, 0.5]))
        counter.assign_add(1)
        return before, v.value(), ig.gradients(ig.reduce_sum(before * x), v)[0]

    before, after, grad = step(np.array([10., 20.], np.float32))
    np.testing.assert_array_equal(before, [1., 2.])
    np.testing.assert_array_equal(after, [10.5, 21.5])
    np.testing.assert_array_equal(grad, [10., 20.])
    np.testing.assert_array_equal(v.numpy(), [10.5, 21.5])
    step(np.array([0., 0.], np.float32))
    assert int(counter.numpy()) == 2
    assert step.trace_count == 1                       # the variable's value is an argument
    assert "v:0" in v.name and v.numpy().dtype == np.float32


def test_variable_assign_outside_traced_function_and_errors():
    v = ig.Variable([1., 2.])
    v.assign([3., 4.])
    np.testing.assert_array_equal(v.numpy(), [3., 4.])
    with pytest.raises(ValueError, match="shape"):
        v.assign([1., 2., 3.])
    with pytest.raises(TypeError):
        ig.Variable(object())


def test_training_example_drives_the_loss_down():
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "train_regression.py"
    spec = importlib.util.spec_from_file_location("train_regression_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    losses = example.train(steps=60)
    assert losses[-1] < 1e-3 * losses[0]
    assert example.train_step.trace_count == 1
    np.testing.assert_allclose(example.w.numpy().ravel(), example.TRUE_W.ravel(), atol=0.05)
