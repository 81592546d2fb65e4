"""``passes/lowering/domains.py``: the igamma family's domain select becomes a double-where
before differentiation (issue 44's igammac), and nothing else does (TensorFlow's recorded
``0 · inf = NaN`` through a user's ``where`` stays: tests/fixtures/tf)."""
from __future__ import annotations

import numpy as np
import pytest

from irgrad.passes.ir.mlir import parse_module, verify
from irgrad.passes.lowering.domains import guard_domains

from gradcheck import check_module

T = "tensor<6xf64>"
B = "tensor<6xi1>"
TEST = (f"%z = stablehlo.constant dense<0.0> : {T}\n"
        f"  %xo = stablehlo.compare LE, %x, %z, FLOAT : ({T}, {T}) -> {B}\n"
        f"  %ao = stablehlo.compare LE, %a, %z, FLOAT : ({T}, {T}) -> {B}\n"
        f"  %p = stablehlo.or %xo, %ao : {B}\n")
# exp(a log x - x - lgamma(a)): the igamma family's prefactor, NaN for x < 0 and at a = -1, -2...
BODY = (f"%l = stablehlo.log %x : {T}\n"
        f"  %m = stablehlo.multiply %a, %l : {T}\n"
        f"  %s = stablehlo.subtract %m, %x : {T}\n"
        f"  %g = chlo.lgamma %a : {T} -> {T}\n"
        f"  %d = stablehlo.subtract %s, %g : {T}\n"
        f"  %w = stablehlo.exponential %d : {T}\n")


def _program(body: str, test: str = TEST, taken: str = "%one", args: str = f"%a: {T}, %x: {T}") -> str:
    return (f"func.func @f({args}) -> {T} {{\n  %one = stablehlo.constant dense<1.0> : {T}\n  {body}  {test}"
            f"  %r = stablehlo.select %p, {taken}, %w : {B}, {T}\n  return %r : {T}\n}}")


def _guarded(text: str) -> int:
    module = parse_module(text)
    with module.context:
        count = guard_domains(module.body.operations[0].operation)
    verify(module, "guarded")
    return count


A = np.array([-1.3, 0.6, 2.5, -2.0, 1.7, 3.2])
X = np.array([0.8, -1.1, 1.9, 0.7, 3.0, -0.5])  # out of the domain: 0, 1, 3, 5


@pytest.mark.parametrize("order", ["test first", "test last"])
def test_the_domain_select_gets_zero_where_the_function_is_constant(order):
    """Test before the body (igammac's order) or after it (igamma's NaN test: the test's ops
    move up to the leaves); either way the gradient is 0 out of the domain, not NaN."""
    text = _program(TEST + BODY, test="") if order == "test first" else _program(BODY)
    assert _guarded(text) == 1
    check_module(text, [A, X])


@pytest.mark.parametrize("case", ["no lgamma", "not elementwise", "not a constant", "read before the test"])
def test_other_selects_are_differentiated_as_written(case):
    """A user's where(x > 0, f(x), c) (no lgamma of a tested value), a body that mixes elements,
    a taken branch that is not a constant, a tested value read before the other is defined:
    left alone."""
    if case == "no lgamma":
        text = _program(BODY.replace(f"chlo.lgamma %a : {T} -> {T}", f"stablehlo.sine %a : {T}"))
    elif case == "not elementwise":
        text = _program(BODY.replace(f"%w = stablehlo.exponential %d : {T}",
                                     f"%e = stablehlo.exponential %d : {T}\n"
                                     f"  %w = stablehlo.reverse %e, dims = [0] : {T}"))
    elif case == "not a constant":
        text = _program(BODY, taken="%x")
    else:
        text = (_program(BODY.replace("%x", "%y"), test=TEST.replace("%x", "%y"), args=f"%a: {T}, %b: {T}")
                .replace(f"%l = stablehlo.log %y : {T}",
                         f"%l = stablehlo.log %a : {T}\n  %y = stablehlo.add %b, %b : {T}")
                .replace("chlo.lgamma %a", "chlo.lgamma %y"))
    assert _guarded(text) == 0
