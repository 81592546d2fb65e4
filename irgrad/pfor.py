"""``ig.vectorized_map``: TensorFlow's ``tf.vectorized_map`` on the batching pass.

``fn`` is traced once on one element (a draft block whose arguments have the elements'
shapes without their leading dimension, so ops, tapes and ``ig.gradients`` inside
``fn`` all work), then :func:`irgrad.passes.transforms.batching.map_block` rewrites that block over
the leading dimension: one batched computation, per-example gradients included. An op
without a batching rule makes it a ``while`` loop over the elements instead
(``fallback_to_while_loop=True``, TensorFlow's default) or a ``ValueError``.
"""
from __future__ import annotations

from collections.abc import Callable

from . import nest
from .framework import Tensor
from .ops.core import convert_to_tensor, current_graph
from .passes.transforms.batching import MissingBatchingRule, map_block
from .passes.ir.mlir import ir


def vectorized_map(fn: Callable, elems, fallback_to_while_loop: bool = True, warn: bool = True):
    """``fn`` applied to every slice ``elems[i]`` as one batched computation: TensorFlow's
    ``tf.vectorized_map``.

    ``fn`` is traced once, on one element (the structure of ``elems`` with each tensor's leading
    dimension removed); the traced ops are then rewritten over the leading dimension by the
    batching pass. Ops, tapes and ``ig.gradients`` inside ``fn`` are batched too, so per-example
    gradients are one computation. An op without a batching rule makes the map a ``while`` loop
    over the elements instead (``fallback_to_while_loop=True``, TensorFlow's default).

    Args:
        fn: a function of one element; returns a tensor or nested structure of tensors.
        elems: a tensor or nested structure of tensors, all with the same leading dimension.
        fallback_to_while_loop: ``False`` raises ``ValueError`` where a loop would be needed.
        warn: accepted for TensorFlow's signature; irgrad does not warn.

    Returns:
        ``fn``'s results stacked along a new leading dimension, in ``fn``'s structure.

    Raises:
        ValueError: ``elems`` holds no tensor, a scalar, or tensors of different leading
            dimensions; ``fn`` returned ``None``; an op cannot be batched and there is no fallback.

    Example (inside ``@ig.function``; ``xs`` of shape [8, 3])::

        per_example = ig.vectorized_map(
            lambda x: ig.gradients(ig.reduce_sum(ig.tanh(x * w)), x)[0], xs)   # shape [8, 3]
    """
    graph = current_graph()
    flat = [convert_to_tensor(e) for e in nest.flatten(elems)]
    if not flat:
        raise ValueError("vectorized_map: elems must contain at least one tensor")
    sizes = {t.shape[0] if t.ndim else None for t in flat}
    if None in sizes:
        raise ValueError("vectorized_map: every tensor in elems needs a leading dimension to map over")
    if len(sizes) != 1:
        raise ValueError(f"vectorized_map: the tensors in elems have different leading dimensions {sorted(sizes)}")
    structure: list = []

    def build(args: list[ir.Value]) -> list[ir.Value]:
        with graph.in_block(ir.InsertionPoint.current.block):
            out = fn(nest.pack_sequence_as(elems, [Tensor(a, graph) for a in args]))
            leaves = nest.flatten(out)
            if any(leaf is None for leaf in leaves):
                raise ValueError("vectorized_map: fn returned None; every output must be a tensor")
            structure.append(out)
            return [convert_to_tensor(leaf).value for leaf in leaves]

    try:
        with graph.op_scope("vectorized_map"):
            values = map_block(build, [t.value for t in flat], fallback=fallback_to_while_loop)
    except MissingBatchingRule as e:
        raise ValueError(f"vectorized_map: {e}; pass fallback_to_while_loop=True to run a loop instead") from None
    return nest.pack_sequence_as(structure[0], [Tensor(v, graph) for v in values])


__all__ = ["vectorized_map"]
