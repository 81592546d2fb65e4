"""Function signatures of a StableHLO module: read from MLIR text, from JSON, or
from the ``iree.abi.declaration`` that IREE writes into every exported function.

Shapes are tuples of ints, ``None`` for a dynamic dimension; dtypes are
numpy-style names (``float32``, ``int64``, ``bool``, ``complex64``, ...).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..boundary import DTYPES as _DTYPE_SPELLINGS
from ..boundary import ELEMENT_DTYPES, argument_names, mlir_bindings, parse, result_names

__all__ = ["TensorType", "Signature", "DTYPES", "parse_signatures", "parse_declaration"]

# The frontend's dtypes, and the complex ones a module from another producer (or a complex
# gradient) may take or return: complex64 is MLIR's complex<f32>, complex128 complex<f64>.
_SPELLINGS: dict[str, str] = {**_DTYPE_SPELLINGS, "complex64": "complex<f32>", "complex128": "complex<f64>"}
_ELEMENTS: dict[str, str] = {**ELEMENT_DTYPES, "complex<f32>": "complex64", "complex<f64>": "complex128"}
DTYPES: tuple[str, ...] = tuple(_SPELLINGS)

# A ranked tensor type's body (``2x?xf32``, ``3xcomplex<f32>``) and its dimensions and element.
_TENSOR = re.compile(r"\s*tensor<((?:[^<>,]|<[^<>,]*>)*)>\s*")
_DIMS = re.compile(r"((?:(?:\d+|\?)x)*)(.*)")


@dataclasses.dataclass(frozen=True)
class TensorType:
    """Shape and dtype of one argument or result."""

    shape: tuple[int | None, ...]
    dtype: str

    def __str__(self) -> str:
        dims = "".join(("?" if d is None else str(d)) + "x" for d in self.shape)
        return dims + _SPELLINGS[self.dtype]

    def matches_shape(self, shape: tuple[int, ...]) -> bool:
        """True when ``shape`` fits, a dynamic dimension accepting any size."""
        return len(shape) == len(self.shape) and all(
            want is None or want == got for want, got in zip(self.shape, shape)
        )

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TensorType:
        return cls(tuple(data["shape"]), str(data["dtype"]))

    @classmethod
    def from_mlir(cls, text: str) -> TensorType:
        """Parses an MLIR ranked tensor type such as ``tensor<2x?xf32>`` or ``tensor<3xcomplex<f32>>``."""
        match = _TENSOR.fullmatch(text)
        if match is None:
            raise ValueError(f"unsupported type {text!r}; irgrad handles ranked tensors only")
        dims, element = _DIMS.fullmatch(match.group(1)).groups()  # type: ignore[union-attr]
        if element not in _ELEMENTS:
            raise ValueError(f"unsupported type {text!r}; irgrad handles ranked tensors of {', '.join(DTYPES)}")
        return cls(tuple(None if d == "?" else int(d) for d in dims.split("x")[:-1]), _ELEMENTS[element])


@dataclasses.dataclass(frozen=True)
class Signature:
    """Name, argument types and result types of one public function."""

    name: str
    inputs: tuple[TensorType, ...]
    outputs: tuple[TensorType, ...]
    # Each argument's name where the producer gave one (``boundary.argument_names``); empty
    # when none has a name.
    arg_names: tuple[str | None, ...] = ()
    # Each result's name where the producer gave one (``boundary.result_names``: JAX's
    # ``jax.result_info``, an ig.function's dict keys, a derived function's ``d_w``, ``m_w``,
    # ``step``...); empty when none has a name, and in artifacts written before results had names.
    result_names: tuple[str | None, ...] = ()

    def __repr__(self) -> str:
        return f"{self.name}({_listed(self.arg_names, self.inputs)}) -> ({_listed(self.result_names, self.outputs)})"

    __str__ = __repr__

    def input_keys(self) -> list[str]:
        """Every argument's name, ``arg<i>`` where it has none (unique: npz keys, dicts)."""
        return _keys(self.arg_names, len(self.inputs), "arg")

    def output_keys(self) -> list[str]:
        """Every result's name, ``result<k>`` where it has none (unique: npz keys, dicts)."""
        return _keys(self.result_names, len(self.outputs), "result")

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
        }
        if self.arg_names:
            data["arg_names"] = list(self.arg_names)
        if self.result_names:
            data["result_names"] = list(self.result_names)
        return data

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> Signature:
        """Reads ``to_json``'s dictionary; one without names (older artifacts) reads as unnamed."""
        return cls(
            name,
            tuple(TensorType.from_json(t) for t in data["inputs"]),
            tuple(TensorType.from_json(t) for t in data["outputs"]),
            tuple(data.get("arg_names") or ()),
            tuple(data.get("result_names") or ()),
        )


def _listed(names: tuple[str | None, ...], types: tuple[TensorType, ...]) -> str:
    names = names or (None,) * len(types)
    return ", ".join(f"{n}: {t}" if n else str(t) for n, t in zip(names, types))


def _keys(names: tuple[str | None, ...], count: int, prefix: str) -> list[str]:
    given = list(names) + [None] * (count - len(names))
    keys = [n or f"{prefix}{i}" for i, n in enumerate(given[:count])]
    # A positional key that another value's name already took: that value keeps its name.
    return [k if keys.count(k) == 1 or k == given[i] else f"{prefix}{i}_" for i, k in enumerate(keys)]


def public_functions(module: Any) -> list[Any]:
    """The public ``func.func`` ops at the top of a parsed module."""
    funcs = []
    for op in module.body.operations:
        if op.operation.name != "func.func":
            continue
        attrs = op.operation.attributes
        visibility = str(attrs["sym_visibility"]).strip('"') if "sym_visibility" in attrs else "public"
        if visibility == "public":
            funcs.append(op.operation)
    return funcs


def signature_of(func_op: Any) -> Signature:
    """The Signature of a parsed ``func.func`` op."""
    ir = mlir_bindings()
    attrs = func_op.attributes
    name = ir.StringAttr(attrs["sym_name"]).value
    ftype = ir.FunctionType(ir.TypeAttr(attrs["function_type"]).value)

    def convert(kind: str, index: int, t: Any) -> TensorType:
        try:
            return TensorType.from_mlir(str(t))
        except ValueError as error:
            raise ValueError(f"@{name} {kind} {index}: {error}") from None

    names, results = argument_names(func_op), result_names(func_op)
    return Signature(
        name,
        tuple(convert("argument", i, t) for i, t in enumerate(ftype.inputs)),
        tuple(convert("result", i, t) for i, t in enumerate(ftype.results)),
        tuple(names) if any(names) else (),
        tuple(results) if any(results) else (),
    )


def parse_signatures(text: str) -> dict[str, Signature]:
    """Signatures of the public functions of a StableHLO module, by name.

    Raises IRParseError (a ValueError) when the text does not parse.
    """
    ir = mlir_bindings()
    with ir.Context() as context:
        module = parse(text, context)
        return {sig.name: sig for sig in map(signature_of, public_functions(module))}


# One argument or result of IREE's declaration, e.g.
#   %input2: tensor<i8> {iree.abi.encoding = tensor<ui8>}
_DECL_ITEM = re.compile(
    r"%(?P<kind>input|output)\d+:\s*(?P<type>tensor<(?:[^<>]|<[^<>]*>)*>|[^,)\s]+)"
    r"(?:\s*\{[^}]*iree\.abi\.encoding\s*=\s*(?P<encoding>tensor<(?:[^<>]|<[^<>]*>)*>)[^}]*\})?"
)


def parse_declaration(name: str, declaration: str) -> Signature:
    """The Signature in IREE's ``iree.abi.declaration`` reflection string.

    Example: ``sync func @f(%input0: tensor<2x3xf32>) -> (%output0: tensor<2xf32>)``.
    """
    inputs, outputs = [], []
    for match in _DECL_ITEM.finditer(declaration):
        t = TensorType.from_mlir(match.group("encoding") or match.group("type"))
        (inputs if match.group("kind") == "input" else outputs).append(t)
    return Signature(name, tuple(inputs), tuple(outputs))
