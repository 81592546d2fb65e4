"""Typed C headers for artifacts: one C function per exported function, on irgrad's C library
(``c/include/irgrad.h``).

``irgrad header mlp.vmfb -o mlp.h`` writes, for ``@loss_grad(x: 8x4xf32, ...) -> (loss: f32,
d_w1: 4x16xf32, ...)``::

    static inline irgrad_status mlp_loss_grad(irgrad_module* irgrad_m, const float x[8][4], ...,
                                              float* loss, float d_w1[4][16], ...);

with the producer's names and shapes in the signature (a dynamic dimension makes the array a
pointer with a ``<name>_shape`` beside it), ``mlp_open`` that opens the artifact and checks that
it is the one the header was made for, and, for a training step ``@F_train_step``,
``mlp_F_trainer_create`` / ``_step`` / ``_params``. ``embed=True`` puts the artifact's bytes in
the header (``mlp_open_embedded``): the application is one binary.
"""
from __future__ import annotations

import re
from typing import Any

from .signature import Signature, TensorType
from .vmfb import signatures_from_metadata

__all__ = ["c_header", "c_identifier", "c_types"]

# dtype -> (C element type, irgrad_dtype, elements per value: complex numbers are two)
_C_TYPES: dict[str, tuple[str, str, int]] = {
    "float16": ("uint16_t", "IRGRAD_FLOAT16", 1),
    "bfloat16": ("uint16_t", "IRGRAD_BFLOAT16", 1),
    "float32": ("float", "IRGRAD_FLOAT32", 1),
    "float64": ("double", "IRGRAD_FLOAT64", 1),
    "bool": ("uint8_t", "IRGRAD_BOOL", 1),
    "int8": ("int8_t", "IRGRAD_INT8", 1),
    "int16": ("int16_t", "IRGRAD_INT16", 1),
    "int32": ("int32_t", "IRGRAD_INT32", 1),
    "int64": ("int64_t", "IRGRAD_INT64", 1),
    "uint8": ("uint8_t", "IRGRAD_UINT8", 1),
    "uint16": ("uint16_t", "IRGRAD_UINT16", 1),
    "uint32": ("uint32_t", "IRGRAD_UINT32", 1),
    "uint64": ("uint64_t", "IRGRAD_UINT64", 1),
    "complex64": ("float", "IRGRAD_COMPLEX64", 2),
    "complex128": ("double", "IRGRAD_COMPLEX128", 2),
}
_SIZES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "bool": 1, "int8": 1, "int16": 2, "int32": 4,
          "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "complex64": 8, "complex128": 16}

_KEYWORDS = frozenset("""auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while _Bool _Complex _Imaginary bool true false alignas alignof and asm catch class delete explicit export
friend mutable namespace new noexcept not operator or private protected public template this throw try typeid
typename using virtual xor nullptr int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t""".split())

MAX_RANK = 16  # irgrad.h's IRGRAD_MAX_RANK


def c_identifier(name: str, taken: set[str] | None = None) -> str:
    """``name`` as a C identifier: other characters as ``_``, no leading digit or reserved
    ``_X``/``__``, no keyword; a number appended while it is in ``taken`` (then added to it)."""
    ident = re.sub(r"\W", "_", name, flags=re.ASCII) or "x"
    if ident[0].isdigit() or ident.startswith("_"):
        ident = "v" + ident
    if ident in _KEYWORDS or ident.startswith("irgrad_"):
        ident += "_"
    if taken is not None:
        base, n = ident, 1
        while ident in taken:
            ident, n = f"{base}{n}", n + 1
        taken.add(ident)
    return ident


def c_types(sig: Signature) -> str:
    """The function's types as the C library spells them (``irgrad_function_types``):
    ``(8x4xf32,?x1xf32)->(f32)``."""
    return "(" + ",".join(map(str, sig.inputs)) + ")->(" + ",".join(map(str, sig.outputs)) + ")"


class _Param:
    """One argument or result of a generated function: its C declaration(s) and the
    ``irgrad_array`` that describes it."""

    def __init__(self, name: str, t: TensorType, output: bool) -> None:
        self.name, self.t, self.output = name, t, output
        self.ctype, self.enum, self.per_value = _C_TYPES[t.dtype]
        self.dynamic = None in t.shape
        self.scalar = not t.shape and self.per_value == 1

    def declaration(self) -> list[str]:
        const = "" if self.output else "const "
        if self.dynamic:
            decls = [f"{const}{self.ctype}* {self.name}"]
            decls.append(f"int64_t {self.name}_shape[{len(self.t.shape)}]" if self.output
                         else f"const int64_t {self.name}_shape[{len(self.t.shape)}]")
            if self.output:
                decls.append(f"size_t {self.name}_capacity")
            return decls
        if self.scalar:
            return [f"{self.ctype}* {self.name}" if self.output else f"{self.ctype} {self.name}"]
        dims = "".join(f"[{d}]" for d in self.t.shape) + (f"[{self.per_value}]" if self.per_value > 1 else "")
        return [f"{const}{self.ctype} {self.name}{dims}"]

    def array(self) -> str:
        """An ``irgrad_array`` initializer."""
        rank = len(self.t.shape)
        size = _SIZES[self.t.dtype]
        if self.dynamic:
            count = " * ".join(f"(size_t){self.name}_shape[{k}]" for k in range(rank))
            nbytes = f"{self.name}_capacity * sizeof({self.ctype})" if self.output else f"{count} * {size}"
            # (a result's shape is the call's to write, not read)
            shape = "0" if self.output else ", ".join(f"{self.name}_shape[{k}]" for k in range(rank))
        else:
            elements = 1
            for d in self.t.shape:
                elements *= d  # type: ignore[operator]
            nbytes = str(elements * size)
            shape = ", ".join(str(d) for d in self.t.shape) or "0"
        data = self.name if not self.scalar or self.output else f"&{self.name}"
        return f"{{(void*){data}, {nbytes}, {self.enum}, {rank}, {{{shape}}}}}"

    def shape_back(self, at: str) -> list[str]:
        """Statements copying a dynamic result's shape back to the caller."""
        if not (self.output and self.dynamic):
            return []
        return [f"  for (int irgrad_k = 0; irgrad_k < {len(self.t.shape)}; ++irgrad_k) "
                f"{self.name}_shape[irgrad_k] = {at}.shape[irgrad_k];"]


def _params(names: list[str], types: tuple[TensorType, ...], output: bool, taken: set[str]) -> list[_Param]:
    return [_Param(c_identifier(n, taken), t, output) for n, t in zip(names, types)]


def _signature_comment(sig: Signature) -> str:
    return f"/* @{sig!r} */"


def _call_body(lookup: str, args: list[_Param], results: list[_Param], call: str) -> list[str]:
    lines = [lookup] if lookup else []
    arrays = [("irgrad_args", args), ("irgrad_results", results)]
    for var, params in arrays:
        if params:
            lines.append(f"  irgrad_array {var}[{len(params)}] = {{")
            lines += [f"      {p.array()}," for p in params]
            lines.append("  };")
    a = "irgrad_args" if args else "NULL"
    r = "irgrad_results" if results else "NULL"
    invocation = call.format(args=a, n_args=len(args), results=r, n_results=len(results))
    lines.append(f"  irgrad_status irgrad_s = {invocation};")
    for k, p in enumerate(results):
        lines += p.shape_back(f"irgrad_results[{k}]")
    lines.append("  return irgrad_s;")
    return lines


def _function(prefix: str, sig: Signature) -> list[str]:
    taken = {"irgrad_m"}
    args = _params(sig.input_keys(), sig.inputs, False, taken)
    results = _params(sig.output_keys(), sig.outputs, True, taken)
    decls = ["irgrad_module* irgrad_m"] + [d for p in args + results for d in p.declaration()]
    name = f"{prefix}_{c_identifier(sig.name)}"
    lookup = ("  irgrad_function* irgrad_f = NULL;\n"
              f"  if (irgrad_module_function(irgrad_m, \"{sig.name}\", &irgrad_f) != IRGRAD_OK) "
              "return IRGRAD_ERROR_NOT_FOUND;")
    return [_signature_comment(sig), f"static inline irgrad_status {name}(" + ", ".join(decls) + ") {",
            *_call_body(lookup, args, results,
                        "irgrad_call(irgrad_f, {args}, {n_args}, {results}, {n_results})"), "}", ""]


def _trainer(prefix: str, step: Signature, layout: dict[str, Any]) -> list[str]:
    """mlp_F_trainer_create / _step / _params for a training step."""
    n_state = len(layout["state"])
    n_args = len(step.inputs) - n_state
    wrt = list(layout["params"])
    n_results = len(step.outputs) - len(wrt) - n_state
    keys = step.input_keys()
    base = f"{prefix}_{c_identifier(step.name[:-len('_train_step')])}"
    out: list[str] = []

    taken = {"irgrad_m", "irgrad_out"}
    args = _params(keys[:n_args], step.inputs[:n_args], False, taken)
    decls = ["irgrad_module* irgrad_m", "irgrad_trainer** irgrad_out"] + [d for p in args for d in p.declaration()]
    out += [f"/* A trainer on @{step.name}: @{step.name[:-len('_step')]}_init(F's arguments). */",
            f"static inline irgrad_status {base}_trainer_create(" + ", ".join(decls) + ") {",
            *_call_body("", args, [],
                        f"irgrad_trainer_create(irgrad_m, \"{step.name}\", {{args}}, {{n_args}}, irgrad_out)"),
            "}", ""]

    taken = {"irgrad_t"}
    data = _params([keys[i] for i in range(n_args) if i not in wrt],
                   tuple(step.inputs[i] for i in range(n_args) if i not in wrt), False, taken)
    results = _params(step.output_keys()[:n_results], step.outputs[:n_results], True, taken)
    decls = ["irgrad_trainer* irgrad_t"] + [d for p in data + results for d in p.declaration()]
    out += [f"/* One step of @{step.name} on a batch; F's results. */",
            f"static inline irgrad_status {base}_trainer_step(" + ", ".join(decls) + ") {",
            *_call_body("", data, results,
                        "irgrad_trainer_step(irgrad_t, {args}, {n_args}, {results}, {n_results})"), "}", ""]

    taken = {"irgrad_t"}
    params = _params(list(layout.get("param_names") or [keys[i] for i in wrt]),
                     tuple(step.outputs[n_results:n_results + len(wrt)]), True, taken)
    decls = ["irgrad_trainer* irgrad_t"] + [d for p in params for d in p.declaration()]
    out += ["/* The parameters, copied from the device. */",
            f"static inline irgrad_status {base}_trainer_params(" + ", ".join(decls) + ") {",
            *_call_body("", [], params, "irgrad_trainer_params(irgrad_t, {results}, {n_results})"), "}", ""]
    return out


def _bytes_literal(data: bytes, width: int = 24) -> list[str]:
    return ["  " + ",".join(str(b) for b in data[i:i + width]) + "," for i in range(0, len(data), width)]


def c_header(metadata: dict[str, Any], prefix: str, *, source: str = "", vmfb: bytes | None = None) -> str:
    """The C header for an artifact of ``metadata`` (``read_metadata``'s), its identifiers
    starting with ``prefix``; ``vmfb``: the artifact's bytes, embedded.

    Raises:
        ValueError: a function of rank above the library's limit (16).
    """
    prefix = c_identifier(prefix)
    guard = f"{prefix.upper()}_IRGRAD_H_"
    sigs = signatures_from_metadata(metadata)
    training = metadata.get("training") or {}
    for sig in sigs.values():
        for t in sig.inputs + sig.outputs:
            if len(t.shape) > MAX_RANK:
                raise ValueError(f"@{sig.name}: a tensor of rank {len(t.shape)}; irgrad's C library takes at most "
                                 f"{MAX_RANK}")
    lines = [f"/* {prefix}: a typed C interface to {source or 'an irgrad artifact'}, on irgrad's C library.",
             f" * Generated by `irgrad header` ({metadata.get('producer') or 'irgrad'}; artifact built by IREE "
             f"compiler {metadata.get('iree_compiler') or 'unknown'}, target {metadata.get('target')}).",
             " * Do not edit: generate it again when the artifact changes; "
             f"{prefix}_open refuses an artifact of other types.",
             " * Every function returns IRGRAD_OK or an error code; irgrad_last_error() says why. */",
             f"#ifndef {guard}", f"#define {guard}", "", "#include <stddef.h>", "#include <stdint.h>", "",
             '#include "irgrad.h"', ""]
    lines.append(f"#define {prefix.upper()}_FUNCTION_COUNT {len(sigs)}")
    for sig in sigs.values():
        lines.append(f'#define {prefix.upper()}_{c_identifier(sig.name).upper()}_TYPES "{c_types(sig)}"')
    lines.append("")
    # open: the artifact, each function's types checked.
    checks = []
    for sig in sigs.values():
        checks += [f"  if ((irgrad_s = irgrad_module_function(*irgrad_out, \"{sig.name}\", &irgrad_f)) != IRGRAD_OK ||",
                   f"      (irgrad_s = irgrad_function_check_types(irgrad_f, "
                   f"{prefix.upper()}_{c_identifier(sig.name).upper()}_TYPES)) != IRGRAD_OK) {{",
                   "    irgrad_module_close(*irgrad_out);", "    *irgrad_out = NULL;", "    return irgrad_s;", "  }"]
    lines += ["/* Checks that an open module is this header's artifact (each function's types). */",
              f"static inline irgrad_status {prefix}_check(irgrad_module** irgrad_out) {{",
              "  irgrad_function* irgrad_f = NULL;", "  irgrad_status irgrad_s = IRGRAD_OK;", *checks,
              "  (void)irgrad_f;", "  return irgrad_s;", "}", "",
              "/* Opens the artifact at `path` on `driver` (NULL: the default) and checks it. */",
              f"static inline irgrad_status {prefix}_open(const char* path, const char* driver, "
              "irgrad_module** irgrad_out) {",
              "  irgrad_status irgrad_s = irgrad_module_open_file(path, driver, irgrad_out);",
              f"  return irgrad_s == IRGRAD_OK ? {prefix}_check(irgrad_out) : irgrad_s;", "}", ""]
    if vmfb is not None:
        lines += ["/* The artifact itself (64-byte aligned: IREE reads it in place). */",
                  f"#define {prefix.upper()}_EMBEDDED 1",
                  "#if defined(__cplusplus)", f"alignas(64) static const unsigned char {prefix}_vmfb[{len(vmfb)}] = {{",
                  "#elif defined(_MSC_VER)",
                  f"__declspec(align(64)) static const unsigned char {prefix}_vmfb[{len(vmfb)}] = {{",
                  "#else", f"static const unsigned char {prefix}_vmfb[{len(vmfb)}] __attribute__((aligned(64))) = {{",
                  "#endif", *_bytes_literal(vmfb), "};", "",
                  "/* Opens the embedded artifact on `driver` (NULL: the default). */",
                  f"static inline irgrad_status {prefix}_open_embedded(const char* driver, "
                  "irgrad_module** irgrad_out) {",
                  f"  irgrad_status irgrad_s = irgrad_module_open_bytes({prefix}_vmfb, sizeof({prefix}_vmfb), driver, "
                  "irgrad_out);",
                  f"  return irgrad_s == IRGRAD_OK ? {prefix}_check(irgrad_out) : irgrad_s;", "}", ""]
    for sig in sigs.values():
        lines += _function(prefix, sig)
    for name, layout in training.items():
        if name in sigs and name.endswith("_train_step") and name[:-len("_step")] + "_init" in sigs:
            lines += _trainer(prefix, sigs[name], layout)
    lines += [f"#endif /* {guard} */", ""]
    return "\n".join(lines)
