"""Peak memory per call of irgrad's forward and gradient against XLA's (issue 43).

    .venv/bin/python benchmarks/bench_memory.py --jax-python /work/tfvenv/bin/python
    .venv/bin/python benchmarks/bench_memory.py --jax-python ... --quick      # small batches, 2 calls
    .venv/bin/python benchmarks/bench_memory.py --jax-python ... --models resnet:64,resnet:256
    .venv/bin/python benchmarks/bench_memory.py --jax-python ... --models scan_mlp:128 --loop-checkpoints sqrt

Models (``bench_memory_jax.py``, float32, written in JAX): ``mlp`` (bench_models.py's MLP,
batch 8192), ``deep_mlp`` (16 dense 1024×1024 tanh layers, batch 2048), ``resnet`` (bench_models'
ResNet basic block on batch×16×16×32, batch 64 and 256), ``scan_mlp`` (a 256-step ``lax.scan`` of
a width-128 tanh layer, batch 128: at 512 irgrad's gradient takes 150 s a call here, IREE copying
the 64 MiB loop-carried inputs every step), ``mobilenetv2`` (bench_models.py's MobileNetV2:
keras.applications' architecture, alpha 0.35, 32×32×3, batch norm in train mode, batch 8 and 64).
``keras_mobilenetv2`` (``bench_memory_tf.py``) is Keras' own MobileNetV2 on 96×96×3, exported and
measured by TensorFlow (its XLA figures are unreliable: TensorFlow's allocator keeps memory).
JAX runs under ``--jax-python`` (JAX and numpy; irgrad not needed there) and exports each model's
forward StableHLO and arguments; irgrad differentiates it (``passes.differentiate(...,
with_value=True)``: ``main`` and ``main_grad``) and compiles it once.

``--loop-checkpoints K|sqrt``: irgrad differentiates with ``loop_checkpoints=K`` (K snapshots of
each ``while`` loop's carries, the iterations between them recomputed), and XLA's gradient of
``scan_mlp`` splits its scan into the same segments, each under ``jax.checkpoint``; the other
models have no loop and XLA's side of them is unchanged.

Both sides' last call is reduced to its loss and the 2-norm of its gradients; ``Δ`` is the larger
relative difference of the two between irgrad and XLA (the rows' results agree when it is small).

Method: every figure is measured in a fresh process (``--measure-irgrad`` here,
``bench_memory_jax.py measure`` for XLA's ``jax.jit(loss)`` and ``jax.jit(jax.value_and_grad)``),
after loading and compiling and with the arguments in memory, on the device: XLA's
``jax.device_put`` arrays, irgrad's ``Module.put`` tensors, and each call's results stay there
(JAX's arrays; irgrad's ``Function.on_device``). ``irgrad numpy`` is irgrad's first call as most
users make it, with numpy arguments copied to the device and its results copied back, each call:
that column includes those copies. Before each call the high-water RSS is
reset (``echo 5 > /proc/self/clear_refs``); the figure is VmHWM after the call minus the RSS
before the first call, in MiB. ``first`` and ``second`` are the first two calls; ``second (own)``
is the second call's peak over the RSS just before it (the first call's result held there): the
growth of that call alone, equal to the first's where the call reuses the heap it freed. The time
is the median of the calls from the second on. Nothing asserts a size. Every process runs under
``prlimit --as`` (``--limit``), as everything on a shared machine should.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_memory_jax import CHECKPOINTED, MODELS, measure_calls  # noqa: E402
from bench_memory_tf import MODELS as TF_MODELS  # noqa: E402

DEFAULT = ("mlp:8192", "deep_mlp:2048", "resnet:64", "resnet:256", "scan_mlp:128", "mobilenetv2:64",
           "keras_mobilenetv2:8")
QUICK = ("mlp:1024", "deep_mlp:128", "resnet:8", "scan_mlp:32")


def _limited(limit: str, command: Sequence[str]) -> list[str]:
    return ["prlimit", f"--as={limit}", *command]


def _run(command: Sequence[str], limit: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(_limited(limit, command), capture_output=True, text=True, env=env)
    if done.returncode:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(" / ".join(tail) or f"exit status {done.returncode}")
    return done.stdout


def measure_irgrad(vmfb: str, function: str, npz: str, calls: int, how: str) -> dict:
    """One figure, in this (fresh) process: ``function`` of the artifact ``vmfb`` on ``npz``'s
    arguments, ``how`` ``resident`` (put on the device first, results left there) or ``numpy``."""
    import numpy as np

    import bench_adjoint  # noqa: F401  (puts the source tree first on sys.path)
    from irgrad import runtime as igrt

    with np.load(npz) as data:
        args = [data[f"arr_{i}"] for i in range(len(data.files))]
    module = igrt.load(Path(vmfb).read_bytes())
    fn = module[function]
    call = fn
    if how == "resident":  # on the device before the calls, as XLA's arrays are
        args, call = [module.put(a) for a in args], fn.on_device
    return {**measure_calls(lambda: call(*args), calls), "device": module.device}


def _checkpoints(text: str) -> int | str:
    """``--loop-checkpoints``' value: ``sqrt`` or a positive int."""
    if text == "sqrt" or text.isdigit() and int(text) >= 1:
        return text if text == "sqrt" else int(text)
    raise argparse.ArgumentTypeError(f"give a positive int or sqrt, not {text!r}")


def _peer(name: str, args: argparse.Namespace) -> list[str]:
    """The command line of the script that exports and measures ``name`` on the peer's side."""
    if name in TF_MODELS:
        return [args.tf_python or args.jax_python, str(HERE / "bench_memory_tf.py")]
    return [args.jax_python, str(HERE / "bench_memory_jax.py")]


def build(name: str, batch: int, folder: Path, args: argparse.Namespace) -> Path:
    """Exports the model (JAX or TensorFlow), differentiates and compiles it (irgrad;
    ``--arena``: with ``CompileOptions(transient_arena=True)``): the artifact's path."""
    import bench_adjoint  # noqa: F401
    import irgrad as ig
    from irgrad import runtime as igrt

    _run([*_peer(name, args), "export", name, str(batch), str(folder)], args.limit)
    forward = (folder / "forward.mlir").read_text()
    wrt_file = folder / "wrt.json"  # a Keras model's: its trainable weights (JAX's: every argument)
    wrt = json.loads(wrt_file.read_text()) if wrt_file.exists() else None
    module = ig.passes.differentiate(forward, "main", wrt, with_value=True, loop_checkpoints=args.loop_checkpoints)
    vmfb = folder / "module.vmfb"
    vmfb.write_bytes(igrt.compile(module, igrt.CompileOptions(transient_arena=args.arena)).vmfb)
    return vmfb


def figure(command: list[str], limit: str, env: dict[str, str] | None = None) -> dict:
    try:
        return json.loads(_run(command, limit, env).strip().splitlines()[-1])
    except (RuntimeError, ValueError, IndexError) as error:
        return {"error": str(error)}


def fmt(result: dict, index: int, key: str = "peaks_mib") -> str:
    if "error" in result:
        return "error"
    peaks = result[key]
    return f"{peaks[index]:.0f}" if index < len(peaks) else "-"


def delta(ours: dict, xla: dict) -> str:
    """The larger relative difference of the two sides' checksums (loss, gradient norm)."""
    if "error" in ours or "error" in xla:
        return "-"
    diffs = [abs(a - b) / max(abs(b), 1e-30) if a != b else 0.0 for a, b in zip(ours["checksum"], xla["checksum"])]
    return f"{max(diffs):.0e}"


def fmt_time(result: dict) -> str:
    if "error" in result:
        return "error"
    times = result["times_s"][1:] or result["times_s"]
    return f"{statistics.median(times) * 1e3:.1f}"


def run(args: argparse.Namespace) -> int:
    specs = args.models.split(",") if args.models else list(QUICK if args.quick else DEFAULT)
    calls = 2 if args.quick else args.calls
    env = None if args.env is None else {**os.environ, **dict(kv.split("=", 1) for kv in args.env)}
    print(f"peak per call, MiB over the RSS after loading (fresh process per figure); calls {calls}; "
          f"ms = median time of calls 2..{calls}; irgrad {'with' if args.arena else 'without'} transient arenas; "
          f"Δ = relative difference of loss and gradient norm")
    if args.loop_checkpoints is not None:
        print(f"loop checkpoints {args.loop_checkpoints}: irgrad's loop_checkpoints, and XLA's gradient with "
              f"jax.checkpoint on the same scan segments ({', '.join(CHECKPOINTED)}; the other models' XLA side "
              "is not checkpointed)")
    print("second (own): the second call's peak over the RSS just before it, the first call's result held "
          "in both")
    header = ("| model | batch | program | irgrad first | irgrad second | irgrad second (own) | irgrad numpy first "
              "| XLA first | XLA second | XLA second (own) | irgrad/XLA | irgrad ms | XLA ms | Δ |")
    print(header)
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    failed = 0
    with tempfile.TemporaryDirectory(prefix="bench_memory_") as tmp:
        for spec in specs:
            name, _, batch_text = spec.partition(":")
            if name not in (*MODELS, *TF_MODELS) or not batch_text.isdigit():
                print(f"unknown model {spec!r}: give NAME:BATCH, NAME one of {', '.join((*MODELS, *TF_MODELS))}")
                return 2
            batch = int(batch_text)
            folder = Path(tmp) / f"{name}_{batch}"
            try:
                vmfb = build(name, batch, folder, args)
            except Exception as error:  # noqa: BLE001  (a model that fails prints its row; the others go on)
                print(f"| {name} | {batch} | build failed: {str(error)[:200]} |")
                failed += 1
                continue
            for program, function in (("forward", "main"), ("gradient", "main_grad")):
                ours, numpy_call = (figure([sys.executable, __file__, "--measure-irgrad", str(vmfb), function,
                                            str(folder / "args.npz"), str(calls), how], args.limit, env)
                                    for how in ("resident", "numpy"))
                checkpointed = [str(args.loop_checkpoints)] if args.loop_checkpoints and name in CHECKPOINTED else []
                xla = figure([*_peer(name, args), "measure", name, str(batch),
                              "fwd" if program == "forward" else "grad", str(calls), *checkpointed], args.limit)
                failed += "error" in ours or "error" in numpy_call or "error" in xla
                ratio = ("-" if "error" in ours or "error" in xla else  # over the two calls shown
                         f"{max(ours['peaks_mib'][:2]) / max(max(xla['peaks_mib'][:2]), 1e-9):.2f}")
                print(f"| {name} | {batch} | {program} | {fmt(ours, 0)} | {fmt(ours, 1)} "
                      f"| {fmt(ours, 1, 'own_mib')} | {fmt(numpy_call, 0)} "
                      f"| {fmt(xla, 0)} | {fmt(xla, 1)} | {fmt(xla, 1, 'own_mib')} | {ratio} | {fmt_time(ours)} "
                      f"| {fmt_time(xla)} | {delta(ours, xla)} |", flush=True)
                for who, result in (("irgrad", ours), ("irgrad numpy", numpy_call), ("XLA", xla)):
                    if "error" in result:
                        print(f"  {who} {name}:{batch} {program}: {result['error'][:300]}")
    return 1 if failed else 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jax-python", default=sys.executable, help="a Python with JAX (default: this one)")
    parser.add_argument("--tf-python", help="a Python with TensorFlow 2.21 / Keras 3, for keras_mobilenetv2 "
                        "(default: --jax-python)")
    parser.add_argument("--models", help=f"NAME:BATCH,... (default {','.join(DEFAULT)})")
    parser.add_argument("--calls", type=int, default=3, help="calls per figure (default 3)")
    parser.add_argument("--quick", action="store_true", help=f"{','.join(QUICK)}, 2 calls")
    parser.add_argument("--limit", default="12000000000", help="prlimit --as for every process (bytes)")
    parser.add_argument("--arena", action="store_true",
                        help="compile irgrad's artifacts with transient arenas (CompileOptions.transient_arena)")
    parser.add_argument("--loop-checkpoints", type=_checkpoints, metavar="K|sqrt",
                        help="irgrad: passes.differentiate(loop_checkpoints=K); XLA: jax.checkpoint on the "
                        "same segments of scan_mlp's scan")
    parser.add_argument("--env", action="append", metavar="NAME=VALUE",
                        help="environment of irgrad's measuring processes (e.g. IRGRAD_KEEP_HEAP=0)")
    parser.add_argument("--measure-irgrad", nargs=5, metavar=("VMFB", "FUNCTION", "NPZ", "CALLS", "HOW"),
                        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.measure_irgrad:
        vmfb, function, npz, calls, how = args.measure_irgrad
        print(json.dumps(measure_irgrad(vmfb, function, npz, int(calls), how)))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
