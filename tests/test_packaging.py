"""The installed distribution: one import name, the console script, the README/CI contract."""
from __future__ import annotations

import ast
import importlib.metadata
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _files():
    try:
        dist = importlib.metadata.distribution("irgrad")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("irgrad is not installed (run `pip install .`)")
    return dist, [str(f) for f in dist.files or []]


def test_nothing_generic_at_the_top_of_site_packages():
    dist, files = _files()
    top = {f.split("/")[0] for f in files if not f.startswith(("..", "irgrad-"))}
    assert top == {"irgrad"}, f"unexpected top-level entries in the wheel: {sorted(top - {'irgrad'})}"
    for generic in ("passes", "runtime", "cli.py", "cli"):
        assert not any(f == generic or f.startswith(generic + "/") for f in files)
    assert dist.read_text("top_level.txt").split() == ["irgrad"]


def test_subpackages_are_installed_under_irgrad():
    _, files = _files()
    for needed in ("irgrad/passes/backprop.py", "irgrad/runtime/loader.py", "irgrad/cli.py",
                   "irgrad/ops/math_ops.py", "irgrad/py.typed"):
        assert needed in files, f"{needed} missing from the installed distribution"


def test_imports_and_entry_points():
    code = "import irgrad, irgrad.passes, irgrad.runtime, irgrad.cli; print(irgrad.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    help_ = subprocess.run([sys.executable, "-m", "irgrad", "--help"], capture_output=True, text=True, cwd="/")
    assert help_.returncode == 0 and "compile" in help_.stdout


def _imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """(relative level, module) of every import statement in a file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(0, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.level, node.module or ""))
    return out


# What each layer may import from outside its own package (relative imports, level 2): the IR
# boundary below both, and, for the runtime's compile path only, the passes' IREE workarounds.
_BEYOND = {"passes": {"boundary"}, "runtime": {"boundary", "passes.legalize"}}


@pytest.mark.parametrize("package", ["passes", "runtime"])
def test_layers_point_one_way(package):
    """passes/ works on MLIR alone and runtime/ knows only IREE: neither imports the frontend;
    both share irgrad.boundary; the runtime reaches into passes/ only for the IREE workarounds."""
    for path in (ROOT / package).glob("*.py"):
        for level, module in _imports(path):
            assert level <= 1 or (level == 2 and module in _BEYOND[package]), (
                f"{package}/{path.name} imports from outside its package ({'.' * level}{module})")
            assert not (level == 0 and module.split(".")[0] in ("irgrad", "passes", "runtime", "cli")), (
                f"{package}/{path.name} imports {module}")


def test_the_boundary_is_a_leaf():
    """irgrad.boundary imports nothing of irgrad, and the MLIR bindings only inside ``parse``."""
    tree = ast.parse((ROOT / "irgrad" / "boundary.py").read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = [n.module if isinstance(n, ast.ImportFrom) else a.name for n in top for a in n.names]
    assert all(n.split(".")[0] not in ("irgrad", "iree") for n in names) and not any(n.level for n in top
                                                                                     if isinstance(n, ast.ImportFrom))


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text().splitlines()
    i = readme.index("<!-- test-command -->")
    command = readme[i + 2].strip()
    assert "pytest" in command
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert command in ci, f".ci/run does not run the README's test command {command!r}"
