"""The irgrad command line: every command, its output formats and its one-line errors.

Most commands run in-process through typer's CliRunner; a few run as
``python -m irgrad`` subprocesses where the real entry point, exit status and
stderr matter. Three compiles in all, shared through module-scoped fixtures.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import irgrad
from irgrad import runtime as rt
from irgrad import cli as cli_module
from irgrad import commands, console, values
from irgrad.cli import app
from irgrad.runtime.options import TARGET_FLAGS, CompileOptions, Target
from irgrad.console import progress
from irgrad.commands import CLIError
from irgrad.values import format_array, parse_input

try:  # click < 8.2 mixes stderr into stdout unless told not to
    RUNNER = CliRunner(mix_stderr=False)
except TypeError:
    RUNNER = CliRunner()

MODEL = '''
import irgrad as ig

@ig.function(input_signature=[ig.TensorSpec([2, 3], ig.float32), ig.TensorSpec([3], ig.float32)])
def loss(x, w):
    return ig.reduce_sum(ig.tanh(x * w) ** 2)

@ig.function
def nosig(x):
    return x * 2.0

def plain(x):
    return x

@ig.function(input_signature=[ig.TensorSpec([2])])
def bad_trace(x):
    raise ValueError("shapes do not fit")
'''

# f(a, b) = sin(a) * b, with an integer argument that gets no gradient.
MLIR = """
func.func @f(%a: tensor<3xf32>, %b: tensor<3xf32>, %n: tensor<i32>) -> tensor<3xf32> {
  %0 = stablehlo.sine %a : tensor<3xf32>
  %1 = stablehlo.multiply %0, %b : tensor<3xf32>
  return %1 : tensor<3xf32>
}
"""

CUSTOM_CALL = """
func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.sine %a : tensor<2xf32>
  %1 = stablehlo.custom_call @foo(%0) : (tensor<2xf32>) -> tensor<2xf32>
  return %1 : tensor<2xf32>
}
"""

X = np.array([[0.5, -1.0, 2.0], [0.1, 0.3, -0.7]], np.float32)
W = np.array([0.2, -0.4, 0.9], np.float32)


def loss_grads(x, w):
    """d/dx and d/dw of sum(tanh(x * w) ** 2)."""
    t = np.tanh(x.astype(np.float64) * w)
    common = 2 * t * (1 - t * t)
    return common * w, (common * x).sum(axis=0)


def spec(array: np.ndarray) -> str:
    """An --input for ``array`` (float32)."""
    shape = "".join(f"{d}x" for d in array.shape)
    return f"{shape}f32=" + ",".join(repr(float(v)) for v in array.ravel())


def invoke(*args):
    return RUNNER.invoke(app, [str(a) for a in args])


def cli(*args, cwd=None):
    """``python -m irgrad ARGS`` in a subprocess, importing the irgrad under test."""
    root = str(Path(irgrad.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "irgrad", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def error_line(result) -> str:
    """The single stderr line of a failed command."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("irgrad: error: "), lines[0]
    return lines[0]


def printed_results(stdout: str) -> list[np.ndarray]:
    """Numbers of each ``result[i]`` printed by ``irgrad run`` (under its name or IREE's
    ``hal.buffer_view``), flattened."""
    values = re.findall(r"result\[\d+\]: \S+\n\S*?=(.*)", stdout)
    return [np.array(re.split(r"[\s\[\]]+", v.strip(" []")), dtype=np.float64) for v in values]


@pytest.fixture(scope="module", autouse=True)
def cache_dir(isolated_cache_dir):
    return isolated_cache_dir


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli")
    (path / "model.py").write_text(MODEL)
    (path / "broken.py").write_text("import irgrad as ig\nraise RuntimeError('boom at import')\n")
    (path / "f.mlir").write_text(MLIR)
    (path / "custom_call.mlir").write_text(CUSTOM_CALL)
    return path


@pytest.fixture(scope="module")
def cpu_compile(work):
    """model.py:loss with @loss_grad and @loss_vjp for llvm-cpu: (CliRunner result, path)."""
    out = work / "m.vmfb"
    result = invoke("compile", f"{work}/model.py:loss", "--grad", "--vjp", "-o", out)
    assert result.exit_code == 0, result.output
    return result, out


@pytest.fixture(scope="module")
def cuda_artifact(work) -> Path:
    """Compiling for cuda needs no GPU."""
    out = work / "mc.vmfb"
    result = invoke("compile", f"{work}/model.py:loss", "--grad", "--target", "cuda", "-o", out)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def mlir_artifact(work) -> Path:
    """f.mlir with @f_grad for vmvx."""
    out = work / "f.vmfb"
    result = invoke("compile", work / "f.mlir", "--grad", "--func", "f", "--target", "vmvx", "--no-cache", "-o", out)
    assert result.exit_code == 0, result.output
    assert "cache" not in result.stdout
    return out


# ----- --input syntax and result printing ------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("2x2xf32=1,2,3,4", np.array([[1, 2], [3, 4]], np.float32)),
    ("2x2xf32=1 2 3 4", np.array([[1, 2], [3, 4]], np.float32)),
    ("2x2xf32=[1 2][3 4]", np.array([[1, 2], [3, 4]], np.float32)),
    ("2x2xf32=[[1, 2], [3, 4]]", np.array([[1, 2], [3, 4]], np.float32)),
    ("2x2xf32= 1, 2,3 ,4", np.array([[1, 2], [3, 4]], np.float32)),
    ("2x2xf32=5", np.full((2, 2), 5, np.float32)),
    ("2x2xf32", np.zeros((2, 2), np.float32)),
    ("f32=3", np.array(3, np.float32)),
    ("f64=-2.5e-3", np.array(-2.5e-3, np.float64)),
    ("1xf32=3", np.array([3], np.float32)),
    ("3xf32=inf -inf 1e-3", np.array([np.inf, -np.inf, 1e-3], np.float32)),
    ("3xf16=1.5 2.1 65504", np.array([1.5, 2.1, 65504], np.float16)),
    ("3xi1=1 0 true", np.array([True, False, True])),
    ("2xi1=false", np.array([False, False])),
    ("2x3xi32=1 2 3 4 5 -6", np.array([[1, 2, 3], [4, 5, -6]], np.int32)),
    ("2xi64=9007199254740993 0x10", np.array([9007199254740993, 16], np.int64)),
    ("3xui8=1 255 7", np.array([1, 255, 7], np.uint8)),
    ("2xsi8=-128 127", np.array([-128, 127], np.int8)),
    ("0x3xf32", np.zeros((0, 3), np.float32)),
])
def test_parse_input(text, expected):
    (array,) = parse_input(text)
    assert array.dtype == expected.dtype and array.shape == expected.shape
    np.testing.assert_array_equal(array, expected)


def test_parse_input_bf16():
    (array,) = parse_input("2xbf16=1.5 3")
    assert array.dtype.name == "bfloat16"
    np.testing.assert_array_equal(array.astype(np.float32), [1.5, 3])


def test_parse_input_files(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1, 2], np.int32)
    with open(tmp_path / "two.npy", "wb") as f:  # numpy.save appended twice: two inputs
        np.save(f, a)
        np.save(f, b)
    arrays = parse_input(f"@{tmp_path}/two.npy")
    assert [x.dtype for x in arrays] == [np.float32, np.int32]
    np.testing.assert_array_equal(arrays[0], a)
    np.testing.assert_array_equal(arrays[1], b)
    a.tofile(tmp_path / "a.bin")
    (raw,) = parse_input(f"2x3xf32=@{tmp_path}/a.bin")
    np.testing.assert_array_equal(raw, a)


@pytest.mark.parametrize("text, message", [
    ("3.5", "needs a type"),
    ("2x2=1,2,3,4", "unknown element type '2'"),
    ("2x2xf33=1", "unknown element type 'f33'; allowed: f16, bf16, f32"),
    ("2x?xf32=1", "bad shape"),
    ("2x2xf32=1,2", "2 values for shape 2x2xf32 (needs 4, or 1 to fill it)"),
    ("2x2xf32=1,2,3,4,5", "5 values"),
    ("2xf32=a b", "bad number 'a'"),
    ("2xf32=1;2", "bad number '1;2'"),
    ("2xi32=1.5 2", "bad integer '1.5'"),
    ("2xi8=300 1", "300 is out of range for int8"),
    ("2xi1=2 0", "bad i1 value '2'"),
    ("@/nonexistent/x.npy", "No such file or directory"),
    ("2xf32=@/nonexistent/x.bin", "No such file or directory"),
])
def test_parse_input_errors(text, message):
    with pytest.raises(ValueError) as info:
        parse_input(text)
    assert str(info.value).startswith(f"bad --input {text!r}: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_parse_input_rejects_a_file_that_is_not_npy(tmp_path):
    (tmp_path / "x.npy").write_text("hello")
    with pytest.raises(ValueError, match="is not a .npy file"):
        parse_input(f"@{tmp_path}/x.npy")


@pytest.mark.parametrize("array, type_name, expected", [
    (np.array([[1, 2], [3, 4]], np.float32), "f32", "2x2xf32=[1 2][3 4]"),
    (np.array(3, np.float32), "f32", "f32=3"),
    (np.array([0.1, 123456789, 1e-10, np.inf, -np.inf, np.nan], np.float32), "f32",
     "6xf32=0.1 1.23457E+08 1E-10 INF -INF NAN"),
    (np.arange(1, 9, dtype=np.float64).reshape(2, 2, 2), "f64", "2x2x2xf64=[[1 2][3 4]][[5 6][7 8]]"),
    (np.array([True, False]), "i1", "2xi1=1 0"),
    (np.array([-7, 255], np.int64), "i64", "2xi64=-7 255"),
    (np.zeros((0, 3), np.float32), "f32", "0x3xf32="),
    (np.array([2.1], np.float16), "f16", "1xf16=2.09961"),
])
def test_format_array(array, type_name, expected):
    assert format_array(array, type_name) == expected


def test_format_array_elides_like_iree():
    assert format_array(np.ones(5, np.float32), "f32", limit=3) == "5xf32=1 1 1..."
    assert format_array(np.ones((3, 2), np.float32), "f32", limit=3) == "3x2xf32=[1 1][1...][...]"


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_only_on_a_terminal():
    tty, pipe = _Terminal(), io.StringIO()
    with progress("compiling", stream=tty, delay=0.01):
        time.sleep(0.3)
    assert "compiling" in tty.getvalue() and "0:00:00" in tty.getvalue()  # rich's display: message, elapsed time
    with progress("compiling", stream=pipe, delay=0.01):
        time.sleep(0.05)
    assert pipe.getvalue() == ""
    quick = _Terminal()
    with progress("compiling", stream=quick, delay=5):
        pass
    assert quick.getvalue() == ""


# ----- the library functions behind the commands -----------------------------------------


def test_cli_reexports_what_benchmarks_profile_imports():
    assert (cli_module.CLIError, cli_module.load_source, cli_module.parse_wrt) == (
        commands.CLIError, commands.load_source, commands.parse_wrt)


def test_parse_wrt():
    assert commands.parse_wrt("0,2") == [0, 2] and commands.parse_wrt("1") == [1]
    assert commands.parse_wrt(None) is None
    assert commands.parse_wrt("0,w1, params['b']") == [0, "w1", "params['b']"]  # names too
    with pytest.raises(CLIError, match=r"bad --wrt '0,,1': expected argument indices or names") as info:
        commands.parse_wrt("0,,1")
    assert info.value.exit_code == commands.USAGE == 2


def test_one_line():
    assert commands.one_line(FileNotFoundError(2, "No such file or directory", "/x/y")) == \
        "/x/y: No such file or directory"
    assert commands.one_line(KeyError("no such\n  key")) == "no such key"
    assert commands.one_line(ValueError("")) == "ValueError"
    unexpected = commands.one_line(ZeroDivisionError("division by zero"))
    assert unexpected == "ZeroDivisionError: division by zero (run 'irgrad --debug ...' for the traceback)"


def test_read_and_write_text(tmp_path, capsys):
    with pytest.raises(CLIError, match="no such file") as info:
        commands.read_mlir(tmp_path / "nope.mlir")
    assert info.value.exit_code == 2
    out = tmp_path / "sub" / "out.mlir"
    commands.write_text(out, "module {}")
    assert commands.read_mlir(out) == "module {}" and sorted(p.name for p in out.parent.iterdir()) == ["out.mlir"]
    commands.write_text(None, "a")
    commands.write_text(Path("-"), "b\n")
    assert capsys.readouterr().out == "a\nb\n"


def test_adjoints_and_load_source(work):
    text, name = commands.load_source(str(work / "f.mlir"))
    assert name is None and commands.adjoints(text, None, None) == text
    with pytest.raises(CLIError, match="--with-value and --wrt need --grad or --vjp"):
        commands.adjoints(text, None, "0")
    with pytest.raises(CLIError, match="--loop-checkpoints needs --grad or --vjp"):
        commands.adjoints(text, None, None, loop_checkpoints="sqrt")
    assert "@f_grad(" in commands.adjoints(text, "f", "0", grad=True)
    text, name = commands.load_source(f"{work}/model.py:loss")
    assert name == "loss" and "func.func @loss(" in text
    with pytest.raises(CLIError, match=r"name the function as .*model.py:FUNCTION \(ig.functions in it: "
                       r"bad_trace, loss, nosig\)") as info:
        commands.load_source(f"{work}/model.py")
    assert info.value.exit_code == 2


def test_pick_function():
    assert commands.pick_function(["f"], None, "a.vmfb") == "f"
    assert commands.pick_function(["f", "g"], "g", "a.vmfb") == "g"
    with pytest.raises(CLIError, match=r"a.vmfb has 2 functions; choose one with --function \(f, g\)"):
        commands.pick_function(["f", "g"], None, "a.vmfb")
    with pytest.raises(CLIError, match=r"no function 'h' in a.vmfb; functions: none"):
        commands.pick_function([], "h", "a.vmfb")


def test_parse_type_and_values():
    assert values.parse_type(" 2x3xsi8") == ((2, 3), "int8")
    assert values.parse_type("ui16") == ((), "uint16")
    assert values.ELEMENT_DTYPES["i1"] == "bool" and values.numpy_dtype("float16") == np.float16
    assert values.parse_value("-0x10", np.dtype(np.int32)) == -16
    assert values.parse_value("TRUE", np.dtype(np.bool_)) is True
    assert values.parse_value("1e3", np.dtype(np.float32)) == 1000.0
    with pytest.raises(ValueError, match=r"256 is out of range for uint8 \[0, 255\]"):
        values.parse_value("256", np.dtype(np.uint8))


@pytest.mark.parametrize("text, expected", [
    ("", ("skip", None)), ("-", ("print", None)),
    ("@out.npy", ("write", Path("out.npy"))), ("+raw.bin", ("append", Path("raw.bin"))),
])
def test_parse_output(text, expected):
    assert values.parse_output(text) == expected


@pytest.mark.parametrize("text", ["out.npy", "@", "+"])
def test_parse_output_errors(text):
    with pytest.raises(ValueError, match=re.escape(f"bad --output {text!r}: use @FILE.npy (write)")):
        values.parse_output(text)


def test_save_array_and_read_npy(tmp_path):
    a, b = np.arange(4, dtype=np.float32), np.array([[1, 2]], np.int64)
    values.save_array(a, tmp_path / "x.npy", append=False)
    values.save_array(b, tmp_path / "x.npy", append=True)
    got = values.read_npy(str(tmp_path / "x.npy"))
    assert [g.dtype for g in got] == [np.float32, np.int64]
    np.testing.assert_array_equal(got[1], b)
    values.save_array(a, tmp_path / "x.bin", append=False)
    assert (tmp_path / "x.bin").read_bytes() == a.tobytes()
    (tmp_path / "empty.npy").write_bytes(b"")
    with pytest.raises(ValueError, match="empty.npy is empty"):
        values.read_npy(str(tmp_path / "empty.npy"))


def test_report_results(tmp_path):
    types = [rt.TensorType((2,), "float32"), rt.TensorType((), "int32"), rt.TensorType((), "bool")]
    results = [np.array([1.5, 2], np.float32), np.array(7, np.int32), np.array(True)]
    text = values.report_results("f", results, types)
    assert text == ("EXEC @f\nresult[0]: hal.buffer_view\n2xf32=1.5 2\nresult[1]: hal.buffer_view\ni32=7\n"
                    "result[2]: hal.buffer_view\ni1=1")
    text = values.report_results("f", results, types, [("skip", None), ("write", tmp_path / "n.npy")])
    assert text == "EXEC @f\nresult[2]: hal.buffer_view\ni1=1"
    assert np.load(tmp_path / "n.npy") == 7


def test_compile_options_for_target():
    assert set(TARGET_FLAGS) == {t.value for t in Target}
    options = CompileOptions.for_target("cpu", cpu="znver4", triple="x86_64-linux-gnu")
    assert options == CompileOptions(cpu="znver4", triple="x86_64-linux-gnu")
    assert CompileOptions.for_target("cuda", cuda_arch="sm_86").cuda_arch == "sm_86"
    with pytest.raises(ValueError, match="^--triple applies to target llvm-cpu only, not rocm$"):
        CompileOptions.for_target("rocm", triple="aarch64-linux-gnu")
    with pytest.raises(ValueError, match="^--rocm-arch applies to target rocm only, not cuda$"):
        CompileOptions.for_target("cuda", rocm_arch="gfx942")
    with pytest.raises(ValueError, match="^unknown target 'tpu'"):
        CompileOptions.for_target("tpu", cpu="generic")


@pytest.mark.parametrize("options, expected", [
    (CompileOptions(), "llvm-cpu, cpu host"),
    (CompileOptions(cpu="znver4", triple="x86_64-linux-gnu"), "llvm-cpu, cpu znver4, x86_64-linux-gnu"),
    (CompileOptions(target="cuda", cuda_arch="sm_86"), "cuda sm_86"),
    (CompileOptions(target="cuda", cuda_arch="sm_90a"), "cuda sm_90a (as sm_80 PTX, compiled for the GPU when loaded)"),
    (CompileOptions(target="rocm"), "rocm gfx942"),
    (CompileOptions(target="vulkan"), "vulkan-spirv"),
])
def test_compile_options_describe(options, expected):
    assert options.describe() == expected


# ----- global behaviour ------------------------------------------------------------------


def test_help_and_version():
    result = invoke()
    assert result.exit_code == 0
    for command in ("grad", "compile", "run", "emit", "inspect", "targets"):
        assert command in result.stdout
    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout.startswith(f"irgrad {irgrad.__version__}")


def test_usage_errors_are_one_line():
    result = invoke("compile", "x.mlir")
    assert result.exit_code == 2
    assert "Missing option" in error_line(result) and "'-o'" in error_line(result)
    result = invoke("frobnicate")
    assert result.exit_code == 2 and "No such command" in error_line(result)


def test_long_messages_are_cut(capsys):
    assert console.fail("x" * 5000, 1) == 1
    line = capsys.readouterr().err
    assert line.count("\n") == 1 and len(line) < 1000 and "--debug" in line


def test_debug_shows_the_traceback(work):
    bad = work / "bad_debug.mlir"
    bad.write_text("func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> { return %b : tensor<2xf32> }")
    quiet = cli("grad", bad)
    assert quiet.returncode == 1 and "Traceback" not in quiet.stderr
    assert "invalid MLIR" in error_line(quiet)
    loud = cli("--debug", "grad", bad)
    assert loud.returncode == 1
    assert "Traceback (most recent call last)" in loud.stderr and "IRError" in loud.stderr


# ----- grad ------------------------------------------------------------------------------


def test_grad_writes_adjoints(work, tmp_path):
    out = tmp_path / "out.mlir"
    result = invoke("grad", work / "f.mlir", "-o", out, "--vjp")
    assert result.exit_code == 0, result.output
    text = out.read_text()
    for name in ("@f(", "@f_grad(", "@f_vjp("):
        assert name in text
    # wrt defaults to the float arguments: two gradients, none for the i32, named after them.
    assert re.search(r'@f_grad\(.*\) -> \(tensor<3xf32> \{irgrad.name = "d_arg0"\}, '
                     r'tensor<3xf32> \{irgrad.name = "d_arg1"\}\)', text)
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_grad_to_stdout_with_options(work):
    result = invoke("grad", work / "f.mlir", "--wrt", "1", "--with-value")
    assert result.exit_code == 0, result.output
    assert re.search(r'@f_grad\(.*\) -> \(tensor<3xf32>, tensor<3xf32> \{irgrad.name = "d_arg1"\}\)',
                     result.stdout)


def test_grad_missing_adjoint_leaves_output_untouched(work, tmp_path):
    out = tmp_path / "OUT.mlir"
    out.write_bytes(b"// an earlier result\n")
    before = sorted(os.listdir(tmp_path))
    result = cli("grad", work / "custom_call.mlir", "-o", out)
    assert result.returncode == 1
    line = error_line(result)
    assert "stablehlo.custom_call" in line and ":4:" in line  # the op and its location
    assert out.read_bytes() == b"// an earlier result\n"
    assert sorted(os.listdir(tmp_path)) == before


def test_grad_malformed_mlir(work, tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @f(%a: tensor<2xf32> {\n")
    out = tmp_path / "out.mlir"
    result = invoke("grad", bad, "-o", out)
    assert result.exit_code == 1
    assert "invalid MLIR" in error_line(result)
    assert not out.exists()


@pytest.mark.parametrize("args, code, message", [
    (["--wrt", "a,b"], 2, "wrt 'a': @f has no argument of that name"),
    (["--wrt", "0,,1"], 2, "bad --wrt '0,,1'"),
    (["--wrt", "7"], 2, "wrt index 7 out of range"),
    (["--wrt", "2"], 2, "not a floating-point"),
    (["--func", "nope"], 2, "no function @nope"),
])
def test_grad_bad_func_or_wrt(work, args, code, message):
    result = invoke("grad", work / "f.mlir", *args)
    assert result.exit_code == code
    assert message in error_line(result)


def test_grad_loop_checkpoints(tmp_path):
    """--loop-checkpoints sqrt: a 300-step loop's gradient keeps 16 snapshots (⌈√300⌉ = 18
    iterations a segment, 16 whole segments), not the 300-row tape; a bad value is a usage error."""
    ig = irgrad
    step = lambda i, h, w: (i + 1, ig.tanh(h * w + 0.5) + 0.1 * h)  # noqa: E731
    f = ig.function(lambda h, w: ig.while_loop(lambda i, h: i < 300, lambda i, h: step(i, h, w), (0, h))[1],
                    input_signature=[ig.TensorSpec([3], ig.float64)] * 2)
    src = tmp_path / "rnn.mlir"
    src.write_text(f.lower().mlir)
    recorded, checkpointed = (invoke("grad", src, *flags) for flags in ([], ["--loop-checkpoints", "sqrt"]))
    assert recorded.exit_code == 0 and checkpointed.exit_code == 0, checkpointed.output
    assert "tensor<300x3xf64>" in recorded.stdout
    assert "tensor<300x3xf64>" not in checkpointed.stdout and "tensor<16x3xf64>" in checkpointed.stdout
    for bad in ("0", "-3", "log"):
        result = invoke("grad", src, "--loop-checkpoints", bad)
        assert result.exit_code == 2 and f"bad --loop-checkpoints '{bad}'" in error_line(result)


def test_grad_missing_file(tmp_path):
    result = invoke("grad", tmp_path / "nope.mlir")
    assert result.exit_code == 2 and "no such file" in error_line(result)


# ----- emit ------------------------------------------------------------------------------


def test_emit(work):
    result = invoke("emit", f"{work}/model.py:loss")
    assert result.exit_code == 0, result.output
    assert "func.func @loss(" in result.stdout and "_grad" not in result.stdout
    result = invoke("emit", f"{work}/model.py:loss", "--grad", "--vjp", "--with-value")
    assert result.exit_code == 0, result.output
    assert re.search(r'@loss_grad\(.*\) -> \(tensor<f32>, tensor<2x3xf32> \{irgrad.name = "d_arg0"\}, '
                     r'tensor<3xf32> \{irgrad.name = "d_arg1"\}\)', result.stdout)
    assert "@loss_vjp(" in result.stdout


@pytest.mark.parametrize("source, message", [
    ("model.py:nosig", "model.py:nosig has no input_signature; decorate it with @ig.function(input_signature="),
    ("model.py:plain", "model.py:plain has no input_signature"),
    ("model.py:nope", "has no 'nope' (ig.functions in it: bad_trace, loss, nosig)"),
    ("model.py", "name the function as"),
    ("missing.py:f", "missing.py: no such file"),
])
def test_emit_bad_sources(work, source, message):
    result = invoke("emit", f"{work}/{source}")
    assert result.exit_code == 2
    assert message in error_line(result)


def test_emit_model_that_raises(work):
    result = invoke("emit", f"{work}/broken.py:loss")
    assert result.exit_code == 1
    assert error_line(result) == f"irgrad: error: {work}/broken.py: RuntimeError: boom at import"


def test_emit_model_that_fails_to_trace(work):
    result = invoke("emit", f"{work}/model.py:bad_trace")
    assert result.exit_code == 1
    assert error_line(result).endswith("model.py:bad_trace: ValueError: shapes do not fit")


def test_emit_needs_grad_for_with_value(work):
    result = invoke("emit", f"{work}/model.py:loss", "--with-value")
    assert result.exit_code == 2 and "--with-value and --wrt need --grad or --vjp" in error_line(result)


# ----- compile ---------------------------------------------------------------------------


def test_compile_summary(cpu_compile):
    result, out = cpu_compile
    lines = result.stdout.splitlines()
    assert re.match(rf"{re.escape(str(out))}: [\d,]+ bytes, llvm-cpu, cpu host, compiled in \d+\.\d\d s$", lines[0])
    assert "  loss(2x3xf32, 3xf32) -> (f32)" in lines
    assert "  loss_grad(2x3xf32, 3xf32) -> (d_arg0: 2x3xf32, d_arg1: 3xf32)" in lines
    assert "  loss_vjp(2x3xf32, 3xf32, d_result0: f32) -> (d_arg0: 2x3xf32, d_arg1: 3xf32)" in lines
    assert out.is_file() and Path(f"{out}.json").is_file()
    assert result.stderr == ""  # no progress output when not on a terminal


def test_compile_again_hits_the_cache(work, cpu_compile):
    out = work / "again.vmfb"
    result = invoke("compile", f"{work}/model.py:loss", "--grad", "--vjp", "-o", out)
    assert result.exit_code == 0 and "(from the memory cache)" in result.stdout
    assert out.read_bytes() == cpu_compile[1].read_bytes()


@pytest.mark.parametrize("args, message", [
    (["--target", "tpu"], "unknown target 'tpu'; allowed: llvm-cpu (cpu), vmvx, vulkan-spirv (vulkan), cuda, rocm"),
    (["--cuda-arch", "sm_90"], "--cuda-arch applies to target cuda only, not llvm-cpu"),
    (["--target", "vulkan", "--cpu", "generic"], "--cpu applies to target llvm-cpu only, not vulkan-spirv"),
    (["--target", "cuda", "--cuda-arch", "90"], "bad cuda_arch '90'"),
    (["--triple", "sparc-sun-solaris"], "bad triple"),
    (["--func", "f"], "--func needs --grad, --vjp, --jvp, --hessian or --train"),
])
def test_compile_usage_errors(work, tmp_path, args, message):
    out = tmp_path / "x.vmfb"
    result = invoke("compile", work / "f.mlir", "-o", out, *args)
    assert result.exit_code == 2
    assert message in error_line(result)
    assert not out.exists()


def test_compile_malformed_mlir(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @f(\n")
    result = invoke("compile", bad, "-o", tmp_path / "x.vmfb")
    assert result.exit_code == 1 and "invalid MLIR" in error_line(result)


def test_compile_missing_adjoint(work, tmp_path):
    result = invoke("compile", work / "custom_call.mlir", "--grad", "-o", tmp_path / "x.vmfb")
    assert result.exit_code == 1 and "stablehlo.custom_call" in error_line(result)


# ----- run -------------------------------------------------------------------------------


def test_round_trip_gradient(cpu_compile, tmp_path):
    _, artifact = cpu_compile
    gx, gw = loss_grads(X, W)
    result = cli("run", artifact, "--function", "loss_grad", "--input", spec(X), "--input", spec(W))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("EXEC @loss_grad\nresult[0]: d_arg0\n2x3xf32=[")  # named as inspect names it
    printed = printed_results(result.stdout)
    np.testing.assert_allclose(printed[0], gx.ravel(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(printed[1], gw, rtol=1e-5, atol=1e-6)

    # The same through .npy files, both inputs in one file, both results saved.
    with open(tmp_path / "xw.npy", "wb") as f:
        np.save(f, X)
        np.save(f, W)
    result = invoke("run", artifact, "-f", "loss_grad", "--input", f"@{tmp_path}/xw.npy",
                    "--output", f"@{tmp_path}/gx.npy", "--output", f"@{tmp_path}/gw.npy")
    assert result.exit_code == 0, result.output
    assert result.stdout == "EXEC @loss_grad\n"
    np.testing.assert_allclose(np.load(tmp_path / "gx.npy"), gx, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.load(tmp_path / "gw.npy"), gw, rtol=1e-5, atol=1e-7)


def test_run_vjp_and_partial_outputs(cpu_compile, tmp_path):
    _, artifact = cpu_compile
    gx, gw = loss_grads(X, W)
    # Fewer --output than results: the rest are printed.
    result = invoke("run", artifact, "-f", "loss_vjp", "-i", spec(X), "-i", spec(W), "-i", "f32=2",
                    "--output", f"@{tmp_path}/vx.npy")
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(np.load(tmp_path / "vx.npy"), 2 * gx, rtol=1e-5, atol=1e-7)
    assert "result[0]" not in result.stdout
    (printed,) = printed_results(result.stdout)
    np.testing.assert_allclose(printed, 2 * gw, rtol=1e-5, atol=1e-6)
    # '' skips a result, - prints it, + appends to a file.
    for _ in range(2):
        result = invoke("run", artifact, "-f", "loss", "-i", spec(X), "-i", spec(W), "--output", f"+{tmp_path}/l.npy")
        assert result.exit_code == 0, result.output
    with open(tmp_path / "l.npy", "rb") as f:
        assert np.load(f) == np.load(f)
    result = invoke("run", artifact, "-f", "loss_grad", "-i", spec(X), "-i", spec(W), "--output", "", "--output", "-")
    assert result.exit_code == 0 and "result[0]" not in result.stdout and "result[1]" in result.stdout


def test_run_on_another_device(mlir_artifact):
    a, b = np.array([0.0, 1.0, 2.0], np.float32), np.array([1.0, 2.0, 3.0], np.float32)
    result = invoke("run", mlir_artifact, "--function", "f_grad", "--device", "local-sync",
                    "--input", spec(a), "--input", spec(b), "--input", "i32=4")
    assert result.exit_code == 0, result.output
    da, db = printed_results(result.stdout)
    np.testing.assert_allclose(da, np.cos(a) * b, rtol=1e-5)
    np.testing.assert_allclose(db, np.sin(a), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("args, code, message", [
    (["-f", "loss", "-i", "2x3xf32=1", "-i", "2xf32=1"], 1, "loss argument 1: expected shape (3,), got (2,)"),
    (["-f", "loss", "-i", "2x3xf32=1", "-i", "3xf64=1"], 1, "loss argument 1: expected dtype float32, got float64"),
    (["-f", "loss", "-i", "2x3xf32=1"], 1, "loss expects 2 arguments, got 1"),
    (["-f", "loss", "-i", "2x3xf32=1,2"], 2, "bad --input '2x3xf32=1,2'"),
    (["-f", "loss", "-i", "2x3xf32=1", "-i", "3xf32=1", "--output", "a.npy"], 2, "bad --output 'a.npy'"),
    (["-f", "loss", "-i", "2x3xf32=1", "-i", "3xf32=1", "--output", "-", "--output", "-"], 2,
     "2 --output given, but loss returns 1 result"),
    (["-f", "nope"], 2, "no function 'nope'"),
    ([], 2, "has 3 functions; choose one with --function (loss, "),
    (["-f", "loss", "--device", "vulkan"], 1, "compiled for llvm-cpu and cannot run on 'vulkan'"),
])
def test_run_errors(cpu_compile, args, code, message):
    result = invoke("run", cpu_compile[1], *args)
    assert result.exit_code == code
    assert message in error_line(result)


def test_corrupt_artifact(cpu_compile, tmp_path):
    truncated = tmp_path / "truncated.vmfb"
    truncated.write_bytes(cpu_compile[1].read_bytes()[:600])
    garbage = tmp_path / "garbage.vmfb"
    garbage.write_bytes(b"not an artifact at all")
    for path in (truncated, garbage):
        for command in (["run", path, "-f", "loss"], ["inspect", path]):
            result = invoke(*command)
            assert result.exit_code == 1
            assert "not a valid IREE artifact (.vmfb)" in error_line(result)


def test_run_cuda_artifact(cuda_artifact):
    """Runs on an NVIDIA GPU where there is one; elsewhere fails in one line."""
    result = invoke("run", cuda_artifact, "-f", "loss_grad", "-i", spec(X), "-i", spec(W))
    if "cuda" in rt.available_drivers():
        assert result.exit_code == 0, result.output
        gx, gw = loss_grads(X, W)
        printed = printed_results(result.stdout)
        np.testing.assert_allclose(printed[0], gx.ravel(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(printed[1], gw, rtol=1e-5, atol=1e-6)
    else:
        assert result.exit_code == 1
        assert "cannot create a 'cuda' device" in error_line(result)


# ----- inspect / targets -----------------------------------------------------------------


def test_inspect_cuda_artifact(cuda_artifact):
    result = invoke("inspect", cuda_artifact)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "  loss_grad(2x3xf32, 3xf32) -> (d_arg0: 2x3xf32, d_arg1: 3xf32)" in out.splitlines()
    assert re.search(r"target: +cuda$", out, re.M)
    assert "cuda-nvptx-fb" in out and "--iree-cuda-target=sm_80" in out
    assert f"irgrad {irgrad.__version__}" in out and rt.compiler_version() in out


def test_inspect_without_sidecar_or_as_json(cuda_artifact, tmp_path):
    bare = tmp_path / "bare.vmfb"
    bare.write_bytes(cuda_artifact.read_bytes())  # the metadata is embedded too
    result = invoke("inspect", bare, "--json")
    assert result.exit_code == 0, result.output
    metadata = json.loads(result.stdout)
    assert metadata["target"] == "cuda"
    assert metadata["functions"]["loss_grad"]["outputs"] == [
        {"shape": [2, 3], "dtype": "float32"}, {"shape": [3], "dtype": "float32"}]


def test_inspect_missing_file(tmp_path):
    result = invoke("inspect", tmp_path / "nope.vmfb")
    assert result.exit_code == 2 and "no such file" in error_line(result)


def test_inspect_and_run_refuse_a_damaged_artifact(cpu_compile, tmp_path):
    """One line naming the file, exit 1, for bytes that no longer match the artifact's digest."""
    _, path = cpu_compile
    bad = bytearray(path.read_bytes())
    bad[-1] ^= 0x01  # the last hex digit of the digest itself
    damaged = tmp_path / "damaged.vmfb"
    damaged.write_bytes(bad)
    for args in (["inspect", damaged], ["run", damaged, "--function", "loss"]):
        result = invoke(*args)
        assert result.exit_code == 1, result.output
        assert f"{damaged}: not a valid IREE artifact (.vmfb): damaged: digest mismatch" in error_line(result)


def test_targets():
    result = invoke("targets")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert re.search(r"^  llvm-cpu \(alias cpu\) +flags: --cpu, --triple +runs on: local-task, local-sync$", out, re.M)
    assert re.search(r"^  vulkan-spirv \(alias vulkan\) ", out, re.M)
    assert re.search(r"^  cuda +flags: --cuda-arch ", out, re.M)
    assert re.search(r"^  rocm +flags: --rocm-arch ", out, re.M)
    devices = out.split("runtime devices here", 1)[1]
    assert re.search(r"^  local-task +available", devices, re.M)
    for driver in rt.available_drivers():
        assert re.search(rf"^  {driver} +available", devices, re.M)


# ----- irgrad cache ---------------------------------------------------------------------------

def test_cache_info_and_clear(tmp_path, monkeypatch):
    """irgrad cache info / clear: the folder, its entries, their size and the cap; exit 1 for a bad
    $IRGRAD_CACHE_SIZE, 2 for a bad command line."""
    cache = tmp_path / "cache"
    (cache / "iree-0.0.0").mkdir(parents=True)
    (cache / "iree-0.0.0" / "a.vmfb").write_bytes(b"x" * 2048)
    monkeypatch.setenv("IRGRAD_CACHE_DIR", str(cache))
    monkeypatch.delenv("IRGRAD_CACHE_SIZE", raising=False)
    info = cli("cache", "info")
    assert info.returncode == 0, info.stderr
    assert info.stdout.splitlines() == [
        f"location  {cache}", "entries   1 (iree-0.0.0: 1)", "size      2 KiB",
        "cap       2 GiB (2,147,483,648 bytes, the default; $IRGRAD_CACHE_SIZE sets it)"]
    monkeypatch.setenv("IRGRAD_CACHE_SIZE", "lots")
    bad = cli("cache", "info")
    assert bad.returncode == 1 and "bad IRGRAD_CACHE_SIZE 'lots'" in error_line(bad)
    monkeypatch.setenv("IRGRAD_CACHE_SIZE", "1G")
    assert "cap       1 GiB (1,073,741,824 bytes)" in cli("cache", "info").stdout
    cleared = cli("cache", "clear")
    assert cleared.returncode == 0 and cleared.stdout == f"{cache}: deleted 1 entry, 2 KiB freed\n"
    assert not list(cache.glob("iree-*/*.vmfb"))
    usage = cli("cache", "bogus")
    assert usage.returncode == 2 and "No such command 'bogus'" in error_line(usage)
    assert cli("cache").returncode == 0


# ----- shared options and exit codes (issue 33) ------------------------------------------------

@pytest.mark.parametrize("command", ["grad", "compile", "profile", "run", "viz"])
def test_func_and_function_are_one_option_everywhere(command):
    shown = invoke(command, "--help")
    assert shown.exit_code == 0
    assert "--func" in shown.stdout and "--function" in shown.stdout and "-f" in shown.stdout


@pytest.mark.parametrize("args", [
    ["grad", "{work}/f.mlir", "--wrt", "A"],                  # a --wrt name the module lacks
    ["grad", "{work}/f.mlir", "--function", "g"],            # a function name
    ["profile", "{work}/f.mlir", "--function", "ff"],
    ["emit", "{work}/model.py:los"],
])
def test_names_that_name_nothing_are_usage_errors(work, args):
    result = invoke(*[a.format(work=work) for a in args])
    assert result.exit_code == 2, result.output
    line = error_line(result)
    if args[-1] in ("ff", "los"):
        assert "did you mean" in line


# ----- a new user's first hour (issue 40, items 5 and 6) --------------------------------------

# A scalar loss of weights w and data x (and an integer, which is never a parameter).
LOSS = """
func.func @loss(%w: tensor<3xf32>, %x: tensor<3xf32>, %n: tensor<i32>) -> tensor<f32> {
  %0 = stablehlo.sine %w : tensor<3xf32>
  %1 = stablehlo.multiply %0, %x : tensor<3xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%1 init: %z) applies stablehlo.add across dimensions = [0]
       : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
  return %s : tensor<f32>
}
"""
LW = np.array([0.3, -1.2, 2.0], np.float32)
LX = np.array([1.5, 0.5, -0.7], np.float32)


@pytest.fixture(scope="module")
def loss_artifact(work) -> tuple[str, Path]:
    """LOSS compiled with --jvp, --hessian and --train sgd (no --wrt: an .mlir file's parameters
    are every float argument): (compile's stdout, the artifact)."""
    (work / "loss.mlir").write_text(LOSS)
    out = work / "loss.vmfb"
    result = invoke("compile", work / "loss.mlir", "--jvp", "--hessian", "--train", "sgd", "--lr", "0.5", "-o", out)
    assert result.exit_code == 0, result.output
    return result.stdout, out


def test_train_without_wrt_refuses_a_model_and_names_its_arguments(work, tmp_path):
    """A model.py's arguments mix data and weights: --train without --wrt is a usage error that
    lists them by index, name and type, and compiles nothing."""
    out = tmp_path / "t.vmfb"
    result = invoke("compile", f"{work}/model.py:loss", "--train", "sgd", "-o", out)
    assert result.exit_code == 2, result.output
    line = error_line(result)
    assert f"--train needs --wrt for {work}/model.py:loss" in line
    assert "loss's arguments: 0 arg0 (2x3xf32), 1 arg1 (3xf32)" in line
    assert not out.exists()
    named = work / "named.py"
    named.write_text("import irgrad as ig\n\n@ig.function(input_signature=[ig.TensorSpec([4], name='x'), "
                     "ig.TensorSpec([4], name='w')])\ndef loss(x, w):\n    return ig.reduce_sum(x * w)\n")
    result = invoke("compile", f"{named}:loss", "--train", "adam", "-o", out)
    assert result.exit_code == 2 and "0 x (4xf32), 1 w (4xf32)" in error_line(result)


def test_compile_shows_what_train_trains_and_adds_jvp_and_hessian(loss_artifact):
    """An .mlir file keeps the contract's default (every float argument), and compile says which
    arguments that was; --jvp and --hessian reach compile as they do grad."""
    stdout, _ = loss_artifact
    lines = stdout.splitlines()
    assert any(line.startswith("  loss_jvp(") for line in lines), stdout
    assert any(line.startswith("  loss_hessian(") for line in lines), stdout
    assert "training step loss_train_step: sgd, learning rate 0.5" in lines
    assert "  parameters: arg0 (arg 0), arg1 (arg 1)" in lines  # w and x: the floats, not the i32


def test_run_prints_results_by_name(loss_artifact):
    """irgrad run names each result as inspect does (h_arg0, t_result0...); the values are the
    Hessian blocks, the JVP and one SGD step of sum(sin(w) * x)."""
    _, artifact = loss_artifact
    hessian = invoke("run", artifact, "-f", "loss_hessian", "-i", spec(LW), "-i", spec(LX), "-i", "i32=0")
    assert hessian.exit_code == 0, hessian.output
    assert re.findall(r"^result\[\d\]: (\S+)$", hessian.stdout, re.M) == ["h_arg0", "h_arg1"]
    h_w, h_x = printed_results(hessian.stdout)
    np.testing.assert_allclose(h_w, np.diag(-np.sin(LW.astype(np.float64)) * LX).ravel(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h_x, 0.0, atol=1e-7)
    tw, tx = np.array([1.0, -2.0, 0.5], np.float32), np.array([0.25, 1.0, -1.0], np.float32)
    jvp = invoke("run", artifact, "-f", "loss_jvp", "-i", spec(LW), "-i", spec(LX), "-i", "i32=0",
                 "-i", spec(tw), "-i", spec(tx))
    assert jvp.exit_code == 0, jvp.output
    assert jvp.stdout.splitlines()[1] == "result[0]: hal.buffer_view"  # F's own result has no name
    value, tangent = printed_results(jvp.stdout)
    w64 = LW.astype(np.float64)
    np.testing.assert_allclose(value, [np.sum(np.sin(w64) * LX)], rtol=1e-5)
    np.testing.assert_allclose(tangent, [np.sum(np.cos(w64) * LX * tw + np.sin(w64) * tx)], rtol=1e-5)
    step = invoke("run", artifact, "-f", "loss_train_step", "-i", spec(LW), "-i", spec(LX), "-i", "i32=0",
                  "-i", "i32=0")
    assert step.exit_code == 0, step.output
    assert re.findall(r"^result\[\d\]: (\S+)$", step.stdout, re.M)[1:] == ["arg0", "arg1", "step"]
    _, new_w, new_x, _ = printed_results(step.stdout)
    np.testing.assert_allclose(new_w, w64 - 0.5 * np.cos(w64) * LX, rtol=1e-5)
    np.testing.assert_allclose(new_x, LX - 0.5 * np.sin(w64), rtol=1e-5)


def test_an_mlir_file_given_as_an_artifact_says_how_to_compile_it(work, tmp_path):
    """ig.load, irgrad inspect and irgrad run of MLIR (text or bytecode): one line saying what it
    is and how to compile it, not IREE's flatbuffer message."""
    bytecode = tmp_path / "m.mlirbc"
    bytecode.write_bytes(b"ML\xefR" + bytes(64))
    for path, kind in ((work / "f.mlir", "MLIR text"), (bytecode, "MLIR bytecode")):
        for args in (["inspect", path], ["run", path, "-f", "f"]):
            line = error_line(invoke(*args))
            assert f"{path}: this is {kind} (StableHLO), not a compiled artifact" in line
            assert "irgrad compile model.mlir -o model.vmfb" in line and "FlatBuffer" not in line
        with pytest.raises(irgrad.ArtifactError, match=f"this is {kind}.*ig.compile"):
            irgrad.load(path)


def test_profile_times_on_the_device_asked_for(work):
    result = invoke("profile", work / "f.mlir", "--device", "local-sync", "--top", "2")
    assert result.exit_code == 0, result.output
    assert "on local-sync:" in result.stdout and "local-task" not in result.stdout
    # Memory beside time: the estimate and the first call's measured peak.
    assert "estimated peak" in result.stdout and re.search(r"measured peak [\d.]+ (B|KiB|MiB)", result.stdout)
    bad = invoke("profile", work / "f.mlir", "--device", "cuda")
    assert bad.exit_code == 2
    assert "cannot profile llvm-cpu code on device 'cuda'; use local-task or local-sync" in error_line(bad)


def _options():
    """(command, click option) of every command's options, -h/--help and the global and cache
    commands' included, each command as the group hands it out when it runs."""
    import click
    import typer.main

    group = typer.main.get_command(app)
    ctx = click.Context(group)
    commands = [("irgrad", group), *((n, group.get_command(ctx, n)) for n in group.commands)]  # type: ignore[attr-defined]
    cache = group.get_command(ctx, "cache")  # type: ignore[attr-defined]
    commands += [(f"cache {n}", cache.get_command(ctx, n)) for n in cache.commands]
    return [(name, p) for name, command in commands for p in command.get_params(ctx) if p.param_type_name == "option"]


def test_help_shows_no_type_placeholders():
    """A flag shows no value (typer 0.29 would print <bool> beside a flag without metavar="") and
    an option's value has a name (not <str>); --func says what each command does with it."""
    options = _options()
    # every command has its -h/--help: irgrad, its commands, cache and its two
    assert sum("--help" in option.opts for _, option in options) == len(app.registered_commands) + 4
    for command, option in options:
        if option.is_flag:
            assert option.metavar == "", f"irgrad {command} {option.opts[0]}: flag(...) declares it"
        else:
            assert option.metavar, f"irgrad {command} {option.opts[0]} shows no metavar"
    helps = {command: option.help for command, option in _options() if "--func" in option.opts}
    assert "to call" in helps["run"] and "to profile" in helps["profile"] and "to draw" in helps["viz"]
    assert all("differentiate" not in helps[c] for c in ("run", "profile", "viz"))
    for command in ("compile", "run", "profile"):
        shown = invoke(command, "--help").stdout
        assert "<bool>" not in shown and "BOOLEAN" not in shown


def test_did_you_mean_offers_public_functions_only(tmp_path):
    """A private helper (ig.export's @irgrad.identity_f32 and the like) is nobody's --func."""
    module = tmp_path / "helper.mlir"
    module.write_text("""
func.func private @identity_helper(%a: tensor<2xf32>) -> tensor<2xf32> { return %a : tensor<2xf32> }
func.func @identity(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = func.call @identity_helper(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
""")
    line = error_line(invoke("grad", module, "--func", "identity_helpr"))
    assert "functions: @identity; did you mean @identity?" in line and "helper" not in line.split("functions:")[1]


def test_dir_of_irgrad_is_its_public_api():
    names = dir(irgrad)
    for leaked in ("TYPE_CHECKING", "annotations", "importlib", "logging", "frontend", "boundary", "tape"):
        assert leaked not in names
    assert not [n for n in names if n.startswith("_") and n != "__version__"]
    for public in ("function", "gradients", "load", "Module", "ArtifactError", "nn", "runtime", "passes", "newaxis"):
        assert public in names


def test_cache_size_zero_is_what_the_error_offers(tmp_path, monkeypatch):
    """$IRGRAD_CACHE_SIZE=0 keeps nothing, and the error for a bad value says 0 is allowed."""
    monkeypatch.setenv("IRGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("IRGRAD_CACHE_SIZE", "0")
    assert "cap       0 bytes (0 bytes)" in cli("cache", "info").stdout
    monkeypatch.setenv("IRGRAD_CACHE_SIZE", "-5")
    line = error_line(cli("cache", "info"))
    assert "allowed: 0 (keep nothing), a number of bytes, or a size such as 2G or 500M" in line


def test_git_ignores_artifacts_and_their_sidecars(tmp_path):
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(["git", "check-ignore", "--no-index", "build/m.vmfb", "build/m.vmfb.json"], cwd=root,
                          capture_output=True, text=True)
    assert done.stdout.split() == ["build/m.vmfb", "build/m.vmfb.json"], done.stderr


def test_the_runtime_only_install_has_inspect_and_run(cpu_compile, tmp_path):
    """irgrad-runtime (runtime-dist/: no compiler, no typer) installs an ``irgrad`` command with the
    artifact commands: inspect and run print what the full CLI prints; the others say what to install."""
    import zipfile

    from sites import build_runtime_wheel, runtime_only_site

    wheel = build_runtime_wheel(tmp_path / "wheel")
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in zipfile.ZipFile(wheel).namelist()
                                                    if n.endswith("entry_points.txt"))).decode()
    assert "irgrad = irgrad.artifact_cli:main" in entry_points
    site = runtime_only_site(tmp_path, ["iree-base-runtime", "numpy"], wheel=wheel)
    _, artifact = cpu_compile

    def device_cli(*args):
        code = f"import sys; sys.path.insert(0, {str(site)!r}); import runpy; runpy.run_module('irgrad', " \
               "run_name='__main__'); assert 'iree.compiler' not in sys.modules"
        return subprocess.run([sys.executable, "-I", "-S", "-c", code, *map(str, args)], capture_output=True,
                              text=True, timeout=300, env={"PATH": "/usr/bin:/bin"})

    inspected = device_cli("inspect", artifact)
    assert inspected.returncode == 0, inspected.stderr
    assert inspected.stdout == invoke("inspect", artifact).stdout
    ran = device_cli("run", artifact, "--function", "loss_grad", "-i", spec(X), "-i", spec(W))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == invoke("run", artifact, "--function", "loss_grad", "-i", spec(X), "-i", spec(W)).stdout
    missing = device_cli("compile", "m.mlir")
    assert missing.returncode == 2
    assert error_line(missing) == ("irgrad: error: irgrad compile needs irgrad's compiler: pip install irgrad "
                                   "(this install runs artifacts: inspect, run)")
    bad = device_cli("run", artifact, "-f", "los")
    assert bad.returncode == 2 and "no function 'los'" in error_line(bad) and "did you mean 'loss'?" in error_line(bad)
