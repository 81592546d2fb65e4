"""The example's model and its training artifacts (host side, needs the compiler).

    python -m fleet_app.model OUT_DIR      # from examples/fleet: OUT_DIR/fleet.vmfb, fleet_prox.vmfb, init.npz

``fleet.vmfb``: ``loss`` with an Adam step (``--train adam --lr 0.01 --wrt 2,3,4,5``);
``fleet_prox.vmfb``: the same loss plus FedProx's proximal term ``mu/2 ||w - w_global||^2``
compiled into the step (``passes.proximal``), for Flower's ``FedProx``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import irgrad as ig

from .task import BATCH, CLASSES, FEATURES, HIDDEN, initial_params

SIGNATURE = [
    ig.TensorSpec([BATCH, FEATURES], ig.float32, name="x"),
    ig.TensorSpec([BATCH, CLASSES], ig.float32, name="labels"),
    ig.TensorSpec([FEATURES, HIDDEN], ig.float32, name="w1"),
    ig.TensorSpec([HIDDEN], ig.float32, name="b1"),
    ig.TensorSpec([HIDDEN, CLASSES], ig.float32, name="w2"),
    ig.TensorSpec([CLASSES], ig.float32, name="b2"),
]
WRT = [2, 3, 4, 5]
OPTIMIZER, LEARNING_RATE = "adam", 0.01


@ig.function(input_signature=SIGNATURE)
def loss(x, labels, w1, b1, w2, b2):
    logits = ig.nn.relu(x @ w1 + b1) @ w2 + b2
    return ig.reduce_mean(ig.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def build(out_dir: str | Path, mu: float | None = None) -> Path:
    """The training artifact (with FedProx's term when ``mu`` is given) in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text, func = loss.lower().mlir, "loss"
    if mu is not None:
        text, func = ig.passes.proximal(text, func, WRT, mu), "loss_prox"
    text = ig.passes.differentiate(text, func, wrt=WRT, grad=False, train=OPTIMIZER, learning_rate=LEARNING_RATE)
    path = out / ("fleet.vmfb" if mu is None else "fleet_prox.vmfb")
    ig.compile(text).save(path)
    return path


def main(out_dir: str = "build/fleet") -> int:
    print(build(out_dir))
    print(build(out_dir, mu=0.1))
    np.savez(Path(out_dir) / "init.npz", **initial_params())
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
