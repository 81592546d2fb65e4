"""Adjoint rules of CHLO ops that JAX emits (``chlo.erf`` is with the elementwise
rules; ``chlo.top_k`` with the indexing rules), and the remaining JAX ops
without a gradient.

Conventions: ``asin``/``acos``/``atanh`` outside (-1, 1) and ``acosh`` below 1
give the formula's NaN or inf, as JAX does.
"""
from __future__ import annotations

import math

from ..ir.hlo import add, divide, like, multiply, negate, subtract, unary
from ..transforms.forward import diagonal
from ..transforms.batching import elementwise
from ..transforms.registry import adjoint, batching, nondifferentiable, tangent



def _sqrt(x):
    return unary("stablehlo.sqrt", x)


@adjoint("chlo.square")
def _square(op, cts):
    """dx = ct * 2x"""
    x = op.operands[0]
    return (multiply(cts[0], multiply(like(2, x), x)),)


@adjoint("chlo.erfc")
def _erfc(op, cts):
    """dx = -ct * 2/sqrt(pi) * exp(-x^2)"""
    x = op.operands[0]
    bump = unary("stablehlo.exponential", negate(multiply(x, x)))
    return (multiply(cts[0], multiply(like(-2 / math.sqrt(math.pi), x), bump)),)


@adjoint("chlo.sinh")
def _sinh(op, cts):
    """dx = ct * cosh(x)"""
    return (multiply(cts[0], unary("chlo.cosh", op.operands[0])),)


@adjoint("chlo.cosh")
def _cosh(op, cts):
    """dx = ct * sinh(x)"""
    return (multiply(cts[0], unary("chlo.sinh", op.operands[0])),)


@adjoint("chlo.asin")
def _asin(op, cts):
    """dx = ct / sqrt(1 - x^2)"""
    x = op.operands[0]
    return (divide(cts[0], _sqrt(subtract(like(1, x), multiply(x, x)))),)


@adjoint("chlo.acos")
def _acos(op, cts):
    """dx = -ct / sqrt(1 - x^2)"""
    x = op.operands[0]
    return (negate(divide(cts[0], _sqrt(subtract(like(1, x), multiply(x, x))))),)


@adjoint("chlo.atan")
def _atan(op, cts):
    """dx = ct / (1 + x^2)"""
    x = op.operands[0]
    return (divide(cts[0], add(like(1, x), multiply(x, x))),)


@adjoint("chlo.asinh")
def _asinh(op, cts):
    """dx = ct / sqrt(x^2 + 1)"""
    x = op.operands[0]
    return (divide(cts[0], _sqrt(add(multiply(x, x), like(1, x)))),)


@adjoint("chlo.acosh")
def _acosh(op, cts):
    """dx = ct / sqrt(x^2 - 1)"""
    x = op.operands[0]
    return (divide(cts[0], _sqrt(subtract(multiply(x, x), like(1, x)))),)


@adjoint("chlo.atanh")
def _atanh(op, cts):
    """dx = ct / (1 - x^2)"""
    x = op.operands[0]
    return (divide(cts[0], subtract(like(1, x), multiply(x, x))),)


@adjoint("chlo.lgamma")
def _lgamma(op, cts):
    """dx = ct * digamma(x)"""
    return (multiply(cts[0], unary("chlo.digamma", op.operands[0])),)


@adjoint("chlo.erf_inv")
def _erf_inv(op, cts):
    """dx = ct * sqrt(pi)/2 * exp(y^2)"""
    y = op.results[0]
    return (multiply(cts[0], multiply(like(math.sqrt(math.pi) / 2, y),
                                      unary("stablehlo.exponential", multiply(y, y)))),)


nondifferentiable("chlo.is_inf", "chlo.is_neg_inf", "chlo.is_pos_inf", "chlo.next_after")

# Bit-level reinterpretation (JAX's random bits -> floats); see elementwise.py for the others.
nondifferentiable("stablehlo.bitcast_convert")

tangent("chlo.square", "chlo.erfc", "chlo.sinh", "chlo.cosh", "chlo.asin", "chlo.acos", "chlo.atan", "chlo.asinh",
        "chlo.acosh", "chlo.atanh", "chlo.lgamma", "chlo.erf_inv")(diagonal)


# ----- batching ------------------------------------------------------------------------------

# Every chlo op here is elementwise; conj, tan, digamma, polygamma, zeta and bessel_i1e have a
# batching rule but no derivative rules yet (tests/test_forward.py lists them).
batching(*[f"chlo.{n}" for n in (
    "acos acosh asin asinh atan atanh cosh erf_inv erfc lgamma sinh square is_inf is_neg_inf is_pos_inf "
    "next_after bessel_i1e conj digamma polygamma tan zeta").split()], "stablehlo.bitcast_convert")(elementwise)
