"""The public API type-checks for its users (issue 33): irgrad ships ``py.typed``, and mypy
(pinned in the ``test`` extra) in strict mode accepts user code written against ``irgrad``,
``irgrad.passes`` and ``irgrad.runtime``, and reports a wrong call.

mypy reads the installed package where it is a plain install (site-packages, ``py.typed``
required, as for any user) and the source tree otherwise (an editable install's import hook is
invisible to mypy). Either way errors inside irgrad itself are not reported
(``follow_imports = silent``, what a user sees of an installed package): this checks the surface.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import sysconfig
import textwrap
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CONFIG = """\
[mypy]
strict = True
[mypy-irgrad,irgrad.*]
follow_imports = silent
"""

USER_CODE = """\
from pathlib import Path

import numpy as np

import irgrad as ig
import irgrad.passes as passes
import irgrad.runtime as rt


@ig.function(input_signature=[ig.TensorSpec([3], ig.float32)])
def loss(x: ig.Tensor) -> ig.Tensor:
    return ig.reduce_sum(ig.tanh(x) ** 2 + 1.0 * x)


@ig.function
def double(x: ig.Tensor) -> ig.Tensor:
    return x * 2 - x[0]


def use(folder: Path) -> None:
    text: str = ig.export(loss)
    artifact: ig.Artifact = loss.lower(ig.TensorSpec([3])).compile(target="llvm-cpu")
    artifact.save(folder / "loss.vmfb")
    module: ig.Module = ig.load(folder / "loss.vmfb", device="local-sync")
    values: list[np.ndarray] = module["loss"].call_flat(np.ones(3, np.float32))
    print(values, module.functions, ig.compile(text).target, double(np.ones(2)))
    with_grad: str = passes.differentiate(text, "loss")
    options = rt.CompileOptions.for_target("cpu", cpu="generic")
    built: rt.Artifact = rt.compile(with_grad, options, cache=False)
    print(len(built.vmfb), rt.cache_dir(), rt.cache_stats()["disk_hits"], rt.available_drivers())
    with ig.Graph().as_default():
        x = ig.placeholder(ig.float32, [3])
        w = ig.Variable(np.ones(3, np.float32))
        y = ig.reduce_sum(ig.nn.relu(x * w) + ig.math.log(x))
        grads = ig.gradients(y, [x], unconnected_gradients=ig.UnconnectedGradients.ZERO)
        print(ig.Session().run(grads, feed_dict={x: np.ones(3)}), ig.hessians(y, [x]))
    print(ig.optimizers.Adam(learning_rate=0.01), ig.GradientTape(persistent=True))
"""

# Each line marked ``# wrong`` must be reported, and nothing else.
WRONG_CODE = """\
import irgrad as ig
import irgrad.runtime as rt

ig.load(3.5)  # wrong
rt.compile(b"module {}", cache="no")  # wrong
ig.compile(42)  # wrong
ig.not_an_op(1)  # wrong
spec: ig.TensorSpec = ig.Tensor  # wrong
ig.export(ig.reduce_sum, name=7)  # wrong
"""


def _mypy(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    (tmp_path / "mypy.ini").write_text(CONFIG)
    (tmp_path / "user.py").write_text(code)
    env = dict(os.environ)
    package = Path(importlib.util.find_spec("irgrad").origin).parent
    installed = package.parent.resolve() in {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    if installed:
        env.pop("MYPYPATH", None)
    else:  # a source checkout (editable install): mypy reads the tree, as if it were installed
        env["MYPYPATH"] = str(package.parent)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir", str(tmp_path / "cache"),
         "--no-error-summary", "--hide-error-context", "user.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_py_typed_is_in_the_package():
    package = Path(importlib.util.find_spec("irgrad").origin).parent
    assert (package / "py.typed").is_file()


def test_user_code_type_checks_in_strict_mode(tmp_path):
    done = _mypy(tmp_path, USER_CODE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_wrong_call_is_reported(tmp_path):
    done = _mypy(tmp_path, WRONG_CODE)
    assert done.returncode == 1, done.stdout + done.stderr
    reported = {int(m.group(1)) for m in re.finditer(r"^user\.py:(\d+): error:", done.stdout, re.M)}
    wrong = {i for i, line in enumerate(WRONG_CODE.splitlines(), 1) if line.endswith("# wrong")}
    assert reported == wrong, done.stdout


@pytest.mark.parametrize("name", ["irgrad.frontend", "irgrad.ops", "irgrad.nn", "irgrad.math"])
def test_all_lists_every_public_name(name):
    """A type checker re-exports only ``__all__`` (strict mode): a public name missing from it
    would be an error in users' code."""
    module = importlib.import_module(name)
    public = {n for n, v in vars(module).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    listed = set(module.__all__)
    assert public <= listed, textwrap.fill(f"missing from {name}.__all__: {sorted(public - listed)}")
    assert all(hasattr(module, n) for n in listed)
