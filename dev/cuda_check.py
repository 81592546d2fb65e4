"""irgrad's gradients on an NVIDIA GPU, against the same gradients on the CPU and against XLA on the GPU.

For a session lent a GPU machine (the `device` tool), in two steps:

    # here (no GPU; an environment with irgrad, IREE's compiler and JAX, e.g. /work/tfvenv + PYTHONPATH=.):
    python dev/cuda_check.py build .cudacheck [--models mlp,resnet] [--arch sm_90]
    # there (IREE's runtime wheel installed; JAX with CUDA, as the device image has it):
    python dev/cuda_check.py run .cudacheck

``build`` exports each of ``benchmarks/bench_models.py``'s JAX models, differentiates it with
``passes.differentiate(..., with_value=True)``, compiles the module for ``cuda`` (and for the CPU),
and saves the CUDA artifact, the arguments and the CPU's results. ``run`` loads each CUDA artifact
with ``ig.load`` (device ``cuda``), checks forward, value and gradients against the CPU's results
(max |difference| / max |CPU's| per array), and times a call (numpy in, numpy out, as a user's
call is) against ``jax.jit(jax.value_and_grad(loss))`` on the same GPU (arguments on the device;
``block_until_ready``), median of repeated calls. Nothing here asserts a time.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODELS = "mlp,cnn,attention,vit,mobilenet,resnet,lstm,scan_lstm"


def _models(platforms: str = "cpu"):
    os.environ["JAX_PLATFORMS"] = platforms  # bench_models keeps JAX on the CPU by default
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_models  # noqa: PLC0415  (JAX lives in the benchmark's environment)
    bench_models.jax.config.update("jax_platforms", platforms)
    return bench_models


def build(out: Path, names: list[str], arch: str) -> None:
    import irgrad as ig  # noqa: PLC0415

    bm = _models()
    out.mkdir(parents=True, exist_ok=True)
    done = []
    for name in names:
        model = bm.MODELS[name]()
        forward = bm.jax.jit(model.loss).lower(*model.args).as_text()
        text = ig.passes.differentiate(forward, "main", with_value=True)
        cpu = ig.compile(text).load()
        np.savez(out / f"{name}_ref.npz", *cpu["main_grad"](*model.args), forward=cpu["main"](*model.args))
        np.savez(out / f"{name}_args.npz", *model.args)
        ig.compile(text, target="cuda", cuda_arch=arch).save(out / f"{name}_cuda.vmfb")
        done.append(name)
        print(f"built {name}", flush=True)
    (out / "models.json").write_text(json.dumps(done))


def _median_ms(call, repeats: int) -> float:
    call()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def _rel(got, want, floor: float = 1e-30) -> float:
    """max |got − want| / max |want|, the denominator at least ``floor`` (a gradient that is zero
    up to rounding, like an attention key bias's, is compared against the largest gradient)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), floor))


def _raw_ms(path: Path, args, repeats: int) -> float:
    """The gradient call with its arguments already on the GPU and its results left there:
    IREE's own cost, without the host transfers that ``ig.load``'s numpy call makes."""
    import iree.runtime as rt  # noqa: PLC0415

    config = rt.Config("cuda")
    module = rt.load_vm_module(rt.VmModule.copy_buffer(config.vm_instance, path.read_bytes()), config)
    dev = [rt.asdevicearray(config.device, a) for a in args]
    f = module["main_grad"]
    return _median_ms(lambda: f(*dev), repeats)


def _ready(jax, f, args):
    return jax.block_until_ready(f(*args))


def _parts(f, args, repeats: int) -> None:
    """Where a numpy call's time goes: uploads, the run, downloads through kept staging buffers
    and through fresh ones (what every call paid before the staging buffers were kept)."""
    sig = f.signature
    views = [f._upload(i, a) for i, a in enumerate(args)]
    out = f._invoke(views)
    up = _median_ms(lambda: [f._upload(i, a) for i, a in enumerate(args)], repeats)
    run_ms = _median_ms(lambda: f._invoke(views), repeats)
    kept = _median_ms(lambda: f._download(out, sig.outputs), repeats)
    fresh = _median_ms(lambda: (f._staging.clear(), f._download(out, sig.outputs)), repeats)
    hal = f._module._device.hal_device
    one_by_one = _median_ms(lambda: [_download_waiting_each(hal, v) for v in out], repeats)
    print(f"  {len(args)} uploads {up:.3f} ms, run {run_ms:.3f} ms, {len(out)} downloads {kept:.3f} ms "
          f"(fresh staging each call: {fresh:.3f} ms; a fresh staging buffer and a wait per result, "
          f"as the loader did before: {one_by_one:.3f} ms)", flush=True)


def _download_waiting_each(hal, view):
    """The loader's download before 2026-11-27: a staging buffer and a wait per result."""
    import iree.runtime as rt  # noqa: PLC0415

    buffer = view.get_buffer()
    staging = hal.allocator.allocate_buffer(
        memory_type=int(rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE),
        allowed_usage=int(rt.BufferUsage.TRANSFER_TARGET | rt.BufferUsage.MAPPING_SCOPED),
        allocation_size=buffer.byte_length())
    semaphore = hal.create_semaphore(0)
    hal.queue_copy(buffer, staging, wait_semaphores=rt.HalFence.create_at(semaphore, 0),
                   signal_semaphores=rt.HalFence.create_at(semaphore, 1))
    rt.HalFence.create_at(semaphore, 1).wait()
    return np.array(staging.map().asarray(list(view.shape), np.dtype(np.float32)), copy=True)


def run(folder: Path, repeats: int) -> int:
    import irgrad as ig  # noqa: PLC0415

    print("drivers:", ig.runtime.available_drivers(), flush=True)
    try:
        bm = _models("cuda")
        jax = bm.jax
        print("jax", jax.__version__, jax.devices(), flush=True)
        try:
            print("JAX GPU:", jax.devices("gpu"), flush=True)
        except Exception as exc:  # noqa: BLE001 -- say why XLA runs on the CPU here
            print("JAX has no GPU here:", exc, flush=True)
    except Exception as exc:  # noqa: BLE001 -- XLA is only the peer; the check goes on without it
        bm, jax = None, None
        print("no JAX peer:", exc, flush=True)
    bad = 0
    rows = []
    for name in json.loads((folder / "models.json").read_text()):
        args = list(np.load(folder / f"{name}_args.npz").values())
        ref = np.load(folder / f"{name}_ref.npz")
        want = [ref[f"arr_{i}"] for i in range(len(ref.files) - 1)]
        m = ig.load(folder / f"{name}_cuda.vmfb")
        got = m["main_grad"](*args)
        floor = 1e-4 * max(float(np.max(np.abs(w))) for w in want[1:])
        err = max(_rel(g, w, floor) for g, w in zip(got, want))
        err_fwd = _rel(m["main"](*args), ref["forward"])
        ok = m.device == "cuda" and err < 1e-3 and err_fwd < 1e-4
        bad += not ok
        if not ok:
            print(f"{name}: per output rel. err", [f"{_rel(g, w, floor):.1e}" for g, w in zip(got, want)], flush=True)
        raw_ms = _raw_ms(folder / f"{name}_cuda.vmfb", args, repeats)
        grad_ms = _median_ms(functools.partial(m["main_grad"], *args), repeats)
        fwd_ms = _median_ms(functools.partial(m["main"], *args), repeats)
        _parts(m["main_grad"], args, repeats)
        xla_ms = xla_fwd_ms = float("nan")
        if bm is not None:
            model = bm.MODELS[name]()
            dev = [jax.device_put(a) for a in args]
            vag = jax.jit(jax.value_and_grad(model.loss, argnums=tuple(range(len(args)))))
            fwd = jax.jit(model.loss)
            xla_ms = _median_ms(functools.partial(_ready, jax, vag, dev), repeats)
            xla_fwd_ms = _median_ms(functools.partial(_ready, jax, fwd, dev), repeats)
        rows.append((name, m.device, err_fwd, err, fwd_ms, grad_ms, xla_fwd_ms, xla_ms, ok))
        print(f"{name}: device {m.device} fwd err {err_fwd:.1e} grad err {err:.1e} "
              f"irgrad fwd {fwd_ms:.3f} ms grad {grad_ms:.3f} ms (device-resident args: {raw_ms:.3f} ms) | XLA fwd {xla_fwd_ms:.3f} ms "
              f"grad {xla_ms:.3f} ms {'ok' if ok else 'WRONG'}", flush=True)
    print("\n| model | device | forward rel. err | gradient rel. err | irgrad fwd ms | irgrad grad ms "
          "| XLA fwd ms | XLA grad ms | irgrad/XLA grad |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, device, ef, eg, f, g, xf, xg, _ in rows:
        print(f"| {name} | {device} | {ef:.1e} | {eg:.1e} | {f:.3f} | {g:.3f} | {xf:.3f} | {xg:.3f} | {g / xg:.2f} |")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    b = sub.add_parser("build")
    b.add_argument("folder", type=Path)
    b.add_argument("--models", default=DEFAULT_MODELS)
    b.add_argument("--arch", default="sm_90")
    r = sub.add_parser("run")
    r.add_argument("folder", type=Path)
    r.add_argument("--repeats", type=int, default=50)
    a = parser.parse_args(argv)
    if a.step == "build":
        build(a.folder, a.models.split(","), a.arch)
        return 0
    return run(a.folder, a.repeats)


if __name__ == "__main__":
    sys.exit(main())
