"""irgrad logs under the ``irgrad`` logger hierarchy, quiet unless configured (issue 33)."""
from __future__ import annotations

import logging
import subprocess
import sys

import numpy as np
import pytest

import irgrad
from irgrad import runtime

ADD = """func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = stablehlo.constant dense<0.5> : tensor<4xf32>
  %y = stablehlo.add %x, %c : tensor<4xf32>
  return %y : tensor<4xf32>
}"""

POWER = """func.func @p(%x: tensor<3xf32>, %y: tensor<3xf32>) -> tensor<3xf32> {
  %z = stablehlo.power %x, %y : tensor<3xf32>
  return %z : tensor<3xf32>
}"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("IRGRAD_CACHE_DIR", str(tmp_path))
    runtime.clear_memory_cache()
    yield tmp_path
    runtime.clear_memory_cache()


def _messages(caplog, name):
    return [r.getMessage() for r in caplog.records if r.name == name]


def test_quiet_by_default():
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("irgrad").handlers)
    code = ("import irgrad as ig, numpy as np\n"
            "m = ig.load(ig.compile(ig.export(lambda x: ig.sin(x) * 2, ig.TensorSpec([2]))).vmfb)\n"
            "import logging; logging.getLogger('irgrad.runtime.compiler').warning('a warning stays quiet too')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stderr == "" and done.stdout == "", done.stderr


def test_compile_and_cache_hits_and_misses(cache, caplog):
    caplog.set_level(logging.DEBUG, logger="irgrad")
    runtime.compile(ADD)
    log = _messages(caplog, "irgrad.runtime.compiler")
    assert any(m.startswith("cache miss ") for m in log)
    assert "compiling @f for llvm-cpu, cpu host" in log
    assert any(m.startswith("compiled @f for llvm-cpu, cpu host in ") and m.endswith(" bytes)") for m in log)
    caplog.clear()
    runtime.compile(ADD)
    assert [m for m in _messages(caplog, "irgrad.runtime.compiler") if "hit" in m][0].startswith("memory cache hit")
    caplog.clear()
    runtime.clear_memory_cache()
    runtime.compile(ADD)
    log = _messages(caplog, "irgrad.runtime.compiler")
    assert any(m.startswith("disk cache hit ") and str(cache) in m for m in log)
    assert not any(m.startswith("compiling") for m in log)


def test_iree_workarounds_are_logged(cache, caplog):
    caplog.set_level(logging.INFO, logger="irgrad")
    runtime.compile(POWER)
    assert any("workarounds (irgrad.passes.lowering.legalize) rewrote the module (it holds stablehlo.power x1)" in m
               for m in _messages(caplog, "irgrad.runtime.compiler"))
    caplog.clear()
    from irgrad.runtime.compiler import compile_flags
    compile_flags("func.func @s(%x: tensor<4xf64>) -> tensor<4xf64> {\n"
                  "  %y = stablehlo.sine %x : tensor<4xf64>\n  return %y : tensor<4xf64>\n}", runtime.CompileOptions())
    compile_flags(ADD, runtime.CompileOptions.for_target("cuda", cuda_arch="sm_90"))
    log = _messages(caplog, "irgrad.runtime.compiler")
    assert any("float64 on llvm-cpu is linked as a system library" in m for m in log)
    assert any("no CUDA target past sm_89; sm_90 gets sm_80 PTX" in m for m in log)


def test_the_default_device_is_logged(cache, caplog):
    caplog.set_level(logging.INFO, logger="irgrad")
    module = runtime.load(runtime.compile(ADD).vmfb)
    np.testing.assert_allclose(module["f"](np.zeros(4, np.float32)), 0.5)
    log = _messages(caplog, "irgrad.runtime.loader")
    assert log and "on local-sync, the default for a llvm-cpu artifact of work" in log[0]
    caplog.clear()
    runtime.load(runtime.compile(ADD).vmfb, device="local-task")
    assert not _messages(caplog, "irgrad.runtime.loader")  # a device given: no choice made


def test_the_cli_logs_with_verbose(cache):
    done = subprocess.run([sys.executable, "-m", "irgrad", "--verbose", "cache", "clear"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("irgrad: irgrad.runtime.cache: cache cleared: 0 entries"), done.stderr
    assert irgrad.__name__ == "irgrad"
