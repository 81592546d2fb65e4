"""Many calls of the compiled gradient and Hessian of a data-dependent loop (issue 29, item B).

``test_loops.py::test_second_derivatives_through_a_data_dependent_loop`` failed about once in
eight suite runs: a wrong value, or ``RESOURCE_EXHAUSTED`` on ``hal.device.queue.alloca``.
Cause: the tapes of such a loop are sized at run time, and their extent (``[n, 2]``) was a
``concatenate`` of the count and the static sizes; IREE 3.13 computes that into one buffer and
copies the count out of it for the host in the same command-buffer segment as the dispatch
that writes it, with no barrier between them. On ``local-task`` (worker threads) the copy
sometimes ran first and the host read a stale size: a tape of garbage length (the failed
allocation) or of the wrong length (wrong values). ``local-sync`` never failed. In loops of
5,000 calls of both functions on local-task: 1 to 11 failed calls in each before, none after
(``passes/rules/control_flow.py``, ``_dynamic_zeros``: the extent computed elementwise).

Here: the formulation that raced is absent from the emitted IR (deterministic), and a few
hundred calls with varying inputs (each a different trip count and tape length) match a numpy
reference (the race, when present, failed about one call in a thousand or two).
"""
from __future__ import annotations

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes

F64 = np.float64
CALLS = 300

pytestmark = [pytest.mark.usefixtures("loop_form"),
              pytest.mark.loop_forms("looped", reason="a loop whose trip count is known at run time only")]


def loss(x):
    y = ig.while_loop(lambda v: ig.reduce_sum(v) < 4.0, lambda v: v * 1.5 + 0.2 * ig.sin(v * v), x)
    return ig.reduce_sum(y * y)


def reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(gradient, Hessian, trip count) of ``loss`` by forward accumulation of the first and second
    derivatives of v <- 1.5 v + 0.2 sin(v²), elementwise (the trip count is piecewise constant)."""
    v, d1, d2, n = np.array(x, F64), np.ones(len(x)), np.zeros(len(x)), 0
    while v.sum() < 4.0:
        n += 1
        f1 = 1.5 + 0.4 * v * np.cos(v * v)
        f2 = 0.4 * np.cos(v * v) - 0.8 * v * v * np.sin(v * v)
        d2, d1 = f2 * d1 * d1 + f1 * d2, f1 * d1
        v = 1.5 * v + 0.2 * np.sin(v * v)
    return 2 * v * d1, np.diag(2 * d1 * d1 + 2 * v * d2), n


X0 = np.array([0.4, 0.7], F64)


@pytest.fixture
def texts(loop_form) -> dict[str, str]:
    """Differentiated in the test's loop form (compiled once: the compile cache keeps them)."""
    return {"grad": ig.function(lambda x: ig.gradients(loss(x), x)[0]).lower(X0).mlir,
            "hess": ig.function(lambda x: ig.hessians(loss(x), x)[0]).lower(X0).mlir}


def _extents(text: str) -> list[str]:
    """The op that computes each ``dynamic_broadcast_in_dim``'s extent, by name."""
    module = passes.parse_module(text)
    defs, found = {}, []

    def walk(op):
        for region in op.regions:
            for block in region.blocks:
                for o in block.operations:
                    o = o.operation
                    for r in o.results:
                        defs[r.get_name()] = o.name
                    if o.name == "stablehlo.dynamic_broadcast_in_dim":
                        found.append(defs.get(o.operands[1].get_name(), "?"))
                    walk(o)
    walk(module.operation)
    return found


def test_no_run_time_extent_is_concatenated(texts):
    """The tapes and accumulators sized at run time take their extent from elementwise ops, not
    from a ``concatenate`` (which IREE 3.13 reads back racily on local-task)."""
    for name, text in texts.items():
        extents = _extents(text)
        assert extents, name  # the loop's tapes are sized at run time
        assert "stablehlo.concatenate" not in extents, name


@pytest.mark.parametrize("device", ["local-task", "local-sync"])
def test_many_calls_match_the_reference(texts, device):
    grad, hess = (ig.compile(texts[k]).load(device) for k in ("grad", "hess"))
    grad, hess = grad[list(grad.functions)[0]], hess[list(hess.functions)[0]]
    rng = np.random.default_rng(29)
    trips = set()
    for k in range(CALLS):
        x = X0 if k % 4 == 0 else rng.uniform(0.05, 1.5, 2)
        g_ref, h_ref, n = reference(x)
        np.testing.assert_allclose(hess(x), h_ref, rtol=1e-9, atol=1e-12, err_msg=f"call {k}, x={x.tolist()}")
        np.testing.assert_allclose(grad(x), g_ref, rtol=1e-9, atol=1e-12, err_msg=f"call {k}, x={x.tolist()}")
        trips.add(n)
    assert len(trips) >= 3  # tapes of several lengths
