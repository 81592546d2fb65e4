"""irgrad.runtime.profile: a per-dispatch profile of a small gradient, through IREE's real tools,
told in the model's terms: what a dispatch is, the ops each came from, where a call's time goes."""
from __future__ import annotations

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes
from irgrad.runtime import CompileOptions
from irgrad.runtime.profile import DispatchTime, Profile, profile_dispatches
from irgrad.runtime.profile_sources import dispatch_sources, location_names

FORWARD = """
func.func @f(%x: tensor<64x32xf32>, %w: tensor<32x16xf32>) -> tensor<64x16xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<64x32xf32>, tensor<32x16xf32>) -> tensor<64x16xf32>
  %1 = stablehlo.tanh %0 : tensor<64x16xf32>
  return %1 : tensor<64x16xf32>
}
"""
QUICK = dict(repetitions=1, min_time=0.01, batch_size=10)


def test_profile_of_a_gradient_names_its_dispatches_and_times_them():
    # The module holds @f and @f_grad: IREE would name @f_grad's forward dispatches after @f
    # (it deduplicates executables), so only the profiled function may be kept.
    text = passes.differentiate(FORWARD, "f", with_value=True)
    profile = profile_dispatches(text, CompileOptions(), function="f_grad", **QUICK)
    assert profile.function == "f_grad" and profile.dispatches
    for d in profile.dispatches:
        assert d.name.startswith("f_grad_dispatch_") and d.function == "f_grad", d
        assert d.seconds > 0 and d.description
    assert any(d.kind == "matmul" and d.flops for d in profile.dispatches)
    assert profile.whole_call_seconds is not None and profile.whole_call_seconds > 0
    times = [d.seconds_per_call for d in profile.dispatches]
    assert times == sorted(times, reverse=True)
    # Sources: the adjoint's name locations, and the text's own ops (no names: line numbers of FORWARD).
    sources = {name for d in profile.dispatches for name in d.sources}
    assert "f_grad/dot_general_grad" in sources, sources
    assert {"stablehlo.dot_general (line 3)", "stablehlo.tanh (line 4)"} <= sources, sources
    table = profile.table(top=2)
    assert "f_grad" in table and "whole call" in table and "more:" in table
    assert "A dispatch is one kernel IREE runs" in table and "from (the model's ops)" in table
    assert "the rest: IREE's per-call overhead" in table and "dispatches timed alone, summed" in table


def test_a_traced_model_s_dispatches_name_its_ops():
    @ig.function(input_signature=[ig.TensorSpec([8, 4], ig.float32, name="x"),
                                  ig.TensorSpec([4, 16], ig.float32, name="w")])
    def loss(x, w):
        return ig.reduce_sum(ig.tanh(x @ w))

    text = passes.differentiate(loss.lower(np.zeros((8, 4), np.float32), np.zeros((4, 16), np.float32)).mlir,
                                "loss", with_value=True)
    profile = profile_dispatches(text, function="loss_grad", **QUICK)
    sources = [name for d in profile.dispatches for name in d.sources]
    assert "loss_grad/tanh_grad" in sources and "MatMul" in sources, sources
    assert any(name.startswith("loss_grad/MatMul") for name in sources), sources


def test_the_breakdown_accounts_for_the_whole_call():
    """The report's footer: whole call = inside the dispatches + IREE's overhead; the sum alone beside."""
    dispatches = [
        DispatchTime("f_dispatch_0_matmul_8x8x8_f32", "f", 0, "matmul", "matmul M×N×K = 8×8×8, f32", 4e-6,
                     1, 3e-6, 1024, ("MatMul", "add", "tanh")),
        DispatchTime("f_dispatch_1_elementwise_8_f32", "f", 1, "elementwise", "elementwise 8, f32", 2e-6,
                     2, 1e-6, None, ()),
    ]
    profile = Profile("f", dispatches, 40e-6, "local-task", [])
    assert profile.in_call_seconds == 4e-6 and abs(profile.overhead_seconds - 36e-6) < 1e-12
    table = profile.table()
    lines = table.splitlines()
    assert any("MatMul, add, tanh" in line for line in lines)
    assert "from: '?' (1 dispatch): no source location is known" in table
    whole = next(line for line in lines if line.startswith("  whole call"))
    inside = next(line for line in lines if "inside the 2 dispatches" in line)
    rest = next(line for line in lines if "the rest: IREE's per-call overhead" in line)
    alone = next(line for line in lines if "dispatches timed alone, summed" in line)
    assert "40.0 µs  100%" in whole and "4.0 µs" in inside and "36.0 µs   90%" in rest, table
    assert "8.0 µs   20%" in alone and "local-task's worker threads" in table


def test_locations_read_as_the_model_named_them():
    assert location_names('"loss_grad/tanh_grad"("tanh")') == ["loss_grad/tanh_grad"]
    assert location_names('fused["a", "b"("x.py":1:2)]') == ["a", "b"]
    assert location_names('callsite("inner" at "outer")') == ["inner"]
    assert location_names('"-":12:8', file_ops={'"-":12:8': "stablehlo.tanh"}) == ["stablehlo.tanh (line 12)"]
    assert location_names('"/src/model.py":3:4') == ["model.py:3"]
    assert location_names("unknown") == []
    dump = """
      builtin.module {
        func.func @g_dispatch_0_elementwise_8_f32() {
          %c0 = arith.constant 0 : index loc("elsewhere")
          %0 = hal.interface.binding.subspan layout(<bindings = []>) binding(0) : memref<8xf32> loc("producer")
          %1 = tensor.empty() : tensor<8xf32> loc("neighbour")
          %2 = linalg.generic {iterator_types = ["parallel"]} ins(%0 : tensor<8xf32>) outs(%1 : tensor<8xf32>) {
          ^bb0(%in: f32 loc("producer"), %out: f32 loc("neighbour")):
            %3 = math.tanh %in : f32 loc("tanh")
            %4 = arith.mulf %3, %3 : f32 loc(#loc1)
            linalg.yield %4 : f32 loc("g_grad/tanh_grad"("tanh"))
          } -> tensor<8xf32> loc("g_grad/tanh_grad"("tanh"))
          return loc("g_grad/tanh_grad"("tanh"))
        } loc("g_grad/tanh_grad"("tanh"))
      }
#loc1 = loc("square")
"""
    assert dispatch_sources(dump) == {"g_dispatch_0_elementwise_8_f32": ("g_grad/tanh_grad", "tanh", "square")}


def test_the_measured_peak_is_the_call_s_memory_beside_the_estimate():
    """A gradient of 1024x1024 f32 values (results 8 MiB, a 4 MiB tape; estimated 24 MiB,
    measured 16 here): the first call, measured in a fresh process, raises the peak by about what the estimate
    says (both count IREE's buffers: results from the start, the tape); not by 0 and not by the
    arguments, which are on the device before the call."""
    t = "tensor<1024x1024xf32>"
    text = passes.differentiate(f"""func.func @g(%x: {t}, %w: {t}) -> tensor<f32> {{
  %0 = stablehlo.tanh %x : {t}
  %1 = stablehlo.multiply %0, %w : {t}
  %2 = stablehlo.tanh %1 : {t}
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%2 init: %z) applies stablehlo.add across dimensions = [0, 1] : ({t}, tensor<f32>) -> tensor<f32>
  return %s : tensor<f32>
}}
""", "g", with_value=True)
    estimate = passes.estimate_peak(text, "g_grad").peak
    profile = profile_dispatches(text, function="g_grad", **QUICK)
    assert profile.measured_peak is not None, profile.note
    assert 0.5 * estimate <= profile.measured_peak <= 2 * estimate, (profile.measured_peak, estimate)


@pytest.mark.parametrize("arg, why", [("tensor<4xbf16>", "bfloat16 arguments: not measured"),
                                      ("tensor<?xf32>", "has a dynamic shape")])
def test_a_peak_that_cannot_be_measured_says_why(tmp_path, arg, why):
    """measure_peak raises ValueError naming the reason (profile_dispatches puts it in its note)."""
    from irgrad.runtime.profile import measure_peak

    vmfb = tmp_path / "m.vmfb"
    vmfb.write_bytes(ig.runtime.compile(f"""func.func @f(%x: {arg}) -> {arg} {{
  %y = stablehlo.add %x, %x : {arg}
  return %y : {arg}
}}
""").vmfb)
    with pytest.raises(ValueError, match=f"peak not measured: .*{why}"):
        measure_peak(vmfb, "f", "local-task")
