"""Tensors as text, in iree-run-module's syntax: ``--input`` specs, printed results, ``--output`` sinks.

    parse_input("2x2xf32=1,2,3,4")      -> [array([[1., 2.], [3., 4.]], dtype=float32)]
    format_array(array, "f32")          -> "2x2xf32=[1 2][3 4]"
    parse_output("@out.npy")            -> ("write", Path("out.npy"))
"""
from __future__ import annotations

import io
import math
import os
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .boundary import ELEMENT_DTYPES
from .runtime import Signature, TensorType
from .runtime.artifact import atomic_write
from .messages import did_you_mean, one_line

__all__ = [
    "MAX_PRINTED_ELEMENTS", "numpy_dtype", "parse_type", "parse_value", "read_npy", "read_npz",
    "arguments_from_npz", "parse_input", "format_array", "parse_output", "save_array", "read_run_specs", "write_npz",
    "report_results",
]

# iree-run-module prints at most this many elements of a result.
MAX_PRINTED_ELEMENTS = 1024

# Element types by spelling: StableHLO's, and for complex values MLIR's ``complex<f32>`` and
# iree-run-module's ``cf64`` (its complex<f32>, named by the total width).
_ELEMENTS = {**ELEMENT_DTYPES, "complex<f32>": "complex64", "complex<f64>": "complex128",
             "cf64": "complex64", "cf128": "complex128"}


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of an irgrad dtype name; bfloat16 needs the ml_dtypes package."""
    if dtype == "bfloat16":
        try:
            import ml_dtypes  # optional dependency: only bf16 values need it
        except ImportError:
            raise ValueError("bf16 values need the ml_dtypes package") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def parse_type(text: str) -> tuple[tuple[int, ...], str]:
    """``2x3xf32`` -> ((2, 3), "float32"); ``f32`` -> ((), "float32"); ``2xcomplex<f32>`` (or
    iree-run-module's ``2xcf64``) -> ((2,), "complex64")."""
    text = text.strip()
    *dims, element = text.split("x")
    if text.endswith(">") and "xcomplex<" in "x" + text:  # 'complex' holds an x
        head, _, tail = ("x" + text).rpartition("xcomplex<")
        dims, element = head[1:].split("x") if head else [], "complex<" + tail
    if element not in _ELEMENTS:
        raise ValueError(f"unknown element type {element!r}; allowed: {', '.join(_ELEMENTS)}")
    if not all(d.isdigit() for d in dims):
        raise ValueError(f"bad shape {'x'.join(dims)!r}; expected static sizes such as 2x3")
    return tuple(int(d) for d in dims), _ELEMENTS[element]


def parse_value(token: str, dtype: np.dtype) -> Any:
    """One element of ``dtype`` from its text: 0/1/true/false for bool, decimal or 0x hex for integers,
    Python's complex literals (``1+2j``, ``-0.5j``, ``3``; ``i`` for ``j`` too) for complex."""
    if dtype == np.bool_:
        value = {"0": False, "1": True, "false": False, "true": True}.get(token.lower())
        if value is None:
            raise ValueError(f"bad i1 value {token!r}; use 0, 1, true or false")
        return value
    if dtype.kind in "iu":
        try:
            value = int(token, 16) if token.lower().lstrip("+-").startswith("0x") else int(token)
        except ValueError:
            raise ValueError(f"bad integer {token!r}") from None
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise ValueError(f"{value} is out of range for {dtype.name} [{info.min}, {info.max}]")
        return value
    try:
        if dtype.kind == "c":
            return complex(token.replace("i", "j") if token.lower().endswith("i") else token)
        return float(token)
    except ValueError:
        raise ValueError(f"bad {'complex ' if dtype.kind == 'c' else ''}number {token!r}") from None


def read_npy(path: str) -> list[np.ndarray]:
    """Every array in a .npy file (numpy.save may have appended several)."""
    arrays = []
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        while f.tell() < size:
            try:
                arrays.append(np.load(f, allow_pickle=False))
            except ValueError as error:
                raise ValueError(f"{path} is not a .npy file ({one_line(error)})") from None
    if not arrays:
        raise ValueError(f"{path} is empty")
    return arrays


def read_npz(path: str) -> dict[str, np.ndarray]:
    """The arrays of a .npz file (numpy.savez), by key."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except (ValueError, OSError, zipfile.BadZipFile) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise ValueError(f"{path} is not a .npz file ({one_line(error)})") from None


def arguments_from_npz(arrays: dict[str, np.ndarray], signature: Signature, path: str) -> list[np.ndarray]:
    """One array per argument of ``signature`` from a .npz: each found under the argument's
    name, ``arg<i>``, ``arr_<i>`` (numpy.savez's positional keys) or ``<i>``."""
    names = signature.arg_names or (None,) * len(signature.inputs)
    out, used = [], set()
    for i, name in enumerate(names):
        key = next((k for k in (name, f"arg{i}", f"arr_{i}", str(i)) if k is not None and k in arrays), None)
        if key is None:
            label = f"argument {i}" + (f" ({name})" if name else "")
            raise ValueError(f"{path} has no array for {label} of {signature.name}; it holds: "
                             f"{', '.join(arrays) or 'nothing'}{did_you_mean(name or f'arg{i}', arrays)}")
        out.append(arrays[key])
        used.add(key)
    extra = [k for k in arrays if k not in used]
    if extra:
        raise ValueError(f"{path}: no argument of {signature.name} takes {', '.join(map(repr, extra))} "
                         f"(it takes {len(names)}: by name, arg<i>, arr_<i> or <i>)")
    return out


def parse_input(spec: str) -> list[np.ndarray] | dict[str, np.ndarray]:
    """Arrays for one ``--input``, in iree-run-module's syntax.

    * ``2x2xf32=1,2,3,4``, ``2x2xf32=1 2 3 4`` or ``2x2xf32=[1 2][3 4]``: commas,
      spaces and brackets all separate values; brackets are not checked against
      the shape.
    * ``2x2xf32=5`` fills every element with 5; ``2x2xf32`` (no values) is zeros.
    * ``f32=3`` is a 0-d tensor. A bare ``3`` (an IREE VM scalar) is rejected:
      irgrad functions take tensors only.
    * element types: f16, bf16, f32, f64, i1 (0/1/true/false), i8..i64 (signed),
      si8..si64, ui8..ui64; integers may be hex (0x10) and must fit the type;
      complex<f32> and complex<f64> (iree-run-module's cf64, cf128), values such as 1+2j.
    * ``2x2xf32=@file.bin``: raw little-endian bytes; ``@file.npy``: every array in
      a .npy file (several when numpy.save appended them), each one input.
    * ``@file.npz``: every argument, by name or position (``arguments_from_npz``): returned
      as a dict, which the caller matches to the function.

    Raises ValueError (naming ``spec``) for anything else.
    """
    try:
        if spec.startswith("@") and spec.endswith(".npz"):
            return read_npz(spec[1:])
        if spec.startswith("@"):
            return read_npy(spec[1:])
        type_text, _, values = spec.partition("=")
        if "=" not in spec and not re.search(r"[a-z]", type_text):
            raise ValueError("a tensor needs a type, e.g. f32=3 or 2x2xf32=1,2,3,4")
        shape, dtype_name = parse_type(type_text)
        dtype = numpy_dtype(dtype_name)
        count = math.prod(shape)
        values = values.strip()
        if values.startswith("@"):
            raw = np.fromfile(values[1:], dtype=np.uint8 if dtype == np.bool_ else dtype)
            if raw.size != count:
                raise ValueError(f"{values[1:]} holds {raw.size} {dtype_name} values, the shape needs {count}")
            return [raw.astype(dtype).reshape(shape)]
        tokens = [t for t in re.split(r"[\s,\[\]]+", values) if t]
        parsed = [parse_value(t, dtype) for t in tokens]
        with np.errstate(over="ignore"):
            if not parsed:
                return [np.zeros(shape, dtype)]
            if len(parsed) == 1:
                return [np.full(shape, parsed[0], dtype)]
            if len(parsed) != count:
                raise ValueError(f"{len(parsed)} values for shape {type_text.strip()} "
                                 f"(needs {count}, or 1 to fill it)")
            return [np.array(parsed, dtype).reshape(shape)]
    except (ValueError, OSError) as error:
        raise ValueError(f"bad --input {spec!r}: {one_line(error)}") from None


def format_array(array: np.ndarray, type_name: str, limit: int = MAX_PRINTED_ELEMENTS) -> str:
    """``2x2xf32=[1 2][3 4]``, iree-run-module's format.

    Floats print like C's %G (``1.23457E+08``, ``INF``, ``NAN``), bools as 0/1
    (IREE prints i1 as hex bytes), complex numbers as ``1+2j`` (IREE prints hex bytes: irgrad's
    form reads back as an ``--input``). After ``limit`` elements the rest is ``...``.
    """
    left = [limit]

    def element(x: Any) -> str:
        if array.dtype == np.bool_:
            return "1" if x else "0"
        if array.dtype.kind in "iu":
            return str(int(x))
        if array.dtype.kind == "c":
            imag = format(float(x.imag), "G")
            return f"{float(x.real):G}{'' if imag[0] in '+-' else '+'}{imag}j"
        return format(float(x), "G")

    def row(a: np.ndarray) -> str:
        if a.ndim == 1:
            shown = a[: left[0]]
            left[0] -= len(shown)
            text = " ".join(map(element, shown))
            return text + "..." if len(shown) < len(a) else text
        return "".join(f"[{row(sub)}]" for sub in a)

    shape = "".join(f"{d}x" for d in array.shape)
    body = element(array[()]) if array.ndim == 0 else row(array)
    return f"{shape}{type_name}={body}"


def parse_output(spec: str) -> tuple[str, Path | None]:
    """An ``--output``: ``@FILE`` write, ``+FILE`` append, ``-`` print, ``''`` skip.

    Returns (action, path): action is write, append, print or skip; path is
    None for the last two. Raises ValueError (naming ``spec``) for anything else.
    """
    if spec in ("", "-"):
        return ("skip" if spec == "" else "print"), None
    if spec[0] in "@+" and len(spec) > 1:
        if spec.endswith(".npz") and spec[0] == "+":
            raise ValueError(f"bad --output {spec!r}: a .npz is written whole (@FILE.npz), not appended to")
        return ("write" if spec[0] == "@" else "append"), Path(spec[1:])
    raise ValueError(f"bad --output {spec!r}: use @FILE.npy (write), +FILE.npy (append), @FILE.npz (every "
                     "result), - (print) or '' (skip)")


def save_array(array: np.ndarray, path: Path, append: bool) -> None:
    """Writes (or appends) ``array`` to ``path``: a .npy record, or raw bytes for any other suffix."""
    with open(path, "ab" if append else "wb") as f:
        if path.suffix == ".npy":
            np.save(f, array, allow_pickle=False)
        else:
            f.write(np.ascontiguousarray(array).tobytes())


def read_run_specs(inputs: Sequence[str], outputs: Sequence[str]):
    """``irgrad run``'s ``--input`` and ``--output`` specs, read: ``(arguments, sinks)``, where
    ``arguments(signature)`` gives the argument arrays (from one ``@args.npz`` by name or
    position, ``arguments_from_npz``, or from each spec in order) and ``sinks`` are
    ``parse_output``'s. ValueError, naming the spec, for any spec that cannot be read."""
    parsed = [parse_input(spec) for spec in inputs]
    sinks = [parse_output(spec) for spec in outputs]
    archives = [(spec, p) for spec, p in zip(inputs, parsed) if isinstance(p, dict)]
    if archives and len(parsed) > 1:
        raise ValueError(f"--input {archives[0][0]} holds every argument: give it alone")
    if any(path is not None and path.suffix == ".npz" for _, path in sinks) and len(sinks) > 1:
        raise ValueError("an --output @FILE.npz takes every result: give it alone")

    def arguments(signature: Signature) -> list[np.ndarray]:
        if len(sinks) > len(signature.outputs):
            count = f"{len(signature.outputs)} result" + ("" if len(signature.outputs) == 1 else "s")
            raise ValueError(f"{len(sinks)} --output given, but {signature.name} returns {count}")
        if archives:
            return arguments_from_npz(archives[0][1], signature, archives[0][0][1:])
        return [array for arrays in parsed for array in arrays]  # type: ignore[union-attr]
    return arguments, sinks


def write_npz(file: Any, arrays: dict[str, Any]) -> None:
    """``numpy.savez(file, **arrays)`` for any keys (``file`` or ``allow_pickle`` included)."""
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for key, array in arrays.items():
            with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)


def report_results(function: str, results: Sequence[Any], types: Sequence[TensorType],
                   sinks: Sequence[tuple[str, Path | None]] = (), names: Sequence[str] | None = None) -> str:
    """iree-run-module's printout of a call: ``EXEC @function``, then each result, under its
    name (``result[1]: d_w1``) where ``names`` gives one, else as IREE does (``result[1]: hal.buffer_view``).

    ``sinks`` (from ``parse_output``, one per result in order) save a result
    to a file or skip it instead of printing it; results past the last sink
    are printed. A single ``@FILE.npz`` sink takes every result, each under its name
    (``names``: ``Signature.output_keys()``, e.g. ``loss``, ``d_w1``) or ``result<i>``.
    """
    lines = [f"EXEC @{function}"]
    if len(sinks) == 1 and sinks[0][1] is not None and sinks[0][1].suffix == ".npz":
        keys = list(names) if names is not None and len(set(names)) == len(results) == len(names) \
            else [f"result{i}" for i in range(len(results))]
        buffer = io.BytesIO()  # every result in one archive, written whole or not at all
        write_npz(buffer, dict(zip(keys, results)))
        atomic_write(sinks[0][1], buffer.getvalue())
        return lines[0]
    for i, (result, want) in enumerate(zip(results, types)):
        action, path = sinks[i] if i < len(sinks) else ("print", None)
        if action == "print":
            type_name = str(TensorType((), want.dtype))
            # result<i> is output_keys' stand-in for a result without a name
            label = names[i] if names is not None and i < len(names) and names[i] != f"result{i}" \
                else "hal.buffer_view"
            lines += [f"result[{i}]: {label}", format_array(np.asarray(result), type_name)]
        elif path is not None:
            save_array(np.asarray(result), path, append=action == "append")
    return "\n".join(lines)
