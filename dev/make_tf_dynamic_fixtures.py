"""Export StableHLO fixtures with a ``None`` batch dimension from TensorFlow.

TensorFlow is a DEV-ONLY dependency: irgrad and its tests never import it. Set-up as for
``dev/make_tf_stablehlo_fixtures.py`` (tensorflow-cpu 2.21), then, from the repository root:

    /work/tfvenv/bin/python dev/make_tf_dynamic_fixtures.py [NAME ...]

The export path. ``tf.function(f, input_signature=[tf.TensorSpec([None, 4]), ...], jit_compile=True)
.experimental_get_compiler_ir(*args)(stage="stablehlo")``, the route of
``dev/make_tf_stablehlo_fixtures.py``, keeps no ``?``: with concrete arguments TF 2.21 specialises
``@main`` to their shapes (``tensor<4x4xf32>``), and given the ``TensorSpec``s themselves it raises
``ValueError: Only support static input shape``. The MLIR bridge keeps the ``None`` batch:

    cf = tf.function(f, input_signature=[tf.TensorSpec([None, 4], tf.float32), ...]).get_concrete_function()
    tf.mlir.experimental.convert_function(
        cf, pass_pipeline="tf-standard-pipeline,xla-legalize-tf,hlo-legalize-to-stablehlo")

(TF ops -> MHLO with dynamic shapes -> StableHLO). The only rewrite of its text: the function
``@__inference_<f>_<n>`` is renamed ``@main``.
For each fixture ``<name>`` it writes to ``tests/fixtures/tf_dynamic/``
``<name>.mlir`` (TF's text; absolute paths in locations made relative) and ``<name>.npz`` with
the layout of ``tests/fixtures/jax_dynamic``: ``arg{i}_b{B}``, ``out{i}_b{B}`` (eager TF) and
``grad{k}_b{B}`` (``tf.GradientTape`` of the sum of the float outputs with respect to argument
``wrt[k]``) for each batch size ``B`` in ``BATCHES``; plus ``wrt`` and ``batches``.
"""
from __future__ import annotations

import os
import re
import sys
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "tf_dynamic")
BATCHES = (1, 3, 32)
EXPORT_BATCH = 4


def mlp_loss(x, w1, b1, w2, b2):
    """One batched input: two None-batched inputs broadcast against each other leave nothing in the
    IR that says their sizes are equal (see dev/make_torch_dynamic_fixtures.py)."""
    logits = tf.matmul(tf.tanh(tf.matmul(x, w1) + b1), w2) + b2
    # not tf.nn.softmax_cross_entropy_with_logits: its tf.Reshape to a computed [-1, 3] shape stays
    # a tf op through xla-legalize-tf (unlegalized)
    return -tf.reduce_mean(tf.reduce_sum(tf.nn.log_softmax(logits, axis=-1), axis=-1))


def cnn(x, k, w):
    y = tf.nn.relu(tf.nn.conv2d(x, k, strides=1, padding="SAME"))
    y = tf.nn.max_pool2d(y, ksize=2, strides=2, padding="VALID")
    # the dense layer as an einsum over (h, w, c): tf.reshape(y, [-1, 36]) on a None batch stays an
    # unlegalized tf.Reshape through xla-legalize-tf
    return tf.tanh(tf.einsum("bhwc,hwcd->bd", y, w))


# name: (function, [(shape, kind)]); None is the batch; kind "x" drawn per batch, "w" once,
# "onehot" one-hot labels.
FIXTURES = {
    "mlp_loss": (mlp_loss, [((None, 4), "x"), ((4, 8), "w"), ((8,), "w"),
                            ((8, 3), "w"), ((3,), "w")]),
    "cnn": (cnn, [((None, 6, 6, 2), "x"), ((3, 3, 2, 4), "w"), ((3, 3, 4, 3), "w")]),
}


def _draw(rng, shape, kind, batch):
    shape = tuple(batch if s is None else s for s in shape)
    if kind == "onehot":
        return np.eye(shape[-1], dtype=np.float32)[rng.integers(0, shape[-1], shape[:-1])]
    return (rng.standard_normal(shape) * 0.5).astype(np.float32)


PIPELINE = "tf-standard-pipeline,xla-legalize-tf,hlo-legalize-to-stablehlo"


def make(name: str) -> None:
    fn, args = FIXTURES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    weights = {i: _draw(rng, s, k, 0) for i, (s, k) in enumerate(args) if k == "w"}
    sig = [tf.TensorSpec(s, tf.float32) for s, _ in args]
    cf = tf.function(fn, input_signature=sig, autograph=False).get_concrete_function()
    text = tf.mlir.experimental.convert_function(cf, pass_pipeline=PIPELINE)
    assert not re.search(r'"tf\.[A-Z]|\bmhlo\.', text), f"{name}: TF ops left unlegalized"
    text = re.sub(r"@__inference_\w+", "@main", text, count=1)
    head = re.search(r"func\.func @main\((.*?)\) ->", text, re.S).group(1)
    if "?x" not in head:
        raise SystemExit(f"{name}: TF's export kept no dynamic dimension: @main({head})")
    with open(os.path.join(OUT_DIR, f"{name}.mlir"), "w") as out:
        out.write(text)
    wrt = [i for i, (_, k) in enumerate(args) if k != "onehot"]
    data = {"wrt": np.array(wrt, np.int64), "batches": np.array(BATCHES, np.int64)}
    for b in BATCHES:
        values = [weights.get(i, _draw(rng, s, k, b)) for i, (s, k) in enumerate(args)]
        tvals = [tf.constant(v) for v in values]
        with tf.GradientTape() as tape:
            for i in wrt:
                tape.watch(tvals[i])
            out = fn(*tvals)
            outs = out if isinstance(out, tuple) else (out,)
            total = tf.add_n([tf.reduce_sum(o) for o in outs])
        grads = tape.gradient(total, [tvals[i] for i in wrt])
        for i, v in enumerate(values):
            data[f"arg{i}_b{b}"] = v
        for i, o in enumerate(outs):
            data[f"out{i}_b{b}"] = o.numpy()
        for k, g in enumerate(grads):
            data[f"grad{k}_b{b}"] = g.numpy()
    np.savez_compressed(os.path.join(OUT_DIR, f"{name}.npz"), **data)
    print(f"{name}: {len(args)} args, {len(outs)} outputs; @main({head})")


if __name__ == "__main__":
    for n in sys.argv[1:] or FIXTURES:
        make(n)
