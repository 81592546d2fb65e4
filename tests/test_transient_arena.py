"""Transient arenas (``CompileOptions.transient_arena``, issue 43 item 3): each public function
takes its transient buffers from one buffer its loaded ``Function`` allocates once, and loading
such an artifact sets nothing process-wide (no ``mallopt``). What it saves (page faults, the
second call's peak) is measured by ``benchmarks/bench_memory.py --arena``, not asserted here."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes
from irgrad.runtime import CompileOptions

from gradcheck import check_vjp

# Two tanh layers and a reduction: its gradient has transients (the layers' activations).
MLP = """
func.func @f(%x: tensor<16x32xf64>, %w: tensor<32x32xf64>) -> tensor<16xf64> {
  %h = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<16x32xf64>, tensor<32x32xf64>) -> tensor<16x32xf64>
  %t = stablehlo.tanh %h : tensor<16x32xf64>
  %g = stablehlo.dot_general %t, %w, contracting_dims = [1] x [0] : (tensor<16x32xf64>, tensor<32x32xf64>) -> tensor<16x32xf64>
  %s = stablehlo.sine %g : tensor<16x32xf64>
  %z = stablehlo.constant dense<0.0> : tensor<f64>
  %r = stablehlo.reduce(%s init: %z) applies stablehlo.add across dimensions = [1] : (tensor<16x32xf64>, tensor<f64>) -> tensor<16xf64>
  return %r : tensor<16xf64>
}
"""

# Its batch known only at run time: the arena's size comes from IREE's size function per call.
DYNAMIC = """
func.func @f(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %w = stablehlo.constant dense<0.125> : tensor<64x64xf32>
  %e = stablehlo.exponential %x : tensor<?x64xf32>
  %h = stablehlo.dot_general %e, %w, contracting_dims = [1] x [0] : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %s = stablehlo.sine %h : tensor<?x64xf32>
  %g = stablehlo.dot_general %s, %w, contracting_dims = [1] x [0] : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %r = stablehlo.add %g, %e : tensor<?x64xf32>
  return %r : tensor<?x64xf32>
}
"""

ARENA = CompileOptions(transient_arena=True)


@pytest.fixture(scope="module")
def vjp_text() -> str:
    return passes.differentiate(MLP, "f", vjp=True, grad=False, with_value=True, jvp=False)


@pytest.fixture(scope="module")
def arena_module(vjp_text):
    return ig.runtime.load(ig.runtime.compile(vjp_text, ARENA).vmfb, device="local-task")


def _args(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((16, 32)) * 0.3, rng.standard_normal((32, 32)) * 0.2]


def test_the_gradient_through_an_arena_matches_finite_differences(arena_module):
    fwd, vjp = arena_module["f"], arena_module["f_vjp"]
    check_vjp(lambda *a: fwd.call_flat(*a), lambda a, cts: vjp.call_flat(*a, *cts)[1:], _args(),
              what="@f_vjp in a transient arena")


def test_the_arena_is_allocated_once_at_the_size_iree_exports(vjp_text, arena_module):
    vjp = arena_module["f_vjp"]
    size = int(vjp._vm_function.reflection["iree.abi.transients.size.constant"])
    assert size > 0 and vjp._arena_size == size
    args = [*_args(1), np.ones(16)]
    first = vjp.call_flat(*args)
    arena = vjp._arena
    assert arena is not None and arena.byte_length() >= size
    second = vjp.call_flat(*args)
    assert vjp._arena is arena  # reused, not allocated again
    plain = ig.runtime.load(ig.runtime.compile(vjp_text).vmfb, device="local-task")["f_vjp"]
    assert plain._arena_query is None
    for a, b, c in zip(first, second, plain.call_flat(*args)):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-12)
    # irgrad's signature is the function's own: the arena is not an argument a caller passes.
    assert len(vjp.signature.inputs) == 3


def test_a_call_made_while_another_holds_the_arena_gets_its_own(arena_module):
    fwd = arena_module["f"]
    args = _args(2)
    expected = fwd(*args)
    kept = fwd._arena
    with fwd._arena_lock:  # as another thread's call in flight would
        np.testing.assert_array_equal(fwd(*args), expected)
    assert fwd._arena is kept


def test_a_run_time_batch_sizes_the_arena_per_call():
    f = ig.runtime.load(ig.runtime.compile(DYNAMIC, ARENA).vmfb, device="local-task")["f"]
    assert f._arena_size is None and f._arena_query
    w = np.full((64, 64), 0.125, np.float32)
    sizes = []
    for batch in (4, 64, 16):
        x = np.random.default_rng(batch).standard_normal((batch, 64)).astype(np.float32) * 0.1
        e = np.exp(x)
        np.testing.assert_allclose(f(x), np.sin(e @ w) @ w + e, rtol=2e-5, atol=2e-6)
        sizes.append(f._arena.byte_length())
    assert sizes[0] < sizes[1] == sizes[2]  # grown for 64 rows, kept for 16


_LOAD = """
import sys
import numpy as np
import irgrad as ig
from irgrad.runtime import devices
m = ig.runtime.load(sys.argv[1], device=sys.argv[2])
m["f"](np.ones((16, 32)), np.ones((32, 32)))
print(devices.keep_freed_memory.cache_info().misses)
"""


def test_loading_an_arena_artifact_sets_nothing_process_wide(tmp_path):
    """A CPU artifact without arenas has malloc keep freed memory (``mallopt``, once per
    process); one with arenas leaves malloc as it is, on both CPU drivers."""
    artifacts = {}
    for name, options in (("plain", CompileOptions()), ("arena", ARENA)):
        artifacts[name] = tmp_path / f"{name}.vmfb"
        ig.runtime.compile(MLP, options).save(artifacts[name])
    for driver in ("local-task", "local-sync"):
        for name, calls in (("arena", "0"), ("plain", "1")):
            done = subprocess.run([sys.executable, "-c", textwrap.dedent(_LOAD), str(artifacts[name]), driver],
                                  capture_output=True, text=True, check=True)
            assert done.stdout.split()[-1] == calls, (driver, name, done.stdout)


LOSS = """
func.func @loss(%w: tensor<32x8xf32>, %x: tensor<64x32xf32>, %y: tensor<64x8xf32>) -> tensor<f32> {
  %h = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<64x32xf32>, tensor<32x8xf32>) -> tensor<64x8xf32>
  %t = stablehlo.tanh %h : tensor<64x8xf32>
  %d = stablehlo.subtract %t, %y : tensor<64x8xf32>
  %s = stablehlo.multiply %d, %d : tensor<64x8xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce(%s init: %z) applies stablehlo.add across dimensions = [0, 1] : (tensor<64x8xf32>, tensor<f32>) -> tensor<f32>
  return %r : tensor<f32>
}
"""


def test_a_trainer_steps_through_the_arena_as_without_it():
    """``Module.trainer`` calls the step function as any call does: with its arena."""
    text = passes.differentiate(LOSS, wrt=[0], grad=False, train="sgd", learning_rate=0.01)
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((32, 8)) * 0.2).astype(np.float32)
    x, y = rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal((64, 8)).astype(np.float32)
    runs = []
    for options in (CompileOptions(), ARENA):
        trainer = ig.runtime.load(ig.runtime.compile(text, options).vmfb, device="local-task").trainer([w])
        losses = [trainer.step(x, y) for _ in range(3)]
        assert (trainer._step._arena is not None) is options.transient_arena
        runs.append((losses, trainer.params()[0]))
    (plain, plain_w), (arena, arena_w) = runs
    assert plain[2] < plain[0]
    np.testing.assert_allclose(arena, plain, rtol=1e-6)
    np.testing.assert_allclose(arena_w, plain_w, rtol=1e-6, atol=1e-7)


# A loop: IREE 3.13 cannot emplace its transients ("operand #1 does not dominate this use").
LOOP = """
func.func @f(%x: tensor<64xf32>) -> tensor<64xf32> {
  %i0 = stablehlo.constant dense<0> : tensor<i32>
  %n = stablehlo.constant dense<3> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %r:2 = stablehlo.while(%i = %i0, %v = %x) : tensor<i32>, tensor<64xf32>
    cond {
      %c = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %t = stablehlo.tanh %v : tensor<64xf32>
      %s = stablehlo.add %t, %v : tensor<64xf32>
      %j = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %j, %s : tensor<i32>, tensor<64xf32>
    }
  return %r#1 : tensor<64xf32>
}
"""


def test_a_module_with_a_loop_compiles_without_arenas(caplog):
    with caplog.at_level("WARNING", logger="irgrad.runtime.compiler"):
        artifact = ig.runtime.compile(LOOP, ARENA, cache=False)
    assert "no transient arena for a module with a loop" in caplog.text
    assert "transient_arena" not in artifact.metadata["options"]  # so loading it sets mallopt
    f = ig.runtime.load(artifact.vmfb, device="local-task")["f"]
    assert f._arena_query is None
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    expected = x
    for _ in range(3):
        expected = np.tanh(expected) + expected
    np.testing.assert_allclose(f(x), expected, rtol=1e-6)


def test_arenas_are_for_llvm_cpu_and_a_flag():
    with pytest.raises(ValueError, match="transient_arena applies to target llvm-cpu only, not vulkan-spirv"):
        CompileOptions(target="vulkan", transient_arena=True)
    with pytest.raises(ValueError, match="bad transient_arena 'yes'"):
        CompileOptions(transient_arena="yes")
    assert CompileOptions(transient_arena=True).replace(cpu="generic").transient_arena
