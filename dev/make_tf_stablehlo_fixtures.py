"""Export StableHLO fixtures from TensorFlow (a second foreign producer, after JAX).

TensorFlow is a DEV-ONLY dependency: irgrad and its tests never import it. The files
this script writes (``tests/fixtures/tf_stablehlo/*.mlir`` + ``*.npz`` + ``README.md``)
are committed, so ``tests/test_tf_stablehlo.py`` needs only numpy and irgrad.

Set-up (once) and regeneration, from the repository root:

    python3 -m venv /work/tfvenv && /work/tfvenv/bin/pip install tensorflow-cpu numpy
    /work/tfvenv/bin/python dev/make_tf_stablehlo_fixtures.py [NAME ...]

The export path (TensorFlow 2.21):

    tf.function(f, jit_compile=True, autograph=False) \\
        .experimental_get_compiler_ir(*args)(stage="stablehlo")

``stage`` accepts ``hlo``, ``hlo_serialized``, ``optimized_hlo``,
``optimized_hlo_serialized``, ``optimized_hlo_proto_serialized``, ``optimized_hlo_dot``,
``stablehlo`` and ``stablehlo_serialized``; ``stablehlo`` is TF's XLA bridge output
(the *unoptimized* HLO module) translated to StableHLO text: ``module
@a_inference_<f>_<n>__.<k>`` with ``func.func @main`` taking the arguments in order,
plus ``func.func private`` helpers (reducers, while conds/bodies, branches), some of
them called with ``func.call``. The other route, ``pywrap_tensorflow_to_stablehlo
.tensorflow_module_to_stablehlo(tf.mlir.experimental.convert_function(cf), shapes)``,
returns bytecode that still holds ``tf.*`` ops it could not legalize (``tf.Mean``,
``tf.SquaredDifference``, ``tf.Const`` in a batch norm), so it is not used.

Only the locations are rewritten: absolute paths of Python files become paths relative
to site-packages or to this repository (the text is otherwise TensorFlow's).

For each fixture ``<name>`` it writes ``<name>.mlir`` and ``<name>.npz`` with the layout
of ``tests/fixtures/jax`` (see README.md there):

    arg0..      the inputs (float32; int32 for ids / branch selectors)
    out0..      the forward outputs of @main (computed by the jit-compiled function)
    wrt         positions of the float arguments
    grad0..     d(sum of every float output) / d arg[wrt[k]]   (tf.GradientTape, eager TF)
    float_outs  positions of the float outputs
    cotangent0.. random cotangents of the float outputs
    vjp0..      tape.gradient(outputs, args, output_gradients=cotangents)

The gradients are TensorFlow's own (GradientTape over the ordinary TF ops, not over
the exported HLO), so they are the references irgrad's adjoint of TF's HLO must match.
"""
from __future__ import annotations

import os
import re
import sys
import zlib
from collections import Counter

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "tf_stablehlo")
F32, I32 = np.float32, np.int32


# ---------------------------------------------------------------------------
# The functions (TensorFlow ops; arguments are tensors).
# ---------------------------------------------------------------------------

def dense_softmax_ce(x, w, b, labels):
    logits = tf.matmul(x, w) + b
    loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    return loss, tf.nn.relu(logits)


def conv_batchnorm_training(x, w, gamma, beta):
    y = tf.nn.conv2d(x, w, strides=1, padding="SAME")
    train, _, _ = tf.compat.v1.nn.fused_batch_norm(y, gamma, beta, epsilon=1e-3, is_training=True)
    return tf.reduce_sum(tf.nn.relu(train) * tf.sin(y))


def batchnorm_inference(x, gamma, beta):
    mean = tf.constant([0.1, -0.2, 0.3], tf.float32)
    var = tf.constant([0.5, 1.5, 2.0], tf.float32)
    y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, gamma, beta, mean=mean, variance=var, epsilon=1e-3,
                                               is_training=False)
    return tf.reduce_sum(tf.sin(y))


def batchnorm_inference_stats_args(x, gamma, beta, mean, var):
    y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, gamma, beta, mean=mean, variance=var, epsilon=1e-3,
                                               is_training=False)
    return tf.reduce_sum(tf.sin(y))


def conv_strided_depthwise(x, w, dw):
    y = tf.nn.conv2d(x, w, strides=2, padding="SAME")
    z = tf.nn.depthwise_conv2d(tf.tanh(y), dw, strides=[1, 1, 1, 1], padding="VALID", dilations=[2, 2])
    return tf.reduce_sum(tf.sin(z))


def pools(x):
    m = tf.nn.max_pool2d(x, ksize=3, strides=2, padding="SAME")
    a = tf.nn.avg_pool2d(x, ksize=3, strides=2, padding="SAME")
    v = tf.nn.avg_pool2d(tf.exp(x * 0.5), ksize=2, strides=2, padding="VALID")
    return m, a, v


def embedding_gather(table, w, ids, ids2):
    e = tf.nn.embedding_lookup(table, ids)             # [2, 3, 4]
    g = tf.gather(table, ids2, axis=0)                 # [5, 4]
    h = tf.tanh(tf.einsum("bsd,de->bse", e, w))
    return tf.reduce_sum(h) + tf.reduce_sum(g * g)


def while_rnn(xs, h0, wx, wh):
    steps = xs.shape[0]

    def body(t, h):
        return t + 1, tf.tanh(tf.matmul(tf.gather(xs, t), wx) + tf.matmul(h, wh))

    _, h = tf.while_loop(lambda t, h: t < steps, body, (tf.constant(0), h0))
    return tf.reduce_sum(h * h)


def cond_branches(x, y, z):
    a = tf.cond(tf.reduce_sum(x) > 0.0, lambda: tf.sin(x) * y, lambda: tf.cos(x) + z)
    b = tf.cond(tf.reduce_sum(x) < 0.0, lambda: tf.exp(y) * z, lambda: y * y)
    return a, b


def layer_norm(x, gamma, beta):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return tf.reduce_sum(tf.square((x - mean) * tf.math.rsqrt(var + 1e-5) * gamma + beta))


def einsum_attention(x, wq, wk, wv, wo):
    q = tf.einsum("bsd,dhk->bshk", x, wq)
    k = tf.einsum("bsd,dhk->bshk", x, wk)
    v = tf.einsum("bsd,dhk->bshk", x, wv)
    logits = tf.einsum("bqhk,bshk->bhqs", q, k) / tf.sqrt(2.0)
    mask = tf.linalg.band_part(tf.ones([x.shape[1], x.shape[1]]), -1, 0)
    logits = logits + (1.0 - mask) * -1e9
    attn = tf.nn.softmax(logits, axis=-1)
    out = tf.einsum("bhqs,bshk->bqhk", attn, v)
    return tf.reduce_sum(tf.einsum("bqhk,hkd->bqd", out, wo) + x)


def elementwise(x, p, y):
    a = tf.sigmoid(x) * tf.nn.softplus(y) + tf.nn.relu6(x * 8.0)
    b = tf.clip_by_value(x, -0.5, 0.5) + tf.where(x > y, tf.abs(x), tf.square(y))
    c = tf.pow(p, y) + tf.math.log1p(p) * tf.math.expm1(y) + tf.math.rsqrt(p) + tf.math.atan2(x, p)
    d = tf.maximum(x, y) * tf.minimum(x, y) + tf.nn.elu(x) + tf.nn.leaky_relu(y) + tf.sign(x) * tf.sqrt(p)
    return a + b, c + d


def erf_gelu(x, y):
    return tf.reduce_sum(tf.math.erf(x) * tf.nn.gelu(y))


def reductions(x):
    return (tf.reduce_max(x, axis=1), tf.reduce_min(x, axis=0), tf.reduce_prod(x * 0.5 + 1.0, axis=1),
            tf.reduce_logsumexp(x, axis=1), tf.math.cumsum(x, axis=1), tf.math.cumprod(x, axis=0, reverse=True),
            tf.math.argmax(x, axis=1, output_type=tf.int32))


def shape_ops(x, y):
    c = tf.concat([x, tf.reverse(y, axis=[1])], axis=0)              # [7, 4]
    p = tf.pad(c, [[1, 2], [2, 0]], mode="REFLECT")                    # [10, 6]
    s = p[1:9:2, ::-1]                                                 # [4, 6]
    t = tf.tile(tf.transpose(s)[:, :2], [1, 3])                        # [6, 6]
    return tf.reduce_sum(t * tf.sin(t)) + tf.reduce_sum(tf.stack([x[:, 0], x[:, 1]], axis=1) ** 2)


def scatter_add(x, v, idx):
    s = tf.tensor_scatter_nd_add(x, idx, v)
    return tf.reduce_sum(tf.sin(s))


def top_k(x):
    top, _ = tf.math.top_k(x, k=3)
    return tf.reduce_sum(top * top)


# A boolean constant of more than 100 elements: TF 2.21 prints it as hex, bit-packed (eight
# elements per byte), which IREE 3.13's MLIR reads as one byte per element.
_MASK = np.random.default_rng(7).random((6, 20)) > 0.5


def bool_mask(x, v):
    y = tf.where(tf.constant(_MASK), tf.tanh(x), x * 2.0)
    z = tf.where(tf.constant([True, False, True]), v, -v)
    return tf.reduce_sum(y * y) + tf.reduce_sum(z * v)


def batch_matmul(a, b, c):
    y = tf.linalg.matmul(a, b, transpose_b=True)                      # [2, 3, 5]
    z = tf.linalg.matmul(c, y, transpose_a=True)                       # [2, 4, 5]
    return tf.reduce_sum(tf.tanh(z))


# ---------------------------------------------------------------------------
# The table: name -> (function, argument specs, what it exercises).
# An argument spec is (dtype, shape, kind): kind "normal", "positive", "soft_labels",
# "distinct" (well separated values), ("randint", lo, hi) or ("value", v).
# ---------------------------------------------------------------------------

def f32(*shape, kind="normal"):
    return (F32, shape, kind)


def i32(*shape, kind):
    return (I32, shape, kind)


FIXTURES = [
    ("dense_softmax_ce", dense_softmax_ce, [f32(4, 6), f32(6, 5), f32(5), f32(4, 5, kind="soft_labels")],
     "stablehlo.dot (legacy dot), bias broadcast, softmax cross-entropy as XLA lowers it (reduce max/add, "
     "exp, log, select), relu, mean; two outputs"),
    ("conv_batchnorm_training", conv_batchnorm_training,
     [f32(2, 5, 5, 3), f32(3, 3, 3, 4), f32(4, kind="positive"), f32(4)],
     "conv2d SAME, fused_batch_norm is_training=True (stablehlo.batch_norm_training), relu, sin"),
    ("batchnorm_inference", batchnorm_inference, [f32(2, 3, 3, 3), f32(3, kind="positive"), f32(3)],
     "fused_batch_norm is_training=False with constant statistics (stablehlo.batch_norm_inference)"),
    ("batchnorm_inference_stats_args", batchnorm_inference_stats_args,
     [f32(2, 3, 3, 3), f32(3, kind="positive"), f32(3), f32(3), f32(3, kind="positive")],
     "fused_batch_norm is_training=False with mean / variance as arguments (TF gives them no gradient)"),
    ("conv_strided_depthwise", conv_strided_depthwise, [f32(1, 9, 9, 2), f32(3, 3, 2, 4), f32(2, 2, 4, 2)],
     "conv2d stride 2 SAME, depthwise_conv2d with dilation 2 (feature_group_count)"),
    ("pools", pools, [f32(2, 6, 6, 3, kind="distinct")],
     "max_pool 3x3/2 SAME and avg_pool 3x3/2 SAME (reduce_window, padding excluded from the count), "
     "avg_pool 2x2/2 VALID; three outputs"),
    ("embedding_gather", embedding_gather, [f32(10, 4), f32(4, 3), i32(2, 3, kind=("value", [[1, 3, 3], [0, 9, 1]])),
                                            i32(5, kind=("value", [2, 2, 7, 0, 2]))],
     "embedding_lookup / gather with repeated ids (stablehlo.gather), einsum"),
    ("while_rnn", while_rnn, [f32(4, 2, 3), f32(2, 5), f32(3, 5), f32(5, 5)],
     "tf.while_loop over 4 steps (stablehlo.while, cond/body in private functions), gather of the step "
     "input with the loop counter, matmul, tanh"),
    ("cond_branches", cond_branches, [f32(4), f32(4), f32(4)],
     "tf.cond twice (one true, one false at these inputs) on data-dependent predicates; two outputs"),
    ("layer_norm", layer_norm, [f32(3, 8), f32(8), f32(8)],
     "tf.nn.moments (mean, squared difference), rsqrt, broadcasts"),
    ("einsum_attention", einsum_attention, [f32(2, 4, 6), f32(6, 2, 3), f32(6, 2, 3), f32(6, 2, 3), f32(2, 3, 6)],
     "einsum projections and attention (dot_general with batch dims, transposes), band_part causal mask, "
     "softmax"),
    ("elementwise", elementwise, [f32(3, 4), f32(3, 4, kind="positive"), f32(3, 4)],
     "sigmoid (stablehlo.logistic), softplus, relu6 (clamp), clip_by_value, where, abs, square, pow, log1p, "
     "expm1, rsqrt, atan2, maximum, minimum, elu, leaky_relu, sign, sqrt; two outputs"),
    ("erf_gelu", erf_gelu, [f32(3, 4), f32(3, 4)],
     "erf and exact gelu: TF's export prints them as mhlo.erf (not a StableHLO op)"),
    ("reductions", reductions, [f32(3, 5, kind="distinct")],
     "reduce max/min/prod, reduce_logsumexp, cumsum, reverse cumprod, argmax (int32 output)"),
    ("shape_ops", shape_ops, [f32(3, 4), f32(4, 4)],
     "concat, reverse, REFLECT pad, strided slice with negative stride, transpose, tile, stack"),
    ("scatter_add", scatter_add, [f32(3, 6), f32(3, 6), i32(3, 1, kind=("value", [[0], [2], [0]]))],
     "tensor_scatter_nd_add with a repeated index (stablehlo.scatter), sin"),
    ("top_k", top_k, [f32(2, 6, kind="distinct")],
     "top_k: stablehlo.sort of (values, iota), slices, stablehlo.set_dimension_size"),
    ("batch_matmul", batch_matmul, [f32(2, 3, 4), f32(2, 5, 4), f32(2, 3, 4)],
     "batched matmul with transpose_a / transpose_b (dot_general batch dims), tanh"),    ("bool_mask", bool_mask, [f32(6, 20), f32(3)],
     "tf.where on constant masks: a 120-element i1 constant printed bit-packed, a small one as a list; "
     "also exported as bytecode (stage='stablehlo_serialized') into bool_mask.mlirbc"),
]
# Fixtures also written as TF's MLIR bytecode (stage="stablehlo_serialized"), <name>.mlirbc.
BYTECODE = {"bool_mask"}


def _draw(rng, dtype, shape, kind):
    if kind == "normal":
        a = rng.standard_normal(shape) * 0.5
    elif kind == "positive":
        a = rng.uniform(0.5, 2.0, size=shape)
    elif kind == "soft_labels":   # strictly positive rows summing to 1 (see README: zero labels)
        a = rng.uniform(0.1, 1.0, size=shape)
        a = a / a.sum(axis=-1, keepdims=True)
    elif kind == "distinct":
        n = int(np.prod(shape))
        a = ((rng.permutation(n) - n / 2) * 0.1 + rng.uniform(-0.02, 0.02, size=n)).reshape(shape)
    elif kind[0] == "randint":
        a = rng.integers(kind[1], kind[2], size=shape)
    elif kind[0] == "value":
        a = np.asarray(kind[1])
        assert a.shape == tuple(shape), (a.shape, shape)
    else:
        raise ValueError(kind)
    return np.asarray(a).astype(dtype)


def _as_list(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


_PATH_RE = re.compile(r'"(/[^"]+\.py)"')


def _relative(path: str) -> str:
    marker = "site-packages/"
    if marker in path:
        return path.split(marker, 1)[1]
    if path.startswith(ROOT + os.sep):
        return os.path.relpath(path, ROOT)
    return os.path.basename(path)


def export(fn, args) -> str:
    jit = tf.function(fn, jit_compile=True, autograph=False)
    text = jit.experimental_get_compiler_ir(*[tf.constant(a) for a in args])(stage="stablehlo")
    return _PATH_RE.sub(lambda m: f'"{_relative(m.group(1))}"', text)


def references(name, fn, args, rng) -> dict[str, np.ndarray]:
    data = {f"arg{i}": a for i, a in enumerate(args)}
    jit = tf.function(fn, jit_compile=True, autograph=False)
    outs = [o.numpy() for o in _as_list(jit(*[tf.constant(a) for a in args]))]
    for i, o in enumerate(outs):
        data[f"out{i}"] = o
    wrt = [i for i, a in enumerate(args) if a.dtype.kind == "f"]
    float_outs = [i for i, o in enumerate(outs) if o.dtype.kind == "f"]
    data["wrt"] = np.asarray(wrt, np.int64)
    data["float_outs"] = np.asarray(float_outs, np.int64)
    cts = [rng.standard_normal(outs[i].shape).astype(outs[i].dtype) for i in float_outs]
    for k, c in enumerate(cts):
        data[f"cotangent{k}"] = c

    def grads(output_gradients):
        xs = [tf.constant(a) for a in args]
        with tf.GradientTape() as tape:
            for i in wrt:
                tape.watch(xs[i])
            ys = _as_list(fn(*xs))
            ys = [ys[i] for i in float_outs]
        g = tape.gradient(ys, [xs[i] for i in wrt], output_gradients=output_gradients,
                          unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return [tf.convert_to_tensor(t).numpy() for t in g]

    for k, g in enumerate(grads(None)):
        data[f"grad{k}"] = g
    for k, g in enumerate(grads([tf.constant(c) for c in cts])):
        data[f"vjp{k}"] = g
    return data


# ---------------------------------------------------------------------------
# README: op inventory (same regex as dev/make_jax_fixtures.py).
# ---------------------------------------------------------------------------

OP_RE = re.compile(r'(?<![#!\w.])"?((?:stablehlo|chlo)\.[a-z_0-9]+)')
MHLO_OP_RE = re.compile(r'(?:= |^\s*)"?(mhlo\.[a-z_0-9]+)', re.M)   # mhlo ops, not mhlo.* attributes
CALL_RE = re.compile(r"\bcall @[\w.$-]+")
PRIV_RE = re.compile(r"func\.func private @")


def op_counts(text: str) -> Counter:
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#loc"))
    c = Counter(m.group(1) for m in OP_RE.finditer(body))
    c.update(m.group(1) for m in MHLO_OP_RE.finditer(body))
    if CALL_RE.findall(body):
        c["func.call"] = len(CALL_RE.findall(body))
    if PRIV_RE.findall(body):
        c["func.func private"] = len(PRIV_RE.findall(body))
    return c


README_HEAD = """# TensorFlow-produced StableHLO fixtures

Produced by a second real foreign frontend, TensorFlow {tfver} (`tensorflow-cpu`), with

```python
tf.function(f, jit_compile=True, autograph=False).experimental_get_compiler_ir(*args)(stage="stablehlo")
```

i.e. TF's XLA bridge (the unoptimized HLO module of the jit-compiled function) printed as
StableHLO: `module @a_inference_<f>_<n>__.<k>` with `func.func @main` (arguments in the
order of `f`'s) and `func.func private` helpers (reducers, while cond/body, branches).
Only absolute file paths in locations were shortened. TensorFlow is a dev-only
dependency; neither irgrad nor its tests import it.

Regenerate (from the repository root):

```
python3 -m venv /work/tfvenv && /work/tfvenv/bin/pip install tensorflow-cpu numpy
/work/tfvenv/bin/python dev/make_tf_stablehlo_fixtures.py
```

The `.npz` layout is the JAX fixtures' (`tests/fixtures/jax/README.md`): `arg*`, `out*`
(forward of the jit-compiled function), `wrt`, `grad*` (d sum of all float outputs),
`float_outs`, `cotangent*`, `vjp*`. The gradients are TensorFlow's own
(`tf.GradientTape` over eager TF ops with `unconnected_gradients=ZERO`), not a
derivative of the exported HLO.

Note on `softmax_cross_entropy_with_logits`: XLA lowers the loss as
`-sum(labels * select(labels == 0, 0, log_softmax))`, whose derivative w.r.t. a label that
is exactly 0 is 0, while TensorFlow's registered gradient gives `-log_softmax` there; the
fixture uses strictly positive soft labels so both agree.

Other export routes tried with TF {tfver}: `tf.mlir.experimental.convert_function(cf,
pass_pipeline=...)` knows no StableHLO pipeline (`tf-to-stablehlo`, `tf-lower-to-stablehlo`,
`legalize-tf-to-stablehlo`: "does not refer to a registered pass or pass pipeline";
`xla-legalize-tf` alone fails on unranked results); `tensorflow.compiler.mlir.tensorflow_to_stablehlo
.python.pywrap_tensorflow_to_stablehlo.tensorflow_module_to_stablehlo(module_text, "2:")` returns
bytecode that still contains `tf.*` ops for a batch norm (`tf.Mean`, `tf.SquaredDifference`, `tf.Const`);
`savedmodel_to_stablehlo(...)` returns bytecode IREE 3.13's MLIR cannot read ("invalid Attribute index").

Which fixtures irgrad cannot differentiate yet, and why, is recorded in `tests/test_tf_stablehlo.py`
(`KNOWN`, `KNOWN_FORWARD`; those tests are `xfail(strict=True)`).

## Fixtures

| fixture | meant to exercise | args | StableHLO ops (count in .mlir) |
| --- | --- | --- | --- |
"""


def write_readme():
    out = [README_HEAD.format(tfver=tf.__version__)]
    union = Counter()
    for name, _, specs, what in FIXTURES:
        path = os.path.join(OUT_DIR, name + ".mlir")
        if not os.path.exists(path):
            continue
        counts = op_counts(open(path).read())
        union.update({k: 1 for k in counts})
        shapes = ", ".join(("f32" if dt == F32 else "i32") + "[" + "x".join(map(str, shape)) + "]"
                           for dt, shape, _ in specs)
        ops = ", ".join(f"{k}×{v}" for k, v in sorted(counts.items()))
        out.append(f"| `{name}` | {what} | {shapes} | {ops} |\n")
    out.append("\n## All distinct op names across the fixtures\n\n| op | fixtures using it |\n| --- | --- |\n")
    for k in sorted(union, key=lambda k: (-union[k], k)):
        out.append(f"| `{k}` | {union[k]} |\n")
    with open(os.path.join(OUT_DIR, "README.md"), "w") as f:
        f.write("".join(out))


def main(argv: list[str]) -> int:
    os.makedirs(OUT_DIR, exist_ok=True)
    wanted = set(argv)
    for name, fn, specs, _ in FIXTURES:
        if wanted and name not in wanted:
            continue
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        args = [_draw(rng, dt, shape, kind) for dt, shape, kind in specs]
        text = export(fn, args)
        with open(os.path.join(OUT_DIR, name + ".mlir"), "w") as f:
            f.write(text)
        if name in BYTECODE:
            jit = tf.function(fn, jit_compile=True, autograph=False)
            with open(os.path.join(OUT_DIR, name + ".mlirbc"), "wb") as f:
                f.write(jit.experimental_get_compiler_ir(*[tf.constant(a) for a in args])(stage="stablehlo_serialized"))
        data = references(name, fn, args, rng)
        np.savez_compressed(os.path.join(OUT_DIR, name + ".npz"), **data)
        print(f"{name:24s} {len(text.splitlines()):4d} lines; ops: "
              + ", ".join(sorted(k for k in op_counts(text))))
    write_readme()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
