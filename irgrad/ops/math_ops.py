"""Elementwise math, comparisons, ``where``, ``cast`` and friends."""
from __future__ import annotations

from .. import dtypes
from ..framework import Tensor
from ..passes.ir import hlo
from .core import (broadcast_shape, broadcast_value, convert_pair, convert_to_tensor, element, emit,
                   require)


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
