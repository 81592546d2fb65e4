"""The benchmark scripts still run. Smoke only: no timing is asserted here.

``benchmarks/bench_adjoint.py`` measures ratios side by side in one run and
prints them; its numbers are read by people, never checked by tests.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "bench_adjoint.py"


@pytest.mark.slow
def test_bench_adjoint_quick_runs_and_prints_its_table():
    proc = subprocess.run([sys.executable, str(BENCH), "--quick"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"bench_adjoint.py --quick failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    lines = proc.stdout.splitlines()
    assert lines and lines[0].startswith("irgrad adjoint benchmark (quick)"), proc.stdout[:2000]
    header = [line for line in lines if line.startswith("measurement")]
    assert header and "value" in header[0] and "note" in header[0], proc.stdout[:2000]


def test_peer_modules_are_committed_data():
    """The benchmark runs without JAX: the peer's StableHLO is in the repository."""
    for name in ("jax_mlp_forward", "jax_mlp_value_and_grad", "jax_mlp_value_and_grad_params"):
        text = (ROOT / "benchmarks" / "peer" / f"{name}.mlir").read_text()
        assert "func.func public @main" in text


def _jax_python() -> str | None:
    """A Python with JAX: ``IRGRAD_JAX_PYTHON``, this one, or the dev environment's /work/tfvenv."""
    for python in (os.environ.get("IRGRAD_JAX_PYTHON"), sys.executable, "/work/tfvenv/bin/python"):
        if python and pathlib.Path(python).exists() and subprocess.run(
                [python, "-c", "import jax"], capture_output=True).returncode == 0:
            return python
    return None


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux" or shutil.which("prlimit") is None,
                    reason="peaks are read from /proc/self; every process runs under prlimit")
@pytest.mark.parametrize("arena", [[], ["--arena"]], ids=["default", "arena"])
def test_bench_memory_measures_forward_and_gradient_of_irgrad_and_xla(arena):
    python = _jax_python()
    if python is None:
        pytest.skip("bench_memory.py runs JAX's side under a Python with JAX (set IRGRAD_JAX_PYTHON)")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_memory.py"), "--jax-python", python,
                           "--models", "mlp:64", "--calls", "2", *arena], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"bench_memory.py failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| mlp |")]
    assert [row[2].strip() for row in rows] == ["forward", "gradient"], proc.stdout
    for row in rows:  # irgrad first, second, second (own), numpy first, XLA's three: MiB, all measured
        assert all(float(cell) >= 0 for cell in row[3:10]), row
