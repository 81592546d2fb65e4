"""``passes/lowering/shared_values.py``: a large elementwise value that several kernels read is
computed by each (IREE then stores nothing for it), with the same values to the bit; where a
reader cannot take it in (a contraction), an operand would live longer, or the value is small,
nothing changes."""
from __future__ import annotations

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes
from irgrad.passes.lowering import legalize, shared_values

from gradcheck import check_module
from hostprogram import peak_allocation

ROWS, COLS = 512, 512  # one f32 value: 1 MiB, shared_values.MIN_BYTES


def _module(residual: str = "%h", reader: str = "scale", rows: int = ROWS) -> str:
    """``(sum(d·d), 2·d)`` for ``d = residual - y``: ``d`` read by the loss's kernel and the
    second result's. ``residual="exp"``: ``d`` is made from ``exp(h)``, which nothing else
    reads. ``reader="dot"``: the second result is ``d @ d`` (a contraction reads ``d``)."""
    t = f"tensor<{rows}x{COLS}xf32>"
    first = "%e = stablehlo.exponential %h : " + t if residual == "exp" else ""
    left = "%e" if residual == "exp" else "%h"
    second = (f"%g = stablehlo.dot_general %d, %d, contracting_dims = [1] x [0] : ({t}, {t}) -> {t}"
              if reader == "dot" else
              f"""%two = stablehlo.constant dense<2.0> : tensor<f32>
  %b = stablehlo.broadcast_in_dim %two, dims = [] : (tensor<f32>) -> {t}
  %g = stablehlo.multiply %b, %d : {t}""")
    return f"""func.func @main(%h: {t}, %y: {t}) -> (tensor<f32>, {t}) {{
  {first}
  %d = stablehlo.subtract {left}, %y : {t}
  %sq = stablehlo.multiply %d, %d : {t}
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%sq init: %z) applies stablehlo.add across dimensions = [0, 1] : ({t}, tensor<f32>) -> tensor<f32>
  {second}
  return %s, %g : tensor<f32>, {t}
}}
"""


def _copies(text: str) -> int:
    module = passes.parse_module(text)
    with module.context:
        return shared_values.split_shared_elementwise(module)


@pytest.fixture
def unsplit(monkeypatch):
    """Call it to compile without the rewrite from there on (monkeypatched)."""
    def off():
        monkeypatch.setattr(legalize, "split_shared_elementwise", lambda module: 0)
    return off


def test_a_shared_value_is_computed_by_each_reader(unsplit):
    text = _module()
    assert _copies(text) == 1
    rng = np.random.default_rng(0)
    h, y = (rng.standard_normal((ROWS, COLS), dtype=np.float32) for _ in range(2))
    split = ig.runtime.load(ig.runtime.compile(text).vmfb)["main"](h, y)
    split_peak = peak_allocation(text, "main")
    unsplit()
    whole = ig.runtime.load(ig.runtime.compile(text).vmfb)["main"](h, y)
    whole_peak = peak_allocation(text, "main")
    for a, b in zip(split, whole):
        np.testing.assert_array_equal(a, b)  # the same kernels' arithmetic: bit for bit
    np.testing.assert_allclose(split[1], 2 * (h - y), rtol=1e-6)
    np.testing.assert_allclose(split[0], np.sum((h.astype(np.float64) - y) ** 2), rtol=1e-4)
    # Stored, d is a second 1 MiB buffer beside the result's.
    assert split_peak < whole_peak and split_peak <= ROWS * COLS * 4 + (64 << 10)


@pytest.mark.parametrize("text, why", [
    (_module(reader="dot"), "a contraction reads d: IREE stores it for that kernel anyway"),
    (_module(residual="exp"), "exp(h) dies at d: a copy would keep it alive to the second reader"),
    (_module(rows=ROWS // 2), "half a MiB: under MIN_BYTES")])
def test_left_alone(text, why):
    assert _copies(text) == 0, why


def test_a_gradient_with_a_shared_residual_checks_numerically(monkeypatch):
    """``sum((tanh(x) - y)²)`` in float64 (1 MiB a value): the residual is read by the loss's
    reduce and by its adjoint; the vjp built from it passes the numerical check, with the
    rewrite applied in its compile."""
    made = []
    split = shared_values.split_shared_elementwise
    monkeypatch.setattr(legalize, "split_shared_elementwise", lambda module: made.append(split(module)) or made[-1])
    t = "tensor<128x1024xf64>"
    text = f"""func.func @loss(%x: {t}, %y: {t}) -> tensor<f64> {{
  %a = stablehlo.tanh %x : {t}
  %d = stablehlo.subtract %a, %y : {t}
  %sq = stablehlo.multiply %d, %d : {t}
  %z = stablehlo.constant dense<0.0> : tensor<f64>
  %s = stablehlo.reduce(%sq init: %z) applies stablehlo.add across dimensions = [0, 1] : ({t}, tensor<f64>) -> tensor<f64>
  return %s : tensor<f64>
}}
"""
    rng = np.random.default_rng(1)
    # eps 1e-4: a sum of 131072 terms rounds to ~1e-11 of itself, over 2·eps at the default 1e-6
    # (the same check fails by 2e-6 without the rewrite); the truncation, ~eps², stays under rtol.
    check_module(text, [rng.standard_normal((128, 1024)), rng.standard_normal((128, 1024))], jvp=False, eps=1e-4)
    assert sum(made) >= 1
