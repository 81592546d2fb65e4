"""Large floating-point sums as blocked sums, so that their error does not grow with their size.

IREE 3.13 reduces sequentially (a few vector lanes, each a running sum), so a float32 sum of
``n`` terms loses about ``eps·√n`` of its value and, once a lane's partial sum passes 2^24
times the terms' size, every further term is rounded away: 64 M uniform [0, 1) values summed
to half their total, 4 M to 2e-5 relative error (XLA's CPU sums: ≤ 7e-8). A blocked sum adds
``BLOCK`` terms at a time, then the block sums ``BLOCK`` at a time, and so on: every running
sum has at most ``BLOCK`` terms, and the error of the whole is that of a ``BLOCK``-term sum
(measured in ``benchmarks/bench_sums.py``: ≤ 3e-7 on the cases above, at the same speed or
faster, since the block sums run in parallel).

Rewritten (``legalize.py`` applies it to every module before it is compiled, whichever
producer wrote it and whether the pass emitted the sum or not):

* ``stablehlo.reduce`` with an ``add`` body of one float operand of 32 bits or fewer, static
  shape, summing more than ``THRESHOLD`` elements: the innermost summed dimensions are reduced
  first, as many as fit in a block; a dimension longer than a block is reshaped into
  ``[n / b, b]`` (``b`` a divisor of ``n`` near ``BLOCK``; when ``n`` has none, the largest
  multiple of ``BLOCK`` is blocked and the rest summed on its own); then the partial sums are
  summed the same way. The reduce's init value is added once, at the end.
* ``stablehlo.dot_general`` of floats of 32 bits or fewer contracting more than ``THRESHOLD``
  terms into a result that is small next to its operands (a bias gradient ``ones · x``, a
  weight gradient over a batch, a matrix-vector product): the contraction is split into
  chunks that become a batch dimension, and the chunks' products are summed as above. Only
  where the chunk products take at most a quarter of the operands' memory
  (``contraction_chunks``).

float64 sums are left alone (their running sums lose nothing until 2^53).
"""
from __future__ import annotations

import math

from ..ir import hlo
from ..ir.mlir import elem, ir, is_float_type, shape

BLOCK = 256  # terms in one running sum, once a sum is blocked
# Sums of up to this many terms stay one reduce: their error is float32's usual (≤ 1.3e-6
# measured for 1024 uniform terms summed down a column, the case without vector lanes; 3e-6
# for 4096), and a blocked sum costs one more dispatch, which small models pay in every call.
THRESHOLD = 1024


def _narrow_float(v: ir.Value) -> bool:
    element = elem(v)
    return is_float_type(element) and ir.FloatType(element).width <= 32


def _is_add_body(op: ir.Operation) -> bool:
    block = op.regions[0].blocks[0]
    body = list(block.operations)
    return (len(body) == 2 and body[0].name == "stablehlo.add"
            and set(body[0].operands) == set(block.arguments)
            and list(body[1].operands) == [body[0].results[0]])


def is_large_sum(op: ir.Operation) -> bool:
    """A float ``stablehlo.reduce``-add over more than ``BLOCK`` elements, statically shaped."""
    if op.name != "stablehlo.reduce" or len(op.operands) != 2 or not _narrow_float(op.operands[0]):
        return False
    x = shape(op.operands[0])
    if any(n < 0 for n in x) or not _is_add_body(op):
        return False
    return math.prod(x[d] for d in hlo.read_i64_array(op, "dimensions")) > THRESHOLD


def blocked_sum(x: ir.Value, dims: list[int]) -> ir.Value:
    """``x`` summed over ``dims`` with no running sum longer than ``BLOCK`` terms."""
    xs = list(shape(x))
    dims = sorted(dims)
    if math.prod(xs[d] for d in dims) <= BLOCK:  # (a partial sum: the first stage sums more)
        if len(dims) == len(xs) > 1:  # every dimension: one, as legalize reduces them (its vector.contract bug)
            return hlo.reduce_sum(hlo.reshape(x, [math.prod(xs)]), [0])
        return hlo.reduce_sum(x, dims)
    inner, size = [], 1
    for d in reversed(dims):  # innermost first: contiguous in memory
        if size * xs[d] > BLOCK:
            break
        inner.append(d)
        size *= xs[d]
    if inner:
        rest = [d - sum(1 for e in inner if e < d) for d in dims if d not in inner]
        return blocked_sum(hlo.reduce_sum(x, inner), rest)
    d = dims[-1]  # longer than a block: split it
    n = xs[d]
    b = _block_length(n)
    q, r = divmod(n, b)
    rank = len(xs)
    head = x if r == 0 else hlo.slice(x, [0] * rank, [q * b if i == d else s for i, s in enumerate(xs)], [1] * rank)
    partial = hlo.reduce_sum(hlo.reshape(head, xs[:d] + [q, b] + xs[d + 1:]), [d + 1])
    if r:
        tail = hlo.slice(x, [q * b if i == d else 0 for i in range(rank)], xs, [1] * rank)
        tail = hlo.reshape(hlo.reduce_sum(tail, [d]), xs[:d] + [1] + xs[d + 1:])
        partial = hlo.concatenate([hlo.reshape(partial, xs[:d] + [q] + xs[d + 1:]), tail], d)
    return blocked_sum(partial, dims)


def _block_length(n: int) -> int:
    """A divisor of ``n`` in ``[BLOCK/4, BLOCK]`` (the largest), else ``BLOCK``."""
    for b in range(BLOCK, BLOCK // 4 - 1, -1):
        if n % b == 0:
            return b
    return BLOCK


def rewrite_sum(op: ir.Operation) -> ir.Value:
    """The value of a large-sum ``reduce`` (``is_large_sum``) as a blocked sum; its init value
    added once."""
    x, init = op.operands
    total = blocked_sum(x, hlo.read_i64_array(op, "dimensions"))
    if hlo.is_zero_constant(init):
        return total
    return hlo.add(total, hlo.broadcast_in_dim(init, shape(total), []))


def contraction_chunks(op: ir.Operation) -> int:
    """How many chunks a float ``dot_general``'s long contraction is split into (0: none).

    Enough chunks that each sums at most ``BLOCK`` terms, as long as the chunks' products
    (``chunks × result``) take at most a quarter of the operands' memory."""
    if op.name != "stablehlo.dot_general" or not _narrow_float(op.results[0]):
        return 0
    lhs, rhs = (shape(v) for v in op.operands)
    if any(n < 0 for n in lhs + rhs) or not all(_narrow_float(v) for v in op.operands):
        return 0
    dims = hlo.dot_dimensions(op)
    k = math.prod(lhs[d] for d in dims.lhs_contract)
    if k <= THRESHOLD:
        return 0
    longest = max(math.prod(lhs[d] for d in run) for run in _runs(dims.lhs_contract, dims.rhs_contract))
    budget = (math.prod(lhs) + math.prod(rhs)) // (4 * math.prod(shape(op.results[0])))
    chunks = min(-(-k // BLOCK), longest, budget)
    return chunks if chunks >= 2 else 0


def _split_at(x: ir.Value, d: int, chunks: int, length: int) -> ir.Value:
    """The first ``chunks × length`` entries of ``x``'s dimension ``d``, as ``[chunks, length]``."""
    xs = list(shape(x))
    if chunks * length != xs[d]:
        x = hlo.slice(x, [0] * len(xs), [chunks * length if i == d else s for i, s in enumerate(xs)], [1] * len(xs))
    return hlo.reshape(x, xs[:d] + [chunks, length] + xs[d + 1:])


def _tail_at(x: ir.Value, d: int, start: int) -> ir.Value:
    xs = list(shape(x))
    return hlo.slice(x, [start if i == d else 0 for i in range(len(xs))], xs, [1] * len(xs))


def _runs(lc: list[int], rc: list[int]) -> list[list[int]]:
    """The contracting dimensions of the lhs (``lc``, paired with the rhs's ``rc``) in runs
    that are adjacent and in the same order in both operands: each run is one dimension of
    both, in memory, once the operands are reshaped."""
    runs: list[list[int]] = []
    for a, b in sorted(zip(lc, rc)):
        if runs and runs[-1][-1] + 1 == a and rc[lc.index(runs[-1][-1])] + 1 == b:
            runs[-1].append(a)
        else:
            runs.append([a])
    return runs


def _merged(x: ir.Value, run: list[int]) -> ir.Value:
    xs = list(shape(x))
    return hlo.reshape(x, xs[:run[0]] + [math.prod(xs[d] for d in run)] + xs[run[-1] + 1:])


def _renumbered(ds: list[int], run: list[int]) -> list[int]:
    """Dimension indices once the adjacent dimensions ``run`` are merged into ``run[0]``."""
    return [d if d <= run[0] else d - len(run) + 1 for d in ds if d not in run[1:]]


def rewrite_contraction(op: ir.Operation, chunks: int) -> ir.Value:
    """A ``dot_general`` (``contraction_chunks(op) == chunks``) as a batched product over
    chunks of its longest contracting dimension, the chunks summed by ``blocked_sum`` (the
    entries past the last whole chunk contracted on their own and added).

    Contracting dimensions adjacent in both operands count as one (``_runs``; the operands are
    reshaped to merge them): ``ones[8, 48, 48] · x[8, 48, 48, c]`` is split into 72 chunks of
    256 rows, each contiguous in memory, where splitting the longest dimension alone would make
    48 chunks of strided rows that IREE first transposes (a dispatch more, per sum)."""
    lhs, rhs = op.operands
    lb, rb, lc, rc = hlo.dot_dimensions(op)
    run = max(_runs(lc, rc), key=lambda r: math.prod(shape(lhs)[d] for d in r))
    if len(run) > 1:
        rrun = [rc[lc.index(d)] for d in run]
        lhs, rhs = _merged(lhs, run), _merged(rhs, rrun)
        lb, lc, rb, rc = (_renumbered(lb, run), _renumbered(lc, run), _renumbered(rb, rrun), _renumbered(rc, rrun))
        run = run[:1]
    i = lc.index(run[0])
    dl, dr, n = lc[i], rc[i], shape(lhs)[lc[i]]
    length = -(-n // chunks)
    whole = n // length
    element = elem(op.results[0])

    def after(ds, d):  # indices once dimension d is split in two: d itself becomes the chunk's row
        return [x + 1 if x >= d else x for x in ds]

    chunked = hlo.dot_general(
        _split_at(lhs, dl, whole, length), _split_at(rhs, dr, whole, length),
        [dl] + after(lb, dl + 1), [dr] + after(rb, dr + 1), after(lc, dl), after(rc, dr), element)
    total = blocked_sum(chunked, [0])
    if whole * length < n:
        tail = hlo.dot_general(_tail_at(lhs, dl, whole * length), _tail_at(rhs, dr, whole * length),
                               lb, rb, lc, rc, element)
        total = hlo.add(total, tail)
    return total
