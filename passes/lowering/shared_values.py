"""Large elementwise values read by several kernels, computed once per reader.

IREE fuses an elementwise op into the kernel that reads it, but only when one kernel does: a
value two kernels read is stored whole. The scan MLP's gradient computes ``hs - ys`` (16 MiB)
once for the loss (``sum(square(...))``) and once for the output's cotangent (``2·(...)/n``):
IREE stored it, and held it through the reverse loop (its host program: 80.4 MiB allocated at
the peak, 64.4 with the value computed per reader). ``split_shared_elementwise`` gives each
reader after the first a copy of the op, so each kernel computes it from the op's operands.

Only where it cannot cost memory: the value is at least ``MIN_BYTES``, every reader is
elementwise or a reduce in the same block (kernels IREE fuses a producer into), and every
operand is a buffer that lives past the last reader anyway (an argument, a constant, a broadcast
scalar, or a value read again at or after it). A copy's first operand of the value's shape is tied
(``hlo.tie``: ``+ -0·is_finite(x[k])``, exact to the bit) to one element of itself, a different
one per copy, so that CSE does not merge the copies back.
"""
from __future__ import annotations

import math

from ..ir import hlo
from ..ir.mlir import elem, ir, is_float, shape
from ..ir.regions import producer
from ..transforms.backprop import captured_values
from ..transforms.batching import remake
from .loop_slices import _SINKABLE, _scalar_broadcast

MIN_BYTES = 1 << 20
# Kernels IREE fuses an elementwise producer into.
_READERS = _SINKABLE | {"stablehlo.reduce"} | {f"chlo.{n}" for n in (
    "square acos acosh asin asinh atan atanh conj cosh sinh is_inf is_neg_inf is_pos_inf").split()}


def _last_uses(ops: list[ir.Operation]) -> dict[ir.Value, list[int]]:
    """The positions of the ops of ``ops`` that read each value (in their regions too)."""
    uses: dict[ir.Value, list[int]] = {}
    for i, op in enumerate(ops):
        for v in {*op.operands, *(captured_values(op) if len(op.regions) else [])}:
            uses.setdefault(v, []).append(i)
    return uses


def _constant(v: ir.Value) -> bool:
    op = producer(v)
    return op is not None and (op.name == "stablehlo.constant" or _scalar_broadcast(op))


def _kept(v: ir.Value, past: int, uses: dict[ir.Value, list[int]]) -> bool:
    """Whether ``v``'s buffer outlives the op at position ``past`` anyway."""
    return producer(v) is None or _constant(v) or max(uses.get(v, [-1])) >= past


def split_shared_elementwise(module: ir.Module) -> int:
    """Give each reader after the first of a large shared elementwise value its own copy (the
    module docstring); returns the number of copies made."""
    done = 0
    for func in module.body.operations:
        if func.operation.name != "func.func" or not len(func.regions[0].blocks):
            continue
        block = func.regions[0].blocks[0]
        ops = [o.operation for o in block.operations]
        position = {op: i for i, op in enumerate(ops)}
        uses = _last_uses(ops)
        for op in ops:
            if op.name not in _SINKABLE or len(op.results) != 1 or len(op.regions) or not hlo.is_static(op.results[0]):
                continue
            v = op.results[0]
            if not is_float(v) or math.prod(shape(v)) * elem(v).width // 8 < MIN_BYTES:
                continue
            anchor = next((i for i, x in enumerate(op.operands) if is_float(x) and shape(x) == shape(v)
                           and not _constant(x)), None)
            if anchor is None:
                continue
            readers = sorted({u.owner.operation for u in v.uses}, key=lambda r: position.get(r, -1))
            if len(readers) < 2 or any(r not in position or r.name not in _READERS
                                       for r in readers):
                continue
            if not op.operands or not all(_kept(x, position[readers[-1]], uses) for x in op.operands):
                continue
            for k, reader in enumerate(readers[1:], start=1):
                with ir.InsertionPoint(reader), reader.location:
                    operands = list(op.operands)
                    operands[anchor] = hlo.tie(operands[anchor], operands[anchor], k % math.prod(shape(v)))
                    copy = remake(op, operands, [v.type]).results[0]
                for use in list(v.uses):
                    if use.owner.operation == reader:
                        reader.operands[use.operand_number] = copy
                done += 1
    return done
