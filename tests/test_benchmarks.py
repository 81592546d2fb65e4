"""The benchmark scripts still run. Smoke only: no timing is asserted here.

``benchmarks/bench_adjoint.py`` measures ratios side by side in one run and
prints them; its numbers are read by people, never checked by tests.
"""
from __future__ import annotations

import pathlib
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
