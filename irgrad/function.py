"""``ig.function``: trace Python into a graph, lower it to StableHLO, compile and run it.

Arguments follow TensorFlow's ``tf.function`` rules: numpy arrays (and numpy
scalars) become tensor arguments and are part of the signature by shape and
dtype; Python scalars, strings and ``None`` are static values baked into the
trace (one trace per value, so ``if flag:`` works); ``ig.Variable`` objects
are captured. With an ``input_signature``, every argument is converted to its
``TensorSpec``.
"""
from __future__ import annotations

import functools
import inspect
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload
from collections.abc import Callable, Sequence

import numpy as np

from . import dtypes, nest
from .framework import Graph, Tensor, TensorShape, has_default_graph
from .ops.core import as_numpy, convert_to_tensor
from .passes.ir.mlir import ir, run_pipeline, verify
from .variables import Variable
from .version import __version__
from .runtime import Artifact, CompileOptions, compile as compile_ir

EMIT_PIPELINE = "builtin.module(func.func(canonicalize,cse),symbol-dce)"


class TensorSpec:
    """The shape and dtype of a tensor argument (``tf.TensorSpec``).

    ``ig.TensorSpec([8, 4])`` is a float32 8x4 argument; ``ig.TensorSpec([], ig.int32)`` an int32
    scalar; ``ig.TensorSpec([None, 4])`` takes any number of rows: the function traces once
    into a module with a run-time dimension (``tensor<?x4xf32>``) and one compiled artifact
    serves every size, as ``tf.function`` does. ``name`` becomes the argument's name in the
    StableHLO module, in ``irgrad grad --wrt`` and in the artifact's signatures (``irgrad
    inspect``). Used in ``input_signature``, ``ig.export`` and ``f.lower``.
    """

    def __init__(self, shape, dtype=dtypes.float32, name: str | None = None):
        if isinstance(shape, (int, np.integer)):
            shape = (shape,)
        dims = tuple(shape)
        if any(d is not None and int(d) < 0 for d in dims):
            raise ValueError(f"TensorSpec shape {dims} has a negative dimension; use None for a size "
                             "known only at run time")
        self.shape = TensorShape(None if d is None else int(d) for d in dims)
        self.dtype = dtypes.as_dtype(dtype)
        self.name = name

    @classmethod
    def from_value(cls, value) -> TensorSpec:
        arr = np.asarray(value)
        return cls(arr.shape, dtypes.as_dtype(arr.dtype))

    def __eq__(self, other) -> bool:
        return isinstance(other, TensorSpec) and (self.shape, self.dtype) == (other.shape, other.dtype)

    def __hash__(self) -> int:
        return hash((tuple(self.shape), self.dtype.name))

    def __repr__(self) -> str:
        return f"TensorSpec(shape={tuple(self.shape)}, dtype=ig.{self.dtype.name}, name={self.name!r})"


def _symbol(name: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", name or "fn")
    return name if not name[0].isdigit() else "_" + name


# ----- traced functions ----------------------------------------------------------------

@dataclass
class ConcreteFunction:
    """One trace: its graph, the StableHLO text and (lazily) the compiled module."""

    graph: Graph
    name: str
    input_specs: list[TensorSpec]
    variables: list[Variable]                 # read variables, after the inputs
    outputs_structure: Any                    # the Python structure fn returned
    output_slots: list[int | None]            # per leaf: result index, or None for a None leaf
    updates: list[Variable]                   # assigned variables, results after the outputs
    mlir: str
    _modules: dict = field(default_factory=dict)

    def compile(self, target: str = "llvm-cpu", **flags) -> Artifact:
        return compile_text(self.mlir, _options(target, flags))

    def module(self, target: str, device: str | None, flags: dict):
        key = (target, device, tuple(sorted(flags.items())))
        m = self._modules.get(key)
        if m is None:
            m = self._modules[key] = self.compile(target, **flags).load(device)
        return m

    def run(self, arrays: list[np.ndarray], target: str, device: str | None, flags: dict):
        return self.run_with(self.module(target, device, flags)[self.name], arrays)

    def runner(self, fn) -> Callable[..., Any]:
        """``run_with(fn, arrays)`` as a function of the arrays alone (what a cached call runs)."""
        if not self.variables and not self.updates and self.output_slots == [0] \
                and not isinstance(self.outputs_structure, (list, tuple, dict)):
            call = fn.call_flat
            return lambda *arrays: call(*arrays)[0]  # one tensor: nothing to pack
        return lambda *arrays: self.run_with(fn, arrays)

    def run_with(self, fn, arrays: Sequence[np.ndarray]):
        """Calls the loaded function ``fn`` of this trace: arrays, then the variables' values;
        updates the assigned variables; returns the outputs in ``fn``'s Python structure."""
        if not self.variables and not self.updates and self.output_slots == [0] \
                and not isinstance(self.outputs_structure, (list, tuple, dict)):
            return fn.call_flat(*arrays)[0]  # one tensor: nothing to pack
        results = fn.call_flat(*arrays, *[v.numpy() for v in self.variables])
        n = len(results) - len(self.updates)
        for var, value in zip(self.updates, results[n:]):
            var._value = np.array(value)
        leaves = [None if slot is None else results[slot] for slot in self.output_slots]
        return nest.pack_sequence_as(self.outputs_structure, leaves)


def _producer() -> str:
    return f"irgrad {__version__}"


def compile_text(text: str, options: CompileOptions, cache: bool = True) -> Artifact:
    """``irgrad.runtime.compile`` with irgrad's version recorded as the producer."""
    return compile_ir(text, options, cache=cache, producer=_producer())


def _options(target: str, flags: dict) -> CompileOptions:
    return CompileOptions(target=target, **flags)


def trace(fn: Callable, name: str, args: tuple, kwargs: dict) -> ConcreteFunction:
    """Trace ``fn`` with TensorSpec leaves as arguments into a verified StableHLO module."""
    graph = Graph(name)
    specs: list[TensorSpec] = []
    with graph.as_default():
        def to_arg(leaf):
            if isinstance(leaf, TensorSpec):
                specs.append(leaf)
                return graph.add_argument(leaf.shape, leaf.dtype, leaf.name or f"arg{len(specs) - 1}")
            return leaf
        call_args = nest.map_structure(to_arg, args)
        call_kwargs = nest.map_structure(to_arg, kwargs)
        outputs = fn(*call_args, **call_kwargs)
        leaves = nest.flatten(outputs)
        values, slots = [], []
        for leaf in leaves:
            if leaf is None:
                slots.append(None)
                continue
            t = convert_to_tensor(leaf)
            slots.append(len(values))
            values.append(t.value)
        variables = [v for v, t in graph.variable_reads.items() if t is not None]
        updates = [v for v, t in graph.variable_values.items() if t is not graph.variable_reads.get(v)]
        names = [n for n, leaf in zip(nest.leaf_names(outputs), leaves) if leaf is not None]
        graph.finish(values + [graph.variable_values[v].value for v in updates], names=names)
    verify(graph.module, f"traced function {name!r}")
    return ConcreteFunction(graph, graph.name, specs, variables, outputs, slots, updates,
                            emit_text(graph.module))


def emit_text(module: ir.Module | ir.Operation) -> str:
    """A cleaned copy of a traced module as StableHLO text with the ops' name locations."""
    clean = module.operation.clone()
    try:
        run_pipeline(clean, EMIT_PIPELINE)
        return clean.get_asm(enable_debug_info=True)
    finally:
        clean.erase()




class Function:
    """A Python function traced per input signature, compiled with IREE and run: what
    ``ig.function`` returns (TensorFlow's ``tf.function`` object).

    Calling it traces ``fn`` once per signature (numpy arrays' shapes and dtypes, Python values,
    the ``input_signature`` when given), compiles each trace for ``target`` and runs it on
    ``device``; the arguments are those of ``ig.function``. Used on a method, the instance is a
    static argument. Called while another function is traced (or inside ``with
    ig.Graph().as_default():``), it traces ``fn`` into that graph instead, as ``tf.function``
    does: tensors pass through (gradients flow through the call), numpy values become
    constants, Python values stay static, and nothing is compiled for the inner function.

    Attributes and methods: ``name`` (the module's function name), ``input_signature``,
    ``target``, ``device``, ``compile_flags``; ``lower(*args)`` traces without compiling and
    returns an ``ig.Lowered``; ``get_concrete_function(*args)`` returns the trace itself;
    ``trace_count`` is the number of traces so far.

    Raises:
        TypeError: an ``input_signature`` entry that is not an ``ig.TensorSpec``, an unknown
            compile flag, a call with the wrong number of arguments or a dtype other than the
            signature's, a symbolic ``ig.Tensor`` as an argument outside any trace, or (called
            from a trace, as TensorFlow) a tensor of a shape the signature refuses.
        ValueError: an unknown ``target``, or an array of a shape the signature refuses.
    """

    def __init__(self, fn: Callable, input_signature: Sequence[TensorSpec] | None = None,
                 target: str = "llvm-cpu", device: str | None = None, **compile_flags):
        functools.update_wrapper(self, fn)
        self._fn = fn
        self.name = _symbol(getattr(fn, "__name__", "fn"))
        self.input_signature = None if input_signature is None else list(input_signature)
        if self.input_signature is not None:
            for s in self.input_signature:
                if not isinstance(s, TensorSpec):
                    raise TypeError(f"input_signature must hold ig.TensorSpec objects, got {s!r}")
        self.target = target
        self.device = device
        self.compile_flags = compile_flags
        _options(target, compile_flags)  # reject a bad target or flag now
        self._signature = _python_signature(fn)
        self._traces: dict[Any, ConcreteFunction] = {}
        # Calls whose arguments are all numpy arrays, by (shape, dtype) of each: the trace and
        # its loaded function, so a repeated call skips binding and building the trace's key.
        self._fast: dict[tuple, Callable[..., Any]] = {}
        # With an input_signature: per argument the numpy dtype and shape (None: any size) that
        # the one trace takes as it is, and (after the first call) its loaded function, run
        # straight away for positional numpy values that match (None for a bfloat16 argument:
        # such calls take the checked way).
        self._sig_arrays = None if self.input_signature is None else tuple(
            (None if s.dtype == dtypes.bfloat16 else np.dtype(s.dtype.as_numpy_dtype), tuple(s.shape))
            for s in self.input_signature)
        self._sig_runner: Callable[..., Any] | None = None

    # --- argument handling ---
    def _bind(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if self._signature is None:
            return args, kwargs
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.name}(): {e}") from None
        bound.apply_defaults()
        return bound.args, bound.kwargs

    def _specs_and_arrays(self, args: tuple, kwargs: dict, lowering: bool):
        """(key, args with TensorSpec leaves, arrays in argument order)."""
        arrays: list[np.ndarray] = []
        key_parts: list[Any] = []
        if self.input_signature is not None:
            # One TensorSpec per positional argument: a list argument is one tensor.
            flat = list(args) + [kwargs[k] for k in kwargs]
            if len(flat) != len(self.input_signature):
                raise TypeError(f"{self.name}() takes {len(self.input_signature)} tensor arguments per its "
                                f"input_signature, got {len(flat)}")
            for i, (leaf, spec) in enumerate(zip(flat, self.input_signature)):
                if isinstance(leaf, TensorSpec):
                    if not lowering or leaf != spec:
                        raise TypeError(f"argument {i}: {leaf!r} does not match the input_signature's {spec!r}")
                    continue
                arrays.append(conform(leaf, spec, i, self.name))
            specs = list(self.input_signature)
            return ("signature",), (tuple(specs[:len(args)]), dict(zip(kwargs, specs[len(args):]))), arrays

        def leaf_spec(leaf):
            if isinstance(leaf, TensorSpec):
                key_parts.append(("spec", tuple(leaf.shape), leaf.dtype.name))
                return leaf
            if isinstance(leaf, (np.ndarray, np.generic)):
                arr = np.asarray(leaf)
                spec = TensorSpec(arr.shape, dtypes.as_dtype(arr.dtype))
                key_parts.append(("spec", tuple(spec.shape), spec.dtype.name))
                arrays.append(arr)
                return spec
            if isinstance(leaf, Tensor):
                raise TypeError(f"{self.name}(): got the symbolic tensor {leaf.name!r} outside any trace; call "
                                "compiled functions with numpy arrays or Python values, or from another function")
            if isinstance(leaf, Variable):
                key_parts.append(("var", id(leaf)))
                return leaf
            try:
                hash(leaf)
                key_parts.append(("py", type(leaf).__name__, leaf))
            except TypeError:
                key_parts.append(("id", id(leaf)))
            return leaf

        structure = (args, kwargs)
        with_specs = nest.map_structure(leaf_spec, structure)
        key = (tuple(key_parts), _structure_key(structure))
        return key, with_specs, arrays

    def get_concrete_function(self, *args, **kwargs) -> ConcreteFunction:
        """The trace for these arguments (arrays, values or TensorSpecs; none: the
        ``input_signature``), traced now if new, not compiled."""
        if not args and not kwargs and self.input_signature is not None:
            args = tuple(self.input_signature)
        args, kwargs = self._bind(args, kwargs)
        key, with_specs, _ = self._specs_and_arrays(args, kwargs, lowering=True)
        return self._concrete(key, with_specs)

    def _concrete(self, key, with_specs) -> ConcreteFunction:
        cf = self._traces.get(key)
        if cf is None:
            call_args, call_kwargs = with_specs
            cf = self._traces[key] = trace(self._fn, self.name, call_args, call_kwargs)
        return cf

    def __call__(self, *args, **kwargs):
        if has_default_graph():  # called while another function is traced: trace into it
            return self._inline(args, kwargs)
        fast = None
        if self._sig_arrays is not None:
            # Positional numpy arrays (or scalars) of the signature's dtypes and shapes: straight
            # to the module.
            runner = self._sig_runner
            if runner is not None and not kwargs and len(args) == len(self._sig_arrays):
                for a, (dtype, shape) in zip(args, self._sig_arrays):
                    if (type(a) is not np.ndarray and not isinstance(a, np.generic)) or a.dtype != dtype \
                            or (a.shape != shape and not _fits(a.shape, shape)):
                        break
                else:
                    return runner(*args)
        elif not kwargs:
            # A call with the arrays of an earlier call's types and shapes: straight to its module.
            fast = tuple([(type(a), a.shape, a.dtype) if type(a) is np.ndarray or isinstance(a, np.generic)
                          else None for a in args])
            hit = self._fast.get(fast)
            if hit is not None:
                return hit(*args)
            if None in fast:
                fast = None
        bound_args, bound_kwargs = self._bind(args, kwargs)
        key, with_specs, arrays = self._specs_and_arrays(bound_args, bound_kwargs, lowering=False)
        cf = self._concrete(key, with_specs)
        fn = cf.module(self.target, self.device, self.compile_flags)[cf.name]
        if fast is not None and len(arrays) == len(args):  # every argument was an array leaf
            self._fast[fast] = cf.runner(fn)
        elif self._sig_arrays is not None and self._sig_runner is None:
            self._sig_runner = cf.runner(fn)
        return cf.run_with(fn, arrays)

    def _inline(self, args: tuple, kwargs: dict):
        """A call while a graph is being built (another ``ig.function``'s trace, a ``with
        ig.Graph().as_default():`` block): ``fn`` traced into that graph, as ``tf.function``
        called from a ``tf.function``. Tensors pass as they are, so gradients flow through the
        call; numpy values become constants, Python values stay static; with an
        ``input_signature``, each argument is checked against (and converted to) its
        ``TensorSpec`` (``TypeError`` otherwise, as TensorFlow raises). Returns ``fn``'s
        outputs, each leaf a tensor (``None`` stays ``None``)."""
        if self.input_signature is not None:
            args, kwargs = self._bind(args, kwargs)
            flat = list(args) + list(kwargs.values())
            if len(flat) != len(self.input_signature):
                raise TypeError(f"{self.name}() takes {len(self.input_signature)} tensor arguments per its "
                                f"input_signature, got {len(flat)}")
            tensors = [_conform_tensor(leaf, spec, i, self.name)
                       for i, (leaf, spec) in enumerate(zip(flat, self.input_signature))]
            args, kwargs = tuple(tensors[:len(args)]), dict(zip(kwargs, tensors[len(args):]))
        else:
            args, kwargs = nest.map_structure(_numpy_to_tensor, (args, kwargs))
        outputs = self._fn(*args, **kwargs)
        return nest.map_structure(lambda t: t if t is None or isinstance(t, Tensor) else convert_to_tensor(t),
                                  outputs)

    def lower(self, *args, **kwargs) -> Lowered:
        """Trace for these arguments (arrays, values or TensorSpecs) without running."""
        return Lowered(self.get_concrete_function(*args, **kwargs), self)

    @property
    def trace_count(self) -> int:
        """How many signatures have been traced so far (by calls and ``lower`` alike)."""
        return len(self._traces)

    def __get__(self, instance, owner):  # methods: bind self as a static argument
        if instance is None:
            return self
        return functools.partial(self.__call__, instance)

    def __repr__(self) -> str:
        return f"<ig.function {self.name} ({len(self._traces)} traces)>"


class Lowered:
    """One trace of an ``ig.function``, lowered to StableHLO but not compiled: what ``f.lower()``
    returns (as ``jax.jit(f).lower()``; TensorFlow's closest is a ``ConcreteFunction``).

    ``.mlir`` (also ``str(lowered)``) is the verified StableHLO module text, ``.name`` its public
    function's name and ``.graph`` the ``ig.Graph`` it was traced into.
    ``.compile(target=None, **flags)`` compiles it into an ``ig.Artifact``: by default for the
    ``ig.function``'s own target and compile flags (``flags`` override them), else for
    ``"llvm-cpu"``.

    Example::

        lowered = f.lower(ig.TensorSpec([3]))
        print(lowered.mlir)                    # or: irgrad compile model.py:f
        lowered.compile("vmvx").save("f.vmfb")
    """

    def __init__(self, concrete: ConcreteFunction, function: Function | None = None):
        self.concrete = concrete
        self._function = function

    @property
    def mlir(self) -> str:
        return self.concrete.mlir

    @property
    def graph(self) -> Graph:
        return self.concrete.graph

    @property
    def name(self) -> str:
        return self.concrete.name

    def compile(self, target: str | None = None, **flags) -> Artifact:
        if target is None and self._function is not None:
            target, flags = self._function.target, {**self._function.compile_flags, **flags}
        return self.concrete.compile(target or "llvm-cpu", **flags)

    def __str__(self) -> str:
        return self.mlir


def _python_signature(fn) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _structure_key(structure) -> Any:
    if isinstance(structure, dict):
        return ("dict", tuple((k, _structure_key(structure[k])) for k in sorted(structure, key=repr)))
    if isinstance(structure, (list, tuple)):
        return (type(structure).__name__, tuple(_structure_key(s) for s in structure))
    return "."


def _fits(shape: tuple[int, ...], spec: tuple[int | None, ...]) -> bool:
    """Whether an array's shape is one a TensorSpec's (None: any size) takes."""
    return len(shape) == len(spec) and all(d is None or n == d for n, d in zip(shape, spec))


def conform(value, spec: TensorSpec, index: int, fname: str, shape_error: type[Exception] = ValueError) -> np.ndarray:
    if isinstance(value, Tensor):
        raise TypeError(f"{fname}(): argument {index} is a symbolic tensor; pass numpy arrays")
    if isinstance(value, np.ndarray) and dtypes.as_dtype(value.dtype) != spec.dtype:
        raise TypeError(f"{fname}(): argument {index} has dtype {value.dtype}, but the input_signature "
                        f"expects {spec.dtype.name}")
    arr, _ = as_numpy(value, spec.dtype)
    if not _fits(arr.shape, tuple(spec.shape)):
        raise shape_error(f"{fname}(): argument {index} has shape {tuple(arr.shape)}, but the "
                          f"input_signature expects {tuple(spec.shape)}")
    return arr


def _conform_tensor(value, spec: TensorSpec, index: int, fname: str) -> Tensor:
    """Argument ``index`` of an inlined call (``Function._inline``) as a tensor of ``spec``: a
    tensor (or a variable, read) of its dtype and a shape it takes, or a value converted to
    one. TensorFlow's binding rule: ``TypeError`` for either mismatch."""
    if isinstance(value, (Tensor, Variable)):
        t = convert_to_tensor(value)
        if t.dtype != spec.dtype:
            raise TypeError(f"{fname}(): argument {index} is a {t.dtype.name} tensor, but the input_signature "
                            f"expects {spec.dtype.name}")
        shape = tuple(t.shape)
        if len(shape) != len(spec.shape) or any(n is not None and d is not None and n != d
                                                for n, d in zip(shape, spec.shape)):
            raise TypeError(f"{fname}(): argument {index} has shape {shape}, but the input_signature "
                            f"expects {tuple(spec.shape)}")
        return t
    return convert_to_tensor(conform(value, spec, index, fname, TypeError), spec.dtype)


def _numpy_to_tensor(leaf):
    """A numpy argument of an inlined call as a constant (TensorFlow's rule); others as they are."""
    return convert_to_tensor(leaf) if isinstance(leaf, (np.ndarray, np.generic)) else leaf


# The decorator's two forms, for type checkers only: at run time ``typing.overload`` files every
# variant in a registry that outlives the interpreter's clean-up, and with them this module's
# globals, the runtime modules they reach and every IREE object those hold (devices, VM
# instances): nanobind then reports them all as leaked at exit (issue 40).
if TYPE_CHECKING:
    @overload
    def function(fn: Callable[..., Any], input_signature: Sequence[TensorSpec] | None = None,
                 target: str = "llvm-cpu", device: str | None = None, **compile_flags: Any) -> Function: ...
    @overload
    def function(fn: None = None, input_signature: Sequence[TensorSpec] | None = None,
                 target: str = "llvm-cpu", device: str | None = None,
                 **compile_flags: Any) -> Callable[[Callable[..., Any]], Function]: ...


def function(fn: Callable[..., Any] | None = None, input_signature: Sequence[TensorSpec] | None = None,
             target: str = "llvm-cpu", device: str | None = None,
             **compile_flags: Any) -> Function | Callable[[Callable[..., Any]], Function]:
    """Make ``fn`` a compiled function, as ``tf.function``: ``@ig.function`` or ``@ig.function(...)``.

    The first call for each input signature traces ``fn`` into a graph (ops on tensors record
    nodes; Python runs once), lowers it to StableHLO, compiles it with IREE and caches the
    artifact; later calls with the same signature only run it. A call returns numpy arrays in
    the structure ``fn`` returned (tensor, tuple, list, dict; ``None`` stays ``None``).

    Args:
        fn: the Python function; omitted when used as ``@ig.function(...)``.
        input_signature: a list of ``ig.TensorSpec``, one per argument. Without it, every call's
            arguments decide: numpy arrays are tensor arguments (one trace per shape and dtype),
            Python scalars static values (one trace per value), ``ig.Variable``s are captured,
            their values passed in at call time. With it, ``f.lower()`` and ``irgrad compile
            model.py:f`` need no example arguments, and other shapes are refused.
        target: IREE compile target: ``"llvm-cpu"`` (``"cpu"``), ``"vmvx"``, ``"vulkan-spirv"``
            (``"vulkan"``), ``"cuda"``, ``"rocm"``.
        device: the IREE device to run on (``"local-task"``, ``"local-sync"``, ``"vulkan"``,
            ``"cuda"``, ``"hip"``); ``None`` lets ``ig.load``'s rule pick.
        **compile_flags: ``irgrad.runtime.CompileOptions`` fields: ``cpu``, ``triple``,
            ``cuda_arch``, ``rocm_arch``, ``extra_flags``, ``memory_limit``, ``time_limit``.

    Functions that call functions: an ``ig.function`` called inside another one's trace is
    traced inline, as ``tf.function`` called from a ``tf.function`` (keyword arguments, static
    Python values, its ``input_signature`` checked, gradients through the call); only the
    outermost function is compiled.

    Retracing: a new shape, dtype or Python value traces and compiles again (each compile also
    lands in the disk cache, ``irgrad cache info``). Pass arrays, not Python numbers, for values
    that change, or give an ``input_signature``.

    Example::

        @ig.function(input_signature=[ig.TensorSpec([3])])
        def loss(x):
            return ig.reduce_sum(ig.tanh(x) ** 2)

        loss(np.ones(3, np.float32))       # a 0-d numpy float32 array (shape ())
        loss.lower().mlir                  # the StableHLO text; .compile() gives an ig.Artifact
    """
    if fn is None:
        return lambda f: Function(f, input_signature, target, device, **compile_flags)
    return Function(fn, input_signature, target, device, **compile_flags)


def export(fn: Callable[..., Any], *specs: Any, name: str | None = None) -> str:
    """StableHLO module text of ``fn`` traced with ``specs`` (``ig.TensorSpec`` or example arrays).

    The module's public function is named after the Python function (``def double`` gives
    ``@double``; a lambda ``@_lambda_``) unless ``name`` is given. The text is pure StableHLO,
    CHLO and func: ``irgrad grad``, ``passes.differentiate``, ``ig.compile`` or plain
    ``iree-compile`` take it. With no ``specs``, an ``ig.function``'s ``input_signature`` is used.

    Example: ``ig.export(lambda x: ig.sin(x) * 2.0, ig.TensorSpec([3]), name="f")``.
    """
    f = fn if isinstance(fn, Function) else Function(fn)
    if name is not None:
        f = Function(f._fn, f.input_signature, f.target, f.device, **f.compile_flags)
        f.name = _symbol(name)
    if not specs and f.input_signature is not None:
        specs = tuple(f.input_signature)
    return f.lower(*specs).mlir


def compile(mlir_text_or_lowered: str | Lowered, target: str = "llvm-cpu", **flags: Any) -> Artifact:  # noqa: A001
    """Compile StableHLO text (or a ``Lowered``, what ``f.lower()`` returns) into an ``ig.Artifact``.

    Targets (``target=``), and the device each runs on:

    - ``"llvm-cpu"`` (``"cpu"``): this CPU by default (``cpu="host"``); ``cpu="generic"`` for any
      CPU of the architecture; ``triple="aarch64-linux-gnu"`` or ``"riscv64-linux-gnu"``
      cross-compiles. Runs on ``local-task`` or ``local-sync``.
    - ``"vmvx"``: IREE's portable bytecode, slow, exact float64 (``local-task``).
    - ``"vulkan-spirv"`` (``"vulkan"``): any Vulkan device (``vulkan``).
    - ``"cuda"``: ``cuda_arch="sm_80"`` by default (``cuda``).
    - ``"rocm"``: ``rocm_arch="gfx942"`` by default (``hip``).

    ``**flags`` are ``irgrad.runtime.CompileOptions`` fields: also ``extra_flags`` (more
    ``iree-compile`` flags), ``memory_limit`` and ``time_limit`` (past either the compile stops
    with ``CompileError``). IREE workarounds are applied first, and the result is cached in memory
    and on disk. ``artifact.save(path)`` writes it; ``ig.load`` runs it.
    """
    if isinstance(mlir_text_or_lowered, Lowered):
        return mlir_text_or_lowered.compile(target, **flags)
    if not isinstance(mlir_text_or_lowered, str):
        raise TypeError(f"ig.compile takes MLIR text or the result of f.lower(), got "
                        f"{type(mlir_text_or_lowered).__name__}")
    return compile_text(mlir_text_or_lowered, _options(target, flags))
