"""Export StableHLO fixtures from JAX (a real foreign producer) for irgrad's tests.

JAX is a DEV-ONLY dependency: irgrad and its tests never import it.  The fixtures
this script writes (``tests/fixtures/jax/*.mlir`` + ``*.npz`` + ``README.md``) are
committed, so the tests only need numpy.

Set-up (once) and regeneration, from the repository root:

    python3 -m venv /work/jaxvenv && /work/jaxvenv/bin/pip install jax jaxlib numpy
    /work/jaxvenv/bin/python dev/make_jax_fixtures.py

Then check the forward modules with IREE (separate venv that has iree-base-compiler
and iree-base-runtime):

    /work/venv/bin/python dev/check_jax_fixtures_forward.py

Optional: ``make_jax_fixtures.py NAME [NAME ...]`` regenerates only those fixtures
(README.md is still rewritten from every .mlir present).

For each positive fixture ``<name>`` it writes

* ``<name>.mlir``: ``jax.jit(f).lower(*args).as_text()`` (``module @jit_<name>`` with
  ``func.func public @main``), unchanged.
* ``<name>.npz`` (numpy, compressed) with
    - ``arg0, arg1, ...``   the inputs (float32; int32 for indices / labels / branch ids);
    - ``out0, out1, ...``   the forward outputs of ``main``, in result order;
    - ``wrt``               int64 array: positions of the float arguments;
    - ``grad0, grad1, ...`` ``grad{k}`` = d(sum of all float outputs)/d(arg[wrt[k]]);
    - ``float_outs``        int64 array: positions of the float outputs;
    - ``cotangent0, ...``   ``cotangent{k}``: random cotangent for output ``float_outs[k]``;
    - ``vjp0, vjp1, ...``   ``vjp{k}``: VJP of those cotangents w.r.t. ``arg[wrt[k]]``.

Negative fixtures (``NEGATIVE`` table) get the ``.mlir`` plus an npz with only
``arg*``/``out*`` (for the forward check); irgrad must reject them with the error
recorded in README.md.
"""

from __future__ import annotations

import os
import re
import sys
import zlib
from collections import Counter

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

jax.config.update("jax_platforms", "cpu")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "jax")

F32 = np.float32
I32 = np.int32
U32 = np.uint32


# ---------------------------------------------------------------------------
# Input generators.  An argument spec is (dtype, shape, dist) where dist is
#   "normal"                         N(0, 1) * 0.5
#   ("uniform", lo, hi)              U(lo, hi)
#   ("away", lo, hi, points, eps)    U(lo, hi) resampled until |x - p| > eps for p in points
#   ("randint", lo, hi)              integers in [lo, hi)
#   ("value", v)                     the literal v
#   callable(rng, shape) -> array
# ---------------------------------------------------------------------------

def _draw(rng, dtype, shape, dist):
    if dist == "normal":
        a = rng.standard_normal(shape) * 0.5
    elif callable(dist):
        a = dist(rng, shape)
    elif dist[0] == "uniform":
        a = rng.uniform(dist[1], dist[2], size=shape)
    elif dist[0] == "away":
        _, lo, hi, points, eps = dist
        a = rng.uniform(lo, hi, size=shape)
        for _ in range(1000):
            bad = np.zeros(np.shape(a), bool)
            for p in points:
                bad |= np.abs(a - p) <= eps
            if not bad.any():
                break
            a = np.where(bad, rng.uniform(lo, hi, size=shape), a)
        else:
            raise RuntimeError(f"could not draw values away from {points!r}")
    elif dist[0] == "randint":
        a = rng.integers(dist[1], dist[2], size=shape)
    elif dist[0] == "value":
        a = np.asarray(dist[1])
        assert a.shape == tuple(shape), (a.shape, shape)
    else:
        raise ValueError(dist)
    return np.asarray(a).astype(dtype)


def f32(*shape, dist="normal"):
    return (F32, shape, dist)


def i32(*shape, dist):
    return (I32, shape, dist)


def distinct(rng, shape):
    """Values with pairwise gaps >= 0.05 (safe for sort / max / argmax ties)."""
    n = int(np.prod(shape))
    vals = (rng.permutation(n) - n / 2) * 0.1 + rng.uniform(-0.02, 0.02, size=n)
    return vals.reshape(shape)


def grid(offset):
    """Values on a 0.2-spaced grid shifted by `offset` (+-0.02 jitter): two args drawn
    with offsets 0.0 and 0.1 never come within 0.06 of each other (maximum/minimum)."""
    def draw(rng, shape):
        return rng.integers(-5, 6, size=shape) * 0.2 + offset + rng.uniform(-0.02, 0.02, size=shape)
    return draw


def positive(lo=0.5, hi=2.0):
    return ("uniform", lo, hi)


# ---------------------------------------------------------------------------
# The functions.  Each takes arrays and returns an array or a tuple of arrays.
# ---------------------------------------------------------------------------

def _log_softmax(z):
    return jax.nn.log_softmax(z, axis=-1)


def mlp_tanh_onehot(x, w1, b1, w2, b2, labels):
    h = jnp.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    onehot = jax.nn.one_hot(labels, logits.shape[-1], dtype=logits.dtype)
    loss = -jnp.mean(jnp.sum(onehot * _log_softmax(logits), axis=-1))
    return loss, logits


def mlp_relu_take_along(x, w1, b1, w2, b2, labels):
    pre = x @ w1 + b1
    h = jax.nn.relu(pre)
    logits = h @ w2 + b2
    lp = _log_softmax(logits)
    nll = -jnp.take_along_axis(lp, labels[:, None], axis=1)[:, 0]
    return jnp.mean(nll)


def _check_relu(args):
    x, w1, b1 = args[:3]
    pre = x @ w1 + b1
    assert np.min(np.abs(pre)) > 1e-2, "relu pre-activation too close to 0"


def layer_norm(x, gamma, beta):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    y = (x - mean) * lax.rsqrt(var + 1e-5)
    return y * gamma + beta


def attention(x, wq, wk, wv, wo, ln_g):
    b, t, d = x.shape
    h = 2
    hd = d // h
    # pre-norm
    mu = jnp.mean(x, axis=-1, keepdims=True)
    xc = x - mu
    xn = xc / jnp.sqrt(jnp.mean(xc * xc, axis=-1, keepdims=True) + 1e-5) * ln_g

    def heads(m):
        return jnp.einsum("btd,de->bte", xn, m).reshape(b, t, h, hd).transpose(0, 2, 1, 3)

    q, k, v = heads(wq), heads(wk), heads(wv)
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(hd).astype(F32)
    mask = jnp.tril(jnp.ones((t, t), bool))
    s = jnp.where(mask, s, -1e9)
    p = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bhqk,bhkd->bhqd", p, v).transpose(0, 2, 1, 3).reshape(b, t, d)
    return x + o @ wo


NHWC = ("NHWC", "HWIO", "NHWC")


def conv_stride2_same(x, w, b):
    y = lax.conv_general_dilated(x, w, window_strides=(2, 2), padding="SAME",
                                 dimension_numbers=NHWC)
    return jnp.tanh(y + b)


def conv_dilated(x, w1, w2):
    # lhs (input) dilation = transposed-convolution style upsampling
    y1 = lax.conv_general_dilated(x, w1, window_strides=(1, 1), padding=[(1, 1), (1, 1)],
                                  lhs_dilation=(2, 2), dimension_numbers=NHWC)
    # rhs (kernel / atrous) dilation
    y2 = lax.conv_general_dilated(x, w2, window_strides=(1, 1), padding="SAME",
                                  rhs_dilation=(2, 2), dimension_numbers=NHWC)
    return y1, jnp.sin(y2)


def conv_grouped(x, w_grp, w_dw):
    # feature_group_count = 2: 4 in-channels -> 6 out-channels in 2 groups
    y = lax.conv_general_dilated(x, w_grp, (1, 1), "VALID", dimension_numbers=NHWC,
                                 feature_group_count=2)
    # depthwise: feature_group_count = C_in = 4
    z = lax.conv_general_dilated(x, w_dw, (2, 2), "SAME", dimension_numbers=NHWC,
                                 feature_group_count=4)
    return y, z * z


def max_pool(x):
    p2 = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    p3 = lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    return p2, p3 * p3


def avg_pool(x):
    s = lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    a2 = s / 4.0
    # SAME padding: divide by the number of valid elements in each window
    s3 = lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    cnt = lax.reduce_window(jnp.ones_like(x), 0.0, lax.add, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    return a2, jnp.exp(s3 / cnt)


def cnn_classifier(x, w1, b1, w2, b2, labels):
    y = lax.conv_general_dilated(x, w1, (2, 2), "SAME", dimension_numbers=NHWC) + b1
    y = jnp.tanh(y)
    y = lax.reduce_window(y, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    y = lax.reduce_window(y, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4.0
    y = y.reshape(y.shape[0], -1)
    logits = y @ w2 + b2
    lp = _log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(lp, labels[:, None], axis=1))


def embedding_gather(table, w, idx, idx2):
    e = table[idx]                       # (2, 3, 4) gather, duplicate ids
    e2 = jnp.take(table, idx2, axis=0)   # (5, 4)
    return jnp.tanh(e @ w), e2 * e2


def scatter_add(x, v, idx):
    y = x.at[idx].add(v)                 # duplicate indices accumulate
    return jnp.sin(y) * x


def dynamic_slice(x, u, i, j):
    ds = lax.dynamic_slice(x, (i, j), (3, 2))            # j=4 is clamped to 3
    upd = lax.dynamic_update_slice(x, u * ds, (j, i))    # start (4, 1) is clamped to (3, 1)
    return ds * ds, jnp.tanh(upd)


def sort_values(x, keys, vals):
    s = jnp.sort(x, axis=-1)
    s0 = jnp.sort(x, axis=0)
    ks, vs = lax.sort_key_val(keys, vals)
    return s * jnp.arange(1, x.shape[-1] + 1, dtype=F32), s0[0], vs * ks


def top_k(x):
    v, i = lax.top_k(x, 3)
    return v * v, i


def argmax_reduce(x, w):
    am = jnp.argmax(x, axis=1)
    best = jnp.take_along_axis(x, am[:, None], axis=1)[:, 0]
    oh = jax.nn.one_hot(jnp.argmin(x, axis=0), x.shape[0], dtype=x.dtype)
    return best * w, am, jnp.sum(oh * x.T, axis=1)


def pad(x):
    a = jnp.pad(x, ((1, 2), (0, 3)), constant_values=0.5)
    b = jnp.pad(x, ((2, 1), (1, 1)), mode="reflect")
    c = jnp.pad(x, ((1, 0), (2, 2)), mode="edge")
    d = lax.pad(x, jnp.array(0.25, x.dtype), [(1, 2, 1), (-1, 1, 2)])   # interior + negative low
    return jnp.sin(a), b * b, c, d * x.sum()


def cumsum(x, y):
    return (jnp.cumsum(x, axis=1), lax.cumsum(x, axis=0, reverse=True),
            jnp.cumprod(y, axis=1), lax.cummax(x, axis=1))


def cond_case(x, y, z):
    # y is captured and used only in the taken (true) branch of the first cond,
    # z only in the false branch; the second cond takes its false branch.
    c1 = lax.cond(jnp.sum(x) > 0, lambda a: jnp.sin(a) * y, lambda a: jnp.cos(a) + z, x)
    c2 = lax.cond(jnp.sum(x) < 0, lambda a: a * y, lambda a: jnp.exp(a) * z, x)
    return c1, c2


def switch3(x, y, idx):
    branches = [lambda a, b: a * b, lambda a, b: jnp.sin(a) + b * b, lambda a, b: jnp.exp(a) - b]
    r1 = lax.switch(idx, branches, x, y)          # idx = 1
    r2 = lax.switch(idx + 5, branches, x, y)      # clamped to branch 2
    return r1, r2


def fori_loop(x, w, h0):
    def body(i, h):
        return jnp.tanh(h @ w + x * (i + 1).astype(F32))
    return lax.fori_loop(0, 4, body, h0)


def scan_rnn(xs, h0, wx, wh, b):
    def step(h, x_t):
        h = jnp.tanh(x_t @ wx + h @ wh + b)
        return h, h * h
    hT, ys = lax.scan(step, h0, xs)
    return hT, ys


@jax.jit
def _inner_block(a, m):
    return jnp.tanh(a @ m)


def private_calls(x, m, y):
    h = _inner_block(x, m)
    n = jnp.linalg.norm(h, axis=-1)
    lse = jax.nn.logsumexp(h, axis=-1)
    v = jnp.var(y, axis=0)
    return n + lse, v, jnp.std(x)


def elementwise_a(x, p, e, a, b):
    r1 = jax.nn.sigmoid(a) * lax.rsqrt(x)
    r2 = jnp.expm1(a * 0.5) + jnp.log1p(x)
    r3 = x ** e                    # power, both float
    r4 = jnp.arctan2(a, b)
    r5 = jnp.log(x) * jnp.exp(-p) + jnp.sqrt(b) / x + jnp.cos(p) * jnp.tanh(a)
    return r1, r2, r3, r4, r5


def elementwise_b(x, y, c, m1, m2):
    r1 = jnp.remainder(x, y) + jnp.fmod(x, y) * 2.0
    r2 = jax.scipy.special.erf(c) + jax.nn.gelu(c, approximate=False)
    r3 = jnp.clip(c, -0.5, 0.5) * jnp.where(c > 0, c * c, jnp.sin(c))
    r4 = jnp.maximum(m1, m2) - 2.0 * jnp.minimum(m1, m2) * m1
    r5 = jnp.abs(c) * m1 + jnp.sign(c) * m2 + x / y
    return r1, r2, r3, r4, r5


def _check_elementwise_b(args):
    x, y, c, m1, m2 = args
    q = x / y
    assert np.min(np.abs(q - np.round(q))) > 0.02, "remainder too close to a jump"
    assert np.min(np.abs(m1 - m2)) > 0.02, "maximum/minimum tie"


def broadcast_reduce(x, bias, col, s):
    y = x + bias                                       # (4,5,3) + (3,)
    y = y * col                                        # (5,1) broadcast
    mx = jnp.max(y, axis=1, keepdims=True)
    mn = jnp.min(y, axis=(0, 2), keepdims=True)
    z = (y - mx) * (y - mn) + s                        # scalar arg
    pr = jnp.prod(jnp.abs(x) + 0.5, axis=2)            # reduce multiply
    tot = jnp.sum(z, axis=(1, 2)) / jnp.max(jnp.abs(x))
    return z, pr, tot


def _check_broadcast_reduce(args):
    x, bias, col, s = args
    y = (x + bias) * col
    gaps_max = np.diff(np.sort(y, axis=1), axis=1)                       # max over axis 1
    gaps_min = np.diff(np.sort(y.transpose(1, 0, 2).reshape(5, -1), axis=1), axis=1)
    gaps_abs = np.diff(np.sort(np.abs(x).ravel()))
    assert min(gaps_max.min(), gaps_min.min(), gaps_abs.min()) > 1e-3, "ties in max/min"


def dropout(x, w, key):
    # key: raw uint32[2] PRNG key data (jax.random.key_data); threefry2x32 -> while loop
    # over integer state, shifts/xor/bitcast_convert; the mask is not differentiable.
    h = jnp.tanh(x @ w)
    keep = jax.random.bernoulli(jax.random.wrap_key_data(key), 0.75, h.shape)
    return jnp.where(keep, h / 0.75, 0.0)


def shape_ops(x, y):
    a = jnp.concatenate([x, y * 2.0], axis=0)            # (7, 4)
    b = jnp.flip(a, axis=1)[::2, 1:]                     # reverse + strided slice
    c = jnp.transpose(jnp.stack([x, x * x], axis=0), (2, 1, 0)).reshape(4, -1)
    d = jnp.roll(x, 2, axis=1) + jnp.tile(y[:1], (3, 1))
    e = jnp.expand_dims(jnp.squeeze(y[:, :1], axis=1), 0) * jnp.broadcast_to(y[:, 0], (3, 4))
    return b, c, d, e


# ---------------------------------------------------------------------------
# The FIXTURES table: name, function, ops meant to be exercised, argument specs
# (shapes), optional input check.
# ---------------------------------------------------------------------------

FIXTURES = [
    dict(name="mlp_tanh_onehot", fn=mlp_tanh_onehot,
         ops="dot_general, tanh, broadcast_in_dim bias add, log_softmax (reduce max/add, exp, log), "
             "one_hot (iota/compare/convert), reduce mean; two outputs",
         args=[f32(8, 6), f32(6, 16), f32(16), f32(16, 4), f32(4), i32(8, dist=("randint", 0, 4))]),
    dict(name="mlp_relu_take_along", fn=mlp_relu_take_along,
         ops="dot_general, relu (maximum), log_softmax, take_along_axis (gather with int labels)",
         args=[f32(8, 6), f32(6, 16), f32(16), f32(16, 4), f32(4), i32(8, dist=("randint", 0, 4))],
         check=_check_relu),
    dict(name="layer_norm", fn=layer_norm,
         ops="keepdims reduce add, subtract, rsqrt, broadcast multiply/add",
         args=[f32(4, 8), f32(8), f32(8)]),
    dict(name="attention", fn=attention,
         ops="multi-head self-attention: einsum (dot_general batch dims), reshape, transpose, "
             "causal mask select, softmax, sqrt, residual",
         args=[f32(2, 5, 8), f32(8, 8), f32(8, 8), f32(8, 8), f32(8, 8), f32(8, dist=positive())]),
    dict(name="conv_stride2_same", fn=conv_stride2_same,
         ops="convolution NHWC/HWIO stride 2 SAME padding, bias add, tanh",
         args=[f32(2, 7, 7, 3), f32(3, 3, 3, 4), f32(4)]),
    dict(name="conv_dilated", fn=conv_dilated,
         ops="convolution with lhs_dilation 2 (transposed conv) and with rhs_dilation 2 (atrous), sin",
         args=[f32(1, 5, 5, 2), f32(3, 3, 2, 3), f32(3, 3, 2, 2)]),
    dict(name="conv_grouped", fn=conv_grouped,
         ops="convolution feature_group_count=2, depthwise convolution feature_group_count=4 stride 2",
         args=[f32(2, 6, 6, 4), f32(3, 3, 2, 6), f32(3, 3, 1, 4)]),
    dict(name="max_pool", fn=max_pool,
         ops="reduce_window max: 2x2 stride 2 VALID, 3x3 stride 2 SAME (overlapping, -inf padding)",
         args=[f32(2, 6, 6, 3, dist=distinct)]),
    dict(name="avg_pool", fn=avg_pool,
         ops="reduce_window add 2x2/2 VALID and 3x3/2 SAME divided by window counts, exp",
         args=[f32(2, 6, 6, 3)]),
    dict(name="cnn_classifier", fn=cnn_classifier,
         ops="conv stride 2 SAME + tanh + max pool 3x3/2 + avg pool 2x2/2 + reshape + dense + "
             "softmax cross-entropy (take_along_axis)",
         args=[f32(2, 8, 8, 3), f32(3, 3, 3, 4), f32(4), f32(4, 5), f32(5),
               i32(2, dist=("value", [3, 1]))]),
    dict(name="embedding_gather", fn=embedding_gather,
         ops="gather (table[idx], jnp.take) with duplicate indices, dot_general, tanh",
         args=[f32(10, 4), f32(4, 3), i32(2, 3, dist=("value", [[1, 7, 1], [3, 3, 9]])),
               i32(5, dist=("value", [0, 2, 2, 2, 9]))]),
    dict(name="scatter_add", fn=scatter_add,
         ops="scatter (add combiner) with duplicate indices via x.at[idx].add(v), sin",
         args=[f32(8, 3), f32(5, 3), i32(5, dist=("value", [1, 4, 1, 7, 1]))]),
    dict(name="dynamic_slice", fn=dynamic_slice,
         ops="dynamic_slice and dynamic_update_slice with runtime int32 starts (one start is clamped)",
         args=[f32(6, 5), f32(3, 2), i32(dist=("value", 1)), i32(dist=("value", 4))]),
    dict(name="sort_values", fn=sort_values,
         ops="sort (single operand, along last and first axis, NaN-aware comparator), "
             "sort_key_val (2-operand sort), iota",
         args=[f32(3, 5, dist=distinct), f32(6, dist=distinct), f32(6)]),
    dict(name="top_k", fn=top_k,
         ops="chlo.top_k (values differentiable, indices int32 output)",
         args=[f32(4, 6, dist=distinct)]),
    dict(name="argmax_reduce", fn=argmax_reduce,
         ops="argmax/argmin as 2-operand (value, iota) reduce, take_along_axis gather, one_hot; "
             "int32 output",
         args=[f32(4, 5, dist=distinct), f32(4)]),
    dict(name="pad", fn=pad,
         ops="pad: constant, reflect (reverse/slice/concatenate), edge, interior + negative padding",
         args=[f32(4, 3)]),
    dict(name="cumsum", fn=cumsum,
         ops="cumsum / reverse cumsum / cumprod / cummax (reduce_window add/mul/max with padding)",
         args=[f32(3, 5, dist=distinct), f32(3, 5, dist=positive())]),
    dict(name="cond_case", fn=cond_case,
         ops="lax.cond -> stablehlo.case (true branch taken in one, false in the other); captured "
             "values used in one branch only",
         args=[f32(4, dist=("uniform", 0.2, 1.0)), f32(4), f32(4)]),
    dict(name="switch3", fn=switch3,
         ops="lax.switch with 3 branches -> clamp + stablehlo.case; int32 branch index argument",
         args=[f32(3, 2), f32(3, 2), i32(dist=("value", 1))]),
    dict(name="fori_loop", fn=fori_loop,
         ops="lax.fori_loop 0..4 (static trip count) -> stablehlo.while with counter, dot, tanh",
         args=[f32(2, 4), f32(4, 4), f32(2, 4)]),
    dict(name="scan_rnn", fn=scan_rnn,
         ops="lax.scan tanh RNN over 5 steps -> stablehlo.while with dynamic_slice / "
             "dynamic_update_slice of the stacked outputs",
         args=[f32(5, 3, 4), f32(3, 6), f32(4, 6), f32(6, 6), f32(6)]),
    dict(name="private_calls", fn=private_calls,
         ops="private func.func + call: inner jax.jit block, jnp.linalg.norm, logsumexp, jnp.var, jnp.std",
         args=[f32(3, 4), f32(4, 5), f32(6, 3)]),
    dict(name="elementwise_a", fn=elementwise_a,
         ops="logistic, rsqrt, exponential_minus_one, log_plus_one, power (float**float), atan2, "
             "log, exp, sqrt, cos, tanh, divide, negate",
         args=[f32(3, 4, dist=positive()), f32(3, 4), f32(3, 4, dist=("uniform", -1.0, 2.0)),
               f32(3, 4), f32(3, 4, dist=positive())]),
    dict(name="elementwise_b", fn=elementwise_b,
         ops="remainder (jnp.remainder, jnp.fmod), erf (chlo.erf), gelu, clamp (clip), select (where), "
             "maximum, minimum, abs, sign, divide",
         args=[f32(3, 4, dist=("uniform", -3.0, 3.0)), f32(3, 4, dist=("uniform", 0.7, 1.3)),
               f32(3, 4, dist=("away", -1.5, 1.5, (0.0, -0.5, 0.5), 0.05)),
               f32(3, 4, dist=grid(0.0)), f32(3, 4, dist=grid(0.1))],
         check=_check_elementwise_b),
    dict(name="broadcast_reduce", fn=broadcast_reduce,
         ops="bias/column/scalar broadcasts, keepdims reduce max and min, reduce multiply (prod), "
             "multi-axis reduce add, abs",
         args=[f32(4, 5, 3, dist=distinct), f32(3), f32(5, 1, dist=positive()), f32()]),
    dict(name="dropout", fn=dropout,
         ops="jax.random.bernoulli with a uint32[2] key argument: threefry2x32 (while loop on "
             "integer state, shift_left/shift_right_logical/xor/or, bitcast_convert), select mask",
         args=[f32(4, 6), f32(6, 5), (U32, (2,), ("value", [0, 42]))]),
    dict(name="shape_ops", fn=shape_ops,
         ops="concatenate, reverse, strided slice, stack, transpose, reshape, roll (slice+concat), "
             "tile, squeeze/expand_dims, broadcast_in_dim",
         args=[f32(3, 4), f32(4, 4)]),
]


# ``lax.while_loop`` fixtures: JAX exports them but cannot differentiate them in reverse mode
# (``jax.grad`` raises), so each comes with ``ref``, the same computation written with Python
# control flow on concrete values, which ``jax.grad`` unrolls as it runs: its gradient is the
# gradient of the loop for the trip counts these inputs give.

def while_data_dependent(x):
    return lax.while_loop(lambda a: jnp.sum(a) < 100.0, lambda a: a * 2.0 + jnp.sin(a), x)


def _while_data_dependent_ref(x):
    while jnp.sum(x) < 100.0:
        x = x * 2.0 + jnp.sin(x)
    return x


def _newton_step(y, a):
    return 0.5 * (y + a / y)


def while_newton(a, y0):
    """sqrt(a) by Newton's iteration from y0 until |y^2 - a| <= 1e-5 a everywhere."""
    def cond(y):
        return jnp.any(jnp.abs(y * y - a) > 1e-5 * a)
    return lax.while_loop(cond, lambda y: _newton_step(y, a), y0) * 2.0


def _while_newton_ref(a, y0):
    y = y0
    while jnp.any(jnp.abs(y * y - a) > 1e-5 * a):
        y = _newton_step(y, a)
    return y * 2.0


def _inner_until(v, w, k):
    return lax.while_loop(lambda u: jnp.sum(u) < 1.0 + k, lambda u: u * w + 0.1 * jnp.sin(u), v)


def while_nested(x, w):
    """fori_loop over 3 outer steps around a while loop whose trip count grows with the outer
    counter (a different inner count each outer iteration); the outer state also goes through
    tanh and a matrix."""
    def outer(k, v):
        return jnp.tanh(_inner_until(v, w, k.astype(F32))) * 0.9
    return lax.fori_loop(0, 3, outer, x)


def _while_nested_ref(x, w):
    for k in range(3):
        while jnp.sum(x) < 1.0 + k:
            x = x * w + 0.1 * jnp.sin(x)
        x = jnp.tanh(x) * 0.9
    return x


def while_int_bound(x, w, n):
    """The bound in an int32 argument, a tuple carry with a counter, a captured matrix."""
    def body(c):
        i, h = c
        return i + 1, jnp.tanh(h @ w) + x
    return lax.while_loop(lambda c: c[0] < n, body, (0, x))[1]


def _while_int_bound_ref(x, w, n):
    h = x
    for _ in range(int(n)):
        h = jnp.tanh(h @ w) + x
    return h


def while_cond_inside(x, s):
    """lax.cond inside a data-dependent while loop, the loop inside a lax.cond."""
    def body(v):
        return lax.cond(jnp.sum(v) > 1.0, lambda u: u * 1.7 + jnp.sin(u), lambda u: u * 2.5, v)
    grow = lambda v: lax.while_loop(lambda u: jnp.sum(u) < 6.0, body, v)  # noqa: E731
    return lax.cond(s > 0.0, grow, jnp.cos, x)


def _while_cond_inside_ref(x, s):
    if s > 0.0:
        while jnp.sum(x) < 6.0:
            x = x * 1.7 + jnp.sin(x) if jnp.sum(x) > 1.0 else x * 2.5
        return x
    return jnp.cos(x)


WHILE = [
    dict(name="while_data_dependent", fn=while_data_dependent, ref=_while_data_dependent_ref,
         ops="lax.while_loop whose trip count depends on the data (while sum(x) < 100: x = 2x + sin x)",
         args=[f32(4, dist=positive())]),
    dict(name="while_newton", fn=while_newton, ref=_while_newton_ref,
         ops="Newton's iteration for sqrt(a) to a relative tolerance: any() of a comparison in the cond, "
             "a captured argument in the body",
         args=[f32(5, dist=positive(0.5, 4.0)), f32(5, dist=positive(1.0, 2.0))]),
    dict(name="while_nested", fn=while_nested, ref=_while_nested_ref,
         ops="fori_loop around a data-dependent lax.while_loop whose trip count changes per outer step",
         args=[f32(3, dist=positive(0.05, 0.2)), f32(3, dist=positive(1.2, 1.5))]),
    dict(name="while_int_bound", fn=while_int_bound, ref=_while_int_bound_ref,
         ops="lax.while_loop bounded by an int32 argument (i < n), tuple carry, captured matrix",
         args=[f32(2, 4), f32(4, 4), i32(dist=("value", 5))]),
    dict(name="while_cond_inside", fn=while_cond_inside, ref=_while_cond_inside_ref,
         ops="lax.cond inside a data-dependent lax.while_loop, the loop inside lax.cond",
         args=[f32(3, dist=positive(0.1, 0.3)), f32(dist=("value", 1.0))]),
]


def _custom_call(a, b):
    spd = a @ a.T + 3.0 * jnp.eye(a.shape[0], dtype=a.dtype)
    return jnp.linalg.cholesky(spd) * b


NEGATIVE = [
    dict(name="custom_call", fn=_custom_call,
         ops="jnp.linalg.cholesky on CPU -> stablehlo.custom_call @lapack_spotrf_ffi",
         args=[f32(3, 3), f32(3, 3)],
         error="reject: stablehlo.custom_call (@lapack_spotrf_ffi) is opaque, no adjoint rule; expected an "
               "irgrad error naming stablehlo.custom_call and the call target"),
]


# ---------------------------------------------------------------------------

def _seed(name):
    return zlib.crc32(name.encode()) & 0xFFFFFFFF


def make_args(spec):
    rng = np.random.default_rng(_seed(spec["name"]))
    return [_draw(rng, dt, shape, dist) for dt, shape, dist in spec["args"]]


def _as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _is_float(a):
    return np.issubdtype(np.asarray(a).dtype, np.floating)


def lower_text(fn, name, args):
    # Name the traced function after the fixture so the module is `module @jit_<name>`.
    def wrapped(*a):
        return fn(*a)
    wrapped.__name__ = name
    wrapped.__qualname__ = name
    text = jax.jit(wrapped).lower(*args).as_text()
    assert text.startswith("module @jit_"), text[:80]
    assert "func.func public @main" in text
    return text


# Fixtures also written as StableHLO portable artifacts (VHLO bytecode, what jax.export
# serializes): <name>.mlirbc, the same computation as <name>.mlir.
PORTABLE = {"mlp_tanh_onehot", "cnn_classifier", "scan_rnn"}


def export_portable(fn, name, args):
    from jax import export

    def wrapped(*a):
        return fn(*a)
    wrapped.__name__ = name
    data = export.export(jax.jit(wrapped))(*args).mlir_module_serialized
    assert data.startswith(b"ML\xefR") and b"StableHLO_v" in data[:40], data[:40]
    with open(os.path.join(OUT_DIR, name + ".mlirbc"), "wb") as f:
        f.write(data)


def export_positive(spec):
    name, fn = spec["name"], spec["fn"]
    args = make_args(spec)
    if spec.get("check"):
        spec["check"](args)
    text = lower_text(fn, name, args)
    if name in PORTABLE:
        export_portable(fn, name, args)

    outs = [np.asarray(o) for o in _as_tuple(jax.jit(fn)(*args))]
    if "ref" in spec:  # a while loop: JAX refuses reverse mode; its unrolled twin gives the numbers
        try:
            jax.grad(lambda *a: jnp.sum(fn(*a)))(*args)
        except Exception:
            pass
        else:
            raise AssertionError(f"{name}: expected jax.grad to refuse lax.while_loop")
        fn = spec["ref"]
        for got, want in zip(_as_tuple(fn(*args)), outs, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6)
    wrt = [i for i, a in enumerate(args) if _is_float(a)]
    float_outs = [k for k, o in enumerate(outs) if _is_float(o)]
    assert wrt and float_outs, name

    def f_float(*fargs):
        full = list(args)
        for pos, v in zip(wrt, fargs):
            full[pos] = v
        o = _as_tuple(fn(*full))
        return tuple(o[k] for k in float_outs)

    def total(*fargs):
        return sum(jnp.sum(o) for o in f_float(*fargs))

    fargs = [args[i] for i in wrt]
    grads = jax.grad(total, argnums=tuple(range(len(fargs))))(*fargs)

    rng = np.random.default_rng(_seed(name) + 1)
    cots = [rng.standard_normal(outs[k].shape).astype(outs[k].dtype) for k in float_outs]
    _, vjp_fn = jax.vjp(f_float, *fargs)
    vjps = vjp_fn(tuple(cots))

    data = {}
    for i, a in enumerate(args):
        data["arg%d" % i] = a
    for i, o in enumerate(outs):
        data["out%d" % i] = o
    data["wrt"] = np.asarray(wrt, np.int64)
    data["float_outs"] = np.asarray(float_outs, np.int64)
    for k, g in enumerate(grads):
        g = np.asarray(g)
        assert g.shape == args[wrt[k]].shape and np.all(np.isfinite(g)), (name, k)
        data["grad%d" % k] = g
    for k, c in enumerate(cots):
        data["cotangent%d" % k] = c
    for k, v in enumerate(vjps):
        v = np.asarray(v)
        assert v.shape == args[wrt[k]].shape and np.all(np.isfinite(v)), (name, k)
        data["vjp%d" % k] = v
    for o in outs:
        assert np.all(np.isfinite(o)), name
    _write(name, text, data)


def export_negative(spec):
    name, fn = spec["name"], spec["fn"]
    args = make_args(spec)
    text = lower_text(fn, name, args)
    if name == "custom_call":
        assert "stablehlo.custom_call" in text
    outs = [np.asarray(o) for o in _as_tuple(jax.jit(fn)(*args))]
    data = {"arg%d" % i: a for i, a in enumerate(args)}
    data.update({"out%d" % i: o for i, o in enumerate(outs)})
    _write(name, text, data)


def _write(name, text, data):
    with open(os.path.join(OUT_DIR, name + ".mlir"), "w") as f:
        f.write(text)
    np.savez_compressed(os.path.join(OUT_DIR, name + ".npz"), **data)
    print("wrote %-22s %6d chars, npz keys: %d" % (name, len(text), len(data)))


# ---------------------------------------------------------------------------
# README generation: op inventory by regex over the .mlir text.
# ---------------------------------------------------------------------------

# An op name is `stablehlo.xxx` / `chlo.xxx` used as an operation: at the start of an
# op (`%0 = stablehlo.add`, `"stablehlo.gather"(`, `stablehlo.return`) or as the
# reducer in the short form `applies stablehlo.add`.  Attribute / type mentions
# (`#stablehlo.gather<...>`, `!stablehlo.token`) are excluded by the look-behind.
OP_RE = re.compile(r'(?<![#!\w.])"?((?:stablehlo|chlo)\.[a-z_0-9]+)')
CALL_RE = re.compile(r"\bcall @[\w.$-]+")
PRIV_RE = re.compile(r"func\.func private @")


def op_counts(text):
    c = Counter(m.group(1) for m in OP_RE.finditer(text))
    n_call = len(CALL_RE.findall(text))
    if n_call:
        c["func.call"] = n_call
    n_priv = len(PRIV_RE.findall(text))
    if n_priv:
        c["func.func private"] = n_priv
    return c


def _spec_shapes(spec):
    parts = []
    for dt, shape, _ in spec["args"]:
        tag = {F32: "f32", I32: "i32", U32: "u32"}[dt]
        parts.append("{}[{}]".format(tag, "x".join(map(str, shape))))
    return ", ".join(parts)


README_HEAD = """# JAX-produced StableHLO fixtures

Produced by a real foreign frontend, JAX {jaxver} (jaxlib {jaxlibver}, CPU), with
`jax.jit(f).lower(*args).as_text()`; every module is `module @jit_<name>` with a
`func.func public @main` and (often) `func.func private` helpers reached by `call @...`.
JAX is a dev-only dependency; neither irgrad nor its tests import it.

Regenerate / check (from the repository root):

```
python3 -m venv /work/jaxvenv && /work/jaxvenv/bin/pip install jax jaxlib numpy
/work/jaxvenv/bin/python dev/make_jax_fixtures.py          # writes this directory
/work/venv/bin/python dev/check_jax_fixtures_forward.py    # IREE llvm-cpu forward check
```

Functions, argument specs and seeds are in the `FIXTURES` / `WHILE` / `NEGATIVE` tables of
`dev/make_jax_fixtures.py` (seed = crc32(name)); regeneration is deterministic for a
given JAX version.

`mlp_tanh_onehot`, `cnn_classifier` and `scan_rnn` also come as StableHLO portable artifacts,
`<name>.mlirbc`: `jax.export.export(jax.jit(f))(*args).mlir_module_serialized`, VHLO bytecode
(`StableHLO_v1.x`), the form JAX serializes; same computation, same references.

## npz layout (`<name>.npz`, `numpy.load`)

| key | meaning |
| --- | --- |
| `arg0, arg1, ...` | inputs of `@main`, in order (float32; int32 for indices, labels, branch ids; uint32[2] PRNG key in `dropout`) |
| `out0, out1, ...` | forward outputs of `@main`, in result order (float32 or int32) |
| `wrt` | int64: positions of the float arguments (integer arguments get no gradient) |
| `grad0, grad1, ...` | `grad{{k}}` = d(sum over all float outputs of sum(out))/d `arg[wrt[k]]` (`jax.grad`) |
| `float_outs` | int64: positions of the float outputs (int outputs get no cotangent) |
| `cotangent0, ...` | `cotangent{{k}}`: random cotangent with the shape of `out[float_outs[k]]` |
| `vjp0, vjp1, ...` | `vjp{{k}}`: VJP of all cotangents w.r.t. `arg[wrt[k]]` (`jax.vjp`) |

So `@main_grad(args...)` should return `grad0..` (one per float arg, argument order), and a
`_vjp` function given the args plus `cotangent0..` should return `vjp0..`.  Only
`argmax_reduce` (out1) and `top_k` (out1) have integer outputs, so elsewhere
`float_outs == range(n_outputs)`.  Inputs are drawn in safe domains (positive for
log/sqrt/rsqrt/power, distinct values for sort/max/argmax/pooling, away from kinks of
relu/abs/clip/where/remainder/maximum) so finite differences also work.

Suggested tolerances: rtol 1e-4 / atol 1e-5 for forward, rtol 1e-3 / atol 1e-4 for gradients
(float32, reductions reordered by the compiler).

"""


def write_readme(forward_notes=None):
    jaxlib_ver = getattr(sys.modules.get("jaxlib"), "__version__", None)
    if jaxlib_ver is None:
        import jaxlib
        jaxlib_ver = jaxlib.__version__
    out = [README_HEAD.format(jaxver=jax.__version__, jaxlibver=jaxlib_ver)]

    per = {}
    for spec in FIXTURES + WHILE + NEGATIVE:
        p = os.path.join(OUT_DIR, spec["name"] + ".mlir")
        if os.path.exists(p):
            with open(p) as f:
                per[spec["name"]] = op_counts(f.read())

    out.append("## Positive fixtures (gradient references in the npz)\n\n")
    out.append("| fixture | meant to exercise | args | StableHLO/CHLO ops (count in .mlir) |\n")
    out.append("| --- | --- | --- | --- |\n")
    for spec in FIXTURES + WHILE:
        c = per.get(spec["name"])
        if c is None:
            continue
        ops = ", ".join("%s×%d" % (k, v) for k, v in sorted(c.items()))
        out.append("| `{}` | {} | {} | {} |\n".format(spec["name"], spec["ops"], _spec_shapes(spec), ops))

    out.append("\n## Negative fixtures (irgrad must reject them with a clear error)\n\n")
    out.append("| fixture | content | args | expected error |\n| --- | --- | --- | --- |\n")
    for spec in NEGATIVE:
        if spec["name"] in per:
            out.append("| `{}.mlir` | {} | {} | {} |\n".format(spec["name"], spec["ops"], _spec_shapes(spec), spec["error"]))
    out.append("\nTheir npz hold only `arg*` / `out*` (for the forward check).\n")

    union = Counter()
    for c in per.values():
        for k in c:
            union[k] += 1
    pos_names = {s["name"] for s in FIXTURES + WHILE}
    union_pos = Counter()
    for name, c in per.items():
        if name in pos_names:
            for k in c:
                union_pos[k] += 1
    out.append("\n## All distinct op names across the fixtures\n\n")
    out.append(f"Counted with the regex `{OP_RE.pattern}` (op position, so `#stablehlo.*` attributes are not "
               "counted; the reducer in `applies stablehlo.add` is), plus `call @` (`func.call`) and "
               "`func.func private`.  These are the adjoint rules irgrad needs "
               "(`stablehlo.return`, `stablehlo.constant`, integer/boolean ops and compares need "
               "no real adjoint but must be handled).\n\n")
    out.append("| op | positive fixtures using it | all fixtures using it |\n| --- | --- | --- |\n")
    for k in sorted(union, key=lambda k: (-union[k], k)):
        out.append("| `%s` | %d | %d |\n" % (k, union_pos.get(k, 0), union[k]))
    if forward_notes:
        out.append("\n" + forward_notes)
    else:
        out.append(FORWARD_NOTES)
    with open(os.path.join(OUT_DIR, "README.md"), "w") as f:
        f.write("".join(out))


FORWARD_NOTES = """
## IREE forward check

`dev/check_jax_fixtures_forward.py` compiles each `.mlir` with
`iree.compiler.compile_str(..., target_backends=["llvm-cpu"], input_type="stablehlo",
extra_args=["--iree-llvmcpu-target-cpu=host"])` (IREE 3.13), runs `@main` on the npz
inputs with `iree.runtime` (`local-task`) and compares with `out*` (rtol 1e-4, atol 1e-5;
integer outputs exactly).  Note: JAX names the module `@jit_<name>`, so the compiled VM
module is `jit_<name>` (use `ctx.modules[vm_module.name]`, not `ctx.modules.module`).

Result: all 28 positive fixtures of `FIXTURES` compile, run and match
(max abs error <= 4e-6).  `custom_call` does not compile with IREE, as expected:
`failed to legalize operation 'stablehlo.custom_call'` (`@lapack_spotrf_ffi` is a
JAX-CPU LAPACK FFI call); it exists only as a negative fixture for irgrad.  No fixture
had to be dropped or replaced.

## Notes for adjoint-rule authors

* JAX never emits `stablehlo.logistic`: `jax.nn.sigmoid` / `lax.logistic` lower to
  `negate, exponential, add, divide` (see `elementwise_a`).  `jnp.square` is `chlo.square`,
  exact `gelu` uses `chlo.erfc`, `jax.scipy.special.erf` is `chlo.erf`, `lax.top_k` is
  `chlo.top_k`.
* `call @f` in the main body is printed `call @f`, but inside regions (while/case bodies)
  as `func.call @f` (`fori_loop`, `scan_rnn`); private functions may be called from
  several places and may themselves call others (`cumsum` -> `cumsum_0`).
* Reduces come in two printed forms: the short `stablehlo.reduce(%x init: %c) applies
  stablehlo.add across dimensions = [...]` and the generic multi-operand form with a
  `reducer(...)` region (argmax/argmin: (value, iota) pairs, `argmax_reduce`).
* `while` loops from `fori_loop`/`scan` have a static trip count in the `cond` region
  (counter compared with a constant).  The `while_*` fixtures (`WHILE` table) are
  `lax.while_loop`s whose trip count depends on the data or on an int32 argument: `jax.grad`
  refuses them, so their `grad*`/`vjp*` come from `jax.grad` of the same computation written
  with Python control flow (unrolled for these inputs' trip counts); `dropout` has a while loop that carries only integer
  (threefry) state.  `switch3` clamps its index before `stablehlo.case`; `cond_case` converts
  the i1 predicate to i32 first.
* `dynamic_slice` uses out-of-range starts that StableHLO clamps (start column 4 with
  slice size 2 over 5 columns -> 3); the adjoint (dynamic_update_slice / pad) must clamp the
  same way.
"""


def main(argv):
    os.makedirs(OUT_DIR, exist_ok=True)
    only = set(argv[1:])
    names = {s["name"] for s in FIXTURES + WHILE + NEGATIVE}
    unknown = only - names
    if unknown:
        raise SystemExit("unknown fixture(s): {}".format(", ".join(sorted(unknown))))
    for spec in FIXTURES + WHILE:
        if not only or spec["name"] in only:
            export_positive(spec)
    for spec in NEGATIVE:
        if not only or spec["name"] in only:
            export_negative(spec)
    write_readme()

    texts = {}
    for spec in FIXTURES:
        with open(os.path.join(OUT_DIR, spec["name"] + ".mlir")) as f:
            texts[spec["name"]] = f.read()
    with_calls = [n for n, t in texts.items() if "func.func private" in t and "call @" in t]
    assert len(with_calls) >= 3, with_calls
    print("fixtures with private funcs + calls: %d (%s)" % (len(with_calls), ", ".join(with_calls)))
    total = sum(os.path.getsize(os.path.join(OUT_DIR, f)) for f in os.listdir(OUT_DIR))
    print("total fixture size: %.1f KiB" % (total / 1024))
    assert total < 2 * 1024 * 1024


if __name__ == "__main__":
    main(sys.argv)
