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
    module's ``metadata["training"]``), starting from ``params`` (a list in the parameters'
    order, or a dict by name: ``param_names``) and a zero state.

    ``param_names``, ``state_names`` and ``result_names`` say what the arrays are;
    ``named_params()`` and ``named_state()`` return them by name."""

    def __init__(self, module: Any, params, function: str | None = None) -> None:
        self.function, self.layout = training_step(module.metadata, function)
        self._step = module[self.function]
        sig = self._step.signature
        self._wrt = list(self.layout["params"])
        n_state = len(self.layout["state"])
        self._n_args = len(sig.inputs) - n_state
        self._data = [i for i in range(self._n_args) if i not in self._wrt]
        self._n_results = len(sig.outputs) - len(self._wrt) - n_state
        names = list(sig.arg_names) + [None] * len(sig.inputs)
        #: The parameters' names (``w1``, or ``arg<i>`` where F's argument has none), in order.
        self.param_names: list[str] = list(self.layout.get("param_names")
                                           or [names[i] or f"arg{i}" for i in self._wrt])
        #: What each state entry is (``step``, ``m_w1``, ``v_w1``...), in the state's order.
        self.state_names: list[str] = list(self.layout["state"])
        #: The names of F's results, which ``step`` returns (``result<k>`` where F gave none).
        self.result_names: list[str] = sig.output_keys()[:self._n_results]
        if isinstance(params, dict):
            params = _by_name(params, self.param_names, f"{self.function}: params")
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
        results = self._step._download(out[:n], self._step.signature.outputs[:n])
        return results[0] if len(results) == 1 else results

    def params(self) -> list[np.ndarray]:
        """The parameters, copied to the host."""
        outputs = self._step.signature.outputs[self._n_results:]
        return self._step._download(self._params, outputs)

    def state(self) -> list[np.ndarray]:
        """The optimizer state (``layout["state"]``'s order), copied to the host."""
        outputs = self._step.signature.outputs[self._n_results + len(self._wrt):]
        return self._step._download(self._state, outputs)

    def named_params(self) -> dict[str, np.ndarray]:
        """The parameters by name (``param_names``), copied to the host."""
        return dict(zip(self.param_names, self.params()))

    def named_state(self) -> dict[str, np.ndarray]:
        """The optimizer state by name (``state_names``: ``step``, ``m_w1``...), copied to the host."""
        return dict(zip(self.state_names, self.state()))

    def save(self, path: str | os.PathLike) -> None:
        """Parameters and state to ``path`` (.npz): all of it or, if interrupted, nothing
        (the previous file stays as it was)."""
        path = Path(path)
        arrays = self.params() + self.state()
        keys = self.param_names + self.state_names  # by name where the names tell them apart
        if len(set(keys)) != len(keys) or _MANIFEST in keys:
            keys = [f"a{i}" for i in range(len(arrays))]
        manifest = json.dumps({"function": self.function, "layout": self.layout, "digest": _digest(arrays),
                               "keys": keys})
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **dict(zip(keys, arrays)), **{_MANIFEST: np.array(manifest)})
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
                keys = manifest.get("keys") or [f"a{i}" for i in range(len(f.files) - 1)]  # older: a0, a1...
                arrays = [f[k] for k in keys]
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


def _by_name(arrays: dict[str, Any], names: list[str], what: str) -> list[Any]:
    """``arrays[name]`` for each of ``names``; TypeError naming what is missing or unknown."""
    missing = [n for n in names if n not in arrays]
    extra = [k for k in arrays if k not in names]
    if missing or extra:
        raise TypeError(f"{what}: expected {', '.join(names)}; " + "; ".join(
            part for part in (missing and f"missing {', '.join(missing)}",
                              extra and f"unknown {', '.join(map(str, extra))}{_did_you_mean(extra, names)}")
            if part))
    return [arrays[n] for n in names]


def _did_you_mean(given: list[Any], names: list[str]) -> str:
    import difflib

    known = {n.lower(): n for n in reversed(names)}  # case aside: W1 for w1
    close = [known[m] for g in given for m in difflib.get_close_matches(str(g).lower(), list(known), n=1)]
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _dtype(t: Any) -> np.dtype:
    return np.dtype(t.dtype)


def _digest(arrays: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()
