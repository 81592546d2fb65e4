"""irgrad's gradients of twelve models against the forward, JAX's adjoint and XLA.

    benchmarks/.venv/bin/python benchmarks/bench_models.py           # full run (about 7 min, 2 cores)
    benchmarks/.venv/bin/python benchmarks/bench_models.py --quick   # one build, few rounds
    benchmarks/.venv/bin/python benchmarks/bench_models.py --models cnn,vit --dump /tmp/mlir

JAX is needed here and only here: the models are written in JAX and JAX is one
of the peers. It lives in the benchmark's own environment (see
benchmarks/README.md); irgrad never imports it. Everything is measured side by
side in this one run and printed as ratios; nothing asserts a time.

Models (float32; each a scalar loss of ``(params..., data...)``, every argument
float: labels are one-hot floats, so "every float argument" is the same set of
arguments for irgrad and for JAX):

* ``mlp``        128-256-256-10, batch 64, relu then tanh, softmax cross-entropy.
* ``cnn``        MNIST-size, batch 16, 28×28×1 NHWC: conv 3×3→16 SAME + relu, max
                 pool 3×3 stride 2 SAME (overlapping), conv 3×3 16→32 + relu, max
                 pool 3×3 stride 2, dense → 10, softmax cross-entropy.
* ``attention``  4 heads, batch 4, sequence 64, d_model 128, q/k/v/o projections,
                 softmax attention, mean-squared error.
* ``vit``        NCHW 2×3×32×32 (like torch), 8×8 stride-8 patch embedding conv to
                 48 (+bias), position embedding, one encoder block (layernorm, 4-head
                 attention, 4× MLP with gelu), mean pool, head → 10, cross-entropy.
* ``mobilenet``  8×32×32×16 NHWC: 3×3 stride-2 conv + relu6, depthwise 3×3 stride 2
                 SAME (feature_group_count=16) + relu6, pointwise 1×1 16→32 + relu,
                 mean.
* ``resnet``     basic block on 8×16×16×32 NHWC: conv 3×3, batch norm in train mode
                 (batch statistics), relu, conv 3×3, batch norm, + residual, relu,
                 mean-squared error.
* ``lstm``       ``lax.scan`` over 32 steps, batch 16, input 32, hidden 64, a dense
                 head on every step, mean-squared error.
* ``mobilenetv2`` keras.applications' MobileNetV2 (alpha 0.35, 10 classes) on
                 8×32×32×3, batch norm in train mode after each of its 52 convolutions.
* ``scan_lstm``, ``scan_gru``: ``lax.scan`` over 96 steps of an LSTM / GRU cell (batch 8,
                 input 16, hidden 32), a dense head on every step, mean-squared error: a
                 ``stablehlo.while`` too long to unroll (flax's ``nn.RNN`` and Keras'
                 LSTM on JAX export the same loop). ``unrolled_lstm``, ``unrolled_gru``:
                 the same steps written as a Python loop (what torch-mlir exports).

Per model:

1. forward: ``jax.jit(loss).lower(*args).as_text()``;
2. irgrad: ``irgrad.passes.differentiate(forward, "main", with_value=True)``, so
   the module holds ``@main`` (the forward) and ``@main_grad`` (value, then the
   gradient of every float argument); one IREE compile gives both programs;
3. JAX's adjoint: ``jax.jit(jax.value_and_grad(loss, argnums=all))`` lowered to
   StableHLO and compiled by the same IREE with the same flags;
4. XLA CPU: ``jax.jit(jax.value_and_grad(loss, argnums=all))`` and
   ``jax.jit(loss)`` run by JAX itself (``block_until_ready``).

irgrad's forward, value and gradients are checked against XLA's (max relative
error, per array: max |difference| / max |XLA's|, with a floor of 1e-4 of the
largest array for gradients that are zero up to rounding); JAX's adjoint under
IREE is checked the same way, for scale. A model that fails to differentiate,
compile or run prints the error in its row; the others go on.

The CNN's JAX-on-IREE peer: IREE 3.13 compiles ``stablehlo.select_and_scatter``
(JAX's adjoint of a max pool) only for non-overlapping windows, so it rejects
JAX's adjoint of the CNN's 3×3 stride-2 pools. The benchmark then compiles JAX's
adjoint of the same CNN with each pool written as the maximum of its 9 strided
window offsets, and marks those figures with † (irgrad still gets the
``reduce_window`` model).

Timing is ``bench_adjoint.py``'s, imported from it (see its docstring and
"Benchmarking IREE CPU code here" in the project notes): every IREE program is
compiled ``--builds`` times with module names of different lengths (the machine
code moves by 16-byte steps), every program is warmed up, then each round runs
one block of calls of every program of every build in a rotating order; a
ratio is taken between blocks of the same round and build and the median is
printed with the spread of the per-build medians. The two XLA programs (one
compilation by JAX) join every build's blocks, so the ratios against XLA are
taken side by side too.

Blocks of equal length: the first ~2 ms of IREE calls after an XLA block (or an
idle pause) run slower than the rest (measured here: an MLP forward's first calls
0.53, 0.36, 0.33 ms, then 0.26 ms), so with a fixed number of calls the short
forward's blocks carried most of that ramp (the MLP forward read 0.47–0.65 ms
instead of 0.26 ms with XLA in the rotation, and grad/fwd dropped from 2.5 to
1.8–2.1). Each program is therefore repeated to about the slowest program's call
time, and a block holds enough of those to last ``--block-ms``; per-call times
and ratios are divided back by the repeats. ``--calls N`` instead runs N single
calls per block for every program.

Targets (from the project's issue): irgrad gradient / forward ≤ 3.5 on every
model; irgrad's gradient not slower than JAX's adjoint under the same IREE on
any model; on the CNN at least 2× faster than JAX's adjoint under IREE.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_adjoint as ba  # noqa: E402  (also puts the source tree first on sys.path)

import irgrad as ig  # noqa: E402
from irgrad import runtime as igrt  # noqa: E402

os.environ.setdefault("JAX_PLATFORMS", "cpu")
try:
    import jax  # noqa: E402
    import jax.numpy as jnp  # noqa: E402
    from jax import lax  # noqa: E402
except ImportError:  # JAX is never an irgrad dependency: it lives in the benchmark's environment
    sys.exit("bench_models.py needs JAX, which irgrad does not depend on. From the repository root:\n"
             "  python3 -m venv benchmarks/.venv && benchmarks/.venv/bin/pip install -e . jax jaxlib\n"
             "  benchmarks/.venv/bin/python benchmarks/bench_models.py")

jax.config.update("jax_platforms", "cpu")

HEADER = "irgrad model benchmark"
TARGET_GRAD_OVER_FWD = 3.5
TARGET_OVER_JAX_IREE = 1.0
TARGET_CNN_OVER_JAX_IREE = 0.5
LABELS = ("irgrad_fwd", "irgrad_grad", "jax_iree", "xla_grad", "xla_fwd")

# ----- the models ------------------------------------------------------------------------------


@dataclass
class Model:
    """A scalar loss written in JAX and the example arguments it is timed on (all float32)."""

    name: str
    loss: Callable
    args: list[np.ndarray]
    names: list[str]
    # The same function written so that IREE compiles JAX's adjoint of it; used for the
    # JAX-on-IREE peer only when IREE rejects JAX's adjoint of ``loss``.
    peer_loss: Callable | None = None
    peer_note: str = ""


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def normal(rng, *shape, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def weight(rng, *shape, fan_in: int) -> np.ndarray:
    return normal(rng, *shape, scale=1.0 / math.sqrt(fan_in))


def one_hot(rng, n: int, classes: int) -> np.ndarray:
    return np.eye(classes, dtype=np.float32)[rng.integers(0, classes, n)]


def cross_entropy(logits, y):
    return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(logits, axis=-1), axis=-1))


def conv(x, w, stride: int = 1, padding="SAME", groups: int = 1, dims=("NHWC", "HWIO", "NHWC")):
    return lax.conv_general_dilated(x, w, (stride, stride), padding, dimension_numbers=dims,
                                    feature_group_count=groups)


def max_pool_3x3_s2(x):
    """Max pool 3×3, stride 2, SAME: overlapping windows (NHWC)."""
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")


def max_pool_3x3_s2_slices(x):
    """The same pool as the maximum of its 9 strided window offsets (no reduce_window).

    JAX's adjoint of ``reduce_window`` max is ``select_and_scatter``, which IREE 3.13
    compiles only for non-overlapping windows. Where windows tie (zeros after a relu)
    ``lax.max`` splits the cotangent between them where ``reduce_window`` picks one;
    the gradients of the model's arguments agree, since relu's derivative at 0 is 0.
    """
    n, h, w, c = x.shape
    oh, ow = -(-h // 2), -(-w // 2)
    ph, pw = max((oh - 1) * 2 + 3 - h, 0), max((ow - 1) * 2 + 3 - w, 0)
    xp = jnp.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)),
                 constant_values=-jnp.inf)
    out = None
    for i in range(3):
        for j in range(3):
            window = lax.slice(xp, (0, i, j, 0), (n, i + 2 * (oh - 1) + 1, j + 2 * (ow - 1) + 1, c), (1, 2, 2, 1))
            out = window if out is None else jnp.maximum(out, window)
    return out


def layer_norm(x, gamma, beta, eps: float = 1e-6):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + eps) * gamma + beta


def multi_head_attention(x, wq, wk, wv, wo, heads: int, biases=None):
    b, t, d = x.shape
    hd = d // heads
    bq, bk, bv, bo = biases if biases is not None else (0.0, 0.0, 0.0, 0.0)

    def split(h):  # (b, t, d) -> (b, heads, t, hd)
        return h.reshape(b, t, heads, hd).transpose(0, 2, 1, 3)

    q, k, v = split(x @ wq + bq), split(x @ wk + bk), split(x @ wv + bv)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(hd)
    p = jax.nn.softmax(scores, axis=-1)
    o = jnp.einsum("bhqk,bhkd->bhqd", p, v).transpose(0, 2, 1, 3).reshape(b, t, d)
    return o @ wo + bo


def mlp() -> Model:
    rng = _rng(1)

    def loss(w1, b1, w2, b2, w3, b3, x, y):
        h = jax.nn.relu(x @ w1 + b1)
        h = jnp.tanh(h @ w2 + b2)
        return cross_entropy(h @ w3 + b3, y)

    args = [weight(rng, 128, 256, fan_in=128), normal(rng, 256, scale=0.1),
            weight(rng, 256, 256, fan_in=256), normal(rng, 256, scale=0.1),
            weight(rng, 256, 10, fan_in=256), normal(rng, 10, scale=0.1),
            normal(rng, 64, 128), one_hot(rng, 64, 10)]
    return Model("mlp", loss, args, ["w1", "b1", "w2", "b2", "w3", "b3", "x", "y"])


def cnn() -> Model:
    rng = _rng(2)

    def make_loss(pool):
        def loss(w1, b1, w2, b2, w3, b3, x, y):
            h = pool(jax.nn.relu(conv(x, w1) + b1))      # 16×14×14×16
            h = pool(jax.nn.relu(conv(h, w2) + b2))      # 16×7×7×32
            return cross_entropy(h.reshape(h.shape[0], -1) @ w3 + b3, y)
        return loss

    args = [weight(rng, 3, 3, 1, 16, fan_in=9), normal(rng, 16, scale=0.1),
            weight(rng, 3, 3, 16, 32, fan_in=144), normal(rng, 32, scale=0.1),
            weight(rng, 7 * 7 * 32, 10, fan_in=7 * 7 * 32), normal(rng, 10, scale=0.1),
            normal(rng, 16, 28, 28, 1), one_hot(rng, 16, 10)]
    return Model("cnn", make_loss(max_pool_3x3_s2), args, ["w1", "b1", "w2", "b2", "w3", "b3", "x", "y"],
                 peer_loss=make_loss(max_pool_3x3_s2_slices),
                 peer_note="JAX's adjoint of the same CNN with each pool written as the maximum of its 9 "
                           "strided window offsets (IREE rejects JAX's select_and_scatter for overlapping "
                           "windows)")


def attention() -> Model:
    rng = _rng(3)

    def loss(wq, wk, wv, wo, x, y):
        return jnp.mean(jnp.square(multi_head_attention(x, wq, wk, wv, wo, heads=4) - y))

    args = [weight(rng, 128, 128, fan_in=128) for _ in range(4)]
    args += [normal(rng, 4, 64, 128), normal(rng, 4, 64, 128)]
    return Model("attention", loss, args, ["wq", "wk", "wv", "wo", "x", "y"])


def vit() -> Model:
    rng = _rng(4)
    dim, patch, tokens, hidden = 48, 8, 16, 4 * 48

    def loss(w_patch, b_patch, pos, g1, be1, wq, bq, wk, bk, wv, bv, wo, bo, g2, be2,
             w1, b1, w2, b2, w_head, b_head, x, y):
        h = conv(x, w_patch, stride=patch, padding="VALID", dims=("NCHW", "OIHW", "NCHW"))
        h = h + b_patch[None, :, None, None]                        # 2×48×4×4
        h = h.reshape(h.shape[0], dim, tokens).transpose(0, 2, 1) + pos  # 2×16×48
        h = h + multi_head_attention(layer_norm(h, g1, be1), wq, wk, wv, wo, heads=4,
                                     biases=(bq, bk, bv, bo))
        h = h + jax.nn.gelu(layer_norm(h, g2, be2) @ w1 + b1) @ w2 + b2
        return cross_entropy(jnp.mean(h, axis=1) @ w_head + b_head, y)

    args = [weight(rng, dim, 3, patch, patch, fan_in=3 * patch * patch), normal(rng, dim, scale=0.1),
            normal(rng, tokens, dim, scale=0.1),
            1 + normal(rng, dim, scale=0.1), normal(rng, dim, scale=0.1)]
    for _ in range(4):  # q, k, v, o
        args += [weight(rng, dim, dim, fan_in=dim), normal(rng, dim, scale=0.1)]
    args += [1 + normal(rng, dim, scale=0.1), normal(rng, dim, scale=0.1),
             weight(rng, dim, hidden, fan_in=dim), normal(rng, hidden, scale=0.1),
             weight(rng, hidden, dim, fan_in=hidden), normal(rng, dim, scale=0.1),
             weight(rng, dim, 10, fan_in=dim), normal(rng, 10, scale=0.1),
             normal(rng, 2, 3, 32, 32), one_hot(rng, 2, 10)]
    names = ["w_patch", "b_patch", "pos", "ln1_g", "ln1_b", "wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo",
             "ln2_g", "ln2_b", "w1", "b1", "w2", "b2", "w_head", "b_head", "x", "y"]
    return Model("vit", loss, args, names)


def mobilenet() -> Model:
    rng = _rng(5)

    def loss(w0, b0, w_dw, b_dw, w_pw, b_pw, x):
        h = jax.nn.relu6(conv(x, w0, stride=2) + b0)                     # 8×16×16×16
        h = jax.nn.relu6(conv(h, w_dw, stride=2, groups=16) + b_dw)      # 8×8×8×16, depthwise
        h = jax.nn.relu(conv(h, w_pw) + b_pw)                            # 8×8×8×32, pointwise
        return jnp.mean(h)

    args = [weight(rng, 3, 3, 16, 16, fan_in=144), normal(rng, 16, scale=0.1),
            weight(rng, 3, 3, 1, 16, fan_in=9), normal(rng, 16, scale=0.1),
            weight(rng, 1, 1, 16, 32, fan_in=16), normal(rng, 32, scale=0.1),
            normal(rng, 8, 32, 32, 16)]
    return Model("mobilenet", loss, args, ["w0", "b0", "w_dw", "b_dw", "w_pw", "b_pw", "x"])


def mobilenetv2(batch: int = 8) -> Model:
    """keras.applications' MobileNetV2 (alpha 0.35, 32×32 inputs, 10 classes), batch norm in
    train mode: 52 convolutions (17 depthwise, 5 of them strided), the issue's real-model case
    (batch 8 here; bench_memory_jax.py's ``mobilenetv2`` is this model at any batch)."""
    rng = _rng(8)
    alpha, classes = 0.35, 10

    def channels(c: int) -> int:  # keras' _make_divisible(c * alpha, 8)
        v = max(8, int(c * alpha + 4) // 8 * 8)
        return v + 8 if v < 0.9 * c * alpha else v

    names, args, layers = [], [], []

    def param(name, value):
        names.append(name)
        args.append(value)

    def conv_bn(kind, cin, cout, k, stride):
        i = len(layers)
        w = (weight(rng, k, k, 1, cin, fan_in=k * k) if kind == "dw" else
             weight(rng, k, k, cin, cout, fan_in=k * k * cin))
        param(f"w{i}", w)
        param(f"g{i}", 1 + normal(rng, cout, scale=0.1))
        param(f"b{i}", normal(rng, cout, scale=0.1))
        layers.append((kind, stride))

    stem = channels(32)
    conv_bn("conv", 3, stem, 3, 2)
    blocks, cin = [], stem
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)]:
        for j in range(n):
            stride, cout, first = (s if j == 0 else 1), channels(c), len(layers)
            if t != 1:
                conv_bn("conv", cin, cin * t, 1, 1)
            conv_bn("dw", cin * t, cin * t, 3, stride)
            conv_bn("project", cin * t, cout, 1, 1)
            blocks.append((first, len(layers), stride == 1 and cin == cout))
            cin = cout
    conv_bn("conv", cin, 1280, 1, 1)
    param("w_out", weight(rng, 1280, classes, fan_in=1280))
    param("b_out", normal(rng, classes, scale=0.1))
    param("x", normal(rng, batch, 32, 32, 3))
    param("y", one_hot(rng, batch, classes))

    def batch_norm(h, gamma, beta, eps: float = 1e-3):
        mean = jnp.mean(h, axis=(0, 1, 2))
        var = jnp.mean(jnp.square(h - mean), axis=(0, 1, 2))
        return (h - mean) * lax.rsqrt(var + eps) * gamma + beta

    def layer(h, i, p):
        kind, stride = layers[i]
        w, g, b = p[3 * i: 3 * i + 3]
        h = conv(h, w, stride=stride, groups=h.shape[-1] if kind == "dw" else 1)
        h = batch_norm(h, g, b)
        return h if kind == "project" else jax.nn.relu6(h)

    def loss(*p):
        x, y = p[-2], p[-1]
        h = layer(x, 0, p)
        for first, end, residual in blocks:
            out = h
            for i in range(first, end):
                out = layer(out, i, p)
            h = h + out if residual else out
        h = layer(h, len(layers) - 1, p)
        logits = jnp.mean(h, axis=(1, 2)) @ p[-4] + p[-3]
        return cross_entropy(logits, y)

    return Model("mobilenetv2", loss, args, names)


def resnet() -> Model:
    rng = _rng(6)

    def batch_norm(h, gamma, beta, eps: float = 1e-5):  # train mode: statistics of this batch
        mean = jnp.mean(h, axis=(0, 1, 2))
        var = jnp.mean(jnp.square(h - mean), axis=(0, 1, 2))
        return (h - mean) * lax.rsqrt(var + eps) * gamma + beta

    def loss(w1, g1, be1, w2, g2, be2, x, y):
        h = jax.nn.relu(batch_norm(conv(x, w1), g1, be1))
        h = batch_norm(conv(h, w2), g2, be2)
        return jnp.mean(jnp.square(jax.nn.relu(h + x) - y))

    args = [weight(rng, 3, 3, 32, 32, fan_in=288), 1 + normal(rng, 32, scale=0.1), normal(rng, 32, scale=0.1),
            weight(rng, 3, 3, 32, 32, fan_in=288), 1 + normal(rng, 32, scale=0.1), normal(rng, 32, scale=0.1),
            normal(rng, 8, 16, 16, 32), normal(rng, 8, 16, 16, 32)]
    return Model("resnet", loss, args, ["w1", "g1", "b1", "w2", "g2", "b2", "x", "y"])


def lstm() -> Model:
    rng = _rng(7)
    steps, batch, inputs, hidden, outputs = 32, 16, 32, 64, 8

    def loss(w_x, w_h, b, w_out, b_out, xs, ys):
        def cell(carry, x):
            h, c = carry
            i, f, g, o = jnp.split(x @ w_x + h @ w_h + b, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        zeros = jnp.zeros((batch, hidden), jnp.float32)
        _, hs = lax.scan(cell, (zeros, zeros), xs)                       # 32×16×64
        return jnp.mean(jnp.square(hs @ w_out + b_out - ys))

    args = [weight(rng, inputs, 4 * hidden, fan_in=inputs), weight(rng, hidden, 4 * hidden, fan_in=hidden),
            normal(rng, 4 * hidden, scale=0.1), weight(rng, hidden, outputs, fan_in=hidden),
            normal(rng, outputs, scale=0.1),
            normal(rng, steps, batch, inputs), normal(rng, steps, batch, outputs)]
    return Model("lstm", loss, args, ["w_x", "w_h", "b", "w_out", "b_out", "xs", "ys"])


def _recurrent(name: str, cell_kind: str, unrolled: bool) -> Model:
    """A scan over 96 steps of an LSTM or GRU cell (batch 8, input 16, hidden 32) under a
    dense head, mean-squared error: the loop too long to unroll (``lax.scan`` →
    ``stablehlo.while``), or the same steps as a Python loop (straight-line code)."""
    rng = _rng(11 if cell_kind == "lstm" else 12)
    steps, batch, inputs, hidden, outputs = 96, 8, 16, 32, 4
    gates = 4 if cell_kind == "lstm" else 3

    def lstm_cell(carry, x, w_x, w_h, b):
        h, c = carry
        i, f, g, o = jnp.split(x @ w_x + h @ w_h + b, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    def gru_cell(carry, x, w_x, w_h, b):
        (h,) = carry
        xr, xz, xn = jnp.split(x @ w_x + b, 3, axis=-1)
        hr, hz, hn = jnp.split(h @ w_h, 3, axis=-1)
        r, z = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz)
        h = (1.0 - z) * jnp.tanh(xn + r * hn) + z * h
        return (h,), h

    cell = lstm_cell if cell_kind == "lstm" else gru_cell

    def loss(w_x, w_h, b, w_out, b_out, xs, ys):
        zeros = jnp.zeros((batch, hidden), jnp.float32)
        carry = (zeros, zeros) if cell_kind == "lstm" else (zeros,)
        if unrolled:
            hs = []
            for t in range(steps):
                carry, h = cell(carry, xs[t], w_x, w_h, b)
                hs.append(h)
            hs = jnp.stack(hs)
        else:
            _, hs = lax.scan(lambda c, x: cell(c, x, w_x, w_h, b), carry, xs)
        return jnp.mean(jnp.square(hs @ w_out + b_out - ys))

    args = [weight(rng, inputs, gates * hidden, fan_in=inputs), weight(rng, hidden, gates * hidden, fan_in=hidden),
            normal(rng, gates * hidden, scale=0.1), weight(rng, hidden, outputs, fan_in=hidden),
            normal(rng, outputs, scale=0.1), normal(rng, steps, batch, inputs), normal(rng, steps, batch, outputs)]
    return Model(name, loss, args, ["w_x", "w_h", "b", "w_out", "b_out", "xs", "ys"])


MODELS: dict[str, Callable[[], Model]] = {
    "mlp": mlp, "cnn": cnn, "attention": attention, "vit": vit,
    "mobilenet": mobilenet, "resnet": resnet, "lstm": lstm, "mobilenetv2": mobilenetv2,
    "scan_lstm": lambda: _recurrent("scan_lstm", "lstm", False),
    "unrolled_lstm": lambda: _recurrent("unrolled_lstm", "lstm", True),
    "scan_gru": lambda: _recurrent("scan_gru", "gru", False),
    "unrolled_gru": lambda: _recurrent("unrolled_gru", "gru", True),
}

# ----- XLA as a program of the interleaved timing -----------------------------------------------


@dataclass
class XlaProgram:
    """A jitted JAX function on XLA CPU, callable like ``bench_adjoint.Program``."""

    label: str
    build: int
    function: Callable
    args: list

    def __call__(self):
        return jax.block_until_ready(self.function(*self.args))

    def results(self) -> list[np.ndarray]:
        return [np.asarray(r) for r in jax.tree_util.tree_leaves(self())]


# ----- one model --------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    errors: dict[str, str] = field(default_factory=dict)   # stage -> message
    adjoint_s: float = float("nan")                         # irgrad.passes.differentiate
    compile_s: dict[str, float] = field(default_factory=dict)
    per_call: dict[str, float] = field(default_factory=dict)
    noise: dict[str, float] = field(default_factory=dict)
    ratios: dict[str, tuple[float, list[float]]] = field(default_factory=dict)
    error_irgrad: float = float("nan")                      # max relative error vs XLA
    error_irgrad_where: str = ""                            # the argument where it is largest
    error_jax_iree: float = float("nan")
    calls: int = 0
    repeats: dict[str, int] = field(default_factory=dict)
    peer_note: str = ""                                     # set when the JAX-on-IREE peer is peer_loss's

    def ratio(self, key: str) -> float:
        return self.ratios.get(key, (float("nan"), []))[0]


RATIOS = {  # key -> (numerator, denominator, description)
    "grad/fwd": ("irgrad_grad", "irgrad_fwd", "irgrad gradient / irgrad forward"),
    "irgrad/jax_iree": ("irgrad_grad", "jax_iree", "irgrad gradient / JAX adjoint, same IREE"),
    "irgrad/xla": ("irgrad_grad", "xla_grad", "irgrad gradient / XLA CPU value_and_grad"),
    "jax_iree/xla": ("jax_iree", "xla_grad", "JAX adjoint on IREE / XLA CPU value_and_grad"),
    "jax_iree/irgrad_fwd": ("jax_iree", "irgrad_fwd", "JAX adjoint on IREE / irgrad forward"),
    "xla grad/fwd": ("xla_grad", "xla_fwd", "XLA CPU value_and_grad / XLA CPU forward"),
    "irgrad_fwd/xla_fwd": ("irgrad_fwd", "xla_fwd", "IREE forward / XLA CPU forward"),
}


ZERO_FLOOR = 1e-4


def gradient_error(out: Sequence[np.ndarray], ref: Sequence[np.ndarray], names: Sequence[str]) -> tuple[float, str]:
    """Largest ``bench_adjoint.max_relative_error`` over the arrays, and where it is.

    A gradient that is zero up to rounding (e.g. a key bias: softmax ignores it) has
    no scale of its own; an array whose largest magnitude is below ``ZERO_FLOOR`` times
    the largest of all arrays is measured against that floor instead.
    """
    if len(out) != len(ref):
        raise ValueError(f"{len(out)} results, XLA gives {len(ref)}")
    floor = ZERO_FLOOR * max(float(np.max(np.abs(r))) for r in ref)
    worst, where = 0.0, ""
    for name, u, v in zip(names, out, ref):
        if u.shape != v.shape:
            raise ValueError(f"{name}: shape {u.shape}, XLA gives {v.shape}")
        if float(np.max(np.abs(v))) >= floor:
            error = ba.max_relative_error([u], [v])
        else:
            error = float(np.max(np.abs(u - v))) / max(floor, 1e-30)
        if error >= worst:
            worst, where = error, name
    return worst, where


def short(exc: BaseException, limit: int = 600) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= limit else text[:limit] + " …"


@dataclass
class Repeated:
    """``repeats`` calls of one program as one call, so that fast and slow programs fill
    blocks of about the same length (see ``choose_repeats``)."""

    label: str
    build: int
    program: object
    repeats: int

    def __call__(self):
        for _ in range(self.repeats):
            out = self.program()
        return out


def choose_repeats(programs: list, block_s: float) -> tuple[dict[str, int], int]:
    """Repeats per program label, and calls per block, for blocks of about ``block_s``.

    The first calls of a block run slower than the rest (measured here: the first ~2 ms
    of IREE calls after an XLA block or an idle pause), so equally short blocks would
    penalise a fast forward far more than a slow gradient. Every program is repeated to
    about the slowest one's call time, and blocks hold enough such calls to last
    ``block_s``, so every program's block lasts about as long and carries the same ramp.
    """
    per_call = {}
    for p in programs:
        p()  # warm-up
        times = []
        for _ in range(5):
            start = time.perf_counter()
            p()
            times.append(time.perf_counter() - start)
        per_call[p.label] = max(ba.median(times), 1e-6)
    slowest = max(per_call.values())
    repeats = {label: max(1, round(slowest / t)) for label, t in per_call.items()}
    return repeats, int(min(500, max(3, math.ceil(block_s / slowest))))


def bench_model(model: Model, args: argparse.Namespace) -> Result:
    res = Result(model.name)
    n = len(model.args)
    fwd_jit = jax.jit(model.loss)
    vag_jit = jax.jit(jax.value_and_grad(model.loss, argnums=tuple(range(n))))
    forward_text = fwd_jit.lower(*model.args).as_text()
    jax_text = vag_jit.lower(*model.args).as_text()

    grad_text = None
    try:
        res.adjoint_s, grad_text = ba.timed(
            lambda: ig.passes.differentiate(forward_text, "main", with_value=True,
                                            loop_checkpoints=args.loop_checkpoints))
    except Exception as exc:  # noqa: BLE001 -- report it in the model's row and go on
        res.errors["differentiate"] = short(exc, 4000)

    if args.dump:
        out = Path(args.dump)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{model.name}_forward.mlir").write_text(forward_text)
        (out / f"{model.name}_jax_adjoint.mlir").write_text(jax_text)
        if grad_text is not None:
            (out / f"{model.name}_irgrad_grad.mlir").write_text(grad_text)

    # IREE: irgrad's module (@main and @main_grad) and JAX's adjoint, --builds builds each.
    # Without an adjoint, the forward alone is still timed against the peers.
    # irgrad's module goes through irgrad's compile path (igrt.compile): legalize_for_iree first,
    # which also writes forward convolutions as patches + dot_general. JAX's adjoint is compiled
    # as JAX wrote it.
    irgrad_text = grad_text if grad_text is not None else forward_text
    sources = {"jax_iree": jax_text, "irgrad": irgrad_text}
    functions = {"irgrad_fwd": ("irgrad", "main"), "irgrad_grad": ("irgrad", "main_grad"),
                 "jax_iree": ("jax_iree", "main")}
    if grad_text is None:
        del functions["irgrad_grad"]
    compile_s: dict[str, list[float]] = {k: [] for k in sources}
    programs: list = []
    device_args = [jax.device_put(a) for a in model.args]
    for build in range(args.builds):
        vmfbs = {}
        for key in ba.rotate(list(sources), build):
            if f"compile {key}" in res.errors:
                continue
            try:
                named = ba.with_module_name(sources[key], ba.build_name(f"{model.name}_{key}", build))
                seconds, vmfbs[key] = ba.compile_timed(named, args.iree_flag, peer=key == "jax_iree")
                compile_s[key].append(seconds)
            except Exception as exc:  # noqa: BLE001
                if key == "jax_iree" and model.peer_loss is not None and not res.peer_note:
                    # IREE rejects JAX's adjoint of this model: time JAX's adjoint of the same
                    # function written the way IREE compiles, and say so in every table.
                    res.peer_note = f"{model.peer_note}; IREE's error on JAX's own adjoint: {short(exc, 300)}"
                    sources[key] = peer_text = jax.jit(jax.value_and_grad(
                        model.peer_loss, argnums=tuple(range(n)))).lower(*model.args).as_text()
                    if args.dump:
                        (Path(args.dump) / f"{model.name}_jax_adjoint_peer.mlir").write_text(peer_text)
                    named = ba.with_module_name(peer_text, ba.build_name(f"{model.name}_{key}", build))
                    try:
                        seconds, vmfbs[key] = ba.compile_timed(named, args.iree_flag, peer=key == "jax_iree")
                        compile_s[key].append(seconds)
                        continue
                    except Exception as exc2:  # noqa: BLE001
                        exc = exc2
                res.errors[f"compile {key}"] = short(exc)
        for label, (key, function) in functions.items():
            if key in vmfbs:
                programs.append(ba.Program.load(label, build, vmfbs[key], function, model.args, args.driver))
        programs.append(XlaProgram("xla_grad", build, vag_jit, device_args))
        programs.append(XlaProgram("xla_fwd", build, fwd_jit, device_args))
    res.compile_s = {k: ba.median(v) for k, v in compile_s.items() if v}

    # Correctness against XLA (build 0 of each IREE program).
    first = {p.label: p for p in programs if p.build == 0}
    reference = first["xla_grad"].results()
    result_names = ["value", *model.names]
    checks = {"irgrad_grad": (reference, result_names), "irgrad_fwd": (reference[:1], ["forward"]),
              "jax_iree": (reference, result_names)}
    errors: dict[str, tuple[float, str]] = {}
    for label, (ref, names) in checks.items():
        if label not in first:
            continue
        try:
            errors[label] = gradient_error(first[label].results(), ref, names)
        except Exception as exc:  # noqa: BLE001
            res.errors[f"run {label}"] = short(exc)
            programs = [p for p in programs if p.label != label]
    irgrad_errors = [errors[k] for k in ("irgrad_grad", "irgrad_fwd") if k in errors]
    if irgrad_errors:
        res.error_irgrad, res.error_irgrad_where = max(irgrad_errors)
    if "jax_iree" in errors:
        res.error_jax_iree = errors["jax_iree"][0]

    repeats, calls = choose_repeats([p for p in programs if p.build == 0], args.block_ms / 1e3)
    if args.calls:
        repeats, calls = {label: 1 for label in repeats}, args.calls
    res.calls, res.repeats = calls, repeats
    timings = ba.run_interleaved([Repeated(p.label, p.build, p, repeats[p.label]) for p in programs],
                                 args.rounds, calls)
    present = {p.label for p in programs}
    for label in LABELS:
        if label in present:
            res.per_call[label] = timings.per_call(label) / repeats[label]
            res.noise[label] = timings.noise(label)
    for key, (num, den, _) in RATIOS.items():
        if num in present and den in present:
            scale = repeats[den] / repeats[num]  # blocks of num ran repeats[num] calls per call
            value, per_build = timings.ratio(num, den)
            res.ratios[key] = (value * scale, [v * scale for v in per_build])
    return res


# ----- printing -----------------------------------------------------------------------------------


def fmt_ratio(res: Result, key: str) -> str:
    value = res.ratio(key)
    return "—" if value != value else f"{value:.2f}"


def targets(res: Result) -> str:
    """'met', or which of the issue's targets are missed (or not measured); a miss whose
    per-build ratios reach the limit is marked "within build spread"."""
    missed = []
    checks = [("grad/fwd", TARGET_GRAD_OVER_FWD, f"grad/fwd>{TARGET_GRAD_OVER_FWD}"),
              ("irgrad/jax_iree", TARGET_OVER_JAX_IREE, "slower than JAX-IREE")]
    if res.name == "cnn":
        checks.append(("irgrad/jax_iree", TARGET_CNN_OVER_JAX_IREE, "<2x faster than JAX-IREE"))
    for key, limit, text in checks:
        value, per_build = res.ratios.get(key, (float("nan"), []))
        if value != value:
            missed.append(f"{key} not measured")
        elif value > limit:
            missed.append(text + (" (within build spread)" if per_build and min(per_build) <= limit else ""))
    return "met" if not missed else "MISSED: " + ", ".join(dict.fromkeys(missed))


def print_model(res: Result, model: Model) -> None:
    rows: list[tuple[str, str, str]] = []
    shapes = [f"{nm} {'x'.join(map(str, a.shape))}" for nm, a in zip(model.names, model.args)]
    if len(shapes) > 12:
        shapes = shapes[:6] + [f"… {len(shapes) - 10} more …"] + shapes[-4:]
    shapes = ", ".join(shapes)
    print(f"\n== {res.name}: {shapes}", flush=True)
    for stage, message in res.errors.items():
        rows.append((f"ERROR in {stage}", "", message.replace("\n", " ⏎ ")))
    if res.peer_note:
        rows.append(("NOTE: JAX adjoint (IREE) †", "", res.peer_note.replace("\n", " ⏎ ")))
    if res.adjoint_s == res.adjoint_s:
        rows.append(("irgrad adjoint build (differentiate)", ba.ms(res.adjoint_s), "host, one run"))
    if "irgrad" in res.compile_s:
        rows.append(("IREE compile irgrad module (fwd + grad)", ba.ms(res.compile_s["irgrad"]), "median of builds"))
    if "jax_iree" in res.compile_s:
        rows.append(("IREE compile JAX adjoint module", ba.ms(res.compile_s["jax_iree"]), "median of builds"))
    names = {"irgrad_fwd": "irgrad forward (IREE)", "irgrad_grad": "irgrad gradient (IREE)",
             "jax_iree": "JAX adjoint (IREE)", "xla_grad": "XLA CPU value_and_grad", "xla_fwd": "XLA CPU forward"}
    for label, text in names.items():
        if label in res.per_call:
            rows.append((f"run {text}", ba.ms(res.per_call[label]),
                         f"per call; blocks vary ±{100 * res.noise[label]:.0f} % (p10–p90)"))
    for key, (_, _, text) in RATIOS.items():
        if key in res.ratios:
            value, per_build = res.ratios[key]
            rows.append((text, f"{value:.2f}×", ba.spread(per_build)))
    rows.append(("max relative error irgrad vs XLA", f"{res.error_irgrad:.1e}",
                 f"forward, value and every gradient; largest at {res.error_irgrad_where or '—'}"))
    rows.append(("max relative error JAX-IREE vs XLA", f"{res.error_jax_iree:.1e}", "for scale"))
    reps = ", ".join(f"{label}×{k}" for label, k in res.repeats.items() if k > 1)
    rows.append(("targets", targets(res), f"blocks of {res.calls} calls" + (f" ({reps} each)" if reps else "")))
    ba.print_table(rows)
    sys.stdout.flush()


def print_summary(results: list[Result]) -> None:
    head = ["model", "grad/fwd", "irgrad/JAX-IREE", "irgrad/XLA", "JAX-IREE/XLA", "irgrad ms",
            "JAX-IREE ms", "XLA ms", "compile s (ig/jax)", "max rel err", "targets"]
    rows = []
    for r in results:
        grad = r.per_call.get("irgrad_grad", float("nan"))
        jaxi = r.per_call.get("jax_iree", float("nan"))
        xla = r.per_call.get("xla_grad", float("nan"))
        comp = "/".join(f"{r.compile_s[k]:.1f}" if k in r.compile_s else "—" for k in ("irgrad", "jax_iree"))
        status = targets(r)
        if r.errors:
            status = "ERROR " + ", ".join(r.errors) + "; " + status
        dagger = " †" if r.peer_note else ""
        rows.append([r.name, fmt_ratio(r, "grad/fwd"), fmt_ratio(r, "irgrad/jax_iree") + dagger,
                     fmt_ratio(r, "irgrad/xla"), fmt_ratio(r, "jax_iree/xla") + dagger,
                     *(f"{t * 1e3:.3f}" if t == t else "—" for t in (grad, jaxi, xla)), comp,
                     f"{r.error_irgrad:.1e}", status])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) if i in (0, len(head) - 1) else c.rjust(w)  # noqa: E731
                                           for i, (c, w) in enumerate(zip(cells, widths))) + " |"
    print(line(head))
    print("|" + "|".join(("-" * (w + 1) + ":" if 0 < i < len(head) - 1 else "-" * (w + 2))
                         for i, w in enumerate(widths)) + "|")
    for row in rows:
        print(line(row))
    for r in results:
        if r.peer_note:
            print(f"† {r.name}: {r.peer_note}")


# ----- main ---------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma-separated subset of {','.join(MODELS)} (default: all)")
    p.add_argument("--quick", action="store_true", help="smoke run: one build, few rounds")
    p.add_argument("--builds", type=int, default=None, help="builds per IREE program (default 3; quick: 1)")
    p.add_argument("--rounds", type=int, default=None, help="timing rounds (default 10; quick: 4)")
    p.add_argument("--calls", type=int, default=None,
                   help="calls of every program per timing block (default: each program is repeated to "
                        "about the slowest one's time and blocks last about --block-ms)")
    p.add_argument("--block-ms", type=float, default=None,
                   help="length of every program's timing block when --calls is not given "
                        "(default 30; quick: 20)")
    p.add_argument("--driver", default="local-task", choices=ba.DRIVERS,
                   help="IREE driver (default local-task, irgrad's default: a worker per core)")
    p.add_argument("--iree-flag", action="append", default=[], metavar="FLAG",
                   help="an extra iree-compile flag for every IREE program, e.g. "
                        "--iree-flag=--iree-opt-data-tiling=true (repeatable)")
    p.add_argument("--loop-checkpoints", metavar="K|sqrt", default=None,
                   type=lambda k: k if k == "sqrt" else int(k),
                   help="irgrad's loop_checkpoints (default: the pass's default)")
    p.add_argument("--dump", metavar="DIR", default=None,
                   help="write each model's forward, irgrad gradient and JAX adjoint .mlir into DIR")
    args = p.parse_args(argv)
    defaults = dict(builds=3, rounds=10, block_ms=30.0)
    if args.quick:
        defaults.update(builds=1, rounds=4, block_ms=20.0)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    extra = f" {' '.join(args.iree_flag)}" if args.iree_flag else ""
    print(f"{HEADER} ({'quick' if args.quick else 'full'}): irgrad {ig.__version__}, "
          f"IREE compiler {igrt.compiler_version()}, runtime {igrt.runtime_version()}, "
          f"llvm-cpu cpu=host{extra}, {args.driver}; JAX {jax.__version__} (XLA CPU); "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"builds {args.builds}, rounds {args.rounds}", flush=True)
    results: list[Result] = []
    for name in args.models:
        model = MODELS[name]()
        t0 = time.perf_counter()
        try:
            res = bench_model(model, args)
        except Exception as exc:  # noqa: BLE001 -- one model's failure must not stop the others
            res = Result(name, errors={"benchmark": short(exc, 4000)})
            traceback.print_exc()
        results.append(res)
        print_model(res, model)
        print(f"({name}: {time.perf_counter() - t0:.1f} s)", flush=True)
    print("\nSummary (ratios are medians of per-block ratios; < 1 means irgrad is faster; targets: "
          f"grad/fwd ≤ {TARGET_GRAD_OVER_FWD}, irgrad/JAX-IREE ≤ {TARGET_OVER_JAX_IREE}, "
          f"cnn irgrad/JAX-IREE ≤ {TARGET_CNN_OVER_JAX_IREE})")
    print_summary(results)
    for r in results:
        for stage, message in r.errors.items():
            print(f"\n{r.name} failed in {stage}:\n{message}")
    met = sum(targets(r) == "met" and not r.errors for r in results)
    if args.quick:
        print("\nquick run: one build and few rounds, so the ratios are indicative only")
    print(f"\n{met}/{len(results)} models meet every target; load average at the end "
          f"{os.getloadavg()[0]:.1f}; total {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
