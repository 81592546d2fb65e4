"""Adjoint rules of StableHLO's batch-norm ops (emitted by TensorFlow and PyTorch exporters).

Each rule rebuilds the op from reductions and elementwise ops at the insertion
point and differentiates that decomposition locally (``backprop_local``), so the
formulas are the forward's own and every output's cotangent is honoured.
"""
from __future__ import annotations

from ..ir import hlo
from ..transforms.backprop import backprop_local
from ..ir.mlir import ir, shape
from ..transforms.forward import jvp
from ..transforms.registry import adjoint, tangent


def _attrs(op: ir.Operation) -> tuple[float, int]:
    return hlo.read_float(op, "epsilon"), hlo.read_int(op, "feature_index")


def _normalize(x, scale, offset, mean, var, eps: float, feature: int):
    full = shape(x)
    spread = lambda v: hlo.broadcast_in_dim(v, full, [feature])  # noqa: E731
    inv = hlo.unary("stablehlo.rsqrt", hlo.add(var, hlo.splat(eps, var.type)))
    centered = hlo.subtract(x, spread(mean))
    return hlo.add(hlo.multiply(hlo.multiply(centered, spread(inv)), spread(scale)), spread(offset))


def _decomposed(op: ir.Operation) -> list[ir.Value]:
    """``op``'s results rebuilt at the insertion point from ``op``'s operands:
    inference: y = scale * (x - mean) / sqrt(var + eps) + offset;
    training: (y, mean, var) with the batch statistics over every dim but the feature dim."""
    eps, feature = _attrs(op)
    if op.name == "stablehlo.batch_norm_inference":
        return [_normalize(*op.operands, eps, feature)]
    x, scale, offset = op.operands
    others = [d for d in range(len(shape(x))) if d != feature]
    count = hlo.splat(float(max(1, _size(shape(x)) // shape(x)[feature])), scale.type)
    mean = hlo.divide(hlo.reduce_sum(x, others), count)
    centered = hlo.subtract(x, hlo.broadcast_in_dim(mean, shape(x), [feature]))
    var = hlo.divide(hlo.reduce_sum(hlo.multiply(centered, centered), others), count)
    return [_normalize(x, scale, offset, mean, var, eps, feature), mean, var]


@adjoint("stablehlo.batch_norm_inference", "stablehlo.batch_norm_training")
def _batch_norm(op, cts):
    """the decomposition, differentiated as written"""
    return backprop_local(_decomposed(op), list(cts), list(op.operands), name=op.name.split(".")[-1])


@tangent("stablehlo.batch_norm_inference", "stablehlo.batch_norm_training")
def _batch_norm_tangent(op, ts):
    """the decomposition's tangent"""
    return jvp(_decomposed(op), list(op.operands), list(ts), name=op.name.split(".")[-1])


def _size(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n

