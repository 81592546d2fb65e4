"""``ig.GradientTape`` inside traced functions.

Everything is a graph here, so a tape is a record of *where* it was
recording: the ranges of ops appended to the current block while it was
active. ``gradient`` runs the reverse-mode driver restricted to those ops,
from sources that were watched (``watch``, or trainable variables read while
recording).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from . import nest
from .framework import Tensor
from .gradients import UnconnectedGradients, seed_tensors, source_tensor, unconnected_policy, compute_gradients
from .higher_order import batch_jacobian_one, jacobian_one
from .ops.array_ops import zeros, zeros_like
from .ops.core import convert_to_tensor, current_graph
from .passes.transforms.backprop import active_ops
from .passes.ir.mlir import ir
from .variables import Variable


class Recording:
    """The ops appended to one block during start/stop ranges: what a ``GradientTape`` and a
    ``ForwardAccumulator`` record."""

    def __init__(self, block: ir.Block | None = None):
        self.block = block
        self._ranges: list[list] = []      # [start marker (exclusive), end marker (inclusive) or None]

    def last_op(self) -> ir.Operation | None:
        ops = self.block.operations
        return ops[-1].operation if len(ops) else None

    @property
    def active(self) -> bool:
        return bool(self._ranges) and self._ranges[-1][1] is None

    def start(self) -> None:
        self._ranges.append([self.last_op(), None])

    def stop(self) -> None:
        if self.active:
            self._ranges[-1][1] = self.last_op() or _EMPTY

    def clear(self) -> None:
        self._ranges.clear()

    def predicate(self):
        """``records(op)``: was ``op`` appended to the block while recording (so far)?"""
        end_now = self.last_op()
        ranges = [(start, end_now if end is None else end) for start, end in self._ranges]

        def records(op: ir.Operation) -> bool:
            if end_now is None or op.parent != end_now.parent:
                return False  # not in the recorded block
            for start, end in ranges:
                if end is _EMPTY:
                    continue
                if (start is None or start.is_before_in_block(op)) and (op == end or op.is_before_in_block(end)):
                    return True
            return False
        return records


class GradientTape:
    """Record the ops built in a ``with`` block to differentiate them: TensorFlow's ``tf.GradientTape``.

    Use it inside a traced function (``@ig.function``) or a graph (``ig.Graph().as_default()``):
    irgrad has no eager mode, so the tape records *which* graph ops were built while it was
    active, and ``gradient``, ``jacobian`` and ``batch_jacobian`` build the derivative ops in the
    same graph (ordinary tensors: return them, or differentiate them again with another tape).
    Sources are watched tensors (``watch``), tensors computed on the tape from watched ones, and
    the trainable variables (``ig.Variable``) read while recording.

    Args:
        persistent: allow more than one ``gradient``/``jacobian`` call; a non-persistent tape
            raises ``RuntimeError`` on the second.
        watch_accessed_variables: watch every trainable variable read while recording
            (``watched_variables()`` lists them); ``False`` watches only what ``watch`` names.

    TF-compat: entering the tape outside a traced function or graph raises ``RuntimeError``;
    ``parallel_iterations`` is accepted and ignored; ``stop_recording()`` and ``reset()`` work as
    in TensorFlow.

    Example (inside ``@ig.function``)::

        with ig.GradientTape() as tape:
            loss = ig.reduce_mean((x @ w) ** 2)      # w an ig.Variable: watched when read
        dw = tape.gradient(loss, w)
    """

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True):
        self._persistent = persistent
        self._watch_variables = watch_accessed_variables
        self._graph = None
        self._ranges = Recording()
        self._watched: dict[ir.Value, Tensor] = {}
        self._variables: list[Variable] = []
        self._used = False

    # --- recording ---
    def __enter__(self) -> GradientTape:
        self._graph = current_graph()
        self._ranges.block = self._graph.block
        self._start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop()

    def _start(self) -> None:
        self._ranges.start()
        self._graph.read_watchers.append(self._on_read)

    def _stop(self) -> None:
        if self._recording:
            self._ranges.stop()
            self._graph.read_watchers.remove(self._on_read)

    @property
    def _recording(self) -> bool:
        return self._ranges.active

    @contextlib.contextmanager
    def stop_recording(self) -> Iterator[None]:
        if not self._recording:
            raise ValueError("Tape.stop_recording() called on a tape that is not recording")
        self._stop()
        try:
            yield
        finally:
            self._start()

    def reset(self) -> None:
        recording = self._recording
        if recording:
            self._stop()
        self._ranges.clear()
        self._watched.clear()
        self._variables.clear()
        if recording:
            self._start()

    def _on_read(self, variable) -> None:
        if self._watch_variables and variable.trainable and variable not in self._variables:
            self._variables.append(variable)

    def watch(self, tensor) -> None:
        """Track ``tensor`` (a tensor, a variable, or a nested structure of them) as a source.

        A tensor of an enclosing graph is captured first. Raises ``ValueError`` for anything
        else (a Python number or numpy array is a constant, with nothing to differentiate).
        """
        graph = self._graph or current_graph()
        for t in nest.flatten(tensor):
            if isinstance(t, Variable):
                if t not in self._variables:
                    self._variables.append(t)
                continue
            if not isinstance(t, Tensor):
                raise ValueError(f"GradientTape.watch expects tensors or variables, got {t!r}")
            t = convert_to_tensor(t)
            if graph is not None and t.graph is not graph:
                t = graph.capture(t)
            self._watched[t.value] = t

    def watched_variables(self) -> tuple:
        return tuple(self._variables)

    # --- differentiation ---
    def _recorded(self):
        """A predicate: was ``op`` appended to the tape's block while it was recording?"""
        return self._ranges.predicate()

    def _watched_values(self) -> set[ir.Value]:
        values = set(self._watched)
        values.update(self._graph.variable_reads[v].value for v in self._variables
                      if self._graph.variable_reads.get(v) is not None)
        return values

    def _is_watched(self, source, t: Tensor, records) -> bool:
        """Watched explicitly, an accessed variable, or (as in TensorFlow) computed on the
        tape from watched tensors."""
        if isinstance(source, Variable):
            return source in self._variables
        if t.value in self._watched:
            return True
        if not isinstance(t.value, ir.OpResult):
            return False
        order = active_ops([t.value], self._watched_values(), set(), records)
        return bool(order) and order[-1] == t.value.owner.operation

    def _check_use(self) -> None:
        if self._graph is None:
            raise RuntimeError("GradientTape.gradient called on a tape that never recorded; use "
                               "`with ig.GradientTape() as tape:` inside a traced function")
        if self._used and not self._persistent:
            raise RuntimeError("A non-persistent GradientTape can only be used to compute one set of "
                               "gradients (or jacobians)")
        self._used = True

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=UnconnectedGradients.NONE):
        """The gradient of ``target`` with respect to ``sources``, as ``tf.GradientTape.gradient``.

        Args:
            target: a tensor or nested structure of tensors; a structure is summed (``sum(dy/dx)``).
            sources: a tensor, ``ig.Variable`` or nested structure of them.
            output_gradients: seeds, one per ``target`` leaf (ones when ``None``): the result is
                then a vector-Jacobian product.
            unconnected_gradients: ``"none"`` (``None`` for a source the target does not depend
                on, or that was not watched) or ``"zero"`` (zeros instead): ``ig.UnconnectedGradients``.

        Returns:
            Gradient tensors in the structure of ``sources``, each of its source's shape.

        Raises:
            RuntimeError: a second call on a non-persistent tape, or a tape that never recorded.
            LookupError: an op on the path has no gradient (the message names its type).
        """
        self._check_use()
        unconnected = unconnected_policy(unconnected_gradients)
        graph = self._graph
        targets = [convert_to_tensor(t) for t in nest.flatten(target)]
        flat_sources = nest.flatten(sources)
        tensors = [source_tensor(s, graph) for s in flat_sources]
        seeds = seed_tensors(targets, None if output_gradients is None else nest.flatten(output_gradients))
        records = self._recorded()
        watched = [self._is_watched(s, t, records) for s, t in zip(flat_sources, tensors)]
        grads = compute_gradients(graph, targets, [t for t, w in zip(tensors, watched) if w], seeds,
                                  name="tape_gradient", unconnected=unconnected, allow=records)
        it = iter(grads)
        out = []
        for t, w in zip(tensors, watched):
            if w:
                out.append(next(it))
            elif unconnected is UnconnectedGradients.ZERO:
                out.append(zeros_like(t))
            else:
                out.append(None)
        return nest.pack_sequence_as(sources, out)

    def jacobian(self, target, sources, unconnected_gradients=UnconnectedGradients.NONE,
                 parallel_iterations=None, experimental_use_pfor=True):
        """The Jacobian ``d target[i] / d source`` for every element ``i`` of ``target``
        (``tf.GradientTape.jacobian``): shape ``target.shape + source.shape``, in the structure of
        ``sources``; ``None`` (or zeros with ``unconnected_gradients="zero"``) for an unwatched or
        unconnected source.

        Every row comes out of one vectorized backward pass (``experimental_use_pfor=True``); with
        ``False``, or where an op has no batching rule, the same pass runs in a ``while`` loop over
        the rows. ``parallel_iterations`` is ignored. Raises ``RuntimeError`` as ``gradient``."""
        return self._jacobians(target, sources, unconnected_gradients, experimental_use_pfor, jacobian_one,
                               lambda y, t: tuple(y.shape) + tuple(t.shape))

    def batch_jacobian(self, target, source, unconnected_gradients=UnconnectedGradients.NONE,
                       parallel_iterations=None, experimental_use_pfor=True):
        """d target[b, i...] / d source[b] for every example b: shape
        ``target.shape + source.shape[1:]`` (the examples assumed independent, as in TF)."""
        y, x = convert_to_tensor(target), source
        xs = source_tensor(x, self._graph) if self._graph is not None else None
        if y.ndim < 1 or xs is None or xs.ndim < 1:
            raise ValueError("batch_jacobian: target and source need a leading batch dimension")
        if y.shape[0] != xs.shape[0]:
            raise ValueError(f"batch_jacobian: the first dimensions of target ({y.shape[0]}) and source "
                             f"({xs.shape[0]}) must match")
        return self._jacobians(y, source, unconnected_gradients, experimental_use_pfor, batch_jacobian_one,
                               lambda y, t: tuple(y.shape) + tuple(t.shape)[1:])

    def _jacobians(self, target, sources, unconnected_gradients, vectorize: bool, one, zero_shape):
        self._check_use()
        unconnected = unconnected_policy(unconnected_gradients)
        graph = self._graph
        y = convert_to_tensor(target)
        flat_sources = nest.flatten(sources)
        out = []
        records = self._recorded()
        for s in flat_sources:
            t = source_tensor(s, graph)
            if self._is_watched(s, t, records):
                out.append(one(y, t, unconnected, "tape_jacobian", allow=records, vectorize=bool(vectorize)))
            elif unconnected is UnconnectedGradients.ZERO:
                out.append(zeros(zero_shape(y, t), t.dtype))
            else:
                out.append(None)
        return nest.pack_sequence_as(sources, out)


_EMPTY = object()  # end marker of a range during which the block stayed empty
