"""The ``irgrad`` command line.

    irgrad grad IN.mlir -o OUT.mlir [--func F] [--wrt 0,2] [--vjp] [--with-value]
    irgrad compile SRC -o OUT.vmfb [--target T] [--cpu ..] [--triple ..] [--cuda-arch ..]
                   [--rocm-arch ..] [--grad] [--vjp] [--with-value] [--wrt ..] [--func F] [--no-cache]
    irgrad run ART.vmfb --function F --input 2x2xf32=1,2,3,4 --input @x.npy
               [--device D] [--output @out.npy]
    irgrad emit MODEL.py:FUNCTION [--grad] [--vjp] [--with-value] [--wrt ..]
    irgrad inspect ART.vmfb [--json]
    irgrad profile SRC [--function F] [--grad] [--wrt ..] [--top N]
    irgrad targets

This module parses arguments, calls irgrad's library and prints. Every error
is one line on stderr (``irgrad: error: ...``): exit status 2 for a bad
command line (unknown option or target, bad ``--input`` syntax, missing
file), 1 for anything that fails while running. ``irgrad --debug CMD`` shows
the Python traceback instead.
"""
import contextlib
import importlib.util
import json
import math
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import numpy as np
import typer
from typer.core import TyperGroup

import irgrad
from irgrad import passes, runtime
from irgrad.function import compile_text
from irgrad.passes.legalize import legalize_text
from irgrad.runtime.artifact import atomic_write, read_sidecar, signatures_from_metadata

USAGE = 2  # click's exit status for a bad command line
FAILURE = 1

# Which --flags each compile target takes (the CLI's names for CompileOptions fields).
TARGET_FLAGS = {
    "llvm-cpu": ("--cpu", "--triple"),
    "vmvx": (),
    "vulkan-spirv": (),
    "cuda": ("--cuda-arch",),
    "rocm": ("--rocm-arch",),
}
# iree-run-module prints at most this many elements of a result.
MAX_PRINTED_ELEMENTS = 1024


class CLIError(Exception):
    """An error the CLI reports as one line, with its exit status."""

    def __init__(self, message: str, exit_code: int = FAILURE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class _State:
    debug = False  # set by the --debug global option for this invocation


# ----- error reporting ------------------------------------------------------------------

def one_line(error: BaseException) -> str:
    """``error`` as a single line of text."""
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


# Some MLIR diagnostics carry a dump of the whole operation; one line stays readable.
MAX_MESSAGE = 800


def _fail(message: str, code: int) -> int:
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE] + "... (cut; 'irgrad --debug' shows all of it)"
    sys.stderr.write(f"irgrad: error: {message}\n")
    sys.stderr.flush()
    return code


class _Group(TyperGroup):
    """Runs the command and turns every error into one ``irgrad: error:`` line."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        _State.debug = False
        try:
            result = super().main(args, prog_name or "irgrad", complete_var, standalone_mode=False, **extra)
            code = result if isinstance(result, int) else 0
        except typer.Abort:
            code = _fail("aborted", FAILURE)
        except CLIError as error:
            if _State.debug and error.exit_code != USAGE:
                raise
            code = _fail(str(error), error.exit_code)
        except Exception as error:
            # click's usage errors carry their exit status and a message (duck typing:
            # typer vendors click in new releases, so its classes differ by version).
            if hasattr(error, "exit_code") and hasattr(error, "format_message"):
                ctx = getattr(error, "ctx", None)
                hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
                code = _fail(" ".join(error.format_message().split()) + hint, error.exit_code)
            elif _State.debug:
                raise
            else:
                code = _fail(one_line(error), FAILURE)
        if not standalone_mode:
            return code
        sys.exit(code)


app = typer.Typer(
    cls=_Group,
    name="irgrad",
    help="Differentiate StableHLO, compile it with IREE and run the artifacts.",
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``irgrad`` console script and ``python -m irgrad``."""
    app(args=argv, prog_name="irgrad")


@app.callback(invoke_without_command=True)
def _global(
    ctx: typer.Context,
    debug: bool = typer.Option(False, "--debug", help="Show Python tracebacks instead of one-line errors."),
    version: bool = typer.Option(False, "--version", help="Print the irgrad and IREE versions and exit."),
) -> None:
    _State.debug = debug
    if version:
        typer.echo(f"irgrad {irgrad.__version__} (IREE compiler {runtime.compiler_version()}, "
                   f"runtime {runtime.runtime_version()})")
        raise typer.Exit()
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit()


# ----- sources: .mlir files and model.py:function ---------------------------------------

def parse_wrt(text: str | None) -> list[int] | None:
    """``"0,2"`` -> ``[0, 2]``; None stays None (every float argument)."""
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise CLIError(f"bad --wrt {text!r}: expected argument indices such as 0,2", USAGE) from None


def _import_model(path: Path) -> Any:
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


def _model_function(path: Path, attr: str | None) -> irgrad.Function:
    module = _import_model(path)
    found = sorted(k for k, v in vars(module).items() if isinstance(v, irgrad.Function))
    listed = ", ".join(found) or "none"
    if attr is None:
        raise CLIError(f"{path}: name the function as {path}:FUNCTION (ig.functions in it: {listed})", USAGE)
    if not hasattr(module, attr):
        raise CLIError(f"{path} has no {attr!r} (ig.functions in it: {listed})", USAGE)
    fn = getattr(module, attr)
    if not callable(fn):
        raise CLIError(f"{path}:{attr} is a {type(fn).__name__}, not a function", USAGE)
    if not isinstance(fn, irgrad.Function) or fn.input_signature is None:
        raise CLIError(
            f"{path}:{attr} has no input_signature; decorate it with "
            f"@ig.function(input_signature=[ig.TensorSpec(shape, dtype), ...]) so irgrad knows its argument types",
            USAGE)
    return fn


def load_source(source: str) -> "tuple[str, str | None]":
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
        return _read_text(Path(source)), None
    if not path.is_file():
        raise CLIError(f"{path}: no such file", USAGE)
    fn = _model_function(path, attr_or_none)
    try:
        return irgrad.export(fn), fn.name
    except Exception as error:
        raise CLIError(f"tracing {path}:{attr}: {type(error).__name__}: {one_line(error)}") from error


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise CLIError(f"{path}: no such file", USAGE)
    return path.read_text()


def _write_text(path: Path | None, text: str) -> None:
    """Writes ``text`` to stdout (path None or '-') or atomically to ``path``."""
    if path is None or str(path) == "-":
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        # Temporary file + os.replace: a failure never leaves a partial or clobbered file.
        atomic_write(path, text.encode())


def _adjoints(text: str, func: str | None, wrt: str | None, grad: bool, vjp: bool,
              with_value: bool) -> str:
    """``text`` with @F_grad / @F_vjp added (unchanged when neither is asked for)."""
    if not (grad or vjp):
        if with_value or wrt is not None:
            raise CLIError("--with-value and --wrt need --grad or --vjp", USAGE)
        return text
    return passes.differentiate(text, func, parse_wrt(wrt), grad=grad, vjp=vjp, with_value=with_value)


# ----- grad / emit ----------------------------------------------------------------------

FUNC_HELP = "The function F to differentiate (default: the module's only public function)."
WRT_HELP = "Argument indices to differentiate with respect to, e.g. 0,2 (default: every float argument)."
WITH_VALUE_HELP = "Adjoint functions return F's results first, then the gradients."


@app.command()
def grad(
    source: Path = typer.Argument(..., metavar="IN.mlir", help="StableHLO module."),
    output: Path | None = typer.Option(
        None, "-o", "--output", metavar="OUT.mlir", help="Where to write the module (default: stdout)."),
    func: str | None = typer.Option(None, "--func", metavar="NAME", help=FUNC_HELP),
    wrt: str | None = typer.Option(None, "--wrt", metavar="I,J", help=WRT_HELP),
    vjp: bool = typer.Option(False, "--vjp", help="Also add @F_vjp(args..., cotangents...)."),
    with_value: bool = typer.Option(False, "--with-value", help=WITH_VALUE_HELP),
) -> None:
    """Add @F_grad (gradient of the sum of F's results) to a StableHLO module.

    If the gradient cannot be built, OUT.mlir is not written (an existing one
    is left as it was).
    """
    text = _adjoints(_read_text(source), func, wrt, True, vjp, with_value)
    _write_text(output, text)


@app.command()
def emit(
    source: str = typer.Argument(..., metavar="MODEL.py:FUNCTION", help="An ig.function with an input_signature."),
    grad: bool = typer.Option(False, "--grad", help="Add @F_grad."),
    vjp: bool = typer.Option(False, "--vjp", help="Add @F_vjp."),
    with_value: bool = typer.Option(False, "--with-value", help=WITH_VALUE_HELP),
    wrt: str | None = typer.Option(None, "--wrt", metavar="I,J", help=WRT_HELP),
) -> None:
    """Print the StableHLO of an ig.function (and its adjoints) on stdout."""
    text, name = load_source(source)
    _write_text(None, _adjoints(text, name, wrt, grad, vjp, with_value))


# ----- compile --------------------------------------------------------------------------

def compile_options(target: str, cpu: str | None, triple: str | None, cuda_arch: str | None,
                    rocm_arch: str | None) -> runtime.CompileOptions:
    """CompileOptions from the command line; a usage error for a bad or misplaced flag."""
    try:
        canonical = runtime.Target.parse(target).value
        given = {"--cpu": cpu, "--triple": triple, "--cuda-arch": cuda_arch, "--rocm-arch": rocm_arch}
        for flag, value in given.items():
            if value is not None and flag not in TARGET_FLAGS[canonical]:
                takes = ", ".join(t for t, flags in TARGET_FLAGS.items() if flag in flags)
                raise ValueError(f"{flag} applies to target {takes} only, not {canonical}")
        return runtime.CompileOptions.from_strings(
            target, cpu=cpu, triple=triple, cuda_arch=cuda_arch, rocm_arch=rocm_arch)
    except ValueError as error:
        raise CLIError(str(error), USAGE) from None


def _describe_target(options: runtime.CompileOptions) -> str:
    target = options.target.value
    if target == "llvm-cpu":
        return f"llvm-cpu, cpu {options.effective_cpu}" + (f", {options.triple}" if options.triple else "")
    if target == "cuda":
        compiled = options.compiled_cuda_arch
        if compiled != options.cuda_arch:  # IREE 3.13 knows no newer target: forward-compatible PTX
            return f"cuda {options.cuda_arch} (as {compiled} PTX, compiled for the GPU when loaded)"
        return f"cuda {options.cuda_arch}"
    if target == "rocm":
        return f"rocm {options.rocm_arch}"
    return target


@contextlib.contextmanager
def progress(message: str, stream: Any = None, delay: float = 1.0) -> Iterator[None]:
    """Shows ``message`` and the elapsed time on ``stream`` (stderr) while a step runs.

    Only on a terminal, and only once the step has taken ``delay`` seconds:
    piped output stays clean.
    """
    stream = stream or sys.stderr
    if not (hasattr(stream, "isatty") and stream.isatty()):
        yield
        return
    done = threading.Event()
    start = time.perf_counter()
    shown = []

    def tick() -> None:
        if done.wait(delay):  # quick steps show nothing
            return
        while not done.is_set():
            stream.write(f"\r{message} ({time.perf_counter() - start:.0f} s)")
            stream.flush()
            shown.append(True)
            done.wait(min(delay, 1.0))

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if shown:
            stream.write("\r\033[K")
            stream.flush()


def _signature_lines(functions: dict) -> list[str]:
    return [f"  {signature!r}" for signature in functions.values()]


@app.command("compile")
def compile_command(
    source: str = typer.Argument(..., metavar="SRC", help="An .mlir file or path/to/model.py:function."),
    output: Path = typer.Option(..., "-o", "--output", metavar="OUT.vmfb", help="The artifact to write."),
    target: str = typer.Option(
        "llvm-cpu", "--target", "-t",
        help="llvm-cpu (alias cpu), vulkan-spirv (alias vulkan), cuda, rocm or vmvx; see irgrad targets."),
    cpu: str | None = typer.Option(None, "--cpu", help="llvm-cpu: host (default), generic or an LLVM CPU name."),
    triple: str | None = typer.Option(None, "--triple", help="llvm-cpu: cross-compile, e.g. aarch64-linux-gnu."),
    cuda_arch: str | None = typer.Option(
        None, "--cuda-arch", help="cuda: GPU architecture, e.g. sm_86 (default sm_80)."),
    rocm_arch: str | None = typer.Option(None, "--rocm-arch", help="rocm: GPU architecture, e.g. gfx942 (default)."),
    grad: bool = typer.Option(False, "--grad", help="Add @F_grad before compiling."),
    vjp: bool = typer.Option(False, "--vjp", help="Add @F_vjp before compiling."),
    with_value: bool = typer.Option(False, "--with-value", help=WITH_VALUE_HELP),
    wrt: str | None = typer.Option(None, "--wrt", metavar="I,J", help=WRT_HELP),
    func: str | None = typer.Option(None, "--func", metavar="NAME", help=FUNC_HELP),
    no_cache: bool = typer.Option(False, "--no-cache", help="Compile again even if a cached artifact exists."),
) -> None:
    """Compile StableHLO (optionally with its adjoints) into an IREE .vmfb artifact."""
    options = compile_options(target, cpu, triple, cuda_arch, rocm_arch)
    if func is not None and not (grad or vjp):
        raise CLIError("--func needs --grad or --vjp", USAGE)
    text, name = load_source(source)
    text = _adjoints(text, func or name, wrt, grad, vjp, with_value)
    start = time.perf_counter()
    with progress(f"irgrad: compiling {source} for {options.target.value}"):
        artifact = compile_text(text, options, cache=not no_cache)
    seconds = time.perf_counter() - start
    artifact.save(output)
    cached = f" (from the {artifact.cached} cache)" if artifact.cached else ""
    lines = [f"{output}: {len(artifact.vmfb):,} bytes, {_describe_target(options)}, "
             f"compiled in {seconds:.2f} s{cached}", *_signature_lines(artifact.functions)]
    typer.echo("\n".join(lines))


# ----- profile --------------------------------------------------------------------------

@app.command()
def profile(
    source: str = typer.Argument(..., metavar="SRC", help="An .mlir file or path/to/model.py:function."),
    func: str | None = typer.Option(
        None, "--function", "--func", "-f", metavar="NAME",
        help="The function to profile; with --grad, the one to differentiate (default: the only one)."),
    grad: bool = typer.Option(False, "--grad", help="Profile @F_grad (F's value and gradient)."),
    wrt: str | None = typer.Option(None, "--wrt", metavar="I,J", help=WRT_HELP),
    top: int = typer.Option(25, "--top", metavar="N", help="Dispatches to list (0: all)."),
) -> None:
    """Time each dispatch of a function alone (IREE's per-dispatch benchmarks) and show its share."""
    from irgrad.runtime.profile import profile_dispatches

    text, name = load_source(source)
    function = func or name
    if grad:
        if function is None:  # differentiate() takes the only public function, or says to name one
            names = list(runtime.parse_signatures(text))
            function = names[0] if len(names) == 1 else None
        text = _adjoints(text, function, wrt, True, False, True)
        function = f"{function}_grad"
    elif wrt is not None:
        raise CLIError("--wrt needs --grad", USAGE)
    with progress(f"irgrad: profiling {source} (compiling, then timing every dispatch)"):
        result = profile_dispatches(legalize_text(text), runtime.CompileOptions(), function=function)
    typer.echo(result.table(top=top or None))


# ----- run ------------------------------------------------------------------------------

def _element_types() -> "dict[str, str]":
    """IREE element type name (f32, i1, ui8, si8, bf16, ...) -> irgrad dtype name."""
    types = {str(runtime.TensorType((), dtype)): dtype for dtype in runtime.DTYPES}
    types.update({f"si{bits}": f"int{bits}" for bits in (8, 16, 32, 64)})  # explicitly signed
    return types


def _numpy_dtype(dtype: str) -> np.dtype:
    if dtype == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise ValueError("bf16 values need the ml_dtypes package") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def _parse_type(text: str) -> "tuple[tuple[int, ...], str]":
    """``2x3xf32`` -> ((2, 3), "float32"); ``f32`` -> ((), "float32")."""
    *dims, element = text.strip().split("x")
    types = _element_types()
    if element not in types:
        raise ValueError(f"unknown element type {element!r}; allowed: {', '.join(types)}")
    if not all(d.isdigit() for d in dims):
        raise ValueError(f"bad shape {'x'.join(dims)!r}; expected static sizes such as 2x3")
    return tuple(int(d) for d in dims), types[element]


def _parse_value(token: str, dtype: np.dtype) -> Any:
    if dtype == np.bool_:
        value = {"0": False, "1": True, "false": False, "true": True}.get(token.lower())
        if value is None:
            raise ValueError(f"bad i1 value {token!r}; use 0, 1, true or false")
        return value
    if dtype.kind in "iu":
        try:
            value = int(token, 16) if token.lower().lstrip("+-").startswith("0x") else int(token)
        except ValueError:
            raise ValueError(f"bad integer {token!r}") from None
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise ValueError(f"{value} is out of range for {dtype.name} [{info.min}, {info.max}]")
        return value
    try:
        return float(token)
    except ValueError:
        raise ValueError(f"bad number {token!r}") from None


def _read_npy(path: str) -> list[np.ndarray]:
    """Every array in a .npy file (numpy.save may have appended several)."""
    arrays = []
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        while f.tell() < size:
            try:
                arrays.append(np.load(f, allow_pickle=False))
            except ValueError as error:
                raise ValueError(f"{path} is not a .npy file ({one_line(error)})") from None
    if not arrays:
        raise ValueError(f"{path} is empty")
    return arrays


def parse_input(spec: str) -> list[np.ndarray]:
    """Arrays for one ``--input``, in iree-run-module's syntax.

    * ``2x2xf32=1,2,3,4``, ``2x2xf32=1 2 3 4`` or ``2x2xf32=[1 2][3 4]``: commas,
      spaces and brackets all separate values; brackets are not checked against
      the shape.
    * ``2x2xf32=5`` fills every element with 5; ``2x2xf32`` (no values) is zeros.
    * ``f32=3`` is a 0-d tensor. A bare ``3`` (an IREE VM scalar) is rejected:
      irgrad functions take tensors only.
    * element types: f16, bf16, f32, f64, i1 (0/1/true/false), i8..i64 (signed),
      si8..si64, ui8..ui64; integers may be hex (0x10) and must fit the type.
    * ``2x2xf32=@file.bin``: raw little-endian bytes; ``@file.npy``: every array in
      a .npy file (several when numpy.save appended them), each one input.

    Raises ValueError (naming ``spec``) for anything else.
    """
    try:
        if spec.startswith("@"):
            return _read_npy(spec[1:])
        type_text, _, values = spec.partition("=")
        if "=" not in spec and not re.search(r"[a-z]", type_text):
            raise ValueError("a tensor needs a type, e.g. f32=3 or 2x2xf32=1,2,3,4")
        shape, dtype_name = _parse_type(type_text)
        dtype = _numpy_dtype(dtype_name)
        count = math.prod(shape)
        values = values.strip()
        if values.startswith("@"):
            raw = np.fromfile(values[1:], dtype=np.uint8 if dtype == np.bool_ else dtype)
            if raw.size != count:
                raise ValueError(f"{values[1:]} holds {raw.size} {dtype_name} values, the shape needs {count}")
            return [raw.astype(dtype).reshape(shape)]
        tokens = [t for t in re.split(r"[\s,\[\]]+", values) if t]
        parsed = [_parse_value(t, dtype) for t in tokens]
        with np.errstate(over="ignore"):
            if not parsed:
                return [np.zeros(shape, dtype)]
            if len(parsed) == 1:
                return [np.full(shape, parsed[0], dtype)]
            if len(parsed) != count:
                raise ValueError(f"{len(parsed)} values for shape {type_text.strip()} "
                                 f"(needs {count}, or 1 to fill it)")
            return [np.array(parsed, dtype).reshape(shape)]
    except (ValueError, OSError) as error:
        raise ValueError(f"bad --input {spec!r}: {one_line(error)}") from None


def format_array(array: np.ndarray, type_name: str, limit: int = MAX_PRINTED_ELEMENTS) -> str:
    """``2x2xf32=[1 2][3 4]``, iree-run-module's format.

    Floats print like C's %G (``1.23457E+08``, ``INF``, ``NAN``), bools as 0/1
    (IREE prints i1 as hex bytes). After ``limit`` elements the rest is ``...``.
    """
    left = [limit]

    def element(x: Any) -> str:
        if array.dtype == np.bool_:
            return "1" if x else "0"
        if array.dtype.kind in "iu":
            return str(int(x))
        return format(float(x), "G")

    def row(a: np.ndarray) -> str:
        if a.ndim == 1:
            shown = a[: left[0]]
            left[0] -= len(shown)
            text = " ".join(map(element, shown))
            return text + "..." if len(shown) < len(a) else text
        return "".join(f"[{row(sub)}]" for sub in a)

    shape = "".join(f"{d}x" for d in array.shape)
    body = element(array[()]) if array.ndim == 0 else row(array)
    return f"{shape}{type_name}={body}"


def _parse_output(spec: str) -> "tuple[str, Path | None]":
    """An ``--output``: ``@FILE`` write, ``+FILE`` append, ``-`` print, ``''`` skip."""
    if spec in ("", "-"):
        return ("skip" if spec == "" else "print"), None
    if spec[0] in "@+" and len(spec) > 1:
        return ("write" if spec[0] == "@" else "append"), Path(spec[1:])
    raise CLIError(f"bad --output {spec!r}: use @FILE.npy (write), +FILE.npy (append), "
                   "- (print) or '' (skip)", USAGE)


def _save(array: np.ndarray, path: Path, append: bool) -> None:
    with open(path, "ab" if append else "wb") as f:
        if path.suffix == ".npy":
            np.save(f, array, allow_pickle=False)
        else:
            f.write(np.ascontiguousarray(array).tobytes())


@app.command()
def run(
    artifact: Path = typer.Argument(..., metavar="ART.vmfb", help="A compiled artifact."),
    function: str | None = typer.Option(
        None, "--function", "-f", metavar="NAME", help="The function to call (default: the only one)."),
    inputs: list[str] | None = typer.Option(
        None, "--input", "-i", metavar="SPEC",
        help="One argument, in order: 2x2xf32=1,2,3,4 | f32=3 | 2x2xf32=@raw.bin | @x.npy (repeat per argument)."),
    device: str | None = typer.Option(
        None, "--device", "-d",
        help="IREE driver: local-task, local-sync, vulkan, cuda, hip (default: the artifact's)."),
    outputs: list[str] | None = typer.Option(
        None, "--output", metavar="SPEC",
        help="Per result, in order: @out.npy (write), +out.npy (append), - (print), '' (skip). "
             "Results past the last --output are printed."),
) -> None:
    """Call a function of an artifact and print its results like iree-run-module."""
    arrays = []
    for spec in inputs or []:
        try:
            arrays.extend(parse_input(spec))
        except ValueError as error:
            raise CLIError(str(error), USAGE) from None
    sinks = [_parse_output(spec) for spec in outputs or []]
    if not artifact.is_file():
        raise CLIError(f"{artifact}: no such file", USAGE)
    module = runtime.load(artifact, device)
    names = list(module.functions)
    if function is None:
        if len(names) != 1:
            raise CLIError(f"{artifact} has {len(names)} functions; choose one with --function "
                           f"({', '.join(names) or 'none'})", USAGE)
        function = names[0]
    if function not in module.functions:
        raise CLIError(f"no function {function!r} in {artifact}; functions: {', '.join(names) or 'none'}", USAGE)
    signature = module.functions[function]
    count = len(signature.outputs)
    if len(sinks) > count:
        results = "result" if count == 1 else "results"
        raise CLIError(f"{len(sinks)} --output given, but {function} returns {count} {results}", USAGE)
    results = module[function].call_flat(*arrays)
    lines = [f"EXEC @{function}"]
    for i, (result, want) in enumerate(zip(results, signature.outputs)):
        action, path = sinks[i] if i < len(sinks) else ("print", None)
        if action == "print":
            type_name = str(runtime.TensorType((), want.dtype))
            lines += [f"result[{i}]: hal.buffer_view", format_array(np.asarray(result), type_name)]
        elif path is not None:
            _save(np.asarray(result), path, append=action == "append")
    typer.echo("\n".join(lines))


# ----- inspect / targets ----------------------------------------------------------------

@app.command()
def inspect(
    artifact: Path = typer.Argument(..., metavar="ART.vmfb", help="A compiled artifact."),
    as_json: bool = typer.Option(False, "--json", help="Print the metadata as JSON."),
) -> None:
    """Show an artifact's functions, target, flags and versions (no device needed)."""
    if not artifact.is_file():
        raise CLIError(f"{artifact}: no such file", USAGE)
    data = artifact.read_bytes()
    metadata = runtime.read_metadata(data, read_sidecar(artifact))
    if as_json:
        typer.echo(json.dumps(metadata, indent=2, sort_keys=True))
        return
    formats = runtime.executable_formats(artifact)
    functions = signatures_from_metadata(metadata)
    fields = [
        ("module", metadata.get("module")),
        ("target", metadata.get("target") or "unknown"),
        ("executables", ", ".join(formats) or "none"),
        ("flags", " ".join(metadata.get("flags") or []) or "unknown"),
        ("iree compiler", metadata.get("iree_compiler") or "unknown"),
        ("producer", metadata.get("producer") or "unknown"),
    ]
    lines = [f"{artifact}: {len(data):,} bytes"]
    lines += [f"  {key + ':':<15}{value}" for key, value in fields]
    lines += ["functions:", *_signature_lines(functions)]
    typer.echo("\n".join(lines))


@app.command()
def targets() -> None:
    """List compile targets and the runtime devices usable on this machine."""
    lines = ["compile targets (irgrad compile --target):"]
    for info in runtime.targets():
        alias = f" (alias {', '.join(info.aliases)})" if info.aliases else ""
        flags = ", ".join(TARGET_FLAGS.get(info.name, ())) or "-"
        lines.append(f"  {info.name + alias:<28} flags: {flags:<18} runs on: {', '.join(info.drivers)}")
    lines.append("runtime devices here (irgrad run --device):")
    for probe in runtime.probe_drivers().values():
        state = "available" if probe.ok else "unavailable"
        lines.append(f"  {probe.driver:<12} {state:<12} {probe.detail}")
    typer.echo("\n".join(lines))
