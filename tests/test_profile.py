"""irgrad.runtime.profile: a per-dispatch profile of a small gradient, through IREE's real tools."""
from __future__ import annotations

from irgrad import passes
from irgrad.runtime import CompileOptions
from irgrad.runtime.profile import profile_dispatches

FORWARD = """
func.func @f(%x: tensor<64x32xf32>, %w: tensor<32x16xf32>) -> tensor<64x16xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<64x32xf32>, tensor<32x16xf32>) -> tensor<64x16xf32>
  %1 = stablehlo.tanh %0 : tensor<64x16xf32>
  return %1 : tensor<64x16xf32>
}
"""


def test_profile_of_a_gradient_names_its_dispatches_and_times_them():
    # The module holds @f and @f_grad: IREE would name @f_grad's forward dispatches after @f
    # (it deduplicates executables), so only the profiled function may be kept.
    text = passes.differentiate(FORWARD, "f", with_value=True)
    profile = profile_dispatches(text, CompileOptions(), function="f_grad",
                                 repetitions=1, min_time=0.01, batch_size=10)
    assert profile.function == "f_grad" and profile.dispatches
    for d in profile.dispatches:
        assert d.name.startswith("f_grad_dispatch_") and d.function == "f_grad", d
        assert d.seconds > 0 and d.description
    assert any(d.kind == "matmul" and d.flops for d in profile.dispatches)
    assert profile.whole_call_seconds is not None and profile.whole_call_seconds > 0
    times = [d.seconds_per_call for d in profile.dispatches]
    assert times == sorted(times, reverse=True)
    table = profile.table(top=2)
    assert "f_grad" in table and "whole call" in table and "more:" in table
