"""Per-call cost from C (irgrad's C library, c/) against ``ig.load`` and ``jax.jit`` from Python.

    python benchmarks/bench_c.py                     # builds c/ first (c/build.sh, reused)
    python benchmarks/bench_c.py --jax-python /path/to/python-with-jax

* ``x + 1.0`` on a 200-vector: the C library's ``irgrad_call`` (arguments checked, uploaded,
  the result copied back, every call) against ``ig.load(...)[f](x)`` on the same driver, and
  ``jax.jit`` (``block_until_ready``) from Python;
* one Adam step of ``examples/mlp.py``'s loss (batch 8, 4-16-1, ``--train adam``, learning rate
  0.01): ``irgrad_trainer_step`` (parameters and state on the device) against
  ``Module.trainer(...).step`` and a ``jax.jit``-ed ``value_and_grad`` with Keras's Adam rule
  (``bench_calls.py``'s).

Each program runs ``--rounds`` blocks of ``--calls`` calls after a warm-up block; the median
time per call is printed, with its ratio to ``ig.load``'s. The C side runs in its own process
(``benchmarks/c/bench.c``); the three alternate, ``--repeats`` times, and the medians of those are
printed. JAX runs in a separate interpreter (``--jax-python``, default this one or
``$IRGRAD_JAX_PYTHON``) so that irgrad's environment needs no JAX. Nothing asserts a time.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_adjoint  # noqa: E402, F401  (puts the source tree first on sys.path)

import irgrad as ig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_DTYPES = ["invalid", "float16", "bfloat16", "float32", "float64", "bool", "int8", "int16", "int32", "int64", "uint8",
           "uint16", "uint32", "uint64", "complex64", "complex128"]

_JAX = r"""
import json, statistics, sys, time
import numpy as np, jax, jax.numpy as jnp
rounds, calls, inputs = int(sys.argv[1]), int(sys.argv[2]), np.load(sys.argv[3])
x200 = inputs["x200"]
add = jax.jit(lambda x: x + 1.0)
x, y = inputs["x"], inputs["y"]
params = [inputs[k] for k in ("w1", "b1", "w2", "b2")]

def loss(p, x, y):
    w1, b1, w2, b2 = p
    return jnp.mean(jnp.square(jnp.tanh(x @ w1 + b1) @ w2 + b2 - y))

@jax.jit
def step(p, m, v, t, x, y):
    value, g = jax.value_and_grad(loss)(p, x, y)
    t = t + 1
    rate = 0.01 * jnp.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
    m = [mi + (gi - mi) * 0.1 for mi, gi in zip(m, g)]
    v = [vi + (gi * gi - vi) * 0.001 for vi, gi in zip(v, g)]
    p = [pi - rate * mi / (jnp.sqrt(vi) + 1e-7) for pi, mi, vi in zip(p, m, v)]
    return value, p, m, v, t

state = [list(params), [np.zeros_like(p) for p in params], [np.zeros_like(p) for p in params], jnp.float32(0)]

def adam():
    value, *state[:] = step(*state, x, y)
    return jax.block_until_ready(value)

def measure(fn):
    times = []
    for r in range(-1, rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if r >= 0:
            times.append((time.perf_counter() - t0) / calls)
    return 1e6 * statistics.median(times)

print(json.dumps({"trivial": measure(lambda: jax.block_until_ready(add(x200))), "adam": measure(adam),
                  "version": jax.__version__}))
"""


def write_arrays(path: Path, arrays: list[np.ndarray]) -> None:
    """tests/c/arrays.h's file: a count, then per array dtype, rank, dims, bytes, data."""
    parts = [np.uint32(len(arrays)).tobytes()]
    for a in arrays:
        a = np.asarray(a, order="C")
        parts += [np.uint32(_DTYPES.index(a.dtype.name)).tobytes(), np.uint32(a.ndim).tobytes(),
                  np.array(a.shape, np.int64).tobytes(), np.uint64(a.nbytes).tobytes(), a.tobytes()]
    path.write_bytes(b"".join(parts))


def build_bench(work: Path) -> Path:
    """c/build.sh, then benchmarks/c/bench.c against it (-O2)."""
    cmake_dir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=f"{cmake_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["bash", str(ROOT / "c" / "build.sh")], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"c/build.sh failed:\n{done.stderr[-3000:]}")
    build = Path(done.stdout.strip().splitlines()[-1])
    flags = (build / "irgrad.flags").read_text().split()
    bench = work / "bench"
    subprocess.run(["cc", "-O2", f"-I{ROOT / 'tests' / 'c'}", str(ROOT / "benchmarks" / "c" / "bench.c"), *flags, "-o",
                    str(bench)], check=True)
    return bench


def python_time(fn, args, rounds: int, calls: int) -> float:
    times = []
    for r in range(-1, rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        if r >= 0:
            times.append((time.perf_counter() - t0) / calls)
    return 1e6 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--driver", default="local-sync")
    parser.add_argument("--jax-python", default=os.environ.get("IRGRAD_JAX_PYTHON", sys.executable))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="irgrad-bench-c-"))
    bench = build_bench(work)

    x200 = np.ones(200, np.float32)
    trivial = ig.compile(ig.function(lambda x: x + 1.0).lower(x200)).save(work / "trivial.vmfb")
    sys.path.insert(0, str(ROOT / "examples"))
    import mlp

    x, y, *params = mlp.example_inputs()
    text = ig.export(mlp.loss)
    adam = ig.compile(ig.passes.differentiate(text, wrt=[2, 3, 4, 5], grad=False, train="adam",
                                              learning_rate=0.01)).save(work / "adam.vmfb")
    write_arrays(work / "trivial.bin", [x200])
    write_arrays(work / "adam.bin", [x, y, *params])
    np.savez(work / "inputs.npz", x200=x200, x=x, y=y, w1=params[0], b1=params[1], w2=params[2], b2=params[3])
    trivial_fn = ig.load(trivial, device=args.driver)
    trivial_fn = trivial_fn[next(iter(trivial_fn))]
    trainer = ig.load(adam, device=args.driver).trainer(params)
    step = next(n for n in ig.load(adam).functions if n.endswith("_train_step"))

    rows: dict[str, dict[str, list[float]]] = {"trivial": {}, "adam": {}}
    jax_version = None
    for _ in range(args.repeats):
        for case, mode, vmfb, function, data in (("trivial", "call", trivial, trivial_fn.name, "trivial.bin"),
                                                 ("adam", "train", adam, step, "adam.bin")):
            out = subprocess.run([str(bench), mode, str(vmfb), function, args.driver, str(work / data),
                                  str(args.rounds), str(args.calls)], capture_output=True, text=True, check=True)
            rows[case].setdefault(f"C irgrad_{'call' if mode == 'call' else 'trainer_step'}", []).append(
                float(out.stdout))
        rows["trivial"].setdefault("ig.load", []).append(python_time(trivial_fn, (x200,), args.rounds, args.calls))
        rows["adam"].setdefault("ig.load trainer.step", []).append(
            python_time(trainer.step, (x, y), args.rounds, args.calls))
        done = subprocess.run([args.jax_python, "-c", _JAX, str(args.rounds), str(args.calls),
                               str(work / "inputs.npz")], capture_output=True, text=True)
        if done.returncode == 0:
            measured = json.loads(done.stdout.strip().splitlines()[-1])
            jax_version = measured["version"]
            rows["trivial"].setdefault("jax.jit", []).append(measured["trivial"])
            rows["adam"].setdefault("jax.jit step", []).append(measured["adam"])
    print(f"per-call cost from C against Python (IREE driver {args.driver}; JAX "
          f"{jax_version or 'not found: --jax-python'}); median of {args.repeats} runs of {args.rounds}x{args.calls}")
    titles = {"trivial": "x + 1.0, 200-vector", "adam": "Adam step, README MLP (batch 8, 4-16-1)"}
    for case, programs in rows.items():
        medians = {name: statistics.median(ts) for name, ts in programs.items()}
        base = next(v for k, v in medians.items() if k.startswith("ig.load"))
        print(f"\n{titles[case]}")
        for name, us in medians.items():
            print(f"  {name:28s} {us:9.2f} µs  {us / base:5.2f}× ig.load")


if __name__ == "__main__":
    main()
