"""``stablehlo.einsum`` and ``stablehlo.unary_einsum`` (deprecated in StableHLO; older
producers still emit them, and IREE 3.13 cannot compile ``unary_einsum``).

Both are lowered to ops irgrad and IREE handle: a label repeated in one operand takes the
diagonal (a select against ``iota == iota``, then a sum over the repeated dimension); a label
in one operand only and not in the output is summed away; two operands are then contracted
by one ``dot_general`` (labels in both operands and the output: batch dimensions; in both
but not the output: contracted), and the result transposed into the output's order.
``...`` stands for the leading dimensions an operand's labels do not name (equal sizes, no
broadcasting of size-1 dimensions); without ``->`` the output is the labels that appear
once, in alphabetical order (numpy's implicit mode).

The lowering runs in the compile path (``legalize.py``) and in the adjoint rule (the adjoint
is that of the lowered ops). Tangents: an einsum is bilinear in its operands, a unary
einsum linear. Batching: one more label, on every operand and the output.
"""
from __future__ import annotations

import string

from ..ir import hlo
from ..transforms.batching import Batcher, remake
from ..transforms.backprop import backprop_local
from ..transforms.forward import bilinear, linear
from ..ir.mlir import IRError, elem, ir, shape
from ..transforms.registry import adjoint, batching, tangent

EINSUMS = ("stablehlo.einsum", "stablehlo.unary_einsum")


def _error(op: ir.Operation, why: str) -> IRError:
    return IRError(f"'{op.name}' at {op.location} with einsum_config {hlo.read_str(op, 'einsum_config')!r}: {why}")


def parse_config(op: ir.Operation) -> tuple[list[list[str]], list[str]]:
    """(labels of each operand, labels of the result), ``...`` expanded to fresh labels."""
    config = hlo.read_str(op, "einsum_config").replace(" ", "")
    operands = list(op.operands)
    if "->" in config:
        inputs, out = config.split("->")
    else:
        inputs, out = config, None
    specs = inputs.split(",")
    if op.name == "stablehlo.unary_einsum" and len(specs) == 2 and specs[0] == "":
        specs = specs[1:]  # the ",ab->b" spelling
    if len(specs) != len(operands):
        raise _error(op, f"{len(specs)} operand specs for {len(operands)} operands")
    unused = iter(c for c in string.ascii_letters if c not in config)
    ellipsis: list[str] | None = None
    labels = []
    for spec, v in zip(specs, operands):
        if not all(c.isalpha() for c in spec.replace("...", "")) or spec.count("...") > 1:
            raise _error(op, f"cannot read the operand spec {spec!r}")
        named = len(spec.replace("...", ""))
        if "..." in spec:
            n = len(shape(v)) - named
            if n < 0:
                raise _error(op, f"spec {spec!r} names more dimensions than the operand's {len(shape(v))}")
            if ellipsis is None:
                ellipsis = []
            while len(ellipsis) < n:
                ellipsis.insert(0, next(unused))
            head, tail = spec.split("...")
            labels.append([*head, *ellipsis[len(ellipsis) - n:], *tail])
        else:
            labels.append(list(spec))
        if len(labels[-1]) != len(shape(v)):
            raise _error(op, f"spec {spec!r} has {len(labels[-1])} labels for an operand of rank {len(shape(v))}")
    if out is None:
        every = [c for ls in labels for c in ls]
        result = [c for c in (ellipsis or [])] + sorted(c for c in set(every) if every.count(c) == 1
                                                       and c not in (ellipsis or []))
    else:
        head, _, tail = out.partition("...")
        result = [*head, *(ellipsis or [] if "..." in out else []), *tail]
    sizes: dict[str, int] = {}
    for ls, v in zip(labels, operands):
        for c, n in zip(ls, shape(v)):
            if sizes.setdefault(c, n) != n:
                raise _error(op, f"label {c!r} has sizes {sizes[c]} and {n} (broadcasting is not supported)")
    if len(set(result)) != len(result) or any(c not in sizes for c in result):
        raise _error(op, "each output label must appear once and in some operand")
    if [sizes[c] for c in result] != list(shape(op.results[0])):
        raise _error(op, f"the labels give a result of shape {[sizes[c] for c in result]}, "
                         f"the op's type {op.results[0].type}")
    return labels, result


def _diagonals(x: ir.Value, labels: list[str]) -> tuple[ir.Value, list[str]]:
    """``x`` with each label repeated in ``labels`` reduced to its diagonal."""
    labels = list(labels)
    while len(set(labels)) != len(labels):
        i = next(k for k, c in enumerate(labels) if labels.count(c) > 1)
        j = labels.index(labels[i], i + 1)
        i32 = ir.IntegerType.get_signless(32)
        on = hlo.compare(hlo.iota(shape(x), i32, i), hlo.iota(shape(x), i32, j), "EQ")
        x = hlo.reduce_sum(hlo.select(on, x, hlo.zeros(x.type)), [j])
        labels.pop(j)
    return x, labels


def _sum_away(x: ir.Value, labels: list[str], keep: set[str]) -> tuple[ir.Value, list[str]]:
    dims = [k for k, c in enumerate(labels) if c not in keep]
    return hlo.reduce_sum(x, dims) if dims else x, [c for c in labels if c in keep]


def lower_einsum(op: ir.Operation) -> ir.Value:
    """The einsum as diagonals, sums, one ``dot_general`` and a transpose (at the insertion point)."""
    labels, out = parse_config(op)
    element = elem(op.results[0])
    xs = []
    for k, (v, ls) in enumerate(zip(op.operands, labels)):
        v = hlo.convert(v, element)
        v, ls = _diagonals(v, ls)
        others = {c for j, o in enumerate(labels) if j != k for c in o}
        xs.append(_sum_away(v, ls, set(out) | others))
    if len(xs) == 1:
        (x, ls), = xs
    else:
        (a, la), (b, lb) = xs
        batch = [c for c in la if c in lb and c in out]
        contract = [c for c in la if c in lb and c not in out]
        x = hlo.dot_general(a, b, [la.index(c) for c in batch], [lb.index(c) for c in batch],
                            [la.index(c) for c in contract], [lb.index(c) for c in contract], element)
        ls = batch + [c for c in la if c not in lb] + [c for c in lb if c not in la]
    return hlo.transpose(x, [ls.index(c) for c in out])


@adjoint(*EINSUMS)
def _einsum(op, cts):
    """the adjoint of the lowered ops (diagonals, sums, dot_general, transpose)"""
    return backprop_local([lower_einsum(op)], list(cts), list(op.operands), name="einsum")


tangent("stablehlo.einsum")(bilinear)
tangent("stablehlo.unary_einsum")(linear)


@batching(*EINSUMS)
def _batched(b: Batcher, op):
    """one more label, leading on every operand and on the output"""
    labels, out = parse_config(op)
    config = hlo.read_str(op, "einsum_config")
    taken = set(config) | {c for ls in labels for c in ls}
    fresh = next(c for c in string.ascii_letters if c not in taken)
    spelled = ",".join(fresh + "".join(ls) for ls in labels) + "->" + fresh + "".join(out)
    attrs = {"einsum_config": ir.StringAttr.get(spelled)}
    return b.mark(remake(op, b.operands(op, lift=True), [b.type(op.results[0])], attrs).results)
