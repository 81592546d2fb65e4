"""A memory limit at half of the unconstrained gradient's peak (issue 43): the peak and the time
each gradient takes with ``passes.differentiate(..., memory_limit=...)``, against without.

    .venv/bin/python benchmarks/bench_memory_limit.py --jax-python /work/tfvenv/bin/python
    .venv/bin/python benchmarks/bench_memory_limit.py --jax-python ... --models deep_mlp:2048 --fraction 0.5

Per model (``bench_memory_jax.py``'s): export the forward (JAX), differentiate it with
``with_value=True`` and compile it; measure ``main_grad``'s peak and time as ``bench_memory.py``
does (a fresh process per figure: MiB over the RSS after loading, first and second call);
then differentiate it again with ``memory_limit`` = ``--fraction`` of that peak (the first call's
measured peak, or irgrad's estimate with ``--basis estimate``: the limit bounds the estimate, and
IREE's own buffers are not in it), compile, measure, time both artifacts in turn in one fresh process (the
time cost under one load: this machine's cores are shared), and check that both return the same
values and gradients.
A limit rematerialization cannot meet is printed with its refusal, then tried again at the
smallest limit the refusal names. Nothing asserts a size.
"""
from __future__ import annotations

import argparse
import functools
import json
import re
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_memory import _run, figure  # noqa: E402

DEFAULT = ("resnet:64", "deep_mlp:2048", "scan_mlp:128")
MIB = 1 << 20


def _compile(text: str, path: Path) -> Path:
    from irgrad import runtime as igrt

    path.write_bytes(igrt.compile(text).vmfb)
    return path


def _measure(vmfb: Path, npz: Path, calls: int, limit: str) -> dict:
    return figure([sys.executable, str(HERE / "bench_memory.py"), "--measure-irgrad", str(vmfb), "main_grad",
                   str(npz), str(calls), "resident"], limit)


def _same(a: Path, b: Path, npz: Path) -> float:
    """The largest difference between the two artifacts' ``main_grad`` results, relative to each result's scale."""
    import numpy as np

    from irgrad import runtime as igrt

    with np.load(npz) as data:
        args = [data[f"arr_{i}"] for i in range(len(data.files))]
    outs = [igrt.load(p.read_bytes())["main_grad"].call_flat(*args) for p in (a, b)]
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))) / max(float(np.max(np.abs(x))), 1e-30))
               for x, y in zip(*outs))


def alternate(free: str, fitted: str, npz: str, reps: int) -> dict:
    """Median seconds of ``main_grad`` of the two artifacts, called in turn ``reps`` times each in
    this (fresh) process after one warm-up call each: the time cost under the same load."""
    import time

    import numpy as np

    import bench_adjoint  # noqa: F401  (puts the source tree first on sys.path)
    from irgrad import runtime as igrt

    with np.load(npz) as data:
        args = [data[f"arr_{i}"] for i in range(len(data.files))]
    fns = [igrt.load(Path(p).read_bytes())["main_grad"] for p in (free, fitted)]
    for fn in fns:
        fn(*args)
    times: list[list[float]] = [[], []]
    for _ in range(reps):
        for k, fn in enumerate(fns):
            start = time.perf_counter()
            fn(*args)
            times[k].append(time.perf_counter() - start)
    return {"free_s": statistics.median(times[0]), "fitted_s": statistics.median(times[1])}


def _ops(text: str) -> int:
    """The ops of ``@main_grad`` (recomputation adds some)."""
    body = text[re.search(r"func\.func (public )?@main_grad\(", text).start():]
    end = body.find("func.func", 10)
    return body[:end if end > 0 else len(body)].count(" = stablehlo.")


def _cell(result: dict) -> tuple[str, str]:
    """``first / second`` call's peak (MiB), and the median time (ms) of the calls from the second on."""
    if "error" in result:
        return "error", "error"
    times = result["times_s"][1:] or result["times_s"]
    return " / ".join(f"{p:.0f}" for p in result["peaks_mib"][:2]), f"{statistics.median(times) * 1e3:.0f}"


def run(args: argparse.Namespace) -> int:
    import bench_adjoint  # noqa: F401  (puts the source tree first on sys.path)
    import irgrad as ig

    print(f"main_grad: peak MiB over the RSS after loading, first / second call ({args.calls} calls); "
          f"limit = {args.fraction} x the unconstrained peak, "
          f"{'measured (first call)' if args.basis == 'measured' else 'as irgrad estimates it'}")
    print(f"time cost: median of {args.reps} calls each of the two artifacts in turn, in one fresh process")
    print("| model | batch | peak | limit MiB | estimate before -> after (MiB) | main_grad ops | peak | ms before "
          "-> after | max rel. diff |")
    print("|---|---:|---:|---:|---|---|---:|---:|---:|")
    specs = args.models.split(",") if args.models else list(DEFAULT)
    with tempfile.TemporaryDirectory(prefix="bench_memory_limit_") as tmp:
        for spec in specs:
            name, _, batch = spec.partition(":")
            folder = Path(tmp) / f"{name}_{batch}"
            _run([args.jax_python, str(HERE / "bench_memory_jax.py"), "export", name, batch, str(folder)], args.limit)
            forward = (folder / "forward.mlir").read_text()
            npz = folder / "args.npz"
            free = ig.passes.differentiate(forward, "main", with_value=True)
            before = ig.passes.estimate_peak(free, "main_grad")
            base = _measure(_compile(free, folder / "free.vmfb"), npz, args.calls, args.limit)
            peak, _ = _cell(base)
            if "error" in base:
                print(f"| {name} | {batch} | error: {base['error'][:200]} |")
                continue
            unconstrained = base["peaks_mib"][0] * MIB if args.basis == "measured" else before.peak
            limit = int(unconstrained * args.fraction)
            note = ""
            fit = functools.partial(ig.passes.differentiate, forward, "main", with_value=True,
                                    allocated=ig.runtime.compiler.peak_allocation)  # as irgrad compile checks it
            try:
                fitted = fit(memory_limit=limit)
            except ig.passes.MemoryLimitError as refusal:
                note = f" refused: {refusal}; measured at that smallest limit"
                limit = refusal.smallest
                fitted = fit(memory_limit=limit)
            after = ig.passes.estimate_peak(fitted, "main_grad")
            limited = _measure(_compile(fitted, folder / "fitted.vmfb"), npz, args.calls, args.limit)
            peak2, _ = _cell(limited)
            diff = _same(folder / "free.vmfb", folder / "fitted.vmfb", npz)
            timed = figure([sys.executable, __file__, "--alternate", str(folder / "free.vmfb"),
                            str(folder / "fitted.vmfb"), str(npz), str(args.reps)], args.limit)
            cost = ("error" if "error" in timed else f"{timed['free_s'] * 1e3:.0f} -> {timed['fitted_s'] * 1e3:.0f} "
                    f"(x{timed['fitted_s'] / timed['free_s']:.2f})")
            print(f"| {name} | {batch} | {peak} | {limit / MIB:.0f} | {before.peak / MIB:.0f} -> "
                  f"{after.peak / MIB:.0f} | {_ops(free)} -> {_ops(fitted)} | {peak2} | {cost} | {diff:.1e} |{note}",
                  flush=True)
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jax-python", default=sys.executable, help="a Python with JAX (default: this one)")
    parser.add_argument("--models", help=f"NAME:BATCH,... (default {','.join(DEFAULT)})")
    parser.add_argument("--fraction", type=float, default=0.5, help="the limit, a fraction of the unconstrained peak")
    parser.add_argument("--basis", choices=("measured", "estimate"), default="measured",
                        help="the unconstrained peak the fraction is of: measured (first call) or irgrad's estimate")
    parser.add_argument("--calls", type=int, default=3, help="calls per figure (default 3)")
    parser.add_argument("--reps", type=int, default=5, help="calls of each artifact for the time cost (default 5)")
    parser.add_argument("--limit", default="12000000000", help="prlimit --as for every process (bytes)")
    parser.add_argument("--alternate", nargs=4, metavar=("FREE", "FITTED", "NPZ", "REPS"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.alternate:
        free, fitted, npz, reps = args.alternate
        print(json.dumps(alternate(free, fitted, npz, int(reps))))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
