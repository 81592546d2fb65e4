"""The reverse-mode driver: cotangents from ``ys`` back to ``xs`` inside one block.

TensorFlow's ``gradients_util`` semantics, on SSA values instead of graph
tensors:

* only ops that depend on some ``x`` through floating-point values are
  visited (integer tensors are constants);
* ops in ``stop`` do not propagate (``stop_gradients``), but a stopped value
  that is itself in ``xs`` still gets its own cotangent;
* contributions to a value are summed (``add_n``: one left-to-right sum, or
  ``tree``: a balanced pairwise sum) when the value is first read;
* zero cotangents are ``None`` and stay symbolic.

Complex values carry gradients under TensorFlow's convention: for a real loss ``L`` and
``z = x + iy`` the cotangent of ``z`` is ``∂L/∂x + i ∂L/∂y`` (JAX's ``grad`` returns its
conjugate, ``∂L/∂x - i ∂L/∂y``: conjugate a JAX gradient to compare). For an op
holomorphic in its complex operands (``HOLOMORPHIC``: arithmetic, ``exp``, ``log``,
contractions, and every op linear with real coefficients: reshapes, slices, sums...)
the cotangent is ``ct · conj(f'(z))``: the real rule (``ct · f'(z)``) run on ``conj(ct)``,
its results conjugated. Ops that mix real and complex values (``real``, ``imag``,
``complex``, complex ``abs``, ``fft``...) handle complex values in their own rules and
are listed in ``COMPLEX_AWARE``; any other op on a complex value is refused with
:class:`~.registry.MissingAdjointError` rather than given a wrong gradient.

The adjoint ops are inserted at the ambient insertion point.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from ..ir import hlo
from ..ir.mlir import elem, ir, is_float, loc_name, shape, tensor_type
from .registry import SITES, Cotangent, MissingAdjointError, Rule, lookup, missing

AGGREGATIONS = ("add_n", "tree")
RuleFor = Callable[[ir.Operation], Rule | None]

# Ops whose real adjoint rule, conjugated (``_conjugated``), is their complex one, and whose
# tangent rule (``linear``, ``bilinear``, ``diagonal``) holds for complex values as it is.
HOLOMORPHIC = {f"stablehlo.{n}" for n in (
    "add subtract negate multiply divide exponential exponential_minus_one log log_plus_one tanh sine "
    "cosine tan select reshape transpose slice broadcast_in_dim concatenate pad reverse dynamic_slice "
    "dynamic_update_slice gather dot_general dot optimization_barrier reduce").split()}
# Ops whose adjoint and tangent rules read complex element types themselves.
COMPLEX_AWARE: set[str] = set()


def is_complex(v: ir.Value | ir.Type) -> bool:
    t = v if isinstance(v, ir.Type) else v.type
    return isinstance(t.maybe_downcast(), ir.RankedTensorType) and hlo.is_complex_type(elem(t))


def carries(v: ir.Value) -> bool:
    """Whether ``v`` carries a gradient: floating-point or complex elements."""
    return is_float(v) or is_complex(v)


def _sums(op: ir.Operation) -> bool:
    """A ``reduce`` whose body adds (linear, so holomorphic)."""
    ops = [o.operation.name for o in op.regions[0].blocks[0].operations]
    return ops == ["stablehlo.add", "stablehlo.return"]


def complex_kind(op: ir.Operation) -> str | None:
    """``None`` for an op on real values only; else ``"aware"``, ``"holomorphic"`` or
    ``"unsupported"`` (see the module docstring)."""
    if not any(is_complex(v) for v in [*op.operands, *op.results]):
        return None
    if op.name in COMPLEX_AWARE:
        return "aware"
    if op.name in HOLOMORPHIC and (op.name != "stablehlo.reduce" or _sums(op)):
        return "holomorphic"
    return "unsupported"


def complex_rule(op: ir.Operation, rule):
    """``rule`` as it applies to ``op``'s complex values (``rule`` itself for a real op), or
    raise when ``op`` has no rule for complex values."""
    kind = complex_kind(op)
    if kind is None or kind == "aware":
        return rule
    if kind == "holomorphic":
        return _conjugated(rule)
    raise missing(op, " on complex values (TensorFlow's convention has rules for complex arithmetic, "
                      "exp/log, real/imag/complex/abs, fft and linear data movement)")


def _conjugated(rule: Rule) -> Rule:
    def conjugated(op, cts):
        grads = rule(op, [None if c is None else hlo.conj(c) for c in cts])
        return [None if g is None else hlo.conj(g) for g in grads]
    return conjugated


def op_inputs(op: ir.Operation) -> list[ir.Value]:
    """Operands plus values that ``op``'s regions capture from above."""
    inputs = list(op.operands)
    if len(op.regions) and op.name in _CAPTURING:
        inputs.extend(captured_values(op))
    return inputs


# Region ops whose bodies may use values defined outside (StableHLO allows it).
_CAPTURING = {"stablehlo.case", "stablehlo.if", "stablehlo.while"}


def captured_values(op: ir.Operation) -> list[ir.Value]:
    """Values used inside ``op``'s regions but defined outside ``op`` (in order, unique)."""
    inside: set[ir.Value] = set()
    seen: set[ir.Value] = set()
    out: list[ir.Value] = []

    def visit(o: ir.Operation) -> None:
        for region in o.regions:
            for block in region.blocks:
                inside.update(block.arguments)
                for inner in block.operations:
                    for v in inner.operands:
                        if v not in inside and v not in seen:
                            seen.add(v)
                            out.append(v)
                    inside.update(inner.results)
                    visit(inner)

    visit(op)
    return [v for v in out if v not in inside]


def active_ops(ys: Sequence[ir.Value], xs: set[ir.Value], stop: set[ir.Operation],
               allow: Callable[[ir.Operation], bool] | None = None) -> list[ir.Operation]:
    """Ops between xs and ys in topological order (inputs first).

    An op is active when one of its floating-point inputs is an ``x`` or the
    result of an active op, it is not a stop op, and ``allow(op)`` holds.
    """
    state: dict[ir.Operation, bool | None] = {}
    order: list[ir.Operation] = []
    stack: list[tuple[ir.Operation, bool]] = [
        (y.owner.operation, False) for y in reversed(ys) if isinstance(y, ir.OpResult)]
    inputs_of: dict[ir.Operation, list[ir.Value]] = {}
    while stack:
        op, expanded = stack.pop()
        if expanded:
            active = op not in stop and (allow is None or allow(op)) and any(
                carries(v) and (v in xs or (isinstance(v, ir.OpResult) and state.get(v.owner.operation) is True))
                for v in inputs_of.pop(op))
            state[op] = active
            if active:
                order.append(op)
            continue
        if op in state:
            continue
        state[op] = None
        inputs = inputs_of[op] = op_inputs(op)
        stack.append((op, True))
        for v in inputs:
            if isinstance(v, ir.OpResult):
                owner = v.owner.operation
                if owner not in state:
                    stack.append((owner, False))
    return order


def _piece(v: ir.Value) -> tuple[int, int] | None:
    """(dimension, offset) when ``v`` is ``pad(x, 0)`` along one dimension only, without
    interior padding (the adjoint of a slice of contiguous rows or columns), and ``x`` is
    used by nothing else: IREE 3.13 computes wrong values when two concatenates share a
    piece (a GRU's r and z gates add slices of x@w_x and h@w_h, whose cotangents are then
    the same pieces; tests/test_adjoint_rules.py)."""
    if not (isinstance(v, ir.OpResult) and v.owner.name == "stablehlo.pad"):
        return None
    op = v.owner.operation
    if len(list(op.operands[0].uses)) > 1 or not hlo.is_zero_constant(op.operands[1]) \
            or any(hlo.read_i64_array(op, "interior_padding")):
        return None
    low, high = hlo.read_i64_array(op, "edge_padding_low"), hlo.read_i64_array(op, "edge_padding_high")
    padded = [d for d, (lo, hi) in enumerate(zip(low, high)) if lo or hi]
    if len(padded) != 1 or low[padded[0]] < 0 or high[padded[0]] < 0:
        return None
    return padded[0], low[padded[0]]


def _concatenated(terms: list[ir.Value]) -> list[ir.Value]:
    """``terms`` with the zero-padded pieces of one tensor along one dimension that do not
    overlap (the cotangents of an LSTM's four gate slices) joined by one concatenate, the
    gaps between them zeros: one write of each piece instead of pads and sums of the whole."""
    groups: dict[tuple, list[tuple[int, ir.Value]]] = {}
    for v in terms:
        piece = _piece(v)
        if piece is not None:
            groups.setdefault((str(v.type), piece[0]), []).append((piece[1], v))
    out = list(terms)
    for (_, dim), pieces in groups.items():
        pieces.sort(key=lambda p: p[0])
        parts, end = [], 0
        for offset, v in pieces:
            x = v.owner.operation.operands[0]
            if offset < end:
                break  # overlapping pieces: summed as they are
            if offset > end:
                gap = list(shape(x))
                gap[dim] = offset - end
                parts.append(hlo.zeros(tensor_type(gap, elem(x))))
            parts.append(x)
            end = offset + shape(x)[dim]
        else:
            if len(pieces) < 2:
                continue
            full = shape(pieces[0][1])[dim]
            if end < full:
                gap = list(shape(parts[-1]))
                gap[dim] = full - end
                parts.append(hlo.zeros(tensor_type(gap, elem(parts[-1]))))
            joined = {id(v) for _, v in pieces}
            out = [t for t in out if id(t) not in joined] + [hlo.concatenate(parts, dim)]
    return out


def aggregate(terms: list[ir.Value], method: str) -> ir.Value:
    """Sum cotangent contributions: one n-ary sum, or a pairwise tree (zero-padded pieces of
    one tensor joined first, see ``_concatenated``)."""
    if len(terms) > 1:
        terms = _concatenated(terms)
    if len(terms) == 1:
        return terms[0]
    if method == "tree":
        while len(terms) > 1:
            paired = [hlo.accumulate(terms[i], terms[i + 1]) for i in range(0, len(terms) - 1, 2)]
            if len(terms) % 2:
                paired.append(terms[-1])
            terms = paired
        return terms[0]
    total = terms[0]
    for t in terms[1:]:
        total = hlo.accumulate(total, t)
    return total


def _grad_location(op: ir.Operation, name: str) -> ir.Location:
    forward = loc_name(op) or op.name.split(".", 1)[-1]
    return ir.Location.name(f"{name}/{forward}_grad", childLoc=op.location)


def backprop(ys: Sequence[ir.Value], seeds: Sequence[Cotangent], xs: Sequence[ir.Value], *,
             stop: Iterable[ir.Operation] = (), rule_for: RuleFor | None = None,
             aggregation: str = "add_n", gate: bool = False, name: str = "gradients",
             allow: Callable[[ir.Operation], bool] | None = None) -> list[Cotangent]:
    """Cotangents of ``xs`` given ``seeds`` for ``ys`` (``None`` where unconnected).

    ``rule_for(op)`` may return a rule that overrides the registry for one op
    (user-registered gradients); returning ``None`` falls back to the registry.
    ``allow(op)`` restricts the ops gradients flow through (a tape's recording).
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; accepted: {', '.join(AGGREGATIONS)}")
    xs_set = set(xs)
    stop_set = set(stop)
    order = active_ops(ys, xs_set, stop_set, allow)

    pending: dict[ir.Value, list[ir.Value]] = {}
    for y, seed in zip(ys, seeds):
        if seed is not None and carries(y):
            pending.setdefault(y, []).append(seed)

    def total(v: ir.Value) -> Cotangent:
        terms = pending.get(v)
        if not terms:
            return None
        if len(terms) > 1:  # symbolic zeros (splat zero constants) add nothing
            terms[:] = [t for t in terms if not hlo.is_zero_constant(t)] or terms[:1]
        if len(terms) > 1:
            with ir.Location.name(f"{name}/AddN"):
                terms[:] = [aggregate(terms, aggregation)]
        return terms[0]

    _ACTIVE.append((set(order), set(ys)))
    try:
        _walk(order, pending, total, rule_for, gate, name)
    finally:
        _ACTIVE.pop()
    return [total(x) for x in xs]


# The active ops and the outputs of each backprop call in progress, innermost last.
_ACTIVE: list[tuple[set[ir.Operation], set[ir.Value]]] = []


def differentiated(op: ir.Operation) -> bool:
    """Whether the innermost backprop call in progress differentiates through ``op``: for
    rules whose result depends on how a value is used on the way to the outputs."""
    return not _ACTIVE or op in _ACTIVE[-1][0]


def is_output(v: ir.Value) -> bool:
    """Whether ``v`` is one of the outputs the innermost backprop call differentiates
    (every value is, outside of one)."""
    return not _ACTIVE or v in _ACTIVE[-1][1]


def _needs_static(op: ir.Operation) -> MissingAdjointError | None:
    """One line for a rule that builds a static shape where ``op`` has a run-time one (``None``
    when ``op``'s shapes are all static: the error is something else)."""
    for k, v in enumerate(list(op.operands) + list(op.results)):
        if isinstance(v.type, ir.RankedTensorType) and not hlo.is_static(v):
            d = next(i for i, n in enumerate(shape(v)) if n == hlo.DYNAMIC)
            what = f"operand {k}" if k < len(op.operands) else f"result {k - len(op.operands)}"
            return MissingAdjointError(f"No adjoint rule for '{op.name}' at {op.location} over a dynamic "
                                       f"dimension: dimension {d} of {what} ({v.type}) must be static.")
    return None


def _empty(v: ir.Value) -> bool:
    """A tensor with a static zero-size dimension: its cotangent is empty, its operands get zeros."""
    return isinstance(v.type, ir.RankedTensorType) and 0 in shape(v)


class InternalError(RuntimeError):
    """One of irgrad's own adjoint rules failed in a way no module should cause: a bug in
    irgrad, said in one line with the op and its location (never a bare Python message such
    as ``too many values to unpack``)."""

    @classmethod
    def at(cls, op: ir.Operation, error: BaseException) -> InternalError:
        what = (str(error).splitlines() or [""])[0]
        site = SITES.get(("adjoint", op.name), "?")
        whose = ("a bug in irgrad: please report it with this module" if site.startswith("irgrad.")
                 else f"a bug in the rule registered by {site}")
        return cls(f"internal error in the adjoint rule of '{op.name}' at {op.location}: "
                   f"{type(error).__name__}: {what} ({whose})")


# Exceptions only a mistake in a rule raises (a refusal is a MissingAdjointError or a ValueError).
_PYTHON_BUGS = (TypeError, IndexError, KeyError, AttributeError, AssertionError, ZeroDivisionError, NameError,
                RecursionError)


def is_python_bug(error: ValueError) -> bool:
    """A ValueError the interpreter raised for a rule's own mistake (unpacking), not a refusal."""
    return str(error).startswith(("too many values to unpack", "not enough values to unpack"))


def _walk(order, pending, total, rule_for, gate, name) -> None:
    for op in reversed(order):
        cts = [total(r) for r in op.results]
        if all(ct is None for ct in cts) or all(_empty(r) for r in op.results):
            continue  # nothing arrives; an empty result (a zero-size convolution) carries nothing back
        rule = rule_for(op) if rule_for is not None else None
        registered = rule is None
        if rule is None:
            rule = lookup(op)
            if rule is None:  # nondifferentiable: its inputs get nothing
                continue
            rule = complex_rule(op, rule)
        operands = list(op.operands) if op.name not in _CAPTURING else op_inputs(op)
        with _grad_location(op, name):
            try:
                grads = list(rule(op, cts))
            except ValueError as error:
                refusal = _needs_static(op) if "static" in str(error) else None
                if refusal is None:
                    if registered and is_python_bug(error):
                        raise InternalError.at(op, error) from error
                    raise
                raise refusal from None
            except _PYTHON_BUGS as error:
                if not registered:  # a rule the caller passed (a custom gradient): its own error
                    raise
                raise InternalError.at(op, error) from error
            _check(op, operands, grads)
            if all(ct is None or hlo.is_zero_constant(ct) for ct in cts):
                # Only symbolic zeros arrive: the operands the rule reaches get zeros, and
                # what the rule built for them is dead code.
                grads = [None if g is None else hlo.zeros(g.type) for g in grads]
            if gate and sum(g is not None for g in grads) > 1:
                live = [i for i, g in enumerate(grads) if g is not None]
                gated = hlo.optimization_barrier([grads[i] for i in live])
                for i, g in zip(live, gated):
                    grads[i] = g
        for v, g in zip(operands, grads):
            if g is not None and carries(v):
                pending.setdefault(v, []).append(g)


def backprop_local(outputs: Sequence[ir.Value], cts: Sequence[Cotangent], inputs: Sequence[ir.Value],
                   name: str = "gradients") -> list[Cotangent]:
    """Cotangents of ``inputs`` through only the ops between them and ``outputs``.

    For rules that rebuild an op from simpler ops (a decomposition) and differentiate
    that: the walk stops at ``inputs``, where the outer driver carries on.
    """
    stop_at = set(inputs)
    inside: set[ir.Operation] = set()
    stack = [v.owner.operation for v in outputs if isinstance(v, ir.OpResult) and v not in stop_at]
    while stack:
        op = stack.pop()
        if op in inside:
            continue
        inside.add(op)
        stack.extend(v.owner.operation for v in op_inputs(op)
                     if isinstance(v, ir.OpResult) and v not in stop_at)
    return backprop(outputs, cts, inputs, name=name, allow=inside.__contains__)


def _check(op: ir.Operation, operands: Sequence[ir.Value], grads: Sequence[Cotangent]) -> None:
    if len(grads) != len(operands):
        raise ValueError(
            f"adjoint rule of '{op.name}' at {op.location} returned {len(grads)} cotangents "
            f"for {len(operands)} operands")
    for i, (v, g) in enumerate(zip(operands, grads)):
        if g is not None and g.type != v.type:
            raise ValueError(
                "Incompatible shapes between op input and calculated input gradient. "
                f"Forward operation: '{op.name}' at {op.location}. Input index: {i}. "
                f"Original input type: {v.type}. Calculated input gradient type: {g.type}")


__all__ = ["backprop", "backprop_local", "carries", "is_complex", "complex_rule", "complex_kind", "HOLOMORPHIC",
           "COMPLEX_AWARE", "differentiated", "is_output", "active_ops", "aggregate", "op_inputs",
           "captured_values", "AGGREGATIONS"]
