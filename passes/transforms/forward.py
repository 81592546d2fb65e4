"""The forward-mode driver: tangents from ``xs`` forward to ``ys`` inside one block.

The mirror of :mod:`.backprop`: the ops between ``xs`` and ``ys`` are visited inputs first,
each op's tangent rule (``@tangent`` in :mod:`.registry`) maps the tangents of its inputs to
tangents of its results, and ``None`` is a symbolic zero. Most rules are one of four general
forms, each exact for the ops it is registered for:

* ``linear``: the op is linear in its float operands (reshape, slice, pad, gather, a sum...):
  the tangent is the op itself applied to the tangents;
* ``bilinear``: ``dot_general``, ``convolution``: ``op(ta, b) + op(a, tb)``;
* ``diagonal``: elementwise ops have a diagonal Jacobian, which is its own transpose, so the
  adjoint rule applied to a tangent (instead of a cotangent) is the tangent: ``t * f'(x)``;
* ``by_transposition``: any op with an adjoint rule: the adjoint ``u ↦ Jᵀu`` is linear in
  ``u``, and its own adjoint at seed ``t`` is ``J t`` (TensorFlow's double-gradient trick,
  the way ``ForwardAccumulator`` runs ops without a forward function). Used for the ops
  whose tangent is no shorter to write than their adjoint (sort, top_k, batch norm, max
  pooling, custom gradients).

Region ops (``while``, ``case``, ``if``, composites) have their own rules in
``rules/control_flow.py`` and ``rules/composites.py``: they carry the tangents through a new region op.

``in_place``: the tangent ops go right after each op, and region rules replace the op they
differentiate by one that also computes the tangents (the module pass owns its copy of the
function). Otherwise they go at the ambient insertion point and the ops stay as they are
(the frontend, whose tensors hold the ops' results).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from ..ir import hlo
from .backprop import active_ops, backprop_local, carries, complex_kind, op_inputs
from ..ir.mlir import ir, is_float, loc_name
from .registry import MissingTangentError, Tangent, lookup, lookup_tangent


@dataclasses.dataclass
class Replaced:
    """What a region rule returns when it replaced ``op``: the new values of ``op``'s
    results and their tangents."""
    results: list[ir.Value]
    tangents: list[Tangent]


# Whether the jvp call in progress may insert after ops and replace them, innermost last.
_IN_PLACE: list[bool] = []


def in_place() -> bool:
    """Whether the innermost jvp call in progress rewrites its ops in place."""
    return bool(_IN_PLACE) and _IN_PLACE[-1]


def _location(op: ir.Operation, name: str) -> ir.Location:
    forward = loc_name(op) or op.name.split(".", 1)[-1]
    return ir.Location.name(f"{name}/{forward}_jvp", childLoc=op.location)


def jvp(ys: Sequence[ir.Value], xs: Sequence[ir.Value], txs: Sequence[Tangent], *,
        in_place: bool = False, name: str = "jvp",
        allow: Callable[[ir.Operation], bool] | None = None) -> list[Tangent]:
    """Tangents of ``ys`` given tangents ``txs`` of ``xs`` (``None`` where unconnected).

    ``allow(op)`` restricts the ops tangents flow through (a region's own block).
    """
    tangents = {x: t for x, t in zip(xs, txs) if t is not None and carries(x)}
    seeded = set(tangents)
    # An op computing a seeded value is not differentiated again: its tangent is given.
    order = active_ops(ys, seeded, set(), lambda o: not any(r in seeded for r in o.results)
                       and (allow is None or allow(o)))
    following: dict[ir.Operation, ir.Operation] = {}
    replaced: dict[ir.Value, ir.Value] = {}
    _IN_PLACE.append(in_place)
    try:
        for op in order:
            inputs = op_inputs(op)
            ts = [tangents.get(v) if carries(v) else None for v in inputs]
            if all(t is None for t in ts):
                continue
            rule = lookup_tangent(op)
            if rule is None:  # nondifferentiable: its results get no tangent
                continue
            if complex_kind(op) == "unsupported":  # backprop.py: the ops with complex rules
                raise MissingTangentError(f"No tangent rule for '{op.name}' on complex values at {op.location}.")
            if in_place:
                if op not in following:
                    block = list(op.block.operations)
                    following.update(zip(block, block[1:]))
                # Right after the op: before the next one, or at the end of a block still
                # being built (a region whose terminator comes last).
                point = ir.InsertionPoint(following[op]) if op in following else ir.InsertionPoint(op.block)
            else:
                point = ir.InsertionPoint.current
            results = list(op.results)
            with point, _location(op, name):
                out = rule(op, ts)
            if isinstance(out, Replaced):
                replaced.update(zip(results, out.results))
                results, out = out.results, out.tangents
            _check(op, results, out)
            tangents.update((r, t) for r, t in zip(results, out) if t is not None and carries(r))
    finally:
        _IN_PLACE.pop()
    return [tangents.get(replaced.get(y, y)) for y in ys]


def _check(op: ir.Operation, results: Sequence[ir.Value], tangents: Sequence[Tangent]) -> None:
    if len(tangents) != len(results):
        raise ValueError(f"tangent rule of '{op.name}' at {op.location} returned {len(tangents)} tangents "
                         f"for {len(results)} results")
    for i, (r, t) in enumerate(zip(results, tangents)):
        if t is not None and t.type != r.type:
            raise ValueError(f"tangent rule of '{op.name}' at {op.location}: result {i} has type {r.type} "
                             f"but its tangent {t.type}")


def zero_filled(values: Sequence[ir.Value], ts: Sequence[Tangent]) -> list[ir.Value]:
    """The tangents with zeros for the float values that have none (non-float values kept)."""
    return [t if t is not None else (hlo.zeros_like(v) if carries(v) else v) for v, t in zip(values, ts)]


def _float_results(op: ir.Operation, values: Sequence[ir.Value]) -> list[Tangent]:
    return [v if carries(r) else None for r, v in zip(op.results, values)]


def _with_operands(op: ir.Operation, operands: Sequence[ir.Value]) -> ir.Operation:
    """A copy of ``op`` at the insertion point reading ``operands``."""
    clone = op.clone()
    for i, v in enumerate(operands):
        clone.operands[i] = v
    return clone


def linear(op, ts):
    """t(op(x...)) = op(t(x)...): zeros for float operands without a tangent"""
    return _float_results(op, _with_operands(op, zero_filled(op.operands, ts)).results)


def bilinear(op, ts):
    """t(a · b) = ta · b + a · tb"""
    a, b = op.operands[:2]
    rest = list(op.operands[2:])
    ta, tb = ts[:2]
    terms = []
    if ta is not None:
        terms.append(_with_operands(op, [ta, b, *rest]).results[0])
    if tb is not None:
        terms.append(_with_operands(op, [a, tb, *rest]).results[0])
    total = terms[0] if len(terms) == 1 else hlo.add(*terms)
    return [total]


def diagonal(op, ts):
    """t(f(x...)) = Σᵢ ∂f/∂xᵢ · tᵢ, each term the adjoint rule's for operand i given tᵢ"""
    rule = lookup(op)
    terms = []
    for i, t in enumerate(ts):
        if t is not None:
            term = rule(op, [t])[i]
            if term is not None:
                terms.append(term)
    if not terms:
        return [None]
    total = terms[0]
    for term in terms[1:]:
        total = hlo.add(total, term)
    return [total]


def by_transposition(op, ts):
    """J t = d/du <Jᵀu, t>: the adjoint of the adjoint rule (linear in u) at seed t"""
    floats = [r for r in op.results if is_float(r)]
    # The adjoint is linear in u, so u's value does not matter, except that rules guard
    # "a zero cotangent gives 0" (TensorFlow's Sqrt/Rsqrt gradients) and the driver reads a
    # constant zero as "no cotangent": u is ones behind a barrier, never zero or constant.
    us = iter(hlo.optimization_barrier([hlo.like(1, r) for r in floats]))
    cts = [next(us) if is_float(r) else None for r in op.results]
    us = [u for u in cts if u is not None]
    grads = list(lookup(op)(op, cts))
    pairs = [(g, t) for g, t in zip(grads, ts) if g is not None and t is not None]
    if not pairs:
        return [None] * len(op.results)
    out = iter(backprop_local([g for g, _ in pairs], [t for _, t in pairs], us, name="jvp"))
    return [next(out) if is_float(r) else None for r in op.results]


__all__ = ["jvp", "in_place", "Replaced", "zero_filled", "linear", "bilinear", "diagonal", "by_transposition"]
