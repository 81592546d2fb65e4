"""The module-level passes: add ``@F_grad`` / ``@F_vjp`` (reverse mode) and ``@F_jvp``
(forward mode) next to ``@F``.

* ``@F_grad(args...) -> (d args[wrt]...)`` seeds ones on every float result:
  the gradient of the sum of all float results (``tf.gradients(ys, xs)``).
* ``@F_vjp(args..., cotangents...) -> (d args[wrt]...)`` takes one cotangent
  per result of ``F`` (those of non-float results are ignored).
* ``with_value`` returns F's results first, then the gradients.
* ``@F_jvp(args..., tangents of args[wrt]...) -> (F's results..., tangents of F's float
  results...)``: forward mode (``jvp=True``); a result the tangents do not reach gets zeros.
* ``@F_hessian(args...) -> (H of args[wrt]...)`` (``hessian=True``): for each ``x`` in
  args[wrt], the ``x.shape + x.shape`` Hessian of the sum of the float results
  (``tf.hessians``' blocks), every row in one batched backward pass.

``wrt`` defaults to every floating-point or complex argument. A complex argument
``z = x + iy`` gets TensorFlow's gradient ``∂L/∂x + i ∂L/∂y`` (JAX's ``jax.grad`` returns
the conjugate: ``np.conj`` converts one into the other; ``transforms/backprop.py`` has the rules).
Calls to private functions are inlined into the adjoint's copy of the forward body first (``F`` itself is
left untouched); the differentiated body is then cleaned with
canonicalize + cse and verified.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from ..boundary import RESULT_NAME, argument_names, result_names, suggestion
from .ir import hlo
from .transforms.backprop import backprop, carries
from .transforms import batching
from .rules import control_flow
from . import train as training
from .rules.control_flow import Checkpoints
from . import memory
from .transforms.batching import identity, jacobian_rows
from .transforms.forward import jvp as forward_jvp
from .lowering.domains import guard_domains
from .lowering.lapack import rewrite_lapack_calls
from .ir.mlir import IRError, elem, ir, is_float, parse_module, run_pipeline, shape, tensor_type, verify

CLEANUP = "func.func(canonicalize,cse)"


class ChoiceError(ValueError):
    """``func`` or ``wrt`` names (or indexes) a function or argument the module does not have,
    or one that cannot be differentiated: the caller's choice is wrong, not the module."""


def public_functions(module: ir.Module) -> list[ir.Operation]:
    """The module's public ``func.func`` ops (those without ``sym_visibility = "private"``), in order."""
    return [op for op in functions(module) if is_public(op)]


def is_public(func_op: ir.Operation) -> bool:
    """No sym_visibility, or JAX's explicit ``func.func public``."""
    attrs = func_op.attributes
    return "sym_visibility" not in attrs or ir.StringAttr(attrs["sym_visibility"]).value == "public"


def has_calls(op: ir.Operation) -> bool:
    """Whether ``op``'s regions contain a ``func.call`` (at any depth)."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                if inner.name == "func.call" or (len(inner.regions) and has_calls(inner)):
                    return True
    return False


def functions(module: ir.Module) -> list[ir.Operation]:
    # .operation: OpView subclasses such as FuncOp redefine .name.
    return [op.operation for op in module.body.operations if op.operation.name == "func.func"]


def function_name(op: ir.Operation) -> str:
    """The symbol name of a ``func.func`` op: ``"loss"`` for ``func.func @loss``."""
    return ir.StringAttr(op.attributes["sym_name"]).value


def find_function(module: ir.Module, name: str | None) -> ir.Operation:
    """The public function ``name``, or the only public function when None."""
    funcs = functions(module)
    if name is None:
        public = public_functions(module)
        if len(public) != 1:
            names = ", ".join("@" + function_name(f) for f in public) or "none"
            raise ChoiceError(f"module has {len(public)} public functions ({names}); choose one "
                              "(func=... in Python, --func on the command line)")
        return public[0]
    for f in funcs:
        if function_name(f) == name:
            return f
    public = [function_name(f) for f in public_functions(module)]  # private helpers are no one's choice
    raise ChoiceError(f"no function @{name} in module; functions: {', '.join('@' + n for n in public) or 'none'}"
                      f"{suggestion(name, public, '@')}")


def float_arguments(func_op: ir.Operation) -> list[int]:
    args = func_op.regions[0].blocks[0].arguments
    return [i for i, a in enumerate(args) if carries(a)]


def parameter_names(func_op: ir.Operation) -> list[str]:
    """Each argument's name (``boundary.argument_names``), ``arg<i>`` where it has none: what
    the derived values are named after (``d_w``, ``m_w``)."""
    return [n or f"arg{i}" for i, n in enumerate(argument_names(func_op))]


def output_names(func_op: ir.Operation) -> list[str]:
    """Each result's name (``boundary.result_names``), ``result<k>`` where it has none."""
    return [n or f"result{k}" for k, n in enumerate(result_names(func_op))]


def name_results(func_op: ir.Operation, names: Sequence[str | None]) -> None:
    """Names the results of ``func_op`` (``irgrad.name`` result attributes; None: no name)."""
    with func_op.context:
        func_op.attributes["res_attrs"] = ir.ArrayAttr.get([
            ir.DictAttr.get({} if n is None else {RESULT_NAME: ir.StringAttr.get(n)}) for n in names])


def _derived_names(func_op: ir.Operation, kind: str, wrt: list[int], with_value: bool) -> list[str | None]:
    """The names of ``@F_<kind>``'s results: F's own first (``with_value``), then ``d_w`` per
    gradient, ``t_y`` per tangent of a float result ``y``, ``h_w`` per Hessian block."""
    params, outs = parameter_names(func_op), output_names(func_op)
    if kind == "jvp":
        ys = list(list(func_op.regions[0].blocks[0].operations)[-1].operands)
        derived = [f"t_{outs[k]}" for k, y in enumerate(ys) if carries(y)]
    else:
        derived = [f"{'h' if kind == 'hessian' else 'd'}_{params[i]}" for i in wrt]
    return (result_names(func_op) if with_value else []) + derived


def _check_wrt(func_op: ir.Operation, wrt: Sequence[int | str] | None) -> list[int]:
    """``wrt`` as argument indices: each an index, or the name the producer gave the
    argument (``boundary.argument_names``)."""
    args = func_op.regions[0].blocks[0].arguments
    if wrt is None:
        return float_arguments(func_op)
    names = argument_names(func_op)
    out = []
    for i in wrt:
        if isinstance(i, str):
            if i not in names:
                given = ", ".join(f"{n} ({k})" for k, n in enumerate(names) if n) or "none has a name"
                raise ChoiceError(f"wrt {i!r}: @{function_name(func_op)} has no argument of that name "
                                  f"(its arguments: {given}){suggestion(i, names)}")
            i = names.index(i)
        if not isinstance(i, int) or not 0 <= i < len(args):
            raise ChoiceError(f"wrt index {i!r} out of range: @{function_name(func_op)} has {len(args)} arguments")
        if not carries(args[i]):
            raise ChoiceError(f"wrt index {i}: argument {i} of @{function_name(func_op)} has type "
                              f"{args[i].type}, not a floating-point or complex tensor")
        out.append(i)
    return out


def _forward_copy(module: ir.Module, after: ir.Operation, func_op: ir.Operation, new_name: str) -> ir.Operation:
    """A copy of ``func_op`` named ``new_name`` with private calls inlined, placed after ``after``.

    Argument and result attributes (e.g. JAX's ``jax.result_info``) describe F's
    signature, not the adjoint's, so the copy drops them.
    """
    scratch = module.operation.clone()
    source = function_name(func_op)
    copy = next(op.operation for op in scratch.regions[0].blocks[0].operations
                if op.operation.name == "func.func" and function_name(op) == source)
    copy.attributes["sym_name"] = ir.StringAttr.get(new_name)
    for stale in ("arg_attrs", "res_attrs"):
        if stale in copy.attributes:
            del copy.attributes[stale]
    if has_calls(copy):
        # canonicalize also drops the identity reshapes TF's export wraps loop counters in.
        run_pipeline(scratch, "builtin.module(inline,func.func(canonicalize))")
    copy.move_after(after)
    scratch.erase()
    return copy


def _build(module: ir.Module, after: ir.Operation, func_op: ir.Operation, new_name: str, with_value: bool,
           derive: Callable[[ir.Block, list[ir.Value], ir.Location], list[ir.Value]],
           lean: bool = False, hoist: bool = False) -> ir.Operation:
    """A copy of ``func_op`` named ``new_name`` returning ``derive(block, ys, loc)`` (built
    before its return), after F's results ``ys`` when ``with_value``; ``lean``: a gradient whose
    backward recomputes cheap forward values instead of keeping them (``memory.recompute_elementwise``);
    ``hoist``: its reductions of large values next to those values (``memory.hoist_reductions``)."""
    if new_name in ir.SymbolTable(module.operation):
        raise ValueError(f"module already has a function @{new_name}")
    copy = _forward_copy(module, after, func_op, new_name)
    blocks = copy.regions[0].blocks
    if len(blocks) != 1:
        raise IRError(f"@{function_name(func_op)} has {len(blocks)} blocks; only single-block functions are supported")
    block = blocks[0]
    guard_domains(copy)  # JAX's igamma family: 0, not 0 · NaN, where it is constant
    ret = list(block.operations)[-1].operation
    ret_loc = ret.location
    with ir.InsertionPoint(ret), ir.Location.name(new_name, childLoc=ret_loc):
        derived = derive(block, list(ret.operands), ret_loc)
    # A rule may have replaced a forward op (a while loop by its taped copy, a region op by
    # one that also carries tangents): read the values F returns from its return op, which
    # saw the replacement.
    results = (list(ret.operands) if with_value else []) + derived
    ret.erase()
    with ir.InsertionPoint(block), ir.Location.name(new_name, childLoc=ret_loc):
        hlo.return_(results)
    hlo.set_function_type(copy, [a.type for a in block.arguments], [r.type for r in results])
    run_pipeline(copy, CLEANUP)
    if lean and memory.recompute_elementwise(copy):
        run_pipeline(copy, CLEANUP)
    if hoist:
        memory.hoist_reductions(copy)
    verify(copy, f"@{new_name}")
    return copy


def _ones(y: ir.Value) -> ir.Value:
    """The seed of ``y``: ones, which IREE cannot see as a constant where ``y``'s shape is known
    only at run time (``hlo.dynamic_splat``'s ``opaque``)."""
    if hlo.is_static(y):
        return hlo.like(1, y)
    sizes = [hlo.dimension_size(y, d) if n == hlo.DYNAMIC else n for d, n in enumerate(shape(y))]
    return hlo.dynamic_splat(1, sizes, elem(y), opaque=True)


def _gradients(wrt: list[int], vjp: bool, name: str, seed_names: Sequence[str] = ()):
    """The gradients of args[wrt], seeded with ones or (vjp) with one new argument per result,
    named ``seed_names`` (``d_<result>``)."""
    def derive(block: ir.Block, ys: list[ir.Value], loc: ir.Location) -> list[ir.Value]:
        seeds = [block.add_argument(y.type, ir.Location.name(seed_names[k]) if k < len(seed_names)
                                    else ir.Location.unknown()) if vjp
                 else (_ones(y) if carries(y) else None)
                 for k, y in enumerate(ys)]
        xs = [block.arguments[i] for i in wrt]
        grads = backprop(ys, seeds, xs, name=name)
        return [g if g is not None else hlo.zeros_like(x) for g, x in zip(grads, xs)]
    return derive


def _tangents(wrt: list[int], name: str, tangent_names: Sequence[str] = ()):
    """The tangents of the float results, given one new argument per args[wrt], named
    ``tangent_names`` (``t_<argument>``)."""
    def derive(block: ir.Block, ys: list[ir.Value], loc: ir.Location) -> list[ir.Value]:
        xs = [block.arguments[i] for i in wrt]
        txs = [block.add_argument(x.type, ir.Location.name(tangent_names[k]) if k < len(tangent_names)
                                  else ir.Location.unknown()) for k, x in enumerate(xs)]
        tys = forward_jvp(ys, xs, txs, in_place=True, name=name)
        return [t if t is not None else hlo.zeros(y.type) for y, t in zip(ys, tys) if carries(y)]
    return derive


def _hessians(wrt: list[int], name: str):
    """For each args[wrt]: the Hessian of the sum of the float results, ``x.shape + x.shape``
    (tf.hessians' blocks): the gradient's Jacobian, its rows one batched backward pass."""
    def derive(block: ir.Block, ys: list[ir.Value], loc: ir.Location) -> list[ir.Value]:
        xs = [block.arguments[i] for i in wrt]
        grads = backprop(ys, [hlo.ones(y.type) if is_float(y) else None for y in ys], xs, name=name)
        out = []
        for g, x in zip(grads, xs):
            s, n = shape(x), int(np.prod(shape(x), dtype=np.int64))
            if g is None:
                out.append(hlo.zeros(tensor_type([*s, *s], elem(x))))
                continue
            flat = hlo.reshape(g, [n])
            rows = jacobian_rows(identity(n, elem(x)), x,
                                 lambda seed, flat=flat, x=x: backprop([flat], [seed], [x], name=name)[0])
            out.append(hlo.reshape(rows, [*s, *s]))
        return out
    return derive


def add_adjoints(module: ir.Module, func: str | None = None, wrt: Sequence[int | str] | None = None, *,
                 grad: bool = True, vjp: bool = False, with_value: bool = False, jvp: bool = False,
                 hessian: bool = False, loop_checkpoints: Checkpoints = None, train: str | None = None,
                 learning_rate: float | None = None, memory_limit: int | str | None = None,
                 allocated: Callable[[str, str], int] | None = None) -> list[str]:
    """Add ``@F_grad`` (and/or ``@F_vjp``, ``@F_jvp``, ``@F_hessian``) for function ``func``
    to ``module`` in place.

    ``train`` (``"sgd"``, ``"momentum"`` or ``"adam"``) adds ``@F_train_init`` and
    ``@F_train_step`` for a scalar loss ``F``, the parameters being ``args[wrt]``
    (``passes.train``; ``learning_rate`` None: the optimizer's Keras default).

    ``loop_checkpoints``: None records every iteration of a ``while`` loop for its reverse
    pass; ``k`` keeps ``k`` snapshots of its carries (``"sqrt"``: about √n of n iterations)
    and recomputes the iterations between two of them in the reverse pass (see
    ``control_flow``): memory O(k + n/k) instead of O(n), for one more forward run.

    ``memory_limit`` (bytes, or a size such as ``"64M"``): ``@F_grad``, ``@F_vjp`` and
    ``@F_train_step`` are fitted under it by their estimated peak (``passes.memory``): loops checkpointed, then
    straight-line forward values recomputed in the backward instead of kept; a limit no plan
    meets raises ``memory.MemoryLimitError`` with the estimate and the smallest it can meet.
    ``allocated(module_text, function)``: what the backend allocates at once for a call
    (``runtime.compiler.peak_allocation``); given, a plan is taken only if that is within the
    limit too (``memory.fit``).

    Returns the names of the added functions.
    """
    limit = None if memory_limit is None else memory.parse_size(memory_limit)
    func_op = find_function(module, func)
    name = function_name(func_op)
    wrt = _check_wrt(func_op, wrt)
    added = []
    last = func_op
    params = parameter_names(func_op)
    with module.context, control_flow.loop_checkpoints(loop_checkpoints):
        for kind, wanted in (("grad", grad), ("vjp", vjp), ("jvp", jvp), ("hessian", hessian)):
            if wanted:
                new_name = f"{name}_{kind}"
                if kind == "jvp":
                    derive = _tangents(wrt, new_name, [f"t_{params[i]}" for i in wrt])
                elif kind == "hessian":
                    derive = _hessians(wrt, new_name)
                else:
                    derive = _gradients(wrt, kind == "vjp", new_name, [f"d_{y}" for y in output_names(func_op)])
                keep = (with_value and kind != "hessian") or kind == "jvp"
                before = last
                reverse = kind in ("grad", "vjp")
                last = _build(module, before, func_op, new_name, keep, derive, lean=reverse,
                              hoist=reverse and limit is None)  # else memory.fit hoists
                if limit is not None and reverse:
                    last = _fitted(last, limit, allocated, functools.partial(
                        _build, module, before, func_op, new_name, keep,
                        _gradients(wrt, kind == "vjp", new_name, [f"d_{y}" for y in output_names(func_op)]),
                        lean=True))
                name_results(last, _derived_names(func_op, kind, wrt, keep))
                added.append(function_name(last))
        if train is not None:
            lr = training.check(train, learning_rate)
            state = training.state_names(train, [params[i] for i in wrt])
            last = training.add_init(module, last, func_op, f"{name}_train_init", wrt, train)
            name_results(last, state)
            added.append(function_name(last))
            before = last
            step = functools.partial(_build, module, before, func_op, f"{name}_train_step", True,
                                     training.step(train, lr, wrt, f"{name}_train_step", state), lean=True,
                                     hoist=limit is None)
            last = step()
            if limit is not None:
                last = _fitted(last, limit, allocated, step)
            last.attributes[training.LAYOUT_KEY] = ir.StringAttr.get(
                training.layout(train, lr, wrt, [params[i] for i in wrt]))
            name_results(last, training.result_names(func_op, result_names(func_op), [params[i] for i in wrt],
                                                     state))
            added.append(function_name(last))
    return added


def _fitted(built: ir.Operation, limit: int, allocated: Callable[[str, str], int] | None,
            build: Callable[[], ir.Operation]) -> ir.Operation:
    """``built`` fitted under ``limit`` (``memory.fit``, ``allocated`` its check); ``build()``
    makes it again, under the loop checkpoints ``memory.fit`` asks for, in place of ``built``."""
    current = [built]

    def rebuild(checkpoints: Checkpoints) -> ir.Operation:
        current[0].erase()
        with control_flow.loop_checkpoints(checkpoints):
            current[0] = build()
        return current[0]

    fitted, _ = memory.fit(built, limit, rebuild, allocated)
    verify(fitted, f"@{function_name(fitted)}")
    return fitted


def proximal(text: str | bytes, func: str | None, wrt, mu: float) -> str:
    """Text in, text out: add ``@F_prox(args..., globals...)``, F's scalar loss plus FedProx's
    proximal term ``mu/2 · Σ ||args[i] - global_i||²`` over the parameters ``wrt``, one new
    argument per parameter, named ``"global:<name>"`` (the parameter's own name, or
    ``arg<i>``; ``train.add_proximal_term``). Compile ``F_prox`` with ``train=...``
    (``differentiate(text, "F_prox", wrt, train=...)``): its ``@F_prox_train_step`` takes the
    round's global parameters as data, ``mu`` fixed at compile time, and its loss includes the
    term (zero at the global parameters, so ``@F_prox`` evaluated there is ``@F``)."""
    module = parse_module(text)
    verify(module, "input module")
    func_op = find_function(module, func)
    name = function_name(func_op)
    wrt = _check_wrt(func_op, wrt)
    new_name = f"{name}_prox"
    with module.context:
        if new_name in ir.SymbolTable(module.operation):
            raise ValueError(f"module already has a function @{new_name}")
        copy = _forward_copy(module, func_op, func_op, new_name)
        training.add_proximal_term(copy, wrt, argument_names(func_op), mu, name)
        verify(copy, f"@{new_name}")
    return module.operation.get_asm(enable_debug_info=True)


def differentiate(text: str | bytes, func: str | None = None, wrt: Sequence[int | str] | None = None, *,
                  grad: bool = True, vjp: bool = False, with_value: bool = False, jvp: bool = False,
                  hessian: bool = False, loop_checkpoints: Checkpoints = None, train: str | None = None,
                  learning_rate: float | None = None, memory_limit: int | str | None = None,
                  allocated: Callable[[str, str], int] | None = None) -> str:
    """Text in, text out: parse a StableHLO module (text, or bytes in any form
    ``boundary.module_text`` reads) and add its derivative functions (``add_adjoints``).
    ``wrt`` holds argument indices or the names their producer gave them."""
    control_flow.check_checkpoints(loop_checkpoints)
    if memory_limit is not None:
        memory.parse_size(memory_limit)
    if train is not None:
        training.check(train, learning_rate)
    module = parse_module(text)
    verify(module, "input module")
    rewrite_lapack_calls(module)  # JAX's CPU cholesky / triangular_solve, as the StableHLO ops
    add_adjoints(module, func, wrt, grad=grad, vjp=vjp, with_value=with_value, jvp=jvp, hessian=hessian,
                 loop_checkpoints=loop_checkpoints, train=train, learning_rate=learning_rate,
                 memory_limit=memory_limit, allocated=allocated)
    return module.operation.get_asm(enable_debug_info=True)


def estimate_peak(text: str | bytes, func: str | None = None) -> memory.Estimate:
    """The estimated peak memory of function ``func`` of a StableHLO module (text or bytes;
    the only public function when None): ``memory.Estimate``, whose ``line()`` says it in one line."""
    module = parse_module(text)
    verify(module, "input module")
    with module.context:
        return memory.estimate(find_function(module, func))


def annotate_estimates(text: str | bytes) -> str:
    """Text in, text out: every public function annotated with its estimated peak
    (``memory.annotate``), which ``runtime.compile`` keeps in the artifact for ``irgrad inspect``."""
    module = parse_module(text)
    verify(module, "input module")
    with module.context:
        for func_op in public_functions(module):
            memory.annotate(func_op)
    return module.operation.get_asm(enable_debug_info=True)


def vectorize(text: str, func: str | None = None, batched: Sequence[int] | None = None, size: int = 2,
              fallback: bool = False) -> str:
    """Text in, text out: add ``@F_batched``, ``@F`` over a leading batch of ``size`` on the
    arguments ``batched`` (default: all), every result batched."""
    module = parse_module(text)
    verify(module, "input module")
    func_op = find_function(module, func)
    n = len(func_op.regions[0].blocks[0].arguments)
    flags = [batched is None or i in batched for i in range(n)]
    with module.context:
        new = batching.batch_function(func_op, flags, size, f"{function_name(func_op)}_batched", fallback=fallback)
        run_pipeline(new, CLEANUP)
        verify(module, f"@{function_name(new)}")
    return module.operation.get_asm(enable_debug_info=True)
