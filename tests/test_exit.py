"""A process that loads, calls or compiles artifacts exits silently (issue 40, item 4).

Every such process used to print ~48 lines of ``nanobind: leaked 5 instances! ...`` at exit:
``typing.overload`` kept ``ig.function``'s variants in a registry that Python's shutdown never
frees, and through their globals the runtime modules and the IREE devices and VM instances
they hold. Each case runs in its own interpreter and asserts that stderr is empty.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import irgrad as ig
from irgrad import passes

from sites import runtime_only_site

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "personalize"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, isolated_cache_dir):
    """``f.vmfb`` (``x + 1``) and the personalisation example's data and Adam step."""
    out = tmp_path_factory.mktemp("exit")
    f = ig.function(lambda x: x + 1.0, input_signature=[ig.TensorSpec([3])])
    f.lower().compile().save(out / "f.vmfb")
    sys.path.insert(0, str(EXAMPLE))
    try:
        import model
    finally:
        sys.path.remove(str(EXAMPLE))
    assert model.main(str(out)) == 0
    text = passes.differentiate(model.loss.lower().mlir, wrt=[2, 3, 4, 5], grad=False, train="adam",
                                learning_rate=0.01)
    ig.compile(text).save(out / "train.vmfb")
    return out


def _python(code: str, *args: str, site: Path | None = None) -> subprocess.CompletedProcess:
    """This Python running ``code``; with ``site``, a device's install: that folder alone."""
    if site is None:
        command, env = [sys.executable, "-c", code, *args], {**os.environ, "PYTHONPATH": str(ROOT)}
    else:
        code = f"import sys; sys.path.insert(0, {str(site)!r})\n" + code
        command, env = [sys.executable, "-I", "-S", "-c", code, *args], {"PATH": os.environ.get("PATH", "")}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    return done


LOAD_AND_CALL = """import sys
import numpy as np
import irgrad as ig
m = ig.load(sys.argv[1])
print(m["_lambda_"](np.ones(3, np.float32)))
"""


def test_loading_and_calling_an_artifact_exits_silently(artifacts):
    done = _python(LOAD_AND_CALL, str(artifacts / "f.vmfb"))
    assert done.stdout.split() == ["[2.", "2.", "2.]"]
    assert done.stderr == ""


def test_compiling_and_calling_exits_silently(isolated_cache_dir):
    """A traced function with and without an input_signature, one that reads a Variable, and
    an artifact loaded on both CPU drivers."""
    code = """import numpy as np
import irgrad as ig
v = ig.Variable(np.full(3, 2.0, np.float32))
f = ig.function(lambda x: ig.sin(x) * v)
g = ig.function(lambda x: x + 1.0, input_signature=[ig.TensorSpec([3])])
x = np.zeros(3, np.float32)
print(f(x).tolist(), g(x).tolist())
vmfb = g.lower().compile().vmfb
print([ig.load(vmfb, device=d)["_lambda_"](x).tolist() for d in ("local-sync", "local-task")])
"""
    done = _python(code)
    assert done.stdout.splitlines() == ["[0.0, 0.0, 0.0] [1.0, 1.0, 1.0]", "[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]"]
    assert done.stderr == ""


def test_the_personalisation_example_exits_silently(artifacts, tmp_path):
    """examples/personalize/train.py (Module.trainer: parameters and Adam's state in device
    buffers) with the full install."""
    code = f"import runpy, sys; sys.argv[0] = {str(EXAMPLE / 'train.py')!r}; runpy.run_path(sys.argv[0], run_name='__main__')"
    done = _python(code, str(artifacts / "train.vmfb"), str(artifacts), "2")
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == ["step 0", "step 1"]
    assert done.stderr == ""
    (artifacts / "checkpoint.npz").unlink()


def test_the_runtime_alone_exits_silently(artifacts, tmp_path):
    """The device's install (iree-base-runtime and numpy, no compiler)."""
    site = runtime_only_site(tmp_path, ["iree-base-runtime", "numpy"])
    done = _python(LOAD_AND_CALL + "assert 'iree.compiler' not in sys.modules\n", str(artifacts / "f.vmfb"),
                   site=site)
    assert done.stdout.split() == ["[2.", "2.", "2.]"]
    assert done.stderr == ""


def test_the_fix_is_in_place_without_a_subprocess():
    """The cause itself: no irgrad function is filed in typing's overload registry."""
    import typing

    assert typing.get_overloads(ig.function) == [], "typing.overload outside TYPE_CHECKING"
