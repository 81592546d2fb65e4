"""Regions and symbols: copying a region inline, walking nested ops, erasing them safely,
finding a called function, reading a composite's name and attributes, a value's producer and
whether an op is nested in another."""
from __future__ import annotations

from collections.abc import Iterator, Sequence

from . import hlo
from .mlir import ir


def composite_name(op: ir.Operation) -> str:
    return hlo.read_str(op, "name")


def composite_attribute(op: ir.Operation, key: str) -> ir.Attribute | None:
    if "composite_attributes" not in op.attributes:
        return None
    attrs = ir.DictAttr(op.attributes["composite_attributes"])
    return attrs[key] if key in attrs else None


def symbol(attr: ir.Attribute) -> str:
    return ir.FlatSymbolRefAttr(attr).value


def module_of(op: ir.Operation) -> ir.Operation:
    while op.name != "builtin.module":
        op = op.parent.operation
    return op


def lookup_function(anchor: ir.Operation, name: str) -> ir.Operation:
    """The ``func.func @name`` of the module that contains ``anchor``."""
    module = module_of(anchor)
    try:
        return ir.SymbolTable(module)[name].operation
    except KeyError:
        raise LookupError(f"function @{name} referenced at {anchor.location} is not in the module") from None


def inline_region(op: ir.Operation, index: int, args: Sequence[ir.Value],
                  copied: list[ir.Operation] | None = None) -> list[ir.Value]:
    """Copy region ``index`` of ``op`` (one block) to the insertion point with its block
    arguments bound to ``args``; return the values its terminator returns. The copied ops,
    in order, are appended to ``copied`` when given."""
    clone = op.clone()  # inserted at the insertion point; only its region survives
    block = clone.regions[index].blocks[0]
    for formal, actual in zip(block.arguments, args):
        formal.replace_all_uses_with(actual)
    body = [o.operation for o in block.operations]
    results = list(body[-1].operands)
    for o in body[:-1]:
        o.move_before(clone)
    if copied is not None:
        copied.extend(body[:-1])
    # Erase through its Python object first: the bindings would otherwise keep a stale
    # handle to it (erasing the clone does not invalidate handles to nested ops), which a
    # later op allocated at the same address would inherit.
    body[-1].erase()
    clone.erase()
    return results


def producer(v: ir.Value) -> ir.Operation | None:
    """The op whose result ``v`` is (None for a block argument)."""
    return v.owner.operation if isinstance(v, ir.OpResult) else None


def inside(op: ir.Operation, ancestor: ir.Operation) -> bool:
    """Whether ``op`` is ``ancestor`` or nested, at any depth, in its regions."""
    while op is not None:
        if op == ancestor:
            return True
        parent = op.parent
        op = parent.operation if parent is not None else None
    return False


def nested_ops(op: ir.Operation) -> Iterator[ir.Operation]:
    """Every op inside ``op``'s regions, at any depth, outer ones first."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner.operation
                yield from nested_ops(inner.operation)


def discard(op: ir.Operation) -> None:
    """Erase ``op`` and, first, every op nested in it through its Python handle (the
    bindings keep stale handles to nested ops otherwise)."""
    for region in op.regions:
        for block in region.blocks:
            for inner in reversed([o.operation for o in block.operations]):
                discard(inner)
    op.erase()
