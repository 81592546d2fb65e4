"""Gradient artifacts on every target: run where a device exists (CPU, vmvx, Vulkan on lavapipe,
CUDA when present), inspect the executables everywhere, and run them without irgrad."""
from __future__ import annotations

import importlib.util
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes, runtime

from test_runtime import elf_machines

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _example():
    spec = importlib.util.spec_from_file_location("irgrad_example_mlp", ROOT / "examples" / "mlp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def mlp():
    example = _example()
    text = passes.differentiate(example.loss.lower().mlir, "loss", with_value=True)
    args = example.example_inputs()
    reference = ig.compile(text).load()["loss_grad"](*args)
    return text, args, reference


def _close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("target,device", [
    ("vmvx", None),
    pytest.param("vulkan-spirv", "vulkan", marks=pytest.mark.vulkan),
    pytest.param("cuda", "cuda", marks=pytest.mark.cuda),
    pytest.param("rocm", "hip", marks=pytest.mark.rocm),
])
def test_gradient_runs_on_device_and_matches_cpu(mlp, target, device):
    text, args, reference = mlp
    if device is not None and device not in runtime.available_drivers():
        pytest.skip(f"no {device} device on this machine")
    module = ig.compile(text, target=target).load()
    assert module.device == (device or "local-task")
    _close(module["loss_grad"](*args), reference)
    np.testing.assert_allclose(module["loss"](*args), reference[0], rtol=2e-5)


@pytest.mark.parametrize("target,flags,formats", [
    ("cuda", {}, ["cuda-nvptx-fb"]),
    ("cuda", {"cuda_arch": "sm_90"}, ["cuda-nvptx-fb"]),
    ("rocm", {"rocm_arch": "gfx942"}, ["rocm-hsaco-fb"]),
    ("vulkan", {}, ["vulkan-spirv-fb"]),
    ("llvm-cpu", {"triple": "aarch64-linux-gnu"}, ["embedded-elf-arm_64"]),
    ("llvm-cpu", {"triple": "riscv64-linux-gnu"}, ["embedded-elf-riscv_64"]),
], ids=["cuda", "cuda-sm90", "rocm", "vulkan", "aarch64", "riscv64"])
def test_gradient_artifacts_for_other_machines(mlp, target, flags, formats):
    text, _, _ = mlp
    artifact = ig.compile(text, target=target, **flags)
    assert runtime.executable_formats(artifact.vmfb) == formats
    assert {"loss", "loss_grad"} <= set(artifact.functions)
    if "triple" in flags:
        machine = {"aarch64": 183, "riscv64": 243}[flags["triple"].split("-")[0]]
        assert elf_machines(artifact.vmfb) == {machine}


def _iree_run_module() -> str:
    found = shutil.which("iree-run-module") or str(pathlib.Path(sys.executable).parent / "iree-run-module")
    if not pathlib.Path(found).exists():
        pytest.skip("iree-run-module not found")
    return found


def test_artifact_runs_with_iree_run_module_alone(mlp, tmp_path):
    """The deployed artifact needs only IREE's runtime: no irgrad import, no sidecar."""
    text, args, reference = mlp
    path = tmp_path / "mlp.vmfb"
    ig.compile(text, target="llvm-cpu", cpu="generic").save(path)
    (tmp_path / "mlp.vmfb.json").unlink()
    inputs = []
    for i, a in enumerate(args):
        np.save(tmp_path / f"in{i}.npy", a)
        inputs.append(f"--input=@{tmp_path / f'in{i}.npy'}")
    outputs = [f"--output=@{tmp_path / f'out{i}.npy'}" for i in range(len(reference))]
    done = subprocess.run([_iree_run_module(), f"--module={path}", "--device=local-task",
                           "--function=loss_grad", *inputs, *outputs],
                          capture_output=True, text=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    _close([np.load(tmp_path / f"out{i}.npy") for i in range(len(reference))], reference)


def test_cli_compiles_the_example_gradient_for_cuda_and_inspects_it(tmp_path):
    out = tmp_path / "m.vmfb"
    compiled = subprocess.run([sys.executable, "-m", "irgrad", "compile", f"{ROOT / 'examples' / 'mlp.py'}:loss",
                               "--grad", "--target", "cuda", "-o", str(out)], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr
    inspected = subprocess.run([sys.executable, "-m", "irgrad", "inspect", str(out)], capture_output=True, text=True)
    assert inspected.returncode == 0, inspected.stderr
    assert "loss_grad" in inspected.stdout and "cuda" in inspected.stdout
