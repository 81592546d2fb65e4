"""``ig.math``: aliases of the math ops (``ig.math.log`` is ``ig.log``)."""
from .ops.math_ops import (abs, add, ceil, cos, divide, equal, erf, exp, expm1, floor, floordiv, greater,  # noqa: F401
                           greater_equal, less, less_equal, log, log1p, logical_and, logical_not,
                           logical_or, maximum, minimum, mod, multiply, negative, not_equal, pow, round,
                           rsqrt, sigmoid, sign, sin, sqrt, square, subtract, tan, tanh)
from .ops.reduce_ops import (reduce_all, reduce_any, reduce_max, reduce_mean, reduce_min,  # noqa: F401
                             reduce_prod, reduce_sum)

from .ops.math_ops import (acos, acosh, add_n, asin, asinh, atan, atan2, atanh, cosh, digamma,  # noqa: F401
                           divide_no_nan, erfc, erfinv, is_finite, is_inf, is_nan, lgamma, multiply_no_nan,
                           reciprocal, sinh, squared_difference, xdivy, xlogy)
from .ops.reduce_ops import (argmax, argmin, cumprod, cumsum, cumulative_logsumexp, l2_normalize,  # noqa: F401
                             reduce_euclidean_norm, reduce_logsumexp, reduce_std, reduce_variance, segment_max,
                             segment_mean, segment_min, segment_sum, unsorted_segment_max, unsorted_segment_mean,
                             unsorted_segment_min, unsorted_segment_sum)
from .ops.activations import log_sigmoid, softsign  # noqa: F401
from .ops.nn_ops import softplus  # noqa: F401

floormod = mod

__all__ = [
    "abs", "add", "ceil", "cos", "divide", "equal", "erf", "exp", "expm1", "floor", "floordiv", "floormod",
    "greater", "greater_equal", "less", "less_equal", "log", "log1p", "logical_and", "logical_not",
    "logical_or", "maximum", "minimum", "mod", "multiply", "negative", "not_equal", "pow", "reduce_all",
    "reduce_any", "reduce_max", "reduce_mean", "reduce_min", "reduce_prod", "reduce_sum", "round", "rsqrt",
    "sigmoid", "sign", "sin", "sqrt", "square", "subtract", "tan", "tanh"
]
__all__ += [
    "acos", "acosh", "add_n", "argmax", "argmin", "asin", "asinh", "atan", "atan2", "atanh", "cosh", "cumprod",
    "cumsum", "cumulative_logsumexp", "digamma", "divide_no_nan", "erfc", "erfinv", "is_finite", "is_inf", "is_nan",
    "l2_normalize", "lgamma", "log_sigmoid", "multiply_no_nan", "reciprocal", "reduce_euclidean_norm",
    "reduce_logsumexp", "reduce_std", "reduce_variance", "segment_max", "segment_mean", "segment_min", "segment_sum",
    "sinh", "softplus", "softsign", "squared_difference", "unsorted_segment_max", "unsorted_segment_mean",
    "unsorted_segment_min", "unsorted_segment_sum", "xdivy", "xlogy"
]
