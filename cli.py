"""The ``irgrad`` command line.

    irgrad grad IN.mlir -o OUT.mlir [--func F] [--wrt 0,2] [--vjp] [--jvp] [--hessian] [--with-value]
                [--train sgd|momentum|adam [--lr X]] [--max-memory SIZE]
    irgrad compile SRC -o OUT.vmfb [--target T] [--cpu ..] [--triple ..] [--cuda-arch ..]
                   [--rocm-arch ..] [--grad] [--vjp] [--jvp] [--hessian] [--with-value] [--wrt ..]
                   [--train ...] [--func F] [--max-memory SIZE] [--no-cache]
    irgrad run ART.vmfb --function F --input 2x2xf32=1,2,3,4 --input @x.npy
               [--device D] [--output @out.npy]
    irgrad emit MODEL.py:FUNCTION [--grad] [--vjp] [--jvp] [--hessian] [--with-value] [--wrt ..]
    irgrad inspect ART.vmfb [--json]
    irgrad header ART.vmfb -o OUT.h [--embed] [--prefix NAME]
    irgrad profile SRC [--function F] [--grad] [--wrt ..] [--top N] [--device D]
    irgrad targets
    irgrad cache info | clear
    irgrad [--verbose] [--debug] CMD ...

This module parses arguments, calls irgrad's library (``irgrad.commands``;
``irgrad.artifact_cli`` for inspect and run, which the runtime-only install's ``irgrad``
shares) and prints. Every error
is one line on stderr (``irgrad: error: ...``): exit status 2 for a bad
command line (unknown option or target, bad ``--input`` syntax, a missing
file, a name that names nothing: ``--func``/``--function``, ``--wrt``, an
argument missing from an ``--input @args.npz``; a near miss gets "did you
mean"), 1 for anything that fails while running. ``irgrad --debug CMD`` shows
the Python traceback instead. ``--func`` and ``--function`` (``-f``) are one
option in every command.
"""
import time
from pathlib import Path
from typing import Annotated, Any

import typer

import irgrad
from irgrad import passes, runtime
from irgrad.runtime.artifact import atomic_write
from irgrad.runtime.c_header import c_header
from irgrad.runtime.vmfb import signatures_from_metadata
from irgrad.runtime.profile import profile_dispatches
from irgrad.console import ErrorLines, State, cache_app, log_to_stderr, progress
from irgrad.artifact_cli import inspect_artifact, peak_lines, run_artifact
from irgrad.commands import (USAGE, CLIError, adjoints, argument_lines, artifact_metadata, compile_blaming,
                          describe_targets, load_source, pick_function, read_mlir, signature_lines, training_lines,
                          training_needs_wrt, with_file_locations, write_text)
from irgrad.commands import parse_wrt  # noqa: F401  (re-exported: benchmarks/profile.py imports it from here)
from irgrad.viz import function_graph, module_graph, render


class QuietHelp(ErrorLines):
    """``-h/--help`` shows no value beside it, like every flag here (``flag``): recent typer
    releases (0.29) print ``<bool>`` beside an option whose metavar is None, click's own help
    option included. It is made per command, so each command's is set as the group hands it out.
    (Help paragraphs are one line each in the docstrings: rich keeps their line breaks.)"""

    def get_help_option(self, ctx: Any) -> Any:
        return _no_metavar(super().get_help_option(ctx))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None and not isinstance(command, QuietHelp):  # a group sets its own
            _no_metavar(command.get_help_option(ctx))
        return command


def _no_metavar(option: Any) -> Any:
    if option is not None:
        option.metavar = ""  # click caches the help option: this one is shown and parsed
    return option


app = typer.Typer(
    cls=QuietHelp,
    name="irgrad",
    help="Differentiate StableHLO, compile it with IREE and run the artifacts.",
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(cache_app, cls=QuietHelp)  # irgrad cache info | clear (irgrad/console.py)


# ----- options -------------------------------------------------------------------------

CHECKPOINTS_HELP = ("Keep K snapshots of each while loop's state (sqrt: about the square root of its trip "
                    "count) and recompute the iterations between them in the reverse pass, instead of "
                    "recording every iteration.")
TRAIN_HELP = ("Add @F_train_init(args...) -> state and @F_train_step(args..., state...) -> (F's results, "
              "updated args[wrt], updated state): one optimizer step per call (sgd, momentum, adam).")
PROX_HELP = ("FedProx: train @F_prox, F's loss plus mu/2 ||w - w_global||^2 over the parameters, whose "
             "training step takes the global parameters after F's arguments (needs --train).")


def flag(*names: str, help: str) -> Any:
    """A boolean option that takes no value. ``metavar=""``: recent typer releases would show
    ``<bool>`` beside it, as if it took one."""
    return typer.Option(*names, help=help, metavar="")


def function_option(purpose: str) -> Any:
    """``--func``/``--function``/``-f``, one option in every command; ``purpose`` says what the
    function is for in that command."""
    return typer.Option("--func", "--function", "-f", metavar="NAME",
                        help=f"The function {purpose} (default: the module's only public function).")


# The options several commands share, declared once.
Func = Annotated[str | None, function_option("to differentiate (with --grad, --vjp, --jvp, --hessian, --train)")]
Wrt = Annotated[str | None, typer.Option(
    "--wrt", metavar="I,J", help="Arguments to differentiate, by index or by name, e.g. 0,2 or w,b (default: every "
    "float argument; irgrad grad --list-args shows them).")]
Grad = Annotated[bool, flag("--grad", help="Add @F_grad (the gradient of the sum of F's results).")]
Vjp = Annotated[bool, flag("--vjp", help="Add @F_vjp(args..., cotangents...).")]
Jvp = Annotated[bool, flag("--jvp", help="Forward mode: add @F_jvp(args..., tangents...) -> (results..., their "
                                         "tangents...).")]
Hessian = Annotated[bool, flag("--hessian", help="Add @F_hessian(args...) -> one x.shape + x.shape Hessian block "
                                                 "per wrt argument (F a scalar).")]
WithValue = Annotated[bool, flag(
    "--with-value", help="Adjoint functions return F's results first, then the gradients.")]
Checkpoints = Annotated[str | None, typer.Option("--loop-checkpoints", metavar="K|sqrt", help=CHECKPOINTS_HELP)]
Train = Annotated[str | None, typer.Option("--train", metavar="sgd|momentum|adam", help=TRAIN_HELP)]
Lr = Annotated[float | None, typer.Option(
    "--lr", metavar="X", help="Learning rate for --train (default: the optimizer's Keras default, 0.01 or 0.001 "
    "for adam).")]
ProxMu = Annotated[float | None, typer.Option("--prox-mu", metavar="MU", help=PROX_HELP)]
MaxMemory = Annotated[str | None, typer.Option(
    "--max-memory", metavar="SIZE", help="Fit @F_grad/@F_vjp/@F_train_step under SIZE (e.g. 64M, 1.5G: what a "
    "call allocates over its arguments, as estimated): loops checkpointed, then forward values recomputed in the "
    "backward instead of kept; a SIZE it cannot meet is refused with the estimate and the smallest it can meet.")]
Source = Annotated[str, typer.Argument(metavar="SRC", help="An .mlir file or path/to/model.py:function.")]
Artifact = Annotated[Path, typer.Argument(metavar="ART.vmfb", help="A compiled artifact.")]


# ----- commands --------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``irgrad`` console script and ``python -m irgrad``."""
    app(args=argv, prog_name="irgrad")


@app.callback(invoke_without_command=True)
def _global(
    ctx: typer.Context,
    debug: Annotated[bool, flag("--debug", help="Show Python tracebacks instead of one-line errors.")] = False,
    version: Annotated[bool, flag("--version", help="Print the irgrad and IREE versions and exit.")] = False,
    verbose: Annotated[bool, flag("--verbose", "-v", help="Log what irgrad does on stderr: compiles, cache hits, "
                                  "IREE workarounds, the device chosen.")] = False,
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

@app.command()
def grad(
    source: Annotated[Path, typer.Argument(metavar="IN.mlir", help="StableHLO module.")],
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", metavar="OUT.mlir", help="Where to write the module (default: stdout).")] = None,
    func: Func = None, wrt: Wrt = None, vjp: Vjp = False, with_value: WithValue = False, jvp: Jvp = False,
    hessian: Hessian = False,
    loop_checkpoints: Checkpoints = None, train: Train = None, lr: Lr = None, prox_mu: ProxMu = None,
    max_memory: MaxMemory = None,
    list_args: Annotated[bool, flag("--list-args", help="List the public functions' arguments (index, name, type) "
                                    "for --wrt, and write nothing.")] = False,
) -> None:
    """Add @F_grad (gradient of the sum of F's results) to a StableHLO module.

    --vjp, --jvp, --hessian and --train add those functions (@F_grad only without the last three).

    If the gradient cannot be built, OUT.mlir is not written (an existing one is left as it was).
    """
    if list_args:
        typer.echo(argument_lines(read_mlir(source), func))
        return
    text = adjoints(read_mlir(source), func, wrt, grad=not (jvp or hessian or train), vjp=vjp, with_value=with_value,
                    jvp=jvp, hessian=hessian, loop_checkpoints=loop_checkpoints, train=train, lr=lr, prox_mu=prox_mu,
                    max_memory=max_memory)
    write_text(output, with_file_locations(text))


@app.command()
def emit(
    source: Annotated[str, typer.Argument(metavar="MODEL.py:FUNCTION", help="An ig.function with an input_signature.")],
    grad: Grad = False, vjp: Vjp = False, jvp: Jvp = False, hessian: Hessian = False, with_value: WithValue = False,
    wrt: Wrt = None,
) -> None:
    """Print the StableHLO of an ig.function (and its adjoints) on stdout."""
    text, name = load_source(source)
    write_text(None, adjoints(text, name, wrt, grad=grad, vjp=vjp, jvp=jvp, hessian=hessian, with_value=with_value))


# ----- compile / profile ----------------------------------------------------------------

@app.command("compile")
def compile_command(
    source: Source,
    output: Annotated[Path, typer.Option("-o", "--output", metavar="OUT.vmfb", help="The artifact to write.")],
    target: Annotated[str, typer.Option("--target", "-t", metavar="TARGET", help="llvm-cpu (alias cpu), "
                                        "vulkan-spirv (alias vulkan), cuda, rocm or vmvx; see irgrad targets.")]
    = "llvm-cpu",
    cpu: Annotated[str | None, typer.Option(metavar="CPU", help="llvm-cpu: host (default), generic or an LLVM CPU "
                                            "name.")] = None,
    triple: Annotated[str | None, typer.Option(metavar="TRIPLE", help="llvm-cpu: cross-compile, e.g. "
                                               "aarch64-linux-gnu.")] = None,
    cuda_arch: Annotated[str | None, typer.Option(metavar="SM", help="cuda: GPU architecture, e.g. sm_86 (default "
                                                  "sm_80).")] = None,
    rocm_arch: Annotated[str | None, typer.Option(metavar="GFX", help="rocm: GPU architecture, e.g. gfx942 "
                                                  "(default).")] = None,
    grad: Grad = False, vjp: Vjp = False, jvp: Jvp = False, hessian: Hessian = False, with_value: WithValue = False,
    wrt: Wrt = None, func: Func = None,
    loop_checkpoints: Checkpoints = None, train: Train = None, lr: Lr = None, prox_mu: ProxMu = None,
    max_memory: MaxMemory = None,
    no_cache: Annotated[bool, flag("--no-cache", help="Compile again even if a cached artifact exists.")] = False,
) -> None:
    """Compile StableHLO (optionally with its adjoints) into an IREE .vmfb artifact.

    With --train, --wrt names the parameters: a model.py needs it; an .mlir trains every float argument.
    """
    try:
        options = runtime.CompileOptions.for_target(
            target, cpu=cpu, triple=triple, cuda_arch=cuda_arch, rocm_arch=rocm_arch)
    except ValueError as error:
        raise CLIError(str(error), USAGE) from None
    if func is not None and not (grad or vjp or jvp or hessian or train):
        raise CLIError("--func needs --grad, --vjp, --jvp, --hessian or --train", USAGE)
    forward, name = load_source(source)
    if train is not None and wrt is None and name is not None:
        raise CLIError(training_needs_wrt(forward, name, source), USAGE)
    text = adjoints(forward, func or name, wrt, grad=grad, vjp=vjp, jvp=jvp, hessian=hessian, with_value=with_value,
                    loop_checkpoints=loop_checkpoints, train=train, lr=lr, prox_mu=prox_mu, max_memory=max_memory,
                    options=options)
    start = time.perf_counter()
    with progress(f"irgrad: compiling {source} for {options.target.value}"):
        artifact = compile_blaming(forward, text, options, cache=not no_cache)
    seconds = time.perf_counter() - start
    artifact.save(output)
    cached = f" (from the {artifact.cached} cache)" if artifact.cached else ""
    lines = [f"{output}: {len(artifact.vmfb):,} bytes, {options.describe()}, "
             f"compiled in {seconds:.2f} s{cached}", *signature_lines(artifact.functions),
             *peak_lines(artifact.metadata)]
    for step, layout in (artifact.metadata.get("training") or {}).items():  # the parameters --train chose
        lines += training_lines(step, layout, artifact.functions.get(step))
    typer.echo("\n".join(lines))


@app.command()
def profile(
    source: Source,
    func: Annotated[str | None, function_option("to profile (with --grad, its gradient)")] = None, wrt: Wrt = None,
    grad: Annotated[bool, flag("--grad", help="Profile @F_grad (F's value and gradient).")] = False,
    top: Annotated[int, typer.Option("--top", metavar="N", help="Dispatches to list (0: all).")] = 25,
    device: Annotated[str | None, typer.Option(
        "--device", "-d", metavar="DRIVER", help="IREE driver to time on: local-task (default) or local-sync.")]
    = None,
) -> None:
    """Time each dispatch (a fused kernel IREE runs), name the model's ops it came from, show where time goes, and
    the function's estimated peak memory."""
    text, name = load_source(source)
    function = pick_function(list(runtime.parse_signatures(text)), func or name, source)
    if grad:
        text = adjoints(text, function, wrt, grad=True, with_value=True)
        function = f"{function}_grad"
    elif wrt is not None:
        raise CLIError("--wrt needs --grad", USAGE)
    with progress(f"irgrad: profiling {source} (compiling, then timing every dispatch)"):
        try:
            result = profile_dispatches(text, runtime.CompileOptions(), function=function, device=device)
        except ValueError as error:  # a --device that cannot run this CPU's code
            raise CLIError(str(error), USAGE) from None
    typer.echo(result.table(top=top or None))
    # What the call needs: estimated (passes.estimate_peak) and measured (runtime.measure_peak).
    typer.echo(passes.estimate_peak(text, function).line())
    if result.measured_peak is not None:
        typer.echo(f"@{function}: measured peak {passes.memory.human(result.measured_peak)} over the memory after "
                   "loading (first call in a fresh process, arguments on the device)")


# ----- run ------------------------------------------------------------------------------

@app.command()
def run(
    artifact: Artifact, function: Annotated[str | None, function_option("to call")] = None,
    inputs: Annotated[list[str] | None, typer.Option(
        "--input", "-i", metavar="SPEC",
        help="One argument, in order: 2x2xf32=1,2,3,4 | f32=3 | 2x2xf32=@raw.bin | @x.npy (repeat per argument); "
             "or @args.npz alone: every argument, by name or position.")] = None,
    device: Annotated[str | None, typer.Option(
        "--device", "-d", metavar="DRIVER",
        help="IREE driver: local-task, local-sync, vulkan, cuda, hip (default: the artifact's).")
    ] = None,
    outputs: Annotated[list[str] | None, typer.Option(
        "--output", metavar="SPEC",
        help="Per result, in order: @out.npy (write), +out.npy (append), - (print), '' (skip). Results past the "
             "last --output are printed. @out.npz alone: every result, by name (irgrad inspect shows them; "
             "result<i> where a result has none).")] = None,
) -> None:
    """Call a function of an artifact and print its results like iree-run-module, each under its name."""
    typer.echo(run_artifact(artifact, function, inputs or [], outputs or [], device))


@app.command()
def viz(
    source: Annotated[str, typer.Argument(metavar="SRC", help="An .mlir file, path/to/model.py:function or an "
                                          "artifact.")],
    output: Annotated[Path, typer.Option("-o", "--output", metavar="OUT.svg", help="The picture: .svg, .png or "
                                         ".pdf (rendered by Graphviz's dot) or .dot.")],
    grad: Annotated[bool, flag("--grad", help="Draw @F_grad: F's forward ops and the ones the pass adds.")] = False,
    wrt: Wrt = None, func: Annotated[str | None, function_option("to draw (with --grad, its gradient)")] = None,
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
    as_json: Annotated[bool, flag("--json", help="Print the metadata as JSON.")] = False,
) -> None:
    """Show an artifact's functions, target, flags and versions (no device needed)."""
    typer.echo(inspect_artifact(artifact, as_json))


@app.command()
def targets() -> None:
    """List compile targets and the runtime devices usable on this machine."""
    typer.echo(describe_targets())


# ----- header (issue 41: a typed C interface per artifact) -------------------------------

@app.command()
def header(
    artifact: Artifact,
    output: Annotated[Path, typer.Option("-o", "--output", metavar="OUT.h", help="The C header to write.")],
    embed: Annotated[bool, flag("--embed", help="Put the artifact's bytes in the header (PREFIX_open_embedded): "
                                "the application is one binary.")] = False,
    prefix: Annotated[str | None, typer.Option("--prefix", metavar="NAME", help="What the header's identifiers "
                                               "start with (default: the artifact's file name).")] = None,
) -> None:
    """Write a typed C header for an artifact: one C function per exported function (docs/guides/embedding-c.md)."""
    data, metadata = artifact_metadata(artifact)
    try:
        text = c_header(metadata, prefix or artifact.stem, source=artifact.name, vmfb=data if embed else None)
    except ValueError as error:
        raise CLIError(f"{artifact}: {error}") from None
    atomic_write(output, text.encode())
    typer.echo(f"{output}: {len(metadata['functions'])} functions" + (f", {len(data):,} bytes embedded" if embed
                                                                       else ""))
