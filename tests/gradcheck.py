"""The one numeric derivative checker used by every adjoint- and tangent-rule test.

Float64 central differences against the reverse-mode and the forward-mode
results, compared as random-direction inner products (JAX's / autograd's
``check_vjp`` and ``check_jvp``):

    < J v , u >   (central differences of f along v)
    < v , J^T u > (the VJP built by irgrad, compiled by IREE and run)
    < J v , u >   (the JVP built by irgrad: ``@F_jvp``, where the module pass runs)

for random directions ``v`` over the float inputs and random cotangents ``u``
over the float outputs. Everything goes through a real IREE compile; float64
runs on llvm-cpu (irgrad.runtime links f64 math against the system libm).

Two entry points:
* :func:`check_module` — StableHLO text; the adjoint comes from the
  module-level pass (``passes.differentiate(..., vjp=True)``);
* :func:`check_fn` — an irgrad Python function; the adjoint comes from
  ``ig.gradients(ys, xs, grad_ys=u)`` traced in the same function, and (by
  default) also from the module-level pass applied to the lowered forward.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

import irgrad as ig
from irgrad import passes

TARGET = "llvm-cpu"
_module_cache: dict[tuple[str, str], object] = {}


def _load(text: str, target: str = TARGET):
    key = (text, target)
    m = _module_cache.get(key)
    if m is None:
        m = _module_cache[key] = ig.compile(text, target=target).load()
    return m


def _is_float(a: np.ndarray) -> bool:
    return np.asarray(a).dtype.kind == "f"


def _inner(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    return float(sum(np.vdot(np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel())
                     for x, y in zip(a, b)))


def _directions(args, rng, along=None) -> list[np.ndarray | None]:
    """Random directions over the float inputs (zero for those ``along`` leaves out)."""
    dirs = [rng.standard_normal(np.shape(a)).astype(np.asarray(a).dtype) if _is_float(a) else None
            for a in args]
    return dirs if along is None else [d if d is None or keep else np.zeros_like(d) for d, keep in zip(dirs, along)]


def _perturb(args, dirs, t):
    return [a + t * d if d is not None else a for a, d in zip(args, dirs)]


def _compare(lhs: float, rhs: float, rtol: float, atol: float, what: str) -> None:
    assert abs(lhs - rhs) <= atol + rtol * max(abs(lhs), abs(rhs)), (
        f"{what}: <J v, u> = {lhs!r} (finite differences) but <v, J^T u> = {rhs!r} (adjoint); "
        f"difference {abs(lhs - rhs):.3e}")


def check_vjp(forward: Callable[..., list[np.ndarray]], vjp: Callable[..., list[np.ndarray]],
              args: Sequence[np.ndarray], *, eps: float = 1e-6, rtol: float = 1e-6, atol: float = 1e-9,
              directions: int = 2, seed: int = 0, what: str = "vjp",
              jvp: Callable[..., list[np.ndarray]] | None = None, along: Sequence[bool] | None = None) -> None:
    """Check ``vjp(args, cts) -> grads of float args`` against ``forward(args) -> outputs``,
    and ``jvp(args, tangents of float args) -> tangents of float outputs`` when given.
    ``along``: one flag per argument, the directions move only those flagged (the real or
    the imaginary parts of complex arguments: ``complexcheck.py``)."""
    rng = np.random.default_rng(seed)
    args = [np.asarray(a) for a in args]
    outs = forward(*args)
    for k in range(directions):
        dirs = _directions(args, rng, along)
        cts = [rng.standard_normal(np.shape(o)).astype(o.dtype) if _is_float(o) else np.zeros_like(o)
               for o in outs]
        plus, minus = forward(*_perturb(args, dirs, eps)), forward(*_perturb(args, dirs, -eps))
        jv = [(p - m) / (2 * eps) if _is_float(p) else np.zeros_like(p, dtype=np.float64)
              for p, m in zip(plus, minus)]
        lhs = _inner(jv, cts)
        grads = vjp(args, cts)
        float_dirs = [d for d in dirs if d is not None]
        assert len(grads) == len(float_dirs), f"{what}: {len(grads)} gradients for {len(float_dirs)} float inputs"
        rhs = _inner(float_dirs, grads)
        _compare(lhs, rhs, rtol, atol, f"{what} (direction {k})")
        if jvp is not None:
            tangents = jvp(args, float_dirs)
            float_cts = [c for o, c in zip(outs, cts) if _is_float(o)]
            assert len(tangents) == len(float_cts), f"{what}: {len(tangents)} tangents for {len(float_cts)} outputs"
            _compare(lhs, _inner(tangents, float_cts), rtol, atol, f"{what} forward mode (direction {k})")


def check_module(text: str, args: Sequence[np.ndarray], *, func: str | None = None, jvp: bool = True,
                 loop_checkpoints=None, memory_limit=None, allocated=None, **kw) -> str:
    """Differentiate StableHLO ``text`` with the module-level pass (``loop_checkpoints`` and
    ``memory_limit`` and ``allocated`` passed on) and check its @F_vjp and (``jvp``) its @F_jvp."""
    module_text = passes.differentiate(text, func, vjp=True, grad=False, with_value=True, jvp=jvp,
                                       loop_checkpoints=loop_checkpoints, memory_limit=memory_limit,
                                       allocated=allocated)
    # Keep the parsed module alive while reading its function: ops do not own their module.
    parsed = passes.parse_module(text)
    name = func or passes.function_name(passes.find_function(parsed, None))
    m = _load(module_text)
    fwd, vjp_fn = m[name], m[f"{name}_vjp"]
    n_out = len(fwd.signature.outputs)

    def forward(*a):
        return [np.asarray(r) for r in fwd.call_flat(*a)]

    def vjp(a, cts):
        return vjp_fn.call_flat(*a, *cts)[n_out:]

    def tangents(a, ts):
        return m[f"{name}_jvp"].call_flat(*a, *ts)[n_out:]

    check_vjp(forward, vjp, args, what=kw.pop("what", f"@{name}_vjp"), jvp=tangents if jvp else None, **kw)
    return module_text


def check_fn(fn: Callable, *args: np.ndarray, both: bool = True, **kw) -> None:
    """Check ``ig.gradients`` inside a traced function (and the module pass on its forward)."""
    args = [np.asarray(a) for a in args]
    float_idx = [i for i, a in enumerate(args) if _is_float(a)]

    def outputs(result):
        return list(result) if isinstance(result, (list, tuple)) else [result]

    def traced_forward(*xs):
        return outputs(fn(*xs))

    forward_fn = ig.function(traced_forward, target=TARGET)
    probe = forward_fn(*args)
    n_out = len(probe)

    def with_grads(*xs_and_cts):
        xs, cts = xs_and_cts[:len(args)], xs_and_cts[len(args):]
        ys = outputs(fn(*xs))
        float_ys = [(y, c) for y, c in zip(ys, cts) if y.dtype.is_floating]
        gs = ig.gradients([y for y, _ in float_ys], [xs[i] for i in float_idx],
                          grad_ys=[c for _, c in float_ys], unconnected_gradients="zero")
        return ys + gs

    vjp_fn = ig.function(with_grads, target=TARGET)
    name = getattr(fn, "__name__", "fn")
    check_vjp(lambda *a: [np.asarray(r) for r in forward_fn(*a)],
              lambda a, cts: [np.asarray(g) for g in vjp_fn(*a, *cts)[n_out:]],
              args, what=f"ig.gradients of {name}", **kw)
    if both:
        text = forward_fn.lower(*args).mlir
        check_module(text, args, what=f"module pass on {name}", **kw)
