"""The one import shim for the MLIR Python bindings shipped with IREE.

Every pass reaches MLIR through this module: the shared context, parsing and
verification with one-line errors (``irgrad.boundary``'s, as the runtime reports
them), element types by dtype name, and cheap (cached) reads of tensor types.
"""
from __future__ import annotations

import importlib.util
import sys
import threading
import types
from collections.abc import Callable

from iree.compiler import ir, passmanager  # noqa: F401  (re-exported)

from ...boundary import IRError, diagnostic, dtype_of_element, parse, save_failed_ir, spelling_of_dtype

# The bindings look up Python op classes for a dialect by importing
# iree.compiler.dialects.<dialect> whenever they wrap an op; IREE ships none for
# stablehlo/chlo, and a failed import is retried on every op (a full sys.path
# search, ~100 us). An empty module makes the lookup succeed once and be cached.
for _dialect in ("stablehlo", "chlo"):
    _name = f"iree.compiler.dialects.{_dialect}"
    if _name not in sys.modules and importlib.util.find_spec(_name) is None:
        sys.modules[_name] = types.ModuleType(_name)

__all__ = [
    "ir", "passmanager", "IRError", "context", "parse_module", "verify",
    "element_type", "dtype_name", "tensor_type", "shape", "elem", "is_float",
    "is_integer", "is_float_type", "is_integer_type", "loc_name", "run_pipeline",
]


_lock = threading.Lock()
_context: ir.Context | None = None


def context() -> ir.Context:
    """The process-wide MLIR context (stablehlo, chlo and func registered)."""
    global _context
    with _lock:
        if _context is None:
            _context = ir.Context()
            # JAX attaches Shardy attributes (#sdy.op_sharding_rule<...>) and this
            # build registers no sdy dialect: keep them as opaque attributes.
            _context.allow_unregistered_dialects = True
        return _context


# Run on each parsed module that may hold shape-dialect ops: ``dynamic_shapes`` adds its
# lowering here when it is imported (it builds on this module, which therefore cannot import it;
# importing ``irgrad.passes`` imports both).
SHAPE_DIALECT_HOOKS: list[Callable[[ir.Module], object]] = []


def parse_module(text: str | bytes) -> ir.Module:
    """Parse StableHLO/CHLO/func text (or bytecode) into a verified module or raise IRError.
    Shape-dialect broadcasting (torch-mlir, TF's MLIR bridge) is lowered on the way in."""
    module = parse(text, context())
    if isinstance(text, bytes) or "shape." in text:
        for hook in SHAPE_DIALECT_HOOKS:
            hook(module)
    return module


def verify(op: ir.Operation | ir.Module, what: str = "module") -> None:
    """Run the MLIR verifier; on failure dump the IR and name the file."""
    operation = op.operation if hasattr(op, "operation") else op
    try:
        operation.verify()
    except ir.MLIRError as e:
        path = save_failed_ir(operation.get_asm(enable_debug_info=True, assume_verified=True), "invalid")
        where = f" (IR written to {path})" if path else ""
        raise IRError(f"{what} failed MLIR verification: {diagnostic(e)}{where}") from None


def run_pipeline(op: ir.Operation, pipeline: str) -> None:
    """Run a textual pass pipeline (e.g. 'builtin.module(canonicalize,cse)') on op."""
    with context():
        pm = passmanager.PassManager.parse(pipeline)
        try:
            pm.run(op.operation if hasattr(op, "operation") else op)
        except ir.MLIRError as e:
            raise IRError(f"pass pipeline {pipeline} failed: {diagnostic(e)}") from None


# ----- dtypes -----------------------------------------------------------------

_elem_cache: dict[str, ir.Type] = {}
_type_cache: dict[ir.Type, tuple[tuple[int, ...], ir.Type]] = {}
_float_cache: dict[ir.Type, bool] = {}


def element_type(dtype: str) -> ir.Type:
    """MLIR element type for a numpy-style dtype name ('float32' -> f32)."""
    t = _elem_cache.get(dtype)
    if t is None:
        spelling = spelling_of_dtype(dtype)
        with context():
            t = _elem_cache[dtype] = ir.Type.parse(spelling)
    return t


def dtype_name(element: ir.Type) -> str:
    """numpy-style dtype name of an MLIR element type (f32 -> 'float32')."""
    return dtype_of_element(str(element))


def tensor_type(shape_: tuple[int, ...] | list[int], element: ir.Type | str) -> ir.RankedTensorType:
    if isinstance(element, str):
        element = element_type(element)
    with context(), ir.Location.unknown():
        return ir.RankedTensorType.get(list(shape_), element)


def _describe(t: ir.Type) -> tuple[tuple[int, ...], ir.Type]:
    d = _type_cache.get(t)
    if d is None:
        rt = ir.RankedTensorType(t)
        d = _type_cache[t] = (tuple(rt.shape), rt.element_type)
    return d


def shape(v: ir.Value | ir.Type) -> tuple[int, ...]:
    """Static shape of a ranked tensor value (or type)."""
    return _describe(v if isinstance(v, ir.Type) else v.type)[0]


def elem(v: ir.Value | ir.Type) -> ir.Type:
    """Element type of a ranked tensor value (or type)."""
    return _describe(v if isinstance(v, ir.Type) else v.type)[1]


def is_float(v: ir.Value | ir.Type) -> bool:
    """True for values whose elements are floating point (they carry gradients)."""
    t = v if isinstance(v, ir.Type) else v.type
    r = _float_cache.get(t)
    if r is None:
        r = _float_cache[t] = isinstance(t.maybe_downcast(), ir.RankedTensorType) and is_float_type(elem(t))
    return r


def is_integer(v: ir.Value | ir.Type) -> bool:
    t = v if isinstance(v, ir.Type) else v.type
    return isinstance(t.maybe_downcast(), ir.RankedTensorType) and is_integer_type(elem(t))


def is_float_type(element: ir.Type) -> bool:
    return isinstance(element.maybe_downcast(), ir.FloatType)


def is_integer_type(element: ir.Type) -> bool:
    return isinstance(element.maybe_downcast(), ir.IntegerType)


def loc_name(op: ir.Operation) -> str | None:
    """The name of an op's NameLoc (the user's op name), or None."""
    loc = op.location
    try:
        return loc.name_str
    except AttributeError:
        return None
