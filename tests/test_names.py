"""Names of results and derived values (issue 33): JAX's ``jax.result_info``, the derived
functions' ``d_w`` / ``t_w`` / ``h_w``, a training step's ``loss``, parameters and ``step``,
``m_w``, ``v_w``; in the signatures, the artifact's metadata, ``irgrad inspect``, ``irgrad run``'s
``.npz`` and the Trainer. Two small compiles, shared through a module-scoped fixture.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import irgrad as ig
from irgrad import passes
from irgrad.boundary import _jax_result_name
from irgrad.cli import app
from irgrad.runtime import Signature, parse_signatures

try:  # click < 8.2 mixes stderr into stdout unless told not to
    RUNNER = CliRunner(mix_stderr=False)
except TypeError:
    RUNNER = CliRunner()

# loss(w1, b1, x) = sum((x @ w1 + b1)^2), named the way JAX names a dict result.
LOSS = """
func.func public @loss(%w1: tensor<3x2xf32> loc("w1"), %b1: tensor<2xf32> loc("b1"), %x: tensor<4x3xf32> loc("x"))
    -> (tensor<f32> {jax.result_info = "result['loss']"}) {
  %0 = stablehlo.dot_general %x, %w1, contracting_dims = [1] x [0] : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %1 = stablehlo.broadcast_in_dim %b1, dims = [1] : (tensor<2xf32>) -> tensor<4x2xf32>
  %2 = stablehlo.add %0, %1 : tensor<4x2xf32>
  %3 = stablehlo.multiply %2, %2 : tensor<4x2xf32>
  %c = stablehlo.constant dense<0.0> : tensor<f32>
  %4 = stablehlo.reduce(%3 init: %c) applies stablehlo.add across dimensions = [0, 1]
      : (tensor<4x2xf32>, tensor<f32>) -> tensor<f32>
  return %4 : tensor<f32>
}
"""

# Two results JAX calls by position only, and unnamed arguments.
POSITIONAL = """
func.func public @main(%arg0: tensor<3xf32>, %arg1: tensor<3xf32>)
    -> (tensor<3xf32> {jax.result_info = "result[0]"}, tensor<3xf32> {jax.result_info = "result[1]"}) {
  %0 = stablehlo.sine %arg0 : tensor<3xf32>
  %1 = stablehlo.multiply %arg0, %arg1 : tensor<3xf32>
  return %0, %1 : tensor<3xf32>, tensor<3xf32>
}
"""

W1 = np.arange(6, dtype=np.float32).reshape(3, 2) / 10
B1 = np.array([0.5, -0.5], np.float32)
X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)


def names(sig: Signature) -> tuple[list, list]:
    return list(sig.arg_names), list(sig.result_names)


@pytest.mark.parametrize("info, name", [
    ("result", None), ("result[0]", None), ("result[2][1]", None), ("result['loss']", "loss"),
    ("result['params']['w']", "params['w']"), ("result.w", "w"), ("result[0]['a']", "result[0]['a']"),
    ("logits", "logits"),
])
def test_jax_result_paths_become_names(info, name):
    assert _jax_result_name(info) == name


def test_jax_result_info_names_the_forward_and_with_value_results():
    sigs = parse_signatures(passes.differentiate(LOSS, with_value=True, vjp=True))
    assert repr(sigs["loss"]) == "loss(w1: 3x2xf32, b1: 2xf32, x: 4x3xf32) -> (loss: f32)"
    assert names(sigs["loss_grad"])[1] == ["loss", "d_w1", "d_b1", "d_x"]
    # @F_vjp's cotangent argument is named after the result it seeds
    assert names(sigs["loss_vjp"]) == (["w1", "b1", "x", "d_loss"], ["loss", "d_w1", "d_b1", "d_x"])


def test_derived_functions_name_every_result():
    text = passes.differentiate(POSITIONAL, grad=True, jvp=True, hessian=False)
    sigs = parse_signatures(text)
    assert sigs["main"].result_names == ()  # result[0], result[1]: positions, no names
    assert repr(sigs["main_grad"]) == "main_grad(3xf32, 3xf32) -> (d_arg0: 3xf32, d_arg1: 3xf32)"
    assert names(sigs["main_jvp"]) == ([None, None, "t_arg0", "t_arg1"], [None, None, "t_result0", "t_result1"])
    hess = parse_signatures(passes.differentiate(LOSS, wrt=["b1"], grad=False, hessian=True))
    assert repr(hess["loss_hessian"]).endswith("-> (h_b1: 2x2xf32)")


def test_training_step_names_its_state_parameters_and_results():
    sigs = parse_signatures(passes.differentiate(LOSS, wrt=["w1", "b1"], grad=False, train="adam"))
    state = ["step", "m_w1", "m_b1", "v_w1", "v_b1"]
    assert names(sigs["loss_train_init"]) == (["w1", "b1", "x"], state)
    assert names(sigs["loss_train_step"]) == (["w1", "b1", "x", *state], ["loss", "w1", "b1", *state])
    momentum = parse_signatures(passes.differentiate(LOSS.replace(' {jax.result_info = "result[\'loss\']"}', ""),
                                                     wrt=[0], grad=False, train="momentum"))
    # an unnamed scalar loss is called loss in a training step
    assert names(momentum["loss_train_step"])[1] == ["loss", "w1", "step", "momentum_w1"]


def test_signature_json_round_trips_and_reads_old_metadata():
    sig = parse_signatures(passes.differentiate(POSITIONAL, with_value=True))["main_grad"]
    data = sig.to_json()
    assert data["result_names"] == [None, None, "d_arg0", "d_arg1"] and "arg_names" not in data
    assert Signature.from_json("main_grad", json.loads(json.dumps(data))) == sig
    old = {k: v for k, v in data.items() if k != "result_names"}  # metadata written before result names
    read = Signature.from_json("main_grad", old)
    assert read.result_names == () and read.output_keys() == ["result0", "result1", "result2", "result3"]
    assert sig.output_keys() == ["result0", "result1", "d_arg0", "d_arg1"]
    assert sig.input_keys() == ["arg0", "arg1"]
    assert repr(sig) == "main_grad(3xf32, 3xf32) -> (3xf32, 3xf32, d_arg0: 3xf32, d_arg1: 3xf32)"


def test_a_name_two_results_share_names_neither():
    text = POSITIONAL.replace('"result[0]"', '"result[\'y\']"').replace('"result[1]"', '"result[\'y\']"')
    sig = parse_signatures(text)["main"]
    assert sig.result_names == () and sig.output_keys() == ["result0", "result1"]


@pytest.fixture(scope="module")
def train_artifact(tmp_path_factory, isolated_cache_dir):
    path = tmp_path_factory.mktemp("names") / "train.vmfb"
    ig.compile(passes.differentiate(LOSS, wrt=["w1", "b1"], grad=True, train="adam")).save(path)
    return path


def test_trainer_names_parameters_state_and_results(train_artifact, tmp_path):
    module = ig.load(str(train_artifact))
    assert module.metadata["training"]["loss_train_step"]["param_names"] == ["w1", "b1"]
    trainer = module.trainer({"b1": B1, "w1": W1})  # by name, in any order
    assert trainer.param_names == ["w1", "b1"]
    assert trainer.state_names == ["step", "m_w1", "m_b1", "v_w1", "v_b1"]
    assert trainer.result_names == ["loss"]
    trainer.step(X)
    params, state = trainer.named_params(), trainer.named_state()
    assert list(params) == ["w1", "b1"] and int(state["step"]) == 1
    np.testing.assert_array_equal(params["w1"], trainer.params()[0])
    np.testing.assert_array_equal(state["v_b1"], trainer.state()[4])
    trainer.save(tmp_path / "ckpt.npz")
    with np.load(tmp_path / "ckpt.npz") as f:
        assert sorted(f.files) == sorted(["w1", "b1", "step", "m_w1", "m_b1", "v_w1", "v_b1", "irgrad_checkpoint"])
        old = {f"a{i}": f[k] for i, k in enumerate(["w1", "b1", "step", "m_w1", "m_b1", "v_w1", "v_b1"])}
        manifest = json.loads(str(f["irgrad_checkpoint"]))
    del manifest["keys"]  # a checkpoint written before names: a0, a1... and no keys
    np.savez(tmp_path / "old.npz", **old, irgrad_checkpoint=np.array(json.dumps(manifest)))
    again = module.trainer([W1 * 0, B1 * 0])
    again.restore(tmp_path / "old.npz")
    assert int(again.named_state()["step"]) == 1
    with pytest.raises(TypeError, match=r"unknown W1 \(did you mean w1\?\)"):
        module.trainer({"W1": W1, "b1": B1})
    with pytest.raises(TypeError, match="missing b1"):
        module.trainer({"w1": W1})


def test_inspect_and_npz_output_use_the_names(train_artifact, tmp_path):
    shown = RUNNER.invoke(app, ["inspect", str(train_artifact)])
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert "  loss_grad(w1: 3x2xf32, b1: 2xf32, x: 4x3xf32) -> (d_w1: 3x2xf32, d_b1: 2xf32)" in lines
    assert "  parameters: w1 (arg 0), b1 (arg 1)" in lines
    assert any(line.startswith("  state:      step, m_w1, m_b1, v_w1, v_b1") for line in lines)
    assert "  returns:    loss, then the new w1, b1, then the new state" in lines
    np.savez(tmp_path / "in.npz", w1=W1, b1=B1, x=X)
    ran = RUNNER.invoke(app, ["run", str(train_artifact), "-f", "loss_grad", "--input", f"@{tmp_path / 'in.npz'}",
                              "--output", f"@{tmp_path / 'out.npz'}"])
    assert ran.exit_code == 0, ran.output
    with np.load(tmp_path / "out.npz") as out:
        assert out.files == ["d_w1", "d_b1"]
        np.testing.assert_allclose(out["d_b1"], 2 * (X @ W1 + B1).sum(0), rtol=1e-5)


@pytest.mark.parametrize("args, message", [
    (["-f", "loss_gard"], "no function 'loss_gard' in {art}; functions: loss, loss_grad, loss_train_init, "
                          "loss_train_step; did you mean 'loss_grad'?"),
    (["-f", "loss_grad", "--input", "@{bad}"], "has no array for argument 0 (w1) of loss_grad; it holds: W1, b1, x; "
                                               "did you mean 'W1'?"),
])
def test_run_near_misses_are_usage_errors_with_a_suggestion(train_artifact, tmp_path, args, message):
    np.savez(tmp_path / "bad.npz", W1=W1, b1=B1, x=X)
    args = [a.format(bad=tmp_path / "bad.npz") for a in args]
    result = RUNNER.invoke(app, ["run", str(train_artifact), *args])
    assert result.exit_code == 2
    assert message.format(art=train_artifact) in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--wrt", "W1"], "wrt 'W1': @loss has no argument of that name (its arguments: w1 (0), b1 (1), x (2)); "
                      "did you mean 'w1'?"),
    (["--func", "los"], "no function @los in module; functions: @loss; did you mean @loss?"),
    (["--wrt", "9"], "wrt index 9 out of range"),
])
def test_grad_wrong_names_are_usage_errors_with_a_suggestion(tmp_path, args, message):
    src = tmp_path / "loss.mlir"
    src.write_text(LOSS)
    for command in (["grad", str(src)], ["compile", str(src), "--grad", "-o", str(tmp_path / "x.vmfb")]):
        result = RUNNER.invoke(app, [*command, *args])
        assert result.exit_code == 2, result.output
        assert message in result.stderr
    assert not (tmp_path / "x.vmfb").exists()


def test_model_function_near_miss(tmp_path):
    (tmp_path / "model.py").write_text("import irgrad as ig\n\n"
                                       "@ig.function(input_signature=[ig.TensorSpec([2])])\n"
                                       "def double(x):\n    return x * 2.0\n")
    result = RUNNER.invoke(app, ["emit", f"{tmp_path / 'model.py'}:doubel"])
    assert result.exit_code == 2
    assert "has no 'doubel' (ig.functions in it: double); did you mean 'double'?" in result.stderr


def test_frontend_names_results_by_their_dict_keys():
    """``nest.leaf_names`` names an ig.function's return leaves by dict key (positions: no
    name); ``Graph.finish(..., names=)`` writes them into the module."""
    from irgrad.framework import Graph
    from irgrad.function import emit_text
    from irgrad.nest import flatten, leaf_names

    assert leaf_names((1, 2)) == [None, None] and leaf_names(3) == [None]
    graph = Graph("f")
    with graph.as_default():
        x = graph.add_argument((2,), ig.float32, "x")
        out = {"loss": ig.reduce_sum(ig.sin(x)), "grads": [x * 2.0, x]}
        assert leaf_names(out) == ["grads/0", "grads/1", "loss"]
        graph.finish(flatten(out), names=leaf_names(out))
    sig = parse_signatures(emit_text(graph.module))["f"]
    assert repr(sig) == "f(x: 2xf32) -> (grads/0: 2xf32, grads/1: 2xf32, loss: f32)"
    assert names(parse_signatures(passes.differentiate(emit_text(graph.module), vjp=True))["f_vjp"])[0] == [
        "x", "d_grads/0", "d_grads/1", "d_loss"]


def test_an_ig_function_returning_a_dict_names_its_results():
    f = ig.function(lambda x: {"loss": ig.reduce_sum(x * x), "y": x + 1.0},
                    input_signature=[ig.TensorSpec([3], ig.float32, name="x")])
    lowered = f.lower(ig.TensorSpec([3], ig.float32, name="x"))
    assert repr(parse_signatures(lowered.mlir)[lowered.name]) == f"{lowered.name}(x: 3xf32) -> (loss: f32, y: 3xf32)"
    out = f(np.ones(3, np.float32))
    assert float(out["loss"]) == 3.0 and out["y"].tolist() == [2.0, 2.0, 2.0]
