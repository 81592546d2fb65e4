"""Shift invariance: when a subtracted value gets no gradient, exactly.

Numerically stable softmax, log-softmax and cross-entropy subtract each row's
maximum before ``exp``: ``s = x - broadcast(m)``. The result does not depend on
``m`` (any value constant along the row would do), so the gradient reaching ``m``
through ``s`` is zero; JAX and TensorFlow know it (``stop_gradient`` on the max,
which their exported StableHLO no longer shows) and skip the max's adjoint.
Differentiated as written, the adjoint still routes ``-sum(ct)`` (zero up to
rounding) back through the max: a comparison, a tie count and two reductions.

``shift_invariant(s, dims)`` proves the independence on the IR: it follows every
use of ``s`` forward, tracking how a shift ``s + c`` (``c`` constant along
``dims``) shows in each derived value, and succeeds only if every value that
leaves the followed set is unchanged by the shift:

* ``s`` shifts by ``c``; ``v + w`` and ``v - w`` shift when ``v`` shifts and ``w``
  is not derived from ``s``, and ``v - w`` is unchanged when both shift by the same
  ``c`` (each value records which axes of ``s`` its shift follows);
* ``exp`` turns a shift into a positive factor ``e^c``; ``log`` turns it back;
  ``v * w`` and ``v / w`` keep a factor when ``w`` is not derived from ``s``, and
  ``v / w`` with both scaled is unchanged; ``-v`` keeps a factor;
* ``reduce`` add (of a factor) or max/min (of a shift) over axes among ``dims``
  keeps it; ``broadcast_in_dim`` keeps it, and the new axes join ``dims``;
  ``convert`` keeps it; anything unchanged may be used by anything.

Any other use of a shifted or scaled value fails the proof (the gradient then
flows as written). So ``log(sum(exp(x - m)))`` alone is not invariant (it shifts
by ``c``: logsumexp adds ``m`` back), while ``x - m - log(sum(exp(x - m)))`` is.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from ..ir import hlo
from ..ir.mlir import ir, shape
from ..rules.reductions import reduce_kind

SHIFT, SCALE, SAME = "shift", "scale", "same"

# A derived value's entry: its kind and, per axis, which axis of ``s`` it follows
# (the shift ``c`` is a function of those), or None where ``c`` is constant along it.
Entry = tuple[str, tuple]


def constant_axes(broadcast: ir.Operation) -> set[int]:
    """Axes of a ``broadcast_in_dim`` result along which it is constant."""
    mapped = hlo.read_i64_array(broadcast, "broadcast_dimensions")
    source, out = shape(broadcast.operands[0]), shape(broadcast.results[0])
    axes = {a for a in range(len(out)) if a not in mapped}
    axes |= {a for d, a in zip(source, mapped) if d == 1 and out[a] != 1}
    return {a for a in axes if out[a] != 1}


def shift_invariant(s: ir.Value, dims: Iterable[int],
                    within: Callable[[ir.Operation], bool] = lambda op: True,
                    output: Callable[[ir.Value], bool] = lambda v: True) -> bool:
    """Whether everything computed from ``s`` by ops ``within`` accepts is unchanged by
    ``s + c`` for any ``c`` constant along ``dims`` (see the module docstring). The adjoint
    passes the ops it differentiates through (other uses do not reach its outputs) and
    which values are its outputs: one of those must be unchanged too."""
    dims = set(dims)
    block = s.owner.operation.block if isinstance(s, ir.OpResult) else s.owner
    # Every op reached from s, in program order: all of them must sit in s's block.
    reached: dict[ir.Operation, None] = {}
    stack = [s]
    while stack:
        for use in stack.pop().uses:
            op = use.owner.operation if hasattr(use.owner, "operation") else use.owner
            if op in reached or not within(op):
                continue
            if op.block != block:
                return False
            reached[op] = None
            stack.extend(op.results)
    order = {op.operation: i for i, op in enumerate(block.operations)}
    kinds: dict[ir.Value, Entry] = {s: (SHIFT, tuple(None if a in dims else a for a in range(len(shape(s)))))}
    for op in sorted(reached, key=lambda o: order[o]):
        entry = _through(op, [kinds.get(v) for v in op.operands])
        if entry is None:
            return False
        for r in op.results:
            kinds[r] = entry
    return all(kind == SAME or not output(v) for v, (kind, _) in kinds.items())


def _through(op: ir.Operation, ins: list[Entry | None]) -> Entry | None:
    """How ``op``'s result changes, given its operands' entries (None: not derived from
    ``s``); None when unknown."""
    derived = [e for e in ins if e is not None]
    if all(e[0] == SAME for e in derived):
        return SAME, ()
    name, kinds = op.name, [e[0] if e else None for e in ins]
    if len(op.results) != 1:
        return None
    if name in ("stablehlo.add", "stablehlo.subtract", "stablehlo.multiply", "stablehlo.divide"):
        (a, b), live = kinds, [e for e in ins if e is not None and e[0] != SAME]
        if len(live) == 2 and live[0][1] != live[1][1]:
            return None  # shifted or scaled by c at different positions
        origin = live[0][1]
        one = {a, b} - {SHIFT, SCALE}  # the side that is not shifted or scaled
        if name in ("stablehlo.add", "stablehlo.subtract"):
            if a == b == SHIFT and name == "stablehlo.subtract":
                return SAME, ()
            if name == "stablehlo.subtract" and b == SHIFT:
                return None  # shifted by -c
            return (SHIFT, origin) if {a, b} & {SHIFT} and one else None
        if name == "stablehlo.divide" and a == b == SCALE:
            return SAME, ()
        if a == SCALE and b != SCALE and b != SHIFT or name == "stablehlo.multiply" and b == SCALE and a not in (
                SCALE, SHIFT):
            return SCALE, origin
        return None
    (kind, origin) = derived[0] if len(derived) == 1 else (None, None)
    if kind is None or ins[0] is None:
        return None
    if name == "stablehlo.exponential":
        return (SCALE, origin) if kind == SHIFT else None
    if name == "stablehlo.log":
        return (SHIFT, origin) if kind == SCALE else None
    if name == "stablehlo.negate":
        return (SCALE, origin) if kind == SCALE else None
    if name == "stablehlo.convert":
        return kind, origin
    if name == "stablehlo.broadcast_in_dim":
        mapped = hlo.read_i64_array(op, "broadcast_dimensions")
        constant = constant_axes(op)
        out = [None] * len(shape(op.results[0]))
        for i, a in enumerate(mapped):
            out[a] = None if a in constant else origin[i]
        return kind, tuple(out)
    if name == "stablehlo.reduce" and len(op.operands) == 2:
        reduced = set(hlo.read_i64_array(op, "dimensions"))
        body = reduce_kind(op)
        if any(origin[a] is not None for a in reduced) or not (
                kind == SCALE and body == "add" or kind == SHIFT and body in ("max", "min")):
            return None
        return kind, tuple(o for a, o in enumerate(origin) if a not in reduced)
    return None
