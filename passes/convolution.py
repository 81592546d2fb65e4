"""Adjoint rules of ``stablehlo.convolution``: both operand adjoints are convolutions.

The formulas are JAX's ``_conv_general_dilated_transpose_lhs`` / ``_rhs``
(jax/_src/lax/convolution.py), for any strides, padding, lhs/rhs dilation,
feature_group_count, batch_group_count and dimension layout. A layout is
written as JAX's spec: (batch, feature, *spatial) for the input and output,
(output feature, input feature, *spatial) for the kernel.

* d lhs = conv(ct, kernel reversed in space, with in/out features swapped),
  window strides = lhs_dilation, lhs_dilation = window strides,
  padding = (span - lo - 1, ...) so that the result covers the input;
* d rhs = conv(lhs, ct) with batch and feature roles swapped,
  window strides = rhs_dilation, rhs_dilation = window strides.

Feature groups move into the kernel's input-feature dimension for d lhs and
become batch groups for d rhs (and vice versa). ``window_reversal`` is
handled as a convolution with a reversed kernel.
"""
from __future__ import annotations

import re

from . import hlo
from .mlir import elem, ir, shape
from .registry import adjoint

Spec = tuple[int, ...]


def conv_spec(op: ir.Operation) -> tuple[Spec, Spec, Spec]:
    """(lhs, rhs, out) specs from ``#stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>``."""
    text = str(op.attributes["dimension_numbers"])
    layouts = re.findall(r"\[([^\]]*)\]", text)
    specs = []
    for layout, (first, second) in zip(layouts, (("b", "f"), ("o", "i"), ("b", "f"))):
        labels = [t.strip() for t in layout.split(",")]
        spatial = sorted((int(t), i) for i, t in enumerate(labels) if t.isdigit())
        specs.append((labels.index(first), labels.index(second), *[i for _, i in spatial]))
    return tuple(specs)


def _swap(spec: Spec) -> Spec:
    return (spec[1], spec[0], *spec[2:])


def _dilate(sizes, dilation) -> list[int]:
    return [0 if s == 0 else 1 + d * (s - 1) for s, d in zip(sizes, dilation)]


def _axis_out_of(src: int, size1: int, x: ir.Value) -> ir.Value:
    """Split dimension src into (size1, rest)."""
    s = list(shape(x))
    return hlo.reshape(x, s[:src] + [size1, s[src] // size1] + s[src + 1:])


def _axis_into(src: int, dst: int, x: ir.Value) -> ir.Value:
    """Merge dimension src into dst (dst counted without src), src major."""
    s = list(shape(x))
    perm = [i for i in range(len(s)) if i != src]
    perm.insert(dst, src)
    merged = [d for i, d in enumerate(s) if i != src]
    merged[dst] *= s[src]
    return hlo.reshape(hlo.transpose(x, perm), merged)


class Conv:
    """The attributes of a convolution op."""

    def __init__(self, op: ir.Operation) -> None:
        self.spec = conv_spec(op)
        n = len(self.spec[0]) - 2
        self.strides = hlo.read_i64s(op, "window_strides", [1] * n)
        self.padding = hlo.read_padding(op, "padding", n)
        self.lhs_dilation = hlo.read_i64s(op, "lhs_dilation", [1] * n)
        self.rhs_dilation = hlo.read_i64s(op, "rhs_dilation", [1] * n)
        reversal = list(ir.DenseBoolArrayAttr(op.attributes["window_reversal"])) \
            if "window_reversal" in op.attributes else []
        self.reversed = [i for i, r in enumerate(reversal) if r]
        self.groups = hlo.read_int(op, "feature_group_count") if "feature_group_count" in op.attributes else 1
        self.batch_groups = hlo.read_int(op, "batch_group_count") if "batch_group_count" in op.attributes else 1
        self.precision = op.attributes["precision_config"] if "precision_config" in op.attributes else None

    def spatial(self, v: ir.Value, spec: Spec) -> list[int]:
        return [shape(v)[d] for d in spec[2:]]


def _transpose_lhs(ct: ir.Value, lhs: ir.Value, rhs: ir.Value, c: Conv) -> ir.Value:
    lsp, rsp, osp = c.spec
    groups = max(c.groups, c.batch_groups)
    if groups > 1:  # the group axis moves into the kernel's input features
        rhs = _axis_into(rsp[0], rsp[1], _axis_out_of(rsp[0], groups, rhs))
    lhs_d = _dilate(c.spatial(lhs, lsp), c.lhs_dilation)
    rhs_d = _dilate(c.spatial(rhs, rsp), c.rhs_dilation)
    out_d = _dilate(c.spatial(ct, osp), c.strides)
    before = [r - lo - 1 for r, (lo, _) in zip(rhs_d, c.padding)]
    padding = [(b, l + r - 1 - o - b) for b, l, r, o in zip(before, lhs_d, rhs_d, out_d)]
    out = hlo.convolution(ct, hlo.reverse(rhs, list(rsp[2:])), (osp, _swap(rsp), lsp),
                          strides=c.lhs_dilation, padding=padding, lhs_dilation=c.strides,
                          rhs_dilation=c.rhs_dilation, feature_group_count=groups,
                          precision=c.precision, element=elem(lhs))
    if c.batch_groups > 1:  # the batch groups come back out of the features
        out = _axis_into(lsp[1], lsp[0], _axis_out_of(lsp[1], c.batch_groups, out))
    return out


def _transpose_rhs(ct: ir.Value, lhs: ir.Value, rhs: ir.Value, c: Conv) -> ir.Value:
    lsp, rsp, osp = c.spec
    lhs_d = _dilate(c.spatial(lhs, lsp), c.lhs_dilation)
    rhs_d = _dilate(c.spatial(rhs, rsp), c.rhs_dilation)
    out_d = _dilate(c.spatial(ct, osp), c.strides)
    padding = [(lo, o - l + r - lo - 1) for (lo, _), l, r, o in zip(c.padding, lhs_d, rhs_d, out_d)]
    return hlo.convolution(lhs, ct, (_swap(lsp), _swap(osp), _swap(rsp)),
                           strides=c.rhs_dilation, padding=padding, lhs_dilation=c.lhs_dilation,
                           rhs_dilation=c.strides, feature_group_count=c.batch_groups,
                           batch_group_count=c.groups, precision=c.precision, element=elem(rhs))


@adjoint("stablehlo.convolution")
def _convolution(op, cts):
    """d lhs = conv(ct, reversed kernel) (JAX's transpose_lhs); d rhs = conv(lhs, ct) (transpose_rhs)"""
    (ct,) = cts
    lhs, rhs = op.operands
    c = Conv(op)
    flip = [c.spec[1][2 + i] for i in c.reversed]  # window_reversal: a conv with a reversed kernel
    kernel = hlo.reverse(rhs, flip)
    return _transpose_lhs(ct, lhs, kernel, c), hlo.reverse(_transpose_rhs(ct, lhs, kernel, c), flip)
