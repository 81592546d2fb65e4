"""``ig.nn``: neural-network ops (NHWC, TensorFlow semantics)."""
from .ops.math_ops import sigmoid, tanh  # noqa: F401
from .ops.nn_ops import (avg_pool2d, conv2d, log_softmax, max_pool2d, relu, softmax,  # noqa: F401
                         softmax_cross_entropy_with_logits, softplus)

from .ops.activations import (elu, gelu, l2_loss, leaky_relu, log_poisson_loss, relu6, selu,  # noqa: F401
                              sigmoid_cross_entropy_with_logits, silu, softsign,
                              sparse_softmax_cross_entropy_with_logits, swish, weighted_cross_entropy_with_logits)
from .ops.reduce_ops import l2_normalize, moments  # noqa: F401

max_pool = max_pool2d
avg_pool = avg_pool2d

__all__ = [
    "avg_pool", "avg_pool2d", "conv2d", "log_softmax", "max_pool", "max_pool2d", "relu", "sigmoid", "softmax",
    "softmax_cross_entropy_with_logits", "softplus", "tanh"
]
__all__ += [
    "elu", "gelu", "l2_loss", "l2_normalize", "leaky_relu", "log_poisson_loss", "moments", "relu6", "selu",
    "sigmoid_cross_entropy_with_logits", "silu", "softsign", "sparse_softmax_cross_entropy_with_logits", "swish",
    "weighted_cross_entropy_with_logits"
]
