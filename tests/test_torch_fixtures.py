"""The module-level pass on StableHLO exported by a third foreign frontend, PyTorch.

Each fixture in ``fixtures/torch`` (models, layout and op inventory in its README) is a real
``nn.Module`` exported by torch-mlir, ``torch_mlir.fx.export_and_import(Functional(model),
*params, *inputs, output_type="stablehlo")``, with the parameters made ``@main``'s leading
arguments by ``torch.func.functional_call``. The pass adds ``@main_grad``, ``@main_vjp`` and
``@main_jvp``; the module is compiled for llvm-cpu and run, and the results must match
PyTorch's ``torch.autograd`` within rtol 1e-4 / atol 1e-5 (float32). PyTorch itself is never
imported.

torch-mlir's modules carry what JAX's and TensorFlow's do not: ``dense_resource`` blobs (buffers
such as BatchNorm's running statistics and an attention mask), ``arith.constant``, int64 token
ids, ``stablehlo.logistic``, and normalisation statistics computed in f64 (``convert`` to f64,
``reduce``, ``divide``, ``convert`` back). ``cnn_bn_train`` also returns BatchNorm's
running-statistics updates (torch.export's buffer mutations) before its loss and logits; its
references are the true derivative of the exported function, through those updates too
(fixtures README, "Buffer updates").
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes

from foreign import Fixtures, numbered

TORCH = Fixtures(Path(__file__).parent / "fixtures" / "torch")
NAMES = TORCH.names


def test_every_fixture_is_listed():
    assert NAMES == ["cnn_bn_eval", "cnn_bn_train", "cnn_bn_train_nostats", "gru_lm", "layernorm_mlp", "lstm_lm",
                     "transformer_encoder"]
    for n in NAMES:
        data = TORCH.data(n)
        assert len(numbered(data, "grad")) == len(data["wrt"]) == len(numbered(data, "vjp"))


def test_fixtures_carry_what_torch_mlir_emits():
    """The features these fixtures exist for are really in the exported text."""
    texts = {n: TORCH.text(n) for n in NAMES}
    assert all("arith.constant" in t for t in texts.values())
    assert {n for n, t in texts.items() if "dense_resource<" in t} == {"cnn_bn_eval", "cnn_bn_train",
                                                                       "layernorm_mlp", "transformer_encoder"}
    f64_reduce = re.compile(r"stablehlo\.reduce.*xf64>")
    assert {n for n, t in texts.items() if f64_reduce.search(t)} >= {"cnn_bn_train", "cnn_bn_train_nostats",
                                                                      "transformer_encoder", "layernorm_mlp"}
    for n in ("lstm_lm", "gru_lm"):
        assert TORCH.data(n)["arg11"].dtype == np.int64 and "stablehlo.logistic" in texts[n]
        assert 11 not in TORCH.data(n)["wrt"].tolist()  # token ids get no gradient
    # BatchNorm's running_mean, running_var (f32) and num_batches_tracked (i64) come first.
    data = TORCH.data("cnn_bn_train")
    assert [data[f"out{i}"].dtype.kind for i in range(5)] == ["f", "f", "i", "f", "f"]
    assert data["float_outs"].tolist() == [0, 1, 3, 4]
    # Exported with the buffers cloned inside forward: no updates, only (loss, logits).
    assert numbered(TORCH.data("cnn_bn_train_nostats"), "out")[0].shape == ()
    assert len(numbered(TORCH.data("cnn_bn_train_nostats"), "out")) == 2


@pytest.mark.parametrize("name", NAMES)
def test_forward_matches_torch(name):
    TORCH.check_forward(name, TORCH.compiled(name, None))


@pytest.mark.parametrize("name", NAMES)
def test_grad_matches_torch(name):
    TORCH.check_grad(name)


@pytest.mark.parametrize("name", NAMES)
def test_vjp_matches_torch(name):
    TORCH.check_vjp(name)


@pytest.mark.parametrize("name", NAMES)
def test_jvp_agrees_with_torch_vjp(name):
    """Forward mode (@main_jvp) on torch-mlir's StableHLO: <J v, u> equals <v, Jᵀu> from torch.autograd."""
    TORCH.check_jvp(name)


def test_lstm_language_model_trains_with_adam():
    """`train="adam"` (`irgrad compile --train adam`) on torch-mlir's LSTM language model: the
    parameters (args 0-10) are trained, the int64 ids and targets (args 11, 12) are the data.
    The first step is Keras's Adam applied to torch.autograd's gradient; five steps lower the loss."""
    data = TORCH.data("lstm_lm")
    args, grads = numbered(data, "arg"), numbered(data, "grad")
    assert data["wrt"].tolist() == list(range(11))
    lr = 0.05
    module = ig.compile(passes.differentiate(TORCH.text("lstm_lm"), "main", grad=False, train="adam",
                                             learning_rate=lr)).load()
    assert module.metadata["training"]["main_train_step"]["params"] == list(range(11))
    trainer = module.trainer(args[:11])
    losses = [float(trainer.step(args[11], args[12]))]
    # Adam's first step: m = 0.1 g, v = 0.001 g², p -= lr·√0.001/0.1 · m / (√v + 1e-7).
    for got, p, g in zip(trainer.params(), args[:11], grads):
        g = g.astype(np.float64)
        want = p - lr * np.sqrt(1 - 0.999) / (1 - 0.9) * (0.1 * g) / (np.sqrt(0.001 * g * g) + 1e-7)
        # Near g = 0 the step is lr·g/(|g| + 3.2e-6): a gradient error δ moves it by up to lr·δ/3.2e-6.
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=lr * 1e-3)
    losses += [float(trainer.step(args[11], args[12])) for _ in range(4)]
    np.testing.assert_allclose(losses[0], data["out0"], rtol=1e-5)
    assert losses[-1] < losses[0] - 0.1, losses
