"""The documentation site (docs/, Sphinx + MyST): it builds with warnings as errors, and its API
reference documents every public name of ``irgrad``, ``irgrad.passes`` and ``irgrad.runtime``.

The pages' code blocks are run by tests/test_readme.py (it reads ``docs/**/*.md``). Sphinx is
in the ``docs`` extra, which the ``test`` extra includes; without it these tests skip, saying so.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """``sphinx-build -W`` (every warning an error, a fresh environment) into a temporary folder."""
    pytest.importorskip("sphinx", reason="the docs toolchain is the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("myst_parser", reason="the docs toolchain is the docs extra: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-q", "-b", "html",
                           str(DOCS), str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"sphinx-build -W failed:\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    return out


def _documented(site: Path) -> set[str]:
    from sphinx.util.inventory import InventoryFile

    with open(site / "objects.inv", "rb") as stream:
        inventory = InventoryFile.load(stream, "", lambda base, uri: uri)
    return {name for kind, entries in inventory.items() if kind.startswith("py:") for name in entries}


def public_names() -> dict[str, list[str]]:
    """Each namespace's public names: its ``__all__`` (``irgrad``'s is the frontend's, which it
    re-exports, and the runtime names it imports; ``newaxis``)."""
    import irgrad
    import irgrad.frontend
    import irgrad.passes
    import irgrad.runtime

    reexported = [n for n in irgrad.runtime.__all__ if vars(irgrad).get(n) is getattr(irgrad.runtime, n)]
    return {"irgrad": [*irgrad.frontend.__all__, *reexported, "newaxis"],
            "irgrad.passes": list(irgrad.passes.__all__),
            "irgrad.runtime": list(irgrad.runtime.__all__)}


def test_the_site_builds_with_warnings_as_errors(site):
    for page in ("index", "getting-started", "guides/adjoints", "reference/irgrad", "reference/passes",
                 "reference/runtime"):
        assert (site / f"{page}.html").is_file(), page


@pytest.mark.parametrize("namespace", ["irgrad", "irgrad.passes", "irgrad.runtime"])
def test_the_reference_documents_every_public_name(site, namespace):
    documented = _documented(site)
    missing = [n for n in public_names()[namespace] if f"{namespace}.{n}" not in documented]
    assert not missing, f"docs/reference has no entry for {namespace}: {missing}"


# Names whose ``help()`` must go past one line: the entry points a user meets first.
TEACHING = {
    "irgrad": ["function", "compile", "export", "gradients", "custom_gradient", "TensorSpec", "load",
               "Function", "Lowered", "GradientTape", "Variable", "jacobian", "hessians", "hessian_vector_product",
               "vectorized_map", "ForwardAccumulator", "while_loop", "cond", "Session", "placeholder", "Graph",
               "get_default_graph", "NotDifferentiable", "RegisterGradient", "no_gradient", "grad_pass_through",
               "AggregationMethod", "UnconnectedGradients", "Tensor", "Operation", "TensorShape", "DType", "as_dtype",
               "convert_to_tensor", "constant", "cast", "where", "one_hot", "matmul", "reduce_mean", "slice",
               "getitem", "fill", "zeros", "ones", "clip_by_value", "shape", "ArtifactError", "DeviceError"],
    "irgrad.passes": ["differentiate", "adjoint", "nondifferentiable", "composite_adjoint", "MissingAdjointError"],
    "irgrad.runtime": ["compile", "load", "Module", "CompileOptions", "ArtifactError", "DeviceError"],
}
# Public names still without a docstring (the reference shows their signature and group): this
# list may only shrink.
UNDOCUMENTED: dict[str, set[str]] = {"irgrad": set(), "irgrad.passes": set(), "irgrad.runtime": set()}


def test_every_public_name_has_a_docstring_to_learn_from():
    """``help(name)`` says something for every public function and class (data and modules are
    described in the reference pages), and more than one line for the entry points."""
    import inspect

    missing, short = [], []
    for namespace, names in public_names().items():
        module = sys.modules[namespace]
        for name in names:
            obj = getattr(module, name, None)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            doc = (inspect.getdoc(obj) or "").strip()
            if not doc and name not in UNDOCUMENTED[namespace]:
                missing.append(f"{namespace}.{name}")
            elif name in TEACHING[namespace] and len(doc.splitlines()) < 3:
                short.append(f"{namespace}.{name}")
    assert not missing, f"no docstring: {missing}"
    assert not short, f"a line or two only: {short}"


def test_the_missing_rule_error_points_to_the_adjoints_page():
    """The "No adjoint rule" error says what to do and where it is explained."""
    from irgrad.passes import MissingAdjointError, differentiate

    module = """func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %p = "stablehlo.collective_permute"(%x) {source_target_pairs = dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>,
         channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>} : (tensor<3xf32>) -> tensor<3xf32>
  return %p : tensor<3xf32>
}"""
    with pytest.raises(MissingAdjointError) as error:
        differentiate(module, func="f")
    page = re.search(r"see (docs/\S+\.md)", str(error.value))
    assert page and (ROOT / page.group(1)).is_file(), str(error.value)
    assert "@adjoint('stablehlo.collective_permute')" in str(error.value)
