"""Adjoint rules of ``stablehlo.reduce_window`` (pooling, cumulative sums/products/maxima).

Notation: the operand padded and dilated as the op does it is ``xp``; window
``w`` reads ``xp[w * stride + k * window_dilation]`` for window offsets ``k``.

* add: ``d xp = T(ct)``, the transposed window sum. Where
  ``choices.pool_by_patches`` allows: ``window_sum`` of ``ct`` (``patches.py``:
  per stride phase, a sum of slices of ``ct``; a reshape for non-overlapping
  windows). Otherwise (long windows such as cumulative sums, base dilations): a
  reduce_window add of ``ct`` dilated by the strides and padded by the window
  span; then the padding is cut off and the base dilation undone (a strided
  slice).
* max / min: one winner per window, the first in row-major order among ties
  (TensorFlow's and XLA's select_and_scatter convention). Where
  ``choices.pool_by_patches`` allows, the winner's offset is an elementwise chain
  over the window's taps (strided slices of the operand; the first tap equal to
  the result wins) and ``ct`` goes back through ``window_sum``: a select per
  offset, no concatenated patches, two or three dispatches in all. Otherwise a
  variadic reduce_window carries the flat index of the winner next to the value
  and ``ct`` is scatter-added at those indices. Both work for overlapping
  windows, where IREE 3.13 cannot compile ``select_and_scatter``. In the CNN
  benchmark's gradient (two 3×3 stride-2 pools) a pool's adjoint went from ~23
  dispatches (concatenated patches, one window axis at a time) and 14 % of the
  dispatch time to 3 dispatches and 5 % (``benchmarks/profile.py``).
* mul: ``d x_i = sum over windows w containing i of ct_w * prod_{j in w, j != i} x_j``,
  exact with zeros: with ``P_w`` the product of the window's non-zero elements
  and ``z_w`` its number of zeros, ``d x = T(ct * P * [z == 0]) / x`` where
  ``x != 0`` and ``T(ct * P * [z == 1])`` where ``x == 0``.

The init value must be a constant (the identity in most of JAX's modules; a product window
multiplies by it, once and once per padded position).
"""
from __future__ import annotations

import itertools

import numpy as np

from ..ir import hlo
from ..lowering.choices import pool_by_patches
from ..ir.mlir import elem, ir, is_float, shape, tensor_type
from ..lowering.patches import Windows, col2im, pad_windows, phase_shape, tap_slices, unpad, window_slice, window_sum
from .indexing import is_selection
from .reductions import inputs_and_inits, reduce_kind
from ..transforms.forward import by_transposition, linear
from ..transforms.batching import Batcher, MissingBatchingRule, prepended, remake
from ..transforms.registry import adjoint, batching, missing, tangent


class Window:
    """The window attributes of a reduce_window op."""

    def __init__(self, op: ir.Operation) -> None:
        self.dims = hlo.read_i64_array(op, "window_dimensions")
        rank = len(self.dims)
        self.strides = hlo.read_i64s(op, "window_strides", [1] * rank)
        self.base = hlo.read_i64s(op, "base_dilations", [1] * rank)
        self.dilation = hlo.read_i64s(op, "window_dilations", [1] * rank)
        self.padding = hlo.read_padding(op, "padding", rank)

    def args(self) -> tuple:
        return self.dims, self.strides, self.padding, self.base, self.dilation

    def geometry(self) -> Windows:
        """The window geometry ``patches``/``col2im`` take (no base dilation)."""
        return Windows(self.dims, self.strides, self.padding, self.dilation)

    def padded(self, x_shape) -> list[int]:
        return [(d - 1) * b + 1 + lo + hi for d, b, (lo, hi) in zip(x_shape, self.base, self.padding)]


def _scalar_zero(v: ir.Value) -> ir.Value:
    return hlo.zeros(tensor_type([], elem(v)))


def transposed_window_sum(ct: ir.Value, x_shape, w: Window) -> ir.Value:
    """The adjoint of reduce_window add: x-shaped sum of ``ct`` over the windows covering each element."""
    zero, rank = _scalar_zero(ct), len(x_shape)
    xp = w.padded(x_shape)
    span = [(k - 1) * d + 1 for k, d in zip(w.dims, w.dilation)]
    high = [p - (o - 1) * s - 1 for p, o, s in zip(xp, shape(ct), w.strides)]
    spread = hlo.pad(ct, zero, [s - 1 for s in span], high, [s - 1 for s in w.strides])
    dxp = hlo.reduce_window(spread, zero, "add", w.dims, [1] * rank, [(0, 0)] * rank, [1] * rank, w.dilation)
    # Undo the forward pad(x, lo, hi, interior = base - 1).
    return unpad(dxp, w.padding, w.base)


def _size(v: ir.Value) -> int:
    n = 1
    for d in shape(v):
        n *= d
    return n


def _argwindow(x: ir.Value, init: ir.Value, ct: ir.Value, kind: str, w: Window) -> ir.Value:
    """ct scatter-added at each window's first max (min); index n means the padding won."""
    n, i32 = _size(x), ir.IntegerType.get_signless(32)
    index = hlo.reshape(hlo.iota([n], i32, 0), shape(x))
    _, winner = hlo.reduce_window_arg(x, index, init, hlo.splat(n, tensor_type([], i32)), kind, *w.args())
    # A spare slot at index n takes the windows won by padding; it is cut off below.
    flat = hlo.scatter(hlo.zeros(tensor_type([n + 1], elem(ct))), hlo.reshape(winner, [_size(ct), 1]),
                       hlo.reshape(ct, [_size(ct)]),
                       {"inserted_window_dims": [0], "scatter_dims_to_operand_dims": [0], "index_vector_dim": 1})
    return hlo.reshape(hlo.slice(flat, [0], [n], [1]), shape(x))


def _patch_winner(x: ir.Value, init: ir.Value, ct: ir.Value, geometry: Windows, y: ir.Value) -> ir.Value:
    """``ct`` to the first offset of each window whose tap equals the window's result ``y``
    (row-major order), back through ``window_sum``: the winner's index is an elementwise
    chain over the taps, and each phase of ``d x`` a sum of selects of slices."""
    taps, i32 = tap_slices(x, hlo.reshape(init, []), geometry), ir.IntegerType.get_signless(32)
    first = hlo.splat(len(taps), tensor_type(shape(y), i32))
    for number in reversed(range(len(taps))):
        first = hlo.select(hlo.compare(taps[number], y, "EQ"), hlo.splat(number, first.type), first)
    x_shape = shape(x)
    first = pad_windows(first, x_shape, geometry, hlo.splat(len(taps), tensor_type([], i32)))
    ct = pad_windows(ct, x_shape, geometry, _scalar_zero(ct))
    size = phase_shape(x_shape, geometry)
    zero = hlo.zeros(tensor_type(size, elem(ct)))

    def term(tap: int, start: list[int]) -> ir.Value:
        won = hlo.compare(window_slice(first, start, size), hlo.splat(tap, tensor_type(size, i32)), "EQ")
        return hlo.select(won, window_slice(ct, start, size), zero)
    return window_sum(term, x_shape, geometry, elem(ct))


def _spread(ct: ir.Value, x_shape, geometry: Windows) -> ir.Value:
    """The adjoint of a window sum: each window's ct to each of its offsets."""
    if geometry.disjoint:
        rank = len(x_shape)
        return col2im(hlo.broadcast_in_dim(ct, [geometry.taps, *shape(ct)], list(range(1, rank + 1))),
                      x_shape, geometry, 0)
    padded, size = pad_windows(ct, x_shape, geometry, _scalar_zero(ct)), phase_shape(x_shape, geometry)
    return window_sum(lambda tap, start: window_slice(padded, start, size), x_shape, geometry, elem(ct))


def _window_product(x: ir.Value, init: ir.Value, ct: ir.Value, w: Window) -> ir.Value:
    """d x of a product window (exact where x has zeros). The init value is a factor of every
    window, once and once more per padded position (reduce_window pads with it): the product of
    the nonzero elements is taken with the same init and padding (JAX's harness with init 0:
    the result is 0 whatever x is, and so is its gradient)."""
    zero, one = hlo.zeros(x.type), hlo.ones(x.type)
    is_zero = hlo.compare(x, zero, "EQ")
    zeros = hlo.reduce_window(hlo.select(is_zero, one, zero), _scalar_zero(x), "add", *w.args())
    nonzero = hlo.reduce_window(hlo.select(is_zero, one, x), hlo.ones(tensor_type([], elem(x))), "mul", *w.args())
    if hlo.scalar_constant(_through_reshapes(init)) != 1:
        # init^(1 + padded positions) per window: a window count's power (the same product with
        # this init as its own init made IREE 3.13 fail: "'stream.yield' op used resource not
        # listed in explicit captures", once the JVP was in the module too)
        size = hlo.like(float(np.prod(w.dims)) + 1.0, nonzero)
        inside = hlo.reduce_window(one, _scalar_zero(x), "add", *w.args())
        factor = hlo.broadcast_in_dim(hlo.reshape(init, []), shape(nonzero), [])
        nonzero = hlo.multiply(nonzero, hlo.binary("stablehlo.power", factor, hlo.subtract(size, inside)))
    weighted = hlo.multiply(ct, nonzero)
    none_zero = hlo.select(hlo.compare(zeros, hlo.zeros(zeros.type), "EQ"), weighted, hlo.zeros(ct.type))
    one_zero = hlo.select(hlo.compare(zeros, hlo.ones(zeros.type), "EQ"), weighted, hlo.zeros(ct.type))
    xs = shape(x)
    return hlo.select(is_zero, transposed_window_sum(one_zero, xs, w),
                      hlo.divide(transposed_window_sum(none_zero, xs, w), hlo.select(is_zero, one, x)))


def _through_reshapes(v: ir.Value) -> ir.Value:
    """``v`` before any broadcast, reshape or convert."""
    while isinstance(v, ir.OpResult) and v.owner.name in ("stablehlo.broadcast_in_dim", "stablehlo.reshape",
                                                          "stablehlo.convert"):
        v = v.owner.operands[0]
    return v


def is_constant(v: ir.Value) -> bool:
    """A constant, possibly broadcast, reshaped or converted (JAX's init values)."""
    v = _through_reshapes(v)
    return isinstance(v, ir.OpResult) and v.owner.name == "stablehlo.constant"


def _dynamic_window(x: ir.Value, init: ir.Value, ct: ir.Value, kind: str, w: Window) -> ir.Value:
    """add / max / min over an operand with run-time dimensions (a batch), each of which the
    window leaves alone (size, stride 1, no padding or dilation). Tap ``k`` of every window
    (``xp[o * stride + k * dilation]``) is a pad (negative edges crop) and a size-1 strided
    reduce_window; for max/min the first tap equal to the window's result wins (row-major
    order, as select_and_scatter), an elementwise chain as in ``_patch_winner``. ``ct`` (where
    tap ``k`` won) goes back by one interior/edge ``pad`` per tap. No slice or reshape needs a
    static size (IREE 3.13 also refuses the variadic reduce_window ``_argwindow`` uses here)."""
    xs, ys, rank = shape(x), shape(ct), len(shape(x))
    for i, n in enumerate(xs):
        if n == hlo.DYNAMIC and (w.dims[i], w.strides[i], tuple(w.padding[i]), w.base[i], w.dilation[i]) \
                != (1, 1, (0, 0), 1, 1):
            raise ValueError(f"reduce_window: a window along dimension {i} needs a static size")
    if any(b != 1 for b in w.base):
        raise ValueError("reduce_window: base dilation needs static sizes")
    taps = list(itertools.product(*[range(d) for d in w.dims]))
    offsets = [[kk * d - lo for kk, d, (lo, _) in zip(k, w.dilation, w.padding)] for k in taps]
    first = None
    if kind != "add":
        pad_value, i32 = hlo.reshape(init, []), ir.IntegerType.get_signless(32)
        y = hlo.reduce_window(x, pad_value, kind, w.dims, w.strides, w.padding, w.base, w.dilation)
        ones = [1] * rank
        first = hlo.like(len(taps), hlo.convert(ct, i32))
        for number in reversed(range(len(taps))):
            off = offsets[number]
            high = [0 if n == hlo.DYNAMIC else (o - 1) * s + 1 - n + f
                    for n, o, s, f in zip(xs, ys, w.strides, off)]
            moved = hlo.pad_or_crop(x, pad_value, [-f for f in off], high, [0] * rank)
            tap = hlo.reduce_window(moved, pad_value, kind, ones, w.strides, [(0, 0)] * rank, ones, ones)
            first = hlo.select(hlo.compare(tap, y, "EQ"), hlo.like(number, first), first)
    zero, total = _scalar_zero(ct), None
    for number, off in enumerate(offsets):
        term = ct if first is None else hlo.select(hlo.compare(first, hlo.like(number, first), "EQ"), ct,
                                                   hlo.like(0, ct))
        high = [0 if n == hlo.DYNAMIC else n - f - (o - 1) * s - 1 for n, o, s, f in zip(xs, ys, w.strides, off)]
        placed = hlo.pad_or_crop(term, zero, off, high, [s - 1 for s in w.strides])
        total = placed if total is None else hlo.add(total, placed)
    return total


# A scalar body evaluated in Python (float64) to recognise what it computes, whatever ops
# JAX spelled it with (logaddexp: max + log1p(exp(-|a - b|)), with a NaN guard).
_SCALAR_OPS = {
    "stablehlo.add": np.add, "stablehlo.subtract": np.subtract, "stablehlo.multiply": np.multiply,
    "stablehlo.divide": np.divide, "stablehlo.maximum": np.maximum, "stablehlo.minimum": np.minimum,
    "stablehlo.negate": np.negative, "stablehlo.abs": np.abs, "stablehlo.exponential": np.exp,
    "stablehlo.log": np.log, "stablehlo.log_plus_one": np.log1p, "stablehlo.exponential_minus_one": np.expm1,
    "stablehlo.select": lambda p, a, b: a if p else b,
}
_DIRECTIONS = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal, "GT": np.greater,
               "GE": np.greater_equal}


def _evaluate_body(block, args: list[float]) -> list[float] | None:
    """The block's results for scalar ``args``; None where it holds an op not listed above."""
    env = dict(zip(block.arguments, args))
    ops = [o.operation for o in block.operations]
    with np.errstate(all="ignore"):
        for inner in ops[:-1]:
            if inner.name == "stablehlo.constant":
                value = hlo.scalar_constant(inner.results[0])
                if value is None:
                    return None
                env[inner.results[0]] = np.float64(value)
                continue
            if any(v not in env for v in inner.operands):
                return None
            operands = [env[v] for v in inner.operands]
            if inner.name == "stablehlo.compare":
                env[inner.results[0]] = bool(_DIRECTIONS[hlo.read_direction(inner)](*operands))
            elif inner.name in _SCALAR_OPS:
                env[inner.results[0]] = _SCALAR_OPS[inner.name](*operands)
            else:
                return None
    returned = list(ops[-1].operands)
    return [env[v] for v in returned] if all(v in env for v in returned) else None


def is_logaddexp(op: ir.Operation) -> bool:
    """Whether ``op``'s body computes log(exp(a) + exp(b)) (JAX's cumlogsumexp) with a -inf
    init value, checked at sample points."""
    if len(op.operands) != 2 or hlo.scalar_constant(_through_reshapes(op.operands[1])) != -np.inf:
        return False
    block = op.regions[0].blocks[0]
    for a, b in ((0.3, -1.2), (2.0, 2.5), (-3.0, 1.0), (-np.inf, 0.7)):
        got = _evaluate_body(block, [np.float64(a), np.float64(b)])
        if got is None or len(got) != 1 or not np.isclose(got[0], np.logaddexp(a, b), rtol=1e-12):
            return False
    return True


def _window_logsumexp(x: ir.Value, y: ir.Value, ct: ir.Value, w: Window) -> ir.Value:
    """y = log(window_sum(exp(x))): d x_i = exp(x_i) T(ct exp(-y)), shifted by the largest x (so
    exp(x - m) <= 1); windows that hold only padding (y = -inf) give nothing."""
    rank = len(shape(x))
    m = hlo.reduce(x, range(rank), "max")
    m = hlo.select(hlo.compare(m, hlo.like(-np.inf, m), "EQ"), hlo.like(0, m), m)
    weight = hlo.unary("stablehlo.exponential", hlo.subtract(x, hlo.broadcast_in_dim(m, shape(x), [])))
    empty = hlo.compare(y, hlo.like(-np.inf, y), "EQ")
    share = hlo.multiply(ct, hlo.unary("stablehlo.exponential", hlo.subtract(hlo.broadcast_in_dim(m, shape(y), []), y)))
    share = hlo.select(empty, hlo.like(0, share), share)
    return hlo.multiply(weight, transposed_window_sum(share, shape(x), w))


def _selection_key(op: ir.Operation) -> tuple[int, str] | None:
    """(k, "max"/"min") when ``op``'s body keeps, for every operand, the one of each pair that
    a comparison of operand ``k``'s pair picks (JAX's ``select_and_gather_add``: the values
    at each window's maximum or minimum of the keys); None for any other body."""
    n = len(op.results)
    if not is_selection(op, n):
        return None
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    for k, v in enumerate(list(block.operations)[-1].operation.operands):
        owner = v.owner if isinstance(v, ir.OpResult) else None
        if owner is None or owner.name != "stablehlo.select":
            continue
        pred, picked = owner.operands[0], owner.operands[1]
        tests = [pred.owner] if isinstance(pred, ir.OpResult) else []
        if tests and tests[0].name == "stablehlo.or":  # a NaN or tie-break clause beside the comparison
            tests = [w.owner for w in tests[0].operands if isinstance(w, ir.OpResult)]
        for test in tests:
            if test.name == "stablehlo.compare" and set(test.operands) == {args[k], args[n + k]}:
                direction = hlo.read_direction(test)
                if direction in ("GT", "GE", "LT", "LE"):
                    greater = direction in ("GT", "GE")
                    return k, "max" if greater == (picked == test.operands[0]) else "min"
    return None


def _selection_window(op, cts) -> tuple:
    """d x_j = ct_j at the window's first maximum (minimum) of the key operand; the init values
    and integer operands get nothing (ties between equal keys: the first, as for max pooling)."""
    found = _selection_key(op)
    if found is None or any(not is_constant(v) for v in list(op.operands)[len(op.results):]):
        raise missing(op, " with this body or a non-constant init value")
    k, kind = found
    n, w = len(op.results), Window(op)
    key, init = op.operands[k], op.operands[n + k]
    if not hlo.is_static(key):
        raise missing(op, " (a selecting body) over run-time dimensions")
    grads = [_argwindow(key, init, ct, kind, w) if ct is not None and is_float(x) else None
             for x, ct in zip(list(op.operands)[:n], cts)]
    return (*grads, *[None] * n)


@adjoint("stablehlo.reduce_window")
def _reduce_window(op, cts):
    """add: d x = T(ct); max/min: ct to each window's first winner; mul: see the module docstring;
    several operands whose body selects by one of them: ``_selection_window``"""
    if len(op.operands) > 2:
        return _selection_window(op, cts)
    kind = reduce_kind(op)
    x, init = op.operands
    if kind is None and hlo.is_static(x) and is_logaddexp(op):
        return _window_logsumexp(x, op.results[0], cts[0], Window(op)), None
    if kind is None or not is_constant(init):
        raise missing(op, " with this body or a non-constant init value")
    (ct,) = cts
    w = Window(op)
    if not hlo.is_static(x) and kind in ("add", "max", "min"):
        return _dynamic_window(x, init, ct, kind, w), None
    if kind == "add":
        if pool_by_patches(w.dims, w.base):
            return _spread(ct, shape(x), w.geometry()), None
        return transposed_window_sum(ct, shape(x), w), None
    if kind == "mul":
        return _window_product(x, init, ct, w), None
    if pool_by_patches(w.dims, w.base):
        return _patch_winner(x, init, ct, w.geometry(), op.results[0]), None
    return _argwindow(x, init, ct, kind, w), None


@tangent("stablehlo.reduce_window")
def _reduce_window_tangent(op, ts):
    """a window sum is linear: the window sum of the tangents; max/min/product: through the adjoint"""
    return (linear if reduce_kind(op) == "add" else by_transposition)(op, ts)


# ----- batching ------------------------------------------------------------------------------

_WINDOW_ONES = ("window_dimensions", "window_strides", "base_dilations", "window_dilations")


def _window_attrs(op, rank: int) -> dict:
    attrs = {}
    for name in _WINDOW_ONES:
        attrs.update(prepended(op, name, 1))
    if "padding" in op.attributes:
        attrs["padding"] = hlo.padding_attr([(0, 0), *hlo.read_padding(op, "padding", rank)])
    return attrs


@batching("stablehlo.reduce_window")
def _reduce_window_batched(b: Batcher, op):
    xs, inits = inputs_and_inits(b, op)
    attrs = _window_attrs(op, len(shape(op.operands[0])))
    return b.mark(remake(op, [*xs, *inits], [b.type(r) for r in op.results], attrs).results)


@batching("stablehlo.select_and_scatter")
def _select_and_scatter_batched(b: Batcher, op):
    x, source, init = b.operands(op)
    if init in b.batched:
        raise MissingBatchingRule(op, "batched initial value")
    attrs = _window_attrs(op, len(shape(op.operands[0])))
    return b.mark(remake(op, [b.lift(x), b.lift(source), init], [b.type(op.result)], attrs).results)
