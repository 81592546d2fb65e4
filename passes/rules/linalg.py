"""Linear algebra: ``stablehlo.cholesky`` and ``stablehlo.triangular_solve``.

Adjoint and tangent rules act on the ops themselves (the adjoint's own solves are
``triangular_solve`` ops), and :func:`lower_cholesky` / :func:`lower_triangular_solve`
rewrite both into loops IREE compiles (``legalize.py`` applies them to every compiled
module: IREE 3.13 refuses both on llvm-cpu, "failed to legalize operation
'stablehlo.cholesky' that was explicitly marked illegal").

What the ops read, and so what their derivatives are with respect to:

* ``cholesky(a, lower)`` reads only the lower (``lower = true``) or upper triangle of
  ``a`` (the other is taken to mirror it) and returns ``L`` (``a = L Lᵀ``) or ``U``
  (``a = Uᵀ U``) with zeros in the other triangle. The tangent is Murray's (2016),
  the one TensorFlow and JAX use, ``L̇ = L Φ(L⁻¹ Ṡ L⁻ᵀ)`` with ``Ṡ`` the symmetric matrix
  the read triangle of ``ȧ`` stands for and ``Φ`` the lower triangle with its diagonal
  halved; the adjoint its transpose, ``ā = Φ(G + Gᵀ)`` with ``G = L⁻ᵀ Φ(Lᵀ L̄) L⁻¹``
  (nonzero only in the read triangle: the other does not change the result).
* ``triangular_solve(a, b)`` solves ``op(a) x = b`` (``left_side``) or ``x op(a) = b``
  with ``op`` = identity, transpose or adjoint (``transpose_a``), reading only one
  triangle of ``a`` and, with ``unit_diagonal``, not its diagonal. ``b̄`` solves the
  transposed system; ``ā = -b̄ xᵀ`` (``-xᵀ b̄`` on the right, transposed for a transposed
  ``op``) masked to the triangle read.

Leading dimensions are batch dimensions throughout. Real element types only; a complex
Cholesky or solve is refused with the op named.
"""
from __future__ import annotations

import numpy as np

from ..ir import hlo
from ..ir.mlir import elem, ir, is_float_type, shape, tensor_type
from ..ir.regions import composite_attribute
from ..transforms.batching import leading_batch
from ..transforms.forward import by_transposition
from ..transforms.registry import adjoint, batching, composite_adjoint, composite_tangent, missing, tangent

Value = ir.Value


def _i32() -> ir.Type:
    return ir.IntegerType.get_signless(32)


# ----- small matrix helpers (last two dimensions; the others are a batch) ------------------

def _mT(x: Value) -> Value:
    r = len(shape(x))
    return hlo.transpose(x, [*range(r - 2), r - 1, r - 2])


def _matmul(a: Value, b: Value) -> Value:
    """``a @ b`` over the last two dimensions, the leading ones a batch."""
    r = len(shape(a))
    batch = list(range(r - 2))
    return hlo.dot_general(a, b, batch, batch, [r - 1], [r - 2])


def _mask(x: Value, keep: str) -> Value:
    """``x`` with the elements outside ``keep`` zeroed; ``keep`` names a part of the last two
    dimensions: ``"lower"`` (with the diagonal), ``"strict_lower"``, ``"upper"``,
    ``"strict_upper"``."""
    s = shape(x)
    r = len(s)
    rows = hlo.iota(s, _i32(), r - 2)
    cols = hlo.iota(s, _i32(), r - 1)
    direction = {"lower": "GE", "strict_lower": "GT", "upper": "LE", "strict_upper": "LT"}[keep]
    return hlo.select(hlo.compare(rows, cols, direction), x, hlo.zeros(x.type))


def _phi(x: Value) -> Value:
    """The lower triangle with its diagonal halved."""
    s = shape(x)
    r = len(s)
    rows = hlo.iota(s, _i32(), r - 2)
    cols = hlo.iota(s, _i32(), r - 1)
    half = hlo.multiply(x, hlo.like(0.5, x))
    lower = hlo.select(hlo.compare(rows, cols, "GT"), x, hlo.zeros(x.type))
    return hlo.select(hlo.compare(rows, cols, "EQ"), half, lower)


def _transpose_kind(op: ir.Operation) -> str:
    return str(op.attributes["transpose_a"]).split()[-1].rstrip(">")


def triangular_solve(a: Value, b: Value, *, left_side: bool, lower: bool, unit_diagonal: bool = False,
                     transpose_a: str = "NO_TRANSPOSE") -> Value:
    """A ``stablehlo.triangular_solve`` op."""
    return ir.Operation.create("stablehlo.triangular_solve", results=[b.type], operands=[a, b], attributes={
        "left_side": ir.BoolAttr.get(left_side), "lower": ir.BoolAttr.get(lower),
        "unit_diagonal": ir.BoolAttr.get(unit_diagonal),
        "transpose_a": hlo.attr(f"#stablehlo<transpose {transpose_a}>")}).result


def _solve_attrs(op: ir.Operation) -> dict:
    return {"left_side": hlo.read_bool(op, "left_side"), "lower": hlo.read_bool(op, "lower"),
            "unit_diagonal": hlo.read_bool(op, "unit_diagonal"), "transpose_a": _transpose_kind(op)}


def _check_real(op: ir.Operation) -> None:
    if not is_float_type(elem(op.operands[0])):
        raise missing(op, f" on {elem(op.operands[0])} elements (real floating-point types only)")


def _read_part(op: ir.Operation, x: Value) -> Value:
    """``x`` masked to the part of ``a`` a triangular_solve reads."""
    lower, unit = hlo.read_bool(op, "lower"), hlo.read_bool(op, "unit_diagonal")
    return _mask(x, ("strict_" if unit else "") + ("lower" if lower else "upper"))


# ----- adjoint and tangent rules ------------------------------------------------------------

def _lower_factor(op: ir.Operation) -> Value:
    """The lower-triangular factor ``L`` (``Uᵀ`` for an upper Cholesky)."""
    y = op.results[0]
    return y if hlo.read_bool(op, "lower") else _mT(y)


@adjoint("stablehlo.cholesky")
def _cholesky(op, cts):
    """ā = Φ(G + Gᵀ), G = L⁻ᵀ Φ(Lᵀ L̄) L⁻¹ (transposed for an upper factor)"""
    _check_real(op)
    (ct,) = cts
    lower = hlo.read_bool(op, "lower")
    factor = _lower_factor(op)
    lbar = _mask(ct if lower else _mT(ct), "lower")
    p = _phi(_matmul(_mT(factor), lbar))
    y = triangular_solve(factor, p, left_side=True, lower=True, transpose_a="TRANSPOSE")  # L⁻ᵀ P
    g = triangular_solve(factor, y, left_side=False, lower=True)  # (L⁻ᵀ P) L⁻¹
    abar = _phi(hlo.add(g, _mT(g)))
    return (abar if lower else _mT(abar),)


@tangent("stablehlo.cholesky")
def _cholesky_tangent(op, ts):
    """L̇ = L Φ(L⁻¹ Ṡ L⁻ᵀ), Ṡ = Φ(ȧ) + Φ(ȧ)ᵀ from the triangle read (transposed for upper)"""
    _check_real(op)
    (t,) = ts
    lower = hlo.read_bool(op, "lower")
    factor = _lower_factor(op)
    half = _phi(t if lower else _mT(t))
    s = hlo.add(half, _mT(half))
    y = triangular_solve(factor, s, left_side=True, lower=True)  # L⁻¹ Ṡ
    x = triangular_solve(factor, y, left_side=False, lower=True, transpose_a="TRANSPOSE")  # (L⁻¹ Ṡ) L⁻ᵀ
    dl = _matmul(factor, _phi(x))
    return [dl if lower else _mT(dl)]


def _flip(kind: str) -> str:
    return "NO_TRANSPOSE" if kind != "NO_TRANSPOSE" else "TRANSPOSE"


@adjoint("stablehlo.triangular_solve")
def _triangular_solve(op, cts):
    """b̄ = op(a)⁻ᵀ x̄ (x̄ op(a)⁻ᵀ on the right); ā = -b̄ xᵀ (-xᵀ b̄ on the right), transposed
    for a transposed op(a), masked to the triangle read"""
    _check_real(op)
    (ct,) = cts
    a = op.operands[0]
    x = op.results[0]
    attrs = _solve_attrs(op)
    bbar = triangular_solve(a, ct, **{**attrs, "transpose_a": _flip(attrs["transpose_a"])})
    if attrs["left_side"]:
        full = _matmul(bbar, _mT(x)) if attrs["transpose_a"] == "NO_TRANSPOSE" else _matmul(x, _mT(bbar))
    else:
        full = _matmul(_mT(x), bbar) if attrs["transpose_a"] == "NO_TRANSPOSE" else _matmul(_mT(bbar), x)
    return _read_part(op, hlo.negate(full)), bbar


@tangent("stablehlo.triangular_solve")
def _triangular_solve_tangent(op, ts):
    """ẋ = op(a)⁻¹ (ḃ - op(ȧ) x) (ẋ = (ḃ - x op(ȧ)) op(a)⁻¹ on the right), ȧ masked to the
    triangle read"""
    _check_real(op)
    ta, tb = ts
    a, b = op.operands
    x = op.results[0]
    attrs = _solve_attrs(op)
    rhs = tb if tb is not None else hlo.zeros(b.type)
    if ta is not None:
        da = _read_part(op, ta)
        if attrs["transpose_a"] != "NO_TRANSPOSE":
            da = _mT(da)
        rhs = hlo.subtract(rhs, _matmul(da, x) if attrs["left_side"] else _matmul(x, da))
    return [triangular_solve(a, rhs, **attrs)]


# Both work on the trailing two dimensions: one more leading one is a batch.
batching("stablehlo.cholesky", "stablehlo.triangular_solve")(leading_batch)


# ----- lowering to loops IREE compiles ---------------------------------------------------------

def _scalar_i32(value: int) -> Value:
    return hlo.splat(value, tensor_type([], _i32()))


def _counted_loop(n: int, carried: list[Value], body) -> list[Value]:
    """``for i in range(n): carried = body(i, *carried)`` as a ``stablehlo.while``."""
    op, cond, block = hlo.while_([_scalar_i32(0), *carried])
    with ir.InsertionPoint(cond):
        hlo.return_([hlo.compare(cond.arguments[0], _scalar_i32(n), "LT")], "stablehlo.return")
    with ir.InsertionPoint(block):
        i = block.arguments[0]
        new = body(i, *block.arguments[1:])
        hlo.return_([hlo.add(i, _scalar_i32(1)), *new], "stablehlo.return")
    return list(op.results[1:])


def _forward_substitution(t: Value, b: Value) -> Value:
    """``x`` with ``t x = b`` for a lower-triangular ``t`` (its upper triangle zero), row by row:
    ``x_i = (b_i - t_i x) / t_ii`` while the rows of ``x`` from ``i`` on are still zero."""
    batch = list(shape(t)[:-2])
    n, m = shape(b)[-2:]
    rank = len(batch)

    def body(i, x):
        zero = _scalar_i32(0)
        lead = [zero] * rank
        row = hlo.dynamic_slice(t, [*lead, i, zero], [*batch, 1, n])
        diag = hlo.dynamic_slice(t, [*lead, i, i], [*batch, 1, 1])
        bi = hlo.dynamic_slice(b, [*lead, i, zero], [*batch, 1, m])
        done = hlo.dot_general(row, x, list(range(rank)), list(range(rank)), [rank + 1], [rank])
        diag = hlo.broadcast_in_dim(diag, [*batch, 1, m], list(range(rank + 2)))
        xi = hlo.divide(hlo.subtract(bi, done), diag)
        return [hlo.dynamic_update_slice(x, xi, [*lead, i, zero])]

    return _counted_loop(n, [hlo.zeros(b.type)], body)[0]


def lower_triangular_solve(op: ir.Operation) -> Value | None:
    """The solve as forward substitution on a lower-triangular matrix (``None`` for complex
    elements or run-time shapes, left to IREE):
    the triangle read (unit diagonal set), ``op`` applied, the right side solved as the
    transposed left one, an upper matrix turned lower by reversing rows and columns."""
    a, b = op.operands
    if not is_float_type(elem(a)) or not (hlo.is_static(a) and hlo.is_static(b)):
        return None
    attrs = _solve_attrs(op)
    r = len(shape(a))
    m = _read_part(op, a)
    if attrs["unit_diagonal"]:
        rows, cols = hlo.iota(shape(a), _i32(), r - 2), hlo.iota(shape(a), _i32(), r - 1)
        m = hlo.select(hlo.compare(rows, cols, "EQ"), hlo.ones(a.type), m)
    lower = attrs["lower"]
    if attrs["transpose_a"] != "NO_TRANSPOSE":
        m, lower = _mT(m), not lower
    if not attrs["left_side"]:  # x op(a) = b  <=>  op(a)ᵀ xᵀ = bᵀ
        m, lower, b = _mT(m), not lower, _mT(b)
    if not lower:  # J m J is lower triangular; J m J (J x) = J b
        m, b = hlo.reverse(m, [r - 2, r - 1]), hlo.reverse(b, [r - 2])
    x = _forward_substitution(m, b)
    if not lower:
        x = hlo.reverse(x, [r - 2])
    return x if attrs["left_side"] else _mT(x)


def lower_cholesky(op: ir.Operation) -> Value | None:
    """Left-looking Cholesky, one column per iteration (``None`` for complex elements or
    run-time shapes):
    ``v = a[:, j] - L L[j, :]ᵀ``, ``L[j, j] = √v_j``, ``L[i, j] = v_i / L[j, j]`` below it,
    reading the lower triangle of ``a`` (of ``aᵀ`` for an upper factor, returned transposed).
    A matrix that is not positive definite gives NaNs, as XLA's Cholesky does."""
    a = op.operands[0]
    if not is_float_type(elem(a)) or not hlo.is_static(a):
        return None
    lower = hlo.read_bool(op, "lower")
    if not lower:
        a = _mT(a)
    batch = list(shape(a)[:-2])
    n = shape(a)[-1]
    rank = len(batch)

    def body(j, factor):
        zero = _scalar_i32(0)
        lead = [zero] * rank
        column = hlo.dynamic_slice(a, [*lead, zero, j], [*batch, n, 1])
        row = hlo.dynamic_slice(factor, [*lead, j, zero], [*batch, 1, n])
        done = hlo.dot_general(factor, row, list(range(rank)), list(range(rank)), [rank + 1], [rank + 1])
        v = hlo.subtract(column, done)
        pivot = hlo.dynamic_slice(v, [*lead, j, zero], [*batch, 1, 1])
        d = hlo.broadcast_in_dim(hlo.unary("stablehlo.sqrt", pivot), [*batch, n, 1], list(range(rank + 2)))
        rows = hlo.iota([*batch, n, 1], _i32(), rank)
        at = hlo.broadcast_in_dim(j, [*batch, n, 1], [])
        new = hlo.select(hlo.compare(rows, at, "GT"), hlo.divide(v, d),
                         hlo.select(hlo.compare(rows, at, "EQ"), d, hlo.zeros(v.type)))
        return [hlo.dynamic_update_slice(factor, new, [*lead, zero, j])]

    factor = _counted_loop(n, [hlo.zeros(a.type)], body)[0]
    return factor if lower else _mT(factor)




# ----- decompositions IREE has no op for: composites with TensorFlow's gradients -------------
#
# ``lu``, ``eigh``, ``svd`` and ``qr`` are ``stablehlo.composite`` ops named below whose
# decomposition is a loop of plain StableHLO (IREE compiles it by inlining: partial-pivoting LU,
# cyclic Jacobi, one-sided Jacobi, Householder reflections, built by the functions here) and whose
# adjoint is TensorFlow's registered gradient computed from the composite's results, so the loops
# themselves are never differentiated. Tangents are those adjoints transposed; batching batches
# the decomposition (every builder takes leading batch dimensions).

LU = "irgrad.linalg.lu"
EIGH = "irgrad.linalg.eigh"
SVD = "irgrad.linalg.svd"
QR = "irgrad.linalg.qr"


def _bcast(x: Value, s: list[int]) -> Value:
    """``x`` (its shape a prefix of ``s``) broadcast to ``s``."""
    return hlo.broadcast_in_dim(x, s, list(range(len(shape(x)))))


def _at(s: list[int], dim: int, k: Value | int) -> Value:
    """The mask ``index along dim == k`` over shape ``s`` (``k`` an int, a scalar i32, or one
    i32 per batch element: a value whose shape is a prefix of ``s``)."""
    it = hlo.iota(s, _i32(), dim)
    if isinstance(k, int):
        return hlo.compare(it, hlo.splat(k, tensor_type(s, _i32())), "EQ")
    return hlo.compare(it, hlo.broadcast_in_dim(k, s, list(range(len(shape(k))))), "EQ")


def _pick(x: Value, dim: int, k: Value | int) -> Value:
    """The slice of ``x`` at index ``k`` along ``dim`` (that dimension removed)."""
    return hlo.reduce_sum(hlo.select(_at(shape(x), dim, k), x, hlo.zeros(x.type)), [dim])


def _eye(s: list[int], et: ir.Type) -> Value:
    t = tensor_type(s, et)
    r = len(s)
    eq = hlo.compare(hlo.iota(s, _i32(), r - 2), hlo.iota(s, _i32(), r - 1), "EQ")
    return hlo.select(eq, hlo.ones(t), hlo.zeros(t))


def _diag(x: Value) -> Value:
    """``[..., k]`` -> the ``[..., k, k]`` matrix with ``x`` on its diagonal."""
    s = [*shape(x), shape(x)[-1]]
    r = len(s)
    full = hlo.broadcast_in_dim(x, s, [*range(r - 2), r - 2])
    return hlo.select(hlo.compare(hlo.iota(s, _i32(), r - 2), hlo.iota(s, _i32(), r - 1), "EQ"), full,
                      hlo.zeros(full.type))


def _diag_part(x: Value) -> Value:
    r = len(shape(x))
    s = shape(x)
    eq = hlo.compare(hlo.iota(s, _i32(), r - 2), hlo.iota(s, _i32(), r - 1), "EQ")
    return hlo.reduce_sum(hlo.select(eq, x, hlo.zeros(x.type)), [r - 1])


def _outer(u: Value, v: Value) -> Value:
    """``u [..., m]``, ``v [..., n]`` -> ``u vᵀ [..., m, n]``."""
    b = len(shape(u)) - 1
    s = [*shape(u), shape(v)[-1]]
    return hlo.multiply(hlo.broadcast_in_dim(u, s, list(range(b + 1))),
                        hlo.broadcast_in_dim(v, s, [*range(b), b + 1]))


def _mv(a: Value, x: Value) -> Value:
    """``a [..., m, n] @ x [..., n]``."""
    b = len(shape(x)) - 1
    return hlo.dot_general(a, x, list(range(b)), list(range(b)), [b + 1], [b])


def _vm(x: Value, a: Value) -> Value:
    """``xᵀ a``: ``x [..., m]``, ``a [..., m, n]`` -> ``[..., n]``."""
    b = len(shape(x)) - 1
    return hlo.dot_general(x, a, list(range(b)), list(range(b)), [b], [b])


def _while(carried: list[Value], cond, body) -> list[Value]:
    op, c, blk = hlo.while_(carried)
    with ir.InsertionPoint(c):
        hlo.return_([cond(*c.arguments)], "stablehlo.return")
    with ir.InsertionPoint(blk):
        hlo.return_(list(body(*blk.arguments)), "stablehlo.return")
    return list(op.results)


def _scalar(x: Value, kind: str = "add") -> Value:
    return hlo.reduce(x, list(range(len(shape(x)))), kind)


def _safe_reciprocal(x: Value) -> Value:
    """TensorFlow's ``_SafeReciprocal``: ``x / (x² + 1e-20)``."""
    return hlo.divide(x, hlo.add(hlo.multiply(x, x), hlo.like(1e-20, x)))


def _gap_reciprocals(x: Value) -> Value:
    """``F [..., n, n]``, ``F_ij = 1 / (x_j - x_i)`` (safe reciprocal), 0 on the diagonal."""
    s = [*shape(x), shape(x)[-1]]
    r = len(s)
    diff = hlo.subtract(hlo.broadcast_in_dim(x, s, [*range(r - 2), r - 1]),
                        hlo.broadcast_in_dim(x, s, [*range(r - 2), r - 2]))
    eq = hlo.compare(hlo.iota(s, _i32(), r - 2), hlo.iota(s, _i32(), r - 1), "EQ")
    return hlo.select(eq, hlo.zeros(diff.type), _safe_reciprocal(diff))


def _slice_last(x: Value, dim_from_end: int, start: int, stop: int) -> Value:
    s = shape(x)
    d = len(s) - dim_from_end
    lo = [0] * len(s)
    hi = list(s)
    lo[d], hi[d] = start, stop
    return hlo.slice(x, lo, hi, [1] * len(s))


def _order(x: Value, descending: bool) -> Value:
    """The permutation matrix ``P [..., n, n]`` (``P[i, k] = 1`` where ``x_i`` is the k-th in
    order; ties by index) that sorts ``x [..., n]``: ``x P`` sorted, ``M P`` its columns alike."""
    s = [*shape(x), shape(x)[-1]]
    r = len(s)
    xi = hlo.broadcast_in_dim(x, s, [*range(r - 2), r - 2])
    xj = hlo.broadcast_in_dim(x, s, [*range(r - 2), r - 1])
    ii, jj = hlo.iota(s, _i32(), r - 2), hlo.iota(s, _i32(), r - 1)
    ahead = hlo.compare(xj, xi, "GT" if descending else "LT")
    tie = hlo.binary("stablehlo.and", hlo.compare(xj, xi, "EQ"), hlo.compare(jj, ii, "LT"))
    before = hlo.convert(hlo.binary("stablehlo.or", ahead, tie), _i32())
    rank = hlo.reduce_sum(before, [r - 1])  # [..., n]
    hit = hlo.compare(hlo.broadcast_in_dim(rank, s, [*range(r - 2), r - 2]), jj, "EQ")
    return hlo.select(hit, hlo.ones(tensor_type(s, elem(x))), hlo.zeros(tensor_type(s, elem(x))))


def _sorted(x: Value, p: Value) -> Value:
    return _vm(x, p)


# -- Jacobi rotations (eigh, svd) --

def _rotation(app: Value, aqq: Value, apq: Value, s: list[int], p: Value, q: Value) -> Value:
    """The Jacobi rotation ``J`` (``[..., n, n]``, ``J_pp = J_qq = c``, ``J_pq = s = -J_qp``)
    with ``(Jᵀ A J)_pq = 0`` for the symmetric 2×2 ``[[app, apq], [apq, aqq]]`` (one per batch
    element; Numerical Recipes' choice of the smaller angle)."""
    zero = hlo.zeros(apq.type)
    flat = hlo.compare(apq, zero, "EQ")
    safe = hlo.select(flat, hlo.ones(apq.type), apq)
    tau = hlo.divide(hlo.subtract(aqq, app), hlo.multiply(hlo.like(2, safe), safe))
    sign = hlo.select(hlo.compare(tau, zero, "GE"), hlo.ones(tau.type), hlo.like(-1, tau))
    root = hlo.unary("stablehlo.sqrt", hlo.add(hlo.ones(tau.type), hlo.multiply(tau, tau)))
    t = hlo.select(flat, zero, hlo.divide(sign, hlo.add(hlo.unary("stablehlo.abs", tau), root)))
    c = hlo.unary("stablehlo.rsqrt", hlo.add(hlo.ones(t.type), hlo.multiply(t, t)))
    sn = hlo.multiply(t, c)
    r = len(s)
    rp, rq, cp, cq = _at(s, r - 2, p), _at(s, r - 2, q), _at(s, r - 1, p), _at(s, r - 1, q)

    def both(a, b):
        return hlo.binary("stablehlo.and", a, b)

    j = _eye(s, elem(app))
    j = hlo.select(hlo.binary("stablehlo.or", both(rp, cp), both(rq, cq)), _bcast(c, s), j)
    j = hlo.select(both(rp, cq), _bcast(sn, s), j)
    return hlo.select(both(rq, cp), _bcast(hlo.negate(sn), s), j)


def _jacobi(state: list[Value], n: int, entries, rotate, gram) -> list[Value]:
    """Cyclic Jacobi sweeps over every pair ``p < q`` until the off-diagonal of ``gram(state)``
    is below ``n·eps`` of its norm (at most 40 sweeps): ``entries(state, p, q)`` gives the
    2×2 to diagonalise, ``rotate(state, J)`` applies the rotation."""
    if n < 2:
        return state
    pairs = [(p, q) for p in range(n) for q in range(p + 1, n)]
    ps = hlo.constant(np.array([p for p, _ in pairs], np.int32), "int32")
    qs = hlo.constant(np.array([q for _, q in pairs], np.int32), "int32")
    eps = float(np.finfo(np.float32 if ir.FloatType(elem(state[0])).width == 32 else np.float64).eps)
    tol = (n * eps) ** 2

    def more(sweep, *st):
        g = gram(list(st))
        s = shape(g)
        r = len(s)
        off = hlo.select(hlo.compare(hlo.iota(s, _i32(), r - 2), hlo.iota(s, _i32(), r - 1), "NE"), g,
                         hlo.zeros(g.type))
        big = hlo.compare(_scalar(hlo.multiply(off, off)), hlo.multiply(_scalar(hlo.multiply(g, g)),
                                                                         hlo.like(tol, _scalar(g))), "GT")
        return hlo.binary("stablehlo.and", hlo.compare(sweep, _scalar_i32(40), "LT"), big)

    def sweep(count, *st):
        def pair(k, *inner):
            p = hlo.reshape(hlo.dynamic_slice(ps, [k], [1]), [])
            q = hlo.reshape(hlo.dynamic_slice(qs, [k], [1]), [])
            app, aqq, apq = entries(list(inner), p, q)
            return rotate(list(inner), _rotation(app, aqq, apq, [*shape(app), n, n], p, q))
        return [hlo.add(count, _scalar_i32(1)), *_counted_loop(len(pairs), list(st), pair)]

    return _while([_scalar_i32(0), *state], more, sweep)[1:]


def eigh_decomposition(a: Value) -> list[Value]:
    """``(e, v)``: eigenvalues ascending and eigenvectors (columns) of the symmetric matrix
    whose lower triangle is that of ``a`` (TensorFlow reads the lower triangle only)."""
    n = shape(a)[-1]
    s = shape(a)
    sym = hlo.add(_mask(a, "lower"), _mT(_mask(a, "strict_lower")))
    r = len(s)

    def entries(st, p, q):
        m = st[0]
        row_p, row_q = _pick(m, r - 2, p), _pick(m, r - 2, q)
        return _pick(row_p, r - 2, p), _pick(row_q, r - 2, q), _pick(row_p, r - 2, q)

    def rotate(st, j):
        m, v = st
        return [_matmul(_mT(j), _matmul(m, j)), _matmul(v, j)]

    m, v = _jacobi([sym, _eye(s, elem(a))], n, entries, rotate, lambda st: st[0])
    e = _diag_part(m)
    order = _order(e, descending=False)
    return [_sorted(e, order), _matmul(v, order)]


def householder_qr(a: Value) -> list[Value]:
    """``(q [..., m, m], r [..., m, n])`` with ``a = q r`` by Householder reflections of
    Eigen's convention (the one TensorFlow's CPU kernel uses): ``r_jj = -sign(a_jj) ‖x‖``, and
    no reflection where a column is already zero below the diagonal."""
    s = shape(a)
    m, n = s[-2:]
    r = len(s)
    batch = s[:-2]
    vec = [*batch, m]

    def step(j, q, rr):
        rows = hlo.iota(vec, _i32(), r - 2)
        at = hlo.broadcast_in_dim(j, vec, [])
        x = hlo.select(hlo.compare(rows, at, "GE"), _pick(rr, r - 1, j), hlo.zeros(tensor_type(vec, elem(a))))
        alpha = _pick(x, r - 2, j)
        below = hlo.select(hlo.compare(rows, at, "GT"), x, hlo.zeros(x.type))
        tail = hlo.reduce_sum(hlo.multiply(below, below), [r - 2])
        norm = hlo.unary("stablehlo.sqrt", hlo.add(hlo.multiply(alpha, alpha), tail))
        beta = hlo.select(hlo.compare(alpha, hlo.zeros(alpha.type), "GE"), hlo.negate(norm), norm)
        v = hlo.select(hlo.compare(rows, at, "EQ"), _bcast(hlo.subtract(alpha, beta), vec), x)
        vv = hlo.reduce_sum(hlo.multiply(v, v), [r - 2])
        skip = hlo.compare(tail, hlo.zeros(tail.type), "EQ")
        scale = hlo.select(skip, hlo.zeros(vv.type),
                           hlo.divide(hlo.like(2, vv), hlo.select(skip, hlo.ones(vv.type), vv)))
        sv = hlo.multiply(v, _bcast(scale, vec))
        rr = hlo.subtract(rr, _outer(sv, _vm(v, rr)))
        q = hlo.subtract(q, _outer(_mv(q, v), sv))
        return [q, rr]

    q, rr = _counted_loop(min(m, n), [_eye([*batch, m, m], elem(a)), a], step)
    return [q, _mask(rr, "upper")]


def qr_decomposition(a: Value, full_matrices: bool) -> list[Value]:
    m, n = shape(a)[-2:]
    q, rr = householder_qr(a)
    if full_matrices or m <= n:
        return [q, rr]
    return [_slice_last(q, 1, 0, n), _slice_last(rr, 2, 0, n)]


def svd_decomposition(a: Value, full_matrices: bool) -> list[Value]:
    """``(s, u, v)``, ``a = u diag(s) vᵀ``, ``s`` descending: one-sided Jacobi on the columns of
    ``a`` (of ``aᵀ`` when it is wide); ``u`` completed to a square matrix by Householder
    reflections for ``full_matrices``. A zero singular value gets a zero column of ``u``."""
    m, n = shape(a)[-2:]
    if m < n:
        s, u, v = svd_decomposition(_mT(a), full_matrices)
        return [s, v, u]
    r = len(shape(a))
    batch = shape(a)[:-2]

    def entries(st, p, q):
        w = st[0]
        cp, cq = _pick(w, r - 1, p), _pick(w, r - 1, q)
        return (hlo.reduce_sum(hlo.multiply(cp, cp), [r - 2]), hlo.reduce_sum(hlo.multiply(cq, cq), [r - 2]),
                hlo.reduce_sum(hlo.multiply(cp, cq), [r - 2]))

    def rotate(st, j):
        return [_matmul(st[0], j), _matmul(st[1], j)]

    w, v = _jacobi([a, _eye([*batch, n, n], elem(a))], n, entries, rotate,
                   lambda st: _matmul(_mT(st[0]), st[0]))
    sig = hlo.unary("stablehlo.sqrt", hlo.reduce_sum(hlo.multiply(w, w), [r - 2]))
    order = _order(sig, descending=True)
    sig, w, v = _sorted(sig, order), _matmul(w, order), _matmul(v, order)
    full = hlo.broadcast_in_dim(sig, shape(w), [*range(r - 2), r - 1])
    zero = hlo.compare(full, hlo.zeros(full.type), "EQ")
    u = hlo.select(zero, hlo.zeros(w.type), hlo.divide(w, hlo.select(zero, hlo.ones(full.type), full)))
    if full_matrices and m > n:
        q, _ = householder_qr(u)
        u = hlo.concatenate([u, _slice_last(q, 1, n, m)], r - 1)
    return [sig, u, v]


def lu_decomposition(a: Value) -> list[Value]:
    """``(lu, perm, sign)``: partial-pivoting LU of square ``a`` (``a[perm] = L U``, ``L`` unit
    lower and ``U`` upper packed in ``lu``, ``perm`` i32, ``sign`` the i32 ±1 parity of
    ``perm``). The pivot is the first largest ``|a_ik|`` (LAPACK's and Eigen's choice)."""
    s = shape(a)
    n = s[-1]
    r = len(s)
    batch = s[:-2]
    vec = [*batch, n]
    it = tensor_type(vec, _i32())

    def step(k, x, perm, sign):
        rows = hlo.iota(s, _i32(), r - 2)
        cols = hlo.iota(s, _i32(), r - 1)
        kk = hlo.broadcast_in_dim(k, s, [])
        idx = hlo.iota(vec, _i32(), r - 2)
        col = _pick(x, r - 1, k)
        size = hlo.select(hlo.compare(idx, hlo.broadcast_in_dim(k, vec, []), "GE"), hlo.unary("stablehlo.abs", col),
                          hlo.like(-1, col))
        top = hlo.reduce(size, [r - 2], "max")
        piv = hlo.reduce(hlo.select(hlo.compare(size, _bcast(top, vec), "EQ"), idx, hlo.splat(n, it)), [r - 2], "min")
        pp = hlo.broadcast_in_dim(piv, s, list(range(len(batch))))
        row_k, row_p = _pick(x, r - 2, k), _pick(x, r - 2, piv)
        b = [*range(r - 2), r - 1]
        x = hlo.select(hlo.compare(rows, kk, "EQ"), hlo.broadcast_in_dim(row_p, s, b),
                       hlo.select(hlo.compare(rows, pp, "EQ"), hlo.broadcast_in_dim(row_k, s, b), x))
        pk, pv = _pick(perm, r - 2, k), _pick(perm, r - 2, piv)
        perm = hlo.select(_at(vec, r - 2, k), _bcast(pv, vec), hlo.select(_at(vec, r - 2, piv), _bcast(pk, vec), perm))
        swapped = hlo.compare(piv, hlo.broadcast_in_dim(k, shape(piv), []), "NE")
        sign = hlo.select(swapped, hlo.negate(sign), sign)
        pivot = _pick(row_p, r - 2, k)
        after = hlo.compare(idx, hlo.broadcast_in_dim(k, vec, []), "GT")
        zeros = hlo.zeros(tensor_type(vec, elem(a)))
        low = hlo.select(after, hlo.divide(_pick(x, r - 1, k), _bcast(pivot, vec)), zeros)
        urow = hlo.select(after, row_p, zeros)
        x = hlo.subtract(x, _outer(low, urow))
        below = hlo.binary("stablehlo.and", hlo.compare(cols, kk, "EQ"), hlo.compare(rows, kk, "GT"))
        x = hlo.select(below, hlo.broadcast_in_dim(low, s, list(range(r - 1))), x)
        return [x, perm, sign]

    start = [a, hlo.iota(vec, _i32(), r - 2), hlo.splat(1, tensor_type(batch, _i32()))]
    return _counted_loop(n, start, step)


def _permutation_matrix(perm: Value, et: ir.Type) -> Value:
    """``P [..., n, n]`` with ``P[i, j] = 1`` where ``perm[i] = j`` (so ``P a = a[perm]``)."""
    n = shape(perm)[-1]
    s = [*shape(perm), n]
    r = len(s)
    hit = hlo.compare(hlo.broadcast_in_dim(perm, s, list(range(r - 1))), hlo.iota(s, _i32(), r - 1), "EQ")
    return hlo.select(hit, hlo.ones(tensor_type(s, et)), hlo.zeros(tensor_type(s, et)))


def _cts(op: ir.Operation, cts) -> list[Value]:
    return [ct if ct is not None else hlo.zeros(res.type) for ct, res in zip(cts, op.results)]


def _flag(op: ir.Operation, key: str) -> bool:
    attr = composite_attribute(op, key)
    return attr is not None and ir.BoolAttr(attr).value


@composite_adjoint(LU)
def _lu(op, cts):
    """ā = Pᵀ L⁻ᵀ (tril₋₁(Lᵀ L̄) + triu(Ū Uᵀ)) U⁻ᵀ (the LU derivative; TensorFlow registers
    none for ``Lu``: inv, det, slogdet and solve get theirs through it)"""
    if cts[0] is None:
        return (None,)
    lu, perm = op.results[0], op.results[1]
    ct = cts[0]
    s = shape(lu)
    lower = hlo.add(_mask(lu, "strict_lower"), _eye(s, elem(lu)))
    upper = _mask(lu, "upper")
    phi = hlo.add(_mask(_matmul(_mT(lower), _mask(ct, "strict_lower")), "strict_lower"),
                  _mask(_matmul(_mask(ct, "upper"), _mT(upper)), "upper"))
    y = triangular_solve(lower, phi, left_side=True, lower=True, unit_diagonal=True, transpose_a="TRANSPOSE")
    x = triangular_solve(upper, y, left_side=False, lower=False, transpose_a="TRANSPOSE")
    return (_matmul(_mT(_permutation_matrix(perm, elem(lu))), x),)


@composite_adjoint(EIGH)
def _eigh(op, cts):
    """TensorFlow's SelfAdjointEigV2 gradient: G = v (diag(ē) + F ∘ vᵀv̄) vᵀ with
    F_ij = 1/(e_j - e_i) (safe reciprocal, 0 on the diagonal), ā = tril(G + Gᵀ), diagonal halved"""
    e, v = op.results
    ge, gv = cts
    if ge is None and gv is None:
        return (None,)
    inner = _diag(ge) if ge is not None else hlo.zeros(v.type)
    if gv is not None:
        inner = hlo.add(inner, hlo.multiply(_gap_reciprocals(e), _matmul(_mT(v), gv)))
    g = _matmul(v, _matmul(inner, _mT(v)))
    return (_phi(hlo.add(g, _mT(g))),)


@composite_adjoint(QR)
def _qr(op, cts):
    """TensorFlow's Qr gradient (arXiv 2009.10071): square and deep matrices directly, wide ones
    through the square part; NotImplementedError for a deep matrix with ``full_matrices``"""
    q, r_ = op.results
    if cts[0] is None and cts[1] is None:
        return (None,)
    dq, dr = _cts(op, cts)
    m, n = shape(q)[-2], shape(r_)[-1]
    if shape(r_)[-2] > n and shape(q)[-1] == m:
        raise NotImplementedError(f"QrGrad not implemented when nrows > ncols and full_matrices is true "
                                  f"(r has shape {shape(r_)}) at {op.location}")

    def tsolve(x, r):  # x r⁻ᵀ
        return triangular_solve(r, x, left_side=False, lower=False, transpose_a="TRANSPOSE")

    def square_deep(q, r, dq, dr):
        qdq = _matmul(_mT(q), dq)
        rdr = _matmul(r, _mT(dr))
        tril = _mask(hlo.add(hlo.subtract(qdq, _mT(qdq)), hlo.subtract(rdr, _mT(rdr))), "lower")
        grad_a = _matmul(q, hlo.add(dr, tsolve(tril, r)))
        return hlo.add(grad_a, tsolve(hlo.subtract(dq, _matmul(q, qdq)), r))

    if m >= n:
        return (square_deep(q, r_, dq, dr),)
    a = op.operands[0]
    y = _slice_last(a, 1, m, n)
    u = _slice_last(r_, 1, 0, m)
    dv = _slice_last(dr, 1, m, n)
    du = _slice_last(dr, 1, 0, m)
    dx = square_deep(q, u, hlo.add(dq, _matmul(y, _mT(dv))), du)
    return (hlo.concatenate([dx, _matmul(q, dv)], len(shape(a)) - 1),)


@composite_adjoint(SVD)
def _svd(op, cts):
    """TensorFlow's Svd gradient (compute_uv): Giles / Townsend with safe reciprocals,
    computed on the transpose for a deep matrix; NotImplementedError for full_matrices with
    |m - n| > 1"""
    if all(ct is None for ct in cts):
        return (None,)
    s, u, v = op.results
    gs, gu, gv = _cts(op, cts)
    a = op.operands[0]
    m, n = shape(a)[-2:]
    full_matrices = _flag(op, "full_matrices")
    use_adjoint = m > n
    if use_adjoint:
        m, n, u, v, gu, gv = n, m, v, u, gv, gu
    if full_matrices and abs(m - n) > 1:
        raise NotImplementedError(f"svd gradient is not implemented for abs(m - n) > 1 when full_matrices is True "
                                  f"(m={m}, n={n}) at {op.location}")
    s_mat = _diag(s)
    s2 = hlo.multiply(s, s)
    f = _gap_reciprocals(s2)
    s_inv = _diag(_safe_reciprocal(s))
    v1 = _slice_last(v, 1, 0, m)
    gv1 = _slice_last(gv, 1, 0, m)
    f_u = hlo.multiply(f, _matmul(_mT(u), gu))
    f_v = hlo.multiply(f, _matmul(_mT(v1), gv1))
    term1 = hlo.add(hlo.add(_diag(gs), _matmul(hlo.add(f_u, _mT(f_u)), s_mat)),
                    _matmul(s_mat, hlo.add(f_v, _mT(f_v))))
    grad = _matmul(u, _matmul(term1, _mT(v1)))
    if m != n:
        gv1t = _mT(gv1)
        term2 = hlo.subtract(gv1t, _matmul(_matmul(gv1t, v1), _mT(v1)))
        if full_matrices:
            v2 = _slice_last(v, 1, m, n)
            gv2 = _slice_last(gv, 1, m, n)
            term2 = hlo.subtract(term2, _matmul(_matmul(_mT(v1), gv2), _mT(v2)))
        grad = hlo.add(grad, _matmul(_matmul(u, s_inv), term2))
    return (_mT(grad) if use_adjoint else grad,)


# The tangents are the adjoints transposed (TensorFlow's forward accumulator does the same for
# ops with only a registered gradient); batching batches the decomposition (composites.py).
@composite_tangent(LU)
def _lu_tangent(op, ts):
    """lu̇ = L tril₋₁(F) + triu(F) U, F = L⁻¹ P ȧ U⁻¹"""
    (t,) = ts
    if t is None:
        return [None] * len(op.results)
    lu, perm = op.results[0], op.results[1]
    s = shape(lu)
    x = _matmul(_permutation_matrix(perm, elem(lu)), t)
    y = triangular_solve(lu, x, left_side=True, lower=True, unit_diagonal=True)
    f = triangular_solve(lu, y, left_side=False, lower=False)
    lower = hlo.add(_mask(lu, "strict_lower"), _eye(s, elem(lu)))
    dlu = hlo.add(_matmul(lower, _mask(f, "strict_lower")), _matmul(_mask(f, "upper"), _mask(lu, "upper")))
    return [dlu, None, None]


for _name in (EIGH, QR, SVD):
    composite_tangent(_name)(by_transposition)


__all__ = ["triangular_solve", "lower_cholesky", "lower_triangular_solve", "LU", "EIGH", "SVD", "QR",
           "lu_decomposition", "eigh_decomposition", "svd_decomposition", "qr_decomposition", "householder_qr"]
