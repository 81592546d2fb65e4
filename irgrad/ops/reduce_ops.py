"""Reductions (``axis``/``keepdims`` as in TensorFlow) and contractions."""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..framework import Tensor
from ..passes.ir import hlo
from .array_ops import reshape, transpose, zeros
from .core import (broadcast_shape, broadcast_value, convert_pair, convert_to_tensor, element, emit, normalize_axes,
                   require, run_time_sizes)
from .math_ops import binary_op


def _reduce(kind: str, input_tensor, axis, keepdims: bool, name: str) -> Tensor:
    x = convert_to_tensor(input_tensor)
    if kind in ("add", "mul"):
        require(x, name, numeric=True)
    axes = normalize_axes(axis, x.ndim, name)
    out = emit(name, lambda: hlo.reduce(x.value, axes, kind)) if axes else x
    if keepdims:
        kept = [1 if i in axes else d for i, d in enumerate(x.shape)]
        if None in kept:  # a run-time size: each kept dimension is the reduced tensor's
            return emit(name, lambda: hlo.dynamic_reshape(out.value, run_time_sizes(kept, [x])))
        out = reshape(out, kept)
    return out


def reduce_sum(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Sum over ``axis`` (an int, a list, or ``None``: every dimension) (``tf.reduce_sum``);
    ``keepdims`` keeps the reduced dimensions with size 1. Float sums of many terms are blocked
    for accuracy when compiled.

    Gradient: ``ct`` broadcast back over the reduced dimensions.
    """
    return _reduce("add", input_tensor, axis, keepdims, name or "Sum")


def reduce_prod(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Product over ``axis`` (``None``: every dimension) (``tf.reduce_prod``); ``keepdims`` as
    ``reduce_sum``.

    Gradient: ``ct`` times the product of the other elements (zeros included).
    """
    return _reduce("mul", input_tensor, axis, keepdims, name or "Prod")


def reduce_max(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Maximum over ``axis`` (``None``: every dimension) (``tf.reduce_max``); ``keepdims`` as
    ``reduce_sum``.

    Gradient: ``ct`` divided equally among the elements that tie for the maximum, as TensorFlow.
    """
    return _reduce("max", input_tensor, axis, keepdims, name or "Max")


def reduce_min(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Minimum over ``axis`` (``None``: every dimension) (``tf.reduce_min``); ``keepdims`` as
    ``reduce_sum``.

    Gradient: ``ct`` divided equally among the elements that tie for the minimum, as TensorFlow.
    """
    return _reduce("min", input_tensor, axis, keepdims, name or "Min")


def reduce_any(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Logical or of a bool tensor over ``axis`` (``None``: every dimension) (``tf.reduce_any``);
    ``keepdims`` as ``reduce_sum``. Not differentiable.
    """
    return _reduce("or", convert_to_tensor(input_tensor, dtypes.bool_), axis, keepdims, name or "Any")


def reduce_all(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Logical and of a bool tensor over ``axis`` (``None``: every dimension) (``tf.reduce_all``);
    ``keepdims`` as ``reduce_sum``. Not differentiable.
    """
    return _reduce("and", convert_to_tensor(input_tensor, dtypes.bool_), axis, keepdims, name or "All")


def reduce_mean(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """The mean over ``axis``: TensorFlow's ``tf.reduce_mean``.

    Args:
        input_tensor: a numeric tensor (bool raises ``TypeError``).
        axis: an int, a list of ints (negative count from the end), or ``None``: every
            dimension. Python ints only (a tensor raises ``TypeError``).
        keepdims: keep each reduced dimension with size 1.
        name: the op's name in the graph.

    Returns:
        The sum divided by the number of elements reduced, of ``input_tensor``'s dtype: integer
        tensors use integer division, as in TensorFlow. A dimension known only at run time is
        counted at run time.

    Gradient: ``ct`` divided by the count, broadcast back over the reduced dimensions.
    """
    x = convert_to_tensor(input_tensor)
    axes = normalize_axes(axis, x.ndim, "Mean")
    total = reduce_sum(x, axes, keepdims, name=name or "Mean")
    if any(x.shape[a] is None for a in axes):  # the count is known at run time
        def count_value():
            n = hlo.convert(hlo.dimension_size(x.value, axes[0]), element(x.dtype))
            for a in axes[1:]:
                n = hlo.multiply(n, hlo.convert(hlo.dimension_size(x.value, a), element(x.dtype)))
            return n
        return binary_op("stablehlo.divide", total, emit("Mean", count_value), "Mean")
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    if count == 1:
        return total
    return binary_op("stablehlo.divide", total, count, "Mean")


def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False,
           name=None) -> Tensor:
    """The matrix product of the last two dimensions of ``a`` and ``b``: TensorFlow's ``tf.linalg.matmul``.

    Leading (batch) dimensions broadcast like numpy, so ``[5, 2, 3] @ [3, 4]`` is ``[5, 2, 4]``;
    ``a @ b`` is the same op. One ``stablehlo.dot_general``.

    Args:
        a: a numeric tensor of rank >= 2.
        b: the same, of ``a``'s dtype (a Python value takes ``a``'s).
        transpose_a: multiply by ``a``'s transpose (of its last two dimensions).
        transpose_b: the same for ``b``.
        adjoint_a: the same as ``transpose_a`` (irgrad has no complex dtypes).
        adjoint_b: the same as ``transpose_b``.
        name: the op's name in the graph.

    Raises:
        ValueError: an operand of rank < 2 (TensorFlow's rule too; use ``ig.einsum`` or
            ``ig.reduce_sum(a * b, -1)`` for vectors), inner dimensions that differ, or batch
            dimensions that do not broadcast.
        TypeError: operands of different dtypes (no promotion: ``ig.cast``), or bool.

    Gradient: ``ct @ b^T`` and ``a^T @ ct``, summed over broadcast batch dimensions.
    """
    name = name or "MatMul"
    a, b = convert_pair(a, b, name)
    require(a, name, numeric=True)
    transpose_a = transpose_a or adjoint_a
    transpose_b = transpose_b or adjoint_b
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"{name}: both operands need rank >= 2, got shapes {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    ka = a.shape[-2] if transpose_a else a.shape[-1]
    kb = b.shape[-1] if transpose_b else b.shape[-2]
    if ka != kb:
        raise ValueError(f"{name}: inner dimensions differ: shapes {tuple(a.shape)} and {tuple(b.shape)} "
                         f"(transpose_a={transpose_a}, transpose_b={transpose_b})")
    batch = broadcast_shape(a.shape[:-2], b.shape[:-2], name)
    nb = len(batch)
    if ka == 0:  # an empty sum (IREE 3.13 crashes on a zero-size contraction)
        m = a.shape[-1] if transpose_a else a.shape[-2]
        n = b.shape[-2] if transpose_b else b.shape[-1]
        return zeros(tuple(batch) + (m, n), a.dtype, name=name)

    def build():
        av = _to_batch(a, batch, b)
        bv = _to_batch(b, batch, a)
        bd = list(range(nb))
        return hlo.dot_general(av, bv, bd, bd, [nb if transpose_a else nb + 1],
                               [nb + 1 if transpose_b else nb])

    return emit(name, build)


def _to_batch(t: Tensor, batch, *others: Tensor) -> hlo.Value:
    shape = tuple(batch) + tuple(t.shape[-2:])
    if tuple(t.shape) == shape:
        return t.value
    return broadcast_value(t, shape, *others)


def einsum(equation: str, *inputs, name=None) -> Tensor:
    """Einstein summation over one or two operands (more are contracted left to right).

    Each label is a batch, contracted, free or summed dimension; two operands
    become one ``dot_general`` plus transposes and reductions. Repeated labels
    within one operand (diagonals) are not supported.
    """
    name = name or "einsum"
    if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
        inputs = tuple(inputs[0])
    tensors = [convert_to_tensor(t) for t in inputs]
    for t in tensors[1:]:
        if t.dtype != tensors[0].dtype:
            raise TypeError(f"einsum: mixed dtypes {tensors[0].dtype.name} and {t.dtype.name}")
    eq = equation.replace(" ", "")
    if "->" in eq:
        lhs, out = eq.split("->")
    else:
        lhs = eq
        counts = {c: lhs.count(c) for c in lhs if c.isalpha()}
        out = "".join(sorted(c for c, n in counts.items() if n == 1))
    specs = lhs.split(",")
    if len(specs) != len(tensors):
        raise ValueError(f"einsum: {equation!r} names {len(specs)} operands, got {len(tensors)}")
    if "." in eq:
        raise ValueError("einsum: ellipsis ('...') is not supported")
    for spec, t in zip(specs, tensors):
        if len(spec) != t.ndim:
            raise ValueError(f"einsum: {spec!r} has {len(spec)} labels for an operand of shape {tuple(t.shape)}")
        if len(set(spec)) != len(spec):
            raise ValueError(f"einsum: repeated label in {spec!r} (diagonals) is not supported")
    if len(set(out)) != len(out) or any(c not in lhs for c in out):
        raise ValueError(f"einsum: bad output labels {out!r} in {equation!r}")
    size = {}
    for spec, t in zip(specs, tensors):
        for c, d in zip(spec, t.shape):
            if size.setdefault(c, d) != d:
                raise ValueError(f"einsum: label {c!r} has sizes {size[c]} and {d}")
    while len(tensors) > 1:
        rest = "".join(specs[2:]) + out
        (a, b), (sa, sb) = tensors[:2], specs[:2]
        keep = "".join(c for c in dict.fromkeys(sa + sb) if c in rest)
        t, s = _einsum_pair(a, sa, b, sb, keep, name)
        tensors, specs = [t] + tensors[2:], [s] + specs[2:]
    t, s = _einsum_sum(tensors[0], specs[0], out, name)
    return transpose(t, [s.index(c) for c in out]) if s != out else t


def _einsum_sum(t: Tensor, spec: str, keep: str, name: str) -> tuple[Tensor, str]:
    """Sum away the labels of ``spec`` not in ``keep``."""
    gone = [i for i, c in enumerate(spec) if c not in keep]
    if not gone:
        return t, spec
    return reduce_sum(t, gone, name=name), "".join(c for c in spec if c in keep)


def _einsum_pair(a: Tensor, sa: str, b: Tensor, sb: str, keep: str, name: str) -> tuple[Tensor, str]:
    a, sa = _einsum_sum(a, sa, keep + sb, name)
    b, sb = _einsum_sum(b, sb, keep + sa, name)
    batch = [c for c in sa if c in sb and c in keep]
    contract = [c for c in sa if c in sb and c not in keep]
    afree = [c for c in sa if c not in sb]
    bfree = [c for c in sb if c not in sa]

    def build():
        return hlo.dot_general(a.value, b.value, [sa.index(c) for c in batch], [sb.index(c) for c in batch],
                               [sa.index(c) for c in contract], [sb.index(c) for c in contract])

    return emit(name, build), "".join(batch + afree + bfree)
