"""The JAX side of ``bench_calls.py``: its ``jax.jit`` programs, and a worker that runs them in
another Python environment.

``bench_calls.py`` imports this module where JAX is installed beside irgrad. Where it is not,
``--jax-python PYTHON`` names an environment with JAX and numpy (irgrad is not needed there):
this file then runs under it as a worker that ``bench_calls.py`` drives over a pipe. The two
processes take turns, never running at once, so the rounds still interleave programs
(A B C A B C ...) and neither takes a core from the other. Only JAX and numpy are imported here.
"""
from __future__ import annotations

import os
import pickle
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def time_block(fn: Callable[..., Any], args: tuple, calls: int) -> float:
    """Seconds per call of ``calls`` calls of ``fn(*args)`` in a row."""
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - t0) / calls


def programs(case: str, arrays: list[np.ndarray]) -> dict[str, tuple[Callable[..., Any], tuple]]:
    """JAX's programs of a case of ``bench_calls.py``, built from the arrays it sends: name ->
    (a call that waits for its result, its arguments)."""
    import jax
    import jax.numpy as jnp

    if case == "trivial":
        x, a = arrays
        jitted = jax.jit(lambda x, a: x + 1.0)
        return {"jax.jit": (lambda x, a: jax.block_until_ready(jitted(x, a)), (x, a))}
    if case == "hessian":
        x, a = arrays

        def f(x, a):
            t = jnp.tanh(x)
            return jnp.sum(t * (a @ t))

        h = jax.jit(jax.hessian(f))
        return {"jax.jit(jax.hessian)": (lambda x, a: jax.block_until_ready(h(x, a)), (x, a))}
    if case == "mlp":
        *params, x, y = arrays

        def mlp_loss(p, x, y):
            w1, b1, w2, b2 = p
            return jnp.mean(jnp.square(jnp.tanh(x @ w1 + b1) @ w2 + b2 - y))

        return {"jax.jit step": (_adam(jax, jnp, mlp_loss, params, 0.01), (x, y))}
    if case == "cnn":
        *params, x, y = arrays

        def cnn_loss(p, x, y):
            k, bk, w, b = p
            h = jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
            logits = jax.nn.relu(h + bk).reshape(x.shape[0], -1) @ w + b
            return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(logits), axis=1))

        return {"jax.jit step": (_adam(jax, jnp, cnn_loss, params, 0.01), (x, y))}
    raise ValueError(f"no JAX programs for case {case!r}")


def _adam(jax, jnp, loss, params, lr):
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


class Peer:
    """JAX's programs in this process (``python=None``) or in a worker under ``python``:
    ``build(case, arrays)`` makes a case's programs and returns one call's result of each,
    ``block(case, name, calls)`` times a block of calls of one."""

    def __init__(self, python: str | None = None):
        self._programs: dict[tuple[str, str], tuple[Callable[..., Any], tuple]] = {}
        self._worker = None
        if python is not None:
            import subprocess

            self._worker = subprocess.Popen([python, os.path.abspath(__file__)], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE)
        self.version = self._ask(("version",))

    def _ask(self, message: tuple) -> Any:
        if self._worker is None:
            return _answer(self._programs, message)
        assert self._worker.stdin is not None and self._worker.stdout is not None
        pickle.dump(message, self._worker.stdin)
        self._worker.stdin.flush()
        status, value = pickle.load(self._worker.stdout)
        if status != "ok":
            raise RuntimeError(f"the JAX worker failed: {value}")
        return value

    def build(self, case: str, arrays: list[np.ndarray]) -> dict[str, Any]:
        return self._ask(("build", case, arrays))

    def block(self, case: str, name: str, calls: int) -> float:
        return self._ask(("block", case, name, calls))

    def close(self) -> None:
        if self._worker is not None:
            self._ask(("quit",))
            self._worker.wait(timeout=60)
            self._worker = None


def _answer(table: dict, message: tuple) -> Any:
    kind, *rest = message
    if kind == "version":
        import jax

        return jax.__version__
    if kind == "build":
        case, arrays = rest
        built = programs(case, arrays)
        table.update({(case, name): program for name, program in built.items()})
        return {name: np.asarray(fn(*args)) for name, (fn, args) in built.items()}
    if kind == "block":
        case, name, calls = rest
        fn, args = table[case, name]
        return time_block(fn, args, calls)
    if kind == "quit":
        return None
    raise ValueError(f"unknown request {kind!r}")


def _serve() -> None:
    """The worker: requests from stdin, answers to stdout (everything else printed goes to stderr)."""
    requests, answers = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    table: dict = {}
    while True:
        message = pickle.load(requests)
        try:
            answer = ("ok", _answer(table, message))
        except Exception as error:  # noqa: BLE001  (reported to the parent, which raises it)
            answer = ("error", f"{type(error).__name__}: {error}")
        pickle.dump(answer, answers)
        answers.flush()
        if message[0] == "quit":
            return


if __name__ == "__main__":
    _serve()
