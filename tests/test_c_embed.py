"""irgrad's C library (c/, examples/c, ``irgrad header``): IREE's runtime and the library built
from source once per run (``c/build.sh``), a C training loop and a gradient through a typed
header equal to the Python runtime's bit for bit on the same driver, errors as codes and
messages, generated headers compiling with -Wall -Werror for every fixture, and the aarch64
build run under qemu.

The build goes to ``$IRGRAD_C_BUILD`` (default ``~/.cache/irgrad/c-build``) and is reused; it
needs CMake >= 3.26 (the test extra installs it from PyPI) and a C compiler, and skips, saying
so, without them.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import irgrad as ig
from irgrad.passes.ir.mlir import parse_module
from irgrad.runtime.c_header import c_header, c_identifier, c_types
from irgrad.runtime.signature import public_functions, signature_of
from irgrad.runtime.vmfb import seal

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
SYSROOT = Path("/usr/aarch64-linux-gnu")
sys.path.insert(0, str(ROOT / "examples"))
from mlp import SIGNATURE, example_inputs, loss  # noqa: E402


def _cmake() -> str | None:
    """A CMake of 3.26 or newer: the one beside this Python (the venv's), else PATH's."""
    for candidate in (Path(sys.executable).parent / "cmake", shutil.which("cmake")):
        if candidate and Path(candidate).is_file():
            out = subprocess.run([str(candidate), "--version"], capture_output=True, text=True).stdout
            found = re.search(r"(\d+)\.(\d+)", out)
            if found and (int(found[1]), int(found[2])) >= (3, 26):
                return str(candidate)
    return None


def _build(*flags: str) -> Path:
    cmake, cc = _cmake(), shutil.which("cc") or shutil.which("gcc")
    if cmake is None or cc is None:
        pytest.skip("the C library needs CMake >= 3.26 (pip install cmake; the test extra has it) and a C compiler: "
                    f"cmake {'found' if cmake else 'missing'}, cc {'found' if cc else 'missing'}")
    env = dict(os.environ, PATH=f"{Path(cmake).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["bash", str(ROOT / "c" / "build.sh"), *flags], capture_output=True, text=True, env=env,
                          timeout=3000)
    assert done.returncode == 0, f"c/build.sh {' '.join(flags)} failed:\n{done.stderr[-4000:]}"
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def c_build() -> Path:
    """The host build folder (runtime, libirgrad, examples/c/train)."""
    return _build()


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory) -> dict[str, Path]:
    """examples/mlp.py's loss compiled with --grad --with-value, and with --train adam and sgd."""
    out = tmp_path_factory.mktemp("c_artifacts")
    forward = loss.lower().mlir
    paths = {"grad": out / "mlp.vmfb"}
    ig.compile(ig.passes.differentiate(forward, "loss", with_value=True), target="llvm-cpu").save(paths["grad"])
    for optimizer in ("adam", "sgd"):
        module = ig.passes.differentiate(forward, "loss", wrt=[2, 3, 4, 5], grad=False, train=optimizer)
        paths[optimizer] = ig.compile(module, target="llvm-cpu").save(out / f"mlp_{optimizer}.vmfb")
    return paths


SANITIZE = ["-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]


def _compile_c(build: Path, source: Path, out: Path, *include: Path, sanitized: bool = False) -> Path:
    """``source`` compiled with -Wall -Werror and linked against the library (``sanitized``: its
    AddressSanitizer and UBSan build, the program under them too)."""
    flags = (build / ("irgrad_sanitized.flags" if sanitized else "irgrad.flags")).read_text().split()
    done = subprocess.run(["cc", "-Wall", "-Werror", "-O1", *(SANITIZE if sanitized else []),
                           *[f"-I{i}" for i in include], str(source), *flags, "-o", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


def _header(artifact: Path, out: Path, *flags: str) -> Path:
    done = subprocess.run([sys.executable, "-m", "irgrad", "header", str(artifact), "-o", str(out), *flags],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return out


def _batches(count: int = 3) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(1)
    batches = []
    for _ in range(count):
        x = rng.standard_normal((8, 4)).astype(np.float32)
        batches.append((x, np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)))
    return batches


def _python_training(vmfb: Path, params: list[np.ndarray], batches, steps: int, device: str):
    trainer = ig.load(vmfb, device=device).trainer(params)
    losses = [trainer.step(*batches[k % len(batches)]) for k in range(steps)]
    return np.array(losses, np.float32).tobytes(), b"".join(p.tobytes() for p in trainer.params())


def _train(build: Path, vmfb: Path, work: Path, steps: int, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(build / "examples" / "train"), str(vmfb), str(work / "params.bin"),
                           str(work / "data.bin"), str(work / "ck.bin"), str(steps), *flags],
                          capture_output=True, text=True, timeout=300)


def _write_training_inputs(work: Path, params: list[np.ndarray], batches) -> None:
    (work / "params.bin").write_bytes(b"".join(p.tobytes() for p in params))
    (work / "data.bin").write_bytes(b"".join(a.tobytes() for batch in batches for a in batch))


def test_c_training_equals_python_bit_for_bit_and_resumes(c_build, artifacts, tmp_path):
    """10 Adam steps in C (train_init, then train_step, state on the device) give the Python
    trainer's losses and parameters bit for bit; 4 steps, a checkpoint, and 6 more after a
    restart give them too, on the other CPU driver."""
    _, _, *params = example_inputs()
    batches = _batches()
    _write_training_inputs(tmp_path, params, batches)
    want_losses, want_params = _python_training(artifacts["adam"], params, batches, 10, "local-sync")

    done = _train(c_build, artifacts["adam"], tmp_path, 10, "--driver", "local-sync", "--losses",
                  str(tmp_path / "losses.bin"), "--params-out", str(tmp_path / "out.bin"))
    assert done.returncode == 0, done.stderr
    assert "step 10 loss" in done.stdout
    assert (tmp_path / "losses.bin").read_bytes() == want_losses
    assert (tmp_path / "out.bin").read_bytes() == want_params

    for name in ("ck.bin", "losses.bin", "out.bin"):
        (tmp_path / name).unlink()
    first = _train(c_build, artifacts["adam"], tmp_path, 4, "--driver", "local-sync", "--losses",
                   str(tmp_path / "losses.bin"))
    assert first.returncode == 0, first.stderr
    resumed = _train(c_build, artifacts["adam"], tmp_path, 10, "--driver", "local-task", "--every", "3", "--losses",
                     str(tmp_path / "losses.bin"), "--params-out", str(tmp_path / "out.bin"))
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed" in resumed.stdout and "at step 4" in resumed.stdout
    want_task = _python_training(artifacts["adam"], params, batches, 10, "local-task")
    assert (tmp_path / "losses.bin").read_bytes() == want_losses == want_task[0]
    assert (tmp_path / "out.bin").read_bytes() == want_params == want_task[1]
    # No temporary file is left beside the checkpoint.
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ck")) == ["ck.bin"]


def test_c_training_under_sanitizers(c_build, artifacts, tmp_path):
    """examples/c/train under AddressSanitizer and UBSan (leaks included): train, checkpoint,
    resume, and refuse a damaged checkpoint, with nothing reported."""
    train = _compile_c(c_build, ROOT / "examples" / "c" / "train.c", tmp_path / "train", sanitized=True)
    _, _, *params = example_inputs()
    _write_training_inputs(tmp_path, params, _batches())
    runs = []
    for steps in ("3", "5"):
        runs.append(subprocess.run([str(train), str(artifacts["adam"]), str(tmp_path / "params.bin"),
                                    str(tmp_path / "data.bin"), str(tmp_path / "ck.bin"), steps],
                                   capture_output=True, text=True, timeout=300))
    (tmp_path / "ck.bin").write_bytes((tmp_path / "ck.bin").read_bytes()[:-3])
    runs.append(subprocess.run([str(train), str(artifacts["adam"]), str(tmp_path / "params.bin"),
                                str(tmp_path / "data.bin"), str(tmp_path / "ck.bin"), "6"],
                               capture_output=True, text=True, timeout=300))
    assert [r.returncode for r in runs] == [0, 0, 1], [r.stderr for r in runs]
    assert "resumed" in runs[1].stdout and "step 5 loss" in runs[1].stdout
    assert "not a checkpoint of loss_train_step" in runs[2].stderr
    for r in runs:
        assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr


def test_c_checkpoint_refuses_damage_and_other_steps(c_build, artifacts, tmp_path):
    _, _, *params = example_inputs()
    _write_training_inputs(tmp_path, params, _batches())
    assert _train(c_build, artifacts["adam"], tmp_path, 2).returncode == 0
    checkpoint = (tmp_path / "ck.bin").read_bytes()
    # Another training step's (SGD's layout) is refused before anything reaches the device.
    other = _train(c_build, artifacts["sgd"], tmp_path, 3)
    assert other.returncode == 1
    assert "not a checkpoint of loss_train_step: it was saved with another layout" in other.stderr
    damaged = bytearray(checkpoint)
    damaged[len(damaged) // 2] ^= 1
    (tmp_path / "ck.bin").write_bytes(bytes(damaged))
    done = _train(c_build, artifacts["adam"], tmp_path, 3)
    assert done.returncode == 1 and "damaged (checksum mismatch)" in done.stderr, done.stderr
    (tmp_path / "ck.bin").write_bytes(checkpoint[:40])
    done = _train(c_build, artifacts["adam"], tmp_path, 3)
    assert done.returncode == 1 and "not a checkpoint of loss_train_step" in done.stderr, done.stderr


@pytest.mark.parametrize("device", ["local-sync", "local-task"])
def test_c_gradient_through_typed_header_equals_python(c_build, artifacts, tmp_path, device):
    """examples/c/grad.c calls mlp_loss_grad(...) of a generated header: the loss and the six
    gradients equal ig.load's bit for bit, from the file and from the bytes embedded in it."""
    _header(artifacts["grad"], tmp_path / "mlp.h", "--embed")
    grad = _compile_c(c_build, ROOT / "examples" / "c" / "grad.c", tmp_path / "grad", tmp_path)
    args = example_inputs()
    (tmp_path / "in.bin").write_bytes(b"".join(a.tobytes() for a in args))
    results = ig.load(artifacts["grad"], device=device)["loss_grad"](*args)
    want = b"".join(np.asarray(r, np.float32).tobytes() for r in results)
    for source in (str(artifacts["grad"]), "-"):
        done = subprocess.run([str(grad), source, str(tmp_path / "in.bin"), str(tmp_path / "out.bin"), "--driver",
                               device], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert f"on {device}" in done.stdout
        assert (tmp_path / "out.bin").read_bytes() == want


@pytest.mark.parametrize("sanitized", [False, True], ids=["plain", "asan+ubsan"])
def test_c_errors_are_codes_and_messages(c_build, artifacts, tmp_path, sanitized):
    """A wrong name, count, shape, rank, dtype, buffer, device or artifact: a status code and a
    one-line message each, never a crash; under AddressSanitizer and UBSan (leaks included)
    nothing is reported."""
    _header(artifacts["grad"], tmp_path / "mlp.h")
    errors = _compile_c(c_build, ROOT / "tests" / "c" / "errors.c", tmp_path / "errors", tmp_path,
                        sanitized=sanitized)
    (tmp_path / "junk.vmfb").write_bytes(b"not an artifact at all, just text")
    data = artifacts["grad"].read_bytes()
    (tmp_path / "cut.vmfb").write_bytes(data[:len(data) // 3])
    damaged = bytearray(data)
    damaged[len(data) * 2 // 3] ^= 0x10  # inside the kernels, which IREE would only read at a call
    (tmp_path / "damaged.vmfb").write_bytes(bytes(damaged))
    done = subprocess.run([str(errors), str(artifacts["grad"]), str(artifacts["adam"]), str(tmp_path / "junk.vmfb"),
                           str(tmp_path / "cut.vmfb"), str(tmp_path / "damaged.vmfb")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Sanitizer" not in done.stderr and "runtime error" not in done.stderr, done.stderr
    cases = {line.split(" ", 1)[0]: line.split(" ", 2)[1:] for line in done.stdout.splitlines()}
    want = {
        "missing_file": ("IRGRAD_ERROR_IO", "/nonexistent/model.vmfb: No such file or directory"),
        "not_an_artifact": ("IRGRAD_ERROR_ARTIFACT", "not a valid IREE artifact (.vmfb)"),
        "truncated": ("IRGRAD_ERROR_ARTIFACT", "not a valid IREE artifact (.vmfb)"),
        "damaged": ("IRGRAD_ERROR_ARTIFACT", "damaged.vmfb: not a valid IREE artifact (.vmfb): damaged: digest mismatch"),
        "bad_driver": ("IRGRAD_ERROR_DEVICE", "unknown device 'cuda'; drivers: local-sync, local-task"),
        "other_artifact": ("IRGRAD_ERROR_NOT_FOUND", "no function 'loss_grad'; available: loss, loss_train_init, "
                                                     "loss_train_step"),
        "null_out": ("IRGRAD_ERROR_ARGUMENT", "out is NULL"),
        "no_function": ("IRGRAD_ERROR_NOT_FOUND", "no function 'loss_grads'; available: loss, loss_grad"),
        "ok": ("IRGRAD_OK", ""),
        "too_few_args": ("IRGRAD_ERROR_COUNT", "loss_grad expects 6 arguments, got 5"),
        "too_few_results": ("IRGRAD_ERROR_COUNT", "loss_grad returns 7 results, room given for 6"),
        "wrong_shape": ("IRGRAD_ERROR_SHAPE", "loss_grad argument 2 (w1): expected shape (4, 16), got (4, 15)"),
        "wrong_rank": ("IRGRAD_ERROR_SHAPE", "loss_grad argument 2 (w1): expected shape (4, 16), got (4,)"),
        "wrong_dtype": ("IRGRAD_ERROR_DTYPE", "loss_grad argument 3 (b1): expected dtype float32, got float64"),
        "short_buffer": ("IRGRAD_ERROR_SHAPE", "loss_grad argument 0 (x): its shape needs 128 bytes, the array has 12"),
        "null_data": ("IRGRAD_ERROR_SHAPE", "(data is NULL)"),
        "small_result": ("IRGRAD_ERROR_SHAPE", "loss_grad result 3 (d_w1): needs 256 bytes, the array has room for 8"),
        "result_dtype": ("IRGRAD_ERROR_DTYPE", "loss_grad result 0 (result0): expected dtype float32, got int32"),
        "no_trainer": ("IRGRAD_ERROR_ARGUMENT", "irgrad_trainer_create: a NULL argument"),
        "no_training_step": ("IRGRAD_ERROR_NOT_FOUND", "none: compile with --train"),
        "ok_again": ("IRGRAD_OK", ""),
    }
    assert set(cases) == set(want), done.stdout
    for case, (status, message) in want.items():
        assert cases[case][0] == status, (case, cases[case])
        assert message in (cases[case][1] if len(cases[case]) > 1 else ""), (case, cases[case])
    if sanitized:
        return
    # The header made for another artifact: refused by its types, naming both.
    _header(artifacts["sgd"], tmp_path / "sgd.h", "--prefix", "mlp")
    (tmp_path / "other").mkdir()
    shutil.copy(tmp_path / "sgd.h", tmp_path / "other" / "mlp.h")
    source = tmp_path / "other" / "other.c"
    source.write_text('#include <stdio.h>\n#include "mlp.h"\nint main(int argc, char** argv) {\n'
                      '  irgrad_module* m;\n  (void)argc;\n  irgrad_status s = mlp_open(argv[1], NULL, &m);\n'
                      '  printf("%s %s\\n", irgrad_status_name(s), irgrad_last_error());\n  return 0;\n}\n')
    other = _compile_c(c_build, source, tmp_path / "other_bin", tmp_path / "other")
    done = subprocess.run([str(other), str(artifacts["adam"])], capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith("IRGRAD_ERROR_SIGNATURE loss_train_init is (8x4xf32"), done.stdout
    assert "in the header: the header was generated for another artifact" in done.stdout


_DYNAMIC_APP = r"""
#include <stdio.h>
#include <stdlib.h>
#include "dyn.h"
/* dyn ARTIFACT BATCH IN.bin OUT.bin [ROOM]: batch_loss_grad on a batch of BATCH rows (x, then w),
 * d_x given room for ROOM rows (default 64). */
int main(int argc, char** argv) {
  size_t room = argc > 5 ? (size_t)atoi(argv[5]) : 64;
  int64_t batch = atoll(argv[2]), x_shape[2] = {batch, 4}, d_x_shape[2] = {-1, -1};
  static float x[64][4], w[4][3], value, d_x[64][4], d_w[4][3];
  FILE* in = fopen(argv[3], "rb");
  if (batch < 1 || batch > 64 || room > 64 || !in || fread(x, sizeof(float), (size_t)batch * 4, in) != (size_t)batch * 4 || fread(w, sizeof(w), 1, in) != 1) {
    return 2;
  }
  fclose(in);
  irgrad_module* m;
  irgrad_status s = dyn_open(argv[1], "local-sync", &m);
  if (s == IRGRAD_OK) s = dyn_batch_loss_grad(m, &x[0][0], x_shape, w, &value, &d_x[0][0], d_x_shape, room * 4, d_w);
  if (s != IRGRAD_OK) {
    printf("%s %s\n", irgrad_status_name(s), irgrad_last_error());
    return 1;
  }
  printf("d_x shape %lld %lld\n", (long long)d_x_shape[0], (long long)d_x_shape[1]);
  FILE* out = fopen(argv[4], "wb");
  fwrite(&value, 4, 1, out);
  fwrite(d_x, sizeof(float), (size_t)batch * 4, out);
  fwrite(d_w, sizeof(d_w), 1, out);
  fclose(out);
  irgrad_module_close(m);
  return 0;
}
"""


def test_c_dynamic_batch_through_typed_header(c_build, tmp_path):
    """A dynamic dimension in a generated header: the argument is a pointer and its shape, the
    result a pointer, its capacity and the shape the call writes; batches of 1 and 5 give
    ig.load's numbers bit for bit, and a result without room for its rows is refused."""
    @ig.function(input_signature=[ig.TensorSpec([None, 4], name="x"), ig.TensorSpec([4, 3], name="w")])
    def batch_loss(x, w):
        return ig.reduce_sum(ig.tanh(x @ w))

    vmfb = ig.compile(ig.passes.differentiate(batch_loss.lower().mlir, "batch_loss", with_value=True)).save(
        tmp_path / "dyn.vmfb")
    _header(vmfb, tmp_path / "dyn.h")
    (tmp_path / "dyn.c").write_text(_DYNAMIC_APP)
    app = _compile_c(c_build, tmp_path / "dyn.c", tmp_path / "dyn", tmp_path)
    module = ig.load(vmfb, device="local-sync")
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    for batch in (1, 5):
        x = rng.standard_normal((batch, 4)).astype(np.float32)
        (tmp_path / "in.bin").write_bytes(x.tobytes() + w.tobytes())
        done = subprocess.run([str(app), str(vmfb), str(batch), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"d_x shape {batch} 4" in done.stdout
        want = b"".join(np.asarray(r, np.float32).tobytes() for r in module["batch_loss_grad"](x, w))
        assert (tmp_path / "out.bin").read_bytes() == want
    done = subprocess.run([str(app), str(vmfb), "5", str(tmp_path / "in.bin"), str(tmp_path / "out.bin"), "4"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stdout.strip() == ("IRGRAD_ERROR_SHAPE batch_loss_grad result 1 (d_x): needs 80 bytes, the array has "
                                   "room for 64")


def _fixture_modules() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*.mlir") if p.parent != FIXTURES)


def test_generated_headers_compile_for_every_fixture(c_build, artifacts, tmp_path):
    """A header per fixture module (its signatures: every dtype, dynamic dimensions, scalars,
    complex numbers, odd names) and per compiled artifact (gradients, training steps) compiles
    with -Wall -Werror, as C and, where g++ is there, as C++; all of them in one program."""
    includes = []
    for path in _fixture_modules():
        signatures = [signature_of(f) for f in public_functions(parse_module(path.read_text()))
                      if len(f.regions[0].blocks)]  # (declarations of external functions: none)
        metadata = {"functions": {s.name: s.to_json() for s in signatures}, "target": "llvm-cpu"}
        prefix = c_identifier(f"{path.parent.name}_{path.stem}")
        (tmp_path / f"{prefix}.h").write_text(c_header(metadata, prefix, source=path.name))
        includes.append(f"{prefix}.h")
    for name, vmfb in artifacts.items():
        _header(vmfb, tmp_path / f"mlp_{name}.h", "--prefix", f"mlp_{name}", "--embed")
        includes.append(f"mlp_{name}.h")
    assert len(includes) > 90
    program = tmp_path / "all.c"
    program.write_text("".join(f'#include "{h}"\n' for h in includes) + "int main(void) { return 0; }\n")
    _compile_c(c_build, program, tmp_path / "all", tmp_path)
    if shutil.which("g++"):
        cxx = tmp_path / "all.cc"
        cxx.write_text(program.read_text())
        done = subprocess.run(["g++", "-Wall", "-Werror", "-fsyntax-only", f"-I{tmp_path}",
                               f"-I{ROOT / 'c' / 'include'}", str(cxx)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]


def test_header_types_match_the_library(artifacts):
    """The types string a header checks at open is the one the library computes (same
    spelling: dims, '?', MLIR element types)."""
    sig = ig.load(artifacts["grad"]).functions["loss_grad"]
    assert c_types(sig) == ("(8x4xf32,8x1xf32,4x16xf32,16xf32,16x1xf32,1xf32)->"
                            "(f32,8x4xf32,8x1xf32,4x16xf32,16xf32,16x1xf32,1xf32)")
    assert [c_identifier(n) for n in ("x", "int", "1st", "_w", "a.b", "irgrad_m")] == \
        ["x", "int_", "v1st", "v_w", "a_b", "irgrad_m_"]
    assert len(SIGNATURE) == 6


def test_header_command_errors(tmp_path):
    done = subprocess.run([sys.executable, "-m", "irgrad", "header", str(tmp_path / "none.vmfb"), "-o",
                           str(tmp_path / "x.h")], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith("none.vmfb: no such file") or "no such file" in done.stderr
    assert "Traceback" not in done.stderr


needs_aarch64 = pytest.mark.skipif(
    not (shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64")
         and (SYSROOT / "include" / "stdio.h").is_file()),
    reason="the aarch64 build needs gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user (.ci/run installs "
           "them)")


@needs_aarch64
def test_c_training_on_aarch64_under_qemu(c_build, tmp_path):
    """The runtime, library and example cross-compiled for aarch64, run under qemu on an
    artifact compiled for aarch64: the same training as the host's, to float32 rounding (the
    kernels differ), and the binary's size reported."""
    build = _build("--aarch64")
    train = build / "examples" / "train"
    done = subprocess.run(["file", str(train)], capture_output=True, text=True)
    assert "aarch64" in done.stdout or "ARM aarch64" in done.stdout or done.returncode != 0
    module = ig.passes.differentiate(loss.lower().mlir, "loss", wrt=[2, 3, 4, 5], grad=False, train="adam")
    vmfb = ig.compile(module, target="llvm-cpu", triple="aarch64-linux-gnu", cpu="generic").save(
        tmp_path / "mlp_arm.vmfb")
    _, _, *params = example_inputs()
    batches = _batches()
    _write_training_inputs(tmp_path, params, batches)
    done = subprocess.run(["qemu-aarch64", "-L", str(SYSROOT), str(train), str(vmfb), str(tmp_path / "params.bin"),
                           str(tmp_path / "data.bin"), str(tmp_path / "ck.bin"), "10", "--losses",
                           str(tmp_path / "losses.bin"), "--params-out", str(tmp_path / "out.bin")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    host = ig.load(ig.compile(module, target="llvm-cpu").vmfb, device="local-sync").trainer(params)
    want = [host.step(*batches[k % 3]) for k in range(10)]
    np.testing.assert_allclose(np.frombuffer((tmp_path / "losses.bin").read_bytes(), np.float32), want, rtol=1e-5)
    got = np.frombuffer((tmp_path / "out.bin").read_bytes(), np.float32)
    np.testing.assert_allclose(got, np.concatenate([p.ravel() for p in host.params()]), rtol=1e-5, atol=1e-6)
    print(f"aarch64 examples/c/train: {train.stat().st_size:,} bytes")


# ----- the version gap: IREE b48a5955's runtime (HAL module 7, VM bytecode 17.0) and artifacts of
# the pinned 3.13 compiler --------------------------------------------------------------------

_DTYPE_CODES = {name: code for code, name in enumerate(
    ["invalid", "float16", "bfloat16", "float32", "float64", "bool", "int8", "int16", "int32", "int64", "uint8",
     "uint16", "uint32", "uint64", "complex64", "complex128"])}


def _write_arrays(path: Path, arrays: list[np.ndarray]) -> None:
    parts = [np.uint32(len(arrays)).tobytes()]
    for a in arrays:
        a = np.asarray(a, order="C")  # (np.ascontiguousarray makes a 0-d array 1-d)
        parts += [np.uint32(_DTYPE_CODES[a.dtype.name]).tobytes(), np.uint32(a.ndim).tobytes(),
                  np.array(a.shape, np.int64).tobytes(), np.uint64(a.nbytes).tobytes(), a.tobytes()]
    path.write_bytes(b"".join(parts))


def _read_arrays(path: Path) -> list[np.ndarray]:
    data, at = path.read_bytes(), 4
    names = {code: name for name, code in _DTYPE_CODES.items()}
    arrays = []
    for _ in range(int(np.frombuffer(data[:4], np.uint32)[0])):
        dtype, rank = np.frombuffer(data[at:at + 8], np.uint32)
        shape = tuple(np.frombuffer(data[at + 8:at + 8 + 8 * int(rank)], np.int64))
        at += 8 + 8 * int(rank)
        nbytes = int(np.frombuffer(data[at:at + 8], np.uint64)[0])
        arrays.append(np.frombuffer(data[at + 8:at + 8 + nbytes], names[int(dtype)]).reshape(shape))
        at += 8 + nbytes
    return arrays


@pytest.fixture(scope="session")
def call_tool(c_build, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("c_call")
    return _compile_c(c_build, ROOT / "tests" / "c" / "call.c", out / "call", ROOT / "tests" / "c")


def _c_call(tool: Path, vmfb: Path, function: str, args: list[np.ndarray], work: Path, device: str = "local-sync"):
    _write_arrays(work / "args.bin", args)
    done = subprocess.run([str(tool), str(vmfb), function, device, str(work / "args.bin"), str(work / "out.bin")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return _read_arrays(work / "out.bin")


def _version_gap_cases(artifacts: dict[str, Path], out: Path):
    """(label, artifact, function, arguments): a gradient, each optimizer's training step, a
    dynamic batch, a while loop, a Hessian."""
    args = example_inputs()
    yield "gradient", artifacts["grad"], "loss_grad", args
    forward = loss.lower().mlir
    momentum = ig.compile(ig.passes.differentiate(forward, "loss", wrt=[2, 3, 4, 5], grad=False, train="momentum"))
    artifacts = {**artifacts, "momentum": momentum.save(out / "mlp_momentum.vmfb")}
    for optimizer in ("sgd", "momentum", "adam"):
        sig = ig.load(artifacts[optimizer]).functions["loss_train_step"]
        state = [np.full(t.shape, 3 if t.dtype == "int32" else 0.25, t.dtype) for t in sig.inputs[6:]]
        yield f"train {optimizer}", artifacts[optimizer], "loss_train_step", args + state

    @ig.function(input_signature=[ig.TensorSpec([None, 4], name="x"), ig.TensorSpec([4, 3], name="w")])
    def batch_loss(x, w):
        return ig.reduce_sum(ig.tanh(x @ w))

    dynamic = ig.compile(ig.passes.differentiate(batch_loss.lower().mlir, "batch_loss", with_value=True))
    rng = np.random.default_rng(2)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    for batch in (1, 5):
        yield f"dynamic batch {batch}", dynamic.save(out / "dynamic.vmfb"), "batch_loss_grad", \
            [rng.standard_normal((batch, 4)).astype(np.float32), w]
    data = np.load(FIXTURES / "jax" / "while_newton.npz")
    loop = ig.compile(ig.passes.differentiate((FIXTURES / "jax" / "while_newton.mlir").read_text(), "main"))
    yield "while loop", loop.save(out / "while.vmfb"), "main_grad", [data["arg0"], data["arg1"]]

    @ig.function(input_signature=[ig.TensorSpec([3], name="x"), ig.TensorSpec([3], name="a")])
    def energy(x, a):
        return ig.reduce_sum(ig.tanh(a * x) * x * ig.reduce_sum(x))

    hessian = ig.compile(ig.passes.differentiate(energy.lower().mlir, "energy", wrt=[0], grad=False, hessian=True))
    yield "hessian", hessian.save(out / "hessian.vmfb"), "energy_hessian", \
        [rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)]


def test_version_gap_every_artifact_kind_runs_bit_for_bit(artifacts, call_tool, tmp_path):
    """Artifacts of irgrad's pinned compiler run on the C runtime built from IREE b48a5955 (the
    same HAL module and bytecode versions): every kind gives ig.load's numbers bit for bit."""
    ran = []
    for label, vmfb, function, args in _version_gap_cases(artifacts, tmp_path):
        got = _c_call(call_tool, vmfb, function, args, tmp_path)
        want = ig.load(vmfb, device="local-sync")[function].call_flat(*args)
        assert len(got) == len(want), label
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (label, g.shape, w.shape)
            assert g.tobytes() == np.ascontiguousarray(w).tobytes(), label
        ran.append(label)
    assert len(ran) == 8


def test_version_gap_a_newer_hal_module_is_refused_naming_versions(artifacts, call_tool, tmp_path):
    """An artifact that needs a HAL module newer than this runtime's (the module's declared
    dependency raised from 7 to 8) is refused at load, naming the compiler, the versions and
    the runtime's revision; IREE's own message for it would only say 'version mismatch'."""
    data = artifacts["grad"].read_bytes()
    # The module's dependency table for 'hal': the offset of its name (8 bytes on), its
    # minimum_version (7), then the name itself.
    needle = np.array([8, 7, 3], np.uint32).tobytes() + b"hal\0"
    assert data.count(needle) == 1
    # Sealed again (irgrad's digest in the zip comment: the library refuses bytes that changed).
    unsealed = data[:-len(b"irgrad-sha256:") - 64 - 2] + b"\0\0"
    newer = seal(unsealed.replace(needle, np.array([8, 8, 3], np.uint32).tobytes() + b"hal\0"))
    assert newer != data and newer.endswith(b"irgrad-sha256:" + hashlib.sha256(newer[:-80]).hexdigest().encode())
    (tmp_path / "newer.vmfb").write_bytes(newer)
    _write_arrays(tmp_path / "args.bin", example_inputs())
    done = subprocess.run([str(call_tool), str(tmp_path / "newer.vmfb"), "loss_grad", "local-sync",
                           str(tmp_path / "args.bin"), str(tmp_path / "out.bin")], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stdout.startswith("IRGRAD_ERROR_VERSION this artifact was built by IREE compiler 3.13"), done.stdout
    assert "needs IREE's hal module version 8; this runtime, IREE 3.12.0.dev" in done.stdout
    assert "(HAL module 7, VM bytecode 17.0), has version 7" in done.stdout
