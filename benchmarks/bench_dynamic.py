"""One artifact for every batch size, and what it costs (issue 32).

    .venv/bin/python benchmarks/bench_dynamic.py               # a few minutes
    .venv/bin/python benchmarks/bench_dynamic.py --rounds 15 --calls 20

For the jax_dynamic ``mlp`` and ``attention`` fixtures (``jax.export`` with a symbolic batch,
``tests/fixtures/jax_dynamic``), the gradient ``@main_grad`` of the dynamic module, compiled
once, against the static module of each size (the batch written into the text, ``?x`` ->
``16x``; JAX's shape computations then fold away) at batch sizes 1, 16 and 128. Each program
is called in blocks of ``--calls``, the two programs interleaved round by round (dynamic,
static, dynamic, ...), and the median time per call over the rounds is printed with the ratio
dynamic / static and the device each ran on (``ig.load`` picks local-sync for an llvm-cpu
artifact of little work, a run-time dimension counted as 64; ``--device`` names one for both).
Both artifacts are built with the same flags, from text on stdin (no source path to shift
IREE's code layout: ``/work/shared/NOTES.md``). Nothing asserts a time.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import irgrad as ig  # noqa: E402
from irgrad import passes  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "jax_dynamic"
MODELS = ("mlp", "attention")
BATCHES = (1, 16, 128)


def _arguments(name: str, batch: int) -> list[np.ndarray]:
    """The fixture's batch-1 arguments, the first (the batched input) drawn at ``batch`` rows."""
    with np.load(FIXTURES / f"{name}.npz") as z:
        args = [z[f"arg{i}_b1"] for i in range(len([k for k in z.files if k.endswith("_b1") and k.startswith("arg")]))]
    rng = np.random.default_rng(batch)
    return [rng.standard_normal((batch, *args[0].shape[1:])).astype(np.float32), *args[1:]]


def _module(text: str, device: str | None):
    return ig.compile(passes.differentiate(text, "main")).load(device)


def _per_call(fn, args, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--device", default=None, help="local-sync / local-task for both artifacts; by default "
                        "each gets what ig.load picks (local-sync for little work, which a ? size hides)")
    options = parser.parse_args()
    rows = []
    for name in MODELS:
        text = (FIXTURES / f"{name}.mlir").read_text()
        loaded = _module(text, options.device)
        dynamic = loaded["main_grad"]
        for batch in BATCHES:
            static_module = _module(text.replace("?x", f"{batch}x"), options.device)
            static = static_module["main_grad"]
            args = _arguments(name, batch)
            for a, b in zip(dynamic(*args), static(*args), strict=True):  # same numbers
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
            for fn in (dynamic, static):  # warm up
                _per_call(fn, args, options.calls)
            times = {"dynamic": [], "static": []}
            for _ in range(options.rounds):
                times["dynamic"].append(_per_call(dynamic, args, options.calls))
                times["static"].append(_per_call(static, args, options.calls))
            d, s = (statistics.median(times[k]) * 1e6 for k in ("dynamic", "static"))
            rows.append((name, batch, d, s, loaded.device, static_module.device))
            print(f"{name:10} {batch:5} {d:10.1f} {s:10.1f} {d / s:7.2f}", flush=True)
    print()
    print("| model | batch | dynamic µs/call (device) | static µs/call (device) | dynamic / static |")
    print("|---|---:|---:|---:|---:|")
    for name, batch, d, s, dd, sd in rows:
        print(f"| {name} grad | {batch} | {d:.1f} ({dd}) | {s:.1f} ({sd}) | {d / s:.2f} |")


if __name__ == "__main__":
    main()
