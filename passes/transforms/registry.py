"""The adjoint-rule and tangent-rule registries, keyed by the StableHLO op name.

Every rule has the same shape::

    @adjoint("stablehlo.tanh")
    def _tanh(op, cts):
        '''d x = ct * (1 - y * y)'''
        ...
        return (dx,)

``op`` is the forward op, ``cts`` one cotangent per result (``None`` is a
symbolic zero), and the rule returns one cotangent per operand (``None`` for
"no gradient"). Rules run with the insertion point and location set by the
driver and build ops through :mod:`irgrad.passes.ir.hlo`.

Tangent rules (forward mode, :mod:`.forward`) mirror them::

    @tangent("stablehlo.tanh")
    def _tanh(op, ts): ...        # one tangent per input, returns one per result

Batching rules (:mod:`.batching`) take the batcher and the op::

    @batching("stablehlo.tanh")
    def _tanh(b, op): ...         # returns the op's results over a leading batch dimension

Every op with an adjoint rule has a tangent rule and the other way round, and a batching rule;
nondifferentiable ops have neither derivative rule. An op's rules are registered side by side in
one module of ``passes/rules`` (``SITES`` records where; ``tests/test_forward.py`` checks both).
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from ...boundary import producer_cause
from ..ir.mlir import ir

Cotangent = ir.Value | None
Rule = Callable[[ir.Operation, Sequence[Cotangent]], Sequence[Cotangent]]
Tangent = ir.Value | None
TangentRule = Callable[[ir.Operation, Sequence[Tangent]], object]

RULES: dict[str, Rule] = {}
NONDIFFERENTIABLE: set[str] = set()
# stablehlo.composite dispatches on the composite's name.
COMPOSITE_RULES: dict[str, Rule] = {}
TANGENT_RULES: dict[str, TangentRule] = {}
COMPOSITE_TANGENT_RULES: dict[str, TangentRule] = {}
BatchingRule = Callable[..., Sequence[ir.Value]]  # (batcher, op) -> the op's batched results
BATCHING_RULES: dict[str, BatchingRule] = {}
# (kind, op name) -> the module that registered it: "adjoint", "tangent", "batching" or
# "nondifferentiable" (tests/test_forward.py checks that an op's rules sit side by side).
SITES: dict[tuple[str, str], str] = {}


def _registrar(kind: str, table: dict, names: Sequence[str], exclusive: bool = True) -> Callable:
    """The decorator that puts a rule in ``table`` under each of ``names`` and records the module
    calling it in ``SITES``; ``exclusive``: a name already registered (or, for a derivative rule,
    declared nondifferentiable) raises ``KeyError``."""
    site = sys._getframe(2).f_globals.get("__name__", "?")  # the rule's module, calling adjoint(...) etc.

    def register(rule):
        for name in names:
            if exclusive and (name in table or (table is not BATCHING_RULES and name in NONDIFFERENTIABLE)):
                raise KeyError(f"a {kind} rule for {name!r} is already registered")
            table[name] = rule
            if exclusive:
                SITES[(kind, name)] = site
        return rule
    return register


def adjoint(*names: str) -> Callable[[Rule], Rule]:
    """Register the decorated function as the adjoint rule of the StableHLO ops ``names``.

    A rule is ``rule(op, cotangents) -> tuple``: ``op`` the forward op, ``cotangents`` one per
    result (``None``: a symbolic zero); it returns one cotangent per operand (``None``: no
    gradient), built with ``irgrad.passes.hlo``. A name already registered raises ``KeyError``.
    See docs/guides/adjoints.md::

        @adjoint("stablehlo.tanh")
        def _tanh(op, cts):
            '''dx = ct * (1 - y * y)'''
    """
    return _registrar("adjoint", RULES, names)


def composite_adjoint(*names: str) -> Callable[[Rule], Rule]:
    """Register the adjoint of ``stablehlo.composite`` ops whose ``name`` is one of ``names``.

    The rule has ``adjoint``'s shape (``op`` is the composite). A composite without a rule is
    differentiated through its decomposition; irgrad's own ``irgrad.relu``,
    ``irgrad.stop_gradient`` and ``irgrad.custom_gradient`` are registered this way.
    """
    return _registrar("composite adjoint", COMPOSITE_RULES, names, exclusive=False)


def tangent(*names: str) -> Callable[[TangentRule], TangentRule]:
    """Register the decorated function as the tangent (JVP) rule of ``names``."""
    return _registrar("tangent", TANGENT_RULES, names)


def composite_tangent(*names: str) -> Callable[[TangentRule], TangentRule]:
    """Register the tangent rule of ``stablehlo.composite`` ops with one of ``names``."""
    return _registrar("composite tangent", COMPOSITE_TANGENT_RULES, names, exclusive=False)


def batching(*names: str) -> Callable[[BatchingRule], BatchingRule]:
    """Register the decorated function as the batching rule of ``names``: ``rule(batcher, op)``
    returns ``op``'s results over a leading batch dimension (see :class:`.batching.Batcher`)."""
    return _registrar("batching", BATCHING_RULES, names)


def nondifferentiable(*names: str) -> None:
    """Declare ops whose operands get no gradient (comparisons, integer and bit ops, iota...).

    The reverse and forward drivers pass through them without error, as TensorFlow's
    ``NotDifferentiable``; an op with an adjoint rule cannot be declared (``KeyError``).
    Example: ``nondifferentiable("stablehlo.replica_id", "stablehlo.partition_id")``.
    """
    for name in names:
        if name in RULES:
            raise KeyError(f"{name!r} already has an adjoint rule")
        NONDIFFERENTIABLE.add(name)
        SITES[("nondifferentiable", name)] = sys._getframe(1).f_globals.get("__name__", "?")


def has_rule(name: str) -> bool:
    return name in RULES or name in NONDIFFERENTIABLE


class MissingAdjointError(LookupError):
    """An op on the path from ``xs`` to ``ys`` has no adjoint rule (a ``LookupError``).

    The message names the op and its location, and says how to register a rule
    (``@adjoint``, docs/guides/adjoints.md) or declare the op ``nondifferentiable``.
    """


def missing(op: ir.Operation, detail: str = "") -> MissingAdjointError:
    where = str(op.location)
    name = op.name
    what = f"No adjoint rule for '{name}'{detail} at {where}."
    cause = producer_cause(f"'{name}'")  # not StableHLO at all: say what the producer should export
    if cause is not None:
        return MissingAdjointError(f"{what} It is not a StableHLO op: {cause}.")
    return MissingAdjointError(f"{what} Register one with @adjoint({name!r}) or mark it nondifferentiable "
                               "(irgrad.passes; see docs/guides/adjoints.md).")


def lookup(op: ir.Operation) -> Rule | None:
    """The rule for ``op``; ``None`` when it is nondifferentiable; raise when unknown."""
    name = op.name
    rule = RULES.get(name)
    if rule is not None:
        return rule
    if name in NONDIFFERENTIABLE:
        return None
    raise missing(op)


class MissingTangentError(LookupError):
    """An op on the path from xs to ys has no tangent rule."""


def lookup_tangent(op: ir.Operation) -> TangentRule | None:
    """The tangent rule for ``op``; ``None`` when it is nondifferentiable; raise when unknown."""
    name = op.name
    rule = TANGENT_RULES.get(name)
    if rule is not None:
        return rule
    if name in NONDIFFERENTIABLE:
        return None
    raise MissingTangentError(f"No tangent rule for '{name}' at {op.location}. "
                              f"Register one with @tangent({name!r}) or mark it nondifferentiable.")
