"""An IREE 3.13 workaround for the reverse pass of a ``while`` loop (issue 44).

irgrad's adjoint of a ``while`` that records every iteration runs the forward loop again to
fill run-time-sized tapes (``tensor<?x...>``), then a reverse loop reading them. When that
reverse loop's initial cotangent is computed from a value the loop body also reads (JAX's
igamma: ``exp(x)`` after a series in ``x``), IREE 3.13's stream partitioning fails with
``circular dependency: input operation uses partition output``
(``tests/fixtures/iree313_masked_while_gradient.mlir``, the smallest case). An
``optimization_barrier`` on the reverse loop's computed, statically shaped initial values keeps
their producers out of the loop's partition; it computes nothing.

The loop that records the tapes needs the same: JAX's ``random_gamma`` (a rejection sampler
whose body holds another data-dependent loop, drawing a normal) failed the same way until the
computed initial values of the recording loop (the forward's values, which the counting run
before it also reads) went behind a barrier too (``tests/test_peer_suites.py``,
``test_random_gamma_gradient``).
"""
from __future__ import annotations

from ..ir import hlo
from ..ir.mlir import ir
from ..ir.regions import nested_ops


def _reads_tape(loop: ir.Operation) -> bool:
    """Whether ``loop``'s body reads a run-time-sized result of another ``while`` (a tape)."""
    return any(isinstance(v, ir.OpResult) and v.owner.name == "stablehlo.while" and v.owner != loop
               and not hlo.is_static(v) for op in nested_ops(loop) for v in op.operands)


def _writes_tape(loop: ir.Operation) -> bool:
    """Whether ``loop`` carries a run-time-sized tensor (the loop that records tapes)."""
    return any(not hlo.is_static(v) for v in loop.operands if isinstance(v.type, ir.RankedTensorType))


def _computed(v: ir.Value) -> bool:
    """A statically shaped value some op other than a constant (or its broadcast) computes."""
    if not isinstance(v, ir.OpResult) or not isinstance(v.type, ir.RankedTensorType) or not hlo.is_static(v):
        return False
    while v.owner.name in ("stablehlo.broadcast_in_dim", "stablehlo.reshape"):
        v = v.owner.operands[0]
        if not isinstance(v, ir.OpResult):
            return True
    return v.owner.name != "stablehlo.constant"


def barrier_reverse_loops(module: ir.Module) -> int:
    """Put the computed initial values of every ``while`` that reads or writes a tape behind
    one ``stablehlo.optimization_barrier``; returns the number of loops changed."""
    loops = [op for op in nested_ops(module.operation)
             if op.name == "stablehlo.while" and (_reads_tape(op) or _writes_tape(op))]
    changed = 0
    for loop in loops:
        picked = [i for i, v in enumerate(loop.operands) if _computed(v)]
        if not picked:
            continue
        values = [loop.operands[i] for i in picked]
        with ir.InsertionPoint(loop), loop.location:
            barrier = ir.Operation.create("stablehlo.optimization_barrier", results=[v.type for v in values],
                                          operands=values)
        for i, new in zip(picked, barrier.results):
            loop.operands[i] = new
        changed += 1
    return changed
