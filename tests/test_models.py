"""Frontend ops for real models (nn, einsum, gather, one_hot, cond, while_loop): forward against
NumPy references, and gradients of small CNN / attention / RNN models through the numeric checker."""
from __future__ import annotations

import numpy as np
import pytest

import irgrad as ig

import loopforms
from gradcheck import check_fn

rng = np.random.default_rng(7)


# ----- NumPy references -----------------------------------------------------------------------

def _same_pads(size, window, stride, dilation=1):
    effective = (window - 1) * dilation + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + effective - size, 0)
    return total // 2, total - total // 2


def np_conv2d(x, w, stride, padding, dilation=1):
    n, h, wd, c = x.shape
    kh, kw, ci, co = w.shape
    groups = c // ci
    pads = [_same_pads(h, kh, stride, dilation), _same_pads(wd, kw, stride, dilation)] if padding == "SAME" \
        else [(0, 0), (0, 0)]
    xp = np.pad(x, [(0, 0), pads[0], pads[1], (0, 0)])
    oh = (xp.shape[1] - ((kh - 1) * dilation + 1)) // stride + 1
    ow = (xp.shape[2] - ((kw - 1) * dilation + 1)) // stride + 1
    out = np.zeros((n, oh, ow, co), np.float64)
    per = co // groups
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * stride:i * stride + (kh - 1) * dilation + 1:dilation,
                       j * stride:j * stride + (kw - 1) * dilation + 1:dilation, :]
            for g in range(groups):
                out[:, i, j, g * per:(g + 1) * per] = np.einsum(
                    "nhwc,hwcd->nd", patch[..., g * ci:(g + 1) * ci], w[..., g * per:(g + 1) * per])
    return out


def np_pool(x, k, s, padding, kind):
    n, h, w, c = x.shape
    pads = [_same_pads(h, k, s), _same_pads(w, k, s)] if padding == "SAME" else [(0, 0), (0, 0)]
    fill = -np.inf if kind == "max" else np.nan
    xp = np.pad(x.astype(np.float64), [(0, 0), pads[0], pads[1], (0, 0)], constant_values=fill)
    oh, ow = (xp.shape[1] - k) // s + 1, (xp.shape[2] - k) // s + 1
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, i * s:i * s + k, j * s:j * s + k, :]
            out[:, i, j, :] = win.max(axis=(1, 2)) if kind == "max" else np.nanmean(win, axis=(1, 2))
    return out


# ----- forward -------------------------------------------------------------------------------

@pytest.mark.parametrize("stride,padding,dilation,groups", [
    (1, "VALID", 1, 1), (2, "SAME", 1, 1), (1, "SAME", 2, 1), (2, "VALID", 1, 2), (1, "SAME", 1, 4)])
def test_conv2d_forward(stride, padding, dilation, groups):
    x = rng.standard_normal((2, 7, 6, 4)).astype(np.float32)
    w = rng.standard_normal((3, 3, 4 // groups, 4)).astype(np.float32)
    f = ig.function(lambda x, w: ig.nn.conv2d(x, w, strides=stride, padding=padding, dilations=dilation))
    np.testing.assert_allclose(f(x, w), np_conv2d(x, w, stride, padding, dilation), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k,s,padding", [(2, 2, "VALID"), (3, 2, "SAME"), (3, 1, "SAME"), (2, 1, "VALID")])
def test_pooling_forward(k, s, padding):
    x = rng.standard_normal((2, 6, 5, 3)).astype(np.float32)
    f = ig.function(lambda x: (ig.nn.max_pool2d(x, k, s, padding), ig.nn.avg_pool2d(x, k, s, padding)))
    mx, avg = f(x)
    np.testing.assert_allclose(mx, np_pool(x, k, s, padding, "max"), rtol=1e-6)
    np.testing.assert_allclose(avg, np_pool(x, k, s, padding, "avg"), rtol=1e-5)


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(2, 3)]), ("ij->", [(2, 3)]), ("ij,ij->i", [(2, 3), (2, 3)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]), ("i,j->ij", [(3,), (4,)]),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)]), ("ij,jk", [(2, 3), (3, 4)]),
    ("ijk,ik->j", [(2, 3, 4), (2, 4)])])
def test_einsum_forward(equation, shapes):
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    f = ig.function(lambda *a: ig.einsum(equation, *a))
    np.testing.assert_allclose(f(*args), np.einsum(equation, *args), rtol=1e-5, atol=1e-5)


def test_einsum_errors():
    with pytest.raises(ValueError, match="repeated label"):
        ig.function(lambda a: ig.einsum("ii->i", a)).lower(ig.TensorSpec([2, 2]))
    with pytest.raises(ValueError, match="sizes"):
        ig.function(lambda a, b: ig.einsum("ij,jk->ik", a, b)).lower(ig.TensorSpec([2, 3]), ig.TensorSpec([4, 2]))


def test_gather_one_hot_and_tensor_indexing():
    params = rng.standard_normal((5, 3, 2)).astype(np.float32)
    idx = np.array([[4, 0], [1, 1]], np.int32)

    @ig.function
    def f(p, i):
        return (ig.gather(p, i), ig.gather(p, i, axis=0), ig.gather(p, i[0] % 3, axis=1),
                p[i[1]], ig.one_hot(i, 5), ig.one_hot(i[0], 5, on_value=3.0, off_value=-1.0, axis=0))

    g0, g0b, g1, row, hot, hot0 = f(params, idx)
    np.testing.assert_array_equal(g0, params[idx])
    np.testing.assert_array_equal(g0b, params[idx])
    np.testing.assert_array_equal(g1, np.take(params, idx[0] % 3, axis=1))
    np.testing.assert_array_equal(row, params[idx[1]])
    np.testing.assert_array_equal(hot, np.eye(5, dtype=np.float32)[idx])
    np.testing.assert_array_equal(hot0, np.where(np.eye(5)[idx[0]].T > 0, 3.0, -1.0))


def test_softmax_family_forward():
    x = rng.standard_normal((3, 4)).astype(np.float32) * 3
    labels = np.eye(4, dtype=np.float32)[[0, 3, 1]]

    @ig.function
    def f(x, y):
        return (ig.nn.softmax(x), ig.nn.log_softmax(x, axis=0), ig.nn.softmax_cross_entropy_with_logits(y, x),
                ig.nn.relu(x), ig.nn.softplus(x * 50.0))

    sm, lsm, ce, relu, sp = f(x, labels)
    ref = np.exp(x - x.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    np.testing.assert_allclose(sm, ref, rtol=1e-5)
    np.testing.assert_allclose(lsm, x - np.log(np.exp(x).sum(0, keepdims=True)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ce, -(labels * np.log(ref)).sum(-1), rtol=1e-5)
    np.testing.assert_array_equal(relu, np.maximum(x, 0))
    np.testing.assert_allclose(sp, np.logaddexp(0, x * 50.0), rtol=1e-5)


def test_relu_and_softplus_gradients_follow_tensorflow():
    @ig.function
    def f(x):
        return ig.gradients(ig.nn.relu(x), x)[0], ig.gradients(ig.nn.softplus(x), x)[0]

    x = np.array([-1.0, 0.0, 2.0, 100.0, -100.0], np.float32)
    drelu, dsoftplus = f(x)
    np.testing.assert_array_equal(drelu, [0.0, 0.0, 1.0, 1.0, 0.0])   # TensorFlow: 0 at 0
    np.testing.assert_allclose(dsoftplus, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6, atol=1e-30)


def test_cond_branches_structure_and_errors():
    @ig.function
    def f(x, flag):
        out = ig.cond(flag, lambda: {"a": x * 2.0, "b": x + 1.0}, lambda: {"a": -x, "b": x * x})
        static = ig.cond(True, lambda: x, lambda: x * 100.0)
        return out, static

    x = np.array([1.0, 3.0], np.float32)
    (out, static) = f(x, np.bool_(True))
    np.testing.assert_array_equal(out["a"], [2.0, 6.0])
    (out, _) = f(x, np.bool_(False))
    np.testing.assert_array_equal(out["b"], [1.0, 9.0])
    np.testing.assert_array_equal(static, x)
    with pytest.raises(ValueError, match="shape"):
        ig.function(lambda x, p: ig.cond(p, lambda: x, lambda: x[0])).lower(
            ig.TensorSpec([2]), ig.TensorSpec([], ig.bool))
    with pytest.raises(TypeError, match="scalar bool"):
        ig.function(lambda x: ig.cond(x, lambda: x, lambda: x)).lower(ig.TensorSpec([2]))


def test_while_loop_forms():
    @ig.function
    def f(x):
        i, acc = ig.while_loop(lambda i, a: i < 4, lambda i, a: (i + 1, a * 2.0), [0, x])
        single = ig.while_loop(lambda a: ig.reduce_sum(a) < 100.0, lambda a: a * 3.0, x)
        capped = ig.while_loop(lambda a: ig.reduce_sum(a) > -1.0, lambda a: a + 1.0, [x],
                               maximum_iterations=5)
        return i, acc, single, capped

    i, acc, single, capped = f(np.array([1.0, 2.0], np.float32))
    assert int(i) == 4
    np.testing.assert_array_equal(acc, [16.0, 32.0])
    np.testing.assert_array_equal(single, [81.0, 162.0])  # 9, 27, 81 < 100: one more step
    np.testing.assert_array_equal(capped[0], [6.0, 7.0])


# ----- gradients of models through the numeric checker (float64) ------------------------------

def small_cnn(x, w, b, dense):
    h = ig.tanh(ig.nn.conv2d(x, w, strides=2, padding="SAME") + b)
    h = ig.nn.max_pool2d(h, 3, 2, "SAME") + ig.nn.avg_pool2d(h, 2, 2, "SAME") * 0.5
    logits = ig.reshape(h, [x.shape[0], -1]) @ dense
    labels = ig.one_hot(ig.constant([1, 0]), 3, dtype=x.dtype)
    return ig.reduce_mean(ig.nn.softmax_cross_entropy_with_logits(labels, logits))


def attention(x, wq, wk, wv):
    q, k, v = (ig.einsum("btd,de->bte", x, w) for w in (wq, wk, wv))
    scores = ig.einsum("bqe,bke->bqk", q, k) / np.sqrt(q.shape[-1])
    return ig.reduce_sum(ig.einsum("bqk,bke->bqe", ig.nn.softmax(scores), v) ** 2.0)


def rnn(xs, h0, wx, wh):
    steps = xs.shape[0]

    def body(t, h):
        x_t = ig.gather(xs, t)
        return t + 1, ig.tanh(x_t @ wx + h @ wh)

    _, h = ig.while_loop(lambda t, h: t < steps, body, [0, h0])
    return ig.reduce_sum(h * h)


def bounded_loop(x, w):
    """A data-dependent exit with maximum_iterations: differentiable (a static trip count)."""
    (y,) = ig.while_loop(lambda a: ig.reduce_sum(a * a) < 50.0, lambda a: ig.tanh(a * w) * 3.0, [x],
                         maximum_iterations=6)
    return y


def branchy(x, w):
    y = ig.cond(ig.reduce_sum(x) > 0.0, lambda: ig.sin(x) * w, lambda: x * x + w)
    return y * 2.0


def embedding(table, ids, w):
    return ig.reduce_sum(ig.tanh(ig.gather(table, ids) @ w))


MODELS = {
    "cnn": (small_cnn, [rng.standard_normal((2, 6, 6, 2)), rng.standard_normal((3, 3, 2, 3)) * 0.5,
                        rng.standard_normal(3) * 0.1, rng.standard_normal((12, 3)) * 0.5]),
    "attention": (attention, [rng.standard_normal((2, 4, 3)), rng.standard_normal((3, 3)),
                              rng.standard_normal((3, 3)), rng.standard_normal((3, 3))]),
    "rnn": (rnn, [rng.standard_normal((4, 2, 3)), rng.standard_normal((2, 5)) * 0.1,
                  rng.standard_normal((3, 5)) * 0.5, rng.standard_normal((5, 5)) * 0.5]),
    "bounded_loop": (bounded_loop, [rng.standard_normal(3) * 0.3, rng.standard_normal(3) + 1.5]),
    "cond_taken": (branchy, [np.abs(rng.standard_normal(3)) + 0.1, rng.standard_normal(3)]),
    "cond_not_taken": (branchy, [-np.abs(rng.standard_normal(3)) - 0.1, rng.standard_normal(3)]),
    "embedding": (embedding, [rng.standard_normal((6, 3)), np.array([[1, 5], [1, 0]], np.int32),
                              rng.standard_normal((3, 2))]),
}


@pytest.mark.parametrize("name, loop_form", loopforms.params(sorted(MODELS), ["rnn", "bounded_loop"]),
                         indirect=["loop_form"])
def test_model_gradients_numeric(name, loop_form):
    fn, args = MODELS[name]
    check_fn(fn, *args, rtol=1e-5)
