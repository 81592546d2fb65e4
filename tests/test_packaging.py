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
    for needed in ("irgrad/passes/transforms/backprop.py", "irgrad/runtime/loader.py", "irgrad/cli.py",
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
_BEYOND = {"passes": {"boundary"}, "runtime": {"boundary", "passes.lowering.legalize"}}


@pytest.mark.parametrize("package", ["passes", "runtime"])
def test_layers_point_one_way(package):
    """passes/ works on MLIR alone and runtime/ knows only IREE: neither imports the frontend;
    both share irgrad.boundary; the runtime reaches into passes/ only for the IREE workarounds."""
    for path in (ROOT / package).rglob("*.py"):
        name = path.relative_to(ROOT).as_posix()
        depth = len(path.relative_to(ROOT / package).parts) - 1  # subpackages sit one level deeper each
        for level, module in _imports(path):
            beyond = level - depth  # how far above the layer's own package the import reaches
            assert beyond <= 1 or (beyond == 2 and module in _BEYOND[package]), (
                f"{name} imports from outside its package ({'.' * level}{module})")
            assert not (level == 0 and module.split(".")[0] in ("irgrad", "passes", "runtime", "cli")), (
                f"{name} imports {module}")


def test_the_boundary_is_a_leaf():
    """irgrad.boundary imports nothing of irgrad, and the MLIR bindings only inside ``parse``."""
    tree = ast.parse((ROOT / "irgrad" / "boundary.py").read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = [n.module if isinstance(n, ast.ImportFrom) else a.name for n in top for a in n.names]
    assert all(n.split(".")[0] not in ("irgrad", "iree") for n in names) and not any(n.level for n in top
                                                                                     if isinstance(n, ast.ImportFrom))


def test_the_runtime_reaches_the_mlir_bindings_through_one_shim():
    """runtime/ and irgrad.boundary load ``iree.compiler.ir`` in one place, ``boundary.mlir_bindings``
    (passes/ has its own shim, passes/ir/mlir.py)."""
    sites = []
    for path in [*(ROOT / "runtime").glob("*.py"), ROOT / "irgrad" / "boundary.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "iree.compiler" and \
                    any(a.name == "ir" for a in node.names) or isinstance(node, ast.Import) and \
                    any(a.name.startswith("iree.compiler.ir") for a in node.names):
                sites.append(f"{path.name}:{node.lineno}")
    assert len(sites) == 1 and sites[0].startswith("boundary.py:"), sites


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text().splitlines()
    i = readme.index("<!-- test-command -->")
    command = readme[i + 2].strip()
    assert "pytest" in command
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert command in ci, f".ci/run does not run the README's test command {command!r}"


# ----- irgrad-runtime: the device install (runtime-dist/) ----------------------------------------

def test_the_runtime_distribution_is_the_runtime_alone(tmp_path):
    """``pip install ./runtime-dist`` (or the built wheel): irgrad's runtime modules, required
    iree-base-runtime and numpy only, the same version as irgrad; and the core distribution
    still requires the whole toolchain."""
    import tomllib
    import zipfile

    from sites import build_runtime_wheel

    wheel = build_runtime_wheel(tmp_path)
    files = zipfile.ZipFile(wheel).namelist()
    modules = {f for f in files if not f.startswith("irgrad_runtime-")}
    assert {"irgrad/__init__.py", "irgrad/py.typed", "irgrad/runtime/loader.py", "irgrad/runtime/trainer.py",
            "irgrad/fleet.py"} <= modules
    assert not any(f.startswith(("irgrad/passes/", "irgrad/ops/")) or f in ("irgrad/frontend.py", "irgrad/cli.py")
                   for f in modules), sorted(modules)
    metadata = zipfile.ZipFile(wheel).read(next(f for f in files if f.endswith("METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert [r for r in requires if "extra ==" not in r] == ["iree-base-runtime==3.13.0", "numpy>=1.24"]
    main = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    dist = tomllib.loads((ROOT / "runtime-dist" / "pyproject.toml").read_text())["project"]
    assert dist["version"] == main["version"]
    assert main["dependencies"] == ["iree-base-compiler==3.13.0", "iree-base-runtime==3.13.0", "numpy>=1.24",
                                    "typer>=0.12"]


def test_the_runtime_wheel_loads_and_runs_without_the_compiler(tmp_path):
    """The wheel's irgrad in a Python that can import only it, iree-base-runtime and numpy:
    ig.load and a call (tests/test_device.py trains that way); a frontend name says to install irgrad."""
    import irgrad as ig
    from sites import build_runtime_wheel, runtime_only_site

    text = ("func.func @loss(%w: tensor<3xf32>, %x: tensor<3xf32>) -> tensor<f32> {\n"
            "  %p = stablehlo.multiply %w, %x : tensor<3xf32>\n  %z = stablehlo.constant dense<0.0> : tensor<f32>\n"
            "  %s = stablehlo.reduce(%p init: %z) applies stablehlo.add across dimensions = [0]"
            " : (tensor<3xf32>, tensor<f32>) -> tensor<f32>\n  return %s : tensor<f32>\n}")
    ig.compile(text).save(tmp_path / "m.vmfb")
    site = runtime_only_site(tmp_path, ["iree-base-runtime", "numpy"], wheel=build_runtime_wheel(tmp_path / "w"))
    assert not (site / "irgrad").is_symlink() and not (site / "irgrad" / "frontend.py").exists()
    code = f"""import sys; sys.path.insert(0, {str(site)!r})
import numpy as np
import irgrad as ig
assert ig.__file__.startswith({str(site)!r}), ig.__file__
m = ig.load({str(tmp_path / "m.vmfb")!r})
print(float(m["loss"](np.ones(3, np.float32), np.arange(3, dtype=np.float32))))
try:
    ig.function
except ImportError as error:
    print(error)
assert "iree.compiler" not in sys.modules
"""
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    value, message = done.stdout.splitlines()
    assert float(value) == 3.0
    assert message.startswith("irgrad.function is part of irgrad's frontend, which needs the compiler: "
                              "pip install irgrad (this is irgrad-runtime)")
