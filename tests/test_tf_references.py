"""irgrad against real TensorFlow: the same programs, TensorFlow's stored numbers.

``fixtures/tf/cases.py`` holds one table of small programs ``fn(T, *args, **variables)``
written against a namespace ``T``. ``dev/make_tf_references.py`` ran them with ``T`` a
shim over ``tensorflow`` inside ``tf.function`` (graph semantics) and stored inputs and
outputs in ``fixtures/tf/references.{npz,json}``; here ``T`` is a shim over ``irgrad``
and the programs run inside ``ig.function``. TensorFlow itself is never imported.

Per case: the output structure (which entries are ``None``) must be equal, every
output must have TensorFlow's dtype and shape, integers and booleans must be equal and
floats close (float32: rtol 1e-5 / atol 1e-6; float64: rtol 1e-10 / atol 1e-12; NaN and
inf where TensorFlow has them). A case where TensorFlow raised must raise an exception
of the same builtin class in irgrad.

Cases of one group are traced into one ``ig.function`` and compiled once (a case that
raises while tracing is left out of the batch); if the batch does not compile or run,
its cases run one by one.

Where irgrad knowingly differs from TensorFlow the case is ``xfail(strict=True)`` with
the difference in the reason (``DIFFERS``); irgrad is not changed to match here.
"""
from __future__ import annotations

import builtins
import functools
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import irgrad as ig

import loopforms

FIXTURES = Path(__file__).parent / "fixtures" / "tf"


def _load_cases():
    spec = importlib.util.spec_from_file_location("tf_cases", FIXTURES / "cases.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("tf_cases", mod)
    spec.loader.exec_module(mod)
    return mod


cases = _load_cases()
TABLE = json.loads((FIXTURES / "references.json").read_text())
REFS = {c["name"]: c for c in TABLE["cases"]}

# TensorFlow op type -> the StableHLO op irgrad's op lowers to (gradient_override_map keys).
OP_TYPES = {"Tanh": "stablehlo.tanh", "Sin": "stablehlo.sine", "Mul": "stablehlo.multiply"}


class IGNamespace:
    """``irgrad`` plus the few names the case table spells framework-neutrally."""

    name = "ig"

    def __getattr__(self, attr):
        return getattr(ig, attr)

    @staticmethod
    def op_type(tf_name: str) -> str:
        return OP_TYPES[tf_name]

    get_default_graph = staticmethod(ig.get_default_graph)
    hessian_vector_product = staticmethod(ig.hessian_vector_product)


T = IGNamespace()

TOLERANCES = {"float32": (1e-5, 1e-6), "float64": (1e-10, 1e-12), "float16": (1e-3, 1e-3)}

# Known disagreements with TensorFlow (the lead decides what to do with each).
DIFFERS: dict[str, str] = {
    "softmax_cross_entropy_grad_of_grad_wrt_labels":
        "TF's SoftmaxCrossEntropyWithLogits gradient has no labels term for the second-order path: "
        "d/d labels of sum((d ce/d logits)^2) is [0, 0, 0] in TF; irgrad gives the true derivative "
        "-2 (softmax - labels) = [1.216, 2.688, -0.405]",
    "gather_out_of_range_index":
        "TF (CPU) raises InvalidArgumentError 'indices[1] = 4 is not in [0, 4)'; irgrad clamps "
        "like StableHLO's gather (4 -> row 3, -1 -> row 0) and returns a value",
}


@functools.cache
def _refs():
    with np.load(FIXTURES / "references.npz") as z:
        return {k: z[k] for k in z.files}


def _args(name: str) -> list[np.ndarray]:
    refs, out, i = _refs(), [], 0
    while f"{name}__arg{i}" in refs:
        out.append(refs[f"{name}__arg{i}"])
        i += 1
    return out


@functools.cache
def _variables(name: str) -> dict:
    c = cases.by_name(name)
    return {k: ig.Variable(np.asarray(v), trainable=t, name=k) for k, (v, t) in c.variables.items()}


def _function(fn, name: str):
    fn.__name__ = fn.__qualname__ = name
    return ig.function(fn)


def _run_one(c) -> tuple[str, object]:
    """("ok", outputs) or ("error", exception), tracing, compiling and running ``c`` alone."""
    variables = _variables(c.name)
    try:
        return "ok", _function(lambda *a: c.fn(T, *a, **variables), c.name)(*_args(c.name))
    except Exception as e:  # noqa: BLE001 - compared with TensorFlow's behaviour by the test
        return "error", e


@loopforms.cached
def _group_results(group: str, form: str | None) -> dict[str, tuple[str, object]]:
    """The group's cases traced into one function, differentiated with its loops in ``form``."""
    members = [c for c in cases.CASES if c.group == group]
    results: dict[str, tuple[str, object]] = {}
    batched = [c for c in members if not c.raises]
    for c in members:
        if c.raises:
            variables = _variables(c.name)
            specs = [ig.TensorSpec(a.shape, a.dtype) for a in _args(c.name)]
            try:
                _function(lambda *a: c.fn(T, *a, **variables), c.name).lower(*specs)  # noqa: B023 (traced here)
            except Exception as e:  # noqa: BLE001
                results[c.name] = ("error", e)
            else:
                results[c.name] = _run_one(c)
    if not batched:
        return results

    traced_errors: dict[str, Exception] = {}
    offsets, flat_args = [], []
    for c in batched:
        offsets.append(len(flat_args))
        flat_args += _args(c.name)

    def batch(*a):
        outs = {}
        for c, start in zip(batched, offsets):
            if c.name in traced_errors:
                continue
            n = len(c.args)
            try:
                outs[c.name] = [c.fn(T, *a[start:start + n], **_variables(c.name))]
            except Exception as e:  # noqa: BLE001
                traced_errors[c.name] = e
        return outs

    try:
        outs = _function(batch, f"tf_refs_{group}")(*flat_args)
    except Exception:  # noqa: BLE001 - one case spoils the batch: run them one by one
        for c in batched:
            results[c.name] = ("error", traced_errors[c.name]) if c.name in traced_errors else _run_one(c)
        return results
    for c in batched:
        if c.name in traced_errors:
            results[c.name] = ("error", traced_errors[c.name])
        else:
            results[c.name] = ("ok", outs[c.name][0])
    return results


# The groups whose programs hold while loops: each is differentiated as one function, so every case
# of such a group runs once per form of the while adjoint (conftest.py's loop_form), the group's
# loops forced into that form (a loop whose trip count is known at run time only stays looped).
LOOP_GROUPS = {"control", "loops"}


def _params():
    return loopforms.params([c.name for c in cases.CASES], [c.name for c in cases.CASES if c.group in LOOP_GROUPS],
                            marks={name: [pytest.mark.xfail(strict=True, reason=f"DIFFERS FROM TF: {why}")]
                                   for name, why in DIFFERS.items()})


def test_table_and_references_agree():
    assert len(cases.CASES) >= 40
    assert [c.name for c in cases.CASES] == [c["name"] for c in TABLE["cases"]], \
        "regenerate: /work/tfvenv/bin/python dev/make_tf_references.py"
    for c in cases.CASES:
        stored = _args(c.name)
        assert len(stored) == len(c.args)
        for a, b in zip(stored, c.args):
            np.testing.assert_array_equal(a, b, err_msg=f"{c.name}: stale inputs, regenerate")


@pytest.mark.parametrize("name, loop_form", _params(), indirect=["loop_form"])
def test_matches_tensorflow(name, loop_form):
    c, ref = cases.by_name(name), REFS[name]
    status, got = _group_results(c.group, loop_form)[name]
    if "error" in ref:
        err = ref["error"]
        if status != "error":
            pytest.fail(f"TensorFlow raises {err['type']} ({err['message']}); irgrad returned a result")
        expected = getattr(builtins, err["builtin"])
        assert isinstance(got, expected), (
            f"TensorFlow raises {err['type']} (a {err['builtin']}): {err['message']}; irgrad raised "
            f"{type(got).__name__}: {got}")
        return
    if status == "error":
        raise AssertionError(f"irgrad raised {type(got).__name__}: {got}") from got
    leaves, tree = cases.flatten(got)
    assert tree == ref["tree"], f"output structure (None = no gradient): irgrad {tree}, TensorFlow {ref['tree']}"
    refs = _refs()
    for j, leaf in enumerate(leaves):
        want = refs[f"{name}__out{j}"]
        leaf = np.asarray(leaf)
        what = f"{name}: output {j}"
        assert leaf.dtype == want.dtype, f"{what}: dtype {leaf.dtype}, TensorFlow {want.dtype}"
        assert leaf.shape == want.shape, f"{what}: shape {leaf.shape}, TensorFlow {want.shape}"
        if want.dtype.kind in "fc":
            rtol, atol = TOLERANCES[want.dtype.name]
            np.testing.assert_allclose(leaf, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
        else:
            np.testing.assert_array_equal(leaf, want, err_msg=what)
