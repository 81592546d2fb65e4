"""Large float32 sums: blocked (``passes/lowering/summation.py``) against IREE's sequential sums.

    .venv/bin/python benchmarks/bench_sums.py            # about a minute, 1.5 GB of memory
    .venv/bin/python benchmarks/bench_sums.py --rounds 9

Each case is compiled twice from the same StableHLO: as irgrad compiles it (blocked sums) and
with the rewrite off (``summation.BLOCK`` set past the sum's length: the sequential sum IREE
3.13 emits). Per case it prints both relative errors against float64 (numpy on the float32
inputs converted to float64) and the call times, interleaved A B A B (best of 3 calls per
round, median of the rounds; each call uploads its input, as a user's call does), and their
ratio. Nothing asserts
a time.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import irgrad as ig
from irgrad.passes.lowering import summation
from irgrad.runtime import compiler

F32 = np.float32


def _reduce(shape, dims, square=False):
    s = "x".join(map(str, shape)) + "x"
    out = "".join(f"{n}x" for i, n in enumerate(shape) if i not in dims)
    operand = "%sq" if square else "%x"
    sq = f"%sq = stablehlo.multiply %x, %x : tensor<{s}f32>" if square else ""
    return f"""
func.func @main(%x: tensor<{s}f32>) -> tensor<{out}f32> {{
  {sq}
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce({operand} init: %zero) applies stablehlo.add across dimensions = {list(dims)}
       : (tensor<{s}f32>, tensor<f32>) -> tensor<{out}f32>
  return %r : tensor<{out}f32>
}}"""


def _vecmat(n, d):
    return f"""
func.func @main(%x: tensor<{n}x{d}xf32>) -> tensor<{d}xf32> {{
  %ones = stablehlo.constant dense<1.0> : tensor<{n}xf32>
  %r = stablehlo.dot_general %ones, %x, contracting_dims = [0] x [0]
       : (tensor<{n}xf32>, tensor<{n}x{d}xf32>) -> tensor<{d}xf32>
  return %r : tensor<{d}xf32>
}}"""


def cases(rng):
    yield "sum of 4M uniform", _reduce((4 << 20,), [0]), rng.random(4 << 20, dtype=F32), lambda x: x.sum()
    yield "sum of 64M uniform", _reduce((64 << 20,), [0]), rng.random(64 << 20, dtype=F32), lambda x: x.sum()
    yield ("sum of squares 2048x2048 normal", _reduce((2048, 2048), [0, 1], square=True),
           rng.standard_normal((2048, 2048), dtype=F32), lambda x: (x * x).sum())
    yield ("bias grad: sum over 1M rows of 1Mx16", _reduce((1 << 20, 16), [0]),
           rng.random((1 << 20, 16), dtype=F32), lambda x: x.sum(0))
    yield ("bias grad as ones . x, 1Mx16", _vecmat(1 << 20, 16),
           rng.random((1 << 20, 16), dtype=F32), lambda x: x.sum(0))
    yield ("row sums 4096x256 (256 terms: unchanged)", _reduce((4096, 256), [1]),
           rng.random((4096, 256), dtype=F32), lambda x: x.sum(1))


def _compiled(text, block):
    saved, summation.BLOCK = summation.BLOCK, block
    try:
        return ig.load(compiler.compile(text, cache=False).vmfb)["main"]
    finally:
        summation.BLOCK = saved


def _best_of(f, x, calls=3):
    best = float("inf")
    for _ in range(calls):
        t0 = time.perf_counter()
        f(x)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("large float32 sums: blocked (irgrad) vs sequential (IREE 3.13), one run")
    print(f"{'case':40s} {'err seq':>9s} {'err blocked':>11s} {'seq ms':>8s} {'blocked ms':>10s} {'ratio':>6s}")
    for name, text, x, reference in cases(rng):
        want = np.asarray(reference(x.astype(np.float64)))
        sequential, blocked = _compiled(text, 1 << 62), _compiled(text, summation.BLOCK)
        errors = []
        for f in (sequential, blocked):
            got = np.asarray(f(x), np.float64)
            errors.append(float(np.max(np.abs(got - want) / np.abs(want))))
        times = {0: [], 1: []}
        for _ in range(args.rounds):
            for i, f in enumerate((sequential, blocked)):
                times[i].append(_best_of(f, x))
        seq, blk = (statistics.median(times[i]) * 1e3 for i in (0, 1))
        print(f"{name:40s} {errors[0]:9.1e} {errors[1]:11.1e} {seq:8.2f} {blk:10.2f} {blk / seq:6.2f}", flush=True)


if __name__ == "__main__":
    main()
