"""``Module.trainer``: on-device training with an artifact's ``@F_train_step``.

The parameters and the optimizer state stay in device buffers from one step to the next: a
step uploads its data, runs, and brings back F's results only. ``params()`` / ``state()`` copy
them to the host when asked; ``save`` writes both to an ``.npz`` atomically (a temporary file in
the same folder, flushed to disk, then renamed over the old one), and ``restore`` refuses a file
that is damaged (a SHA-256 digest of the arrays) or belongs to another step (names, shapes,
dtypes) before anything reaches the device.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

_MANIFEST = "irgrad_checkpoint"


def training_step(metadata: dict[str, Any], function: str | None = None) -> tuple[str, dict[str, Any]]:
    """The name and state layout of a module's training step (``metadata["training"]``):
    ``function``, or the only one when it is None; ValueError naming the choices otherwise."""
    training = metadata.get("training") or {}
    if function is None:
        if len(training) != 1:
            raise ValueError(f"the module has {len(training)} training steps; choose one with function= "
                             f"({', '.join(training) or 'none: compile with --train'})")
        function = next(iter(training))
    if function not in training:
        raise ValueError(f"{function!r} is not a training step of this module "
                         f"({', '.join(training) or 'none: compile with --train'})")
    return function, training[function]


class Trainer:
    """Steps of ``module[function]``, a training step (``passes.train``'s layout in the
    module's ``metadata["training"]``), starting from ``params`` and a zero state."""

    def __init__(self, module: Any, params, function: str | None = None) -> None:
        self.function, self.layout = training_step(module.metadata, function)
        self._step = module[self.function]
        sig = self._step.signature
        self._wrt = list(self.layout["params"])
        n_state = len(self.layout["state"])
        self._n_args = len(sig.inputs) - n_state
        self._data = [i for i in range(self._n_args) if i not in self._wrt]
        self._n_results = len(sig.outputs) - len(self._wrt) - n_state
        params = list(params)
        if len(params) != len(self._wrt):
            raise TypeError(f"{self.function}: expected {len(self._wrt)} parameter arrays (args "
                            f"{', '.join(map(str, self._wrt))}), got {len(params)}")
        self._params = [self._step._upload(i, p) for i, p in zip(self._wrt, params)]
        self._state = [self._step._upload(self._n_args + k, np.zeros(t.shape, _dtype(t)))
                       for k, t in enumerate(sig.inputs[self._n_args:])]

    def step(self, *data):
        """One optimizer step on ``data`` (F's arguments that are not parameters, in order);
        F's results (one array, or a list)."""
        if len(data) != len(self._data):
            raise TypeError(f"{self.function}: a step takes {len(self._data)} data arrays (args "
                            f"{', '.join(map(str, self._data))}), got {len(data)}")
        views = [None] * self._n_args
        for i, view in zip(self._wrt, self._params):
            views[i] = view
        for i, array in zip(self._data, data):
            views[i] = self._step._upload(i, array)
        out = self._step._invoke(views + self._state)
        n, p = self._n_results, len(self._wrt)
        self._params, self._state = out[n:n + p], out[n + p:]
        results = [self._step._download(v, t) for v, t in zip(out[:n], self._step.signature.outputs)]
        return results[0] if len(results) == 1 else results

    def params(self) -> list[np.ndarray]:
        """The parameters, copied to the host."""
        outputs = self._step.signature.outputs[self._n_results:]
        return [self._step._download(v, t) for v, t in zip(self._params, outputs)]

    def state(self) -> list[np.ndarray]:
        """The optimizer state (``layout["state"]``'s order), copied to the host."""
        outputs = self._step.signature.outputs[self._n_results + len(self._wrt):]
        return [self._step._download(v, t) for v, t in zip(self._state, outputs)]

    def save(self, path: str | os.PathLike) -> None:
        """Parameters and state to ``path`` (.npz): all of it or, if interrupted, nothing
        (the previous file stays as it was)."""
        path = Path(path)
        arrays = self.params() + self.state()
        manifest = json.dumps({"function": self.function, "layout": self.layout, "digest": _digest(arrays)})
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **{f"a{i}": a for i, a in enumerate(arrays)}, **{_MANIFEST: np.array(manifest)})
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        directory = os.open(path.parent or ".", os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def restore(self, path: str | os.PathLike) -> None:
        """Parameters and state from ``path`` (written by ``save`` for this training step).

        Raises:
            ValueError: the file is damaged, not a checkpoint, or one of another step.
        """
        where = f"{path}: not a checkpoint of {self.function}"
        try:
            with np.load(path, allow_pickle=False) as f:
                manifest = json.loads(str(f[_MANIFEST]))
                arrays = [f[f"a{i}"] for i in range(len(f.files) - 1)]
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
            raise ValueError(f"{where}: {error}") from None
        if manifest.get("function") != self.function or manifest.get("layout") != self.layout:
            raise ValueError(f"{where}: it was saved from {manifest.get('function')!r} "
                             f"({manifest.get('layout')})")
        if manifest.get("digest") != _digest(arrays):
            raise ValueError(f"{where}: damaged (digest mismatch)")
        sig = self._step.signature
        inputs = [sig.inputs[i] for i in self._wrt] + list(sig.inputs[self._n_args:])
        if len(arrays) != len(inputs):
            raise ValueError(f"{where}: {len(arrays)} arrays, expected {len(inputs)}")
        for a, t in zip(arrays, inputs):
            if a.dtype != _dtype(t) or not t.matches_shape(a.shape):
                raise ValueError(f"{where}: an array of {a.dtype} {a.shape} where {t} is expected")
        views = [self._step._upload(i, a) for i, a in zip(self._wrt, arrays)]
        self._state = [self._step._upload(self._n_args + k, a) for k, a in enumerate(arrays[len(self._wrt):])]
        self._params = views


def _dtype(t: Any) -> np.dtype:
    return np.dtype(t.dtype)


def _digest(arrays: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()
