"""Adjoint rules of contractions: ``dot_general`` with any dimension layout."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ir import hlo
from ..ir.mlir import elem, ir, shape
from ..transforms.forward import bilinear
from ..transforms.batching import Batcher, moved_to_front, plus1
from ..transforms.registry import adjoint, batching, tangent


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


# ----- batching ------------------------------------------------------------------------------

@batching("stablehlo.dot_general", "stablehlo.dot")
def _dot_general_batched(b: Batcher, op):
    """both batched: a new batch dimension; one side: a new free dimension of that side,
    computed with that side first so the batch comes out first; the rows of an identity
    contracted with a shared operand: that operand, relabelled (no product at all)"""
    lhs, rhs = b.operands(op)
    lb, rb, lc, rc = hlo.dot_dimensions(op)
    el = elem(op.result)
    if lhs in b.batched and rhs in b.batched:
        return b.mark([_dot(lhs, rhs, [0, *plus1(lb)], [0, *plus1(rb)], plus1(lc), plus1(rc), el)])
    swapped = rhs in b.batched
    if swapped:  # rhs · lhs, then the result's free dimensions back in lhs, rhs order
        lhs, rhs, lb, rb, lc, rc = rhs, lhs, rb, lb, rc, lc
    free = [d for d in range(len(shape(lhs)) - 1) if d not in lb and d not in lc]
    relabelled = _identity_contraction(b, lhs, rhs, lb, lc, rc, free)
    if relabelled is not None:
        out = relabelled
    else:
        out = moved_to_front(_dot(lhs, rhs, plus1(lb), rb, plus1(lc), rc, el), len(lb))
    if swapped:
        nb, nl = len(lb), len(free)  # out: B, batch, (B's side) free, other free
        s = shape(out)
        perm = [0, *range(1, nb + 1), *range(nb + 1 + nl, len(s)), *range(nb + 1, nb + 1 + nl)]
        out = _permuted(out, perm)
    return b.mark([out])


def _dot(lhs: ir.Value, rhs: ir.Value, lb, rb, lc, rc, element) -> ir.Value:
    """``dot_general`` with its free dimensions of size 1 reshaped away first (IREE picks
    its matmul path for the squeezed form; the reshapes back are free)."""
    def squeezed(x, batch, contract):
        s = shape(x)
        keep = [d for d in range(len(s)) if s[d] != 1 or d in batch or d in contract]
        if len(keep) == len(s):
            return x, batch, contract
        new = {d: i for i, d in enumerate(keep)}
        return hlo.reshape(x, [s[d] for d in keep]), [new[d] for d in batch], [new[d] for d in contract]
    full = _dot_shape(lhs, rhs, lb, rb, lc, rc)
    lhs, lb, lc = squeezed(lhs, lb, lc)
    rhs, rb, rc = squeezed(rhs, rb, rc)
    out = hlo.dot_general(lhs, rhs, lb, rb, lc, rc, element)
    return out if shape(out) == full else hlo.reshape(out, full)


def _dot_shape(lhs: ir.Value, rhs: ir.Value, lb, rb, lc, rc) -> tuple[int, ...]:
    sa, sb = shape(lhs), shape(rhs)
    return tuple([sa[i] for i in lb] + [d for i, d in enumerate(sa) if i not in lb and i not in lc]
                 + [d for i, d in enumerate(sb) if i not in rb and i not in rc])


def _permuted(x: ir.Value, perm: Sequence[int]) -> ir.Value:
    """A transpose, or a reshape when it only moves dimensions of size 1."""
    s = shape(x)
    if list(perm) == list(range(len(s))):
        return x
    if [p for p in perm if s[p] != 1] == [d for d in range(len(s)) if s[d] != 1]:
        return hlo.reshape(x, [s[p] for p in perm])
    return hlo.transpose(x, perm)


def _diagonal_scale(v: ir.Value) -> ir.Value | bool | None:
    """What scales the one-hot rows of ``v``: ``True`` when ``v`` is (a reshape of)
    ``select(iota₀ == iota₁, 1, 0)`` (row b one-hot at b), a value ``u`` (a scalar or an
    ``n``-vector) when it is that identity times ``u`` along either axis, negated or
    multiplied further (row b is ``u[b]`` at b: ``diag(u)``); ``None`` for anything else."""
    while isinstance(v, ir.OpResult) and v.owner.name == "stablehlo.reshape":
        v = v.owner.operands[0]
    if not isinstance(v, ir.OpResult) or len(shape(v)) != 2:
        return None
    op = v.owner
    if op.name == "stablehlo.negate":
        inner = _diagonal_scale(op.operands[0])
        return None if inner is None else hlo.negate(_scale_value(inner, v))
    if op.name == "stablehlo.multiply":
        a, c = op.operands
        for diag, other in ((a, c), (c, a)):
            factor = _axis_vector(other, shape(v)[0])
            inner = None if factor is None else _diagonal_scale(diag)
            if inner is not None:
                return factor if inner is True else hlo.multiply(_scale_value(inner, v), _scale_value(factor, v))
        return None
    if op.name != "stablehlo.select":
        return None
    pred, one, zero = op.operands
    if _splat(one) != 1 or _splat(zero) != 0:
        return None
    if not isinstance(pred, ir.OpResult) or pred.owner.name != "stablehlo.compare" \
            or hlo.read_direction(pred.owner) != "EQ":
        return None
    iotas = [a.owner for a in pred.owner.operands if isinstance(a, ir.OpResult) and a.owner.name == "stablehlo.iota"]
    return True if len(iotas) == 2 and sorted(hlo.read_int(i, "iota_dimension") for i in iotas) == [0, 1] else None


def _axis_vector(v: ir.Value, n: int) -> ir.Value | None:
    """``u`` when the ``n × n`` ``v`` is a splat constant or ``broadcast_in_dim`` of a scalar
    or of an ``n``-vector along one axis (on a diagonal, both axes give ``u[b]`` at b)."""
    value = _splat(v)
    if value is not None:
        return hlo.splat(value, ir.RankedTensorType.get([], elem(v)))
    if not isinstance(v, ir.OpResult) or v.owner.name != "stablehlo.broadcast_in_dim":
        return None
    u = v.owner.operands[0]
    dims = hlo.read_i64_array(v.owner, "broadcast_dimensions")
    if not dims and shape(u) == ():
        return u
    return u if len(dims) == 1 and shape(u) == (n,) else None


def _scale_value(scale: ir.Value | bool, like: ir.Value) -> ir.Value:
    """A scale from :func:`_diagonal_scale` as an ``n``-vector (``True``: ones)."""
    n = shape(like)[0]
    if scale is True:
        return hlo.ones(ir.RankedTensorType.get([n], elem(like)))
    return scale if shape(scale) == (n,) else hlo.broadcast_in_dim(scale, [n], [])


def _splat(v: ir.Value) -> float | None:
    """The value of a splat float constant, None for anything else."""
    if not isinstance(v, ir.OpResult) or v.owner.name != "stablehlo.constant":
        return None
    dense = ir.DenseElementsAttr(v.owner.attributes["value"])
    return getattr(dense.get_splat_value(), "value", None) if dense.is_splat else None


def _identity_contraction(b: Batcher, rows: ir.Value, other: ir.Value, rb, rc, oc, free) -> ir.Value | None:
    """``dot(u_k e_k, other)`` for every one-hot row ``e_k`` over ``rows``' element dims: the
    slice of ``other`` at k along its contracting dims, times ``u_k``. ``None`` unless ``rows``
    is a scaled identity (:func:`_diagonal_scale`), unbatched ``other``, no batch dims, and
    every free dim of the rows has size 1."""
    s = shape(rows)[1:]
    if rb or any(s[d] != 1 for d in free) or int(np.prod(s)) != b.size:
        return None
    scale = _diagonal_scale(rows)
    if scale is None:
        return None
    # The rows' flat index runs over their contracting dims in the rows' order.
    order = sorted(range(len(rc)), key=lambda i: rc[i])
    contracted = [oc[i] for i in order]
    ofree = [d for d in range(len(shape(other))) if d not in oc]
    moved = hlo.transpose(other, [*contracted, *ofree]) if [*contracted, *ofree] != list(range(len(shape(other)))) \
        else other
    so = shape(other)
    out_shape = [b.size, *[1] * len(free), *[so[d] for d in ofree]]
    out = hlo.reshape(moved, out_shape)
    if scale is True:
        return out
    return hlo.multiply(out, hlo.broadcast_in_dim(_scale_value(scale, rows), out_shape, [0]))
