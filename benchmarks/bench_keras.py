"""Keras models exported by TensorFlow: irgrad's gradient against its forward, per call and compile.

    .venv/bin/python benchmarks/bench_keras.py                   # both models, a few minutes
    .venv/bin/python benchmarks/bench_keras.py --models keras_cnn --rounds 15

The models are TensorFlow's own StableHLO (``peer/<name>.mlir``, written by
``dev/make_keras_models.py`` with TensorFlow 2.21 / Keras 3): the training loss of Keras'
"simple MNIST convnet" (batch 32) and of ``keras.applications.MobileNetV2`` (alpha 0.35,
96×96×3, batch 8, batch norm in train mode), arguments ``(x, labels, *trainable,
*non_trainable)``. Only irgrad is needed: the arguments are drawn here (normal × 0.1, labels
in [0, 10)).

Per model, in one run: the compile time of the forward (``@main``) and of the gradient alone
(``@main_grad``, value and gradient with respect to the trainable weights, with ``@main``
private), each compiled without the cache; then the two called in interleaved blocks (forward
block, gradient block, ... for ``--rounds`` rounds), each block at least ``--block-ms``; the
median of the per-round ratios is printed, with both medians. Both run on the device
``ig.load`` picks (``local-task`` for these). Nothing asserts a time.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_adjoint  # noqa: E402, F401  (puts the source tree first on sys.path)

import irgrad as ig  # noqa: E402
from irgrad import passes  # noqa: E402
from irgrad.runtime import parse_signatures  # noqa: E402

PEER = Path(__file__).resolve().parent / "peer"
MODELS = ("keras_cnn", "keras_mobilenetv2")


def arguments(signature, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for t in signature.inputs:
        dtype = np.dtype(t.dtype)
        if dtype.kind == "f":
            out.append((rng.standard_normal(t.shape) * 0.1).astype(dtype))
        else:  # labels (and the dropout seed of the CNN)
            out.append(rng.integers(0, 10, t.shape).astype(dtype))
    return out


def timed_compile(text: str):
    t0 = time.perf_counter()
    artifact = ig.runtime.compile(text, cache=False)
    return artifact, time.perf_counter() - t0


def block(fn, args, seconds: float) -> float:
    calls, t0 = 0, time.perf_counter()
    while True:
        fn(*args)
        calls += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return elapsed / calls


def run(name: str, rounds: int, block_s: float) -> dict:
    text = (PEER / f"{name}.mlir").read_text()
    wrt = json.loads((PEER / f"{name}.json").read_text())["wrt"]
    t0 = time.perf_counter()
    grad = passes.differentiate(text, "main", wrt, with_value=True)
    differentiate_s = time.perf_counter() - t0
    grad_only = grad.replace("func.func @main(", "func.func private @main(", 1)
    forward, forward_s = timed_compile(text)
    gradient, gradient_s = timed_compile(grad_only)
    f, g = ig.load(forward.vmfb), ig.load(gradient.vmfb)
    args = arguments(parse_signatures(text)["main"])
    fwd, grad_fn = f["main"], g["main_grad"]
    value = fwd(*args)
    got = grad_fn(*args)
    assert np.allclose(got[0], value, rtol=1e-5), (got[0], value)
    for fn in (fwd, grad_fn):  # warm up
        block(fn, args, block_s)
    pairs = [(block(fwd, args, block_s), block(grad_fn, args, block_s)) for _ in range(rounds)]
    return {
        "model": name, "device": f.device, "differentiate s": differentiate_s,
        "compile fwd s": forward_s, "compile grad s": gradient_s,
        "fwd ms": statistics.median(a for a, _ in pairs) * 1e3,
        "grad ms": statistics.median(b for _, b in pairs) * 1e3,
        "grad/fwd": statistics.median(b / a for a, b in pairs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--block-ms", type=float, default=300.0)
    args = parser.parse_args()
    print(f"{'model':18s} {'device':10s} {'grad/fwd':>8s} {'fwd ms':>8s} {'grad ms':>8s} "
          f"{'compile fwd s':>13s} {'compile grad s':>14s} {'ratio':>6s} {'differentiate s':>15s}")
    for name in args.models.split(","):
        r = run(name, args.rounds, args.block_ms / 1e3)
        print(f"{r['model']:18s} {r['device']:10s} {r['grad/fwd']:8.2f} {r['fwd ms']:8.3f} {r['grad ms']:8.3f} "
              f"{r['compile fwd s']:13.1f} {r['compile grad s']:14.1f} "
              f"{r['compile grad s'] / r['compile fwd s']:6.2f} {r['differentiate s']:15.2f}", flush=True)


if __name__ == "__main__":
    main()
