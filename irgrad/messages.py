"""The command line's one-line errors: ``CLIError`` with its exit status, ``one_line`` for any
other exception, and the "did you mean" of a name that names nothing. A leaf: the full CLI
(``commands``, ``console``) and the runtime-only install's (``artifact_cli``, ``values``) share it.

Errors that a command line reports as they are raise ``CLIError``, which carries the exit
status: ``USAGE`` (2) for a bad argument or a missing file, ``FAILURE`` (1) for anything that
fails while running.
"""
from __future__ import annotations

from .boundary import suggestion as did_you_mean

__all__ = ["USAGE", "FAILURE", "CLIError", "one_line", "did_you_mean"]

USAGE = 2  # click's exit status for a bad command line
FAILURE = 1


class CLIError(Exception):
    """An error the CLI reports as one line, with its exit status."""

    def __init__(self, message: str, exit_code: int = FAILURE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def one_line(error: BaseException) -> str:
    """``error`` as a single line of text.

    Errors of an unexpected kind are prefixed with their type and point at
    ``irgrad --debug`` for the traceback.
    """
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        return f"{error.filename}: {error.strerror}"
    if isinstance(error, KeyError) and error.args:
        text = str(error.args[0])
    else:
        text = str(error)
    text = " ".join(text.split()) or type(error).__name__
    expected = (CLIError, ValueError, LookupError, RuntimeError, TypeError, OSError)
    if not isinstance(error, expected):
        text = f"{type(error).__name__}: {text} (run 'irgrad --debug ...' for the traceback)"
    return text
