"""How fast irgrad builds adjoints, how fast IREE compiles them, how fast they run.

    python benchmarks/bench_adjoint.py            # full run (1–2 minutes on 2 cores)
    python benchmarks/bench_adjoint.py --quick    # smoke run (about 10 s)

Everything is measured side by side in this one run and printed as ratios;
nothing here asserts a time (the smoke test only checks that it runs).

1. MLP: a 4-layer tanh MLP with a mean-squared-error loss (batch 64, width
   256, float32) written with ``ig.function``. Times: tracing to StableHLO,
   ``irgrad.passes.differentiate(text, with_value=True)`` (adds
   ``@loss_grad`` = value and gradient), ``ig.gradients`` inside a traced
   function, the IREE compile (llvm-cpu, ``cpu=host``), and the compiled
   value-and-grad against the compiled forward. Target: value_and_grad ≤ 3.5×
   forward. Run on local-task (irgrad's default llvm-cpu device, a worker
   per core) and on local-sync (one thread): on a shared 2-core machine the
   one-thread times are far steadier, and they are the compute ratio without
   the thread pool's per-dispatch overhead, which weighs more on the short
   forward. ``--iree-flag`` A/B-tests compiler flags on every program.
2. Peer: the same MLP's ``jax.value_and_grad``, exported once by
   ``benchmarks/make_peer_modules.py`` into ``benchmarks/peer/*.mlir`` (JAX is
   not needed here), compiled by the same IREE with the same flags and timed
   interleaved with irgrad's ``@loss_grad``.
3. Chain: N elementwise ops (sin, tanh, ×c, +c, repeated) on a 1024-vector
   for N = 1k, 4k, 16k. Adjoint build time and build time per forward op
   (linear when the per-op time at the largest N stays within 2× of the
   smallest), the IREE compile time and value_and_grad / forward.

   Chain notes (IREE 3.13, llvm-cpu, checked with iree-benchmark-module):
   the compiled value_and_grad runs *faster* than the forward. IREE fuses the
   whole forward chain into its final reduction: one dispatch, one workgroup,
   whose loop body is the entire chain on one 16-lane vector (3,600
   instructions for N=250), so it is latency-bound. The adjoint needs the
   intermediates, so IREE splits the chain into short elementwise dispatches
   whose loop iterations overlap in the out-of-order window. Both drivers are
   shown: local-task (a worker per core) and local-sync (one thread). IREE's
   compile time of such a chain grows faster than N (forward: 2.5 s at 1k,
   6.8 s at 2k, 40 s at 4k), hence ``--compile-max``.

How the timings are taken (see "Benchmarking IREE CPU code here" in the
project notes): every compiled program is built ``--builds`` times with a
module name of a different length, which moves the machine code by 16-byte
steps (the notes saw one program run at 6.9 or 9.9 ms depending on such a
shift alone); every program is warmed up; then in each round every program of every
build runs one block of ``--calls`` calls, the programs in a rotating order
(A B C D, B C D A, ...), so that the programs compared see the same machine
load. A ratio is taken between blocks of the same round and build, and the
median over rounds and builds is printed, with the spread of the per-build
medians. Host build times (tracing, adjoint) are medians of ``--rounds``
repetitions (4× as many for the MLP's millisecond builds), the chain sizes
interleaved; "ig.gradients ... extra" is the median of per-round differences
between tracing with and without the gradients.
"""
from __future__ import annotations

import argparse
import gc
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable, Sequence

import numpy as np

# Benchmark the source tree this script lives in, not some installed copy.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import iree.runtime as rt  # noqa: E402

import irgrad as ig  # noqa: E402
from irgrad import runtime as igrt  # noqa: E402
from irgrad.runtime.compiler import compile_flags, compile_vmfb  # noqa: E402

PEER_DIR = ROOT / "benchmarks" / "peer"
MLP_BATCH, MLP_WIDTH, MLP_LAYERS = 64, 256, 4
CHAIN_WIDTH = 1024
TARGET_VAG_OVER_FORWARD = 3.5
LINEARITY_LIMIT = 2.0
TF_GRADIENTS_PER_OP = 580e-6  # tf.gradients on a 21k-op chain (project notes), for scale
DRIVERS = ("local-task", "local-sync")
SYNC = "@local-sync"  # label suffix of the MLP programs also run on one thread
SYNC_LABELS = ("irgrad_fwd", "irgrad_vag", "jax_fwd", "jax_vag", "irgrad_vag_params", "jax_vag_params")
HEADER = "irgrad adjoint benchmark"

# ----- small timing helpers -------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """Seconds one call of ``fn`` takes (after a garbage collection), and its result."""
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def ms(seconds: float) -> str:
    if seconds < 0.01:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e3:,.1f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs"


def spread(values: Sequence[float]) -> str:
    """The range of per-build ratios, or nothing for a single build."""
    return f"builds [{min(values):.2f}–{max(values):.2f}]" if len(values) > 1 else ""


def note(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def rotate(items: list, k: int) -> list:
    k %= max(1, len(items))
    return items[k:] + items[:k]


# ----- compiled programs ---------------------------------------------------------------------

_CONFIGS: dict[str, rt.Config] = {}


def device_config(driver: str) -> rt.Config:
    """One device per driver for every program: ``local-task`` (irgrad's default for
    llvm-cpu, a worker per core) or ``local-sync`` (one thread, the caller's)."""
    if driver not in _CONFIGS:
        _CONFIGS[driver] = rt.Config(driver)
    return _CONFIGS[driver]


def with_module_name(text: str, name: str) -> str:
    """``text`` with its (first) module named ``@name``: a different build of the same program."""
    named, n = re.subn(r"^module(?: @[\w$.-]+)?", f"module @{name}", text, count=1, flags=re.M)
    if n != 1:
        raise ValueError("no module op at the start of a line")
    return named


def build_name(base: str, build: int) -> str:
    # Each build's name is 16 characters longer: IREE keeps the name in the
    # executable's read-only data in front of .text, so the code moves by 16 bytes.
    return base + "_" * (16 * build)


def compile_timed(text: str, flags: Sequence[str] = (), peer: bool = False) -> tuple[float, bytes]:
    """IREE compile (llvm-cpu, cpu=host, irgrad's flags plus ``flags``), no cache: (seconds, vmfb).
    irgrad's modules take irgrad's compile path (``igrt.compile``: the IREE workarounds and the
    forward-convolution rewrite first); a ``peer``'s module is compiled as its framework wrote it."""
    options = igrt.CompileOptions(target="llvm-cpu", cpu="host", extra_flags=tuple(flags))
    if peer:
        return timed(lambda: compile_vmfb(text, text, options, compile_flags(text, options)))
    seconds, artifact = timed(lambda: igrt.compile(text, options, cache=False, producer="bench_adjoint"))
    return seconds, artifact.vmfb


@dataclass
class Program:
    """One public function of one compiled build, with its arguments already on the device."""

    label: str
    build: int
    function: object
    args: list

    @classmethod
    def load(cls, label: str, build: int, vmfb: bytes, function: str, inputs: Sequence[np.ndarray],
             driver: str = "local-task") -> Program:
        config = device_config(driver)
        context = rt.SystemContext(config=config)
        module = rt.VmModule.copy_buffer(context.instance, vmfb)
        context.add_vm_module(module)
        args = [rt.asdevicearray(config.device, a) for a in inputs]
        return cls(label, build, context.modules[module.name][function], args)

    def __call__(self):
        return self.function(*self.args)

    def results(self) -> list[np.ndarray]:
        out = self()
        out = out if isinstance(out, (list, tuple)) else [out]
        return [np.asarray(r.to_host()) for r in out]


@dataclass
class Timings:
    """Seconds per call of each program label, per (round, build) block."""

    blocks: dict[tuple[int, int], dict[str, float]] = field(default_factory=dict)

    def per_call(self, label: str) -> float:
        return median([b[label] for b in self.blocks.values() if label in b])

    def noise(self, label: str) -> float:
        """Half the p10–p90 range of the block times, relative to their median."""
        times = sorted(b[label] for b in self.blocks.values() if label in b)
        if len(times) < 2:
            return float("nan")
        p10, p90 = np.percentile(times, [10, 90])
        return (p90 - p10) / 2 / median(times)

    def ratio(self, num: str, den: str) -> tuple[float, list[float]]:
        """Median of num/den over blocks, and the median ratio of each build."""
        by_build: dict[int, list[float]] = {}
        all_ratios = []
        for (_, build), block in self.blocks.items():
            if num in block and den in block:
                r = block[num] / block[den]
                all_ratios.append(r)
                by_build.setdefault(build, []).append(r)
        return median(all_ratios), [median(v) for v in by_build.values()]


def run_interleaved(programs: list[Program], rounds: int, calls: int, warmup: int = 3) -> Timings:
    """Warm every program up, then time blocks of ``calls`` calls in a rotating order."""
    for p in programs:
        for _ in range(warmup):
            p()
    timings = Timings()
    builds = sorted({p.build for p in programs})
    for r in range(rounds):
        for b in rotate(builds, r):
            group = rotate([p for p in programs if p.build == b], r)
            block = timings.blocks.setdefault((r, b), {})
            for p in group:
                start = time.perf_counter()
                for _ in range(calls):
                    p()
                block[p.label] = (time.perf_counter() - start) / calls
    return timings


# ----- the MLP -------------------------------------------------------------------------------


def mlp_signature() -> list[ig.TensorSpec]:
    specs = [ig.TensorSpec([MLP_BATCH, MLP_WIDTH], ig.float32, name="x"),
             ig.TensorSpec([MLP_BATCH, MLP_WIDTH], ig.float32, name="y")]
    for i in range(MLP_LAYERS):
        specs.append(ig.TensorSpec([MLP_WIDTH, MLP_WIDTH], ig.float32, name=f"w{i}"))
        specs.append(ig.TensorSpec([MLP_WIDTH], ig.float32, name=f"b{i}"))
    return specs


def mlp_body(x, y, *params):
    h = x
    for i in range(MLP_LAYERS):
        h = ig.tanh(h @ params[2 * i] + params[2 * i + 1])
    return ig.reduce_mean(ig.square(h - y))


def mlp_loss() -> ig.Function:
    """A fresh ``ig.function`` (its trace cache empty)."""
    def loss(x, y, *params):
        return mlp_body(x, y, *params)
    return ig.function(loss, input_signature=mlp_signature())


def mlp_loss_and_gradients() -> ig.Function:
    """The loss and ``ig.gradients`` of it with respect to every argument, in one trace."""
    def loss_and_grads(x, y, *params):
        value = mlp_body(x, y, *params)
        return (value, *ig.gradients(value, [x, y, *params]))
    return ig.function(loss_and_grads, input_signature=mlp_signature())


def mlp_inputs(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((MLP_BATCH, MLP_WIDTH)).astype(np.float32)
    y = np.tanh(rng.standard_normal((MLP_BATCH, MLP_WIDTH))).astype(np.float32)
    args = [x, y]
    for _ in range(MLP_LAYERS):
        args.append((rng.standard_normal((MLP_WIDTH, MLP_WIDTH)) / np.sqrt(MLP_WIDTH)).astype(np.float32))
        args.append((rng.standard_normal(MLP_WIDTH) * 0.1).astype(np.float32))
    return args


def read_peer(name: str) -> str:
    path = PEER_DIR / f"{name}.mlir"
    text = path.read_text()
    shapes = re.search(r"func\.func public @main\(([^)]*)\)", text)
    want = [f"tensor<{'x'.join(map(str, s.shape))}xf32>" for s in mlp_signature()]
    got = re.findall(r"tensor<[^>]*>", shapes.group(1)) if shapes else []
    if got != want:
        raise SystemExit(f"{path} does not match this benchmark's MLP signature ({got} != {want}); "
                         "regenerate it with benchmarks/make_peer_modules.py")
    return text


def max_relative_error(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    worst = 0.0
    for u, v in zip(a, b):
        scale = max(float(np.max(np.abs(v))), 1e-30)
        worst = max(worst, float(np.max(np.abs(u - v))) / scale)
    return worst


def bench_mlp(args: argparse.Namespace, table: list[tuple[str, str, str]]) -> dict[str, float]:
    """Build, compile and time the MLP and its peers; append rows to ``table``."""
    n_params = 2 * MLP_LAYERS
    params_only = list(range(2, 2 + n_params))

    # Host-side build times: fresh functions each round so nothing is cached.
    # They take milliseconds, so take more rounds than for the chain.
    trace_s, grad_trace_s, adjoint_s, adjoint_params_s = [], [], [], []
    forward_text = module_text = params_text = grads_text = ""
    for _ in range(4 * args.rounds):
        seconds, lowered = timed(lambda: mlp_loss().lower())
        trace_s.append(seconds)
        forward_text = lowered.mlir
        seconds, module_text = timed(lambda text=forward_text: ig.passes.differentiate(text, "loss", with_value=True))
        adjoint_s.append(seconds)
        seconds, params_text = timed(lambda text=forward_text: ig.passes.differentiate(
            text, "loss", wrt=params_only, with_value=True))
        adjoint_params_s.append(seconds)
        seconds, lowered = timed(lambda: mlp_loss_and_gradients().lower())
        grad_trace_s.append(seconds)
        grads_text = lowered.mlir
    n_ops = forward_text.count(" = stablehlo.")
    table.append(("MLP trace → StableHLO (forward)", ms(median(trace_s)), f"{n_ops} ops"))
    table.append(("MLP adjoint build: differentiate(with_value)", ms(median(adjoint_s)),
                  f"{us(median(adjoint_s) / n_ops)}/op, wrt all 10 args"))
    table.append(("MLP adjoint build, wrt the 8 params", ms(median(adjoint_params_s)), ""))
    extra = median([g - t for g, t in zip(grad_trace_s, trace_s)])  # paired: same round
    table.append(("MLP trace with ig.gradients (loss + grads)", ms(median(grad_trace_s)),
                  f"gradients add {ms(extra)} (median of per-round differences)"))

    sources = {"irgrad": module_text, "jax_fwd": read_peer("jax_mlp_forward"),
               "jax_vag": read_peer("jax_mlp_value_and_grad")}
    if not args.quick:
        sources["irgrad_params"] = params_text
        sources["irgrad_gradients"] = grads_text
        sources["jax_vag_params"] = read_peer("jax_mlp_value_and_grad_params")
    # program label -> (key of its source in `sources`, function name)
    functions = {
        "irgrad_fwd": ("irgrad", "loss"), "irgrad_vag": ("irgrad", "loss_grad"),
        "jax_fwd": ("jax_fwd", "main"), "jax_vag": ("jax_vag", "main"),
        "irgrad_vag_params": ("irgrad_params", "loss_grad"),
        "irgrad_gradients": ("irgrad_gradients", "loss_and_grads"),
        "jax_vag_params": ("jax_vag_params", "main"),
    }
    inputs = mlp_inputs()
    compile_s: dict[str, list[float]] = {k: [] for k in sources}
    programs: list[Program] = []
    for build in range(args.builds):
        vmfbs = {}
        for key in rotate(list(sources), build):
            named = with_module_name(sources[key], build_name(f"mlp_{key}", build))
            seconds, vmfbs[key] = compile_timed(named, args.iree_flag, peer=key.startswith("jax"))
            compile_s[key].append(seconds)
        for label, (key, function) in functions.items():
            if key in vmfbs:
                programs.append(Program.load(label, build, vmfbs[key], function, inputs))
            if key in vmfbs and label in SYNC_LABELS:  # one thread: no worker-pool scheduling noise
                programs.append(Program.load(label + SYNC, build, vmfbs[key], function, inputs, "local-sync"))

    # The same numbers from irgrad and from JAX (build 0).
    first = {p.label: p for p in programs if p.build == 0}
    irgrad_out, jax_out = first["irgrad_vag"].results(), first["jax_vag"].results()
    error = max_relative_error(irgrad_out, jax_out)
    if "irgrad_gradients" in first:
        error = max(error, max_relative_error(first["irgrad_gradients"].results(), jax_out))

    table.append(("IREE compile: irgrad forward + value_and_grad module", ms(median(compile_s["irgrad"])),
                  "@loss and @loss_grad"))
    table.append(("IREE compile: JAX forward module", ms(median(compile_s["jax_fwd"])), ""))
    table.append(("IREE compile: JAX value_and_grad module", ms(median(compile_s["jax_vag"])), ""))

    timings = run_interleaved(programs, args.mlp_rounds, args.mlp_calls)
    for label in [*functions, *(label + SYNC for label in SYNC_LABELS)]:
        if any(p.label == label for p in programs):
            table.append((f"MLP run {label}", ms(timings.per_call(label)),
                          f"per call; blocks vary ±{100 * timings.noise(label):.0f} % (p10–p90)"))

    ratios = {}

    def ratio_row(name: str, num: str, den: str, comment: str = "") -> None:
        if not any(p.label == num for p in programs):
            return
        value, per_build = timings.ratio(num, den)
        ratios[name] = value
        table.append((name, f"{value:.2f}×", note(spread(per_build), comment)))

    ratio_row("MLP irgrad value_and_grad / irgrad forward", "irgrad_vag", "irgrad_fwd",
              f"target ≤ {TARGET_VAG_OVER_FORWARD}")
    ratio_row("MLP JAX value_and_grad / JAX forward", "jax_vag", "jax_fwd")
    ratio_row("MLP irgrad value_and_grad / JAX value_and_grad", "irgrad_vag", "jax_vag", "peer, same IREE")
    ratio_row("MLP irgrad forward / JAX forward", "irgrad_fwd", "jax_fwd")
    ratio_row("MLP irgrad vag (params) / irgrad forward", "irgrad_vag_params", "irgrad_fwd")
    ratio_row("MLP irgrad vag (params) / JAX vag (params)", "irgrad_vag_params", "jax_vag_params")
    ratio_row("MLP ig.gradients program / irgrad forward", "irgrad_gradients", "irgrad_fwd")
    ratio_row("MLP irgrad value_and_grad / irgrad forward, local-sync", "irgrad_vag" + SYNC,
              "irgrad_fwd" + SYNC, "one thread")
    ratio_row("MLP JAX value_and_grad / JAX forward, local-sync", "jax_vag" + SYNC, "jax_fwd" + SYNC,
              "one thread")
    ratio_row("MLP irgrad value_and_grad / JAX value_and_grad, local-sync", "irgrad_vag" + SYNC,
              "jax_vag" + SYNC, "one thread")
    ratio_row("MLP irgrad vag (params) / irgrad forward, local-sync", "irgrad_vag_params" + SYNC,
              "irgrad_fwd" + SYNC, "one thread")
    ratio_row("MLP irgrad vag (params) / JAX vag (params), local-sync", "irgrad_vag_params" + SYNC,
              "jax_vag_params" + SYNC, "one thread")
    table.append(("MLP max relative difference irgrad vs JAX", f"{error:.1e}", "value and all gradients"))
    ratios["mlp_error"] = error
    return ratios


# ----- the elementwise chain --------------------------------------------------------------------


def chain_body(x, n: int):
    """``reduce_sum`` of n elementwise ops applied in turn: sin, tanh, ×0.5, +0.5, ..."""
    c = ig.constant(0.5, ig.float32)
    for i in range(n):
        k = i % 4
        if k == 0:
            x = ig.sin(x)
        elif k == 1:
            x = ig.tanh(x)
        elif k == 2:
            x = x * c
        else:
            x = x + c
    return ig.reduce_sum(x)


def chain_function(n: int) -> ig.Function:
    """A fresh ``ig.function`` of the chain (its trace cache empty)."""
    def chain(x):
        return chain_body(x, n)
    return ig.function(chain, input_signature=[ig.TensorSpec([CHAIN_WIDTH], ig.float32, name="x")])


def chain_with_gradients(n: int) -> ig.Function:
    """The chain and ``ig.gradients`` of it, in one trace."""
    def chain_and_grad(x):
        value = chain_body(x, n)
        return value, ig.gradients(value, [x])[0]
    return ig.function(chain_and_grad, input_signature=[ig.TensorSpec([CHAIN_WIDTH], ig.float32, name="x")])


def bench_chain(args: argparse.Namespace, table: list[tuple[str, str, str]]) -> dict[str, float]:
    sizes = args.sizes
    texts = {n: chain_function(n).lower().mlir for n in sizes}
    trace_s: dict[int, list[float]] = {n: [] for n in sizes}
    adjoint_s: dict[int, list[float]] = {n: [] for n in sizes}
    gradients_s: dict[int, list[float]] = {n: [] for n in sizes}
    modules: dict[int, str] = {}
    for r in range(args.rounds):
        for n in rotate(sizes, r):
            seconds, _ = timed(lambda n=n: chain_function(n).lower())
            trace_s[n].append(seconds)
            seconds, modules[n] = timed(lambda n=n: ig.passes.differentiate(texts[n], "chain", with_value=True))
            adjoint_s[n].append(seconds)
            if not args.quick or n == sizes[0]:
                seconds, _ = timed(lambda n=n: chain_with_gradients(n).lower())
                gradients_s[n].append(seconds)

    ratios = {}
    per_op = {n: median(adjoint_s[n]) / n for n in sizes}
    for n in sizes:
        table.append((f"chain N={n:>6}: trace → StableHLO", ms(median(trace_s[n])),
                      f"{us(median(trace_s[n]) / n)}/op"))
        runs = [s / n * 1e6 for s in adjoint_s[n]]
        table.append((f"chain N={n:>6}: adjoint build (differentiate)", ms(median(adjoint_s[n])),
                      f"{us(per_op[n])}/op (runs {min(runs):.1f}–{max(runs):.1f})"))
        if gradients_s[n]:
            extra = median([g - t for g, t in zip(gradients_s[n], trace_s[n])])  # paired: same round
            table.append((f"chain N={n:>6}: ig.gradients in trace (extra)", ms(extra), f"{us(extra / n)}/op"))
    growth = per_op[sizes[-1]] / per_op[sizes[0]]
    growth_min = (min(adjoint_s[sizes[-1]]) / sizes[-1]) / (min(adjoint_s[sizes[0]]) / sizes[0])
    ratios["chain_per_op_growth"] = growth
    table.append((f"chain adjoint per-op time N={sizes[-1]} / N={sizes[0]}", f"{growth:.2f}×",
                  f"of medians ({growth_min:.2f}× of fastest runs); linear if ≤ {LINEARITY_LIMIT}: "
                  f"{'ok' if growth <= LINEARITY_LIMIT else 'SUPERLINEAR'}"))
    table.append(("  reference: TensorFlow tf.gradients, 21k-op chain", us(TF_GRADIENTS_PER_OP) + "/op",
                  "from the project notes (TF 2.21, this machine type), not measured in this run"))

    compiled = [n for n in sizes if n <= args.compile_max]
    x = np.random.default_rng(1).standard_normal(CHAIN_WIDTH).astype(np.float32)
    programs: list[Program] = []
    for n in compiled:
        fwd_s, vag_s = [], []
        for build in range(args.chain_builds):
            name = build_name(f"chain{n}", build)
            seconds, _ = compile_timed(with_module_name(texts[n], name), args.iree_flag)
            fwd_s.append(seconds)
            seconds, vmfb = compile_timed(with_module_name(modules[n], name), args.iree_flag)
            vag_s.append(seconds)
            for driver in DRIVERS:
                programs.append(Program.load(f"fwd{n}/{driver}", build, vmfb, "chain", [x], driver))
                programs.append(Program.load(f"vag{n}/{driver}", build, vmfb, "chain_grad", [x], driver))
        table.append((f"chain N={n:>6}: IREE compile forward", ms(median(fwd_s)), ""))
        table.append((f"chain N={n:>6}: IREE compile forward + value_and_grad", ms(median(vag_s)), ""))
    for n in sizes:
        if n not in compiled:
            table.append((f"chain N={n:>6}: IREE compile", "skipped", f"N > --compile-max {args.compile_max}"))
    if programs:
        timings = run_interleaved(programs, args.chain_rounds, args.chain_calls)
        for n in compiled:
            for driver in DRIVERS:
                fwd, vag = f"fwd{n}/{driver}", f"vag{n}/{driver}"
                value, per_build = timings.ratio(vag, fwd)
                ratios[f"chain{n}_vag_over_fwd/{driver}"] = value
                table.append((f"chain N={n:>6}: run forward on {driver}", ms(timings.per_call(fwd)),
                              f"per call; blocks vary ±{100 * timings.noise(fwd):.0f} % (p10–p90)"))
                table.append((f"chain N={n:>6}: value_and_grad / forward, {driver}", f"{value:.2f}×",
                              note(spread(per_build), "< 1: see the chain notes at the top")))
    return ratios


# ----- main ------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: small N, one build, few repeats")
    p.add_argument("--sizes", type=lambda s: [int(v) for v in s.split(",")], default=None,
                   help="chain lengths, comma separated (default 1000,4000,16000; quick: 250,1000)")
    p.add_argument("--compile-max", type=int, default=None,
                   help="compile and run chains up to this N (default 1000; quick: 250). IREE's compile "
                        "time grows faster than N for one long fused elementwise chain (4000: ~40 s)")
    p.add_argument("--builds", type=int, default=None, help="builds per MLP program (default 4; quick: 1)")
    p.add_argument("--rounds", type=int, default=None, help="repetitions of host build timings (default 5)")
    p.add_argument("--mlp-rounds", type=int, default=None, help="timing rounds per MLP program (default 15)")
    p.add_argument("--mlp-calls", type=int, default=None, help="calls per timing block (default 20)")
    p.add_argument("--chain-builds", type=int, default=None, help="builds per chain program (default 2)")
    p.add_argument("--skip", choices=["mlp", "chain"], action="append", default=[], help="skip a section")
    p.add_argument("--iree-flag", action="append", default=[], metavar="FLAG",
                   help="an extra iree-compile flag for every program, e.g. "
                        "--iree-flag=--iree-opt-data-tiling=true (repeatable)")
    args = p.parse_args(argv)
    defaults = dict(sizes=[1000, 4000, 16000], compile_max=1000, builds=4, rounds=5, mlp_rounds=15,
                    mlp_calls=20, chain_builds=2, chain_rounds=10, chain_calls=10)
    if args.quick:
        defaults.update(sizes=[250, 1000], compile_max=250, builds=1, rounds=3, mlp_rounds=15, mlp_calls=10,
                        chain_builds=1, chain_rounds=10, chain_calls=10)
    for key, value in defaults.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    args.sizes = sorted(args.sizes)
    return args


def print_table(rows: list[tuple[str, str, str]]) -> None:
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    print(f"{'measurement':<{w0}}  {'value':>{w1}}  note")
    print(f"{'-' * w0}  {'-' * w1}  {'-' * 4}")
    for name, value, note in rows:
        print(f"{name:<{w0}}  {value:>{w1}}  {note}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    extra = f" {' '.join(args.iree_flag)}" if args.iree_flag else ""
    print(f"{HEADER} ({'quick' if args.quick else 'full'}): irgrad {ig.__version__}, "
          f"IREE compiler {igrt.compiler_version()}, runtime {igrt.runtime_version()}, "
          f"llvm-cpu cpu=host{extra}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    rows: list[tuple[str, str, str]] = []
    results: dict[str, float] = {}
    if "mlp" not in args.skip:
        results.update(bench_mlp(args, rows))
    if "chain" not in args.skip:
        results.update(bench_chain(args, rows))
    print()
    print_table(rows)
    print()
    if "mlp" not in args.skip:
        vag = results["MLP irgrad value_and_grad / irgrad forward"]
        jax = results["MLP JAX value_and_grad / JAX forward"]
        peer = results["MLP irgrad value_and_grad / JAX value_and_grad"]
        sync = results["MLP irgrad value_and_grad / irgrad forward, local-sync"]
        print(f"MLP value_and_grad / forward: irgrad {vag:.2f}× ({sync:.2f}× on one thread), JAX {jax:.2f}× "
              f"(target ≤ {TARGET_VAG_OVER_FORWARD}: "
              f"{'met' if max(vag, sync) <= TARGET_VAG_OVER_FORWARD else 'MISSED'}); "
              f"irgrad / JAX value_and_grad = {peer:.2f}× under the same IREE")
    if "chain" not in args.skip:
        growth = results["chain_per_op_growth"]
        print(f"chain adjoint build per-op time grows {growth:.2f}× from N={args.sizes[0]} to "
              f"N={args.sizes[-1]} (linear if ≤ {LINEARITY_LIMIT}: "
              f"{'met' if growth <= LINEARITY_LIMIT else 'MISSED'})")
    if args.quick:
        print("quick run: one build and few repeats, so the ratios are indicative only")
    print(f"load average at the end {os.getloadavg()[0]:.1f}; total {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
