"""The three ways irgrad differentiates a ``while`` loop, timed side by side.

    .venv/bin/python benchmarks/bench_loops.py            # about a minute
    .venv/bin/python benchmarks/bench_loops.py --steps 1000

One recurrent step, ``h <- tanh(h @ w + x)`` on a 16×64 state, run ``--steps`` times by
three loops that differ only in what decides their trip count:

* ``counted``: ``i < steps`` with ``steps`` a constant: the tapes are sized at compile time
  and the forward loop runs once (recording as it goes);
* ``bound``: ``i < n`` with ``n`` an int32 argument: the count is computed before the loop,
  the tapes are sized at run time, the forward loop still runs once;
* ``dynamic``: ``while c < limit: c += s`` with ``s`` a float argument: nothing tells the count
  before the loop ends, so a counting run gives it (and the forward results) and the
  recording run follows: one forward run more.

Per loop it prints the forward time, the gradient's (value and gradient of every float
argument), their ratio, and the gradient's time against the counted loop's, all measured
in one run, the programs interleaved round by round (best of 5 calls per round, median of
the rounds). Nothing asserts a time.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_adjoint  # noqa: E402, F401  (puts the source tree first on sys.path)

import irgrad as ig  # noqa: E402


def programs(steps: int):
    def step(h, w, x):
        return ig.tanh(ig.matmul(h, w) + x)

    def counted(h0, w, x):
        return ig.while_loop(lambda i, h: i < steps, lambda i, h: (i + 1, step(h, w, x)), (0, h0))[1]

    def bound(h0, w, x, n):
        return ig.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, step(h, w, x)), (0, h0))[1]

    def dynamic(h0, w, x, s):
        limit = float(steps) - 0.5
        return ig.while_loop(lambda c, h: c < limit, lambda c, h: (c + s, step(h, w, x)),
                             (ig.constant(0.0), h0))[1]

    return {"counted": (counted, []), "bound": (bound, [np.array(steps, np.int32)]),
            "dynamic": (dynamic, [np.array(1.0, np.float32)])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    h0 = rng.standard_normal((16, 64)).astype(np.float32) * 0.5
    w = (rng.standard_normal((64, 64)) / 8).astype(np.float32)
    x = rng.standard_normal((16, 64)).astype(np.float32) * 0.1
    timed = []
    for name, (fn, extra) in programs(args.steps).items():
        call_args = [h0, w, x, *extra]
        loss = ig.function(lambda *a, fn=fn: ig.reduce_sum(fn(*a)))
        grad = ig.function(lambda *a, fn=fn: ig.gradients(ig.reduce_sum(fn(*a)), list(a[:3])))
        loss(*call_args), grad(*call_args)  # compile and warm up
        timed.append((f"{name}_fwd", lambda loss=loss, a=call_args: loss(*a)))
        timed.append((f"{name}_grad", lambda grad=grad, a=call_args: grad(*a)))
    times = {name: [] for name, _ in timed}
    for _ in range(args.rounds):
        for name, call in timed:
            times[name].append(_time(call))
    med = {k: float(np.median(v)) for k, v in times.items()}
    print(f"loop gradients, {args.steps} steps of tanh(h @ w + x), h 16x64 (float32, llvm-cpu)")
    print(f"{'loop':10s} {'forward ms':>11s} {'gradient ms':>12s} {'grad/fwd':>9s} {'grad/counted grad':>18s}")
    for name in ("counted", "bound", "dynamic"):
        f, g = med[f"{name}_fwd"] * 1e3, med[f"{name}_grad"] * 1e3
        print(f"{name:10s} {f:11.3f} {g:12.3f} {g / f:9.2f} {g / (med['counted_grad'] * 1e3):18.2f}")
    return 0


def _time(call, repeats: int = 5) -> float:
    import time
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t)
    return best


if __name__ == "__main__":
    sys.exit(main())
