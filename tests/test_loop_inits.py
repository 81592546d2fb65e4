"""Loops that update their carried buffers in place (IREE 3.13 workarounds): every function of a
module with a loop runs on one named device (``runtime.compiler._place_on_one_device``), and a
loop's large constant initial value that something else also reads gets a copy of its own
(``passes/lowering/loop_inits.py``). Without either, IREE copies the whole carried buffer at
every iteration, which its host program shows; the values are checked against numpy."""
from __future__ import annotations

import re

import numpy as np
import pytest

from irgrad import runtime as igrt
from irgrad.passes.lowering import legalize, loop_inits
from irgrad.passes.lowering.legalize import legalize_text

STEPS, WIDTH = 64, 32
STACK = STEPS * WIDTH * 4  # bytes of the carried stack


def _loop(name: str, stacks: list[tuple[str, str, str]]) -> str:
    """A ``while`` over the rows of ``%x``: ``%{name}#1``, ... stack, per ``(init, op, dtype)``,
    ``op`` of each row (as ``dtype``) into a stack that starts as ``init``."""
    types = [f"tensor<{STEPS}x{WIDTH}x{dtype}>" for _, _, dtype in stacks]
    carries = ", ".join(f"%s{k} = {init}" for k, (init, _, _) in enumerate(stacks))
    steps = "".join(f"""
    %f{k} = stablehlo.{op} %row : tensor<1x{WIDTH}xf32>
    %t{k} = stablehlo.convert %f{k} : (tensor<1x{WIDTH}xf32>) -> tensor<1x{WIDTH}x{dtype}>
    %u{k} = stablehlo.dynamic_update_slice %s{k}, %t{k}, %i, %zero : ({types[k]}, tensor<1x{WIDTH}x{dtype}>, tensor<i32>, tensor<i32>) -> {types[k]}"""
                    for k, (_, op, dtype) in enumerate(stacks))
    return f"""
  %{name}:{len(stacks) + 1} = stablehlo.while(%i = %c0, {carries}) : tensor<i32>, {", ".join(types)}
  cond {{
    %n = stablehlo.constant dense<{STEPS}> : tensor<i32>
    %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  }} do {{
    %zero = stablehlo.constant dense<0> : tensor<i32>
    %row = stablehlo.dynamic_slice %x, %i, %zero, sizes = [1, {WIDTH}] : (tensor<{STEPS}x{WIDTH}xf32>, tensor<i32>, tensor<i32>) -> tensor<1x{WIDTH}xf32>{steps}
    %one = stablehlo.constant dense<1> : tensor<i32>
    %i2 = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %i2, {", ".join(f"%u{k}" for k in range(len(stacks)))} : tensor<i32>, {", ".join(types)}
  }}"""


HEAD = f"""func.func @main(%x: tensor<{STEPS}x{WIDTH}xf32>) -> tensor<{STEPS}x{WIDTH}xf32> {{
  %z = stablehlo.constant dense<0.0> : tensor<{STEPS}x{WIDTH}xf32>
  %c0 = stablehlo.constant dense<0> : tensor<i32>"""
# One loop, its stack from zeros that nothing else reads (a scan's output).
ONE = HEAD + _loop("a", [("%z", "tanh", "f32")]) + """
  return %a#1 : tensor<64x32xf32>
}"""
# Two loops whose stacks start from the same zeros (a gradient's tape and its reverse loop's
# cotangents), then combined.
TWO = HEAD + _loop("a", [("%z", "tanh", "f32")]) + _loop("b", [("%z", "exponential", "f32")]) + """
  %d = stablehlo.subtract %a#1, %b#1 : tensor<64x32xf32>
  return %d : tensor<64x32xf32>
}"""
USER_DEVICE_FLAGS = ("--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu")


def _stack_copies(text: str, options=None) -> int:
    """Whole-stack ``copy_buffer``s in IREE's host program of ``text``."""
    hal = igrt.compiler.host_program(text, options)
    sizes = {name for name, value in re.findall(r"(%[\w]+) = arith.constant (\d+) : index", hal)
             if int(value) == STACK}
    return sum(1 for line in hal.splitlines()
               if "copy_buffer" in line and any(f"length({s})" in line for s in sizes))


@pytest.fixture(scope="module")
def rows():
    return np.random.default_rng(0).standard_normal((STEPS, WIDTH)).astype(np.float32)


@pytest.mark.parametrize("text, expect", [(ONE, np.tanh), (TWO, lambda x: np.tanh(x) - np.exp(x))],
                         ids=["one_loop", "two_loops_one_zeros"])
def test_loops_update_their_stacks_in_place(text, expect, rows):
    assert _stack_copies(text) == 0
    out = igrt.load(igrt.compile(text).vmfb)["main"](rows)
    np.testing.assert_allclose(out, expect(rows), rtol=1e-6, atol=1e-6)


def test_without_one_device_the_loop_copies_its_stack(rows):
    """A user's own ``--iree-hal-target-device`` keeps IREE's devices as the user named them
    (no affinity is added): the copies come back, which is what the workaround removes."""
    options = igrt.CompileOptions(extra_flags=USER_DEVICE_FLAGS)
    assert _stack_copies(ONE, options) > 0
    out = igrt.load(igrt.compile(ONE, options).vmfb)["main"](rows)
    np.testing.assert_allclose(out, np.tanh(rows), rtol=1e-6, atol=1e-6)


def test_shared_zeros_get_a_copy_per_loop(monkeypatch, rows):
    legal = legalize_text(TWO)
    assert legal.count("stablehlo.is_finite") == 2, legal  # each loop its own zeros
    assert legalize_text(ONE).count("stablehlo.is_finite") == 1  # zeros, which IREE may merge with others
    # Without the copies the loops share a buffer: IREE gets no device named (it would update
    # both in one buffer), and copies the stacks at every iteration.
    monkeypatch.setattr(loop_inits, "separate_loop_inits", lambda module: 0)
    monkeypatch.setattr(legalize, "separate_loop_inits", lambda module: 0)
    assert "stablehlo.is_finite" not in legalize_text(TWO)
    assert _stack_copies(TWO) > 0
    out = igrt.load(igrt.compile(TWO, cache=False).vmfb)["main"](rows)
    np.testing.assert_allclose(out, np.tanh(rows) - np.exp(rows), rtol=1e-6, atol=1e-6)


def _two_stacks(dtype: str, store: str, zeros: str = "one") -> str:
    """One loop stacking tanh of each row and ``store`` of each row (of ``dtype``), both stacks
    from zeros: a scan's output stack and its tape. ``zeros``: ``one`` constant for both, or
    (float) ``two`` spellings, a broadcast scalar and a dense constant, which IREE folds into one."""
    t = f"tensor<{STEPS}x{WIDTH}x{dtype}>"
    second = (f"%zt = stablehlo.convert %z : (tensor<{STEPS}x{WIDTH}xi32>) -> {t}" if zeros == "one" else
              f"%zt = stablehlo.constant dense<0.0> : {t}")
    first = (f"%zf = stablehlo.convert %z : (tensor<{STEPS}x{WIDTH}xi32>) -> tensor<{STEPS}x{WIDTH}xf32>"
             if zeros == "one" else
             f"%zf = stablehlo.broadcast_in_dim %zero0, dims = [] : (tensor<f32>) -> tensor<{STEPS}x{WIDTH}xf32>")
    return f"""func.func @main(%x: tensor<{STEPS}x{WIDTH}xf32>) -> (tensor<{STEPS}x{WIDTH}xf32>, {t}) {{
  %z = stablehlo.constant dense<0> : tensor<{STEPS}x{WIDTH}xi32>
  %zero0 = stablehlo.constant dense<0.0> : tensor<f32>
  {first}
  {second}
  %c0 = stablehlo.constant dense<0> : tensor<i32>""" + _loop("r", [("%zf", "tanh", "f32"), ("%zt", store, dtype)]) + f"""
  return %r#1, %r#2 : tensor<{STEPS}x{WIDTH}xf32>, {t}
}}"""


@pytest.mark.parametrize("dtype, zeros", [("f32", "one"), ("f32", "two"), ("i32", "one")])
def test_two_carries_from_one_zeros_keep_their_own_rows(dtype, zeros, rows):
    """Named, IREE 3.13 updated such carries in one buffer (the stack held the tape's rows). A
    float carry gets its own zeros and the loop runs in place; an integer one cannot be tied,
    so the module gets no device named and IREE copies its carries (slower, right)."""
    text = _two_stacks(dtype, "round_nearest_even", zeros)
    assert (_stack_copies(text) == 0) == (dtype == "f32"), dtype
    stack, tape = igrt.load(igrt.compile(text).vmfb)["main"](rows)
    np.testing.assert_allclose(stack, np.tanh(rows), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(tape, np.round(rows).astype(np.float32 if dtype == "f32" else np.int32))
