"""Out-of-bounds indices made safe for IREE 3.13, which does not check them.

StableHLO defines every index: ``gather`` clamps its start indices into the operand,
``scatter`` drops an update whose window would leave the operand. IREE 3.13 does neither
on the paths a gather or a scatter may take:

* ``stablehlo.scatter`` becomes ``iree_linalg_ext.scatter``, which stores at the index it
  is given: ``scatter`` into ``tensor<1x5xf32>`` at index 10 writes 20 bytes past the end
  of the 20-byte result buffer, into malloc's next chunk (CPU drivers), and the process
  later aborts in ``free()`` ("free(): invalid next size", "double free or corruption").
* A ``stablehlo.gather`` that reads single elements (``collapsed_slice_dims`` covering the
  indexed dimension, slice size 1) becomes a ``tensor.extract`` at the raw index: it reads
  outside the operand (wrong values, or a segfault for a large index). Wider slices are
  clamped by IREE itself.

So, before IREE sees them (``guard_indices``):

* a gather's start indices are clamped as StableHLO clamps them, ``[0, dim - slice size]``;
* a scatter whose update computation has an identity for the update (``a + u``: -0.0
  for floats, 0 for integers; ``a * u``: 1; ``max``: -inf; ``min``: +inf) gets its indices
  clamped the same way and its dropped updates replaced by that identity (no copy of the
  operand);
* any other scatter (a replace, a general body) writes into its operand padded with a spare
  slot along one indexed dimension, the dropped windows sent there, and the result cut
  back: a fill and two copies of the operand (a replace of 2,000 rows into 20,000x64
  float32: 2.4 ms a call instead of 0.85 unguarded; the same scatter-add, guarded by its
  identity, 1.2 ms instead of 1.06; local-task, this 2-core VM under load).

Indices that are in bounds by construction (constants, the adjoints' own clamps) are left
as they are. A window counts as dropped when any of it would leave the operand (XLA's
rule, and ``rules/indexing.py``'s): for the scatters IREE compiles, windows along indexed
dimensions are one element wide, and there that is StableHLO's per-element rule.
Scatters IREE cannot lower as they are (``iree_rejects_scatter``) are left to
``scatter_by_elements``, which sends dropped windows to a spare slot itself.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import hlo
from ..ir.hlo import GATHER_FIELDS, broadcast_like, compare, select
from ..ir.mlir import dtype_name, elem, ir, is_float_type, is_integer_type, shape, tensor_type
from ..ir.regions import nested_ops
from ..rules.indexing import _Geometry, _dimension_numbers, _scatter_form, iree_rejects_scatter
from ..transforms.batching import remake

# Index tensors larger than this are not read for a proof that they are in bounds (they are
# clamped or guarded instead: a few elementwise ops).
_PROOF_ELEMENTS = 1 << 20

# The update computations ``a op u`` with an identity element for ``u`` (the scatter's kinds).
_IDENTITY_FORMS = ("add", "mul", "max", "min")

Bound = int | ir.Value  # a last start: static, or a scalar i32 known at run time


def guard_indices(module: ir.Module) -> int:
    """Make every gather and scatter in ``module`` safe from out-of-bounds indices (module
    docstring), in place; returns the number of ops changed."""
    ops = [op for op in nested_ops(module.operation) if op.name in ("stablehlo.gather", "stablehlo.scatter")]
    done = 0
    for op in ops:
        with ir.InsertionPoint(op), op.location:
            if op.name == "stablehlo.gather":
                done += _guard_gather(op)
            elif not iree_rejects_scatter(op):
                done += _guard_scatter(op)
    return done


def _guard_gather(op: ir.Operation) -> bool:
    x, indices = op.operands
    d = _dimension_numbers(op, "dimension_numbers", GATHER_FIELDS)
    sizes = hlo.read_i64_array(op, "slice_sizes")
    last = [_last_start(x, k, sizes[k]) for k in d["start_index_map"]]
    if not last or _in_bounds(indices, d["index_vector_dim"], last):
        return False
    wide = hlo.convert(indices, _index_type(indices, last))
    op.operands[1] = hlo.clamp(_per_index(0, wide, d["index_vector_dim"]), wide,
                               _per_index(last, wide, d["index_vector_dim"]))
    return True


def _guard_scatter(op: ir.Operation) -> bool:
    if len(op.operands) != 3:
        return False  # several operands: IREE 3.13 refuses them ("NYI variadic operands scatter")
    s = _Geometry(op)
    x, indices, updates, d, sizes = s.x, s.indices, s.updates, s.d, s.sizes
    ivd, starts = d["index_vector_dim"], d["scatter_dims_to_operand_dims"]
    if any(sizes[k] == hlo.DYNAMIC for k in starts):
        return False  # IREE 3.13 refuses such a scatter ("mismatch in shape of indices and update value")
    last = [_last_start(x, k, sizes[k]) for k in starts]
    if not last or _in_bounds(indices, ivd, last):
        return False
    k, rank = starts[0], len(shape(x))  # k: the dimension a dropped window goes to, past its end
    spare = [_dimension(x, k) if j == k else 0 for j in starts]
    wide = hlo.convert(indices, _index_type(indices, last + spare))
    first, final = _per_index(0, wide, ivd), _per_index(last, wide, ivd)
    ok = hlo.binary("stablehlo.and", compare(wide, first, "GE"), compare(wide, final, "LE"))
    ok = hlo.reduce(ok, [ivd], "and") if ivd < len(shape(wide)) else ok  # per index vector
    identity = _identity(op)
    unordered = {"unique_indices": ir.BoolAttr.get(False), "indices_are_sorted": ir.BoolAttr.get(False)}
    if identity is not None:
        # Clamped, every window is in bounds; the dropped ones add (multiply...) the identity.
        neutral = broadcast_like(hlo.splat(identity, tensor_type([], elem(updates))), updates, [])
        kept = select(broadcast_like(ok, updates, s.scatter_dims), updates, neutral)
        result = remake(op, [x, hlo.clamp(first, wide, final), kept], [x.type], unordered).results[0]
    else:
        # A spare slot past the end of dimension k: dropped windows start there.
        wide = select(_spread(ok, wide, ivd), wide, _per_index(spare, wide, ivd))
        high = [sizes[k] if j == k else 0 for j in range(rank)]
        padded = hlo.pad(x, hlo.zeros(tensor_type([], elem(x))), [0] * rank, high, [0] * rank)
        new = remake(op, [padded, wide, updates], [padded.type], unordered)
        result = hlo.crop(new.results[0], [0] * rank, high, [1] * rank)
    op.results[0].replace_all_uses_with(result)
    op.erase()
    return True


def _dimension(x: ir.Value, k: int) -> Bound:
    return shape(x)[k] if shape(x)[k] != hlo.DYNAMIC else hlo.dimension_size(x, k)


def _last_start(x: ir.Value, k: int, size: int) -> Bound:
    """The largest start along dimension k of ``x`` that keeps a window of ``size`` inside."""
    n = _dimension(x, k)
    if isinstance(n, int):
        return n - size
    return hlo.subtract(n, hlo.splat(size, n.type))


def _index_type(indices: ir.Value, needed: list[Bound]) -> ir.Type:
    """The integer type to compare and clamp ``indices`` in: their own where it holds every
    value in ``needed`` (a run-time size: any i32), else i64, which holds every index of a
    narrower type (ui64 indices hold every bound)."""
    element = ir.IntegerType(elem(indices))
    top = max(v if isinstance(v, int) else 2 ** 31 - 1 for v in needed)
    if element.is_unsigned:
        fits = element.width == 64 or top < 2 ** element.width
    else:
        fits = top < 2 ** (element.width - 1)
    return elem(indices) if fits else ir.IntegerType.get_signless(64)


def _per_index(values: int | list[Bound], like: ir.Value, ivd: int) -> ir.Value:
    """``values[j]`` for entry j of every index vector (one value for all), shaped like ``like``."""
    it = elem(like)
    if isinstance(values, int):
        return broadcast_like(hlo.splat(values, tensor_type([], it)), like, [])
    if all(isinstance(v, int) for v in values):
        vector = hlo.constant(np.array(values, dtype_name(it)), dtype_name(it))
    else:
        vector = hlo.convert(hlo.extent(values), it)
    if ivd == len(shape(like)):  # an implicit trailing index vector of one entry
        return broadcast_like(hlo.reshape(vector, []), like, [])
    return broadcast_like(vector, like, [ivd])


def _spread(ok: ir.Value, like: ir.Value, ivd: int) -> ir.Value:
    """The per-index-vector ``ok`` broadcast back over the index vectors' entries."""
    if ivd == len(shape(like)):
        return ok
    return broadcast_like(ok, like, [i for i in range(len(shape(like))) if i != ivd])


def _identity(op: ir.Operation) -> float | int | None:
    """The update's identity of a one-operand scatter ``a op u`` (module docstring); None
    for any other update computation, or an element type without one here."""
    form, t = _scatter_form(op)
    element = elem(op.operands[0])
    if form not in _IDENTITY_FORMS or t != op.regions[0].blocks[0].arguments[1]:
        return None
    if is_float_type(element):
        return {"add": -0.0, "mul": 1.0, "max": -math.inf, "min": math.inf}[form]
    if not is_integer_type(element) or ir.IntegerType(element).width == 1:
        return None  # complex, bool: the spare slot
    return {"add": 0, "mul": 1}.get(form, hlo.reduce_init(form, element))


def _in_bounds(indices: ir.Value, ivd: int, last: list[Bound]) -> bool:
    """Whether every index vector is provably in ``[0, last]`` entrywise (static bounds)."""
    if not all(isinstance(v, int) for v in last):
        return False
    known = _known_range(indices)
    if known is None:
        return False
    lo, hi = known
    if ivd == len(shape(indices)):
        lo, hi = lo[..., None], hi[..., None]
    else:
        lo, hi = np.moveaxis(lo, ivd, -1), np.moveaxis(hi, ivd, -1)
    return bool(np.all(lo >= 0) and np.all(hi <= np.array(last, np.float64)))


def _known_range(v: ir.Value) -> tuple[np.ndarray, np.ndarray] | None:
    """Elementwise bounds (lo, hi), shaped like ``v``, from constants through clamps,
    ``minimum``/``maximum``, broadcasts, reshapes and widening converts; None when ``v``
    has a run-time or large shape. A value of anything else is unbounded (±inf)."""
    if not hlo.is_static(v) or math.prod(shape(v)) > _PROOF_ELEMENTS:
        return None
    owner = v.owner if isinstance(v, ir.OpResult) else None
    name = owner.name if owner is not None else ""
    unknown = (np.full(shape(v), -np.inf), np.full(shape(v), np.inf))
    if name == "stablehlo.constant":
        values = np.array(ir.DenseIntElementsAttr(owner.attributes["value"])).astype(np.float64)
        return values, values
    if name in ("stablehlo.minimum", "stablehlo.maximum", "stablehlo.clamp"):
        parts = [_known_range(o) for o in owner.operands]
        if any(p is None for p in parts):
            return unknown
        if name == "stablehlo.clamp":  # clamp(lo, x, hi) = min(max(x, lo), hi); lo, hi may be scalars
            (a, b), (c, d), (e, f) = parts
            return np.minimum(np.maximum(c, a), e), np.minimum(np.maximum(d, b), f)
        pick = np.minimum if name == "stablehlo.minimum" else np.maximum
        (a, b), (c, d) = parts
        return pick(a, c), pick(b, d)
    if name in ("stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.convert"):
        source = owner.operands[0]
        if name == "stablehlo.convert" and not _widening(elem(source), elem(v)):
            return unknown
        inner = _known_range(source)
        if inner is None:
            return unknown
        if name == "stablehlo.broadcast_in_dim":
            dims = hlo.read_i64_array(owner, "broadcast_dimensions")
            return tuple(_broadcast(a, dims, shape(v)) for a in inner)
        return inner[0].reshape(shape(v)), inner[1].reshape(shape(v))
    return unknown


def _widening(source: ir.Type, target: ir.Type) -> bool:
    """Whether an integer convert keeps every value of ``source``."""
    if not (is_integer_type(source) and is_integer_type(target)):
        return False
    s, t = ir.IntegerType(source), ir.IntegerType(target)
    if s.width == 1:
        return False
    if s.is_unsigned:
        return t.width > s.width or t.is_unsigned and t.width == s.width
    return t.width >= s.width and not t.is_unsigned


def _broadcast(a: np.ndarray, dims: list[int], out: tuple[int, ...]) -> np.ndarray:
    """numpy's ``broadcast_in_dim``: ``a``'s dimension i lands on ``out``'s ``dims[i]``."""
    order = np.argsort(dims)
    a = np.transpose(a, order) if len(dims) else a
    placed = [1] * len(out)
    for i, dim in enumerate(sorted(dims)):
        placed[dim] = a.shape[i]
    return np.broadcast_to(a.reshape(placed), out)
