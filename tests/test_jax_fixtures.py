"""The module-level pass on StableHLO exported by a foreign frontend, JAX.

For every positive fixture in ``fixtures/jax`` (layout in its README), the pass
adds ``@main_grad`` and ``@main_vjp`` next to ``@main``; the module is compiled
once for llvm-cpu and run, and the results must match JAX's ``jax.grad`` /
``jax.vjp`` references within rtol 1e-4 / atol 1e-5 (float32).

The two negative fixtures must be rejected with a clear error and no output:
* ``while_data_dependent``: a ``stablehlo.while`` whose trip count depends on
  the data -> ``DynamicTripCountError`` (a ``ValueError``) naming the loop's
  location; reverse mode needs a static trip count.
* ``custom_call``: ``stablehlo.custom_call @lapack_spotrf_ffi`` is opaque ->
  ``LookupError`` (``MissingAdjointError``) naming the call target.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes
from irgrad.passes.control_flow import DynamicTripCountError

FIXTURES = Path(__file__).parent / "fixtures" / "jax"
NEGATIVE = {"while_data_dependent", "custom_call"}
POSITIVE = sorted(p.stem for p in FIXTURES.glob("*.mlir") if p.stem not in NEGATIVE)
RTOL, ATOL = 1e-4, 1e-5


def _text(name: str) -> str:
    return (FIXTURES / f"{name}.mlir").read_text()


@functools.lru_cache(maxsize=None)
def _data(name: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / f"{name}.npz") as z:
        return {k: z[k] for k in z.files}


def _numbered(data: dict, prefix: str) -> list[np.ndarray]:
    out, i = [], 0
    while f"{prefix}{i}" in data:
        out.append(data[f"{prefix}{i}"])
        i += 1
    return out


@functools.lru_cache(maxsize=None)
def _compiled(name: str):
    """@main, @main_grad and @main_vjp in one module, compiled once per fixture."""
    text = passes.differentiate(_text(name), "main", grad=True, vjp=True)
    return ig.compile(text).load()


def test_every_fixture_is_listed():
    assert len(POSITIVE) == 28 and all((FIXTURES / f"{n}.npz").exists() for n in POSITIVE)


@pytest.mark.parametrize("name", POSITIVE)
def test_forward_matches_jax(name):
    data = _data(name)
    outs = _compiled(name)["main"].call_flat(*_numbered(data, "arg"))
    for got, want in zip(outs, _numbered(data, "out"), strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", POSITIVE)
def test_grad_matches_jax(name):
    data = _data(name)
    grads = _compiled(name)["main_grad"].call_flat(*_numbered(data, "arg"))
    want = _numbered(data, "grad")
    assert len(grads) == len(want) == len(data["wrt"])
    for k, (got, ref) in enumerate(zip(grads, want)):
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL, err_msg=f"{name}: d arg{data['wrt'][k]}")


@pytest.mark.parametrize("name", POSITIVE)
def test_vjp_matches_jax(name):
    data = _data(name)
    args, outs = _numbered(data, "arg"), _numbered(data, "out")
    given = dict(zip(data["float_outs"].tolist(), _numbered(data, "cotangent")))
    # @main_vjp takes one cotangent per result; those of integer results are ignored.
    cts = [given.get(i, np.zeros_like(o)) for i, o in enumerate(outs)]
    vjps = _compiled(name)["main_vjp"].call_flat(*args, *cts)
    want = _numbered(data, "vjp")
    assert len(vjps) == len(want)
    for k, (got, ref) in enumerate(zip(vjps, want)):
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL, err_msg=f"{name}: vjp arg{data['wrt'][k]}")


def test_data_dependent_while_is_rejected_naming_the_loop():
    with pytest.raises(DynamicTripCountError) as info:
        passes.differentiate(_text("while_data_dependent"), "main", grad=True, vjp=True)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert "stablehlo.while" in message and "data-dependent trip count" in message
    assert '"-":3:10' in message  # the while's line and column in the fixture


def test_custom_call_is_lookup_error_naming_the_target():
    with pytest.raises(LookupError, match="stablehlo.custom_call") as info:
        passes.differentiate(_text("custom_call"), "main")
    assert "@lapack_spotrf_ffi" in str(info.value)


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
