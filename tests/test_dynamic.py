"""Modules with dynamic dimensions (issue 32): one artifact for every batch size.

``fixtures/jax_dynamic`` holds ``jax.export`` modules with a symbolic batch ``b``
(``dev/make_jax_dynamic_fixtures.py``), JAX's forward outputs and ``jax.grad`` gradients at
batch sizes 1, 3 and 32. Each is differentiated and compiled once, and that one artifact must
match JAX at every batch size. IREE 3.13 alone refuses several of these forwards
(``dynamic_broadcast_in_dim`` without ``known_nonexpanding_dimensions``, any
``dynamic_reshape``); irgrad's compile path (``passes/dynamic_shapes.py``) makes them compile.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes
from irgrad.passes.legalize import legalize_text

DIR = Path(__file__).parent / "fixtures" / "jax_dynamic"
BATCHES = (1, 3, 32)
DIFFERENTIATED = ["mlp", "mlp_loss", "softmax", "layernorm", "attention", "batchnorm"]
RTOL, ATOL = 1e-4, 1e-5


def _data(name):
    with np.load(DIR / f"{name}.npz") as z:
        return {k: z[k] for k in z.files}


def _args(data, batch):
    out, i = [], 0
    while f"arg{i}_b{batch}" in data:
        out.append(data[f"arg{i}_b{batch}"])
        i += 1
    return out


def _numbered(data, prefix, batch):
    out, i = [], 0
    while f"{prefix}{i}_b{batch}" in data:
        out.append(data[f"{prefix}{i}_b{batch}"])
        i += 1
    return out


@functools.cache
def _compiled(name):
    return ig.compile(passes.differentiate((DIR / f"{name}.mlir").read_text(), "main")).load()


def _tuple(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)


@pytest.mark.parametrize("name", DIFFERENTIATED)
def test_one_artifact_matches_jax_at_every_batch_size(name):
    data, module = _data(name), _compiled(name)
    wrt = [int(i) for i in data["wrt"]]
    for batch in BATCHES:
        args = _args(data, batch)
        for got, want in zip(_tuple(module["main"](*args)), _numbered(data, "out", batch), strict=True):
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{name} forward, batch {batch}")
        grads = _tuple(module["main_grad"](*args))  # every float argument, labels included
        for k, want in enumerate(_numbered(data, "grad", batch)):
            np.testing.assert_allclose(grads[wrt[k]], want, rtol=RTOL, atol=ATOL,
                                       err_msg=f"{name} d arg{wrt[k]}, batch {batch}")


def test_plain_iree_refuses_what_irgrad_compiles():
    """softmax: IREE 3.13 on the export as it is fails; the legalized module carries the proof."""
    from iree.compiler import CompilerToolError, compile_str
    text = (DIR / "softmax.mlir").read_text()
    with pytest.raises(CompilerToolError, match="dynamic_broadcast_in_dim"):
        compile_str(text, target_backends=["llvm-cpu"], input_type="stablehlo",
                    extra_args=["--iree-llvmcpu-target-cpu=generic"])
    assert "known_nonexpanding_dimensions" in legalize_text(text)


def test_cnn_forward_runs_at_every_batch_size():
    data = _data("cnn")
    module = ig.compile((DIR / "cnn.mlir").read_text()).load()
    for batch in BATCHES:
        np.testing.assert_allclose(module["main"](*_args(data, batch)), data[f"out0_b{batch}"], rtol=RTOL, atol=ATOL)


def test_a_rule_that_needs_a_static_size_refuses_in_one_line():
    """max pooling's adjoint (reduce_window) has no dynamic form yet: one line, op, dimension, line."""
    with pytest.raises(LookupError) as info:
        passes.differentiate((DIR / "cnn.mlir").read_text(), "main")
    message = str(info.value)
    assert "\n" not in message and "stablehlo.reduce_window" in message
    assert "dimension 0" in message and "?x6x6x4xf32" in message and "make_jax_dynamic_fixtures.py\":71" in message


def test_portable_artifact_differentiates():
    """``.mlir_module_serialized`` (versioned StableHLO bytecode) works as the text does."""
    data = _data("mlp")
    module = ig.compile(passes.differentiate((DIR / "mlp.mlirbc").read_bytes(), "main")).load()
    grads = _tuple(module["main_grad"](*_args(data, 3)))
    np.testing.assert_allclose(grads[0], data["grad0_b3"], rtol=RTOL, atol=ATOL)


def test_signature_shows_dynamic_dimensions_and_calls_check_the_static_ones():
    module = _compiled("mlp")
    assert "?x4xf32" in str(module.functions["main"]) and "?x4xf32" in str(module.functions["main_grad"])
    data = _data("mlp")
    rest = _args(data, 3)[1:]
    with pytest.raises(ValueError, match=r"expected shape \(\?, 4\)"):
        module["main"](np.zeros((3, 5), np.float32), *rest)
    with pytest.raises(ValueError):
        module["main"](np.zeros((3, 4, 1), np.float32), *rest)
    for batch in (2, 7, 128):  # sizes the fixture never saw
        assert module["main"](np.ones((batch, 4), np.float32), *rest).shape == (batch, 3)


def test_hand_written_dynamic_module():
    """The issue's example: a reduce over tensor<?xf32>, differentiated and run at two sizes."""
    text = """module { func.func @main(%a: tensor<?xf32>) -> tensor<f32> {
      %z = stablehlo.constant dense<0.0> : tensor<f32>
      %s = stablehlo.multiply %a, %a : tensor<?xf32>
      %r = stablehlo.reduce(%s init: %z) applies stablehlo.add across dimensions = [0]
        : (tensor<?xf32>, tensor<f32>) -> tensor<f32>
      return %r : tensor<f32> } }"""
    module = ig.compile(passes.differentiate(text, "main")).load()
    for n in (1, 5):
        x = np.arange(n, dtype=np.float32)
        np.testing.assert_allclose(module["main_grad"](x), 2 * x)


def test_unprovable_broadcast_refuses_in_one_line():
    """A dynamic operand dimension that may be a size-1 broadcast at run time has no adjoint."""
    text = """module { func.func @main(%a: tensor<?xf32>, %s: tensor<1xi32>) -> tensor<?xf32> {
      %b = stablehlo.dynamic_broadcast_in_dim %a, %s, dims = [0] : (tensor<?xf32>, tensor<1xi32>) -> tensor<?xf32>
      return %b : tensor<?xf32> } }"""
    with pytest.raises(LookupError) as info:
        passes.differentiate(text, "main")
    assert "\n" not in str(info.value) and "operand dimension 0" in str(info.value) and "dynamic_broadcast_in_dim" in str(info.value)
