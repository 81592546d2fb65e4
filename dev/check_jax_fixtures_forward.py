"""Check that every JAX fixture's forward module compiles and runs with IREE and
matches the JAX forward outputs stored in its npz.

Run from the repository root with the venv that has iree-base-compiler and
iree-base-runtime (no JAX needed):

    /work/venv/bin/python dev/check_jax_fixtures_forward.py [NAME ...]

For each ``tests/fixtures/jax/<name>.mlir`` (with a ``<name>.npz``) it compiles
``@main`` for llvm-cpu, runs it on ``arg0..`` and compares with ``out0..``
(rtol 1e-4, atol 1e-5; integer outputs exactly).  ``custom_call`` is expected not
to compile (JAX-CPU LAPACK custom call).  Exit status 1 if any other fixture fails.
"""

from __future__ import annotations

import glob
import os
import sys
import time

import numpy as np
import iree.compiler as ireec
import iree.runtime as rt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX_DIR = os.path.join(ROOT, "tests", "fixtures", "jax")
RTOL, ATOL = 1e-4, 1e-5
EXPECTED_COMPILE_FAILURE = {"custom_call"}


def compile_module(text):
    return ireec.compile_str(
        text,
        target_backends=["llvm-cpu"],
        input_type="stablehlo",
        extra_args=["--iree-llvmcpu-target-cpu=host"],
    )


def run_module(vmfb, args):
    cfg = rt.Config("local-task")
    ctx = rt.SystemContext(config=cfg)
    vm = rt.VmModule.copy_buffer(ctx.instance, vmfb)
    ctx.add_vm_module(vm)
    # JAX names the module `@jit_<fn>`, so the VM module is `jit_<fn>`, not `module`.
    res = ctx.modules[vm.name]["main"](*args)
    if isinstance(res, (list, tuple)):
        return [np.asarray(r.to_host()) for r in res]
    return [np.asarray(res.to_host())]


def load_npz(path):
    d = np.load(path)
    nargs = len([k for k in d.files if k.startswith("arg")])
    nouts = len([k for k in d.files if k.startswith("out")])
    args = [d["arg%d" % i] for i in range(nargs)]
    outs = [d["out%d" % i] for i in range(nouts)]
    return args, outs


def check(name):
    with open(os.path.join(FIX_DIR, name + ".mlir")) as f:
        text = f.read()
    args, want = load_npz(os.path.join(FIX_DIR, name + ".npz"))
    t0 = time.time()
    try:
        vmfb = compile_module(text)
    except Exception as e:  # iree.compiler.CompilerToolError
        msg = str(e)
        first = [ln for ln in msg.splitlines() if "error:" in ln.lower()]
        return False, "compile failed: " + (first[0].strip() if first else msg[:300])
    try:
        got = run_module(vmfb, args)
    except Exception as e:
        return False, "run failed: %s" % (str(e).splitlines()[0] if str(e) else type(e).__name__)
    if len(got) != len(want):
        return False, "got %d outputs, want %d" % (len(got), len(want))
    worst = 0.0
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            return False, "out%d shape %s != %s" % (k, g.shape, w.shape)
        if np.issubdtype(w.dtype, np.floating):
            if not np.allclose(g, w, rtol=RTOL, atol=ATOL):
                err = np.max(np.abs(g - w) / (ATOL + RTOL * np.abs(w)))
                return False, "out%d mismatch (max err %.3g x tolerance)" % (k, err)
            worst = max(worst, float(np.max(np.abs(g - w))))
        elif not np.array_equal(g.astype(w.dtype), w):
            return False, "out%d (integer) mismatch" % k
    return True, "ok (%d outputs, max abs err %.2e, %.1fs)" % (len(got), worst, time.time() - t0)


def main(argv):
    names = argv[1:] or sorted(
        os.path.basename(p)[:-5] for p in glob.glob(os.path.join(FIX_DIR, "*.mlir"))
        if os.path.exists(p[:-5] + ".npz"))
    bad, expected = [], []
    for name in names:
        ok, msg = check(name)
        if not ok and name in EXPECTED_COMPILE_FAILURE:
            print("%-22s EXPECTED FAILURE: %s" % (name, msg[:200]))
            expected.append(name)
            continue
        if ok and name in EXPECTED_COMPILE_FAILURE:
            print("%-22s unexpectedly OK: %s" % (name, msg))
            continue
        print("%-22s %s%s" % (name, "" if ok else "FAIL: ", msg))
        if not ok:
            bad.append(name)
    print("%d passed, %d failed, %d expected failure(s) %s"
          % (len(names) - len(bad) - len(expected), len(bad), len(expected), expected))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
