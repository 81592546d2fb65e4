"""``ig.linalg``: TensorFlow's ``tf.linalg`` (names, arguments, batch dimensions, gradients).

Every op works on the last two dimensions; leading dimensions are a batch. Floating-point
tensors only (irgrad has no complex dtypes).

* Compositions of StableHLO ops, differentiated through them: ``matvec``, ``tensordot``,
  ``trace``, ``diag``, ``diag_part``, ``set_diag``, ``band_part``, ``adjoint``,
  ``matrix_transpose``, ``triangular_solve`` and ``cholesky`` (``stablehlo.triangular_solve`` /
  ``stablehlo.cholesky``, lowered to loops for IREE by ``passes/rules/linalg.py``),
  ``cholesky_solve``, ``logdet``.
* ``matmul``, ``norm``, ``l2_normalize``: the ops of ``ig`` / ``ig.math`` under ``tf.linalg``'s
  names.
* ``lu``, ``qr``, ``svd``, ``eigh`` / ``eigvalsh``: ``stablehlo.composite`` ops
  (``irgrad.linalg.*``) whose decomposition is a loop of plain StableHLO and whose adjoint is
  TensorFlow's registered gradient (``passes/rules/linalg.py``).
* ``solve``, ``inv``, ``det``, ``slogdet``: the LU composite and triangular solves; their
  gradients (through LU's) equal TensorFlow's ``MatrixSolve`` / ``MatrixInverse`` /
  ``MatrixDeterminant`` / ``LogMatrixDeterminant`` gradients.

TF-compat: where TensorFlow raises at run time on a singular or not positive definite input
(``cholesky``, ``inv``, ``solve``), irgrad returns NaN or inf, as XLA does.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from . import dtypes
from .framework import Tensor
from .ops.array_ops import _type_key, expand_dims, squeeze, stop_gradient
from .ops.core import broadcast_shape, broadcast_value, convert_pair, convert_to_tensor, current_graph, emit
from .ops.math_ops import add, cast, log, multiply, subtract
from .ops.reduce_ops import l2_normalize, matmul, norm, reduce_sum  # noqa: F401 (tf.linalg's aliases of them)
from .passes.ir import hlo
from .passes.ir.mlir import element_type, ir, tensor_type
from .passes.rules import linalg as rules

Lu = namedtuple("Lu", ["lu", "p"])
Qr = namedtuple("Qr", ["q", "r"])
Slogdet = namedtuple("Slogdet", ["sign", "log_abs_determinant"])


def _i32() -> ir.Type:
    return ir.IntegerType.get_signless(32)


def _matrix(x, name: str, *, square: bool = False) -> Tensor:
    x = convert_to_tensor(x)
    if not x.dtype.is_floating:
        raise TypeError(f"{name}: expected a floating-point tensor, got {x.dtype.name} ({x.name!r})")
    if x.ndim < 2:
        raise ValueError(f"{name}: expected a tensor of rank >= 2 (a batch of matrices), got shape {tuple(x.shape)}")
    if None in x.shape[-2:]:
        raise ValueError(f"{name}: the matrix dimensions must be known when tracing, got shape {tuple(x.shape)}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ValueError(f"{name}: expected square matrices, got shape {tuple(x.shape)}")
    return x


def _composite(kind: str, x: Tensor, results, body, key: str, name: str, flags: dict | None = None) -> list[Tensor]:
    """``stablehlo.composite kind (x)`` whose decomposition ``body(value) -> values`` is a
    private function (one per ``key`` and type); ``results(type) -> types``."""
    graph = current_graph()
    t = x.value.type

    def build(fname: str) -> None:
        _, block = hlo.func(fname, [t], results(t), private=True)
        with ir.InsertionPoint(block):
            hlo.return_(body(block.arguments[0]))

    fname = graph.private_function(f"{key}_{_type_key(t)}", build)

    def make():
        attrs = {k: ir.BoolAttr.get(v) for k, v in (flags or {}).items()}
        return hlo.composite(kind, [x.value], results(t), fname, attrs or None)

    return emit(name, make)


def _dims(t: ir.Type) -> list[int]:
    return list(ir.RankedTensorType(t).shape)


def _elem(t: ir.Type) -> ir.Type:
    return ir.RankedTensorType(t).element_type


# ----- structure ------------------------------------------------------------------------------

def matrix_transpose(a, name="matrix_transpose", conjugate=False) -> Tensor:
    """The transpose of the last two dimensions (``tf.linalg.matrix_transpose``)."""
    a = convert_to_tensor(a)
    if a.ndim < 2:
        raise ValueError(f"{name}: expected a tensor of rank >= 2, got shape {tuple(a.shape)}")
    return emit(name, lambda: rules._mT(a.value))


def adjoint(matrix, name=None) -> Tensor:
    """The conjugate transpose of the last two dimensions (``tf.linalg.adjoint``): real dtypes,
    so the transpose."""
    return matrix_transpose(matrix, name or "adjoint")


def band_part(input, num_lower, num_upper, name=None) -> Tensor:  # noqa: A002
    """``tf.linalg.band_part``: keeps ``input[..., i, j]`` where ``(num_lower < 0 or i - j <=
    num_lower) and (num_upper < 0 or j - i <= num_upper)``, zeros elsewhere (``band_part(x, -1,
    0)`` is the lower triangle). ``num_lower`` and ``num_upper`` are Python ints.

    Gradient: the cotangent's band (TensorFlow's MatrixBandPart gradient).
    """
    name = name or "band_part"
    x = convert_to_tensor(input)
    if x.ndim < 2:
        raise ValueError(f"{name}: expected a tensor of rank >= 2, got shape {tuple(x.shape)}")
    lo, hi = _python_int(num_lower, name, "num_lower"), _python_int(num_upper, name, "num_upper")
    if None in x.shape[-2:]:
        raise ValueError(f"{name}: the matrix dimensions must be known when tracing, got shape {tuple(x.shape)}")

    def build():
        s = list(x.shape)
        full = x.value
        rows = hlo.iota(s[-2:], _i32(), 0)
        cols = hlo.iota(s[-2:], _i32(), 1)
        keep = hlo.splat(True, tensor_type(s[-2:], ir.IntegerType.get_signless(1)))
        diff = hlo.subtract(rows, cols)
        if lo >= 0:
            keep = hlo.binary("stablehlo.and", keep, hlo.compare(diff, hlo.splat(lo, diff.type), "LE"))
        if hi >= 0:
            keep = hlo.binary("stablehlo.and", keep, hlo.compare(hlo.negate(diff), hlo.splat(hi, diff.type), "LE"))
        keep = hlo.broadcast_in_dim(keep, s, [len(s) - 2, len(s) - 1])
        return hlo.select(keep, full, hlo.zeros(full.type))

    return emit(name, build)


def _python_int(v, name: str, what: str) -> int:
    if isinstance(v, Tensor) or not isinstance(v, (int, np.integer)) or isinstance(v, bool):
        raise TypeError(f"{name}: {what} must be a Python int, got {v!r}")
    return int(v)


def diag_part(input, name="diag_part", k=0, padding_value=0, align="RIGHT_LEFT") -> Tensor:  # noqa: A002
    """The ``k``-th diagonal of the last two dimensions (``tf.linalg.diag_part``): ``[..., M, N]``
    -> ``[..., L]``, ``L = min(M + min(k, 0), N - max(k, 0))``. ``k`` is one Python int (a band
    of diagonals, TensorFlow's ``k = (lo, hi)``, is not supported: ``NotImplementedError``).

    Gradient: the cotangent placed back on that diagonal (TensorFlow's MatrixDiagPart gradient).
    """
    x = convert_to_tensor(input)
    k = _single_diagonal(k, name)
    if x.ndim < 2 or None in x.shape[-2:]:
        raise ValueError(f"{name}: expected a tensor of rank >= 2 with static matrix dimensions, "
                         f"got shape {tuple(x.shape)}")
    m, n = x.shape[-2:]
    length = min(m + min(k, 0), n - max(k, 0))
    if length <= 0:
        raise ValueError(f"{name}: diagonal {k} is outside a {m}x{n} matrix")

    def build():
        s = list(x.shape)
        r = len(s)
        rows, cols = hlo.iota(s, _i32(), r - 2), hlo.iota(s, _i32(), r - 1)
        on = hlo.compare(hlo.subtract(cols, rows), hlo.splat(k, rows.type), "EQ")
        kept = hlo.select(on, x.value, hlo.zeros(x.value.type))
        along = hlo.reduce_sum(kept, [r - 1] if k >= 0 else [r - 2])  # indexed by row (k >= 0) or column
        start = [0] * (r - 1)
        return hlo.slice(along, start, [*s[:-2], length], [1] * (r - 1))

    return emit(name, build)


def _single_diagonal(k, name: str) -> int:
    if isinstance(k, (tuple, list)):
        if len(k) == 2 and k[0] == k[1]:
            k = k[0]
        else:
            raise NotImplementedError(f"{name}: a band of diagonals k={k!r} is not supported (one int)")
    return _python_int(k, name, "k")


def diag(diagonal, name="diag", k=0, num_rows=-1, num_cols=-1, padding_value=0, align="RIGHT_LEFT") -> Tensor:
    """The matrices with ``diagonal [..., L]`` on their ``k``-th diagonal and ``padding_value``
    elsewhere (``tf.linalg.diag``): ``[..., M, N]``, by default ``M = N = L + abs(k)``.

    Gradient: the cotangent's ``k``-th diagonal (TensorFlow's MatrixDiag gradient).
    """
    d = convert_to_tensor(diagonal)
    k = _single_diagonal(k, name)
    if d.ndim < 1 or d.shape[-1] is None:
        raise ValueError(f"{name}: expected a tensor of rank >= 1 with a static last dimension, got {tuple(d.shape)}")
    length = d.shape[-1]
    m = length + abs(k) if num_rows in (-1, None) else _python_int(num_rows, name, "num_rows")
    n = length + abs(k) if num_cols in (-1, None) else _python_int(num_cols, name, "num_cols")
    if min(m + min(k, 0), n - max(k, 0)) != length:
        raise ValueError(f"{name}: a diagonal of length {length} does not fit diagonal {k} of a {m}x{n} matrix")
    pad = convert_to_tensor(padding_value, d.dtype)

    def build():
        batch = list(d.shape[:-1])
        s = [*batch, m, n]
        r = len(s)
        # value at (i, j) on the diagonal: diagonal[i] (k >= 0) or diagonal[j] (k < 0)
        dims = [*range(r - 2), r - 2] if k >= 0 else [*range(r - 2), r - 1]
        full = hlo.broadcast_in_dim(_crop_last(d.value, m if k >= 0 else n), s, dims)
        rows, cols = hlo.iota(s, _i32(), r - 2), hlo.iota(s, _i32(), r - 1)
        on = hlo.compare(hlo.subtract(cols, rows), hlo.splat(k, rows.type), "EQ")
        return hlo.select(on, full, hlo.broadcast_in_dim(pad.value, s, []))

    return emit(name, build)


def _crop_last(v: ir.Value, size: int) -> ir.Value:
    s = _dims(v.type)
    if s[-1] == size:
        return v
    if s[-1] > size:
        return hlo.slice(v, [0] * len(s), [*s[:-1], size], [1] * len(s))
    return hlo.pad(v, hlo.zeros(tensor_type([], _elem(v.type))), [0] * len(s), [0] * (len(s) - 1) + [size - s[-1]],
                   [0] * len(s))


def set_diag(input, diagonal, name="set_diag", k=0, align="RIGHT_LEFT") -> Tensor:  # noqa: A002
    """``input`` with its ``k``-th diagonal replaced by ``diagonal`` (``tf.linalg.set_diag``).

    Gradient: the cotangent off that diagonal to ``input``, its diagonal to ``diagonal``.
    """
    x, dg = convert_pair(input, diagonal, name)
    k = _single_diagonal(k, name)
    m, n = x.shape[-2:]
    placed = diag(dg, name=name, k=k, num_rows=m, num_cols=n)

    def build():
        s = list(x.shape)
        r = len(s)
        rows, cols = hlo.iota(s, _i32(), r - 2), hlo.iota(s, _i32(), r - 1)
        on = hlo.compare(hlo.subtract(cols, rows), hlo.splat(k, rows.type), "EQ")
        return hlo.select(on, broadcast_value(placed, s, x), x.value)

    return emit(name, build)


def trace(x, name=None) -> Tensor:
    """The sum of the main diagonal of the last two dimensions (``tf.linalg.trace``)."""
    return reduce_sum(diag_part(x, name=name or "trace"), -1, name=name or "trace")


def matvec(a, b, transpose_a=False, adjoint_a=False, a_is_sparse=False, b_is_sparse=False, name=None) -> Tensor:
    """``a [..., M, N] @ b [..., N]`` -> ``[..., M]`` (``tf.linalg.matvec``); batch dimensions
    broadcast. Gradient: matmul's."""
    name = name or "MatVec"
    a, b = convert_pair(a, b, name)
    return squeeze(matmul(a, expand_dims(b, -1), transpose_a=transpose_a, adjoint_a=adjoint_a, name=name), -1)


def tensordot(a, b, axes, name=None) -> Tensor:
    """``tf.tensordot``: contracts the last ``axes`` dimensions of ``a`` with the first ``axes``
    of ``b`` (an int), or ``axes = [a_axes, b_axes]`` (lists, or ints for one axis each). The
    result has ``a``'s free dimensions then ``b``'s. One ``stablehlo.dot_general``."""
    name = name or "Tensordot"
    a, b = convert_pair(a, b, name)
    if isinstance(axes, (int, np.integer)):
        if not 0 <= axes <= min(a.ndim, b.ndim):
            raise ValueError(f"{name}: axes={axes} must be between 0 and min(rank(a), rank(b))")
        ax_a, ax_b = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        if len(axes) != 2:
            raise ValueError(f"{name}: axes must be an int or a pair of axis lists, got {axes!r}")
        ax_a = [axes[0]] if isinstance(axes[0], (int, np.integer)) else list(axes[0])
        ax_b = [axes[1]] if isinstance(axes[1], (int, np.integer)) else list(axes[1])
        if len(ax_a) != len(ax_b):
            raise ValueError(f"{name}: {len(ax_a)} axes of a against {len(ax_b)} of b")
        ax_a = [int(i) % a.ndim for i in ax_a]
        ax_b = [int(i) % b.ndim for i in ax_b]
    for i, j in zip(ax_a, ax_b):
        if a.shape[i] != b.shape[j]:
            raise ValueError(f"{name}: dimension {i} of a ({a.shape[i]}) and {j} of b ({b.shape[j]}) differ")
    return emit(name, lambda: hlo.dot_general(a.value, b.value, [], [], ax_a, ax_b))


# ----- factorizations ------------------------------------------------------------------------

def cholesky(input, name=None) -> Tensor:  # noqa: A002
    """The lower Cholesky factor ``L`` (``input = L Lᵀ``) of symmetric positive definite matrices
    (``tf.linalg.cholesky``), reading only their lower triangles.

    Gradient: TensorFlow's, symmetric: ``½ (G + Gᵀ)``, ``G = L⁻ᵀ Φ(Lᵀ L̄) L⁻¹`` (``Φ``: the lower
    triangle, diagonal halved). irgrad differentiates ``stablehlo.cholesky`` of ``½(a + aᵀ)``,
    the lower triangle's own symmetric matrix added under ``stop_gradient``.
    """
    name = name or "Cholesky"
    x = _matrix(input, name, square=True)
    sym = multiply(add(x, matrix_transpose(x)), 0.5)
    read = emit(name, lambda: hlo.add(rules._mask(x.value, "lower"), rules._mT(rules._mask(x.value, "strict_lower"))))
    a = add(sym, stop_gradient(subtract(read, sym)))
    return emit(name, lambda: ir.Operation.create("stablehlo.cholesky", results=[a.value.type], operands=[a.value],
                                                  attributes={"lower": ir.BoolAttr.get(True)}).result)


def triangular_solve(matrix, rhs, lower=True, adjoint=False, name=None) -> Tensor:
    """``x`` with ``matrix x = rhs`` (``matrixᵀ x = rhs`` for ``adjoint``) for triangular
    ``matrix [..., M, M]`` (its other triangle is not read), ``rhs [..., M, K]``; batch
    dimensions broadcast (``tf.linalg.triangular_solve``).

    Gradient: TensorFlow's MatrixTriangularSolve gradient (``stablehlo.triangular_solve``'s).
    """
    name = name or "MatrixTriangularSolve"
    a, b = convert_pair(matrix, rhs, name)
    a, b = _matrix(a, name, square=True), _matrix(b, name)
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"{name}: matrix {tuple(a.shape)} and rhs {tuple(b.shape)} do not match")
    batch = broadcast_shape(a.shape[:-2], b.shape[:-2], name)

    def build():
        av = broadcast_value(a, [*batch, *a.shape[-2:]], b)
        bv = broadcast_value(b, [*batch, *b.shape[-2:]], a)
        return rules.triangular_solve(av, bv, left_side=True, lower=bool(lower),
                                      transpose_a="ADJOINT" if adjoint else "NO_TRANSPOSE")

    return emit(name, build)


def cholesky_solve(chol, rhs, name=None) -> Tensor:
    """``x`` with ``A x = rhs`` given ``chol``, the Cholesky factor of ``A``
    (``tf.linalg.cholesky_solve``): two triangular solves, differentiated as such."""
    name = name or "cholesky_solve"
    y = triangular_solve(chol, rhs, lower=True, adjoint=False, name=name)
    return triangular_solve(chol, y, lower=True, adjoint=True, name=name)


def _lu_parts(x: Tensor, name: str) -> list[Tensor]:
    def types(t):
        return [t, tensor_type(_dims(t)[:-1], _i32()), tensor_type(_dims(t)[:-2], _i32())]

    return _composite(rules.LU, x, types, rules.lu_decomposition, "lu", name)


def lu(input, output_idx_type=dtypes.int32, name=None) -> Lu:  # noqa: A002
    """Partial-pivoting LU of square matrices (``tf.linalg.lu``): ``(lu, p)`` with
    ``input[..., p, :] = L U``, ``L`` (unit lower, its diagonal not stored) and ``U`` packed in
    ``lu``; ``p`` of ``output_idx_type`` (int32 or int64).

    Gradient: the LU derivative ``Pᵀ L⁻ᵀ (tril₋₁(Lᵀ L̄) + triu(Ū Uᵀ)) U⁻ᵀ``. TF-compat:
    TensorFlow registers none for ``Lu`` (``tf.gradients`` raises ``LookupError``).
    """
    name = name or "Lu"
    x = _matrix(input, name, square=True)
    out = dtypes.as_dtype(output_idx_type)
    if out not in (dtypes.int32, dtypes.int64):
        raise TypeError(f"{name}: output_idx_type must be int32 or int64, got {out.name}")
    packed, perm, _ = _lu_parts(x, name)
    return Lu(packed, cast(perm, out) if out != dtypes.int32 else perm)


def _lu_solve(packed: Tensor, perm: Tensor, b: ir.Value, adjoint: bool) -> ir.Value:
    """``a⁻¹ b`` (``a⁻ᵀ b``) from ``a[perm] = L U`` packed in ``packed``."""
    et = _elem(packed.value.type)
    p = rules._permutation_matrix(perm.value, et)
    if not adjoint:
        y = rules.triangular_solve(packed.value, rules._matmul(p, b), left_side=True, lower=True, unit_diagonal=True)
        return rules.triangular_solve(packed.value, y, left_side=True, lower=False)
    z = rules.triangular_solve(packed.value, b, left_side=True, lower=False, transpose_a="TRANSPOSE")
    w = rules.triangular_solve(packed.value, z, left_side=True, lower=True, unit_diagonal=True,
                               transpose_a="TRANSPOSE")
    return rules._matmul(rules._mT(p), w)


def solve(matrix, rhs, adjoint=False, name=None) -> Tensor:
    """``x`` with ``matrix x = rhs`` (``matrixᵀ x = rhs`` for ``adjoint``): ``tf.linalg.solve``,
    ``matrix [..., M, M]``, ``rhs [..., M, K]`` with the same batch dimensions; by partial-pivoting LU.

    Gradient: TensorFlow's MatrixSolve gradient, ``rhs̄ = solve(matrix, x̄, not adjoint)``,
    ``matrix̄ = -rhs̄ xᵀ`` (``-x rhs̄ᵀ`` for ``adjoint``), through LU's.
    """
    name = name or "MatrixSolve"
    a, b = convert_pair(matrix, rhs, name)
    a, b = _matrix(a, name, square=True), _matrix(b, name)
    if tuple(a.shape[:-2]) != tuple(b.shape[:-2]) or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"{name}: matrix {tuple(a.shape)} and rhs {tuple(b.shape)} do not match "
                         "(same batch dimensions, rhs rows = matrix columns)")
    packed, perm, _ = _lu_parts(a, name)
    return emit(name, lambda: _lu_solve(packed, perm, b.value, bool(adjoint)))


def inv(input, adjoint=False, name=None) -> Tensor:  # noqa: A002
    """The inverse (of the transpose, for ``adjoint``) of square matrices (``tf.linalg.inv``),
    by partial-pivoting LU. Gradient: TensorFlow's MatrixInverse gradient ``-a⁻ᵀ ḡ a⁻ᵀ``."""
    name = name or "MatrixInverse"
    x = _matrix(input, name, square=True)
    packed, perm, _ = _lu_parts(x, name)
    return emit(name, lambda: _lu_solve(packed, perm, rules._eye(list(x.shape), _elem(x.value.type)), bool(adjoint)))


def det(input, name=None) -> Tensor:  # noqa: A002
    """The determinants of square matrices (``tf.linalg.det``): the LU pivots' product, signed.
    Gradient: TensorFlow's MatrixDeterminant gradient ``ḡ det(a) a⁻ᵀ``."""
    name = name or "MatrixDeterminant"
    x = _matrix(input, name, square=True)
    packed, _, sign = _lu_parts(x, name)
    def product():  # the pivots multiplied one by one (IREE 3.13 fails to schedule the jvp of a reduce)
        d = rules._diag_part(packed.value)
        r = x.ndim - 1
        s = list(x.shape[:-1])
        out = None
        for i in range(s[-1]):
            di = hlo.reshape(hlo.slice(d, [0] * (r - 1) + [i], [*s[:-1], i + 1], [1] * r), s[:-1])
            out = di if out is None else hlo.multiply(out, di)
        return out

    product = emit(name, product)
    return multiply(product, cast(sign, x.dtype), name=name)


def slogdet(input, name=None) -> Slogdet:  # noqa: A002
    """``(sign, log_abs_determinant)`` of square matrices (``tf.linalg.slogdet``).
    Gradient: TensorFlow's LogMatrixDeterminant gradient ``ḡ a⁻ᵀ`` (none through ``sign``)."""
    name = name or "LogMatrixDeterminant"
    x = _matrix(input, name, square=True)
    packed, _, sign = _lu_parts(x, name)
    d = diag_part(packed, name=name)

    def signs():
        dv = d.value
        one = hlo.ones(dv.type)
        negative = hlo.compare(dv, hlo.zeros(dv.type), "LT")
        zero = hlo.compare(dv, hlo.zeros(dv.type), "EQ")
        s = hlo.select(negative, hlo.negate(one), hlo.select(zero, hlo.zeros(dv.type), one))
        return hlo.multiply(hlo.reduce(s, [x.ndim - 2], "mul"), hlo.convert(sign.value, _elem(dv.type)))

    total = emit(name, signs)
    return Slogdet(stop_gradient(total), reduce_sum(log(emit(name, lambda: hlo.unary("stablehlo.abs", d.value))), -1))


def logdet(matrix, name=None) -> Tensor:
    """``log det`` of symmetric positive definite matrices (``tf.linalg.logdet``):
    ``2 Σ log diag(cholesky(matrix))``, differentiated through ``cholesky``."""
    name = name or "logdet"
    chol = cholesky(matrix, name=name)
    return multiply(reduce_sum(log(diag_part(chol, name=name)), -1), 2.0, name=name)


def eigh(tensor, name=None) -> tuple[Tensor, Tensor]:
    """``(e, v)``: eigenvalues (ascending) and eigenvectors (columns of ``v``) of symmetric
    matrices, reading their lower triangles (``tf.linalg.eigh``); cyclic Jacobi sweeps.
    Eigenvectors are unique up to sign (and, for repeated eigenvalues, a rotation).

    Gradient: TensorFlow's SelfAdjointEigV2 gradient (lower-triangular; NaN-free but meaningless
    for repeated eigenvalues).
    """
    name = name or "SelfAdjointEigV2"
    x = _matrix(tensor, name, square=True)
    e, v = _composite(rules.EIGH, x, lambda t: [tensor_type(_dims(t)[:-1], _elem(t)), t], rules.eigh_decomposition,
                      "eigh", name)
    return e, v


def eigvalsh(tensor, name=None) -> Tensor:
    """The eigenvalues (ascending) of symmetric matrices (``tf.linalg.eigvalsh``); gradient
    ``v diag(ē) vᵀ`` (lower triangle, as ``eigh``)."""
    return eigh(tensor, name=name or "SelfAdjointEigV2")[0]


def qr(input, full_matrices=False, name=None) -> Qr:  # noqa: A002
    """``(q, r)`` with ``input = q r``, ``q`` orthonormal columns, ``r`` upper triangular
    (``tf.linalg.qr``): ``[..., M, K]`` and ``[..., K, N]``, ``K = min(M, N)``, or ``M`` for
    ``full_matrices``. Householder reflections with Eigen's signs (TensorFlow's CPU kernel's).

    Gradient: TensorFlow's Qr gradient; ``NotImplementedError`` for ``M > N`` with ``full_matrices``.
    """
    name = name or "Qr"
    x = _matrix(input, name)
    m, n = x.shape[-2:]
    k = m if full_matrices else min(m, n)
    batch = list(x.shape[:-2])

    def types(t):
        return [tensor_type([*batch, m, k], _elem(t)), tensor_type([*batch, k, n], _elem(t))]

    q, r = _composite(rules.QR, x, types, lambda v: rules.qr_decomposition(v, bool(full_matrices)),
                      f"qr_{'full' if full_matrices else 'reduced'}", name, {"full_matrices": bool(full_matrices)})
    return Qr(q, r)


def svd(tensor, full_matrices=False, compute_uv=True, name=None):
    """Singular values ``s [..., K]`` (descending, ``K = min(M, N)``) of ``tensor [..., M, N]``
    and, with ``compute_uv``, ``(s, u, v)``, ``tensor = u diag(s) vᵀ`` (``tf.linalg.svd``;
    ``u [..., M, K]``, ``v [..., N, K]``, square for ``full_matrices``). One-sided Jacobi.

    Gradient: TensorFlow's Svd gradient; ``NotImplementedError`` with ``full_matrices`` and
    ``|M - N| > 1`` (singular vectors are unique up to sign: differentiate sign-invariant results).
    """
    name = name or "Svd"
    x = _matrix(tensor, name)
    m, n = x.shape[-2:]
    k = min(m, n)
    full = bool(full_matrices) and bool(compute_uv)
    batch = list(x.shape[:-2])

    def types(t):
        et = _elem(t)
        return [tensor_type([*batch, k], et), tensor_type([*batch, m, m if full else k], et),
                tensor_type([*batch, n, n if full else k], et)]

    s, u, v = _composite(rules.SVD, x, types, lambda val: rules.svd_decomposition(val, full),
                         f"svd_{'full' if full else 'reduced'}", name, {"full_matrices": full})
    return (s, u, v) if compute_uv else s


def eye(num_rows, num_columns=None, batch_shape=None, dtype=dtypes.float32, name=None) -> Tensor:
    """The identity matrix ``[*batch_shape, num_rows, num_columns]`` (``tf.linalg.eye``)."""
    name = name or "eye"
    rows = _python_int(num_rows, name, "num_rows")
    cols = rows if num_columns is None else _python_int(num_columns, name, "num_columns")
    batch = [_python_int(b, name, "batch_shape") for b in (batch_shape or [])]
    dt = dtypes.as_dtype(dtype)

    def build():
        s = [*batch, rows, cols]
        r = len(s)
        et = element_type(dt.name)
        eq = hlo.compare(hlo.iota(s, _i32(), r - 2), hlo.iota(s, _i32(), r - 1), "EQ")
        return hlo.select(eq, hlo.ones(tensor_type(s, et)), hlo.zeros(tensor_type(s, et)))

    return emit(name, build)


__all__ = [
    "adjoint", "band_part", "cholesky", "cholesky_solve", "det", "diag", "diag_part", "eigh", "eigvalsh", "eye",
    "inv", "l2_normalize", "logdet", "lu", "matmul", "matrix_transpose", "matvec", "norm", "qr", "set_diag",
    "slogdet", "solve", "svd", "tensordot", "trace", "triangular_solve", "Lu", "Qr", "Slogdet",
]
