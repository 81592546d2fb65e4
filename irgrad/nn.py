"""``ig.nn``: neural-network ops (NHWC, TensorFlow semantics)."""
from .ops.math_ops import sigmoid, tanh  # noqa: F401
from .ops.nn_ops import (avg_pool2d, conv2d, log_softmax, max_pool2d, relu, softmax,  # noqa: F401
                         softmax_cross_entropy_with_logits, softplus)

max_pool = max_pool2d
avg_pool = avg_pool2d

__all__ = [
    "avg_pool", "avg_pool2d", "conv2d", "log_softmax", "max_pool", "max_pool2d", "relu", "sigmoid", "softmax",
    "softmax_cross_entropy_with_logits", "softplus", "tanh"
]
