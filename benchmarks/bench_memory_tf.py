"""The TensorFlow side of ``bench_memory.py``: Keras' MobileNetV2 (issue 43's table).

Run by ``bench_memory.py`` under a Python with TensorFlow 2.21 / Keras 3 (``--tf-python``;
irgrad is not needed there), one fresh process per figure:

    python bench_memory_tf.py export keras_mobilenetv2 BATCH DIR     # DIR/forward.mlir, args.npz, wrt.json
    python bench_memory_tf.py measure keras_mobilenetv2 BATCH fwd|grad CALLS   # XLA's figures, one JSON line

The model and its loss are ``dev/make_keras_models.py``'s (``keras.applications.MobileNetV2``,
alpha 0.35, 96×96×3, 10 classes, batch norm in train mode, sparse softmax cross-entropy), at
any batch (``keras_mobilenetv2``; ``bench_memory_jax.py``'s ``mobilenetv2`` is the same
architecture written in JAX, on 32×32 inputs). XLA's figures are ``tf.function(jit_compile=True)``
of the loss, and of the loss with its gradient with respect to the trainable weights (what
irgrad's ``main_grad`` returns), the arguments on the device; measured as
``bench_memory_jax.measure_calls`` measures (TensorFlow's allocator keeps memory between calls,
so its figures vary from run to run).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "dev"))

from bench_memory_jax import measure_calls  # noqa: E402

MODELS = ("keras_mobilenetv2",)


def _model(batch: int):
    """The loss ``(x, labels, *trainable, *frozen) -> scalar``, its arguments and how many are trainable."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    from make_keras_models import keras_mobilenetv2, training_loss

    keras.utils.set_random_seed(0)  # the same initial weights in every process, so both sides' results compare
    model, _, shape = keras_mobilenetv2()
    return training_loss(model, batch, shape)


def main(argv: list[str]) -> None:
    import tensorflow as tf

    command, name, batch = argv[0], argv[1], int(argv[2])
    if name not in MODELS:
        raise SystemExit(f"unknown model {name!r}; models: {', '.join(MODELS)}")
    loss, args, nt = _model(batch)
    if command == "export":
        out = Path(argv[3])
        out.mkdir(parents=True, exist_ok=True)
        f = tf.function(loss, jit_compile=True, autograph=False)
        (out / "forward.mlir").write_text(f.experimental_get_compiler_ir(*args)(stage="stablehlo"))
        np.savez(out / "args.npz", *args)
        (out / "wrt.json").write_text(json.dumps(list(range(2, 2 + nt))))
        return
    kind, calls = argv[3], int(argv[4])

    def value_and_grad(x, labels, *weights):
        with tf.GradientTape() as tape:
            tape.watch(weights[:nt])
            value = loss(x, labels, *weights)
        return value, tape.gradient(value, weights[:nt])

    fn = tf.function(loss if kind == "fwd" else value_and_grad, jit_compile=True, autograph=False)
    device_args = [tf.constant(a) for a in args]
    fn(*device_args)  # compiled here, before measuring

    def call():
        result = fn(*device_args)
        tf.nest.map_structure(lambda t: t.numpy(), result)  # waits for it, as irgrad's calls do
        return result

    print(json.dumps(measure_calls(call, calls)))


if __name__ == "__main__":
    main(sys.argv[1:])
