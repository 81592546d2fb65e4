"""``ig.Variable``: state that lives outside compiled modules.

Read inside a traced function, a variable becomes an extra argument of the
module (its value is passed at call time); ``assign*`` inside a traced
function adds an extra result and the variable is updated after the call.
"""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np

from . import dtypes
from .framework import Tensor, TensorShape, has_default_graph
from .ops.core import as_numpy, convert_to_tensor, current_graph

_ids = itertools.count()


class Variable:
    """Mutable state held in Python and passed to compiled functions: TensorFlow's ``tf.Variable``.

    The value is a numpy array kept outside any compiled module. Read inside a traced function
    (an operator, ``value()``, ``ig.convert_to_tensor``), a variable becomes an extra argument of
    the module, given its current value at every call; ``assign``, ``assign_add`` and
    ``assign_sub`` inside a traced function add a result, and the variable takes it after the
    call. Outside a traced function, ``numpy()`` reads it and ``assign*`` update it at once.

    Args:
        initial_value: a Python or numpy value, a callable returning one, or another
            ``ig.Variable`` (copied). A symbolic tensor raises ``TypeError``.
        trainable: whether an ``ig.GradientTape`` watches the variable when it is read.
        name: the name shown in the graph (``"w"`` gives ``"w:0"``); ``"Variable"`` by default.
        dtype: an ``ig.DType`` or anything ``ig.as_dtype`` takes; by default TensorFlow's rule
            (a Python float is float32, a numpy array keeps its dtype).

    The shape is fixed (another shape raises ``ValueError``). Arithmetic, ordering comparisons,
    ``@`` and indexing read the value; ``==`` is identity (variables key dicts), not elementwise
    as in TensorFlow.

    Example::

        w = ig.Variable(np.zeros([3, 2], np.float32), name="w")

        @ig.function
        def step(x):
            with ig.GradientTape() as tape:
                loss = ig.reduce_mean((x @ w) ** 2)
            w.assign_sub(0.1 * tape.gradient(loss, w))   # w holds the new value after the call
            return loss
    """

    # The operators delegate to the value (set below the class); declared here for type checkers.
    if TYPE_CHECKING:
        def __add__(self, other: Any) -> Tensor: ...
        def __radd__(self, other: Any) -> Tensor: ...
        def __sub__(self, other: Any) -> Tensor: ...
        def __rsub__(self, other: Any) -> Tensor: ...
        def __mul__(self, other: Any) -> Tensor: ...
        def __rmul__(self, other: Any) -> Tensor: ...
        def __truediv__(self, other: Any) -> Tensor: ...
        def __rtruediv__(self, other: Any) -> Tensor: ...
        def __pow__(self, other: Any) -> Tensor: ...
        def __rpow__(self, other: Any) -> Tensor: ...
        def __matmul__(self, other: Any) -> Tensor: ...
        def __rmatmul__(self, other: Any) -> Tensor: ...
        def __lt__(self, other: Any) -> Tensor: ...
        def __le__(self, other: Any) -> Tensor: ...
        def __gt__(self, other: Any) -> Tensor: ...
        def __ge__(self, other: Any) -> Tensor: ...
        def __floordiv__(self, other: Any) -> Tensor: ...
        def __mod__(self, other: Any) -> Tensor: ...
        def __neg__(self) -> Tensor: ...
        def __abs__(self) -> Tensor: ...

    def __init__(self, initial_value, trainable: bool = True, name: str | None = None, dtype=None):
        if isinstance(initial_value, Tensor):
            raise TypeError("ig.Variable needs a concrete initial value (Python or numpy), not a symbolic tensor")
        if callable(initial_value):
            initial_value = initial_value()
        if isinstance(initial_value, Variable):
            initial_value = initial_value.numpy()
        value, dt = as_numpy(initial_value, dtypes.as_dtype(dtype) if dtype is not None else None)
        self._value = np.array(value)
        self._dtype = dt
        self.trainable = bool(trainable)
        self._id = next(_ids)
        self.name = f"{name or 'Variable'}:0"

    # --- eager surface ---
    @property
    def dtype(self) -> dtypes.DType:
        return self._dtype

    @property
    def shape(self):
        return TensorShape(self._value.shape)

    def numpy(self) -> np.ndarray:
        return self._value.copy()

    def __array__(self, dtype=None, copy=None):
        return self._value.astype(dtype) if dtype is not None else self._value.copy()

    def __repr__(self) -> str:
        return f"<ig.Variable '{self.name}' shape={self._value.shape} dtype={self._dtype.name} numpy={self._value!r}>"

    # --- graph surface ---
    def _as_graph_tensor(self, graph) -> Tensor:
        graph.notify_variable_read(self)
        if graph.parent is not None:  # a function nested in a traced function: capture the outer read
            return graph.capture(self._as_graph_tensor(graph.parent))
        current = graph.variable_values.get(self)
        if current is None:
            base = self.name.split(":")[0]
            current = graph.add_argument(self._value.shape, self._dtype, base)
            graph.variable_reads[self] = current
            graph.variable_values[self] = current
        return current

    def value(self) -> Tensor:
        return self._as_graph_tensor(current_graph())

    read_value = value

    def _assign(self, value, op: str) -> Tensor | np.ndarray:
        if not has_default_graph():
            new, _ = as_numpy(value if op == "assign" else self._eager(op, value), self._dtype)
            if new.shape != self._value.shape:
                raise ValueError(f"{op}: shape {new.shape} does not match variable shape {self._value.shape}")
            self._value = np.array(new)
            return self.numpy()
        graph = current_graph()
        t = convert_to_tensor(value, self._dtype)
        if op == "assign_add":
            t = self._as_graph_tensor(graph) + t
        elif op == "assign_sub":
            t = self._as_graph_tensor(graph) - t
        if tuple(t.shape) != self._value.shape:
            raise ValueError(f"{op}: shape {tuple(t.shape)} does not match variable shape {self._value.shape}")
        graph.variable_values[self] = t
        if self not in graph.variable_reads:  # written before read: still an argument-free update
            graph.variable_reads.setdefault(self, None)
        return t

    def _eager(self, op: str, value):
        delta = np.asarray(value, dtype=self._value.dtype)
        return self._value + delta if op == "assign_add" else self._value - delta

    def assign(self, value, name=None):
        return self._assign(value, "assign")

    def assign_add(self, delta, name=None):
        return self._assign(delta, "assign_add")

    def assign_sub(self, delta, name=None):
        return self._assign(delta, "assign_sub")

    def __hash__(self) -> int:
        return hash(self._id)

    def __eq__(self, other) -> bool:
        return self is other

    def __getitem__(self, key):
        return self.value()[key]


def _delegate(name: str):
    def method(self, *args):
        return getattr(self.value(), name)(*args)
    method.__name__ = name
    return method


for _op in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
            "__rtruediv__", "__pow__", "__rpow__", "__matmul__", "__rmatmul__", "__neg__", "__abs__",
            "__lt__", "__le__", "__gt__", "__ge__", "__floordiv__", "__mod__"):
    setattr(Variable, _op, _delegate(_op))
