"""The module-level pass on StableHLO exported by a foreign frontend, JAX.

For every positive fixture in ``fixtures/jax`` (layout in its README), the pass
adds ``@main_grad`` and ``@main_vjp`` next to ``@main``; the module is compiled
once for llvm-cpu and run, and the results must match JAX's ``jax.grad`` /
``jax.vjp`` references within rtol 1e-4 / atol 1e-5 (float32).

The ``while_*`` fixtures are ``lax.while_loop``s whose trip count depends on the data or an
integer argument; ``jax.grad`` refuses them, so their references are JAX's gradients of the
same computation unrolled for the fixture's inputs.

``custom_call`` (``jnp.linalg.cholesky`` on CPU: ``stablehlo.custom_call
@lapack_spotrf_ffi``) has no gradient references: ``passes/lowering/lapack.py`` turns JAX's LAPACK
calls into ``stablehlo.cholesky``, so it compiles, runs and differentiates (its gradients
are checked against JAX and TensorFlow in ``test_spectral_peers.py``). A call irgrad does not
know must be rejected with a clear error and no output: ``LookupError``
(``MissingAdjointError``) naming the call target.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from irgrad import passes

import loopforms
from foreign import Fixtures

JAX = Fixtures(Path(__file__).parent / "fixtures" / "jax")
NEGATIVE = {"custom_call"}
POSITIVE = [n for n in JAX.names if n not in NEGATIVE]
_text = JAX.text
# The fixtures whose gradient differentiates a while loop (dropout's threefry loop carries only
# integers): each runs in both forms of the while adjoint, or looped where the trip count is known
# at run time only (conftest.py's loop_form).
LOOPS = ["fori_loop", "scan_rnn", "while_nested"]
RUN_TIME_LOOPS = ["while_cond_inside", "while_data_dependent", "while_int_bound", "while_newton"]
LOOP_CASES = loopforms.params(POSITIVE, LOOPS, RUN_TIME_LOOPS)


def test_every_fixture_is_listed():
    assert len(POSITIVE) == 33 and all((JAX.directory / f"{n}.npz").exists() for n in POSITIVE)


@pytest.mark.parametrize("name", POSITIVE)
def test_forward_matches_jax(name):
    JAX.check_forward(name, JAX.compiled(name, None))


@pytest.mark.parametrize("name, loop_form", LOOP_CASES, indirect=["loop_form"])
def test_grad_matches_jax(name, loop_form):
    JAX.check_grad(name, loop_form)


@pytest.mark.parametrize("name, loop_form", LOOP_CASES, indirect=["loop_form"])
def test_vjp_matches_jax(name, loop_form):
    JAX.check_vjp(name, loop_form)


@pytest.mark.parametrize("name", POSITIVE)
def test_jvp_agrees_with_jax_vjp(name):
    """Forward mode (@main_jvp) on JAX's StableHLO: <J v, u> equals <v, Jᵀu> from jax.vjp."""
    JAX.check_jvp(name)


def test_lapack_call_compiles_runs_and_differentiates():
    JAX.check_forward("custom_call", JAX.compiled("custom_call", None))


def test_custom_call_is_lookup_error_naming_the_target():
    opaque = _text("custom_call").replace("lapack_spotrf_ffi", "my_opaque_kernel")
    with pytest.raises(LookupError, match="stablehlo.custom_call") as info:
        passes.differentiate(opaque, "main")
    assert "@my_opaque_kernel" in str(info.value)


def test_jax_modules_with_shardy_attributes_parse():
    """JAX attaches #sdy attributes; they must not stop the parser."""
    module = passes.parse_module(_text("custom_call"))
    assert "sdy.sharding_rule" in str(module)


def test_integer_only_loop_is_not_differentiated():
    """dropout's threefry while carries only integers: no trip-count analysis, no error."""
    text = passes.differentiate(_text("dropout"), "main")
    assert text.count("stablehlo.while") == 2  # @main's and @main_grad's forward copy


def test_calls_inside_regions_are_inlined():
    text = passes.differentiate(_text("scan_rnn"), "main")
    grad = text[text.index("@main_grad"):]
    assert "call @" not in grad
