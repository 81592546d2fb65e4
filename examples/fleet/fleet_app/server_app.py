"""The example's ServerApp: a Flower strategy started from the artifact's initial parameters,
guarded (``irgrad.fleet.guard``: malformed updates refused, each client's influence bounded,
a poisoned global model stopping the run) and evaluating the global model on the held-out
pool with the artifact's forward (``irgrad.fleet.central_evaluation``).

Run config (``pyproject.toml``, ``flwr run --run-config``): ``strategy`` (fedavg, fedadam,
fedavgm, fedprox, and the robust aggregators fedmedian, trimmedavg, krum, bulyan),
``num-server-rounds``, ``local-epochs``, ``fraction-train``, ``min-nodes`` (nodes to wait for
before the first round), ``min-survivors`` (before each later round), ``node-wait`` (seconds to
wait for either before the run fails), ``round-timeout`` (seconds a round waits for replies),
``proximal-mu``, ``trim-beta`` (trimmedavg's cut fraction), ``num-malicious`` (krum's and
bulyan's assumed attackers; bulyan needs 4 × that + 3 updates a round), guard's ``clip-ratio``,
``refuse-ratio``, ``max-examples-ratio`` and ``max-loss-ratio`` (0: that rule off),
``artifact-dir`` (built here when missing, which needs the compiler), ``result-dir`` (where
``result.npz``, ``losses.json`` and each round's ``checkpoint-<round>.npz`` go; empty: nowhere)
and ``resume`` (start from ``result-dir``'s last checkpoint and run the rounds left: a run lost
with its SuperLink).
"""
from __future__ import annotations

import json
import os
from logging import INFO
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Bulyan, FedAdam, FedAvg, FedAvgM, FedMedian, FedProx, FedTrimmedAvg, Krum

import irgrad.fleet as fleet

from .task import initial_params, test_set

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    directory = Path(str(cfg["artifact-dir"]))
    kind = str(cfg.get("strategy", "fedavg"))
    path = directory / ("fleet_prox.vmfb" if kind == "fedprox" else "fleet.vmfb")
    if not path.exists():
        from .model import main as build  # the host compiles the artifacts once
        build(str(directory))
    model = fleet.model(path)
    init = directory / "init.npz"
    initial = fleet.initial_arrays(model, init if init.exists() else initial_params())

    nodes = int(cfg.get("min-nodes", 2))
    common = dict(fraction_train=float(cfg.get("fraction-train", 1.0)), fraction_evaluate=0.0,
                  min_train_nodes=nodes, min_available_nodes=nodes)
    malicious = int(cfg.get("num-malicious", 1))
    strategies = {
        "fedavg": lambda: FedAvg(**common),
        "fedprox": lambda: FedProx(proximal_mu=float(cfg.get("proximal-mu", 0.1)), **common),
        "fedadam": lambda: FedAdam(eta=0.1, eta_l=0.1, **common),
        "fedavgm": lambda: FedAvgM(server_momentum=0.5, **common),
        "fedmedian": lambda: FedMedian(**common),
        "trimmedavg": lambda: FedTrimmedAvg(beta=float(cfg.get("trim-beta", 0.2)), **common),
        "krum": lambda: Krum(num_malicious_nodes=malicious, **common),
        "bulyan": lambda: Bulyan(num_malicious_nodes=malicious, **common),
    }
    if kind not in strategies:
        raise ValueError(f"run config strategy={kind!r}: not one of {', '.join(strategies)}")
    strategy = strategies[kind]()

    def rule(key: str, default: float) -> float | None:
        value = float(cfg.get(key, default))
        return value if value > 0 else None
    fleet.guard(strategy, initial, clip_ratio=rule("clip-ratio", 1.5), refuse_ratio=rule("refuse-ratio", 10.0),
                max_examples_ratio=rule("max-examples-ratio", 2.0), max_loss_ratio=rule("max-loss-ratio", 10.0))
    fleet.tolerate_dropouts(strategy, nodes, min(nodes, int(cfg.get("min-survivors", 1))),
                            float(cfg.get("node-wait", 300.0)))

    out = str(cfg.get("result-dir", ""))
    done, evaluate = 0, fleet.central_evaluation(model, test_set())
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        if cfg.get("resume", False):
            done, initial = _resume(model, Path(out), initial)
        evaluate = _checkpointed(evaluate, Path(out), done)
    rounds = int(cfg["num-server-rounds"]) - done
    if rounds < 1:
        log(INFO, "fleet_app: the checkpoint in %s is after round %d: no round left", out, done)
        return
    result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=rounds,
                            train_config=ConfigRecord({"local-epochs": int(cfg.get("local-epochs", 2))}),
                            evaluate_fn=evaluate, timeout=float(cfg.get("round-timeout", 120)))
    if out:
        np.savez(Path(out) / "result.npz", **{k: v.numpy() for k, v in result.arrays.items()})
        losses = {done + int(r): float(m["loss"]) for r, m in result.evaluate_metrics_serverapp.items()}
        (Path(out) / "losses.json").write_text(json.dumps({
            "central_loss": losses, "refused": [list(r) for r in strategy.refused],
            "clipped": [list(r) for r in strategy.clipped],
            "accepted": {str(r): nodes for r, nodes in strategy.accepted.items()},
            "lost": [list(r) for r in strategy.lost]}))


def _resume(model: fleet.Model, out: Path, initial: ArrayRecord) -> tuple[int, ArrayRecord]:
    """The last checkpoint in ``out``: (its round, its global model); (0, ``initial``) where
    there is none."""
    if not (out / "checkpoint.json").exists():
        return 0, initial
    saved = json.loads((out / "checkpoint.json").read_text())
    log(INFO, "fleet_app: resuming after round %d from %s", saved["round"], out / saved["file"])
    return int(saved["round"]), fleet.initial_arrays(model, out / saved["file"])


def _checkpointed(evaluate, out: Path, done: int):
    """``evaluate`` keeping each round's global model in ``out``: ``checkpoint-<round>.npz``,
    then ``checkpoint.json`` naming it (replaced in one step: a run killed at any point leaves
    a whole checkpoint); rounds count on from ``done``."""
    def run(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        metrics = evaluate(server_round, arrays)
        if server_round > 0:
            name = f"checkpoint-{done + server_round}.npz"
            np.savez(out / name, **{k: v.numpy() for k, v in arrays.items()})
            (out / "checkpoint.json.new").write_text(json.dumps({"round": done + server_round, "file": name}))
            os.replace(out / "checkpoint.json.new", out / "checkpoint.json")
            (out / f"checkpoint-{done + server_round - 1}.npz").unlink(missing_ok=True)
        return metrics
    return run
