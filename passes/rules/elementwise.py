"""Adjoint rules of elementwise ops (operands and results share one shape).

Conventions (TensorFlow's): ``maximum`` gives ties to the first operand,
``minimum`` too; ``clamp`` passes the gradient to ``x`` on the closed interval
``[lo, hi]`` and to a bound only strictly outside it, to ``hi`` everywhere when ``lo > hi``
(StableHLO defines the result as ``hi`` there); ``pow`` gives the
exponent a zero gradient where the base is not positive.
"""
from __future__ import annotations

import math

from ..ir import hlo
from ..ir.hlo import add, divide, like, multiply, negate, subtract
from ..ir.mlir import elem, ir, is_float, shape
from ..transforms.backprop import COMPLEX_AWARE, carries, differentiated, is_complex, is_output
from ..lowering.invariance import constant_axes, shift_invariant
from ..transforms.forward import diagonal, linear, zero_filled
from ..transforms.batching import elementwise
from ..transforms.registry import adjoint, batching, nondifferentiable, tangent



def _unbroadcast_scalar(g: ir.Value, operand: ir.Value) -> ir.Value:
    """clamp allows scalar bounds: sum a full-shape cotangent down to a scalar."""
    if shape(operand) == shape(g):
        return g
    return hlo.reduce_sum(g, range(len(shape(g))))


def _zero_where_ct_is_zero(ct: ir.Value, d: ir.Value) -> ir.Value:
    """TensorFlow's Sqrt/Rsqrt gradients: a zero cotangent gives 0 even where the
    derivative is infinite (so where(x > 0, sqrt(x), 0) has no NaN gradient at x <= 0).

    ``d = ct · f'`` is then ``0 · inf = NaN``; only that NaN is replaced, so ``d`` stays
    linear in ``ct`` wherever ``f'`` is finite, a zero ``ct`` included (the transposed
    adjoint, forward mode's ``by_transposition``, differentiates it there)."""
    zero = like(0, ct)
    undefined = hlo.binary("stablehlo.and", hlo.compare(ct, zero, "EQ"), hlo.compare(d, d, "NE"))
    return hlo.select(undefined, zero, d)


# ----- arithmetic -----

@adjoint("stablehlo.add")
def _add(op, cts):
    """da = ct, db = ct"""
    (ct,) = cts
    return ct, ct


@adjoint("stablehlo.subtract")
def _subtract(op, cts):
    """da = ct, db = -ct; db = 0 when b is broadcast along axes and nothing computed from
    a - b changes when b does (a softmax's max: ``invariance.py``)"""
    (ct,) = cts
    a, b = op.operands
    if isinstance(b, ir.OpResult) and b.owner.operation.name == "stablehlo.broadcast_in_dim":
        axes = constant_axes(b.owner.operation)
        if axes and shift_invariant(op.results[0], axes, differentiated, is_output):
            return ct, hlo.zeros(b.type)
    return ct, negate(ct)


@adjoint("stablehlo.multiply")
def _multiply(op, cts):
    """da = ct * b, db = ct * a"""
    (ct,) = cts
    a, b = op.operands
    return multiply(ct, b), multiply(ct, a)


@adjoint("stablehlo.divide")
def _divide(op, cts):
    """da = ct / b, db = ct * ((-a / b) / b)"""
    (ct,) = cts
    a, b = op.operands
    return divide(ct, b), multiply(ct, divide(divide(negate(a), b), b))


@adjoint("stablehlo.negate")
def _negate(op, cts):
    """dx = -ct"""
    return (negate(cts[0]),)


@adjoint("stablehlo.power")
def _power(op, cts):
    """da = ct * b * a^(b-1); db = ct * log(a) * a^b where a > 0, else 0"""
    (ct,) = cts
    a, b = op.operands
    y = op.results[0]
    da = multiply(ct, multiply(b, hlo.binary("stablehlo.power", a, subtract(b, like(1, b)))))
    if not is_float(b):
        return da, None
    positive = hlo.compare(a, like(0, a), "GT")
    safe_log = hlo.select(positive, hlo.unary("stablehlo.log", a), like(0, a))
    return da, multiply(ct, multiply(safe_log, y))


@adjoint("stablehlo.maximum", "stablehlo.minimum")
def _max_min(op, cts):
    """ct goes to a where a >= b (maximum) / a <= b (minimum), else to b"""
    (ct,) = cts
    a, b = op.operands
    mask = hlo.compare(a, b, "GE" if op.name == "stablehlo.maximum" else "LE")
    zero = like(0, ct)
    return hlo.select(mask, ct, zero), hlo.select(mask, zero, ct)


@adjoint("stablehlo.remainder")
def _remainder(op, cts):
    """da = ct, db = -ct * trunc(a / b)"""
    (ct,) = cts
    a, b = op.operands
    q = divide(a, b)
    trunc = hlo.select(hlo.compare(q, like(0, q), "LT"),
                       hlo.unary("stablehlo.ceil", q), hlo.unary("stablehlo.floor", q))
    return ct, negate(multiply(ct, trunc))


@adjoint("stablehlo.atan2")
def _atan2(op, cts):
    """da = ct * b / (a^2 + b^2), db = -ct * a / (a^2 + b^2)"""
    (ct,) = cts
    a, b = op.operands
    denom = add(multiply(a, a), multiply(b, b))
    return divide(multiply(ct, b), denom), negate(divide(multiply(ct, a), denom))


# ----- transcendental -----

@adjoint("stablehlo.exponential")
def _exp(op, cts):
    """dx = ct * y"""
    return (multiply(cts[0], op.results[0]),)


@adjoint("stablehlo.exponential_minus_one")
def _expm1(op, cts):
    """dx = ct * (y + 1)"""
    y = op.results[0]
    return (multiply(cts[0], add(y, like(1, y))),)


@adjoint("stablehlo.log")
def _log(op, cts):
    """dx = ct / x"""
    return (divide(cts[0], op.operands[0]),)


@adjoint("stablehlo.log_plus_one")
def _log1p(op, cts):
    """dx = ct / (1 + x)"""
    x = op.operands[0]
    return (divide(cts[0], add(x, like(1, x))),)


@adjoint("stablehlo.sqrt")
def _sqrt(op, cts):
    """dx = ct * 0.5 / y (0 where ct == 0)"""
    (ct,) = cts
    y = op.results[0]
    return (_zero_where_ct_is_zero(ct, divide(multiply(ct, like(0.5, y)), y)),)


@adjoint("stablehlo.rsqrt")
def _rsqrt(op, cts):
    """dx = ct * -0.5 * y^3 (0 where ct == 0)"""
    (ct,) = cts
    y = op.results[0]
    return (_zero_where_ct_is_zero(ct, multiply(ct, multiply(like(-0.5, y), multiply(y, multiply(y, y))))),)


@adjoint("stablehlo.cbrt")
def _cbrt(op, cts):
    """dx = ct / (3 * y^2)"""
    y = op.results[0]
    return (divide(cts[0], multiply(like(3, y), multiply(y, y))),)


@adjoint("stablehlo.tanh")
def _tanh(op, cts):
    """dx = ct * (1 - y * y)"""
    y = op.results[0]
    return (multiply(cts[0], subtract(like(1, y), multiply(y, y))),)


@adjoint("stablehlo.logistic")
def _logistic(op, cts):
    """dx = ct * y * (1 - y)"""
    y = op.results[0]
    return (multiply(cts[0], multiply(y, subtract(like(1, y), y))),)


@adjoint("stablehlo.sine")
def _sin(op, cts):
    """dx = ct * cos(x)"""
    return (multiply(cts[0], hlo.unary("stablehlo.cosine", op.operands[0])),)


@adjoint("stablehlo.cosine")
def _cos(op, cts):
    """dx = -ct * sin(x)"""
    return (negate(multiply(cts[0], hlo.unary("stablehlo.sine", op.operands[0]))),)


@adjoint("stablehlo.tan", "chlo.tan")
def _tan(op, cts):
    """dx = ct * (1 + y^2)"""
    y = op.results[0]
    return (multiply(cts[0], add(like(1, y), multiply(y, y))),)


@adjoint("chlo.erf")
def _erf(op, cts):
    """dx = ct * 2/sqrt(pi) * exp(-x^2)"""
    x = op.operands[0]
    bump = hlo.unary("stablehlo.exponential", negate(multiply(x, x)))
    return (multiply(cts[0], multiply(like(2 / math.sqrt(math.pi), x), bump)),)


@adjoint("stablehlo.abs")
def _abs(op, cts):
    """dx = ct * sign(x): ct where x > 0, -ct where x < 0, 0 at 0; complex x:
    dz = ct * z / |z| (0 at 0: TensorFlow's ComplexAbs gradient)"""
    (ct,) = cts
    x = op.operands[0]
    if is_complex(x):
        unit = _unit_parts(x, op.results[0])
        return (hlo.complex_(multiply(ct, unit[0]), multiply(ct, unit[1])),)
    zero = like(0, x)
    return (hlo.select(hlo.compare(x, zero, "GT"), ct,
                       hlo.select(hlo.compare(x, zero, "LT"), negate(ct), like(0, ct))),)


@adjoint("stablehlo.sign")
def _sign(op, cts):
    """dx = 0 (a zero tensor, as TensorFlow returns)"""
    return (like(0, op.operands[0]),)


# ----- selection and conversion -----

@adjoint("stablehlo.select")
def _select(op, cts):
    """d on_true = select(p, ct, 0), d on_false = select(p, 0, ct)"""
    (ct,) = cts
    pred = op.operands[0]
    zero = like(0, ct)
    return None, hlo.select(pred, ct, zero), hlo.select(pred, zero, ct)


def _clamp_sides(lo: ir.Value, x: ir.Value, hi: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Where clamp's result is ``lo`` (x < lo <= hi) and where it is ``hi`` (x > hi, or lo > hi:
    then the result is hi whatever x is), both of x's shape."""
    full = lambda b: b if shape(b) == shape(x) else hlo.broadcast_in_dim(b, shape(x), [])  # noqa: E731
    lo, hi = full(lo), full(hi)
    above = hlo.binary("stablehlo.or", hlo.compare(x, hi, "GT"), hlo.compare(lo, hi, "GT"))
    below = hlo.binary("stablehlo.and", hlo.compare(x, lo, "LT"), hlo.compare(lo, hi, "LE"))
    return below, above


@adjoint("stablehlo.clamp")
def _clamp(op, cts):
    """dx = ct on lo <= x <= hi; d lo = ct where x < lo <= hi; d hi = ct where x > hi or lo > hi
    (StableHLO's clamp is min(max(x, lo), hi): hi wherever lo > hi)"""
    (ct,) = cts
    lo, x, hi = op.operands
    below, above = _clamp_sides(lo, x, hi)
    zero = like(0, ct)
    dx = hlo.select(below, zero, hlo.select(above, zero, ct))
    dlo = _unbroadcast_scalar(hlo.select(below, ct, zero), lo)
    dhi = _unbroadcast_scalar(hlo.select(above, ct, zero), hi)
    return dlo, dx, dhi


@adjoint("stablehlo.convert")
def _convert(op, cts):
    """dx = convert(ct) back to x's element type (none for integer x); real to complex:
    dx = real(ct); complex to real (which keeps the real part): dz = complex(ct, 0)"""
    x = op.operands[0]
    (ct,) = cts
    if is_complex(x) and not is_complex(ct):
        ct = hlo.complex_(ct, hlo.zeros(ct.type))
    elif is_complex(ct) and not is_complex(x):
        ct = hlo.real(ct)
    if not carries(x):
        return (None,)
    return (hlo.convert(ct, elem(x)),)


# ----- complex parts (TensorFlow's convention: backprop.py) -----

def _unit_parts(z: ir.Value, magnitude: ir.Value) -> tuple[ir.Value, ir.Value]:
    """real(z) / |z| and imag(z) / |z| (0 where z = 0)."""
    safe = hlo.select(hlo.compare(magnitude, like(0, magnitude), "EQ"), like(1, magnitude), magnitude)
    return divide(hlo.real(z), safe), divide(hlo.imag(z), safe)


@adjoint("stablehlo.real")
def _real(op, cts):
    """dz = complex(ct, 0)"""
    return (hlo.complex_(cts[0], hlo.zeros(cts[0].type)),)


@adjoint("stablehlo.imag")
def _imag(op, cts):
    """dz = complex(0, ct)"""
    return (hlo.complex_(hlo.zeros(cts[0].type), cts[0]),)


@adjoint("stablehlo.complex")
def _complex(op, cts):
    """dx = real(ct), dy = imag(ct)"""
    return hlo.real(cts[0]), hlo.imag(cts[0])


COMPLEX_AWARE.update(("stablehlo.abs", "stablehlo.convert", "stablehlo.real", "stablehlo.imag", "stablehlo.complex"))


nondifferentiable(
    "stablehlo.compare", "stablehlo.and", "stablehlo.or", "stablehlo.xor", "stablehlo.not",
    "stablehlo.floor", "stablehlo.ceil", "stablehlo.round_nearest_even",
    "stablehlo.round_nearest_afz", "stablehlo.is_finite", "stablehlo.iota",
    "stablehlo.constant", "stablehlo.shift_left", "stablehlo.shift_right_logical",
    "stablehlo.shift_right_arithmetic", "stablehlo.popcnt", "stablehlo.count_leading_zeros",
    "stablehlo.rng_bit_generator", "stablehlo.rng",
)


# ----- tangents ----------------------------------------------------------------------

tangent("stablehlo.add", "stablehlo.subtract", "stablehlo.negate", "stablehlo.convert", "stablehlo.real",
        "stablehlo.imag", "stablehlo.complex")(linear)
tangent("stablehlo.multiply", "stablehlo.divide", "stablehlo.power", "stablehlo.maximum", "stablehlo.minimum",
        "stablehlo.remainder", "stablehlo.atan2", "stablehlo.exponential", "stablehlo.exponential_minus_one",
        "stablehlo.log", "stablehlo.log_plus_one", "stablehlo.sqrt", "stablehlo.rsqrt", "stablehlo.cbrt",
        "stablehlo.tanh", "stablehlo.logistic", "stablehlo.sine", "stablehlo.cosine", "stablehlo.tan", "chlo.tan",
        "chlo.erf", "stablehlo.sign", "stablehlo.select")(diagonal)


@tangent("stablehlo.abs")
def _abs_tangent(op, ts):
    """t = sign(x) t x; complex z: t = real(conj(z) t z) / |z| (0 at 0)"""
    z = op.operands[0]
    if not is_complex(z):
        return diagonal(op, ts)
    re, im = _unit_parts(z, op.results[0])
    (t,) = ts
    return [add(multiply(re, hlo.real(t)), multiply(im, hlo.imag(t)))]


@tangent("stablehlo.clamp")
def _clamp_tangent(op, ts):
    """t = t lo where x < lo, t hi where x > hi, t x on [lo, hi] (the adjoint's convention)"""
    lo, x, hi = op.operands
    full = lambda b: b if shape(b) == shape(x) else hlo.broadcast_in_dim(b, shape(x), [])  # noqa: E731
    tlo, tx, thi = (full(t) for t in zero_filled(op.operands, ts))
    below, above = _clamp_sides(lo, x, hi)
    return [hlo.select(below, tlo, hlo.select(above, thi, tx))]


# ----- batching ------------------------------------------------------------------------------

batching(*[f"stablehlo.{n}" for n in (
    "abs add atan2 cbrt clamp complex convert cosine divide exponential exponential_minus_one imag log "
    "log_plus_one logistic maximum minimum multiply negate power real remainder rsqrt select sign sine sqrt "
    "subtract tan tanh and ceil compare count_leading_zeros floor is_finite not or popcnt round_nearest_afz "
    "round_nearest_even shift_left shift_right_arithmetic shift_right_logical xor").split()],
         "chlo.erf", "chlo.tan")(elementwise)
