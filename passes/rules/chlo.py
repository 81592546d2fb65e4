"""Rules of the CHLO ops that JAX and TensorFlow emit (``chlo.erf`` and ``chlo.tan`` are with
the elementwise rules, beside ``stablehlo.tan``; ``chlo.top_k`` with the indexing rules).

Conventions: ``asin``/``acos``/``atanh`` outside (-1, 1) and ``acosh`` below 1 give the
formula's NaN or inf, as JAX does. The order ``n`` of ``polygamma(n, x)`` and the exponent ``s``
of the Hurwitz ``zeta(s, q)`` get no gradient, as in TensorFlow's ``Polygamma`` and ``Zeta``
gradients (JAX refuses them): the integer order is not a differentiable input, and ``∂/∂s`` has
no closed form.
"""
from __future__ import annotations

import math

from ..ir.hlo import add, binary, conj, divide, like, multiply, negate, subtract, unary
from ..transforms.backprop import COMPLEX_AWARE
from .elementwise import through_masks
from ..transforms.batching import elementwise
from ..transforms.forward import diagonal, linear
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
@through_masks
def _lgamma(op, cts):
    """dx = ct * digamma(x)"""
    return (multiply(cts[0], unary("chlo.digamma", op.operands[0])),)


@adjoint("chlo.erf_inv")
def _erf_inv(op, cts):
    """dx = ct * sqrt(pi)/2 * exp(y^2)"""
    y = op.results[0]
    return (multiply(cts[0], multiply(like(math.sqrt(math.pi) / 2, y),
                                      unary("stablehlo.exponential", multiply(y, y)))),)


@adjoint("chlo.digamma")
@through_masks
def _digamma(op, cts):
    """dx = ct * polygamma(1, x) = ct * zeta(2, x)"""
    x = op.operands[0]
    return (multiply(cts[0], binary("chlo.zeta", like(2, x), x)),)


@adjoint("chlo.polygamma")
def _polygamma(op, cts):
    """dn = none; dx = ct * polygamma(n + 1, x) = ct * (-1)^n (n + 1)! zeta(n + 2, x)

    (the form CHLO's own expansion takes for orders above 0, written out: f64 polygamma does
    not link on IREE's CPU backends, whose expansion of order 0 needs f64 sine)"""
    n, x = op.operands
    sign = subtract(like(1, n), multiply(like(2, n), binary("stablehlo.remainder", n, like(2, n))))
    factorial = unary("stablehlo.exponential", unary("chlo.lgamma", add(n, like(2, n))))
    return None, multiply(cts[0], multiply(multiply(sign, factorial), binary("chlo.zeta", add(n, like(2, n)), x)))


@adjoint("chlo.zeta")
def _zeta(op, cts):
    """ds = none; dq = ct * -s * zeta(s + 1, q)"""
    s, q = op.operands
    return None, multiply(cts[0], negate(multiply(s, binary("chlo.zeta", add(s, like(1, s)), q))))


@adjoint("chlo.conj")
def _conj(op, cts):
    """dz = conj(ct) (the conjugate is its own adjoint under TensorFlow's convention)"""
    return (conj(cts[0]),)


COMPLEX_AWARE.add("chlo.conj")


nondifferentiable("chlo.is_inf", "chlo.is_neg_inf", "chlo.is_pos_inf", "chlo.next_after")

# Bit-level reinterpretation (JAX's random bits -> floats); see elementwise.py for the others.
nondifferentiable("stablehlo.bitcast_convert")

tangent("chlo.square", "chlo.erfc", "chlo.sinh", "chlo.cosh", "chlo.asin", "chlo.acos", "chlo.atan", "chlo.asinh",
        "chlo.acosh", "chlo.atanh", "chlo.lgamma", "chlo.erf_inv", "chlo.digamma", "chlo.polygamma",
        "chlo.zeta")(diagonal)
tangent("chlo.conj")(linear)  # t(conj z) = conj(t z)


# ----- batching ------------------------------------------------------------------------------

# Every chlo op here is elementwise; bessel_i1e has a batching rule but no derivative rules
# (tests/test_forward.py says why).
batching(*[f"chlo.{n}" for n in (
    "acos acosh asin asinh atan atanh cosh erf_inv erfc lgamma sinh square is_inf is_neg_inf is_pos_inf "
    "next_after bessel_i1e conj digamma polygamma zeta").split()], "stablehlo.bitcast_convert")(elementwise)
