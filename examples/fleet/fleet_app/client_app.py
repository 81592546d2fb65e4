"""The example's ClientApp: ``irgrad.fleet.client_app`` with this client's shard of the data.

Needs only irgrad's runtime, numpy and flwr: the training artifact is compiled on the host
(``fleet_app.model``, or by the ServerApp on its first run) and found by path. A SuperNode's
``--node-config`` gives ``partition-id`` and ``num-partitions`` (the Simulation Runtime sets
both) and may give ``artifact-dir`` (e.g. its own architecture's build).
"""
from __future__ import annotations

from pathlib import Path

from flwr.app import Context

from irgrad import fleet

from .task import partition


def artifact(context: Context) -> Path:
    """This client's training artifact: ``fleet_prox.vmfb`` under FedProx, else ``fleet.vmfb``,
    in the node's or the run's ``artifact-dir``."""
    directory = context.node_config.get("artifact-dir") or context.run_config["artifact-dir"]
    name = "fleet_prox.vmfb" if context.run_config.get("strategy") == "fedprox" else "fleet.vmfb"
    return Path(str(directory)) / name


def data(context: Context):
    return partition(int(context.node_config["partition-id"]), int(context.node_config["num-partitions"]))


app = fleet.client_app(artifact, data, epochs=2)
