"""A function's peak memory, estimated from its StableHLO, and the rematerialization that
fits a gradient under a memory limit (``passes.differentiate(..., memory_limit=...)``).

The estimate is liveness in program order, over the function as IREE is given it (after
``lowering.legalize``: a convolution's patches are values of their own), with the buffers IREE allocates: the
arguments (the caller holds them for the whole call) and the results (IREE allocates their
buffers when the call starts), then each op's results from the op that makes them to their last
use (a use inside a region counts at the op that holds the region); at each op, the live values,
its results and the peak of its regions. A reshape is a view of its operand, a broadcast read
only by elementwise ops is computed inside them, and a loop's result for a carry it passes on
as it is (or, run in place, updates in place from a value dying there) is that carry's buffer:
none of those makes a buffer. Measured against IREE's host program (its allocations at their
peak): the 16×1024 MLP's gradient 224.1 MiB estimated, 224.1 allocated; Keras' MobileNetV2 at
batch 8, 24.0 and 24.1; the scan MLP's 96.3 against 97 measured (RSS). A ``while`` body holds its carries once
more (IREE gives an iteration's carries buffers of their own: measured, the scan benchmark's
√n-checkpointed gradient, loops in loops, peaked at 664 MiB against 185 without), but for
those a loop IREE runs in place passes on unchanged or updates in place (a stack's row:
``lowering/loop_inits.py``). An update
that writes into a value dying at it (``dynamic_update_slice``, ``scatter``: a tape's row)
makes no new buffer. Constants count nothing: IREE folds splats into the kernels and keeps
dense ones in the artifact's read-only data. A dimension known only at run time counts as 1
(``Estimate.dynamic``: the figure is then a lower bound). In a gradient ``@F_grad`` the
*tape* is the forward values its backward reads: those live where the backward starts (its
first op named ``F_grad/...``, as ``transforms.backprop`` names them). What the estimate does
not see: IREE's own buffers (a kernel's workspace, an execution region's allocations).

Every gradient (``@F_grad``, ``@F_vjp``, ``@F_train_step``), limit or not, recomputes its cheap
forward values instead of keeping them (``recompute_elementwise``): an elementwise chain (a batch
norm's centring and scale, an activation) is copied into the backward from the values it reads,
where those are on the tape anyway or small, as XLA's fusions do. Measured (``bench_memory.py``,
MiB at the first call): Keras' MobileNetV2 at batch 8, 69 → 27; the ResNet block at batch 256,
with the weight gradient's tap chain ordered by ties instead of barriers, 140 → 114.

Every gradient also has the backward's reductions of large values hoisted next to those values
(``hoist_reductions``, nothing recomputed): a bias's or a batch norm's sums free the cotangent or
activation they reduce where it is made. Measured (IREE's allocations, host program): Keras'
MobileNetV2 at batch 64, 38.7 → 21.6 MiB; the ResNet block at batch 64, 22.6 → 21.1.

Fitting (``fit``) tries, in order: the gradient as it is, then with its loops checkpointed (where
that lowers the estimate), each with its reductions hoisted; then rematerialization.

Rematerialization rewrites a built gradient: the forward ops are split into segments, only
the values a segment hands to a later one (its checkpoints) stay live into the backward,
and the other values the backward reads are computed again, segment by segment, just before
the first backward op that reads them, from the checkpoints and the arguments. Where no such
split fits, only every k-th segment's checkpoints stay (k = 2, 4, ... up to all segments:
nothing but the arguments), and a segment is recomputed from the last kept ones through the
segments between: the 16×1024 MLP's gradient gets down to 112.1 MiB (80 of them its results;
224 without a limit) only so, running the whole forward again for every layer. Each
recomputed op that reads no other copy gets a zero added to its smallest input, ``c`` a scalar
of the cotangent the backward has reached there (``hlo.tie``: ``-0 · is_finite(c)``), so that
neither CSE nor IREE merges the copies back into the forward or runs them early. (A tie is a
copy of its input: tying every input held a recomputed MLP's every weight at once, 60 MiB.)
Not a ``stablehlo.optimization_barrier``: IREE splits its execution regions at each barrier
(each region then gets allocations of its own), and the measured peak grew instead (a
16384×128 8-layer tanh MLP's gradient, measured as ``benchmarks/bench_memory.py`` does: 92 MiB
kept, 124 MiB recomputed behind barriers, 61 MiB with this tie).
"""
from __future__ import annotations

import contextlib
import contextvars
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from .ir import hlo
from .ir.regions import nested_ops
from .lowering.dynamic_shapes import ELEMENTWISE
from .lowering.legalize import legalize_text
from .lowering.loop_inits import IN_PLACE, simple, updated_in_place
from .rules.control_flow import checkpoints_in_force
from .transforms.backprop import captured_values
from .ir.mlir import elem, ir, is_float, loc_name, parse_module, run_pipeline, shape

UNITS = {"": 1, "B": 1, "K": 2 ** 10, "KB": 2 ** 10, "KIB": 2 ** 10, "M": 2 ** 20, "MB": 2 ** 20, "MIB": 2 ** 20,
         "G": 2 ** 30, "GB": 2 ** 30, "GIB": 2 ** 30}
# Ops whose results are not recomputed but kept: loops and branches (running them again costs
# as much as the forward), and the ops a barrier guards already.
_KEPT_OPS = {"stablehlo.while", "stablehlo.case", "stablehlo.if", "stablehlo.optimization_barrier",
             "stablehlo.custom_call", "stablehlo.rng", "stablehlo.rng_bit_generator", "func.call"}


_FUSING = ELEMENTWISE - {"stablehlo.optimization_barrier"}


class MemoryLimitError(ValueError):
    """``memory_limit`` is below the smallest peak rematerialization reaches; the message (one
    line) gives the estimate and the smallest limit that can be met."""

    def __init__(self, message: str, estimate: int, smallest: int):
        super().__init__(message)
        self.estimate, self.smallest = estimate, smallest


def parse_size(text: str | int) -> int:
    """``"64M"``, ``"1.5G"``, ``"4096"`` or an int: a number of bytes (K, M, G are powers of 1024);
    ValueError otherwise."""
    if isinstance(text, int) and not isinstance(text, bool):
        size = text
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
        unit = match.group(2).upper() if match else None
        if match is None or unit not in UNITS:
            raise ValueError(f"bad memory size {text!r}: expected a number of bytes with an optional unit, "
                             "e.g. 64M, 1.5G, 512K")
        size = int(float(match.group(1)) * UNITS[unit])
    if size <= 0:
        raise ValueError(f"bad memory size {text!r}: must be positive")
    return size


def human(size: int, up: bool = False) -> str:
    """``size`` bytes as ``"64.0 MiB"`` (``up``: rounded up, for a bound that must hold)."""
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if size >= scale:
            return f"{math.ceil(size * 10 / scale) / 10 if up else size / scale:.1f} {unit}"
    return f"{size} B"


@dataclass(frozen=True)
class Estimate:
    """The estimated peak of one function, in bytes: ``peak``, what the call allocates at
    its peak over its ``arguments`` (which the caller holds: ``peak + arguments`` in all, and
    what ``memory_limit`` bounds is ``peak``); ``results``; ``tape`` (a gradient: the forward
    values its backward reads; 0 otherwise);
    ``largest`` (the largest single value, ``largest_op`` the op making it) and ``at``, the op
    where the peak is reached; ``loops``: the largest state a ``while`` carries (its taped
    iterations included). ``dynamic``: a run-time dimension counted as 1 (a lower bound)."""
    function: str
    peak: int
    arguments: int
    results: int
    tape: int
    largest: int
    largest_op: str
    at: str
    loops: int
    dynamic: bool

    def line(self) -> str:
        """One line: ``@f_grad: peak ~ 12.0 MiB (arguments 1.0 MiB, tape 8.0 MiB, largest ...)``."""
        parts = [f"results {human(self.results)}"]
        if self.tape:
            parts.append(f"tape {human(self.tape)}")
        if self.loops:
            parts.append(f"loop state {human(self.loops)}")
        parts.append(f"largest value {human(self.largest)} ({self.largest_op})")
        bound = " at least" if self.dynamic else ""
        return (f"@{self.function}: estimated peak{bound} {human(self.peak)} over its arguments' "
                f"{human(self.arguments)} ({', '.join(parts)}; peak at {self.at})")

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _nbytes(t: ir.Type) -> tuple[int, bool]:
    """Bytes of a value of type ``t`` (tensors only; tokens and tuples: 0), and whether a
    dimension is dynamic (counted as 1)."""
    t = t.maybe_downcast()
    if not isinstance(t, ir.RankedTensorType):
        return 0, False
    dims = list(t.shape)
    dynamic = any(d == hlo.DYNAMIC for d in dims)
    n = math.prod(1 if d == hlo.DYNAMIC else d for d in dims)
    e = elem(t).maybe_downcast()
    scale = 1
    if isinstance(e, ir.ComplexType):
        e, scale = e.element_type.maybe_downcast(), 2
    width = getattr(e, "width", 32)
    return n * scale * max(1, -(-width // 8)), dynamic


def _where(op: ir.Operation) -> str:
    name = loc_name(op)
    short = op.name.split(".", 1)[-1]
    return f"{short} {name}" if name and name != short else short


def _inputs(op: ir.Operation) -> list[ir.Value]:
    """``op``'s operands and the values its regions read from outside it."""
    values = list(op.operands)
    if len(op.regions):
        values += captured_values(op)
    return values


def _constant_like(op: ir.Operation) -> bool:
    """A constant, or a broadcast, reshape or conversion of one: IREE folds each into a splat
    that its kernels read, or keeps it with the artifact's constants."""
    while op.name in ("stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.convert") \
            and isinstance(op.operands[0], ir.OpResult):
        op = op.operands[0].owner.operation
    return op.name == "stablehlo.constant"


def _splat(op: ir.Operation) -> bool:
    """A broadcast of a scalar (``hlo.tie``'s ``-0·is_finite``): IREE fills it inside the
    kernels that read it."""
    return op.name == "stablehlo.broadcast_in_dim" and not shape(op.operands[0])


def _remade_carries(loop: ir.Operation) -> list[ir.Value]:
    """The arguments of a ``while`` body that get buffers of their own each iteration: in a loop
    IREE runs in place (``loop_inits.simple``), those it makes anew (not passed on as they are,
    nor updated in place: ``loop_inits.updated_in_place``); in any other, all of them."""
    body = loop.regions[1].blocks[0]
    if not simple(loop):
        return list(body.arguments)
    ret = list(body.operations)[-1].operation
    in_place = set(updated_in_place(loop))
    return [arg for i, (arg, new) in enumerate(zip(body.arguments, ret.operands)) if new != arg and i not in in_place]


def _fused(op: ir.Operation) -> bool:
    """A broadcast whose every reader is elementwise: IREE computes it inside their kernels."""
    return op.name == "stablehlo.broadcast_in_dim" and all(
        use.owner.name in _FUSING for use in op.results[0].uses)


def _carried_through(loop: ir.Operation) -> tuple[list[int], list[int]]:
    """The carries of a ``while`` whose results are the buffers of their initial values: those
    its body passes on as they are, and (a loop IREE runs in place) those it updates in place."""
    if loop.name != "stablehlo.while":
        return [], []
    body = loop.regions[1].blocks[0]
    ret = list(body.operations)[-1].operation
    unchanged = [i for i, (arg, new) in enumerate(zip(body.arguments, ret.operands)) if new == arg]
    return unchanged, updated_in_place(loop) if simple(loop) else []


class _Liveness:
    def __init__(self) -> None:
        self.largest, self.largest_op, self.loops, self.dynamic = 0, "-", 0, False

    def size(self, v: ir.Value) -> int:
        n, dyn = _nbytes(v.type)
        self.dynamic |= dyn
        return n

    def block(self, block: ir.Block, held: int, boundary: ir.Operation | None = None,
              allocated: frozenset = frozenset()) -> tuple[int, str, int]:
        """Peak bytes of running ``block`` with ``held`` bytes live throughout (its arguments,
        and the ``allocated`` values' buffers, counted by the caller), the op at the peak, and the
        bytes live where ``boundary`` starts."""
        ops = [o.operation for o in block.operations]
        last: dict[ir.Value, int] = {}
        for i, op in enumerate(ops):
            for v in _inputs(op):
                last[v] = i
        for i in reversed(range(len(ops))):
            # A reshape is a view of its operand's buffer (IREE copies nothing), and a loop's
            # result for a carry passed on as it is, its initial value: the buffer lives as long
            # as the view.
            views = [(0, 0)] if ops[i].name == "stablehlo.reshape" or _fused(ops[i]) \
                else [(k, k) for k in _carried_through(ops[i])[0]]
            for k, r in views:
                v = ops[i].operands[k]
                last[v] = max(last.get(v, i), last.get(ops[i].results[r], i))
        live, peak, at, at_boundary = held, held, "-", 0
        dying: dict[int, list[ir.Value]] = {}
        counted: dict[ir.Value, int] = {}  # the bytes each live value added (0: it took over a buffer)
        for i, op in enumerate(ops):
            if boundary is not None and op == boundary:
                at_boundary = live - held
            inner = 0
            for k, region in enumerate(op.regions):
                for b in region.blocks:
                    # A loop's body makes its carries' next values in buffers of their own, beside
                    # the current ones: the size of the carries once more, but for those it passes
                    # on unchanged or updates in place (a stack's row).
                    copied = sum(self.size(a) for a in _remade_carries(op)) \
                        if op.name == "stablehlo.while" and k == 1 else 0
                    inner = max(inner, self.block(b, copied)[0])
            if op.name == "stablehlo.while":
                self.loops = max(self.loops, sum(self.size(r) for r in op.results))
            sizes = [0 if _constant_like(op) or _splat(op) else self.size(r) for r in op.results]
            for n in sizes:
                if n > self.largest:
                    self.largest, self.largest_op = n, _where(op)
            if op.name == "stablehlo.reshape" or _fused(op) or any(r in allocated for r in op.results):
                sizes = [0] * len(sizes)
            unchanged, in_place = _carried_through(op)
            for k in unchanged:
                sizes[k] = 0
            for k in in_place if op.name == "stablehlo.while" else [0] if op.name in IN_PLACE else []:
                if last.get(op.operands[k]) == i:
                    # The update writes into the buffer of the value it updates, which dies here
                    # (a tape's row stored into its stack; a loop's stack): no new buffer.
                    sizes[k] = 0
                    if op.operands[k] in counted:
                        counted[op.results[k]] = counted.pop(op.operands[k])
                        dying[i].remove(op.operands[k])
            made = sum(sizes)
            if live + made + inner > peak:
                peak, at = live + made + inner, _where(op)
            live += made
            for r, n in zip(op.results, sizes):
                if op.name != "stablehlo.constant":
                    counted[r] = counted.get(r, 0) + n
                    dying.setdefault(last.get(r, i), []).append(r)
            for v in dying.pop(i, []):
                live -= counted.pop(v, 0)
        return peak, at, at_boundary


HOISTED = "irgrad.hoisted"  # on an op hoist_reductions moved: backward_start passes over it
ANNOTATION = "irgrad.estimated_peak"  # runtime.vmfb.PEAK_KEY: the artifact carries it to irgrad inspect


def annotate(func_op: ir.Operation) -> Estimate:
    """Estimate ``func_op`` and record it on the op (``irgrad.estimated_peak``, JSON: ``peak``,
    ``arguments``, ``results``, ``tape``, ``loops``, ``dynamic``), where ``irgrad inspect`` reads it."""
    found = estimate(func_op)
    keep = ("peak", "arguments", "results", "tape", "loops", "dynamic")
    with func_op.context:
        func_op.attributes[ANNOTATION] = ir.StringAttr.get(json.dumps({k: getattr(found, k) for k in keep}))
    return found


def _has_calls(func_op: ir.Operation) -> bool:
    return any(op.name == "func.call" for op in nested_ops(func_op))


def backward_start(func_op: ir.Operation) -> ir.Operation | None:
    """The first op of a gradient's backward: the first non-constant op named ``<function>/...``
    (``backprop``'s locations) that ``hoist_reductions`` did not move, None in a function without one."""
    prefix = ir.StringAttr(func_op.attributes["sym_name"]).value + "/"
    for op in func_op.regions[0].blocks[0].operations:
        op = op.operation
        if op.name != "stablehlo.constant" and HOISTED not in op.attributes \
                and (loc_name(op) or "").startswith(prefix):
            return op
    return None


def estimate(func_op: ir.Operation, compiled: bool = True) -> Estimate:
    """The estimated peak of the ``func.func`` op ``func_op`` (see the module docstring): as
    IREE is given it (``compiled``: after ``lowering.legalize``, whose rewrites, such as a
    convolution's patches, make values of their own), or as it stands."""
    if compiled and not _has_calls(func_op):
        text = "module {\n" + func_op.get_asm(enable_debug_info=True) + "\n}"
        legal = legalize_text(text)
        if legal != text:
            module = parse_module(legal)
            with module.context:
                return estimate(next(op.operation for op in module.body.operations
                                     if op.operation.name == "func.func"), compiled=False)
    block = func_op.regions[0].blocks[0]
    live = _Liveness()
    arguments = sum(live.size(a) for a in block.arguments)
    ret = list(block.operations)[-1].operation
    results = sum(live.size(v) for v in ret.operands)
    # IREE allocates the buffers of the results an op of the function makes when the call starts
    # (the host program's first allocation), not where the op runs.
    made = frozenset(v for v in ret.operands if isinstance(v, ir.OpResult)
                     and not _constant_like(v.owner.operation) and not _splat(v.owner.operation))
    boundary = backward_start(func_op)
    peak, at, tape = live.block(block, arguments + sum(live.size(v) for v in made), boundary, made)
    return Estimate(ir.StringAttr(func_op.attributes["sym_name"]).value, peak - arguments, arguments, results, tape,
                    live.largest, live.largest_op, at, live.loops, live.dynamic)


# ----- rematerialization ------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """How a gradient was fitted: ``segments`` straight-line segments recomputed (0: none),
    the ``recomputed`` work (``work``), the loops' ``loop_checkpoints``, the estimate reached,
    and the ``stride`` of segments between kept checkpoints (``rematerialize``)."""
    segments: int
    recomputed: int
    loop_checkpoints: object
    estimate: Estimate
    stride: int = 1


def _forward_backward(func_op: ir.Operation) -> tuple[list[ir.Operation], list[ir.Operation]]:
    ops = [o.operation for o in func_op.regions[0].blocks[0].operations][:-1]
    start = backward_start(func_op)
    if start is None:
        return ops, []
    k = ops.index(start)
    return ops[:k], ops[k:]


def _users(ops: Sequence[ir.Operation]) -> dict[ir.Value, list[ir.Operation]]:
    users: dict[ir.Value, list[ir.Operation]] = {}
    for op in ops:
        for v in _inputs(op):
            users.setdefault(v, []).append(op)
    return users


def segment_ops(forward: Sequence[ir.Operation], segments: int) -> list[list[ir.Operation]]:
    """The forward's non-constant ops in ``segments`` consecutive groups of about equal
    output bytes (a segment never splits an op)."""
    ops = [op for op in forward if op.name != "stablehlo.constant"]
    sizes = [sum(_nbytes(r.type)[0] for r in op.results) for op in ops]
    total = sum(sizes) or 1
    groups: list[list[ir.Operation]] = [[]]
    done = 0
    for op, n in zip(ops, sizes):
        if groups[-1] and done >= total * len(groups) / segments and len(groups) < segments:
            groups.append([])
        groups[-1].append(op)
        done += n
    return groups


# Multiply-adds per unit of work: what one element an elementwise op makes costs (runtime's
# ``estimate_work`` weighs them so: measured on IREE's CPU kernels).
_MACS_PER_UNIT = 32
_CONV_KERNEL = re.compile(r"\]x\[([^\]]*)\]")


def work(op: ir.Operation) -> int:
    """What running ``op`` again costs: the elements it makes, plus its multiply-adds (a
    contraction's, a convolution's) / ``_MACS_PER_UNIT``."""
    elements = sum(math.prod(max(1, d) for d in shape(r)) for r in op.results
                   if isinstance(r.type.maybe_downcast(), ir.RankedTensorType))
    macs = 0
    if op.name in ("stablehlo.dot_general", "stablehlo.dot"):
        lhs = shape(op.operands[0])
        macs = math.prod(max(1, lhs[d]) for d in hlo.dot_dimensions(op).lhs_contract)
    elif op.name == "stablehlo.convolution":
        rhs = [max(1, d) for d in shape(op.operands[1])]
        layout = _CONV_KERNEL.search(str(op.attributes["dimension_numbers"])) \
            if "dimension_numbers" in op.attributes else None
        kernel = [c.strip() for c in layout.group(1).split(",")] if layout else []
        macs = math.prod(rhs) // (rhs[kernel.index("o")] if "o" in kernel else 1)
    return elements + elements * macs // _MACS_PER_UNIT


# Whether ``rematerialize`` recomputes a segment right after the cotangent it starts from, as
# a chain (``_recompute``'s ``chain``), or right before its first reader, tied as any copy.
# IREE's scheduler need not keep the first's order (it may run the next cotangent's product
# beside the chain), so the estimate can undercount it: ``fit`` chains only where it checks
# what IREE allocates.
_chains: contextvars.ContextVar[bool] = contextvars.ContextVar("irgrad_memory_chains", default=False)


@contextlib.contextmanager
def chains(on: bool = True):
    """Within: ``rematerialize`` recomputes segments as chains (``on``) or not."""
    token = _chains.set(on)
    try:
        yield
    finally:
        _chains.reset(token)


def rematerialize(func_op: ir.Operation, segments: int, stride: int = 1) -> int:
    """Rewrite the gradient ``func_op`` in place to keep only its segments' checkpoints (see the
    module docstring) with the forward split in ``segments``; returns the work it recomputes
    (``work``; 0: nothing to recompute, the function is unchanged). With ``stride`` k > 1 only
    every k-th segment's checkpoints stay: a segment's values are recomputed from the last kept
    checkpoints before it, through the segments between (each of those run again once for
    every segment after it up to the next kept checkpoint: ``stride`` = ``segments`` recomputes
    everything from the arguments)."""
    forward, backward = _forward_backward(func_op)
    if not backward or segments < 2:
        return 0
    block = func_op.regions[0].blocks[0]
    ret = list(block.operations)[-1].operation
    groups = segment_ops(forward, segments)
    where = {op: k for k, group in enumerate(groups) for op in group}
    fwd_users = _users(forward)
    bwd_users = _users([*backward, ret])
    returned = set(ret.operands)
    recomputed = 0
    for k, group in enumerate(groups):
        # The values of this segment the backward reads and that need not stay: not read by
        # a later stride of segments (a checkpoint), not returned, not made by a kept op.
        wanted = [r for op in group if op.name not in _KEPT_OPS for r in op.results
                  if r in bwd_users and r not in returned
                  and not any(where.get(u, -1) // stride > k // stride for u in fwd_users.get(r, ()))]
        if not wanted:
            continue
        first = min((u for r in wanted for u in bwd_users[r] if u is not ret),
                    key=backward.index, default=None)
        if first is None:
            continue
        since = [op for g in groups[k - k % stride:k + 1] for op in g]
        needed = _closure(wanted, set(since))
        # Right after the cotangent ``first`` reads: the backward ops between it and ``first``
        # (the next cotangent's product) then run after the recomputation, not beside it.
        anchor = _anchor(first, backward)
        chain = _chains.get()
        place = _following(anchor.owner.operation, backward, ret) if chain and isinstance(anchor, ir.OpResult) \
            else first
        copies = _recompute(place, [op for op in since if op in needed], backward, anchor, chain=chain)
        for r in wanted:
            _redirect(r, copies[r], [u for u in bwd_users[r] if u is not ret])
        recomputed += sum(work(op) for op in needed)
    return recomputed


def _closure(values: Sequence[ir.Value], inside: set[ir.Operation]) -> set[ir.Operation]:
    """The ops of ``inside`` that ``values`` are computed from (a kept op's results are read
    as they are)."""
    needed: set[ir.Operation] = set()
    stack = [v.owner.operation for v in values if isinstance(v, ir.OpResult)]
    while stack:
        op = stack.pop()
        if op in needed or op not in inside or op.name in _KEPT_OPS:
            continue
        needed.add(op)
        stack.extend(v.owner.operation for v in _inputs(op) if isinstance(v, ir.OpResult))
    return needed


_VIEWS = ("stablehlo.broadcast_in_dim", "stablehlo.reshape")


def _following(op: ir.Operation, backward: Sequence[ir.Operation], ret: ir.Operation) -> ir.Operation:
    """The op after ``op`` in ``backward`` (``ret`` after the last). Found by ``==``: an op's
    hash and its Python object change once its operands are redirected."""
    k = next(i for i, b in enumerate(backward) if b == op)
    return backward[k + 1] if k + 1 < len(backward) else ret


def _anchor(first: ir.Operation, backward: Sequence[ir.Operation]) -> ir.Value | None:
    """The cotangent ``first`` reads: a static float value the backward made."""
    bwd = set(backward)
    return next((v for v in first.operands if isinstance(v, ir.OpResult) and v.owner.operation in bwd
                 and is_float(v) and hlo.is_static(v)), None)


def _recompute(first: ir.Operation, ops: Sequence[ir.Operation], backward: Sequence[ir.Operation],
               anchor: ir.Value | None = None, chain: bool = False) -> dict[ir.Value, ir.Value]:
    """Copies of ``ops`` (in order) placed before ``first``, each one that reads no copy already
    tied with its smallest float input (not a constant) tied to ``anchor`` (by default the
    cotangent ``first`` reads; ``hlo.tie``: unlike a barrier, it keeps IREE's execution region
    whole), so that every copy runs after it and none is merged back: each original result ->
    its copy. (A tie is a copy of its input: tying a chain's every input, a recomputed MLP's
    every weight, held them all at once. What is computed from constants alone is not tied: the
    copy that reads it and a value is.)

    ``chain`` (a segment recomputed for a memory limit: a long chain of buffers of one size,
    which IREE packs best fit in program order) ties a copy to the last copy made, so that the
    tie's scalar lives one step rather than the whole chain, and ties the smallest input at
    least as large as what the op makes, so that the tie's copy takes a slot the chain reuses:
    a small copy or a long-lived scalar shifts every later buffer off the grid (a 16×1024 MLP's
    layer recomputed from its input: 32 MiB of IREE transients for 24 live at once)."""
    if anchor is None:
        anchor = _anchor(first, backward)
    if chain:
        ops = _as_late_as_possible(ops)
    copies: dict[ir.Value, ir.Value] = {}
    tied: dict[ir.Value, ir.Value] = {}
    after: set[ir.Value] = set()  # the originals whose copies depend on ``anchor``
    constant: set[ir.Value] = set()  # the originals computed from constants alone
    last = anchor  # ``chain``: the last float copy made, what the next tie ties to
    for op in ops:
        inputs = _inputs(op)
        data = [v for v in inputs if v not in constant
                and not (isinstance(v, ir.OpResult) and _constant_like(v.owner.operation))]
        if not data:  # a constant's copy, merged back or not, costs nothing: tied where it is read
            constant.update(op.results)
        elif anchor is not None and not any(v in after for v in inputs):
            floats = [v for v in data if _tieable(v)]
            if floats:
                made = max((_nbytes(r.type)[0] for r in op.results), default=0) if chain else 0
                v = min(floats, key=lambda v: (_nbytes(v.type)[0] < made, _nbytes(v.type)[0]))
                with ir.InsertionPoint(first), first.location:
                    tied[v] = hlo.tie(copies.get(v, v), last)
                after.add(v)
        mapping = {**copies, **tied}
        clone = op.clone(ir.InsertionPoint(first))
        for k, v in enumerate(clone.operands):
            if v in mapping:
                clone.operands[k] = mapping[v]
        for v in _inputs(clone)[len(clone.operands):]:  # values its regions capture
            if v in mapping:
                _replace_inside(clone, v, mapping[v])
        for old, new in zip(op.results, clone.results):
            copies[old] = new
        if any(v in after for v in inputs):
            after.update(op.results)
            if chain and op.name not in _VIEWS:
                last = next((c for c in clone.results if _tieable(c)), last)
    return copies


def _as_late_as_possible(ops: Sequence[ir.Operation]) -> list[ir.Operation]:
    """``ops`` (in an order that computes them) reordered so that each runs right before the
    first of them that reads it, and of an op's inputs the costlier chain first: a bias broadcast
    at the top of an exported function moves down to its layer, and its copy and tie live one
    layer, not the whole chain."""
    index = {r: i for i, op in enumerate(ops) for r in op.results}
    reads = [sorted({index[v] for v in _inputs(op) if v in index}) for op in ops]
    depth = [0] * len(ops)  # the costliest chain of ``ops`` an op reads (``work``)
    waiting = [0] * len(ops)  # its readers not yet placed (placed from the last back)
    for i, rs in enumerate(reads):
        depth[i] = work(ops[i]) + max((depth[j] for j in rs), default=0)
        for j in rs:
            waiting[j] += 1
    ready = sorted((i for i, n in enumerate(waiting) if not n), key=lambda i: (-depth[i], i))
    placed: list[ir.Operation] = []
    while ready:  # a stack: what became ready last goes right before the op that read it
        i = ready.pop()
        placed.append(ops[i])
        for j in sorted(reads[i], key=lambda j: (-depth[j], j)):
            waiting[j] -= 1
            if not waiting[j]:
                ready.append(j)
    return placed[::-1]


def _tieable(v: ir.Value) -> bool:
    """A value ``hlo.tie`` can tie: a float tensor of static shape."""
    return isinstance(v.type.maybe_downcast(), ir.RankedTensorType) \
        and isinstance(elem(v).maybe_downcast(), ir.FloatType) and hlo.is_static(v)


def _replace_inside(op: ir.Operation, old: ir.Value, new: ir.Value) -> None:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                for k, v in enumerate(inner.operands):
                    if v == old:
                        inner.operands[k] = new
                _replace_inside(inner, old, new)


# Ops a gradient recomputes from the values they read rather than keeping their results for
# its backward (``recompute_elementwise``): elementwise ops and the broadcasts, reshapes and
# conversions between them, which IREE fuses into the dispatch that reads them.
CHEAP_OPS = frozenset(f"stablehlo.{name}" for name in (
    "abs add and atan2 broadcast_in_dim cbrt ceil clamp compare convert cosine divide exponential "
    "exponential_minus_one floor is_finite log log_plus_one logistic maximum minimum multiply negate "
    "not or power remainder reshape round_nearest_afz round_nearest_even rsqrt select sign sine sqrt "
    "subtract tan tanh xor").split())
MAX_RECOMPUTED_OPS = 64  # cheap ops recomputed for one value
_SMALL = 8  # a value read this many times smaller than the one recomputed is kept (a mean, a scale)


def _cheap(op: ir.Operation) -> bool:
    return (op.name in CHEAP_OPS or op.name == "stablehlo.constant") and not len(op.regions) \
        and all(hlo.is_static(r) for r in op.results)


class _Sizes(dict):
    """Bytes of each value asked for, computed once (``_nbytes``)."""

    def __missing__(self, v: ir.Value) -> int:
        self[v] = n = _nbytes(v.type)[0]
        return n


def _cheap_closure(value: ir.Value, forward: dict[ir.Operation, int], cheap: set[ir.Operation],
                   sizes: _Sizes) -> tuple[list[ir.Operation], set[ir.Value]] | None:
    """The cheap forward ops (``cheap``: those of ``forward``, op -> position, that ``_cheap``
    takes) that compute ``value`` from values kept anyway, in order, and the large values among
    those (``_SMALL``): None past ``MAX_RECOMPUTED_OPS`` ops. Constants are copied, never kept."""
    size = sizes[value]
    ops: set[ir.Operation] = set()
    frontier: set[ir.Value] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        owner = v.owner.operation if isinstance(v, ir.OpResult) else None
        inside = owner is not None and owner in cheap
        small = v != value and sizes[v] * _SMALL <= size
        if inside and (not small or owner.name == "stablehlo.constant"):
            if owner not in ops:
                ops.add(owner)
                if len(ops) > MAX_RECOMPUTED_OPS:
                    return None
                stack.extend(owner.operands)
        elif not small:
            frontier.add(v)
    return sorted(ops, key=forward.__getitem__), frontier


MIN_SAVING = 1 / 16  # of the estimated peak, for recompute_elementwise to be worth its copies


def recompute_elementwise(func_op: ir.Operation) -> int:
    """``_recompute_elementwise`` where it lowers the estimated peak by ``MIN_SAVING`` at least
    (tried on a copy first): elsewhere the copies cost time and compile time for nothing (an
    unrolled LSTM's peak is not where its tape is: twice the ops, the same estimate). Returns
    the number of values recomputed."""
    trial = func_op.clone(ir.InsertionPoint(func_op))
    try:
        if not _recompute_elementwise(trial):
            return 0
        cleanup(trial)
        before = estimate(func_op, compiled=False).peak
        worth = before - estimate(trial, compiled=False).peak >= MIN_SAVING * before
    finally:
        trial.erase()
    return _recompute_elementwise(func_op) if worth else 0


def _recompute_elementwise(func_op: ir.Operation) -> int:
    """Rewrite the gradient ``func_op`` in place so that its backward recomputes, rather than
    reads from the tape, the forward values made by cheap ops (``CHEAP_OPS``) from values the
    tape holds anyway or that are small: a batch norm's centred and normalised values and its
    activation are recomputed from the convolution's output and the per-feature statistics,
    as XLA's fusions do. Each such value's ops are copied just before the first backward op
    that reads it, their inputs tied to the last float value the backward made before that op
    (``_recompute``, ``hlo.tie``), and IREE fuses the
    copies into the dispatches that read them. Values are taken together where they share the
    values they are recomputed from, and only where the values those add to the tape are
    smaller than the values they take off it. Returns the number of values recomputed."""
    forward, backward = _forward_backward(func_op)
    if not backward:
        return 0
    ret = list(func_op.regions[0].blocks[0].operations)[-1].operation
    position = {op: i for i, op in enumerate(forward)}
    order = {id(op): i for i, op in enumerate(backward)}  # an op's hash changes with its operands
    bwd_users = _users([*backward, ret])
    returned = set(ret.operands)
    tape = {r for op in forward if op.name != "stablehlo.constant" for r in op.results
            if r in bwd_users and r not in returned}
    cheap = {op for op in forward if _cheap(op)}
    sizes = _Sizes()
    plans = {}
    for r in tape:
        if r.owner.operation in cheap and (found := _cheap_closure(r, position, cheap, sizes)) is not None:
            plans[r] = found
    # Values recomputed from a common value are decided together: union-find over the values
    # each needs.
    parent: dict[ir.Value, ir.Value] = {}

    def root(v: ir.Value) -> ir.Value:
        while parent.setdefault(v, v) != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for r, (_, needs) in plans.items():
        for v in needs:
            parent[root(v)] = root(r)
    groups: dict[ir.Value, list[ir.Value]] = {}
    for r in plans:
        groups.setdefault(root(r), []).append(r)
    # The tie of a copy: the last float value the backward made before the op that reads it
    # (the op's own operands may all be forward values: a ReLU's mask reads the activation).
    latest: dict[int, ir.Value | None] = {}
    last = None
    for op in backward:
        latest[id(op)] = last
        last = next((r for r in op.results if is_float(r) and hlo.is_static(r)), last)
    done = 0
    for members in groups.values():
        needs = set().union(*(plans[r][1] for r in members))
        added = sum(sizes[v] for v in needs if isinstance(v, ir.OpResult) and v not in tape)
        if added >= sum(sizes[r] for r in members):
            continue
        for r in members:
            users = [u for u in bwd_users[r] if u is not ret]
            if not users:
                continue
            first = min(users, key=lambda u: order[id(u)])
            _redirect(r, _recompute(first, plans[r][0], backward, latest[id(first)])[r], users)
            done += 1
    return done


def _redirect(value: ir.Value, copy: ir.Value, users: Sequence[ir.Operation]) -> None:
    """``users`` (backward ops) read ``copy`` instead of ``value``, in their regions too."""
    for use in list(value.uses):
        if use.owner.operation in users:
            use.owner.operation.operands[use.operand_number] = copy
    for u in users:
        if len(u.regions):
            _replace_inside(u, value, copy)


def cleanup(func_op: ir.Operation) -> None:
    run_pipeline(func_op, "func.func(canonicalize,cse)")


def candidate_segments(func_op: ir.Operation) -> list[int]:
    """The segment counts worth trying, √n first (n: the forward's non-constant ops), then the
    others that split it in fewer or more pieces."""
    forward, _ = _forward_backward(func_op)
    n = sum(op.name != "stablehlo.constant" for op in forward)
    if n < 2:
        return []
    root = max(2, math.isqrt(n - 1) + 1)
    out = [root]
    for s in (2, 3, 4, root // 2, 2 * root, 3 * root, n // 2, n):
        if 2 <= s <= n and s not in out:
            out.append(s)
    return out


def hoist_reductions(func_op: ir.Operation) -> int:
    """Move each backward op that is the last reader of values larger than its results (a bias's
    gradient: the sum of a cotangent over the batch) to just after its inputs' definitions, so
    that those values die there instead of living until the walk reaches the op (``backprop``
    visits a bias's broadcast, hoisted to the top of the forward by JAX, last). An op that
    reads forward values only moves into the forward (a batch norm's sums): the values it
    reduces need not be kept for it. Nothing is recomputed; returns the number of ops moved.
    (The forward and the backward then overlap: ``rematerialize`` comes first; a moved op is
    marked ``HOISTED``, which ``backward_start`` passes over.)"""
    forward, backward = _forward_backward(func_op)
    if not backward:
        return 0
    ops = [o.operation for o in func_op.regions[0].blocks[0].operations]
    # The block's order as ranks (a moved op takes one between its new neighbours') and links:
    # a move costs O(1), and an op is the last reader of a value when no reader ranks later.
    rank = {op: Fraction(i) for i, op in enumerate(ops)}
    after_of = dict(zip(ops, ops[1:]))
    before_of = dict(zip(ops[1:], ops))
    readers = _users(ops)
    moved = []
    for op in backward:
        inputs = _inputs(op)
        owners = [v.owner.operation for v in inputs if isinstance(v, ir.OpResult) and v.owner.operation in rank]
        if not owners or op.name in _KEPT_OPS:
            continue
        freed = sum(_nbytes(v.type)[0] for v in set(inputs) if isinstance(v, ir.OpResult)
                    and v.owner.name != "stablehlo.constant" and max(map(rank.__getitem__, readers[v])) == rank[op])
        if freed <= sum(_nbytes(r.type)[0] for r in op.results):
            continue
        after = max(owners, key=rank.__getitem__)
        if after_of[after] == op:
            continue
        op.move_after(after)
        moved.append(op)
        prev, nxt = before_of.pop(op), after_of.pop(op)  # unlink (a backward op: never the first)
        after_of[prev], before_of[nxt] = nxt, prev
        nxt = after_of[after]  # and link after ``after``
        after_of[after], after_of[op], before_of[op], before_of[nxt] = op, nxt, after, op
        rank[op] = (rank[after] + rank[nxt]) / 2
    for op in moved:  # not before: an op's hash changes with its attributes
        op.attributes[HOISTED] = ir.UnitAttr.get()
    return len(moved)


def _has_loops(func_op: ir.Operation) -> bool:
    return any(op.name == "stablehlo.while" for op in nested_ops(func_op))


def _trial(func_op: ir.Operation, segments: int, stride: int = 1) -> tuple[int, int]:
    """(estimated peak, work recomputed) of ``func_op`` rematerialized in ``segments`` (0: not),
    every ``stride``-th one's checkpoints kept, and its reductions hoisted, on a copy."""
    copy = func_op.clone(ir.InsertionPoint(func_op))
    try:
        recomputed = _apply(copy, segments, stride)
        return estimate(copy).peak, recomputed
    finally:
        copy.erase()


def _apply(func_op: ir.Operation, segments: int, stride: int = 1) -> int:
    """Rematerialize ``func_op`` in place in ``segments`` (0: not) every ``stride``-th one's
    checkpoints kept, and hoist its reductions; the work recomputed."""
    recomputed = rematerialize(func_op, segments, stride) if segments else 0
    if recomputed:
        cleanup(func_op)
    hoist_reductions(func_op)
    return recomputed


class _Allocations:
    """``fit``'s check of a plan against what the backend allocates for it (``allocated``:
    the bytes a call of a module's function allocates at once, or None: the estimate alone
    decides); ``seen``: (allocated, estimated) of each plan checked."""

    def __init__(self, allocated, limit: int) -> None:
        self.allocated, self.limit, self.seen = allocated, limit, {}

    def hold(self, func_op: ir.Operation, segments: int = 0, stride: int = 1) -> bool:
        """Whether ``func_op`` so planned (``_apply``) allocates at most the limit."""
        if self.allocated is None or _has_calls(func_op):  # a call's callees are not in the copy
            return True
        if (segments, stride) not in self.seen:
            copy = func_op.clone(ir.InsertionPoint(func_op))
            try:
                _apply(copy, segments, stride)
                text, peak = f"module {{\n{copy}\n}}\n", estimate(copy).peak
            finally:
                copy.erase()
            name = ir.StringAttr(func_op.attributes["sym_name"]).value
            self.seen[(segments, stride)] = (self.allocated(text, name), peak)
        return self.seen[(segments, stride)][0] <= self.limit

    def smallest(self) -> int | None:
        """The least limit a plan checked meets, by the estimate and as allocated."""
        return min((max(pair) for pair in self.seen.values()), default=None)


def fit(func_op: ir.Operation, limit: int, rebuild=None, allocated=None) -> tuple[ir.Operation, Plan]:
    """Fit the gradient ``func_op`` under ``limit`` bytes (estimated): as it is if it fits; else
    with its loops checkpointed (``rebuild(checkpoints)`` builds it again that way, replacing
    ``func_op``; it returns the new op), else with its reductions hoisted (``hoist_reductions``:
    free), else rematerialized: of the segmentations tried (√n segments, fewer, more), the one
    that fits recomputing the least work (``work``: a contraction weighs its multiply-adds, so
    cheap ops are recomputed first); where none fits, the same with fewer checkpoints kept (every
    2nd, 4th, ... segment's, down to none: segments recomputed from further back, at a cost
    quadratic in the stride). Raises MemoryLimitError when no plan fits.

    ``allocated(module_text, function)``, when given, is what the backend allocates at once for a
    call (``runtime.compiler.peak_allocation``): a plan is taken only if that is within the limit
    too (the estimate follows the op order, IREE's scheduler and its best-fit packing of
    transients decide): the cheapest of those that fit the estimate that does; when none does,
    the refusal names the least limit a plan checked meets both ways, the plan of the least
    estimate among them, so that the limit it names is met. With it, segments are recomputed as
    chains (``chains``), which the check confirms or not."""
    with chains(allocated is not None):
        return _fit(func_op, limit, rebuild, _Allocations(allocated, limit))


def _fit(func_op: ir.Operation, limit: int, rebuild, checks: _Allocations) -> tuple[ir.Operation, Plan]:
    first = estimate(func_op)
    if first.peak <= limit and checks.hold(func_op):
        hoist_reductions(func_op)
        return func_op, Plan(0, 0, None, estimate(func_op))
    checkpoints = given = checkpoints_in_force()
    if rebuild is not None and given != "sqrt" and _has_loops(func_op):
        func_op = rebuild("sqrt")
        checks.seen.clear()  # checked as the function was
        looped = estimate(func_op)
        if looped.peak <= limit and checks.hold(func_op):
            hoist_reductions(func_op)
            return func_op, Plan(0, 0, "sqrt", estimate(func_op))
        if looped.peak < first.peak:
            checkpoints = "sqrt"
        else:  # checkpoints save nothing here (a short loop, an unrolled one): as it was
            func_op = rebuild(given)
            checks.seen.clear()
    hoisted, _ = _trial(func_op, 0)
    if hoisted <= limit and checks.hold(func_op):
        hoist_reductions(func_op)
        return func_op, Plan(0, 0, checkpoints, estimate(func_op))
    counts = candidate_segments(func_op)
    trials = {(s, 1): _trial(func_op, s) for s in counts}
    fitting = [(recomputed, peak, plan) for plan, (peak, recomputed) in trials.items() if recomputed and peak <= limit]
    if not fitting:  # fewer checkpoints: longer recomputations
        fitting = _fewer_checkpoints(func_op, limit, counts, trials)
    held = next((plan for _, _, plan in sorted(fitting) if checks.hold(func_op, *plan)), None)
    if held is None:
        planned = {(0, 1): hoisted, **{plan: peak for plan, (peak, recomputed) in trials.items() if recomputed}}
        least = min(planned, key=planned.get)
        checks.hold(func_op, *least)  # so that the limit named is one that plan meets as allocated
        smallest = checks.smallest() or min([first.peak, estimate(func_op).peak, *planned.values()])
        named = human(smallest, up=True) + (" as allocated" if checks.seen else "")
        raise MemoryLimitError(
            f"memory limit {human(limit)} cannot be met by @{first.function}: its estimated peak is "
            f"{human(first.peak)}, " + (f"and rematerialization brings it down to {named} "
                                        "at the least (the smallest limit it can meet)" if smallest < first.peak else
                                        "which neither checkpointing nor recomputation lowers (the smallest limit "
                                        f"it can meet: {named})"), first.peak, smallest)
    segments, stride = held
    recomputed = _apply(func_op, segments, stride)
    return func_op, Plan(segments, recomputed, checkpoints, estimate(func_op), stride)


# Ops the copies of one trial of fewer checkpoints may add (or as many as the gradient has): a
# stride of k segments copies about n·k/2 of the forward's n ops.
_MAX_COPIES = 20000


def _fewer_checkpoints(func_op: ir.Operation, limit: int, counts: Sequence[int],
                       trials: dict) -> list[tuple[int, int, tuple[int, int]]]:
    """The plans with fewer checkpoints kept that fit ``limit``, as (work, peak, (segments,
    stride)); each trial is added to ``trials``. A trial costs a copy of the gradient (seconds
    for a MobileNetV2's), so: for each segment count, the largest stride whose copies stay under
    ``_MAX_COPIES`` (or the gradient's size) first, the least memory that count reaches; then,
    for the 3 counts that fit with the least work, the smaller strides in increasing order (less
    work) up to the first that fits."""
    forward, _ = _forward_backward(func_op)
    n = sum(op.name != "stablehlo.constant" for op in forward)
    budget = max(_MAX_COPIES, len(func_op.regions[0].blocks[0].operations))
    strides = {s: [k for k in _strides(s) if n * k // 2 <= budget] for s in counts}
    tried = {s: (s, ks[-1]) for s, ks in strides.items() if ks}
    for plan in tried.values():
        trials[plan] = _trial(func_op, *plan)
    fit_most = sorted((trials[plan][1], plan) for plan in tried.values()
                      if trials[plan][1] and trials[plan][0] <= limit)
    fitting = [(work, trials[plan][0], plan) for work, plan in fit_most]
    for _, (s, _most) in fit_most[:3]:
        for k in strides[s][:-1]:
            trials[(s, k)] = peak, work = _trial(func_op, s, k)
            if work and peak <= limit:
                fitting.append((work, peak, (s, k)))
                break
    return fitting


def _strides(segments: int) -> list[int]:
    """The strides tried for ``segments`` segments: 2, 4, 8, ... below it, and all of them."""
    return [*(2 ** e for e in range(1, max(1, segments - 1).bit_length()) if 2 ** e < segments), segments]


__all__ = ["fit", "annotate", "hoist_reductions", "ANNOTATION", "HOISTED",
           "Estimate", "MemoryLimitError", "Plan", "estimate", "rematerialize", "parse_size", "human",
           "backward_start", "candidate_segments", "segment_ops", "recompute_elementwise"]
