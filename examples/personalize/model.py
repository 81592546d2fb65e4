"""On-device personalisation: a gesture classifier, fine-tuned on one user's own samples.

The model ships with weights trained on many people's gestures; one user performs them
differently, and the device adapts the classifier to that user with a few Adam steps of a
training artifact compiled once on the host. Walkthrough (README, "Training on a device"):

    # host, once: the training artifact for the device, and the data the device starts from
    irgrad compile examples/personalize/model.py:loss --train adam --lr 0.01 --wrt 2,3,4,5 \\
        --triple aarch64-linux-gnu -o build/personalize.vmfb
    python examples/personalize/model.py build/

    # device, with IREE's tool alone ...
    sh examples/personalize/train.sh build/personalize.vmfb build/ 50
    # ... or with irgrad's runtime-only install (pip install iree-base-runtime numpy && pip install --no-deps irgrad)
    python examples/personalize/train.py build/personalize.vmfb build/ 50

``loss`` is an ``ig.function`` with an ``input_signature``: ``x`` (a batch of the user's
feature windows), ``labels`` (one-hot) and the parameters ``w1, b1, w2, b2`` (arguments 2-5,
the ``--wrt`` above).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import irgrad as ig

BATCH, FEATURES, HIDDEN, CLASSES = 32, 12, 32, 4
PARAMS = ("w1", "b1", "w2", "b2")

SIGNATURE = [
    ig.TensorSpec([BATCH, FEATURES], ig.float32, name="x"),
    ig.TensorSpec([BATCH, CLASSES], ig.float32, name="labels"),
    ig.TensorSpec([FEATURES, HIDDEN], ig.float32, name="w1"),
    ig.TensorSpec([HIDDEN], ig.float32, name="b1"),
    ig.TensorSpec([HIDDEN, CLASSES], ig.float32, name="w2"),
    ig.TensorSpec([CLASSES], ig.float32, name="b2"),
]


@ig.function(input_signature=SIGNATURE)
def loss(x, labels, w1, b1, w2, b2):
    logits = ig.nn.relu(x @ w1 + b1) @ w2 + b2
    return ig.reduce_mean(ig.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def gestures(centres: np.ndarray, rng: np.random.Generator, n: int = BATCH) -> tuple[np.ndarray, np.ndarray]:
    """n noisy feature windows around each class's centre, with one-hot labels."""
    classes = np.arange(n) % CLASSES
    x = centres[classes] + 0.3 * rng.standard_normal((n, FEATURES))
    return x.astype(np.float32), np.eye(CLASSES, dtype=np.float32)[classes]


def base_weights(centres: np.ndarray, rng: np.random.Generator, steps: int = 300) -> list[np.ndarray]:
    """The shipped weights: Adam on the population's gestures, with a host training artifact."""
    params = [(rng.standard_normal((FEATURES, HIDDEN)) / np.sqrt(FEATURES)).astype(np.float32),
              np.zeros(HIDDEN, np.float32),
              (rng.standard_normal((HIDDEN, CLASSES)) / np.sqrt(HIDDEN)).astype(np.float32),
              np.zeros(CLASSES, np.float32)]
    text = ig.passes.differentiate(loss.lower().mlir, wrt=[2, 3, 4, 5], grad=False, train="adam",
                                   learning_rate=0.01)
    trainer = ig.load(ig.compile(text).vmfb).trainer(params)
    for _ in range(steps):
        trainer.step(*gestures(centres, rng))
    return trainer.params()


def main(out_dir: str = "build") -> int:
    """Write what the device starts from: the base weights and one user's samples, as .npy."""
    rng = np.random.default_rng(0)
    population = rng.standard_normal((CLASSES, FEATURES))
    user = population + 1.5 * rng.standard_normal((CLASSES, FEATURES))  # the same gestures, done differently
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, value in zip(PARAMS, base_weights(population, rng)):
        np.save(out / f"{name}.npy", value)
    x, labels = gestures(user, rng)
    np.save(out / "x.npy", x)
    np.save(out / "labels.npy", labels)
    print(f"wrote {', '.join(f'{n}.npy' for n in (*PARAMS, 'x', 'labels'))} to {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
