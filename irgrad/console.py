"""What the command line shows besides results: one-line errors, progress, logs, and the
``irgrad cache`` commands. ``cli.py`` declares the other commands.

Progress is rich's (typer's own dependency) and only on a terminal: piped output stays clean.
"""
from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Iterator
from typing import Any

import typer
from typer.core import TyperGroup

from . import runtime
from .runtime.options import format_bytes
from .commands import FAILURE, SOURCE, USAGE, CLIError, located, one_line

__all__ = ["MAX_MESSAGE", "ErrorLines", "State", "cache_app", "fail", "log_to_stderr", "progress"]


class State:
    debug = False  # set by the --debug global option for this invocation


# Some MLIR diagnostics carry a dump of the whole operation; one line stays readable.
MAX_MESSAGE = 800


def fail(message: str, code: int) -> int:
    """Writes ``irgrad: error: MESSAGE`` (one line, cut at ``MAX_MESSAGE``) and returns ``code``."""
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE] + "... (cut; 'irgrad --debug' shows all of it)"
    sys.stderr.write(f"irgrad: error: {located(message)}\n")
    sys.stderr.flush()
    return code


class ErrorLines(TyperGroup):
    """Runs the command and turns every error into one ``irgrad: error:`` line."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        State.debug = False
        SOURCE.set(None)
        try:
            result = super().main(args, prog_name or "irgrad", complete_var, standalone_mode=False, **extra)
            code = result if isinstance(result, int) else 0
        except typer.Abort:
            code = fail("aborted", FAILURE)
        except CLIError as error:
            if State.debug and error.exit_code != USAGE:
                raise
            code = fail(str(error), error.exit_code)
        except Exception as error:
            # click's usage errors carry their exit status and a message (duck typing:
            # typer vendors click in new releases, so its classes differ by version).
            if hasattr(error, "exit_code") and hasattr(error, "format_message"):
                ctx = getattr(error, "ctx", None)
                hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
                code = fail(" ".join(error.format_message().split()) + hint, error.exit_code)
            elif State.debug:
                raise
            else:
                code = fail(one_line(error), FAILURE)
        if not standalone_mode:
            return code
        sys.exit(code)


@contextlib.contextmanager
def progress(message: str, stream: Any = None, delay: float = 1.0) -> Iterator[None]:
    """rich's spinner, ``message`` and the elapsed time on ``stream`` (stderr) while a step runs.

    Only on a terminal, and only once the step has taken ``delay`` seconds; cleared at the end.
    """
    stream = stream or sys.stderr
    if not (hasattr(stream, "isatty") and stream.isatty()):
        yield
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    display = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                       console=Console(file=stream, force_terminal=True), transient=True)
    display.add_task(message, total=None)
    done, shown = threading.Event(), []

    def show_later() -> None:
        if not done.wait(delay):  # quick steps show nothing
            display.start()
            shown.append(True)

    thread = threading.Thread(target=show_later, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if shown:
            display.stop()


def log_to_stderr(level: int = logging.INFO) -> None:
    """``irgrad --verbose``: the ``irgrad`` loggers' records on stderr (once per process)."""
    logger = logging.getLogger("irgrad")
    logger.setLevel(level)
    if not any(getattr(h, "_irgrad_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("irgrad: %(name)s: %(message)s"))
        handler._irgrad_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)


cache_app = typer.Typer(
    name="cache",
    help="The compile cache: $IRGRAD_CACHE_DIR (default ~/.cache/irgrad), capped at $IRGRAD_CACHE_SIZE "
         "(default 2G; least recently used entries go first).")


@cache_app.callback(invoke_without_command=True)
def _cache(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:  # bare `irgrad cache`: its help, as bare `irgrad`
        typer.echo(ctx.get_help())


@cache_app.command("info")
def cache_info() -> None:
    """Show the cache's location, entries, size and cap."""
    typer.echo(runtime.cache_info().describe())


@cache_app.command("clear")
def cache_clear() -> None:
    """Delete every cached artifact (all compiler versions) and the failed IR kept for bug reports."""
    count, freed = runtime.clear_cache()
    typer.echo(f"{runtime.cache_root()}: deleted {count} entr{'y' if count == 1 else 'ies'}, "
               f"{format_bytes(freed)} freed")
