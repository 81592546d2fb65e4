"""The IR boundary every layer shares: element types and dtype names, the one error for bad
MLIR, and parsing with one-line diagnostics.

``passes/`` (IR transformations), ``runtime/`` (IREE) and the frontend all read and write
StableHLO through these names, so a dtype is spelled and a parse failure is reported the same
way wherever it happens. This module imports nothing else from irgrad, and it loads the MLIR
bindings (``iree.compiler``) only when it parses: a runtime-only install can import it.
"""
from __future__ import annotations

import re
from typing import Any

__all__ = ["DTYPES", "ELEMENT_DTYPES", "IRError", "dtype_of_element", "spelling_of_dtype",
           "diagnostic", "parse", "respell_foreign"]

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


def diagnostic(error: Exception) -> str:
    """The first diagnostic of an ``MLIRError`` as one line: ``line L:C: message``."""
    diagnostics = getattr(error, "error_diagnostics", None) or []
    if diagnostics:
        first = diagnostics[0]
        loc = re.search(r":(\d+):(\d+)", str(first.location))
        where = f"line {loc.group(1)}:{loc.group(2)}: " if loc else ""
        return where + " ".join(str(first.message).split())
    return " ".join(str(error).split()) or type(error).__name__


# Ops other producers print in dialects IREE's context lacks, and their StableHLO/CHLO
# spelling (TensorFlow's StableHLO export prints XLA's erf as mhlo.erf).
_FOREIGN = [(re.compile(r"\bmhlo\.erf\s+(%[\w#.$-]+)\s*:\s*(tensor<[^>]*>)"), r"chlo.erf \1 : \2 -> \2")]


def respell_foreign(text: str) -> str:
    """Rewrite known non-StableHLO spellings (``mhlo.erf``) into StableHLO/CHLO."""
    if "mhlo." not in text:
        return text
    for pattern, replacement in _FOREIGN:
        text = pattern.sub(replacement, text)
    return text


def parse(text: str, context: Any) -> Any:
    """Parse and verify StableHLO/CHLO/func text in ``context`` (an ``ir.Context``); IRError
    naming the first diagnostic's line otherwise."""
    # The MLIR bindings come with the compiler: loaded here, so importing this module needs
    # only what a runtime-only install has.
    from iree.compiler import ir

    if not isinstance(text, str):
        raise TypeError(f"expected MLIR text as str, got {type(text).__name__}")
    try:
        return ir.Module.parse(respell_foreign(text), context)
    except ir.MLIRError as error:
        raise IRError(f"invalid MLIR: {diagnostic(error)}") from None
