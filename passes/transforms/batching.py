"""Batching: a block's ops rewritten over a leading batch dimension (``vmap``, TF's ``pfor``).

:class:`Batcher` walks a block's ops in order and emits, at the insertion point, the same
computation over a batch of ``size``: a value either carries the batch as its leading
dimension ("batched") or is shared by every batch element ("unbatched"). An op none of
whose inputs (operands, or values its regions capture) is batched is copied as it is;
any other op goes through its batching rule (``@batching``, registered beside the op's adjoint
in ``passes/rules``), which reads its
operands through the batcher and returns its new results.

Rules are exact rewrites, never loops: elementwise ops broadcast their unbatched
operands; structural ops (reshape, transpose, slice, pad, concatenate, broadcast,
reduce, windows, sort) shift their dimension attributes by one; ``dot_general`` adds a
batch dimension or a free one; ``convolution`` folds the batch into its batch or feature
dimensions (grouped convolution when both sides are batched); ``gather``/``scatter``
gain an operand batching dimension; a ``dynamic_slice`` with batched indices becomes a
``gather``. Control flow: ``case``/``if`` on a shared index keep their branches (batched
inside), on a batched index run every branch and select; a ``while`` whose condition is
batched (trip counts that differ per element) runs until every element is done, each
element's state frozen once its own condition fails. An op without a rule, or one that
reads or makes a value of a run-time shape (a data-dependent loop's tape), raises
:class:`MissingBatchingRule`; :func:`map_block` then falls back to a loop over the batch
when asked (TensorFlow's ``fallback_to_while_loop``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence


from ..ir import hlo
from .backprop import op_inputs
from ..ir.mlir import elem, ir, shape, tensor_type
from ..ir.regions import discard, lookup_function, module_of, nested_ops
from .registry import BATCHING_RULES

Value = ir.Value


class MissingBatchingRule(LookupError):
    """An op the batching pass has no rule for (the caller may fall back to a loop)."""

    def __init__(self, op: ir.Operation, detail: str = ""):
        super().__init__(f"no batching rule for '{op.name}'{': ' + detail if detail else ''} (at {op.location})")
        self.op_name = op.name


def attributes(op: ir.Operation) -> dict[str, ir.Attribute]:
    return {k: op.attributes[k] for k in op.attributes}


class Batcher:
    """Maps the values of the blocks it runs to their batched (or shared) counterparts."""

    def __init__(self, size: int):
        self.size = size
        self.env: dict[Value, Value] = {}
        self.batched: set[Value] = set()

    def get(self, v: Value) -> Value:
        return self.env.get(v, v)

    def is_batched(self, v: Value) -> bool:
        """Whether ``v`` (an original value) is batched here."""
        return self.get(v) in self.batched

    def mark(self, values: Sequence[Value]) -> list[Value]:
        self.batched.update(values)
        return list(values)

    def lift(self, v: Value) -> Value:
        """``v`` (a new value) with the batch dimension: a broadcast if it is shared."""
        if v in self.batched:
            return v
        s = shape(v)
        return self.mark([hlo.broadcast_in_dim(v, [self.size, *s], range(1, len(s) + 1))])[0]

    def operands(self, op: ir.Operation, lift: bool = False) -> list[Value]:
        vs = [self.get(v) for v in op.operands]
        return [self.lift(v) for v in vs] if lift else vs

    def type(self, v: Value | ir.Type) -> ir.Type:
        return tensor_type([self.size, *shape(v)], elem(v))

    def run(self, block: ir.Block, args: Sequence[Value]) -> list[Value]:
        """Emit ``block``'s ops with its arguments bound to ``args``; the new values its
        terminator returns."""
        for formal, actual in zip(block.arguments, args):
            self.env[formal] = actual
        ops = [o.operation for o in block.operations]
        for op in ops[:-1]:
            self.op(op)
        return [self.get(v) for v in ops[-1].operands]

    def op(self, op: ir.Operation) -> None:
        if not any(self.is_batched(v) for v in op_inputs(op)):
            results = self.copy(op)
        else:
            rule = BATCHING_RULES.get(op.name)
            if rule is None:
                raise MissingBatchingRule(op)
            if not all(hlo.is_static(v) for v in [*op_inputs(op), *op.results]):
                # The rules build static types (the tapes of a loop with a data-dependent
                # trip count are sized at run time): such a block runs as a loop instead.
                raise MissingBatchingRule(op, "a value whose shape is only known at run time")
            with op.location:
                results = list(rule(self, op))
            for old, new in zip(op.results, results):
                expected = (self.size, *shape(old)) if new in self.batched else tuple(shape(old))
                if tuple(shape(new)) != expected:
                    raise AssertionError(f"batching rule of '{op.name}' built {new.type} for {old.type}")
        self.env.update(zip(op.results, results))

    def copy(self, op: ir.Operation) -> list[Value]:
        """``op`` as it is, reading the new values of its operands and captures."""
        clone = op.clone()
        for i, v in enumerate(op.operands):
            clone.operands[i] = self.get(v)
        for inner in nested_ops(clone):
            for i, v in enumerate(inner.operands):
                if v in self.env:
                    inner.operands[i] = self.env[v]
        return list(clone.results)

    def taint(self, blocks: Sequence[ir.Block], args: Sequence[bool]) -> list[list[bool]]:
        """Which values each block returns are batched given which of its arguments are:
        a conservative reading (any batched input batches an op) that the rules never
        exceed; the caller lifts what the rules leave shared."""
        outs = []
        for block, flags in zip(blocks, args):
            hit = {a for a, f in zip(block.arguments, flags) if f}
            *body, terminator = [o.operation for o in block.operations]
            for op in body:
                if any(v in hit or self.is_batched(v) for v in op_inputs(op)):
                    hit.update(op.results)
            outs.append([v in hit or self.is_batched(v) for v in terminator.operands])
        return outs


def remake(op: ir.Operation, operands: Sequence[Value], types: Sequence[ir.Type],
           attrs: dict | None = None) -> ir.Operation:
    """``op`` rebuilt with new operands, result types and attributes, its regions copied."""
    new = ir.Operation.create(op.name, results=list(types), operands=list(operands),
                              attributes={**attributes(op), **(attrs or {})}, regions=len(op.regions))
    if len(op.regions):
        donor = op.clone()
        for k, region in enumerate(donor.regions):
            old = region.blocks[0]
            block = new.regions[k].blocks.append(*[a.type for a in old.arguments])
            for formal, actual in zip(old.arguments, block.arguments):
                formal.replace_all_uses_with(actual)
            ip = ir.InsertionPoint(block)
            for o in [o.operation for o in old.operations]:
                o.detach_from_parent()
                ip.insert(o)
        donor.erase()
    return new


def plus1(values: Sequence[int]) -> list[int]:
    return [v + 1 for v in values]


def prepended(op: ir.Operation, name: str, first: int) -> dict:
    return {name: hlo.i64_array([first, *hlo.read_i64_array(op, name)])} if name in op.attributes else {}


# ----- general forms and helpers for the rules in passes/rules ----------------------------


def elementwise(b: Batcher, op):
    """The batching rule of elementwise ops (registered beside each one's adjoint): every operand
    broadcast to the batched result shape (scalar operands of clamp/select too)."""
    result = list(shape(op.results[0]))
    full = [b.size, *result]
    xs = []
    for x in b.operands(op):
        batched = x in b.batched
        s = list(shape(x))[1 if batched else 0:]
        if s != result and s != []:
            raise MissingBatchingRule(op, "operand and result shapes differ")
        if batched and s == result:
            xs.append(x)
        else:
            xs.append(hlo.broadcast_in_dim(x, full, ([0] if batched else []) + (plus1(range(len(s))))))
    new = remake(op, xs, [b.type(r) for r in op.results])
    return b.mark(new.results)


def is_elementwise(name: str) -> bool:
    """Whether the op ``name`` is batched as an elementwise op (after every rule is registered)."""
    return BATCHING_RULES.get(name) is elementwise


def moved_to_front(x: Value, position: int) -> Value:
    if position == 0:
        return x
    rank = len(shape(x))
    return hlo.transpose(x, [position, *[d for d in range(rank) if d != position]])


def leading_batch(b: Batcher, op):
    """The batching rule of ops that already treat their leading dimensions as a batch
    (cholesky, triangular_solve, fft, top_k): the same op with one more leading dimension."""
    return b.mark(remake(op, b.operands(op, lift=True), [b.type(r) for r in op.results]).results)


def batched_function(anchor: ir.Operation, name: str, size: int) -> ir.Attribute:
    """``@name`` over a batch of ``size`` on every argument (built once per module)."""
    new_name = f"{name}_batched{size}"
    module = module_of(anchor)
    table = ir.SymbolTable(module)
    if new_name not in table:
        func_op = lookup_function(anchor, name)
        batch_function(func_op, [True] * len(func_op.regions[0].blocks[0].arguments), size, new_name,
                       private=True)
    return ir.FlatSymbolRefAttr.get(new_name)


# ----- drivers ------------------------------------------------------------------------

def batch_function(func_op: ir.Operation, batched: Sequence[bool], size: int, new_name: str,
                   private: bool = False, fallback: bool = False) -> ir.Operation:
    """``@new_name``: ``func_op`` over a leading batch of ``size`` on the arguments flagged in
    ``batched``; every result gets the batch (vmap's ``out_axes=0``); ``fallback``: a loop
    over the batch where an op has no batching rule. Appended to the module."""
    block = func_op.regions[0].blocks[0]
    types = [tensor_type([size, *shape(a)], elem(a)) if f else a.type for a, f in zip(block.arguments, batched)]
    with ir.InsertionPoint(func_op.parent.regions[0].blocks[0]), func_op.location:
        new, new_block = hlo.func(new_name, types, [], private=private)
    with ir.InsertionPoint(new_block), func_op.location:
        outs = _batched_or_looped(block, list(new_block.arguments), list(batched), size, fallback, True)
        hlo.return_(outs)
    hlo.set_function_type(new, types, [v.type for v in outs])
    return new


def map_block(build: Callable[[list[Value]], Sequence[Value]], elements: Sequence[Value], *,
              fallback: bool = True, vectorize: bool = True) -> list[Value]:
    """``build``'s computation over the leading dimension of each of ``elements``, at the
    insertion point: ``build(args)`` builds one element's computation (``args`` of the
    elements' types without their leading dimension) inside a draft block; the block is
    then batched or, when an op has no batching rule and ``fallback`` is set (or
    ``vectorize`` is not), run in a ``while`` loop over the batch. Returns the stacked
    results."""
    size = shape(elements[0])[0]
    index = hlo.splat(0, tensor_type([], ir.IntegerType.get_signless(32)))
    draft, (block,) = hlo.case(index, [], 1)
    loc = ir.Location.current
    args = [block.add_argument(tensor_type(shape(e)[1:], elem(e)), loc) for e in elements]
    try:
        with ir.InsertionPoint(block):
            hlo.return_(list(build(args)), "stablehlo.return")
        with ir.InsertionPoint(draft):
            return _batched_or_looped(block, list(elements), [True] * len(elements), size, fallback, vectorize)
    finally:
        discard(draft)
        index.owner.erase()


def identity(n: int, element: ir.Type) -> Value:
    """The ``n × n`` identity: one one-hot row per element (the seeds of a Jacobian's rows;
    the ``dot_general`` rule recognises it)."""
    i32 = ir.IntegerType.get_signless(32)
    square = tensor_type([n, n], element)
    same = hlo.compare(hlo.iota([n, n], i32, 0), hlo.iota([n, n], i32, 1), "EQ")
    return hlo.select(same, hlo.ones(square), hlo.zeros(square))


def jacobian_rows(seeds: Value, x: Value, vjp: Callable[[Value], Value | None], vectorize: bool = True) -> Value:
    """``vjp(seed)`` (one backward pass to ``x``, built at the insertion point) for every
    seed along ``seeds``' leading dimension, stacked: ``[len(seeds), *x.shape]``."""
    def row(args: list[Value]) -> list[Value]:
        g = vjp(args[0])
        return [g if g is not None else hlo.zeros(x.type)]
    return map_block(row, [seeds], vectorize=vectorize)[0]


def _batched_or_looped(block: ir.Block, values: list[Value], flags: list[bool], size: int,
                       fallback: bool, vectorize: bool) -> list[Value]:
    """``block`` batched at the insertion point (a loop when it cannot be), every result batched."""
    if vectorize:
        mark = ir.Operation.create("stablehlo.optimization_barrier", results=[], operands=[])
        try:
            b = Batcher(size)
            outs = [b.lift(v) for v in b.run(block, [b.mark([v])[0] if f else v for v, f in zip(values, flags)])]
            mark.erase()
            return outs
        except MissingBatchingRule:
            if not fallback:
                raise
            _erase_after(mark)
    return loop_block(block, values, flags, size)


def _erase_after(mark: ir.Operation) -> None:
    """Erase ``mark`` and the ops after it in its block (the insertion point's)."""
    ops = [o.operation for o in mark.block.operations]
    start = ops.index(mark)
    point = ir.InsertionPoint.current.ref_operation
    end = ops.index(point) if point is not None else len(ops)
    for o in reversed(ops[start:end]):
        discard(o)


def loop_block(block: ir.Block, values: Sequence[Value], flags: Sequence[bool], size: int) -> list[Value]:
    """``block`` run once per batch index in a ``stablehlo.while`` (each flagged value
    sliced at the index, the others shared), its results stacked: the fallback when an
    op cannot be batched."""
    i32 = tensor_type([], ir.IntegerType.get_signless(32))
    terminator = list(block.operations)[-1]
    stacks = [hlo.zeros(tensor_type([size, *shape(v)], elem(v))) for v in terminator.operands]
    loop, cond, body = hlo.while_([hlo.splat(0, i32), *stacks])
    with ir.InsertionPoint(cond):
        hlo.return_([hlo.compare(cond.arguments[0], hlo.splat(size, i32), "LT")], "stablehlo.return")
    with ir.InsertionPoint(body):
        i, *acc = body.arguments
        zero = hlo.splat(0, i32)
        args = []
        for v, f in zip(values, flags):
            s = list(shape(v))
            args.append(hlo.reshape(hlo.dynamic_slice(v, [i, *[zero] * (len(s) - 1)], [1, *s[1:]]), s[1:])
                        if f else v)
        outs = Batcher(size).run(block, args)
        acc = [hlo.dynamic_update_slice(a, hlo.reshape(v, [1, *shape(v)]), [i, *[zero] * len(shape(v))])
               for a, v in zip(acc, outs)]
        hlo.return_([hlo.add(i, hlo.splat(1, i32)), *acc], "stablehlo.return")
    return list(loop.results)[1:]


__all__ = ["Batcher", "MissingBatchingRule", "elementwise", "leading_batch", "batch_function", "map_block",
           "loop_block", "discard", "identity", "jacobian_rows"]
