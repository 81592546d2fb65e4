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


def test_the_missing_rule_error_points_to_the_adjoints_page():
    """The "No adjoint rule" error says what to do and where it is explained."""
    from irgrad.passes import MissingAdjointError, differentiate

    module = """func.func @f(%x: tensor<3xf32>) -> tensor<2x3xf32> {
  %s = stablehlo.constant dense<[2, 3]> : tensor<2xi64>
  %y = stablehlo.dynamic_broadcast_in_dim %x, %s, dims = [1] : (tensor<3xf32>, tensor<2xi64>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}"""
    with pytest.raises(MissingAdjointError) as error:
        differentiate(module, func="f")
    page = re.search(r"see (docs/\S+\.md)", str(error.value))
    assert page and (ROOT / page.group(1)).is_file(), str(error.value)
    assert "@adjoint('stablehlo.dynamic_broadcast_in_dim')" in str(error.value)
