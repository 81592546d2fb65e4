"""Adjoint rules of control flow and calls: ``stablehlo.case`` / ``if`` / ``while``
(the opaque ``stablehlo.custom_call``'s rules are in indexing.py, beside top_k's).

``func.call`` has no rule: the module-level pass inlines every callee, also
calls nested in while/case regions, before differentiating.

Region bodies are differentiated by the same driver (:func:`irgrad.passes.backprop`),
run on a copy of the region placed inside the adjoint op and restricted to
that copy's block. A region reads values defined above it (StableHLO allows
implicit capture); those *captured* values get cotangents too: the driver
passes them to these rules after the op's operands (see ``op_inputs``).

* ``case`` / ``if``: an op of the same kind on the same (saved) index whose
  branch k recomputes branch k and returns its adjoint for every float
  captured value, zeros for the values branch k does not use.
* ``while``: a copy of the loop takes the forward loop's place and records, at every
  iteration, the carries and the non-elementwise values the adjoint reads (``tape[t]``;
  loop-invariant carries and integer counters are not recorded: a counter is
  ``init + t * step``); a reverse loop over ``t = n-1 .. 0`` reads them, recomputes the
  elementwise rest and applies the body's adjoint, carrying the carries' cotangents and
  accumulating the captured values'. With a trip count ``n`` known at compile time (JAX's
  ``fori_loop`` and ``scan``) the tapes are ``n`` long and the forward loop runs once; a
  short loop (``choices.unroll_loop``) is unrolled in place instead and differentiated as
  straight-line code, unless it carries a scalar recurrence (``_scalar_recurrence``: IREE
  3.13's compile time and memory grow exponentially with unrolled chains of one-element
  ops). A loop whose counter is compared with a bound the loop does not change (``i < n``,
  ``n`` an argument; the reverse loops this pass builds) gets its count
  ``max(0, ceil((bound - start) / step))`` computed before it and runs once too, into tapes
  sized ``n`` at run time (``tensor<?x...>``). Any other loop (a convergence test, a
  threshold, an inner loop whose count changes with the outer iteration) runs twice: a first
  copy counts its iterations ``n`` (and gives the forward results), then the recording copy
  runs exactly ``n`` iterations into tapes sized ``n`` at run time, and the reverse loop runs
  ``n`` steps. Memory is what the iterations that ran need; the cost is one more forward
  run, which the counted path does not pay. (A tape that grows as the loop runs would save
  that run, but its growth is a data-dependent concatenation whose own adjoint would need
  the tape's size at every step: gradients of gradients would not go through it.) The same
  rules differentiate the loops they emit, so second derivatives go through every path; a
  loop carrying a tensor of run-time shape (a tape, when a gradient is differentiated again)
  does not record it, as the adjoints of the ops that write tapes never read them.

  What the loops carry is kept small, as IREE 3.13 copies a carried tensor that changes,
  whole, at every iteration: products are recomputed in the reverse step rather than taped
  (``_RECOMPUTED``), and the cotangent of a stacked output (a scan's ``ys``), which each
  reverse step reads one row of and zeroes, is read from outside the loop instead of carried
  (``_consumed_rows``).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from ..ir import hlo
from ..ir.regions import discard, inline_region, inside, nested_ops
from ..transforms.backprop import backprop, backprop_local, captured_values, op_inputs
from ..lowering.choices import loop_adjoint_form, unroll_loop
from ..ir.mlir import elem, ir, is_float, shape, tensor_type
from ..transforms.forward import Replaced, in_place, jvp
from ..transforms.batching import Batcher
from ..transforms.registry import adjoint, batching, missing, tangent


def _in_block(block: ir.Block) -> Callable[[ir.Operation], bool]:
    return lambda o: o.block == block


def _scalar(value: int, element: str = "int32") -> ir.Value:
    return hlo.splat(value, tensor_type([], element))


def isolate(op: ir.Operation) -> None:
    """Pass the values ``op``'s regions capture through one optimization_barrier placed
    before ``op``. IREE 3.13 otherwise fails at run time on some adjoint ``case`` ops
    fed by a forward ``case``, and on the segment loops of a checkpointed loop nested in
    another ("OUT_OF_RANGE ... hal.command_buffer", see
    tests/fixtures/iree313_copy_buffer_bug.mlir); the barrier only fixes an evaluation order."""
    captured = captured_values(op)
    if not captured:
        return
    with ir.InsertionPoint(op), op.location:
        fenced = hlo.optimization_barrier(captured)
    for old, new in zip(captured, fenced):
        for use in list(old.uses):
            if inside(use.owner, op):
                use.owner.operands[use.operand_number] = new


# ----- branches --------------------------------------------------------------------

def _differentiable(captured: Sequence[ir.Value]) -> list[ir.Value]:
    """The captured values that get a cotangent: the float ones, but not constants (MLIR
    hoists a body's constants out of it; summing their cotangents at every iteration was
    six reductions per step of an LSTM cell's reverse loop, for nothing)."""
    def constant(v: ir.Value) -> bool:
        return isinstance(v, ir.OpResult) and v.owner.name == "stablehlo.constant"
    return [v for v in captured if is_float(v) and not constant(v)]


def _branch_adjoints(op: ir.Operation, cts, make) -> list[ir.Value | None]:
    """One cotangent per captured value from an op ``make(types, n)`` that dispatches like ``op``:
    zeros from the branches that do not reach a value, None for a value no branch reaches (a
    threshold a branch compares with), as TensorFlow's cond_v2 gives."""
    captured = captured_values(op)
    wrt = _differentiable(captured)
    while wrt:
        new, blocks = make([v.type for v in wrt], len(op.regions))
        reached = [False] * len(wrt)
        for k, block in enumerate(blocks):
            with ir.InsertionPoint(block):
                outs = inline_region(op, k, [])
                grads = backprop(outs, list(cts), wrt, allow=_in_block(block))
                reached = [r or g is not None for r, g in zip(reached, grads)]
                hlo.return_([g if g is not None else hlo.zeros_like(v) for g, v in zip(grads, wrt)],
                            "stablehlo.return")
        if all(reached):
            break
        discard(new)  # again, for the values some branch reaches only
        wrt = [v for v, r in zip(wrt, reached) if r]
    else:
        return [None] * len(captured)
    isolate(new)
    d_captured = dict(zip(wrt, new.results))
    return [d_captured.get(v) for v in captured]


@adjoint("stablehlo.case")
def _case(op, cts):
    """d captured = case(index){branch k: adjoint of branch k, 0 for values it does not use}"""
    index = op.operands[0]
    return (None, *_branch_adjoints(op, cts, lambda types, n: hlo.case(index, types, n)))


@adjoint("stablehlo.if")
def _if(op, cts):
    """d captured = if(pred){adjoint of the true branch} else {adjoint of the false branch}"""
    pred = op.operands[0]
    return (None, *_branch_adjoints(op, cts, lambda types, n: hlo.if_(pred, types)))


# ----- loops -------------------------------------------------------------------------

_IDENTITIES = ("stablehlo.reshape", "stablehlo.convert", "stablehlo.bitcast_convert")


def _skip_identity(v: ir.Value) -> ir.Value:
    """Look through same-type reshapes/converts (TensorFlow's export wraps loop carries in them)."""
    while isinstance(v, ir.OpResult) and v.owner.name in _IDENTITIES and v.owner.operands[0].type == v.type:
        v = v.owner.operands[0]
    return v


def _constant_int(v: ir.Value) -> int | None:
    """A scalar integer constant's value (None for anything else)."""
    c = _scalar_constant(v)
    return c if isinstance(c, int) else None


def _scalar_constant(v: ir.Value) -> int | np.floating | None:
    """A scalar constant's value: a Python int, or a numpy float of the constant's own type
    (so that a float loop is counted in the arithmetic it runs in); None for anything else."""
    return hlo.scalar_constant(_skip_identity(v))


_SWAPPED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "NE": "NE", "EQ": "EQ"}


def _counter_test(op: ir.Operation) -> tuple[int, ir.Value, str] | None:
    """(k, bound, direction) when the condition is ``carry_k <direction> bound`` (the carry on
    the left), the bound a value the condition reads; None for any other condition."""
    cond = op.regions[0].blocks[0]
    pred = _skip_identity(list(cond.operations)[-1].operation.operands[0])
    cmp = pred.owner if isinstance(pred, ir.OpResult) else None
    if cmp is None or cmp.name != "stablehlo.compare":
        return None
    lhs, rhs = (_skip_identity(v) for v in cmp.operands)
    direction = hlo.read_direction(cmp)
    if direction not in _SWAPPED:
        return None

    def stepped(v: ir.Value) -> bool:
        return isinstance(v, ir.BlockArgument) and v.owner == cond and _step(op, v.arg_number) is not None
    if not stepped(lhs) and stepped(rhs):  # bound < counter
        lhs, rhs, direction = rhs, lhs, _SWAPPED[direction]
    if not stepped(lhs):
        return None
    return lhs.arg_number, rhs, direction


def trip_count(op: ir.Operation) -> int | None:
    """n for a counted loop (carry i starts at a constant, the condition compares i with a
    constant (LT, LE, GT, GE or NE), and the body returns i + constant step); None for a
    loop whose trip count is only known when it runs."""
    test = _counter_test(op)
    if test is None:
        return None
    k, bound, direction = test
    start, bound, step = _scalar_constant(op.operands[k]), _scalar_constant(bound), _step(op, k)
    if None in (start, bound, step) or step == 0:
        return None
    return _count(start, bound, step, direction)


def _invariant(op: ir.Operation, v: ir.Value) -> ir.Value | None:
    """``v`` (read by ``op``'s condition) as a value defined before ``op``: itself when it is
    defined outside the loop, the initial value of a carry the body never changes; None when
    it changes from one iteration to the next."""
    cond = op.regions[0].blocks[0]
    if isinstance(v, ir.BlockArgument):
        if v.owner == cond:
            return op.operands[v.arg_number] if v.arg_number not in _varying(op) else None
        return v  # an argument of a block around the loop
    return None if inside(v.owner.operation, op) else v


def _symbolic_count(op: ir.Operation) -> ir.Value | None:
    """The trip count as a scalar i32 computed before the loop, for an integer counter
    stepped by a constant and compared with a bound the loop does not change (a bound held
    in an argument, the reverse loops this pass builds): ``max(0, ceil((bound - start) /
    step))``. None for any other loop."""
    test = _counter_test(op)
    if test is None:
        return None
    k, bound, direction = test
    step, bound = _step(op, k), _invariant(op, bound)
    counter = op.operands[k]
    if bound is None or not isinstance(step, int) or step == 0 or shape(counter) != () or is_float(counter) \
            or ir.IntegerType(elem(counter)).width == 1:
        return None
    if direction in ("LT", "LE") and step > 0 or direction in ("GT", "GE") and step < 0:
        i64 = ir.IntegerType.get_signless(64)
        start, end = hlo.convert(counter, i64), hlo.convert(bound, i64)
        distance = hlo.subtract(end, start) if step > 0 else hlo.subtract(start, end)
        if direction in ("LE", "GE"):
            distance = hlo.add(distance, hlo.like(1, distance))
        stride = abs(step)
        n = hlo.divide(hlo.add(distance, hlo.like(stride - 1, distance)), hlo.like(stride, distance))
        return hlo.convert(hlo.binary("stablehlo.maximum", n, hlo.like(0, n)), elem(_scalar(0)))
    return None


def _step(op: ir.Operation, k: int) -> int | None:
    """The constant the body adds to carry k at every iteration (None if it does not)."""
    body = op.regions[1].blocks[0]
    nxt = _skip_identity(list(body.operations)[-1].operation.operands[k])
    if not isinstance(nxt, ir.OpResult) or nxt.owner.name != "stablehlo.add":
        return None
    a, b = (_skip_identity(v) for v in nxt.owner.operands)
    counter = body.arguments[k]
    return _scalar_constant(b) if a == counter else _scalar_constant(a) if b == counter else None


MAX_SIMULATED_STEPS = 1 << 20


def _count(start, bound, step, direction: str) -> int | None:
    """Iterations of ``for (i = start; i <direction> bound; i += step)``; None if unbounded."""
    if not all(isinstance(c, int) for c in (start, bound, step)):
        return _simulate(start, bound, step, direction)
    if direction == "NE":
        q, r = divmod(bound - start, step)
        return q if r == 0 and q >= 0 else None
    if direction in ("LT", "LE") and step > 0:  # ceil((end - start) / step)
        return max(0, -((start - bound - (direction == "LE")) // step))
    if direction in ("GT", "GE") and step < 0:  # ceil((start - end) / -step)
        return max(0, -((bound - (direction == "GE") - start) // -step))
    return None


def _simulate(start, bound, step, direction: str) -> int | None:
    """A float counter, counted in its own arithmetic (``0.1`` steps do not land on ``1.0``)."""
    dtype = next(c for c in (start, bound, step) if not isinstance(c, int)).dtype
    i, bound, step = dtype.type(start), dtype.type(bound), dtype.type(step)
    test = {"LT": np.less, "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal,
            "NE": np.not_equal}.get(direction)
    if test is None:
        return None
    with np.errstate(all="ignore"):
        for n in range(MAX_SIMULATED_STEPS + 1):
            if not test(i, bound):
                return n
            i = dtype.type(i + step)
    return None


def _varying(op: ir.Operation) -> list[int]:
    """Carries the body changes (the others keep their initial value in every iteration)."""
    body = op.regions[1].blocks[0]
    returned = list(body.operations)[-1].operation.operands
    return [k for k, v in enumerate(returned) if _skip_identity(v) != body.arguments[k]]


# A trip count: an int when the loop is counted, else the scalar i32 a counting run returned.
Count = int | ir.Value


def _count_value(n: Count) -> ir.Value:
    return n if isinstance(n, ir.Value) else _scalar(n)


def _tape(v: ir.Value, n: Count) -> ir.Value:
    """Zeros for ``n`` rows shaped like ``v``: a static tape, or one sized at run time."""
    if isinstance(n, int):
        return hlo.zeros(tensor_type([n, *shape(v)], elem(v)))
    return hlo.dynamic_splat(0, [n, *shape(v)], elem(v))


def _own_counter(op: ir.Operation) -> int | None:
    """A carry of ``op``'s that counts its iterations: an i32 scalar that starts at a constant
    and steps by 1 (None if there is none)."""
    i32 = elem(_scalar(0))
    return next((k for k, step in _counters(op, _varying(op)).items()
                 if step == 1 and elem(op.operands[k]) == i32 and _constant_int(op.operands[k]) is not None), None)


def _counted(op: ir.Operation, replace: bool = True) -> ir.Value:
    """The iteration count of ``op``, from a copy of it that counts its iterations and (with
    ``replace``) takes its place, its results being the forward's: on a counter of the
    loop's own where it has one (a gradient's counting run, differentiated again), else on
    one more carry (IREE 3.13 fails at run time on loops that carry two equal counters)."""
    own = _own_counter(op)
    extra = [] if own is not None else [_scalar(0)]
    m = len(op.operands)
    loop, cond, body = hlo.while_([*op.operands, *extra])
    with ir.InsertionPoint(cond):
        hlo.return_(inline_region(op, 0, list(cond.arguments)[:m]), "stablehlo.return")
    with ir.InsertionPoint(body):
        args = list(body.arguments)
        outs = inline_region(op, 1, args[:m])
        hlo.return_([*outs, *[hlo.add(args[-1], _scalar(1)) for _ in extra]], "stablehlo.return")
    if replace:
        for old, new in zip(op.results, loop.results):
            old.replace_all_uses_with(new)
    if own is None:
        return loop.results[m]
    return hlo.subtract(loop.results[own], op.operands[own])


def _counters(op: ir.Operation, varying: list[int]) -> dict[int, int]:
    """Integer scalar carries stepped by a constant (k: step): carry k at iteration t is
    ``init + t * step``, recomputed in the reverse loop instead of recorded (a recorded
    index would also make IREE read it back to the host at every step)."""
    out = {}
    for k in varying:
        v = op.operands[k]
        if shape(v) == () and not is_float(v) and ir.IntegerType(elem(v)).width > 1:
            step = _step(op, k)
            if isinstance(step, int):
                out[k] = step
    return out


def _record(op: ir.Operation, keep: list[int], residuals: list[tuple[int, int]], n: Count,
            counters: dict[int, int]) -> ir.Operation:
    """A copy of ``op`` that also stacks carry k (k in ``keep``) as ``tape_k[t] = carry_k(t)``
    and result j of the body's i-th op ((i, j) in ``residuals``) as ``tape[t]``, the tapes
    being its results after ``op``'s. It takes the place of ``op`` (built before it, it
    replaces its results), so the forward loop runs once.
    With a run-time count ``n`` it runs exactly ``n`` iterations (``t < n``). The row ``t`` is
    read off a counter of the loop's own that starts at a constant and steps by 1 where
    there is one, whatever the count: IREE 3.13 keeps such a counter on the host, but a second
    one (the same values) on the device, and reads it back at every step; and with a tape sized
    at run time, a second counter made the gradient of a loop with a ``case`` inside fail at
    every call ("ref is null" in ``hal.buffer.subspan``: tests/fixtures/iree313_two_counters_bug.mlir)."""
    m = len(op.operands)
    body_ops = list(op.regions[1].blocks[0].operations)
    stacked = [op.operands[k] for k in keep] + [body_ops[i].results[j] for i, j in residuals]
    own = _own_counter(op)
    step = [] if own is not None else [_scalar(0)]

    def row(args: Sequence[ir.Value]) -> ir.Value:
        """t: the loop's own counter less its start, else the carry added to count."""
        if own is None:
            return args[-1]
        return hlo.subtract(args[own], _scalar(_constant_int(op.operands[own])))
    loop, cond, body = hlo.while_([*op.operands, *[_tape(v, n) for v in stacked], *step])
    with ir.InsertionPoint(cond):
        if isinstance(n, int):
            hlo.return_(inline_region(op, 0, list(cond.arguments)[:m]), "stablehlo.return")
        else:
            hlo.return_([hlo.compare(row(list(cond.arguments)), n, "LT")], "stablehlo.return")
    with ir.InsertionPoint(body):
        args = list(body.arguments)
        zero = _scalar(0)
        t = row(args)
        copied: list[ir.Operation] = []
        outs = inline_region(op, 1, args[:m], copied)
        values = [args[k] for k in keep] + [copied[i].results[j] for i, j in residuals]
        recorded = [hlo.dynamic_update_slice(tape, hlo.reshape(v, [1, *shape(v)]), [t] + [zero] * len(shape(v)))
                    for tape, v in zip(args[m:m + len(values)], values)]
        hlo.return_([*outs, *recorded, *[hlo.add(t, _scalar(1)) for _ in step]], "stablehlo.return")
    for old, new in zip(op.results, loop.results):
        old.replace_all_uses_with(new)
    return loop


_IMPURE = {f"stablehlo.{name}" for name in (
    "custom_call", "infeed", "outfeed", "send", "recv", "rng_bit_generator", "all_reduce", "all_gather",
    "all_to_all", "collective_permute", "reduce_scatter")}


def _uses_impure(loop: ir.Operation) -> bool:
    return any(o.name in _IMPURE for o in nested_ops(loop))


def _live_carries(loop: ir.Operation) -> list[bool]:
    """Which carries of ``loop`` matter: those its condition reads, those whose results are
    used, and those the body computes them from."""
    cond, body = (loop.regions[i].blocks[0] for i in range(2))
    returned = list(list(body.operations)[-1].operation.operands)
    live = [bool(list(r.uses)) or bool(list(a.uses)) for r, a in zip(loop.results, cond.arguments)]
    stack = [returned[k] for k, alive in enumerate(live) if alive]
    seen: set[ir.Value] = set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if isinstance(v, ir.BlockArgument):
            if v.owner == body and not live[v.arg_number]:
                live[v.arg_number] = True
                stack.append(returned[v.arg_number])
        elif inside(v.owner.operation, loop):
            stack.extend(op_inputs(_top(v.owner, body)))
    return live


def prune(loop: ir.Operation) -> ir.Operation:
    """``loop`` without the carries that do not matter (``_live_carries``): a loop in their
    place that carries the others (``loop`` itself when every carry matters)."""
    live = _live_carries(loop)
    if all(live) or _uses_impure(loop):
        return loop
    return _keeping(loop, live)


def _keeping(loop: ir.Operation, live: Sequence[bool]) -> ir.Operation:
    """A loop in ``loop``'s place that carries carry k where ``live[k]`` (the others' results
    unused, their block arguments read by nothing that is kept)."""
    kept = [k for k, alive in enumerate(live) if alive]
    with ir.InsertionPoint(loop), loop.location:
        new, cond, new_body = hlo.while_([loop.operands[k] for k in kept])
        for index, block in ((0, cond), (1, new_body)):
            args = list(loop.operands)  # placeholders for the dead carries, whose uses die
            for k, arg in zip(kept, block.arguments):
                args[k] = arg
            with ir.InsertionPoint(block):
                outs = inline_region(loop, index, args)
                hlo.return_(outs if index == 0 else [outs[k] for k in kept], "stablehlo.return")
        for o in reversed([o.operation for o in new_body.operations][:-1]):
            if all(not list(r.uses) for r in o.results):
                discard(o)
    for k, result in zip(kept, new.results):
        loop.results[k].replace_all_uses_with(result)
    discard(loop)
    return new


def _top(o: ir.Operation, block: ir.Block) -> ir.Operation:
    """The ancestor of ``o`` (or ``o``) that lies in ``block``."""
    o = o.operation
    while o.block != block:
        o = o.parent.operation
    return o


# Ops the reverse loop recomputes from recorded values rather than record themselves: IREE
# fuses the elementwise ones into the adjoint's own work, and IREE 3.13 copies every tape a
# loop carries, whole, at every iteration (O(n²) for n steps), so even a step's products
# (dot_general: an LSTM's gate pre-activations) cost less recomputed than taped: a scan
# LSTM's gradient went from 6.0x to 4.8x its forward when they stopped being recorded.
_RECOMPUTED = {f"stablehlo.{name}" for name in (
    "add", "subtract", "multiply", "divide", "negate", "abs", "sign", "maximum", "minimum", "select",
    "compare", "convert", "clamp", "exponential", "exponential_minus_one", "log", "log_plus_one", "tanh",
    "logistic", "sqrt", "rsqrt", "sine", "cosine", "and", "or", "not", "reshape", "broadcast_in_dim",
    "transpose", "slice", "dynamic_slice", "iota", "constant", "dot_general")}


def _residuals(body: ir.Block, recomputed: list[ir.Operation]) -> list[tuple[int, int, ir.Value]]:
    """The results of recomputed forward ops to record, (op index, result index, value): those
    the adjoint ops read, where elementwise and shape ops are recomputed from their operands
    (recursively) and the rest (contractions, reductions, regions...) are recorded."""
    where = {r: (i, j) for i, o in enumerate(recomputed) for j, r in enumerate(o.results)}
    own = set(recomputed)
    needed = [r for r in where if any(_top(use.owner, body) not in own for use in r.uses)]
    seen, found = set(), []
    while needed:
        v = needed.pop()
        if v in seen:
            continue
        seen.add(v)
        o = v.owner.operation
        if o.name in _RECOMPUTED:
            needed.extend(x for x in o.operands if x in where)
        else:
            found.append((*where[v], v))
    return found


def _read(block: ir.Block, values: Sequence[ir.Value]) -> list[bool]:
    """Whether each of ``values`` feeds ``block``'s terminator through ops of the block."""
    seen: set[ir.Value] = set()
    stack = list(list(block.operations)[-1].operation.operands)
    while stack:
        v = stack.pop()
        if v not in seen:
            seen.add(v)
            if isinstance(v, ir.OpResult) and v.owner.operation.block == block:
                stack.extend(op_inputs(v.owner.operation))
    return [v in seen for v in values]


def _reverse_loop(op, cts, n: Count, tapes: dict, counters: dict, floats, wrt):
    """The reverse loop over t = n-1 .. 0; returns (loop, its body, the carries it recomputes
    from, the recomputed forward ops, t, whether each of ``wrt`` gets a cotangent)."""
    m = len(op.operands)
    seeds = [cts[k] if cts[k] is not None else hlo.zeros_like(op.operands[k]) for k in floats]
    loop, cond, body = hlo.while_([_scalar(0), *seeds, *[hlo.zeros_like(v) for v in wrt]])
    with ir.InsertionPoint(cond):
        hlo.return_([hlo.compare(cond.arguments[0], _count_value(n), "LT")], "stablehlo.return")
    with ir.InsertionPoint(body):
        j, *state = body.arguments
        ct, acc = state[:len(floats)], state[len(floats):]
        last = _scalar(n - 1) if isinstance(n, int) else hlo.subtract(n, _scalar(1))
        t, zero = hlo.subtract(last, j), _scalar(0)

        def carry(k: int, v: ir.Value) -> ir.Value:
            if k in tapes:
                return hlo.reshape(hlo.dynamic_slice(tapes[k], [t] + [zero] * len(shape(v)), [1, *shape(v)]), shape(v))
            if k in counters:
                step = hlo.convert(t, elem(v))
                return hlo.add(v, hlo.multiply(step, hlo.splat(counters[k], step.type)))
            return hlo.identity(v)
        carries = [carry(k, v) for k, v in enumerate(op.operands)]
        recomputed: list[ir.Operation] = []
        outs = inline_region(op, 1, carries, recomputed)
        seed_of = dict(zip(floats, ct))
        grads = backprop(outs, [seed_of.get(k) for k in range(m)], [carries[k] for k in floats] + wrt,
                         allow=_in_block(body))
        connected = _connected(body, ct, grads, [cts[k] is not None for k in floats])
        grads = [g if g is not None else hlo.zeros_like(v) for g, v in zip(grads, ct + acc)]
        new_acc = [hlo.accumulate(a, g) if c else a
                   for a, g, c in zip(acc, grads[len(floats):], connected[len(floats):])]
        hlo.return_([hlo.add(j, _scalar(1)), *grads[:len(floats)], *new_acc], "stablehlo.return")
    return loop, body, carries, recomputed, t, connected


def _connected(body: ir.Block, ct: Sequence[ir.Value], grads: Sequence[ir.Value | None],
               seeded: Sequence[bool]) -> list[bool]:
    """Which of a reverse step's ``grads`` (the carries' cotangents, then the captured
    values') can be nonzero: those that read the cotangent of a carry that can. A carry's
    cotangent starts nonzero where it is ``seeded``; the step being linear in the carries'
    cotangents, one computed from zero cotangents only (an unchanged carry's own, a
    threshold read by a comparison only) stays zero: it is not accumulated, and the adjoint
    gives zeros (``_while``)."""
    reach: dict[ir.Value, int] = {a: 1 << i for i, a in enumerate(ct)}
    for o in body.operations:
        o = o.operation
        bits = 0
        for v in op_inputs(o):
            bits |= reach.get(v, 0)
        for r in o.results:
            reach[r] = bits
    reads = [reach.get(g, 0) if g is not None else 0 for g in grads]
    live = sum(1 << i for i, s in enumerate(seeded) if s)
    while True:
        grown = live | sum(1 << i for i in range(len(ct)) if reads[i] & live)
        if grown == live:
            break
        live = grown
    return [bool(live >> i & 1) for i in range(len(ct))] + [bool(r & live) for r in reads[len(ct):]]


def _is_row(index: ir.Value, t: ir.Value) -> bool:
    """Whether ``index`` is ``t`` (also as ``0 + t * 1``, a counter recomputed from t)."""
    while index != t and isinstance(index, ir.OpResult) and index.owner.name in ("stablehlo.add", "stablehlo.multiply"):
        a, b = index.owner.operands
        unit = 0 if index.owner.name == "stablehlo.add" else 1
        index = b if _constant_int(a) == unit else a if _constant_int(b) == unit else None
        if index is None:
            return False
    return index == t


def _row_of(v: ir.Value, t: ir.Value) -> bool:
    """Whether ``v`` is ``dynamic_slice`` or ``dynamic_update_slice`` at ``[t, 0, ...]``
    of one row."""
    op = v.owner.operation
    first = 1 if op.name == "stablehlo.dynamic_slice" else 2
    row, *rest = list(op.operands)[first:]
    return _is_row(row, t) and all(_constant_int(i) == 0 for i in rest) and shape(op.results[0] if first == 1
                                                                                  else op.operands[1])[0] == 1


def _consumed_rows(loop: ir.Operation, t: ir.Value, n: Count) -> list[ir.Value]:
    """The reverse ``loop``'s results, without the carries whose step reads row ``t`` and
    zeroes it (the cotangent of a scan's stacked output, through the adjoint of the
    ``dynamic_update_slice`` that wrote the row): every step reads a row no step before it
    zeroed, so the steps read the carry's initial value instead, and the rows are zeroed
    once after the loop (rows 0..n-1). IREE 3.13 copies a carried tensor that changes,
    whole, at every iteration: for a scan's output that was O(n²)."""
    if not isinstance(n, int):
        return list(loop.results)
    cond, body = (loop.regions[i].blocks[0] for i in range(2))
    returned = list(list(body.operations)[-1].operation.operands)
    outgoing = {}
    for p, arg in enumerate(body.arguments):
        new = returned[p]
        if list(cond.arguments[p].uses) or not (isinstance(new, ir.OpResult) and
                                                new.owner.name == "stablehlo.dynamic_update_slice"):
            continue
        write = new.owner.operation
        reads = [u.owner for u in arg.uses if u.owner != write]
        if write.operands[0] != arg or not hlo.is_zero_constant(write.operands[1]) or not _row_of(new, t) \
                or len(list(new.uses)) != 1 or shape(arg)[0] < n \
                or not all(r.name == "stablehlo.dynamic_slice" and _row_of(r.results[0], t) for r in reads):
            continue
        init = loop.operands[p]
        for r in reads:
            r.operands[0] = init
        new.replace_all_uses_with(arg)
        discard(write)
        with ir.InsertionPoint(loop), loop.location:
            rows = hlo.zeros(tensor_type([n, *shape(init)[1:]], elem(init)))
            outgoing[p] = hlo.dynamic_update_slice(init, rows, [_scalar(0)] * len(shape(init)))
    if not outgoing:
        return list(loop.results)
    m = len(loop.operands)
    kept = [k for k in range(m) if k not in outgoing]
    new = _keeping(loop, [k not in outgoing for k in range(m)])
    return [outgoing[k] if k in outgoing else new.results[kept.index(k)] for k in range(m)]


def _size(op: ir.Operation) -> tuple[int, int]:
    """(ops, while loops) in the body of loop ``op``, those nested in its ops' regions included."""
    body = [o for top in op.regions[1].blocks[0].operations for o in (top.operation, *nested_ops(top.operation))]
    return len(body), sum(o.name == "stablehlo.while" for o in body)


def _scalar_recurrence(op: ir.Operation) -> bool:
    """Whether a float carry of one element changes from one iteration to the next (a scalar
    recurrence: ``y = y * 1.3 + x * x``), which ``choices.unroll_loop`` never unrolls."""
    varying = _varying(op)
    counters = _counters(op, varying)
    return any(k not in counters and is_float(op.operands[k]) and hlo.is_static(op.operands[k])
               and math.prod(shape(op.operands[k])) == 1 for k in varying)


def _unrolled(op: ir.Operation, cts, n: int, captured: list[ir.Value]) -> list:
    """A short loop: n copies of the body replace it, and their adjoint is straight-line code."""
    return _local_adjoint(op, inline_copies(op, n), cts, captured)


def inline_copies(op: ir.Operation, n: int) -> list[ir.Value]:
    """``n`` copies of loop ``op``'s body in its place, each reading the carries the one before
    returns; ``op``'s results replaced by the last ones (returned). ``op`` itself stays."""
    with ir.InsertionPoint(op):
        carries = list(op.operands)
        for _ in range(n):
            carries = inline_region(op, 1, carries)
    for old, new in zip(op.results, carries):
        old.replace_all_uses_with(new)
    return carries


def unroll_short_loops(module: ir.Operation, keep: Callable[[ir.Operation], bool]) -> int:
    """Replace every counted ``while`` in ``module`` that ``choices.unroll_loop`` would unroll and
    ``keep`` does not keep by copies of its body; returns how many."""
    loops = [o for o in nested_ops(module) if o.name == "stablehlo.while"]
    done = 0
    for loop in loops:
        n = trip_count(loop)
        if n is None or keep(loop) or not unroll_loop(n, *_size(loop), scalar_recurrence=_scalar_recurrence(loop)):
            continue
        with loop.location:
            inline_copies(loop, n)
        discard(loop)
        done += 1
    return done


def _local_adjoint(op: ir.Operation, results: Sequence[ir.Value], cts, captured: list[ir.Value]) -> list:
    """The cotangents of ``op``'s operands and ``captured`` values through code built in its
    place that computes ``results`` (its own results' replacements)."""
    # A value can be both an operand and captured (an outer carry that initialises an inner
    # loop and is read by its body): its whole cotangent goes to its first position only.
    inputs = [*op.operands, *captured]
    unique = list(dict.fromkeys(inputs))
    total = dict(zip(unique, backprop_local(list(results), list(cts), unique)))
    return [total.pop(v) if v in total else None for v in inputs]


# ----- checkpoints ---------------------------------------------------------------------

Checkpoints = int | str | None
_CHECKPOINTS: ContextVar[Checkpoints] = ContextVar("loop_checkpoints", default=None)
# The loops a checkpointed loop is split into: the outer loop over segments, whose reverse
# pass records one snapshot per segment (never unrolled), and the segments (may be).
SNAPSHOTS, SEGMENT = "irgrad.snapshots", "irgrad.segment"


def check_checkpoints(k: Checkpoints) -> Checkpoints:
    """``k`` if it is a valid ``loop_checkpoints`` (None, ``"sqrt"`` or an int ≥ 1), else ValueError."""
    if k is None or k == "sqrt" or isinstance(k, int) and not isinstance(k, bool) and k >= 1:
        return k
    raise ValueError(f"loop_checkpoints must be None, 'sqrt' or a positive int, got {k!r}")


@contextmanager
def loop_checkpoints(k: Checkpoints) -> Iterator[None]:
    """While active, the ``while`` adjoint keeps ``k`` snapshots of a loop's carries (``"sqrt"``:
    about √n for n iterations) instead of recording every iteration (None: record all)."""
    token = _CHECKPOINTS.set(check_checkpoints(k))
    try:
        yield
    finally:
        _CHECKPOINTS.reset(token)


def checkpoints_in_force() -> Checkpoints:
    """The ``loop_checkpoints`` in force (``loop_checkpoints``' context; None outside one)."""
    return _CHECKPOINTS.get()


def _segment_length(n: Count, k: int | str) -> Count:
    """Iterations per segment for ``k`` snapshots of ``n`` iterations: ``ceil(n / k)``, or
    ``ceil(√n)`` for ``"sqrt"`` (at least 1)."""
    if isinstance(n, int):
        return max(1, math.isqrt(n - 1) + 1 if k == "sqrt" else -(-n // k))
    if k == "sqrt":  # float32 holds every count up to 2^24 exactly; sqrt is correctly rounded
        f32 = ir.F32Type.get()
        root = hlo.unary("stablehlo.ceil", hlo.unary("stablehlo.sqrt", hlo.convert(n, f32)))
        c = hlo.convert(root, elem(n))
    else:
        c = hlo.divide(hlo.add(n, _scalar(k - 1)), _scalar(k))
    return hlo.binary("stablehlo.maximum", c, _scalar(1))


def _repeat(op: ir.Operation, carries: Sequence[ir.Value], count: Count) -> list[ir.Value]:
    """``count`` iterations of ``op``'s body from ``carries``, as a loop of its own."""
    if count == 0:
        return list(carries)
    m = len(carries)
    loop, cond, body = hlo.while_([*carries, _scalar(0)])
    loop.attributes[SEGMENT] = ir.UnitAttr.get()
    with ir.InsertionPoint(cond):
        hlo.return_([hlo.compare(cond.arguments[m], _count_value(count), "LT")], "stablehlo.return")
    with ir.InsertionPoint(body):
        args = list(body.arguments)
        hlo.return_([*_invariant_kept(op, args, inline_region(op, 1, args[:m])), hlo.add(args[m], _scalar(1))],
                    "stablehlo.return")
    return list(loop.results)[:m]


def _invariant_kept(op: ir.Operation, args: Sequence[ir.Value], outs: Sequence[ir.Value]) -> list[ir.Value]:
    """``outs`` with the carries ``op``'s body does not change returned as the block's own
    ``args``, so a loop built of ``op``'s body says so too (and its adjoint tapes them not)."""
    varying = set(_varying(op))
    return [out if k in varying else args[k] for k, out in enumerate(outs)]


def _checkpointed(op: ir.Operation, cts, n: Count, captured: list[ir.Value], k: int | str) -> list:
    """The loop as ``S`` segments of ``C`` iterations (an outer loop whose body is an inner
    loop) and a tail of ``R = n - S·C``, differentiated as such: the outer loop records its
    carries once per segment (the snapshots) and its reverse loop recomputes each segment
    from its snapshot, recording that segment only, before running the segment's reverse."""
    m = len(op.operands)
    with ir.InsertionPoint(op), op.location:
        c = _segment_length(n, k)
        if isinstance(n, int):
            segments, rest = divmod(n, c)
        else:
            segments = hlo.divide(n, c)
            rest = hlo.subtract(n, hlo.multiply(segments, c))
        outer, cond, body = hlo.while_([*op.operands, _scalar(0)])
        outer.attributes[SNAPSHOTS] = ir.UnitAttr.get()
        with ir.InsertionPoint(cond):
            hlo.return_([hlo.compare(cond.arguments[m], _count_value(segments), "LT")], "stablehlo.return")
        with ir.InsertionPoint(body):
            args = list(body.arguments)
            hlo.return_([*_invariant_kept(op, args, _repeat(op, args[:m], c)), hlo.add(args[m], _scalar(1))],
                        "stablehlo.return")
        isolate(outer)
        carries = _repeat(op, list(outer.results)[:m], rest)
    for old, new in zip(op.results, carries):
        old.replace_all_uses_with(new)
    return _local_adjoint(op, carries, cts, captured)


def _checkpoints(op: ir.Operation, n: int | None) -> int | str | None:
    """The snapshots to keep of ``op`` (None: record every iteration): the ``loop_checkpoints``
    in force, unless ``op`` is a segment already or keeping them would not save anything."""
    k = _CHECKPOINTS.get()
    if k is None or SEGMENT in op.attributes or SNAPSHOTS in op.attributes:
        return None
    if n is not None and (_segment_length(n, k) in (1, n)):
        return None
    return k


@adjoint("stablehlo.while")
def _while(op, cts):
    """for t = n-1 .. 0: (d carry, d captured += ...) = body adjoint at the carries of iteration t;
    zeros for a float carry or captured value nothing reaches"""
    inputs = [*op.operands, *captured_values(op)]
    return [g if g is not None or not is_float(v) or not hlo.is_static(v) else hlo.zeros_like(v)
            for g, v in zip(_while_adjoint(op, cts), inputs)]


def _while_adjoint(op, cts) -> Sequence[ir.Value | None]:
    """The while adjoint, None where nothing reaches a value. ``_while`` gives zeros there, as
    TensorFlow does: its while_v2 makes the tensors a loop reads (a bound its condition compares
    with, a value its body ignores) loop inputs, and the gradient of a loop input is a tensor,
    zeros where the outputs do not depend on it (where the loop is on the gradient's path at
    all). Not for values of run-time shape (the tapes of irgrad's own loops, when a gradient is
    differentiated again): zeros of such a shape read its size where the adjoint is built, a
    value the adjoint of an enclosing loop would record; those keep None."""
    n = trip_count(op)
    m = len(op.operands)
    captured = captured_values(op)
    floats = [k for k in range(m) if is_float(op.operands[k])]
    wrt = _differentiable(captured)
    counted = n if SNAPSHOTS not in op.attributes else None  # a checkpointed loop's snapshots: looped
    form = loop_adjoint_form(counted, *_size(op), scalar_recurrence=_scalar_recurrence(op))
    if n == 0:
        return (*[cts[k] if k in floats else None for k in range(m)], *[None] * len(captured))
    if form == "unrolled" and counted is not None:
        return _unrolled(op, cts, counted, captured)
    checkpoints = _checkpoints(op, n)
    if n is None:
        # A trip count known only when the loop runs: computed before it from a bound the loop
        # does not change, or else counted by a first run that also gives the forward results
        # (checkpointed, the segments give them); the tapes are that long (see the module doc).
        with ir.InsertionPoint(op), op.location:
            n = _symbolic_count(op)
            if n is None:
                n = _counted(op, replace=checkpoints is None)
    if checkpoints is not None:
        return _checkpointed(op, cts, n, captured, checkpoints)
    varying = _varying(op)
    counters = _counters(op, varying)
    # A carry whose shape is only known at run time (a tape of a data-dependent loop, when a
    # gradient is differentiated again) cannot be stacked; the adjoints of the ops that write
    # tapes (dynamic_update_slice) are linear and never read it.
    unstacked = [k for k in varying if not hlo.is_static(op.operands[k])]
    # Build the reverse loop on placeholder tapes, then record only the carries it reads.
    tapes = {k: _tape(op.operands[k], n) for k in varying if k not in counters and k not in unstacked}
    loop, body, carries, recomputed, t, connected = _reverse_loop(op, cts, n, tapes, counters, floats, wrt)
    for k, read in zip(unstacked, _read(body, [carries[k] for k in unstacked])):
        if read:
            raise missing(op, f" (its adjoint reads loop carry #{k}, of run-time shape {op.operands[k].type}, "
                              "at every iteration: such a carry cannot be recorded)")
    # The forward values the adjoint reads are recorded too (JAX's residuals) where recomputing
    # them is not elementwise work (see _RECOMPUTED): the reverse body reads them from tapes
    # and the recomputation it no longer needs is dead.
    residuals = _residuals(body, recomputed)
    placeholders = []
    with ir.InsertionPoint(recomputed[0] if recomputed else list(body.operations)[-1]):
        for _, _, r in residuals:
            tape = _tape(r, n)
            placeholders.append(tape)
            read = hlo.reshape(hlo.dynamic_slice(tape, [t] + [_scalar(0)] * len(shape(r)), [1, *shape(r)]), shape(r))
            for use in list(r.uses):
                use.owner.operands[use.operand_number] = read
    keep = [k for k, read in zip(tapes, _read(body, [carries[k] for k in tapes])) if read]
    with ir.InsertionPoint(op), op.location:
        recording = _record(op, keep, [(i, j) for i, j, _ in residuals], n, counters)
    for placeholder, tape in zip([tapes[k] for k in keep] + placeholders, list(recording.results)[m:]):
        placeholder.replace_all_uses_with(tape)
    # Recomputed in a reverse loop (a segment of a checkpointed loop, an inner loop), the
    # recording need not produce the carries only the forward reads (a scan's output):
    # carrying them would make the enclosing loop record them too.
    prune(recording)
    results = _consumed_rows(loop, t, n)[1:]
    d_carry = {k: r for k, r, c in zip(floats, results[:len(floats)], connected) if c}
    d_captured = {v: r for v, r, c in zip(wrt, results[len(floats):], connected[len(floats):]) if c}
    return (*[d_carry.get(k) for k in range(m)], *[d_captured.get(v) for v in captured])


# ----- tangents ------------------------------------------------------------------------
#
# A region op's tangent is the same region op carrying the tangents too: each region is
# copied into the new op and differentiated there by the forward driver, with the tangents
# of the values it captures read from above. In place (the module pass) the new op takes
# the old one's place, so the forward work runs once.

def _region_tangents(op: ir.Operation, k: int, args: Sequence[ir.Value], targs: Sequence,
                     t_captured: dict) -> tuple[list[ir.Value], list]:
    """Copy region ``k`` of ``op`` here with ``args``; (its results, their tangents)."""
    outs = inline_region(op, k, args)
    seeds = {**t_captured, **{a: t for a, t in zip(args, targs) if t is not None}}
    block = ir.InsertionPoint.current.block
    return outs, jvp(outs, list(seeds), list(seeds.values()), in_place=True, allow=_in_block(block))


def _replacing(op: ir.Operation, new: ir.Operation, floats: list[int]) -> Replaced:
    m = len(op.results)
    results = list(new.results)
    tangents = dict(zip(floats, results[m:]))
    if in_place():
        for old, value in zip(op.results, results[:m]):
            old.replace_all_uses_with(value)
    return Replaced(results[:m], [tangents.get(k) for k in range(m)])


@tangent("stablehlo.while")
def _while_tangent(op, ts):
    """while carrying (carries, their tangents): the body's tangent step in the same loop"""
    m = len(op.operands)
    captured = dict(zip(op_inputs(op)[m:], ts[m:]))
    t_captured = {v: t for v, t in captured.items() if t is not None}
    floats = [k for k in range(m) if is_float(op.operands[k])]
    init = [*op.operands, *[ts[k] if ts[k] is not None else hlo.zeros_like(op.operands[k]) for k in floats]]
    loop, cond, body = hlo.while_(init)
    with ir.InsertionPoint(cond):
        hlo.return_(inline_region(op, 0, list(cond.arguments)[:m]), "stablehlo.return")
    with ir.InsertionPoint(body):
        args = list(body.arguments)
        targs = dict(zip(floats, args[m:]))
        outs, touts = _region_tangents(op, 1, args[:m], [targs.get(k) for k in range(m)], t_captured)
        touts = [touts[k] if touts[k] is not None else hlo.zeros_like(outs[k]) for k in floats]
        hlo.return_([*outs, *touts], "stablehlo.return")
    return _replacing(op, loop, floats)


def _branch_tangents(op, ts, make) -> Replaced:
    n = len(op.operands)
    t_captured = {v: t for v, t in zip(op_inputs(op)[n:], ts[n:]) if t is not None}
    floats = [k for k, r in enumerate(op.results) if is_float(r)]
    types = [r.type for r in op.results] + [op.results[k].type for k in floats]
    new, blocks = make(types, len(op.regions))
    for k, block in enumerate(blocks):
        with ir.InsertionPoint(block):
            outs, touts = _region_tangents(op, k, [], [], t_captured)
            touts = [touts[j] if touts[j] is not None else hlo.zeros_like(outs[j]) for j in floats]
            hlo.return_([*outs, *touts], "stablehlo.return")
    isolate(new)
    return _replacing(op, new, floats)


@tangent("stablehlo.case")
def _case_tangent(op, ts):
    """case(index){branch k and its tangent}"""
    index = op.operands[0]
    return _branch_tangents(op, ts, lambda types, n: hlo.case(index, types, n))


@tangent("stablehlo.if")
def _if_tangent(op, ts):
    """if(pred){true branch and its tangent} else {false branch and its tangent}"""
    pred = op.operands[0]
    return _branch_tangents(op, ts, lambda types, n: hlo.if_(pred, types))


# ----- batching ------------------------------------------------------------------------------

def _select_batched(pred: ir.Value, on_true: ir.Value, on_false: ir.Value) -> ir.Value:
    """``select`` by a ``[size]`` predicate over batched values of any rank."""
    s = shape(on_true)
    if len(s) > 1:
        pred = hlo.broadcast_in_dim(pred, s, [0])
    return hlo.select(pred, on_true, on_false)


@batching("stablehlo.while")
def _while_batched(b: Batcher, op):
    """batched carries where the body makes them so; a batched condition runs until every
    element is done and freezes each element's state once its own condition fails"""
    cond, body = op.regions[0].blocks[0], op.regions[1].blocks[0]
    init = b.operands(op)
    flags = [v in b.batched for v in init]
    while True:  # which carries the body batches: a fixpoint
        (batched_cond,), outs = b.taint([cond], [flags])[0], b.taint([body], [flags])[0]
        new = [f or o for f, o in zip(flags, outs)]
        if batched_cond:
            new = [True] * len(flags)
        if new == flags:
            break
        flags = new
    init = [b.lift(v) if f else v for v, f in zip(init, flags)]
    loop, new_cond, new_body = hlo.while_(init)

    def args(block):
        return [b.mark([a])[0] if f else a for a, f in zip(block.arguments, flags)]

    with ir.InsertionPoint(new_cond):
        (pred,) = b.run(cond, args(new_cond))
        if batched_cond:
            pred = hlo.reduce(pred, [0], "or")
        hlo.return_([pred], "stablehlo.return")
    with ir.InsertionPoint(new_body):
        state = args(new_body)
        if batched_cond:
            (active,) = b.run(cond, state)
        outs = [b.lift(v) if f else v for v, f in zip(b.run(body, state), flags)]
        if batched_cond:
            outs = [_select_batched(active, v, s) for v, s in zip(outs, state)]
        hlo.return_(outs, "stablehlo.return")
    return [b.mark([r])[0] if f else r for r, f in zip(loop.results, flags)]


def _branches(b: Batcher, op, make) -> list[ir.Value]:
    blocks = [region.blocks[0] for region in op.regions]
    flags = [any(col) for col in zip(*b.taint(blocks, [[]] * len(blocks)))]
    new, new_blocks = make([b.type(r) if f else r.type for r, f in zip(op.results, flags)])
    for block, new_block in zip(blocks, new_blocks):
        with ir.InsertionPoint(new_block):
            outs = b.run(block, [])
            hlo.return_([b.lift(v) if f else v for v, f in zip(outs, flags)], "stablehlo.return")
    return [b.mark([r])[0] if f else r for r, f in zip(new.results, flags)]


def _every_branch(b: Batcher, op, index: ir.Value) -> list[ir.Value]:
    """Each branch run here; result k from branch ``index`` (the last one when out of range)."""
    outs = [[b.lift(v) for v in b.run(region.blocks[0], [])] for region in op.regions]
    results = outs[-1]
    for k in range(len(outs) - 2, -1, -1):
        hit = hlo.compare(index, hlo.splat(k, index.type), "EQ")
        results = [_select_batched(hit, v, r) for v, r in zip(outs[k], results)]
    return b.mark(results)


@batching("stablehlo.case")
def _case_batched(b: Batcher, op):
    """shared index: the same case over batched branches; batched index: every branch, then select"""
    index = b.get(op.operands[0])
    if index in b.batched:
        return _every_branch(b, op, index)
    return _branches(b, op, lambda types: hlo.case(index, types, len(op.regions)))


@batching("stablehlo.if")
def _if_batched(b: Batcher, op):
    """shared predicate: the same if; batched: both branches, then select"""
    pred = b.get(op.operands[0])
    if pred in b.batched:
        i32 = ir.IntegerType.get_signless(32)
        index = hlo.select(pred, hlo.splat(0, tensor_type([b.size], i32)), hlo.splat(1, tensor_type([b.size], i32)))
        return _every_branch(b, op, index)
    return _branches(b, op, lambda types: hlo.if_(pred, types))
