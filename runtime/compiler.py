"""StableHLO text -> IREE artifact, with an in-process and an on-disk cache.

Cache key: sha256 of (IR text, the iree-compile flags, compiler version,
producer). The disk cache lives in ``$IRGRAD_CACHE_DIR`` (default
``~/.cache/irgrad``) under one folder per compiler version; each entry is a
single self-describing .vmfb written atomically, so processes compiling the
same module at once never see a partial file. The entries are capped at
``$IRGRAD_CACHE_SIZE`` (default 2 GiB), least recently used evicted first
(``cache.py``; ``irgrad cache info`` / ``clear``).

Logs (``logging``, quiet unless configured) under ``irgrad.runtime.compiler``: each compile
with its target and time (INFO), cache hits and misses (DEBUG), the IREE workarounds applied
(INFO).
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import cache as _disk
from .artifact import Artifact, atomic_write
from .vmfb import ARTIFACT_KEY, PEAK_KEY, SCHEMA, SIGNATURE_KEY, TRAIN_KEY, UNUSED_KEY, read_metadata, seal
from .errors import ArtifactError, CompileError
from .options import CompileOptions, Target, format_bytes
from ..boundary import mlir_bindings, module_text, parse, respell_foreign, save_failed_ir, struct_fields
from .signature import public_functions, signature_of

__all__ = [
    "compile", "compile_flags", "for_iree", "compiler_version", "cache_dir", "cache_stats", "clear_memory_cache",
    "needs_system_link", "estimate_work", "count_kernels",
]

log = logging.getLogger(__name__)

_MEMORY_CACHE_SIZE = 64
_CACHE_FORMAT = 9  # 2: sealed entries (vmfb.seal); 3: metadata "work" (the default device); 4: "unused"; 5: "kernels"
# 6: "work" counts a run-time dimension as RUN_TIME_SIZE (it was unknown, so local-task); 7: loops placed on
# one device (_place_on_one_device); 8, 9: only loops that run in place correctly (loop_inits.loops_run_in_place)
_memory_cache: collections.OrderedDict[str, Artifact] = collections.OrderedDict()
_stats = {"memory_hits": 0, "disk_hits": 0, "compiles": 0}

# An f64 element type anywhere: tensor<f64>, tensor<3xf64>, complex<f64>.
_F64 = re.compile(r"(?:(?<![\w])|(?<=[\d?]x))f64(?!\w)")
# Symbols that IREE's embedded ELF cannot resolve, named as the StableHLO op.
_LIBM_OPS = {"sin": "sine", "cos": "cosine", "tan": "tan", "tanh": "tanh", "atan2": "atan2"}


def compiler_version() -> str:
    """The version of the IREE compiler in use, e.g. ``3.13.0``."""
    from iree.compiler.version import VERSION

    return VERSION


def cache_dir() -> Path:
    """The on-disk cache folder for this compiler version."""
    return _disk.cache_root() / f"iree-{compiler_version()}"


def cache_stats() -> dict[str, int]:
    """Counters since process start: ``memory_hits``, ``disk_hits``, ``compiles``."""
    return dict(_stats)


def clear_memory_cache() -> None:
    """Forgets every artifact cached in this process (the disk cache stays)."""
    _memory_cache.clear()


def needs_system_link(mlir_text: str, options: CompileOptions) -> bool:
    """True for float64 modules on llvm-cpu for Linux.

    IREE 3.13's embedded ELF has no libm, so f64 sine/cosine/tanh/atan2 fail to
    link (``undefined symbol: sin``). Linked as a system shared object instead,
    those calls resolve against the libm already loaded in the process, and the
    results match numpy.
    """
    if options.target is not Target.LLVM_CPU or not _F64.search(mlir_text):
        return False
    return "linux" in options.triple if options.triple else sys.platform.startswith("linux")


def for_iree(mlir_text: str) -> str:
    """The text IREE 3.13 compiles correctly: StableHLO that hits one of its known bugs
    rewritten into an equivalent form (``irgrad.passes.lowering.legalize``); unchanged otherwise.
    Every compile and profile goes through it, so no caller can skip a workaround."""
    # The workarounds are IR rewrites made with the passes' IR builder: imported when a module
    # is compiled, so loading artifacts (a runtime-only install) never needs the compiler.
    from ..passes.lowering.legalize import legalize_text

    legal = legalize_text(mlir_text)
    if legal != mlir_text and log.isEnabledFor(logging.INFO) and legal != respell_foreign(mlir_text):
        ops = collections.Counter(name for name in _OP_NAME.findall(mlir_text) if name in _REWRITTEN)
        log.info("IREE %s workarounds (irgrad.passes.lowering.legalize) rewrote the module (it holds %s)", _release(),
                 ", ".join(f"{name} x{n}" for name, n in sorted(ops.items())))
    return legal


_OP_NAME = re.compile(r"\b(stablehlo\.[a-z_]+)\b")
# The ops irgrad.passes.lowering.legalize may rewrite (its module docstring says when and why).
_REWRITTEN = {"stablehlo.power", "stablehlo.convolution", "stablehlo.reduce", "stablehlo.dot_general",
              "stablehlo.dynamic_update_slice", "stablehlo.convert", "stablehlo.einsum", "stablehlo.unary_einsum",
              "stablehlo.cholesky", "stablehlo.triangular_solve"}


def compile_flags(mlir_text: str, options: CompileOptions) -> list[str]:
    """The iree-compile flags ``compile`` uses for this text and these options."""
    system_link = needs_system_link(mlir_text, options)
    if system_link:
        log.info("IREE %s workaround: float64 on llvm-cpu is linked as a system library, against the libm "
                 "its embedded ELF lacks", _release())
    if options.target is Target.CUDA and options.compiled_cuda_arch != options.cuda_arch:
        log.info("IREE %s workaround: it knows no CUDA target past sm_89; %s gets %s PTX, compiled for the GPU "
                 "when loaded", _release(), options.cuda_arch, options.compiled_cuda_arch)
    return options.flags(system_link=system_link)


def compile(
    mlir_text: str | bytes,
    options: CompileOptions | Target | str | None = None,
    *,
    cache: bool = True,
    producer: str | None = None,
) -> Artifact:
    """Compiles a StableHLO module with IREE, after the workarounds for its known bugs
    (``for_iree``): the one path from StableHLO text to an artifact.

    Args:
        mlir_text: the module as MLIR text (StableHLO, CHLO and func dialects), or as bytes:
            text, MLIR bytecode or a StableHLO portable artifact (``boundary.module_text``).
        options: CompileOptions, or just a target name; default llvm-cpu for this CPU.
        cache: ``False`` skips both the in-process and the on-disk cache.
        producer: recorded in the metadata, e.g. ``"irgrad 0.1.0"``.

    Raises:
        IRParseError: the text does not parse or verify.
        CompileError: IREE rejected the module; the message names the first
            error and the file holding the IR.
    """
    options = _options(options)
    mlir_text = for_iree(module_text(mlir_text))
    flags = compile_flags(mlir_text, options)
    key = _cache_key(mlir_text, flags, producer, options.transient_arena)

    if cache:
        _disk.cache_size_limit()  # a malformed $IRGRAD_CACHE_SIZE is an error before compiling, not after
        hit = _memory_cache.get(key)
        if hit is not None:
            _memory_cache.move_to_end(key)
            _stats["memory_hits"] += 1
            log.debug("memory cache hit %s (%s)", key[:12], options.describe())
            return dataclasses.replace(hit, metadata=copy.deepcopy(hit.metadata), cached="memory")
        artifact = _disk_get(key, options)
        if artifact is not None:
            _stats["disk_hits"] += 1
            log.debug("disk cache hit %s", cache_dir() / f"{key}.vmfb")
            _remember(key, artifact)
            return artifact
        log.debug("cache miss %s (%s)", key[:12], options.describe())

    text, metadata = _annotate(mlir_text, options, flags, producer)
    what = ", ".join(f"@{name}" for name in metadata["functions"])
    log.info("compiling %s for %s", what, options.describe())
    start = time.perf_counter()
    vmfb = seal(compile_vmfb(text, mlir_text, options, flags, functions=list(metadata["functions"])))
    log.info("compiled %s for %s in %.2f s (%s bytes)", what, options.describe(), time.perf_counter() - start,
             f"{len(vmfb):,}")
    _stats["compiles"] += 1
    artifact = Artifact(vmfb=vmfb, target=options.target.value, options=options, metadata=metadata)
    if cache:
        _remember(key, artifact)
        _disk_put(key, vmfb)
    return artifact


def _options(options: CompileOptions | Target | str | None) -> CompileOptions:
    if options is None:
        return CompileOptions()
    return options if isinstance(options, CompileOptions) else CompileOptions(target=options)


def host_program(mlir_text: str | bytes, options: CompileOptions | Target | str | None = None,
                 phase: str = "hal") -> str:
    """The host-side program IREE makes of the module, built as ``compile`` builds it
    (``iree-compile --compile-to=hal``, as text): its allocations, copies and dispatches, where
    a call's memory and copies can be read (``hal.device.queue.alloca``,
    ``hal.command_buffer.copy_buffer``). ``phase="stream"``: as the stream dialect leaves it,
    its allocations already laid out (``stream.resource.alloca``), before the kernels are
    compiled. Not cached."""
    options = _options(options)
    mlir_text = for_iree(module_text(mlir_text))
    flags = compile_flags(mlir_text, options)
    text, metadata = _annotate(mlir_text, options, flags, None)
    return compile_vmfb(text, mlir_text, options, [*flags, f"--compile-to={phase}"],
                        functions=list(metadata["functions"])).decode()


def peak_allocation(mlir_text: str | bytes, function: str,
                    options: CompileOptions | Target | str | None = None) -> int:
    """The most bytes a call of ``function`` has allocated at once, as IREE builds it for
    ``options``: its ``stream.resource.alloca`` and ``dealloca`` ops in program order, laid out
    (``host_program(..., phase="stream")``, what the host program's ``hal.device.queue.alloca``
    then allocate, without compiling the kernels: MobileNetV2's gradient in 21 s, not 37 to 54;
    static sizes, a dynamic one counts 0). What ``passes.differentiate``'s ``memory_limit`` is
    checked against when it is given this as ``allocated``."""
    program = host_program(mlir_text, options, phase="stream")
    sizes = dict(re.findall(r"(%c\d+) = arith.constant (\d+) : index", program))
    start = program.find(f"util.func public @{function}(")
    if start < 0:
        raise ValueError(f"IREE's program has no public function @{function}")
    body = program[start:]
    end = body.find("\n  util.func", 10)
    live: dict[str, int] = {}
    peak = 0
    for line in body[:end if end > 0 else None].splitlines():
        made = re.search(r"(%[\w]+), %[\w]+ = stream\.resource\.alloca .*\{(%c\d+)\} =>", line)
        if made:
            live[made.group(1)] = int(sizes.get(made.group(2), 0))
            peak = max(peak, sum(live.values()))
        freed = re.search(r"stream\.resource\.dealloca .*=> (%[\w]+) :", line)
        if freed:
            live.pop(freed.group(1), None)
    return peak


def _cache_key(mlir_text: str, flags: list[str], producer: str | None, arena: bool = False) -> str:
    text_hash = hashlib.sha256(mlir_text.encode()).hexdigest()
    parts = [SCHEMA, _CACHE_FORMAT, text_hash, flags, compiler_version(), producer]
    material = json.dumps(parts + ["transient_arena"] if arena else parts)
    return hashlib.sha256(material.encode()).hexdigest()


def _remember(key: str, artifact: Artifact) -> None:
    _memory_cache[key] = artifact
    while len(_memory_cache) > _MEMORY_CACHE_SIZE:
        _memory_cache.popitem(last=False)


def _disk_get(key: str, options: CompileOptions) -> Artifact | None:
    path = cache_dir() / f"{key}.vmfb"
    try:
        vmfb = path.read_bytes()
        metadata = read_metadata(vmfb)
    except (OSError, ArtifactError, ValueError):
        return None  # absent, unreadable or damaged: compile again and overwrite
    _disk.touch(path)  # used: evicted last
    return Artifact(vmfb=vmfb, target=options.target.value, options=options, metadata=metadata, cached="disk")


def _disk_put(key: str, vmfb: bytes) -> None:
    path = cache_dir() / f"{key}.vmfb"
    try:
        atomic_write(path, vmfb)
        _disk.evict(keep=path)
    except OSError as error:  # a read-only or full cache folder must not fail the compile
        log.debug("cache entry not written (%s)", error)


def _annotate(
    mlir_text: str, options: CompileOptions, flags: list[str], producer: str | None
) -> tuple[str, dict[str, Any]]:
    """Parses the module, writes irgrad's metadata into each public function's
    ``iree.reflection`` and returns the text to compile plus the metadata."""
    ir = mlir_bindings()
    arena = options.transient_arena and _ARENA_BLOCKERS.search(mlir_text) is None
    if options.transient_arena and not arena:
        log.warning("IREE %s workaround: no transient arena for a module with a loop or a conditional "
                    "(its emplacement pass fails on them: 'operand does not dominate this use')", _release())
    info = {
        "schema": SCHEMA,
        "target": options.target.value,
        "flags": flags,
        "options": {
            "cpu": options.effective_cpu,
            "triple": options.triple,
            "cuda_arch": options.cuda_arch,
            "rocm_arch": options.rocm_arch,
            "extra_flags": list(options.extra_flags),
            **({"transient_arena": True} if arena else {}),
        },
        "iree_compiler": compiler_version(),
        "producer": producer,
    }
    functions: dict[str, Any] = {}
    training: dict[str, Any] = {}
    unused: dict[str, list[int]] = {}
    peaks: dict[str, Any] = {}
    with ir.Context() as context:
        module = parse(mlir_text, context)
        info["work"] = estimate_work(module.operation)
        info["kernels"] = count_kernels(module.operation)
        info_json = json.dumps(info, sort_keys=True)
        for func in public_functions(module):
            signature = signature_of(func)
            functions[signature.name] = signature.to_json()
            entries = {}
            if "iree.reflection" in func.attributes:
                old = ir.DictAttr(func.attributes["iree.reflection"])
                entries = {old[i].name: old[i].attr for i in range(len(old))}
            entries[SIGNATURE_KEY] = ir.StringAttr.get(json.dumps(signature.to_json()))
            entries[ARTIFACT_KEY] = ir.StringAttr.get(info_json)
            if TRAIN_KEY in func.attributes:
                entries[TRAIN_KEY] = func.attributes[TRAIN_KEY]
                training[signature.name] = json.loads(ir.StringAttr(func.attributes[TRAIN_KEY]).value)
            # Arguments the function never reads: a call need not copy them to the device.
            body = func.regions[0].blocks
            never_read = [i for i, arg in enumerate(body[0].arguments) if next(iter(arg.uses), None) is None] \
                if body else []
            if never_read:
                entries[UNUSED_KEY] = ir.StringAttr.get(json.dumps(never_read))
                unused[signature.name] = never_read
            if PEAK_KEY in func.attributes:  # irgrad's estimate (passes.memory), carried as it is
                entries[PEAK_KEY] = func.attributes[PEAK_KEY]
                peaks[signature.name] = json.loads(ir.StringAttr(func.attributes[PEAK_KEY]).value)
            func.attributes["iree.reflection"] = ir.DictAttr.get(entries)
            if arena:
                _take_transient_arena(ir, func)
        if _LOOP.search(mlir_text) and not any(f.startswith("--iree-hal-target-device") for f in flags):
            _place_on_one_device(ir, module)
        if not functions:
            raise CompileError("the module has no public function to compile")
        attrs = module.operation.attributes
        name = ir.StringAttr(attrs["sym_name"]).value if "sym_name" in attrs else "module"
        # Debug info keeps every location of the original text ("-":line:col).
        text = module.operation.get_asm(enable_debug_info=True)
    metadata = {**info, "module": name, "functions": functions, "training": training, "unused": unused,
                "estimated_peak": peaks}
    return text, metadata


# Ops whose transients IREE 3.13 cannot emplace in an arena (its experimental pass assumes
# straight-line code: the 256-step scan MLP's gradient failed with "operand #1 does not
# dominate this use"): a module holding one compiles without arenas.
_ARENA_BLOCKERS = re.compile(r"\bstablehlo\.(while|case|if)\b")


_LOOP = re.compile(r"\bstablehlo\.while\b")


def _place_on_one_device(ir: Any, module: Any) -> None:
    """Marks every function of ``module`` as running on the one device IREE compiles for
    (``stream.affinity``; ``--iree-hal-target-backends`` names it ``__device_0``). IREE 3.13
    workaround: without it a loop's carried buffers have no device, and each iteration
    "transfers" every one it updates in place to the device, a copy of the whole buffer (the
    scan MLP's forward copied its 16 MiB output stack 256 times a call, 9x XLA's time). Only
    for loops that ``loops_run_in_place`` (``passes/lowering/loop_inits.py``, which gives their
    carries buffers of their own where it can): others IREE 3.13 gets wrong once placed."""
    # The passes' IR helpers, imported when a module is compiled (as in for_iree): loading
    # artifacts (a runtime-only install) never needs the compiler.
    from ..passes.lowering.legalize import loops_run_in_place

    if not loops_run_in_place(module.operation):
        log.info("IREE %s: a loop of this module is not one it updates in place correctly; its carries "
                 "are copied at every iteration", _release())
        return
    promise = ir.Attribute.parse("#hal.device.promise<@__device_0>")
    for op in module.body.operations:
        if op.operation.name == "func.func":
            op.operation.attributes["stream.affinity"] = promise


def _take_transient_arena(ir: Any, func: Any) -> None:
    """Gives ``func`` a last argument, a ``!hal.buffer`` marked ``iree.abi.transients``: IREE
    places the function's transient buffers in it instead of allocating them each call, and
    exports the size it needs (reflection ``iree.abi.transients.size[.constant]``), which the
    loader allocates once (``loader.Function``). irgrad's signature of ``func`` stays as it was."""
    buffer = ir.Type.parse("!hal.buffer")
    func.regions[0].blocks[0].add_argument(buffer, ir.Location.unknown())
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get([*ftype.inputs, buffer], ftype.results))
    attrs = list(ir.ArrayAttr(func.attributes["arg_attrs"])) if "arg_attrs" in func.attributes \
        else [ir.DictAttr.get({}) for _ in ftype.inputs]
    attrs.append(ir.DictAttr.get({"iree.abi.transients": ir.UnitAttr.get()}))
    func.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)


# Multiply-adds per unit of work: a float32 multiply-add in IREE's matmul kernels runs ~30×
# faster than one elementwise op's element (measured: 128×128 matmul vs 10k-element tanh/sin).
_MACS_PER_UNIT = 32
_CONV_LAYOUT = re.compile(r"\]x\[([^\]]*)\]")


# A dimension known only at run time counts as this many (a batch; a data-dependent loop's tape
# of steps). Measured on this 2-core VM, the gradients of the jax_dynamic MLP, attention and CNN
# ran 1.2-3.6x faster on local-sync than on local-task at batch 1, 32 and 256 alike, and those of
# the data-dependent while fixtures (tapes sized at run time) 15-20x: counting such modules as
# unknown work (so local-task) cost them that.
RUN_TIME_SIZE = 64


def estimate_work(op: Any) -> float:
    """A rough cost of running what ``op`` holds (a module: all its functions): elements
    produced by its ops (an op inside a loop counted once; a run-time dimension counted as
    ``RUN_TIME_SIZE``), plus multiply-adds of contractions and convolutions / ``_MACS_PER_UNIT``.
    ``loader.load`` runs modules of little work on ``local-sync``, where a call skips
    ``local-task``'s worker wake-ups."""
    ir = mlir_bindings()
    total = 0.0

    def visit(inner: Any) -> Any:
        nonlocal total
        for result in inner.results:
            t = result.type.maybe_downcast()
            if not isinstance(t, ir.RankedTensorType):
                continue
            elements = math.prod(d if d >= 0 else RUN_TIME_SIZE for d in t.shape)
            total += elements + elements * _contraction(inner) / _MACS_PER_UNIT
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return total


# Ops IREE runs as kernels of their own (what elementwise ops fuse into, not what fuses away).
_KERNEL_OPS = frozenset(f"stablehlo.{name}" for name in (
    "dot_general", "dot", "convolution", "reduce", "reduce_window", "select_and_scatter", "transpose", "gather",
    "scatter", "sort", "fft", "while", "case", "if"))


def count_kernels(op: Any) -> int:
    """How many of the ops ``op`` holds IREE runs as kernels of their own (``_KERNEL_OPS``;
    an op inside a loop counted once): a proxy for the dispatches of a call, each of which
    costs ``local-task`` a worker wake-up."""
    ir = mlir_bindings()
    count = 0

    def visit(inner: Any) -> Any:
        nonlocal count
        count += inner.name in _KERNEL_OPS
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return count


def _contraction(op: Any) -> int:
    """Multiply-adds per result element of a ``dot_general`` or ``convolution`` (else 0)."""
    ir = mlir_bindings()
    name = op.name
    if name not in ("stablehlo.dot_general", "stablehlo.convolution"):
        return 0
    lhs, rhs = ([d if d >= 0 else RUN_TIME_SIZE for d in ir.RankedTensorType(v.type).shape] for v in op.operands[:2])
    attrs = op.attributes
    if name == "stablehlo.dot_general":
        contracting = struct_fields(attrs["dot_dimension_numbers"]).get("lhs_contracting_dimensions", [])
        return math.prod(lhs[d] for d in contracting)  # type: ignore[union-attr]
    layout = _CONV_LAYOUT.search(str(attrs["dimension_numbers"])) if "dimension_numbers" in attrs else None
    kernel = [c.strip() for c in layout.group(1).split(",")] if layout else []
    out_features = rhs[kernel.index("o")] if "o" in kernel else 1
    return math.prod(rhs) // max(out_features, 1)


def compile_vmfb(text: str, original: str, options: CompileOptions, flags: list[str],
                 functions: list[str] | None = None) -> bytes:
    """Runs iree-compile on ``text`` in a child process held to ``options``' memory and time
    limits (``CompileOptions.compile_memory_limit`` / ``compile_time_limit``): a compile that
    runs away is a ``CompileError`` naming the functions and the limit, and this process and
    the machine survive it (one module once took iree-compile to 24 GB)."""
    from iree.compiler.tools.binaries import find_tool

    what = ", ".join(f"@{name}" for name in functions) if functions else "the module"
    memory, seconds = options.compile_memory_limit, options.compile_time_limit
    with tempfile.TemporaryDirectory(prefix="irgrad-compile-") as folder:
        out = os.path.join(folder, "module.vmfb")
        process = subprocess.Popen([find_tool("iree-compile"), "-", *flags, "-o", out],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _limit_address_space(process.pid, memory)
        try:
            _, stderr = process.communicate(text.encode(), timeout=seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise CompileError(
                f"compiling {what}: iree-compile ran past its time limit of {seconds:g} s and was stopped "
                "(raise it with CompileOptions(time_limit=...) or IRGRAD_COMPILE_TIMEOUT=<seconds>)") from None
        output = stderr.decode(errors="replace")
        if process.returncode == 0:
            return Path(out).read_bytes()
    if _OUT_OF_MEMORY.search(output):
        raise CompileError(
            f"compiling {what}: iree-compile ran out of memory at its limit of {format_bytes(memory)} "
            "(raise it with CompileOptions(memory_limit='24G') or IRGRAD_COMPILE_MEMORY=24G)",
            diagnostics=output)
    raise _compile_error(output, original, options)


_OUT_OF_MEMORY = re.compile(r"out of memory|Allocation failed|bad_alloc|failed to map segment|Cannot allocate memory")


def _limit_address_space(pid: int, limit: int) -> None:
    """Caps a child's address space (Linux's prlimit; elsewhere only the time limit holds).
    Set right after the child starts: what it maps before that is the loader's few pages."""
    try:
        import resource

        resource.prlimit(pid, resource.RLIMIT_AS, (limit, limit))
    except (ImportError, AttributeError, OSError, ValueError):
        pass


def _compile_error(output: str, mlir_text: str, options: CompileOptions) -> CompileError:
    """One clear line from IREE's diagnostics, and the IR saved next to it."""
    path = save_failed_ir(mlir_text, "compile-error")
    diagnostics = output.split("Diagnostics:", 1)[-1].split("\nInvoked with:", 1)[0].strip()
    lines = [line.strip() for line in diagnostics.splitlines() if line.strip()]
    first = next((line for line in lines if "error:" in line), None)
    if first is None:  # no diagnostic: iree-compile crashed
        crash = next((line for line in lines if "Stack dump" in line or "PLEASE submit" in line), None)
        first = "iree-compile crashed" + (f" ({crash})" if crash else "") if crash or not lines else lines[0]
    first = _clean_diagnostic(first)
    symbol = re.search(r"undefined symbol: (\w+)", first)
    if symbol and options.target is Target.LLVM_CPU:
        op = _LIBM_OPS.get(symbol.group(1), symbol.group(1))
        first = (
            f"f64 {op} is not supported by IREE {_release()}'s llvm-cpu backend "
            f"for {options.triple or 'this platform'}; use target vmvx or float32 ({first})"
        )
    # Locations in the diagnostics point into the original text: name the copy.
    if path is not None:
        first = re.sub(r'^(?:<stdin>|-|"-"):(?=\d)', f"{path}:", first)
        first = re.sub(r'loc\("(?:-|<stdin>)"', f'loc("{path}"', first)
    if len(first) > 400:
        first = first[:397] + "..."
    where = f" (IR written to {path})" if path else ""
    return CompileError(f"{first}{where}", path=str(path) if path else None, diagnostics=diagnostics)


def _clean_diagnostic(line: str) -> str:
    """``<unknown>:0: error: loc("a"("b")): msg`` -> ``error: msg (at "a"("b"))``."""
    line = re.sub(r"^<unknown>:0:\s*", "", line)
    m = re.search(r"(error|warning):\s*loc\(", line)
    if not m:
        return line
    depth, i = 1, m.end()
    while i < len(line) and depth:
        depth += {"(": 1, ")": -1}.get(line[i], 0)
        i += 1
    where = line[m.end():i - 1]
    rest = line[i:].lstrip(": ").strip()
    return f"{line[:m.start()]}{m.group(1)}: {rest} (at {where})"


def _release() -> str:
    """``3.13`` for compiler version ``3.13.0rc20261016``."""
    return ".".join(compiler_version().split(".")[:2])
