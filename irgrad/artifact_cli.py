"""The artifact half of the ``irgrad`` command line, ``inspect`` and ``run``, on IREE's runtime
and numpy alone.

The full install's ``irgrad`` (``cli.py``, typer) calls these functions; the runtime-only
install (``runtime-dist/``: no compiler, no typer) has no ``cli.py``, and its ``irgrad``
command is ``main`` below, the same two commands with the same options, output and one-line
errors, parsed by ``argparse``:

    irgrad inspect ART.vmfb [--json]
    irgrad run ART.vmfb [--function F] [--input SPEC ...] [--device D] [--output SPEC ...]

Errors are ``messages.CLIError``s, one line each, with their exit status.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from . import runtime
from .messages import FAILURE, USAGE, CLIError, did_you_mean, one_line
from .runtime.vmfb import read_sidecar, signatures_from_metadata
from .values import read_run_specs, report_results
from .version import __version__

__all__ = [
    "pick_function", "signature_lines", "artifact_metadata", "describe_artifact", "training_lines",
    "inspect_artifact", "run_artifact", "main",
]

def pick_function(names: Sequence[str], function: str | None, artifact: object) -> str:
    """``function`` if ``names`` has it, or the only name when it is None; else a usage error naming ``artifact``."""
    if function is None:
        if len(names) != 1:
            raise CLIError(f"{artifact} has {len(names)} functions; choose one with --function "
                           f"({', '.join(names) or 'none'})", USAGE)
        return names[0]
    if function not in names:
        raise CLIError(f"no function {function!r} in {artifact}; functions: {', '.join(names) or 'none'}"
                       f"{did_you_mean(function, names)}", USAGE)
    return function


# ----- inspect --------------------------------------------------------------------------

def signature_lines(functions: dict) -> list[str]:
    """One indented line per function signature (``  f(2x3xf32) -> (f32)``), in order."""
    return [f"  {signature!r}" for signature in functions.values()]


def _mib(size: int) -> str:
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def peak_lines(metadata: dict) -> list[str]:
    """One line per function whose estimated peak the artifact records (``irgrad compile``
    records it: ``passes.estimate_peak``), under an ``estimated peak`` heading; none without."""
    peaks = metadata.get("estimated_peak") or {}
    lines = []
    for name, peak in peaks.items():
        parts = [f"results {_mib(peak['results'])}"]
        if peak.get("tape"):
            parts.append(f"tape {_mib(peak['tape'])}")
        if peak.get("loops"):
            parts.append(f"loop state {_mib(peak['loops'])}")
        bound = "at least " if peak.get("dynamic") else ""
        lines.append(f"  {name}: {bound}{_mib(peak['peak'])} over its arguments' {_mib(peak['arguments'])} "
                     f"({', '.join(parts)})")
    return ["estimated peak memory per call:", *lines] if lines else []


def artifact_metadata(path: Path) -> tuple[bytes, dict]:
    """An artifact's bytes and metadata (checked, no device needed); errors name the file."""
    if not path.is_file():
        raise CLIError(f"{path}: no such file", USAGE)
    data = path.read_bytes()
    try:
        return data, runtime.read_metadata(data, read_sidecar(path))
    except runtime.ArtifactError as error:
        raise runtime.ArtifactError(f"{path}: {error}") from None


def describe_artifact(path: Path, size: int, metadata: dict) -> str:
    """What ``irgrad inspect`` prints: size, module, target, executables, flags, versions, functions."""
    formats = runtime.executable_formats(path)
    fields = [
        ("module", metadata.get("module")),
        ("target", metadata.get("target") or "unknown"),
        ("executables", ", ".join(formats) or "none"),
        ("flags", " ".join(metadata.get("flags") or []) or "unknown"),
        ("iree compiler", metadata.get("iree_compiler") or "unknown"),
        ("producer", metadata.get("producer") or "unknown"),
    ]
    lines = [f"{path}: {size:,} bytes"]
    lines += [f"  {key + ':':<15}{value}" for key, value in fields]
    signatures = signatures_from_metadata(metadata)
    lines += ["functions:", *signature_lines(signatures), *peak_lines(metadata)]
    for name, train in (metadata.get("training") or {}).items():
        lines += training_lines(name, train, signatures.get(name))
    return "\n".join(lines)


def training_lines(name: str, train: dict, signature: runtime.Signature | None) -> list[str]:
    """What ``irgrad inspect`` says about a training step: optimizer, parameters by name, the
    state's layout, and the order of its results (F's, the new parameters, the new state)."""
    params, state = list(train["params"]), list(train["state"])
    arg_names = list(signature.arg_names) if signature and signature.arg_names else []
    names = list(train.get("param_names") or [arg_names[i] if i < len(arg_names) and arg_names[i] else f"arg{i}"
                                              for i in params])
    lines = [f"training step {name}: {train['optimizer']}, learning rate {train['learning_rate']:g}",
             f"  parameters: {', '.join(f'{n} (arg {i})' for n, i in zip(names, params))}",
             f"  state:      {', '.join(state)}  (inputs after F's arguments; {name.removesuffix('_step')}_init "
             f"makes the first)"]
    if signature is not None:
        own = signature.output_keys()[:len(signature.outputs) - len(params) - len(state)]
        lines.append(f"  returns:    {', '.join(own)}, then the new {', '.join(names)}, then the new state")
    return lines


def inspect_artifact(path: Path, as_json: bool = False) -> str:
    """What ``irgrad inspect ART.vmfb [--json]`` prints."""
    data, metadata = artifact_metadata(path)
    if as_json:
        return json.dumps(metadata, indent=2, sort_keys=True)
    return describe_artifact(path, len(data), metadata)


# ----- run ------------------------------------------------------------------------------

def run_artifact(path: Path, function: str | None, inputs: Sequence[str], outputs: Sequence[str],
                 device: str | None = None) -> str:
    """What ``irgrad run`` does and prints: reads the ``--input`` and ``--output`` specs, loads
    the artifact on ``device``, calls ``function`` and reports its results (``values``)."""
    try:
        arguments, sinks = read_run_specs(inputs, outputs)
    except ValueError as error:
        raise CLIError(str(error), USAGE) from None
    if not path.is_file():
        raise CLIError(f"{path}: no such file", USAGE)
    module = runtime.load(path, device)
    signature = module.functions[pick_function(list(module.functions), function, path)]
    try:
        arrays = arguments(signature)
    except ValueError as error:
        raise CLIError(str(error), USAGE) from None
    results = module[signature.name].call_flat(*arrays)
    return report_results(signature.name, results, signature.outputs, sinks, names=signature.output_keys())


# ----- the runtime-only install's command ------------------------------------------------

FULL = "needs irgrad's compiler: pip install irgrad (this install runs artifacts: inspect, run)"


class _Parser(argparse.ArgumentParser):
    """argparse, its errors one ``CLIError`` line (exit status 2) instead of usage and a message."""

    def error(self, message: str) -> NoReturn:
        raise CLIError(f"{message} (see '{self.prog} --help')", USAGE)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="irgrad", description="Run irgrad's IREE artifacts (the runtime-only install: "
                     "inspect and run; the full irgrad also compiles and differentiates).")
    parser.add_argument("--version", action="store_true", help="Print the irgrad and IREE runtime versions and exit.")
    parser.add_argument("--debug", action="store_true", help="Show Python tracebacks instead of one-line errors.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    inspect = commands.add_parser("inspect", help="Show an artifact's functions, target, flags and versions.",
                                  description="Show an artifact's functions, target, flags and versions "
                                              "(no device needed).")
    inspect.add_argument("artifact", metavar="ART.vmfb", type=Path, help="A compiled artifact.")
    inspect.add_argument("--json", dest="as_json", action="store_true", help="Print the metadata as JSON.")
    run = commands.add_parser("run", help="Call a function of an artifact and print its results.",
                              description="Call a function of an artifact and print its results like "
                                          "iree-run-module.")
    run.add_argument("artifact", metavar="ART.vmfb", type=Path, help="A compiled artifact.")
    run.add_argument("--func", "--function", "-f", dest="function", metavar="NAME",
                     help="The function to call (default: the artifact's only function).")
    run.add_argument("--input", "-i", dest="inputs", action="append", default=[], metavar="SPEC",
                     help="One argument, in order: 2x2xf32=1,2,3,4 | f32=3 | 2x2xf32=@raw.bin | @x.npy; "
                          "or @args.npz alone: every argument, by name or position.")
    run.add_argument("--device", "-d", metavar="DRIVER",
                     help="IREE driver: local-task, local-sync, vulkan, cuda, hip (default: the artifact's).")
    run.add_argument("--output", dest="outputs", action="append", default=[], metavar="SPEC",
                     help="Per result, in order: @out.npy (write), +out.npy (append), - (print), '' (skip); "
                          "@out.npz alone: every result, by name.")
    return parser


def _dispatch(argv: list[str]) -> str:
    known = ("inspect", "run", "-h", "--help", "--version", "--debug")
    command = next((a for a in argv if a not in ("--debug",)), None)
    if command is not None and command not in known and not command.startswith("-"):
        raise CLIError(f"irgrad {command} {FULL}", USAGE)
    args = _parser().parse_args(argv)
    if args.version:
        return f"irgrad {__version__} (runtime-only install; IREE runtime {runtime.runtime_version()})"
    if args.command == "inspect":
        return inspect_artifact(args.artifact, args.as_json)
    if args.command == "run":
        return run_artifact(args.artifact, args.function, args.inputs, args.outputs, args.device)
    return _parser().format_help().rstrip("\n")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the runtime-only install's ``irgrad`` (and its ``python -m irgrad``)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        text = _dispatch(argv)
    except SystemExit:  # --help printed, or argparse's own exit
        raise
    except Exception as error:
        if "--debug" in argv and not (isinstance(error, CLIError) and error.exit_code == USAGE):
            raise
        code = error.exit_code if isinstance(error, CLIError) else FAILURE
        sys.stderr.write(f"irgrad: error: {one_line(error)}\n")
        sys.exit(code)
    sys.stdout.write(text + "\n")
