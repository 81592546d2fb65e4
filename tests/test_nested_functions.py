"""Functions that call functions (issue 42, item 10): an ``ig.function`` called while another is
traced is traced inline, as ``tf.function`` called from a ``tf.function``.

TensorFlow's numbers for the same programs: ``fixtures/tf/cases_functions.py`` (run by
``test_tf_references.py``). Here: the gradients through calls with the numeric checker, and what
the call does with each kind of argument, its errors, and where it may be called from.
"""
from __future__ import annotations

import numpy as np
import pytest

import irgrad as ig

from gradcheck import check_fn

F64 = np.float64


def _x(*values):
    return np.array(values, F64)


def test_gradients_through_calls_three_deep_with_keywords_and_static_values():
    @ig.function
    def h(x, power=2):
        y = x
        for _ in range(power - 1):  # a static Python value: unrolled while tracing
            y = y * x
        return ig.tanh(y)

    @ig.function
    def g(x, w, *, shift=0.0):
        return h(x, power=3) * w + h(w) + shift

    @ig.function
    def f(x, w):
        return ig.exp(g(w=w, x=x, shift=0.5)) * ig.sin(x)

    x, w = _x(0.3, -0.7, 1.1), _x(0.5, 0.2, -0.4)
    check_fn(f, x, w)
    assert (f.trace_count, g.trace_count, h.trace_count) == (0, 0, 0)  # nothing traced on its own


def test_second_derivatives_through_an_inner_function_that_takes_gradients():
    @ig.function
    def slope(x, w):
        return ig.gradients(ig.reduce_sum(ig.sin(x * w) * x), x)[0]

    def outer(x, w):
        return slope(x, w) * w

    check_fn(outer, _x(0.5, 2.0, -1.0), _x(1.5, -0.5, 0.25))
    # and the second derivative against its closed form: d/dx (w cos(xw) x + sin(xw)) summed
    x, w = np.array([0.5, 2.0], np.float32), np.array([1.5, -0.5], np.float32)
    second = ig.function(lambda x, w: ig.gradients(ig.reduce_sum(slope(x, w)), x)[0])(x, w)
    np.testing.assert_allclose(second, 2 * w * np.cos(x * w) - w * w * x * np.sin(x * w), rtol=1e-5)


def test_an_inner_function_with_input_signature_that_reads_a_variable():
    v = ig.Variable(_x(0.5, -1.5), name="v")

    @ig.function(input_signature=[ig.TensorSpec([2], ig.float64)])
    def inner(x):
        return ig.sin(x) * v

    check_fn(lambda x: inner(x) * x, _x(0.4, 1.2), both=False)  # (the module pass: no variable arguments)

    @ig.function
    def both(x):
        y = ig.reduce_sum(inner(x))
        return y, ig.gradients(y, [x, v])

    y, (dx, dv) = both(_x(0.4, 1.2))
    np.testing.assert_allclose(dx, np.cos([0.4, 1.2]) * [0.5, -1.5])
    np.testing.assert_allclose(dv, np.sin([0.4, 1.2]))
    v.assign(_x(2.0, 2.0))  # the variable is an argument of the outer module: its new value counts
    np.testing.assert_allclose(both(_x(0.4, 1.2))[0], 2 * np.sin([0.4, 1.2]).sum())


def test_arguments_of_an_inlined_call():
    """Tensors pass as they are; numpy values become constants; Python values stay Python;
    an input_signature converts values to its dtype; Python results come back as tensors."""
    seen = {}

    @ig.function
    def inner(t, arr, n, flag=None):
        seen.update(t=type(t), arr=type(arr), n=n, flag=flag)
        return t * arr + n, 7

    @ig.function(input_signature=[ig.TensorSpec([2], ig.float64), ig.TensorSpec([], ig.int32)])
    def signed(x, k):
        seen.update(x=x.dtype, k=k.dtype)
        return x * ig.cast(k, ig.float64)

    @ig.function
    def outer(x):
        y, seven = inner(x, np.array([2.0, 3.0], np.float32), 1.5, flag="on")
        assert isinstance(seven, ig.Tensor) and seven.dtype == ig.int32
        return y + ig.cast(seven, ig.float32), signed([1, 2], 3)

    y, z = outer(np.array([1.0, 1.0], np.float32))
    np.testing.assert_array_equal(y, [10.5, 11.5])
    np.testing.assert_array_equal(z, [3.0, 6.0])
    assert seen == {"t": ig.Tensor, "arr": ig.Tensor, "n": 1.5, "flag": "on", "x": ig.float64, "k": ig.int32}


def test_an_inlined_call_checks_its_input_signature_as_tensorflow_does():
    inner = ig.function(lambda x: x * 2.0, input_signature=[ig.TensorSpec([None, 3])])

    def run(body):
        return ig.function(body)(np.ones((2, 3), np.float32))

    np.testing.assert_array_equal(run(lambda x: inner(x)), np.full((2, 3), 2.0))  # None takes 2 rows
    with pytest.raises(TypeError, match=r"_lambda_\(\): argument 0 has shape \(2, 2\), but the input_signature "
                                        r"expects \(None, 3\)"):
        run(lambda x: inner(x[:, :2]))
    with pytest.raises(TypeError, match=r"argument 0 is a float64 tensor, but the input_signature expects float32"):
        run(lambda x: inner(ig.cast(x, ig.float64)))
    with pytest.raises(TypeError, match=r"argument 0 has shape \(3,\), but the input_signature expects"):
        run(lambda x: inner([1.0, 2.0, 3.0]))
    with pytest.raises(TypeError, match=r"argument 0 has dtype float64, but the input_signature expects float32"):
        run(lambda x: inner(np.ones((1, 3))))
    with pytest.raises(TypeError, match="too many positional arguments"):
        run(lambda x: inner(x, x))
    with pytest.raises(TypeError, match="unexpected keyword argument 'y'"):
        run(lambda x: inner(x, y=x))


def test_calls_from_loops_conditionals_methods_and_a_graph():
    @ig.function
    def step(y, x):
        return ig.cond(y < 2.0, lambda: y * 1.5 + x, lambda: ig.sin(y) + y)

    @ig.function
    def loop(x):
        _, y = ig.while_loop(lambda i, y: i < 5, lambda i, y: (i + 1, step(y, x)), [ig.constant(0), x])
        return y

    expected = np.float32(0.25)
    for _ in range(5):
        expected = expected * 1.5 + np.float32(0.25) if expected < 2.0 else np.sin(expected) + expected
    np.testing.assert_allclose(loop(np.float32(0.25)), expected, rtol=1e-6)

    class Model:
        def __init__(self):
            self.w = ig.Variable(np.float32(3.0))

        @ig.function
        def scale(self, x):
            return x * self.w

        @ig.function
        def loss(self, x):
            return ig.reduce_sum(self.scale(x) ** 2)

    np.testing.assert_allclose(Model().loss(np.array([1.0, 2.0], np.float32)), 45.0)

    graph = ig.Graph()
    with graph.as_default():  # TF1 style: the call adds its ops to the graph
        p = ig.placeholder(ig.float32, [])
        out = step(p, 1.0)
    assert out.graph is graph and step.trace_count == 0
    session = ig.Session(graph=graph)
    np.testing.assert_allclose([session.run(out, {p: np.float32(v)}) for v in (1.0, 3.0)],
                               [2.5, np.sin(3.0) + 3.0], rtol=1e-6)
    with pytest.raises(TypeError, match=r"step\(\): got the symbolic tensor .* outside any trace"):
        step(out, np.float32(1.0))  # the graph is no longer being built


def test_the_same_function_runs_compiled_when_called_from_outside():
    inner = ig.function(lambda x: ig.sin(x) * 2.0)
    outer = ig.function(lambda x: inner(x) + 1.0)
    x = np.array([0.5, 1.0], np.float32)
    np.testing.assert_allclose(outer(x), np.sin(x) * 2 + 1, rtol=1e-6)
    assert inner.trace_count == 0
    np.testing.assert_allclose(inner(x), np.sin(x) * 2, rtol=1e-6)  # compiled and run on its own
    assert inner.trace_count == 1
    np.testing.assert_allclose(outer(x * 2), np.sin(x * 2) * 2 + 1, rtol=1e-6)  # the fast path: still outer's
