"""TensorFlow 1 style graphs: ``ig.placeholder`` and ``ig.Session().run``."""
from __future__ import annotations

from typing import Any

from . import dtypes, nest
from .framework import Graph, Operation, Tensor, get_default_graph, has_default_graph
from .function import ConcreteFunction, TensorSpec, _conform, emit_text
from .ops.core import current_graph
from .passes import hlo
from .passes.mlir import context, ir, run_pipeline, verify


def placeholder(dtype, shape=None, name: str | None = None) -> Tensor:
    """A graph input fed through ``Session.run(feed_dict=...)``; shapes are static."""
    graph = current_graph()
    dtype = dtypes.as_dtype(dtype)
    if shape is None or any(d is None or int(d) < 0 for d in shape):
        raise ValueError(f"placeholder {name or ''} needs a fully known static shape, got {shape}")
    t = graph.add_argument([int(d) for d in shape], dtype, name or "Placeholder")
    graph.placeholders.append(t)
    return t


class Session:
    """Compiles the subgraph needed by ``fetches`` (cached per fetches and feeds) and runs it."""

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

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True

    def run(self, fetches, feed_dict: dict | None = None):
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session.")
        feed_dict = dict(feed_dict or {})
        index_of = {t.value: i for i, t in enumerate(self.graph.placeholders)}
        feeds: dict[int, Any] = {}
        for key, value in feed_dict.items():
            if not isinstance(key, Tensor) or key.graph is not self.graph or key.value not in index_of:
                raise ValueError(f"feed_dict key {key!r} is not a placeholder of this session's graph")
            feeds[index_of[key.value]] = value
        leaves = nest.flatten(fetches)
        tensors: list[Tensor] = []
        for leaf in leaves:
            if isinstance(leaf, Operation) or leaf is None:
                continue
            if not isinstance(leaf, Tensor):
                raise TypeError(f"fetch {leaf!r} is not a tensor or operation of this graph")
            if leaf.graph is not self.graph:
                raise ValueError(f"fetch {leaf.name!r} belongs to another graph")
            tensors.append(leaf)
        key = (tuple(t.value for t in tensors), tuple(sorted(feeds)))
        entry = self._cache.get(key)
        if entry is None:
            entry = self._cache[key] = self._build(tensors, set(feeds))
        concrete, used = entry
        arrays = []
        for i in used:
            spec = TensorSpec(self.graph.placeholders[i].shape, self.graph.placeholders[i].dtype)
            arrays.append(_conform(feeds[i], spec, i, "Session.run"))
        results = iter(concrete.run(arrays, self._target, self._device, self._flags) if tensors else [])
        return nest.map_structure(
            lambda leaf: next(results) if isinstance(leaf, Tensor) else None, fetches)

    def _build(self, tensors: list[Tensor], fed: set[int]) -> tuple[ConcreteFunction, list[int]]:
        """A module returning ``tensors`` whose arguments are the placeholders they need."""
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
        used = [i for i, a in enumerate(block.arguments) if next(iter(a.uses), None) is not None]
        missing = [i for i in used if i not in fed]
        if missing:
            p = graph.placeholders[missing[0]]
            raise ValueError(f"You must feed a value for placeholder tensor {p.op.name!r} with dtype "
                             f"{p.dtype.name} and shape {list(p.shape)}")
        for i in reversed(range(len(block.arguments))):
            if i not in used:
                block.erase_argument(i)
        hlo.set_function_type(func, [a.type for a in block.arguments], [t.value.type for t in tensors])
        verify(module, "session subgraph")
        text = emit_text(module)
        module.erase()
        specs = [TensorSpec(graph.placeholders[i].shape, graph.placeholders[i].dtype) for i in used]
        outputs = [object()] * len(tensors)
        concrete = ConcreteFunction(graph, graph.name, specs, [], outputs, list(range(len(tensors))), [], text)
        return concrete, used

