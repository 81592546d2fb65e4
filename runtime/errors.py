"""Exceptions raised by irgrad.runtime.

Each error's message is one line that says what went wrong and, where it
helps, what to do about it.
"""

from __future__ import annotations

import re

from ..boundary import IRError


class CompileError(RuntimeError):
    """IREE could not compile a module.

    ``path`` is the file where the failing IR was written (``None`` when it
    could not be written); ``diagnostics`` holds IREE's full output.
    """

    def __init__(self, message: str, *, path: str | None = None, diagnostics: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.diagnostics = diagnostics


# The MLIR text does not parse or verify: the one error every layer raises for bad IR.
IRParseError = IRError


class ArtifactError(ValueError):
    """The bytes or file are not a usable IREE artifact for this runtime (a ``ValueError``).

    Raised by ``irgrad.load`` / ``irgrad.runtime.load`` and the CLI's ``run``/``inspect``, before
    anything runs, when the file is not a ``.vmfb``, is truncated, or its seal or checksums do
    not match (damaged in transit); when its metadata sidecar is not valid JSON; or when it
    was built by another IREE release (artifacts only load in the release that built them: the
    message says which built it, and to recompile); or when it is MLIR, not yet compiled (the
    message says how to compile it). The message is one line naming the file.

    Example::

        try:
            module = ig.load("model.vmfb")
        except ig.ArtifactError as error:
            print(error)          # "model.vmfb: not a valid IREE artifact (.vmfb): digest mismatch"
    """


class DeviceError(RuntimeError):
    """A runtime device is not present, cannot be created, or cannot run the artifact (a
    ``RuntimeError``).

    Raised by ``irgrad.load(..., device=...)`` and ``Module`` for an unknown driver name (the
    message lists the known ones), a driver this machine cannot create (``"cuda"`` without a
    GPU: the message lists the usable drivers), or an artifact compiled for another target
    (a CUDA artifact on ``local-task``: the message says which target built it); and by
    ``irgrad profile`` when IREE's benchmark tool fails. ``irgrad.runtime.available_drivers()``
    tells which devices are usable before loading.
    """


def iree_message(error: BaseException) -> str:
    """The first line of an IREE error without its C source location prefix.

    ``Error creating vm module: c/runtime/src/.../archive.c:122: INVALID_ARGUMENT; FlatBuffer ...``
    becomes ``INVALID_ARGUMENT; FlatBuffer ...``.
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else type(error).__name__
    match = re.search(r"\S+\.(?:c|cc|h):\d+: (.*)$", text)
    return match.group(1) if match else text


# How MLIR starts: the bytecode magic (a StableHLO portable artifact is MLIR bytecode too), or text
# whose first statement is a module, a function, an attribute alias or a location alias.
_MLIR_BYTECODE = b"ML\xefR"
_MLIR_TEXT = re.compile(r"\A(?:\s|//[^\n]*\n)*(?:module\b|func\.func\b|\"?builtin\.module|#\w+\s*=)")


def not_an_artifact(data: bytes, reason: str) -> ArtifactError:
    """The ArtifactError for bytes IREE cannot load as a module: MLIR (text, bytecode, a StableHLO
    portable artifact), said to be MLIR with how to compile it; anything else with IREE's ``reason``."""
    head = bytes(data[:4096])
    if head.startswith(_MLIR_BYTECODE) or _MLIR_TEXT.match(head.decode("utf-8", "replace")):
        kind = "MLIR bytecode" if head.startswith(_MLIR_BYTECODE) else "MLIR text"
        return ArtifactError(f"this is {kind} (StableHLO), not a compiled artifact: compile it first, "
                             "e.g. irgrad compile model.mlir -o model.vmfb (add --grad for its gradient), "
                             "or ig.compile(text).save('model.vmfb') in Python")
    return ArtifactError(f"not a valid IREE artifact (.vmfb): {reason}")
