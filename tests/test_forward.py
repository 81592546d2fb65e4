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
from irgrad.passes.transforms import registry

FIXTURES = Path(__file__).parent / "fixtures" / "jax"


# Ops that lack one of the three rules, each with why. (The test below fails on an op that
# lacks a rule and is not here, and on an entry here that is no longer true.)
WITHOUT_BATCHING_RULE = {
    **dict.fromkeys(["stablehlo.constant", "stablehlo.iota"], "no operands: never batched, copied as it is"),
    **dict.fromkeys(["stablehlo.rng", "stablehlo.rng_bit_generator"],
                    "random numbers per batch element: vectorized_map runs a loop (TF's pfor falls back too)"),
    **dict.fromkeys(["stablehlo.get_dimension_size", "stablehlo.set_dimension_size",
                     "stablehlo.dynamic_broadcast_in_dim", "stablehlo.dynamic_reshape", "stablehlo.real_dynamic_slice"],
                    "a run-time shape: the batcher runs any such block as a loop (MissingBatchingRule)"),
    **dict.fromkeys(["stablehlo.batch_norm_inference", "stablehlo.batch_norm_training"],
                    "not written yet (JAX emits batch norm decomposed): vectorized_map runs a loop"),
    "stablehlo.broadcast": "the older broadcast (irgrad and JAX emit broadcast_in_dim): a loop",
    "stablehlo.custom_call": "an opaque call: a loop over the batch",
}
WITHOUT_DERIVATIVE_RULES = {
    "func.call": "the drivers differentiate the callee and call its adjoint (passes/grad.py, forward.py)",
    "stablehlo.select_and_scatter": "the adjoint of a max pool: irgrad emits its own form (windows.py) and "
                                    "differentiates that; a gradient through JAX's raises LookupError naming it",
}


def test_every_op_has_its_adjoint_tangent_and_batching_rules():
    """Each op the passes know has an adjoint, a tangent and a batching rule, or says why not above,
    all registered side by side in one module of passes/rules; a nondifferentiable op has neither
    derivative rule. A gap is reported by op name."""
    from irgrad.passes.transforms.registry import BATCHING_RULES

    tables = {"adjoint": registry.RULES, "tangent": registry.TANGENT_RULES, "batching": BATCHING_RULES}
    known = set().union(*tables.values(), registry.NONDIFFERENTIABLE)
    problems = []
    for name in sorted(known):
        derivative = name not in registry.NONDIFFERENTIABLE and name not in WITHOUT_DERIVATIVE_RULES
        expected = {"adjoint": derivative, "tangent": derivative, "batching": name not in WITHOUT_BATCHING_RULE}
        missing = [kind for kind, table in tables.items() if expected[kind] and name not in table]
        if missing:
            problems.append(f"{name}: no {' and no '.join(missing)} rule (write it, or say why not in this test)")
        if name in registry.NONDIFFERENTIABLE and (name in registry.RULES or name in registry.TANGENT_RULES):
            problems.append(f"{name}: declared nondifferentiable, yet has a derivative rule")
    for name, why in {**WITHOUT_BATCHING_RULE, **WITHOUT_DERIVATIVE_RULES}.items():
        table = [BATCHING_RULES] if name in WITHOUT_BATCHING_RULE else [registry.RULES, registry.TANGENT_RULES]
        if all(name in t for t in table):
            problems.append(f"{name}: has its rule now; drop it from this test's list ({why})")
    for name in sorted(known):  # side by side: one module registers all of an op's rules
        sites = {registry.SITES[(kind, name)] for kind in (*tables, "nondifferentiable") if (kind, name) in registry.SITES}
        if len(sites) != 1 or not next(iter(sites)).startswith("irgrad.passes.rules."):
            problems.append(f"{name}: its rules are registered in {sorted(sites)}, not side by side in one "
                            "module of passes/rules")
    adjoints, tangents = set(registry.COMPOSITE_RULES), set(registry.COMPOSITE_TANGENT_RULES)
    problems += [f"composite {name}: no tangent rule" for name in sorted(adjoints - tangents)]
    problems += [f"composite {name}: no adjoint rule" for name in sorted(tangents - adjoints)]
    assert not problems, "\n".join(problems)


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
    """Forward mode carries the tangent through the loop as it runs: x -> 2x + sin x until
    sum(x) >= 100, n times with n decided by the data; the tangent is t·Π(2 + cos xₖ)."""
    text = (FIXTURES / "while_data_dependent.mlir").read_text()
    jvp = ig.compile(passes.differentiate(text, "main", grad=False, jvp=True)).load()["main_jvp"]
    for x in (np.array([1.0, 2.0, 3.0, 4.0], np.float32), np.array([30.0, 0.5, 0.25, 1.0], np.float32)):
        y, scale = x.astype(np.float64), np.ones(4)
        while y.sum() < 100:
            y, scale = 2 * y + np.sin(y), scale * (2 + np.cos(y))
        t = np.array([1.0, -1.0, 0.5, 2.0], np.float32)
        out, tangent = jvp(x, t)
        np.testing.assert_allclose(out, y, rtol=1e-5)
        np.testing.assert_allclose(tangent, t * scale, rtol=1e-5)


def test_opaque_call_has_no_tangent():
    text = (FIXTURES / "custom_call.mlir").read_text().replace("lapack_spotrf_ffi", "my_opaque_kernel")
    with pytest.raises(LookupError, match="my_opaque_kernel"):
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


# ----- ig.ForwardAccumulator (TensorFlow's tf.autodiff.ForwardAccumulator) ----------------------

def test_accumulator_hessian_vector_product_tf_doc_example():
    """TF's docstring: forward-over-reverse through a GradientTape gives [1, 0]."""
    v = ig.Variable([1.0, 2.0])

    @ig.function(input_signature=[])
    def hvp():
        with ig.ForwardAccumulator(v, ig.constant([1.0, 0.0])) as acc:
            with ig.GradientTape() as tape:
                loss = -ig.reduce_sum(ig.math.log(v))
            backward = tape.gradient(loss, v)
        return acc.jvp(backward)

    np.testing.assert_allclose(hvp(), [1.0, 0.0])


def test_accumulator_unconnected_and_unrecorded_values():
    """None for values the primals do not reach or that were built outside the with block
    (TF records only inside it), zeros with unconnected_gradients='zero'; the structure of
    the targets is kept."""
    @ig.function(input_signature=[ig.TensorSpec([3], ig.float32), ig.TensorSpec([3], ig.float32)])
    def f(x, w):
        before = x * 2.0
        with ig.ForwardAccumulator(x, ig.ones_like(x)) as acc:
            y = ig.sin(x) * x
            other = w * 3.0
        assert acc.jvp(before) is None and acc.jvp(other) is None
        nested = acc.jvp({"y": y, "pair": (x, other)}, unconnected_gradients="zero")
        assert set(nested) == {"y", "pair"} and len(nested["pair"]) == 2
        return nested["y"], nested["pair"][0], nested["pair"][1]

    x = np.array([0.0, 1.0, 2.0], np.float32)
    ty, tx, tother = f(x, np.ones(3, np.float32))
    np.testing.assert_allclose(ty, np.sin(x) + x * np.cos(x), rtol=1e-5)
    np.testing.assert_array_equal(tx, np.ones(3))
    np.testing.assert_array_equal(tother, np.zeros(3))


def test_accumulator_composes_with_gradients_both_ways():
    """reverse-over-forward (a tape over acc.jvp) and forward-over-reverse (ig.gradients
    inside the accumulator) both give the Hessian-vector product of sum(x³)·w: 6 x v w."""
    @ig.function(input_signature=[ig.TensorSpec([3], ig.float64)] * 2)
    def both(x, v):
        with ig.GradientTape() as tape:
            tape.watch(x)
            with ig.ForwardAccumulator(x, v) as acc:
                y = ig.reduce_sum(x * x * x) * 2.0
                g = ig.gradients(y, x)[0]
            jv = acc.jvp(y)
        return tape.gradient(jv, x), acc.jvp(g)

    x, v = np.array([1.0, -2.0, 0.5]), np.array([0.3, 1.0, -1.0])
    reverse_over_forward, forward_over_reverse = both(x, v)
    np.testing.assert_allclose(reverse_over_forward, 12 * x * v, rtol=1e-12)
    np.testing.assert_allclose(forward_over_reverse, 12 * x * v, rtol=1e-12)


def test_accumulator_matches_finite_differences_on_a_model():
    rng = np.random.default_rng(3)
    w1, w2 = rng.normal(size=(4, 5)), rng.normal(size=(5, 2))

    def model(x):
        return ig.reduce_sum(ig.tanh(ig.matmul(ig.nn.relu(ig.matmul(x, w1)), w2)) ** 2, axis=1)

    @ig.function(input_signature=[ig.TensorSpec([3, 4], ig.float64)] * 2)
    def tangent(x, t):
        with ig.ForwardAccumulator(x, t) as acc:
            y = model(x)
        return acc.jvp(y)

    forward = ig.function(model, input_signature=[ig.TensorSpec([3, 4], ig.float64)])
    x, t = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    eps = 1e-6
    fd = (np.asarray(forward(x + eps * t)) - np.asarray(forward(x - eps * t))) / (2 * eps)
    np.testing.assert_allclose(tangent(x, t), fd, rtol=1e-6, atol=1e-9)


def test_accumulator_rejects_bad_tangents():
    @ig.function(input_signature=[ig.TensorSpec([3], ig.float32)])
    def wrong_shape(x):
        ig.ForwardAccumulator(x, ig.ones([2]))
        return x

    @ig.function(input_signature=[ig.TensorSpec([3], ig.float32)])
    def twice(x):
        ig.ForwardAccumulator([x, x], [ig.ones([3]), ig.ones([3])])
        return x

    @ig.function(input_signature=[ig.TensorSpec([3], ig.float32)])
    def unpaired(x):
        ig.ForwardAccumulator([x], [])
        return x

    for fn, match in ((wrong_shape, "shape"), (twice, "more than once"), (unpaired, "structure")):
        with pytest.raises(ValueError, match=match):
            fn(np.zeros(3, np.float32))


def test_transposed_adjoint_is_exact_where_an_inner_cotangent_is_zero(monkeypatch):
    """by_transposition differentiates the adjoint rule in its cotangent at a placeholder of
    ones. In batch_norm_training's adjoint the cotangent reaching rsqrt is then exactly zero
    (Σ(x - mean) = 0); the Sqrt/Rsqrt "zero cotangent gives 0" guard must stay linear there."""
    from irgrad.passes.transforms import forward

    monkeypatch.setitem(registry.TANGENT_RULES, "stablehlo.batch_norm_training", forward.by_transposition)
    text = """func.func @f(%x: tensor<4x3x2xf64>, %s: tensor<3xf64>, %o: tensor<3xf64>) -> tensor<4x3x2xf64> {
      %y, %m, %v = "stablehlo.batch_norm_training"(%x, %s, %o) {epsilon = 1.0e-3 : f32, feature_index = 1 : i64}
        : (tensor<4x3x2xf64>, tensor<3xf64>, tensor<3xf64>) -> (tensor<4x3x2xf64>, tensor<3xf64>, tensor<3xf64>)
      return %y : tensor<4x3x2xf64>
    }"""
    module = ig.compile(passes.differentiate(text, grad=False, jvp=True)).load()
    rng = np.random.default_rng(0)
    args = [rng.normal(size=(4, 3, 2)), rng.normal(size=3), rng.normal(size=3)]
    ts = [rng.normal(size=(4, 3, 2)), np.zeros(3), np.zeros(3)]
    eps = 1e-6
    fd = (np.asarray(module["f"](*[a + eps * t for a, t in zip(args, ts)]))
          - np.asarray(module["f"](*[a - eps * t for a, t in zip(args, ts)]))) / (2 * eps)
    np.testing.assert_allclose(module["f_jvp"](*args, *ts)[1], fd, rtol=1e-6, atol=1e-8)
