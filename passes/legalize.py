"""Semantics-preserving rewrites for IREE 3.13 lowering bugs, applied just before compiling.

* Float ``stablehlo.power``: IREE computes ``exp(y * log(x))``, which is NaN
  for a negative base even with an integral exponent (``(-2)^3``) and for
  ``0^0``. StableHLO (like C's ``pow``) defines both. The rewrite computes
  ``|x|^y`` and fixes the sign for odd integral exponents, NaN for a negative
  base with a non-integral exponent, and 1 for a zero exponent.
* ``stablehlo.reduce`` over every dimension of an operand of rank ≥ 2: llvm-cpu
  fails with "'vector.contract' op invalid accumulator/result vector shape" when
  the operand is a product with a broadcast along leading dimensions
  (``sum(x[None, :] * w)``, ``sum(mean(x, 0) * x)``;
  ../shared/repro/iree313_vector_contract_reduce.mlir). The operand is reshaped
  to one dimension first: the same reduction, which IREE compiles.

And one rewrite for speed: ``stablehlo.convolution`` becomes window patches and a
``dot_general`` where ``choices.conv_forward_by_matmul`` says so (IREE 3.13 runs its
convolution loops 10–30× slower than the same work as a matmul; see
``choices.py``). The adjoint rules already emit that form; this covers forward
convolutions, the user's and those copied into gradient functions.
"""
from __future__ import annotations

import math

from ..boundary import respell_foreign
from . import hlo
from .convolution import lower_convolution
from .mlir import ir, is_float, parse_module, shape


def _candidates(op: ir.Operation, out: list[ir.Operation]) -> None:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                if inner.name == "stablehlo.power" and is_float(inner.results[0]) \
                        or inner.name == "stablehlo.convolution" or _reduces_everything(inner):
                    out.append(inner)
                if len(inner.regions):
                    _candidates(inner, out)


def _reduces_everything(op: ir.Operation) -> bool:
    if op.name != "stablehlo.reduce":
        return False
    inputs = list(op.operands)[:len(op.operands) // 2]
    ranks = {len(shape(v)) for v in inputs}
    return len(ranks) == 1 and ranks.pop() >= 2 and len(hlo.read_i64_array(op, "dimensions")) == len(shape(inputs[0]))


def _flatten_reduce(op: ir.Operation) -> None:
    """The same reduce over its inputs reshaped to one dimension (in place)."""
    n = len(op.operands) // 2
    for i in range(n):
        v = op.operands[i]
        op.operands[i] = hlo.reshape(v, [math.prod(shape(v))])
    op.attributes["dimensions"] = ir.DenseI64ArrayAttr.get([0])


def _safe_power(x: ir.Value, y: ir.Value) -> ir.Value:
    t = x.type
    zero, one, two = hlo.splat(0, t), hlo.splat(1, t), hlo.splat(2, t)
    magnitude = hlo.binary("stablehlo.power", hlo.unary("stablehlo.abs", x), y)
    integral = hlo.compare(hlo.unary("stablehlo.floor", y), y, "EQ")
    odd = hlo.compare(hlo.binary("stablehlo.remainder", y, two), zero, "NE")
    negative_base = hlo.select(integral, hlo.select(odd, hlo.negate(magnitude), magnitude),
                               hlo.splat(float("nan"), t))
    value = hlo.select(hlo.compare(x, zero, "LT"), negative_base, magnitude)
    return hlo.select(hlo.compare(y, zero, "EQ"), one, value)


def legalize_for_iree(module: ir.Module) -> int:
    """Rewrite ``module`` in place; returns the number of ops rewritten."""
    found: list[ir.Operation] = []
    _candidates(module.operation, found)
    done = 0
    for op in found:
        with ir.InsertionPoint(op), op.location:
            if op.name == "stablehlo.reduce":
                _flatten_reduce(op)
                done += 1
                continue
            if op.name == "stablehlo.power":
                replacement = _safe_power(op.operands[0], op.operands[1])
            else:
                replacement = lower_convolution(op)
        if replacement is not None:
            op.results[0].replace_all_uses_with(replacement)
            op.erase()
            done += 1
    return done


def legalize_text(text: str) -> str:
    """``legalize_for_iree`` on module text (returned unchanged when nothing applies)."""
    text = respell_foreign(text)
    if not any(name in text for name in ("stablehlo.power", "stablehlo.convolution", "stablehlo.reduce")):
        return text
    module = parse_module(text)
    if not legalize_for_iree(module):
        return text
    return module.operation.get_asm(enable_debug_info=True)
