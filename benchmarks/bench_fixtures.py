"""Every real model in ``tests/fixtures``: irgrad's gradient against its forward, per call.

    .venv/bin/python benchmarks/bench_fixtures.py                       # all, ~10 min on 2 cores
    .venv/bin/python benchmarks/bench_fixtures.py --only torch/lstm_lm,jax/cnn_classifier
    .venv/bin/python benchmarks/bench_fixtures.py --profile             # and `irgrad profile` on each

The models are the fixtures other frameworks exported (JAX, torch-mlir, TensorFlow; layout in
``tests/foreign.py``): each module's ``@main`` and the ``@main_grad`` irgrad adds (value and
gradient with respect to every float argument, ``with_value=True``, what a training step
needs), compiled once into one artifact and called on the fixture's own inputs on the device
``ig.load`` picks for it. The two are timed in interleaved blocks (``bench_keras.block``) and
the median per-round ratio printed. Fixtures whose forward takes under 2 µs a call are listed
but not ranked (their ratio measures call overhead). ``--profile``: ``irgrad profile``'s
library function runs on each gradient too (it recompiles every dispatch alone: slow) and the
number of dispatches it timed is printed. Nothing asserts a time.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_adjoint  # noqa: E402, F401  (puts the source tree first on sys.path)
from bench_keras import block  # noqa: E402

import numpy as np  # noqa: E402

import irgrad as ig  # noqa: E402
from irgrad import passes  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
FOLDERS = ("jax", "torch", "tf_stablehlo", "jax_spectral", "tf_spectral")
SKIP = {"jax/custom_call": "no gradient reference (a LAPACK call)"}


def fixtures() -> list[str]:
    return [f"{folder}/{p.stem}" for folder in FOLDERS for p in sorted((FIXTURES / folder).glob("*.mlir"))]


def inputs(name: str) -> list[np.ndarray]:
    data = np.load(FIXTURES / f"{name}.npz")
    out, i = [], 0
    while f"arg{i}" in data.files:
        out.append(data[f"arg{i}"])
        i += 1
    return out


def run(name: str, rounds: int, block_s: float, profile: bool) -> dict:
    text = (FIXTURES / f"{name}.mlir").read_text()
    row: dict = {"fixture": name}
    t0 = time.perf_counter()
    module_text = passes.differentiate(text, "main", with_value=True)
    row["differentiate s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    module = ig.compile(module_text).load()
    row["compile s"] = time.perf_counter() - t0
    args = inputs(name)
    fwd, grad = module["main"], module["main_grad"]
    row["device"] = module.device
    for fn in (fwd, grad):  # warm up
        block(fn, args, block_s)
    pairs = [(block(fwd, args, block_s), block(grad, args, block_s)) for _ in range(rounds)]
    row["fwd us"] = statistics.median(a for a, _ in pairs) * 1e6
    row["grad us"] = statistics.median(b for _, b in pairs) * 1e6
    row["grad/fwd"] = statistics.median(b / a for a, b in pairs)
    if profile:
        from irgrad.runtime.profile import profile_dispatches  # only with --profile: it is slow
        try:
            report = profile_dispatches(module_text, function="main_grad", repetitions=1, whole_call=False)
            row["profile"] = f"{len(report.dispatches)} dispatches"
        except Exception as error:  # report it and go on: one model must not stop the table
            row["profile"] = f"failed: {type(error).__name__}: {str(error).splitlines()[0][:80]}"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated folder/name list")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--block-ms", type=float, default=60.0)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else fixtures()
    rows = []
    print(f"{'fixture':42s} {'device':10s} {'grad/fwd':>8s} {'fwd us':>9s} {'grad us':>9s} {'compile s':>9s}"
          + ("  profile" if args.profile else ""))
    for name in names:
        if name in SKIP:
            print(f"{name:42s} skipped: {SKIP[name]}")
            continue
        try:
            r = run(name, args.rounds, args.block_ms / 1e3, args.profile)
        except Exception as error:  # a fixture that does not compile here is a row, not the end
            print(f"{name:42s} failed: {type(error).__name__}: {str(error).splitlines()[0][:100]}", flush=True)
            continue
        rows.append(r)
        print(f"{name:42s} {r['device']:10s} {r['grad/fwd']:8.2f} {r['fwd us']:9.1f} {r['grad us']:9.1f} "
              f"{r['compile s']:9.1f}" + (f"  {r['profile']}" if args.profile else ""), flush=True)
    ranked = [r for r in rows if r["fwd us"] >= 2.0]
    if ranked:
        ratios = sorted(r["grad/fwd"] for r in ranked)
        worst = max(ranked, key=lambda r: r["grad/fwd"])
        print(f"\n{len(ranked)} ranked: median grad/fwd {statistics.median(ratios):.2f}, worst "
              f"{worst['grad/fwd']:.2f} ({worst['fixture']}), above 4x: "
              f"{[r['fixture'] for r in ranked if r['grad/fwd'] > 4] or 'none'}")


if __name__ == "__main__":
    main()
