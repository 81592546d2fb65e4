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

What a dispatch computes is read from the name IREE gives it
(``loss_grad_dispatch_34_matmul_144x32x3136_f32``: a matmul with loop ranges
M×N×K = 144×32×3136 on f32).

Isolated times leave out what a whole call adds (scheduling, barriers,
allocation, transfers); on the local-task device that overhead can be as large
as the dispatches themselves, hence the "whole call" line of the report.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import math
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np

from .vmfb import runtime_tool
from .compiler import compile_flags, compile_vmfb, for_iree
from .errors import CompileError, DeviceError
from .options import CompileOptions, Target
from ..boundary import parse
from .signature import Signature, public_functions, signature_of

__all__ = ["DispatchTime", "Profile", "profile_dispatches", "describe_dispatch"]

_BENCHMARK_FUNC = re.compile(r"^\s*util\.func public @([\w$.-]+)\(.*iree\.benchmark = \"dispatch\"", re.M)
_EXPORT = re.compile(r"hal\.executable\.export public @([\w$.-]+)")
_DEVICE_GLOBAL = re.compile(r"^  util\.global private @__device_0 = .*$", re.M)
# The buffer type of a binding inside an executable: memref<16x30x30xf32, ...>.
_BINDING = re.compile(r"hal\.interface\.binding\.subspan [^\n]*?: (?:memref|[!\w.]+<\w+:tensor)<((?:\d+x)*[a-z]\w*)")
_SHAPE = re.compile(r"^\d+(?:x\d+)*$")
_RUN_TIMEOUT_S = 900


@dataclasses.dataclass(frozen=True)
class DispatchTime:
    """One dispatch (one exported function of an IREE executable).

    Attributes:
        name: IREE's name, e.g. ``loss_grad_dispatch_34_matmul_144x32x3136_f32``.
        function: the public function it was formed in (``None`` if the name
            does not say).
        ordinal: the N of ``_dispatch_N_``.
        kind: IREE's summary of the op, e.g. ``matmul``, ``elementwise``, ``slow_memcpy``.
        description: what it computes, e.g. ``matmul M×N×K = 144×32×3136, f32``.
        seconds: one invocation, benchmarked alone (median of the repetitions;
            the mean over its benchmark configurations if IREE dumped several).
        calls: invocations per call of the function, from IREE's dispatch
            statistics (``None`` when they were not available).
        in_call_seconds: time inside one whole call, all invocations together,
            from the same statistics (``None`` when not available).
        flops: floating-point operations of one invocation for matmuls and
            convolutions (2 per multiply-add over the loop ranges), else ``None``.
    """

    name: str
    function: str | None
    ordinal: int | None
    kind: str
    description: str
    seconds: float
    calls: int | None = None
    in_call_seconds: float | None = None
    flops: int | None = None

    @property
    def seconds_per_call(self) -> float:
        """Time per call of the function: ``seconds`` × ``calls`` (1 when unknown)."""
        return self.seconds * (self.calls if self.calls is not None else 1)

    @property
    def gflops_per_second(self) -> float | None:
        return self.flops / self.seconds / 1e9 if self.flops and self.seconds > 0 else None

    @property
    def short_name(self) -> str:
        """``#34 matmul_144x32x3136_f32`` (without the function's name)."""
        match = re.search(r"_dispatch_(\d+)(?:_(.*))?$", self.name)
        if match is None:
            encoding = re.match(r"_encoding_(\d+)_", self.name)
            return f"encoding #{encoding.group(1)}" if encoding else self.name
        return f"#{match.group(1)} {match.group(2) or ''}".rstrip()


@dataclasses.dataclass
class Profile:
    """The result of ``profile_dispatches``.

    Attributes:
        function: the profiled function (``None``: every public function).
        dispatches: slowest first by ``seconds_per_call``.
        whole_call_seconds: median time of one call of ``function`` on random
            inputs (``None`` when not measured; ``note`` says why).
        device: the IREE driver the times were taken on.
        flags: the iree-compile flags used.
        skipped: dispatches that a call of ``function`` does not run (e.g. run
            once by a module initializer), left out of ``dispatches``.
        note: why something is missing, or ``""``.
    """

    function: str | None
    dispatches: list[DispatchTime]
    whole_call_seconds: float | None
    device: str
    flags: list[str]
    skipped: list[str] = dataclasses.field(default_factory=list)
    note: str = ""

    @property
    def total_seconds(self) -> float:
        """Sum of the dispatches' isolated times per call."""
        return sum(d.seconds_per_call for d in self.dispatches)

    @property
    def in_call_seconds(self) -> float | None:
        """Sum of the dispatches' times inside a whole call (IREE's statistics)."""
        times = [d.in_call_seconds for d in self.dispatches]
        return sum(times) if times and all(t is not None for t in times) else None

    def by_kind(self) -> list[tuple[str, int, float]]:
        """(kind, number of dispatches, seconds per call alone), most time first."""
        kinds: dict[str, list[float]] = {}
        for d in self.dispatches:
            kinds.setdefault(d.kind, []).append(d.seconds_per_call)
        return sorted(((k, len(v), sum(v)) for k, v in kinds.items()), key=lambda row: row[2], reverse=True)

    def table(self, top: int | None = None, width: int = 46) -> str:
        """The report: one row per dispatch, slowest first (``top`` rows at most), then the totals."""
        total = self.total_seconds
        header = ("#", "dispatch", "what it computes", "calls", "µs/call", "share", "cum.", "GFLOP/s", "in call µs")
        rows = [header]
        cumulative = 0.0
        for rank, d in enumerate(self.dispatches, 1):
            share = d.seconds_per_call / total if total > 0 else 0.0
            cumulative += share
            if top is not None and rank > top:
                continue
            label = d.short_name if self.function else f"{d.function or '?'} {d.short_name}"
            rate = d.gflops_per_second
            rows.append((
                str(rank), _cut(label, 34), _cut(d.description, width),
                "?" if d.calls is None else str(d.calls),
                f"{d.seconds_per_call * 1e6:,.1f}", f"{share:.1%}", f"{cumulative:.1%}",
                "" if rate is None else f"{rate:,.1f}" if rate >= 1 else f"{rate:.2g}",
                "" if d.in_call_seconds is None else f"{d.in_call_seconds * 1e6:,.1f}",
            ))
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        aligned = lambda i, cell: cell.ljust(widths[i]) if i in (1, 2) else cell.rjust(widths[i])  # noqa: E731
        what = f"@{self.function}" if self.function else "all public functions"
        count = len(self.dispatches)
        lines = [f"{what} on {self.device}: {count} dispatch{'es' if count != 1 else ''}, each timed alone "
                 "(IREE's dumped dispatch benchmarks)"]
        lines += ["  ".join(aligned(i, cell) for i, cell in enumerate(row)).rstrip() for row in rows]
        shown = len(rows) - 1
        if shown < count:
            rest = sum(d.seconds_per_call for d in self.dispatches[shown:])
            share = f" ({rest / total:.1%})" if total > 0 else ""
            lines.append(f"... {count - shown} more: {rest * 1e6:,.1f} µs{share}")
        kinds = self.by_kind()
        if len(kinds) > 1 and total > 0:
            lines.append("by kind: " + ", ".join(f"{kind} ×{n} {seconds / total:.0%}" for kind, n, seconds in kinds))
        lines.append(f"sum of dispatches, timed alone:  {total * 1e6:12,.1f} µs")
        in_call = self.in_call_seconds
        if in_call is not None:
            lines.append(f"sum of dispatches inside a call: {in_call * 1e6:12,.1f} µs  (IREE --dispatch_statistics)")
        if self.whole_call_seconds:
            lines.append(f"whole call:                      {self.whole_call_seconds * 1e6:12,.1f} µs  "
                         f"(dispatches alone = {total / self.whole_call_seconds:.0%} of it)")
        if self.skipped:
            lines.append(f"not part of a call (left out): {', '.join(self.skipped)}")
        if self.note:
            lines.append(f"note: {self.note}")
        return "\n".join(lines)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# ----- what a dispatch computes ---------------------------------------------------------

_KINDS = {
    "slow_memcpy": "strided copy",
    "fill": "fill",
    "generic": "generic loop nest",
    "elementwise": "elementwise",
    "elementwise_transpose": "elementwise + transpose",
    "elementwise_broadcast": "elementwise + broadcast",
    "transpose": "transpose",
    "broadcast": "broadcast",
    "reduction": "reduction",
    "matmul_like": "matmul-like contraction",
    "contract": "contraction",
    "conv": "window loop (conv-like, e.g. a pool)",
    "pack": "data-tiling pack",
    "unpack": "data-tiling unpack",
    "mmt4d": "tiled matmul (mmt4d)",
}


def describe_dispatch(name: str, buffers: Sequence[str] = ()) -> tuple[str, str, int | None]:
    """Kind, what a dispatch computes and its FLOPs (where known), from IREE's name.

    ``f_dispatch_3_matmul_64x32x16_f32`` -> ``("matmul", "matmul M×N×K = 64×32×16, f32", 65536)``.
    ``buffers`` (types of its bindings, e.g. ``16x30x30xf32``) describe a
    dispatch whose name carries no shape, such as ``slow_memcpy``.
    """
    encoding = re.fullmatch(r"_encoding_\d+_(encode|decode)_(.*)", name)
    if encoding:  # data tiling: an argument or result changing layout
        return encoding.group(1), f"data-tiling {encoding.group(1)} {encoding.group(2).replace('_to_', ' → ')}", None
    match = re.search(r"_dispatch_\d+(?:_(.*))?$", name)
    rest = match.group(1) if match else name
    if not rest:
        return "dispatch", "dispatch (IREE gave it no summary)", None
    tokens = rest.split("_")
    at = next((i for i, t in enumerate(tokens) if _SHAPE.match(t)), None)
    if at is None:
        kind, dims, types = rest, [], []
    else:
        kind = "_".join(tokens[:at])
        dims = [int(d) for d in tokens[at].split("x")]
        types = list(dict.fromkeys("_".join(tokens[at + 1:]).split("x"))) if at + 1 < len(tokens) else []
    loops = "×".join(map(str, dims))
    flops = None
    if kind in ("matmul", "matmul_transpose_a", "matmul_transpose_b") and len(dims) == 3:
        text = f"{kind.replace('_', ' ')} M×N×K = {loops}"
        flops = 2 * math.prod(dims)
    elif kind.startswith("batch_matmul") and len(dims) == 4:
        text = f"{kind.replace('_', ' ')} B×M×N×K = {loops}"
        flops = 2 * math.prod(dims)
    elif kind.startswith(("conv_", "depthwise_conv_")) or kind in ("matmul_like", "contract", "mmt4d"):
        if "conv" in kind:  # conv_2d_nhwc_hwcf: loops in the order of IREE's named op
            layout = kind.split("conv_", 1)[1].replace("_", " ")
            text = ("depthwise conv " if kind.startswith("depthwise") else "conv ") + layout
        else:
            text = _KINDS[kind]
        text += f", loops {loops}" if dims else ""
        flops = 2 * math.prod(dims) if dims else None
    else:
        text = _KINDS.get(kind, kind.replace("_", " ") or "dispatch")
        if dims:
            text += f" {loops}"
        elif buffers:
            shapes = [_squeeze(b) for b in buffers]
            types = list(dict.fromkeys(t for _, t in shapes))
            text += " " + " → ".join(s for s, _ in shapes)
    types_text = "/".join(t for t in types if t)
    if types_text:
        text += f", {types_text}"
    return kind, text, flops


def _squeeze(buffer: str) -> tuple[str, str]:
    """``16x1x28x1xf32`` -> (``16×28``, ``f32``): the shape without unit dimensions, the type."""
    *dims, element = buffer.split("x")
    shape = "×".join(d for d in dims if d != "1") or "1"
    return shape, element


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

def _prepare(mlir_text: str, function: str | None) -> tuple[str, dict[str, Signature]]:
    """The text to compile (other public functions made private) and the signatures."""
    from iree.compiler import ir

    with ir.Context() as context:
        module = parse(mlir_text, context)
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
            return mlir_text, signatures
        if function not in signatures:
            raise ValueError(f"no public function {function!r}; functions: {', '.join(signatures)}")
        for func in funcs:
            if ir.StringAttr(func.attributes["sym_name"]).value != function:
                func.attributes["sym_visibility"] = ir.StringAttr.get("private")
        return module.operation.get_asm(enable_debug_info=True), signatures


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


def _exports(dumps: list[Path]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Benchmark function name -> the dispatch (executable export) it runs, and per
    dispatch the types of its buffers (when its dump holds that one dispatch)."""
    owner: dict[str, str] = {}
    buffers: dict[str, list[str]] = {}
    for path in dumps:
        text = path.read_text()
        exports = sorted(set(_EXPORT.findall(text)), key=len, reverse=True)
        for bench in _BENCHMARK_FUNC.findall(text):
            owner[bench] = next((e for e in exports if bench.endswith(e)), None) or next(
                (e for e in exports if e in bench), bench)
        if len(exports) == 1:
            buffers[exports[0]] = _BINDING.findall(text)
    return owner, buffers


def _function_of(name: str, functions: Sequence[str]) -> tuple[str | None, int | None]:
    for function in sorted(functions, key=len, reverse=True):
        match = re.match(re.escape(function) + r"_dispatch_(\d+)(?:_|$)", name)
        if match:
            return function, int(match.group(1))
    match = re.match(r"(.+?)_dispatch_(\d+)(?:_|$)", name)
    return (match.group(1), int(match.group(2))) if match else (None, None)


# ----- whole calls ----------------------------------------------------------------------

def _input_flags(signature: Signature, folder: Path, seed: int) -> list[str]:
    """``--input=TYPE=@file`` flags with random data: floats ~ N(0, 1), integers 0, bools random."""
    rng = np.random.default_rng(seed)
    flags = []
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
        path = folder / f"input{i}.bin"
        data.tofile(path)
        flags.append(f"--input={t}=@{path}")
    return flags


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
        device: IREE driver to run on (default: the target's).
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
    mlir_text = for_iree(mlir_text)
    text, signatures = _prepare(mlir_text, function)
    if function is None and len(signatures) == 1:
        function = next(iter(signatures))
    flags = compile_flags(text, options)
    with tempfile.TemporaryDirectory(prefix="irgrad-profile-") as tmp:
        folder = Path(tmp)
        dump = folder / "dump"
        vmfb = folder / "module.vmfb"
        dump_flag = f"--iree-hal-dump-executable-benchmarks-to={dump}"
        vmfb.write_bytes(compile_vmfb(text, mlir_text, options, [*flags, dump_flag]))
        dumps = sorted(dump.glob("*.mlir")) if dump.is_dir() else []
        if not dumps:
            raise ValueError("IREE dumped no dispatch benchmarks for this module (no dispatches, or only "
                             "dynamically shaped ones)")
        owner, buffers = _exports(dumps)
        modules, failed = _compile_benchmarks(dumps, options, flags, folder, jobs or os.cpu_count() or 1)
        alone: dict[str, float] = {}
        for module in modules:
            rows = _run_benchmark([f"--module={module}", f"--device={device}", f"--batch_size={batch_size}",
                                   *_timing_flags(repetitions, min_time)])
            alone.update(_timed_rows(rows)[0])

        whole, stats, note = None, {}, ""
        signature = signatures.get(function) if function else None
        if whole_call and signature is not None:
            try:
                whole, stats, note = _whole_call(vmfb, signature, device, folder, repetitions, max(min_time, 0.1))
            except (ValueError, DeviceError) as error:  # the dispatches' times still stand
                note = f"whole call not timed: {error}"
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
                                       calls, in_call_seconds, flops))
    missing = sorted(set(stats) - set(per_export))
    if missing:
        note = "; ".join(filter(None, [note, f"run in the call but not benchmarked alone: {', '.join(missing)}"]))
    if failed:
        note = "; ".join(filter(None, [note, f"{len(failed)} dispatch benchmark(s) IREE could not compile again, "
                                             f"timed only inside the call: {next(iter(failed.values()))}"]))
    dispatches.sort(key=lambda d: d.seconds_per_call, reverse=True)
    return Profile(function, dispatches, whole, device, flags, sorted(skipped), note)
