"""``ig.custom_gradient`` and ``ig.grad_pass_through``.

As in TensorFlow's graph mode, the forward computation is traced inline and
its outputs are rerouted through one op whose gradient is the user's: here a
``stablehlo.composite "irgrad.custom_gradient"`` (see ``passes/rules/composites.py``
for the IR convention). ``grad_fn`` is traced right away into the composite's
``grad`` function, whose arguments are the results' cotangents and the
composite's operands: the forward results, the inputs, the variables read by
``f`` and anything else ``grad_fn`` uses from the enclosing function. The
convention survives in saved modules, so ``irgrad grad`` applies the custom
gradient as well.
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence

from . import nest
from .framework import Graph, Tensor
from .ops.core import convert_to_tensor, current_graph, emit
from .passes.ir import hlo
from .passes.ir.mlir import ir
from .passes.rules.composites import CUSTOM_GRADIENT


def custom_gradient(f: Callable | None = None):
    """Decorator: ``f(*x)`` returns ``(y, grad_fn)``; ``grad_fn(*dy)`` gives one gradient per ``x``.

    When ``f`` reads ``ig.Variable``s, ``grad_fn(*dy, variables=...)`` must return
    ``(grad_xs, grad_vars)``.
    """
    if f is None:
        return custom_gradient

    @functools.wraps(f)
    def decorated(*args, **kwargs):
        graph = current_graph()
        xs = [convert_to_tensor(a) for a in nest.flatten(args)]
        read: list = []
        watch = lambda v: read.append(v) if v not in read else None  # noqa: E731
        graph.read_watchers.append(watch)
        try:
            result, grad_fn = f(*nest.pack_sequence_as(args, xs), **kwargs)
        finally:
            graph.read_watchers.remove(watch)
        variables = [v for v in read if v.trainable]
        return attach_gradient(graph, result, xs, variables, grad_fn, getattr(f, "__name__", "custom"))

    return decorated


def _accepts_variables(fn: Callable) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "variables" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def attach_gradient(graph: Graph, result, xs: Sequence[Tensor], variables: list, grad_fn: Callable,
                    name: str):
    """Reroute ``result`` through a custom-gradient composite whose gradient is ``grad_fn``."""
    ys = [convert_to_tensor(y) for y in nest.flatten(result)]
    if variables and not _accepts_variables(grad_fn):
        raise TypeError("If using @custom_gradient with a function that uses variables, then grad_fn must "
                        "accept a keyword argument 'variables'.")
    var_values = [v._as_graph_tensor(graph) for v in variables]
    operands = ys + list(xs) + var_values

    bwd = Graph(f"{name}_grad", parent=graph)
    outer_of: dict[ir.Value, ir.Value] = {}
    with bwd.as_default():
        upstream = [bwd.add_argument(y.shape, y.dtype, "upstream") for y in ys]
        for t in operands:
            inner = bwd.add_argument(t.shape, t.dtype, "operand")
            outer_of[inner.value] = t.value
            bwd.captures.setdefault(t.value, inner)
        out = grad_fn(*upstream, variables=variables) if variables else grad_fn(*upstream)
        if variables:
            grad_xs, grad_vars = out
        else:
            grad_xs, grad_vars = out, []
        grad_xs = _as_gradient_list(grad_xs, xs, "gradients")
        grad_vars = _as_gradient_list(grad_vars, var_values, "variable gradients")
        extra = []  # what grad_fn used from the enclosing function besides the operands
        for outer, inner in bwd.captures.items():
            if inner.value not in outer_of:
                outer_of[inner.value] = outer
                extra.append(inner)
        zeros = lambda ts: [hlo.zeros(t.value.type) for t in ts]  # noqa: E731
        with bwd.op_scope("grad_outputs"):
            results = zeros(ys) + [_grad_value(g, x) for g, x in zip(grad_xs + grad_vars, list(xs) + var_values)]
            results += zeros(extra)
        bwd.finish(results)

    all_operands = [outer_of[a] for a in list(bwd.entry_block.arguments)[len(ys):]]
    fwd = graph.private_function(f"{bwd.name}_fwd", lambda fname: _identity_prefix(
        fname, [v.type for v in all_operands], len(ys)))
    new_ys = emit(name, lambda: hlo.composite(
        CUSTOM_GRADIENT, all_operands, [y.value.type for y in ys], fwd,
        {"grad": ir.FlatSymbolRefAttr.get(bwd.name)}), graph=graph)
    return nest.pack_sequence_as(result, new_ys)


def _identity_prefix(name: str, types: list[ir.Type], n: int) -> None:
    """``@name(o...) -> (o_0..o_{n-1})``: the custom-gradient composite's decomposition."""
    _, block = hlo.func(name, types, types[:n], private=True)
    with ir.InsertionPoint(block):
        hlo.return_(list(block.arguments)[:n])


def _as_gradient_list(grads, targets: Sequence[Tensor], what: str) -> list:
    if grads is None:
        grads = [None] * len(targets)
    elif isinstance(grads, (list, tuple)):
        grads = list(grads)
    else:
        grads = [grads]
    if len(grads) != len(targets):
        raise ValueError(f"custom_gradient function expected to return {len(targets)} {what}, "
                         f"but returned {len(grads)} instead.")
    return grads


def _grad_value(g, x: Tensor) -> ir.Value:
    if g is None:
        return hlo.zeros(x.value.type)
    t = convert_to_tensor(g, x.dtype)
    if tuple(t.shape) != tuple(x.shape):
        raise ValueError(f"custom gradient of shape {tuple(t.shape)} for an input of shape {tuple(x.shape)}")
    return t.value


def grad_pass_through(f: Callable) -> Callable:
    """``f``'s value with an identity gradient: TensorFlow's ``tf.grad_pass_through``.

    The wrapped function computes ``f(*args)``, but its gradient is the upstream gradient,
    passed unchanged to the inputs: a straight-through estimator for a step that has no useful
    gradient (rounding, quantization, a sampled value). It is an ``ig.custom_gradient`` whose
    gradient returns ``dy``, so it survives into exported modules. Variables read by ``f`` get
    zero gradient.

    Args:
        f: a function of tensors returning one output per input, each of its input's shape and
            dtype. Usable as a decorator.

    Returns:
        The wrapped function. Calling it raises ``ValueError`` when ``f``'s outputs do not match
        its inputs in number, shape or dtype.

    Example (inside ``@ig.function``)::

        round_st = ig.grad_pass_through(ig.round)
        dx = ig.gradients(ig.reduce_sum(round_st(x) * 3.0), x)    # [3.0, ...], not zeros
    """
    @custom_gradient
    def _pass_through(*args, **kwargs):
        def grad(*dys, variables=None):
            if variables:
                return list(dys), [None] * len(variables)
            return list(dys)
        return f(*args, **kwargs), grad

    return functools.wraps(f)(_pass_through)
