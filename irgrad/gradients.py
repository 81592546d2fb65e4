"""``ig.gradients`` and friends: TensorFlow's graph-gradient API over the reverse-mode pass.

The gradient ops are built by :func:`irgrad.passes.backprop` directly in the
current graph's block, so the results are ordinary tensors (they can be
returned, combined, and differentiated again).
"""
from __future__ import annotations

import enum
import functools
from typing import Any
from collections.abc import Callable

from . import dtypes
from . import nest
from .custom_gradient import attach_gradient, custom_gradient
from .framework import Graph, Tensor
from .ops.array_ops import ones_like, stop_gradient
from .ops.core import convert_to_tensor, current_graph, emit
from .passes import backprop
from .passes.ir import hlo
from .passes.ir.mlir import context, dtype_name, elem, ir
from .passes.transforms.registry import RULES, NONDIFFERENTIABLE


class UnconnectedGradients(str, enum.Enum):
    """What a gradient is for a source the target does not depend on: TensorFlow's ``tf.UnconnectedGradients``.

    ``NONE`` (``"none"``, the default) gives ``None``; ``ZERO`` (``"zero"``) gives zeros of the
    source's shape and dtype. A string enum: the plain strings are accepted too. Taken by
    ``ig.gradients``, ``GradientTape.gradient`` / ``jacobian`` / ``batch_jacobian``,
    ``ig.jacobian`` and ``ForwardAccumulator.jvp``; any other value raises ``ValueError``.
    Integer sources, and sources reached only through integer values, count as unconnected.
    """

    NONE = "none"
    ZERO = "zero"


class AggregationMethod:
    """How the gradient contributions to one tensor are summed: TensorFlow's ``tf.AggregationMethod``.

    Pass one as ``aggregation_method`` to ``ig.gradients`` or ``ig.hessians``. ``ADD_N`` (0,
    also ``DEFAULT``; ``None`` means the same) adds the contributions in one chain;
    ``EXPERIMENTAL_TREE`` (1) adds them pairwise as a tree; ``EXPERIMENTAL_ACCUMULATE_N`` (2) is
    accepted and treated as ``ADD_N``. The choice changes the order of float additions, not the
    math. Any other value raises ``ValueError``.
    """

    ADD_N = 0
    DEFAULT = ADD_N
    EXPERIMENTAL_TREE = 1
    EXPERIMENTAL_ACCUMULATE_N = 2


_AGGREGATIONS = {AggregationMethod.ADD_N: "add_n", AggregationMethod.EXPERIMENTAL_TREE: "tree",
                 AggregationMethod.EXPERIMENTAL_ACCUMULATE_N: "add_n"}


def unconnected_policy(value) -> UnconnectedGradients:
    try:
        return UnconnectedGradients(value)
    except ValueError:
        raise ValueError(f"Unknown value for unconnected_gradients: {value!r}. Accepted: "
                         "UnconnectedGradients.NONE ('none') and UnconnectedGradients.ZERO ('zero')") from None


def _aggregation(value) -> str:
    if value is None:
        return "add_n"
    if isinstance(value, bool) or value not in _AGGREGATIONS:
        raise ValueError(f"Invalid aggregation_method specified {value!r}. Accepted: "
                         "AggregationMethod.ADD_N (0), DEFAULT (0), EXPERIMENTAL_TREE (1), "
                         "EXPERIMENTAL_ACCUMULATE_N (2), or None")
    return _AGGREGATIONS[value]


def as_list(x) -> list:
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


# ----- user gradient functions -----------------------------------------------------------

_USER_GRADIENTS: dict[str, Callable | None] = {}


class RegisterGradient:
    """Decorator registering a gradient function under a name: TensorFlow's ``tf.RegisterGradient``.

    ``fn(op, *grads)`` gets the ``ig.Operation`` (``op.inputs``, ``op.outputs``,
    ``op.get_attr``) and one upstream gradient per output, and returns one gradient per input
    (a tensor or value, converted to the input's dtype; a list for several; ``None`` for none).
    irgrad's built-in StableHLO rules cannot be replaced: register a new name and route ops to it
    with ``graph.gradient_override_map({"stablehlo.sine": "MyName"})``, as in TensorFlow.
    Registration is global for the process.

    Args:
        op_type: the name; a StableHLO op name (``"stablehlo.all_reduce"``) applies to every op
            of that type (one without a built-in rule).

    Raises:
        TypeError: ``op_type`` is not a string.
        KeyError: (when decorating) the name is already registered, or is a StableHLO op that
            irgrad already differentiates or marks non-differentiable.
        ValueError: ``fn`` returned a wrong number of gradients (raised when it is traced).

    Example (in a traced function)::

        @ig.RegisterGradient("ClippedSin")
        def _clipped_sin_grad(op, dy):
            return ig.clip_by_value(dy * ig.cos(op.inputs[0]), -1.0, 1.0)

        with ig.get_default_graph().gradient_override_map({"stablehlo.sine": "ClippedSin"}):
            y = ig.sin(x)                       # ig.gradients(y, x) uses _clipped_sin_grad
    """

    def __init__(self, op_type: str):
        if not isinstance(op_type, str):
            raise TypeError(f"op_type must be a string, got {type(op_type).__name__}")
        self._op_type = op_type

    def __call__(self, fn: Callable) -> Callable:
        name = self._op_type
        if name in _USER_GRADIENTS or name in RULES or name in NONDIFFERENTIABLE:
            raise KeyError(f"Registering two gradient with name '{name}'!")
        _USER_GRADIENTS[name] = fn
        return fn


def no_gradient(op_type: str) -> None:
    """Declare that ops of ``op_type`` have no gradient: TensorFlow's ``tf.no_gradient`` (``NotDifferentiable``).

    Gradients then stop at these ops: their inputs get no contribution through them (``None``,
    or zeros with ``unconnected_gradients="zero"``), instead of a ``LookupError`` for an op with
    no rule. ``op_type`` is a StableHLO op name (``"stablehlo.all_reduce"``) or a name used in
    ``gradient_override_map``. It takes precedence over irgrad's built-in rule for that type in
    ``ig.gradients`` and tapes, for the whole process (``ig.stop_gradient`` marks one tensor
    instead). ``ig.NotDifferentiable`` is the same function.

    Raises:
        TypeError: ``op_type`` is not a string.
        KeyError: ``op_type`` already has a gradient from ``ig.RegisterGradient`` or ``no_gradient``.
    """
    if not isinstance(op_type, str):
        raise TypeError(f"op_type must be a string, got {type(op_type).__name__}")
    if op_type in _USER_GRADIENTS:
        raise KeyError(f"Registering two gradient with name '{op_type}'!")
    _USER_GRADIENTS[op_type] = None


NotDifferentiable = no_gradient


def express_gradient(graph: Graph, op: ir.Operation, name: str) -> list[ir.Value] | None:
    """``op``'s results rerouted through an ``irgrad.custom_gradient`` composite whose gradient
    is the function registered under ``name`` (traced now), or ``irgrad.stop_gradient`` when
    ``name`` is registered as having none (``ig.no_gradient``),
    so that the choice is in the IR and exported modules differentiate as ``ig.gradients``
    does. None when nothing is registered under ``name`` yet: the name is then looked up when
    a gradient is taken (``graph_rule_lookup``), as TensorFlow does."""
    if name not in _USER_GRADIENTS:
        return None
    fn = _USER_GRADIENTS[name]
    ys = [Tensor(r, graph) for r in op.results]
    if fn is None:  # no gradient: said the one way the IR says it
        return [stop_gradient(y).value for y in ys]
    wrapped = graph.wrap_op(op)
    xs = [Tensor(v, graph) for v in op.operands]

    def grad_fn(*dys):
        out = fn(wrapped, *dys)
        out = as_list(out) if out is not None else [None]
        if len(out) != len(xs):
            raise ValueError(f"gradient function {name!r} for '{op.name}' returned {len(out)} gradients, "
                             f"expected {len(xs)} (one per input)")
        return out

    return [t.value for t in attach_gradient(graph, ys, xs, [], grad_fn, name.replace(".", "_"))]


Graph.express_gradient = staticmethod(express_gradient)

def _no_gradient_rule(op, cts):
    return (None,) * len(op.operands)


def _user_rule(graph, fn: Callable):
    """Adapt ``fn(op, *grads)`` (irgrad tensors) to the pass's rule shape (MLIR values)."""
    def rule(op: ir.Operation, cts):
        grads = [Tensor(ct if ct is not None else hlo.zeros(r.type), graph) for ct, r in zip(cts, op.results)]
        with graph.as_default(), graph.in_block(graph.block):
            out = fn(graph.wrap_op(op), *grads)
        out = as_list(out) if out is not None else [None]
        if len(out) != len(op.operands):
            raise ValueError(f"gradient function for '{op.name}' returned {len(out)} gradients, expected "
                             f"{len(op.operands)} (one per input)")
        values = []
        for g, x in zip(out, op.operands):
            values.append(None if g is None else convert_to_tensor(g, dtypes.as_dtype(_dtype(x))).value)
        return values
    return rule


def _dtype(v: ir.Value) -> str:
    return dtype_name(elem(v))


def graph_rule_lookup(graph) -> Callable[[ir.Operation], Any]:
    def rule_for(op: ir.Operation):
        override = graph.op_gradient_names.get(op)
        if override is not None:
            if override not in _USER_GRADIENTS:
                raise LookupError(f"No gradient defined for operation '{graph.wrap_op(op).name}' "
                                  f"(op type: {op.name}): gradient_override_map names {override!r}, "
                                  "which nothing registered")
            fn = _USER_GRADIENTS[override]
        elif op.name in _USER_GRADIENTS:
            fn = _USER_GRADIENTS[op.name]
        else:
            return None
        return _no_gradient_rule if fn is None else _user_rule(graph, fn)
    return rule_for


# ----- gradients ----------------------------------------------------------------------------

def gradients(ys, xs, grad_ys=None, name: str = "gradients", gate_gradients: bool = False,
              aggregation_method=None, stop_gradients=None,
              unconnected_gradients=UnconnectedGradients.NONE) -> list[Tensor | None]:
    """Symbolic ``sum(dy/dx)`` over ``ys`` for each ``x`` in ``xs``: TensorFlow's ``tf.gradients``.

    Returns a list of ``len(xs)`` tensors (``None`` for an ``x`` no ``y`` depends on, zeros with
    ``unconnected_gradients="zero"``). ``grad_ys`` seeds each ``y`` (ones when ``None``: a
    vector-Jacobian product otherwise); ``stop_gradients`` holds tensors constant for this call;
    ``aggregation_method`` is an ``ig.AggregationMethod``. Integer tensors are constants. The
    result is part of the graph, so gradients of gradients work. Raises ``LookupError`` naming
    the op type when an op on the path has no gradient, ``ValueError`` for a ``grad_ys`` of the
    wrong length or shape or an unknown option, ``TypeError`` for a ``grad_ys`` of another dtype
    than its ``y``, ``RuntimeError`` outside ``ig.function`` or a graph.

    Example (inside ``@ig.function``)::

        y = ig.reduce_sum(ig.tanh(x @ w))
        dx, dw = ig.gradients(y, [x, w])
    """
    graph = current_graph()
    unconnected = unconnected_policy(unconnected_gradients)
    aggregation = _aggregation(aggregation_method)
    ys = [convert_to_tensor(y) for y in as_list(ys)]
    xs = [source_tensor(x, graph) for x in as_list(xs)]
    seeds = seed_tensors(ys, grad_ys)
    stop = [t.value.owner.operation for t in (source_tensor(s, graph) for s in as_list(stop_gradients or []))
            if isinstance(t.value, ir.OpResult)]
    return compute_gradients(graph, ys, xs, seeds, name=name, gate=gate_gradients, aggregation=aggregation,
                             stop=stop, unconnected=unconnected)


def compute_gradients(graph, ys: list[Tensor], xs: list[Tensor], seeds: list[Tensor | None], *,
                      name: str = "gradients", gate: bool = False, aggregation: str = "add_n",
                      stop=(), unconnected=UnconnectedGradients.NONE, allow=None) -> list[Tensor | None]:
    """Run the reverse-mode driver in ``graph``'s current block (arguments already checked)."""
    scope = graph.unique_name(name or "gradients")
    with context(), ir.InsertionPoint(graph.block), ir.Location.name(scope):
        grads = backprop([y.value for y in ys], [s.value if s is not None else None for s in seeds],
                         [x.value for x in xs], stop=stop, rule_for=graph_rule_lookup(graph),
                         aggregation=aggregation, gate=gate, name=scope, allow=allow)
        if unconnected is UnconnectedGradients.ZERO:
            grads = [g if g is not None else hlo.zeros(x.value.type) for g, x in zip(grads, xs)]
    return [None if g is None else Tensor(g, graph) for g in grads]


def source_tensor(x, graph) -> Tensor:
    """The tensor a source stands for (a variable: the argument its reads use)."""
    if isinstance(x, Tensor):
        if x.graph is not graph:
            raise ValueError(f"tensor {x.name!r} is not in the current graph")
        return x
    reads = getattr(x, "_as_graph_tensor", None)
    if reads is not None:
        read = graph.variable_reads.get(x)
        return read if read is not None else reads(graph)
    raise TypeError(f"gradients: expected tensors or variables, got {type(x).__name__} {x!r}")


def seed_tensors(ys: list[Tensor], grad_ys) -> list[Tensor | None]:
    if grad_ys is None:
        grad_ys = [None] * len(ys)
    else:
        grad_ys = as_list(grad_ys)
    if len(grad_ys) != len(ys):
        raise ValueError(f"Passed {len(grad_ys)} grad_ys for {len(ys)} ys")
    seeds = []
    for i, (y, g) in enumerate(zip(ys, grad_ys)):
        if g is None:
            if not y.dtype.is_floating:
                seeds.append(None)  # integer ys are constants: nothing to differentiate
                continue
            seeds.append(ones_like(y, name="grad_ys"))
            continue
        if isinstance(g, Tensor):
            if g.dtype != y.dtype:
                raise TypeError(f"grad_ys[{i}] has dtype {g.dtype.name}, but ys[{i}] ({y.name!r}) has "
                                f"dtype {y.dtype.name}; they must match")
        else:
            try:
                g = convert_to_tensor(g, y.dtype, name="grad_ys")
            except (TypeError, ValueError):
                raise TypeError(f"grad_ys[{i}] cannot be converted to ys[{i}]'s dtype {y.dtype.name}") from None
        if tuple(g.shape) != tuple(y.shape):
            raise ValueError(f"grad_ys[{i}] has shape {tuple(g.shape)}, but ys[{i}] ({y.name!r}) has shape "
                             f"{tuple(y.shape)}; they must match")
        seeds.append(g if y.dtype.is_floating else None)
    return seeds


# ----- recompute_grad -----------------------------------------------------------------------

def recompute_grad(f: Callable) -> Callable:
    """``f`` whose intermediate values are recomputed in the backward pass instead of kept
    (``tf.recompute_grad``): the gradient runs ``f`` again from its inputs and differentiates
    that run. The recomputation reads its inputs through an optimization barrier that also
    takes the upstream cotangents, as TensorFlow makes it depend on them: the compiler can
    neither merge it with the forward run nor schedule it before the backward pass reaches
    it. Inside a loop body, the loop's reverse pass records ``f``'s inputs only.
    ``f`` may read variables (``ig.Variable``); their gradients are returned too."""
    @custom_gradient
    def recomputed(*args, **kwargs):
        def grad(*upstream, variables=None):
            inputs = [convert_to_tensor(a) for a in nest.flatten(args)]
            fenced = emit("recompute_grad", lambda: hlo.optimization_barrier(
                [t.value for t in inputs + list(upstream)]))[:len(inputs)]
            again = nest.flatten(f(*nest.pack_sequence_as(args, fenced), **kwargs))
            variables = list(variables or [])
            grads = gradients(again, fenced + variables, grad_ys=list(upstream),
                              unconnected_gradients=UnconnectedGradients.ZERO)
            if variables:
                return grads[:len(fenced)], grads[len(fenced):]
            return grads
        return f(*args, **kwargs), grad

    return functools.wraps(f)(recomputed)


__all__ = ["gradients", "recompute_grad", "UnconnectedGradients", "AggregationMethod", "RegisterGradient",
           "no_gradient", "NotDifferentiable"]
