"""``ig.math``: aliases of the math ops (``ig.math.log`` is ``ig.log``)."""
from .ops.math_ops import (abs, add, ceil, cos, divide, equal, erf, exp, expm1, floor, floordiv, greater,  # noqa: F401
                           greater_equal, less, less_equal, log, log1p, logical_and, logical_not,
                           logical_or, maximum, minimum, mod, multiply, negative, not_equal, pow, round,
                           rsqrt, sigmoid, sign, sin, sqrt, square, subtract, tan, tanh)
from .ops.reduce_ops import (reduce_all, reduce_any, reduce_max, reduce_mean, reduce_min,  # noqa: F401
                             reduce_prod, reduce_sum)

floormod = mod

__all__ = [
    "abs", "add", "ceil", "cos", "divide", "equal", "erf", "exp", "expm1", "floor", "floordiv", "floormod",
    "greater", "greater_equal", "less", "less_equal", "log", "log1p", "logical_and", "logical_not",
    "logical_or", "maximum", "minimum", "mod", "multiply", "negative", "not_equal", "pow", "reduce_all",
    "reduce_any", "reduce_max", "reduce_mean", "reduce_min", "reduce_prod", "reduce_sum", "round", "rsqrt",
    "sigmoid", "sign", "sin", "sqrt", "square", "subtract", "tan", "tanh"
]
