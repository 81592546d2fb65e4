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
    """The bytes or file are not a usable IREE artifact for this runtime."""


class DeviceError(RuntimeError):
    """A runtime device is not present, cannot be created, or cannot run the artifact."""


def iree_message(error: BaseException) -> str:
    """The first line of an IREE error without its C source location prefix.

    ``Error creating vm module: c/runtime/src/.../archive.c:122: INVALID_ARGUMENT; FlatBuffer ...``
    becomes ``INVALID_ARGUMENT; FlatBuffer ...``.
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else type(error).__name__
    match = re.search(r"\S+\.(?:c|cc|h):\d+: (.*)$", text)
    return match.group(1) if match else text
