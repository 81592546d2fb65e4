"""Linear regression trained with SGD: one traced step (loss, gradients, update), called in a loop.

    python examples/train_regression.py

The weights are ``ig.Variable``s: the compiled step reads them as extra
arguments and ``assign_sub`` writes the updated values back after each call.
"""
from __future__ import annotations

import numpy as np

import irgrad as ig

rng = np.random.default_rng(0)
TRUE_W = np.array([[2.0], [-3.0], [0.5]], np.float32)
X = rng.standard_normal((32, 3)).astype(np.float32)
Y = (X @ TRUE_W + 1.0).astype(np.float32)

w = ig.Variable(np.zeros((3, 1), np.float32), name="w")
b = ig.Variable(np.zeros((1,), np.float32), name="b")


@ig.function(input_signature=[ig.TensorSpec([32, 3]), ig.TensorSpec([32, 1]), ig.TensorSpec([])])
def train_step(x, y, learning_rate):
    with ig.GradientTape() as tape:
        loss = ig.reduce_mean(ig.square(x @ w + b - y))
    dw, db = tape.gradient(loss, [w, b])
    w.assign_sub(learning_rate * dw)
    b.assign_sub(learning_rate * db)
    return loss


def train(steps: int = 100, learning_rate: float = 0.1) -> list[float]:
    return [float(train_step(X, Y, np.float32(learning_rate))) for _ in range(steps)]


if __name__ == "__main__":
    losses = train()
    print(f"loss: step 0 {losses[0]:.4f} -> step {len(losses) - 1} {losses[-1]:.6f}")
    print(f"w = {w.numpy().ravel()} (true {TRUE_W.ravel()}), b = {b.numpy()} (true [1.])")
