"""Every example a user copies from the documentation runs (issue 29, item 7).

The documents are README.md and every ``docs/**/*.md`` (``DOCUMENTS``: a new folder of
Markdown is one more entry there). Each fenced block is run, or carries a marker saying why not.

Markers are HTML comments on the lines right above a block's opening fence (no blank line
between; invisible on GitHub, visible in the Markdown):

* ``<!-- illustrative: REASON -->``: the block is not run; REASON (required) says why (it
  installs something, needs torch, is a synopsis, runs on another machine) and, where one does,
  which test covers it instead.
* ``<!-- installs: REASON -->`` (command blocks): the steps that install (``python3 -m venv``,
  ``pip install``/``download``, ``apt-get install``) are not run, REASON saying where they are;
  the rest of the block runs, with ``.venv`` being the environment the tests run in.
* ``<!-- inputs: NAME, NAME; REASON -->``: before the block runs, this test puts the files NAME
  (keys of ``INPUTS`` below, which says where each comes from) in its working directory.
* ``<!-- test-command -->``: the line CI runs (tests/test_packaging.py); no effect here.

How blocks run: the blocks of one section (from a heading of any level to the next) run in
order in one fresh temporary directory, so a later block reads the files an earlier one wrote,
as when a reader follows the section in one shell. ``examples`` and ``.venv`` in that directory
link to the repository's. A ``python`` block is a fresh interpreter (``python block.py``): blocks
share files, never variables. ``bash``, ``sh``, ``shell``, ``console`` and bare blocks are command
lines: every line (``\\`` continues it; comments and blank lines are skipped) is run by
``bash`` with the venv's ``bin`` first on ``PATH``, and must exit 0. ``mlir`` blocks are parsed
and verified: a module (``module``/``func.func``) as it is, a fragment of ops one statement at
a time inside a function taking its operands, with the symbols it references declared. A ``c``
block is a source file: its first line is a comment naming it (``/* app.c */``), and it is written
to the working directory under that name for a later command block to compile (``c`` links to
the repository's, for ``c/build.sh``). Any other language must be marked. Compiles go through
the user's cache (``$IRGRAD_CACHE_DIR``, default ``~/.cache/irgrad``); CI starts with an empty one.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
BIN = Path(sys.executable).parent          # the venv's bin: python, irgrad
TIMEOUT_S = 600                            # one command, cold cache included

COMMAND_LANGUAGES = {"", "bash", "sh", "shell", "console"}
RUNNABLE = COMMAND_LANGUAGES | {"python", "mlir", "c"}
_C_FILE = re.compile(r"^\s*(?:/\*|//)\s*([\w.-]+\.[ch])\b")  # a c block's first line: /* app.c */
INSTALL = re.compile(r"^\s*(sudo\s+)?(python3?\s+-m\s+venv\b|\S*pip3?\s+(install|download)\b|"
                     r"(apt|apt-get)\s+install\b)")


def _copy(source: str):
    def put(workdir: Path) -> None:
        shutil.copy(ROOT / source, workdir)
    return put


def _copy_as(source: str, name: str):
    def put(workdir: Path) -> None:
        shutil.copy(ROOT / source, workdir / name)
    return put


def _lm_data(workdir: Path) -> None:
    """The torch section's data.npz (its export block's layout: the parameters positionally,
    then ids and targets) from the lstm_lm fixture's arrays (arg0..arg10 the parameters)."""
    fixture = np.load(ROOT / "tests/fixtures/torch/lstm_lm.npz")
    np.savez(workdir / "data.npz", *[fixture[f"arg{i}"] for i in range(11)],
             ids=fixture["arg11"], targets=fixture["arg12"])


# Files an ``inputs:`` marker may ask for, and where each comes from.
INPUTS = {
    "model.mlir": _copy_as("tests/fixtures/jax/mlp_tanh_onehot.mlir", "model.mlir"),  # a JAX export, @main
    "lm.mlir": _copy_as("tests/fixtures/torch/lstm_lm.mlir", "lm.mlir"),  # torch-mlir's LSTM LM
    "data.npz": _lm_data,
}


@dataclasses.dataclass
class Block:
    document: Path
    line: int                    # of the opening fence, 1-based
    section: str
    language: str
    text: str
    markers: dict[str, str]      # kind -> text after "kind:"

    @property
    def where(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


_MARKER = re.compile(r"^<!--\s*([\w-]+)\s*(?::\s*(.*?))?\s*-->$")
_KINDS = {"illustrative", "installs", "inputs", "test-command"}


def blocks(document: Path) -> list[Block]:
    lines = document.read_text().splitlines()
    found, section, seen, i = [], "(top)", set(), 0
    while i < len(lines):
        line = lines[i]
        if re.match(r"#{1,6} ", line):
            section = line.lstrip("#").strip()
            while section in seen:                 # two headings alike: still two sections
                section += " (again)"
            seen.add(section)
        fence = re.match(r"^(```+|~~~+)\s*([\w+-]*)", line)
        if fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith(fence.group(1)))
            markers, k = {}, i - 1
            while k >= 0 and lines[k].startswith("<!--"):
                m = _MARKER.match(lines[k].strip())
                assert m, f"{document.name}:{k + 1}: a comment right above a block is a marker: {lines[k]!r}"
                markers[m.group(1)] = m.group(2) or ""
                k -= 1
            found.append(Block(document, i + 1, section, fence.group(2).lower(), "\n".join(lines[i + 1:end]),
                               markers))
            i = end
        i += 1
    return found


ALL = [b for d in DOCUMENTS for b in blocks(d)]


def _runs(block: Block) -> bool:
    return "illustrative" not in block.markers


def _command_lines(text: str) -> list[str]:
    out, pending = [], ""
    for raw in text.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line = (pending + raw).strip()
        pending = ""
        if line and not line.startswith("#"):
            out.append(line)
    return out


def _installs(line: str) -> bool:
    return any(INSTALL.match(part) for part in re.split(r"&&|;|\|\|", line))


def test_every_block_is_run_or_marked_with_a_reason():
    """Unmarked blocks are of a language this test runs, contain no install step, and ask for
    inputs it knows; every marker is a known kind and gives its reason."""
    assert ALL, "no code blocks found"
    problems = []
    for b in ALL:
        for kind, reason in b.markers.items():
            if kind not in _KINDS:
                problems.append(f"{b.where}: unknown marker {kind!r} (known: {sorted(_KINDS)})")
            elif kind in ("illustrative", "installs") and len(reason.split()) < 2:
                problems.append(f"{b.where}: marker {kind!r} needs a reason")
        if not _runs(b):
            continue
        if b.language not in RUNNABLE:
            problems.append(f"{b.where}: ```{b.language} blocks are not run: mark it illustrative with a reason")
        if b.language in COMMAND_LANGUAGES and "installs" not in b.markers:
            problems += [f"{b.where}: installs ({line!r}): mark it illustrative or installs:"
                         for line in _command_lines(b.text) if _installs(line)]
        if b.language == "c" and not _C_FILE.match(b.text):
            problems.append(f"{b.where}: a c block's first line names its file: /* app.c */")
        if "inputs" in b.markers:
            names, _, reason = b.markers["inputs"].partition(";")
            problems += [f"{b.where}: inputs: {n.strip()!r} is not one of {sorted(INPUTS)}"
                         for n in names.split(",") if n.strip() not in INPUTS]
            if len(reason.split()) < 2:
                problems.append(f"{b.where}: inputs: say where the files come from, after ';'")
    assert not problems, "\n".join(problems)


def test_a_lambdas_function_is_named_as_the_readme_says():
    """README, "Python API in five minutes": ``<lambda>`` is not an MLIR symbol, so a lambda's
    function is ``_lambda_``; a def keeps its own name (the contract's ``@double``)."""
    import irgrad as ig

    f = ig.function(lambda x: ig.sin(x) * 2.0, input_signature=[ig.TensorSpec([3])])
    assert re.search(r"func\.func (public )?@_lambda_\(", f.lower().mlir)

    def double(x):
        return x * 2.0

    assert "@double(" in ig.export(double, ig.TensorSpec([3]))


# ----- running ---------------------------------------------------------------------------

SECTIONS: dict[str, list[Block]] = {}
for _b in ALL:
    SECTIONS.setdefault(f"{_b.document.relative_to(ROOT)}: {_b.section}", []).append(_b)
RUN_SECTIONS = {k: v for k, v in SECTIONS.items() if any(_runs(b) for b in v)}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONDONTWRITEBYTECODE"] = "1"          # examples/ is the repository's
    return env


def _check(done: subprocess.CompletedProcess, block: Block, what: str) -> None:
    assert done.returncode == 0, (f"{block.where} ({block.section}): {what} exited {done.returncode}\n"
                                  f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}")


def _run_commands(block: Block, workdir: Path) -> None:
    for line in _command_lines(block.text):
        if "installs" in block.markers:
            line = " && ".join(p.strip() for p in line.split("&&") if not _installs(p))
            if not line:
                continue
        done = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=workdir, env=_env(),
                              capture_output=True, text=True, timeout=TIMEOUT_S)
        _check(done, block, repr(line))


def _run_python(block: Block, workdir: Path, scripts: Path) -> None:
    script = scripts / f"{block.document.stem}-L{block.line}.py"
    script.write_text(block.text + "\n")
    done = subprocess.run([sys.executable, str(script)], cwd=workdir, env=_env(), capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    _check(done, block, "the block")


def _fragment_module(text: str) -> str:
    """Each op statement of a fragment in its own function, taking its operands (types from
    the statement's trailing function type); each symbol it references declared with that type."""
    statements, current = [], ""
    for line in text.splitlines():
        line = line.split("//")[0].rstrip()
        if not line.strip():
            continue
        if line.lstrip().startswith("%") and current:
            statements.append(current)
            current = ""
        current += " " + line.strip()
    statements.append(current)
    funcs, declared = [], {}
    for n, stmt in enumerate(s for s in statements if s.strip()):
        typed = re.search(r":\s*\(([^()]*)\)\s*->\s*(.+)$", stmt)
        assert typed, f"no function type in {stmt!r}"
        operand_types = [t.strip() for t in re.split(r",\s*(?![^<]*>)", typed.group(1)) if t.strip()]
        result_type = typed.group(2).strip()
        result, _, rest = stmt.strip().partition("=")
        operands = list(dict.fromkeys(re.findall(r"%\w+", rest)))
        assert len(operands) == len(operand_types), f"operands {operands} vs types {operand_types} in {stmt!r}"
        signature = f"({', '.join(operand_types)}) -> {result_type}"
        for symbol in re.findall(r"@(\w+)", stmt):
            declared.setdefault(symbol, signature)
        args = ", ".join(f"{o}: {t}" for o, t in zip(operands, operand_types))
        funcs.append(f"func.func @statement{n}({args}) -> {result_type} {{\n  {stmt.strip()}\n"
                     f"  return {result.strip()} : {result_type}\n}}")
    decls = [f"func.func private @{symbol}{signature}" for symbol, signature in declared.items()]
    return "module {\n" + "\n".join(decls + funcs) + "\n}\n"


def _check_mlir(block: Block) -> None:
    from irgrad.passes.ir import mlir

    complete = re.search(r"^\s*(module\b|func\.func\b)", block.text, re.M)
    text = block.text if complete else _fragment_module(block.text)
    try:
        mlir.verify(mlir.parse_module(text))
    except Exception as error:                     # reported with the block's place
        pytest.fail(f"{block.where} ({block.section}): the mlir block does not parse: {error}\n{text}")


@pytest.mark.parametrize("section", list(RUN_SECTIONS))
def test_section_runs(section, tmp_path_factory):
    """The section's blocks, in order, in one fresh directory; all of its unmarked blocks ran."""
    workdir = tmp_path_factory.mktemp("readme")
    scripts = tmp_path_factory.mktemp("blocks")
    (workdir / "examples").symlink_to(ROOT / "examples")
    (workdir / ".venv").symlink_to(BIN.parent)
    (workdir / "c").symlink_to(ROOT / "c")
    ran, expected = [], [b.where for b in RUN_SECTIONS[section] if _runs(b)]
    for block in RUN_SECTIONS[section]:
        if not _runs(block):
            continue
        if "inputs" in block.markers:
            for name in block.markers["inputs"].partition(";")[0].split(","):
                INPUTS[name.strip()](workdir)
        if block.language in COMMAND_LANGUAGES:
            _run_commands(block, workdir)
        elif block.language == "python":
            _run_python(block, workdir, scripts)
        elif block.language == "mlir":
            _check_mlir(block)
        elif block.language == "c":
            (workdir / _C_FILE.match(block.text).group(1)).write_text(block.text + "\n")  # type: ignore[union-attr]
        else:
            pytest.fail(f"{block.where}: ```{block.language} is not run: mark it illustrative")
        ran.append(block.where)
    assert ran == expected
