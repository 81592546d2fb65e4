"""``ig.cond`` and ``ig.while_loop``: StableHLO ``case`` and ``while`` regions.

Branches and loop bodies are traced once into a provisional op's regions;
the final op (with result types known, and for ``while`` with every value the
loop takes from the enclosing function made an explicit carried operand, as
JAX does) then receives the traced ops. ``case`` branches keep such values as
implicit captures, which the adjoint of ``case`` handles.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from .. import nest
from ..framework import Tensor
from ..passes.ir import hlo
from ..passes.transforms.backprop import captured_values
from ..passes.ir.mlir import ir
from .array_ops import constant
from .core import convert_to_tensor, current_graph
from .math_ops import add, less, logical_and, where


def _flat_tensors(structure, what: str) -> list[Tensor]:
    out = []
    for leaf in nest.flatten(structure):
        if leaf is None:
            raise ValueError(f"{what} returned None; every output must be a tensor")
        out.append(convert_to_tensor(leaf))
    return out


def _check_same(a: Sequence[Tensor], b: Sequence[Tensor], what: str) -> None:
    if len(a) != len(b):
        raise ValueError(f"{what}: {len(a)} outputs in one case and {len(b)} in the other")
    for i, (x, y) in enumerate(zip(a, b)):
        if x.dtype != y.dtype:
            raise TypeError(f"{what}: output {i} has dtype {x.dtype.name} in one case and {y.dtype.name} "
                            "in the other")
        if tuple(x.shape) != tuple(y.shape):
            raise ValueError(f"{what}: output {i} has shape {tuple(x.shape)} in one case and "
                             f"{tuple(y.shape)} in the other (irgrad's shapes are static)")


def _inside(op: ir.Operation, block: ir.Block) -> bool:
    """Whether ``op`` is in ``block`` or nested in an op of ``block``."""
    while True:
        if op.block == block:
            return True
        parent = op.parent
        if parent is None or parent.name == "func.func":
            return False
        op = parent.operation


def _move_block(old: ir.Block, new: ir.Block, replacements: dict[ir.Value, ir.Value]) -> None:
    """Move ``old``'s ops into ``new``, rewiring its arguments and the given outer values."""
    for a, b in zip(old.arguments, new.arguments):
        a.replace_all_uses_with(b)
    for outer, inner in replacements.items():
        for use in list(outer.uses):
            owner = use.owner.operation
            if _inside(owner, old):
                owner.operands[use.operand_number] = inner
    ip = ir.InsertionPoint(new)
    for o in [o.operation for o in old.operations]:
        o.detach_from_parent()
        ip.insert(o)


def cond(pred, true_fn: Callable, false_fn: Callable, name: str | None = None):
    """``true_fn()`` if ``pred`` else ``false_fn()``, decided when the function runs: TensorFlow's ``tf.cond``.

    Both branches are traced once (their Python code runs at trace time, whatever ``pred``
    will be) into one ``stablehlo.case``; only the branch taken runs. A branch may use any
    tensor of the enclosing function. Gradients flow through the branch taken.

    Args:
        pred: a scalar bool tensor; a Python ``bool`` traces only the branch it picks.
        true_fn: a function of no arguments returning a tensor or nested structure of tensors.
        false_fn: the same, returning the same structure, dtypes and shapes.
        name: the op's name in the graph (``"cond"``).

    Returns:
        The taken branch's results, in ``true_fn``'s structure.

    Raises:
        TypeError: ``pred`` is not a scalar bool, or an output's dtype differs between branches.
        ValueError: the branches return different numbers of outputs or shapes (irgrad's shapes
            are static, unlike TensorFlow's, where the result's shape may be less specific), or
            ``None``.

    Example (inside ``@ig.function``)::

        y = ig.cond(ig.reduce_sum(x) > 0.0, lambda: x * 2.0, lambda: -x)
    """
    if isinstance(pred, bool):  # a static condition: trace only the branch taken
        return true_fn() if pred else false_fn()
    graph = current_graph()
    pred = convert_to_tensor(pred)
    if not pred.dtype.is_bool or pred.ndim != 0:
        raise TypeError(f"cond: pred must be a scalar bool tensor, got {pred.dtype.name}{list(pred.shape)}")
    with graph.op_scope(name or "cond") as name:
        # Branch 0 runs when the index is 0 (pred false), as JAX lowers lax.cond.
        index = hlo.convert(pred.value, ir.IntegerType.get_signless(32))
        draft, blocks = hlo.case(index, [], 2)
    results, flats = [], []
    for block, fn, label in zip(blocks, (false_fn, true_fn), ("false_fn", "true_fn")):
        with graph.in_block(block):
            result = fn()
            flat = _flat_tensors(result, f"cond {label}")
            with graph.op_scope(f"{name}/{label}"):
                hlo.return_([t.value for t in flat], "stablehlo.return")
        results.append(result)
        flats.append(flat)
    _check_same(flats[1], flats[0], "cond")
    with graph.op_scope(name, exact=True):
        op, final_blocks = hlo.case(index, [t.value.type for t in flats[1]], 2)
    for old, new in zip(blocks, final_blocks):
        _move_block(old, new, {})
    draft.erase()
    return nest.pack_sequence_as(results[1], [Tensor(v, graph) for v in op.results])


def while_loop(cond: Callable, body: Callable, loop_vars, shape_invariants=None, parallel_iterations=10,
               back_prop=True, swap_memory=False, maximum_iterations=None, name: str | None = None):
    """Repeat ``body`` while ``cond`` holds, decided when the function runs: TensorFlow's ``tf.while_loop``.

    ``cond`` and ``body`` are traced once into a ``stablehlo.while``; both are called with the
    loop variables as separate arguments (``cond(*loop_vars)``), or with the one variable when
    ``loop_vars`` is not a list or tuple. Tensors of the enclosing function used inside become
    extra carried values. Reverse mode differentiates through the loop, whatever decides its
    trip count (see the gradients guide).

    Args:
        cond: returns a scalar bool tensor.
        body: returns new loop variables, of the structure, dtypes and shapes of ``loop_vars``.
        loop_vars: a tensor, a Python or numpy value, or a list or tuple (possibly nested) of them.
        maximum_iterations: run at most this many iterations: the loop then runs exactly that
            many, each a no-op once ``cond`` fails (TensorFlow's values, a static trip count).
        name: the op's name in the graph (``"while"``).

    ``shape_invariants``, ``parallel_iterations``, ``back_prop`` and ``swap_memory`` are accepted
    and ignored: loop variables cannot change shape, and gradients always flow.

    Returns:
        The final loop variables, in the structure of ``loop_vars``.

    Raises:
        TypeError: ``cond`` returns something other than a scalar bool, or ``body`` changes a
            dtype.
        ValueError: ``body`` changes a shape or the number of variables, or returns ``None``.

    Example: ``i, total = ig.while_loop(lambda i, s: i < 10, lambda i, s: (i + 1, s + x), [0, x])``.
    """
    graph = current_graph()
    name = graph.unique_name(name or "while")
    single = not isinstance(loop_vars, (list, tuple))
    structure = [loop_vars] if single else loop_vars
    inits = [convert_to_tensor(v) for v in nest.flatten(structure)]
    if maximum_iterations is not None:
        # Exactly maximum_iterations steps, each a no-op once cond has failed: the same
        # values as TensorFlow's early exit, and a static trip count the adjoint can reverse.
        user_cond, user_body, user_structure = cond, body, structure
        n = len(inits)

        def body(*vs):
            state = nest.pack_sequence_as(user_structure, list(vs[:n]))
            active = logical_and(vs[n], user_cond(*state))
            stepped = _flat_tensors(_normalize(user_body(*state), user_structure), "while_loop body")
            kept = [where(active, new, old) for new, old in zip(stepped, vs[:n])]
            return [*kept, active, add(vs[n + 1], 1)]

        cond = lambda *vs: less(vs[n + 1], maximum_iterations)  # noqa: E731
        structure = [*inits, True, 0]
        inits = inits + [constant(True, name=f"{name}/active"), constant(0, name=f"{name}/iterations")]
    with graph.op_scope(name, exact=True):
        draft, cond_block, body_block = hlo.while_([t.value for t in inits])
    as_vars = lambda block: nest.pack_sequence_as(  # noqa: E731
        structure, [Tensor(a, graph) for a in block.arguments])
    with graph.in_block(cond_block):
        p = convert_to_tensor(cond(*as_vars(cond_block)))
        if not p.dtype.is_bool or p.ndim != 0:
            raise TypeError(f"while_loop: cond must return a scalar bool tensor, got {p.dtype.name}{list(p.shape)}")
        with graph.op_scope(f"{name}/cond"):
            hlo.return_([p.value], "stablehlo.return")
    with graph.in_block(body_block):
        out = body(*as_vars(body_block))
        flat = _flat_tensors(_normalize(out, structure), "while_loop body")
        _check_same(inits, flat, "while_loop body (loop_vars in, loop_vars out)")
        with graph.op_scope(f"{name}/body"):
            hlo.return_([t.value for t in flat], "stablehlo.return")

    captures = captured_values(draft)
    with graph.op_scope(name, exact=True):
        op, new_cond, new_body = hlo.while_([t.value for t in inits] + captures)
    n = len(inits)
    for old, new in ((cond_block, new_cond), (body_block, new_body)):
        _move_block(old, new, dict(zip(captures, list(new.arguments)[n:])))
    ret = list(new_body.operations)[-1].operation
    with ir.InsertionPoint(ret), ret.location:
        hlo.return_(list(ret.operands) + list(new_body.arguments)[n:], "stablehlo.return")
    ret.erase()
    draft.erase()
    results = [Tensor(v, graph) for v in list(op.results)[:n]]
    if maximum_iterations is not None:
        structure = [loop_vars] if single else loop_vars
        results = results[:-2]
    packed = nest.pack_sequence_as(structure, results)
    return packed[0] if single else packed


def _normalize(out, structure: Sequence) -> list:
    """The body's result as a list like ``structure`` (a lone tensor for one loop var)."""
    if len(structure) == 1 and not isinstance(out, (list, tuple)):
        return [out]
    return list(out)
