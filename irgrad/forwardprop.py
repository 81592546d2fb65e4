"""``ig.ForwardAccumulator``: TensorFlow's ``tf.autodiff.ForwardAccumulator`` over the graph.

The accumulator records the ops built inside its ``with`` block (as a ``GradientTape``
does); ``acc.jvp(target)`` runs the forward-mode driver (``passes.transforms.forward.jvp``) from the
watched primals through the recorded ops to ``target``. The tangent ops are ordinary graph
ops, so tapes and ``ig.gradients`` differentiate them (reverse-over-forward) and an
accumulator differentiates gradients built inside it (forward-over-reverse: Hessian-vector
products).
"""
from __future__ import annotations

from . import nest
from .framework import Tensor
from .gradients import UnconnectedGradients, source_tensor, unconnected_policy
from .ops.core import convert_to_tensor, current_graph
from .passes.ir import hlo
from .passes.transforms.forward import jvp as forward_jvp
from .passes.ir.mlir import context, ir
from .tape import Recording

class ForwardAccumulator:
    """Forward-mode differentiation: TensorFlow's ``tf.autodiff.ForwardAccumulator``.

    Create it inside a traced function or graph, enter it, and build the computation in its
    ``with`` block; ``acc.jvp(y)`` then gives ``y``'s tangent, the Jacobian-vector product of
    ``y`` along ``tangents`` at ``primals``, through the ops recorded in the block. The tangent
    ops are ordinary graph ops: tapes and ``ig.gradients`` differentiate them
    (reverse over forward), and an accumulator around a tape gives Hessian-vector products
    (forward over reverse).

    Args:
        primals: tensors or variables (``ig.Variable``), any nested structure; floating-point only.
        tangents: the direction, in the structure of ``primals``, each of its primal's shape
            (values are converted to the primal's dtype).

    Raises:
        ValueError: ``tangents`` of another structure or shape, an integer primal, or a primal
            given twice.
        RuntimeError: created outside a traced function or graph.

    Example (inside ``@ig.function``; forward over reverse)::

        with ig.ForwardAccumulator(x, v) as acc:
            with ig.GradientTape() as tape:
                tape.watch(x)
                y = ig.reduce_sum(ig.sin(x) ** 2)
            g = tape.gradient(y, x)
        hvp = acc.jvp(g)                      # H v, without building H
    """

    def __init__(self, primals, tangents):
        graph = current_graph()
        flat_primals, flat_tangents = nest.flatten(primals), nest.flatten(tangents)
        if len(flat_primals) != len(flat_tangents):
            raise ValueError(f"ForwardAccumulator: {len(flat_primals)} primals but {len(flat_tangents)} tangents; "
                             "tangents must have the structure of primals")
        self._graph = graph
        self._tangents: dict[ir.Value, ir.Value] = {}
        for primal, tangent in zip(flat_primals, flat_tangents):
            p = source_tensor(primal, graph)
            if p.value in self._tangents:
                raise ValueError(f"ForwardAccumulator: {p.name!r} is specified more than once in primals")
            if not p.dtype.is_floating:
                raise ValueError(f"ForwardAccumulator: primal {p.name!r} has dtype {p.dtype.name}; "
                                 "only floating-point tensors have tangents")
            t = convert_to_tensor(tangent, dtype=p.dtype)
            if tuple(t.shape) != tuple(p.shape):
                raise ValueError(f"ForwardAccumulator: tangent shape {tuple(t.shape)} does not match "
                                 f"primal {p.name!r}'s shape {tuple(p.shape)}")
            self._tangents[p.value] = t.value
        self._recording = Recording(graph.block)

    def __enter__(self) -> ForwardAccumulator:
        self._recording.start()
        return self

    def __exit__(self, *exc) -> None:
        self._recording.stop()

    def jvp(self, primals, unconnected_gradients=UnconnectedGradients.NONE):
        """The tangents of ``primals`` (a tensor or nested structure): ``None`` for a value the
        watched primals do not reach through recorded ops, or zeros with ``"zero"``."""
        unconnected = unconnected_policy(unconnected_gradients)
        flat = [convert_to_tensor(t) for t in nest.flatten(primals)]
        xs = list(self._tangents)
        with context(), ir.InsertionPoint(self._graph.block), ir.Location.name(self._graph.unique_name("jvp")):
            out = forward_jvp([t.value for t in flat], xs, [self._tangents[x] for x in xs],
                              allow=self._recording.predicate())
            if unconnected is UnconnectedGradients.ZERO:
                out = [o if o is not None or not t.dtype.is_floating else hlo.zeros(t.value.type)
                       for o, t in zip(out, flat)]
        tangents = [None if o is None else Tensor(o, self._graph) for o in out]
        return nest.pack_sequence_as(primals, tangents)
