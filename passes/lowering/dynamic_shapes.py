"""What can be proven about run-time sizes, for IREE 3.13's ``dynamic_broadcast_in_dim``.

IREE 3.13 refuses a ``stablehlo.dynamic_broadcast_in_dim`` whose operand has a dynamic
dimension it cannot tell is a size-1 broadcast or not ("failed to legalize operation
'stablehlo.dynamic_broadcast_in_dim' that was explicitly marked illegal"), as JAX's
shape-polymorphic softmax, layernorm and attention exports emit it; the same op compiles with
``known_nonexpanding_dimensions`` naming the dimensions that do not expand.

``annotate_nonexpanding`` proves it where it can. Each dynamic dimension of each tensor and each
integer scalar (a size) gets a class; classes merge where StableHLO's semantics say two sizes
are equal at run time:

* the operands and result of an elementwise op (StableHLO does not broadcast implicitly);
* ``get_dimension_size(x, d)`` and dimension ``d`` of ``x``;
* a dimension of a ``dynamic_broadcast_in_dim`` / ``dynamic_reshape`` / ``dynamic_iota`` result
  and the element of its shape operand (a ``concatenate`` of ``reshape``d / ``convert``ed
  scalars and constants, as JAX and the pass build them);
* the kept dimensions of a ``reduce``, the batch and free dimensions of a ``dot_general``,
  ``transpose``'s permutation, ``concatenate``'s other dimensions, a convolution's batch;
* a private function called once: its arguments and results and those of the call;
* a static size and the constant of that value.

An operand dimension of a ``dynamic_broadcast_in_dim`` whose class is the class of its result
dimension (or which is static and not 1) does not expand. Nothing is assumed that the program
does not state, so the attribute is sound; where nothing can be proven the op is left as it was.
"""
from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from ..ir import hlo
from ..ir.regions import producer
from ..ir.mlir import SHAPE_DIALECT_HOOKS, ir, shape
from ..transforms.batching import remake

ELEMENTWISE = {
    f"stablehlo.{n}" for n in (
        "abs add and atan2 cbrt ceil clamp compare complex convert cosine count_leading_zeros divide "
        "exponential exponential_minus_one floor imag is_finite log log_plus_one logistic maximum minimum "
        "multiply negate not or popcnt power real remainder round_nearest_afz round_nearest_even rsqrt "
        "select shift_left shift_right_arithmetic shift_right_logical sign sine sqrt subtract tan tanh xor "
        "reduce_precision bitcast_convert optimization_barrier").split()}
ELEMENTWISE |= {"chlo.erf", "chlo.erf_inv", "chlo.lgamma", "chlo.digamma", "chlo.tan", "chlo.next_after",
                "chlo.polygamma", "chlo.zeta", "chlo.top_k_placeholder"}
DYNAMIC = hlo.DYNAMIC


class _Classes:
    """Union-find over size keys: ``("dim", value, d)``, ``("int", value)``, ``("const", n)``, opaque keys."""

    def __init__(self) -> None:
        self.parent: dict[Hashable, Hashable] = {}

    def find(self, key: Hashable) -> Hashable:
        root = key
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while key != root:
            self.parent[key], key = root, self.parent.get(key, key)
        return root

    def union(self, a: Hashable | None, b: Hashable | None) -> None:
        if a is None or b is None:
            return
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            # A constant stays the root, so a class holding one is recognisably static.
            if isinstance(ra, tuple) and ra[0] == "const":
                ra, rb = rb, ra
            self.parent[ra] = rb


def _dim(v: ir.Value, d: int) -> Hashable:
    s = shape(v)[d]
    return ("const", s) if s != DYNAMIC else ("dim", v, d)


def _constant_ints(v: ir.Value) -> list[int] | None:
    owner = v.owner
    if not isinstance(owner, ir.OpView) and not isinstance(owner, ir.Operation):
        return None
    op = owner.operation if isinstance(owner, ir.OpView) else owner
    if op.name not in ("stablehlo.constant", "arith.constant"):
        return None
    if isinstance(op.attributes["value"], ir.IntegerAttr):  # arith.constant 4 : index
        return [ir.IntegerAttr(op.attributes["value"]).value]
    try:
        array = np.array(ir.DenseIntElementsAttr(op.attributes["value"]))
    except (ValueError, TypeError):
        return None
    n = int(np.prod(shape(v))) if shape(v) else 1
    return [int(x) for x in np.broadcast_to(array, (n,)).reshape(-1)] if array.size in (1, n) else None


def _scalar(v: ir.Value) -> Hashable:
    """The key of a one-element integer value, through reshapes and converts."""
    while True:
        values = _constant_ints(v)
        if values is not None and len(values) == 1:
            return ("const", values[0])
        op = producer(v)
        if op is not None and op.name == "tensor.extract" and len(op.operands) == 2:
            at = _constant_ints(op.operands[1])  # element j of a 1-D shape (TF's bridge)
            if at is not None and len(shape(op.operands[0])) == 1:
                return _element(op.operands[0], at[0])
        if op is not None and op.name in ("stablehlo.reshape", "stablehlo.convert", "arith.index_cast",
                                          "tensor.extract") and len(op.operands) >= 1:
            v = op.operands[0]
            continue
        if op is not None and op.name == "arith.muli":  # 1 * n (TF's bridge counts elements so)
            ones = [k for k, x in enumerate(op.operands) if _constant_ints(x) == [1]]
            if ones:
                v = op.operands[1 - ones[0]]
                continue
        if op is not None and op.name == "tensor.dim":
            d = _constant_ints(op.operands[1])
            if d is not None and isinstance(op.operands[0].type, ir.RankedTensorType):
                return _dim(op.operands[0], d[0])
        return ("int", v)


def _element(v: ir.Value, j: int) -> Hashable:
    """The key of element ``j`` of a 1-D shape operand."""
    values = _constant_ints(v)
    if values is not None:
        return ("const", values[j])
    op = producer(v)
    if op is not None:
        if op.name == "stablehlo.concatenate":
            for part in op.operands:
                n = shape(part)[0]
                if n == DYNAMIC:
                    break
                if j < n:
                    return _element(part, j)
                j -= n
        elif op.name in ("stablehlo.reshape", "stablehlo.convert") and shape(v) == (1,) and j == 0:
            return _scalar(op.operands[0])
        elif op.name == "tensor.from_elements":
            return _scalar(op.operands[j])
    return ("element", v, j)


def element_size(v: ir.Value, j: int) -> int | None:
    """Element ``j`` of a 1-D integer shape operand when it is a constant, else ``None``."""
    key = _element(v, j)
    return key[1] if key[0] == "const" else None


def same_size(v: ir.Value, j: int, x: ir.Value) -> bool:
    """Whether element ``j`` of the shape operand ``v`` is dimension ``j`` of ``x`` at run time:
    read from it (``tensor.dim`` / ``get_dimension_size``, through casts and reshapes), or of
    its size class in the function that holds ``x`` (JAX's split of ``x`` at the dimension
    variable ``b`` that made it)."""
    if shape(x)[j] != DYNAMIC:
        return element_size(v, j) == shape(x)[j]
    key = _element(v, j)
    if key == _dim(x, j):
        return True
    op = producer(key[1]) if key[0] == "int" else None
    if op is not None and op.name == "stablehlo.get_dimension_size" and op.operands[0] == x \
            and hlo.read_int(op, "dimension") == j:
        return True
    anchor = x.owner.owner if isinstance(x.owner, ir.Block) else producer(x)
    ops: list[ir.Operation] = []
    _walk(enclosing_function(anchor), ops)
    classes = _classes_of(ops)
    return classes.find(key) == classes.find(_dim(x, j))


def _operation(op: ir.Operation, classes: _Classes, calls: dict[str, list[ir.Operation]],
               funcs: dict[str, ir.Operation]) -> None:
    name = op.name
    ranked = [v for v in list(op.operands) + list(op.results) if isinstance(v.type, ir.RankedTensorType)]
    if name in ELEMENTWISE and op.results:
        out = op.results[0]
        if isinstance(out.type, ir.RankedTensorType):
            rank = len(shape(out))
            for v in ranked:
                if len(shape(v)) == rank and v != out:
                    for d in range(rank):
                        classes.union(_dim(v, d), _dim(out, d))
        if name in ("stablehlo.convert",) and not shape(out):
            classes.union(("int", out), _scalar(op.operands[0]))
        return
    if name == "arith.select" and not ranked:
        # select(n == 1, m, n), TF's broadcast of two extents: both in one class, so is the result.
        on_true, on_false = _scalar(op.operands[1]), _scalar(op.operands[2])
        if classes.find(on_true) == classes.find(on_false):
            classes.union(("int", op.results[0]), on_true)
        return
    if not ranked:
        return
    if name == "stablehlo.get_dimension_size":
        classes.union(("int", op.results[0]), _dim(op.operands[0], hlo.read_int(op, "dimension")))
    elif name in ("stablehlo.dynamic_broadcast_in_dim", "stablehlo.broadcast_in_dim"):
        x, out = op.operands[0], op.results[0]
        if name == "stablehlo.dynamic_broadcast_in_dim":
            for j in range(len(shape(out))):
                classes.union(_dim(out, j), _element(op.operands[1], j))
        known = set(hlo.read_i64_array(op, "known_nonexpanding_dimensions")) \
            if "known_nonexpanding_dimensions" in op.attributes else set()
        for i, j in enumerate(hlo.read_i64_array(op, "broadcast_dimensions")):
            if shape(x)[i] not in (1, DYNAMIC) or i in known:
                classes.union(_dim(x, i), _dim(out, j))
    elif name in ("stablehlo.dynamic_reshape", "stablehlo.dynamic_iota"):
        out = op.results[0]
        for j in range(len(shape(out))):
            classes.union(_dim(out, j), _element(op.operands[1 if name.endswith("reshape") else 0], j))
    elif name == "stablehlo.reduce":
        dims = hlo.read_i64_array(op, "dimensions")
        n = len(op.operands) // 2
        for k in range(n):
            kept = [d for d in range(len(shape(op.operands[k]))) if d not in dims]
            for j, d in enumerate(kept):
                classes.union(_dim(op.operands[k], d), _dim(op.results[k], j))
                classes.union(_dim(op.operands[0], d), _dim(op.operands[k], d))
    elif name == "stablehlo.real_dynamic_slice":
        # x[0:n:1] along a dimension is n long (torch-mlir's x[:, t] over a run-time batch).
        x, start, limit, strides = op.operands
        for d in range(len(shape(x))):
            if _element(start, d) == ("const", 0) and _element(strides, d) == ("const", 1):
                classes.union(_dim(op.results[0], d), _element(limit, d))
    elif name == "stablehlo.while":
        # A carry keeps its shape: operand, the regions' arguments, what the body returns, result.
        # A loop whose body has no terminator yet (a reverse loop the while adjoint is building,
        # whose body's adjoint asked for these classes) relates its carries later.
        cond, body = op.regions[0].blocks[0], op.regions[1].blocks[0]
        last = body.operations[len(body.operations) - 1].operation if len(body.operations) else None
        returned = last.operands if last is not None and last.name == "stablehlo.return" else None
        for k, v in enumerate(op.operands if returned is not None else ()):
            for other in (cond.arguments[k], body.arguments[k], returned[k], op.results[k]):
                _same(classes, v, other)
    elif name == "tensor.expand_shape":
        out = op.results[0]
        sizes = iter(op.operands[1:])  # one per dynamic dimension of the result, in order
        for j, n in enumerate(shape(out)):
            if n == DYNAMIC:
                classes.union(_dim(out, j), _scalar(next(sizes)))
        _grouped(classes, op.operands[0], out, op)
    elif name == "tensor.collapse_shape":
        _grouped(classes, op.results[0], op.operands[0], op)
    elif name == "stablehlo.transpose":
        for j, d in enumerate(hlo.read_i64_array(op, "permutation")):
            classes.union(_dim(op.operands[0], d), _dim(op.results[0], j))
    elif name == "stablehlo.dot_general":
        a, b = op.operands
        out = op.results[0]
        lb, rb, lc, rc = hlo.dot_dimensions(op)
        j = 0
        for p, q in zip(lb, rb):
            classes.union(_dim(a, p), _dim(out, j))
            classes.union(_dim(b, q), _dim(out, j))
            j += 1
        for p, q in zip(lc, rc):
            classes.union(_dim(a, p), _dim(b, q))
        for v, fixed in ((a, lb + lc), (b, rb + rc)):
            for d in range(len(shape(v))):
                if d not in fixed:
                    classes.union(_dim(v, d), _dim(out, j))
                    j += 1
    elif name == "stablehlo.concatenate":
        axis = hlo.read_int(op, "dimension")
        out = op.results[0]
        for v in op.operands:
            for d in range(len(shape(out))):
                if d != axis:
                    classes.union(_dim(v, d), _dim(out, d))
    elif name == "stablehlo.convolution":
        spec = str(op.attributes["dimension_numbers"])
        # "#stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>": the batch's position on both sides.
        try:
            body = spec[spec.index("<") + 1:spec.rindex(">")]
            lhs, rest = body.split("x", 1)
            out_spec = rest.split("->")[1]
            parse = [s.strip(" []").split(",") for s in (lhs, out_spec)]
            parse = [[t.strip() for t in p] for p in parse]
            classes.union(_dim(op.operands[0], parse[0].index("b")), _dim(op.results[0], parse[1].index("b")))
        except (ValueError, IndexError):
            pass
    elif name == "func.call":
        callee = str(op.attributes["callee"]).lstrip("@")
        target = funcs.get(callee)
        if target is None or len(calls.get(callee, [])) != 1 or not target.regions[0].blocks:
            return
        entry = target.regions[0].blocks[0]
        for arg, v in zip(entry.arguments, op.operands):
            _same(classes, arg, v)
        for block in target.regions[0].blocks:
            terminator = block.operations[len(block.operations) - 1].operation
            if terminator.name == "func.return":
                for r, v in zip(op.results, terminator.operands):
                    _same(classes, r, v)


def _grouped(classes: _Classes, small: ir.Value, big: ir.Value, op: ir.Operation) -> None:
    """A ``tensor.expand_shape`` / ``collapse_shape``: dimension k of ``small`` is the product of
    group k of ``big``; where the rest of a group is static 1, the two are one size."""
    for k, group in enumerate(ir.ArrayAttr(op.attributes["reassociation"])):
        dims = [ir.IntegerAttr(d).value for d in group]
        rest = [d for d in dims if shape(big)[d] != 1]
        if len(rest) == 1:
            classes.union(_dim(small, k), _dim(big, rest[0]))


def _same(classes: _Classes, a: ir.Value, b: ir.Value) -> None:
    if not isinstance(a.type, ir.RankedTensorType) or not isinstance(b.type, ir.RankedTensorType):
        return
    if len(shape(a)) != len(shape(b)):
        return
    for d in range(len(shape(a))):
        classes.union(_dim(a, d), _dim(b, d))
    if not shape(a):
        classes.union(_scalar(a), _scalar(b))


def _walk(op: ir.Operation, out: list[ir.Operation]) -> None:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                out.append(inner)
                if len(inner.regions):
                    _walk(inner, out)


def needs_annotation(op: ir.Operation) -> bool:
    if op.name != "stablehlo.dynamic_broadcast_in_dim":
        return False
    known = set(hlo.read_i64_array(op, "known_nonexpanding_dimensions")) \
        if "known_nonexpanding_dimensions" in op.attributes else set()
    expanding = set(hlo.read_i64_array(op, "known_expanding_dimensions")) \
        if "known_expanding_dimensions" in op.attributes else set()
    return any(s == DYNAMIC and i not in known | expanding for i, s in enumerate(shape(op.operands[0])))


def enclosing_function(op: ir.Operation) -> ir.Operation:
    while op.name != "func.func" and op.parent is not None:
        op = op.parent
    return op


def annotate_nonexpanding(module: ir.Module | ir.Operation) -> int:
    """Add ``known_nonexpanding_dimensions`` where it is provable (in a module or one function);
    returns the number of ops changed."""
    ops: list[ir.Operation] = []
    _walk(module.operation if isinstance(module, ir.Module) else module, ops)
    targets = [op for op in ops if needs_annotation(op)]
    if not targets:
        return 0
    funcs, calls = _functions_and_calls(ops)
    classes = _Classes()
    # Twice: a call's results are unified before the callee's body has been seen, and the other
    # way round; a second sweep lets facts found later reach ops met earlier (union-find makes
    # the order irrelevant except for the known_nonexpanding facts added below).
    changed = 0
    for _ in range(2):
        for op in ops:
            _operation(op, classes, calls, funcs)
        for op in targets:
            x, out = op.operands[0], op.results[0]
            known = set(hlo.read_i64_array(op, "known_nonexpanding_dimensions")) \
                if "known_nonexpanding_dimensions" in op.attributes else set()
            proven = set(known)
            for i, j in enumerate(hlo.read_i64_array(op, "broadcast_dimensions")):
                s = shape(x)[i]
                if s not in (1, DYNAMIC) or classes.find(_dim(x, i)) == classes.find(_dim(out, j)) \
                        or s == DYNAMIC and shape(out)[j] not in (1, DYNAMIC) and \
                        classes.find(_dim(x, i)) == classes.find(("const", shape(out)[j])):
                    proven.add(i)
            if proven != known:
                op.attributes["known_nonexpanding_dimensions"] = hlo.i64_array(sorted(proven))
                changed += 1
    return changed


# ----- forms IREE 3.13 refuses over run-time sizes, rewritten ------------------------------------
#
# IREE 3.13 legalizes no ``stablehlo.dynamic_reshape`` ("failed to legalize operation
# 'stablehlo.dynamic_reshape' that was explicitly marked illegal"), and its own lowering of a
# ``dot_general`` with several free or contracting dimensions, one of them dynamic, flattens them
# with one (the same error for a module that holds none). Its canonicalizer also merges two
# ``dynamic_broadcast_in_dim`` and drops ``known_nonexpanding_dimensions`` on the way. So: chains
# of broadcasts are composed here, reshapes that only group dimensions become
# ``tensor.collapse_shape`` / ``tensor.expand_shape``, and such a ``dot_general`` gets its
# dimensions grouped the same way (one free and one contracting dimension per side).

def _index(v: ir.Value) -> ir.Value:
    """A scalar integer tensor as an ``index``."""
    scalar = ir.Operation.create("tensor.extract", results=[elem_type(v)], operands=[v]).result
    return ir.Operation.create("arith.index_cast", results=[ir.IndexType.get()], operands=[scalar]).result


def elem_type(v: ir.Value) -> ir.Type:
    return ir.RankedTensorType(v.type).element_type


def _dim_index(x: ir.Value, d: int) -> ir.Value:
    c = ir.Operation.create("arith.constant", results=[ir.IndexType.get()],
                            attributes={"value": ir.IntegerAttr.get(ir.IndexType.get(), d)}).result
    return ir.Operation.create("tensor.dim", results=[ir.IndexType.get()], operands=[x, c]).result


def _groups_attr(groups: list[list[int]]) -> ir.Attribute:
    return hlo.attr("[" + ", ".join("[" + ", ".join(map(str, g)) + "]" for g in groups) + "]")


def _grouping(big: tuple[int, ...], small: tuple[int, ...]) -> list[list[int]] | None:
    """Contiguous groups of ``big``'s dimensions, one per ``small`` dimension, with equal static
    products and exactly one dynamic member where ``small``'s size is dynamic; ``None`` if there
    is no such grouping or ``big`` has more than one dynamic dimension (then sizes could split
    between groups in more than one way)."""
    if sum(s == DYNAMIC for s in big) > 1 or sum(s == DYNAMIC for s in small) > 1:
        return None

    def fit(i: int, j: int) -> list[list[int]] | None:
        if j == len(small):
            return [] if i == len(big) else None
        for end in range(i + 1, len(big) + 1):
            members = big[i:end]
            dynamic = DYNAMIC in members
            if dynamic != (small[j] == DYNAMIC) or not dynamic and int(np.prod(members)) != small[j]:
                continue
            rest = fit(end, j + 1)
            if rest is not None:
                return [list(range(i, end)), *rest]
        return None

    return fit(0, 0)


def collapse(x: ir.Value, groups: list[list[int]]) -> ir.Value:
    if all(len(g) == 1 for g in groups):
        return x
    s = shape(x)
    out = [DYNAMIC if any(s[d] == DYNAMIC for d in g) else int(np.prod([s[d] for d in g])) for g in groups]
    return ir.Operation.create("tensor.collapse_shape", results=[ir.RankedTensorType.get(out, elem_type(x))],
                               operands=[x], attributes={"reassociation": _groups_attr(groups)}).result


def expand(x: ir.Value, groups: list[list[int]], out_shape: list[int], sizes: list[ir.Value | None]) -> ir.Value:
    """``x`` with dimension ``k`` split into ``groups[k]``; ``sizes[d]`` the index of each dynamic ``d``."""
    if all(len(g) == 1 for g in groups):
        return x
    dynamic = [sizes[d] for d in range(len(out_shape)) if out_shape[d] == DYNAMIC]
    return ir.Operation.create("tensor.expand_shape", results=[ir.RankedTensorType.get(out_shape, elem_type(x))],
                               operands=[x, *dynamic],
                               attributes={"reassociation": _groups_attr(groups),
                                           "static_output_shape": hlo.i64_array(out_shape)}).result


def _reshape_by_groups(op: ir.Operation) -> ir.Value | None:
    x, target = op.operands
    s, r = shape(x), shape(op.results[0])
    if len(r) <= len(s):
        groups = _grouping(s, r)
        return None if groups is None else collapse(x, groups)
    groups = _grouping(r, s)
    if groups is None:
        return None
    sizes = [None] * len(r)
    for d, n in enumerate(r):
        if n == DYNAMIC:
            extents = _extents(target) if isinstance(elem_type(target), ir.IndexType) else None
            if extents is not None:  # tensor.from_elements of indices (torch-mlir, TF's bridge)
                sizes[d] = extents[d]
                continue
            element = hlo.slice(target, [d], [d + 1], [1])
            sizes[d] = _index(hlo.reshape(element, []))
    return expand(x, groups, list(r), sizes)


def _dot_by_groups(op: ir.Operation) -> ir.Value | None:
    a, b = op.operands
    lb, rb, lc, rc = hlo.dot_dimensions(op)
    lf = [d for d in range(len(shape(a))) if d not in lb + lc]
    rf = [d for d in range(len(shape(b))) if d not in rb + rc]
    # Grouped: lhs as [batch, free, contract], rhs as [batch, contract, free].
    a2 = hlo.transpose(a, lb + lf + lc)
    b2 = hlo.transpose(b, rb + rc + rf)
    nb = len(lb)

    def groups(*sizes: int) -> list[list[int]]:
        out, k = [[d] for d in range(nb)], nb
        for n in sizes:
            if n:
                out.append(list(range(k, k + n)))
                k += n
        return out

    ga, gb = groups(len(lf), len(lc)), groups(len(rc), len(rf))
    a3, b3 = collapse(a2, ga), collapse(b2, gb)
    free_a = 1 if lf else 0
    dot = hlo.dot_general(a3, b3, list(range(nb)), list(range(nb)), [nb + free_a] if lc else [],
                          [nb] if rc else [], elem_type(op.results[0]))
    out = shape(op.results[0])
    out_groups = groups(len(lf), len(rf))
    sizes: list[ir.Value | None] = [None] * len(out)
    for k, d in enumerate(lf):
        if out[nb + k] == DYNAMIC:
            sizes[nb + k] = _dim_index(a, d)
    for k, d in enumerate(rf):
        if out[nb + len(lf) + k] == DYNAMIC:
            sizes[nb + len(lf) + k] = _dim_index(b, d)
    return expand(dot, out_groups, list(out), sizes)


def _dot_needs_groups(op: ir.Operation) -> bool:
    if op.name != "stablehlo.dot_general" or hlo.is_static(op.operands[0]) and hlo.is_static(op.operands[1]):
        return False
    dims = hlo.dot_dimensions(op)
    for v, batch, contract in ((op.operands[0], dims.lhs_batch, dims.lhs_contract),
                               (op.operands[1], dims.rhs_batch, dims.rhs_contract)):
        fixed = batch + contract
        free = [d for d in range(len(shape(v))) if d not in fixed]
        for group in (free, contract):
            # IREE flattens several free or contracting dimensions with a dynamic_reshape
            # whenever either operand has a run-time size anywhere (TF's einsum "bhwc,hwcd->bd"
            # and its adjoint, whose static side holds three free dimensions).
            if len(group) > 1:
                return True
    return False


def _compose_broadcast(op: ir.Operation) -> ir.Value | None:
    inner = producer(op.operands[0])
    if inner is None or inner.name != "stablehlo.dynamic_broadcast_in_dim":
        return None

    def known(o: ir.Operation) -> set[int]:
        return set(hlo.read_i64_array(o, "known_nonexpanding_dimensions")) \
            if "known_nonexpanding_dimensions" in o.attributes else set()

    inner_dims, outer_dims = (hlo.read_i64_array(o, "broadcast_dimensions") for o in (inner, op))
    x = inner.operands[0]
    kept = {i for i in known(inner) if inner_dims[i] in known(op)}
    if any(s == DYNAMIC and i not in kept for i, s in enumerate(shape(x))):
        return None
    new = ir.Operation.create("stablehlo.dynamic_broadcast_in_dim", results=[op.results[0].type],
                              operands=[x, op.operands[1]],
                              attributes={"broadcast_dimensions": hlo.i64_array([outer_dims[d] for d in inner_dims]),
                                          "known_nonexpanding_dimensions": hlo.i64_array(sorted(kept))})
    return new.result


def _padded(op: ir.Operation) -> bool:
    """Whether a reduce_window pads or dilates its base."""
    rank = len(shape(op.operands[0]))
    return any(p != (0, 0) for p in hlo.read_padding(op, "padding", rank)) or \
        any(b != 1 for b in hlo.read_i64s(op, "base_dilations", [1] * rank))


def _pad_reduce_window(op: ir.Operation) -> ir.Value | None:
    """A padded (or base-dilated) reduce_window over an operand with a run-time dimension, which
    IREE 3.13 refuses to legalize: the operands padded with the init values first (a
    ``stablehlo.pad``), then the window without padding."""
    rank = len(shape(op.operands[0]))
    padding = hlo.read_padding(op, "padding", rank)
    base = hlo.read_i64s(op, "base_dilations", [1] * rank)
    n = len(op.results)
    if not _padded(op) or all(hlo.is_static(v) for v in op.operands[:n]):
        return None
    inputs, inits = list(op.operands[:n]), list(op.operands[n:])
    if any(lo < 0 or hi < 0 for lo, hi in padding):
        return None
    padded = [hlo.pad(x, init, [lo for lo, _ in padding], [hi for _, hi in padding], [b - 1 for b in base])
              for x, init in zip(inputs, inits)]
    new = op.clone(ir.InsertionPoint(op))
    for i, v in enumerate(padded):
        new.operands[i] = v
    new.attributes["padding"] = hlo.padding_attr([(0, 0)] * rank)
    new.attributes["base_dilations"] = hlo.i64_array([1] * rank)
    for old, result in zip(op.results[1:], new.results[1:]):
        old.replace_all_uses_with(result)
    return new.results[0]


_WINDOW_ATTRS = ("window_dimensions", "window_strides", "base_dilations", "window_dilations")


def _channels_last_window(op: ir.Operation) -> ir.Value | None:
    """An unpadded reduce_window over a run-time dimension whose windows sit on the middle
    dimensions of a channels-first layout (torch's NCHW pooling), which IREE 3.13 refuses to
    legalize ("failed to legalize operation 'stablehlo.reduce_window'") while it compiles the
    channels-last form: the operands transposed so that the trivial dimensions (window 1,
    stride 1) are first and last, the window there, and its results transposed back."""
    n = len(op.results)
    if all(hlo.is_static(v) for v in op.operands[:n]):
        return None
    rank = len(shape(op.operands[0]))
    values = {name: hlo.read_i64s(op, name, [1] * rank) for name in _WINDOW_ATTRS}
    if any(p != (0, 0) for p in hlo.read_padding(op, "padding", rank)):
        return None  # _pad_reduce_window makes it unpadded first
    trivial = [d for d in range(rank) if values["window_dimensions"][d] == 1 and values["window_strides"][d] == 1
               and values["base_dilations"][d] == 1]
    windowed = [d for d in range(rank) if d not in trivial]
    if len(trivial) < 2 or not windowed:
        return None
    perm = [*trivial[:-1], *windowed, trivial[-1]]
    if perm == list(range(rank)):
        return None
    inputs = [hlo.transpose(x, perm) for x in op.operands[:n]]
    attrs = {name: hlo.i64_array([v[d] for d in perm]) for name, v in values.items() if name in op.attributes}
    types = [ir.RankedTensorType.get([shape(r)[d] for d in perm], elem_type(r)) for r in op.results]
    new = remake(op, [*inputs, *op.operands[n:]], types, attrs)
    back = [perm.index(d) for d in range(rank)]
    results = [hlo.transpose(r, back) for r in new.results]
    for old, result in zip(op.results[1:], results[1:]):
        old.replace_all_uses_with(result)
    return results[0]


def _window_for_iree(op: ir.Operation) -> ir.Value | None:
    """A reduce_window over a run-time dimension in the form IREE 3.13 compiles: unpadded
    (:func:`_pad_reduce_window`), channels last (:func:`_channels_last_window`)."""
    padded = _pad_reduce_window(op)
    if padded is None:
        return _channels_last_window(op)
    unpadded = padded.owner
    with ir.InsertionPoint(unpadded), unpadded.location:
        permuted = _channels_last_window(unpadded)
    if permuted is None:
        return padded
    unpadded.erase()  # its results now have no uses: the permuted window replaces it
    return permuted


def _arith(name: str, a: ir.Value, b: ir.Value) -> ir.Value:
    return ir.Operation.create(f"arith.{name}", results=[a.type], operands=[a, b]).result


def _update_by_insert(op: ir.Operation) -> ir.Value | None:
    """A ``dynamic_update_slice`` with run-time sizes as ``tensor.insert_slice`` (IREE 3.13 lowers
    the op itself through a scatter whose reshape it then refuses: "'stablehlo.reshape' op result
    #0 must be statically shaped"), its start indices clamped as StableHLO's are: into
    ``[0, operand size - update size]``."""
    x, update, *starts = op.operands
    xs, us = shape(x), shape(update)
    offsets = []
    for d, start in enumerate(starts):
        last = (_index_constant(xs[d] - us[d]) if DYNAMIC not in (xs[d], us[d])
                else _arith("subi", _dim_index(x, d), _dim_index(update, d)))
        offsets.append(_arith("maxsi", _arith("minsi", _index(start), last), _index_constant(0)))
    sizes = [_dim_index(update, d) for d, n in enumerate(us) if n == DYNAMIC]
    rank = len(xs)
    attributes = {"static_offsets": hlo.i64_array([DYNAMIC] * rank), "static_sizes": hlo.i64_array(list(us)),
                  "static_strides": hlo.i64_array([1] * rank),
                  "operandSegmentSizes": hlo.attr(f"array<i32: 1, 1, {rank}, {len(sizes)}, 0>")}
    return ir.Operation.create("tensor.insert_slice", results=[x.type], operands=[update, x, *offsets, *sizes],
                               attributes=attributes).result


def rewrite_dynamic(module: ir.Module) -> int:
    """Compose broadcast chains, group reshapes and contractions (see above); returns the count."""
    ops: list[ir.Operation] = []
    _walk(module.operation, ops)
    done = 0
    for op in ops:
        if op.name == "stablehlo.dynamic_broadcast_in_dim":
            rewrite = _compose_broadcast
        elif op.name == "stablehlo.dynamic_reshape":
            rewrite = _reshape_by_groups
        elif _dot_needs_groups(op):
            rewrite = _dot_by_groups
        elif op.name == "stablehlo.reduce_window":
            rewrite = _window_for_iree
        elif op.name == "stablehlo.dynamic_update_slice" and not hlo.is_static(op.operands[1]):
            rewrite = _update_by_insert
        else:
            continue
        with ir.InsertionPoint(op), op.location:
            replacement = rewrite(op)
        if replacement is not None:
            op.results[0].replace_all_uses_with(replacement)
            op.erase()
            done += 1
    return done


# ----- the shape dialect (torch-mlir's and TensorFlow's MLIR-bridge exports) -----------------------
#
# torch-mlir (``dynamic_shapes``) and TF's ``xla-legalize-tf`` write implicit broadcasting over a
# run-time batch with the ``shape`` dialect: ``shape.shape_of``, ``shape.const_shape``,
# ``shape.broadcast`` of two extents, ``shape.cstr_broadcastable`` and a ``shape.assuming`` region
# around the broadcast. They become ``tensor.from_elements`` of ``tensor.dim`` / constant indices
# (which the size classes above follow), a broadcast extent chosen from what the classes prove (the
# same size; a static 1; otherwise ``select(a == 1, b, a)``, the broadcast rule itself), and the
# region's body inlined (the witness is the program's own assumption: no check is dropped that a
# compiled module would make).

SHAPE_OPS = ("shape.shape_of", "shape.const_shape", "shape.broadcast", "shape.assuming",
             "shape.cstr_broadcastable")


def _index_constant(n: int) -> ir.Value:
    t = ir.IndexType.get()
    return ir.Operation.create("arith.constant", results=[t], attributes={"value": ir.IntegerAttr.get(t, n)}).result


def _extents(v: ir.Value) -> list[ir.Value] | None:
    """The index scalars of a 1-D shape value (``tensor.from_elements`` or a constant)."""
    op = producer(v)
    if op is not None and op.name == "tensor.from_elements":
        return list(op.operands)
    values = _constant_ints(v)
    return None if values is None else [_index_constant(n) for n in values]


def _from_elements(values: list[ir.Value], like: ir.Type) -> ir.Value:
    t = ir.RankedTensorType.get([len(values)], ir.IndexType.get())
    out = ir.Operation.create("tensor.from_elements", results=[t], operands=values).result
    if out.type != like:  # !shape.shape or tensor<?xindex>
        out = ir.Operation.create("tensor.cast", results=[like], operands=[out]).result
    return out


def _functions_and_calls(ops: list[ir.Operation]) -> tuple[dict, dict]:
    """The functions among ``ops`` by name, and the calls of each callee."""
    funcs: dict[str, ir.Operation] = {}
    calls: dict[str, list[ir.Operation]] = {}
    for op in ops:
        if op.name == "func.func":
            funcs[ir.StringAttr(op.attributes["sym_name"]).value] = op
        elif op.name == "func.call":
            calls.setdefault(str(op.attributes["callee"]).lstrip("@"), []).append(op)
    return funcs, calls


def _classes_of(ops: list[ir.Operation]) -> _Classes:
    funcs, calls = _functions_and_calls(ops)
    classes = _Classes()
    for _ in range(2):
        for op in ops:
            _operation(op, classes, calls, funcs)
    return classes


def _broadcast_extent(a: ir.Value | None, b: ir.Value | None, classes: _Classes) -> ir.Value:
    if a is None or b is None:
        return b if a is None else a
    ka, kb = _scalar(a), _scalar(b)
    if ka == ("const", 1) or classes.find(ka) == classes.find(kb):
        return b if ka == ("const", 1) else a
    if kb == ("const", 1) or isinstance(ka, tuple) and ka[0] == "const":
        return a
    if isinstance(kb, tuple) and kb[0] == "const":
        return b
    i1 = ir.IntegerType.get_signless(1)
    one = _index_constant(1)
    is_one = ir.Operation.create("arith.cmpi", results=[i1], operands=[a, one], attributes={
        "predicate": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)}).result  # eq
    return ir.Operation.create("arith.select", results=[a.type], operands=[is_one, b, a]).result


def lower_shape_dialect(module: ir.Module) -> int:
    """Rewrite the shape-dialect ops above into tensor/arith ops (in place); returns the count."""
    ops: list[ir.Operation] = []
    _walk(module.operation, ops)
    if not any(op.name in SHAPE_OPS for op in ops):
        return 0
    done = 0
    with module.context, ir.Location.unknown():
        for op in ops:  # shape_of / const_shape first: broadcasts read their extents
            if op.name not in ("shape.shape_of", "shape.const_shape"):
                continue
            with ir.InsertionPoint(op), op.location:
                if op.name == "shape.shape_of":
                    x = op.operands[0]
                    if not isinstance(x.type, ir.RankedTensorType):
                        continue
                    values = [_index_constant(s) if s != DYNAMIC else
                              ir.Operation.create("tensor.dim", results=[ir.IndexType.get()],
                                                  operands=[x, _index_constant(d)]).result
                              for d, s in enumerate(shape(x))]
                else:
                    values = [_index_constant(int(n)) for n in np.array(ir.DenseIntElementsAttr(
                        op.attributes["shape"]))]
                new = _from_elements(values, op.results[0].type)
            op.results[0].replace_all_uses_with(new)
            op.erase()
            done += 1
        ops = []
        _walk(module.operation, ops)
        classes = _classes_of(ops)
        for op in ops:
            if op.name != "shape.broadcast" or len(op.operands) != 2:
                continue
            parts = [_extents(v) for v in op.operands]
            if any(p is None for p in parts) or not isinstance(op.results[0].type, ir.RankedTensorType):
                continue
            with ir.InsertionPoint(op), op.location:
                parts = [_extents(v) for v in op.operands]
                rank = max(len(p) for p in parts)
                padded = [[None] * (rank - len(p)) + p for p in parts]
                values = [_broadcast_extent(a, b, classes) for a, b in zip(*padded)]
                new = _from_elements(values, op.results[0].type)
            op.results[0].replace_all_uses_with(new)
            op.erase()
            done += 1
        ops = []
        _walk(module.operation, ops)
        for op in ops:
            if op.name != "shape.assuming":
                continue
            block = op.regions[0].blocks[0]
            body = [o.operation for o in block.operations]
            terminator = body[-1]
            for inner in body[:-1]:
                inner.move_before(op)
            for r, v in zip(op.results, terminator.operands):
                r.replace_all_uses_with(v)
            op.erase()
            done += 1
        ops = []
        _walk(module.operation, ops)
        for op in ops:
            if op.name == "shape.cstr_broadcastable":
                witness = op.results[0]
                if not list(witness.uses):
                    op.erase()
                    done += 1
    return done


SHAPE_DIALECT_HOOKS.append(lower_shape_dialect)
