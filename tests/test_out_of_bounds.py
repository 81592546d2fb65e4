"""Indices out of bounds (issue 40): StableHLO's clamps and drops, right values and gradients,
and many calls in a child process under glibc's heap checks (``oob_calls.py`` holds the
programs; ``passes/lowering/bounds.py`` the rewrites).

Before the rewrites, IREE 3.13 stored a scatter's out-of-bounds update past the end of its
result buffer: OpenXLA's ``scatter_add_float32_1_5_float32_1`` aborted the process in
``free()`` after a few hundred ``ig.load`` calls, and a gather read outside its operand.

The issue's bar, 10,000 calls of every function under the heap checks, is a script run:
``python tests/oob_calls.py --calls 10000`` (with the environment ``_heap_checked`` sets).
"""
from __future__ import annotations

import os
import platform
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes
from irgrad.passes.lowering.legalize import legalize_text

import oob_calls
from gradcheck import check_fn, check_vjp
from oob_calls import CASES, ROWS

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
CALLS = 1_000  # of each function, per child process: about 2 s
SCRIPT = Path(oob_calls.__file__)


def _heap_checked(keep_heap: str) -> dict[str, str]:
    """glibc's heap checks: malloc's own consistency checks (always on: they caught the
    unguarded scatter), new and freed memory filled with a pattern (MALLOC_PERTURB_), and
    MALLOC_CHECK_=3 (glibc 2.34 on: with its debug malloc preloaded; checked to take effect
    under Debian's /usr/bin/python3, not under every Python build)."""
    return {**os.environ, "LD_PRELOAD": "libc_malloc_debug.so.0", "MALLOC_CHECK_": "3", "MALLOC_PERTURB_": "165",
            "IRGRAD_KEEP_HEAP": keep_heap}


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


def _child(args: list[str], keep_heap: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=_heap_checked(keep_heap), preexec_fn=_limited,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> Path:
    """Every case and its gradient (float32), compiled once."""
    path = tmp_path_factory.mktemp("oob") / "oob.vmfb"
    ig.compile(oob_calls.with_gradients(oob_calls.module_text())).save(path)
    return path


@pytest.mark.skipif(not GLIBC, reason="glibc's heap checks")
def test_the_heap_checks_catch_a_write_past_a_buffer():
    """The checks the next test relies on abort a process that writes past a malloc'd block
    over its neighbour's header, as the unguarded scatter did."""
    overflow = ("import ctypes; libc = ctypes.CDLL(None); libc.malloc.restype = ctypes.c_void_p; "
                "libc.malloc.argtypes = [ctypes.c_size_t]; libc.free.argtypes = [ctypes.c_void_p]; "
                "p, q = libc.malloc(20), libc.malloc(20); ctypes.c_size_t.from_address(q - 8).value = 0x11; "
                "libc.free(q)")  # q's size field (p's next 8 bytes when q follows p) made 16: too small
    result = _child(["-c", overflow], "1")
    assert result.returncode == -6 and "free()" in result.stderr, (result.returncode, result.stderr)


@pytest.mark.skipif(not GLIBC, reason="glibc's heap checks")
@pytest.mark.parametrize("device,keep_heap", [("local-sync", "1"), ("local-task", "0")])
def test_many_calls_under_heap_checks(artifact, device, keep_heap):
    """Every out-of-bounds case and its gradient, CALLS times each through ``ig.load`` (and
    ``ig.function``), every result checked bit for bit: a clean exit (the issue's two
    drivers and heap settings)."""
    result = _child([str(SCRIPT), "--calls", str(CALLS), "--device", device, "--artifact", str(artifact)], keep_heap)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr[-3000:])
    assert "every result right" in result.stdout
    assert "free()" not in result.stderr and "corrupt" not in result.stderr


# ----- values and gradients, in this process (float64) -----------------------------------

@pytest.fixture(scope="module")
def float64_module():
    """Every case in float64 with, for those that have gradients, @F_grad, @F_vjp and @F_jvp
    (results first)."""
    text = oob_calls.module_text("f64")
    for case in CASES:
        if case.grads is not None:
            text = passes.differentiate(text, case.name, grad=True, vjp=True, jvp=True, with_value=True)
    return ig.compile(text).load()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_values_and_gradients(float64_module, case):
    """StableHLO's values (dropped updates, clamped starts) and, where the case has them,
    the gradients: the hand-worked ones, and gradcheck's against finite differences."""
    args = case.arguments(np.float64)
    results, grads = oob_calls.expected(case, np.float64)
    f = float64_module[case.name]
    got = f.call_flat(*args)
    for g, want in zip(got, results, strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-14, atol=0)
    if grads is None:
        return
    n = len(results)
    for g, want in zip(float64_module[f"{case.name}_grad"].call_flat(*args)[n:], grads, strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-14, atol=0)
    vjp, jvp = float64_module[f"{case.name}_vjp"], float64_module[f"{case.name}_jvp"]
    check_vjp(lambda *a: [np.asarray(r) for r in f.call_flat(*a)],
              lambda a, cts: vjp.call_flat(*a, *cts)[n:], args,
              jvp=lambda a, ts: jvp.call_flat(*a, *ts)[n:], what=f"@{case.name}_vjp")


def test_gather_out_of_range_through_ig_function():
    """ig.gather and tensor indexing clamp (StableHLO's gather); the gradient goes to the
    clamped positions."""
    x, i = np.linspace(-1.0, 1.0, 5), np.array([7, -3, 2, 2147483647], np.int32)

    def gathered(x, i):
        return ig.gather(x, i) * x[i]

    check_fn(gathered, x, i)
    got = ig.function(gathered)(x, i)
    np.testing.assert_allclose(got, x[[4, 0, 2, 4]] ** 2, rtol=1e-15)


# ----- which rewrite each scatter and gather gets ---------------------------------------

def _scatter_text(indices: str, region: str = "stablehlo.add %p, %q : tensor<f32>") -> str:
    return (f"func.func @f(%x: tensor<6x3xf32>, %u: tensor<2x3xf32>) -> tensor<6x3xf32> {{\n"
            f"  %i = stablehlo.constant dense<{indices}> : tensor<2x1xi32>\n"
            f"  %0 = \"stablehlo.scatter\"(%x, %i, %u) <{{scatter_dimension_numbers = #stablehlo.scatter<{ROWS}>}}> ({{\n"
            f"  ^bb0(%p: tensor<f32>, %q: tensor<f32>):\n    %r = {region}\n    stablehlo.return %r : tensor<f32>\n"
            f"  }}) : (tensor<6x3xf32>, tensor<2x1xi32>, tensor<2x3xf32>) -> tensor<6x3xf32>\n"
            f"  return %0 : tensor<6x3xf32>\n}}")


def test_indices_in_bounds_by_construction_are_left_alone():
    """Constant indices inside the operand, and the clamp of a gather's adjoint, need no guard;
    constant ones outside it get one."""
    assert "stablehlo.clamp" not in legalize_text(_scatter_text("[[0], [5]]"))
    assert "stablehlo.clamp" in legalize_text(_scatter_text("[[0], [6]]"))
    # The gather's adjoint scatters at indices it clamped itself: only the gather is guarded.
    gather = oob_calls.module_text("f32", ["gather_elements"])
    guarded = legalize_text(passes.differentiate(gather, "gather_elements", grad=True))
    assert guarded.count("stablehlo.clamp") == 1  # the forward gather (its linear gradient reads no x)
    assert "stablehlo.select" not in guarded  # the guard of a scatter selects its dropped updates


def test_scatters_iree_refuses_stay_refused():
    """A scatter of several operands, and one whose window along an indexed dimension has a
    run-time size, are left as they are: IREE 3.13 refuses both (one line, IREE's words)."""
    pair = ("func.func @f(%a: tensor<6xf32>, %b: tensor<6xf32>, %i: tensor<2x1xi32>, %u: tensor<2xf32>, "
            "%v: tensor<2xf32>) -> tensor<6xf32> {\n"
            "  %0:2 = \"stablehlo.scatter\"(%a, %b, %i, %u, %v) <{scatter_dimension_numbers = #stablehlo.scatter<"
            "inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({\n"
            "  ^bb0(%p: tensor<f32>, %p2: tensor<f32>, %q: tensor<f32>, %q2: tensor<f32>):\n"
            "    stablehlo.return %q, %q2 : tensor<f32>, tensor<f32>\n"
            "  }) : (tensor<6xf32>, tensor<6xf32>, tensor<2x1xi32>, tensor<2xf32>, tensor<2xf32>) -> "
            "(tensor<6xf32>, tensor<6xf32>)\n  return %0#0 : tensor<6xf32>\n}")
    with pytest.raises(ig.CompileError, match="variadic operands scatter"):
        ig.compile(pair)
    window = ("func.func @f(%x: tensor<6x3xf32>, %i: tensor<4x1xi32>, %u: tensor<4x?x3xf32>) -> tensor<6x3xf32> {\n"
              "  %0 = \"stablehlo.scatter\"(%x, %i, %u) <{scatter_dimension_numbers = #stablehlo.scatter<"
              "update_window_dims = [1, 2], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({\n"
              "  ^bb0(%p: tensor<f32>, %q: tensor<f32>):\n    stablehlo.return %q : tensor<f32>\n"
              "  }) : (tensor<6x3xf32>, tensor<4x1xi32>, tensor<4x?x3xf32>) -> tensor<6x3xf32>\n"
              "  return %0 : tensor<6x3xf32>\n}")
    with pytest.raises(ig.CompileError, match="mismatch in shape of indices and update value"):
        ig.compile(window)
