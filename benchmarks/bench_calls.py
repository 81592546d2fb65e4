"""Per-call cost against JAX: a trivial call, a 200×200 Hessian, an Adam step of the README MLP.

    benchmarks/.venv/bin/python benchmarks/bench_calls.py            # about a minute
    benchmarks/.venv/bin/python benchmarks/bench_calls.py --rounds 15

JAX lives in the benchmark's own environment (benchmarks/README.md); irgrad never imports it.
Every program is called in blocks of ``--calls``, the programs interleaved round by round (A B C
A B C ...), and the median time per call over the rounds is printed with its ratio to JAX's.
JAX's calls wait for their result (``jax.block_until_ready``), as irgrad's do. Nothing
asserts a time.

* ``x + 1.0`` on a 200-vector, with an unused 200×200 argument: ``jax.jit`` against
  ``ig.function`` and the same artifact loaded with ``ig.load`` on the default device (which
  ``loader.default_driver`` picks: local-sync for little work) and on ``local-task``.
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
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_adjoint  # noqa: E402, F401  (puts the source tree first on sys.path)

import irgrad as ig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def trivial(jax, jnp):
    x, a = np.ones(200, np.float32), np.ones((200, 200), np.float32)
    f = ig.function(lambda x, a: x + 1.0)
    vmfb = ig.compile(f.lower(x, a)).vmfb
    default, task = ig.load(vmfb), ig.load(vmfb, device="local-task")
    name = next(iter(default))
    jitted = jax.jit(lambda x, a: x + 1.0)
    return "x + 1.0, 200-vector", {
        "jax.jit": (lambda x, a: jax.block_until_ready(jitted(x, a)), (x, a)),
        "ig.function": (f, (x, a)),
        f"ig.load ({default.device})": (default[name], (x, a)),
        "ig.load (local-task)": (task[name], (x, a)),
    }


def hessian(jax, jnp):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(200).astype(np.float32)
    a = (rng.standard_normal((200, 200)) / 14).astype(np.float32)

    def f_jax(x, a):
        t = jnp.tanh(x)
        return jnp.sum(t * (a @ t))

    @ig.function
    def h_ig(x, a):
        t = ig.tanh(x)
        return ig.hessians(ig.reduce_sum(t * ig.matmul(a, t[:, None])[:, 0]), x)[0]

    h_jax = jax.jit(jax.hessian(f_jax))
    np.testing.assert_allclose(h_ig(x, a), h_jax(x, a), rtol=1e-4, atol=1e-5)
    return "Hessian 200x200", {"jax.jit(jax.hessian)": (lambda x, a: jax.block_until_ready(h_jax(x, a)), (x, a)),
                               "ig.function": (h_ig, (x, a))}


def adam_step(jax, jnp):
    sys.path.insert(0, str(ROOT / "examples"))
    import mlp

    x, y, *params = mlp.example_inputs()
    text = ig.export(mlp.loss)
    train = ig.passes.differentiate(text, wrt=[2, 3, 4, 5], grad=False, train="adam", learning_rate=0.01)
    module = ig.compile(train).load()
    step = next(n for n in module if n.endswith("_train_step"))
    trainer = module.trainer(params, step)

    def loss(p, x, y):
        w1, b1, w2, b2 = p
        return jnp.mean(jnp.square(jnp.tanh(x @ w1 + b1) @ w2 + b2 - y))

    jax_call = _jax_adam(jax, jnp, loss, params, 0.01)
    return "Adam step, README MLP", {"jax.jit step": (jax_call, (x, y)), "Module.trainer.step": (trainer.step, (x, y))}


def _jax_adam(jax, jnp, loss, params, lr):
    """A ``jax.jit``-ed Adam step of ``loss(params, *data)`` (Keras 3's rule, as ``--train adam``),
    its state kept in Python as a trainer keeps it on the device; returns ``call(*data)``."""
    @jax.jit
    def jax_step(p, m, v, t, *data):
        value, g = jax.value_and_grad(loss)(p, *data)
        t = t + 1
        rate = lr * jnp.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
        m = [mi + (gi - mi) * 0.1 for mi, gi in zip(m, g)]
        v = [vi + (gi * gi - vi) * 0.001 for vi, gi in zip(v, g)]
        p = [pi - rate * mi / (jnp.sqrt(vi) + 1e-7) for pi, mi, vi in zip(p, m, v)]
        return value, p, m, v, t

    state = [list(params), [np.zeros_like(p) for p in params], [np.zeros_like(p) for p in params], jnp.float32(0)]

    def call(*data):
        value, *state[:] = jax_step(*state, *data)
        return jax.block_until_ready(value)

    return call


def cnn_adam_step(jax, jnp):
    """A small CNN's Adam step (``bench_train.py``'s: conv 3×3, 8 channels, relu, dense; batch
    32 of 28×28×1, softmax cross-entropy)."""
    import bench_train

    loss_ig, params, data = bench_train.models(np.random.default_rng(0))["cnn"]
    text = ig.function(loss_ig).lower(*params, *data).mlir
    train = ig.passes.differentiate(text, wrt=list(range(len(params))), grad=False, train="adam", learning_rate=0.01)
    module = ig.compile(train).load()
    trainer = module.trainer(params, next(n for n in module if n.endswith("_train_step")))

    def loss_jax(p, x, y):
        k, bk, w, b = p
        h = jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        logits = jax.nn.relu(h + bk).reshape(x.shape[0], -1) @ w + b
        return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(logits), axis=1))

    return "Adam step, small CNN", {"jax.jit step": (_jax_adam(jax, jnp, loss_jax, params, 0.01), tuple(data)),
                                    "Module.trainer.step": (trainer.step, tuple(data))}


def measure(programs: dict, rounds: int, calls: int) -> dict[str, float]:
    for fn, args in programs.values():  # warm up: compiles, first-call costs
        for _ in range(20):
            fn(*args)
    times: dict[str, list[float]] = {name: [] for name in programs}
    for _ in range(rounds):
        for name, (fn, args) in programs.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn(*args)
            times[name].append((time.perf_counter() - t0) / calls)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    import jax
    import jax.numpy as jnp

    print(f"per-call cost, irgrad against JAX {jax.__version__} (XLA CPU), one run")
    for case in (trivial, hessian, adam_step, cnn_adam_step):
        title, programs = case(jax, jnp)
        result = measure(programs, args.rounds, args.calls)
        peer = next(iter(result.values()))
        print(f"\n{title}")
        for name, seconds in result.items():
            print(f"  {name:28s} {seconds * 1e6:9.1f} µs  {seconds / peer:5.2f}×")


if __name__ == "__main__":
    main()
