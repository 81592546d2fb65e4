"""``ig.nn``: neural-network ops (NHWC, TensorFlow semantics)."""
from .ops.array_ops import depth_to_space, space_to_depth, top_k  # noqa: F401
from .ops.math_ops import sigmoid, tanh  # noqa: F401
from .ops.nn_ops import (avg_pool2d, conv2d, log_softmax, max_pool2d, relu, softmax,  # noqa: F401
                         softmax_cross_entropy_with_logits, softplus)
from .ops.nn_ops import (avg_pool1d, batch_normalization, bias_add, conv1d, conv2d_transpose, conv3d,  # noqa: F401
                         depthwise_conv2d, dropout, embedding_lookup, fused_batch_norm, local_response_normalization,
                         max_pool1d, pool, separable_conv2d)

max_pool = max_pool2d
lrn = local_response_normalization
avg_pool = avg_pool2d

__all__ = [
    "avg_pool", "avg_pool2d", "conv2d", "log_softmax", "max_pool", "max_pool2d", "relu", "sigmoid", "softmax",
    "softmax_cross_entropy_with_logits", "softplus", "tanh",
    "avg_pool1d", "batch_normalization", "bias_add", "conv1d", "conv2d_transpose", "conv3d", "depth_to_space",
    "depthwise_conv2d", "dropout", "embedding_lookup", "fused_batch_norm", "local_response_normalization", "lrn",
    "max_pool1d", "pool", "separable_conv2d", "space_to_depth", "top_k",
]
