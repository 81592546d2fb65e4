"""The IR boundary every layer shares: element types and dtype names, the one error for bad
MLIR, and parsing with one-line diagnostics.

``passes/`` (IR transformations), ``runtime/`` (IREE) and the frontend all read and write
StableHLO through these names, so a dtype is spelled and a parse failure is reported the same
way wherever it happens. This module imports nothing else from irgrad, and it loads the MLIR
bindings (``iree.compiler``) only through ``mlir_bindings``, on first use: a runtime-only install can import it.
"""
from __future__ import annotations

import difflib
import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["DTYPES", "ELEMENT_DTYPES", "IRError", "dtype_of_element", "spelling_of_dtype",
           "diagnostic", "parse", "respell_foreign", "module_text", "producer_cause",
           "argument_names", "result_names", "RESULT_NAME", "failures_dir", "save_failed_ir", "mlir_bindings",
           "struct_fields"]

# numpy-style dtype name -> MLIR element type spelling. StableHLO's signless iN is signed.
DTYPES: dict[str, str] = {
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "ui8", "uint16": "ui16", "uint32": "ui32", "uint64": "ui64",
    "bool": "i1",
}
# MLIR element type spelling -> dtype name; the explicitly signed siN read as intN.
ELEMENT_DTYPES: dict[str, str] = {**{v: k for k, v in DTYPES.items()},
                                  **{f"si{bits}": f"int{bits}" for bits in (8, 16, 32, 64)}}


class IRError(ValueError):
    """Malformed or invalid MLIR: a parse or verifier failure, or a type irgrad cannot handle."""


def spelling_of_dtype(dtype: str) -> str:
    """``'float32'`` -> ``'f32'``; TypeError naming the supported dtypes otherwise."""
    spelling = DTYPES.get(dtype)
    if spelling is None:
        raise TypeError(f"unsupported dtype {dtype!r}; supported: {', '.join(DTYPES)}")
    return spelling


def dtype_of_element(spelling: str) -> str:
    """``'f32'`` -> ``'float32'``; TypeError naming the supported element types otherwise."""
    name = ELEMENT_DTYPES.get(spelling)
    if name is None:
        raise TypeError(f"unsupported element type {spelling}; supported: {', '.join(ELEMENT_DTYPES)}")
    return name


# IR that failed to verify or compile is kept for the bug report, in one folder, and only the
# newest few: a service that fails in a loop must not fill the disk.
FAILURES_KEPT = 20


def failures_dir() -> Path:
    """``$IRGRAD_CACHE_DIR/failed`` (default ``~/.cache/irgrad/failed``): where IR that
    failed to verify or compile is written."""
    root = os.environ.get("IRGRAD_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "irgrad")
    return Path(root) / "failed"


def save_failed_ir(text: str, kind: str) -> Path | None:
    """Writes ``text`` as ``<kind>-<digest>.mlir`` in ``failures_dir()``, keeping the
    ``FAILURES_KEPT`` newest files there; None when it cannot be written."""
    folder = failures_dir()
    path = folder / f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.mlir"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{path.name}.{os.getpid()}.tmp"
        tmp.write_text(text)
        os.replace(tmp, path)  # whole or not at all
        kept = sorted(folder.glob("*.mlir"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[FAILURES_KEPT:]:
            old.unlink(missing_ok=True)
    except OSError:
        return None
    return path


def diagnostic(error: Exception) -> str:
    """The first diagnostic of an ``MLIRError`` as one line: ``line L:C: message``."""
    diagnostics = getattr(error, "error_diagnostics", None) or []
    if diagnostics:
        first = diagnostics[0]
        loc = re.search(r":(\d+):(\d+)", str(first.location))
        where = f"line {loc.group(1)}:{loc.group(2)}: " if loc and loc.group(1) != "0" else ""
        return where + " ".join(str(first.message).split())
    return " ".join(str(error).split()) or type(error).__name__


# Ops other producers print in dialects IREE's context lacks, and their StableHLO/CHLO
# spelling (TensorFlow's StableHLO export prints XLA's erf as mhlo.erf).
_FOREIGN = [(re.compile(r"\bmhlo\.erf\s+(%[\w#.$-]+)\s*:\s*(tensor<[^>]*>)"), r"chlo.erf \1 : \2 -> \2")]
# A hex i1 constant. MLIR before 2025 (TensorFlow 2.21's) packs eight elements per byte,
# least significant bit first; IREE 3.13's MLIR reads one byte per element.
_I1_HEX = re.compile(r'dense<"0x([0-9A-Fa-f]*)">(\s*:\s*tensor<((?:\d+x)*)i1>)')


def _unpack_i1(match: re.Match) -> str:
    data, dims = bytes.fromhex(match.group(1)), [int(d) for d in match.group(3).split("x") if d]
    n = 1
    for d in dims:
        n *= d
    if len(data) == n or len(data) != (n + 7) // 8:
        return match.group(0)  # one byte per element already (or not this producer's form)
    if len(data) == 1 and data[0] in (0x00, 0xFF):
        return f"dense<{'true' if data[0] else 'false'}>{match.group(2)}"  # the packed form's splat
    bits = bytes((data[i // 8] >> (i % 8)) & 1 for i in range(n))
    return f'dense<"0x{bits.hex().upper()}">{match.group(2)}'


def respell_foreign(text: str) -> str:
    """Rewrite known non-StableHLO spellings (``mhlo.erf``) into StableHLO/CHLO, and
    bit-packed ``i1`` constants into one byte per element."""
    if "mhlo." in text:
        for pattern, replacement in _FOREIGN:
            text = pattern.sub(replacement, text)
    if "xi1>" in text or "<i1>" in text:
        text = _I1_HEX.sub(_unpack_i1, text)
    return text


# What a producer did when IREE's MLIR cannot read its module: (pattern in the diagnostic or
# the text, the cause in the producer's terms).
_CAUSES = [
    (re.compile(r"bytecode version|unsupported version|cannot parse.*bytecode", re.I),
     "MLIR bytecode from a newer MLIR than IREE 3.13's: export text instead "
     "(jax.jit(f).lower(...).as_text(), or stage='stablehlo' in TensorFlow)"),
    (re.compile(r"'mhlo\.|\bmhlo\.[a-z_]+\b"),
     "the module holds MHLO ops, not StableHLO: export StableHLO (TensorFlow: stage='stablehlo'; "
     "JAX: .as_text())"),
    (re.compile(r"'tf\.|\btf\.[A-Z]\w*"),
     "the module holds TensorFlow ops that were not legalized: export with "
     "tf.function(jit_compile=True).experimental_get_compiler_ir(...)(stage='stablehlo')"),
    (re.compile(r"'torch\.|\btorch\.aten\."),
     "the module holds torch dialect ops: export with torch_mlir.fx.export_and_import(..., "
     "output_type='stablehlo')"),
]


def producer_cause(message: str, text: str = "") -> str | None:
    """The producer-side cause of a parse failure, when a known one matches."""
    for pattern, cause in _CAUSES:
        if pattern.search(message) or (text and pattern.search(text[:200_000])):
            return cause
    return None


BYTECODE_MAGIC = b"ML\xefR"


def module_text(data: str | bytes) -> str:
    """StableHLO text from any form producers ship: text, MLIR bytecode, or a StableHLO
    portable artifact (VHLO bytecode: ``jax.export``'s ``mlir_module_serialized``).

    Raises IRError when the bytes are none of these or do not parse.
    """
    if isinstance(data, str):
        return data
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"expected MLIR as str or bytes, got {type(data).__name__}")
    data = bytes(data)
    if not data.startswith(BYTECODE_MAGIC):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise IRError("neither MLIR text (not UTF-8) nor MLIR bytecode (no 'ML\\xefR' header)") from None
    # After the magic: the bytecode version (a one-byte prefix varint below 128), then the
    # producer's name, NUL-terminated ("StableHLO_v1.15.0" for a portable artifact).
    named = data[5:100].split(b"\0", 1)[0] if len(data) > 5 and data[4] & 1 else b""
    producer = re.sub(r"[^ -~]", "?", named.decode("ascii", errors="replace"))[:40] or "an unknown producer"
    what = f"MLIR bytecode (written by {producer})"
    done = _run_tool("iree-opt", data, ["--allow-unregistered-dialect", "--mlir-print-debuginfo"], what)
    if done.returncode != 0:
        raise IRError(f"unreadable {what}: {_first_error(done)}")
    if re.search(r"^\s*(?:%[^=\n]*=\s*)?\"?vhlo\.", done.stdout, re.M):
        return _legalize_vhlo(data, producer, done.stdout)
    return done.stdout


def _run_tool(tool: str, data: bytes, flags: list[str], what: str) -> Any:
    """IREE's ``tool`` run on the bytes ``data`` as a child process (CompletedProcess, text):
    MLIR's bytecode reader is not hardened, and damaged bytes can crash it (an LLVM fatal
    error), hang it or make it read past its buffer, which must not take the caller down.
    IRError naming ``what`` when it takes too long."""
    import subprocess
    import tempfile
    from iree.compiler.tools.binaries import find_tool  # the compiler's tools: only to read bytes

    with tempfile.TemporaryDirectory(prefix="irgrad-read-") as folder:
        path = os.path.join(folder, "module.mlirbc")
        with open(path, "wb") as f:
            f.write(data)
        try:
            return subprocess.run([find_tool(tool), path, *flags], capture_output=True, text=True,
                                  errors="replace", timeout=60 + len(data) / 1e5)
        except subprocess.TimeoutExpired:
            raise IRError(f"unreadable {what}: the reader did not finish (a damaged file?)") from None


def _first_error(done: Any) -> str:
    """The first error an IREE tool printed, or how it ended."""
    first = next((line for line in done.stderr.splitlines() if "error" in line.lower()), "")
    message = re.sub(r"^.*?error:\s*", "", first).strip()
    if not message:
        return f"the reader failed (exit status {done.returncode}; a damaged file?)"
    cause = producer_cause(message)
    return message + (f" ({cause})" if cause else "")


_DUMP = re.compile(r"^// -----// IR Dump Before ChloLegalizeToStablehloPass\b.*$", re.M)
_FUNC_NAME = re.compile(r"func\.func\s+(?:\w+\s+)?@([\w.$-]+)")
_MODULE = re.compile(r"^module\b.*\{[ \t]*$", re.M)  # its first line: name and attributes


def _legalize_vhlo(data: bytes, producer: str, printed: str) -> str:
    """A portable artifact's StableHLO, converted by IREE's own VHLO legalization (``printed``:
    the artifact as VHLO text, whose module line is kept).

    IREE 3.13's Python bindings register no VHLO pass, but ``iree-compile`` runs the
    conversion first when it compiles one: the IR it prints before legalizing CHLO is each
    function in StableHLO, unchanged but for VHLO's spelling.
    """
    what = f"StableHLO portable artifact ({producer})"
    done = _run_tool("iree-compile", data, [
        "--iree-input-type=stablehlo", "--compile-to=input", "--mlir-print-ir-before=chlo-legalize-to-stablehlo",
        "--mlir-disable-threading", "--mlir-print-local-scope", "-o", os.devnull], what)
    functions = {}
    for dump in _DUMP.split(done.stderr)[1:]:
        body = dump.strip()
        name = _FUNC_NAME.search(body)
        if name:  # each function once: later dumps of it follow IREE's own rewrites
            functions.setdefault(name.group(1), body)
    if not functions:
        raise IRError(f"cannot convert this {what} to StableHLO with IREE 3.13: {_first_error(done)}")
    header = _MODULE.search(printed)
    return (header.group(0) if header else "module {") + "\n" + "\n".join(functions.values()) + "\n}\n"


# Arguments named by an arg attribute rather than a location.
_NAME_ATTRS = ("jax.arg_info", "tf.name", "torch.name")


def suggestion(given: object, names: Iterable[str | None], prefix: str = "") -> str:
    """``"; did you mean 'w1'?"`` (``"@loss"`` with ``prefix`` ``"@"``) when ``given`` is close
    to one of ``names`` (difflib, ignoring case), else ``""``: the "did you mean" of every
    error about a name (``--func``, ``--wrt``, an artifact's function, an ``.npz`` key)."""
    known = {n.lower(): n for n in reversed([n for n in names if n])}
    close = difflib.get_close_matches(str(given).lower(), list(known), n=1)
    if not close or known[close[0]] == given:
        return ""
    return f"; did you mean {prefix}{known[close[0]]}?" if prefix else f"; did you mean {known[close[0]]!r}?"


def argument_names(func_op: Any) -> list[str | None]:
    """The name each argument of a ``func.func`` has where its producer gave one: a name
    location on the block argument (irgrad's TensorSpec names, JAX's ``as_text(debug_info=
    True)``: ``loc("x")``, ``loc("params['w']")``) or a name attribute. A name that several
    arguments share (TensorFlow calls every one ``XLA_Args``) names none of them, and
    ``arg<i>`` for argument ``i`` (a tracer's positional default) is no name."""
    block = func_op.regions[0].blocks[0]
    arg_attrs = func_op.attributes["arg_attrs"] if "arg_attrs" in func_op.attributes else None
    names: list[str | None] = []
    for i, arg in enumerate(block.arguments):
        name = getattr(arg.location, "name_str", None)
        if arg_attrs is not None:
            attrs = arg_attrs[i]
            for key in _NAME_ATTRS:
                if key in attrs:
                    name = str(attrs[key]).strip('"')
        names.append(name if name and name != f"arg{i}" else None)  # arg<i>: a positional default
    return [n if n is not None and names.count(n) == 1 else None for n in names]


# The result attribute irgrad names results with (the frontend's dict keys, the derived
# functions' ``d_w``, ``m_w``, ``step``...); JAX's ``jax.result_info`` is read too.
RESULT_NAME = "irgrad.name"
_JAX_PATH = re.compile(r"result((?:\[\d+\])*)(.*)")


def _jax_result_name(info: str) -> str | None:
    """JAX's result path as a name: ``result['loss']`` -> ``loss``, ``result['p']['w']`` ->
    ``p['w']``; ``result`` and ``result[0]`` are positions, no name."""
    match = _JAX_PATH.fullmatch(info)
    if match is None:
        return info or None
    rest = match.group(2)
    if not rest:
        return None
    key = re.match(r"\['([^']*)'\]|\.(\w+)", rest)  # a dict key or a dataclass field first
    if key is None or match.group(1):
        return info
    return (key.group(1) or key.group(2)) + rest[key.end():]


def result_names(func_op: Any) -> list[str | None]:
    """The name each result of a ``func.func`` has where its producer gave one: irgrad's
    ``irgrad.name`` result attribute or JAX's ``jax.result_info`` (its positional ``result``
    and ``result[i]`` are no names). A name that several results share names none of them."""
    ir = mlir_bindings()

    attrs = func_op.attributes
    count = len(ir.FunctionType(ir.TypeAttr(attrs["function_type"]).value).results)
    res_attrs = attrs["res_attrs"] if "res_attrs" in attrs else None
    names: list[str | None] = [None] * count
    for i in range(min(count, len(res_attrs) if res_attrs is not None else 0)):
        entry = ir.DictAttr(res_attrs[i])
        if RESULT_NAME in entry:
            names[i] = ir.StringAttr(entry[RESULT_NAME]).value or None
        elif "jax.result_info" in entry:
            names[i] = _jax_result_name(ir.StringAttr(entry["jax.result_info"]).value)
    return [n if n is not None and names.count(n) == 1 else None for n in names]


_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_ESCAPE = re.compile(r"\\([0-9A-Fa-f]{2}|.)")


def _check_strings(text: str) -> None:
    """IRError when an MLIR string literal escapes bytes that are not UTF-8 (``"\\FF"``): the
    bindings abort the process reading such a name or attribute, so it is refused here."""
    if "\\" not in text:
        return
    for match in _STRING.finditer(text):
        body = match.group(1)
        if "\\" not in body:
            continue
        raw = _ESCAPE.sub(lambda m: "\x00" if len(m.group(1)) == 1 else chr(int(m.group(1), 16)), body)
        try:
            raw.encode("latin-1", errors="strict").decode("utf-8")
        except UnicodeEncodeError:
            continue  # real non-ASCII characters beside escapes: already text
        except UnicodeDecodeError:
            line = text.count("\n", 0, match.start()) + 1
            column = match.start() - text.rfind("\n", 0, match.start())
            raise IRError(f"invalid MLIR: line {line}:{column}: a string literal escapes bytes that are not "
                          "UTF-8 text") from None


# Brackets open deeper than this are refused before MLIR parses them: its parser recurses once
# a level on the calling thread's stack, and 5,000 nested `module {` or a `dense<[[[...` 20,000
# deep crashed the process (SIGSEGV). Real modules nest a few dozen levels.
MAX_NESTING = 1000
# Per byte: 1 opens a level, 255 (-1 as int8) closes one.
_NESTING_STEP = bytes(1 if chr(b) in "{[(<" else 255 if chr(b) in "}])>" else 0 for b in range(256))


def check_nesting(text: str) -> None:
    """IRError naming the line where ``text`` nests brackets (``{ [ ( <``) more than
    ``MAX_NESTING`` deep. Brackets inside string literals count too (harmlessly: a string
    would need a thousand unclosed ones), and ``->`` closes nothing."""
    if sum(text.count(c) for c in "{[(<") <= MAX_NESTING:
        return
    import numpy as np

    data = text.replace("->", "-=").encode()
    steps = np.frombuffer(data.translate(_NESTING_STEP), np.int8)
    depth = np.cumsum(steps, dtype=np.int32)
    deepest = int(depth.max(initial=0))
    if deepest <= MAX_NESTING:
        return
    at = int(np.argmax(depth > MAX_NESTING))
    line = data.count(b"\n", 0, at) + 1
    column = at - data.rfind(b"\n", 0, at)
    raise IRError(f"invalid MLIR: line {line}:{column}: brackets nest deeper than {MAX_NESTING} levels "
                  f"({deepest}); MLIR's parser would overflow its stack on them")


_STRUCT_FIELD = re.compile(r"(\w+)\s*=\s*(\[[^\]]*\]|-?\d+)")


def struct_fields(attribute: Any) -> dict[str, list[int] | int]:
    """The integer fields of a printed StableHLO struct attribute,
    ``#stablehlo.dot<lhs_contracting_dimensions = [1], ...>`` -> ``{"lhs_contracting_dimensions": [1]}``
    (fields left out when empty are absent). IREE ships no StableHLO Python bindings (no
    ``iree.compiler.dialects.stablehlo``, so no typed accessors such as
    ``DotDimensionNumbers.lhs_contracting_dimensions``): the printed form is what there is to read."""
    out: dict[str, list[int] | int] = {}
    for key, value in _STRUCT_FIELD.findall(str(attribute)):
        out[key] = [int(v) for v in value[1:-1].split(",") if v.strip()] if value[0] == "[" else int(value)
    return out


def mlir_bindings() -> Any:
    """The MLIR Python bindings shipped with IREE (``iree.compiler.ir``): the one place
    outside ``passes/`` (whose shim is ``passes/ir/mlir.py``) that imports them. They come with
    the compiler, so they are loaded on first use: importing this module, or any of
    ``runtime/``, needs only what a runtime-only install has."""
    from iree.compiler import ir

    return ir


def parse(text: str | bytes, context: Any) -> Any:
    """Parse and verify StableHLO/CHLO/func text (or bytecode, ``module_text``) in ``context``
    (an ``ir.Context``); IRError naming the first diagnostic's line otherwise."""
    ir = mlir_bindings()
    text = module_text(text)
    check_nesting(text)
    _check_strings(text)
    if not text.endswith("\n"):
        # MLIR's lexer reads past the end of a text cut inside a string literal (a truncated
        # file) to place its error, and may crash: a final newline ends the literal first.
        text += "\n"
    try:
        return ir.Module.parse(respell_foreign(text), context)
    except ir.MLIRError as error:
        message = diagnostic(error)
        cause = producer_cause(message, text)
        raise IRError(f"invalid MLIR: {message}" + (f" ({cause})" if cause else "")) from None
