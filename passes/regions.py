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

from collections.abc import Iterator, Sequence

from . import hlo
from .backprop import backprop_local
from .mlir import ir
from .forward import by_transposition, diagonal, in_place, jvp
from .registry import COMPOSITE_RULES, COMPOSITE_TANGENT_RULES, adjoint, composite_adjoint, composite_tangent, tangent

STOP_GRADIENT = "irgrad.stop_gradient"
CUSTOM_GRADIENT = "irgrad.custom_gradient"
RELU = "irgrad.relu"


def composite_name(op: ir.Operation) -> str:
    return hlo.read_str(op, "name")


def composite_attribute(op: ir.Operation, key: str) -> ir.Attribute | None:
    if "composite_attributes" not in op.attributes:
        return None
    attrs = ir.DictAttr(op.attributes["composite_attributes"])
    return attrs[key] if key in attrs else None


def symbol(attr: ir.Attribute) -> str:
    return ir.FlatSymbolRefAttr(attr).value


def module_of(op: ir.Operation) -> ir.Operation:
    while op.name != "builtin.module":
        op = op.parent.operation
    return op


def lookup_function(anchor: ir.Operation, name: str) -> ir.Operation:
    """The ``func.func @name`` of the module that contains ``anchor``."""
    module = module_of(anchor)
    try:
        return ir.SymbolTable(module)[name].operation
    except KeyError:
        raise LookupError(f"function @{name} referenced at {anchor.location} is not in the module") from None


def inline_region(op: ir.Operation, index: int, args: Sequence[ir.Value],
                  copied: list[ir.Operation] | None = None) -> list[ir.Value]:
    """Copy region ``index`` of ``op`` (one block) to the insertion point with its block
    arguments bound to ``args``; return the values its terminator returns. The copied ops,
    in order, are appended to ``copied`` when given."""
    clone = op.clone()  # inserted at the insertion point; only its region survives
    block = clone.regions[index].blocks[0]
    for formal, actual in zip(block.arguments, args):
        formal.replace_all_uses_with(actual)
    body = [o.operation for o in block.operations]
    results = list(body[-1].operands)
    for o in body[:-1]:
        o.move_before(clone)
    if copied is not None:
        copied.extend(body[:-1])
    # Erase through its Python object first: the bindings would otherwise keep a stale
    # handle to it (erasing the clone does not invalidate handles to nested ops), which a
    # later op allocated at the same address would inherit.
    body[-1].erase()
    clone.erase()
    return results


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


def nested_ops(op: ir.Operation) -> Iterator[ir.Operation]:
    """Every op inside ``op``'s regions, at any depth, outer ones first."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner.operation
                yield from nested_ops(inner.operation)


def discard(op: ir.Operation) -> None:
    """Erase ``op`` and, first, every op nested in it through its Python handle (the
    bindings keep stale handles to nested ops otherwise)."""
    for region in op.regions:
        for block in region.blocks:
            for inner in reversed([o.operation for o in block.operations]):
                discard(inner)
    op.erase()
