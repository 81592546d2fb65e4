"""Which of the model's ops each dispatch came from: MLIR locations through IREE.

IREE carries every op's location through fusion: the ops of a dispatch's kernel keep
the locations of the StableHLO ops they were made from. Compiled with
``--mlir-print-debuginfo``, the benchmark modules IREE dumps per dispatch print them,
so a dispatch's sources are read from its dump:

- the location of the dispatch's function (the op IREE formed the dispatch around,
  its *root*) first, then
- those of the ops that compute inside its body (``linalg``, ``arith``, ``math``,
  ``tensor`` ops), in order, without the ops that only bind buffers or load and store
  them (their locations are those of other dispatches' ops, which produced the inputs).

A location names an op as its producer did:

- irgrad's frontend and passes write *name* locations: ``loc("MatMul")``,
  ``loc("loss_grad/tanh_grad"("tanh"))`` (the adjoint of ``tanh`` inside ``loss_grad``);
  JAX ``loc("jit(f)/jit(main)/tanh"("f.py":3:4))``: the name is what is shown;
- a module parsed from text without names has *file* locations (``"-":12:8``, line and
  column of its source): shown as the op at that place and its line,
  ``stablehlo.tanh (line 12)``, which ``file_locations`` reads from the parsed module;
- ``fused[...]`` and ``callsite(... at ...)`` are read as their parts (the callee).
"""

from __future__ import annotations

import re
from typing import Any

from ..boundary import mlir_bindings

__all__ = ["dispatch_sources", "file_locations", "location_names"]

_FUNC = re.compile(r"^(\s*)func\.func @([\w$.-]+)\(\)", re.M)
_ALIAS = re.compile(r"^#([\w$.-]+) = loc\((.*)\)\s*$", re.M)
# Ops that compute: their locations are the dispatch's sources. (Loads, stores, buffer
# bindings, constants and empty tensors carry their producers' or a neighbour's location.)
_COMPUTE = re.compile(r"=\s*\"?(linalg|arith|math|tensor|iree_linalg_ext|complex)\.(\w+)|^\s*\}\s*->")
_NOT_COMPUTE = {"constant", "empty", "dim"}
_FILE = re.compile(r'^"((?:[^"\\]|\\.)*)":(\d+):(\d+)')


def dispatch_sources(dump: str, file_ops: dict[str, str] | None = None) -> dict[str, tuple[str, ...]]:
    """Per dispatch function in a dumped benchmark module: the sources it computes, root first.

    ``file_ops`` maps file locations (``"-":12:8``) to op names (``file_locations``)."""
    aliases = {name: body for name, body in _ALIAS.findall(dump)}
    found: dict[str, tuple[str, ...]] = {}
    for match in _FUNC.finditer(dump):
        indent, name = match.groups()
        end = dump.find("\n" + indent + "}", match.end())
        if end < 0:
            continue
        closing = dump[end + 1: dump.find("\n", end + 1) % (len(dump) + 1)]
        names = location_names(_trailing_loc(closing), aliases, file_ops)
        for line in dump[match.end(): end].splitlines():
            op = _COMPUTE.search(line)
            if op and op.group(2) not in _NOT_COMPUTE:
                names += location_names(_trailing_loc(line), aliases, file_ops)
        found[name] = tuple(dict.fromkeys(names))
    return found


def _trailing_loc(line: str) -> str:
    """The body of the ``loc(...)`` that ends a line of MLIR, or ``""``."""
    line = line.rstrip()
    if not line.endswith(")"):
        return ""
    depth, quoted = 0, False
    for i in range(len(line) - 1, -1, -1):
        c = line[i]
        if c == '"' and (i == 0 or line[i - 1] != "\\"):
            quoted = not quoted
        elif not quoted and c == ")":
            depth += 1
        elif not quoted and c == "(":
            depth -= 1
            if depth == 0:
                return line[i + 1:-1] if line[:i].endswith("loc") else ""
    return ""


def location_names(loc: str, aliases: dict[str, str] | None = None,
                   file_ops: dict[str, str] | None = None) -> list[str]:
    """What a location (the text inside ``loc(...)``) names: ``"a/b"("c")`` -> ``["a/b"]``;
    ``fused["a", "b"]`` -> ``["a", "b"]``; a file location -> the op there (``file_ops``)
    and its line; ``unknown`` -> ``[]``."""
    loc = loc.strip()
    if loc.startswith("#"):
        return location_names(aliases.get(loc[1:], ""), aliases, file_ops) if aliases else []
    if loc.startswith("fused"):
        start, stop = loc.find("["), loc.rfind("]")
        parts = _split(loc[start + 1:stop], ",") if 0 <= start < stop else []
        return [name for part in parts for name in location_names(part, aliases, file_ops)]
    if loc.startswith("callsite("):
        return location_names(_split(loc[len("callsite("):-1], " at ")[0], aliases, file_ops)
    file = _FILE.match(loc)
    if file:
        path, line, column = file.groups()
        op = (file_ops or {}).get(f'"{path}":{line}:{column}')
        where = f"line {line}" if path in ("-", "") else f"{path.rsplit('/', 1)[-1]}:{line}"
        return [f"{op} ({where})" if op else where]
    name = re.match(r'"((?:[^"\\]|\\.)*)"', loc)
    return [name.group(1)] if name else []


def _split(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` outside quotes, parentheses and brackets."""
    parts, depth, quoted, start, i = [], 0, False, 0, 0
    while i < len(text):
        c = text[i]
        if c == '"' and (i == 0 or text[i - 1] != "\\"):
            quoted = not quoted
        elif not quoted and c in "([<":
            depth += 1
        elif not quoted and c in ")]>":
            depth -= 1
        elif not quoted and depth == 0 and text.startswith(separator, i):
            parts.append(text[start:i])
            start = i + len(separator)
            i = start
            continue
        i += 1
    return [*parts, text[start:]]


def file_locations(module: Any) -> dict[str, str]:
    """File locations (``"-":12:8``) of the ops of a parsed module -> the ops' names
    (``stablehlo.tanh``): how a dispatch of a module without name locations names its sources."""
    found: dict[str, str] = {}

    def visit(op: Any) -> Any:
        loc = str(op.location)
        if loc.startswith("loc(") and _FILE.match(loc[4:]):
            found.setdefault(loc[4:-1], op.name)
        return advance

    advance = mlir_bindings().WalkResult.ADVANCE
    module.operation.walk(visit)
    return found
