"""Personalise on the device with irgrad's runtime-only install (no compiler on the device):

    pip install iree-base-runtime numpy && pip install --no-deps irgrad
    python train.py MODULE.vmfb DATA_DIR [STEPS]

DATA_DIR holds what ``model.py`` wrote: the base weights and the user's samples. The
parameters and Adam's state stay in device buffers between steps (``Module.trainer``); the
run ends with ``DATA_DIR/checkpoint.npz``, written atomically (a power loss during the save
leaves the previous checkpoint), and the next run resumes from it.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import irgrad as ig

PARAMS = ("w1", "b1", "w2", "b2")  # model.py's parameters: loss's arguments 2-5


def main(module: str, data_dir: str, steps: str = "50") -> int:
    data = Path(data_dir)
    trainer = ig.load(module).trainer([np.load(data / f"{name}.npy") for name in PARAMS])
    checkpoint = data / "checkpoint.npz"
    if checkpoint.exists():
        trainer.restore(checkpoint)
    x, labels = np.load(data / "x.npy"), np.load(data / "labels.npy")
    for step in range(int(steps)):
        print(f"step {step}: loss {float(trainer.step(x, labels)):.6f}")
    trainer.save(checkpoint)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
