"""On the device: artifacts run with the runtime alone (no compiler installed), aarch64 builds
run under qemu-user with the host's numbers, and the personalisation example trains with
IREE's tool or the runtime-only Python API.

qemu and IREE's aarch64 runtime come from .ci/run, which exports IRGRAD_AARCH64_RUN_MODULE
(the aarch64 iree-run-module); without them the emulated tests skip, saying so.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes

from sites import runtime_only_site
from test_targets import _iree_run_module

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "personalize"
SYSROOT = Path("/usr/aarch64-linux-gnu")
AARCH64_RUN_MODULE = os.environ.get("IRGRAD_AARCH64_RUN_MODULE", "")

needs_qemu = pytest.mark.skipif(
    not (shutil.which("qemu-aarch64") and SYSROOT.is_dir() and Path(AARCH64_RUN_MODULE).is_file()),
    reason="needs qemu-aarch64, the aarch64 libc in /usr/aarch64-linux-gnu and IRGRAD_AARCH64_RUN_MODULE "
           "(IREE's aarch64 iree-run-module); .ci/run installs all three")


def _load_file(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def readme_mlp():
    """The README's MLP (examples/mlp.py) with its gradient and an Adam step on w1, b1, w2, b2."""
    example = _load_file(ROOT / "examples" / "mlp.py", "irgrad_example_mlp")
    text = passes.differentiate(example.loss.lower().mlir, "loss", wrt=[2, 3, 4, 5], with_value=True,
                                train="adam", learning_rate=0.01)
    return text, example.example_inputs()


# ----- runtime only: iree-base-runtime and numpy, no compiler ---------------------------------

def _run_runtime_only(site: Path, code: str, *args: str) -> subprocess.CompletedProcess:
    """Python without site-packages (-I -S) and with ``site`` alone on its path."""
    prelude = f"import sys; sys.path.insert(0, {str(site)!r}); sys.argv[1:] = {list(args)!r}\n"
    return subprocess.run([sys.executable, "-I", "-S", "-c", prelude + code], capture_output=True, text=True,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, timeout=300)


def test_artifacts_load_and_train_with_the_runtime_alone(readme_mlp, tmp_path):
    """ig.load, calls and 200 Adam steps of the README MLP with only iree-base-runtime and numpy
    importable: the loss falls 10x, the numbers are the full install's, and a frontend name
    says what is missing."""
    text, args = readme_mlp
    path = tmp_path / "mlp_train.vmfb"
    ig.compile(text).save(path)
    np.savez(tmp_path / "args.npz", *args)
    host = ig.load(str(path))
    trainer = host.trainer(args[2:])
    host_losses = [float(trainer.step(*args[:2])) for _ in range(200)]
    code = """
import numpy as np
import irgrad as ig
assert "iree.compiler" not in sys.modules
try:
    import iree.compiler
except ModuleNotFoundError:
    pass
else:
    raise SystemExit("the compiler is importable")
try:
    ig.function
except ImportError as error:
    print("frontend:", error)
saved = np.load(sys.argv[2])
args = [saved[f"arr_{i}"] for i in range(len(saved.files))]
module = ig.load(sys.argv[1])
value, *grads = module["loss_grad"](*args)
np.save(sys.argv[3], np.array([value, *(g.sum() for g in grads)]))
trainer = module.trainer(args[2:])
np.save(sys.argv[4], np.array([trainer.step(*args[:2]) for _ in range(200)]))
assert "iree.compiler" not in sys.modules
"""
    site = runtime_only_site(tmp_path, ["iree-base-runtime", "numpy"])
    done = _run_runtime_only(site, code, str(path), str(tmp_path / "args.npz"), str(tmp_path / "grad.npy"),
                             str(tmp_path / "losses.npy"))
    assert done.returncode == 0, done.stderr
    assert "frontend: irgrad.function is part of irgrad's frontend, which needs the compiler: pip install " \
           "iree-base-compiler" in done.stdout
    value, *grads = host["loss_grad"](*args)
    np.testing.assert_array_equal(np.load(tmp_path / "grad.npy"), [value, *(g.sum() for g in grads)])
    losses = np.load(tmp_path / "losses.npy")
    np.testing.assert_array_equal(losses, host_losses)
    assert losses[-1] * 10 <= losses[0], losses[[0, -1]]


# ----- aarch64 under qemu-user ----------------------------------------------------------------

def _emulated(vmfb: Path, function: str, inputs: list[np.ndarray], results: int, work: Path) -> list[np.ndarray]:
    """One call of an aarch64 artifact under qemu-user with IREE's aarch64 iree-run-module."""
    work.mkdir()
    flags = []
    for i, a in enumerate(inputs):
        np.save(work / f"in{i}.npy", a)
        flags.append(f"--input=@{work / f'in{i}.npy'}")
    flags += [f"--output=@{work / f'out{i}.npy'}" for i in range(results)]
    done = subprocess.run(["qemu-aarch64", "-L", str(SYSROOT), AARCH64_RUN_MODULE, f"--module={vmfb}",
                           "--device=local-sync", f"--function={function}", *flags],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return [np.load(work / f"out{i}.npy") for i in range(results)]


@needs_qemu
def test_aarch64_artifacts_give_the_hosts_numbers_under_qemu(readme_mlp, tmp_path):
    """Forward, gradient, training init and three chained training steps of one artifact
    cross-compiled for aarch64, executed by IREE's aarch64 runtime, against the host build."""
    text, args = readme_mlp
    arm = tmp_path / "mlp_aarch64.vmfb"
    ig.compile(text, target="llvm-cpu", triple="aarch64-linux-gnu").save(arm)
    host = ig.compile(text, target="llvm-cpu", cpu="generic").load()

    def check(function, inputs):
        want = host[function].call_flat(*inputs)
        got = _emulated(arm, function, inputs, len(want), tmp_path / f"{function}-{len(list(tmp_path.iterdir()))}")
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7)
        return want

    check("loss", args)
    check("loss_grad", args)
    params, state = args[2:], check("loss_train_init", args)
    for _ in range(3):
        _, *rest = check("loss_train_step", [*args[:2], *params, *state])
        params, state = rest[:4], rest[4:]


@needs_qemu
def test_a_dynamic_batch_artifact_runs_on_aarch64_under_qemu(tmp_path):
    """One aarch64 artifact of the gradient of JAX's shape-polymorphic attention (a '?' batch),
    executed by IREE's aarch64 runtime at batch 1 and 32, against JAX's own gradients."""
    folder = ROOT / "tests" / "fixtures" / "jax_dynamic"
    text = passes.differentiate((folder / "attention.mlir").read_text(), "main")
    arm = tmp_path / "attention_aarch64.vmfb"
    ig.compile(text, target="llvm-cpu", triple="aarch64-linux-gnu").save(arm)
    with np.load(folder / "attention.npz") as data:
        wrt = [int(i) for i in data["wrt"]]
        for batch in (1, 32):
            args = [data[f"arg{i}_b{batch}"] for i in range(len([k for k in data.files if k.endswith(f"_b{batch}")
                                                                  and k.startswith("arg")]))]
            got = _emulated(arm, "main_grad", args, len(args), tmp_path / f"b{batch}")
            for k, i in enumerate(wrt):
                np.testing.assert_allclose(got[i], data[f"grad{k}_b{batch}"], rtol=1e-4, atol=1e-5,
                                           err_msg=f"d arg{i}, batch {batch}")


# ----- the personalisation example ------------------------------------------------------------

@pytest.fixture(scope="module")
def personalize(tmp_path_factory):
    """model.py's data and its Adam training step, as the README's host commands make them."""
    out = tmp_path_factory.mktemp("personalize")
    model = _load_file(EXAMPLE / "model.py", "irgrad_example_personalize")
    assert model.main(str(out)) == 0
    text = passes.differentiate(model.loss.lower().mlir, wrt=[2, 3, 4, 5], grad=False, train="adam",
                                learning_rate=0.01)
    ig.compile(text).save(out / "host.vmfb")
    ig.compile(text, target="llvm-cpu", triple="aarch64-linux-gnu").save(out / "aarch64.vmfb")
    return out


def _losses(stdout: str) -> list[float]:
    return [float(line.rsplit(" ", 1)[1]) for line in stdout.splitlines() if line.startswith("step ")]


def _train_sh(data: Path, module: str, steps: int, run_module: str) -> list[float]:
    done = subprocess.run(["sh", str(EXAMPLE / "train.sh"), str(data / module), str(data), str(steps)],
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "IREE_RUN_MODULE": run_module})
    assert done.returncode == 0, done.stderr
    return _losses(done.stdout)


def _copy_data(source: Path, to: Path) -> Path:
    to.mkdir()
    for file in source.glob("*.npy"):
        shutil.copy(file, to)
    return to


def _reference(data: Path, steps: int) -> list[float]:
    module = ig.load(str(data / "host.vmfb"))
    trainer = module.trainer([np.load(data / f"{name}.npy") for name in ("w1", "b1", "w2", "b2")])
    x, labels = np.load(data / "x.npy"), np.load(data / "labels.npy")
    return [float(trainer.step(x, labels)) for _ in range(steps)]


def test_the_example_trains_with_iree_run_module_and_resumes(personalize, tmp_path):
    """train.sh on the host build: its losses are Module.trainer's, a second run resumes
    from the state the first left, and the loss falls."""
    data = _copy_data(personalize, tmp_path / "data")
    shutil.copy(personalize / "host.vmfb", data)
    first = _train_sh(data, "host.vmfb", 3, _iree_run_module())
    second = _train_sh(data, "host.vmfb", 3, _iree_run_module())
    np.testing.assert_allclose(first + second, _reference(personalize, 6), rtol=1e-5)
    assert second[-1] < first[0] / 2


def test_the_example_trains_with_the_runtime_alone_and_resumes(personalize, tmp_path):
    """train.py with only iree-base-runtime and numpy: Module.trainer's losses, and a second
    run resumes from the checkpoint the first saved."""
    data = _copy_data(personalize, tmp_path / "data")
    site = runtime_only_site(tmp_path, ["iree-base-runtime", "numpy"])
    code = f"import runpy; sys.argv[0] = {str(EXAMPLE / 'train.py')!r}; runpy.run_path(sys.argv[0], run_name='__main__')"
    runs = [_run_runtime_only(site, code, str(personalize / "host.vmfb"), str(data), "4") for _ in range(2)]
    for done in runs:
        assert done.returncode == 0, done.stderr
    losses = _losses(runs[0].stdout) + _losses(runs[1].stdout)
    np.testing.assert_allclose(losses, _reference(personalize, 8), rtol=1e-5)
    assert (data / "checkpoint.npz").is_file()


@needs_qemu
def test_the_example_trains_the_aarch64_build_under_qemu(personalize, tmp_path):
    """The README's device walkthrough, emulated: the aarch64 artifact trained by train.sh
    with IREE's aarch64 iree-run-module follows the host's losses."""
    data = _copy_data(personalize, tmp_path / "data")
    shutil.copy(personalize / "aarch64.vmfb", data)
    losses = _train_sh(data, "aarch64.vmfb", 5, f"qemu-aarch64 -L {SYSROOT} {AARCH64_RUN_MODULE}")
    np.testing.assert_allclose(losses, _reference(personalize, 5), rtol=1e-5)
    assert losses[-1] < losses[0] / 2
