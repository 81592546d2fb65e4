"""Activations and losses of ``tf.nn`` (and ``tf.math``) composed of irgrad's ops, each with
TensorFlow's gradient: where TensorFlow registers a kernel gradient that differs from the
composition's derivative at a kink (relu6, selu at 0), the composition is chosen so that its
derivative is TensorFlow's there too; the tests compare both with TensorFlow 2.21's numbers."""
from __future__ import annotations

import math

from .. import dtypes
from ..framework import Tensor
from .array_ops import one_hot
from .core import convert_to_tensor, require
from .math_ops import (abs, add, cast, divide, erfc, exp, expm1, greater, greater_equal, less, less_equal, log, log1p,
                       logical_and, minimum, multiply, negative, pow, sigmoid, square, subtract, tanh, where)
from .nn_ops import log_softmax, relu, softplus
from .reduce_ops import reduce_sum


def _float(features, name: str) -> Tensor:
    x = convert_to_tensor(features)
    require(x, name, floating=True)
    return x


# ----- activations --------------------------------------------------------------------------

def relu6(features, name=None) -> Tensor:
    """``min(max(x, 0), 6)`` (``tf.nn.relu6``); integer tensors too.

    Gradient: TensorFlow's ``Relu6Grad``, ``ct`` where ``0 < x < 6`` and 0 elsewhere, at both
    kinks and at NaN: the composition ``minimum(6, relu(x))`` gives exactly that (``relu``'s
    gradient is 0 at 0 and NaN; ``minimum``'s tie at 6 goes to the constant).
    """
    x = convert_to_tensor(features)
    require(x, "relu6", numeric=True)
    return minimum(convert_to_tensor(6, x.dtype), relu(x), name=name or "Relu6")


def leaky_relu(features, alpha=0.2, name=None) -> Tensor:
    """``x`` where ``x > 0``, ``alpha * x`` elsewhere (``tf.nn.leaky_relu``); integer tensors are
    cast to float32 first, as TensorFlow.

    Gradient: TensorFlow's ``LeakyReluGrad``: ``ct`` where ``x > 0``, ``alpha * ct`` elsewhere
    (``alpha * ct`` at 0).
    """
    x = convert_to_tensor(features)
    require(x, "leaky_relu", numeric=True)
    if x.dtype.is_integer:
        x = cast(x, dtypes.float32)
    return where(greater(x, 0), x, multiply(x, convert_to_tensor(float(alpha), x.dtype)), name=name or "LeakyRelu")


def elu(features, name=None) -> Tensor:
    """``exp(x) - 1`` where ``x < 0``, ``x`` elsewhere (``tf.nn.elu``).

    Gradient: TensorFlow's ``EluGrad``: ``ct * (y + 1)`` where ``x < 0``, ``ct`` elsewhere (``ct``
    at 0). The negative branch sees ``min(x, 0)``, so a large ``x`` never makes ``0 * inf``.
    """
    x = _float(features, "elu")
    return where(less(x, 0), expm1(minimum(x, 0)), x, name=name or "Elu")


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(features, name=None) -> Tensor:
    """``scale * x`` where ``x > 0``, ``scale * alpha * (exp(x) - 1)`` elsewhere (``tf.nn.selu``),
    with ``alpha ≈ 1.6733`` and ``scale ≈ 1.0507``.

    Gradient: TensorFlow's ``SeluGrad``: ``ct * scale`` at 0 (the linear branch), ``ct * (y +
    scale * alpha)`` below.
    """
    x = _float(features, "selu")
    negative_branch = multiply(expm1(minimum(x, 0)), _SELU_SCALE * _SELU_ALPHA)
    return where(less(x, 0), negative_branch, multiply(x, _SELU_SCALE), name=name or "Selu")


def gelu(features, approximate=False, name=None) -> Tensor:
    """The Gaussian error linear unit (``tf.nn.gelu``): ``0.5 x erfc(-x / sqrt(2))``, or with
    ``approximate`` ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x**3)))``; TensorFlow's
    composition, so its gradient.

    Raises:
        ValueError: ``features`` not floating-point (TensorFlow's error too).
    """
    x = convert_to_tensor(features)
    if not x.dtype.is_floating:
        raise ValueError(f"gelu: `features.dtype` must be a floating point tensor, got {x.dtype.name}")
    name = name or "Gelu"
    # TensorFlow writes math_ops.cast(c, dtype) for these two: a float32 constant cast, so float64
    # sees the float32-rounded value (the only difference from the exact constant).
    cast_constant = lambda c: cast(convert_to_tensor(c, dtypes.float32), x.dtype)  # noqa: E731
    if approximate:
        inner = add(x, multiply(cast_constant(0.044715), pow(x, 3.0)))
        return multiply(multiply(x, 0.5), add(tanh(multiply(inner, 0.7978845608028654)), 1.0), name=name)
    return multiply(multiply(x, 0.5), erfc(multiply(negative(x), cast_constant(0.7071067811865476))), name=name)


def silu(features, beta=1.0, name=None) -> Tensor:
    """``x * sigmoid(beta * x)`` (``tf.nn.silu``, also ``tf.nn.swish``); ``beta`` a number or a
    scalar tensor.

    Gradient: TensorFlow's custom gradient, ``ct * s (1 + beta x (1 - s))`` for ``x`` and
    ``sum(ct * x**2 * s (1 - s))`` for a tensor ``beta`` (``s = sigmoid(beta x)``), the
    composition's derivative.
    """
    x = _float(features, "silu")
    beta = cast(beta, x.dtype) if isinstance(beta, Tensor) else convert_to_tensor(beta, x.dtype)
    return multiply(x, sigmoid(multiply(beta, x)), name=name or "silu")


swish = silu


def softsign(features, name=None) -> Tensor:
    """``x / (1 + |x|)`` (``tf.nn.softsign``, ``tf.math.softsign``).

    Gradient: ``ct / (1 + |x|)**2`` (TensorFlow's ``SoftsignGrad``; ``ct`` at 0).
    """
    x = _float(features, "softsign")
    return divide(x, add(abs(x), 1.0), name=name or "Softsign")


def log_sigmoid(x, name=None) -> Tensor:
    """``log(sigmoid(x)) = -softplus(-x)`` (``tf.math.log_sigmoid``), finite for large ``|x|``.

    Gradient: ``ct * sigmoid(-x)`` (softplus's).
    """
    x = _float(x, "log_sigmoid")
    return negative(softplus(negative(x)), name=name or "LogSigmoid")


# ----- losses -------------------------------------------------------------------------------

def sparse_softmax_cross_entropy_with_logits(labels=None, logits=None, name=None) -> Tensor:
    """``-log_softmax(logits)[..., labels]`` (``tf.nn.sparse_softmax_cross_entropy_with_logits``).

    Args:
        labels: int32/int64 class indices of shape ``logits.shape[:-1]``.
        logits: floating-point scores, classes along the last dimension.
        name: the op's name in the graph.

    Returns:
        The loss, of shape ``labels.shape``. A label outside ``[0, classes)`` gives NaN for its
        row (TensorFlow's GPU behaviour; its CPU kernel raises at run time, which a compiled
        module cannot).

    Raises:
        ValueError: ``labels``/``logits`` omitted, logits of rank 0, or shapes that do not match.
        TypeError: labels that are not integers.

    Gradient: ``ct * (softmax(logits) - one_hot(labels))`` for ``logits``; none for ``labels``.
    """
    if labels is None or logits is None:
        raise ValueError("sparse_softmax_cross_entropy_with_logits: pass both labels= and logits=")
    logits = _float(logits, "sparse_softmax_cross_entropy_with_logits")
    labels = convert_to_tensor(labels)
    if not labels.dtype.is_integer:
        raise TypeError(f"sparse_softmax_cross_entropy_with_logits: labels must be int32 or int64, got "
                        f"{labels.dtype.name}")
    if logits.ndim == 0 or tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"sparse_softmax_cross_entropy_with_logits: labels of shape {tuple(labels.shape)} need "
                         f"logits of shape labels.shape + [classes], got {tuple(logits.shape)}")
    classes = logits.shape[-1]
    picked = one_hot(labels, classes, dtype=logits.dtype)
    loss = negative(reduce_sum(multiply(picked, log_softmax(logits)), -1))
    valid = logical_and(greater_equal(labels, 0), less(labels, classes))
    return where(valid, loss, convert_to_tensor(float("nan"), logits.dtype),
                 name=name or "SparseSoftmaxCrossEntropyWithLogits")


def sigmoid_cross_entropy_with_logits(labels=None, logits=None, name=None) -> Tensor:
    """The logistic loss ``max(x, 0) - x * z + log(1 + exp(-|x|))`` of logits ``x`` and labels ``z``
    (``tf.nn.sigmoid_cross_entropy_with_logits``), TensorFlow's stable composition.

    Raises:
        ValueError: ``labels``/``logits`` omitted or of different shapes.

    Gradient: that of the composition (``sigmoid(x) - z`` for the logits; at ``x == 0`` the
    ``x >= 0`` branch, as TensorFlow), and ``-x`` for the labels.
    """
    if labels is None or logits is None:
        raise ValueError("sigmoid_cross_entropy_with_logits: pass both labels= and logits=")
    logits = _float(logits, "sigmoid_cross_entropy_with_logits")
    labels = convert_to_tensor(labels, logits.dtype)
    if tuple(labels.shape) != tuple(logits.shape):
        raise ValueError(f"logits and labels must have the same shape ({tuple(logits.shape)} vs "
                         f"{tuple(labels.shape)})")
    cond = greater_equal(logits, 0)
    relu_logits = where(cond, logits, 0.0)
    neg_abs_logits = where(cond, negative(logits), logits)
    return add(subtract(relu_logits, multiply(logits, labels)), log1p(exp(neg_abs_logits)),
               name=name or "logistic_loss")


def weighted_cross_entropy_with_logits(labels, logits, pos_weight, name=None) -> Tensor:
    """The logistic loss with the positive term weighted by ``pos_weight``
    (``tf.nn.weighted_cross_entropy_with_logits``): ``(1 - z) x + (1 + (q - 1) z) (log(1 +
    exp(-|x|)) + max(-x, 0))``, TensorFlow's composition.

    Raises:
        ValueError: labels and logits of different shapes.

    Gradient: that of the composition (``relu``'s and ``abs``'s 0 at ``x == 0``, as TensorFlow).
    """
    logits = _float(logits, "weighted_cross_entropy_with_logits")
    labels = convert_to_tensor(labels, logits.dtype)
    if tuple(labels.shape) != tuple(logits.shape):
        raise ValueError(f"logits and labels must have the same shape ({tuple(logits.shape)} vs "
                         f"{tuple(labels.shape)})")
    pos_weight = convert_to_tensor(pos_weight, logits.dtype)
    log_weight = add(multiply(subtract(pos_weight, 1.0), labels), 1.0)
    softplus_term = add(log1p(exp(negative(abs(logits)))), relu(negative(logits)))
    return add(multiply(subtract(1.0, labels), logits), multiply(log_weight, softplus_term),
               name=name or "logistic_loss")


def l2_loss(t, name=None) -> Tensor:
    """``sum(t ** 2) / 2`` (``tf.nn.l2_loss``), a scalar. Floating-point only.

    Gradient: ``ct * t`` (TensorFlow's ``_L2LossGrad``).
    """
    t = _float(t, "l2_loss")
    return multiply(reduce_sum(square(t)), 0.5, name=name or "L2Loss")


def log_poisson_loss(targets, log_input, compute_full_loss=False, name=None) -> Tensor:
    """The Poisson negative log-likelihood ``exp(c) - z * c`` of log-predictions ``c`` and
    targets ``z`` (``tf.nn.log_poisson_loss``); ``compute_full_loss`` adds Stirling's
    ``z log z - z + 0.5 log(2 pi z)`` where ``z > 1`` (0 for ``0 <= z <= 1``).

    Raises:
        ValueError: targets and log_input of different shapes.

    Gradient: that of TensorFlow's composition: ``exp(c) - z`` for ``c``; for ``z`` with the
    full loss, NaN at ``z == 0`` (``0 * log 0`` in the branch ``where`` leaves out, as
    TensorFlow).
    """
    log_input = _float(log_input, "log_poisson_loss")
    targets = convert_to_tensor(targets, log_input.dtype)
    if tuple(targets.shape) != tuple(log_input.shape):
        raise ValueError(f"log_input and targets must have the same shape ({tuple(log_input.shape)} vs "
                         f"{tuple(targets.shape)})")
    name = name or "log_poisson_loss"
    if not compute_full_loss:
        return subtract(exp(log_input), multiply(log_input, targets), name=name)
    result = subtract(exp(log_input), multiply(log_input, targets))
    stirling = add(subtract(multiply(targets, log(targets)), targets),
                   multiply(log(multiply(targets, 2 * math.pi)), 0.5))
    cond = logical_and(greater_equal(targets, 0), less_equal(targets, 1))
    return add(result, where(cond, 0.0, stirling), name=name)
