"""Elementwise math, comparisons, ``where``, ``cast`` and friends."""
from __future__ import annotations

from .. import dtypes
from ..custom_gradient import attach_gradient
from ..framework import Tensor
from ..passes.ir import hlo
from .array_ops import broadcast_to, stop_gradient
from .core import (broadcast_shape, broadcast_value, convert_pair, convert_to_tensor, current_graph, element,
                   emit, require)


def _unary(op: str, x, name: str, *, floating: bool = True) -> Tensor:
    x = convert_to_tensor(x)
    require(x, name, floating=floating, numeric=True)
    return emit(name, lambda: hlo.unary(op, x.value))


def binary_op(op: str, x, y, name: str, *, numeric: bool = True) -> Tensor:
    x, y = convert_pair(x, y, name)
    if numeric:
        require(x, name, numeric=True)
    shape = broadcast_shape(x.shape, y.shape, name)
    return emit(name, lambda: hlo.binary(op, broadcast_value(x, shape, y), broadcast_value(y, shape, x)))


# ----- arithmetic -----

def add(x, y, name=None) -> Tensor:
    """Elementwise ``x + y`` (``tf.math.add``); also the ``+`` operator. Broadcasts like numpy.

    Gradient: ``ct`` to each input, summed over the dimensions it was broadcast along.
    """
    return binary_op("stablehlo.add", x, y, name or "add")


def subtract(x, y, name=None) -> Tensor:
    """Elementwise ``x - y`` (``tf.math.subtract``); also ``-``. Broadcasts like numpy.

    Gradient: ``ct`` for ``x``, ``-ct`` for ``y`` (each summed over its broadcast dimensions).
    """
    return binary_op("stablehlo.subtract", x, y, name or "sub")


def multiply(x, y, name=None) -> Tensor:
    """Elementwise ``x * y`` (``tf.math.multiply``); also ``*``. Broadcasts like numpy.

    Gradient: ``ct * y`` for ``x``, ``ct * x`` for ``y``.
    """
    return binary_op("stablehlo.multiply", x, y, name or "mul")


def divide(x, y, name=None) -> Tensor:
    """True division; integer tensors are cast to float first (TensorFlow's truediv)."""
    x, y = convert_pair(x, y, name or "truediv")
    if x.dtype.is_integer:
        target = dtypes.float32 if x.dtype.name in ("int8", "int16", "uint8", "uint16") else dtypes.float64
        x, y = cast(x, target), cast(y, target)
    return binary_op("stablehlo.divide", x, y, name or "truediv")


def floordiv(x, y, name=None) -> Tensor:
    """Elementwise floor division ``x // y`` (``tf.math.floordiv``); also ``//``. Rounds toward
    negative infinity for integers too, as Python does. Broadcasts like numpy.

    Gradient: none (piecewise constant).
    """
    x, y = convert_pair(x, y, name or "floordiv")
    if x.dtype.is_floating:
        return floor(divide(x, y), name=name or "floordiv")
    q = binary_op("stablehlo.divide", x, y, "floordiv")  # truncates toward zero
    r = binary_op("stablehlo.remainder", x, y, "floormod")
    fix = logical_and(not_equal(r, 0), not_equal(less(r, 0), less(y, 0)))
    return where(fix, subtract(q, 1), q, name=name or "floordiv")


def mod(x, y, name=None) -> Tensor:
    """Python/TensorFlow floor modulo: the result has the sign of y."""
    x, y = convert_pair(x, y, name or "floormod")
    r = binary_op("stablehlo.remainder", x, y, "floormod")
    fix = logical_and(not_equal(r, 0), not_equal(less(r, 0), less(y, 0)))
    return where(fix, add(r, y), r, name=name or "floormod")


def pow(x, y, name=None) -> Tensor:  # noqa: A001
    """Elementwise ``x ** y`` (``tf.math.pow``); also ``**``. Broadcasts like numpy.

    Gradient: ``ct * y * x**(y-1)`` for ``x`` and ``ct * log(x) * x**y`` for ``y``.
    """
    return binary_op("stablehlo.power", x, y, name or "pow")


def negative(x, name=None) -> Tensor:
    """Elementwise ``-x`` (``tf.math.negative``); also unary ``-``.

    Gradient: ``-ct``.
    """
    return _unary("stablehlo.negate", x, name or "neg", floating=False)


def abs(x, name=None) -> Tensor:  # noqa: A001
    """Elementwise absolute value ``|x|`` (``tf.math.abs``).

    Gradient: ``ct * sign(x)`` (0 at ``x == 0``, as TensorFlow).
    """
    return _unary("stablehlo.abs", x, name or "abs", floating=False)


def sign(x, name=None) -> Tensor:
    """Elementwise sign: -1, 0 or 1 (``tf.math.sign``).

    Gradient: zero.
    """
    return _unary("stablehlo.sign", x, name or "sign", floating=False)


def square(x, name=None) -> Tensor:
    """Elementwise ``x * x`` (``tf.math.square``).

    Gradient: ``ct * 2x``.
    """
    x = convert_to_tensor(x)
    require(x, "square", numeric=True)
    return emit(name or "square", lambda: hlo.multiply(x.value, x.value))


def maximum(x, y, name=None) -> Tensor:
    """Elementwise ``max(x, y)`` (``tf.math.maximum``). Broadcasts like numpy.

    Gradient: ``ct`` goes to the larger input; on a tie to ``x``, as TensorFlow.
    """
    return binary_op("stablehlo.maximum", x, y, name or "maximum")


def minimum(x, y, name=None) -> Tensor:
    """Elementwise ``min(x, y)`` (``tf.math.minimum``). Broadcasts like numpy.

    Gradient: ``ct`` goes to the smaller input; on a tie to ``x``, as TensorFlow.
    """
    return binary_op("stablehlo.minimum", x, y, name or "minimum")


# ----- transcendental -----

def exp(x, name=None) -> Tensor:
    """Elementwise ``e ** x`` (``tf.math.exp``).

    Gradient: ``ct * exp(x)`` (the result reused).
    """
    return _unary("stablehlo.exponential", x, name or "exp")


def log(x, name=None) -> Tensor:
    """Elementwise natural logarithm (``tf.math.log``): ``-inf`` at 0, NaN below.

    Gradient: ``ct / x``.
    """
    return _unary("stablehlo.log", x, name or "log")


def log1p(x, name=None) -> Tensor:
    """Elementwise ``log(1 + x)`` (``tf.math.log1p``), accurate for small ``x``.

    Gradient: ``ct / (1 + x)``.
    """
    return _unary("stablehlo.log_plus_one", x, name or "log1p")


def expm1(x, name=None) -> Tensor:
    """Elementwise ``exp(x) - 1`` (``tf.math.expm1``), accurate for small ``x``.

    Gradient: ``ct * exp(x)``.
    """
    return _unary("stablehlo.exponential_minus_one", x, name or "expm1")


def sqrt(x, name=None) -> Tensor:
    """Elementwise square root (``tf.math.sqrt``).

    Gradient: ``ct / (2 sqrt(x))`` (infinite at 0).
    """
    return _unary("stablehlo.sqrt", x, name or "sqrt")


def rsqrt(x, name=None) -> Tensor:
    """Elementwise ``1 / sqrt(x)`` (``tf.math.rsqrt``).

    Gradient: ``-ct / (2 x sqrt(x))``.
    """
    return _unary("stablehlo.rsqrt", x, name or "rsqrt")


def sin(x, name=None) -> Tensor:
    """Elementwise sine, in radians (``tf.math.sin``); lowers to ``stablehlo.sine``.

    Gradient: ``ct * cos(x)``.
    """
    return _unary("stablehlo.sine", x, name or "sin")


def cos(x, name=None) -> Tensor:
    """Elementwise cosine, in radians (``tf.math.cos``).

    Gradient: ``-ct * sin(x)``.
    """
    return _unary("stablehlo.cosine", x, name or "cos")


def tan(x, name=None) -> Tensor:
    """Elementwise tangent, in radians (``tf.math.tan``).

    Gradient: ``ct * (1 + tan(x)**2)``.
    """
    return _unary("stablehlo.tan", x, name or "tan")


def tanh(x, name=None) -> Tensor:
    """Elementwise hyperbolic tangent (``tf.math.tanh``); lowers to ``stablehlo.tanh``.

    Gradient: ``ct * (1 - tanh(x)**2)`` (the result reused).
    """
    return _unary("stablehlo.tanh", x, name or "tanh")


def sigmoid(x, name=None) -> Tensor:
    """Elementwise logistic function ``1 / (1 + exp(-x))`` (``tf.math.sigmoid``).

    Gradient: ``ct * y * (1 - y)`` with ``y`` the result.
    """
    return _unary("stablehlo.logistic", x, name or "sigmoid")


def erf(x, name=None) -> Tensor:
    """Elementwise Gauss error function (``tf.math.erf``).

    Gradient: ``ct * 2 / sqrt(pi) * exp(-x**2)``.
    """
    return _unary("chlo.erf", x, name or "erf")


def floor(x, name=None) -> Tensor:
    """Elementwise largest integer not above ``x``, as floats (``tf.math.floor``).

    Gradient: zero (piecewise constant).
    """
    return _unary("stablehlo.floor", x, name or "floor")


def ceil(x, name=None) -> Tensor:
    """Elementwise smallest integer not below ``x``, as floats (``tf.math.ceil``).

    Gradient: zero (piecewise constant).
    """
    return _unary("stablehlo.ceil", x, name or "ceil")


def round(x, name=None) -> Tensor:  # noqa: A001
    """Round half to even (TensorFlow's tf.round)."""
    return _unary("stablehlo.round_nearest_even", x, name or "round")


# ----- comparisons and logic -----

def _compare(direction: str, x, y, name: str) -> Tensor:
    x, y = convert_pair(x, y, name)
    shape = broadcast_shape(x.shape, y.shape, name)
    return emit(name, lambda: hlo.compare(broadcast_value(x, shape, y), broadcast_value(y, shape, x), direction))


def equal(x, y, name=None) -> Tensor:
    """Elementwise ``x == y`` as a bool tensor (``tf.math.equal``). Broadcasts like numpy. Not differentiable."""
    return _compare("EQ", x, y, name or "equal")


def not_equal(x, y, name=None) -> Tensor:
    """Elementwise ``x != y`` as a bool tensor (``tf.math.not_equal``). Broadcasts like numpy. Not differentiable."""
    return _compare("NE", x, y, name or "not_equal")


def less(x, y, name=None) -> Tensor:
    """Elementwise ``x < y`` as a bool tensor (``tf.math.less``); also ``<``. Broadcasts like numpy.
    Not differentiable.
    """
    return _compare("LT", x, y, name or "less")


def less_equal(x, y, name=None) -> Tensor:
    """Elementwise ``x <= y`` as a bool tensor (``tf.math.less_equal``); also ``<=``. Broadcasts like numpy.
    Not differentiable.
    """
    return _compare("LE", x, y, name or "less_equal")


def greater(x, y, name=None) -> Tensor:
    """Elementwise ``x > y`` as a bool tensor (``tf.math.greater``); also ``>``. Broadcasts like numpy.
    Not differentiable.
    """
    return _compare("GT", x, y, name or "greater")


def greater_equal(x, y, name=None) -> Tensor:
    """Elementwise ``x >= y`` as a bool tensor (``tf.math.greater_equal``); also ``>=``. Broadcasts like numpy.
    Not differentiable.
    """
    return _compare("GE", x, y, name or "greater_equal")


def _logical(op: str, x, y, name: str) -> Tensor:
    x, y = convert_to_tensor(x, dtypes.bool_), convert_to_tensor(y, dtypes.bool_)
    return binary_op(op, x, y, name, numeric=False)


def logical_and(x, y, name=None) -> Tensor:
    """Elementwise ``x and y`` of bool tensors (``tf.math.logical_and``). Broadcasts like numpy."""
    return _logical("stablehlo.and", x, y, name or "logical_and")


def logical_or(x, y, name=None) -> Tensor:
    """Elementwise ``x or y`` of bool tensors (``tf.math.logical_or``). Broadcasts like numpy."""
    return _logical("stablehlo.or", x, y, name or "logical_or")


def logical_not(x, name=None) -> Tensor:
    """Elementwise ``not x`` of a bool tensor (``tf.math.logical_not``)."""
    x = convert_to_tensor(x, dtypes.bool_)
    return emit(name or "logical_not", lambda: hlo.unary("stablehlo.not", x.value))


def where(condition, x=None, y=None, name=None) -> Tensor:
    """Elementwise ``x`` where ``condition`` holds, ``y`` elsewhere: TensorFlow 2's ``tf.where``.

    The three operands broadcast together like numpy (TensorFlow 2's rule, not TensorFlow 1's
    row selection); one ``stablehlo.select``.

    Args:
        condition: a bool tensor (``TypeError`` otherwise).
        x: the values where ``condition`` is true.
        y: the values elsewhere; of ``x``'s dtype (no promotion: ``TypeError``), a Python number
            taking the other's dtype.
        name: the op's name in the graph.

    Raises:
        ValueError: ``x`` or ``y`` omitted (``tf.where(condition)`` returns the coordinates of
            the true elements, a shape that depends on the data, which irgrad's static shapes
            cannot express), or shapes that do not broadcast.

    Gradient: ``ct`` to ``x`` where ``condition`` holds and to ``y`` elsewhere, zeros in the other
    places. An inf in the unselected branch's own gradient (``ig.sqrt``'s at 0) still gives NaN
    through ``0 * inf``: guard that branch's input, as in TensorFlow.

    Example: ``ig.where(x > 0.0, x, 0.01 * x)``.
    """
    name = name or "where"
    if x is None or y is None:
        raise ValueError("where(condition) without x and y returns data-dependent shapes, which "
                         "irgrad's static shapes cannot express; pass x and y")
    condition = convert_to_tensor(condition)
    if not condition.dtype.is_bool:
        raise TypeError(f"where: condition must be bool, got {condition.dtype.name}")
    x, y = convert_pair(x, y, name)
    shape = broadcast_shape(broadcast_shape(condition.shape, x.shape, name), y.shape, name)
    return emit(name, lambda: hlo.select(broadcast_value(condition, shape, x, y),
                                         broadcast_value(x, shape, condition, y),
                                         broadcast_value(y, shape, condition, x)))


# ----- conversion -----

def cast(x, dtype, name=None) -> Tensor:
    """``x`` converted elementwise to ``dtype``: TensorFlow's ``tf.cast``.

    Float to integer truncates toward zero; any type to bool is ``x != 0``; float to a narrower
    float rounds. ``x`` already of ``dtype`` is returned as is (no op). One
    ``stablehlo.convert``. irgrad never promotes dtypes, so ``cast`` is how two operands of
    different dtypes are combined.

    Args:
        x: a tensor, variable or value.
        dtype: the target dtype (an ``ig.DType`` or anything ``ig.as_dtype`` takes).
        name: the op's name in the graph.

    Gradient: ``ct`` cast back to ``x``'s dtype between float types; none when ``x`` or the
    result is an integer or bool.
    """
    dtype = dtypes.as_dtype(dtype)
    x = convert_to_tensor(x)
    if x.dtype == dtype:
        return x
    return emit(name or "Cast", lambda: hlo.convert(x.value, element(dtype)))


def identity(x, name=None) -> Tensor:
    """A tensor with the same value as ``x`` (``tf.identity``): a new op, so a new name in the graph.

    Gradient: ``ct``, unchanged.
    """
    x = convert_to_tensor(x)
    return emit(name or "Identity", lambda: hlo.identity(x.value))


def clip_by_value(t, clip_value_min, clip_value_max, name=None) -> Tensor:
    """``min(max(t, clip_value_min), clip_value_max)`` elementwise: TensorFlow's ``tf.clip_by_value``.

    One ``stablehlo.clamp``. The bounds are converted to ``t``'s dtype and may be scalars or
    tensors that broadcast to ``t``'s shape; a bound that would enlarge the result's shape raises
    ``ValueError``.

    Gradient (TensorFlow's convention): ``ct`` goes to ``t`` where
    ``clip_value_min <= t <= clip_value_max``, and to the bound that applied elsewhere.

    Example: ``ig.clip_by_value(grad, -1.0, 1.0)``.
    """
    name = name or "clip_by_value"
    t = convert_to_tensor(t)
    lo = convert_to_tensor(clip_value_min, t.dtype)
    hi = convert_to_tensor(clip_value_max, t.dtype)
    shape = broadcast_shape(broadcast_shape(t.shape, lo.shape, name), hi.shape, name)
    if tuple(shape) != tuple(t.shape):
        raise ValueError(f"{name}: bounds of shape {tuple(lo.shape)} / {tuple(hi.shape)} would change "
                         f"the shape of t {tuple(t.shape)}")

    def build():
        bound = lambda b: b.value if b.ndim == 0 else broadcast_value(b, shape, t)  # noqa: E731
        return hlo.clamp(bound(lo), t.value, bound(hi))

    return emit(name, build)


# ----- inverse trigonometric, hyperbolic and special functions -----

def reciprocal(x, name=None) -> Tensor:
    """Elementwise ``1 / x`` (``tf.math.reciprocal``). Floating-point only (``TypeError``
    otherwise: TensorFlow's CPU has no integer kernel).

    Gradient: ``-ct * y**2`` (TensorFlow's ``ReciprocalGrad``; ``-inf`` at 0).
    """
    x = convert_to_tensor(x)
    require(x, "reciprocal", floating=True)
    return binary_op("stablehlo.divide", convert_to_tensor(1, x.dtype), x, name or "Reciprocal")


def atan2(y, x, name=None) -> Tensor:
    """Elementwise angle of the point ``(x, y)``, in ``[-pi, pi]`` (``tf.math.atan2``): note the
    order, ``y`` first. Broadcasts like numpy.

    At the origin the result is ``±0`` or ``±pi`` by the signs of the zeros, and ``atan2(-0, x < 0)``
    is ``-pi``, as TensorFlow: IREE 3.13's float32 ``atan2`` gives NaN at the origin and ``+pi``
    for ``y = -0``, so the origin is computed as ``atan2(y, ±1)`` and a ``+pi`` for ``y = -0`` is
    negated (a constant correction: the gradient is untouched).

    Gradient: ``ct * x / (x**2 + y**2)`` for ``y``, ``-ct * y / (x**2 + y**2)`` for ``x`` (NaN at
    the origin, as TensorFlow).
    """
    name = name or "Atan2"
    y, x = convert_pair(y, x, name)
    require(y, "atan2", floating=True)
    zero_y = equal(y, 0)
    origin = logical_and(zero_y, equal(x, 0))
    one = convert_to_tensor(1, x.dtype)
    # 1 / v is -inf for v = -0: the sign of a zero, which no comparison sees.
    negative_zero = lambda v: less(binary_op("stablehlo.divide", one, v, name), 0)  # noqa: E731
    unit = where(negative_zero(x), negative(one), one)
    at_origin = binary_op("stablehlo.atan2", y, where(origin, unit, x), name)
    angle = where(origin, at_origin, binary_op("stablehlo.atan2", y, x, name))
    wrong_sign = logical_and(logical_and(zero_y, negative_zero(y)), greater(angle, 0))
    return add(angle, where(wrong_sign, multiply(stop_gradient(angle), -2.0), 0.0), name=name)


def asin(x, name=None) -> Tensor:
    """Elementwise inverse sine (``tf.math.asin``): NaN outside ``[-1, 1]``.

    Gradient: ``ct / sqrt(1 - x**2)``.
    """
    return _unary("chlo.asin", x, name or "Asin")


def acos(x, name=None) -> Tensor:
    """Elementwise inverse cosine (``tf.math.acos``): NaN outside ``[-1, 1]``.

    Gradient: ``-ct / sqrt(1 - x**2)``.
    """
    return _unary("chlo.acos", x, name or "Acos")


def atan(x, name=None) -> Tensor:
    """Elementwise inverse tangent (``tf.math.atan``).

    Gradient: ``ct / (1 + x**2)``.
    """
    return _unary("chlo.atan", x, name or "Atan")


def sinh(x, name=None) -> Tensor:
    """Elementwise hyperbolic sine (``tf.math.sinh``).

    Gradient: ``ct * cosh(x)``.
    """
    return _unary("chlo.sinh", x, name or "Sinh")


def cosh(x, name=None) -> Tensor:
    """Elementwise hyperbolic cosine (``tf.math.cosh``).

    Gradient: ``ct * sinh(x)``.
    """
    return _unary("chlo.cosh", x, name or "Cosh")


def asinh(x, name=None) -> Tensor:
    """Elementwise inverse hyperbolic sine (``tf.math.asinh``).

    Gradient: ``ct / sqrt(x**2 + 1)`` (TensorFlow's ``ct / cosh(y)``, the same function).
    """
    return _unary("chlo.asinh", x, name or "Asinh")


def acosh(x, name=None) -> Tensor:
    """Elementwise inverse hyperbolic cosine (``tf.math.acosh``): NaN below 1.

    Gradient: ``ct / sqrt(x**2 - 1)`` (TensorFlow's ``ct / sinh(y)``; inf at 1).
    """
    return _unary("chlo.acosh", x, name or "Acosh")


def atanh(x, name=None) -> Tensor:
    """Elementwise inverse hyperbolic tangent (``tf.math.atanh``): ``±inf`` at ``±1``, NaN beyond.

    Gradient: ``ct / (1 - x**2)``.
    """
    return _unary("chlo.atanh", x, name or "Atanh")


def erfc(x, name=None) -> Tensor:
    """Elementwise complementary error function ``1 - erf(x)`` (``tf.math.erfc``), accurate for
    large ``x``.

    Gradient: ``-ct * 2 / sqrt(pi) * exp(-x**2)``.
    """
    return _unary("chlo.erfc", x, name or "Erfc")


def erfinv(x, name=None) -> Tensor:
    """Elementwise inverse of ``erf`` (``tf.math.erfinv``): ``±inf`` at ``±1``, NaN beyond.

    Gradient: ``ct * sqrt(pi) / 2 * exp(y**2)`` with ``y`` the result.
    """
    return _unary("chlo.erf_inv", x, name or "Erfinv")


def lgamma(x, name=None) -> Tensor:
    """Elementwise ``log |Gamma(x)|`` (``tf.math.lgamma``): inf at 0 and the negative integers.

    Gradient: ``ct * digamma(x)``.
    """
    return _unary("chlo.lgamma", x, name or "Lgamma")


def digamma(x, name=None) -> Tensor:
    """Elementwise derivative of ``lgamma`` (``tf.math.digamma``).

    Gradient: ``ct * polygamma(1, x)`` (lowered as ``zeta(2, x)``).
    """
    return _unary("chlo.digamma", x, name or "Digamma")


def is_finite(x, name=None) -> Tensor:
    """Elementwise: ``x`` is neither inf nor NaN, as a bool tensor (``tf.math.is_finite``):
    ``|x| < inf``. Floating-point ``x`` only (``TypeError`` otherwise). Not differentiable."""
    x = convert_to_tensor(x)
    require(x, "is_finite", floating=True)
    return less(abs(x), float("inf"), name=name or "IsFinite")


def is_nan(x, name=None) -> Tensor:
    """Elementwise: ``x`` is NaN, as a bool tensor (``tf.math.is_nan``): ``x != x``.
    Floating-point ``x`` only (``TypeError`` otherwise). Not differentiable."""
    x = convert_to_tensor(x)
    require(x, "is_nan", floating=True)
    return emit(name or "IsNan", lambda: hlo.compare(x.value, x.value, "NE"))


def is_inf(x, name=None) -> Tensor:
    """Elementwise: ``x`` is ``+inf`` or ``-inf``, as a bool tensor (``tf.math.is_inf``).
    Floating-point ``x`` only (``TypeError`` otherwise). Not differentiable."""
    x = convert_to_tensor(x)
    require(x, "is_inf", floating=True)
    return equal(abs(x), float("inf"), name=name or "IsInf")


# ----- TensorFlow's safe divisions and products (their gradients at 0 are TensorFlow's) -----

def _float_pair(x, y, name: str) -> tuple[Tensor, Tensor]:
    """``x`` and ``y`` of one dtype; integers cast to float as ``divide`` does (TensorFlow's
    truediv table)."""
    x, y = convert_pair(x, y, name)
    require(x, name, numeric=True)
    if x.dtype.is_integer:
        target = dtypes.float32 if x.dtype.name in ("int8", "int16", "uint8", "uint16") else dtypes.float64
        x, y = cast(x, target), cast(y, target)
    return x, y


def _zero_where(cond: Tensor, value: Tensor, name: str) -> Tensor:
    return where(cond, convert_to_tensor(0, value.dtype), value, name=name)


def xlogy(x, y, name=None) -> Tensor:
    """``0`` where ``x == 0`` (even where ``y`` is 0 or NaN), ``x * log(y)`` elsewhere
    (``tf.math.xlogy``). Floating-point operands; broadcasts like numpy.

    Gradient (TensorFlow's ``_XLogyGrad``): ``ct * log(y)`` for ``x`` and ``ct * x / y`` for
    ``y`` where ``x != 0``; both 0 where ``x == 0``, also at ``y == 0`` (``y`` is replaced by 1
    there before the log, so no ``0 * inf`` appears).
    """
    name = name or "Xlogy"
    x, y = convert_pair(x, y, name)
    require(x, name, floating=True)
    zero = equal(x, 0)
    safe_y = where(zero, convert_to_tensor(1, y.dtype), y)
    return _zero_where(zero, multiply(x, log(safe_y)), name)


def xdivy(x, y, name=None) -> Tensor:
    """``0`` where ``x == 0`` (even where ``y`` is 0), ``x / y`` elsewhere (``tf.math.xdivy``).
    Floating-point operands; broadcasts like numpy.

    Gradient (TensorFlow's ``_XDivyGrad``): ``ct / y`` for ``x`` and ``-ct * x / y**2`` for ``y``
    where ``x != 0``; both 0 where ``x == 0``.
    """
    name = name or "Xdivy"
    x, y = convert_pair(x, y, name)
    require(x, name, floating=True)
    zero = equal(x, 0)
    safe_y = where(zero, convert_to_tensor(1, y.dtype), y)
    return _zero_where(zero, binary_op("stablehlo.divide", x, safe_y, name), name)


def divide_no_nan(x, y, name=None) -> Tensor:
    """``0`` where ``y == 0`` (even where ``x`` is inf or NaN), ``x / y`` elsewhere
    (``tf.math.divide_no_nan``). Integer operands are cast to float first, as ``divide``
    (int32/int64 to float64, narrower ones to float32). Broadcasts like numpy.

    Gradient (TensorFlow's ``_DivNoNanGrad``): ``divide_no_nan(ct, y)`` for ``x`` and
    ``ct * divide_no_nan(-x / y, y)`` for ``y``: both 0 where ``y == 0``.
    """
    name = name or "div_no_nan"
    x, y = _float_pair(x, y, name)
    zero = equal(y, 0)
    safe_y = where(zero, convert_to_tensor(1, y.dtype), y)
    return _zero_where(zero, binary_op("stablehlo.divide", x, safe_y, name), name)


def _mul_no_nan_value(x: Tensor, y: Tensor, name: str) -> Tensor:
    return _zero_where(equal(y, 0), multiply(x, y), name)


def multiply_no_nan(x, y, name=None) -> Tensor:
    """``0`` where ``y == 0`` (even where ``x`` is inf or NaN), ``x * y`` elsewhere
    (``tf.math.multiply_no_nan``). Floating-point operands of one dtype; broadcasts like numpy.

    Gradient (TensorFlow's ``_MulNoNanGrad``): ``multiply_no_nan(ct, y)`` for ``x`` (0 where
    ``y == 0``) and ``multiply_no_nan(x, ct)`` for ``y`` (``x * ct`` also where ``y == 0``, 0
    where ``ct == 0``), each summed over its broadcast dimensions. A custom-gradient
    composite, so exported modules keep that gradient.
    """
    name = name or "MulNoNan"
    x, y = convert_pair(x, y, name)
    require(x, name, floating=True)
    shape = broadcast_shape(x.shape, y.shape, name)
    if tuple(x.shape) != shape:
        x = broadcast_to(x, shape)
    if tuple(y.shape) != shape:
        y = broadcast_to(y, shape)

    def grad(dz):
        return _mul_no_nan_value(dz, y, name), _mul_no_nan_value(x, dz, name)

    return attach_gradient(current_graph(), _mul_no_nan_value(x, y, name), [x, y], [], grad, name)


def add_n(inputs, name=None) -> Tensor:
    """The elementwise sum of a list of tensors of one shape and dtype (``tf.math.add_n``).

    Raises:
        ValueError: an empty list, or shapes that differ (``add_n`` does not broadcast).
        TypeError: mixed dtypes, or ``inputs`` not a list or tuple.

    Gradient: ``ct`` to every input.
    """
    name = name or "AddN"
    if not isinstance(inputs, (list, tuple)):
        raise TypeError(f"add_n: inputs must be a list or tuple of tensors, got {type(inputs).__name__}")
    if not inputs:
        raise ValueError("add_n: inputs must be a non-empty list of tensors")
    tensors = [convert_to_tensor(t) for t in inputs]
    for t in tensors[1:]:
        if t.dtype != tensors[0].dtype:
            raise TypeError(f"add_n: mixed dtypes {tensors[0].dtype.name} and {t.dtype.name}")
        if tuple(t.shape) != tuple(tensors[0].shape):
            raise ValueError(f"add_n: all inputs must have the same shape, got {tuple(tensors[0].shape)} "
                             f"and {tuple(t.shape)}")
    if len(tensors) == 1:
        return identity(tensors[0], name=name)
    total = tensors[0]
    for t in tensors[1:]:
        total = add(total, t, name=name)
    return total


def squared_difference(x, y, name=None) -> Tensor:
    """Elementwise ``(x - y)**2`` (``tf.math.squared_difference``); integers too. Broadcasts like
    numpy.

    Gradient: ``2 ct (x - y)`` for ``x`` and its negative for ``y`` (TensorFlow's
    ``_SquaredDifferenceGrad``).
    """
    name = name or "SquaredDifference"
    x, y = convert_pair(x, y, name)
    require(x, name, numeric=True)
    return square(subtract(x, y), name=name)
