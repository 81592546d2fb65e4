"""Exports two Keras models' training losses as StableHLO, for benchmarks/bench_keras.py.

    /work/tfvenv/bin/python dev/make_keras_models.py benchmarks/peer

TensorFlow 2.21 (`tensorflow-cpu`, Keras 3) is a dev-only dependency. Each model's loss
``loss(x, labels, *trainable, *non_trainable)`` runs ``model.stateless_call(...,
training=True)`` (batch norm in train mode, dropout off) and sparse softmax cross-entropy;
``tf.function(jit_compile=True).experimental_get_compiler_ir(...)(stage="stablehlo")``
prints it, as ``dev/make_tf_stablehlo_fixtures.py`` does. Writes ``<name>.mlir`` and
``<name>.json`` (``wrt``: the trainable weights' argument indices; the benchmark draws the
arguments itself, so no weights are stored).

* ``keras_cnn``: the Keras "simple MNIST convnet" example (two 3×3 convolutions with max
  pools, dropout, a dense head), batch 32 of 28×28×1.
* ``keras_mobilenetv2``: ``keras.applications.MobileNetV2(alpha=0.35, weights=None,
  classes=10)`` on batch 8 of 96×96×3 (its smallest pretrained size).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf
import keras


def keras_cnn():
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(10, activation="softmax"),
    ]), 32, (28, 28, 1)


def keras_mobilenetv2():
    return keras.applications.MobileNetV2(input_shape=(96, 96, 3), alpha=0.35, weights=None, classes=10), 8, \
        (96, 96, 3)


def training_loss(model, batch: int, shape: tuple[int, ...]):
    """``model``'s loss ``(x, labels, *trainable, *non_trainable) -> scalar``, arguments for a
    batch of ``batch`` (x normal, labels in [0, 10)) and how many weights are trainable."""
    trainable = [v.value for v in model.trainable_variables]
    frozen = [v.value for v in model.non_trainable_variables]
    nt = len(trainable)

    def loss(x, labels, *weights):
        probabilities, _ = model.stateless_call(list(weights[:nt]), list(weights[nt:]), x, training=True)
        return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, probabilities))

    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, *shape)).astype(np.float32)
    labels = rng.integers(0, 10, batch).astype(np.int32)
    return loss, [x, labels, *[np.asarray(w) for w in trainable], *[np.asarray(w) for w in frozen]], nt


def export(name: str, out: Path) -> None:
    model, batch, shape = {"keras_cnn": keras_cnn, "keras_mobilenetv2": keras_mobilenetv2}[name]()
    loss, args, nt = training_loss(model, batch, shape)
    f = tf.function(loss, jit_compile=True, autograph=False)
    text = f.experimental_get_compiler_ir(*args)(stage="stablehlo")
    (out / f"{name}.mlir").write_text(text)
    (out / f"{name}.json").write_text(json.dumps({"wrt": list(range(2, 2 + nt)), "tensorflow": tf.__version__,
                                                  "keras": keras.__version__}) + "\n")
    print(name, len(args), "arguments,", nt, "trainable,", len(text) // 1024, "KiB")


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/peer")
    out.mkdir(parents=True, exist_ok=True)
    for name in ("keras_cnn", "keras_mobilenetv2"):
        export(name, out)
