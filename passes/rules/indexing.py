"""Adjoint rules of indexing ops: gather, scatter, dynamic (update) slices, sort,
top_k and selecting (argmax-style) variadic reduces.

Conventions:
* ``gather`` clamps its start indices into the operand (StableHLO semantics);
  its adjoint scatter-adds at the same clamped indices, so duplicate indices
  accumulate.
* ``scatter`` skips a whole update window that would leave the operand (XLA's
  behaviour, JAX's ``mode="drop"``): such updates get a zero cotangent. Update
  computations: see the scatter section below. With "replace" and colliding indices
  only the update that won in the forward (IREE: the last one) gets a cotangent.
* ``dynamic_slice`` / ``dynamic_update_slice`` clamp their starts; the adjoints
  reuse the same starts with the same clamping.
* selection (``sort``, ``top_k``, argmax-style ``reduce``): the cotangent goes
  back to the position the forward op took each value from; among tied
  elements of a reduce, to the first in row-major order.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from ..ir import hlo
from .control_flow import inline_region
from ..transforms.backprop import backprop_local
from ..ir.hlo import GATHER_FIELDS, SCATTER_FIELDS, broadcast_in_dim, compare, select
from ..ir.mlir import dtype_name, elem, ir, is_float, shape, tensor_type
from ..transforms.forward import by_transposition, linear
from ..transforms.batching import Batcher, MissingBatchingRule, attributes, is_elementwise, leading_batch, plus1, remake
from ..transforms.registry import adjoint, batching, missing, tangent


def _size(v: ir.Value) -> int:
    return int(np.prod(shape(v), dtype=np.int64))


def _per_index(indices: ir.Value, ivd: int, values: list[int]) -> ir.Value:
    """values[k] for entry k of every index vector, shaped like ``indices`` (a bound past the
    range of their type taken as its end: every index is within it)."""
    dtype = np.dtype(dtype_name(elem(indices)))
    info = np.iinfo(dtype)
    vector = hlo.constant(np.clip(np.array(values, np.int64), max(info.min, -2 ** 63), min(info.max, 2 ** 63 - 1))
                          .astype(dtype), dtype.name)
    if ivd == len(shape(indices)):  # an implicit trailing index vector of size 1
        return broadcast_in_dim(hlo.reshape(vector, []), shape(indices), [])
    return broadcast_in_dim(vector, shape(indices), [ivd])


def _dimension_numbers(op: ir.Operation, name: str, fields) -> dict:
    """The gather/scatter dimension numbers, with absent fields empty and index_vector_dim 0."""
    return {**{f: [] for f in fields}, "index_vector_dim": 0, **hlo.read_struct(op, name)}


def _index_column(indices: ir.Value, ivd: int, k: int) -> ir.Value:
    """Entry k of every index vector (shaped like indices without dimension ivd)."""
    s = shape(indices)
    if ivd == len(s):
        return indices
    column = hlo.slice(indices, [k if i == ivd else 0 for i in range(len(s))],
                       [k + 1 if i == ivd else n for i, n in enumerate(s)], [1] * len(s))
    return hlo.reshape(column, [n for i, n in enumerate(s) if i != ivd])


def _last_starts(x: ir.Value, sizes: list[int], starts: list[int]) -> list[int]:
    """The largest start of each indexed dimension that keeps the window inside x."""
    return [shape(x)[k] - sizes[k] for k in starts]


# ----- gather and scatter ------------------------------------------------------------

@adjoint("stablehlo.gather")
def _gather(op, cts):
    """d operand = scatter-add(zeros, clamped start indices, ct)"""
    x, indices = op.operands
    d = _dimension_numbers(op, "dimension_numbers", GATHER_FIELDS)
    sizes = hlo.read_i64_array(op, "slice_sizes")
    last = _per_index(indices, d["index_vector_dim"], _last_starts(x, sizes, d["start_index_map"]))
    clamped = hlo.binary("stablehlo.minimum", hlo.binary("stablehlo.maximum", indices, hlo.zeros(indices.type)), last)
    indexed = set(d["start_index_map"]) | set(d["operand_batching_dims"])
    if any(size != (1 if i in indexed else n) for i, (size, n) in enumerate(zip(sizes, shape(x)))):
        return _scatter_elements(x, clamped, cts[0], d, sizes), None
    dims = {s: d[g] for s, g in zip(SCATTER_FIELDS, GATHER_FIELDS)}
    return hlo.scatter(hlo.zeros(x.type), clamped, cts[0], dims, "add"), None


def _scatter_elements(x, starts, ct, d, sizes) -> ir.Value:
    """The gather adjoint as a scatter of single elements (IREE 3.13 compiles scatters only
    with windows of size 1 along indexed dimensions and full along the others): element e
    of ct goes to start[batch(e)] + offset(e), or to batch(e) along batching dimensions."""
    ivd, out = d["index_vector_dim"], shape(ct)
    batch_dims = [i for i in range(len(out)) if i not in d["offset_dims"]]  # the index dims but ivd, in order
    index_dims = [i for i in range(len(shape(starts))) if i != ivd]
    windowed = [i for i in range(len(sizes)) if i not in d["collapsed_slice_dims"] + d["operand_batching_dims"]]
    offset_of, it = dict(zip(windowed, d["offset_dims"])), elem(starts)
    coords = []
    for dim in range(len(sizes)):
        coord = hlo.iota(out, it, offset_of[dim]) if dim in offset_of else hlo.zeros(tensor_type(out, it))
        if dim in d["start_index_map"]:
            column = _index_column(starts, ivd, d["start_index_map"].index(dim))
            coord = hlo.add(coord, broadcast_in_dim(column, out, batch_dims))
        elif dim in d["operand_batching_dims"]:
            e = d["start_indices_batching_dims"][d["operand_batching_dims"].index(dim)]
            coord = hlo.iota(out, it, batch_dims[index_dims.index(e)])
        coords.append(hlo.reshape(coord, [_size(ct), 1]))
    every = list(range(len(sizes)))
    flat = {"inserted_window_dims": every, "scatter_dims_to_operand_dims": every, "index_vector_dim": 1}
    return hlo.scatter(hlo.zeros(x.type), hlo.concatenate(coords, 1), hlo.reshape(ct, [_size(ct)]), flat, "add")


# ----- scatter -------------------------------------------------------------------------
#
# The update computation phi(a, b) (a: the operand's current value, b: the update) is read
# for one of these forms, T any elementwise function of b alone (a constant included):
#   add      a + T        y = x + sum T(u)     (order-free: exact with collisions)
#   sub      a - T        y = x - sum T(u)
#   mul      a * T        y = x * prod T(u)    (exact where some T(u) are zero)
#   div      a / T        y = x * prod 1/T(u)
#   max/min  max(a, T)    y = max(x, max T(u)) (ties share the cotangent equally)
#   keep     a            y = x
#   replace  T            y = T(u) of the update that won: IREE applies colliding updates in
#                         order, the last one wins; the adjoint finds the winner by running the
#                         same replace-scatter on the updates' ids, so only it gets a cotangent
#   general  anything else: exact only when no two updates hit one position (the attribute
#            unique_indices = true, or constant indices that are distinct); refused otherwise.

_FORMS = {"stablehlo.add": "add", "stablehlo.multiply": "mul", "stablehlo.maximum": "max",
          "stablehlo.minimum": "min"}
_ONE_SIDED = {"stablehlo.subtract": "sub", "stablehlo.divide": "div"}
_SCALAR_SHAPES = {"stablehlo.reshape", "stablehlo.broadcast_in_dim", "stablehlo.transpose"}


def _through(v: ir.Value) -> ir.Value:
    """``v`` with scalar-to-scalar reshapes (and the like) looked through."""
    while isinstance(v, ir.OpResult) and v.owner.name in _SCALAR_SHAPES:
        v = v.owner.operands[0]
    return v


def _scatter_form(op: ir.Operation) -> tuple[str, ir.Value | None]:
    """(form, T) of the update computation (module comment above)."""
    block = op.regions[0].blocks[0]
    a, b = block.arguments
    body = [o.operation for o in block.operations]
    returned = list(body[-1].operands)
    if len(returned) != 1:
        return "general", None
    on_a = {a}
    for inner in body[:-1]:
        if any(v in on_a for v in inner.operands):
            on_a.update(inner.results)
    root = _through(returned[0])
    if root not in on_a:
        return "replace", root
    if root == a:
        return "keep", None
    owner = root.owner if isinstance(root, ir.OpResult) else None
    if owner is not None and len(owner.operands) == 2:
        p, q = (_through(v) for v in owner.operands)
        if owner.name in _FORMS:
            if p == a and q not in on_a:
                return _FORMS[owner.name], q
            if q == a and p not in on_a:
                return _FORMS[owner.name], p
        if owner.name in _ONE_SIDED and p == a and q not in on_a:
            return _ONE_SIDED[owner.name], q
    return "general", None


def _lift(op: ir.Operation, args: list[ir.Value]) -> dict[ir.Value, ir.Value]:
    """The scalar update computation applied elementwise to the tensors ``args`` (one
    shape): each value of the region mapped to its tensor counterpart."""
    block = op.regions[0].blocks[0]
    like = shape(args[0])
    env = dict(zip(block.arguments, args))
    body = [o.operation for o in block.operations]
    inside = {r for o in body for r in o.results} | set(block.arguments)
    for v in {v for o in body for v in o.operands if v not in inside}:
        env[v] = _captured(op, v, like)
    for inner in body[:-1]:
        scalar = all(shape(v) == () for v in [*inner.operands, *inner.results])
        operands = [env.get(v) for v in inner.operands]
        if len(inner.regions) or not scalar or any(v is None for v in operands):
            raise missing(op, f" whose update computation holds '{inner.name}' (not an elementwise "
                              "op of its arguments)")
        if inner.name == "stablehlo.constant":
            env[inner.results[0]] = broadcast_in_dim(inner.clone().results[0], like, [])
        elif inner.name in _SCALAR_SHAPES:
            env[inner.results[0]] = operands[0]
        elif is_elementwise(inner.name):
            new = ir.Operation.create(inner.name, results=[tensor_type(like, elem(r)) for r in inner.results],
                                      operands=operands,
                                      attributes=attributes(inner))
            env.update(zip(inner.results, new.results))
        else:
            raise missing(op, f" whose update computation holds '{inner.name}' (not elementwise)")
    return env


def _captured(op: ir.Operation, v: ir.Value, like: list[int]) -> ir.Value:
    """A value the update computation uses from outside it (Enzyme-JAX's scatter2.mlir captures
    a constant): broadcast to ``like``; a computed one would need a gradient of its own, which
    the scatter's adjoint does not give."""
    root = _through(v)
    if not (isinstance(root, ir.OpResult) and root.owner.name == "stablehlo.constant"):
        raise missing(op, " whose update computation uses a computed value from outside the region "
                          "(its gradient is not derived: pass it as an update instead)")
    return broadcast_in_dim(v, like, [])


class _Geometry:
    """A one-operand scatter's geometry: its update windows as a gather, and which of them
    stay inside the operand (the others are dropped)."""

    def __init__(self, op: ir.Operation) -> None:
        self.op = op
        self.x, self.indices, self.updates = op.operands
        self.d = d = _dimension_numbers(op, "scatter_dimension_numbers", SCATTER_FIELDS)
        x, updates = self.x, self.updates
        window = iter([shape(updates)[i] for i in d["update_window_dims"]])
        skip = set(d["inserted_window_dims"]) | set(d["input_batching_dims"])
        self.sizes = [1 if i in skip else next(window) for i in range(len(shape(x)))]
        self.scatter_dims = [i for i in range(len(shape(updates))) if i not in d["update_window_dims"]]

    @functools.cached_property
    def ok(self) -> ir.Value:
        """i1, updates-shaped: whether the element's window stays inside the operand."""
        x, indices, d = self.x, self.indices, self.d
        ivd, starts = d["index_vector_dim"], d["scatter_dims_to_operand_dims"]
        ok = hlo.binary("stablehlo.and", compare(indices, hlo.zeros(indices.type), "GE"),
                        compare(indices, _per_index(indices, ivd, _last_starts(x, self.sizes, starts)), "LE"))
        ok = hlo.reduce(ok, [ivd] if ivd < len(shape(indices)) else [], "and")
        return broadcast_in_dim(ok, shape(self.updates), self.scatter_dims)

    def gather(self, v: ir.Value) -> ir.Value:
        """``v`` (operand-shaped) read at every update's position (updates-shaped)."""
        return hlo.gather(v, self.indices, {g: self.d[s] for s, g in zip(SCATTER_FIELDS, GATHER_FIELDS)},
                          self.sizes)

    def scatter(self, into: ir.Value, values: ir.Value, kind: str) -> ir.Value:
        return hlo.scatter(into, self.indices, values, self.d, kind)

    def kept(self, v: ir.Value) -> ir.Value:
        """``v`` (updates-shaped), zero for the windows the scatter dropped."""
        return select(self.ok, v, hlo.zeros(v.type))

    def winners(self) -> ir.Value:
        """i1, updates-shaped: which update element's value each written position kept — the
        same replace-scatter run on the updates' ids (IREE: the last of colliding updates)."""
        i32 = ir.IntegerType.get_signless(32)
        ids = hlo.reshape(hlo.iota([_size(self.updates)], i32, 0), shape(self.updates))
        written = self.scatter(hlo.splat(-1, tensor_type(shape(self.x), i32)), ids, "replace")
        return hlo.binary("stablehlo.and", compare(self.gather(written), ids, "EQ"), self.ok)

    def unique(self) -> bool:
        """Whether no two updates can hit one position: ``unique_indices = true``, one
        update window, or constant indices that are distinct (windows of size 1 along
        the indexed dimensions, no batching dimensions)."""
        if hlo.read_bool(self.op, "unique_indices"):
            return True
        if int(np.prod([shape(self.updates)[i] for i in self.scatter_dims], dtype=np.int64)) <= 1:
            return True
        v, d = self.indices, self.d
        if not (isinstance(v, ir.OpResult) and v.owner.name == "stablehlo.constant") or d["input_batching_dims"] \
                or any(self.sizes[k] != 1 for k in d["scatter_dims_to_operand_dims"]):
            return False
        values = np.array(list(ir.DenseIntElementsAttr(v.owner.attributes["value"])), np.int64)
        values = values.reshape(shape(v)) if values.size == _size(v) else np.broadcast_to(values, shape(v))
        if d["index_vector_dim"] < len(shape(v)):
            values = np.moveaxis(values, d["index_vector_dim"], -1)
        else:
            values = values[..., None]
        rows = values.reshape(-1, values.shape[-1])
        return len({tuple(r) for r in rows}) == len(rows)


def _pull(out: ir.Value, w: ir.Value | None, updates: ir.Value) -> ir.Value | None:
    """d updates of ``out`` (a lifted function of the updates) at cotangent ``w``."""
    if w is None:
        return None
    if out == updates:
        return w
    return backprop_local([out], [w], [updates], name="scatter")[0]


@adjoint("stablehlo.scatter")
def _scatter(op, cts):
    """per update computation (the forms above): add/sub: d x = ct, d u = ±T'(u) ct at the
    window; mul/div: product rule over every collision; max/min: ct shared among ties;
    replace: d x = ct with the written windows zeroed, d u = T'(u) ct for the update that
    won; general (unique indices): the region's partials at (x, u). Dropped windows get 0."""
    if len(op.operands) != 3:
        raise missing(op, " with several operands (a variadic scatter)")
    (ct,) = cts
    form, t = _scatter_form(op)
    s = _Geometry(op)
    x, updates = s.x, s.updates
    if form == "general" and not s.unique():
        raise missing(op, " with this update computation: several updates may hit one position, and then "
                          "the result depends on the order they are applied in (set unique_indices = true if "
                          "they never collide)")
    if form == "keep":
        return ct, None, None
    if form == "general":
        xg = s.gather(x)
        env = _lift(op, [xg, updates])
        root = env[list(list(op.regions[0].blocks[0].operations)[-1].operands)[0]]
        dxg, du = backprop_local([root], [s.gather(ct)], [xg, updates], name="scatter")
        dx = s.scatter(ct, dxg if dxg is not None else hlo.zeros(updates.type), "replace")
        return dx, None, s.kept(du) if du is not None else None
    g = _lift(op, [hlo.zeros(updates.type), updates])[t]
    if form in ("add", "sub"):
        w = s.kept(s.gather(ct))
        return ct, None, _pull(g, hlo.negate(w) if form == "sub" else w, updates)
    if form == "replace":
        won = s.ok if s.unique() else s.winners()
        # ct where no window was written: a mask scattered into ones, not zeros scattered into ct
        # (IREE 3.13 then wrote into ct's buffer when the windows covered all of it, a 1-element
        # operand, and the gather of ct below read those zeros: StableHLO testdata scatter_*_1_*)
        kept = s.scatter(hlo.ones(x.type), hlo.zeros(updates.type), "replace")
        dx = select(compare(kept, hlo.zeros(x.type), "NE"), ct, hlo.zeros(ct.type))
        return dx, None, _pull(g, select(won, s.gather(ct), hlo.zeros(updates.type)), updates)
    if form in ("max", "min"):
        return _scatter_extremum(s, op.results[0], g, ct)
    factor = g if form == "mul" else hlo.divide(hlo.ones(g.type), g)
    return _scatter_product(s, factor, ct)


def _scatter_extremum(s: _Geometry, y: ir.Value, g: ir.Value, ct: ir.Value):
    """y = max(x, max T(u)): ct split equally among x and the T(u) equal to y"""
    x, updates = s.x, s.updates
    one, zero = hlo.ones(x.type), hlo.zeros(x.type)
    hit_x = select(compare(x, y, "EQ"), one, zero)
    hit_u = select(hlo.binary("stablehlo.and", compare(g, s.gather(y), "EQ"), s.ok),
                   hlo.ones(updates.type), hlo.zeros(updates.type))
    count = hlo.binary("stablehlo.maximum", hlo.add(hit_x, s.scatter(zero, hit_u, "add")), one)
    share = hlo.divide(ct, count)
    return hlo.multiply(share, hit_x), None, _pull(g, hlo.multiply(s.gather(share), hit_u), s.updates)


def _scatter_product(s: _Geometry, f: ir.Value, ct: ir.Value):
    """y = x * prod F(u): d x = ct * prod F; d u_j = ct x prod_{i != j} F(u_i) F'(u_j), the
    product of the others exact where some F(u_i) are zero (counted apart)"""
    x, updates = s.x, s.updates
    is_zero = compare(f, hlo.zeros(f.type), "EQ")
    ones_u, zeros_u = hlo.ones(f.type), hlo.zeros(f.type)
    nonzero = select(is_zero, ones_u, f)
    zeros = s.gather(s.scatter(hlo.zeros(x.type), select(s.ok, select(is_zero, ones_u, zeros_u), zeros_u), "add"))
    product = s.scatter(hlo.ones(x.type), f, "mul")
    product_nonzero = s.gather(s.scatter(hlo.ones(x.type), nonzero, "mul"))
    none_zero = compare(zeros, zeros_u, "EQ")
    only_this = hlo.binary("stablehlo.and", compare(zeros, ones_u, "EQ"), is_zero)
    others = select(none_zero, hlo.divide(product_nonzero, nonzero), select(only_this, product_nonzero, zeros_u))
    w = s.kept(hlo.multiply(s.gather(hlo.multiply(ct, x)), others))
    return hlo.multiply(ct, product), None, _pull(f, w, updates)


def iree_rejects_scatter(op: ir.Operation) -> bool:
    """Whether IREE 3.13 fails to lower this one-operand, static scatter ("'iree_linalg_ext.scatter'
    op shape of update value dim#2 must match original value at dim#1", "expected indices to be
    equal to batch rank or batch rank + 1", "mismatch in shape of indices and update value"):
    measured, it takes an indexed dimension only as an inserted one or with a window of size 1,
    any other dimension only as an input batching dimension or with a full window, and the
    window dimensions of the updates only after their scatter dimensions."""
    if op.name != "stablehlo.scatter" or len(op.operands) != 3 or not all(hlo.is_static(v) for v in op.operands):
        return False
    s = _Geometry(op)
    indexed, d = set(s.d["scatter_dims_to_operand_dims"]), s.d
    rank, window = len(shape(s.updates)), list(d["update_window_dims"])
    if window != list(range(rank - len(window), rank)):
        return True  # a window dimension before a scatter one ("expected indices to be equal to batch rank ...")
    for k, n in enumerate(shape(s.x)):
        if k in d["input_batching_dims"]:
            continue
        if k in indexed:
            if k not in d["inserted_window_dims"] and s.sizes[k] != 1:
                return True
        elif k in d["inserted_window_dims"] or s.sizes[k] != n:
            return True
    return False


def scatter_by_elements(op: ir.Operation) -> ir.Value:
    """The same scatter (same update computation) as one of single elements into the operand
    flattened: element e of the updates goes to its operand position's linear index, the
    elements of a window that would leave the operand to a spare slot past the end (cut off
    after). Colliding elements keep their relative order (row-major over the updates), so a
    replace keeps the same winner. The form IREE 3.13 compiles (``iree_rejects_scatter``)."""
    s = _Geometry(op)
    x, indices, updates, d = s.x, s.indices, s.updates, s.d
    out, rank = shape(updates), len(shape(x))
    n = _size(x)
    it = ir.IntegerType.get_signless(64 if n + 1 >= 2 ** 31 else 32)
    starts = hlo.convert(indices, it)
    ivd = d["index_vector_dim"]
    index_dims = [i for i in range(len(shape(indices))) if i != ivd]
    window_of = dict(zip([k for k in range(rank) if k not in d["inserted_window_dims"] + d["input_batching_dims"]],
                         d["update_window_dims"]))
    linear, stride = hlo.zeros(tensor_type(out, it)), 1
    for k in reversed(range(rank)):
        coord = hlo.iota(out, it, window_of[k]) if k in window_of else hlo.zeros(tensor_type(out, it))
        if k in d["scatter_dims_to_operand_dims"]:
            column = _index_column(starts, ivd, d["scatter_dims_to_operand_dims"].index(k))
            coord = hlo.add(coord, broadcast_in_dim(column, out, s.scatter_dims))
        elif k in d["input_batching_dims"]:
            e = d["scatter_indices_batching_dims"][d["input_batching_dims"].index(k)]
            coord = hlo.iota(out, it, s.scatter_dims[index_dims.index(e)])
        linear = hlo.add(linear, hlo.multiply(coord, hlo.splat(stride, coord.type)))
        stride *= shape(x)[k]
    linear = select(s.ok, linear, hlo.splat(n, linear.type))
    size = _size(updates)
    element = tensor_type([], elem(x))
    flat_x = hlo.concatenate([hlo.reshape(x, [n]), hlo.reshape(hlo.zeros(element), [1])], 0)
    dims = {"inserted_window_dims": [0], "scatter_dims_to_operand_dims": [0], "index_vector_dim": 1}
    new = remake(op, [flat_x, hlo.reshape(linear, [size, 1]), hlo.reshape(updates, [size])], [flat_x.type],
                 {"scatter_dimension_numbers": hlo.struct_attr("scatter", dims, SCATTER_FIELDS)})
    return hlo.reshape(hlo.slice(new.results[0], [0], [n], [1]), shape(x))


# ----- dynamic slices ------------------------------------------------------------------

@adjoint("stablehlo.dynamic_slice")
def _dynamic_slice(op, cts):
    """d x = dynamic_update_slice(zeros, ct, starts)"""
    x, *starts = op.operands
    return (hlo.dynamic_update_slice(hlo.zeros_like(x), cts[0], starts), *[None] * len(starts))


@adjoint("stablehlo.dynamic_update_slice")
def _dynamic_update_slice(op, cts):
    """d x = dynamic_update_slice(ct, zeros, starts); d update = dynamic_slice(ct, starts)

    An update of run-time sizes (a scan's output buffer over a '?' batch) is read with a
    ``real_dynamic_slice`` from the starts clamped as the op clamps them, ``update``'s sizes
    long."""
    (ct,) = cts
    x, update, *starts = op.operands
    if hlo.is_static(update):
        d_update = hlo.dynamic_slice(ct, starts, shape(update))  # read before ct's window is zeroed
        if _written(x) or _written(ct):
            # A chain of writes (a scan's output, unrolled: a checkpointed loop's segment)
            # zeroes ct window by window while the windows read off it are used later: IREE
            # 3.13 reads a slice lazily, so it copied the whole of ct before each zeroing
            # (17 copies of 16 MiB per segment of the 256-step scan MLP, benchmarks/
            # bench_memory.py). Behind a barrier the window is its own buffer, ct zeroed in place.
            (d_update,) = hlo.optimization_barrier([d_update])
    else:
        d_update = _window_at_run_time(op, ct)
    dx = hlo.dynamic_update_slice(ct, hlo.zeros_like(update), starts)
    return (dx, d_update, *[None] * len(starts))


def _written(v: ir.Value) -> bool:
    """Whether ``v`` is the result of a ``dynamic_update_slice``."""
    return isinstance(v, ir.OpResult) and v.owner.operation.name == "stablehlo.dynamic_update_slice"


def _window_at_run_time(op: ir.Operation, ct: ir.Value) -> ir.Value:
    x, update, *starts = op.operands
    i32 = ir.IntegerType.get_signless(32)
    sizes = [hlo.dimension_size(update, d) if u == hlo.DYNAMIC else hlo.splat(u, tensor_type([], i32))
             for d, u in enumerate(shape(update))]
    firsts = []
    for d, start in enumerate(starts):
        last = hlo.subtract(hlo.dimension_size(x, d) if shape(x)[d] == hlo.DYNAMIC
                            else hlo.splat(shape(x)[d], tensor_type([], i32)), sizes[d])
        firsts.append(hlo.clamp(hlo.splat(0, tensor_type([], i32)), hlo.convert(start, i32), last))
    limits = [hlo.add(f, s) for f, s in zip(firsts, sizes)]
    ones = hlo.constant(np.ones(len(starts), np.int32), "int32")
    return hlo.real_dynamic_slice(ct, hlo.extent(firsts), hlo.extent(limits), ones, shape(update))


# ----- selections: sort, top_k, argmax-style reduce --------------------------------------

def _private_iota(op: ir.Operation, shape_, dim: int) -> ir.Value:
    """An iota along ``dim`` plus 1 + the number of sorts in ``op``'s function. IREE 3.13
    corrupts a constant operand shared by two sorts (JAX's argsort iotas, say): the offset
    gives every adjoint sort an index constant of its own. Only the order matters."""
    sorts = []

    def count(o: ir.Operation) -> ir.WalkResult:
        if o.name == "stablehlo.sort":
            sorts.append(1)
        return ir.WalkResult.ADVANCE

    f = op
    while f is not None and f.name != "func.func":
        f = f.parent
    if f is not None:
        f.operation.walk(count)
    iota = hlo.iota(shape_, ir.IntegerType.get_signless(32), dim)
    return hlo.add(iota, hlo.splat(1 + len(sorts), iota.type))


@adjoint("stablehlo.sort")
def _sort(op, cts):
    """perm = the forward sort applied to an iota; d operand_k = ct_k sorted by perm"""
    dim = hlo.read_int(op, "dimension")
    operands = list(op.operands)
    iota = _private_iota(op, shape(operands[0]), dim)
    stable = hlo.read_bool(op, "is_stable")
    forward, block = hlo.sort([*operands, iota], dim, stable)
    with ir.InsertionPoint(block):
        hlo.return_(inline_region(op, 0, list(block.arguments)[:-2]), "stablehlo.return")
    live = [k for k, ct in enumerate(cts) if ct is not None]
    # IREE 3.13 sorts a constant cotangent (the weights of a weighted sum) in place and fails
    # ("write affecting operations on global resources"): each is selected by a test that depends
    # on the data (always true: the permutation's entries are positive), so it is computed fresh.
    perm = forward.results[-1]
    fresh = compare(perm, hlo.zeros(perm.type), "GT")
    moving = [select(fresh, cts[k], hlo.zeros(cts[k].type)) for k in live]
    back, block = hlo.sort([perm, *moving], dim)
    with ir.InsertionPoint(block):
        hlo.return_([compare(block.arguments[0], block.arguments[1], "LT")], "stablehlo.return")
    moved = dict(zip(live, list(back.results)[1:]))
    return tuple(moved.get(k) for k in range(len(operands)))


@adjoint("chlo.top_k")
def _top_k(op, cts):
    """d x = ct of the values scatter-added at their indices along the last axis"""
    return (_scatter_at_last_axis(op.operands[0], op.results[1], cts[0]),)


def approx_top_k(op: ir.Operation, cts) -> tuple:
    """JAX's ``approx_top_k`` (``custom_call @ApproxTopK(x, iota, init value, init index)``): the
    values it returns are ``x`` at the indices it returns, approximate selection or not, so
    ``d x`` is their cotangent scattered back there, as for ``top_k``; the iota and the init
    values get none."""
    config = ir.DictAttr(op.attributes["mhlo.backend_config"]) if "mhlo.backend_config" in op.attributes else None
    x = op.operands[0]
    if config is None or "reduction_dim" not in config or len(op.operands) != 4 or len(op.results) != 2 \
            or ir.IntegerAttr(config["reduction_dim"]).value not in (-1, len(shape(x)) - 1):
        raise missing(op, " (call target @ApproxTopK) of several operands or along an axis other than the last")
    if cts[0] is None:
        return (None,) * 4
    return _scatter_at_last_axis(x, op.results[1], cts[0]), None, None, None


def _scatter_at_last_axis(x: ir.Value, indices: ir.Value, ct: ir.Value) -> ir.Value:
    """``ct`` (indices-shaped) scatter-added into zeros like ``x`` at ``indices`` along the last axis."""
    n = shape(x)[-1]
    rows, k = _size(x) // n, shape(indices)[-1]
    flat_idx = hlo.reshape(indices, [rows, k])
    offset = hlo.multiply(hlo.iota([rows, k], elem(indices), 0), hlo.splat(n, flat_idx.type))
    where = hlo.reshape(hlo.add(flat_idx, offset), [rows * k, 1])
    flat = hlo.scatter(hlo.zeros(tensor_type([rows * n], elem(x))), where, hlo.reshape(ct, [rows * k]),
                       {"inserted_window_dims": [0], "scatter_dims_to_operand_dims": [0], "index_vector_dim": 1})
    return hlo.reshape(flat, shape(x))


def is_selection(op: ir.Operation, n: int) -> bool:
    """Whether the reducer returns, for each k, acc_k, x_k or a select between them."""
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    returned = list(list(block.operations)[-1].operation.operands)
    for k, v in enumerate(returned):
        pair = {args[k], args[n + k]}
        if v in pair:
            continue
        owner = v.owner if isinstance(v, ir.OpResult) else None
        if owner is None or owner.name != "stablehlo.select" or set(list(owner.operands)[1:]) != pair:
            return False
    return True


def selection_reduce(op: ir.Operation, cts) -> tuple:
    """reduce of (x_0, ..., x_{n-1}) whose body selects (argmax: (value, iota)): d x_k = ct_k at the
    first element equal to every output, the winner; the init values get nothing."""
    n = len(op.operands) // 2
    xs = list(op.operands)[:n]
    if not is_selection(op, n):
        raise missing(op, " with this reduction body")
    dims = hlo.read_i64_array(op, "dimensions")
    full = shape(xs[0])
    spread = lambda v: broadcast_in_dim(v, full, [d for d in range(len(full)) if d not in dims])  # noqa: E731
    hit = compare(xs[0], spread(op.results[0]), "EQ")
    for x, y in zip(xs[1:], list(op.results)[1:]):
        hit = hlo.binary("stablehlo.and", hit, compare(x, spread(y), "EQ"))
    i32 = ir.IntegerType.get_signless(32)
    order = hlo.reshape(hlo.iota([_size(xs[0])], i32, 0), full)
    first = hlo.reduce(select(hit, order, hlo.splat(np.iinfo(np.int32).max, order.type)), dims, "min")
    winner = compare(order, spread(first), "EQ")
    grads = [select(winner, spread(ct), hlo.zeros(x.type)) if ct is not None and is_float(x) else None
             for x, ct in zip(xs, cts)]
    return (*grads, *[None] * n)


tangent("stablehlo.gather", "stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice")(linear)
tangent("stablehlo.sort", "chlo.top_k")(by_transposition)
batching("chlo.top_k")(leading_batch)  # top_k works along the last dimension


@tangent("stablehlo.scatter")
def _scatter_tangent(op, ts):
    """linear update computations (a + u, a - u, u, a): the scatter of the tangents, which
    repeats the forward's choice among colliding updates; the others through the adjoint"""
    form, t = _scatter_form(op) if len(op.operands) == 3 else ("general", None)
    arg = op.regions[0].blocks[0].arguments[1]
    is_linear = form == "keep" or form in ("add", "sub", "replace") and t == arg
    return (linear if is_linear else by_transposition)(op, ts)


# ----- batching ------------------------------------------------------------------------------

@batching("stablehlo.sort")
def _sort_batched(b: Batcher, op):
    xs = b.operands(op, lift=True)
    attrs = {"dimension": hlo.i64(hlo.read_int(op, "dimension") + 1)}
    return b.mark(remake(op, xs, [b.type(r) for r in op.results], attrs).results)


@batching("stablehlo.gather")
def _gather_batched(b: Batcher, op):
    """shared operand: the batch is one more batch dimension of the indices; batched
    operand: an operand batching dimension paired with the indices' first"""
    x, indices = b.operands(op)
    dims = hlo.read_struct(op, "dimension_numbers")
    sizes = hlo.read_i64_array(op, "slice_sizes")
    new = {"offset_dims": plus1(dims.get("offset_dims", [])), "index_vector_dim": dims["index_vector_dim"] + 1,
           "start_indices_batching_dims": plus1(dims.get("start_indices_batching_dims", []))}
    indices = b.lift(indices)
    if x in b.batched:
        new.update(collapsed_slice_dims=plus1(dims.get("collapsed_slice_dims", [])),
                   operand_batching_dims=[0, *plus1(dims.get("operand_batching_dims", []))],
                   start_index_map=plus1(dims.get("start_index_map", [])))
        new["start_indices_batching_dims"] = [0, *new["start_indices_batching_dims"]]
        sizes = [1, *sizes]
    else:
        new.update({k: dims.get(k, []) for k in ("collapsed_slice_dims", "operand_batching_dims", "start_index_map")})
    return b.mark([hlo.gather(x, indices, new, sizes)])


@batching("stablehlo.scatter")
def _scatter_batched(b: Batcher, op):
    """every operand batched; an input batching dimension paired with the indices' first"""
    n = (len(op.operands) - 1) // 2
    xs = b.operands(op, lift=True)
    dims = hlo.read_struct(op, "scatter_dimension_numbers")
    new = {"update_window_dims": plus1(dims.get("update_window_dims", [])),
           "inserted_window_dims": plus1(dims.get("inserted_window_dims", [])),
           "input_batching_dims": [0, *plus1(dims.get("input_batching_dims", []))],
           "scatter_indices_batching_dims": [0, *plus1(dims.get("scatter_indices_batching_dims", []))],
           "scatter_dims_to_operand_dims": plus1(dims.get("scatter_dims_to_operand_dims", [])),
           "index_vector_dim": dims["index_vector_dim"] + 1}
    attrs = {"scatter_dimension_numbers": hlo.struct_attr("scatter", new, hlo.SCATTER_FIELDS)}
    return b.mark(remake(op, xs, [b.type(r) for r in op.results[:n]], attrs).results)


def _index_vector(b: Batcher, starts: Sequence[ir.Value]) -> ir.Value:
    """Scalar start indices as a batched ``[size, k]`` index tensor (one integer type)."""
    element = elem(starts[0])
    cols = [hlo.reshape(b.lift(hlo.convert(s, element) if elem(s) != element else s), [b.size, 1])
            for s in starts]
    return hlo.concatenate(cols, 1)


@batching("stablehlo.dynamic_slice")
def _dynamic_slice_batched(b: Batcher, op):
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
def _dynamic_update_slice_batched(b: Batcher, op):
    """shared starts: one more (full) dimension"""
    x, update, *starts = b.operands(op)
    if any(s in b.batched for s in starts):
        # The scatter this would be does not compile in IREE 3.13 ("expected indices to be
        # equal to batch rank"): callers fall back to a loop.
        raise MissingBatchingRule(op, "batched start indices")
    zero = hlo.splat(0, starts[0].type)
    return b.mark([hlo.dynamic_update_slice(b.lift(x), b.lift(update), [zero, *starts])])


# ----- opaque calls --------------------------------------------------------------------

@adjoint("stablehlo.custom_call")
def _custom_call(op, cts):
    """opaque to irgrad: no adjoint (LookupError naming the call target); JAX's ApproxTopK
    as top_k"""
    target = hlo.read_str(op, "call_target_name")
    if target == "ApproxTopK":
        return approx_top_k(op, cts)
    raise missing(op, f" (call target @{target})")


tangent("stablehlo.custom_call")(by_transposition)
