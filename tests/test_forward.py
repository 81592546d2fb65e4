"""Forward mode over StableHLO (``passes.differentiate(..., jvp=True)``, ``irgrad grad --jvp``).

Every tangent rule is checked numerically by the same checker as the adjoint rules
(``gradcheck.check_module`` builds @F_jvp next to @F_vjp for every case in
test_adjoint_rules*.py and compares ``<J v, u>`` from finite differences, the VJP and the
JVP); the JAX fixtures are checked against jax.vjp in test_jax_fixtures.py. Here: the
registries, exact hand-derived tangents, loops reverse mode cannot take, and the CLI.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import irgrad as ig
from irgrad import passes
from irgrad.cli import app
from irgrad.passes import registry

FIXTURES = Path(__file__).parent / "fixtures" / "jax"


def test_every_op_with_an_adjoint_rule_has_a_tangent_rule():
    assert set(registry.RULES) == set(registry.TANGENT_RULES)
    assert set(registry.COMPOSITE_RULES) == set(registry.COMPOSITE_TANGENT_RULES)
    assert not set(registry.TANGENT_RULES) & registry.NONDIFFERENTIABLE


SIN_TIMES_X = """func.func @f(%x: tensor<3xf64>, %k: tensor<3xi32>) -> (tensor<3xf64>, tensor<3xi32>) {
  %0 = stablehlo.sine %x : tensor<3xf64>
  %1 = stablehlo.multiply %x, %0 : tensor<3xf64>
  return %1, %k : tensor<3xf64>, tensor<3xi32>
}"""


def test_exact_tangent_and_signature():
    """d(x sin x) = (sin x + x cos x) dx; integer results get no tangent, integer args none."""
    module = ig.compile(passes.differentiate(SIN_TIMES_X, grad=False, jvp=True)).load()
    jvp = module["f_jvp"]
    assert [str(t) for t in jvp.signature.inputs] == ["3xf64", "3xi32", "3xf64"]
    assert [str(t) for t in jvp.signature.outputs] == ["3xf64", "3xi32", "3xf64"]
    x = np.array([0.0, np.pi / 2, 1.0])
    y, k, t = jvp(x, np.array([1, 2, 3], np.int32), np.array([1.0, 1.0, 2.0]))
    np.testing.assert_allclose(t, (np.sin(x) + x * np.cos(x)) * [1, 1, 2], rtol=1e-12)
    np.testing.assert_array_equal(k, [1, 2, 3])


def test_unconnected_results_get_zero_tangents():
    text = """func.func @f(%x: tensor<2xf32>, %y: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
      %0 = stablehlo.exponential %x : tensor<2xf32>
      return %0, %y : tensor<2xf32>, tensor<2xf32>
    }"""
    jvp = ig.compile(passes.differentiate(text, grad=False, jvp=True, wrt=[0])).load()["f_jvp"]
    _, _, tx, ty = jvp(np.zeros(2, np.float32), np.ones(2, np.float32), np.full(2, 3.0, np.float32))
    np.testing.assert_allclose(tx, [3.0, 3.0])
    np.testing.assert_array_equal(ty, [0.0, 0.0])


def test_data_dependent_while_has_a_forward_mode():
    """Reverse mode needs a static trip count (DynamicTripCountError); forward mode carries the
    tangent through the loop as it runs: x -> x·2ⁿ with n decided by the data."""
    text = (FIXTURES / "while_data_dependent.mlir").read_text()
    jvp = ig.compile(passes.differentiate(text, "main", grad=False, jvp=True)).load()["main_jvp"]
    for x in (np.array([1.0, 2.0, 3.0, 4.0], np.float32), np.array([30.0, 0.5, 0.25, 1.0], np.float32)):
        n, y = 0, x.copy()
        while y.sum() < 100:
            y, n = y * 2, n + 1
        t = np.array([1.0, -1.0, 0.5, 2.0], np.float32)
        out, tangent = jvp(x, t)
        np.testing.assert_allclose(out, y)
        np.testing.assert_allclose(tangent, t * 2.0**n)


def test_opaque_call_has_no_tangent():
    text = (FIXTURES / "custom_call.mlir").read_text()
    with pytest.raises(LookupError, match="lapack_spotrf_ffi"):
        passes.differentiate(text, "main", grad=False, jvp=True)


def test_cli_grad_jvp(tmp_path):
    source, out = tmp_path / "f.mlir", tmp_path / "out.mlir"
    source.write_text(SIN_TIMES_X)
    result = CliRunner().invoke(app, ["grad", str(source), "--jvp", "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "@f_jvp" in text and "@f_grad" not in text
    both = CliRunner().invoke(app, ["grad", str(source), "--jvp", "--vjp"])
    assert both.exit_code == 0 and "@f_jvp" in both.stdout and "@f_vjp" in both.stdout
