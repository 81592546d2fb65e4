"""Jacobians, Hessians and Hessian-vector products.

A Jacobian row is a vector-Jacobian product with a one-hot cotangent. irgrad
builds one backward pass seeded by a row and batches it over the rows of the
identity (:mod:`irgrad.passes.transforms.batching`, TensorFlow's ``pfor``), so every row
comes out of one vectorized computation and the module's size does not depend
on the number of rows. Where an op has no batching rule the same backward pass
runs in a ``stablehlo.while`` over the rows instead (TensorFlow's ``while_loop``
fallback). A Hessian is the Jacobian of the gradient: reverse over reverse.
"""
from __future__ import annotations

import numpy as np

from .framework import Tensor
from .gradients import UnconnectedGradients, as_list, graph_rule_lookup, source_tensor, unconnected_policy, gradients
from .ops.array_ops import reshape, stop_gradient, zeros
from .ops.core import convert_to_tensor, current_graph, emit
from .ops.math_ops import multiply
from .passes import backprop
from .passes.ir import hlo
from .passes.transforms.backprop import active_ops
from .passes.transforms.batching import identity, jacobian_rows
from .passes.ir.mlir import elem, ir


def connected(y: Tensor, x: Tensor) -> bool:
    """Whether ``y`` depends on ``x`` through floating-point values."""
    if y.value == x.value:
        return True
    if not isinstance(y.value, ir.OpResult):
        return False
    order = active_ops([y.value], {x.value}, set())
    return bool(order) and order[-1] == y.value.owner.operation  # the root finishes last


def vjp_rows(y: Tensor, x: Tensor, name: str = "jacobian", allow=None, vectorize: bool = True) -> Tensor:
    """``J[i] = d y.flat[i] / d x`` for every ``i``, shape ``y.shape + x.shape``: one backward
    pass seeded with a one-hot row, batched over the rows of the identity (a ``while`` loop
    over the rows when an op has no batching rule, or ``vectorize=False``)."""
    graph = current_graph()
    n = y.shape.num_elements()
    y_flat = reshape(y, [n])
    if allow is not None and y_flat is not y:  # the flattening reshape is ours, not the user's
        flat_op, user_allow = y_flat.value.owner.operation, allow
        allow = lambda op: op == flat_op or user_allow(op)  # noqa: E731

    vjp = _backward(graph, y_flat, x, name, allow)
    rows = emit(name, lambda: jacobian_rows(identity(n, elem(y_flat.value)), x.value, vjp, vectorize), graph)
    return reshape(rows, tuple(y.shape) + tuple(x.shape))


def _backward(graph, y: Tensor, x: Tensor, name: str, allow):
    """``seed ↦ d <y, seed> / d x``: one backward pass, emitted where it is called."""
    def vjp(seed: ir.Value) -> ir.Value | None:
        with graph.in_block(ir.InsertionPoint.current.block):
            return backprop([y.value], [seed], [x.value], rule_for=graph_rule_lookup(graph), name=name,
                            allow=allow)[0]
    return vjp


def jacobian(y, x, unconnected_gradients=UnconnectedGradients.NONE, name: str = "jacobian"):
    """The full Jacobian ``dy/dx`` without a tape: ``GradientTape.jacobian``'s result, as
    TensorFlow's ``parallel_for.gradients.jacobian``.

    Entry ``J[i..., j...]`` is ``d y[i...] / d x[j...]``. irgrad builds one backward pass seeded
    with a one-hot row and batches it over the rows of the identity, so every row comes out of
    one vectorized computation and the module's size does not grow with ``y``'s size; where an
    op has no batching rule the same pass runs in a ``while`` loop over the rows.

    Args:
        y: the tensor to differentiate (any shape).
        x: a tensor or ``ig.Variable``, or a list of them.
        unconnected_gradients: ``"none"`` or ``"zero"`` (``ig.UnconnectedGradients``): what an
            ``x`` that ``y`` does not depend on through floating-point values gets.

    Returns:
        A tensor of shape ``y.shape + x.shape`` (a list of them when ``x`` is a list), or ``None``
        for an unconnected ``x`` (zeros with ``"zero"``). Integer ``y`` or ``x`` are unconnected.

    Example (inside ``@ig.function``)::

        J = ig.jacobian(ig.sin(x) * 2.0, x)    # x of shape [3]: J = diag(2 cos x), shape [3, 3]
    """
    graph = current_graph()
    unconnected = unconnected_policy(unconnected_gradients)
    y = convert_to_tensor(y)
    single = not isinstance(x, (list, tuple))
    xs = [source_tensor(v, graph) for v in as_list(x)]
    out = [jacobian_one(y, v, unconnected, name) for v in xs]
    return out[0] if single else out


def jacobian_one(y: Tensor, x: Tensor, unconnected, name: str, allow=None, vectorize: bool = True):
    if not y.dtype.is_floating or not x.dtype.is_floating or not connected(y, x):
        if unconnected is UnconnectedGradients.ZERO:
            return zeros(tuple(y.shape) + tuple(x.shape), x.dtype)
        return None
    return vjp_rows(y, x, name, allow, vectorize)


def batch_jacobian_one(y: Tensor, x: Tensor, unconnected, name: str, allow=None, vectorize: bool = True):
    """``J[b, i...] = d y[b, i...] / d x[b]``, shape ``y.shape + x.shape[1:]``: rows seeded
    with the same one-hot on every example (the examples assumed independent, as in TF)."""
    if not y.dtype.is_floating or not x.dtype.is_floating or not connected(y, x):
        if unconnected is UnconnectedGradients.ZERO:
            return zeros(tuple(y.shape) + tuple(x.shape)[1:], x.dtype)
        return None
    graph = current_graph()
    batch, rest_y, rest_x = y.shape[0], tuple(y.shape)[1:], tuple(x.shape)[1:]
    k = int(np.prod(rest_y, dtype=np.int64))

    vjp = _backward(graph, y, x, name, allow)

    def build():
        eye = hlo.reshape(identity(k, elem(y.value)), [k, *rest_y])
        seeds = hlo.broadcast_in_dim(eye, [k, *y.shape], [0, *range(2, len(y.shape) + 1)])
        rows = jacobian_rows(seeds, x.value, vjp, vectorize)  # [k, batch, *rest_x]
        rows = hlo.transpose(rows, [1, 0, *range(2, len(x.shape) + 1)])
        return hlo.reshape(rows, [batch, *rest_y, *rest_x])

    return emit(name, build, graph)


def hessians(ys, xs, gate_gradients: bool = False, aggregation_method=None, name: str = "hessians"):
    """The Hessian of ``sum(ys)`` with respect to each ``x``: TensorFlow's ``tf.hessians``.

    Computed reverse over reverse: ``ig.gradients(ys, xs)``, then the Jacobian of each gradient
    with respect to its ``x`` (one vectorized backward pass, as ``ig.jacobian``). Only second
    derivatives of one ``x`` with itself are built, not the cross terms between two ``xs``.

    Args:
        ys: a tensor or list of tensors; their elements are summed.
        xs: a tensor or ``ig.Variable``, or a list of them.
        gate_gradients: as ``ig.gradients``.
        aggregation_method: as ``ig.gradients`` (an ``ig.AggregationMethod``).
        name: the prefix of the ops' names in the graph.

    Returns:
        A list with one tensor of shape ``x.shape + x.shape`` per ``x`` (a list even for one
        ``x``, as TensorFlow), ``None`` for an ``x`` the ``ys`` do not depend on. Raises as
        ``ig.gradients`` does.

    Example (inside ``@ig.function``)::

        (H,) = ig.hessians(ig.reduce_sum(x ** 3), x)   # diag(6 * x)
    """
    graph = current_graph()
    xs_list = [source_tensor(x, graph) for x in as_list(xs)]
    grads = gradients(ys, xs_list, gate_gradients=gate_gradients, aggregation_method=aggregation_method,
                      name=name)
    out = []
    for g, x in zip(grads, xs_list):
        out.append(None if g is None else jacobian_one(g, x, UnconnectedGradients.ZERO, name))
    return out


def hessian_vector_product(ys, xs, v):
    """``H v`` for ``H`` the Hessian of ``sum(ys)`` with respect to ``xs``, without building ``H``:
    TensorFlow's ``_hessian_vector_product``.

    Reverse over reverse: the gradient of ``<ig.gradients(ys, xs), v>`` with respect to ``xs``,
    with ``v`` held constant. It costs about two gradients, whatever the size of ``xs``.
    (Forward over reverse, with ``ig.ForwardAccumulator``, gives the same product.)

    Args:
        ys: a tensor or list of tensors; their elements are summed.
        xs: a tensor or list of tensors (or ``ig.Variable``).
        v: one vector per ``x``, of its shape, converted to its dtype (a tensor or a value).

    Returns:
        A list of ``len(xs)`` tensors, each of its ``x``'s shape (``None`` for an ``x`` the
        ``ys`` do not depend on).

    Raises:
        ValueError: ``v`` and ``xs`` have different lengths.
    """
    xs = as_list(xs)
    v = as_list(v)
    if len(v) != len(xs):
        raise ValueError("xs and v must have the same length.")
    grads = gradients(ys, xs)
    assert len(grads) == len(xs)
    products = [multiply(g, stop_gradient(convert_to_tensor(u, dtype=g.dtype)))
                for g, u in zip(grads, v) if g is not None]
    return gradients(products, xs)


