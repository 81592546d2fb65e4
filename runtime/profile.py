"""Where a compiled function's time goes: a per-dispatch profile from IREE's own tools.

``profile_dispatches(text, options, function="loss_grad")``:

1. compiles the module with exactly the flags ``compile`` uses, plus
   ``--iree-hal-dump-executable-benchmarks-to``: IREE writes one small module
   per dispatch that runs that dispatch alone on its real shapes;
2. compiles those benchmark modules (merged into one when they fit together,
   else one by one) and times every dispatch with ``iree-benchmark-module``
   (``--batch_size`` invocations per timed iteration, median of
   ``repetitions``);
3. times whole calls of the function on random inputs made from its
   signature, with IREE's ``--dispatch_statistics``, which also gives each
   dispatch's number of invocations per call and its time inside the call.

The other public functions are made private before compiling, so IREE keeps
only the profiled function's dispatches. (IREE deduplicates executables
across functions: in a module with ``@loss`` and ``@loss_grad``, most of the
gradient's forward dispatches are named ``loss_dispatch_*``, so filtering
dispatch names by prefix would miss them.)

A dispatch is one kernel IREE runs, made by its compiler from neighbouring
StableHLO ops fused together. What it computes is read from the name IREE gives
it (``loss_grad_dispatch_34_matmul_144x32x3136_f32``: a matmul with loop ranges
M×N×K = 144×32×3136 on f32); which of the model's ops it came from, from the MLIR
locations IREE keeps through fusion (the dumps are printed with
``--mlir-print-debuginfo``; ``profile_sources`` reads them).

Isolated times leave out what a whole call adds (argument import, transient
allocations, worker wake-ups, barriers between dispatches); on the local-task
device that overhead can be larger than the dispatches themselves, hence the
breakdown that ends the report (``profile_report``).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np

from .vmfb import runtime_tool
from .compiler import compile_flags, compile_vmfb, for_iree
from .errors import CompileError, DeviceError
from .loader import load
from .options import CompileOptions, Target
from .profile_report import DispatchTime, Profile, describe_dispatch
from .profile_sources import dispatch_sources, file_locations
from ..boundary import mlir_bindings, parse
from .signature import Signature, public_functions, signature_of

__all__ = ["DispatchTime", "Profile", "profile_dispatches", "describe_dispatch", "measure_peak"]

_BENCHMARK_FUNC = re.compile(r"^\s*util\.func public @([\w$.-]+)\(.*iree\.benchmark = \"dispatch\"", re.M)
_EXPORT = re.compile(r"hal\.executable\.export public @([\w$.-]+)")
_DEVICE_GLOBAL = re.compile(r"^  util\.global private @__device_0 = .*$", re.M)
# The buffer type of a binding inside an executable: memref<16x30x30xf32, ...>.
_BINDING = re.compile(r"hal\.interface\.binding\.subspan [^\n]*?: (?:memref|[!\w.]+<\w+:tensor)<((?:\d+x)*[a-z]\w*)")
_RUN_TIMEOUT_S = 900


# ----- tools ----------------------------------------------------------------------------


def _run_benchmark(args: list[str]) -> list[dict[str, Any]]:
    """Runs iree-benchmark-module with JSON output; its benchmark rows."""
    command = [runtime_tool("iree-benchmark-module"), *args, "--benchmark_format=json"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=_RUN_TIMEOUT_S)
    if result.returncode != 0:
        lines = [line.strip() for line in (result.stderr + result.stdout).splitlines() if line.strip()]
        detail = next((line for line in lines if "error" in line.lower() or "INVALID" in line or "FAILED" in line),
                      lines[-1] if lines else f"exit status {result.returncode}")
        raise DeviceError(f"iree-benchmark-module failed: {detail}")
    try:
        return json.loads(result.stdout)["benchmarks"]
    except (ValueError, KeyError) as error:
        raise DeviceError(f"iree-benchmark-module printed no JSON report ({error})") from None


def _seconds(row: dict[str, Any]) -> float:
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[row.get("time_unit", "ns")]
    return float(row["real_time"]) * scale


def _timed_rows(rows: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, tuple[int, float]]]:
    """Per benchmarked function: its median time; per dispatch row (``--dispatch_statistics``):
    calls and time per benchmark iteration."""
    samples: dict[str, list[float]] = {}
    medians: dict[str, float] = {}
    dispatches: dict[str, tuple[int, float]] = {}
    for row in rows:
        run_name = row.get("run_name", row.get("name", ""))
        function, _, rest = run_name.removeprefix("BM_").partition("/")
        if rest.startswith("process_time") or rest.startswith("real_time") or not rest:
            if row.get("run_type") == "aggregate":
                if row.get("aggregate_name") == "median":
                    medians[function] = _seconds(row)
            elif not row.get("error_occurred"):
                samples.setdefault(function, []).append(_seconds(row))
        elif "calls" in row and row.get("run_type") != "aggregate":
            dispatches[rest] = (int(round(float(row["calls"]))), _seconds(row))
    times = {f: float(np.median(s)) for f, s in samples.items()}
    times.update(medians)
    return times, dispatches


def _timing_flags(repetitions: int, min_time: float) -> list[str]:
    flags = [f"--benchmark_min_time={min_time:g}s"]
    if repetitions > 1:
        flags += [f"--benchmark_repetitions={repetitions}", "--benchmark_report_aggregates_only=true"]
    return flags


# ----- the module: keep one function, dump, merge ---------------------------------------

def _prepare(mlir_text: str, function: str | None) -> tuple[str, dict[str, Signature], dict[str, str]]:
    """The text to compile (other public functions made private), the signatures, and the
    ops at each file location (``file_locations``)."""
    ir = mlir_bindings()
    with ir.Context() as context:
        module = parse(mlir_text, context)
        places = file_locations(module)
        funcs = public_functions(module)
        signatures: dict[str, Signature] = {}
        for func in funcs:
            try:
                signature = signature_of(func)
            except ValueError:
                name = ir.StringAttr(func.attributes["sym_name"]).value
                signature = Signature(name, (), ())  # not a tensor signature: no whole-call timing
            signatures[signature.name] = signature
        if not signatures:
            raise ValueError("the module has no public function to profile")
        if function is None:
            return mlir_text, signatures, places
        if function not in signatures:
            raise ValueError(f"no public function {function!r}; functions: {', '.join(signatures)}")
        for func in funcs:
            if ir.StringAttr(func.attributes["sym_name"]).value != function:
                func.attributes["sym_visibility"] = ir.StringAttr.get("private")
        return module.operation.get_asm(enable_debug_info=True), signatures, places


def _merge(texts: Sequence[str]) -> str | None:
    """The dumped benchmark modules as one module, or None if they do not fit together.

    Each dump is ``module { util.global private @__device_0 = ...; executable;
    buffers; initializer; benchmark funcs }`` with names unique per executable,
    so the bodies concatenate once the shared device global is kept once.
    Attribute aliases (``#loc3 = loc(...)``) are renamed per dump.
    """
    device = None
    bodies, aliases = [], []
    for i, text in enumerate(texts):
        names = re.findall(r"^#([\w$.-]+) = ", text, re.M)
        if names:
            alias = re.compile(r"#(" + "|".join(map(re.escape, names)) + r")(?![\w$.-])")
            text = alias.sub(lambda m, i=i: f"#d{i}_{m.group(1)}", text)
        lines = text.strip().splitlines()
        # "module {" ... "}", either maybe followed by a location: "} loc(...)".
        starts = [k for k, line in enumerate(lines) if re.fullmatch(r"module \{(?: loc\(.*\))?", line)]
        ends = [k for k, line in enumerate(lines) if re.fullmatch(r"\}(?: loc\(.*\))?", line)]
        if not starts or not ends or ends[-1] <= starts[0]:
            return None
        first, last = starts[0], ends[-1]
        outside = lines[:first] + lines[last + 1:]
        if any(line.strip() and not line.startswith("#") for line in outside):
            return None
        found = _DEVICE_GLOBAL.findall("\n".join(lines[first + 1:last]))
        if len(found) != 1:
            return None
        if device is None:
            device = found[0]
        bodies.append("\n".join(line if line != found[0] else "" for line in lines[first + 1:last]))
        aliases += [line for line in outside if line.strip()]
    if device is None:
        return None
    # Every dump declares the same device under its own renamed aliases: keep the first.
    return "\n".join([*aliases, "module {", device, *bodies, "}", ""])


def _compile_benchmarks(dumps: list[Path], options: CompileOptions, flags: list[str], folder: Path,
                        jobs: int) -> tuple[list[Path], dict[str, str]]:
    """The dumped benchmark modules compiled (merged into one when possible), and the
    dumps IREE could not compile again, with its first error line. (IREE 3.13 refuses
    some of its own dumps, e.g. a depthwise weight gradient's ``DoubleTilingExpert``
    convolution: "'func.func' op failed to build pass pipeline".)"""
    texts = [path.read_text() for path in dumps]
    merged = _merge(texts) if len(texts) > 1 else None
    if merged is not None:
        try:
            path = folder / "dispatches.vmfb"
            path.write_bytes(compile_vmfb(merged, merged, options, flags))
            return [path], {}
        except CompileError:
            pass  # compile them one by one

    def one(item: tuple[Path, str]) -> Path | str:
        source, text = item
        path = folder / (source.stem + ".vmfb")
        try:
            path.write_bytes(compile_vmfb(text, text, options, flags))
        except CompileError as error:
            return str(error).splitlines()[0]
        return path

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(one, zip(dumps, texts)))
    failed = {source.stem: r for source, r in zip(dumps, results) if isinstance(r, str)}
    return [r for r in results if isinstance(r, Path)], failed


def _exports(dumps: list[Path], places: dict[str, str]
             ) -> tuple[dict[str, str], dict[str, list[str]], dict[str, tuple[str, ...]]]:
    """Benchmark function name -> the dispatch (executable export) it runs; per dispatch the
    types of its buffers (when its dump holds that one dispatch); per dispatch the model's ops
    it came from (``profile_sources``)."""
    owner: dict[str, str] = {}
    buffers: dict[str, list[str]] = {}
    sources: dict[str, tuple[str, ...]] = {}
    for path in dumps:
        text = path.read_text()
        exports = sorted(set(_EXPORT.findall(text)), key=len, reverse=True)
        for bench in _BENCHMARK_FUNC.findall(text):
            owner[bench] = next((e for e in exports if bench.endswith(e)), None) or next(
                (e for e in exports if e in bench), bench)
        if len(exports) == 1:
            buffers[exports[0]] = _BINDING.findall(text)
        sources.update(dispatch_sources(text, places))
    return owner, buffers, sources


def _function_of(name: str, functions: Sequence[str]) -> tuple[str | None, int | None]:
    for function in sorted(functions, key=len, reverse=True):
        match = re.match(re.escape(function) + r"_dispatch_(\d+)(?:_|$)", name)
        if match:
            return function, int(match.group(1))
    match = re.match(r"(.+?)_dispatch_(\d+)(?:_|$)", name)
    return (match.group(1), int(match.group(2))) if match else (None, None)


# ----- whole calls ----------------------------------------------------------------------

def _random_inputs(signature: Signature, seed: int) -> list[np.ndarray]:
    """Random arguments: floats ~ N(0, 1), integers 0, bools random; bfloat16 as its bits (uint16)."""
    rng = np.random.default_rng(seed)
    inputs = []
    for i, t in enumerate(signature.inputs):
        if any(d is None for d in t.shape):
            raise ValueError(f"argument {i} has a dynamic shape ({t}); cannot make an input for it")
        shape = tuple(int(d) for d in t.shape)
        if t.dtype == "bfloat16":
            data = (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        elif t.dtype.startswith("float"):
            data = rng.standard_normal(shape).astype(t.dtype)
        elif t.dtype == "bool":
            data = rng.integers(0, 2, shape).astype(np.uint8)
        else:
            data = np.zeros(shape, t.dtype)  # zeros are valid indices for gathers and slices
        inputs.append(data)
    return inputs


def _input_flags(signature: Signature, folder: Path, seed: int) -> list[str]:
    """``--input=TYPE=@file`` flags with ``_random_inputs``."""
    flags = []
    for i, (t, data) in enumerate(zip(signature.inputs, _random_inputs(signature, seed))):
        path = folder / f"input{i}.bin"
        data.tofile(path)
        flags.append(f"--input={t}=@{path}")
    return flags


def _status(key: str) -> int:
    """A ``/proc/self/status`` size (``VmRSS``, ``VmHWM``) in bytes."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))


def _peak_here(vmfb: str, function: str, device: str) -> int:
    """In a fresh process: the first call's peak over the memory after loading (see
    ``measure_peak``)."""
    module = load(vmfb, device=device)
    fn = module[function]
    if any(t.dtype == "bfloat16" for t in fn.signature.inputs):
        raise ValueError("bfloat16 arguments: not measured")
    args = [module.put(data, dtype=t.dtype) for t, data in zip(fn.signature.inputs, _random_inputs(fn.signature, 0))]
    base = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # VmHWM back to VmRSS (Linux)
        f.write("5")
    fn.on_device(*args)
    return max(_status("VmHWM") - base, 0)


def measure_peak(vmfb: Path, function: str, device: str, timeout: float = 600) -> int:
    """Bytes by which the first call of ``function`` raises a fresh process's peak memory
    (VmHWM, reset after loading) over its memory after loading, on random arguments put on the
    device first (as ``bench_memory.py`` measures): what the call allocates, IREE's own buffers
    included. ValueError where it cannot be measured (not Linux, dynamic shapes, bfloat16)."""
    if not Path("/proc/self/clear_refs").exists():
        raise ValueError("peak memory is measured on Linux only")
    code = "import sys; from irgrad.runtime.profile import _peak_here; print(_peak_here(*sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, str(vmfb), function, device],
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["exit status " + str(done.returncode)])[-1]
        raise ValueError(f"peak not measured: {last}")
    return int(done.stdout.split()[-1])


def _whole_call(vmfb: Path, signature: Signature, device: str, folder: Path, repetitions: int,
                min_time: float) -> tuple[float, dict[str, tuple[int, float]], str]:
    """Median seconds per call, IREE's per-dispatch statistics (maybe empty) and a note."""
    args = [f"--module={vmfb}", f"--device={device}", f"--function={signature.name}",
            *_input_flags(signature, folder, seed=0), *_timing_flags(repetitions, min_time)]
    note = ""
    try:
        rows = _run_benchmark([*args, "--dispatch_statistics=true"])
    except DeviceError as error:
        rows = _run_benchmark(args)
        note = f"no in-call dispatch statistics on {device} ({error})"
    times, stats = _timed_rows(rows)
    if signature.name not in times:
        raise DeviceError(f"iree-benchmark-module reported no time for {signature.name}")
    if not stats and not note:
        note = f"IREE reported no in-call dispatch statistics on {device}"
    return times[signature.name], stats, note


# ----- the profile ----------------------------------------------------------------------

def profile_dispatches(
    mlir_text: str,
    options: CompileOptions | Target | str | None = None,
    *,
    function: str | None = None,
    device: str | None = None,
    repetitions: int = 3,
    min_time: float = 0.05,
    batch_size: int = 100,
    whole_call: bool = True,
    jobs: int | None = None,
) -> Profile:
    """Times every dispatch of a StableHLO module (or of one of its functions) alone.

    Args:
        mlir_text: the module, as irgrad would compile it.
        options: CompileOptions or a target name (default: llvm-cpu for this CPU).
        function: profile only this public function (the others are made
            private, so IREE drops what only they use); ``None``: every public
            function, and the whole call is timed only if there is just one.
        device: IREE driver to run on (default: the target's); one that cannot run the
            target's code is a ValueError.
        repetitions: timed repetitions per benchmark; the median is reported.
        min_time: seconds each repetition runs at least.
        batch_size: invocations of a dispatch per timed iteration (each
            invocation is one dispatch in one command buffer, so a larger batch
            hides the per-submission cost that a lone dispatch would pay).
        whole_call: also time whole calls of the function on random inputs.
        jobs: parallel compiles when the benchmark modules cannot be merged
            (default: the number of CPUs).

    Raises:
        IRParseError: the text does not parse; ValueError: no such function
            or a cross-compiling target; CompileError: IREE rejected the module;
            DeviceError: a benchmark run failed.
    """
    if options is None:
        options = CompileOptions()
    elif not isinstance(options, CompileOptions):
        options = CompileOptions(target=options)
    if options.is_cross:
        raise ValueError(f"cannot profile code for {options.triple} on this machine; drop the triple")
    device = device or options.target.default_driver
    if device.split("://")[0] not in options.target.drivers:
        raise ValueError(f"cannot profile {options.target.value} code on device {device!r}; "
                         f"use {' or '.join(options.target.drivers)}")
    mlir_text = for_iree(mlir_text)
    text, signatures, places = _prepare(mlir_text, function)
    if function is None and len(signatures) == 1:
        function = next(iter(signatures))
    flags = compile_flags(text, options)
    with tempfile.TemporaryDirectory(prefix="irgrad-profile-") as tmp:
        folder = Path(tmp)
        dump = folder / "dump"
        vmfb = folder / "module.vmfb"
        # Debug info: the dumps keep the locations of the ops each dispatch was made from.
        dump_flags = [f"--iree-hal-dump-executable-benchmarks-to={dump}", "--mlir-print-debuginfo"]
        vmfb.write_bytes(compile_vmfb(text, mlir_text, options, [*flags, *dump_flags]))
        dumps = sorted(dump.glob("*.mlir")) if dump.is_dir() else []
        if not dumps:
            raise ValueError("IREE dumped no dispatch benchmarks for this module (no dispatches, or only "
                             "dynamically shaped ones)")
        owner, buffers, sources = _exports(dumps, places)
        modules, failed = _compile_benchmarks(dumps, options, flags, folder, jobs or os.cpu_count() or 1)
        alone: dict[str, float] = {}
        for module in modules:
            rows = _run_benchmark([f"--module={module}", f"--device={device}", f"--batch_size={batch_size}",
                                   *_timing_flags(repetitions, min_time)])
            alone.update(_timed_rows(rows)[0])

        whole, stats, note, peak = None, {}, "", None
        signature = signatures.get(function) if function else None
        if whole_call and signature is not None:
            try:
                whole, stats, note = _whole_call(vmfb, signature, device, folder, repetitions, max(min_time, 0.1))
            except (ValueError, DeviceError) as error:  # the dispatches' times still stand
                note = f"whole call not timed: {error}"
            try:
                peak = measure_peak(vmfb, signature.name, device)
            except (ValueError, subprocess.TimeoutExpired) as error:
                note = "; ".join(filter(None, [note, str(error)]))
        elif whole_call:
            note = "whole call not timed: name one function"

    per_export: dict[str, list[float]] = {}
    for bench, seconds in alone.items():
        per_export.setdefault(owner.get(bench, bench), []).append(seconds)
    dispatches, skipped = [], []
    for name, times in per_export.items():
        owner_function, ordinal = _function_of(name, list(signatures))
        # A call runs what IREE's statistics list (data-tiling encodes of the arguments, named
        # "_encoding_N_...", included); without them, what is not named after another function.
        in_call = name in stats if stats else owner_function == function or owner_function not in signatures
        if function is not None and not in_call:
            skipped.append(name)
            continue
        kind, description, flops = describe_dispatch(name, buffers.get(name, ()))
        calls, in_call_seconds = stats.get(name, (0, 0.0) if stats else (None, None))
        dispatches.append(DispatchTime(name, owner_function, ordinal, kind, description, float(np.mean(times)),
                                       calls, in_call_seconds, flops, sources.get(name, ())))
    missing = sorted(set(stats) - set(per_export))
    if missing:
        note = "; ".join(filter(None, [note, f"run in the call but not benchmarked alone: {', '.join(missing)}"]))
    if failed:
        note = "; ".join(filter(None, [note, f"{len(failed)} dispatch benchmark(s) IREE could not compile again, "
                                             f"timed only inside the call: {next(iter(failed.values()))}"]))
    dispatches.sort(key=lambda d: d.seconds_per_call, reverse=True)
    return Profile(function, dispatches, whole, device, flags, sorted(skipped), note, peak)
