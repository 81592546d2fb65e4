"""The peak-memory estimate (``passes.estimate_peak``) and the memory limit that rematerializes a
gradient to fit (``memory_limit=``, ``--max-memory``; issue 43). The tests check the estimate's
structure and that a limit changes the plan; memory itself is measured by
``benchmarks/bench_memory_limit.py``, not asserted here."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

import irgrad as ig
from irgrad import passes
from irgrad.cli import app
from irgrad.passes import memory
from irgrad.passes.ir.mlir import ir
from irgrad.passes.lowering import choices

from gradcheck import check_module

LAYERS, BATCH, WIDTH = 8, 64, 16
ACTIVATION = BATCH * WIDTH * 8  # bytes of one f64 BATCH x WIDTH value (f64: gradcheck's precision)


def mlp(layers: int = LAYERS, bias: bool = False) -> str:
    """``sum(tanh(... tanh(x @ w0 [+ b0]) ... @ w{n-1} [+ b{n-1}]))``: a chain whose gradient keeps
    every activation; ``bias``: each bias broadcast at the top of the function, as JAX exports it."""
    act, wt, vec = f"tensor<{BATCH}x{WIDTH}xf64>", f"tensor<{WIDTH}x{WIDTH}xf64>", f"tensor<{WIDTH}xf64>"
    args = ", ".join(f"%w{i}: {wt}" + (f", %b{i}: {vec}" if bias else "") for i in range(layers))
    lines = [f"func.func @mlp(%x: {act}, {args}) -> tensor<f64> {{"]
    if bias:
        lines += [f"  %B{i} = stablehlo.broadcast_in_dim %b{i}, dims = [1] : ({vec}) -> {act}" for i in range(layers)]
    prev = "%x"
    for i in range(layers):
        lines.append(f"  %d{i} = stablehlo.dot_general {prev}, %w{i}, contracting_dims = [1] x [0] : "
                     f"({act}, {wt}) -> {act}")
        if bias:
            lines.append(f"  %e{i} = stablehlo.add %d{i}, %B{i} : {act}")
        lines.append(f"  %h{i} = stablehlo.tanh %{'e' if bias else 'd'}{i} : {act}")
        prev = f"%h{i}"
    lines += ["  %c = stablehlo.constant dense<0.0> : tensor<f64>",
              f"  %s = stablehlo.reduce({prev} init: %c) applies stablehlo.add across dimensions = [0, 1] : "
              f"({act}, tensor<f64>) -> tensor<f64>",
              "  return %s : tensor<f64>", "}"]
    return "\n".join(lines) + "\n"


LOOP = """
func.func @scan(%x: tensor<64x16xf64>, %w: tensor<16x16xf64>) -> tensor<f64> {
  %i0 = stablehlo.constant dense<0> : tensor<i32>
  %n = stablehlo.constant dense<48> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %r:2 = stablehlo.while(%i = %i0, %v = %x) : tensor<i32>, tensor<64x16xf64>
    cond {
      %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %d = stablehlo.dot_general %v, %w, contracting_dims = [1] x [0] : (tensor<64x16xf64>, tensor<16x16xf64>) -> tensor<64x16xf64>
      %t = stablehlo.tanh %d : tensor<64x16xf64>
      %j = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %j, %t : tensor<i32>, tensor<64x16xf64>
    }
  %c = stablehlo.constant dense<0.0> : tensor<f64>
  %s = stablehlo.reduce(%r#1 init: %c) applies stablehlo.add across dimensions = [0, 1] : (tensor<64x16xf64>, tensor<f64>) -> tensor<f64>
  return %s : tensor<f64>
}
"""


def _args(layers: int = LAYERS, bias: bool = False) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, WIDTH))
    weights = [[rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH), *([rng.standard_normal(WIDTH)] if bias else [])]
               for _ in range(layers)]
    return [x, *[a for layer in weights for a in layer]]


@pytest.fixture(scope="module")
def free() -> tuple[str, memory.Estimate]:
    text = passes.differentiate(mlp())
    return text, passes.estimate_peak(text, "mlp_grad")


def test_estimate_structure(free):
    text, grad = free
    forward = passes.estimate_peak(text, "mlp")
    weights = LAYERS * WIDTH * WIDTH * 8
    assert forward.arguments == grad.arguments == ACTIVATION + weights
    assert forward.tape == 0 and forward.results == 8  # one f64 scalar
    assert grad.results == ACTIVATION + weights  # d_x and every d_w
    # The backward reads every layer's tanh output (tanh's adjoint, the next layer's d_w): the tape.
    assert grad.tape == LAYERS * ACTIVATION
    assert grad.peak >= grad.tape and grad.peak > forward.peak and grad.largest == ACTIVATION
    assert not grad.dynamic and grad.loops == 0
    line = grad.line()
    assert line.startswith("@mlp_grad: estimated peak ") and "tape 64.0 KiB" in line and "\n" not in line
    assert set(grad.as_dict()) >= {"peak", "arguments", "results", "tape", "largest", "at", "loops"}


def test_no_limit_needed_leaves_the_gradient_as_it_is(free):
    text, grad = free
    assert passes.differentiate(mlp(), memory_limit=grad.peak) == text


def test_limit_recomputes_and_the_gradient_holds(free):
    _, grad = free
    limit = int(grad.peak * 0.8)
    text = check_module(mlp(), _args(), memory_limit=limit, jvp=False)
    fitted = passes.estimate_peak(text, "mlp_vjp")
    assert fitted.peak <= limit and fitted.tape < grad.tape
    # The forward's tanh ops (in @mlp and @mlp_vjp), and the copies recomputed in the backward.
    assert text.count("stablehlo.tanh") > 2 * LAYERS


def test_every_gradient_hoists_its_reductions(monkeypatch):
    """Each bias's gradient sums a cotangent the walk otherwise keeps to the end (the broadcasts
    come first in the forward, so last in the backward): moved next to it, it frees that
    cotangent at once. Every gradient is built so; under a limit between the two peaks, ``fit``
    hoists them too and recomputes nothing."""
    text = passes.differentiate(mlp(bias=True), vjp=True, grad=False, with_value=True)  # as check_module does
    assert text.count(memory.HOISTED) >= LAYERS  # each bias's sum, and the loss's seed
    hoisted = passes.estimate_peak(text, "mlp_vjp")
    with monkeypatch.context() as m:
        m.setattr(memory, "hoist_reductions", lambda func_op: 0)
        kept = passes.differentiate(mlp(bias=True), vjp=True, grad=False, with_value=True)
    assert memory.HOISTED not in kept and hoisted.peak < passes.estimate_peak(kept, "mlp_vjp").peak
    module = passes.parse_module(text)
    with module.context:  # the backward still starts where it did: the hoisted ops are passed over
        func = passes.find_function(module, "mlp_vjp")
        assert memory.HOISTED not in memory.backward_start(func).attributes
    fitted = check_module(mlp(bias=True), _args(bias=True), memory_limit=hoisted.peak, jvp=False)
    assert passes.estimate_peak(fitted, "mlp_vjp").peak <= hoisted.peak
    assert fitted.count("stablehlo.tanh") == 2 * LAYERS  # @mlp's and @mlp_vjp's: nothing recomputed
    assert fitted.count(memory.HOISTED) >= LAYERS


def test_hoisted_reductions_lower_what_iree_allocates(monkeypatch):
    """Measured, not estimated: with each bias's sum next to the cotangent it reduces, IREE's host
    program holds at least one activation less at its peak (8 layers: 105 → 97 KiB)."""
    from hostprogram import peak_allocation

    hoisted = passes.differentiate(mlp(bias=True), "mlp")
    monkeypatch.setattr(memory, "hoist_reductions", lambda f: 0)
    kept = passes.differentiate(mlp(bias=True), "mlp")
    assert peak_allocation(hoisted, "mlp_grad") <= peak_allocation(kept, "mlp_grad") - ACTIVATION


def test_recomputing_weighs_contractions():
    module = passes.parse_module(mlp())
    with module.context:
        ops = {op.operation.name: op.operation for op in passes.find_function(module, "mlp").regions[0].blocks[0]
               .operations}
        # BATCH x WIDTH elements each; the contraction adds WIDTH multiply-adds an element, / 32.
        assert memory.work(ops["stablehlo.tanh"]) == BATCH * WIDTH
        assert memory.work(ops["stablehlo.dot_general"]) == BATCH * WIDTH + BATCH * WIDTH * WIDTH // 32
    conv = passes.parse_module("""
func.func @c(%x: tensor<1x8x8x3xf32>, %k: tensor<3x3x3x4xf32>) -> tensor<1x6x6x4xf32> {
  %0 = stablehlo.convolution(%x, %k) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1, 1]}
    {batch_group_count = 1 : i64, feature_group_count = 1 : i64}
    : (tensor<1x8x8x3xf32>, tensor<3x3x3x4xf32>) -> tensor<1x6x6x4xf32>
  return %0 : tensor<1x6x6x4xf32>
}""")
    with conv.context:
        op = next(iter(passes.find_function(conv, "c").regions[0].blocks[0].operations)).operation
        assert memory.work(op) == 144 + 144 * (3 * 3 * 3) // 32  # 3x3 taps of 3 features an element


def test_a_training_step_fits_and_trains_the_same():
    free = passes.differentiate(mlp(), train="sgd", wrt=list(range(1, LAYERS + 1)))
    step = passes.estimate_peak(free, "mlp_train_step")
    limit = int(step.peak * 0.8)
    fitted = passes.differentiate(mlp(), train="sgd", wrt=list(range(1, LAYERS + 1)), memory_limit=limit)
    assert passes.estimate_peak(fitted, "mlp_train_step").peak <= limit < step.peak
    assert fitted.count("stablehlo.tanh") > free.count("stablehlo.tanh")  # recomputed in the backward
    args = [*_args(), np.int32(0)]  # F's arguments, then the optimizer's state: SGD's step count
    runs = [ig.compile(text).load()["mlp_train_step"].call_flat(*args) for text in (free, fitted)]
    for a, b in zip(*runs):  # the loss, each parameter after one step, the step count
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-12, atol=1e-12)


def test_segments_follow_the_forward():
    module = passes.parse_module(passes.differentiate(mlp()))
    with module.context:
        func = passes.find_function(module, "mlp_grad")
        counts = memory.candidate_segments(func)
        forward = [op for op in func.regions[0].blocks[0].operations if op.operation.name != "stablehlo.constant"]
        assert counts[0] == 4  # √16 forward ops: 8 dot_general + 8 tanh
        groups = memory.segment_ops([op.operation for op in forward][:2 * LAYERS], 4)
        assert [len(g) for g in groups] == [4, 4, 4, 4]


@pytest.mark.parametrize("chains", [True, False], ids=["chains", "first-reader"])
def test_fewer_checkpoints_recompute_from_further_back(chains):
    """Hand-derived: a layer a segment. Every segment's checkpoint kept (stride 1), each layer's
    activation is one, and nothing is recomputed. Every 2nd kept: the activations of layers 0,
    2, 4, 6 are recomputed, one layer each. None kept: layer k's activation is recomputed from x,
    k + 1 layers (the last one's is read where the backward starts: kept), and each recomputation
    ties one input of its first product alone (one ``is_finite`` each), not every input it reads:
    as a chain (``memory.chains``), the activation, the input as large as what the product makes
    (x where it starts from x); placed before its first reader, the smallest, the weight."""
    cases = ((1, 0, 0, 0), (2, 4, 4, 1), (LAYERS, sum(range(1, LAYERS)), LAYERS - 1, LAYERS - 1))
    for stride, tanh, ties, from_x in cases:
        module = passes.parse_module(passes.differentiate(mlp()))
        with module.context, memory.chains(chains):
            func = passes.find_function(module, "mlp_grad")
            forward, _ = memory._forward_backward(func)
            assert [len(g) for g in memory.segment_ops(forward, LAYERS)] == [2] * LAYERS  # a dot_general, a tanh
            memory.rematerialize(func, LAYERS, stride)
            memory.cleanup(func)
            text = str(func)
        assert text.count("stablehlo.tanh") == LAYERS + tanh, stride
        assert text.count("stablehlo.is_finite") == ties, stride
        assert len(re.findall(r"stablehlo\.add %arg0, ", text)) == (from_x if chains else 0), stride  # x tied


def test_a_chain_ties_each_layer_to_the_product_before_it():
    """Hand-derived, an MLP whose biases are broadcast at the top (as JAX exports them), nothing
    kept: as a chain, each recomputed layer's bias moves down to its layer and is tied to that
    layer's product (an ``is_finite`` of its own per recomputed layer), and each chain ties x
    once; placed before the first reader, every tie of a chain shares the cotangent's one
    scalar (one ``is_finite`` a chain), which then lives through the whole chain."""
    def recomputed(chains: bool) -> tuple[int, int, int]:
        module = passes.parse_module(passes.differentiate(mlp(bias=True)))
        with module.context, memory.chains(chains):
            func = passes.find_function(module, "mlp_grad")
            memory.rematerialize(func, LAYERS, LAYERS)
            memory.cleanup(func)
            text = str(func)
        return (text.count("stablehlo.tanh") - LAYERS, text.count("stablehlo.is_finite"),
                len(re.findall(r"stablehlo\.add %arg0, ", text)))

    layers, ties, chains = recomputed(True)
    assert layers and chains and ties == layers + chains
    assert recomputed(False) == (layers, chains, 0)


def test_chains_recompute_a_resnet_block_the_same():
    """JAX's ResNet block (convolutions, batch norms, a residual; the fixture at batch 2), the
    fewest and the most segments tried, each with no checkpoint kept (every segment recomputed from the
    arguments, as chains): the backward's cotangents read recomputed values, and the chains
    start after them; each plan verifies, and computes the unconstrained gradient's values."""
    from pathlib import Path

    text = (Path(__file__).parent / "fixtures" / "resnet_block_jax.mlir").read_text()
    free = passes.differentiate(text, with_value=True)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(a.shape).astype(np.float32) for a in ig.runtime.parse_signatures(free)["main"].inputs]
    want = ig.compile(free).load()["main_grad"].call_flat(*args)
    module = passes.parse_module(free)
    with module.context, memory.chains():
        func = passes.find_function(module, "main_grad")
        counts = memory.candidate_segments(func)
        plans = [(counts[0], counts[0]), (counts[-1], counts[-1])]  # the fewest segments, the most
        for segments, stride in plans:
            copy = func.clone(ir.InsertionPoint(func))
            assert memory.rematerialize(copy, segments, stride) > 0, segments
            memory.cleanup(copy)
            passes.verify(copy, "main_grad")
            got = ig.compile(f"module {{\n{copy}\n}}\n").load()["main_grad"].call_flat(*args)
            for a, b in zip(want, got):
                np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=2e-4, atol=2e-5)
            copy.erase()


def test_a_plan_is_taken_only_if_iree_allocates_within_the_limit():
    """``allocated`` (``runtime.compiler.peak_allocation``, what IREE's host program allocates
    at once; ``irgrad grad|compile --max-memory`` pass it), with which segments are recomputed
    as chains (``memory.chains``): the estimate follows the op order, IREE's scheduler and its
    best-fit pack decide. This MLP (biases broadcast at the top): the smallest limit named is
    one IREE meets; the plan taken there is estimated below what IREE allocates for it (49.3
    against 57 KiB), and a limit at its estimate is refused, naming more; its gradients hold."""
    from hostprogram import peak_allocation

    def fitted(limit) -> str:
        return passes.differentiate(mlp(bias=True), memory_limit=limit, allocated=peak_allocation)

    with pytest.raises(passes.MemoryLimitError) as caught:
        fitted("1K")
    named = caught.value.smallest
    assert "as allocated" in str(caught.value)
    assert named < passes.estimate_peak(passes.differentiate(mlp(bias=True)), "mlp_grad").peak
    taken = fitted(named)
    estimated, allocated = passes.estimate_peak(taken, "mlp_grad").peak, peak_allocation(taken, "mlp_grad")
    assert estimated < allocated <= named
    with pytest.raises(passes.MemoryLimitError) as caught:
        fitted(estimated)  # the estimate alone would take it
    assert caught.value.smallest > estimated
    with pytest.raises(passes.MemoryLimitError) as caught:  # check_module's @mlp_vjp: its own limit
        passes.differentiate(mlp(bias=True), vjp=True, grad=False, with_value=True, memory_limit="1K",
                             allocated=peak_allocation)
    named = caught.value.smallest
    text = check_module(mlp(bias=True), _args(bias=True), memory_limit=named, allocated=peak_allocation, jvp=False)
    assert peak_allocation(text, "mlp_vjp") <= named
    with pytest.raises(ValueError, match="no public function @mlp_hessian"):
        peak_allocation(text, "mlp_hessian")


def test_a_copy_of_a_chain_from_a_constant_is_tied_where_it_reads_a_value():
    """A ReLU copied with its constant: the constant's and the broadcast's copies are not tied
    (constants alone), the maximum ties its input (one tie), and CSE keeps the copied maximum
    apart from the original, which the function still returns."""
    module = passes.parse_module("""
func.func @f(%x: tensor<4xf32>, %c: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %b = stablehlo.broadcast_in_dim %z, dims = [] : (tensor<f32>) -> tensor<4xf32>
  %m = stablehlo.maximum %x, %b : tensor<4xf32>
  %n = stablehlo.multiply %c, %m : tensor<4xf32>
  return %m, %n : tensor<4xf32>, tensor<4xf32>
}""")
    with module.context:
        func = passes.find_function(module, "f")
        ops = [op.operation for op in func.regions[0].blocks[0].operations]
        relu, last = ops[:3], ops[3]
        copies = memory._recompute(last, relu, [last], anchor=func.regions[0].blocks[0].arguments[1])
        last.operands[1] = copies[relu[2].results[0]]
        memory.cleanup(func)
        text = str(func)
    assert text.count("stablehlo.maximum") == 2 and text.count("stablehlo.is_finite") == 1


def test_a_limit_below_what_checkpoints_reach_keeps_fewer_and_the_gradient_holds(monkeypatch):
    def smallest() -> int:
        with pytest.raises(passes.MemoryLimitError) as caught:
            passes.differentiate(mlp(), vjp=True, grad=False, with_value=True, memory_limit="1K")  # as check_module
        return caught.value.smallest

    every = smallest()
    with monkeypatch.context() as m:
        m.setattr(memory, "_fewer_checkpoints", lambda *args: [])  # every segment's checkpoints kept
        kept = smallest()
    assert every < kept
    least = check_module(mlp(), _args(), memory_limit=every, jvp=False)
    assert passes.estimate_peak(least, "mlp_vjp").peak <= every
    # Between the two: a stride that keeps some checkpoints fits, recomputing less.
    between = (every + kept) // 2
    some = check_module(mlp(), _args(), memory_limit=between, jvp=False)
    assert passes.estimate_peak(some, "mlp_vjp").peak <= between
    assert some.count("stablehlo.tanh") < least.count("stablehlo.tanh")
    # Copies bounded by the gradient's size (a MobileNetV2's trial costs seconds): the strides
    # tried stop below all segments, and the limit they reach lies between.
    tried = []
    trial = memory._trial
    with monkeypatch.context() as m:
        m.setattr(memory, "_MAX_COPIES", 0)
        m.setattr(memory, "_trial", lambda func, segments, stride=1: tried.append((segments, stride))
                  or trial(func, segments, stride))
        capped = smallest()
    assert every < capped < kept
    assert max(stride for _, stride in tried) < max(segments for segments, _ in tried)


def test_refusal_names_the_estimate_and_the_smallest_limit(free):
    _, grad = free
    with pytest.raises(passes.MemoryLimitError) as caught:
        passes.differentiate(mlp(), memory_limit="1K")
    error = caught.value
    message = str(error)
    assert "\n" not in message and message.startswith("memory limit 1.0 KiB cannot be met by @mlp_grad")
    assert f"estimated peak is {memory.human(grad.peak)}" in message
    assert error.estimate == grad.peak and error.smallest < grad.peak
    # The smallest limit it names can be met.
    fitted = passes.differentiate(mlp(), memory_limit=error.smallest)
    assert passes.estimate_peak(fitted, "mlp_grad").peak <= error.smallest


def test_loops_fit(loop_form):
    """Looped, a loop's taped iterations are its state: the limit checkpoints it (√n snapshots)
    before recomputing anything; unrolled, its iterations are straight-line code, recomputed
    in segments."""
    text = passes.differentiate(LOOP)
    taped = passes.estimate_peak(text, "scan_grad")
    assert taped.tape >= 48 * 64 * 16 * 8  # every iteration's carry
    if loop_form == "looped":
        assert taped.loops >= 48 * 64 * 16 * 8
    limit = taped.peak // 2
    fitted = check_module(LOOP, _args(1), memory_limit=limit, jvp=False)
    assert passes.estimate_peak(fitted, "scan_vjp").peak <= limit
    checkpointed = passes.differentiate(LOOP, loop_checkpoints="sqrt")
    if loop_form == "looped":  # checkpointed as --loop-checkpoints sqrt does, nothing recomputed
        assert passes.differentiate(LOOP, memory_limit=limit) == checkpointed
    else:  # straight-line code that checkpoints do not change: recomputed
        assert passes.estimate_peak(checkpointed, "scan_grad").peak > limit
        assert fitted.count("stablehlo.tanh") > 1 + 48  # @scan's loop body, @scan_vjp's 48 steps, and copies


def test_checkpoints_that_cost_more_are_undone_and_a_limit_nothing_lowers_is_refused():
    """A 3-step loop: its √n snapshots' loops hold more than its tape (the segments' loops are
    not ones IREE runs in place: their carries are copies of their own), so the limit leaves it
    as it was, and refuses, saying so."""
    short = LOOP.replace("dense<48>", "dense<3>")
    with choices.loop_form("looped"):  # its snapshots: a loop of their own
        as_is = passes.estimate_peak(passes.differentiate(short), "scan_grad")
        checkpointed = passes.estimate_peak(passes.differentiate(short, loop_checkpoints="sqrt"), "scan_grad")
        assert checkpointed.peak > as_is.peak
        with pytest.raises(passes.MemoryLimitError) as caught:
            passes.differentiate(short, memory_limit=as_is.peak - 1)
    assert "which neither checkpointing nor recomputation lowers" in str(caught.value)
    assert caught.value.smallest == caught.value.estimate == as_is.peak


@pytest.mark.parametrize("text, size", [("64M", 64 << 20), ("1.5G", 3 << 29), ("512k", 512 << 10), ("4096", 4096),
                                        (100, 100)])
def test_sizes(text, size):
    assert memory.parse_size(text) == size


@pytest.mark.parametrize("bad", ["", "64Q", "-1M", "0", "M"])
def test_bad_sizes(bad):
    with pytest.raises(ValueError, match="bad memory size"):
        memory.parse_size(bad)


def test_cli_max_memory(tmp_path, free):
    _, grad = free
    source = tmp_path / "mlp.mlir"
    source.write_text(mlp())
    runner = CliRunner()
    out = tmp_path / "out.mlir"
    done = runner.invoke(app, ["grad", str(source), "--max-memory", str(int(grad.peak * 0.8)), "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert out.read_text().count("stablehlo.tanh") > 2 * LAYERS  # recomputed in the backward
    for command in (["grad", str(source)], ["compile", str(source), "--grad", "-o", str(tmp_path / "a.vmfb")]):
        refused = runner.invoke(app, [*command, "--max-memory", "1K"])
        assert refused.exit_code == 1
        lines = refused.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("irgrad: error: memory limit 1.0 KiB cannot be met")
    bad = runner.invoke(app, ["grad", str(source), "--max-memory", "lots"])
    assert bad.exit_code == 2 and "bad --max-memory" in bad.output
    alone = runner.invoke(app, ["grad", str(source), "--jvp", "--max-memory", "1M"])
    assert alone.exit_code == 2 and "--max-memory needs --grad, --vjp or --train" in alone.output


def test_compile_records_the_estimates_and_inspect_shows_them(tmp_path, free):
    _, grad = free
    source, artifact = tmp_path / "mlp.mlir", tmp_path / "mlp.vmfb"
    source.write_text(mlp())
    runner = CliRunner()
    compiled = runner.invoke(app, ["compile", str(source), "--grad", "-o", str(artifact)])
    assert compiled.exit_code == 0, compiled.output
    shown = f"  mlp_grad: {memory.human(grad.peak)} over its arguments' {memory.human(grad.arguments)} " \
            f"(results {memory.human(grad.results)}, tape {memory.human(grad.tape)})"
    assert "estimated peak memory per call:" in compiled.output and shown in compiled.output
    inspected = runner.invoke(app, ["inspect", str(artifact)])
    assert inspected.exit_code == 0 and shown in inspected.output.splitlines()
    as_json = json.loads(runner.invoke(app, ["inspect", str(artifact), "--json"]).output)
    assert as_json["estimated_peak"]["mlp_grad"]["peak"] == grad.peak
    assert as_json["estimated_peak"]["mlp"]["tape"] == 0


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux" or shutil.which("prlimit") is None,
                    reason="peaks are read from /proc/self; every process runs under prlimit")
def test_bench_memory_limit_runs():
    """benchmarks/bench_memory_limit.py still runs (smoke: nothing measured is asserted)."""
    from test_benchmarks import ROOT, _jax_python

    python = _jax_python()
    if python is None:
        pytest.skip("bench_memory_limit.py exports the models with JAX (set IRGRAD_JAX_PYTHON)")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_memory_limit.py"), "--jax-python",
                           python, "--models", "mlp:64", "--calls", "2", "--basis", "estimate", "--limit", "6000000000"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"bench_memory_limit.py failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| mlp |")]
    assert len(rows) == 1 and float(rows[0][-1]) < 1e-5, proc.stdout  # the same gradients


def bn_net(layers: int) -> str:
    """``layers`` of a product, a batch norm's centring and scale and a ReLU, then the sum of
    squares: what ``memory.recompute_elementwise`` recomputes (all but the product)."""
    act, vec = "tensor<32x8xf64>", "tensor<8xf64>"
    args = ", ".join(f"%w{i}: tensor<8x8xf64>, %g{i}: {vec}" for i in range(layers))
    lines = [f"func.func @bn(%x: {act}, {args}) -> tensor<f64> {{",
             "  %z = stablehlo.constant dense<0.0> : tensor<f64>",
             f"  %k = stablehlo.constant dense<0.03125> : {vec}",
             f"  %zb = stablehlo.constant dense<0.0> : {act}"]
    prev = "%x"
    for i in range(layers):
        lines += [
            f"  %h{i} = stablehlo.dot_general {prev}, %w{i}, contracting_dims = [1] x [0] : "
            f"({act}, tensor<8x8xf64>) -> {act}",
            f"  %s{i} = stablehlo.reduce(%h{i} init: %z) applies stablehlo.add across dimensions = [0] : "
            f"({act}, tensor<f64>) -> {vec}",
            f"  %m{i} = stablehlo.multiply %s{i}, %k : {vec}",
            f"  %mb{i} = stablehlo.broadcast_in_dim %m{i}, dims = [1] : ({vec}) -> {act}",
            f"  %c{i} = stablehlo.subtract %h{i}, %mb{i} : {act}",
            f"  %gb{i} = stablehlo.broadcast_in_dim %g{i}, dims = [1] : ({vec}) -> {act}",
            f"  %y{i} = stablehlo.multiply %c{i}, %gb{i} : {act}",
            f"  %r{i} = stablehlo.maximum %y{i}, %zb : {act}"]
        prev = f"%r{i}"
    lines += [f"  %q = stablehlo.multiply {prev}, {prev} : {act}",
              f"  %t = stablehlo.reduce(%q init: %z) applies stablehlo.add across dimensions = [0, 1] : "
              f"({act}, tensor<f64>) -> tensor<f64>", "  return %t : tensor<f64>", "}"]
    return "\n".join(lines) + "\n"


def _bn_args(layers: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    out = [rng.standard_normal((32, 8))]
    for _ in range(layers):
        out += [rng.standard_normal((8, 8)) * 0.5, rng.standard_normal(8)]
    return out


def test_cheap_forward_values_are_recomputed_in_the_backward_not_kept(monkeypatch):
    """Three layers: the centred, scaled and rectified values (and the scale's broadcast) are
    recomputed from each product, the tape holds the products (and the means): a quarter of
    what it held, and the estimated peak falls. The gradient is checked numerically, and agrees
    with the kept form's to rounding (IREE fuses the copies into other kernels)."""
    text = bn_net(3)
    monkeypatch.setattr(memory, "hoist_reductions", lambda f: 0)  # the tapes as recomputation alone leaves them
    lean = passes.differentiate(text, "bn")
    kept_calls = []
    monkeypatch.setattr(memory, "recompute_elementwise", lambda f: kept_calls.append(f) or 0)
    kept = passes.differentiate(text, "bn")
    assert kept_calls  # the gradient asked for it
    value = 32 * 8 * 8  # bytes of one 32x8 f64 value
    before, after = passes.estimate_peak(kept, "bn_grad"), passes.estimate_peak(lean, "bn_grad")
    # c, y and r of each layer (the g broadcast is not stored: IREE computes it in its readers)
    assert before.tape == 3 * 3 * value
    assert after.tape == 3 * (value + 8 * 8)  # each h and each mean
    assert after.peak <= before.peak * (1 - memory.MIN_SAVING)
    assert "stablehlo.is_finite" in lean.split("@bn_grad(")[1]  # the copies' tie to the backward
    monkeypatch.undo()
    check_module(text, _bn_args(3), func="bn", what="batch norms recomputed")
    a, b = (ig.runtime.load(ig.runtime.compile(t).vmfb) for t in (lean, kept))
    for x, y in zip(a["bn_grad"](*_bn_args(3)), b["bn_grad"](*_bn_args(3))):
        np.testing.assert_allclose(x, y, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("text, func, why", [
    (mlp(), "mlp", "a tanh's output is what its adjoint and the next product read: recomputed, "
                   "the product that makes it would be kept instead, no smaller"),
    (bn_net(1), "bn", "one layer: the tape would shrink, but the peak is the backward's, not the tape's")])
def test_recomputation_that_saves_nothing_is_not_made(monkeypatch, text, func, why):
    monkeypatch.setattr(memory, "recompute_elementwise", lambda f: 0)
    module = passes.parse_module(passes.differentiate(text, func))
    monkeypatch.undo()
    with module.context:
        grad = passes.find_function(module, f"{func}_grad")
        before = str(grad)
        assert memory.recompute_elementwise(grad) == 0, why
        assert str(grad) == before


VIEWS = """
func.func @f(%x: tensor<8x8xf32>) -> tensor<4x64xf32> {
  %a = stablehlo.tanh %x : tensor<8x8xf32>
  %v = stablehlo.reshape %a : (tensor<8x8xf32>) -> tensor<64xf32>
  %s = stablehlo.broadcast_in_dim %v, dims = [1] : (tensor<64xf32>) -> tensor<4x64xf32>
  %y = stablehlo.add %s, %s : tensor<4x64xf32>
  return %y : tensor<4x64xf32>
}
"""


def test_estimate_counts_buffers_as_iree_allocates_them():
    """Hand-derived: the result's 1 KiB is allocated when the call starts, the reshape is a view
    of ``%a``'s 256 B and the broadcast is computed inside the add that reads it: 1280 B, where
    a buffer per value counted 2.5 KiB."""
    found = passes.estimate_peak(VIEWS, "f")
    assert (found.peak, found.results, found.arguments) == (1024 + 256, 1024, 256)


@pytest.mark.parametrize("text, func, within", [(mlp(), "mlp", 0.15), (mlp(bias=True), "mlp", 0.15),
                                                (LOOP, "scan", 0.15), (bn_net(3), "bn", 0.2)],
                         ids=["mlp", "mlp-bias", "loop", "batch-norms"])
def test_estimate_is_near_what_iree_allocates(text, func, within):
    """The gradient's estimate against the bytes IREE's host program has allocated at once (its
    ``queue.alloca``/``dealloca`` in order): within 15 % (a straight-line gradient, a loop's).
    The batch norms' within 20 %: their sums hoisted (``memory.hoist_reductions``), the estimate
    falls by 2 KiB of 20, what IREE allocates does not (its schedule, not the op order, decides)."""
    from hostprogram import peak_allocation

    grad = passes.differentiate(text, func)
    allocated = peak_allocation(grad, f"{func}_grad")
    assert passes.estimate_peak(grad, f"{func}_grad").peak == pytest.approx(allocated, rel=within)
