"""Bounded client influence (``irgrad.fleet.guard``, issue 45): an update far from the round's
global model is clipped or refused, ``num-examples`` is capped, Flower's robust strategies run
guarded, and a poisoned global model stops the run with ``PoisonedModel``.

The malicious clients are the example's honest irgrad client with a Flower mod that corrupts
its reply in every round, run on the Simulation Runtime (``run_simulation``) against the
example's data: each attack's held-out loss is compared with the same run without the
attacker.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, ConfigRecord, Message, Metadata, MetricRecord, RecordDict  # noqa: E402

from irgrad import fleet  # noqa: E402
from test_fleet import task  # noqa: E402  (it puts examples/fleet on sys.path)

PARTS = 5  # the honest clients hold partitions 0..3 of 5; the attacker, when there is one, partition 4
ROUNDS = 4


def _corrupt(kind: str, attacker: int):
    """A Flower mod making the client with partition ``attacker`` an attacker: its honest reply's
    parameters ``x`` (the round's global ``g``) become one value of 1e30, ``x·1e6``, ``x·(−10)``
    with ``num-examples`` 1e9, or ``g + 5(x − g)`` (an update five times as long)."""
    def mod(msg, context, call_next):
        reply = call_next(msg, context)
        if int(context.node_config["partition-id"]) != attacker or reply.has_error():
            return reply
        arrays = {k: v.numpy().copy() for k, v in reply.content["arrays"].items()}
        sent = {k: v.numpy() for k, v in msg.content["arrays"].items()}
        if kind == "1e30":
            arrays["w1"][0, 0] = 1e30
        elif kind == "x1e6":
            arrays = {k: a * np.float32(1e6) for k, a in arrays.items()}
        elif kind == "examples":
            arrays = {k: a * np.float32(-10) for k, a in arrays.items()}
            reply.content["metrics"]["num-examples"] = 10 ** 9
        else:
            arrays = {k: (sent[k] + 5 * (a - sent[k])).astype(a.dtype) for k, a in arrays.items()}
        reply.content["arrays"] = ArrayRecord({k: Array(a) for k, a in arrays.items()})
        return reply
    return mod


def _run(built: Path, clients: int, attack: str | None = None, strategies=None, parts: int = PARTS,
         rounds: int = ROUNDS, **rules) -> dict:
    """``clients`` simulated example clients (partitions 0.. of ``parts``; the last one an
    attacker when ``attack``), each strategy of ``strategies`` (name -> (strategy class or
    factory, guard's settings); default: FedAvg guarded with ``rules``) started in turn on the
    same clients: name -> (central losses by round, refused, clipped, accepted)."""
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    path = built / "fleet.vmfb"
    m = fleet.model(path)
    initial = fleet.initial_arrays(m, built / "init.npz")
    common = dict(fraction_evaluate=0.0, min_available_nodes=clients, min_train_nodes=clients)
    strategies = strategies or {"fedavg": (FedAvg, rules)}

    def data(context):
        return task.partition(int(context.node_config["partition-id"]), parts)
    client = fleet.client_app(path, data, epochs=1, mods=[_corrupt(attack, clients - 1)] if attack else [])
    server = ServerApp()
    outcome: dict = {}

    @server.main()
    def main(grid, context) -> None:
        for name, (make, settings) in strategies.items():
            strategy = fleet.guard(make(**common), initial, **settings)
            result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=rounds, timeout=120,
                                    train_config=ConfigRecord({"local-epochs": 1}),
                                    evaluate_fn=fleet.central_evaluation(m, task.test_set()))
            losses = {r: float(v["loss"]) for r, v in result.evaluate_metrics_serverapp.items()}
            outcome[name] = losses, strategy.refused, strategy.clipped, strategy.accepted

    run_simulation(server_app=server, client_app=client, num_supernodes=clients,
                   backend_config={"client_resources": {"num_cpus": 1}})
    return outcome


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The example's artifacts and initial parameters."""
    from fleet_app import model
    out = tmp_path_factory.mktemp("fleet_guard_build")
    assert model.main(str(out)) == 0
    return out


@pytest.fixture(scope="module")
def honest(built) -> dict:
    """The four honest clients alone, guarded with the default rules."""
    return _run(built, PARTS - 1)["fedavg"]


@pytest.fixture(scope="module")
def all_honest(built) -> dict:
    """The five clients, the would-be attacker honest too."""
    return _run(built, PARTS)["fedavg"]


# ----- the rules, exactly -------------------------------------------------------------------

def _reply(arrays: dict[str, np.ndarray], n, node: int) -> Message:
    content = RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in arrays.items()}),
                          "metrics": MetricRecord({"num-examples": n})})
    return Message(content=content, metadata=Metadata(
        run_id=1, message_id=f"m{node}", src_node_id=node, dst_node_id=1, reply_to_message_id="q", group_id="2",
        created_at=time.time(), ttl=600.0, message_type="train"))


class Mean:
    """The smallest message-API strategy: remembers what it was sent, averages by num-examples."""

    def configure_train(self, server_round, arrays, config, grid):
        return []

    def aggregate_train(self, server_round, replies):
        self.seen = list(replies)
        weights = np.array([float(r.content["metrics"]["num-examples"]) for r in self.seen])
        names = list(self.seen[0].content["arrays"].keys())
        return ArrayRecord({k: Array(np.asarray(sum(w * r.content["arrays"][k].numpy() for w, r in
                                                    zip(weights / weights.sum(), self.seen)), np.float32))
                            for k in names}), None


def test_updates_far_from_the_global_model_are_clipped_or_refused_and_weights_capped():
    """Five updates of norm 1, 2, 2, 7 and 50 from a global model of zeros: the median is 2, so
    the one of 7 is clipped to 1.5 × 2 = 3 (its direction kept) and the one of 50 (over 10 × 2)
    refused; of the num-examples left (10, 10, 10, 25) the 25 is capped at 2 × 10."""
    shape = {"w": (2, 2), "b": (2,)}
    zero = ArrayRecord({k: Array(np.zeros(s, np.float32)) for k, s in shape.items()})
    strategy = fleet.guard(Mean(), zero)
    strategy.configure_train(2, zero, ConfigRecord(), None)
    rng = np.random.default_rng(0)

    def update(norm):
        a = {k: rng.standard_normal(s).astype(np.float32) for k, s in shape.items()}
        scale = norm / np.sqrt(sum((v.astype(np.float64) ** 2).sum() for v in a.values()))
        return {k: (v * scale).astype(np.float32) for k, v in a.items()}
    updates = [update(n) for n in (1, 2, 2, 7, 50)]
    counts = [10, 10, 10, 25, 10 ** 9]
    far = {k: v.copy() for k, v in updates[3].items()}
    strategy.aggregate_train(2, [_reply(u, n, node) for node, (u, n) in enumerate(zip(updates, counts), 1)])
    assert [r.metadata.src_node_id for r in strategy.seen] == [1, 2, 3, 4] == strategy.accepted[2]
    assert strategy.refused == [(2, 5, "update norm 50 is over 10 × the round's median 2")]
    assert strategy.clipped == [(2, 4, "update norm 7 clipped to 3 (1.5 × the round's median 2)"),
                                (2, 4, "num-examples 25 capped at 20 (2 × the round's median 10)")]
    clipped = strategy.seen[3].content
    for k in shape:
        np.testing.assert_allclose(clipped["arrays"][k].numpy(), far[k] * 3 / 7, rtol=1e-6)
    assert clipped["metrics"]["num-examples"] == 20 and isinstance(clipped["metrics"]["num-examples"], int)
    # Two updates: the lower median is the smaller one, so one outlier cannot set the bound.
    strategy.configure_train(3, zero, ConfigRecord(), None)
    strategy.aggregate_train(3, [_reply(updates[0], 10, 1), _reply(update(40), 10, 2)])
    assert strategy.refused[-1] == (3, 2, "update norm 40 is over 10 × the round's median 1")
    # Every rule off: every well-formed update passes untouched.
    plain = fleet.guard(Mean(), zero, clip_ratio=None, refuse_ratio=None, max_examples_ratio=None)
    plain.configure_train(1, zero, ConfigRecord(), None)
    plain.aggregate_train(1, [_reply(u, n, node) for node, (u, n) in enumerate(zip(updates, counts), 1)])
    assert plain.refused == plain.clipped == [] and len(plain.seen) == 5
    # An absolute cap.
    capped = fleet.guard(Mean(), zero, max_examples_ratio=None, max_examples=15)
    capped.aggregate_train(4, [_reply(u, n, node) for node, (u, n) in enumerate(zip(updates, counts), 1)])
    assert [c for _, _, c in capped.clipped] == ["num-examples 25 capped at 15 (max_examples)",
                                                 "num-examples 1e+09 capped at 15 (max_examples)"]


def test_bad_settings_and_a_non_finite_aggregate_are_errors():
    zero = ArrayRecord({"w": Array(np.zeros(3, np.float32))})
    for bad, match in [(dict(clip_ratio=0), "clip_ratio must be a positive number or None, not 0"),
                       (dict(max_loss_ratio=float("nan")), "max_loss_ratio must be a positive number"),
                       (dict(clip_ratio=5.0, refuse_ratio=2.0), r"refuse_ratio \(2.0\) is below clip_ratio")]:
        with pytest.raises(ValueError, match=match):
            fleet.guard(Mean(), zero, **bad)

    class Overflow(Mean):  # what an aggregation that overflows float32 would return
        def aggregate_train(self, server_round, replies):
            return ArrayRecord({"w": Array(np.array([1.0, np.inf, np.nan], np.float32))}), None
    strategy = fleet.guard(Overflow(), zero)
    with pytest.raises(fleet.PoisonedModel, match=r"^round 7: the aggregated global model is not finite "
                                                  r"\(w: 2 of 3 values are NaN or infinity\); run stopped$"):
        strategy.aggregate_train(7, [_reply({"w": np.ones(3, np.float32)}, 5, 1)])


# ----- attackers in every round, on the Simulation Runtime ----------------------------------

@pytest.mark.parametrize("attack", ["1e30", "x1e6", "examples"])
def test_an_attacker_in_every_round_leaves_the_loss_of_the_honest_run(built, honest, attack):
    """Four honest clients and one attacker, FedAvg guarded with the default rules, 4 rounds:
    the attacker's update is refused in every round and the held-out loss ends within 10 % of
    the run without it (here: equal, the honest updates are untouched)."""
    losses, refused, clipped, accepted = _run(built, PARTS, attack)["fedavg"]
    honest_losses = honest[0]
    print(f"{attack}: loss {losses[ROUNDS]:.4f}, honest run {honest_losses[ROUNDS]:.4f}; refused {refused}")
    assert [r for r, _, _ in refused] == list(range(1, ROUNDS + 1)), refused
    assert len({node for _, node, _ in refused}) == 1
    assert all("is over 10 × the round's median" in reason for _, _, reason in refused), refused
    assert all(len(nodes) == PARTS - 1 for nodes in accepted.values())
    assert abs(losses[ROUNDS] - honest_losses[ROUNDS]) <= 0.10 * honest_losses[ROUNDS]
    assert losses[ROUNDS] < 0.8 * losses[0]


def test_a_long_update_is_clipped_and_the_loss_stays_near_the_honest_run(built, all_honest):
    """An update five times as long as the attacker's honest one (within 10 × the median, so not
    refused) is clipped to 1.5 × the median in every round: the attacker keeps part of its
    update, and the held-out loss ends within 10 % of the run where it is honest (measured:
    0.621 against 0.594; clipped at 2 × the median instead, 0.763; at 3 ×, 1.43)."""
    losses, refused, clipped, _ = _run(built, PARTS, "x5")["fedavg"]
    print(f"x5: loss {losses[ROUNDS]:.4f}, honest run {all_honest[0][ROUNDS]:.4f}; clipped {clipped}")
    assert refused == [] and all_honest[1] == all_honest[2] == []
    assert [r for r, _, _ in clipped] == list(range(1, ROUNDS + 1)), clipped
    assert all("× the round's median" in what and "clipped to" in what for _, _, what in clipped)
    assert abs(losses[ROUNDS] - all_honest[0][ROUNDS]) <= 0.10 * all_honest[0][ROUNDS]


def test_an_unguarded_attack_poisons_the_model_and_stops_the_run(built):
    """The same ×1e6 attacker with the influence rules off: after round 1 the central loss is
    far over 10 × the initial one, and the run stops with PoisonedModel (run_simulation raises
    it: a script running the simulation exits non-zero)."""
    with pytest.raises(fleet.PoisonedModel, match=r"^round 1: the global model's loss "):
        _run(built, PARTS, "x1e6", clip_ratio=None, refuse_ratio=None, max_examples_ratio=None)


# ----- Flower's robust strategies, guarded ---------------------------------------------------

def test_flowers_robust_strategies_run_guarded_and_withstand_the_attacker(built):
    """Seven clients, one sending parameters ×1e6 in every round. FedMedian, FedTrimmedAvg
    (β 0.2), Krum and Bulyan (one assumed attacker; Bulyan needs 4·1 + 3 = 7 updates), each
    wrapped by guard with its distance rules off, so that the aggregator alone faces the
    attacker: each ends with a finite held-out loss below the initial one and within 25 % of
    guarded FedAvg's (the default rules, which refuse the attacker). FedAdam (which sends the
    global model in float64) runs guarded with the default rules too."""
    from functools import partial

    from flwr.serverapp.strategy import Bulyan, FedAdam, FedAvg, FedMedian, FedTrimmedAvg, Krum

    off = dict(clip_ratio=None, refuse_ratio=None)
    strategies = {"fedavg": (FedAvg, {}), "fedadam": (partial(FedAdam, eta=0.1, eta_l=0.1), {}),
                  "fedmedian": (FedMedian, off),
                  "trimmedavg": (partial(FedTrimmedAvg, beta=0.2), off),
                  "krum": (partial(Krum, num_malicious_nodes=1), off),
                  "bulyan": (partial(Bulyan, num_malicious_nodes=1), off)}
    outcome = _run(built, 7, "x1e6", strategies, parts=7, rounds=3)
    final = {name: losses[3] for name, (losses, *_) in outcome.items()}
    print("held-out loss after 3 rounds, one ×1e6 attacker of 7:",
          ", ".join(f"{k} {v:.4f}" for k, v in final.items()))
    for name, (losses, refused, _, accepted) in outcome.items():
        assert np.isfinite(losses[3]) and losses[3] < losses[0], (name, losses)
        if name in ("fedavg", "fedadam"):
            assert [r for r, _, _ in refused] == [1, 2, 3], (name, refused)
        else:
            assert refused == [] and all(len(nodes) == 7 for nodes in accepted.values()), name
            assert losses[3] <= 1.25 * final["fedavg"], (name, final)


def test_the_example_server_app_runs_trimmedavg_guarded(built, tmp_path):
    """The example's ServerApp (fleet_app.server_app.main) with ``strategy="trimmedavg"``
    over five simulated clients, one of them sending a value of 1e30: guard refuses it every
    round (``losses.json`` says so) and the run ends below its initial loss; an unknown
    strategy is a one-line error."""
    from flwr.app import Context
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation
    from fleet_app import client_app, server_app

    config = {"artifact-dir": str(built), "result-dir": str(tmp_path), "strategy": "trimmedavg",
              "num-server-rounds": 2, "min-nodes": 5, "local-epochs": 1, "round-timeout": 120.0}
    server = ServerApp()

    @server.main()
    def main(grid, context) -> None:
        context.run_config = config
        server_app.main(grid, context)
    client = fleet.client_app(built / "fleet.vmfb", client_app.data, epochs=1, mods=[_corrupt("1e30", 4)])
    run_simulation(server_app=server, client_app=client, num_supernodes=5,
                   backend_config={"client_resources": {"num_cpus": 1}})
    result = json.loads((tmp_path / "losses.json").read_text())
    assert [r for r, _, _ in result["refused"]] == [1, 2], result
    assert result["central_loss"]["2"] < result["central_loss"]["0"]
    assert all(len(nodes) == 4 for nodes in result["accepted"].values())
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                      run_config={**config, "strategy": "fedsgd"})
    with pytest.raises(ValueError, match="run config strategy='fedsgd': not one of fedavg, fedprox, fedadam"):
        server_app.main(None, context)


# ----- a poisoned model through `flwr run` ----------------------------------------------------

@pytest.mark.slow
def test_flwr_run_of_a_poisoned_model_ends_failed_with_the_message(built, tmp_path):
    """``flwr run`` (the guide's commands, a local simulation on ports of its own) with
    ``max-loss-ratio=0.5``: round 1's loss is over half the initial one, so the ServerApp raises
    PoisonedModel. flwr 1.42's ``flwr run`` submits the run and exits 0 whatever the run does;
    the run's status, ``finished:failed`` with the message, is what ``flwr ls`` reports, and the
    guide's status line turns it into a non-zero exit."""
    import subprocess

    from test_fleet import BIN, ROOT, _flwr_env, _free_port, _connections, _run_config, _stop_descendants

    home = tmp_path / "flwr"
    _connections(home)
    env = dict(_flwr_env(home), FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(_free_port()),
               FLWR_LOCAL_CONTROL_API_PORT=str(_free_port()))
    config = _run_config(built, tmp_path / "result", **{"max-loss-ratio": 0.5, "num-server-rounds": 2})

    def flwr(*args, timeout=300):
        return subprocess.run([str(BIN / "flwr"), *args], capture_output=True, text=True, cwd=ROOT, env=env,
                              timeout=timeout)
    try:
        submitted = subprocess.run(["bash", "-c", f'flwr run examples/fleet --format json --run-config "$CONFIG" | '
                                    f'{RUN_ID}'], capture_output=True, text=True, cwd=ROOT,
                                   env=dict(env, CONFIG=config), timeout=300)
        assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:]
        run_id = int(submitted.stdout)
        logged = flwr("log", str(run_id), timeout=400)  # streams the run's log until it ends
        status = subprocess.run(["bash", "-c", STATUS_LINE.replace("$id", str(run_id))], capture_output=True,
                                text=True, cwd=ROOT, env=env, timeout=120)
    finally:
        _stop_descendants(set(), marker=str(home))
    print(f"flwr run: exit 0 (submitted run {run_id}); flwr ls: {status.stdout.strip()}")
    assert "PoisonedModel: round 1: the global model's loss" in logged.stdout, logged.stdout[-3000:]
    assert status.returncode == 1, status.stdout + status.stderr
    assert status.stdout.startswith("finished:failed ") and "is over 0.5 × the initial" in status.stdout, status.stdout
    guide = (ROOT / "docs" / "guides" / "fleet.md").read_text()
    assert RUN_ID in guide and STATUS_LINE in guide


# The guide's lines: the run's id from `flwr run --format json`; the run's status and its
# reason, exiting 1 unless the run completed.
STATUS_LINE = ("flwr ls --run-id $id --format json | python3 -c 'import json, sys; run = json.load(sys.stdin)"
               "[\"runs\"][0]; print(run[\"status\"], run[\"status-details\"]); "
               "sys.exit(run[\"status\"] != \"finished:completed\")'")
RUN_ID = "python3 -c 'import json, sys; print(json.load(sys.stdin)[\"run-id\"])'"
