"""The JAX side of ``bench_memory.py``, and the way both sides measure a call's peak memory.

Run by ``bench_memory.py`` under a Python with JAX and numpy (``--jax-python``; irgrad is not
needed there), one fresh process per figure:

    python bench_memory_jax.py export MODEL BATCH DIR          # DIR/forward.mlir, DIR/args.npz
    python bench_memory_jax.py measure MODEL BATCH fwd|grad CALLS [K|sqrt]   # XLA's figures, one JSON line

``K|sqrt`` (``bench_memory.py --loop-checkpoints``) checkpoints XLA's gradient of the models in
``CHECKPOINTED`` as irgrad's ``loop_checkpoints`` does: the scan split into segments of
``ceil(n / K)`` (``ceil(√n)``) steps, each under ``jax.checkpoint``, so only the carries between
segments are kept and each segment is recomputed in the backward pass.

Only JAX and numpy are imported here (and nothing of JAX by the measuring helpers, which
``bench_memory.py`` imports for irgrad's side), except by ``mobilenetv2``: it is
``bench_models.py``'s, whose import also loads irgrad's source tree and IREE's runtime (before
anything is measured, so in the RSS after loading).

Peak per call (NOTES.md): the growth of the process's high-water RSS during the call over the
RSS once everything is loaded and compiled and the arguments are in memory. Before each call
``echo 5 > /proc/self/clear_refs`` resets the high-water mark (VmHWM) to the current RSS, so
each call's figure is ``VmHWM after it - RSS after loading``: memory a call keeps (a heap that
is not returned) counts in the calls after it.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

MIB = 1 << 20


def _status(field: str) -> int:
    """A ``/proc/self/status`` size in bytes (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _leaves(result: Any) -> list[np.ndarray]:
    if isinstance(result, (tuple, list)):
        return [leaf for item in result for leaf in _leaves(item)]
    return [np.asarray(result, dtype=np.float64)]


def checksum(result: Any) -> list[float]:
    """A call's result in two numbers that both sides must agree on: the first result (the
    loss) and the 2-norm of all the others (the gradients; 0 for a forward)."""
    first, *rest = _leaves(result)
    return [float(first.reshape(-1)[0]), float(np.sqrt(sum(float(np.sum(np.square(g))) for g in rest)))]


def measure_calls(call: Callable[[], Any], calls: int) -> dict[str, Any]:
    """Peak growth (MiB, over the RSS now), seconds and page faults of each of ``calls`` calls,
    and the last call's ``checksum``. Each call's result is kept until the next call returns,
    as ``out = f(x)`` in a loop does. ``own_mib``: each call's peak over the RSS just before it
    (the result held included there), the growth of that call alone: what heap the call did
    not find free to reuse."""
    import resource

    base = _status("VmRSS")
    peaks, own, times, faults = [], [], [], []
    result = None
    for _ in range(calls):
        reset_peak()
        start = _status("VmRSS")
        minflt = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        result = call()  # as ``out = f(x)`` in a loop: the last result lives until the next one is made
        times.append(time.perf_counter() - t0)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - minflt)
        peak = _status("VmHWM")
        peaks.append((peak - base) / MIB)
        own.append((peak - start) / MIB)
    check = checksum(result)
    del result
    return {"base_mib": base / MIB, "peaks_mib": peaks, "own_mib": own, "times_s": times, "faults": faults,
            "checksum": check}


# ----- models (float32, a scalar loss of (params..., data...)) -------------------------------

def _models() -> dict[str, Callable[..., tuple[Callable, list[np.ndarray]]]]:
    import jax
    import jax.numpy as jnp
    from jax import lax

    def rng(seed: int) -> np.random.Generator:
        return np.random.default_rng(seed)

    def normal(r, *shape, scale: float = 1.0) -> np.ndarray:
        return (r.standard_normal(shape) * scale).astype(np.float32)

    def mlp(batch: int):
        """bench_models.py's MLP: 128-256-256-10, relu then tanh, softmax cross-entropy."""
        r = rng(1)

        def loss(w1, b1, w2, b2, w3, b3, x, y):
            h = jax.nn.relu(x @ w1 + b1)
            h = jnp.tanh(h @ w2 + b2)
            return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(h @ w3 + b3, axis=-1), axis=-1))

        y = np.eye(10, dtype=np.float32)[r.integers(0, 10, batch)]
        return loss, [normal(r, 128, 256, scale=128 ** -0.5), normal(r, 256, scale=0.1),
                      normal(r, 256, 256, scale=256 ** -0.5), normal(r, 256, scale=0.1),
                      normal(r, 256, 10, scale=256 ** -0.5), normal(r, 10, scale=0.1),
                      normal(r, batch, 128), y]

    def deep_mlp(batch: int):
        """16 dense 1024×1024 tanh layers, mean-squared error."""
        r = rng(2)

        def loss(*p):
            h = p[-2]
            for i in range(16):
                h = jnp.tanh(h @ p[2 * i] + p[2 * i + 1])
            return jnp.mean(jnp.square(h - p[-1]))

        params = []
        for _ in range(16):
            params += [normal(r, 1024, 1024, scale=1024 ** -0.5), normal(r, 1024, scale=0.1)]
        return loss, [*params, normal(r, batch, 1024), normal(r, batch, 1024)]

    def resnet(batch: int):
        """bench_models.py's ResNet basic block on batch×16×16×32: 3×3 convs, batch norm in
        train mode, relu, residual, mean-squared error."""
        r = rng(6)

        def conv(x, w):
            return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

        def batch_norm(h, gamma, beta, eps: float = 1e-5):
            mean = jnp.mean(h, axis=(0, 1, 2))
            var = jnp.mean(jnp.square(h - mean), axis=(0, 1, 2))
            return (h - mean) * lax.rsqrt(var + eps) * gamma + beta

        def loss(w1, g1, be1, w2, g2, be2, x, y):
            h = jax.nn.relu(batch_norm(conv(x, w1), g1, be1))
            h = batch_norm(conv(h, w2), g2, be2)
            return jnp.mean(jnp.square(jax.nn.relu(h + x) - y))

        w = 288 ** -0.5
        return loss, [normal(r, 3, 3, 32, 32, scale=w), 1 + normal(r, 32, scale=0.1), normal(r, 32, scale=0.1),
                      normal(r, 3, 3, 32, 32, scale=w), 1 + normal(r, 32, scale=0.1), normal(r, 32, scale=0.1),
                      normal(r, batch, 16, 16, 32), normal(r, batch, 16, 16, 32)]

    def checkpointed_scan(step, carry, xs, checkpoints: int | str):
        """``lax.scan(step, carry, xs)`` in segments of ``ceil(n / K)`` steps (``ceil(√n)`` for
        ``"sqrt"``, as irgrad's ``loop_checkpoints``), each segment under ``jax.checkpoint``."""
        n = xs.shape[0]
        length = max(1, math.isqrt(n - 1) + 1 if checkpoints == "sqrt" else -(-n // int(checkpoints)))

        @jax.checkpoint
        def segment(c, seg):
            return lax.scan(step, c, seg)

        whole = n // length * length
        carry, ys = lax.scan(segment, carry, xs[:whole].reshape(n // length, length, *xs.shape[1:]))
        ys = ys.reshape(whole, *ys.shape[2:])
        if whole < n:
            carry, tail = segment(carry, xs[whole:])
            ys = jnp.concatenate([ys, tail])
        return carry, ys

    def scan_mlp(batch: int, checkpoints: int | str | None = None):
        """``lax.scan`` over 256 steps of h = tanh(h·W + x_t), width 128, mean-squared error of
        every step's h (a ``stablehlo.while`` too long to unroll)."""
        r = rng(3)

        def loss(w, b, h0, xs, ys):
            def step(h, x):
                h = jnp.tanh(h @ w + b + x)
                return h, h

            if checkpoints is None:
                _, hs = lax.scan(step, h0, xs)
            else:
                _, hs = checkpointed_scan(step, h0, xs, checkpoints)
            return jnp.mean(jnp.square(hs - ys))

        return loss, [normal(r, 128, 128, scale=128 ** -0.5), normal(r, 128, scale=0.1), normal(r, batch, 128),
                      normal(r, 256, batch, 128), normal(r, 256, batch, 128)]

    def mobilenetv2(batch: int):
        """bench_models.py's MobileNetV2 (keras.applications' architecture, alpha 0.35,
        32×32×3, batch norm in train mode, softmax cross-entropy) at ``batch``."""
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import bench_models

        m = bench_models.mobilenetv2(batch)
        return m.loss, m.args

    return {"mlp": mlp, "deep_mlp": deep_mlp, "resnet": resnet, "scan_mlp": scan_mlp, "mobilenetv2": mobilenetv2}


MODELS = ("mlp", "deep_mlp", "resnet", "scan_mlp", "mobilenetv2")
CHECKPOINTED = ("scan_mlp",)  # the models whose XLA gradient ``K|sqrt`` checkpoints


def model(name: str, batch: int, checkpoints: int | str | None = None) -> tuple[Callable, list[np.ndarray]]:
    """``name``'s loss and arguments at ``batch``; ``checkpoints`` (``CHECKPOINTED`` models
    only) scans in checkpointed segments."""
    if checkpoints is not None and name in CHECKPOINTED:
        return _models()[name](batch, checkpoints)
    return _models()[name](batch)


def main(argv: list[str]) -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    command, name, batch = argv[0], argv[1], int(argv[2])
    loss, args = model(name, batch)
    if command == "export":
        out = argv[3]
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "forward.mlir"), "w") as f:
            f.write(jax.jit(loss).lower(*args).as_text())
        np.savez(os.path.join(out, "args.npz"), *args)
        return
    kind, calls = argv[3], int(argv[4])
    if kind == "grad" and len(argv) > 5 and name in CHECKPOINTED:
        loss, _ = model(name, batch, argv[5] if argv[5] == "sqrt" else int(argv[5]))
    fn = jax.jit(loss if kind == "fwd" else jax.value_and_grad(loss, argnums=tuple(range(len(args)))))
    compiled = fn.lower(*args).compile()
    device_args = [jax.device_put(a) for a in args]
    jax.block_until_ready(device_args)
    result = measure_calls(lambda: jax.block_until_ready(compiled(*device_args)), calls)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
