"""Domain guards: JAX's incomplete gamma functions differentiated where they are constant.

JAX writes ``lax.igamma`` / ``lax.igammac`` (XLA's ``Igamma`` expansion) inline, as
``r = select(P, c, w)``: ``P`` tests the inputs against the domain (``x <= 0 or a <= 0``,
NaN tests), ``c`` is a constant, and ``w`` evaluates ``a·log(x) - x - lgamma(a)``, a series
and a continued fraction at every element, also where ``P`` holds: ``log`` of a negative
``x``, ``lgamma`` at a non-positive integer and fractions that never start are NaN there.
The function is the constant ``c`` there, so its derivative is 0; differentiated as written,
the zero cotangent the select sends into ``w`` meets those NaN partials: ``0 · NaN = NaN``
(StableHLO testdata's igammac: 206-440 NaN elements, and in the broadcast case a NaN sum
hiding the real derivative). The ``select`` rule itself keeps ``0 · inf = NaN``: TensorFlow
records exactly that for a user's ``where(x > 0, log(x), 0)`` (tests/fixtures/tf).

:func:`guard_domains` rewrites such a select, in the copy of the function that gets
differentiated, into the double-``where`` JAX's documentation recommends: inside ``w``, each
value ``v`` the domain test compares becomes ``select(P, 1, v)`` (``(1, 1)`` lies inside the
domain). Where ``P`` is false nothing changes; where ``P`` holds ``w`` is evaluated at
``(1, 1)`` and discarded by the select: the same function, whose adjoint (and tangent) is
``0 · finite = 0`` there. The rewrite applies only when

1. ``r = select(P, c, w)`` is a float select and ``c`` a splat constant;
2. ``P`` is an ``or`` of ``compare`` ops, each of two values of ``r``'s shape (its leaves) or
   of a leaf and a splat constant;
3. ``w``'s computation from the leaves (``w``'s ops that do not compute ``P``) holds
   ``chlo.lgamma`` of one leaf and ``log`` of another: the family's ``a·log(x) - lgamma(a)``;
4. that computation is elementwise: elementwise ops, broadcasts of scalars, and ``while``
   loops whose carries are scalars or of ``r``'s shape (the per-element loops of the
   expansion, each element frozen once it converged): changing the values where ``P`` holds
   changes only those elements of ``w``.

Any other select is differentiated as written.
"""
from __future__ import annotations

from ..ir import hlo
from ..ir.mlir import is_float, ir, shape
from ..ir.regions import nested_ops, producer
from .dynamic_shapes import ELEMENTWISE

__all__ = ["guard_domains"]

_LOCAL = ELEMENTWISE | {"stablehlo.constant", "stablehlo.while", "func.call"}


def _is_splat(v: ir.Value) -> bool:
    """A constant, or a broadcast of a scalar constant."""
    op = producer(v)
    if op is None:
        return False
    if op.name == "stablehlo.broadcast_in_dim" and shape(op.operands[0]) == ():
        return _is_splat(op.operands[0])
    return op.name == "stablehlo.constant" and ir.DenseElementsAttr(op.attributes["value"]).is_splat


def _domain_leaves(pred: ir.Value, out: tuple[int, ...], ops: set[ir.Operation]) -> set[ir.Value] | None:
    """The values an ``or`` of compares tests (condition 2), its ops and those of its
    constants added to ``ops``; None if ``pred`` is not such a test."""
    op = producer(pred)
    if op is None:
        return None
    ops.add(op)
    if op.name == "stablehlo.or":
        leaves: set[ir.Value] = set()
        for operand in op.operands:
            found = _domain_leaves(operand, out, ops)
            if found is None:
                return None
            leaves |= found
        return leaves
    if op.name != "stablehlo.compare":
        return None
    tested = [v for v in op.operands if not _is_splat(v)]
    if not tested or any(shape(v) != out or not is_float(v) for v in tested):
        return None
    for v in op.operands:
        while _is_splat(v) and (made_by := producer(v)) is not None:
            ops.add(made_by)
            if made_by.name == "stablehlo.constant":
                break
            v = made_by.operands[0]
    return set(tested)


def _inputs(op: ir.Operation, block: ir.Block) -> list[ir.Value]:
    """The values ``op`` reads from ``block``: its operands and what its regions capture."""
    values = list(op.operands)
    for inner in nested_ops(op):
        values += [v for v in inner.operands if _top(v, block)]
    return values


def _top(v: ir.Value, block: ir.Block) -> bool:
    """Whether ``v`` is defined in ``block`` itself (not in a nested region)."""
    owner = v.owner if isinstance(v, ir.BlockArgument) else v.owner.operation.block
    return owner == block


def _slice(w: ir.Value, stop: set[ir.Value], block: ir.Block) -> set[ir.Operation] | None:
    """The ops of ``block`` that compute ``w`` from ``stop`` and constants; None if one is not
    elementwise (condition 4)."""
    out = shape(w)
    seen: set[ir.Operation] = set()
    todo = [w]
    while todo:
        v = todo.pop()
        op = producer(v)
        if v in stop or op is None or op in seen:
            continue
        if op.name not in _LOCAL and not (op.name == "stablehlo.broadcast_in_dim" and shape(op.operands[0]) == ()):
            return None
        if op.name == "stablehlo.while" and any(shape(r) not in ((), out) for r in op.results):
            return None
        seen.add(op)
        todo += _inputs(op, block)
    return seen


def _guard(select: ir.Operation, block: ir.Block) -> bool:
    """Rewrite one ``select(P, c, w)`` of the igamma family (module docstring); whether it was."""
    pred, taken, w = select.operands
    out = shape(select.results[0])
    if not is_float(w) or shape(pred) != out or not _is_splat(taken):
        return False
    test_ops: set[ir.Operation] = set()
    leaves = _domain_leaves(pred, out, test_ops)
    if leaves is None or len(leaves) < 2:
        return False
    body = _slice(w, leaves, block)
    if body is None:
        return False
    body -= test_ops
    reads = {(op.name, op.operands[0]) for op in body if op.name in ("chlo.lgamma", "stablehlo.log")}
    if not any(("chlo.lgamma", a) in reads and ("stablehlo.log", x) in reads and a != x
               for a in leaves for x in leaves):
        return False
    ops = [o.operation for o in block.operations]
    position = {op: i for i, op in enumerate(ops)}
    # P is built right after the last leaf (JAX may compute it after w: igamma's NaN test).
    start = max((position[p] + 1 for v in leaves if (p := producer(v)) is not None), default=0)
    rewired = [(use.owner.operation if hasattr(use.owner, "operation") else use.owner, use.operand_number)
               for leaf in leaves for use in leaf.uses]
    rewired = [(owner, k) for owner, k in rewired if _top_op(owner, block) in body]
    if any(position[_top_op(owner, block)] < start for owner, _ in rewired):
        return False
    placed = None
    for op in sorted(test_ops, key=position.__getitem__):
        if position[op] < start:
            continue
        if placed is not None:
            op.move_after(placed)
        elif op != ops[start]:
            op.move_before(ops[start])
        placed = op
    guarded = {}
    with (ir.InsertionPoint(ops[start]) if placed is None else ir.InsertionPoint.after(placed)), select.location:
        for leaf in leaves:
            guarded[leaf] = hlo.select(pred, hlo.like(1, leaf), leaf)
    for owner, k in rewired:
        owner.operands[k] = guarded[owner.operands[k]]
    return True


def _top_op(op: ir.Operation, block: ir.Block) -> ir.Operation:
    """The op of ``block`` that holds ``op`` (``op`` itself when it is in ``block``)."""
    while op.block != block:
        op = op.parent.operation
    return op


def guard_domains(func: ir.Operation) -> int:
    """Rewrite every igamma-family domain select of ``func`` (a one-block function) into the
    double-``where`` form (module docstring); the number rewritten."""
    block = func.regions[0].blocks[0]
    if not any(o.operation.name == "chlo.lgamma" for o in block.operations):
        return 0  # the family's lgamma(a) is at the top level (the cheap test first: a big model)
    selects = [op.operation for op in block.operations if op.operation.name == "stablehlo.select"]
    return sum(_guard(op, block) for op in reversed(selects))
