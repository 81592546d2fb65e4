"""A two-layer MLP regression loss: irgrad's end-to-end example.

    python examples/mlp.py          # trace, differentiate, compile for this CPU, run
    irgrad compile examples/mlp.py:loss --grad -o mlp.vmfb

``loss`` is an ``ig.function`` with an ``input_signature``, so the command line
can lower it without calling it.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

import irgrad as ig

BATCH, IN, HIDDEN = 8, 4, 16

SIGNATURE = [
    ig.TensorSpec([BATCH, IN], ig.float32, name="x"),
    ig.TensorSpec([BATCH, 1], ig.float32, name="y"),
    ig.TensorSpec([IN, HIDDEN], ig.float32, name="w1"),
    ig.TensorSpec([HIDDEN], ig.float32, name="b1"),
    ig.TensorSpec([HIDDEN, 1], ig.float32, name="w2"),
    ig.TensorSpec([1], ig.float32, name="b2"),
]


@ig.function(input_signature=SIGNATURE)
def loss(x, y, w1, b1, w2, b2):
    hidden = ig.tanh(x @ w1 + b1)
    prediction = hidden @ w2 + b2
    return ig.reduce_mean(ig.square(prediction - y))


def example_inputs(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, IN)).astype(np.float32)
    y = np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)
    w1 = (rng.standard_normal((IN, HIDDEN)) * 0.5).astype(np.float32)
    b1 = np.zeros(HIDDEN, np.float32)
    w2 = (rng.standard_normal((HIDDEN, 1)) * 0.5).astype(np.float32)
    b2 = np.zeros(1, np.float32)
    return [x, y, w1, b1, w2, b2]


def main(out_dir: str = "build") -> int:
    t0 = time.perf_counter()
    forward = loss.lower().mlir                                   # trace + emit StableHLO
    t1 = time.perf_counter()
    module = ig.passes.differentiate(forward, "loss", with_value=True)  # adds @loss_grad
    t2 = time.perf_counter()
    artifact = ig.compile(module, target="llvm-cpu")
    t3 = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    path = artifact.save(os.path.join(out_dir, "mlp.vmfb"))
    compiled = ig.load(path)
    args = example_inputs()
    value, *grads = compiled["loss_grad"](*args)
    t4 = time.perf_counter()

    print("irgrad example: 2-layer MLP regression loss")
    for spec, a in zip(SIGNATURE, args):
        print(f"  input  {spec.name:<3} {a.dtype}{list(a.shape)}  mean={a.mean():+.4f}")
    print(f"  output loss = {float(value):.6f}")
    for spec, g in zip(SIGNATURE, grads):
        print(f"  grad   d loss/d {spec.name:<3} {g.dtype}{list(g.shape)}  |g|={np.linalg.norm(g):.6f}")
    print(f"  artifact: {path} ({os.path.getsize(path)} bytes, target {artifact.target}); "
          f"functions: {', '.join(sorted(compiled.functions))}")
    print(f"  time: trace+emit {1e3 * (t1 - t0):.1f} ms, adjoint {1e3 * (t2 - t1):.1f} ms, "
          f"IREE compile {1e3 * (t3 - t2):.1f} ms, save+load+first call {1e3 * (t4 - t3):.1f} ms")

    # Check the gradient of w2 against central differences (float64 on the host).
    eps, i = 1e-2, 3
    bumped = [a.copy() for a in args]
    bumped[4][i, 0] += eps
    up = float(compiled["loss"](*bumped))
    bumped[4][i, 0] -= 2 * eps
    down = float(compiled["loss"](*bumped))
    numeric = (up - down) / (2 * eps)
    print(f"  check: d loss/d w2[{i}] adjoint {grads[4][i, 0]:+.5f} vs central difference {numeric:+.5f}")
    return 0 if abs(numeric - grads[4][i, 0]) < 1e-2 * max(1.0, abs(numeric)) else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
