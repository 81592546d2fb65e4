"""Vectorized Hessians, Jacobians and per-example gradients against JAX on XLA CPU.

    benchmarks/.venv/bin/python benchmarks/bench_hessian.py          # full run (about 3 min, 2 cores)
    benchmarks/.venv/bin/python benchmarks/bench_hessian.py --quick  # one build, few rounds

JAX lives in the benchmark's own environment (benchmarks/README.md); irgrad never
imports it. Every case is one compiled call, measured side by side in this run
(``bench_adjoint.py``'s interleaved blocks, rotating order, several builds) and
printed as a time per call and a ratio to the peer; nothing asserts a time.

Cases (float32):

* ``hessian200``, ``hessian1000``: the Hessian of ``f(x) = Σ softplus(A x)``
  (``A``: n×n, an argument) w.r.t. ``x``: ``ig.hessians`` (vectorized reverse over
  reverse) vs ``jax.jit(jax.hessian(f))`` and vs irgrad's loop over the rows
  (``GradientTape.jacobian(..., experimental_use_pfor=False)`` of the gradient, how
  ``ig.hessians`` worked before the batching pass).
* ``jacobian256``: the 256×256 Jacobian of one MLP layer ``tanh(W x + b)`` w.r.t. ``x``:
  ``ig.jacobian`` vs ``jax.jit(jax.jacrev)`` and irgrad's loop.
* ``per_example64``: per-example gradients of a 64-128-10 tanh MLP's squared error,
  batch 64: ``ig.vectorized_map`` over a ``GradientTape`` vs
  ``jax.jit(jax.vmap(jax.grad, in_axes=(None, 0, 0)))``.

Each irgrad result is checked against JAX's (max |difference| / max |JAX's|).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_adjoint as ba  # noqa: E402  (also puts the source tree first on sys.path)

import irgrad as ig  # noqa: E402

try:
    import jax  # noqa: E402
    import jax.numpy as jnp  # noqa: E402
except ImportError:  # pragma: no cover
    sys.exit("bench_hessian.py needs JAX: see benchmarks/README.md (benchmarks/.venv)")

jax.config.update("jax_platforms", "cpu")


@dataclass
class JaxProgram:
    label: str
    build: int
    fn: Callable
    args: list

    def __call__(self):
        return jax.block_until_ready(self.fn(*self.args))


@dataclass
class Case:
    name: str
    irgrad: dict[str, ig.Function]   # label -> traced function of the inputs
    jax_fn: Callable
    inputs: list[np.ndarray]


def _softplus_sum(n: int):
    def ig_f(x, a):
        return ig.reduce_sum(ig.nn.softplus(ig.reshape(a @ ig.reshape(x, [n, 1]), [n])))

    def jax_f(x, a):
        return jnp.sum(jax.nn.softplus(a @ x))
    return ig_f, jax_f


def hessian_case(n: int) -> Case:
    rng = np.random.default_rng(n)
    ig_f, jax_f = _softplus_sum(n)

    def looped(x, a):
        with ig.GradientTape() as outer:
            outer.watch(x)
            with ig.GradientTape() as inner:
                inner.watch(x)
                y = ig_f(x, a)
            g = inner.gradient(y, x)
        return outer.jacobian(g, x, experimental_use_pfor=False)

    inputs = [rng.standard_normal(n).astype(np.float32),
              (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)]
    return Case(f"hessian{n}", {"vectorized": ig.function(lambda x, a: ig.hessians(ig_f(x, a), x)[0]),
                                "loop": ig.function(looped)},
                jax.hessian(jax_f), inputs)


def jacobian_case(n: int = 256) -> Case:
    rng = np.random.default_rng(1)

    def layer(x, w, b):
        return ig.tanh(ig.reshape(w @ ig.reshape(x, [n, 1]), [n]) + b)

    def looped(x, w, b):
        with ig.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, w, b)
        return tape.jacobian(y, x, experimental_use_pfor=False)

    inputs = [rng.standard_normal(n).astype(np.float32),
              (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32),
              rng.standard_normal(n).astype(np.float32)]
    return Case(f"jacobian{n}", {"vectorized": ig.function(lambda x, w, b: ig.jacobian(layer(x, w, b), x)),
                                 "loop": ig.function(looped)},
                jax.jacrev(lambda x, w, b: jnp.tanh(w @ x + b)), inputs)


def per_example_case(batch: int = 64, d: int = 64, h: int = 128, k: int = 10) -> Case:
    rng = np.random.default_rng(2)

    def ig_loss(w1, w2, x, y):
        hidden = ig.tanh(ig.matmul(ig.reshape(x, [1, d]), w1))
        return ig.reduce_sum((ig.matmul(hidden, w2) - ig.reshape(y, [1, k])) ** 2)

    def per_example(w1, w2, xs, ys):
        def one(example):
            x, y = example
            with ig.GradientTape() as tape:
                tape.watch([w1, w2])
                loss = ig_loss(w1, w2, x, y)
            return tape.gradient(loss, [w1, w2])
        return ig.vectorized_map(one, (xs, ys))

    def jax_loss(params, x, y):
        w1, w2 = params
        return jnp.sum((jnp.tanh(x @ w1) @ w2 - y) ** 2)

    grads = jax.vmap(jax.grad(jax_loss), in_axes=(None, 0, 0))
    inputs = [(rng.standard_normal((d, h)) / np.sqrt(d)).astype(np.float32),
              (rng.standard_normal((h, k)) / np.sqrt(h)).astype(np.float32),
              rng.standard_normal((batch, d)).astype(np.float32),
              rng.standard_normal((batch, k)).astype(np.float32)]
    return Case(f"per_example{batch}", {"vectorized": ig.function(per_example)},
                lambda w1, w2, xs, ys: grads((w1, w2), xs, ys), inputs)


def relative_error(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> float:
    return max(float(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)).max()
                     / max(float(np.abs(np.asarray(w)).max()), 1e-30)) for g, w in zip(got, want))


def run_case(case: Case, args: argparse.Namespace, rows: list[tuple[str, str, str]]) -> None:
    specs = [ig.TensorSpec.from_value(a) for a in case.inputs]
    jitted = jax.jit(case.jax_fn)
    want = jax.tree_util.tree_leaves(jitted(*case.inputs))
    programs: list = []
    for label, fn in case.irgrad.items():
        text = fn.lower(*specs).mlir
        for build in range(args.builds):
            seconds, vmfb = ba.compile_timed(ba.with_module_name(text, ba.build_name(case.name, build)),
                                             args.iree_flag)
            program = ba.Program.load(f"irgrad {label}", build, vmfb, fn.name, case.inputs)
            programs.append(program)
        got = [np.asarray(r) for r in programs[-1].results()]
        rows.append((f"{case.name}: irgrad {label} max rel. error vs JAX", f"{relative_error(got, want):.1e}",
                     f"{len(text.splitlines())} lines of StableHLO, IREE compile {ba.ms(seconds)}"))
    for build in range(args.builds):
        programs.append(JaxProgram("jax", build, jitted, [jnp.asarray(a) for a in case.inputs]))
    timings = ba.run_interleaved(programs, args.rounds, args.calls)
    peer = timings.per_call("jax")
    rows.append((f"{case.name}: {_peer_name(case)}, XLA CPU", ba.ms(peer), f"±{timings.noise('jax'):.0%}"))
    for label in case.irgrad:
        ratio, builds = timings.ratio(f"irgrad {label}", "jax")
        rows.append((f"{case.name}: irgrad {label}", ba.ms(timings.per_call(f"irgrad {label}")),
                     f"{ratio:.2f}× JAX (per build {', '.join(f'{r:.2f}' for r in builds)})"))


def _peer_name(case: Case) -> str:
    if case.name.startswith("hessian"):
        return "jax.jit(jax.hessian)"
    if case.name.startswith("jacobian"):
        return "jax.jit(jax.jacrev)"
    return "jax.jit(jax.vmap(jax.grad))"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="one build, few rounds (a smoke run)")
    p.add_argument("--builds", type=int, default=3)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--iree-flag", action="append", default=[],
                   help="extra iree-compile flag, repeatable (e.g. --iree-flag=--iree-opt-data-tiling=true)")
    p.add_argument("--cases", default="hessian200,hessian1000,jacobian256,per_example64")
    args = p.parse_args(argv)
    if args.quick:
        args.builds, args.rounds, args.calls = 1, 3, 3
    return args


CASES = {"hessian200": lambda: hessian_case(200), "hessian1000": lambda: hessian_case(1000),
         "jacobian256": jacobian_case, "per_example64": per_example_case}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    rows: list[tuple[str, str, str]] = []
    print(f"irgrad vectorized derivatives benchmark{' (quick)' if args.quick else ''}: "
          f"{args.builds} builds × {args.rounds} rounds × {args.calls} calls")
    for name in args.cases.split(","):
        run_case(CASES[name](), args, rows)
    ba.print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
