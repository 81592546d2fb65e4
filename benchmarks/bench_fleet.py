"""A federated client's cost: irgrad's runtime-only artifact client against a PyTorch client,
and Flower's server round time for 10 and 100 simulated irgrad clients.

The PyTorch client runs in the benchmark's own environment (torch is never an irgrad
dependency); make it once (a few minutes; torch's CPU wheel):

    python3 -m venv /work/benchvenv
    /work/benchvenv/bin/pip install "torch==2.13.0+cpu" numpy "flwr>=1.42,<1.43"

then, from the repository root, in irgrad's environment (with flwr: `pip install ".[fleet]"`):

    .venv/bin/python benchmarks/bench_fleet.py --torch-python /work/benchvenv/bin/python   # ~3 min
    .venv/bin/python benchmarks/bench_fleet.py --quick          # no torch, 10 clients only
    .venv/bin/python benchmarks/bench_fleet.py --round-cost 5   # ~1 min: a round's ClientApp process

Measured, for an MLP (784-128-10) and a small CNN (3x3 conv, 8 channels, relu, dense; 28x28x1),
batch 32, softmax cross-entropy, Adam (bench_train.py's models):

* local training steps per second of one client process: irgrad's client (a Python that can
  import only irgrad, iree-base-runtime, numpy and flwr, as on a device: the artifact's
  ``@F_train_step`` through ``Module.trainer``) against a PyTorch client of the same model
  doing the same steps (``torch.optim.Adam``, ``loss.backward()``), each in its own process,
  both on every core; median of timed blocks after a warm-up;
* the peak RSS of each client process (``VmHWM``) after importing flwr and its framework,
  loading the model and running the steps, and what it holds beyond a process that has
  imported only numpy and flwr;
* the install size of each client: the files of the distributions it needs (with everything
  they require) — iree-base-runtime, numpy, flwr and irgrad's own files, against torch,
  numpy and flwr; also without flwr's share;
* a client's cost per round under the Deployment Runtime (``--round-cost N``): one ClientApp
  process, as a SuperNode starts one per message, answering one train message of the fleet
  example, irgrad's client (runtime-only install; full install, with and without
  ``IRGRAD_RUNTIME_ONLY=1``) against a numpy client of the same model, medians of N processes
  run in turn (docs/guides/fleet.md has the figures);
* Flower's round time (the Simulation Runtime, ``flwr.simulation.run_simulation``, FedAvg, the
  fleet example's model and non-IID shards) for 10 and 100 clients: the seconds between the
  server's central evaluations, i.e. a round's sampling, sending, local training, replies and
  aggregation.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "examples" / "fleet"))
sys.path.insert(0, str(ROOT / "tests"))
import bench_adjoint  # noqa: E402, F401  (puts the source tree first on sys.path)
import bench_train  # noqa: E402

import irgrad as ig  # noqa: E402
from sites import runtime_only_site  # noqa: E402  (tests/sites.py: the client's install)

# The irgrad client: the same steps as the torch one, in a runtime-only Python.
# Peak RSS from VmHWM: ru_maxrss would count the parent's pages at fork, kept across exec.
PEAK = """
def peak_rss_mib():
    return int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM"))) / 1024
"""

# What every client process holds before any framework: Python, numpy and flwr imported.
BASELINE = PEAK + """
import json, numpy, flwr, flwr.app, flwr.clientapp
print(json.dumps({"rss_mib": peak_rss_mib()}))
"""

IRGRAD_CLIENT = PEAK + """
import json, sys, time
import numpy as np
import flwr  # a client imports Flower
import irgrad.fleet as fleet
assert "iree.compiler" not in sys.modules
path, data_path, steps, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
m = fleet.model(path)
saved = np.load(data_path)
params = [saved[f"p{i}"] for i in range(len(m.names))]
data = [saved["x"], saved["y"]]
trainer = m.module.trainer(params)
def block():
    for _ in range(steps):
        trainer.step(*data)
block()
times = []
for _ in range(rounds):
    t = time.perf_counter(); block(); times.append(time.perf_counter() - t)
print(json.dumps({"steps_per_s": steps / float(np.median(times)), "loss": float(trainer.step(*data)),
                  "rss_mib": peak_rss_mib()}))
"""

TORCH_CLIENT = PEAK + """
import json, sys, time
import numpy as np
import flwr  # a client imports Flower
import torch
kind, data_path, steps, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
saved = np.load(data_path)
p = [torch.nn.Parameter(torch.from_numpy(saved[f"p{i}"].copy())) for i in range(4)]
x, y = torch.from_numpy(saved["x"]), torch.from_numpy(saved["y"])
if kind == "cnn":
    x = x.permute(0, 3, 1, 2).contiguous()  # NCHW
    kernel = torch.nn.Parameter(p[0].detach().permute(3, 2, 0, 1).contiguous())  # HWIO -> OIHW
    p[0] = kernel
def loss_fn():
    if kind == "mlp":
        logits = torch.relu(x @ p[0] + p[1]) @ p[2] + p[3]
    else:
        h = torch.relu(torch.nn.functional.conv2d(x, p[0], p[1], padding=1))
        logits = h.permute(0, 2, 3, 1).reshape(x.shape[0], -1) @ p[2] + p[3]  # NHWC flatten, as irgrad's
    return -(y * torch.log_softmax(logits, dim=1)).sum(1).mean()
opt = torch.optim.Adam(p, lr=0.001, eps=1e-7)
def block():
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        opt.step()
    return loss
block()
times = []
for _ in range(rounds):
    t = time.perf_counter(); block(); times.append(time.perf_counter() - t)
print(json.dumps({"steps_per_s": steps / float(np.median(times)), "loss": float(block()),
                  "rss_mib": peak_rss_mib(),
                  "threads": torch.get_num_threads()}))
"""

SIZE_CODE = """
import importlib.metadata, json, re, sys
from pathlib import Path
from packaging.requirements import Requirement
def closure(dists):
    found, todo = set(), list(dists)
    while todo:
        d = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if d not in found:
            found.add(d)
            for r in map(Requirement, importlib.metadata.requires(d) or []):
                if r.marker is None or r.marker.evaluate({"extra": ""}):
                    todo.append(r.name)
    return found
def size(dists):
    total = 0
    for d in dists:
        dist = importlib.metadata.distribution(d)
        for f in dist.files or []:
            p = Path(dist.locate_file(f))
            if p.is_file():
                total += p.stat().st_size
    return total
with_flwr, framework = closure(sys.argv[1:] + ["flwr"]), closure(sys.argv[1:])
print(json.dumps({"with_flwr": size(with_flwr), "without_flwr": size(framework),
                  "dists": len(with_flwr)}))
"""


def _run(cmd: list[str], env: dict | None = None, timeout: int = 600) -> dict:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def irgrad_install_size() -> dict:
    """iree-base-runtime + numpy (+ flwr) and irgrad's own files, in this environment."""
    out = json.loads(subprocess.run([sys.executable, "-c", SIZE_CODE, "iree-base-runtime", "numpy"],
                                    capture_output=True, text=True, check=True).stdout)
    own = sum(p.stat().st_size for p in Path(ig.__file__).parent.resolve().rglob("*.py"))
    own += sum(p.stat().st_size for d in ("passes", "runtime") for p in (ROOT / d).rglob("*.py"))
    return {k: v + own if k != "dists" else v for k, v in out.items()}


def client_steps(work: Path, torch_python: str | None, steps: int, rounds: int) -> list[dict]:
    site = runtime_only_site(work, ["iree-base-runtime", "numpy", "flwr"])
    rng = np.random.default_rng(0)
    rows = []
    for name, (loss, params, data) in bench_train.models(rng).items():
        text = ig.function(loss).lower(*params, *data).mlir
        # The trainer's data are F's non-parameter arguments: put them first, as the example does.
        path = work / f"{name}.vmfb"
        ig.compile(ig.passes.differentiate(text, wrt=list(range(len(params))), grad=False, train="adam")).save(path)
        np.savez(work / f"{name}.npz", x=data[0], y=data[1], **{f"p{i}": p for i, p in enumerate(params)})
        prelude = f"import sys; sys.path.insert(0, {str(site)!r})\n"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work)}
        ours = _run([sys.executable, "-I", "-S", "-c", prelude + IRGRAD_CLIENT, str(path), str(work / f"{name}.npz"),
                     str(steps), str(rounds)], env=env)
        row = {"model": name, "irgrad": ours}
        if torch_python:
            row["torch"] = _run([torch_python, "-c", TORCH_CLIENT, name, str(work / f"{name}.npz"), str(steps),
                                 str(rounds)])
        rows.append(row)
    prelude = f"import sys; sys.path.insert(0, {str(site)!r})\n"
    base = {"irgrad": _run([sys.executable, "-I", "-S", "-c", prelude + BASELINE], env=env)["rss_mib"]}
    if torch_python:
        base["torch"] = _run([torch_python, "-c", BASELINE])["rss_mib"]
    rows.append({"model": "python + numpy + flwr, no framework", **{k: {"rss_mib": v} for k, v in base.items()}})
    return rows


def round_times(clients: int, rounds: int, work: Path) -> list[float]:
    """Seconds per round of FedAvg over ``clients`` simulated irgrad clients."""
    import irgrad.fleet as fleet
    from fleet_app import model as example, task
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    build = work / "fleet"
    if not (build / "fleet.vmfb").exists():
        example.main(str(build))
    path = build / "fleet.vmfb"
    m = fleet.model(path)
    initial = fleet.initial_arrays(m, build / "init.npz")
    stamps: list[float] = []
    client = fleet.client_app(path, lambda c: task.partition(int(c.node_config["partition-id"]), clients), epochs=1)
    server = ServerApp()

    def evaluate(server_round, arrays):
        stamps.append(time.perf_counter())

    @server.main()
    def main(grid, context) -> None:
        strategy = FedAvg(fraction_evaluate=0.0, min_available_nodes=clients, min_train_nodes=clients)
        strategy.start(grid=grid, initial_arrays=initial, num_rounds=rounds, evaluate_fn=evaluate, timeout=600)

    run_simulation(server_app=server, client_app=client, num_supernodes=clients,
                   backend_config={"client_resources": {"num_cpus": 1}})
    return list(np.diff(stamps))


# ----- the per-round cost of a client under the Deployment Runtime ----------------------------
#
# Flower 1.42's SuperNode runs every message in a fresh `flwr-clientapp` process, in both of
# its isolation modes (flwr/supernode/runtime/run_clientapp.py: one pull_task_input, one
# client_app call, exit): whatever a client imports and loads, it does every round. One such
# process is timed here as the SuperNode runs it: Python starts, imports flwr, imports the
# app's module and answers one `train` message of the example (client 1 of 3: 2 local epochs
# of its 1,066 examples in batches of 32, Adam). Flower's HTTP calls and FAB install, the same
# for every app, are left out.

# The example's model as a numpy ClientApp: the same MLP, loss, batches and Adam step.
NUMPY_CLIENT = """
import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from fleet_app.task import BATCH, PARAMS, partition

app = ClientApp()

def step(p, m, v, t, x, y, lr=0.01, b1=0.9, b2=0.999, eps=1e-7):
    w1, c1, w2, c2 = p
    h = x @ w1 + c1
    a = np.maximum(h, 0)
    z = a @ w2 + c2
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    s = e / e.sum(1, keepdims=True)
    loss = float(-(y * np.log(s)).sum(1).mean())
    dz = (s - y) / len(x)
    da = dz @ w2.T * (h > 0)
    grads = [x.T @ da, da.sum(0), a.T @ dz, dz.sum(0)]
    for i, g in enumerate(grads):
        m[i] = b1 * m[i] + (1 - b1) * g
        v[i] = b2 * v[i] + (1 - b2) * g * g
        p[i] = (p[i] - lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m[i] / (np.sqrt(v[i]) + eps)).astype(np.float32)
    return loss

@app.train()
def train(msg, context):
    p = [msg.content["arrays"][n].numpy() for n in PARAMS]
    (x, y), _ = partition(int(context.node_config["partition-id"]), int(context.node_config["num-partitions"]))
    m, v, losses, t = [np.zeros_like(a) for a in p], [np.zeros_like(a) for a in p], [], 0
    for epoch in range(int(msg.content["config"]["local-epochs"])):
        order = np.random.default_rng((int(context.node_config["partition-id"]), epoch)).permutation(len(x))
        for start in range(0, len(x) - BATCH + 1, BATCH):
            t += 1
            index = order[start:start + BATCH]
            losses.append(step(p, m, v, t, x[index], y[index]))
    n = len(x) // BATCH * BATCH
    return Message(RecordDict({"arrays": ArrayRecord({k: Array(a) for k, a in zip(PARAMS, p)}),
                               "metrics": MetricRecord({"train_loss": float(np.mean(losses)), "num-examples": n})}),
                   reply_to=msg)
"""

# One ClientApp process answering one train message.
ROUND_PROCESS = """
import time
start = time.perf_counter()
import json, sys, importlib
path, module, artifact_dir = sys.argv[1:4]
sys.path[:0] = path.split(":")
import numpy as np
import flwr.app, flwr.clientapp
from flwr.app import ArrayRecord, Array, ConfigRecord, Context, Message, Metadata, RecordDict
flwr_done = time.perf_counter()
app = importlib.import_module(module).app
loaded = time.perf_counter()
from fleet_app.task import initial_params
context = Context(run_id=1, node_id=7, node_config={"partition-id": 1, "num-partitions": 3}, state=RecordDict(),
                  run_config={"artifact-dir": artifact_dir, "strategy": "fedavg"})
message = Message(content=RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in initial_params().items()}),
                                      "config": ConfigRecord({"server-round": 1, "local-epochs": 2})}),
                  metadata=Metadata(run_id=1, message_id="m", src_node_id=1, dst_node_id=7, reply_to_message_id="",
                                    group_id="1", created_at=time.time(), ttl=600.0, message_type="train"))
handled = time.perf_counter()
reply = app(message, context)
done = time.perf_counter()
assert not reply.has_error(), reply.error
print(json.dumps({"flwr": flwr_done - start, "app_import": loaded - flwr_done, "handler": done - handled,
                  "train_loss": reply.content["metrics"]["train_loss"],
                  "frontend": "irgrad.frontend" in sys.modules}))
"""


def round_cost(work: Path, processes: int) -> dict[str, dict]:
    """Median seconds of one ClientApp process answering one train message, per client:
    ``total`` (the process, start to exit), ``flwr`` (Python and flwr's imports),
    ``app_import`` (the app's module: irgrad and the IREE runtime, or nothing more),
    ``handler`` (the train call: the artifact's load, the data, the local training), and
    ``own`` = app_import + handler, the client's part beyond what every Flower client pays."""
    from fleet_app import model as example
    build = work / "fleet"
    if not (build / "fleet.vmfb").exists():
        example.main(str(build))
    (work / "numpy_client.py").write_text(NUMPY_CLIENT)
    site = runtime_only_site(work / "round", ["iree-base-runtime", "numpy", "flwr"])
    example_dir = str(ROOT / "examples" / "fleet")
    plain = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work)}
    kinds = {  # python flags, sys.path, the app's module, environment
        "numpy client": (["-I", "-S"], f"{site}:{example_dir}:{work}", "numpy_client", plain),
        "irgrad, runtime-only install": (["-I", "-S"], f"{site}:{example_dir}", "fleet_app.client_app", plain),
        "irgrad, full install": ([], f"{ROOT}:{example_dir}", "fleet_app.client_app", plain),
        "irgrad, full install, IRGRAD_RUNTIME_ONLY=1": ([], f"{ROOT}:{example_dir}", "fleet_app.client_app",
                                                        {**plain, "IRGRAD_RUNTIME_ONLY": "1"}),
    }
    out: dict[str, dict] = {}
    for _ in range(processes):  # interleaved: the machine's load falls on every client alike
        for kind, (flags, path, module, env) in kinds.items():
            start = time.perf_counter()
            row = _run([sys.executable, *flags, "-c", ROUND_PROCESS, path, module, str(build)], env=env)
            row["total"] = time.perf_counter() - start
            row["own"] = row["app_import"] + row["handler"]
            out.setdefault(kind, []).append(row)
    keys = ("total", "flwr", "app_import", "handler", "own")
    return {kind: {**{k: float(np.median([r[k] for r in rows])) for k in keys},
                   "train_loss": rows[0]["train_loss"], "frontend": rows[0]["frontend"]}
            for kind, rows in out.items()}


def print_round_cost(costs: dict[str, dict]) -> None:
    base = costs["numpy client"]
    print(f"{'one train message in one ClientApp process':44s} {'total s':>8s} {'flwr s':>7s} {'app s':>6s} "
          f"{'handler s':>9s} {'total/numpy':>11s} {'own/numpy':>9s}")
    for kind, c in costs.items():
        print(f"{kind:44s} {c['total']:8.3f} {c['flwr']:7.3f} {c['app_import']:6.3f} {c['handler']:9.3f} "
              f"{c['total'] / base['total']:11.2f} {c['own'] / base['own']:9.2f}"
              f"   (train loss {c['train_loss']:.3f}{'; frontend imported' if c['frontend'] else ''})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--torch-python", help="a Python with torch, numpy and flwr (the docstring's venv)")
    p.add_argument("--steps", type=int, default=200, help="steps per timed block")
    p.add_argument("--rounds", type=int, default=7, help="timed blocks (median)")
    p.add_argument("--fl-rounds", type=int, default=3, help="Flower rounds per fleet size")
    p.add_argument("--quick", action="store_true", help="fewer steps, 10 clients only, no torch")
    p.add_argument("--round-cost", type=int, default=0, metavar="N",
                   help="only the per-round cost of a ClientApp process (medians of N processes per client)")
    args = p.parse_args(argv)
    if args.round_cost:
        with tempfile.TemporaryDirectory(prefix="bench_fleet.") as tmp:
            print_round_cost(round_cost(Path(tmp), args.round_cost))
        return 0
    if args.quick:
        args.steps, args.rounds, args.torch_python = 20, 3, None
    with tempfile.TemporaryDirectory(prefix="bench_fleet.") as tmp:
        work = Path(tmp)
        rows = client_steps(work, args.torch_python, args.steps, args.rounds)
        print(f"{'model':6s} {'client':8s} {'steps/s':>9s} {'peak RSS MiB':>13s}")
        *rows, base = rows
        for row in rows:
            for who in ("irgrad", "torch"):
                if who in row:
                    r = row[who]
                    print(f"{row['model']:6s} {who:8s} {r['steps_per_s']:9.0f} {r['rss_mib']:13.0f}"
                          f"   ({r['rss_mib'] - base[who]['rss_mib']:.0f} beyond {base['model']})")
            if "torch" in row:
                ours, theirs = row["irgrad"], row["torch"]
                print(f"{row['model']:6s} {'ratio':8s} {ours['steps_per_s'] / theirs['steps_per_s']:9.2f} "
                      f"{ours['rss_mib'] / theirs['rss_mib']:13.2f}   (irgrad / torch)")
        ours = irgrad_install_size()
        print(f"install, irgrad client: {ours['with_flwr'] / 2**20:.0f} MiB with flwr, "
              f"{ours['without_flwr'] / 2**20:.0f} MiB without (iree-base-runtime, numpy, irgrad)")
        if args.torch_python:
            theirs = json.loads(subprocess.run([args.torch_python, "-c", SIZE_CODE, "torch", "numpy"],
                                               capture_output=True, text=True, check=True).stdout)
            print(f"install, torch client:  {theirs['with_flwr'] / 2**20:.0f} MiB with flwr, "
                  f"{theirs['without_flwr'] / 2**20:.0f} MiB without (torch, numpy); ratio "
                  f"{ours['with_flwr'] / theirs['with_flwr']:.2f} / "
                  f"{ours['without_flwr'] / theirs['without_flwr']:.2f}")
        for clients in ((10,) if args.quick else (10, 100)):
            times = round_times(clients, args.fl_rounds, work)
            print(f"Flower round, {clients:3d} simulated irgrad clients: "
                  f"{', '.join(f'{t:.1f}' for t in times)} s (first round includes the clients' start)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
