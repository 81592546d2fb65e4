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
    irgrad cache info | clear
    irgrad [--verbose] [--debug] CMD ...

This module parses arguments, calls irgrad's library (``irgrad.tools``,
``irgrad.values``, ``irgrad.runtime``) and prints. Every error
is one line on stderr (``irgrad: error: ...``): exit status 2 for a bad
command line (unknown option or target, bad ``--input`` syntax, missing
file), 1 for anything that fails while running. ``irgrad --debug CMD`` shows
the Python traceback instead.
"""
import json
import time
from pathlib import Path

import typer

import irgrad
from irgrad import runtime
from irgrad.runtime.vmfb import read_sidecar, signatures_from_metadata
from irgrad.runtime.profile import profile_dispatches
from irgrad.console import ErrorLines, State, cache_app, log_to_stderr, progress
from irgrad.tools import (USAGE, CLIError, adjoints, argument_lines, compile_blaming, describe_artifact,
                          describe_targets, load_source, pick_function, read_mlir, signature_lines,
                          with_file_locations, write_text)
from irgrad.tools import parse_wrt  # noqa: F401  (re-exported: benchmarks/profile.py imports it from here)
from irgrad.viz import function_graph, module_graph, render
from irgrad.values import arguments_from_npz, parse_input, parse_output, report_results


app = typer.Typer(
    cls=ErrorLines,
    name="irgrad",
    help="Differentiate StableHLO, compile it with IREE and run the artifacts.",
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(cache_app)  # irgrad cache info | clear (irgrad/console.py)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``irgrad`` console script and ``python -m irgrad``."""
    app(args=argv, prog_name="irgrad")


@app.callback(invoke_without_command=True)
def _global(
    ctx: typer.Context,
    debug: bool = typer.Option(False, "--debug", help="Show Python tracebacks instead of one-line errors."),
    version: bool = typer.Option(False, "--version", help="Print the irgrad and IREE versions and exit."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log what irgrad does on stderr: compiles, "
                                 "cache hits, IREE workarounds, the device chosen."),
) -> None:
    State.debug = debug
    if verbose:
        log_to_stderr()
    if version:
        typer.echo(f"irgrad {irgrad.__version__} (IREE compiler {runtime.compiler_version()}, "
                   f"runtime {runtime.runtime_version()})")
        raise typer.Exit()
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit()


# ----- grad / emit ----------------------------------------------------------------------

FUNC_HELP = "The function F to differentiate (default: the module's only public function)."
WRT_HELP = ("Arguments to differentiate, by index or by name, e.g. 0,2 or w,b (default: every float "
            "argument; irgrad grad --list-args shows them).")
WITH_VALUE_HELP = "Adjoint functions return F's results first, then the gradients."
TRAIN_HELP = ("Add @F_train_init(args...) -> state and @F_train_step(args..., state...) -> (F's results, "
              "updated args[wrt], updated state): one optimizer step per call (sgd, momentum, adam).")
LR_HELP = "Learning rate for --train (default: the optimizer's Keras default, 0.01 or 0.001 for adam)."
PROX_HELP = ("FedProx: train @F_prox, F's loss plus mu/2 ||w - w_global||^2 over the parameters, whose "
             "training step takes the global parameters after F's arguments (needs --train).")
CHECKPOINTS_HELP = ("Keep K snapshots of each while loop's state (sqrt: about the square root of its trip "
                    "count) and recompute the iterations between them in the reverse pass, instead of "
                    "recording every iteration.")


@app.command()
def grad(
    source: Path = typer.Argument(..., metavar="IN.mlir", help="StableHLO module."),
    output: Path | None = typer.Option(
        None, "-o", "--output", metavar="OUT.mlir", help="Where to write the module (default: stdout)."),
    func: str | None = typer.Option(None, "--func", metavar="NAME", help=FUNC_HELP),
    wrt: str | None = typer.Option(None, "--wrt", metavar="I,J", help=WRT_HELP),
    vjp: bool = typer.Option(False, "--vjp", help="Also add @F_vjp(args..., cotangents...)."),
    with_value: bool = typer.Option(False, "--with-value", help=WITH_VALUE_HELP),
    jvp: bool = typer.Option(False, "--jvp", help="Forward mode: add @F_jvp(args..., tangents...) -> "
                             "(results..., their tangents...) instead of @F_grad."),
    hessian: bool = typer.Option(False, "--hessian", help="Add @F_hessian(args...) -> one x.shape + x.shape "
                                 "Hessian block per wrt argument, instead of @F_grad."),
    loop_checkpoints: str | None = typer.Option(None, "--loop-checkpoints", metavar="K|sqrt",
                                                help=CHECKPOINTS_HELP),
    train: str | None = typer.Option(None, "--train", metavar="sgd|momentum|adam", help=TRAIN_HELP),
    lr: float | None = typer.Option(None, "--lr", metavar="X", help=LR_HELP),
    prox_mu: float | None = typer.Option(None, "--prox-mu", metavar="MU", help=PROX_HELP),
    list_args: bool = typer.Option(False, "--list-args", help="List the public functions' arguments "
                                   "(index, name, type) for --wrt, and write nothing."),
) -> None:
    """Add @F_grad (gradient of the sum of F's results) to a StableHLO module.

    If the gradient cannot be built, OUT.mlir is not written (an existing one
    is left as it was).
    """
    if list_args:
        typer.echo(argument_lines(read_mlir(source), func))
        return
    text = adjoints(read_mlir(source), func, wrt, not (jvp or hessian or train), vjp, with_value, jvp, hessian,
                    loop_checkpoints, train, lr, prox_mu)
    write_text(output, with_file_locations(text))


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
    write_text(None, adjoints(text, name, wrt, grad, vjp, with_value))


# ----- compile / profile ----------------------------------------------------------------

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
    loop_checkpoints: str | None = typer.Option(None, "--loop-checkpoints", metavar="K|sqrt",
                                                help=CHECKPOINTS_HELP),
    train: str | None = typer.Option(None, "--train", metavar="sgd|momentum|adam", help=TRAIN_HELP),
    lr: float | None = typer.Option(None, "--lr", metavar="X", help=LR_HELP),
    prox_mu: float | None = typer.Option(None, "--prox-mu", metavar="MU", help=PROX_HELP),
    no_cache: bool = typer.Option(False, "--no-cache", help="Compile again even if a cached artifact exists."),
) -> None:
    """Compile StableHLO (optionally with its adjoints) into an IREE .vmfb artifact."""
    try:
        options = runtime.CompileOptions.for_target(
            target, cpu=cpu, triple=triple, cuda_arch=cuda_arch, rocm_arch=rocm_arch)
    except ValueError as error:
        raise CLIError(str(error), USAGE) from None
    if func is not None and not (grad or vjp or train):
        raise CLIError("--func needs --grad, --vjp or --train", USAGE)
    forward, name = load_source(source)
    text = adjoints(forward, func or name, wrt, grad, vjp, with_value, loop_checkpoints=loop_checkpoints,
                    train=train, lr=lr, prox_mu=prox_mu)
    start = time.perf_counter()
    with progress(f"irgrad: compiling {source} for {options.target.value}"):
        artifact = compile_blaming(forward, text, options, cache=not no_cache)
    seconds = time.perf_counter() - start
    artifact.save(output)
    cached = f" (from the {artifact.cached} cache)" if artifact.cached else ""
    lines = [f"{output}: {len(artifact.vmfb):,} bytes, {options.describe()}, "
             f"compiled in {seconds:.2f} s{cached}", *signature_lines(artifact.functions)]
    typer.echo("\n".join(lines))


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
    text, name = load_source(source)
    function = func or name
    if grad:
        if function is None:  # differentiate() takes the only public function, or says to name one
            names = list(runtime.parse_signatures(text))
            function = names[0] if len(names) == 1 else None
        text = adjoints(text, function, wrt, True, False, True)
        function = f"{function}_grad"
    elif wrt is not None:
        raise CLIError("--wrt needs --grad", USAGE)
    with progress(f"irgrad: profiling {source} (compiling, then timing every dispatch)"):
        result = profile_dispatches(text, runtime.CompileOptions(), function=function)
    typer.echo(result.table(top=top or None))


# ----- run ------------------------------------------------------------------------------

@app.command()
def run(
    artifact: Path = typer.Argument(..., metavar="ART.vmfb", help="A compiled artifact."),
    function: str | None = typer.Option(
        None, "--function", "-f", metavar="NAME", help="The function to call (default: the only one)."),
    inputs: list[str] | None = typer.Option(
        None, "--input", "-i", metavar="SPEC",
        help="One argument, in order: 2x2xf32=1,2,3,4 | f32=3 | 2x2xf32=@raw.bin | @x.npy (repeat per argument); "
             "or @args.npz alone: every argument, by name or position."),
    device: str | None = typer.Option(
        None, "--device", "-d",
        help="IREE driver: local-task, local-sync, vulkan, cuda, hip (default: the artifact's)."),
    outputs: list[str] | None = typer.Option(
        None, "--output", metavar="SPEC",
        help="Per result, in order: @out.npy (write), +out.npy (append), - (print), '' (skip). "
             "Results past the last --output are printed. @out.npz alone: every result, by name "
             "(irgrad inspect shows them; result<i> where a result has none)."),
) -> None:
    """Call a function of an artifact and print its results like iree-run-module."""
    try:
        parsed = [parse_input(spec) for spec in inputs or []]
        sinks = [parse_output(spec) for spec in outputs or []]
    except ValueError as error:
        raise CLIError(str(error), USAGE) from None
    archives = [(spec, p) for spec, p in zip(inputs or [], parsed) if isinstance(p, dict)]
    if archives and len(parsed) > 1:
        raise CLIError(f"--input {archives[0][0]} holds every argument: give it alone", USAGE)
    if any(path is not None and path.suffix == ".npz" for _, path in sinks) and len(sinks) > 1:
        raise CLIError("an --output @FILE.npz takes every result: give it alone", USAGE)
    if not artifact.is_file():
        raise CLIError(f"{artifact}: no such file", USAGE)
    module = runtime.load(artifact, device)
    function = pick_function(list(module.functions), function, artifact)
    if archives:
        try:
            arrays = arguments_from_npz(archives[0][1], module.functions[function], archives[0][0][1:])
        except ValueError as error:
            raise CLIError(str(error), USAGE) from None
    else:
        arrays = [array for arrays in parsed for array in arrays]
    types = module.functions[function].outputs
    if len(sinks) > len(types):
        results = "result" if len(types) == 1 else "results"
        raise CLIError(f"{len(sinks)} --output given, but {function} returns {len(types)} {results}", USAGE)
    typer.echo(report_results(function, module[function].call_flat(*arrays), types, sinks,
                              names=module.functions[function].output_keys()))


def _artifact_metadata(path: Path) -> tuple[bytes, dict]:
    """An artifact's bytes and metadata (checked, no device needed); errors name the file."""
    if not path.is_file():
        raise CLIError(f"{path}: no such file", USAGE)
    data = path.read_bytes()
    try:
        return data, runtime.read_metadata(data, read_sidecar(path))
    except runtime.ArtifactError as error:
        raise runtime.ArtifactError(f"{path}: {error}") from None


@app.command()
def viz(
    source: str = typer.Argument(..., metavar="SRC", help="An .mlir file, path/to/model.py:function or an artifact."),
    output: Path = typer.Option(..., "-o", "--output", metavar="OUT.svg",
                                help="The picture: .svg, .png or .pdf (rendered by Graphviz's dot) or .dot."),
    grad: bool = typer.Option(False, "--grad", help="Draw @F_grad: F's forward ops and the ones the pass adds."),
    wrt: str | None = typer.Option(None, "--wrt", metavar="I,J", help=WRT_HELP),
    func: str | None = typer.Option(None, "--func", metavar="NAME", help="The function to draw (default: the only "
                                    "public one; with --grad, the one to differentiate)."),
) -> None:
    """Draw a function (and, with --grad, its adjoint) as a graph of ops; an artifact as its functions."""
    if source.endswith(".vmfb"):
        if grad or wrt is not None or func is not None:
            raise CLIError("an artifact holds no StableHLO: --grad, --wrt and --func need an .mlir or model.py", USAGE)
        path = Path(source)
        dot = module_graph(signatures_from_metadata(_artifact_metadata(path)[1]), path.name)
    else:
        text, name = load_source(source)
        function = func or name
        if grad:
            before = set(runtime.parse_signatures(text))
            text = adjoints(text, function, wrt, True, False, False)
            function = next(n for n in runtime.parse_signatures(text) if n not in before)  # the new @F_grad
        elif wrt is not None:
            raise CLIError("--wrt needs --grad", USAGE)
        dot = function_graph(text, function)
    try:
        render(dot, output)
    except ValueError as error:
        raise CLIError(str(error), USAGE) from None
    except RuntimeError as error:
        raise CLIError(str(error)) from None
    nodes = sum(1 for line in dot.splitlines() if " [label=" in line and " -> " not in line)
    typer.echo(f"{output}: {nodes} nodes, {dot.count(' -> ')} edges")


# ----- inspect / targets ----------------------------------------------------------------

@app.command()
def inspect(
    artifact: Path = typer.Argument(..., metavar="ART.vmfb", help="A compiled artifact."),
    as_json: bool = typer.Option(False, "--json", help="Print the metadata as JSON."),
) -> None:
    """Show an artifact's functions, target, flags and versions (no device needed)."""
    data, metadata = _artifact_metadata(artifact)
    if as_json:
        typer.echo(json.dumps(metadata, indent=2, sort_keys=True))
        return
    typer.echo(describe_artifact(artifact, len(data), metadata))


@app.command()
def targets() -> None:
    """List compile targets and the runtime devices usable on this machine."""
    typer.echo(describe_targets())
