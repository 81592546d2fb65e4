"""Per-call cost against JAX: a trivial call, a 200×200 Hessian, an Adam step of the README MLP.

    benchmarks/.venv/bin/python benchmarks/bench_calls.py            # about a minute
    benchmarks/.venv/bin/python benchmarks/bench_calls.py --rounds 15
    .venv/bin/python benchmarks/bench_calls.py --jax-python /path/to/jax-env/bin/python

JAX lives in the benchmark's own environment (benchmarks/README.md), or in any other one named
by ``--jax-python`` (JAX and numpy; irgrad not needed there): ``bench_calls_jax.py`` then runs
JAX's programs in a worker process under it, one process running at a time. irgrad never
imports JAX. Every program is called in blocks of ``--calls``, the programs interleaved round by
round (A B C A B C ...), and the median time per call over the rounds is printed with its ratio
to JAX's. JAX's calls wait for their result (``jax.block_until_ready``), as irgrad's do.
Nothing asserts a time.

* ``x + 1.0`` on a 200-vector, with an unused 200×200 argument: ``jax.jit`` against
  ``ig.function`` without and with an ``input_signature`` (the README's form), and the same
  artifact loaded with ``ig.load`` on the default device (which ``loader.default_driver``
  picks: local-sync for little work) and on ``local-task``.
* the Hessian of ``sum(tanh(x) * (A @ tanh(x)))``, ``x`` 200 and ``A`` 200×200:
  ``jax.jit(jax.hessian(f))`` against ``ig.function`` of ``ig.hessians``.
* one Adam step of ``examples/mlp.py``'s loss (batch 8, 4-16-1): a ``jax.jit``-ed
  ``value_and_grad`` plus Keras's Adam rule against ``Module.trainer(...).step`` of the
  ``--train adam`` artifact (parameters and state on the device).
* the same for ``bench_train.py``'s small CNN (conv 3×3, 8 channels, relu, dense; batch 32 of
  28×28×1).
"""
from __future__ import annotations

import argparse
import functools
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_adjoint  # noqa: E402, F401  (puts the source tree first on sys.path)
from bench_calls_jax import Peer, time_block  # noqa: E402

import irgrad as ig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# Each case: (title, JAX's case in bench_calls_jax.py, the arrays it is built from, irgrad's
# programs: name -> (callable, arguments)).

def trivial():
    x, a = np.ones(200, np.float32), np.ones((200, 200), np.float32)
    f = ig.function(lambda x, a: x + 1.0)
    signed = ig.function(lambda x, a: x + 1.0, input_signature=[ig.TensorSpec([200]), ig.TensorSpec([200, 200])])
    vmfb = ig.compile(f.lower(x, a)).vmfb
    default, task = ig.load(vmfb), ig.load(vmfb, device="local-task")
    name = next(iter(default))
    return "x + 1.0, 200-vector", "trivial", [x, a], {
        "ig.function": (f, (x, a)),
        "ig.function, input_signature": (signed, (x, a)),
        f"ig.load ({default.device})": (default[name], (x, a)),
        "ig.load (local-task)": (task[name], (x, a)),
    }


def hessian():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(200).astype(np.float32)
    a = (rng.standard_normal((200, 200)) / 14).astype(np.float32)

    @ig.function
    def h_ig(x, a):
        t = ig.tanh(x)
        return ig.hessians(ig.reduce_sum(t * ig.matmul(a, t[:, None])[:, 0]), x)[0]

    return "Hessian 200x200", "hessian", [x, a], {"ig.function": (h_ig, (x, a))}


def adam_step():
    sys.path.insert(0, str(ROOT / "examples"))
    import mlp

    x, y, *params = mlp.example_inputs()
    text = ig.export(mlp.loss)
    train = ig.passes.differentiate(text, wrt=[2, 3, 4, 5], grad=False, train="adam", learning_rate=0.01)
    module = ig.compile(train).load()
    step = next(n for n in module if n.endswith("_train_step"))
    trainer = module.trainer(params, step)
    return "Adam step, README MLP", "mlp", [*params, x, y], {"Module.trainer.step": (trainer.step, (x, y))}


def cnn_adam_step():
    """A small CNN's Adam step (``bench_train.py``'s: conv 3×3, 8 channels, relu, dense; batch
    32 of 28×28×1, softmax cross-entropy)."""
    import bench_train

    loss_ig, params, data = bench_train.models(np.random.default_rng(0))["cnn"]
    text = ig.function(loss_ig).lower(*params, *data).mlir
    train = ig.passes.differentiate(text, wrt=list(range(len(params))), grad=False, train="adam", learning_rate=0.01)
    module = ig.compile(train).load()
    trainer = module.trainer(params, next(n for n in module if n.endswith("_train_step")))
    return "Adam step, small CNN", "cnn", [*params, *data], {"Module.trainer.step": (trainer.step, tuple(data))}


def measure(blocks: dict, rounds: int, calls: int) -> dict[str, float]:
    """Median seconds per call of each program; ``blocks``: name -> ``block(calls)``, which
    runs a block of calls and returns the seconds per call."""
    for block in blocks.values():  # warm up: compiles, first-call costs
        block(20)
    times: dict[str, list[float]] = {name: [] for name in blocks}
    for _ in range(rounds):
        for name, block in blocks.items():
            times[name].append(block(calls))
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--jax-python", help="a Python with JAX, to run JAX's programs in (default: this one)")
    parser.add_argument("--cases", default="trivial,hessian,mlp,cnn",
                        help="a subset of trivial,hessian,mlp,cnn")
    args = parser.parse_args()
    cases = {"trivial": trivial, "hessian": hessian, "mlp": adam_step, "cnn": cnn_adam_step}
    peer = Peer(args.jax_python)
    try:
        where = f"in {args.jax_python}" if args.jax_python else "in this process"
        print(f"per-call cost, irgrad against JAX {peer.version} (XLA CPU, {where}), one run")
        for case in args.cases.split(","):
            title, jax_case, arrays, programs = cases[case]()
            results = peer.build(jax_case, arrays)
            for name, (fn, call_args) in programs.items():  # the same numbers as JAX's
                for want in results.values():
                    np.testing.assert_allclose(np.asarray(fn(*call_args)), want, rtol=1e-4, atol=1e-5,
                                               err_msg=f"{title}: {name}")
            blocks = {name: functools.partial(peer.block, jax_case, name) for name in results}
            blocks.update({name: functools.partial(time_block, fn, call_args)
                           for name, (fn, call_args) in programs.items()})
            result = measure(blocks, args.rounds, args.calls)
            reference = next(iter(result.values()))
            print(f"\n{title}")
            for name, seconds in result.items():
                print(f"  {name:30s} {seconds * 1e6:9.1f} µs  {seconds / reference:5.2f}×")
    finally:
        peer.close()


if __name__ == "__main__":
    main()
