"""The three ways irgrad differentiates a ``while`` loop, timed side by side.

    .venv/bin/python benchmarks/bench_loops.py            # about a minute
    .venv/bin/python benchmarks/bench_loops.py --steps 1000
    .venv/bin/python benchmarks/bench_loops.py --checkpoints none,sqrt,8,2   # 1000 steps

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

``--checkpoints K,...`` times the counted loop's gradient instead (default 1000 steps), built by
``passes.differentiate(..., loop_checkpoints=K)`` for each K (``none``: the whole tape), and
prints the bytes of the tapes the gradient allocates (every ``dynamic_update_slice`` target
in its IR: the snapshots and one segment's tape when checkpointed, as the reverse pass
holds one segment's recording at a time) against the time, relative to the whole tape.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_adjoint  # noqa: E402, F401  (puts the source tree first on sys.path)

import irgrad as ig  # noqa: E402
from irgrad import passes  # noqa: E402


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
    p.add_argument("--checkpoints", metavar="K,...", help="time loop_checkpoints=K for each K (none, sqrt, ints)")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    h0 = rng.standard_normal((16, 64)).astype(np.float32) * 0.5
    w = (rng.standard_normal((64, 64)) / 8).astype(np.float32)
    x = rng.standard_normal((16, 64)).astype(np.float32) * 0.1
    if args.checkpoints:
        ks = [None if k == "none" else k if k == "sqrt" else int(k) for k in args.checkpoints.split(",")]
        steps = args.steps if "--steps" in (argv or sys.argv) else 1000
        return checkpoints(programs(steps)["counted"][0], [h0, w, x], ks, steps, args.rounds)
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


def tape_bytes(text: str) -> int:
    """Bytes of the tapes a gradient function allocates: its dynamic_update_slice targets."""
    total = 0
    for dims, element in re.findall(r"stablehlo\.dynamic_update_slice[^\n]*: \(tensor<([0-9x]+)x(f32|f64)>", text):
        total += int(np.prod([int(d) for d in dims.split("x")])) * (4 if element == "f32" else 8)
    return total


def checkpoints(fn, call_args, ks, steps: int, rounds: int) -> int:
    forward = ig.function(lambda *a: ig.reduce_sum(fn(*a))).lower(*call_args).mlir
    timed, sizes = {}, {}
    for k in ks:
        text = passes.differentiate(forward, with_value=True, loop_checkpoints=k)
        grad_text = text[text.index("_grad("):]
        sizes[k] = tape_bytes(grad_text)
        module = ig.compile(text).load()
        name = next(n for n in module if n.endswith("_grad"))
        call = lambda f=module[name]: f(*call_args)  # noqa: E731
        call()
        timed[k] = call
    times = {k: [] for k in ks}
    for _ in range(rounds):
        for k, call in timed.items():
            times[k].append(_time(call))
    med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    base = ks[0]
    print(f"checkpointed loop gradients, {steps} steps of tanh(h @ w + x), h 16x64 (float32, llvm-cpu)")
    print(f"{'loop_checkpoints':17s} {'gradient ms':>12s} {'tape KiB':>9s} {'time vs ' + str(base):>14s} "
          f"{'tape vs ' + str(base):>14s}")
    for k in ks:
        print(f"{str(k):17s} {med[k]:12.3f} {sizes[k] / 1024:9.0f} {med[k] / med[base]:14.2f} "
              f"{sizes[k] / sizes[base]:14.3f}")
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
