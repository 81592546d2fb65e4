"""JAX's LAPACK calls on CPU, as the StableHLO ops they compute.

``jax.jit(f).lower(...)`` on a CPU lowers ``cholesky`` and ``triangular_solve`` to
``stablehlo.custom_call @lapack_?potrf_ffi`` / ``@lapack_?trsm_ffi`` (``?`` = s, d, c, z for
f32, f64, complex<f32>, complex<f64>), where its platform-independent lowering (the one
``jax.export`` uses for other platforms) emits ``stablehlo.cholesky`` / ``triangular_solve``.
Its ``eigh`` and ``svd`` become ``@lapack_?syevd_ffi`` / ``@lapack_?gesdd_ffi``, which no
StableHLO op computes. Neither irgrad's adjoints nor IREE know the calls;
:func:`rewrite_lapack_calls` replaces each by the op it stands for, or by irgrad's
``irgrad.linalg.eigh`` / ``irgrad.linalg.svd`` composite, which both do (``linalg.py``).
``grad.differentiate`` applies it to its input and ``legalize.py`` to every compiled module.

The calls' attributes (``mhlo.backend_config``, LAPACK's character codes as ``ui8``):

* ``potrf_ffi(a) -> (factor, info)``, ``uplo`` L (76) or U (85). LAPACK overwrites the named
  triangle of ``a`` with the factor and leaves the other as it was; ``info`` (``i32``, one per
  batch matrix) is 0, or the order ``j`` (1-based) of the first leading minor that is not
  positive definite, where the factorisation stopped. The rewrite is
  ``select(triangle, cholesky(a), a)``; ``info`` is the first ``j`` whose pivot
  ``factor[j-1, j-1]`` is not positive (NaN included: ``linalg.lower_cholesky`` carries a
  failed pivot's NaN forward, so this is where LAPACK stops), else 0. JAX reads only
  ``info == 0``.
* ``trsm_ffi(a, b) -> x``, ``side`` L (76) / R (82), ``uplo`` L / U, ``trans_x`` N (78),
  T (84) or C (67), ``diag`` N (78) / U (85): ``op(a) x = b`` or ``x op(a) = b`` (alpha is 1:
  JAX passes none), reading one triangle of ``a`` and, for a unit diagonal, not its
  diagonal: exactly ``stablehlo.triangular_solve``.

* ``syevd_ffi(a) -> (v, w, info)`` (``s``/``d`` only), ``mode`` V (86: with eigenvectors),
  ``uplo`` L / U: eigenvectors ``v`` (columns) and ascending eigenvalues ``w`` of the
  symmetric matrix in the named triangle of ``a``. The rewrite is irgrad's
  ``irgrad.linalg.eigh`` composite (``rules/linalg.py``: Jacobi sweeps, TensorFlow's
  gradient) of ``a`` (``aᵀ`` for U), its decomposition added to the module; ``info`` is 0.
* ``gesdd_ffi(a) -> (a', s, u, vt, info)`` (``s``/``d`` only), ``mode`` S (83: reduced), A (65:
  full) or N (78: singular values only; ``u`` and ``vt`` are then unused): irgrad's
  ``irgrad.linalg.svd`` composite (one-sided Jacobi, TensorFlow's gradient), ``vt = vᵀ``;
  ``a'`` (LAPACK's scratch) is ``a`` and ``info`` 0.

A call with other operands or results than these (an older, non-FFI ABI) is left alone, and
``irgrad grad`` then names it as an op without an adjoint.
"""
from __future__ import annotations

import re

from ..ir import hlo
from ..ir.mlir import elem, ir, shape, tensor_type
from ..ir.regions import module_of
from ..rules.linalg import EIGH, SVD, eigh_decomposition, svd_decomposition

__all__ = ["LAPACK_TARGET", "rewrite_lapack_calls"]

# The call targets rewritten (a cheap textual test before walking a module).
LAPACK_TARGET = re.compile(r"^lapack_[sdcz](potrf|trsm)_ffi$|^lapack_[sd](syevd|gesdd)_ffi$")

_CHAR = {"L": 76, "U": 85, "R": 82, "N": 78, "T": 84, "C": 67}
_TRANSPOSE = {_CHAR["N"]: "NO_TRANSPOSE", _CHAR["T"]: "TRANSPOSE", _CHAR["C"]: "ADJOINT"}


def _codes(op: ir.Operation) -> dict[str, int] | None:
    """``mhlo.backend_config``'s integer entries (None when it is not a dictionary)."""
    if "mhlo.backend_config" not in op.attributes:
        return None
    try:
        config = ir.DictAttr(op.attributes["mhlo.backend_config"])
    except ValueError:
        return None
    codes = {}
    for i in range(len(config)):
        named = config[i]
        try:
            codes[named.name] = ir.IntegerAttr(named.attr).value
        except ValueError:
            return None
    return codes


def _i32() -> ir.Type:
    return ir.IntegerType.get_signless(32)


def _square(v: ir.Value) -> bool:
    """A static stack of square matrices."""
    return hlo.is_static(v) and len(shape(v)) >= 2 and shape(v)[-1] == shape(v)[-2]


def _potrf(op: ir.Operation, codes: dict[str, int]) -> list[ir.Value] | None:
    if len(op.operands) != 1 or len(op.results) != 2 or codes.get("uplo") not in (_CHAR["L"], _CHAR["U"]):
        return None
    a = op.operands[0]
    dims = shape(a)
    if not _square(a) or op.results[0].type != a.type or op.results[1].type != tensor_type(dims[:-2], _i32()):
        return None
    batch, n, r = list(dims[:-2]), dims[-1], len(dims)
    lower = codes["uplo"] == _CHAR["L"]
    factor = ir.Operation.create("stablehlo.cholesky", results=[a.type], operands=[a],
                                 attributes={"lower": ir.BoolAttr.get(lower)}).result
    rows, cols = hlo.iota(dims, _i32(), r - 2), hlo.iota(dims, _i32(), r - 1)
    written = hlo.compare(rows, cols, "GE" if lower else "LE")
    result = hlo.select(written, factor, a)
    # info: the first j (1-based) whose pivot is not > 0, else 0.
    diagonal = hlo.reduce_sum(hlo.select(hlo.compare(rows, cols, "EQ"), factor, hlo.zeros(a.type)), [r - 1])
    if n == 0:
        info = hlo.zeros(tensor_type(batch, _i32()))
    else:
        positive = hlo.compare(diagonal, hlo.zeros(diagonal.type), "GT")
        order = hlo.iota([*batch, n], _i32(), r - 2)
        past = hlo.splat(n + 1, tensor_type([*batch, n], _i32()))
        first = hlo.reduce(hlo.select(positive, past, hlo.add(order, hlo.splat(1, order.type))), [r - 2], "min")
        info = hlo.select(hlo.compare(first, hlo.splat(n + 1, first.type), "EQ"), hlo.zeros(first.type), first)
    return [result, info]


def _trsm(op: ir.Operation, codes: dict[str, int]) -> list[ir.Value] | None:
    if len(op.operands) != 2 or len(op.results) != 1:
        return None
    side, uplo, trans, diag = (codes.get(k) for k in ("side", "uplo", "trans_x", "diag"))
    if side not in (_CHAR["L"], _CHAR["R"]) or uplo not in (_CHAR["L"], _CHAR["U"]) or trans not in _TRANSPOSE \
            or diag not in (_CHAR["N"], _CHAR["U"]):
        return None
    a, b = op.operands
    if not _square(a) or op.results[0].type != b.type:
        return None
    x = ir.Operation.create("stablehlo.triangular_solve", results=[b.type], operands=[a, b], attributes={
        "left_side": ir.BoolAttr.get(side == _CHAR["L"]), "lower": ir.BoolAttr.get(uplo == _CHAR["L"]),
        "unit_diagonal": ir.BoolAttr.get(diag == _CHAR["U"]),
        "transpose_a": hlo.attr(f"#stablehlo<transpose {_TRANSPOSE[trans]}>")}).result
    return [x]


def _decomposition(op: ir.Operation, key: str, args: list[ir.Type], results: list[ir.Type], build) -> str:
    """The private function ``@irgrad.<key>_<type>`` (added to ``op``'s module once): the
    decomposition of one of irgrad's linalg composites."""
    name = f"irgrad.{key}_" + "x".join(map(str, shape(args[0]))) + f"x{elem(args[0])}"
    module = module_of(op)
    if name not in ir.SymbolTable(module):
        with ir.InsertionPoint(module.regions[0].blocks[0]):
            _, block = hlo.func(name, args, results, private=True)
        with ir.InsertionPoint(block):
            hlo.return_(build(*block.arguments))
    return name


def _gesdd(op: ir.Operation, codes: dict[str, int]) -> list[ir.Value] | None:
    modes = {83: False, 65: True, 78: False}
    if len(op.operands) != 1 or len(op.results) != 5 or codes.get("mode") not in modes:
        return None
    a = op.operands[0]
    dims = shape(a)
    if not hlo.is_static(a) or len(dims) < 2:
        return None
    full = modes[codes["mode"]]
    batch, (m, n) = dims[:-2], dims[-2:]
    k = min(m, n)
    et = elem(a)
    types = [tensor_type([*batch, k], et), tensor_type([*batch, m, m if full else k], et),
             tensor_type([*batch, n, n if full else k], et)]
    r = len(dims)
    vt_type = tensor_type([*batch, n if full else k, n], et)
    if op.results[1].type != types[0] or op.results[4].type != tensor_type(batch, _i32()) or \
            (codes["mode"] != 78 and (op.results[2].type != types[1] or op.results[3].type != vt_type)):
        return None
    fname = _decomposition(op, f"svd_{'full' if full else 'reduced'}", [a.type], types,
                           lambda x: svd_decomposition(x, full))
    s, u, v = hlo.composite(SVD, [a], types, fname, {"full_matrices": ir.BoolAttr.get(full)})
    if codes["mode"] == 78:
        u, vt = hlo.zeros(op.results[2].type), hlo.zeros(op.results[3].type)
    else:
        vt = hlo.transpose(v, [*range(r - 2), r - 1, r - 2])
    return [a, s, u, vt, hlo.zeros(op.results[4].type)]


def _syevd(op: ir.Operation, codes: dict[str, int]) -> list[ir.Value] | None:
    if len(op.operands) != 1 or len(op.results) != 3 or codes.get("mode") != 86 \
            or codes.get("uplo") not in (_CHAR["L"], _CHAR["U"]):
        return None
    a = op.operands[0]
    dims = shape(a)
    values = tensor_type(dims[:-1], elem(a))
    if not _square(a) or op.results[0].type != a.type or op.results[1].type != values \
            or op.results[2].type != tensor_type(dims[:-2], _i32()):
        return None
    fname = _decomposition(op, "eigh", [a.type], [values, a.type], eigh_decomposition)
    r = len(dims)
    x = a if codes["uplo"] == _CHAR["L"] else hlo.transpose(a, [*range(r - 2), r - 1, r - 2])
    w, v = hlo.composite(EIGH, [x], [values, a.type], fname)
    return [v, w, hlo.zeros(op.results[2].type)]


def _calls(op: ir.Operation, out: list[ir.Operation]) -> None:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                if inner.name == "stablehlo.custom_call" \
                        and LAPACK_TARGET.match(hlo.read_str(inner, "call_target_name")):
                    out.append(inner)
                if len(inner.regions):
                    _calls(inner, out)


def rewrite_lapack_calls(module: ir.Module) -> int:
    """Replace JAX's LAPACK calls in ``module`` by StableHLO ops, in place; returns how many."""
    found: list[ir.Operation] = []
    _calls(module.operation, found)
    done = 0
    with module.context:
        for op in found:
            codes = _codes(op)
            if codes is None:
                continue
            match = LAPACK_TARGET.match(hlo.read_str(op, "call_target_name"))
            kind = match.group(1) or match.group(2)  # type: ignore[union-attr]
            with ir.InsertionPoint(op), op.location:
                results = {"potrf": _potrf, "trsm": _trsm, "syevd": _syevd, "gesdd": _gesdd}[kind](op, codes)
            if results is None:
                continue
            for old, new in zip(op.results, results):
                old.replace_all_uses_with(new)
            op.erase()
            done += 1
    return done
