"""IREE 3.13 workarounds for unsigned tensors of run-time shape (issue 44).

irgrad records the values a data-dependent loop's adjoint reads in tapes of run-time length
(``tensor<?x...>``); JAX's ``random_gamma`` carries a PRNG key (``ui32``) through its rejection
sampler, so its gradient records a ``tensor<?x1x3x2xui32>``. IREE 3.13 compiles neither of the
two things irgrad then does with it, and compiles both over ``i32`` (the smallest cases are
``tests/fixtures/iree313_unsigned_dimension_size.mlir`` and ``iree313_unsigned_loop_carry.mlir``):

* ``stablehlo.get_dimension_size`` of it (a tape write clamps its start to the tape's
  length): "failed to legalize operation 'tensor.dim' that was explicitly marked illegal";
* a ``stablehlo.while`` carrying it and scattering rows into it (the tape write): "failed to
  legalize unresolved materialization from ('tensor<?x2xi32>') to ('tensor<?x2xui32>') that
  remained live after conversion".

Both read or carry the same bits as the signless integer of that width (``bitcast_convert``:
no arithmetic): the size is read off the signless tensor, and the loop carries it signless,
cast back to unsigned at the top of each region and after the loop.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..ir import hlo
from ..ir.mlir import elem, ir, shape, tensor_type
from ..ir.regions import inline_region, nested_ops


def _unsigned(v: ir.Value) -> bool:
    element = elem(v)
    return isinstance(element, ir.IntegerType) and ir.IntegerType(element).is_unsigned


def _signless(element: ir.Type) -> ir.Type:
    return ir.IntegerType.get_signless(ir.IntegerType(element).width)


def _bitcast(v: ir.Value, element: ir.Type) -> ir.Value:
    return ir.Operation.create("stablehlo.bitcast_convert", results=[tensor_type(shape(v), element)],
                               operands=[v]).result


def _cast(values: Sequence[ir.Value], flagged: Sequence[bool], to: Sequence[ir.Type]) -> list[ir.Value]:
    return [_bitcast(v, t) if f else v for v, f, t in zip(values, flagged, to)]


def signless_dimension_sizes(module: ir.Module) -> int:
    """Give every ``get_dimension_size`` of an unsigned tensor a signless one of the same
    shape to read; returns the number of ops changed."""
    ops = [op for op in nested_ops(module.operation)
           if op.name == "stablehlo.get_dimension_size" and _unsigned(op.operands[0])]
    for op in ops:
        x = op.operands[0]
        with ir.InsertionPoint(op), op.location:
            op.operands[0] = _bitcast(x, _signless(elem(x)))
    return len(ops)


def signless_loop_carries(module: ir.Module) -> int:
    """Rebuild every ``while`` with an unsigned carry of run-time shape to carry it signless;
    returns the number of loops rebuilt."""
    loops = [op for op in nested_ops(module.operation)
             if op.name == "stablehlo.while" and any(_unsigned(v) and not hlo.is_static(v) for v in op.operands)]
    # Innermost first (nested_ops lists a loop before the loops in its body): a rebuilt outer
    # loop copies its body, the inner loops in it already rebuilt.
    for op in reversed(loops):
        flagged = [_unsigned(v) and not hlo.is_static(v) for v in op.operands]
        unsigned = [elem(v) for v in op.operands]
        signless = [_signless(e) if f else e for f, e in zip(flagged, unsigned)]
        with ir.InsertionPoint(op), op.location:
            loop, cond, body = hlo.while_(_cast(list(op.operands), flagged, signless))
            for index, block in enumerate((cond, body)):
                with ir.InsertionPoint(block):
                    outs = inline_region(op, index, _cast(list(block.arguments), flagged, unsigned))
                    hlo.return_(outs if index == 0 else _cast(outs, flagged, signless), "stablehlo.return")
            results = _cast(list(loop.results), flagged, unsigned)
        for old, new in zip(op.results, results):
            old.replace_all_uses_with(new)
        op.erase()
    return len(loops)
