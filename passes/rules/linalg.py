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

from ..ir import hlo
from ..ir.mlir import elem, ir, is_float_type, shape, tensor_type
from ..transforms.batching import leading_batch
from ..transforms.registry import adjoint, batching, missing, tangent

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


__all__ = ["triangular_solve", "lower_cholesky", "lower_triangular_solve"]
