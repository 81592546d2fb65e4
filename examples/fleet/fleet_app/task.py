"""The example's data and model sizes: numpy only, so the client needs no compiler.

A pool of noisy 8-feature samples of 4 classes (overlapping Gaussian blobs: the best loss is
well above zero), split non-IID the classic way: the training pool sorted by label and cut in
``2 * num_partitions`` shards, client ``p`` holding shards ``p`` and ``p + num_partitions`` —
so each client sees about one class of {0, 1} and one of {2, 3}. The test pool is the same
for every number of clients; the server evaluates the global model on all of it.
"""
from __future__ import annotations

import numpy as np

BATCH, FEATURES, HIDDEN, CLASSES = 32, 8, 16, 4
PARAMS = ("w1", "b1", "w2", "b2")
POOL = 3200  # training examples in all (and as many test examples)


def _pool(seed: int, n: int = POOL) -> tuple[np.ndarray, np.ndarray]:
    centres = np.random.default_rng(1234).standard_normal((CLASSES, FEATURES)) * 0.6
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % CLASSES
    x = centres[labels] + rng.standard_normal((n, FEATURES))
    return x.astype(np.float32), np.eye(CLASSES, dtype=np.float32)[labels]


def union() -> tuple[np.ndarray, np.ndarray]:
    """Every client's training data together (what central training would see)."""
    return _pool(seed=1)


def test_set() -> tuple[np.ndarray, np.ndarray]:
    """The held-out pool the server evaluates the global model on."""
    return _pool(seed=2)


def partition(partition_id: int, num_partitions: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Client ``partition_id``'s (train, test) data: two label-sorted shards of the training
    pool, and its slice of the test pool (for federated evaluation)."""
    if not 0 <= partition_id < num_partitions:
        raise ValueError(f"partition-id {partition_id} is not in 0..{num_partitions - 1}")
    x, labels = union()
    order = np.argsort(labels.argmax(1), kind="stable")
    shards = np.array_split(order, 2 * num_partitions)
    mine = np.concatenate([shards[partition_id], shards[partition_id + num_partitions]])
    tx, tl = test_set()
    test = np.array_split(np.arange(len(tx)), num_partitions)[partition_id]
    return [x[mine], labels[mine]], [tx[test], tl[test]]


def initial_params(seed: int = 0) -> dict[str, np.ndarray]:
    """The global model's starting point."""
    rng = np.random.default_rng(seed)
    return {"w1": (rng.standard_normal((FEATURES, HIDDEN)) / np.sqrt(FEATURES)).astype(np.float32),
            "b1": np.zeros(HIDDEN, np.float32),
            "w2": (rng.standard_normal((HIDDEN, CLASSES)) / np.sqrt(HIDDEN)).astype(np.float32),
            "b2": np.zeros(CLASSES, np.float32)}
