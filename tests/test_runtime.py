"""irgrad.runtime: real IREE compiles and runs of small hand-written StableHLO modules."""

from __future__ import annotations

import io
import json
import os
import platform
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from irgrad import runtime as rt

# f: dot + tanh; two: the same and its sum (2 results); a private helper that
# must not be listed.
MLIR_F32 = """
func.func @f(%x: tensor<2x3xf32>, %w: tensor<3xf32>) -> tensor<2xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2xf32>
  %1 = stablehlo.tanh %0 : tensor<2xf32>
  return %1 : tensor<2xf32>
}
func.func @two(%x: tensor<2x3xf32>, %w: tensor<3xf32>) -> (tensor<2xf32>, tensor<f32>) {
  %0 = call @f(%x, %w) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %1 = stablehlo.reduce(%0 init: %z) applies stablehlo.add across dimensions = [0] : (tensor<2xf32>, tensor<f32>) -> tensor<f32>
  %2 = call @helper(%1) : (tensor<f32>) -> tensor<f32>
  return %0, %2 : tensor<2xf32>, tensor<f32>
}
func.func private @helper(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}
"""

# float64 exp, log, sin (sin is the op that IREE's embedded ELF cannot link).
MLIR_F64 = """
func.func @g(%x: tensor<4xf64>) -> tensor<4xf64> {
  %0 = stablehlo.sine %x : tensor<4xf64>
  %1 = stablehlo.exponential %x : tensor<4xf64>
  %2 = stablehlo.log %x : tensor<4xf64>
  %3 = stablehlo.multiply %0, %1 : tensor<4xf64>
  %4 = stablehlo.add %3, %2 : tensor<4xf64>
  return %4 : tensor<4xf64>
}
"""

# Integer, unsigned, bool, dynamic and 0-d types.
MLIR_TYPES = """
func.func @types(%b: tensor<4xi1>, %u: tensor<ui8>, %i: tensor<2xi32>, %d: tensor<?xf32>)
    -> (tensor<4xi1>, tensor<ui8>, tensor<2xi32>, tensor<?xf32>) {
  %0 = stablehlo.not %b : tensor<4xi1>
  %1 = stablehlo.add %u, %u : tensor<ui8>
  %2 = stablehlo.multiply %i, %i : tensor<2xi32>
  %3 = stablehlo.negate %d : tensor<?xf32>
  return %0, %1, %2, %3 : tensor<4xi1>, tensor<ui8>, tensor<2xi32>, tensor<?xf32>
}
"""

CUSTOM_CALL = """
func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @no_such_kernel(%x) : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
"""

X = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.25]], np.float32)
W = np.array([0.1, -0.2, 0.3], np.float32)
X64 = np.array([0.5, 1.0, 2.0, 3.5])


def f_ref(x, w):
    return np.tanh(x @ w)


def g_ref(x):
    return np.sin(x) * np.exp(x) + np.log(x)


@pytest.fixture(scope="module", autouse=True)
def cache_dir(isolated_cache_dir):
    return isolated_cache_dir


# Every (module, options) pair the tests compile more than trivially; compiled
# at once on a thread pool (iree-compile runs as a subprocess), after which the
# tests get them from the in-process cache.
PRECOMPILED = [
    (MLIR_F32, rt.CompileOptions()),
    (MLIR_F32, rt.CompileOptions(cpu="generic")),
    (MLIR_F32, rt.CompileOptions("cuda")),
    (MLIR_F32, rt.CompileOptions("rocm")),
    (MLIR_F32, rt.CompileOptions("vulkan")),
    (MLIR_F32, rt.CompileOptions("vmvx")),
    (MLIR_F32, rt.CompileOptions(triple="aarch64-linux-gnu")),
    (MLIR_F32, rt.CompileOptions(triple="riscv64-linux-gnu")),
    (MLIR_F64, rt.CompileOptions()),
    (MLIR_F64, rt.CompileOptions("vmvx")),
    (MLIR_TYPES, rt.CompileOptions()),
    (MLIR_TYPES, rt.CompileOptions("vulkan")),
    (MLIR_TYPES, rt.CompileOptions("vulkan", extra_flags=("--iree-vulkan-target=valhall",))),
]


@pytest.fixture(scope="module", autouse=True)
def precompiled(cache_dir):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        list(pool.map(lambda case: rt.compile(*case), PRECOMPILED))


@pytest.fixture(scope="module")
def cpu_artifact(precompiled):
    return rt.compile(MLIR_F32)


@pytest.fixture(scope="module")
def cpu_module(cpu_artifact):
    return rt.load(cpu_artifact.vmfb)


@pytest.fixture(scope="module")
def vulkan_module(precompiled):
    if "vulkan" not in rt.available_drivers():
        pytest.skip("no Vulkan device (install mesa-vulkan-drivers for lavapipe)")
    return rt.load(rt.compile(MLIR_F32, "vulkan").vmfb)


# ----- compile and run on the CPU -----


def test_cpu_run_matches_numpy(cpu_module):
    y = cpu_module["f"](X, W)
    assert type(y) is np.ndarray and y.dtype == np.float32 and y.shape == (2,)
    np.testing.assert_allclose(y, f_ref(X, W), rtol=1e-6)
    y2, total = cpu_module["two"](X, W)
    np.testing.assert_allclose(y2, f_ref(X, W), rtol=1e-6)
    assert type(total) is np.ndarray and total.shape == () and total.dtype == np.float32
    np.testing.assert_allclose(total, f_ref(X, W).sum(), rtol=1e-6)


def test_call_flat_returns_a_list(cpu_module):
    results = cpu_module["f"].call_flat(X, W)
    assert isinstance(results, list) and len(results) == 1
    assert len(cpu_module["two"].call_flat(X, W)) == 2


def test_functions_and_signatures(cpu_artifact, cpu_module):
    assert list(cpu_module.functions) == ["f", "two"]  # @helper is private
    assert repr(cpu_module.functions["f"]) == "f(2x3xf32, 3xf32) -> (2xf32)"
    assert repr(cpu_module.functions["two"]) == "two(2x3xf32, 3xf32) -> (2xf32, f32)"
    # A few dozen elements of work: the default device is local-sync (loader.default_driver).
    assert cpu_module.device == "local-sync" and cpu_module.target == "llvm-cpu"
    meta = cpu_artifact.metadata
    assert meta["functions"]["f"]["inputs"] == [
        {"shape": [2, 3], "dtype": "float32"},
        {"shape": [3], "dtype": "float32"},
    ]
    assert meta["target"] == "llvm-cpu" and meta["iree_compiler"] == rt.compiler_version()
    assert "--iree-input-demote-f64-to-f32=false" in meta["flags"]


def test_python_scalars_and_lists_are_converted(cpu_module):
    y = cpu_module["f"](X.tolist(), [0.1, -0.2, 0.3])
    np.testing.assert_allclose(y, f_ref(X, W), rtol=1e-6)
    y = cpu_module["f"](X, [1, 2, 3])  # ints fit float32
    np.testing.assert_allclose(y, f_ref(X, np.array([1, 2, 3], np.float32)), rtol=1e-6)


def test_dtypes_bool_unsigned_int_dynamic():
    m = rt.load(rt.compile(MLIR_TYPES).vmfb)
    assert repr(m.functions["types"]) == "types(4xi1, ui8, 2xi32, ?xf32) -> (4xi1, ui8, 2xi32, ?xf32)"
    b, u, i, d = m["types"]([True, False, True, False], 7, np.array([3, -4], np.int32), np.arange(5, dtype=np.float32))
    np.testing.assert_array_equal(b, [False, True, False, True])
    assert b.dtype == np.bool_
    assert u.dtype == np.uint8 and u.shape == () and u == 14
    np.testing.assert_array_equal(i, [9, 16])
    np.testing.assert_array_equal(d, -np.arange(5, dtype=np.float32))
    with pytest.raises(TypeError, match="argument 1"):
        m["types"]([True] * 4, 300, np.zeros(2, np.int32), np.zeros(1, np.float32))  # out of uint8 range


def test_vmvx_float64_matches_numpy():
    art = rt.compile(MLIR_F64, "vmvx")
    assert rt.executable_formats(art.vmfb) == ["vmvx-bytecode-fb"]
    m = rt.load(art.vmfb)
    assert m.device == "local-task"
    y = m["g"](X64)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, g_ref(X64), rtol=1e-13)


def test_llvm_cpu_float64_sine_links_as_system_library():
    art = rt.compile(MLIR_F64)
    assert "--iree-llvmcpu-link-embedded=false" in art.metadata["flags"]
    assert rt.executable_formats(art.vmfb)[0].startswith("system-elf-")
    y = rt.load(art.vmfb)["g"](X64)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, g_ref(X64), rtol=1e-13)


def test_float64_sine_without_system_linking_says_so():
    options = rt.CompileOptions(triple="aarch64-none-elf")  # not Linux: embedded ELF only
    with pytest.raises(rt.CompileError) as info:
        rt.compile(MLIR_F64, options, cache=False)
    message = str(info.value)
    assert "f64 sine is not supported by IREE 3.13's llvm-cpu backend" in message
    assert "use target vmvx or float32" in message
    assert "\n" not in message


# ----- caches -----


def test_memory_cache_hit(cpu_artifact):
    before = rt.cache_stats()
    again = rt.compile(MLIR_F32)
    assert again.cached == "memory" and again.vmfb == cpu_artifact.vmfb
    assert again.metadata == cpu_artifact.metadata
    after = rt.cache_stats()
    assert after["memory_hits"] == before["memory_hits"] + 1
    assert after["compiles"] == before["compiles"]
    fresh = rt.compile(MLIR_F32, cache=False)
    assert fresh.cached is None and rt.cache_stats()["compiles"] == after["compiles"] + 1


def test_cache_key_includes_options():
    host = rt.compile(MLIR_F32)
    generic = rt.compile(MLIR_F32, rt.CompileOptions(cpu="generic"))
    assert generic.metadata["flags"] != host.metadata["flags"]
    assert "--iree-llvmcpu-target-cpu=generic" in generic.metadata["flags"]


def test_disk_cache_hit(cache_dir):
    text = MLIR_F32 + "// disk cache test\n"
    first = rt.compile(text)
    assert first.cached is None
    entries = list(rt.cache_dir().glob("*.vmfb"))
    assert rt.cache_dir().parent == cache_dir and entries
    rt.clear_memory_cache()
    second = rt.compile(text)
    assert second.cached == "disk" and second.vmfb == first.vmfb
    assert second.metadata["functions"] == first.metadata["functions"]
    assert not [p for p in rt.cache_dir().iterdir() if p.name.endswith(".tmp")]


def test_two_processes_share_the_disk_cache(tmp_path):
    script = textwrap.dedent(
        f"""
        from irgrad import runtime as rt
        art = rt.compile({MLIR_F32 + "// concurrent"!r})
        print(len(art.vmfb))
        """
    )
    env = {**os.environ, "IRGRAD_CACHE_DIR": str(tmp_path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outputs[0] == outputs[1]
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == 1 and files[0].suffix == ".vmfb"
    rt.load(files[0].read_bytes())


# ----- argument checks -----


def test_wrong_argument_count(cpu_module):
    with pytest.raises(TypeError, match=r"^f expects 2 arguments, got 3$"):
        cpu_module["f"](X, W, W)
    with pytest.raises(TypeError, match=r"^f expects 2 arguments, got 1$"):
        cpu_module["f"](X)


def test_wrong_shape(cpu_module):
    with pytest.raises(ValueError, match=r"argument 1: expected shape \(3,\), got \(4,\)"):
        cpu_module["f"](X, np.zeros(4, np.float32))


def test_wrong_dtype(cpu_module):
    with pytest.raises(TypeError, match="argument 0: expected dtype float32, got float64"):
        cpu_module["f"](X.astype(np.float64), W)


def test_unconvertible_python_values(cpu_module):
    with pytest.raises(TypeError, match="argument 1"):
        cpu_module["f"](X, ["a", "b", "c"])


def test_unknown_function(cpu_module):
    with pytest.raises(KeyError, match="available: f, two"):
        cpu_module["nope"]


# ----- options -----


def test_unknown_target_lists_allowed_values():
    with pytest.raises(ValueError) as info:
        rt.CompileOptions(target="tpu")
    for name in ("llvm-cpu", "cpu", "vmvx", "vulkan-spirv", "vulkan", "cuda", "rocm"):
        assert name in str(info.value)


@pytest.mark.parametrize(
    "field, value, allowed",
    [
        ("cpu", "not a cpu", "host, generic"),
        ("triple", "mips-linux-gnu", "x86_64, aarch64, riscv64"),
        ("cuda_arch", "80", "sm_80"),
        ("rocm_arch", "mi300", "gfx942"),
        ("extra_flags", ("oops",), "starting with '-'"),
    ],
)
def test_bad_option_values(field, value, allowed):
    with pytest.raises(ValueError, match=allowed):
        rt.CompileOptions(**{field: value})


def test_aliases_and_flags():
    assert rt.CompileOptions(target="cpu").target is rt.Target.LLVM_CPU
    assert rt.CompileOptions(target="vulkan").target is rt.Target.VULKAN_SPIRV
    flags = rt.CompileOptions().flags()
    assert "--iree-hal-target-backends=llvm-cpu" in flags
    assert "--iree-input-demote-f64-to-f32=false" in flags
    assert "--iree-llvmcpu-target-cpu=host" in flags
    cross = rt.CompileOptions(triple="aarch64-linux-gnu").flags()
    assert "--iree-llvmcpu-target-triple=aarch64-linux-gnu" in cross
    assert "--iree-llvmcpu-target-cpu=generic" in cross  # "host" makes no sense there
    assert "--iree-cuda-target=sm_86" in rt.CompileOptions("cuda", cuda_arch="sm_86").flags()
    # IREE 3.13 has no sm_90 target description: Hopper gets sm_80 PTX (JIT-compiled at load).
    hopper = rt.CompileOptions("cuda", cuda_arch="sm_90")
    assert "--iree-cuda-target=sm_80" in hopper.flags() and hopper.cuda_arch == "sm_90"
    assert "cuda-nvptx-fb" in rt.executable_formats(rt.compile(MLIR_F32, hopper).vmfb)
    assert "--iree-rocm-target=gfx90a" in rt.CompileOptions("rocm", rocm_arch="gfx90a").flags()
    assert rt.CompileOptions(extra_flags=["--foo"]).flags()[-1] == "--foo"


# ----- MLIR and compile errors -----


def test_malformed_mlir():
    bad = "func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {\n  %0 = stablehlo.sine %x : tensor<4xf32>\n"
    with pytest.raises(rt.IRParseError) as info:
        rt.compile(bad)
    assert isinstance(info.value, ValueError)
    assert "\n" not in str(info.value) and "line 2" in str(info.value)
    with pytest.raises(rt.IRParseError):
        rt.parse_signatures("not mlir at all")


def test_runtime_compile_applies_the_iree_workarounds():
    """The one compile path: rt.compile itself rewrites IREE 3.13's NaN for a negative base
    with an integral exponent (passes/lowering/legalize.py), as ig.compile does."""
    text = """func.func @main(%x: tensor<3xf32>, %y: tensor<3xf32>) -> tensor<3xf32> {
      %0 = stablehlo.power %x, %y : tensor<3xf32>
      return %0 : tensor<3xf32>
    }"""
    m = rt.load(rt.compile(text, cache=False).vmfb)
    out = m["main"](np.array([-2.0, -3.0, 0.0], np.float32), np.array([3.0, 2.0, 0.0], np.float32))
    np.testing.assert_array_equal(np.asarray(out), [-8.0, 9.0, 1.0])


def test_a_loop_counter_made_float64_on_the_host_compiles_exactly():
    """A scalar int -> f64 convert that IREE places on the host (a counter of an outer loop
    bounding an inner loop) has no VM lowering ('arith.sitofp'); passes/lowering/legalize.py converts
    it through float32 (32-bit values in 16-bit halves), exactly."""
    def program(ty: str) -> str:
        return f"""func.func @main(%n: tensor<{ty}>) -> tensor<f64> {{
          %c0 = stablehlo.constant dense<0> : tensor<i32>
          %c1 = stablehlo.constant dense<1> : tensor<i32>
          %c2 = stablehlo.constant dense<2> : tensor<i32>
          %z = stablehlo.constant dense<0.0> : tensor<f64>
          %r:2 = stablehlo.while(%k = %c0, %acc = %z) : tensor<i32>, tensor<f64>
          cond {{
            %p = stablehlo.compare LT, %k, %c2, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
            stablehlo.return %p : tensor<i1>
          }} do {{
            %kn = stablehlo.convert %k : (tensor<i32>) -> tensor<{ty}>
            %nk = stablehlo.add %n, %kn : tensor<{ty}>
            %f = stablehlo.convert %nk : (tensor<{ty}>) -> tensor<f64>
            %in = stablehlo.while(%u = %acc) : tensor<f64>
            cond {{
              %q = stablehlo.compare LT, %u, %f, FLOAT : (tensor<f64>, tensor<f64>) -> tensor<i1>
              stablehlo.return %q : tensor<i1>
            }} do {{
              stablehlo.return %f : tensor<f64>
            }}
            %s = stablehlo.add %in, %f : tensor<f64>
            %k2 = stablehlo.add %k, %c1 : tensor<i32>
            stablehlo.return %k2, %s : tensor<i32>, tensor<f64>
          }}
          return %r#1 : tensor<f64>
        }}"""
    for ty, dtype, values in (("i32", np.int32, [0, -1, 65535, -65537, 2**31 - 2, -2**31, 123456789]),
                              ("i16", np.int16, [-32768, 32766])):
        m = rt.load(rt.compile(program(ty), cache=False).vmfb)
        for v in values:
            acc = 0.0
            for k in range(2):
                f = float(v + k)
                acc = (f if acc < f else acc) + f
            assert float(m["main"](dtype(v))) == acc, (ty, v)


@pytest.mark.parametrize("batch, m, n, k, is_float, width", [
    (1, 200, 200, 200, True, 256),    # +28 % work for a 2× faster kernel
    (1, 1000, 1000, 1000, True, 1024),
    (1, 200, 150, 200, True, 192),
    (1, 500, 90, 500, True, 96),      # 128 would add 42 %: the next multiple of 16
    (1, 200, 208, 200, True, 208),    # already a multiple of 16
    (1, 64, 100, 64, True, 100),      # too small to pay for the two copies
    (1, 8, 1000, 1000, True, 1000),   # too few rows
    (1, 200, 200, 200, False, 200),   # integers
    (4, 100, 200, 60, True, 256),     # batched work counts
])
def test_matmul_width(batch, m, n, k, is_float, width):
    from irgrad.passes.lowering import choices

    assert choices.matmul_width(batch, m, n, k, is_float) == width


def test_narrow_matmuls_are_computed_wide_with_the_same_result():
    """A dot_general 200 wide (and a batched one whose rhs is transposed) is compiled as the
    256-wide product of a zero-padded rhs, sliced back (passes/lowering/legalize.py): same values."""
    from irgrad.passes.lowering.legalize import legalize_text

    text = """func.func @mm(%a: tensor<200x200xf32>, %b: tensor<200x200xf32>) -> tensor<200x200xf32> {
      %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<200x200xf32>, tensor<200x200xf32>) -> tensor<200x200xf32>
      return %0 : tensor<200x200xf32>
    }
    func.func @bmm(%a: tensor<2x100x120xf32>, %b: tensor<2x200x120xf32>) -> tensor<2x100x200xf32> {
      %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<2x100x120xf32>, tensor<2x200x120xf32>) -> tensor<2x100x200xf32>
      return %0 : tensor<2x100x200xf32>
    }"""
    legal = legalize_text(text)
    assert legal.count("stablehlo.pad") == 2 and "tensor<200x256xf32>" in legal and "tensor<2x256x120xf32>" in legal
    assert legal.count("stablehlo.slice") == 2
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((200, 200), np.float32), rng.standard_normal((200, 200), np.float32)
    ba, bb = rng.standard_normal((2, 100, 120), np.float32), rng.standard_normal((2, 200, 120), np.float32)
    m = rt.load(rt.compile(text).vmfb)
    np.testing.assert_allclose(m["mm"](a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(m["bmm"](ba, bb), np.einsum("bmk,bnk->bmn", ba.astype(np.float64), bb),
                               rtol=1e-4, atol=1e-4)


def test_compile_error_is_one_line_and_saves_the_ir():
    with pytest.raises(rt.CompileError) as info:
        rt.compile(CUSTOM_CALL, cache=False)
    error = info.value
    assert isinstance(error, RuntimeError)
    message = str(error)
    assert "\n" not in message and "error:" in message and "stablehlo.custom_call" in message
    assert error.path and f"{error.path}:3:" in message  # location points into the saved copy
    with open(error.path) as f:
        assert f.read() == CUSTOM_CALL


# ----- artifacts on disk -----


def test_save_and_load_round_trip(cpu_artifact, tmp_path):
    path = cpu_artifact.save(tmp_path / "model.vmfb")
    assert path.read_bytes() == cpu_artifact.vmfb
    sidecar = json.loads((tmp_path / "model.vmfb.json").read_text())
    assert sidecar["target"] == "llvm-cpu" and "f" in sidecar["functions"]
    assert sidecar["iree_compiler"] == rt.compiler_version()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.vmfb", "model.vmfb.json"]
    m = rt.load(str(path))
    np.testing.assert_allclose(m["f"](X, W), f_ref(X, W), rtol=1e-6)


def test_damaged_artifact_is_refused_by_its_digest(cpu_artifact, tmp_path):
    """A byte flipped where the zip's own CRCs do not look (a local header's alignment
    padding) is caught by the digest irgrad seals every artifact with; the message names
    the file. The undamaged bytes load (iree-run-module runs sealed artifacts: test_targets)."""
    import struct
    import zipfile

    vmfb = cpu_artifact.vmfb
    assert re.search(rb"irgrad-sha256:[0-9a-f]{64}$", vmfb)
    name, extra = struct.unpack("<HH", vmfb[26:30])
    assert extra > 0
    bad = bytearray(vmfb)
    bad[30 + name + extra - 1] ^= 0xFF
    with zipfile.ZipFile(io.BytesIO(bytes(bad))) as archive:
        assert archive.testzip() is None  # the CRCs alone would let it through
    path = tmp_path / "model.vmfb"
    path.write_bytes(bad)
    with pytest.raises(rt.ArtifactError) as info:
        rt.load(path)
    assert str(info.value) == f"{path}: not a valid IREE artifact (.vmfb): damaged: digest mismatch"
    with pytest.raises(rt.ArtifactError, match="damaged: digest mismatch"):
        rt.load(bytes(bad))
    np.testing.assert_allclose(rt.load(vmfb)["f"](X, W), f_ref(X, W), rtol=1e-6)


def test_bare_bytes_describe_themselves(cpu_artifact):
    m = rt.load(cpu_artifact.vmfb)
    assert repr(m.functions["two"]) == "two(2x3xf32, 3xf32) -> (2xf32, f32)"
    assert m.metadata["target"] == "llvm-cpu"
    assert m.metadata["iree_compiler"] == rt.compiler_version()


def test_foreign_vmfb_signatures_from_iree_declaration():
    import iree.compiler as ic

    vmfb = ic.compile_str(
        MLIR_TYPES,
        target_backends=["llvm-cpu"],
        input_type="stablehlo",
        extra_args=["--iree-llvmcpu-target-cpu=host"],
    )
    m = rt.load(vmfb)
    assert repr(m.functions["types"]) == "types(4xi1, ui8, 2xi32, ?xf32) -> (4xi1, ui8, 2xi32, ?xf32)"
    assert m.target == "llvm-cpu"  # inferred from the executable format
    assert m["types"]([True] * 4, 1, [1, 2], [1.0])[1] == 2


@pytest.mark.parametrize("damage", ["garbage", "empty", "half", "tail", "flipped"])
def test_corrupt_or_truncated_artifact(cpu_artifact, tmp_path, damage):
    data = cpu_artifact.vmfb
    broken = {
        "garbage": b"not a vmfb " * 20,
        "empty": b"",
        "half": data[: len(data) // 2],
        "tail": data[:-100],  # cuts into the executables, past the module flatbuffer
        "flipped": data[:-600] + bytes([data[-600] ^ 0xFF]) + data[-599:],
    }[damage]
    path = tmp_path / "broken.vmfb"
    path.write_bytes(broken)
    for source in (broken, path):
        with pytest.raises(rt.ArtifactError, match="not a valid IREE artifact"):
            rt.load(source)
    assert issubclass(rt.ArtifactError, ValueError)


def test_artifact_from_another_iree_version(tmp_path):
    import iree.compiler as ic

    # Sidecar of a .vmfb that does not describe itself.
    vmfb = ic.compile_str(MLIR_F32, target_backends=["vmvx"], input_type="stablehlo")
    (tmp_path / "old.vmfb").write_bytes(vmfb)
    (tmp_path / "old.vmfb.json").write_text(json.dumps({"target": "vmvx", "iree_compiler": "3.11.0"}))
    with pytest.raises(rt.ArtifactError, match="3.11.0"):
        rt.load(tmp_path / "old.vmfb")
    # Metadata embedded in the artifact itself.
    info = json.dumps({"target": "vmvx", "iree_compiler": "2.9.1"})
    reflection = f'{{iree.reflection = {{"irgrad.artifact" = {json.dumps(info)}}}}}'
    text = MLIR_F32.replace("-> tensor<2xf32> {", f"-> tensor<2xf32> attributes {reflection} {{", 1)
    vmfb = ic.compile_str(text, target_backends=["vmvx"], input_type="stablehlo")
    with pytest.raises(rt.ArtifactError, match="2.9.1"):
        rt.load(vmfb)


# ----- devices -----


def test_drivers_and_targets():
    drivers = rt.available_drivers()
    assert "local-task" in drivers and "local-sync" in drivers
    assert [t.name for t in rt.targets()] == ["llvm-cpu", "vmvx", "vulkan-spirv", "cuda", "rocm"]
    assert rt.probe_drivers()["local-task"].ok


def test_explicit_cpu_device(cpu_artifact):
    m = rt.load(cpu_artifact.vmfb, device="local-sync")
    assert m.device == "local-sync"
    np.testing.assert_allclose(m["f"](X, W), f_ref(X, W), rtol=1e-6)


def test_device_errors(cpu_artifact):
    with pytest.raises(rt.DeviceError, match="local-task"):
        rt.load(cpu_artifact.vmfb, device="no-such-driver")
    with pytest.raises(rt.DeviceError, match="cannot run on 'vulkan'"):
        rt.load(cpu_artifact.vmfb, device="vulkan")
    assert issubclass(rt.DeviceError, RuntimeError)


def test_missing_gpu_device_lists_available_drivers():
    if "cuda" in rt.available_drivers():
        pytest.skip("this machine has a CUDA device")
    art = rt.compile(MLIR_F32, "cuda")
    with pytest.raises(rt.DeviceError, match="available here: .*local-task"):
        rt.load(art.vmfb)


# ----- artifacts for other machines -----

HOST_ELF = {"x86_64": "embedded-elf-x86_64", "aarch64": "embedded-elf-arm_64", "arm64": "embedded-elf-arm_64"}


def elf_machines(vmfb: bytes) -> set[int]:
    """e_machine of every ELF image inside an artifact (62 x86-64, 183 AArch64, 243 RISC-V)."""
    machines, start = set(), 0
    while (start := vmfb.find(b"\x7fELF", start)) >= 0:
        machines.add(int.from_bytes(vmfb[start + 18 : start + 20], "little"))
        start += 4
    return machines


@pytest.mark.parametrize(
    "options, formats",
    [
        (rt.CompileOptions("cuda"), ["cuda-nvptx-fb"]),
        (rt.CompileOptions("rocm"), ["rocm-hsaco-fb"]),
        (rt.CompileOptions("vulkan"), ["vulkan-spirv-fb"]),
        (rt.CompileOptions("vmvx"), ["vmvx-bytecode-fb"]),
        (rt.CompileOptions(), [HOST_ELF.get(platform.machine(), "?")]),
        (rt.CompileOptions(triple="aarch64-linux-gnu"), ["embedded-elf-arm_64"]),
        (rt.CompileOptions(triple="riscv64-linux-gnu"), ["embedded-elf-riscv_64"]),
    ],
    ids=["cuda", "rocm", "vulkan", "vmvx", "host", "aarch64", "riscv64"],
)
def test_executable_formats(options, formats):
    art = rt.compile(MLIR_F32, options)
    assert rt.executable_formats(art.vmfb) == formats
    assert art.target == options.target.value == art.metadata["target"]
    if options.triple == "aarch64-linux-gnu":
        assert elf_machines(art.vmfb) == {183}
    if options.triple == "riscv64-linux-gnu":
        assert elf_machines(art.vmfb) == {243}


# ----- GPUs -----


@pytest.mark.vulkan
def test_vulkan_matches_cpu(vulkan_module, cpu_module):
    assert vulkan_module.device == "vulkan"
    y = vulkan_module["f"](X, W)
    assert type(y) is np.ndarray
    np.testing.assert_allclose(y, cpu_module["f"](X, W), rtol=1e-5)
    y2, total = vulkan_module["two"](X, W)
    cpu_y2, cpu_total = cpu_module["two"](X, W)
    np.testing.assert_allclose(y2, cpu_y2, rtol=1e-5)
    assert type(total) is np.ndarray and total.shape == ()
    np.testing.assert_allclose(total, cpu_total, rtol=1e-5)


@pytest.mark.parametrize("driver", ["local-task", "vulkan"])
def test_a_device_lives_while_something_loaded_on_it_does(driver, precompiled):
    """One device per driver, shared by the modules loaded on it, destroyed with the last of
    them (and a DeviceTensor): IREE's Vulkan driver on lavapipe polls its queues, so an idle
    Vulkan device held for the process's life kept a whole core busy (the test suite's fleet
    tests ran at half speed after the first Vulkan test)."""
    import gc

    from irgrad.runtime import devices

    if driver not in rt.available_drivers():
        pytest.skip(f"no {driver} device")
    devices._devices.pop(driver, None)  # a device of its own, whatever other tests still hold
    gc.collect()
    threads = len(os.listdir("/proc/self/task"))
    target = "vulkan" if driver == "vulkan" else "llvm-cpu"
    a = rt.load(rt.compile(MLIR_F32, target).vmfb, device=driver)
    b = rt.load(rt.compile(MLIR_F32, target).vmfb, device=driver)
    assert a._device is b._device is devices.get_device(driver)
    loaded = len(os.listdir("/proc/self/task"))
    assert loaded > threads  # the device's own threads
    x = a.put(X)
    del a, b
    gc.collect()
    assert driver in devices._devices  # the tensor holds it
    np.testing.assert_allclose(x.numpy(), X)
    del x
    gc.collect()
    assert driver not in devices._devices
    assert len(os.listdir("/proc/self/task")) < loaded  # and they are gone


@pytest.mark.vulkan
def test_vulkan_odd_sized_8bit_inputs_are_refused_on_the_portable_target(vulkan_module):
    """IREE 3.13's portable Vulkan target (32-bit storage only) reads 8-bit inputs whose byte
    size is not a multiple of 4 wrongly (checked on lavapipe): the loader refuses them
    instead of returning wrong numbers."""
    m = rt.load(rt.compile(MLIR_TYPES, "vulkan").vmfb)
    with pytest.raises(ValueError, match="portable Vulkan target"):
        m["types"]([True, False, True, False], 7, [1, 2], [1.0])


@pytest.mark.vulkan
def test_gpu_results_come_back_through_kept_staging_buffers(vulkan_module, cpu_module):
    """A GPU's results are copied through host-visible staging buffers, all queued and waited
    for once; the buffers are kept by size and reused by the next call, whose numbers are its own."""
    two = vulkan_module["two"]
    two._staging.clear()  # (the module is shared with other tests)
    for scale in (1.0, -2.0, 0.5):
        y, total = two(X * scale, W)
        want_y, want_total = cpu_module["two"](X * scale, W)
        np.testing.assert_allclose(y, want_y, rtol=1e-5)
        np.testing.assert_allclose(total, want_total, rtol=1e-5)
    # one 8-byte result (tensor<2xf32>) and one 4-byte (tensor<f32>), each buffer back in the pool
    assert sorted((size, len(kept)) for size, kept in two._staging.items()) == [(4, 1), (8, 1)]


@pytest.mark.vulkan
def test_vulkan_8bit_tensors_with_an_8bit_storage_target(vulkan_module):
    options = rt.CompileOptions("vulkan", extra_flags=("--iree-vulkan-target=valhall",))
    m = rt.load(rt.compile(MLIR_TYPES, options).vmfb)
    b, u, i, d = m["types"]([True, False, True, False], 7, [3, -4], [1.0, 2.0])
    np.testing.assert_array_equal(b, [False, True, False, True])
    assert u == 14
    np.testing.assert_array_equal(i, [9, 16])
    np.testing.assert_array_equal(d, [-1.0, -2.0])


@pytest.mark.cuda
def test_cuda_matches_cpu(cpu_module):
    if "cuda" not in rt.available_drivers():
        pytest.skip("no CUDA device here")
    m = rt.load(rt.compile(MLIR_F32, "cuda").vmfb)
    assert m.device == "cuda"
    np.testing.assert_allclose(m["f"](X, W), cpu_module["f"](X, W), rtol=1e-5)
    y2, total = m["two"](X, W)
    np.testing.assert_allclose(total, cpu_module["two"](X, W)[1], rtol=1e-5)


def test_loading_a_system_linked_artifact_leaves_nothing_in_tmpdir(tmp_path):
    """float64 math links against the system libm, so IREE dlopens the executable from a
    file it writes to $TMPDIR; reloading must not leave those files behind."""
    import irgrad as ig

    f = ig.function(lambda x: ig.cos(x) * 3.0, input_signature=[ig.TensorSpec([3], ig.float64)])
    artifact = ig.compile(f.lower())
    assert b"system-elf-" in artifact.vmfb
    path = artifact.save(tmp_path / "f.vmfb")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    script = ("import numpy as np, irgrad as ig\n"
              f"for _ in range(3):\n    m = ig.load({str(path)!r})\n"
              "    print(m[list(m.functions)[0]](np.ones(3))[0])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "TMPDIR": str(scratch)}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [float(v) for v in done.stdout.split()] == pytest.approx([3 * np.cos(1.0)] * 3)
    assert list(scratch.iterdir()) == []


def test_the_default_cpu_device_follows_the_work():
    """Little work runs on local-sync (no worker wake-ups per call), much on local-task's threads;
    a run-time dimension counts as RUN_TIME_SIZE; an artifact whose work is unknown (built
    before irgrad recorded it) keeps local-task."""
    small = rt.compile(MLIR_F32)
    assert 0 < small.metadata["work"] <= rt.loader.SYNC_WORK
    assert rt.load(small.vmfb).device == "local-sync"
    big = rt.compile("""
func.func @mm(%a: tensor<512x512xf32>) -> tensor<512x512xf32> {
  %r = stablehlo.dot_general %a, %a, contracting_dims = [1] x [0] : (tensor<512x512xf32>, tensor<512x512xf32>) -> tensor<512x512xf32>
  return %r : tensor<512x512xf32>
}""")
    assert big.metadata["work"] > rt.loader.SYNC_WORK  # 512² elements + 512³ multiply-adds / 32
    module = rt.load(big.vmfb)
    assert module.device == "local-task"
    a = np.eye(512, dtype=np.float32)
    np.testing.assert_array_equal(module["mm"](a), a)
    assert big.metadata["kernels"] == 1 and small.metadata["kernels"] == 2  # a dot_general, a reduce
    # Little work per kernel (a call of many small kernels, each a wake-up on local-task) stays on
    # local-sync; past SYNC_KERNELS kernels, the work must be small outright.
    work = 3 * rt.loader.SYNC_WORK
    assert rt.loader.default_driver({"target": "llvm-cpu", "work": work, "kernels": 1}) == "local-task"
    assert rt.loader.default_driver({"target": "llvm-cpu", "work": work, "kernels": 3}) == "local-sync"
    assert rt.loader.default_driver({"target": "llvm-cpu", "work": 100 * rt.loader.SYNC_WORK,
                                     "kernels": 1000}) == "local-task"
    assert rt.loader.default_driver({"target": "llvm-cpu", "work": work}) == "local-task"  # built before "kernels"
    assert rt.loader.default_driver({"target": "llvm-cpu", "work": None}) == "local-task"
    dynamic = rt.compile("""
func.func @f(%a: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %r = stablehlo.tanh %a : tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}""")
    assert dynamic.metadata["work"] == rt.compiler.RUN_TIME_SIZE * 8
    assert rt.load(dynamic.vmfb).device == "local-sync"
    assert rt.loader.default_driver({"target": "vmvx", "work": 1.0}) == "local-task"
    assert rt.load(small.vmfb, device="local-task").device == "local-task"  # an explicit choice stands


def test_an_argument_the_function_never_reads_is_checked_but_not_copied(tmp_path):
    """The compiler records arguments with no use; a call checks them like any other and
    passes one placeholder buffer of their shape instead of copying them each time."""
    artifact = rt.compile("""
func.func @f(%x: tensor<3xf32>, %unused: tensor<4x4xf32>, %y: tensor<3xf32>) -> tensor<3xf32> {
  %r = stablehlo.add %x, %y : tensor<3xf32>
  return %r : tensor<3xf32>
}""")
    assert artifact.metadata["unused"] == {"f": [1]}
    path = tmp_path / "f.vmfb"
    artifact.save(path)
    for module in (rt.load(artifact.vmfb), rt.load(path)):
        assert module.metadata["unused"] == {"f": [1]}
        f = module["f"]
        x, y = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
        np.testing.assert_array_equal(f(x, np.full((4, 4), 7, np.float32), y), x + 1)
        kept = f._placeholders[1][1]
        np.testing.assert_array_equal(f(x, np.zeros((4, 4), np.float32), 2 * y), x + 2)
        assert f._placeholders[1][1] is kept
        with pytest.raises(ValueError, match=r"argument 1: expected shape \(4, 4\)"):
            f(x, np.zeros((4, 5), np.float32), y)
        with pytest.raises(TypeError, match="argument 1: expected dtype float32"):
            f(x, np.zeros((4, 4), np.int32), y)


_FAULTS = r"""
import resource, sys
import numpy as np
from irgrad import runtime as rt
from irgrad.runtime import devices
# 8M floats in, two 32 MB intermediates IREE allocates as transients and frees each call.
m = rt.load(rt.compile('''
func.func @f(%x: tensor<8388608xf32>) -> tensor<f32> {
  %t = stablehlo.tanh %x : tensor<8388608xf32>
  %s = stablehlo.sine %x : tensor<8388608xf32>
  %u = stablehlo.multiply %t, %s : tensor<8388608xf32>
  %e = stablehlo.exponential %u : tensor<8388608xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce(%e init: %z) applies stablehlo.maximum across dimensions = [0] : (tensor<8388608xf32>, tensor<f32>) -> tensor<f32>
  return %r : tensor<f32>
}''').vmfb, device="local-sync")
x = np.linspace(-1, 1, 8388608, dtype=np.float32)
m["f"](x)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    m["f"](x)
print(devices.keep_freed_memory(), (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 3)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_a_cpu_call_reuses_the_memory_its_transients_were_freed_into():
    """IREE frees a call's transient buffers at its end; glibc would return large ones to the
    system and every call would fault them in again (devices.keep_freed_memory)."""
    def faults(keep: str) -> tuple[str, int]:
        env = {**os.environ, "IRGRAD_KEEP_HEAP": keep}
        out = subprocess.run([sys.executable, "-c", _FAULTS], env=env, capture_output=True, text=True, check=True)
        kept, count = out.stdout.split()
        return kept, int(count)

    kept, count = faults("1")
    assert kept == "True" and count < 1000, count
    kept, count = faults("0")
    assert kept == "False" and count > 5000, count  # 32 MB is 8192 pages
