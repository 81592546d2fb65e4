"""Complex finite differences for the numeric checker (``gradcheck.py``).

A StableHLO function of complex values is checked through its real view: every complex
argument and result becomes two real tensors (real part, imaginary part). Under
TensorFlow's convention (``passes/transforms/backprop.py``) the cotangent of ``z = x + iy`` is
``∂L/∂x + i ∂L/∂y``, so the real view of irgrad's complex ``@F_vjp`` is exactly the
ordinary VJP of the real view of ``@F`` (JAX's convention, the conjugate, would fail it),
and the real view of ``@F_jvp`` its JVP. :func:`check_complex_module` differentiates the
complex module, wraps ``@F``, ``@F_vjp`` and ``@F_jvp`` in real-view public functions (the
complex ones made private: the runtime passes real arrays only), and runs
``gradcheck.check_vjp`` with directions along the real parts, along the imaginary parts,
and along both.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from irgrad import passes
from irgrad.passes.ir.mlir import ir, parse_module

from gradcheck import _load, check_vjp


def _is_complex_type(t: ir.Type) -> bool:
    return isinstance(ir.RankedTensorType(t).element_type.maybe_downcast(), ir.ComplexType)


def _part(t: ir.Type) -> str:
    rt = ir.RankedTensorType(t)
    dims = "".join(f"{d}x" for d in rt.shape)
    return f"tensor<{dims}{ir.ComplexType(rt.element_type).element_type}>"


def real_view(text: str) -> str:
    """``text`` with each public function ``@F`` renamed ``@F__complex`` (private) and a public
    ``@F`` that takes and returns the real and imaginary parts of its complex values."""
    module = parse_module(text)
    wrappers = []
    with module.context:
        for op in list(module.body.operations):
            op = op.operation
            if op.name != "func.func" or "sym_visibility" in op.attributes:
                continue
            name = ir.StringAttr(op.attributes["sym_name"]).value
            ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
            op.attributes["sym_name"] = ir.StringAttr.get(f"{name}__complex")
            op.attributes["sym_visibility"] = ir.StringAttr.get("private")
            params, lines, operands = [], [], []
            for i, t in enumerate(ftype.inputs):
                if _is_complex_type(t):
                    part = _part(t)
                    params += [f"%re{i}: {part}", f"%im{i}: {part}"]
                    lines.append(f'    %z{i} = "stablehlo.complex"(%re{i}, %im{i}) : ({part}, {part}) -> {t}')
                    operands.append(f"%z{i}")
                else:
                    params.append(f"%a{i}: {t}")
                    operands.append(f"%a{i}")
            ins = ", ".join(str(t) for t in ftype.inputs)
            outs = ", ".join(str(t) for t in ftype.results)
            n = len(ftype.results)
            lines.append(f"    %r:{n} = func.call @{name}__complex({', '.join(operands)}) : ({ins}) -> ({outs})")
            results, types = [], []
            for k, t in enumerate(ftype.results):
                if _is_complex_type(t):
                    part = _part(t)
                    for which in ("real", "imag"):
                        lines.append(f'    %{which}{k} = "stablehlo.{which}"(%r#{k}) : ({t}) -> {part}')
                        results.append(f"%{which}{k}")
                        types.append(part)
                else:
                    results.append(f"%r#{k}")
                    types.append(str(t))
            lines.append(f"    return {', '.join(results)} : {', '.join(types)}")
            wrappers.append(f"  func.func @{name}({', '.join(params)}) -> ({', '.join(types)}) {{\n"
                            + "\n".join(lines) + "\n  }\n")
        asm = module.operation.get_asm()
    end = asm.rstrip().rfind("}")
    return asm[:end] + "".join(wrappers) + "}\n"


def split(args: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[str]]:
    """The real view of ``args`` and, per real-view argument, "re", "im" or "" (real)."""
    out, parts = [], []
    for a in args:
        a = np.asarray(a)
        if np.iscomplexobj(a):
            out += [np.ascontiguousarray(a.real), np.ascontiguousarray(a.imag)]
            parts += ["re", "im"]
        else:
            out.append(a)
            parts.append("")
    return out, parts


def check_complex_module(text: str, args: Sequence[np.ndarray], *, func: str | None = None, jvp: bool = True,
                         **kw) -> str:
    """``gradcheck.check_module`` for a module with complex arguments or results."""
    differentiated = passes.differentiate(text, func, vjp=True, grad=False, with_value=True, jvp=jvp)
    name = func or passes.function_name(passes.find_function(parse_module(text), None))
    m = _load(real_view(differentiated))
    fwd, vjp_fn = m[name], m[f"{name}_vjp"]
    n_out = len(fwd.signature.outputs)
    real_args, parts = split(args)

    def forward(*a):
        return [np.asarray(r) for r in fwd.call_flat(*a)]

    def vjp(a, cts):
        return vjp_fn.call_flat(*a, *cts)[n_out:]

    def tangents(a, ts):
        return m[f"{name}_jvp"].call_flat(*a, *ts)[n_out:]

    what = kw.pop("what", f"@{name}_vjp")
    for label, keep in (("real parts", ("re", "")), ("imaginary parts", ("im", "")), ("both", ("re", "im", ""))):
        check_vjp(forward, vjp, real_args, what=f"{what} along the {label}", jvp=tangents if jvp else None,
                  along=[p in keep for p in parts], **kw)
    return differentiated
