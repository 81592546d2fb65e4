"""Elementwise values that a ``while`` loop reads one slice at a time, computed one slice at a time.

A gradient's reverse loop reads its incoming cotangents a step at a time: the scan MLP's
``2·(hs - ys)/n``, 16 MiB, is computed whole before the loop (IREE stores it) and read by a
``dynamic_slice`` per step. ``sink_sliced_elementwise`` computes the slice inside the loop
instead, from the same slices of the values the elementwise ops read (``hs``, ``ys``: buffers
that exist anyway), so the whole value is never stored. A slice of an elementwise op is the
elementwise op of the operands' slices at the same start indices (one shape, so the same
clamping): the results are the same to the bit.

Only where it cannot cost memory: a value defined next to the loop by elementwise ops (at most
``MAX_OPS``), every read of it inside the loop a ``dynamic_slice`` of the loop body itself, and
every value at the leaves of its elementwise ops a buffer of its own (an argument, a loop's or a
contraction's result, a constant) or a broadcast of a scalar (broadcast again to the slice's
shape). A leaf that IREE would otherwise fuse away (a broadcast of a vector, an ``iota``) keeps
the value as it is. Reads of the value outside the loop are left alone: IREE fuses the
elementwise ops into them.
"""
from __future__ import annotations

from ..ir import hlo
from ..ir.mlir import ir, shape
from ..ir.regions import inside, nested_ops, producer
from ..transforms.batching import remake
from .dynamic_shapes import ELEMENTWISE

MAX_OPS = 32  # elementwise ops recomputed per slice, at most
_SINKABLE = ELEMENTWISE - {"stablehlo.optimization_barrier", "stablehlo.bitcast_convert", "chlo.top_k_placeholder"}
_NOT_BUFFERS = ("stablehlo.broadcast_in_dim", "stablehlo.iota", "stablehlo.broadcast", "stablehlo.dynamic_iota",
                "stablehlo.dynamic_broadcast_in_dim")


def _scalar_broadcast(op: ir.Operation) -> bool:
    return op.name == "stablehlo.broadcast_in_dim" and not shape(op.operands[0])


def _chain(v: ir.Value, loop: ir.Operation) -> list[ir.Operation] | None:
    """The elementwise ops that compute ``v`` next to ``loop`` down to its leaves, or None when
    ``v`` is not such a value, has more than ``MAX_OPS`` of them, or has a leaf that is not a buffer
    of its own or a broadcast scalar."""
    full = shape(v)
    ops: list[ir.Operation] = []
    seen: set[ir.Value] = set()
    todo = [v]
    while todo:
        x = todo.pop()
        if x in seen:
            continue
        seen.add(x)
        op = producer(x)
        sinkable = (op is not None and op.name in _SINKABLE and len(op.results) == 1 and op.parent == loop.parent
                    and not len(op.regions))
        if x == v and not sinkable:
            return None
        if sinkable:
            ops.append(op)
            if len(ops) > MAX_OPS:
                return None
            todo += [y for y in op.operands if shape(y) == full]  # (scalars of clamp, select: kept)
        elif op is not None and op.name in _NOT_BUFFERS and not _scalar_broadcast(op):
            return None
    return ops


def _sliced(v: ir.Value, chain: list[ir.Operation], starts: list[ir.Value], sizes: list[int],
            made: dict[ir.Value, ir.Value]) -> ir.Value:
    """``dynamic_slice(v, starts, sizes)``, computed from the slices of ``v``'s leaves."""
    if v in made:
        return made[v]
    op = producer(v)
    if op is not None and any(op == c for c in chain):
        operands = [_sliced(x, chain, starts, sizes, made) if shape(x) == shape(v) else x for x in op.operands]
        elem_type = ir.RankedTensorType(v.type).element_type
        out = remake(op, operands, [ir.RankedTensorType.get(sizes, elem_type)]).results[0]
    elif op is not None and _scalar_broadcast(op):
        out = hlo.broadcast_in_dim(op.operands[0], sizes, [])
    else:
        out = hlo.dynamic_slice(v, starts, sizes)
    made[v] = out
    return out


def sink_sliced_elementwise(module: ir.Module) -> int:
    """Every value a ``while`` loop reads only by slices, computed by the slice inside the loop
    (the module docstring says where). Returns the number of slices rewritten."""
    done = 0
    for loop in [op for op in nested_ops(module.operation) if op.name == "stablehlo.while"]:
        body = list(loop.regions[1].blocks[0].operations)
        reads: dict[ir.Value, list[ir.Operation]] = {}
        for op in body:
            for v in op.operation.operands:
                owner = producer(v)
                if owner is not None and owner.parent == loop.parent and owner.name in _SINKABLE \
                        and hlo.is_static(v):
                    reads.setdefault(v, [])
        for v in list(reads):
            for use in v.uses:
                user = use.owner.operation
                if not inside(user, loop):
                    continue
                if user.name != "stablehlo.dynamic_slice" or use.operand_number != 0 \
                        or not any(user == op.operation for op in body):
                    reads.pop(v)
                    break
                reads[v].append(user)
        for v, slices in reads.items():
            chain = _chain(v, loop)
            if chain is None:
                continue
            for user in slices:
                starts, sizes = list(user.operands[1:]), list(shape(user.results[0]))
                with ir.InsertionPoint(user), user.location:
                    value = _sliced(v, chain, starts, sizes, {})
                user.results[0].replace_all_uses_with(value)
                user.erase()
                done += 1
    return done
