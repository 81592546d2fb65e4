"""What the ``irgrad`` command line does, as library functions.

Loading a source (an ``.mlir`` file or ``path/to/model.py:function``), adding
its adjoints, writing text atomically, one-line error messages and the
progress display of long steps. ``cli.py`` only parses arguments and calls
these; scripts such as ``benchmarks/profile.py`` use them too.

Errors that a command line reports as they are raise ``CLIError``, which
carries the exit status: ``USAGE`` (2) for a bad argument or a missing file,
``FAILURE`` (1) for anything that fails while running. ``CLIError`` and the one-line
messages live in ``messages``, what ``inspect`` and ``run`` do in ``artifact_cli``:
both need only the runtime. They are named here too.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

from . import passes, runtime
from .boundary import IRError, module_text
from .function import Function, compile_text, export
from .runtime.artifact import atomic_write
from .runtime.options import TARGET_FLAGS
from .passes.grad import ChoiceError
# The one-line errors and the artifact commands (inspect, run) need only the runtime: the
# runtime-only install has them too.
from .messages import FAILURE, USAGE, CLIError, did_you_mean, one_line
from .artifact_cli import artifact_metadata, describe_artifact, pick_function, signature_lines, training_lines

__all__ = [
    "USAGE", "FAILURE", "CLIError", "did_you_mean", "one_line", "parse_wrt", "import_model", "model_function",
    "load_source", "read_mlir", "located", "with_file_locations", "write_text", "adjoints", "argument_lines",
    "training_needs_wrt", "compile_blaming", "pick_function", "signature_lines", "artifact_metadata",
    "describe_artifact", "training_lines", "describe_targets",
]


# ----- sources: .mlir files and model.py:function ---------------------------------------

def parse_wrt(text: str | None) -> list[int | str] | None:
    """``"0,2"`` -> ``[0, 2]``, ``"x,w1"`` -> ``["x", "w1"]`` (argument names); None stays
    None (every float argument)."""
    if text is None:
        return None
    parts = [part.strip() for part in text.split(",")]
    if not all(parts):
        raise CLIError(f"bad --wrt {text!r}: expected argument indices or names such as 0,2 or x,w", USAGE)
    return [int(part) if part.isdigit() else part for part in parts]


def parse_checkpoints(text: str | None) -> int | str | None:
    """``--loop-checkpoints``: ``"sqrt"`` or a positive int (``"8"`` -> 8); None stays None."""
    if text is None or text == "sqrt":
        return text
    try:
        k = int(text)
    except ValueError:
        k = 0
    if k < 1:
        raise CLIError(f"bad --loop-checkpoints {text!r}: expected sqrt or a positive number of snapshots", USAGE)
    return k


def parse_memory(text: str | None) -> int | None:
    """``--max-memory``: ``"64M"``, ``"1.5G"``, ``"4096"`` -> bytes; None stays None."""
    if text is None:
        return None
    try:
        return passes.memory.parse_size(text)
    except ValueError as error:
        raise CLIError(f"bad --max-memory: {error}", USAGE) from None


def import_model(path: Path) -> ModuleType:
    """Imports a user's model file under a unique module name, its folder on sys.path."""
    name = f"_irgrad_model_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CLIError(f"{path}: cannot import it as a Python module", USAGE)
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as error:
        sys.modules.pop(name, None)
        raise CLIError(f"{path}: {type(error).__name__}: {one_line(error)}") from error
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)
    return module


def model_function(path: Path, attr: str | None) -> Function:
    """The ``ig.function`` named ``attr`` in the model file ``path``; it needs an input_signature."""
    module = import_model(path)
    found = sorted(k for k, v in vars(module).items() if isinstance(v, Function))
    listed = ", ".join(found) or "none"
    if attr is None:
        raise CLIError(f"{path}: name the function as {path}:FUNCTION (ig.functions in it: {listed})", USAGE)
    if not hasattr(module, attr):
        raise CLIError(f"{path} has no {attr!r} (ig.functions in it: {listed}){did_you_mean(attr, found)}", USAGE)
    fn = getattr(module, attr)
    if not callable(fn):
        raise CLIError(f"{path}:{attr} is a {type(fn).__name__}, not a function", USAGE)
    if not isinstance(fn, Function) or fn.input_signature is None:
        raise CLIError(
            f"{path}:{attr} has no input_signature; decorate it with "
            f"@ig.function(input_signature=[ig.TensorSpec(shape, dtype), ...]) so irgrad knows its argument types",
            USAGE)
    return fn


def load_source(source: str) -> tuple[str, str | None]:
    """StableHLO text of SRC and the name of its function (None for an .mlir file).

    SRC is an MLIR file or ``path/to/model.py:function`` naming an ``ig.function``
    with an ``input_signature``.
    """
    path_text, colon, attr = source.rpartition(":")
    if colon and path_text.endswith(".py") and attr.isidentifier():
        path, attr_or_none = Path(path_text), attr
    elif source.endswith(".py"):
        path, attr_or_none = Path(source), None
    else:
        return read_mlir(Path(source)), None
    if not path.is_file():
        raise CLIError(f"{path}: no such file", USAGE)
    fn = model_function(path, attr_or_none)
    try:
        return export(fn), fn.name
    except Exception as error:
        raise CLIError(f"tracing {path}:{attr}: {type(error).__name__}: {one_line(error)}") from error


# The MLIR file the command is working on, so that an error can name it (``located``).
SOURCE: contextvars.ContextVar[Path | None] = contextvars.ContextVar("irgrad_source", default=None)


def read_mlir(path: Path) -> str:
    """StableHLO text of an MLIR file in any form producers ship: text, MLIR bytecode or a
    StableHLO portable artifact (``boundary.module_text``). A usage error when there is no
    such file; errors about its content name it from then on (``located``)."""
    if not path.is_file():
        raise CLIError(f"{path}: no such file", USAGE)
    SOURCE.set(path)
    try:
        return module_text(path.read_bytes())
    except IRError as error:
        raise CLIError(f"{path}: {error}") from None


_AT_LINE = re.compile(r"\bline (\d+):(\d+): ")
_IN_BUFFER = re.compile(r'"-":(\d+):(\d+)')


def with_file_locations(text: str) -> str:
    """IR text whose locations in "the text" (``loc("-":6:24)``) name the file being read,
    so that they still point at it once the text is saved elsewhere."""
    path = SOURCE.get()
    if path is None:
        return text
    name = json.dumps(str(path))  # an MLIR string literal: double quotes, backslash escapes
    return _IN_BUFFER.sub(lambda m: f"{name}:{m.group(1)}:{m.group(2)}", text)


def located(message: str) -> str:
    """``message`` with the positions MLIR gives in "the text" (``line 6:24``, ``"-":6:24``)
    named in the file being read (``model.mlir:6:24``), when there is one."""
    path = SOURCE.get()
    if path is None:
        return message
    message = _IN_BUFFER.sub(lambda m: f"{path}:{m.group(1)}:{m.group(2)}", message)
    at = _AT_LINE.search(message)
    if at:  # "invalid MLIR: line 6:24: reason" -> "model.mlir:6:24: invalid MLIR: reason"
        message = f"{path}:{at.group(1)}:{at.group(2)}: {message[:at.start()]}{message[at.end():]}"
    return message


def write_text(path: Path | None, text: str) -> None:
    """Writes ``text`` to stdout (path None or '-') or atomically to ``path``."""
    if path is None or str(path) == "-":
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        # Temporary file + os.replace: a failure never leaves a partial or clobbered file.
        atomic_write(path, text.encode())


def compile_blaming(forward: str, text: str, options: runtime.CompileOptions, cache: bool = True):
    """``compile_text(text)``, where ``text`` is ``forward`` with adjoints added, each public
    function annotated with its estimated peak (``irgrad inspect`` shows it). When IREE
    rejects it and the forward alone too, the error says so: irgrad's pass is not the cause."""
    try:
        annotated = passes.annotate_estimates(text)  # for irgrad inspect
    except passes.IRError:
        annotated = text  # IREE's compile says what is wrong with it
    try:
        return compile_text(annotated, options, cache=cache)
    except runtime.CompileError:
        if text == forward:
            raise
        try:
            compile_text(forward, options, cache=cache)
        except runtime.CompileError as forward_error:
            raise runtime.CompileError(f"IREE cannot compile this module's forward either: {forward_error}",
                                       path=forward_error.path, diagnostics=forward_error.diagnostics) from None
        raise


def adjoints(text: str, func: str | None = None, wrt: str | None = None, *, grad: bool = False, vjp: bool = False,
             with_value: bool = False, jvp: bool = False, hessian: bool = False, loop_checkpoints: str | None = None,
             train: str | None = None, lr: float | None = None, prox_mu: float | None = None,
             max_memory: str | None = None, options: runtime.CompileOptions | None = None) -> str:
    """``text`` with @F_grad / @F_vjp / @F_jvp / @F_hessian / @F_train_init and @F_train_step
    added (unchanged when none is asked for). With ``prox_mu`` (FedProx, needs ``train``),
    ``@F_prox`` (``passes.proximal``) is added first and trained instead: its steps take the
    global parameters after F's arguments.

    ``wrt``, ``loop_checkpoints`` and ``max_memory`` are the command-line texts (``"0,2"``,
    ``"sqrt"``, ``"64M"``: ``passes.differentiate``'s ``memory_limit``, each plan checked against
    what IREE allocates for ``options``' target, by default the host CPU);
    ``with_value``, ``wrt`` and ``loop_checkpoints`` without ``grad``, ``vjp``, ``jvp`` or
    ``train`` are a usage error, and so are an unknown optimizer and ``lr`` without ``train``.
    """
    try:
        return _adjoints(text, func, wrt, grad, vjp, with_value, jvp, hessian, loop_checkpoints, train, lr, prox_mu,
                         parse_memory(max_memory), options)
    except ChoiceError as error:  # a --func or --wrt that names nothing: a bad command line
        raise CLIError(str(error), USAGE) from None


def _adjoints(text: str, func: str | None, wrt: str | None, grad: bool, vjp: bool, with_value: bool,
              jvp: bool, hessian: bool, loop_checkpoints: str | None, train: str | None, lr: float | None,
              prox_mu: float | None, memory_limit: int | None = None,
              options: runtime.CompileOptions | None = None) -> str:
    checkpoints = parse_checkpoints(loop_checkpoints)
    if prox_mu is not None:
        if train is None:
            raise CLIError("--prox-mu needs --train", USAGE)
        if not prox_mu >= 0:
            raise CLIError(f"bad --prox-mu {prox_mu!r}: FedProx's mu is a number >= 0", USAGE)
        name = passes.function_name(passes.find_function(passes.parse_module(text), func))
        floats = [i for i, t in enumerate(runtime.parse_signatures(text)[name].inputs)
                  if t.dtype.startswith(("float", "bfloat"))]
        params = parse_wrt(wrt) if wrt is not None else floats
        text, func, wrt = passes.proximal(text, name, params, prox_mu), f"{name}_prox", ",".join(map(str, params))
    if train is not None:
        try:
            passes.train.check(train, lr)
        except ValueError as error:
            raise CLIError(f"bad --train/--lr: {error}", USAGE) from None
    elif lr is not None:
        raise CLIError("--lr needs --train", USAGE)
    if memory_limit is not None and not (grad or vjp or train):
        raise CLIError("--max-memory needs --grad, --vjp or --train (it fits their backward pass)", USAGE)
    if not (grad or vjp or jvp or hessian or train):
        if with_value or wrt is not None:
            raise CLIError("--with-value and --wrt need --grad or --vjp", USAGE)
        if checkpoints is not None:
            raise CLIError("--loop-checkpoints needs --grad or --vjp", USAGE)
        return text
    return passes.differentiate(text, func, parse_wrt(wrt), grad=grad, vjp=vjp, with_value=with_value, jvp=jvp,
                                hessian=hessian, loop_checkpoints=checkpoints, train=train, learning_rate=lr,
                                memory_limit=memory_limit,
                                allocated=None if memory_limit is None else functools.partial(
                                    runtime.compiler.peak_allocation, options=options))


def training_needs_wrt(text: str, func: str, source: str) -> str:
    """Why ``irgrad compile MODEL.py:F --train`` without ``--wrt`` is refused: an ig.function's
    arguments mix data and weights (``loss(x, y, w1, ...)``), so "every float argument" would
    train the data too. The message names F's arguments, as ``--wrt`` takes them."""
    signature = runtime.parse_signatures(text)[func]
    names = [name or f"arg{i}" for i, name in enumerate(signature.arg_names or (None,) * len(signature.inputs))]
    described = ", ".join(f"{i} {name} ({t})" for i, (name, t) in enumerate(zip(names, signature.inputs)))
    return (f"--train needs --wrt for {source}: name the parameters to train, by name or index, among "
            f"{func}'s arguments: {described}; the others stay data")


def argument_lines(text: str, func: str | None = None) -> str:
    """What ``irgrad grad --list-args`` prints: each public function's arguments, with the
    index and the name (where the producer gave one) that ``--wrt`` accepts."""
    signatures = runtime.parse_signatures(text)
    if func is not None:
        if func not in signatures:
            raise CLIError(f"no public function @{func}; the module has: {', '.join(signatures) or 'none'}"
                           f"{did_you_mean(func, list(signatures), '@')}", USAGE)
        signatures = {func: signatures[func]}
    lines = []
    for name, signature in signatures.items():
        names = signature.arg_names or (None,) * len(signature.inputs)
        lines.append(f"@{name}: {len(signature.inputs)} arguments (--wrt takes the index or the name)")
        width = max([len(n or "-") for n in names] + [4])
        for i, (arg, t) in enumerate(zip(names, signature.inputs)):
            kind = ("float: differentiable" if t.dtype.startswith(("float", "bfloat"))
                    else "complex: differentiable" if t.dtype.startswith("complex") else "no gradient")
            lines.append(f"  {i:>3}  {arg or '-':<{width}}  {t!s:<16} {kind}")
    return "\n".join(lines)


# ----- output ---------------------------------------------------------------------------

def describe_targets() -> str:
    """What ``irgrad targets`` prints: compile targets with their flags, then the devices usable here."""
    lines = ["compile targets (irgrad compile --target):"]
    for info in runtime.targets():
        alias = f" (alias {', '.join(info.aliases)})" if info.aliases else ""
        flags = ", ".join(TARGET_FLAGS.get(info.name, ())) or "-"
        lines.append(f"  {info.name + alias:<28} flags: {flags:<18} runs on: {', '.join(info.drivers)}")
    lines.append("runtime devices here (irgrad run --device):")
    for probe in runtime.probe_drivers().values():
        state = "available" if probe.ok else "unavailable"
        lines.append(f"  {probe.driver:<12} {state:<12} {probe.detail}")
    return "\n".join(lines)
