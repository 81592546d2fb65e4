"""irgrad dtypes: TensorFlow-style names over numpy dtypes and MLIR element types."""
from __future__ import annotations

import numpy as np

from .boundary import DTYPES


class DType:
    """A tensor element type: TensorFlow's ``tf.DType`` (``ig.float32``, ``ig.int64``, ``ig.bool``...).

    irgrad's dtypes are those StableHLO and IREE compile: float16, bfloat16, float32, float64,
    int8 to int64, uint8 to uint64 and bool (TF-compat: no complex, string or quantized types).
    A DType compares equal to another of the same name, to its name (``ig.float32 == "float32"``)
    and to its numpy dtype (``== np.float32``), and hashes by name.

    ``name``, ``as_numpy_dtype`` (bfloat16 has no numpy type: float32 stands in), ``is_floating``,
    ``is_integer``, ``is_unsigned`` (true for bool too), ``is_bool``, ``base_dtype`` (itself),
    ``min`` and ``max`` (of a numeric type) are TensorFlow's. ``ig.as_dtype`` makes one from a name
    or numpy dtype.
    """

    __slots__ = ("name", "_np")

    def __init__(self, name: str, np_dtype):
        self.name = name
        self._np = np_dtype

    @property
    def as_numpy_dtype(self):
        """The numpy scalar type (bfloat16 has none in numpy: float32 stands in)."""
        return self._np

    @property
    def is_floating(self) -> bool:
        return self.name in ("float16", "bfloat16", "float32", "float64")

    @property
    def is_integer(self) -> bool:
        return self.name.startswith(("int", "uint"))

    @property
    def is_unsigned(self) -> bool:
        return self.name.startswith("uint") or self.name == "bool"

    @property
    def is_bool(self) -> bool:
        return self.name == "bool"

    @property
    def base_dtype(self) -> DType:
        return self

    @property
    def min(self):
        return np.finfo(self._np).min if self.is_floating else np.iinfo(self._np).min

    @property
    def max(self):
        return np.finfo(self._np).max if self.is_floating else np.iinfo(self._np).max

    def __repr__(self) -> str:
        return f"ig.{self.name}"

    def __eq__(self, other) -> bool:
        if isinstance(other, DType):
            return self.name == other.name
        try:
            return self.name == as_dtype(other).name
        except TypeError:
            return False

    def __hash__(self) -> int:
        return hash(self.name)


# One DType per dtype the IR boundary spells; bfloat16 has no numpy scalar type.
_BY_NAME = {name: DType(name, np.float32 if name == "bfloat16" else np.dtype(name).type) for name in DTYPES}
float16, bfloat16, float32, float64 = (_BY_NAME[n] for n in ("float16", "bfloat16", "float32", "float64"))
int8, int16, int32, int64 = (_BY_NAME[f"int{b}"] for b in (8, 16, 32, 64))
uint8, uint16, uint32, uint64 = (_BY_NAME[f"uint{b}"] for b in (8, 16, 32, 64))
bool_ = _BY_NAME["bool"]
half, double = float16, float64

_BY_NAME.update({"half": float16, "float": float32, "double": float64})


def as_dtype(value) -> DType:
    """The ``ig.DType`` for ``value``: TensorFlow's ``tf.as_dtype``.

    Args:
        value: a ``DType`` (returned as is); a name (``"float32"``, ``"int8"``, ``"bool"``, and
            the aliases ``"half"``, ``"float"``, ``"double"``); a numpy dtype or scalar type
            (``np.float64``); or a Python type: ``float`` gives float32, ``int`` int32 and ``bool``
            bool (the dtypes TensorFlow gives Python values).

    Returns:
        The ``DType``.

    Raises:
        TypeError: a type irgrad does not have (complex, strings, objects); the message lists
            the supported names.
    """
    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value in _BY_NAME:
        return _BY_NAME[value]
    if value is float:
        return float32
    if value is int:
        return int32
    if value is bool:
        return bool_
    try:
        name = np.dtype(value).name
    except TypeError:
        name = None
    if name in _BY_NAME:
        return _BY_NAME[name]
    raise TypeError(f"cannot interpret {value!r} as an irgrad dtype; "
                    f"supported: {', '.join(sorted(n for n in _BY_NAME if n not in ('half', 'float', 'double')))}")


def default_dtype_of(value) -> DType:
    """The dtype TensorFlow gives a Python or numpy value (Python float -> float32)."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        return as_dtype(value.dtype)
    arr = np.asarray(value)
    if arr.dtype == np.bool_:
        return bool_
    if arr.dtype.kind == "f":
        return float32
    if arr.dtype.kind in "iu":
        return int32 if arr.size == 0 or (np.abs(arr).max() < 2**31) else int64
    raise TypeError(f"cannot convert {type(value).__name__} {value!r} to a tensor")
