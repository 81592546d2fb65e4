"""Jacobians, Hessians and Hessian-vector products.

A Jacobian row is a vector-Jacobian product with a one-hot cotangent. irgrad
builds all rows in one ``stablehlo.while`` whose body holds a single backward
pass (the body reads the forward values from the enclosing function), so the
module's size does not depend on the number of rows and one compiled call
computes them all (TensorFlow builds Hessians with a ``while_loop`` of
``gradients`` calls the same way).
"""
from __future__ import annotations

from .framework import Tensor
from .gradients import UnconnectedGradients, as_list, graph_rule_lookup, source_tensor, unconnected_policy, gradients
from .ops.array_ops import reshape, stop_gradient, zeros
from .ops.core import convert_to_tensor, current_graph, emit
from .ops.math_ops import multiply
from .passes import backprop, hlo
from .passes.backprop import active_ops
from .passes.mlir import elem, ir, tensor_type


def connected(y: Tensor, x: Tensor) -> bool:
    """Whether ``y`` depends on ``x`` through floating-point values."""
    if y.value == x.value:
        return True
    if not isinstance(y.value, ir.OpResult):
        return False
    order = active_ops([y.value], {x.value}, set())
    return bool(order) and order[-1] == y.value.owner.operation  # the root finishes last


def vjp_rows(y: Tensor, x: Tensor, name: str = "jacobian", allow=None) -> Tensor:
    """``J[i] = d y.flat[i] / d x`` for every ``i``, shape ``y.shape + x.shape``, in one while loop."""
    graph = current_graph()
    n, m = y.shape.num_elements(), x.shape.num_elements()
    y_flat = reshape(y, [n])
    i32 = tensor_type([], "int32")
    if allow is not None and y_flat is not y:  # the flattening reshape is ours, not the user's
        flat_op, user_allow = y_flat.value.owner.operation, allow
        allow = lambda op: op == flat_op or user_allow(op)  # noqa: E731

    def build():
        zero_i = hlo.splat(0, i32)
        rows = hlo.zeros(tensor_type([n, m], elem(x.value)))
        loop, cond, body = hlo.while_([zero_i, rows])
        with ir.InsertionPoint(cond):
            hlo.return_([hlo.compare(cond.arguments[0], hlo.splat(n, i32), "LT")], "stablehlo.return")
        with ir.InsertionPoint(body), graph.in_block(body):
            i, acc = body.arguments
            index = hlo.iota([n], i32.element_type, 0)
            one_hot = hlo.compare(index, hlo.broadcast_in_dim(i, [n], []), "EQ")
            seed = hlo.select(one_hot, hlo.ones(y_flat.value.type), hlo.zeros(y_flat.value.type))
            (g,) = backprop([y_flat.value], [seed], [x.value], rule_for=graph_rule_lookup(graph), name=name,
                            allow=allow)
            row = hlo.reshape(g if g is not None else hlo.zeros(x.value.type), [1, m])
            acc = hlo.dynamic_update_slice(acc, row, [i, hlo.splat(0, i32)])
            hlo.return_([hlo.add(i, hlo.splat(1, i32)), acc], "stablehlo.return")
        return loop.results[1]

    rows = emit(name, build, graph)
    return reshape(rows, tuple(y.shape) + tuple(x.shape))


def jacobian(y, x, unconnected_gradients=UnconnectedGradients.NONE, name: str = "jacobian"):
    """``dy/dx`` of shape ``y.shape + x.shape`` (a list when ``x`` is a list)."""
    graph = current_graph()
    unconnected = unconnected_policy(unconnected_gradients)
    y = convert_to_tensor(y)
    single = not isinstance(x, (list, tuple))
    xs = [source_tensor(v, graph) for v in as_list(x)]
    out = [jacobian_one(y, v, unconnected, name) for v in xs]
    return out[0] if single else out


def jacobian_one(y: Tensor, x: Tensor, unconnected, name: str, allow=None):
    if not y.dtype.is_floating or not x.dtype.is_floating or not connected(y, x):
        if unconnected is UnconnectedGradients.ZERO:
            return zeros(tuple(y.shape) + tuple(x.shape), x.dtype)
        return None
    return vjp_rows(y, x, name, allow)


def hessians(ys, xs, gate_gradients: bool = False, aggregation_method=None, name: str = "hessians"):
    """For each ``x``: the Hessian of ``sum(ys)`` w.r.t. ``x``, of shape ``x.shape + x.shape``."""
    graph = current_graph()
    xs_list = [source_tensor(x, graph) for x in as_list(xs)]
    grads = gradients(ys, xs_list, gate_gradients=gate_gradients, aggregation_method=aggregation_method,
                      name=name)
    out = []
    for g, x in zip(grads, xs_list):
        out.append(None if g is None else jacobian_one(g, x, UnconnectedGradients.ZERO, name))
    return out


def hessian_vector_product(ys, xs, v):
    """``H v`` for ``H`` the Hessian of ``sum(ys)`` w.r.t. ``xs`` (TensorFlow's _hessian_vector_product)."""
    xs = as_list(xs)
    v = as_list(v)
    if len(v) != len(xs):
        raise ValueError("xs and v must have the same length.")
    grads = gradients(ys, xs)
    assert len(grads) == len(xs)
    products = [multiply(g, stop_gradient(convert_to_tensor(u, dtype=g.dtype)))
                for g, u in zip(grads, v) if g is not None]
    return gradients(products, xs)


