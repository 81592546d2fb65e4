"""The ``irgrad`` command line.

    irgrad grad IN.mlir -o OUT.mlir [--func F] [--wrt 0,2] [--vjp] [--with-value]
    irgrad compile SRC -o OUT.vmfb [--target T] [--cpu ..] [--triple ..] [--cuda-arch ..]
                   [--rocm-arch ..] [--grad] [--vjp] [--with-value] [--wrt ..] [--func F] [--no-cache]
    irgrad run ART.vmfb --function F --input 2x2xf32=1,2,3,4 --input @x.npy
               [--device D] [--output @out.npy]
    irgrad emit MODEL.py:FUNCTION [--grad] [--vjp] [--with-value] [--wrt ..]
    irgrad inspect ART.vmfb [--json]
    irgrad header ART.vmfb -o OUT.h [--embed] [--prefix NAME]
    irgrad profile SRC [--function F] [--grad] [--wrt ..] [--top N]
    irgrad targets
    irgrad cache info | clear
    irgrad [--verbose] [--debug] CMD ...

This module parses arguments, calls irgrad's library (``irgrad.commands``,
``irgrad.values``, ``irgrad.runtime``) and prints. Every error
is one line on stderr (``irgrad: error: ...``): exit status 2 for a bad
command line (unknown option or target, bad ``--input`` syntax, a missing
file, a name that names nothing: ``--func``/``--function``, ``--wrt``, an
argument missing from an ``--input @args.npz``; a near miss gets "did you
mean"), 1 for anything that fails while running. ``irgrad --debug CMD`` shows
the Python traceback instead. ``--func`` and ``--function`` (``-f``) are one
option in every command.
"""
import json
import time
from pathlib import Path
from typing import Annotated

import typer

import irgrad
from irgrad import runtime
from irgrad.runtime.vmfb import signatures_from_metadata
from irgrad.runtime.profile import profile_dispatches
from irgrad.console import ErrorLines, State, cache_app, log_to_stderr, progress
from irgrad.commands import (USAGE, CLIError, adjoints, argument_lines, artifact_metadata, compile_blaming,
                          describe_artifact, describe_targets, load_source, pick_function, read_mlir,
                          signature_lines, with_file_locations, write_text)
from irgrad.commands import parse_wrt  # noqa: F401  (re-exported: benchmarks/profile.py imports it from here)
from irgrad.viz import function_graph, module_graph, render
from irgrad.values import read_run_specs, report_results


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

CHECKPOINTS_HELP = ("Keep K snapshots of each while loop's state (sqrt: about the square root of its trip "
                    "count) and recompute the iterations between them in the reverse pass, instead of "
                    "recording every iteration.")
TRAIN_HELP = ("Add @F_train_init(args...) -> state and @F_train_step(args..., state...) -> (F's results, "
              "updated args[wrt], updated state): one optimizer step per call (sgd, momentum, adam).")
PROX_HELP = ("FedProx: train @F_prox, F's loss plus mu/2 ||w - w_global||^2 over the parameters, whose "
             "training step takes the global parameters after F's arguments (needs --train).")

# The options several commands share, declared once.
Func = Annotated[str | None, typer.Option(
    "--func", "--function", "-f", metavar="NAME",
    help="The function: to differentiate (with --grad, --vjp, --train...), to call, profile or draw "
         "(default: the module's only public function).")]
Wrt = Annotated[str | None, typer.Option(
    "--wrt", metavar="I,J", help="Arguments to differentiate, by index or by name, e.g. 0,2 or w,b (default: every "
    "float argument; irgrad grad --list-args shows them).")]
Grad = Annotated[bool, typer.Option("--grad", help="Add @F_grad (the gradient of the sum of F's results).")]
Vjp = Annotated[bool, typer.Option("--vjp", help="Add @F_vjp(args..., cotangents...).")]
WithValue = Annotated[bool, typer.Option(
    "--with-value", help="Adjoint functions return F's results first, then the gradients.")]
Checkpoints = Annotated[str | None, typer.Option("--loop-checkpoints", metavar="K|sqrt", help=CHECKPOINTS_HELP)]
Train = Annotated[str | None, typer.Option("--train", metavar="sgd|momentum|adam", help=TRAIN_HELP)]
Lr = Annotated[float | None, typer.Option(
    "--lr", metavar="X", help="Learning rate for --train (default: the optimizer's Keras default, 0.01 or 0.001 "
    "for adam).")]
ProxMu = Annotated[float | None, typer.Option("--prox-mu", metavar="MU", help=PROX_HELP)]
Source = Annotated[str, typer.Argument(metavar="SRC", help="An .mlir file or path/to/model.py:function.")]
Artifact = Annotated[Path, typer.Argument(metavar="ART.vmfb", help="A compiled artifact.")]


@app.command()
def grad(
    source: Annotated[Path, typer.Argument(metavar="IN.mlir", help="StableHLO module.")],
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", metavar="OUT.mlir", help="Where to write the module (default: stdout).")] = None,
    func: Func = None, wrt: Wrt = None, vjp: Vjp = False, with_value: WithValue = False,
    jvp: Annotated[bool, typer.Option("--jvp", help="Forward mode: add @F_jvp(args..., tangents...) -> "
                                      "(results..., their tangents...) instead of @F_grad.")] = False,
    hessian: Annotated[bool, typer.Option("--hessian", help="Add @F_hessian(args...) -> one x.shape + x.shape "
                                          "Hessian block per wrt argument, instead of @F_grad.")] = False,
    loop_checkpoints: Checkpoints = None, train: Train = None, lr: Lr = None, prox_mu: ProxMu = None,
    list_args: Annotated[bool, typer.Option("--list-args", help="List the public functions' arguments "
                                            "(index, name, type) for --wrt, and write nothing.")] = False,
) -> None:
    """Add @F_grad (gradient of the sum of F's results) to a StableHLO module.

    If the gradient cannot be built, OUT.mlir is not written (an existing one
    is left as it was).
    """
    if list_args:
        typer.echo(argument_lines(read_mlir(source), func))
        return
    text = adjoints(read_mlir(source), func, wrt, grad=not (jvp or hessian or train), vjp=vjp, with_value=with_value,
                    jvp=jvp, hessian=hessian, loop_checkpoints=loop_checkpoints, train=train, lr=lr, prox_mu=prox_mu)
    write_text(output, with_file_locations(text))


@app.command()
def emit(
    source: Annotated[str, typer.Argument(metavar="MODEL.py:FUNCTION", help="An ig.function with an input_signature.")],
    grad: Grad = False, vjp: Vjp = False, with_value: WithValue = False, wrt: Wrt = None,
) -> None:
    """Print the StableHLO of an ig.function (and its adjoints) on stdout."""
    text, name = load_source(source)
    write_text(None, adjoints(text, name, wrt, grad=grad, vjp=vjp, with_value=with_value))


# ----- compile / profile ----------------------------------------------------------------

@app.command("compile")
def compile_command(
    source: Source,
    output: Annotated[Path, typer.Option("-o", "--output", metavar="OUT.vmfb", help="The artifact to write.")],
    target: Annotated[str, typer.Option("--target", "-t", help="llvm-cpu (alias cpu), vulkan-spirv (alias vulkan), "
                                        "cuda, rocm or vmvx; see irgrad targets.")] = "llvm-cpu",
    cpu: Annotated[str | None, typer.Option(help="llvm-cpu: host (default), generic or an LLVM CPU name.")] = None,
    triple: Annotated[str | None, typer.Option(help="llvm-cpu: cross-compile, e.g. aarch64-linux-gnu.")] = None,
    cuda_arch: Annotated[str | None, typer.Option(help="cuda: GPU architecture, e.g. sm_86 (default sm_80).")] = None,
    rocm_arch: Annotated[str | None, typer.Option(help="rocm: GPU architecture, e.g. gfx942 (default).")] = None,
    grad: Grad = False, vjp: Vjp = False, with_value: WithValue = False, wrt: Wrt = None, func: Func = None,
    loop_checkpoints: Checkpoints = None, train: Train = None, lr: Lr = None, prox_mu: ProxMu = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Compile again even if a cached artifact exists.")]
    = False,
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
    text = adjoints(forward, func or name, wrt, grad=grad, vjp=vjp, with_value=with_value,
                    loop_checkpoints=loop_checkpoints, train=train, lr=lr, prox_mu=prox_mu)
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
    source: Source, func: Func = None, wrt: Wrt = None,
    grad: Annotated[bool, typer.Option("--grad", help="Profile @F_grad (F's value and gradient).")] = False,
    top: Annotated[int, typer.Option("--top", metavar="N", help="Dispatches to list (0: all).")] = 25,
) -> None:
    """Time each dispatch (one fused kernel IREE runs) alone and inside a call, name the model's ops it
    came from, and show where a call's time goes."""
    text, name = load_source(source)
    function = pick_function(list(runtime.parse_signatures(text)), func or name, source)
    if grad:
        text = adjoints(text, function, wrt, grad=True, with_value=True)
        function = f"{function}_grad"
    elif wrt is not None:
        raise CLIError("--wrt needs --grad", USAGE)
    with progress(f"irgrad: profiling {source} (compiling, then timing every dispatch)"):
        result = profile_dispatches(text, runtime.CompileOptions(), function=function)
    typer.echo(result.table(top=top or None))


# ----- run ------------------------------------------------------------------------------

@app.command()
def run(
    artifact: Artifact, function: Func = None,
    inputs: Annotated[list[str] | None, typer.Option(
        "--input", "-i", metavar="SPEC",
        help="One argument, in order: 2x2xf32=1,2,3,4 | f32=3 | 2x2xf32=@raw.bin | @x.npy (repeat per argument); "
             "or @args.npz alone: every argument, by name or position.")] = None,
    device: Annotated[str | None, typer.Option(
        "--device", "-d", help="IREE driver: local-task, local-sync, vulkan, cuda, hip (default: the artifact's).")
    ] = None,
    outputs: Annotated[list[str] | None, typer.Option(
        "--output", metavar="SPEC",
        help="Per result, in order: @out.npy (write), +out.npy (append), - (print), '' (skip). Results past the "
             "last --output are printed. @out.npz alone: every result, by name (irgrad inspect shows them; "
             "result<i> where a result has none).")] = None,
) -> None:
    """Call a function of an artifact and print its results like iree-run-module."""
    try:
        arguments, sinks = read_run_specs(inputs or [], outputs or [])
    except ValueError as error:
        raise CLIError(str(error), USAGE) from None
    if not artifact.is_file():
        raise CLIError(f"{artifact}: no such file", USAGE)
    module = runtime.load(artifact, device)
    signature = module.functions[pick_function(list(module.functions), function, artifact)]
    try:
        arrays = arguments(signature)
    except ValueError as error:
        raise CLIError(str(error), USAGE) from None
    results = module[signature.name].call_flat(*arrays)
    typer.echo(report_results(signature.name, results, signature.outputs, sinks, names=signature.output_keys()))


@app.command()
def viz(
    source: Annotated[str, typer.Argument(metavar="SRC", help="An .mlir file, path/to/model.py:function or an "
                                          "artifact.")],
    output: Annotated[Path, typer.Option("-o", "--output", metavar="OUT.svg", help="The picture: .svg, .png or "
                                         ".pdf (rendered by Graphviz's dot) or .dot.")],
    grad: Annotated[bool, typer.Option("--grad", help="Draw @F_grad: F's forward ops and the ones the pass adds.")]
    = False,
    wrt: Wrt = None, func: Func = None,
) -> None:
    """Draw a function (and, with --grad, its adjoint) as a graph of ops; an artifact as its functions."""
    if source.endswith(".vmfb"):
        if grad or wrt is not None or func is not None:
            raise CLIError("an artifact holds no StableHLO: --grad, --wrt and --func need an .mlir or model.py", USAGE)
        path = Path(source)
        dot = module_graph(signatures_from_metadata(artifact_metadata(path)[1]), path.name)
    else:
        text, name = load_source(source)
        function = func or name
        if grad:
            before = set(runtime.parse_signatures(text))
            text = adjoints(text, function, wrt, grad=True)
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
    artifact: Artifact,
    as_json: Annotated[bool, typer.Option("--json", help="Print the metadata as JSON.")] = False,
) -> None:
    """Show an artifact's functions, target, flags and versions (no device needed)."""
    data, metadata = artifact_metadata(artifact)
    if as_json:
        typer.echo(json.dumps(metadata, indent=2, sort_keys=True))
        return
    typer.echo(describe_artifact(artifact, len(data), metadata))


@app.command()
def targets() -> None:
    """List compile targets and the runtime devices usable on this machine."""
    typer.echo(describe_targets())


# ----- header (issue 41: a typed C interface per artifact) -------------------------------

@app.command()
def header(
    artifact: Artifact,
    output: Annotated[Path, typer.Option("-o", "--output", metavar="OUT.h", help="The C header to write.")],
    embed: Annotated[bool, typer.Option("--embed", help="Put the artifact's bytes in the header "
                                        "(PREFIX_open_embedded): the application is one binary.")] = False,
    prefix: Annotated[str | None, typer.Option("--prefix", metavar="NAME", help="What the header's identifiers "
                                               "start with (default: the artifact's file name).")] = None,
) -> None:
    """Write a typed C header for an artifact: one C function per exported function, on irgrad's C library
    (docs/guides/embedding-c.md)."""
    from irgrad.runtime.c_header import c_header

    data, metadata = artifact_metadata(artifact)
    try:
        text = c_header(metadata, prefix or artifact.stem, source=artifact.name, vmfb=data if embed else None)
    except ValueError as error:
        raise CLIError(f"{artifact}: {error}") from None
    from irgrad.runtime.artifact import atomic_write

    atomic_write(output, text.encode())
    typer.echo(f"{output}: {len(metadata['functions'])} functions" + (f", {len(data):,} bytes embedded" if embed
                                                                       else ""))
