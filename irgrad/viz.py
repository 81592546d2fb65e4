"""Pictures of a function and its adjoint: Graphviz DOT text, rendered by Graphviz's ``dot``.

    dot = function_graph(text, "loss_grad")   # ops as nodes, values as edges
    render(dot, Path("loss_grad.svg"))        # .dot is written as is; .svg/.png/.pdf need `dot`

A derived function (``@F_grad``, ``@F_vjp``, ``@F_train_step``, ...) holds a copy of ``F``'s
forward ops and the ops the pass added, which carry ``F_grad/...`` name locations: the two
halves are drawn in different colours. An artifact holds no StableHLO, so ``module_graph``
draws its functions and their signatures, each derived function linked to ``F``.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from . import passes
from .boundary import argument_names
from .runtime import Signature
from .runtime.artifact import atomic_write

__all__ = ["function_graph", "module_graph", "render", "FORMATS"]

FORMATS = ("dot", "svg", "png", "pdf")
FORWARD, ADJOINT, BOUNDARY = "#cfe2f3", "#fce5cd", "#eeeeee"
_DERIVED = ("_grad", "_vjp", "_jvp", "_hessian", "_train_init", "_train_step", "_batched")


def _quote(text: str) -> str:
    return json.dumps(text)  # a DOT string: double quotes, backslash escapes


def _adjoint_of(op, name: str) -> bool:
    """Whether the pass added ``op`` to the derived function ``name`` (its name location
    starts with ``name/`` or is ``name``)."""
    loc = passes.ir.mlir.loc_name(op)
    return loc is not None and (loc == name or loc.startswith(name + "/"))


def _short_type(value) -> str:
    text = str(value.type)
    return text[len("tensor<"):-1] if text.startswith("tensor<") else text


def function_graph(text: str, func: str | None = None) -> str:
    """DOT text of one function of a StableHLO module: its arguments, one node per op (an op
    with regions as one node naming how many ops it holds), its results; edges follow the
    values. Ops the pass added are coloured apart from the forward's."""
    module = passes.parse_module(text)
    func_op = passes.find_function(module, func)
    name = passes.function_name(func_op)
    derived = name.endswith(_DERIVED)
    block = func_op.regions[0].blocks[0]
    ids: dict = {}  # SSA value -> node id
    lines = [f"digraph {_quote(name)} {{", "  rankdir=TB;",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
             f"  label={_quote(f'@{name}' + (' (blue: forward, orange: added by the pass)' if derived else ''))};",
             "  labelloc=t;"]
    names = argument_names(func_op)
    for i, arg in enumerate(block.arguments):
        node = f"arg{i}"
        ids[arg] = node
        label = f"{names[i] or f'arg {i}'}\n{_short_type(arg)}"
        lines.append(f"  {node} [label={_quote(label)}, shape=ellipse, fillcolor={_quote(BOUNDARY)}];")
    for k, inner in enumerate(block.operations):
        op = inner.operation
        node = f"op{k}"
        inner_ops = list(passes.ir.regions.nested_ops(op))
        if op.name == "func.return":
            label, color, shape = "return", BOUNDARY, "ellipse"
        else:
            held = len(inner_ops)
            kind = op.name.removeprefix("stablehlo.")
            types = ", ".join(_short_type(r) for r in op.results)
            label = kind + (f" ({held} ops inside)" if held else "") + (f"\n{types}" if types else "")
            color = ADJOINT if derived and _adjoint_of(op, name) else FORWARD
            shape = "box"
        lines.append(f"  {node} [label={_quote(label)}, fillcolor={_quote(color)}, shape={shape}];")
        sources = []  # its operands, and the values its regions capture from this block
        for used in (op, *inner_ops):
            sources += [ids[v] for v in used.operands if v in ids]
        lines += [f"  {source} -> {node};" for source in dict.fromkeys(sources)]
        for result in op.results:
            ids[result] = node
    lines.append("}")
    return "\n".join(lines) + "\n"


def module_graph(functions: dict[str, Signature], title: str) -> str:
    """DOT text of an artifact's functions: one node per function with its signature, and an
    edge from ``F`` to each function derived from it (``F_grad``, ``F_train_step``, ...)."""
    lines = [f"digraph {_quote(title)} {{", "  rankdir=LR;",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
             f"  label={_quote(title + ' (blue: functions, orange: derived by irgrad)')};", "  labelloc=t;"]
    for i, (fname, signature) in enumerate(functions.items()):
        derived = fname.endswith(_DERIVED)
        label = repr(signature).replace("(", "(\n", 1).replace(" -> ", "\n-> ")
        lines.append(f"  f{i} [label={_quote(label)}, fillcolor={_quote(ADJOINT if derived else FORWARD)}];")
    index = {fname: i for i, fname in enumerate(functions)}
    for fname, i in index.items():
        for suffix in _DERIVED:
            if fname.endswith(suffix) and fname.removesuffix(suffix) in index:
                lines.append(f"  f{index[fname.removesuffix(suffix)]} -> f{i} [label={_quote(suffix[1:])}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(dot: str, path: Path) -> None:
    """Write ``dot`` to ``path``: as DOT text for ``.dot``, else rendered by Graphviz's ``dot``
    into the suffix's format. Written atomically; ValueError for another suffix,
    RuntimeError when Graphviz is missing or fails."""
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise ValueError(f"{path}: unknown picture format {path.suffix or '(none)'!r}; use "
                         f"{', '.join('.' + f for f in FORMATS)}")
    if fmt == "dot":
        atomic_write(path, dot.encode())
        return
    tool = shutil.which("dot")
    if tool is None:
        raise RuntimeError(f"rendering {path.name} needs Graphviz's dot (apt install graphviz, "
                           "brew install graphviz); or write a .dot file")
    done = subprocess.run([tool, f"-T{fmt}"], input=dot.encode(), capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"Graphviz's dot failed: {done.stderr.decode(errors='replace').strip()[:300]}")
    atomic_write(path, done.stdout)
