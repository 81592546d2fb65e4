"""IREE 3.13 workarounds for ``while`` loops that change their carried buffers (a scan's output
stack, a gradient's tape, the reverse loop's accumulated cotangents).

IREE 3.13 copied a loop's carried stack whole at every iteration (``iree-compile
--compile-to=hal``: a ``copy_buffer`` of the whole stack in the loop body): the 256-step scan
MLP's gradient copied its two 16 MiB stacks at each of 256 steps. It updates them in place when
(1) the loop runs on a named device (``runtime.compiler`` marks the functions of a module with
loops, when ``loops_run_in_place`` holds) and (2) the loop's initial value for each carry is
read by nothing else.

Where (1) holds and (2) does not, IREE 3.13 is wrong rather than slow: carries that start from
one buffer are changed in that one buffer (a scan's output stack held its tape's rows). A
gradient's loops break (2) everywhere: its stacks and cotangents start as zeros, which IREE
folds and merges into one buffer (a broadcast zero and a dense zero of one shape included). So
``separate_loop_inits`` gives every changed carry whose initial value is computed from
constants alone, or read by anything else, a copy of its own: ``hlo.tie``'d to a value computed
before the loop (``v + -0·is_finite(anchor[k])``: ``v`` to the bit, never folded back; another
element ``k`` or anchor per copy, so that CSE keeps them apart). ``runtime.compiler`` names the
device only where every loop is simple and every changed carry then starts from a buffer of its
own (integer tensors cannot be tied this way: their loops keep the copies).
``tests/test_loop_inits.py`` checks both in IREE's own output, and the values.
"""
from __future__ import annotations

import math

from ..ir import hlo
from ..ir.mlir import ir, is_float, run_pipeline, shape
from ..ir.regions import nested_ops


IN_PLACE = ("stablehlo.dynamic_update_slice", "stablehlo.scatter")  # what IREE updates in place


def updated_in_place(loop: ir.Operation) -> list[int]:
    """The operands of ``loop`` whose carries its body updates in place: yields a
    ``dynamic_update_slice`` or ``scatter`` (of one, ...) of the carry itself."""
    body = loop.regions[1].blocks[0]
    ret = list(body.operations)[-1].operation
    found = []
    for i, (arg, new) in enumerate(zip(body.arguments, ret.operands)):
        while isinstance(new, ir.OpResult) and new.owner.name in IN_PLACE:
            new = new.owner.operands[0]
        if new == arg and ret.operands[i] != arg:
            found.append(i)
    return found


def changed_carries(loop: ir.Operation) -> list[int]:
    """The operands of ``loop`` whose carries its body changes (does not pass on as they are),
    but integer scalars (loop counters: IREE keeps those on the host)."""
    body = loop.regions[1].blocks[0]
    ret = list(body.operations)[-1].operation
    return [i for i, (arg, new) in enumerate(zip(body.arguments, ret.operands))
            if new != arg and (is_float(arg) or shape(arg))]


def loops_run_in_place(op: ir.Operation) -> bool:
    """Whether IREE 3.13, told the loops' device, computes every ``while`` inside ``op``
    correctly: each loop is ``simple`` and starts every carry it changes from a value nothing
    else reads, not computed from constants alone. Elsewhere, placed, it computed wrong values
    (two carries updated in one buffer; a GRU scan's gradient, whose forward h and reverse dh
    started from zeros IREE made one buffer; a checkpointed scan's reverse loop, which updates a
    zeros constant captured from outside) or failed at run time (a branch in a scan:
    ``copy_buffer`` OUT_OF_RANGE)."""
    loops = [loop for loop in nested_ops(op) if loop.name == "stablehlo.while"]
    constant = _FromConstants()
    return all(simple(loop) for loop in loops) and \
        all(_own(loop.operands[i], constant) for loop in loops for i in changed_carries(loop))


def _own(v: ir.Value, constant: _FromConstants) -> bool:
    """Whether a loop changing ``v`` in place changes nothing else: ``v`` is an op's result
    (not a caller's argument), read by nothing else, and not computed from constants alone."""
    return isinstance(v, ir.OpResult) and _uses(v) == 1 and not constant(v)


class _FromConstants(dict):
    """Whether a value is computed from constants alone (IREE folds it into a constant, and
    equal constants into one buffer: a broadcast zero and a dense zero of one shape were one)."""

    def __call__(self, v: ir.Value) -> bool:
        stack = [v]
        while stack:
            top = stack[-1]
            if top in self:
                stack.pop()
                continue
            if not isinstance(top, ir.OpResult) or len(top.owner.regions):
                self[top] = False
                stack.pop()
                continue
            pending = [o for o in top.owner.operands if o not in self]
            if pending:
                stack.extend(pending)
                continue
            self[top] = all(self[o] for o in top.owner.operands)
            stack.pop()
        return self[v]


def simple(loop: ir.Operation) -> bool:
    """A loop whose body holds no loop, branch or call, updates in place nothing but its own
    carries, and whose initial values are not behind an ``optimization_barrier`` (the loops
    ``reverse_loops.py`` fences against IREE 3.13's stream partitioning: placed, JAX's igamma
    gradient failed again with "circular dependency")."""
    if any(isinstance(v, ir.OpResult) and v.owner.name == "stablehlo.optimization_barrier" for v in loop.operands):
        return False
    carried = set(loop.regions[1].blocks[0].arguments)
    for inner in nested_ops(loop):
        if inner.name in ("stablehlo.while", "stablehlo.case", "stablehlo.if", "func.call"):
            return False
        if inner.name in IN_PLACE:
            if inner.operands[0] not in carried:
                return False
            carried.add(inner.results[0])
    return True


def _uses(v: ir.Value) -> int:
    return sum(1 for _ in v.uses)


def _anchor(v: ir.Value) -> bool:
    return is_float(v) and hlo.is_static(v) and math.prod(shape(v)) > 0


def _loops(block: ir.Block, constant: _FromConstants) -> list[tuple[ir.Operation, list[ir.Value]]]:
    """The ``while`` ops of ``block``, each with the float, statically shaped values defined
    before it that are not computed from constants alone (IREE would fold a copy tied to one
    back into a constant): the block's arguments, then op results, newest last."""
    seen = [a for a in block.arguments if _anchor(a)]
    loops = []
    for op in block.operations:
        op = op.operation
        if op.name == "stablehlo.while":
            loops.append((op, list(seen)))
        seen.extend(r for r in op.results if _anchor(r) and not constant(r))
    return loops


def separate_loop_inits(module: ir.Module) -> int:
    """Give each carry a ``while`` changes an initial value of its own where other ops or
    operands read it too, where it is computed from constants alone (IREE merges equal
    constants: see the module docstring), or where it is an argument (the caller's): a tied
    copy for every such read (a copy reads the value too, so none can keep it). Float values
    only, and only where every loop is ``simple``. Calls in loop bodies are inlined first.
    Returns the number of copies made (and 1 for the inlining)."""
    loops = [op for op in nested_ops(module.operation) if op.name == "stablehlo.while"]
    if not loops:
        return 0
    done = 0
    if any(inner.name == "func.call" for loop in loops for inner in nested_ops(loop)):
        # A loop body's calls inlined (as IREE inlines them): JAX's scans update their stacks
        # in a called function, where neither this rewrite nor ``loops_run_in_place`` sees it.
        run_pipeline(module.operation, "builtin.module(inline{default-pipeline=})")
        done += 1
    if not all(simple(loop) for loop in nested_ops(module.operation) if loop.name == "stablehlo.while"):
        # Not run in place anyway (``loops_run_in_place``), and the copies are not harmless
        # there: a branch in a scan's gradient then failed at run time (``copy_buffer``
        # OUT_OF_RANGE).
        return done
    # Equal values are one value to IREE (its CSE): merged first, so that their reads count.
    run_pipeline(module.operation, "builtin.module(func.func(cse))")
    blocks = [b for op in [module.operation, *nested_ops(module.operation)] for r in op.regions for b in r.blocks
              if any(o.operation.name == "stablehlo.while" for o in b.operations)]
    constant = _FromConstants()
    taken: set[tuple[ir.Value, int]] = set()
    for block in blocks:
        loops = _loops(block, constant)
        # Loops by position: an op's hash changes with its operands, which this rewrites.
        places: dict[ir.Value, list[tuple[int, int]]] = {}
        for k, (loop, _) in enumerate(loops):
            for i in changed_carries(loop):
                v = loop.operands[i]
                if is_float(v) and hlo.is_static(v):
                    places.setdefault(v, []).append((k, i))
        for v, reads in places.items():
            if _own(v, constant):
                continue
            for k, i in reads:
                loop, before = loops[k]
                # Each copy reads an element of an anchor no other copy reads: copies of equal
                # values (a broadcast zero and a dense zero fold into one) would be one again.
                where = next(((a, e) for a in reversed(before) for e in range(math.prod(shape(a)))
                              if (a, e) not in taken), None)
                if where is None:
                    continue
                taken.add(where)
                with ir.InsertionPoint(loop), loop.location:
                    loop.operands[i] = hlo.tie(v, *where)
                done += 1
    return done
