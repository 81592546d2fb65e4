"""Adjoint rules of contractions: ``dot_general`` with any dimension layout."""
from __future__ import annotations

from . import hlo
from .mlir import elem, ir, shape
from .forward import bilinear
from .registry import adjoint, tangent

def _transpose_back(t: ir.Value, source_dims: list[int]) -> ir.Value:
    """t's dim j holds operand dim source_dims[j]: permute into operand order."""
    return hlo.transpose(t, [source_dims.index(i) for i in range(len(source_dims))])


@adjoint("stablehlo.dot_general")
def _dot_general(op, cts):
    """d lhs = ct . rhs over rhs's free dims; d rhs = ct . lhs over lhs's free dims"""
    return _dot_adjoint(cts[0], *op.operands, *hlo.dot_dimensions(op))


@adjoint("stablehlo.dot")
def _dot(op, cts):
    """the older dot: a dot_general contracting lhs's last dim with rhs's first"""
    lhs, rhs = op.operands
    return _dot_adjoint(cts[0], lhs, rhs, *hlo.dot_dimensions(op))


def _dot_adjoint(ct, lhs, rhs, lb, rb, lc, rc):
    lrank, rrank = len(shape(lhs)), len(shape(rhs))
    lf = [d for d in range(lrank) if d not in lb and d not in lc]
    rf = [d for d in range(rrank) if d not in rb and d not in rc]
    nb = len(lb)
    ct_batch = list(range(nb))
    ct_lf = list(range(nb, nb + len(lf)))
    ct_rf = list(range(nb + len(lf), nb + len(lf) + len(rf)))

    # d lhs = ct . rhs: [batch, lhs free, lhs contracting dims in ascending rhs order], or
    # rhs . ct: [batch, those contracting dims, lhs free]; d rhs likewise. Of the two operand
    # orders, the one whose result is already in the operand's layout needs no transpose.
    by_rhs = [lc[k] for k in sorted(range(len(rc)), key=lambda k: rc[k])]
    dl = _in_layout(lambda swap: hlo.dot_general(*((rhs, ct) if swap else (ct, rhs)),
                                                 *((rb, ct_batch, rf, ct_rf) if swap else (ct_batch, rb, ct_rf, rf)),
                                                 element=elem(lhs)),
                    lb + lf + by_rhs, lb + by_rhs + lf)
    by_lhs = [rc[k] for k in sorted(range(len(lc)), key=lambda k: lc[k])]
    dr = _in_layout(lambda swap: hlo.dot_general(*((lhs, ct) if swap else (ct, lhs)),
                                                 *((lb, ct_batch, lf, ct_lf) if swap else (ct_batch, lb, ct_lf, lf)),
                                                 element=elem(rhs)),
                    rb + rf + by_lhs, rb + by_lhs + rf)
    return dl, dr


def _in_layout(dot, ct_first: list[int], ct_last: list[int]) -> ir.Value:
    """``dot(swap)`` with the operand order whose result dims (``ct_first`` / ``ct_last``: the
    operand dim each result dim holds) need no transpose, else the cotangent first."""
    if ct_first != sorted(ct_first) and ct_last == sorted(ct_last):
        return dot(True)
    return _transpose_back(dot(False), ct_first)


tangent("stablehlo.dot_general", "stablehlo.dot")(bilinear)
