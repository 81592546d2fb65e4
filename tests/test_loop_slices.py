"""``passes/lowering/loop_slices.py``: an elementwise value a loop reads a slice at a time is
computed a slice at a time inside the loop (never stored whole), with the same values; values
the loop reads otherwise, or whose leaves are not buffers of their own, are left as they are."""
from __future__ import annotations

import re

import numpy as np
import pytest

import irgrad as ig
from irgrad.passes.lowering import loop_slices
from irgrad.passes.lowering.legalize import legalize_text

from hostprogram import largest_buffer


def _module(n: int, rows: int, cols: int, read: str = "slice", scale: str = "scalar", outside: bool = True) -> str:
    """A loop over the ``n`` rows of ``g = scale · (hs - ys)`` accumulating each row squared (the
    shape of a reverse loop reading its incoming cotangent); ``-g`` is a second result (a read
    outside the loop) when ``outside``. ``read="whole"``: the body also reads g whole.
    ``scale="vector"``: the scale is a broadcast of a row vector (not a buffer of its own)."""
    t, r = f"tensor<{n}x{rows}x{cols}xf32>", f"tensor<{rows}x{cols}xf32>"
    if scale == "scalar":
        make_scale = f"""%two = stablehlo.constant dense<2.0> : tensor<f32>
  %b = stablehlo.broadcast_in_dim %two, dims = [] : (tensor<f32>) -> {t}"""
    else:
        make_scale = f"""%two = stablehlo.constant dense<2.0> : tensor<{cols}xf32>
  %b = stablehlo.broadcast_in_dim %two, dims = [2] : (tensor<{cols}xf32>) -> {t}"""
    whole = ""
    if read == "whole":
        whole = f"""%w = stablehlo.reduce(%g init: %z) applies stablehlo.add across dimensions = [0] : ({t}, tensor<f32>) -> {r}
      %acc3 = stablehlo.add %acc2, %w : {r}"""
    acc_out = "%acc3" if read == "whole" else "%acc2"
    results = f"{t}, {r}" if outside else r
    returned = "%neg, %loop#1" if outside else "%loop#1"
    return f"""func.func @main(%hs: {t}, %ys: {t}) -> ({results}) {{
  %d = stablehlo.subtract %hs, %ys : {t}
  {make_scale}
  %g = stablehlo.multiply %b, %d : {t}
  %neg = stablehlo.negate %g : {t}
  %zero = stablehlo.constant dense<0.0> : {r}
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %loop:2 = stablehlo.while(%i = %c0, %acc = %zero) : tensor<i32>, {r}
  cond {{
    %n = stablehlo.constant dense<{n}> : tensor<i32>
    %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  }} do {{
      %s = stablehlo.dynamic_slice %g, %i, %c0, %c0, sizes = [1, {rows}, {cols}] : ({t}, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<1x{rows}x{cols}xf32>
      %row = stablehlo.reshape %s : (tensor<1x{rows}x{cols}xf32>) -> {r}
      %sq = stablehlo.multiply %row, %row : {r}
      %acc2 = stablehlo.add %acc, %sq : {r}
      {whole}
      %one = stablehlo.constant dense<1> : tensor<i32>
      %next = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %next, {acc_out} : tensor<i32>, {r}
  }}
  return {returned} : {results}
}}"""


def _slices_of(text: str) -> list[str]:
    """The operands the loop body's ``dynamic_slice`` ops read, by name as printed."""
    body = text[text.index("} do {"):]
    return re.findall(r"stablehlo\.dynamic_slice (%[\w#]+)", body)


def _want(hs, ys, scale, whole=False):
    g = np.float32(2.0) * (hs - ys)
    acc = np.zeros(hs.shape[1:], np.float32)
    for row in g:
        acc = acc + row * row
        if whole:
            acc = acc + g.sum(axis=0, dtype=np.float32)
    return -g, acc


def _args(n=8, rows=4, cols=3):
    rng = np.random.default_rng(11)
    return [rng.standard_normal((n, rows, cols)).astype(np.float32) for _ in range(2)]


def test_a_sliced_elementwise_value_is_computed_by_the_slice_with_the_same_values():
    text = _module(8, 4, 3)
    legal = legalize_text(text)
    assert sorted(_slices_of(legal)) == ["%arg0", "%arg1"], _slices_of(legal)  # hs and ys, not g
    hs, ys = _args()
    neg, acc = ig.load(ig.compile(text).vmfb)["main"](hs, ys)
    want_neg, want_acc = _want(hs, ys, "scalar")
    np.testing.assert_array_equal(neg, want_neg)
    np.testing.assert_allclose(acc, want_acc, rtol=1e-6)


def test_the_value_is_never_stored_whole():
    """IREE's host program: no buffer of g's size (4 MiB) when the loop alone reads g; the
    rewrite removed, IREE stores it."""
    text = _module(64, 128, 128, outside=False)
    assert largest_buffer(text) < 64 * 128 * 128 * 4
    hs, ys = _args(64, 128, 128)
    acc = ig.load(ig.compile(text).vmfb)["main"](hs, ys)
    np.testing.assert_allclose(acc, _want(hs, ys, "scalar")[1], rtol=1e-5)


def test_without_the_rewrite_the_value_is_stored(monkeypatch):
    monkeypatch.setattr(loop_slices, "MAX_OPS", 0)  # every chain too long: nothing rewritten
    text = _module(64, 128, 128, outside=False)
    assert _slices_of(legalize_text(text)) == ["%2"]
    assert largest_buffer(text) >= 64 * 128 * 128 * 4


@pytest.mark.parametrize("read,scale", [("whole", "scalar"), ("slice", "vector")],
                         ids=["read-whole-too", "vector-broadcast-leaf"])
def test_values_read_otherwise_or_made_of_broadcasts_are_left_alone(read, scale):
    text = _module(8, 4, 3, read=read, scale=scale)
    legal = legalize_text(text)
    assert len(_slices_of(legal)) == 1 and _slices_of(legal)[0] not in ("%arg0", "%arg1"), _slices_of(legal)
    hs, ys = _args()
    neg, acc = ig.load(ig.compile(text).vmfb)["main"](hs, ys)
    want_neg, want_acc = _want(hs, ys, scale, whole=read == "whole")
    np.testing.assert_array_equal(neg, want_neg)
    np.testing.assert_allclose(acc, want_acc, rtol=1e-5)
