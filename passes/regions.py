"""Adjoint rules of region-carrying ops: composites (stop-gradient and
custom-gradient regions) and, later, calls and control flow.
"""
from __future__ import annotations

from .mlir import ir
from .registry import COMPOSITE_RULES, adjoint, composite_adjoint, missing

STOP_GRADIENT = "irgrad.stop_gradient"


def composite_name(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["name"]).value


@adjoint("stablehlo.composite")
def _composite(op, cts):
    """dispatch on the composite's name"""
    name = composite_name(op)
    rule = COMPOSITE_RULES.get(name)
    if rule is None:
        raise missing(op, f" (composite {name!r})")
    return rule(op, cts)


@composite_adjoint(STOP_GRADIENT)
def _stop_gradient(op, cts):
    """no gradient reaches the operands"""
    return (None,) * len(op.operands)
