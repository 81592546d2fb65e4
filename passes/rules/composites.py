"""Adjoint rules of ``stablehlo.composite``: the regions that carry gradient intent.

irgrad's IR convention (any producer may emit it; it stays pure StableHLO and
IREE compiles it by inlining the decomposition):

* ``stablehlo.composite "irgrad.stop_gradient" %x {decomposition = @id}``:
  the value of ``%x``; no gradient reaches ``%x``.
* ``%r:n = stablehlo.composite "irgrad.custom_gradient" %o0, ..., %om
  {decomposition = @fwd, composite_attributes = {grad = @bwd}}``:
  ``@fwd(o...) -> (r...)`` defines the value and
  ``@bwd(dr_0, ..., dr_{n-1}, o_0, ..., o_m) -> (do_0, ..., do_m)`` the gradient:
  one cotangent per operand, given the cotangent of every result and the
  operands. A cotangent returned as a splat zero constant means "no gradient".
* ``stablehlo.composite "irgrad.relu" %x {decomposition = @max0}``: ``max(x, 0)``
  with TensorFlow's ReluGrad, ``d x = ct where x > 0, else 0``: 0 at 0 and at NaN,
  where ``maximum``'s own adjoint gives ties (and NaN) to ``x``.
* any other composite is differentiated through its decomposition.
"""
from __future__ import annotations

from ..ir import hlo
from ..ir.mlir import ir
from ..ir.regions import composite_attribute, composite_name, inline_region, lookup_function, symbol
from ..transforms.backprop import backprop_local
from ..transforms.forward import by_transposition, diagonal, in_place, jvp
from ..transforms.batching import Batcher, batched_function, remake
from ..transforms.registry import (COMPOSITE_RULES, COMPOSITE_TANGENT_RULES, adjoint, batching, composite_adjoint,
                                   composite_tangent, tangent)

STOP_GRADIENT = "irgrad.stop_gradient"
CUSTOM_GRADIENT = "irgrad.custom_gradient"
RELU = "irgrad.relu"


@adjoint("stablehlo.composite")
def _composite(op, cts):
    """dispatch on the composite's name; unknown names: the decomposition's adjoint"""
    rule = COMPOSITE_RULES.get(composite_name(op), _through_decomposition)
    return rule(op, cts)


@composite_adjoint(STOP_GRADIENT)
def _stop_gradient(op, cts):
    """no gradient reaches the operands"""
    return (None,) * len(op.operands)


@composite_adjoint(CUSTOM_GRADIENT)
def _custom_gradient(op, cts):
    """d operands = @grad(cts..., operands...), splat zeros read as no gradient"""
    grad = composite_attribute(op, "grad")
    if grad is None:
        raise LookupError(f"composite {CUSTOM_GRADIENT!r} at {op.location} has no 'grad' attribute")
    cts = [ct if ct is not None else hlo.zeros(r.type) for ct, r in zip(cts, op.results)]
    outs = inline_region(lookup_function(op, symbol(grad)), 0, [*cts, *op.operands])
    return [None if hlo.is_zero_constant(v) else v for v in outs]


@composite_adjoint(RELU)
def _relu(op, cts):
    """d x = select(x > 0, ct, 0)"""
    (x,), (ct,) = op.operands, cts
    zeros = hlo.like(0, x)
    return [hlo.select(hlo.compare(x, zeros, "GT"), ct, zeros)]


def _decomposition(op: ir.Operation) -> list[ir.Value]:
    """The composite's decomposition recomputed at the insertion point from its operands."""
    return inline_region(lookup_function(op, symbol(op.attributes["decomposition"])), 0, list(op.operands))


def _through_decomposition(op, cts):
    """recompute the decomposition here and differentiate it"""
    return backprop_local(_decomposition(op), list(cts), list(op.operands), name=composite_name(op))


# ----- tangents ------------------------------------------------------------------------

@tangent("stablehlo.composite")
def _composite_tangent(op, ts):
    """dispatch on the composite's name; unknown names: the decomposition's tangent"""
    rule = COMPOSITE_TANGENT_RULES.get(composite_name(op), _decomposition_tangent)
    return rule(op, ts)


@composite_tangent(STOP_GRADIENT)
def _stop_gradient_tangent(op, ts):
    """no tangent flows through (TensorFlow's forward accumulators stop there too)"""
    return (None,) * len(op.results)


# relu's tangent is ReluGrad's mask applied to the tangent: 0 at 0 and at NaN.
composite_tangent(RELU)(diagonal)
# A custom gradient defines the adjoint only: the tangent is that adjoint's transpose, as
# TensorFlow's ForwardAccumulator computes it for ops with a custom gradient.
composite_tangent(CUSTOM_GRADIENT)(by_transposition)


def _decomposition_tangent(op, ts):
    """recompute the decomposition here and carry the tangents through it"""
    return jvp(_decomposition(op), list(op.operands), list(ts), in_place=in_place(), name=composite_name(op))


# ----- batching ------------------------------------------------------------------------------

@batching("func.call")
def _call_batched(b: Batcher, op):
    """the callee's body, batched here"""
    callee = lookup_function(op, ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
    return b.run(callee.regions[0].blocks[0], b.operands(op))


@batching("stablehlo.composite")
def _composite_batched(b: Batcher, op):
    """the same composite over every operand batched, its functions batched alike"""
    xs = b.operands(op, lift=True)
    attrs = {"decomposition": batched_function(op, ir.FlatSymbolRefAttr(op.attributes["decomposition"]).value,
                                                b.size)}
    if "composite_attributes" in op.attributes:
        inner = ir.DictAttr(op.attributes["composite_attributes"])
        fields = {}
        for k in range(len(inner)):
            named = inner[k]
            value = named.attr
            if str(value).startswith("@"):  # a function of the operands: batched alike
                value = batched_function(op, ir.FlatSymbolRefAttr(value).value, b.size)
            fields[named.name] = value
        attrs["composite_attributes"] = ir.DictAttr.get(fields)
    return b.mark(remake(op, xs, [b.type(r) for r in op.results], attrs).results)
