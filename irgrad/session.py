"""TensorFlow 1 style graphs: ``ig.placeholder`` and ``ig.Session().run``."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import dtypes, nest
from .framework import Graph, Operation, Tensor, get_default_graph, has_default_graph
from .function import ConcreteFunction, TensorSpec, conform, emit_text
from .ops.core import current_graph
from .passes.ir import hlo
from .passes.ir.mlir import context, ir, run_pipeline, verify


def placeholder(dtype, shape=None, name: str | None = None) -> Tensor:
    """A graph input fed through ``Session.run(feed_dict=...)``: TensorFlow 1's ``tf.compat.v1.placeholder``.

    For TensorFlow 1 style programs: build ops on placeholders inside
    ``with ig.Graph().as_default():`` and run them with an ``ig.Session``. Each placeholder is
    an argument of the compiled subgraph; ``Session.run`` refuses to run a fetch that needs a
    placeholder without a value in ``feed_dict``. (In ``@ig.function``, arguments play this part.)

    Args:
        dtype: an ``ig.DType`` or anything ``ig.as_dtype`` takes.
        shape: the full static shape, a list of ints. Unlike TensorFlow, ``None`` (an unknown
            shape) and ``None`` dimensions are refused.
        name: the name in the graph (``"Placeholder"``).

    Raises:
        ValueError: ``shape`` is missing or not fully known.
        RuntimeError: no default graph.

    Example::

        with ig.Graph().as_default():
            x = ig.placeholder(ig.float32, [3], name="x")
            y = ig.reduce_sum(x * x)
            with ig.Session() as sess:
                sess.run(y, feed_dict={x: np.ones(3, np.float32)})   # 3.0
    """
    graph = current_graph()
    dtype = dtypes.as_dtype(dtype)
    if shape is None or any(d is None or int(d) < 0 for d in shape):
        raise ValueError(f"placeholder {name or ''} needs a fully known static shape, got {shape}")
    t = graph.add_argument([int(d) for d in shape], dtype, name or "Placeholder")
    graph.placeholders.append(t)
    return t


class Session:
    """Runs parts of a graph: TensorFlow 1's ``tf.compat.v1.Session``.

    ``run(fetches, feed_dict)`` compiles the subgraph that ``fetches`` need into a module whose
    arguments are the placeholders and variables it reads, once per combination of fetches and
    fed placeholders (cached), and runs it. Use it as a context manager or call ``close()``.

    Args:
        target: TensorFlow's server address, ignored; a ``Graph`` given here is taken as ``graph``
            (``ig.Session(g)``).
        graph: the graph to run; the default graph when ``None``.
        config: accepted for TensorFlow's signature, ignored.
        compile_target: the IREE target (``ig.function``'s ``target``): ``"llvm-cpu"`` by default.
        device: the IREE device to run on (``ig.function``'s ``device``).
        **compile_flags: ``irgrad.runtime.CompileOptions`` fields, as for ``ig.function``.

    Raises:
        RuntimeError: no ``graph`` and no default graph; ``run`` on a closed session.
    """

    def __init__(self, target: str = "", graph: Graph | None = None, config: Any = None, *,
                 compile_target: str = "llvm-cpu", device: str | None = None, **compile_flags):
        if graph is None:
            if not has_default_graph():
                raise RuntimeError("ig.Session() needs a graph: create it inside "
                                   "`with ig.Graph().as_default():` or pass graph=")
            graph = get_default_graph()
        if isinstance(target, Graph):  # Session(graph) positional, as people often write it
            graph = target
        self.graph = graph
        self._target = compile_target
        self._device = device
        self._flags = compile_flags
        self._cache: dict[Any, tuple[ConcreteFunction, list[int]]] = {}
        self._closed = False

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True

    def run(self, fetches, feed_dict: dict | None = None):
        """Evaluate ``fetches``: a tensor, an ``ig.Operation`` or a nested structure of them.

        ``feed_dict`` maps placeholders of this graph to values (checked against their dtype and
        shape); variables read are passed their current values. Returns numpy arrays in the
        structure of ``fetches``, ``None`` for an operation (fetching an operation runs nothing).
        Fetching the tensor that ``v.assign(...)`` returned also updates ``v``, as TensorFlow 1's
        assign op. Raises ``ValueError`` for a feed that is not a placeholder of this graph, a
        fetch of another graph, or a placeholder the fetches need that has no feed;
        ``TypeError`` for a fetch that is not a tensor or operation.
        """
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session.")
        graph = self.graph
        placeholders = {t.value: t for t in graph.placeholders}
        feeds: dict[ir.Value, Any] = {}
        for key, value in dict(feed_dict or {}).items():
            if not isinstance(key, Tensor) or key.graph is not graph or key.value not in placeholders:
                raise ValueError(f"feed_dict key {key!r} is not a placeholder of this session's graph")
            feeds[key.value] = value
        tensors: list[Tensor] = []
        for leaf in nest.flatten(fetches):
            if isinstance(leaf, Operation) or leaf is None:
                continue
            if not isinstance(leaf, Tensor):
                raise TypeError(f"fetch {leaf!r} is not a tensor or operation of this graph")
            if leaf.graph is not graph:
                raise ValueError(f"fetch {leaf.name!r} belongs to another graph")
            tensors.append(leaf)
        key = (tuple(t.value for t in tensors), frozenset(feeds))
        entry = self._cache.get(key)
        if entry is None:
            entry = self._cache[key] = self._build(tensors, feeds)
        concrete, sources = entry
        arrays = [conform(feeds[s.value], TensorSpec(s.shape, s.dtype), i, "Session.run")
                  if isinstance(s, Tensor) else s.numpy() for i, s in enumerate(sources)]
        values = concrete.run(arrays, self._target, self._device, self._flags) if tensors else []
        self._apply_assignments(tensors, values)
        results = iter(values)
        return nest.map_structure(lambda leaf: next(results) if isinstance(leaf, Tensor) else None, fetches)

    def _apply_assignments(self, tensors: list[Tensor], values: list) -> None:
        """Fetching a variable's assigned value runs the assignment (TensorFlow 1's assign op)."""
        graph = self.graph
        for t, value in zip(tensors, values):
            for variable, current in graph.variable_values.items():
                if current.value == t.value and current is not graph.variable_reads.get(variable):
                    variable._value = np.array(value)

    def _build(self, tensors: list[Tensor], feeds: dict) -> tuple[ConcreteFunction, list]:
        """A module returning ``tensors``; its arguments are the placeholders and variables they need."""
        graph = self.graph
        with context(), ir.Location.unknown(), ir.InsertionPoint(graph.entry_block):
            hlo.return_([t.value for t in tensors])
        ret = list(graph.entry_block.operations)[-1].operation
        try:
            module = graph.module.operation.clone()
        finally:
            ret.erase()
        func = next(op.operation for op in module.regions[0].blocks[0].operations
                    if op.operation.name == "func.func" and "sym_visibility" not in op.operation.attributes)
        block = func.regions[0].blocks[0]
        hlo.set_function_type(func, [a.type for a in block.arguments], [t.value.type for t in tensors])
        run_pipeline(module, "builtin.module(func.func(canonicalize,cse),symbol-dce)")
        placeholders = {t.value: t for t in graph.placeholders}
        variables = {t.value: v for v, t in graph.variable_reads.items() if t is not None}
        originals = list(graph.entry_block.arguments)
        sources = []
        for i in reversed(range(len(block.arguments))):
            if next(iter(block.arguments[i].uses), None) is None:
                block.erase_argument(i)
                continue
            original = originals[i]
            if original in placeholders:
                if original not in feeds:
                    p = placeholders[original]
                    raise ValueError(f"You must feed a value for placeholder tensor {p.op.name!r} with dtype "
                                     f"{p.dtype.name} and shape {list(p.shape)}")
                sources.append(placeholders[original])
            else:
                sources.append(variables[original])
        sources.reverse()
        hlo.set_function_type(func, [a.type for a in block.arguments], [t.value.type for t in tensors])
        verify(module, "session subgraph")
        text = emit_text(module)
        module.erase()
        specs = [TensorSpec(s.shape, s.dtype) for s in sources]
        outputs = [object()] * len(tensors)
        concrete = ConcreteFunction(graph, graph.name, specs, [], outputs, list(range(len(tensors))), [], text)
        return concrete, sources

