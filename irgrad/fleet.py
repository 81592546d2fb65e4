"""Federated learning with irgrad training artifacts: Flower (``flwr``) clients and server helpers.

A training artifact (``--train``) is the whole on-device part of federated learning: one
compiled optimizer step, run by IREE's runtime. Flower does the rest — transport, client
sampling, aggregation, secure aggregation, differential privacy, failures. This module joins
the two and imports only ``irgrad.runtime``, numpy and ``flwr``, so a client needs
``iree-base-runtime``, ``numpy``, ``flwr`` and irgrad (``pip install --no-deps irgrad``), no
compiler and no Python ML framework.

Client (``client_app``): each ``train`` message carries the global parameters as an
``ArrayRecord`` keyed by the artifact's parameter names (the producer's argument names,
``"arg<i>"`` where it gave none); the client runs ``local-epochs`` epochs of the artifact's
``@F_train_step`` over its local data through ``Module.trainer`` (parameters and optimizer
state on the device between steps) and replies with the new parameters and a
``MetricRecord`` of ``train_loss`` (the mean of the epochs' step losses) and ``num-examples``.
``evaluate`` runs the artifact's forward ``@F`` and replies ``eval_loss`` and
``num-examples``.

The optimizer's state between rounds: by default every round starts from a zero state (the
counter and the slots of ``@F_train_init``), as a freshly started optimizer would on the new
global parameters; ``keep_state=True`` keeps the client's state (Adam's moments, the step
counter) in its ``Context`` from one round to the next, in memory on that client.

FedProx: a training step compiled with the proximal term (``passes.proximal``) takes
the round's global parameters as extra arguments, named ``"global:<name>"``; the client
passes them, and the server runs Flower's ``FedProx`` (or any strategy) unchanged.

Server (``initial_arrays``, ``guard``, ``central_evaluation``): initial parameters from an
``.npz`` or arrays, checked against the artifact; ``guard(strategy, template)`` makes any
Flower strategy refuse a reply whose arrays are not finite, have other names, shapes or
dtypes, or whose ``num-examples`` is not a positive number, logging the reason; such an
update is never averaged. It also bounds each client's influence (updates far from the
round's global model, measured against the round's median, are clipped or refused;
``num-examples`` is capped) and stops the run (``PoisonedModel``) when the global model is
not finite or its central loss explodes.
"""
from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.logger import log

from .runtime import Module, load
from .runtime.trainer import training_step

__all__ = ["GLOBAL_PREFIX", "Model", "PoisonedModel", "central_evaluation", "client_app", "guard", "initial_arrays",
           "model", "tolerate_dropouts"]

# A training step with the proximal term names the global copy of parameter ``w`` "global:w".
GLOBAL_PREFIX = "global:"
# Where ``keep_state`` keeps the optimizer's state in the client's Context.
STATE_KEY = "irgrad.optimizer"


class Model:
    """An artifact's training step seen as a federated model: its parameter names, shapes and
    dtypes, its data arguments and their static batch, local training and evaluation.

    ``function`` chooses the training step where the artifact has several.
    """

    def __init__(self, module: Module | str | os.PathLike, function: str | None = None) -> None:
        self.module = module if isinstance(module, Module) else load(module)
        function, layout = training_step(self.module.metadata, function)
        self.function = function
        self.forward = function.removesuffix("_train_step")
        sig = self.module.functions[function]
        n_args = len(sig.inputs) - len(layout["state"])
        arg_names = list(sig.arg_names or (None,) * len(sig.inputs))[:n_args]
        names = [n if n else f"arg{i}" for i, n in enumerate(arg_names)]
        self.wrt: list[int] = list(layout["params"])
        self.names: list[str] = [names[i] for i in self.wrt]
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"{function}: parameter names are not unique: {self.names}")
        self.specs: dict[str, tuple[tuple[int, ...], np.dtype]] = {
            names[i]: (tuple(sig.inputs[i].shape), np.dtype(sig.inputs[i].dtype)) for i in self.wrt}
        others = [i for i in range(n_args) if i not in self.wrt]
        # Arguments named "global:<param>" take the round's global parameters (FedProx), one
        # per parameter in the parameters' order (passes.proximal).
        self.globals: list[int] = [i for i in others if names[i].startswith(GLOBAL_PREFIX)]
        if self.globals and len(self.globals) != len(self.wrt):
            raise ValueError(f"{function}: {len(self.globals)} {GLOBAL_PREFIX} arguments for {len(self.wrt)} "
                             "parameters")
        self.data: list[int] = [i for i in others if not names[i].startswith(GLOBAL_PREFIX)]
        self.data_types = [sig.inputs[i] for i in self.data]
        shapes = [t.shape for t in self.data_types]
        self.batch: int | None = shapes[0][0] if shapes and shapes[0] else None
        self._n_args = n_args

    # ----- parameters as Flower records -----------------------------------------------------

    def arrays(self, params: Sequence[np.ndarray] | dict[str, np.ndarray]) -> ArrayRecord:
        """``params`` (in the artifact's order, or by name) as an ``ArrayRecord`` keyed by name."""
        if isinstance(params, dict):
            params = [params[n] for n in self.names]
        problem = self.check({n: np.asarray(p) for n, p in zip(self.names, params)}, len(params))
        if problem:
            raise ValueError(problem)
        return ArrayRecord({n: Array(np.ascontiguousarray(p)) for n, p in zip(self.names, params)})

    def params(self, record: ArrayRecord) -> list[np.ndarray]:
        """The parameters in ``record``, in the artifact's order (ValueError when they do not fit).
        Floats of another width are converted: some strategies (FedAdam, FedYogi...) send the
        global model in float64."""
        arrays = {k: v.numpy() for k, v in record.items()}
        for name, (_, dtype) in self.specs.items():
            a = arrays.get(name)
            if a is not None and a.dtype != dtype and a.dtype.kind == "f" and np.dtype(dtype).kind == "f":
                arrays[name] = a.astype(dtype)
        problem = self.check(arrays)
        if problem:
            raise ValueError(problem)
        return [arrays[n] for n in self.names]

    def check(self, arrays: dict[str, np.ndarray], count: int | None = None) -> str | None:
        """Why ``arrays`` are not parameters of this model (names, shapes, dtypes, finite
        values), or None when they are."""
        return check_arrays(arrays, self.specs, count)

    # ----- training and evaluation --------------------------------------------------------

    def batches(self, data: Sequence[np.ndarray], rng: np.random.Generator | None = None):
        """``data`` (arrays with a leading example axis) in the artifact's static batches, in an
        order shuffled by ``rng`` (None: as given); a last partial batch is left out."""
        data = [np.asarray(d) for d in data]
        if len(data) != len(self.data):
            raise TypeError(f"{self.function}: the local data has {len(data)} arrays; the step takes "
                            f"{len(self.data)} ({', '.join(str(t) for t in self.data_types)})")
        n = len(data[0])
        b = self.batch or n
        if n < b:
            raise ValueError(f"{n} local examples, fewer than the artifact's batch of {b}")
        order = rng.permutation(n) if rng is not None else np.arange(n)
        for start in range(0, n - b + 1, b):
            index = order[start:start + b]
            yield [d[index].astype(t.dtype, copy=False) for d, t in zip(data, self.data_types)]

    def examples(self, data: Sequence[np.ndarray]) -> int:
        """How many of ``data``'s examples an epoch uses (whole batches)."""
        n = len(data[0])
        b = self.batch or n
        return n // b * b

    def fit(self, params: Sequence[np.ndarray], data: Sequence[np.ndarray], epochs: int = 1,
            state: Sequence[np.ndarray] | None = None, rng: np.random.Generator | None = None,
            global_params: Sequence[np.ndarray] | None = None):
        """``epochs`` epochs of the training step from ``params`` (and ``state``, None: zero):
        ``(params, state, mean step loss, examples per epoch)``. ``global_params`` (default:
        ``params``) feed a proximal step's ``global:`` arguments."""
        trainer = self.module.trainer(list(params), self.function)
        if state is not None:
            _set_state(trainer, state)
        anchors = list(global_params if global_params is not None else params) if self.globals else []
        losses = []
        for _ in range(epochs):
            for batch in self.batches(data, rng):
                result = trainer.step(*batch, *anchors)
                losses.append(float(np.asarray(result if not isinstance(result, list) else result[0])))
        return trainer.params(), trainer.state(), float(np.mean(losses)) if losses else float("nan"), \
            self.examples(data)

    def evaluate(self, params: Sequence[np.ndarray], data: Sequence[np.ndarray]) -> tuple[float, int]:
        """The forward's mean loss over ``data``'s whole batches, and how many examples that is."""
        forward = self.module[self.forward]
        args: list[Any] = [None] * self._n_args
        for i, p in zip(self.wrt, params):
            args[i] = p
        for i, p in zip(self.globals, params):
            args[i] = p  # the proximal term is zero at the global parameters
        losses = []
        for batch in self.batches(data):
            for i, d in zip(self.data, batch):
                args[i] = d
            out = forward(*args)
            losses.append(float(np.asarray(out[0] if isinstance(out, tuple) else out)))
        return float(np.mean(losses)), self.examples(data)


def check_arrays(arrays: dict[str, np.ndarray], specs: dict[str, tuple[tuple[int, ...], np.dtype]],
                 count: int | None = None) -> str | None:
    """Why ``arrays`` do not match ``specs`` (name -> (shape, dtype)) or are not finite, or None."""
    missing = [n for n in specs if n not in arrays]
    extra = [n for n in arrays if n not in specs]
    if count is not None and count != len(specs):
        return f"{count} parameter arrays where {len(specs)} are expected ({', '.join(specs)})"
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if extra:
            parts.append(f"unexpected {', '.join(map(repr, extra))}")
        return f"parameter names do not match the model's ({'; '.join(parts)})"
    for name, (shape, dtype) in specs.items():
        a = arrays[name]
        if tuple(a.shape) != tuple(shape) or a.dtype != dtype:
            return f"{name}: {a.dtype}{list(a.shape)} where {np.dtype(dtype)}{list(shape)} is expected"
        if a.dtype.kind in "fc" and not np.isfinite(a).all():
            bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
            return f"{name}: {bad} of {a.size} values are not finite (NaN or infinity)"
    return None


def _set_state(trainer: Any, state: Sequence[np.ndarray]) -> None:
    """Put ``state`` (``trainer.state()``'s layout) into the trainer's device buffers."""
    step = trainer._step
    n_args = len(step.signature.inputs) - len(trainer.layout["state"])
    trainer._state = [step._upload(n_args + k, np.asarray(a)) for k, a in enumerate(state)]


_MODELS: dict[tuple[str, str | None], Model] = {}
_MODELS_LOCK = threading.Lock()


def model(artifact: str | os.PathLike, function: str | None = None) -> Model:
    """The ``Model`` of the artifact at ``artifact``, loaded once per process."""
    key = (os.path.abspath(artifact), function)
    with _MODELS_LOCK:
        if key not in _MODELS:
            _MODELS[key] = Model(key[0], function)
        return _MODELS[key]


Data = Sequence[np.ndarray]


def client_app(artifact: str | os.PathLike | Callable[[Context], str | os.PathLike],
               data: Callable[[Context], tuple[Data, Data]], *, epochs: int = 1, keep_state: bool = False,
               function: str | None = None, mods: list | None = None) -> ClientApp:
    """A Flower ``ClientApp`` that trains and evaluates with the training artifact ``artifact``
    (a path, or a function of the client's ``Context`` giving one).

    ``data(context)`` gives the client's ``(train, test)`` data, each a sequence of arrays with
    a leading example axis, in the order of the training step's data arguments (those that
    are not parameters). ``epochs`` local epochs per round unless the message's config has
    ``local-epochs``; ``keep_state`` keeps the optimizer's state between rounds (module
    docstring); ``mods``: Flower mods for the whole app (secure aggregation, clipping...).
    """
    app = ClientApp(mods=mods or [])

    def setup(context: Context) -> tuple[Model, tuple[Data, Data]]:
        path = artifact(context) if callable(artifact) else artifact
        return model(path, function), data(context)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        m, (local, _) = setup(context)
        if _LEGACY_FIT in msg.content.array_records:  # a legacy workflow's FitIns (SecAgg+)
            return _legacy_train(m, msg, context, local, epochs, keep_state)
        record = _only(msg.content.array_records, "ArrayRecord")
        params = m.params(record)
        config = next(iter(msg.content.config_records.values()), {}) if msg.content.config_records else {}
        n_epochs = int(config.get("local-epochs", epochs))
        server_round = int(config.get("server-round", 0))
        params, loss, n = _local_training(m, params, local, n_epochs, server_round, context, keep_state)
        content = RecordDict({"arrays": m.arrays(params),
                              "metrics": MetricRecord({"train_loss": loss, "num-examples": n})})
        return Message(content=content, reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        m, (_, test) = setup(context)
        params = m.params(_only(msg.content.array_records, "ArrayRecord"))
        loss, n = m.evaluate(params, test)
        content = RecordDict({"metrics": MetricRecord({"eval_loss": loss, "num-examples": n})})
        return Message(content=content, reply_to=msg)

    return app


def _local_training(m: Model, params: list[np.ndarray], local: Data, epochs: int, server_round: int,
                    context: Context, keep_state: bool) -> tuple[list[np.ndarray], float, int]:
    state = None
    if keep_state and STATE_KEY in context.state:
        kept = context.state[STATE_KEY]
        state = [kept[k].numpy() for k in sorted(kept, key=int)]
    # The batches' order: the same for a client and round whatever the node's id.
    seed = (int(context.node_config.get("partition-id", context.node_id)) % 2**32, server_round)
    params, new_state, loss, n = m.fit(params, local, epochs, state, np.random.default_rng(seed))
    if keep_state:
        context.state[STATE_KEY] = ArrayRecord({str(k): Array(s) for k, s in enumerate(new_state)})
    return params, loss, n


# Flower's legacy workflows (DefaultWorkflow, which SecAgg+ needs) send FitIns: the parameters
# as an ArrayRecord of positional arrays, replies are FitRes.
_LEGACY_FIT = "fitins.parameters"


def _legacy_train(m: Model, msg: Message, context: Context, local: Data, epochs: int, keep_state: bool) -> Message:
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.compat.common import recorddict_compat as compat

    fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
    arrays = parameters_to_ndarrays(fitins.parameters)
    problem = m.check(dict(zip(m.names, arrays)), len(arrays))
    if problem:
        raise ValueError(problem)
    config = fitins.config
    group = msg.metadata.group_id  # the legacy workflows' round number
    server_round = int(config.get("server-round", group if group.isdigit() else 0))
    params, loss, n = _local_training(m, arrays, local, int(config.get("local-epochs", epochs)), server_round,
                                      context, keep_state)
    fitres = FitRes(Status(Code.OK, "ok"), ndarrays_to_parameters(params), n, {"train_loss": loss})
    return Message(content=compat.fitres_to_recorddict(fitres, keep_input=False), reply_to=msg)


def _only(records: dict, what: str):
    if len(records) != 1:
        raise ValueError(f"expected one {what} in the message, got {len(records)}")
    return next(iter(records.values()))


# ----- server side ------------------------------------------------------------------------

def initial_arrays(artifact: Model | str | os.PathLike, source: str | os.PathLike | dict | Sequence[np.ndarray],
                   function: str | None = None) -> ArrayRecord:
    """The global model's starting point for ``strategy.start(initial_arrays=...)``: ``source``
    (an ``.npz`` keyed by parameter name, a dict, or arrays in the artifact's order), checked
    against the artifact's parameter names, shapes and dtypes."""
    m = artifact if isinstance(artifact, Model) else model(artifact, function)
    if isinstance(source, (str, os.PathLike)):
        with np.load(source, allow_pickle=False) as f:
            source = {k: f[k] for k in f.files}
    if isinstance(source, dict):
        problem = m.check({k: np.asarray(v) for k, v in source.items()})
        if problem:
            raise ValueError(f"initial parameters: {problem}")
        source = [source[n] for n in m.names]
    return m.arrays(list(source))


class PoisonedModel(RuntimeError):
    """The global model went bad (non-finite parameters after aggregation, or a central loss
    that is not finite or has exploded): ``guard`` stops the run with this exception."""


def guard(strategy: Any, template: ArrayRecord | Model, weighted_by_key: str = "num-examples", *,
          clip_ratio: float | None = 1.5, refuse_ratio: float | None = 10.0,
          max_examples_ratio: float | None = 2.0, max_examples: float | None = None,
          loss_key: str = "loss", max_loss_ratio: float | None = 10.0) -> Any:
    """``strategy`` (any Flower message-API strategy: FedAvg, FedProx, FedAdam, FedMedian,
    FedTrimmedAvg, Krum, Bulyan, the DP wrappers...) with the influence of any one client
    bounded and a poisoned global model stopping the run. Returns ``strategy``, changed in place.

    In ``aggregate_train``, before the strategy sees a round's replies:

    1. **Malformed** replies are refused: arrays that do not match ``template`` (the initial
       ``ArrayRecord``, or a ``Model``) in names, shapes or dtypes, NaN or infinite values, or a
       ``weighted_by_key`` (``num-examples``) that is not a positive finite number.
    2. **Distance from the global model**: each update's norm ``d = ||x - g||₂`` over all its
       arrays, ``g`` the global model sent in that round (``configure_train`` is wrapped to
       remember it). ``m`` is the round's median ``d`` (the lower median for an even count, so
       that one outlier among two updates cannot set the bound). An update with
       ``d > refuse_ratio · m`` is refused as implausible (a value of 1e30, parameters ×1e6 or
       ×−10); one with ``d > clip_ratio · m`` is clipped to ``g + (x − g) · clip_ratio · m / d``,
       as DP-FedAvg clips client updates to a norm bound (McMahan et al. 2018), with the bound
       taken from the round's median as adaptive clipping does. While more than half of a
       round's updates are honest, ``m`` is an honest update's norm, so no client's update is
       longer than ``clip_ratio`` honest ones. The default 1.5: on the example, a client
       sending five times its update in every round moved the held-out loss by +4 % clipped
       at 1.5 ×, +28 % at 2 ×, +140 % at 3 × (tests/test_fleet_guard.py).
    3. **Weights**: ``num-examples`` above ``max_examples_ratio`` × the round's (lower) median,
       or above ``max_examples``, is capped there.

    Any rule is off when its setting is None. Refusals are logged (WARNING, with the node and
    the reason) and kept in ``strategy.refused`` as ``(round, node_id, reason)``; clips and caps
    likewise in ``strategy.clipped``; ``strategy.accepted[round]`` lists the nodes whose updates
    were passed on. A refused update is never aggregated. Rule 2 needs the round's global
    model: a round whose ``configure_train`` was not called through the strategy, or sent
    arrays other than the template's, skips it.

    Poisoned global model: if the aggregated arrays hold NaN or infinity, or (``strategy.start``
    with an ``evaluate_fn``) the central metric ``loss_key`` is not finite or exceeds
    ``max_loss_ratio`` × its first value (the initial model's, round 0), ``PoisonedModel`` is
    raised with the round and the reason; the ServerApp fails (``run_simulation`` raises it;
    under ``flwr run`` the run's status is ``finished:failed`` with the message, though
    ``flwr run`` itself exits 0: docs/guides/fleet.md).
    """
    if isinstance(template, Model):
        specs = dict(template.specs)
    else:
        specs = {k: (tuple(v.shape), np.dtype(v.numpy().dtype)) for k, v in template.items()}
    for name, value in (("clip_ratio", clip_ratio), ("refuse_ratio", refuse_ratio),
                        ("max_examples_ratio", max_examples_ratio), ("max_examples", max_examples),
                        ("max_loss_ratio", max_loss_ratio)):
        if value is not None and not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
            raise ValueError(f"guard: {name} must be a positive number or None, not {value!r}")
    if clip_ratio is not None and refuse_ratio is not None and refuse_ratio < clip_ratio:
        raise ValueError(f"guard: refuse_ratio ({refuse_ratio}) is below clip_ratio ({clip_ratio})")
    aggregate = strategy.aggregate_train
    configure, start = getattr(strategy, "configure_train", None), getattr(strategy, "start", None)
    strategy.refused, strategy.clipped, strategy.accepted = [], [], {}
    sent: dict[int, dict[str, np.ndarray]] = {}

    def configure_train(server_round: int, arrays: ArrayRecord, *args: Any, **kwargs: Any):
        sent.clear()
        if isinstance(arrays, ArrayRecord) and set(arrays.keys()) == set(specs):
            sent[server_round] = {k: v.numpy().astype(np.float64) for k, v in arrays.items()}
        return configure(server_round, arrays, *args, **kwargs)

    def refuse(server_round: int, msg: Message, reason: str) -> None:
        node = msg.metadata.src_node_id
        strategy.refused.append((server_round, node, reason))
        log(WARNING, "irgrad.fleet: round %s: refused the update of node %s: %s", server_round, node, reason)

    def clipped(server_round: int, msg: Message, what: str) -> None:
        node = msg.metadata.src_node_id
        strategy.clipped.append((server_round, node, what))
        log(WARNING, "irgrad.fleet: round %s: node %s: %s", server_round, node, what)

    def aggregate_train(server_round: int, replies: Iterable[Message]):
        replies = list(replies)
        errors = [msg for msg in replies if msg.has_error()]  # the strategy logs and skips these
        good = []
        for msg in replies:
            if not msg.has_error():
                reason = _refusal(msg.content, specs, weighted_by_key)
                if reason is None:
                    good.append(msg)
                else:
                    refuse(server_round, msg, reason)
        if server_round in sent and good and (clip_ratio is not None or refuse_ratio is not None):
            good = _bound_distances(server_round, good, sent[server_round], clip_ratio, refuse_ratio,
                                    refuse, clipped)
        if good and (max_examples_ratio is not None or max_examples is not None):
            _cap_examples(server_round, good, weighted_by_key, max_examples_ratio, max_examples, clipped)
        accepted = good + errors
        strategy.accepted[server_round] = [msg.metadata.src_node_id for msg in good]
        if len(good) + len(errors) != len(replies):
            log(INFO, "irgrad.fleet: round %s: %d updates accepted", server_round, len(good))
        arrays, metrics = aggregate(server_round, accepted)
        if isinstance(arrays, ArrayRecord):
            for name, value in arrays.items():
                a = value.numpy()
                if a.dtype.kind in "fc" and not np.isfinite(a).all():
                    bad = int(a.size - np.count_nonzero(np.isfinite(a)))
                    raise PoisonedModel(f"round {server_round}: the aggregated global model is not finite "
                                        f"({name}: {bad} of {a.size} values are NaN or infinity); run stopped")
        return arrays, metrics

    def start_watched(*args: Any, evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
              **kwargs: Any):
        if evaluate_fn is not None and max_loss_ratio is not None:
            evaluate_fn = _loss_watch(evaluate_fn, loss_key, max_loss_ratio)
        return start(*args, evaluate_fn=evaluate_fn, **kwargs)

    strategy.aggregate_train = aggregate_train
    if configure is not None:
        strategy.configure_train = configure_train
    if start is not None:
        strategy.start = start_watched
    return strategy


def _lower_median(values: Sequence[float]) -> float:
    return float(sorted(values)[(len(values) - 1) // 2])


def _bound_distances(server_round: int, replies: list[Message], sent: dict[str, np.ndarray],
                     clip_ratio: float | None, refuse_ratio: float | None,
                     refuse: Callable, clipped: Callable) -> list[Message]:
    """Rule 2 of ``guard``: the replies kept, the ones too far from ``sent`` refused, the
    ones far from it clipped (their ArrayRecord replaced)."""
    updates = []
    for msg in replies:
        arrays = {k: v.numpy() for k, v in _only(msg.content.array_records, "ArrayRecord").items()}
        delta = {k: a.astype(np.float64) - sent[k] for k, a in arrays.items()}
        updates.append((msg, arrays, delta, math.sqrt(sum(float(np.vdot(d, d)) for d in delta.values()))))
    median = _lower_median([d for *_, d in updates])
    kept = []
    for msg, arrays, delta, norm in updates:
        if refuse_ratio is not None and norm > refuse_ratio * median:
            refuse(server_round, msg, f"update norm {norm:.4g} is over {refuse_ratio:g} × the round's median "
                                      f"{median:.4g}")
            continue
        kept.append(msg)
        if clip_ratio is not None and norm > clip_ratio * median:
            bound = clip_ratio * median
            key = next(iter(msg.content.array_records))
            msg.content[key] = ArrayRecord({k: Array(np.ascontiguousarray(
                (sent[k] + delta[k] * (bound / norm)).astype(arrays[k].dtype))) for k in arrays})
            clipped(server_round, msg, f"update norm {norm:.4g} clipped to {bound:.4g} ({clip_ratio:g} × the "
                                       f"round's median {median:.4g})")
    return kept


def _cap_examples(server_round: int, replies: list[Message], key: str, ratio: float | None,
                  absolute: float | None, clipped: Callable) -> None:
    """Rule 3 of ``guard``: ``key`` capped in the replies' MetricRecords."""
    records = [next(iter(msg.content.metric_records.values())) for msg in replies]
    median = _lower_median([float(r[key]) for r in records])
    caps = [c for c in (ratio * median if ratio is not None else None, absolute) if c is not None]
    cap = min(caps)
    for msg, record in zip(replies, records):
        n = record[key]
        if n > cap:
            record[key] = int(cap) if isinstance(n, int) else float(cap)
            why = f"{ratio:g} × the round's median {median:g}" if ratio is not None and cap == ratio * median \
                else "max_examples"
            clipped(server_round, msg, f"{key} {n:g} capped at {record[key]:g} ({why})")


def _loss_watch(evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None], key: str,
                ratio: float) -> Callable[[int, ArrayRecord], MetricRecord | None]:
    """``evaluate_fn`` raising ``PoisonedModel`` when its ``key`` is not finite or exceeds
    ``ratio`` × its first value."""
    first: list[float] = []

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        result = evaluate_fn(server_round, arrays)
        if result is None or key not in result:
            return result
        loss = float(result[key])  # type: ignore[arg-type]
        if not math.isfinite(loss):
            raise PoisonedModel(f"round {server_round}: the global model's {key} is {loss}; run stopped")
        if not first:
            first.append(loss)
        elif loss > ratio * first[0]:
            raise PoisonedModel(f"round {server_round}: the global model's {key} {loss:.6g} is over {ratio:g} × "
                                f"the initial {first[0]:.6g}; run stopped")
        return result
    return evaluate


def _refusal(content: RecordDict, specs: dict, weighted_by_key: str) -> str | None:
    if len(content.array_records) != 1:
        return f"{len(content.array_records)} ArrayRecords in the reply, expected 1"
    try:
        arrays = {k: v.numpy() for k, v in next(iter(content.array_records.values())).items()}
    except Exception as error:  # a malformed Array (bytes that are no array)
        return f"arrays that cannot be read: {error}"
    problem = check_arrays(arrays, specs)
    if problem:
        return problem
    if len(content.metric_records) != 1:
        return f"{len(content.metric_records)} MetricRecords in the reply, expected 1"
    n = next(iter(content.metric_records.values())).get(weighted_by_key)
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not math.isfinite(n) or n <= 0:
        return f"{weighted_by_key} is {n!r}, not a positive number"
    return None


def central_evaluation(artifact: Model | str | os.PathLike, data: Data, function: str | None = None,
                       key: str = "loss") -> Callable[[int, ArrayRecord], MetricRecord]:
    """An ``evaluate_fn`` for ``strategy.start``: the artifact's forward loss of the global
    parameters on ``data`` (held by the server), as ``MetricRecord({key: loss})``."""
    m = artifact if isinstance(artifact, Model) else model(artifact, function)

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        loss, _ = m.evaluate(m.params(arrays), data)
        log(INFO, "irgrad.fleet: round %s: central loss %.6f", server_round, loss)
        return MetricRecord({key: loss})
    return evaluate


def tolerate_dropouts(strategy: Any, min_nodes: int, min_survivors: int = 1, wait: float = 60.0) -> Any:
    """``strategy`` (any Flower message-API strategy), surviving clients that leave mid-run.

    Flower 1.42's strategies wait for ``min_available_nodes`` before every round with no time
    limit (``flwr.serverapp.strategy.strategy_utils.sample_nodes``): with the minimum equal to
    the fleet, one SuperNode lost hangs the run forever. Here the first round waits for
    ``min_nodes`` connected nodes, every later round for ``min_survivors``, each at most
    ``wait`` seconds (then ``RuntimeError``: the ServerApp, and the run, fail with the count in
    the message); a round then samples from the nodes still connected. A node sampled for a
    round that replies with an error (the SuperLink answers for a node that missed its
    heartbeats, a ClientApp that raised) or not at all before the round's ``timeout`` is
    logged as lost (WARNING, with the round, the node and why) and kept in ``strategy.lost``
    as ``(round, node_id, reason)``. Returns ``strategy``, changed in place."""
    if not 1 <= min_survivors <= min_nodes:
        raise ValueError(f"min_survivors must be in 1..min_nodes ({min_nodes}), got {min_survivors}")
    strategy.lost = []
    sent: dict[tuple[str, int], set[int]] = {}
    keys = {"train": ("min_train_nodes",), "evaluate": ("min_evaluate_nodes",)}
    first: list[int] = []

    def configure(kind: str, original: Callable) -> Callable:
        def configured(server_round: int, arrays: ArrayRecord, config: Any, grid: Any) -> Iterable[Message]:
            if not first:
                first.append(server_round)
            need = min_nodes if server_round == first[0] else min_survivors
            deadline = time.monotonic() + wait
            while len(connected := list(grid.get_node_ids())) < need:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"irgrad.fleet: round {server_round}: {len(connected)} nodes connected after "
                                       f"{wait:g} s, fewer than the {need} required")
                time.sleep(1.0)
            saved = {k: getattr(strategy, k) for k in ("min_available_nodes", *keys[kind]) if hasattr(strategy, k)}
            for k, v in saved.items():  # sample from the nodes there are, never wait for more
                setattr(strategy, k, min(v, len(connected)))
            try:
                messages = list(original(server_round, arrays, config, grid))
            finally:
                for k, v in saved.items():
                    setattr(strategy, k, v)
            sent[(kind, server_round)] = {m.metadata.dst_node_id for m in messages}
            return messages
        return configured

    def aggregate(kind: str, original: Callable) -> Callable:
        def aggregated(server_round: int, replies: Iterable[Message]):
            replies = list(replies)
            targets = sent.pop((kind, server_round), set())
            lost = [(m.metadata.src_node_id, f"error reply: {m.error.reason}") for m in replies if m.has_error()]
            lost += [(n, "no reply within the round's timeout")
                     for n in sorted(targets - {m.metadata.src_node_id for m in replies})]
            for node, reason in lost:
                strategy.lost.append((server_round, node, reason))
                log(WARNING, "irgrad.fleet: round %s: lost node %s (%s): %s", server_round, node, kind, reason)
            if lost:
                log(INFO, "irgrad.fleet: round %s: %d of %d nodes answered %s", server_round,
                    len(targets) - len(lost), len(targets), kind)
            return original(server_round, replies)
        return aggregated

    strategy.configure_train = configure("train", strategy.configure_train)
    strategy.configure_evaluate = configure("evaluate", strategy.configure_evaluate)
    strategy.aggregate_train = aggregate("train", strategy.aggregate_train)
    strategy.aggregate_evaluate = aggregate("evaluate", strategy.aggregate_evaluate)
    return strategy
