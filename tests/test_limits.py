"""What used to take the user's process or machine down, refused in one line instead: a compile
past its memory or time limit, MLIR nested deeper than the parser's stack, and artifacts or
arrays that are right but foreign (another machine's architecture, big-endian data)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import irgrad
import irgrad as ig
from irgrad import passes
from irgrad.runtime import compiler
from irgrad.runtime import CompileError, CompileOptions, DeviceError, IRParseError

SMALL = """
func.func @small(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %r = stablehlo.dot_general %x, %x, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %t = stablehlo.exponential %r : tensor<64x64xf32>
  return %t : tensor<64x64xf32>
}"""


def cli(*args, cwd):
    """``python -m irgrad ARGS`` in a subprocess (the real exit status)."""
    root = str(Path(irgrad.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "irgrad", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


# ----- compiles held to a memory and a time limit ---------------------------------------------

def test_a_compile_past_its_memory_limit_is_a_compile_error_and_the_process_goes_on():
    with pytest.raises(CompileError, match=r"compiling @small: iree-compile ran out of memory at its limit "
                                           r"of 300 MiB \(raise it with .*IRGRAD_COMPILE_MEMORY"):
        compiler.compile(SMALL, CompileOptions(memory_limit="300M"), cache=False)
    module = compiler.compile(SMALL, CompileOptions(memory_limit="2G"), cache=False).load()  # the same module, a limit it fits in
    np.testing.assert_allclose(module["small"](np.zeros((64, 64), np.float32)), np.ones((64, 64)))


def test_a_compile_past_its_time_limit_is_stopped(monkeypatch):
    monkeypatch.setenv("IRGRAD_COMPILE_TIMEOUT", "0.01")
    with pytest.raises(CompileError, match=r"@small: iree-compile ran past its time limit of 0.01 s"):
        compiler.compile(SMALL, cache=False)


def test_limits_come_from_options_then_the_environment(monkeypatch):
    monkeypatch.setenv("IRGRAD_COMPILE_MEMORY", "3g")
    monkeypatch.setenv("IRGRAD_COMPILE_TIMEOUT", "90")
    assert CompileOptions().compile_memory_limit == 3 << 30
    assert CompileOptions().compile_time_limit == 90.0
    assert CompileOptions(memory_limit="512M", time_limit=5).compile_memory_limit == 512 << 20
    monkeypatch.delenv("IRGRAD_COMPILE_MEMORY")
    monkeypatch.delenv("IRGRAD_COMPILE_TIMEOUT")
    assert CompileOptions().compile_memory_limit >= 2 << 30
    assert CompileOptions().compile_time_limit == 1800.0
    for bad in ("lots", "-1G", 0, True):
        with pytest.raises(ValueError, match="bad memory_limit"):
            CompileOptions(memory_limit=bad)
    with pytest.raises(ValueError, match="bad time_limit"):
        CompileOptions(time_limit=0)
    monkeypatch.setenv("IRGRAD_COMPILE_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="bad IRGRAD_COMPILE_TIMEOUT 'soon'; allowed: a number of seconds > 0"):
        _ = CompileOptions().compile_time_limit
    monkeypatch.setenv("IRGRAD_COMPILE_MEMORY", "lots")
    with pytest.raises(ValueError, match="bad IRGRAD_COMPILE_MEMORY 'lots'; allowed: bytes > 0, or a size"):
        _ = CompileOptions().compile_memory_limit


# ----- nesting deeper than MLIR's parser can take ----------------------------------------------

DEPTH = 100_000
DEEP_MODULES = "module {" * DEPTH + "}" * DEPTH
DEEP_CONSTANT = (
    "func.func @main(%x: tensor<f32>) -> tensor<f32> {\n"
    f"  %c = stablehlo.constant dense<{'[' * DEPTH}1.0{']' * DEPTH}> : tensor<f32>\n"
    "  return %x : tensor<f32>\n}\n")


@pytest.mark.parametrize("text", [DEEP_MODULES, DEEP_CONSTANT], ids=["modules", "constant"])
def test_deep_nesting_is_an_ir_error_in_the_api(text):
    with pytest.raises(IRParseError, match=r"invalid MLIR: line \d+:\d+: brackets nest deeper than 1000 levels"):
        passes.differentiate(text, func="main")
    with pytest.raises(IRParseError, match="nest deeper"):
        ig.compile(text)


@pytest.mark.parametrize("text", [DEEP_MODULES, DEEP_CONSTANT], ids=["modules", "constant"])
def test_deep_nesting_is_one_line_and_exit_1_in_the_cli(tmp_path, text):
    (tmp_path / "deep.mlir").write_text(text)
    for command in (["grad", "deep.mlir", "-o", "out.mlir"], ["compile", "deep.mlir", "--grad", "-o", "out.vmfb"]):
        result = cli(*command, cwd=tmp_path)
        assert result.returncode == 1, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("irgrad: error: deep.mlir:"), result.stderr
        assert "nest deeper than 1000 levels" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep.mlir"]  # nothing written


def test_nesting_a_real_module_might_have_still_parses():
    n = 60
    text = ("func.func @main(%x: tensor<f32>) -> tensor<f32> {\n"
            f"  %c = stablehlo.constant dense<{'[' * n}2.0{']' * n}> : tensor<{'1x' * n}f32>\n"
            f"  %r = stablehlo.reshape %c : (tensor<{'1x' * n}f32>) -> tensor<f32>\n"
            "  %y = stablehlo.multiply %r, %x : tensor<f32>\n  return %y : tensor<f32>\n}\n")
    assert "@main_grad" in passes.differentiate(text, func="main")


# ----- foreign but valid: big-endian arrays, another machine's artifact ------------------------

def test_big_endian_arrays_are_converted():
    module = ig.compile(SMALL).load()
    x = (np.arange(64 * 64, dtype=np.float32).reshape(64, 64) / 4096 / 64)
    np.testing.assert_array_equal(module["small"](x.astype(">f4")), module["small"](x))
    with pytest.raises(TypeError, match="expected dtype float32, got float64"):
        module["small"](x.astype(">f8"))


def test_an_artifact_for_another_architecture_says_which_and_how_to_run_it():
    arch = {"x86_64": "aarch64"}.get(ig.runtime.options.host_arch(), "x86_64")
    artifact = ig.compile(SMALL, triple=f"{arch}-linux-gnu")
    with pytest.raises(DeviceError) as error:
        ig.load(artifact.vmfb)
    message = str(error.value)
    assert message.startswith(f"this artifact was built for {arch}") and f"qemu-{arch}" in message, message
    assert len(message) < 400 and "data_layout" not in message
