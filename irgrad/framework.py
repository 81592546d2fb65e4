"""Graphs, tensors and operations.

A :class:`Graph` *is* a ``func.func`` being built in an MLIR module: every op
the user calls is created immediately as a StableHLO op (through
:mod:`irgrad.passes.ir.hlo`) at the end of the graph's current block, located
with the user's op name. A :class:`Tensor` wraps one SSA value. Placeholders
and traced-function arguments are block arguments; ``ig.gradients`` runs the
reverse-mode driver of :mod:`irgrad.passes` on the same block, so gradients
are ordinary tensors that can be differentiated again.
"""
from __future__ import annotations

import contextlib
import re
import threading
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from . import dtypes
from .boundary import RESULT_NAME
from .passes.ir import hlo
from .passes.ir.mlir import context, dtype_name, elem, element_type, ir, shape as value_shape

HOW_TO_TRACE = (
    "irgrad ops build a graph: call them inside a function decorated with @ig.function, "
    "or inside `with ig.Graph().as_default():`")


class TensorShape(tuple):
    """A tensor's shape (``t.shape``): TensorFlow's ``tf.TensorShape``, as a tuple of ints.

    It compares equal to lists and tuples of the same dimensions (``x.shape == [2, 3]``) and
    indexes, slices and unpacks as a tuple. A dimension known only at run time
    (``ig.TensorSpec([None, 4])``) is ``None``, as in TensorFlow.

    ``as_list()``, ``rank`` (also ``ndims``) and ``num_elements()`` (``None`` when a dimension is
    unknown) are TensorFlow's. TF-compat: the rank is always known (there is no unknown shape);
    dimensions are plain ints, not ``Dimension`` objects; ``is_fully_defined`` is a property,
    not a method (``if x.shape.is_fully_defined:``).
    """

    def as_list(self) -> list[int]:
        return list(self)

    @property
    def rank(self) -> int:
        return len(self)

    ndims = rank

    def num_elements(self) -> int | None:
        if any(d is None for d in self):
            return None
        return int(np.prod(self, dtype=np.int64))

    @property
    def is_fully_defined(self) -> bool:
        return all(d is not None for d in self)

    def __eq__(self, other) -> bool:
        if isinstance(other, (list, tuple)):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __ne__(self, other) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return f"TensorShape({list(self)})"


# ----- default graph ------------------------------------------------------------------

class _State(threading.local):
    def __init__(self):
        self.graphs: list[Graph] = []


_state = _State()


def get_default_graph() -> Graph:
    """The graph new ops are added to: TensorFlow's ``tf.compat.v1.get_default_graph``.

    That is the graph of the innermost ``with graph.as_default():`` block, or the graph of the
    function ``ig.function`` is tracing. It is per thread.

    TF-compat: there is no global graph that always exists: outside both, ``RuntimeError``
    (irgrad has no eager mode; every op call needs a graph).
    """
    if not _state.graphs:
        raise RuntimeError(f"no default graph. {HOW_TO_TRACE}")
    return _state.graphs[-1]


def has_default_graph() -> bool:
    return bool(_state.graphs)


def _sanitize(name: str) -> str:
    """An op name for locations (TensorFlow allows '/', '.', '-')."""
    name = re.sub(r"[^A-Za-z0-9_.\-/]", "_", name or "op")
    return name if name and not name[0].isdigit() else "_" + name


def _symbol(name: str) -> str:
    """A valid MLIR symbol name (function names)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", name or "fn")
    return name if not name[0].isdigit() else "_" + name


class Graph:
    """A dataflow graph under construction: TensorFlow 1's ``tf.Graph``.

    A graph *is* one ``func.func`` being built in its own MLIR module (``g.module``): every op
    call appends a StableHLO op to it at once, located with the op's name. ``ig.function``
    traces into a fresh graph; for TensorFlow 1 style code, build one yourself with
    ``with ig.Graph().as_default():``, add placeholders (``ig.placeholder``) and run fetches with
    ``ig.Session``. Gradients are built into the same graph.

    Args:
        name: the function's symbol name in the module (``"main"``).

    ``as_default()`` makes it the default graph inside a ``with`` block;
    ``gradient_override_map({"stablehlo.sine": "MyGrad"})`` makes the ops created inside use a
    gradient registered with ``ig.RegisterGradient``.

    Example::

        g = ig.Graph()
        with g.as_default():
            x = ig.placeholder(ig.float32, [3])
            y = ig.sin(x)
        y.graph is g                             # True
    """

    def __init__(self, name: str = "main", parent: Graph | None = None):
        """A graph; with ``parent``, a private function in the parent's module that
        captures the parent's tensors as extra arguments (custom-gradient bodies)."""
        self.parent = parent
        self.name = _symbol(name)
        with context(), ir.Location.unknown():
            if parent is None:
                self.module = ir.Module.create()
                self._private_funcs: dict[str, str] = {}
            else:
                self.module = parent.module
                self._private_funcs = parent._private_funcs
                self.name = parent.unique_symbol(self.name)
            with ir.InsertionPoint(self.module.body):
                self.func, block = hlo.func(self.name, [], [], private=parent is not None)
        self._blocks: list[ir.Block] = [block]
        self._name_counts: dict[str, int] = {}
        self._symbols = parent._symbols if parent is not None else {self.name}
        self._ops: dict[ir.Operation, Operation] = {}
        self._tensors: dict[ir.Value, Tensor] = {}
        self._arg_names: dict[ir.Value, str] = {}
        self.placeholders: list[Tensor] = []
        self.captures: dict[ir.Value, Tensor] = {}      # outer value -> argument of this graph
        self.variable_reads: dict[Any, Tensor] = {}   # Variable -> its argument tensor
        self.variable_values: dict[Any, Tensor] = {}  # Variable -> current value
        self.read_watchers: list[Callable[[Any], None]] = []  # called on every variable read
        self.gradient_overrides: list[dict[str, str]] = []
        self.op_gradient_names: dict[ir.Operation, str] = {}

    def unique_symbol(self, name: str) -> str:
        """A function name not yet used in this graph's module."""
        base, n = name, 0
        while name in self._symbols:
            n += 1
            name = f"{base}_{n}"
        self._symbols.add(name)
        return name

    def capture(self, t: Tensor) -> Tensor:
        """``t`` (from an enclosing graph) as a tensor of this graph: an extra argument."""
        if t.graph is self:
            return t
        if self.parent is None:
            raise ValueError(f"tensor {t.name!r} belongs to {t.graph!r}, not to the current graph {self!r}; "
                             "pass it as an argument instead of capturing it")
        outer = self.parent.capture(t)
        inner = self.captures.get(outer.value)
        if inner is None:
            inner = self.captures[outer.value] = self.add_argument(outer.shape, outer.dtype, "capture")
        return inner

    def notify_variable_read(self, variable) -> None:
        for watch in self.read_watchers:
            watch(variable)

    @contextlib.contextmanager
    def gradient_override_map(self, op_type_map: dict[str, str]) -> Iterator[None]:
        """Ops created inside whose type is a key use the gradient registered under its value."""
        if not isinstance(op_type_map, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in op_type_map.items()):
            raise TypeError("gradient_override_map needs a dict of op type strings to gradient names")
        self.gradient_overrides.append(dict(op_type_map))
        try:
            yield
        finally:
            self.gradient_overrides.pop()

    # --- scoping ---
    @contextlib.contextmanager
    def as_default(self) -> Iterator[Graph]:
        _state.graphs.append(self)
        try:
            yield self
        finally:
            _state.graphs.pop()

    def unique_name(self, name: str) -> str:
        base = _sanitize(name)
        n = self._name_counts.get(base, 0)
        self._name_counts[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    @contextlib.contextmanager
    def op_scope(self, name: str, *, exact: bool = False) -> Iterator[str]:
        """Insert ops at the end of the current block, located at a unique ``name``
        (``exact``: ``name`` as given, for ops that finish an op begun earlier)."""
        unique = name if exact else self.unique_name(name)
        with context(), ir.InsertionPoint(self._blocks[-1]), ir.Location.name(unique):
            yield unique

    # Set by irgrad.gradients, which builds on this module (a hook, not an import): reroutes an
    # op's results through the IR form of the gradient registered under a name, or returns None
    # when nothing is registered under it (yet).
    express_gradient: Callable[[Graph, ir.Operation, str], list[ir.Value] | None] | None = None

    def apply_gradient_overrides(self, values: Sequence[ir.Value]) -> list[ir.Value]:
        """``values`` after the gradient_override_map in force: an overridden op's results
        rerouted through its registered gradient, expressed in the IR. A name nothing has
        registered yet is recorded and looked up when a gradient is taken."""
        values = list(values)
        ops = {v.owner.operation: None for v in values if isinstance(v, ir.OpResult)}
        for op in ops:
            name = next((m[op.name] for m in reversed(self.gradient_overrides) if op.name in m), None)
            if name is None:
                continue
            new = Graph.express_gradient(self, op, name) if Graph.express_gradient else None
            if new is None:
                self.op_gradient_names[op] = name
                continue
            values = [new[list(op.results).index(x)] if x in list(op.results) else x for x in values]
        return values

    @contextlib.contextmanager
    def in_block(self, block: ir.Block) -> Iterator[None]:
        """Build ops inside a nested region's block (cond branches, loop bodies)."""
        self._blocks.append(block)
        try:
            yield
        finally:
            self._blocks.pop()

    @property
    def block(self) -> ir.Block:
        return self._blocks[-1]

    @property
    def entry_block(self) -> ir.Block:
        return self._blocks[0]

    # --- arguments ---
    def add_argument(self, shape: Sequence[int], dtype: dtypes.DType, name: str) -> Tensor:
        unique = self.unique_name(name)
        with context():
            value = self.entry_block.add_argument(
                hlo.tensor_type([hlo.DYNAMIC if d is None else d for d in shape], element_type(dtype.name)),
                ir.Location.name(unique))
        self._arg_names[value] = unique
        return Tensor(value, self)

    def wrap_op(self, op: ir.Operation) -> Operation:
        op = op.operation
        w = self._ops.get(op)
        if w is None:
            w = self._ops[op] = Operation(op, self)
        return w

    def arg_name(self, value: ir.Value) -> str:
        return self._arg_names.get(value, "arg")

    def finish(self, results: Sequence[Tensor] | Sequence[ir.Value],
               names: Sequence[str | None] | None = None) -> None:
        """End the function: return ``results`` and fix the function type. ``names`` (one per
        result, None for none: ``nest.leaf_names``) name the results in the module
        (``irgrad.name`` result attributes; signatures, ``irgrad inspect`` and ``.npz`` show them)."""
        values = [r.value if isinstance(r, Tensor) else r for r in results]
        with context(), ir.Location.name("return"), ir.InsertionPoint(self.entry_block):
            hlo.return_(values)
        hlo.set_function_type(self.func, [a.type for a in self.entry_block.arguments],
                              [v.type for v in values])
        if names is not None and any(names):
            padded = list(names)[:len(values)] + [None] * (len(values) - len(names))
            with context():
                self.func.attributes["res_attrs"] = ir.ArrayAttr.get([
                    ir.DictAttr.get({} if n is None else {RESULT_NAME: ir.StringAttr.get(n)}) for n in padded])

    # --- private functions (composite decompositions) ---
    def private_function(self, key: str, build) -> str:
        """A private func in this graph's module, built once per key by ``build(name)``."""
        name = self._private_funcs.get(key)
        if name is None:
            name = self._private_funcs[key] = f"irgrad.{_sanitize(key)}"
            with context(), ir.Location.unknown(), ir.InsertionPoint(self.module.body):
                build(name)
        return name

    def __repr__(self) -> str:
        return f"<ig.Graph {self.name!r}>"


class Operation:
    """An op of a graph (``t.op``): TensorFlow's ``tf.Operation``, over one StableHLO op.

    ``type`` is the StableHLO op name (``"stablehlo.sine"``, not TensorFlow's ``"Sin"``: the
    names ``ig.RegisterGradient`` and ``gradient_override_map`` use); ``name`` is the op's name
    in the graph (its location); ``inputs`` and ``outputs`` are lists of ``ig.Tensor``;
    ``get_attr(name)`` reads an attribute as a Python value (ints, lists, strings, arrays; other
    attributes as MLIR text) and raises ``ValueError`` when there is none; ``mlir`` is the
    underlying MLIR operation. A placeholder's or argument's ``op`` has type ``"Placeholder"``.
    """

    def __init__(self, op: ir.Operation, graph: Graph):
        self._op = op
        self.graph = graph

    @property
    def type(self) -> str:
        return self._op.name

    @property
    def name(self) -> str:
        loc = self._op.location
        try:
            return loc.name_str
        except AttributeError:
            return self._op.name

    @property
    def inputs(self) -> list[Tensor]:
        return [Tensor(v, self.graph) for v in self._op.operands]

    @property
    def outputs(self) -> list[Tensor]:
        return [Tensor(v, self.graph) for v in self._op.results]

    @property
    def mlir(self) -> ir.Operation:
        return self._op

    def get_attr(self, name: str):
        """An attribute as a Python value (ints, lists, strings; others as MLIR text)."""
        try:
            a = self._op.attributes[name]
        except KeyError:
            raise ValueError(f"operation {self.name!r} ({self.type}) has no attribute {name!r}") from None
        return _attr_to_python(a)

    def __eq__(self, other) -> bool:
        return isinstance(other, Operation) and other._op == self._op

    def __hash__(self) -> int:
        return hash(self._op)

    def __repr__(self) -> str:
        return f"<ig.Operation {self.name!r} type={self.type}>"


class _Placeholder:
    """The pseudo-op of a block argument (a placeholder or a function argument)."""

    type = "Placeholder"
    inputs: list = []

    def __init__(self, tensor: Tensor):
        self.graph = tensor.graph
        self.name = tensor.graph.arg_name(tensor.value)
        self.outputs = [tensor]

    def get_attr(self, name: str):
        if name == "dtype":
            return self.outputs[0].dtype
        if name == "shape":
            return self.outputs[0].shape
        raise ValueError(f"placeholder {self.name!r} has no attribute {name!r}")

    def __repr__(self) -> str:
        return f"<ig.Operation {self.name!r} type=Placeholder>"


def _attr_to_python(a: ir.Attribute):
    a = a.maybe_downcast() if hasattr(a, "maybe_downcast") else a
    for cls, conv in ((ir.DenseI64ArrayAttr, list), (ir.BoolAttr, lambda x: x.value),
                      (ir.IntegerAttr, lambda x: x.value), (ir.FloatAttr, lambda x: x.value),
                      (ir.StringAttr, lambda x: x.value), (ir.FlatSymbolRefAttr, lambda x: x.value)):
        if isinstance(a, cls):
            return conv(a)
    if isinstance(a, ir.ArrayAttr):
        return [_attr_to_python(x) for x in a]
    if isinstance(a, ir.DenseElementsAttr):
        try:
            return np.array(a)
        except Exception:  # bf16 and other types numpy cannot view
            return str(a)
    return str(a)


class Tensor:
    """A symbolic tensor: one value of a graph, TensorFlow's graph-mode ``tf.Tensor``.

    irgrad has no eager mode: ops on tensors add ops to the graph and a tensor has no value
    until the compiled function runs (``numpy()``, ``np.asarray(t)`` and ``bool(t)`` raise
    ``TypeError``; use ``ig.cond`` or ``ig.where`` for decisions). ``shape`` (an
    ``ig.TensorShape``, also ``get_shape()``), ``ndim``, ``dtype``, ``name`` (``"op_name:0"``)
    and ``op`` describe it.

    Operators are the ``ig`` ops: ``+ - * / // % **``, ``@`` (``ig.matmul``), comparisons
    (``==`` and ``!=`` are elementwise, as TensorFlow 2's), ``&``, ``|`` and ``~`` (logical, on
    bool tensors), unary ``-`` and ``abs``; indexing is ``ig.getitem``. Both operands of a binary
    operator must have one dtype (no promotion); a Python number takes the tensor's. ``len(t)``
    and iteration go over the leading dimension.
    """

    __slots__ = ("value", "graph", "__weakref__")
    __array_priority__ = 100  # numpy defers to our operators

    def __new__(cls, value: ir.Value, graph: Graph) -> Tensor:
        # One Python object per SSA value, so `is` (and list equality) mean "same tensor"
        # while == is elementwise.
        t = graph._tensors.get(value)
        if t is None:
            t = graph._tensors[value] = object.__new__(cls)
            t.value, t.graph = value, graph
        return t

    @property
    def shape(self) -> TensorShape:
        dims = value_shape(self.value)
        return TensorShape(dims if hlo.DYNAMIC not in dims else (None if d == hlo.DYNAMIC else d for d in dims))

    def get_shape(self) -> TensorShape:
        return self.shape

    @property
    def ndim(self) -> int:
        return len(value_shape(self.value))

    @property
    def dtype(self) -> dtypes.DType:
        return dtypes.as_dtype(dtype_name(elem(self.value)))

    @property
    def op(self):
        if isinstance(self.value, ir.OpResult):
            return self.graph.wrap_op(self.value.owner)
        return _Placeholder(self)

    @property
    def name(self) -> str:
        if isinstance(self.value, ir.OpResult):
            return f"{self.op.name}:{self.value.result_number}"
        return f"{self.graph.arg_name(self.value)}:0"

    @property
    def value_index(self) -> int:
        return self.value.result_number if isinstance(self.value, ir.OpResult) else 0

    def __repr__(self) -> str:
        return f"<ig.Tensor '{self.name}' shape={tuple(self.shape)} dtype={self.dtype.name}>"

    def __hash__(self) -> int:  # by identity of the SSA value, so tensors can key dicts
        return hash(self.value)

    # == and != are elementwise, as TensorFlow 2's (the ops module installs them);
    # comparing with None is False / True.

    def __bool__(self):
        raise TypeError("Using a symbolic ig.Tensor as a Python bool is not allowed: its value is only "
                        "known when the compiled function runs. Use ig.cond / ig.where instead.")

    def __len__(self) -> int:
        if not self.ndim:
            raise TypeError("len() of a scalar tensor")
        return self.shape[0]

    def __iter__(self):
        if not self.ndim:
            raise TypeError("iterating over a scalar tensor is not allowed")
        return (self[i] for i in range(self.shape[0]))

    def __array__(self, dtype=None, copy=None):
        raise TypeError(f"cannot convert symbolic tensor {self.name!r} to a numpy array: it has no value "
                        "until the compiled function runs")

    def numpy(self):
        raise TypeError(f"{self.name!r} is a symbolic tensor inside a traced function; "
                        "return it from the function to get its value")

    # Operators are attached in irgrad.ops (which depends on this module); declared here for type checkers.
    if TYPE_CHECKING:
        def __add__(self, other: Any) -> Tensor: ...
        def __radd__(self, other: Any) -> Tensor: ...
        def __sub__(self, other: Any) -> Tensor: ...
        def __rsub__(self, other: Any) -> Tensor: ...
        def __mul__(self, other: Any) -> Tensor: ...
        def __rmul__(self, other: Any) -> Tensor: ...
        def __truediv__(self, other: Any) -> Tensor: ...
        def __rtruediv__(self, other: Any) -> Tensor: ...
        def __floordiv__(self, other: Any) -> Tensor: ...
        def __rfloordiv__(self, other: Any) -> Tensor: ...
        def __mod__(self, other: Any) -> Tensor: ...
        def __rmod__(self, other: Any) -> Tensor: ...
        def __pow__(self, other: Any) -> Tensor: ...
        def __rpow__(self, other: Any) -> Tensor: ...
        def __matmul__(self, other: Any) -> Tensor: ...
        def __rmatmul__(self, other: Any) -> Tensor: ...
        def __lt__(self, other: Any) -> Tensor: ...
        def __le__(self, other: Any) -> Tensor: ...
        def __gt__(self, other: Any) -> Tensor: ...
        def __ge__(self, other: Any) -> Tensor: ...
        def __and__(self, other: Any) -> Tensor: ...
        def __or__(self, other: Any) -> Tensor: ...
        def __neg__(self) -> Tensor: ...
        def __abs__(self) -> Tensor: ...
        def __invert__(self) -> Tensor: ...
        def __getitem__(self, key: Any) -> Tensor: ...
        def __eq__(self, other: object) -> Tensor: ...  # type: ignore[override]
        def __ne__(self, other: object) -> Tensor: ...  # type: ignore[override]


def is_tensor(x) -> bool:
    return isinstance(x, Tensor)
