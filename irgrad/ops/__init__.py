"""irgrad's ops (TensorFlow names and semantics) and the Tensor operators."""
from ..framework import Tensor
from .array_ops import (broadcast_to, concat, constant, expand_dims, fill, gather, getitem, one_hot, ones,
                        ones_like, rank, reshape, shape, size, slice, squeeze, stop_gradient, transpose,
                        unstack, zeros, zeros_like)
from .control_flow import cond, while_loop
from .core import convert_to_tensor, stack
from .math_ops import (abs, add, cast, ceil, clip_by_value, cos, divide, equal, erf, exp, expm1, floor,
                       floordiv, greater, greater_equal, identity, less, less_equal, log, log1p,
                       logical_and, logical_not, logical_or, maximum, minimum, mod, multiply, negative,
                       not_equal, pow, round, rsqrt, sigmoid, sign, sin, sqrt, square, subtract, tan,
                       tanh, where)
# TensorFlow's top-level names among the issue-42 ops; the others are in ig.math and ig.nn only
# (irgrad/math.py, irgrad/nn.py), as in TensorFlow.
from .math_ops import acos, acosh, add_n, asin, asinh, atan, atan2, atanh, cosh, sinh
from .reduce_ops import (einsum, matmul, reduce_all, reduce_any, reduce_max, reduce_mean, reduce_min,
                         reduce_prod, reduce_sum)
from .reduce_ops import argmax, argmin, cumsum, norm, reduce_logsumexp


def _reflect(f):
    return lambda self, other: f(other, self)


Tensor.__add__ = lambda self, other: add(self, other)
Tensor.__radd__ = _reflect(add)
Tensor.__sub__ = lambda self, other: subtract(self, other)
Tensor.__rsub__ = _reflect(subtract)
Tensor.__mul__ = lambda self, other: multiply(self, other)
Tensor.__rmul__ = _reflect(multiply)
Tensor.__truediv__ = lambda self, other: divide(self, other)
Tensor.__rtruediv__ = _reflect(divide)
Tensor.__floordiv__ = lambda self, other: floordiv(self, other)
Tensor.__rfloordiv__ = _reflect(floordiv)
Tensor.__mod__ = lambda self, other: mod(self, other)
Tensor.__rmod__ = _reflect(mod)
Tensor.__pow__ = lambda self, other: pow(self, other)
Tensor.__rpow__ = _reflect(pow)
Tensor.__matmul__ = lambda self, other: matmul(self, other)
Tensor.__rmatmul__ = _reflect(matmul)
Tensor.__neg__ = lambda self: negative(self)
Tensor.__abs__ = lambda self: abs(self)
Tensor.__lt__ = lambda self, other: less(self, other)
Tensor.__le__ = lambda self, other: less_equal(self, other)
Tensor.__gt__ = lambda self, other: greater(self, other)
Tensor.__ge__ = lambda self, other: greater_equal(self, other)
Tensor.__and__ = lambda self, other: logical_and(self, other)
Tensor.__or__ = lambda self, other: logical_or(self, other)
Tensor.__invert__ = lambda self: logical_not(self)
Tensor.__getitem__ = getitem
Tensor.__eq__ = lambda self, other: False if other is None else equal(self, other)
Tensor.__ne__ = lambda self, other: True if other is None else not_equal(self, other)

__all__ = [
    "abs", "add", "broadcast_to", "cast", "ceil", "clip_by_value", "concat", "cond", "constant",
    "convert_to_tensor", "cos", "divide", "einsum", "equal", "erf", "exp", "expand_dims", "expm1", "fill", "floor",
    "floordiv", "gather", "getitem", "greater", "greater_equal", "identity", "less", "less_equal", "log", "log1p",
    "logical_and", "logical_not", "logical_or", "matmul", "maximum", "minimum", "mod", "multiply", "negative",
    "not_equal", "one_hot", "ones", "ones_like", "pow", "rank", "reduce_all", "reduce_any", "reduce_max",
    "reduce_mean", "reduce_min", "reduce_prod", "reduce_sum", "reshape", "round", "rsqrt", "shape", "sigmoid",
    "sign", "sin", "size", "slice", "sqrt", "square", "squeeze", "stack", "stop_gradient", "subtract", "tan",
    "tanh", "Tensor", "transpose", "unstack", "where", "while_loop", "zeros", "zeros_like"
]
__all__ += ["acos", "acosh", "add_n", "argmax", "argmin", "asin", "asinh", "atan", "atan2", "atanh", "cosh",
            "cumsum", "norm", "reduce_logsumexp", "sinh"]
