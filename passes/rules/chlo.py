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

from ..ir.hlo import add, binary, compare, conj, divide, like, multiply, negate, select, subtract, unary
from ..transforms.backprop import COMPLEX_AWARE
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


# Cephes' Chebyshev coefficients of exp(-x) I0(x) on [0, 8] and of exp(-x) sqrt(x) I0(x) on
# [8, inf) (i0.c; the numbers numpy's i0 uses).
_I0E_A = [-4.4153416464793395e-18, 3.3307945188222384e-17, -2.431279846547955e-16, 1.715391285555133e-15,
         -1.1685332877993451e-14, 7.676185498604936e-14, -4.856446783111929e-13, 2.95505266312964e-12,
         -1.726826291441556e-11, 9.675809035373237e-11, -5.189795601635263e-10, 2.6598237246823866e-09,
         -1.300025009986248e-08, 6.046995022541919e-08, -2.670793853940612e-07, 1.1173875391201037e-06,
         -4.4167383584587505e-06, 1.6448448070728896e-05, -5.754195010082104e-05, 0.00018850288509584165,
         -0.0005763755745385824, 0.0016394756169413357, -0.004324309995050576, 0.010546460394594998,
         -0.02373741480589947, 0.04930528423967071, -0.09490109704804764, 0.17162090152220877,
         -0.3046826723431984, 0.6767952744094761]
_I0E_B = [-7.233180487874754e-18, -4.830504485944182e-18, 4.46562142029676e-17, 3.461222867697461e-17,
         -2.8276239805165836e-16, -3.425485619677219e-16, 1.7725601330565263e-15, 3.8116806693526224e-15,
         -9.554846698828307e-15, -4.150569347287222e-14, 1.54008621752141e-14, 3.8527783827421426e-13,
         7.180124451383666e-13, -1.7941785315068062e-12, -1.3215811840447713e-11, -3.1499165279632416e-11,
         1.1889147107846439e-11, 4.94060238822497e-10, 3.3962320257083865e-09, 2.266668990498178e-08,
         2.0489185894690638e-07, 2.8913705208347567e-06, 6.889758346916825e-05, 0.0033691164782556943,
         0.8044904110141088]


def _chebyshev(x, coefficients):
    """Cephes' chbevl: the Chebyshev series at ``x`` (Clenshaw's recurrence)."""
    b0, b1, b2 = like(coefficients[0], x), like(0, x), like(0, x)
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = add(subtract(multiply(x, b1), b2), like(c, x))
    return multiply(like(0.5, x), subtract(b0, b2))


def i0e(x):
    """exp(-|x|) I0(x) in StableHLO (CHLO has bessel_i1e but no i0e): Cephes' two series,
    the second at max(|x|, 8) so that its branch stays finite where the first is taken."""
    ax = unary("stablehlo.abs", x)
    near = _chebyshev(subtract(multiply(like(0.5, x), ax), like(2, x)), _I0E_A)
    far_x = binary("stablehlo.maximum", ax, like(8, x))
    far = divide(_chebyshev(subtract(divide(like(32, x), far_x), like(2, x)), _I0E_B), _sqrt(far_x))
    return select(compare(ax, like(8, x), "LE"), near, far)


@adjoint("chlo.bessel_i1e")
def _bessel_i1e(op, cts):
    """dx = ct * (i0e(x) - i1e(x) (sign(x) + 1/x)); 1/2 at x = 0 (the limit)"""
    x, y = op.operands[0], op.results[0]
    zero = compare(x, like(0, x), "EQ")
    safe = select(zero, like(1, x), x)
    d = subtract(i0e(x), multiply(y, add(unary("stablehlo.sign", x), divide(like(1, x), safe))))
    return (multiply(cts[0], select(zero, like(0.5, x), d)),)


@adjoint("chlo.conj")
def _conj(op, cts):
    """dz = conj(ct) (the conjugate is its own adjoint under TensorFlow's convention)"""
    return (conj(cts[0]),)


COMPLEX_AWARE.add("chlo.conj")


nondifferentiable("chlo.is_inf", "chlo.is_neg_inf", "chlo.is_pos_inf")


@adjoint("chlo.next_after")
def _next_after(op, cts):
    """dx = ct, dy = none: next_after(x, y) is x plus a step of one ulp towards y, a step that
    is constant between powers of two, so its derivative is 1 in x and 0 in y almost everywhere
    (central differences see exactly that; JAX defines none)"""
    return (cts[0], None)


@adjoint("stablehlo.bitcast_convert")
def _bitcast_convert(op, cts):
    """dx = ct where the element type stays (a bitcast to the same type is the identity); none
    for a reinterpretation of the bits as another type (JAX's random bits -> floats): the value
    it gives is no differentiable function of its operand"""
    x, y = op.operands[0], op.results[0]
    return (cts[0] if x.type == y.type else None,)

tangent("chlo.square", "chlo.erfc", "chlo.sinh", "chlo.cosh", "chlo.asin", "chlo.acos", "chlo.atan", "chlo.asinh",
        "chlo.acosh", "chlo.atanh", "chlo.lgamma", "chlo.erf_inv", "chlo.digamma", "chlo.polygamma",
        "chlo.zeta", "chlo.bessel_i1e", "chlo.next_after", "stablehlo.bitcast_convert")(diagonal)
tangent("chlo.conj")(linear)  # t(conj z) = conj(t z)


# ----- batching ------------------------------------------------------------------------------

# Every chlo op here is elementwise.
batching(*[f"chlo.{n}" for n in (
    "acos acosh asin asinh atan atanh cosh erf_inv erfc lgamma sinh square is_inf is_neg_inf is_pos_inf "
    "next_after bessel_i1e conj digamma polygamma zeta").split()], "stablehlo.bitcast_convert")(elementwise)
