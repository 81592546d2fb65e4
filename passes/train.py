"""Training steps for any producer's scalar loss ``F``: ``@F_train_init`` and ``@F_train_step``.

``@F_train_init(args...) -> (state...)`` and
``@F_train_step(args..., state...) -> (F's results..., updated args[wrt]..., updated state...)``:
one call is one optimizer step (forward, gradient, update), with Keras 3's rules, the same
as ``ig.optimizers``. The state is a step counter (``tensor<i32>``, Keras's ``iterations``)
and then the optimizer's slots, one per parameter and slot kind in ``STATE``'s order.
"""
from __future__ import annotations

import json

from .ir import hlo
from .transforms.backprop import backprop
from .ir.mlir import elem, ir, is_float, shape, tensor_type

# The slots each optimizer keeps per parameter, in the state's order after the counter.
STATE = {"sgd": (), "momentum": ("momentum",), "adam": ("m", "v")}
LEARNING_RATE = {"sgd": 0.01, "momentum": 0.01, "adam": 0.001}
MOMENTUM, BETA_1, BETA_2, EPSILON = 0.9, 0.9, 0.999, 1e-7


def check(optimizer: str, learning_rate: float | None) -> float:
    """The learning rate to use (the optimizer's default when None); ValueError for an
    unknown optimizer or a rate that is not a positive number."""
    if optimizer not in STATE:
        raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {', '.join(STATE)}")
    lr = LEARNING_RATE[optimizer] if learning_rate is None else learning_rate
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
        raise ValueError(f"learning rate must be a positive number, got {learning_rate!r}")
    return float(lr)


# The attribute of @F_train_step that describes it (copied into the artifact's metadata).
LAYOUT_KEY = "irgrad.train"


def state_names(optimizer: str, params: list[str]) -> list[str]:
    """What each state entry is, by name: ``step`` (the counter), then ``<slot>_<parameter>``
    (``m_w``, ``v_w``, ``momentum_w``) per slot kind and parameter, in the state's order."""
    return ["step", *[f"{kind}_{p}" for kind in STATE[optimizer] for p in params]]


def layout(optimizer: str, learning_rate: float, wrt: list[int], names: list[str] | None = None) -> str:
    """JSON: the optimizer, its learning rate, the parameters (argument indices, and their
    names: ``param_names``) and what each state entry is (``state_names``)."""
    names = list(names) if names is not None else [f"arg{i}" for i in wrt]
    return json.dumps({"optimizer": optimizer, "learning_rate": learning_rate, "params": list(wrt),
                       "param_names": names, "state": state_names(optimizer, names)})


def result_names(func_op: ir.Operation, names: list[str | None], params: list[str],
                 state: list[str]) -> list[str | None]:
    """The names of ``@F_train_step``'s results: F's own (its scalar float result ``loss``
    where F gave it no name), the new parameters (named as the parameters), the new state."""
    ys = list(list(func_op.regions[0].blocks[0].operations)[-1].operands)
    own = [n if n is not None or not (is_float(y) and shape(y) == ()) else "loss" for n, y in zip(names, ys)]
    return [*own, *params, *state]


def state_types(xs: list[ir.Value], optimizer: str) -> list[ir.Type]:
    counter = tensor_type([], ir.IntegerType.get_signless(32))
    return [counter, *[x.type for _ in STATE[optimizer] for x in xs]]


def step(optimizer: str, learning_rate: float, wrt: list[int], name: str, names: list[str] | None = None):
    """``_build``'s derive function for ``@F_train_step``; its state arguments are named
    ``names`` (``state_names``)."""
    def derive(block: ir.Block, ys: list[ir.Value], loc: ir.Location) -> list[ir.Value]:
        floats = [y for y in ys if is_float(y)]
        if len(floats) != 1 or shape(floats[0]) != ():
            raise ValueError(f"a training step needs a scalar float loss; @{name.removesuffix('_train_step')} "
                             f"returns {', '.join(str(y.type) for y in ys) or 'nothing'}")
        xs = [block.arguments[i] for i in wrt]
        counter, *slots = [block.add_argument(t, ir.Location.name(names[k]) if names else ir.Location.unknown())
                           for k, t in enumerate(state_types(xs, optimizer))]
        grads = backprop(floats, [hlo.ones(floats[0].type)], xs, name=name)
        grads = [g if g is not None else hlo.zeros_like(x) for g, x in zip(grads, xs)]
        per_kind = [slots[k * len(xs):(k + 1) * len(xs)] for k in range(len(STATE[optimizer]))]
        new_params, new_slots = [], [[] for _ in per_kind]
        for i, (x, g) in enumerate(zip(xs, grads)):
            param, kept = _update(optimizer, learning_rate, x, g, [s[i] for s in per_kind], counter)
            new_params.append(param)
            for out, s in zip(new_slots, kept):
                out.append(s)
        one = hlo.splat(1, counter.type)
        return [*new_params, hlo.add(counter, one), *[s for kind in new_slots for s in kind]]
    return derive


def _update(optimizer: str, lr: float, x: ir.Value, g: ir.Value, slots: list[ir.Value],
            counter: ir.Value) -> tuple[ir.Value, list[ir.Value]]:
    def c(value: float) -> ir.Value:
        return hlo.like(value, x)
    if optimizer == "sgd":
        return hlo.subtract(x, hlo.multiply(g, c(lr))), []
    if optimizer == "momentum":  # m = momentum·m - lr·g; w += m
        m = hlo.subtract(hlo.multiply(slots[0], c(MOMENTUM)), hlo.multiply(g, c(lr)))
        return hlo.add(x, m), [m]
    # Adam: alpha = lr·√(1 - β2^t) / (1 - β1^t) at step t = counter + 1
    scalar = tensor_type([], elem(x))
    t = hlo.convert(hlo.add(counter, hlo.splat(1, counter.type)), elem(x))

    def one_minus_power(beta: float) -> ir.Value:
        return hlo.subtract(hlo.splat(1.0, scalar), hlo.binary("stablehlo.power", hlo.splat(beta, scalar), t))
    alpha = hlo.divide(hlo.multiply(hlo.splat(lr, scalar), hlo.unary("stablehlo.sqrt", one_minus_power(BETA_2))),
                       one_minus_power(BETA_1))
    m = hlo.add(slots[0], hlo.multiply(hlo.subtract(g, slots[0]), c(1.0 - BETA_1)))
    v = hlo.add(slots[1], hlo.multiply(hlo.subtract(hlo.multiply(g, g), slots[1]), c(1.0 - BETA_2)))
    scaled = hlo.multiply(m, hlo.broadcast_like(alpha, x, []))
    return hlo.subtract(x, hlo.divide(scaled, hlo.add(hlo.unary("stablehlo.sqrt", v), c(EPSILON)))), [m, v]


def add_init(module: ir.Module, after: ir.Operation, func_op: ir.Operation, new_name: str, wrt: list[int],
             optimizer: str) -> ir.Operation:
    """``@new_name(F's args...) -> (state...)``: the counter and every slot at zero. Its
    arguments keep F's names."""
    args = list(func_op.regions[0].blocks[0].arguments)
    types = state_types([args[i] for i in wrt], optimizer)
    with ir.InsertionPoint(module.body), func_op.location:
        op, block = hlo.func(new_name, [], types)
        for a in args:
            block.add_argument(a.type, a.location)
        hlo.set_function_type(op, [a.type for a in args], types)
        with ir.InsertionPoint(block):
            # a parameter with a run-time dimension gets slots of its run-time shape
            params = [block.arguments[i] for i in wrt] * len(STATE[optimizer])
            hlo.return_([hlo.zeros(types[0]), *[hlo.zeros_like(x) for x in params]])
    op.move_after(after)
    return op


# FedProx: the global copy of parameter ``w`` is the argument named "global:<w's name>".
GLOBAL_PREFIX = "global:"


def add_proximal_term(copy: ir.Operation, wrt: list[int], names: list[str | None], mu: float, name: str) -> None:
    """FedProx's proximal term ``mu/2 · Σ ||args[i] - global_i||²`` over the parameters ``wrt``
    added to the scalar float loss of ``copy`` (a ``func.func``, changed in place), one new
    argument per parameter, named ``"global:<name>"`` (the parameter's own name, or
    ``arg<i>``). ``passes.proximal`` is the text-in, text-out entry point."""
    if isinstance(mu, bool) or not isinstance(mu, (int, float)) or not mu >= 0:
        raise ValueError(f"mu must be a number >= 0, got {mu!r}")
    block = copy.regions[0].blocks[0]
    ret = list(block.operations)[-1].operation
    ys = list(ret.operands)
    floats = [k for k, y in enumerate(ys) if is_float(y)]
    if len(floats) != 1 or shape(ys[floats[0]]) != ():
        raise ValueError(f"FedProx needs a scalar float loss; @{name} returns "
                         f"{', '.join(str(y.type) for y in ys) or 'nothing'}")
    loss = ys[floats[0]]
    xs = [block.arguments[i] for i in wrt]
    anchors = [block.add_argument(x.type, ir.Location.name(f"{GLOBAL_PREFIX}{names[i] or f'arg{i}'}"))
               for i, x in zip(wrt, xs)]
    with ir.InsertionPoint(ret), ret.location:
        term = None
        for x, g in zip(xs, anchors):
            d = hlo.subtract(x, g)
            s = hlo.reduce_sum(hlo.multiply(d, d), list(range(len(shape(x)))))
            if elem(s) != elem(loss):
                s = hlo.convert(s, elem(loss))
            term = s if term is None else hlo.add(term, s)
        if term is not None:
            ys[floats[0]] = hlo.add(loss, hlo.multiply(term, hlo.splat(mu / 2, loss.type)))
        hlo.return_(ys)
    ret.erase()
    hlo.set_function_type(copy, [a.type for a in block.arguments], [y.type for y in ys])
