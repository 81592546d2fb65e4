"""Batching: a block's ops rewritten over a leading batch dimension (``vmap``, TF's ``pfor``).

:class:`Batcher` walks a block's ops in order and emits, at the insertion point, the same
computation over a batch of ``size``: a value either carries the batch as its leading
dimension ("batched") or is shared by every batch element ("unbatched"). An op none of
whose inputs (operands, or values its regions capture) is batched is copied as it is;
any other op goes through its batching rule (``@batching`` below), which reads its
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

import numpy as np

from . import hlo
from .backprop import op_inputs
from .mlir import elem, ir, shape, tensor_type
from .regions import discard, lookup_function, module_of, nested_ops

Value = ir.Value


class MissingBatchingRule(LookupError):
    """An op the batching pass has no rule for (the caller may fall back to a loop)."""

    def __init__(self, op: ir.Operation, detail: str = ""):
        super().__init__(f"no batching rule for '{op.name}'{': ' + detail if detail else ''} (at {op.location})")
        self.op_name = op.name


BatchingRule = Callable[["Batcher", ir.Operation], Sequence[Value]]
BATCHING_RULES: dict[str, BatchingRule] = {}


def batching(*names: str) -> Callable[[BatchingRule], BatchingRule]:
    """Register the decorated function as the batching rule of ``names``."""
    def register(rule: BatchingRule) -> BatchingRule:
        for name in names:
            if name in BATCHING_RULES:
                raise KeyError(f"a batching rule for {name!r} is already registered")
            BATCHING_RULES[name] = rule
        return rule
    return register


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


def _plus1(values: Sequence[int]) -> list[int]:
    return [v + 1 for v in values]


def _i64s(op: ir.Operation, name: str, first: int) -> dict:
    return {name: hlo.i64_array([first, *hlo.read_i64_array(op, name)])} if name in op.attributes else {}


# ----- elementwise ------------------------------------------------------------------

ELEMENTWISE = [f"stablehlo.{n}" for n in (
    "abs add and atan2 cbrt ceil clamp compare complex convert cosine count_leading_zeros divide "
    "exponential exponential_minus_one floor imag is_finite log log_plus_one logistic maximum minimum "
    "multiply negate not or popcnt power real reduce_precision remainder round_nearest_afz "
    "round_nearest_even rsqrt select shift_left shift_right_arithmetic shift_right_logical sign sine "
    "sqrt subtract tan tanh xor").split()] + [f"chlo.{n}" for n in (
        "acos acosh asin asinh atan atanh bessel_i1e conj cosh digamma erf erf_inv erfc is_inf "
        "is_neg_inf is_pos_inf lgamma next_after polygamma sinh square tan zeta").split()]


@batching(*ELEMENTWISE, "stablehlo.bitcast_convert")
def _elementwise(b: Batcher, op):
    """every operand broadcast to the batched result shape (scalar operands of clamp/select too)"""
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
            xs.append(hlo.broadcast_in_dim(x, full, ([0] if batched else []) + (_plus1(range(len(s))))))
    new = remake(op, xs, [b.type(r) for r in op.results])
    return b.mark(new.results)


@batching("stablehlo.optimization_barrier")
def _barrier(b: Batcher, op):
    """each value keeps its own batching"""
    xs = b.operands(op)
    new = remake(op, xs, [x.type for x in xs])
    return [b.mark([r])[0] if x in b.batched else r for x, r in zip(xs, new.results)]


# ----- structure --------------------------------------------------------------------

@batching("stablehlo.broadcast_in_dim")
def _broadcast_in_dim(b: Batcher, op):
    (x,) = b.operands(op)
    dims = [0, *_plus1(hlo.read_i64_array(op, "broadcast_dimensions"))]
    return b.mark([hlo.broadcast_in_dim(x, [b.size, *shape(op.result)], dims)])


@batching("stablehlo.reshape")
def _reshape(b: Batcher, op):
    (x,) = b.operands(op)
    return b.mark([hlo.reshape(x, [b.size, *shape(op.result)])])


@batching("stablehlo.transpose")
def _transpose(b: Batcher, op):
    (x,) = b.operands(op)
    return b.mark([hlo.transpose(x, [0, *_plus1(hlo.read_i64_array(op, "permutation"))])])


@batching("stablehlo.reverse")
def _reverse(b: Batcher, op):
    (x,) = b.operands(op)
    return b.mark([hlo.reverse(x, _plus1(hlo.read_i64_array(op, "dimensions")))])


@batching("stablehlo.slice")
def _slice(b: Batcher, op):
    (x,) = b.operands(op)
    attrs = {**_i64s(op, "start_indices", 0), **_i64s(op, "limit_indices", b.size), **_i64s(op, "strides", 1)}
    return b.mark(remake(op, [x], [b.type(op.result)], attrs).results)


@batching("stablehlo.pad")
def _pad(b: Batcher, op):
    x, value = b.operands(op)
    if value in b.batched:
        raise MissingBatchingRule(op, "batched padding value")
    attrs = {**_i64s(op, "edge_padding_low", 0), **_i64s(op, "edge_padding_high", 0),
             **_i64s(op, "interior_padding", 0)}
    return b.mark(remake(op, [x, value], [b.type(op.result)], attrs).results)


@batching("stablehlo.concatenate")
def _concatenate(b: Batcher, op):
    return b.mark([hlo.concatenate(b.operands(op, lift=True), hlo.read_int(op, "dimension") + 1)])


# ----- contractions -----------------------------------------------------------------

def _moved_to_front(x: Value, position: int) -> Value:
    if position == 0:
        return x
    rank = len(shape(x))
    return hlo.transpose(x, [position, *[d for d in range(rank) if d != position]])


@batching("stablehlo.dot_general", "stablehlo.dot")
def _dot_general(b: Batcher, op):
    """both batched: a new batch dimension; one side: a new free dimension of that side,
    computed with that side first so the batch comes out first; the rows of an identity
    contracted with a shared operand: that operand, relabelled (no product at all)"""
    lhs, rhs = b.operands(op)
    lb, rb, lc, rc = hlo.dot_dimensions(op)
    el = elem(op.result)
    if lhs in b.batched and rhs in b.batched:
        return b.mark([_dot(lhs, rhs, [0, *_plus1(lb)], [0, *_plus1(rb)], _plus1(lc), _plus1(rc), el)])
    swapped = rhs in b.batched
    if swapped:  # rhs · lhs, then the result's free dimensions back in lhs, rhs order
        lhs, rhs, lb, rb, lc, rc = rhs, lhs, rb, lb, rc, lc
    free = [d for d in range(len(shape(lhs)) - 1) if d not in lb and d not in lc]
    relabelled = _identity_contraction(b, lhs, rhs, lb, lc, rc, free)
    if relabelled is not None:
        out = relabelled
    else:
        out = _moved_to_front(_dot(lhs, rhs, _plus1(lb), rb, _plus1(lc), rc, el), len(lb))
    if swapped:
        nb, nl = len(lb), len(free)  # out: B, batch, (B's side) free, other free
        s = shape(out)
        perm = [0, *range(1, nb + 1), *range(nb + 1 + nl, len(s)), *range(nb + 1, nb + 1 + nl)]
        out = _permuted(out, perm)
    return b.mark([out])


def _dot(lhs: Value, rhs: Value, lb, rb, lc, rc, element) -> Value:
    """``dot_general`` with its free dimensions of size 1 reshaped away first (IREE picks
    its matmul path for the squeezed form; the reshapes back are free)."""
    def squeezed(x, batch, contract):
        s = shape(x)
        keep = [d for d in range(len(s)) if s[d] != 1 or d in batch or d in contract]
        if len(keep) == len(s):
            return x, batch, contract
        new = {d: i for i, d in enumerate(keep)}
        return hlo.reshape(x, [s[d] for d in keep]), [new[d] for d in batch], [new[d] for d in contract]
    full = _dot_shape(lhs, rhs, lb, rb, lc, rc)
    lhs, lb, lc = squeezed(lhs, lb, lc)
    rhs, rb, rc = squeezed(rhs, rb, rc)
    out = hlo.dot_general(lhs, rhs, lb, rb, lc, rc, element)
    return out if shape(out) == full else hlo.reshape(out, full)


def _dot_shape(lhs: Value, rhs: Value, lb, rb, lc, rc) -> tuple[int, ...]:
    sa, sb = shape(lhs), shape(rhs)
    return tuple([sa[i] for i in lb] + [d for i, d in enumerate(sa) if i not in lb and i not in lc]
                 + [d for i, d in enumerate(sb) if i not in rb and i not in rc])


def _permuted(x: Value, perm: Sequence[int]) -> Value:
    """A transpose, or a reshape when it only moves dimensions of size 1."""
    s = shape(x)
    if list(perm) == list(range(len(s))):
        return x
    if [p for p in perm if s[p] != 1] == [d for d in range(len(s)) if s[d] != 1]:
        return hlo.reshape(x, [s[p] for p in perm])
    return hlo.transpose(x, perm)


def _diagonal_scale(v: Value) -> Value | bool | None:
    """What scales the one-hot rows of ``v``: ``True`` when ``v`` is (a reshape of)
    ``select(iota₀ == iota₁, 1, 0)`` (row b one-hot at b), a value ``u`` (a scalar or an
    ``n``-vector) when it is that identity times ``u`` along either axis, negated or
    multiplied further (row b is ``u[b]`` at b: ``diag(u)``); ``None`` for anything else."""
    while isinstance(v, ir.OpResult) and v.owner.name == "stablehlo.reshape":
        v = v.owner.operands[0]
    if not isinstance(v, ir.OpResult) or len(shape(v)) != 2:
        return None
    op = v.owner
    if op.name == "stablehlo.negate":
        inner = _diagonal_scale(op.operands[0])
        return None if inner is None else hlo.negate(_scale_value(inner, v))
    if op.name == "stablehlo.multiply":
        a, c = op.operands
        for diag, other in ((a, c), (c, a)):
            factor = _axis_vector(other, shape(v)[0])
            inner = None if factor is None else _diagonal_scale(diag)
            if inner is not None:
                return factor if inner is True else hlo.multiply(_scale_value(inner, v), _scale_value(factor, v))
        return None
    if op.name != "stablehlo.select":
        return None
    pred, one, zero = op.operands
    if _splat(one) != 1 or _splat(zero) != 0:
        return None
    if not isinstance(pred, ir.OpResult) or pred.owner.name != "stablehlo.compare" \
            or hlo.read_direction(pred.owner) != "EQ":
        return None
    iotas = [a.owner for a in pred.owner.operands if isinstance(a, ir.OpResult) and a.owner.name == "stablehlo.iota"]
    return True if len(iotas) == 2 and sorted(hlo.read_int(i, "iota_dimension") for i in iotas) == [0, 1] else None


def _axis_vector(v: Value, n: int) -> Value | None:
    """``u`` when the ``n × n`` ``v`` is a splat constant or ``broadcast_in_dim`` of a scalar
    or of an ``n``-vector along one axis (on a diagonal, both axes give ``u[b]`` at b)."""
    value = _splat(v)
    if value is not None:
        return hlo.splat(value, ir.RankedTensorType.get([], elem(v)))
    if not isinstance(v, ir.OpResult) or v.owner.name != "stablehlo.broadcast_in_dim":
        return None
    u = v.owner.operands[0]
    dims = hlo.read_i64_array(v.owner, "broadcast_dimensions")
    if not dims and shape(u) == ():
        return u
    return u if len(dims) == 1 and shape(u) == (n,) else None


def _scale_value(scale: Value | bool, like: Value) -> Value:
    """A scale from :func:`_diagonal_scale` as an ``n``-vector (``True``: ones)."""
    n = shape(like)[0]
    if scale is True:
        return hlo.ones(ir.RankedTensorType.get([n], elem(like)))
    return scale if shape(scale) == (n,) else hlo.broadcast_in_dim(scale, [n], [])


def _splat(v: Value) -> float | None:
    """The value of a splat float constant, None for anything else."""
    if not isinstance(v, ir.OpResult) or v.owner.name != "stablehlo.constant":
        return None
    dense = ir.DenseElementsAttr(v.owner.attributes["value"])
    return getattr(dense.get_splat_value(), "value", None) if dense.is_splat else None


def _identity_contraction(b: Batcher, rows: Value, other: Value, rb, rc, oc, free) -> Value | None:
    """``dot(u_k e_k, other)`` for every one-hot row ``e_k`` over ``rows``' element dims: the
    slice of ``other`` at k along its contracting dims, times ``u_k``. ``None`` unless ``rows``
    is a scaled identity (:func:`_diagonal_scale`), unbatched ``other``, no batch dims, and
    every free dim of the rows has size 1."""
    s = shape(rows)[1:]
    if rb or any(s[d] != 1 for d in free) or int(np.prod(s)) != b.size:
        return None
    scale = _diagonal_scale(rows)
    if scale is None:
        return None
    # The rows' flat index runs over their contracting dims in the rows' order.
    order = sorted(range(len(rc)), key=lambda i: rc[i])
    contracted = [oc[i] for i in order]
    ofree = [d for d in range(len(shape(other))) if d not in oc]
    moved = hlo.transpose(other, [*contracted, *ofree]) if [*contracted, *ofree] != list(range(len(shape(other)))) \
        else other
    so = shape(other)
    out_shape = [b.size, *[1] * len(free), *[so[d] for d in ofree]]
    out = hlo.reshape(moved, out_shape)
    if scale is True:
        return out
    return hlo.multiply(out, hlo.broadcast_in_dim(_scale_value(scale, rows), out_shape, [0]))


def _merged(x: Value, into: int) -> Value:
    """Batched ``x`` with its batch merged into dimension ``into`` (of the unbatched
    layout), batch-major."""
    s = list(shape(x))
    rank = len(s)
    perm = [*range(1, into + 1), 0, *range(into + 1, rank)]
    moved = hlo.transpose(x, perm)
    merged = s[1:]
    merged[into] *= s[0]
    return hlo.reshape(moved, merged)


def _split(y: Value, at: int, size: int) -> Value:
    """``y`` with dimension ``at`` (batch-major, ``size`` × rest) split and the batch moved
    to the front."""
    s = list(shape(y))
    split = [*s[:at], size, s[at] // size, *s[at + 1:]]
    return _moved_to_front(hlo.reshape(y, split), at)


@batching("stablehlo.convolution")
def _convolution(b: Batcher, op):
    """lhs batched: folded into the batch dimension; rhs batched: into the output features;
    both: a grouped convolution with ``size`` times the groups"""
    lhs, rhs = b.operands(op)
    (lb, lf, *_), (ro, ri, *_), (ob, of, *_) = _conv_layout(op)
    groups, batch_groups = hlo.read_int(op, "feature_group_count"), hlo.read_int(op, "batch_group_count")
    out_type = shape(op.result)
    if batch_groups != 1:
        raise MissingBatchingRule(op, "batch_group_count > 1")
    attrs = {}
    if lhs in b.batched and rhs in b.batched:
        lhs, rhs = _merged(lhs, lf), _merged(rhs, ro)
        attrs["feature_group_count"] = hlo.i64(groups * b.size)
        at = of
    elif lhs in b.batched:
        lhs, at = _merged(lhs, lb), ob
    else:
        if groups != 1:
            lhs = b.lift(lhs)
            return _convolution(b, op)
        rhs, at = _merged(rhs, ro), of
    merged = list(out_type)
    merged[at] *= b.size
    y = remake(op, [lhs, rhs], [tensor_type(merged, elem(op.result))], attrs).result
    return b.mark([_split(y, at, b.size)])


def _conv_layout(op: ir.Operation) -> list[list[int]]:
    """(batch, feature, ...), (output feature, input feature, ...), (batch, feature, ...)."""
    text = str(op.attributes["dimension_numbers"])
    if "raw" in text:
        fields = hlo.read_struct(op, "dimension_numbers")
        return [[fields["input_batch_dimension"], fields["input_feature_dimension"]],
                [fields["kernel_output_feature_dimension"], fields["kernel_input_feature_dimension"]],
                [fields["output_batch_dimension"], fields["output_feature_dimension"]]]
    lhs, rhs, out = hlo.read_conv_layouts(op)
    return [[lhs.index("b"), lhs.index("f")], [rhs.index("o"), rhs.index("i")], [out.index("b"), out.index("f")]]


# ----- reductions and windows ------------------------------------------------------

def _inputs_and_inits(b: Batcher, op) -> tuple[list[Value], list[Value]]:
    n = len(op.operands) // 2
    xs = b.operands(op)
    if any(v in b.batched for v in xs[n:]):
        raise MissingBatchingRule(op, "batched initial values")
    return [b.lift(x) for x in xs[:n]], xs[n:]


@batching("stablehlo.reduce")
def _reduce(b: Batcher, op):
    xs, inits = _inputs_and_inits(b, op)
    attrs = {"dimensions": hlo.i64_array(_plus1(hlo.read_i64_array(op, "dimensions")))}
    return b.mark(remake(op, [*xs, *inits], [b.type(r) for r in op.results], attrs).results)


_WINDOW_ONES = ("window_dimensions", "window_strides", "base_dilations", "window_dilations")


def _window_attrs(op, rank: int) -> dict:
    attrs = {}
    for name in _WINDOW_ONES:
        attrs.update(_i64s(op, name, 1))
    if "padding" in op.attributes:
        attrs["padding"] = hlo.padding_attr([(0, 0), *hlo.read_padding(op, "padding", rank)])
    return attrs


@batching("stablehlo.reduce_window")
def _reduce_window(b: Batcher, op):
    xs, inits = _inputs_and_inits(b, op)
    attrs = _window_attrs(op, len(shape(op.operands[0])))
    return b.mark(remake(op, [*xs, *inits], [b.type(r) for r in op.results], attrs).results)


@batching("stablehlo.select_and_scatter")
def _select_and_scatter(b: Batcher, op):
    x, source, init = b.operands(op)
    if init in b.batched:
        raise MissingBatchingRule(op, "batched initial value")
    attrs = _window_attrs(op, len(shape(op.operands[0])))
    return b.mark(remake(op, [b.lift(x), b.lift(source), init], [b.type(op.result)], attrs).results)


@batching("stablehlo.sort")
def _sort(b: Batcher, op):
    xs = b.operands(op, lift=True)
    attrs = {"dimension": hlo.i64(hlo.read_int(op, "dimension") + 1)}
    return b.mark(remake(op, xs, [b.type(r) for r in op.results], attrs).results)


@batching("stablehlo.cholesky", "stablehlo.triangular_solve", "stablehlo.fft", "chlo.top_k")
def _leading_batch(b: Batcher, op):
    """ops that already treat their leading dimensions as a batch"""
    return b.mark(remake(op, b.operands(op, lift=True), [b.type(r) for r in op.results]).results)


# ----- indexing ----------------------------------------------------------------------

@batching("stablehlo.gather")
def _gather(b: Batcher, op):
    """shared operand: the batch is one more batch dimension of the indices; batched
    operand: an operand batching dimension paired with the indices' first"""
    x, indices = b.operands(op)
    dims = hlo.read_struct(op, "dimension_numbers")
    sizes = hlo.read_i64_array(op, "slice_sizes")
    new = {"offset_dims": _plus1(dims.get("offset_dims", [])), "index_vector_dim": dims["index_vector_dim"] + 1,
           "start_indices_batching_dims": _plus1(dims.get("start_indices_batching_dims", []))}
    indices = b.lift(indices)
    if x in b.batched:
        new.update(collapsed_slice_dims=_plus1(dims.get("collapsed_slice_dims", [])),
                   operand_batching_dims=[0, *_plus1(dims.get("operand_batching_dims", []))],
                   start_index_map=_plus1(dims.get("start_index_map", [])))
        new["start_indices_batching_dims"] = [0, *new["start_indices_batching_dims"]]
        sizes = [1, *sizes]
    else:
        new.update({k: dims.get(k, []) for k in ("collapsed_slice_dims", "operand_batching_dims", "start_index_map")})
    return b.mark([hlo.gather(x, indices, new, sizes)])


@batching("stablehlo.scatter")
def _scatter(b: Batcher, op):
    """every operand batched; an input batching dimension paired with the indices' first"""
    n = (len(op.operands) - 1) // 2
    xs = b.operands(op, lift=True)
    dims = hlo.read_struct(op, "scatter_dimension_numbers")
    new = {"update_window_dims": _plus1(dims.get("update_window_dims", [])),
           "inserted_window_dims": _plus1(dims.get("inserted_window_dims", [])),
           "input_batching_dims": [0, *_plus1(dims.get("input_batching_dims", []))],
           "scatter_indices_batching_dims": [0, *_plus1(dims.get("scatter_indices_batching_dims", []))],
           "scatter_dims_to_operand_dims": _plus1(dims.get("scatter_dims_to_operand_dims", [])),
           "index_vector_dim": dims["index_vector_dim"] + 1}
    attrs = {"scatter_dimension_numbers": hlo.struct_attr("scatter", new, hlo.SCATTER_FIELDS)}
    return b.mark(remake(op, xs, [b.type(r) for r in op.results[:n]], attrs).results)


def _index_vector(b: Batcher, starts: Sequence[Value]) -> Value:
    """Scalar start indices as a batched ``[size, k]`` index tensor (one integer type)."""
    element = elem(starts[0])
    cols = [hlo.reshape(b.lift(hlo.convert(s, element) if elem(s) != element else s), [b.size, 1])
            for s in starts]
    return hlo.concatenate(cols, 1)


@batching("stablehlo.dynamic_slice")
def _dynamic_slice(b: Batcher, op):
    """shared starts: one more (full) dimension; batched starts: a gather (which clamps
    the same way)"""
    x, *starts = b.operands(op)
    sizes = hlo.read_i64_array(op, "slice_sizes")
    if not any(s in b.batched for s in starts):
        zero = hlo.splat(0, starts[0].type)
        return b.mark([hlo.dynamic_slice(x, [zero, *starts], [b.size, *sizes])])
    rank = len(sizes)
    dims = {"offset_dims": list(range(1, rank + 1)), "operand_batching_dims": [0],
            "start_indices_batching_dims": [0], "start_index_map": list(range(1, rank + 1)),
            "index_vector_dim": 1}
    return b.mark([hlo.gather(b.lift(x), _index_vector(b, starts), dims, [1, *sizes])])


@batching("stablehlo.dynamic_update_slice")
def _dynamic_update_slice(b: Batcher, op):
    """shared starts: one more (full) dimension"""
    x, update, *starts = b.operands(op)
    if any(s in b.batched for s in starts):
        # The scatter this would be does not compile in IREE 3.13 ("expected indices to be
        # equal to batch rank"): callers fall back to a loop.
        raise MissingBatchingRule(op, "batched start indices")
    zero = hlo.splat(0, starts[0].type)
    return b.mark([hlo.dynamic_update_slice(b.lift(x), b.lift(update), [zero, *starts])])


# ----- control flow ------------------------------------------------------------------

def _select_batched(pred: Value, on_true: Value, on_false: Value) -> Value:
    """``select`` by a ``[size]`` predicate over batched values of any rank."""
    s = shape(on_true)
    if len(s) > 1:
        pred = hlo.broadcast_in_dim(pred, s, [0])
    return hlo.select(pred, on_true, on_false)


@batching("stablehlo.while")
def _while(b: Batcher, op):
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


def _branches(b: Batcher, op, make) -> list[Value]:
    blocks = [region.blocks[0] for region in op.regions]
    flags = [any(col) for col in zip(*b.taint(blocks, [[]] * len(blocks)))]
    new, new_blocks = make([b.type(r) if f else r.type for r, f in zip(op.results, flags)])
    for block, new_block in zip(blocks, new_blocks):
        with ir.InsertionPoint(new_block):
            outs = b.run(block, [])
            hlo.return_([b.lift(v) if f else v for v, f in zip(outs, flags)], "stablehlo.return")
    return [b.mark([r])[0] if f else r for r, f in zip(new.results, flags)]


def _every_branch(b: Batcher, op, index: Value) -> list[Value]:
    """Each branch run here; result k from branch ``index`` (the last one when out of range)."""
    outs = [[b.lift(v) for v in b.run(region.blocks[0], [])] for region in op.regions]
    results = outs[-1]
    for k in range(len(outs) - 2, -1, -1):
        hit = hlo.compare(index, hlo.splat(k, index.type), "EQ")
        results = [_select_batched(hit, v, r) for v, r in zip(outs[k], results)]
    return b.mark(results)


@batching("stablehlo.case")
def _case(b: Batcher, op):
    """shared index: the same case over batched branches; batched index: every branch, then select"""
    index = b.get(op.operands[0])
    if index in b.batched:
        return _every_branch(b, op, index)
    return _branches(b, op, lambda types: hlo.case(index, types, len(op.regions)))


@batching("stablehlo.if")
def _if(b: Batcher, op):
    """shared predicate: the same if; batched: both branches, then select"""
    pred = b.get(op.operands[0])
    if pred in b.batched:
        i32 = ir.IntegerType.get_signless(32)
        index = hlo.select(pred, hlo.splat(0, tensor_type([b.size], i32)), hlo.splat(1, tensor_type([b.size], i32)))
        return _every_branch(b, op, index)
    return _branches(b, op, lambda types: hlo.if_(pred, types))


@batching("func.call")
def _call(b: Batcher, op):
    """the callee's body, batched here"""
    callee = lookup_function(op, ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
    return b.run(callee.regions[0].blocks[0], b.operands(op))


@batching("stablehlo.composite")
def _composite(b: Batcher, op):
    """the same composite over every operand batched, its functions batched alike"""
    xs = b.operands(op, lift=True)
    attrs = {"decomposition": _batched_function(op, ir.FlatSymbolRefAttr(op.attributes["decomposition"]).value,
                                                b.size)}
    if "composite_attributes" in op.attributes:
        inner = ir.DictAttr(op.attributes["composite_attributes"])
        fields = {}
        for k in range(len(inner)):
            named = inner[k]
            value = named.attr
            if str(value).startswith("@"):  # a function of the operands: batched alike
                value = _batched_function(op, ir.FlatSymbolRefAttr(value).value, b.size)
            fields[named.name] = value
        attrs["composite_attributes"] = ir.DictAttr.get(fields)
    return b.mark(remake(op, xs, [b.type(r) for r in op.results], attrs).results)


def _batched_function(anchor: ir.Operation, name: str, size: int) -> ir.Attribute:
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


__all__ = ["Batcher", "MissingBatchingRule", "BATCHING_RULES", "batching", "batch_function", "map_block",
           "loop_block", "discard", "identity", "jacobian_rows"]
