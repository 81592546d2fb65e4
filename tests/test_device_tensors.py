"""Arrays kept in a device's memory between calls (``Module.put``, ``Function.on_device``,
``DeviceTensor``): the same results as numpy calls, no copy where none is needed (a CPU
device's results are read in place), and the checked errors of a call."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import irgrad as ig
from irgrad import runtime as igrt

AFFINE = """func.func @main(%w: tensor<3x2xf32>, %x: tensor<?x3xf32>) -> (tensor<?x2xf32>, tensor<2xf32>) {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<?x3xf32>, tensor<3x2xf32>) -> tensor<?x2xf32>
  %1 = stablehlo.tanh %0 : tensor<?x2xf32>
  %c = stablehlo.constant dense<[1.5, -2.0]> : tensor<2xf32>
  return %1, %c : tensor<?x2xf32>, tensor<2xf32>
}"""

LOSS = """func.func @main(%w: tensor<3x2xf32>, %x: tensor<4x3xf32>, %unused: tensor<5xf32>) -> tensor<f32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %1 = stablehlo.tanh %0 : tensor<4x2xf32>
  %2 = stablehlo.multiply %1, %1 : tensor<4x2xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %3 = stablehlo.reduce(%2 init: %z) applies stablehlo.add across dimensions = [0, 1] : (tensor<4x2xf32>, tensor<f32>) -> tensor<f32>
  return %3 : tensor<f32>
}"""

RNG = np.random.default_rng(7)
W = RNG.standard_normal((3, 2)).astype(np.float32)
X = RNG.standard_normal((4, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def affine_vmfb():
    return igrt.compile(AFFINE).vmfb


@pytest.mark.parametrize("device", ["local-task", "local-sync"])
def test_resident_calls_give_the_numpy_calls_results_and_chain_without_the_host(affine_vmfb, device):
    module = igrt.load(affine_vmfb, device=device)
    fn = module["main"]
    w, x = module.put(W), module.put(X)
    assert (w.shape, w.dtype, w.device, w.nbytes) == ((3, 2), "float32", device, 24)
    h, c = fn.on_device(w, x)
    assert isinstance(h, igrt.DeviceTensor) and (h.shape, h.dtype) == ((4, 2), "float32")
    want_h, want_c = fn(W, X)
    np.testing.assert_array_equal(np.asarray(h), want_h)
    np.testing.assert_array_equal(np.asarray(c), [1.5, -2.0])
    # A resident argument and a numpy one mix; a 4x2 result goes back in as a (?x3)-shaped
    # argument's wrong shape, a 3-column one as a right one (the dynamic dimension, 2 rows).
    np.testing.assert_array_equal(fn(w, X[:2])[0], want_h[:2])
    with pytest.raises(ValueError, match=r"main argument 1: expected shape \(\?, 3\), got \(4, 2\)"):
        fn(w, h)
    wide = module.put(np.tanh(X @ W) @ W.T)  # 4x3
    np.testing.assert_allclose(fn.call_flat(w, wide)[0], np.tanh(np.tanh(X @ W) @ W.T @ W), rtol=1e-5)


def test_a_cpu_result_is_read_in_place_read_only_and_outlives_its_tensor(affine_vmfb):
    module = igrt.load(affine_vmfb, device="local-task")
    h, c = module["main"].on_device(module.put(W), module.put(X))
    a, b = np.asarray(h), np.asarray(h)
    assert np.shares_memory(a, b)  # both read the device buffer: no copy
    assert not a.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        a[0, 0] = 1.0
    constant = np.asarray(c)  # the module's constant: not to be written, ever
    assert not constant.flags.writeable
    owned = h.numpy()
    assert owned.flags.writeable and owned.flags.owndata and not np.shares_memory(owned, a)
    copied = np.array(h)  # np.array copies: an array of the caller's own
    assert copied.flags.writeable and not np.shares_memory(copied, a)
    np.testing.assert_array_equal(np.asarray(h, dtype=np.float64), owned.astype(np.float64))
    want = owned.copy()
    del h, b
    gc.collect()
    for _ in range(3):  # the view holds the buffer: later calls do not reuse it
        module["main"].on_device(module.put(np.zeros_like(W)), module.put(np.ones_like(X)))
    np.testing.assert_array_equal(a, want)


def test_a_gradient_runs_on_resident_weights_and_unused_arguments():
    module_text = ig.passes.differentiate(LOSS, "main", [0, 1], with_value=True)
    module = igrt.load(igrt.compile(module_text).vmfb)
    grad = module["main_grad"]
    unused = np.zeros(5, np.float32)
    want = grad(W, X, unused)
    loss, dw, dx = grad.on_device(module.put(W), module.put(X), module.put(unused))
    for got, expected in zip((loss, dw, dx), want):
        np.testing.assert_array_equal(np.asarray(got), expected)
    t = np.tanh(X @ W)  # d/dw sum(tanh(xw)^2) = x^T (2 t (1 - t^2)), by hand
    np.testing.assert_allclose(np.asarray(dw), X.T @ (2 * t * (1 - t * t)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype,values", [
    ("bool", [True, False, True]), ("int8", [-3, 0, 7]), ("int32", [[1, -2], [3, 4]]), ("int64", 5),
    ("uint16", [0, 65535]), ("float16", [0.5, -1.25]), ("float64", [1e-300, 2.0]),
    ("complex64", [1 + 2j, -3j]), ("float32", np.zeros((0, 3))),
])
def test_put_keeps_every_dtype_and_shape(dtype, values):
    module = igrt.load(igrt.compile(AFFINE).vmfb)
    tensor = module.put(values, dtype)
    assert (tensor.dtype, tensor.shape) == (dtype, np.shape(values))
    back = np.asarray(tensor)
    assert back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back, np.asarray(values, dtype))
    np.testing.assert_array_equal(tensor.numpy(), np.asarray(values, dtype))
    assert module.put(np.asarray(values, dtype)).dtype == dtype  # the array's own dtype by default


def test_bfloat16_tensors_hold_their_bits():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    module = igrt.load(igrt.compile(AFFINE).vmfb)
    values = np.array([1.5, -2.0, 3.0e38], ml_dtypes.bfloat16)
    tensor = module.put(values)
    assert tensor.dtype == "bfloat16"
    np.testing.assert_array_equal(np.asarray(tensor).view(np.uint16), values.view(np.uint16))


def test_wrong_resident_arguments_and_puts_are_refused_with_the_calls_errors(affine_vmfb):
    module = igrt.load(affine_vmfb, device="local-task")
    fn = module["main"]
    with pytest.raises(TypeError, match="main argument 0: expected dtype float32, got a float64 DeviceTensor"):
        fn(module.put(W.astype(np.float64)), X)
    with pytest.raises(ValueError, match=r"main argument 0: expected shape \(3, 2\), got \(2, 3\)"):
        fn.on_device(module.put(W.T), X)
    elsewhere = igrt.load(affine_vmfb, device="local-sync").put(W)
    with pytest.raises(ig.DeviceError, match="in the memory of 'local-sync', this module runs on 'local-task'"):
        fn(elsewhere, X)
    with pytest.raises(TypeError, match="main expects 2 arguments, got 1"):
        fn.on_device(module.put(W))
    with pytest.raises(TypeError, match="put: no device element type for dtype str"):
        module.put(np.array(["a", "b"]))
    with pytest.raises(TypeError, match="put: cannot convert to int32"):
        module.put([[1, 2], [3]], "int32")
    with pytest.raises(TypeError, match="put: no device element type for dtype float8"):
        module.put([1.0], "float8")


def test_on_device_returns_as_a_call_does():
    text = """func.func @one(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.negate %a : tensor<2xf32>
  return %0 : tensor<2xf32>
}
func.func @none(%a: tensor<2xf32>) {
  return
}"""
    module = igrt.load(igrt.compile(text).vmfb)
    one = module["one"].on_device(np.array([1, -2], np.float32))
    assert isinstance(one, igrt.DeviceTensor) and repr(one) == "<irgrad DeviceTensor 2xf32 on local-sync>"
    np.testing.assert_array_equal(np.asarray(module["one"].on_device(one)), [1, -2])
    assert module["none"].on_device(one) is None


@pytest.mark.vulkan
def test_vulkan_tensors_come_back_through_staging(affine_vmfb):
    if "vulkan" not in igrt.available_drivers():
        pytest.skip("no Vulkan device here")
    module = igrt.load(igrt.compile(AFFINE, igrt.CompileOptions(target="vulkan")).vmfb, device="vulkan")
    h, c = module["main"].on_device(module.put(W), module.put(X))
    np.testing.assert_allclose(np.asarray(h), np.tanh(X @ W), rtol=1e-5, atol=1e-6)
    assert np.asarray(h).flags.writeable  # a copy: a GPU's memory is not read in place
    np.testing.assert_array_equal(c.numpy(), [1.5, -2.0])
    np.testing.assert_array_equal(module.put([True, False, True, True]).numpy(), [True, False, True, True])
    with pytest.raises(ValueError, match="put: IREE 3.13's portable Vulkan target .* int8 inputs of 3 bytes"):
        module.put(np.array([1, 2, 3], np.int8))  # read wrongly there, as a call's argument would be


def test_put_of_bfloat16_without_ml_dtypes_is_refused(monkeypatch, affine_vmfb):
    from irgrad.runtime import loader

    monkeypatch.setattr(loader, "_bfloat16", lambda: None)
    with pytest.raises(TypeError, match="put: bfloat16 arrays need numpy's bfloat16 dtype from ml_dtypes"):
        igrt.load(affine_vmfb).put([1.0], "bfloat16")
