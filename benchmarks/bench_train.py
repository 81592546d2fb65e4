"""Training steps per second: state through the host against state kept on the device.

    .venv/bin/python benchmarks/bench_train.py            # under a minute

For an MLP (784-128-10, batch 32) and a small CNN (conv 3x3 8 channels, relu, dense; 28x28x1,
batch 32), each with softmax cross-entropy and Adam (`irgrad compile --train adam`'s
functions): `call_flat` of `@F_train_step` with every array passing through the host each
step (host copy), against `Module.trainer`, which keeps parameters and state in device
buffers and copies only the loss back (on device). The two are timed in alternating blocks
(median of the rounds). Also prints the artifact sizes. Nothing asserts a time.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_adjoint  # noqa: E402, F401  (puts the source tree first on sys.path)

import irgrad as ig  # noqa: E402


def _cross_entropy(logits, labels):
    return -ig.reduce_mean(ig.reduce_sum(labels * ig.nn.log_softmax(logits), axis=1))


def models(rng):
    x = rng.normal(size=(32, 784)).astype(np.float32)
    labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 32)]
    mlp = ([rng.normal(size=(784, 128)).astype(np.float32) * 0.03, np.zeros(128, np.float32),
            rng.normal(size=(128, 10)).astype(np.float32) * 0.1, np.zeros(10, np.float32)], [x, labels])

    def mlp_loss(w1, b1, w2, b2, x, y):
        return _cross_entropy(ig.nn.relu(x @ w1 + b1) @ w2 + b2, y)

    images = rng.normal(size=(32, 28, 28, 1)).astype(np.float32)
    cnn = ([rng.normal(size=(3, 3, 1, 8)).astype(np.float32) * 0.3, np.zeros(8, np.float32),
            rng.normal(size=(28 * 28 * 8, 10)).astype(np.float32) * 0.01, np.zeros(10, np.float32)], [images, labels])

    def cnn_loss(k, bk, w, b, x, y):
        h = ig.nn.relu(ig.nn.conv2d(x, k, strides=1, padding="SAME") + bk)
        return _cross_entropy(ig.reshape(h, [32, -1]) @ w + b, y)

    return {"mlp": (mlp_loss, *mlp), "cnn": (cnn_loss, *cnn)}


def measure(loss, params, data, rounds: int, steps: int) -> tuple[int, dict[str, float]]:
    """(artifact bytes, steps per second {"host": ..., "device": ...})."""
    text = ig.function(loss).lower(*params, *data).mlir
    artifact = ig.compile(ig.passes.differentiate(text, wrt=list(range(len(params))), grad=False, train="adam"))
    module = artifact.load()
    step_name = next(n for n in module if n.endswith("_train_step"))
    step = module[step_name]
    host = [params, module[step_name.replace("_step", "_init")].call_flat(*params, *data)]

    def host_block():
        p, s = host
        for _ in range(steps):
            out = step.call_flat(*p, *data, *s)
            p, s = out[1:1 + len(p)], out[1 + len(p):]
        host[:] = [p, s]

    trainer = module.trainer(params)

    def device_block():
        for _ in range(steps):
            trainer.step(*data)

    host_block(), device_block()  # warm up
    times = {"host": [], "device": []}
    for _ in range(rounds):
        for key, block in (("host", host_block), ("device", device_block)):
            start = time.perf_counter()
            block()
            times[key].append(time.perf_counter() - start)
    return len(artifact.vmfb), {k: steps / float(np.median(v)) for k, v in times.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=50, help="steps per timed block")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{'model':6s} {'artifact KiB':>13s} {'host copy steps/s':>18s} {'on device steps/s':>18s} {'speedup':>8s}")
    for name, (loss, params, data) in models(rng).items():
        size, rate = measure(loss, params, data, args.rounds, args.steps)
        print(f"{name:6s} {size / 1024:13.0f} {rate['host']:18.0f} {rate['device']:18.0f} "
              f"{rate['device'] / rate['host']:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
