"""ig.optimizers: Keras's SGD (momentum, nesterov) and Adam inside traced functions, step by
step against the update rules written out in numpy, and training that converges."""
from __future__ import annotations

import numpy as np
import pytest

import irgrad as ig

from foreign import numbered
from test_jax_fixtures import JAX

RNG = np.random.default_rng(7)
X = RNG.normal(size=(8, 3)).astype(np.float32)
Y = (X @ np.array([[1.0, -2.0], [0.5, 0.3], [-1.0, 0.8]]) + 0.4).astype(np.float32)
W0 = RNG.normal(size=(3, 2)).astype(np.float32)
B0 = np.zeros(2, np.float32)


def _grads(w, b):
    r = X @ w + b - Y
    return [2 * X.T @ r, 2 * r.sum(0)]


def _reference(kind: str, steps: int, lr: float, **kw) -> list[np.ndarray]:
    """The Keras 3 update rules, in float64."""
    params = [W0.astype(np.float64), B0.astype(np.float64)]
    slots = [[np.zeros_like(p) for p in params] for _ in range(2)]
    for t in range(1, steps + 1):
        for i, g in enumerate(_grads(*params)):
            if kind == "sgd":
                momentum = kw.get("momentum", 0.0)
                if momentum == 0.0:
                    params[i] = params[i] - lr * g
                    continue
                slots[0][i] = momentum * slots[0][i] - lr * g
                params[i] = params[i] + (momentum * slots[0][i] - lr * g if kw.get("nesterov") else slots[0][i])
            else:
                b1, b2, eps = 0.9, 0.999, 1e-7
                alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
                slots[0][i] += (g - slots[0][i]) * (1 - b1)
                slots[1][i] += (g * g - slots[1][i]) * (1 - b2)
                params[i] = params[i] - slots[0][i] * alpha / (np.sqrt(slots[1][i]) + eps)
    return params


@pytest.mark.parametrize("make, kind, kw", [
    (lambda: ig.optimizers.SGD(0.01), "sgd", {}),
    (lambda: ig.optimizers.SGD(0.01, momentum=0.9), "sgd", {"momentum": 0.9}),
    (lambda: ig.optimizers.SGD(0.01, momentum=0.9, nesterov=True), "sgd", {"momentum": 0.9, "nesterov": True}),
    (lambda: ig.optimizers.Adam(0.05), "adam", {}),
], ids=["sgd", "momentum", "nesterov", "adam"])
def test_steps_follow_keras_update_rules(make, kind, kw):
    w, b = ig.Variable(W0.copy()), ig.Variable(B0.copy())
    opt = make()

    @ig.function
    def step(x, y):
        loss = ig.reduce_sum((x @ w + b - y) ** 2)
        opt.apply_gradients(zip(ig.gradients(loss, [w, b]), [w, b]))
        return loss

    for _ in range(3):
        step(X, Y)
    for got, want in zip((w.numpy(), b.numpy()), _reference(kind, 3, opt.learning_rate, **kw)):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    assert int(opt.iterations.numpy()) == 3


def test_minimize_with_a_tape_cuts_the_loss():
    w, b = ig.Variable(W0.copy()), ig.Variable(B0.copy())
    opt = ig.optimizers.Adam(0.1)

    @ig.function
    def step(x, y):
        with ig.GradientTape() as tape:
            loss = ig.reduce_mean((x @ w + b - y) ** 2)
        opt.minimize(loss, [w, b], tape=tape)
        return loss

    first = float(step(X, Y))
    for _ in range(150):
        last = float(step(X, Y))
    assert last < first / 10
    assert len(opt.variables) == 5  # iterations and two moments per variable


def test_bad_arguments():
    with pytest.raises(ValueError, match="momentum"):
        ig.optimizers.SGD(momentum=1.5)

    @ig.function
    def step(x):
        ig.optimizers.SGD().apply_gradients([(x, x)])
        return x

    with pytest.raises(TypeError, match="expected ig.Variable"):
        step(np.ones(2, np.float32))


# ----- @F_train_init / @F_train_step (passes.train), for any producer's loss --------------------

def _loss_module() -> str:
    return ig.function(lambda w, b, x, y: ig.reduce_mean((x @ w + b - y) ** 2)).lower(W0, B0, X, Y).mlir


@pytest.mark.parametrize("optimizer, make", [
    ("sgd", lambda lr: ig.optimizers.SGD(lr)),
    ("momentum", lambda lr: ig.optimizers.SGD(lr, momentum=0.9)),
    ("adam", lambda lr: ig.optimizers.Adam(lr)),
])
def test_a_train_step_is_the_optimizers_step(optimizer, make):
    """Two steps of @F_train_step equal two of ig.optimizers on the same loss; 200 steps cut
    the loss at least 10x; the state is the counter, then the slots."""
    module = ig.compile(ig.passes.differentiate(_loss_module(), wrt=[0, 1], grad=False, train=optimizer,
                                                learning_rate=0.05)).load()
    init, step = module["_lambda__train_init"], module["_lambda__train_step"]
    state = init.call_flat(W0, B0, X, Y)
    assert len(state) == 1 + 2 * len(ig.passes.train.STATE[optimizer])
    w, b = ig.Variable(W0.copy()), ig.Variable(B0.copy())
    opt = make(0.05)

    @ig.function
    def reference(x, y):
        loss = ig.reduce_mean((x @ w + b - y) ** 2)
        opt.apply_gradients(zip(ig.gradients(loss, [w, b]), [w, b]))
        return loss

    params = [W0, B0]
    for _ in range(2):
        loss, *rest = step.call_flat(*params, X, Y, *state)
        params, state = rest[:2], rest[2:]
        reference(X, Y)
        for got, want in zip(params, (w.numpy(), b.numpy())):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert int(state[0]) == 2
    first = float(loss)
    for _ in range(198):
        loss, *rest = step.call_flat(*params, X, Y, *state)
        params, state = rest[:2], rest[2:]
    assert float(loss) < first / 10


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_a_jax_modules_first_step_is_the_rule_applied_to_jaxs_gradient(optimizer):
    """A training step for another producer's loss (JAX's CNN classifier): the first step from
    @main_train_init moves each parameter by Keras's rule applied to jax.grad's gradient."""
    data = JAX.data("cnn_classifier")
    args, grads = numbered(data, "arg"), numbered(data, "grad")
    wrt, lr = [1, 2, 3, 4], 0.05
    module = ig.compile(ig.passes.differentiate(JAX.text("cnn_classifier"), wrt=wrt, grad=False, train=optimizer,
                                                learning_rate=lr)).load()
    state = module["main_train_init"].call_flat(*args)
    loss, *rest = module["main_train_step"].call_flat(*args, *state)
    np.testing.assert_allclose(loss, data["out0"], rtol=1e-5)
    assert int(rest[len(wrt)]) == 1
    for i, got in zip(wrt, rest):
        g = grads[i].astype(np.float64)
        if optimizer == "sgd":
            step = -lr * g
        elif optimizer == "momentum":
            step = -lr * g  # the velocity starts at 0: 0.9 * 0 - lr * g
        else:
            m, v = 0.1 * g, 0.001 * g * g
            step = -m * (lr * np.sqrt(0.001) / 0.1) / (np.sqrt(v) + 1e-7)
        np.testing.assert_allclose(got - args[i], step, rtol=2e-3, atol=1e-6 + 1e-5 * np.abs(args[i]).max())


def test_train_from_the_command_line(tmp_path):
    """irgrad grad --train adam --lr 0.05 writes both functions; a non-scalar loss, an unknown
    optimizer and --lr without --train are one-line errors."""
    from typer.testing import CliRunner
    from irgrad.cli import app
    src = tmp_path / "loss.mlir"
    src.write_text(_loss_module())
    runner = CliRunner()
    result = runner.invoke(app, ["grad", str(src), "--train", "adam", "--lr", "0.05", "--wrt", "0,1"])
    assert result.exit_code == 0, result.output
    assert "@_lambda__train_init(" in result.stdout and "@_lambda__train_step(" in result.stdout
    assert "@_lambda__grad(" not in result.stdout
    for args, message in ((["--train", "rmsprop"], "unknown optimizer 'rmsprop'"),
                          (["--train", "sgd", "--lr", "0"], "learning rate must be a positive number"),
                          (["--lr", "0.1"], "--lr needs --train")):
        refused = runner.invoke(app, ["grad", str(src), *args])
        assert refused.exit_code == 2 and message in refused.output, refused.output
    artifact = tmp_path / "train.vmfb"
    compiled = runner.invoke(app, ["compile", str(src), "--train", "adam", "--wrt", "0,1", "-o", str(artifact)])
    assert compiled.exit_code == 0, compiled.output
    shown = runner.invoke(app, ["inspect", str(artifact)])
    assert "training step _lambda__train_step: adam, learning rate 0.001" in shown.stdout
    assert "parameters: arg0 (arg 0), arg1 (arg 1)" in shown.stdout
    assert "state:      step, m_arg0, m_arg1, v_arg0, v_arg1" in shown.stdout
    assert "returns:    loss, then the new arg0, arg1, then the new state" in shown.stdout
    assert ig.load(str(artifact)).metadata["training"]["_lambda__train_step"]["params"] == [0, 1]
    vector = tmp_path / "vector.mlir"
    vector.write_text(ig.function(lambda w: w * 2.0).lower(W0).mlir)
    bad = runner.invoke(app, ["grad", str(vector), "--train", "sgd"])
    assert bad.exit_code == 1 and "scalar float loss" in bad.output


def test_fedprox_from_the_command_line(tmp_path):
    """irgrad compile --train sgd --prox-mu: @F_prox_train_step takes the global parameters after
    F's arguments, and its SGD step is plain SGD's plus lr · mu · (w - w_global)."""
    from typer.testing import CliRunner
    from irgrad.cli import app
    src = tmp_path / "loss.mlir"
    src.write_text(_loss_module())
    runner = CliRunner()
    for prox, name in (([], "_lambda__train_step"), (["--prox-mu", "0.5"], "_lambda__prox_train_step")):
        out = tmp_path / f"{name}.vmfb"
        result = runner.invoke(app, ["compile", str(src), "--train", "sgd", "--lr", "0.1", "--wrt", "0,1", *prox,
                                     "-o", str(out)])
        assert result.exit_code == 0, result.output
        assert name in ig.load(str(out)).functions
    plain = ig.load(str(tmp_path / "_lambda__train_step.vmfb"))["_lambda__train_step"]
    prox = ig.load(str(tmp_path / "_lambda__prox_train_step.vmfb"))["_lambda__prox_train_step"]
    w_global, b_global = W0 + 0.25, B0 - 0.5
    step = np.zeros((), np.int32)
    _, w1, b1, _ = plain.call_flat(W0, B0, X, Y, step)
    _, w2, b2, _ = prox.call_flat(W0, B0, X, Y, w_global, b_global, step)
    np.testing.assert_allclose(w2, w1 - 0.1 * 0.5 * (W0 - w_global), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b2, b1 - 0.1 * 0.5 * (B0 - b_global), rtol=1e-5, atol=1e-6)
    refused = runner.invoke(app, ["grad", str(src), "--prox-mu", "0.5"])
    assert refused.exit_code == 2 and "--prox-mu needs --train" in refused.output
    negative = runner.invoke(app, ["grad", str(src), "--train", "sgd", "--prox-mu", "-1"])
    assert negative.exit_code == 2 and "bad --prox-mu -1.0: FedProx's mu is a number >= 0" in negative.output


# ----- Module.trainer: state on the device, atomic checkpoints --------------------------------

@pytest.fixture(scope="module")
def train_artifact(tmp_path_factory):
    path = tmp_path_factory.mktemp("train") / "train.vmfb"
    text = ig.passes.differentiate(_loss_module(), wrt=[0, 1], grad=False, train="adam", learning_rate=0.05)
    ig.compile(text).save(path)
    return path


def test_trainer_steps_on_the_device_as_the_host_loop_does(train_artifact):
    module = ig.load(str(train_artifact))
    trainer = module.trainer([W0, B0])
    step = module["_lambda__train_step"]
    params, state = [W0, B0], module["_lambda__train_init"].call_flat(W0, B0, X, Y)
    for _ in range(20):
        loss, *rest = step.call_flat(*params, X, Y, *state)
        params, state = rest[:2], rest[2:]
        assert float(trainer.step(X, Y)) == float(loss)
    for got, want in zip(trainer.params() + trainer.state(), params + state):
        np.testing.assert_array_equal(got, want)


def test_trainer_checkpoints_round_trip_and_refuse_bad_files(train_artifact, tmp_path):
    module = ig.load(str(train_artifact))
    trainer = module.trainer([W0, B0])
    for _ in range(5):
        trainer.step(X, Y)
    trainer.save(tmp_path / "ckpt.npz")
    saved = trainer.params() + trainer.state()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.npz"]
    again = module.trainer([W0 * 0, B0 * 0])
    again.restore(tmp_path / "ckpt.npz")
    for got, want in zip(again.params() + again.state(), saved):
        np.testing.assert_array_equal(got, want)
    assert float(again.step(X, Y)) == float(trainer.step(X, Y))

    with np.load(tmp_path / "ckpt.npz") as f:
        arrays = {k: f[k] for k in f.files}
    first = trainer.param_names[0]  # saved by name: the parameters', then the state's (step, m_arg0...)
    assert set(arrays) == {*trainer.param_names, *trainer.state_names, "irgrad_checkpoint"}
    arrays[first] = arrays[first] + 1.0  # damaged data, manifest kept
    np.savez(tmp_path / "damaged.npz", **arrays)
    with pytest.raises(ValueError, match="damaged"):
        again.restore(tmp_path / "damaged.npz")
    (tmp_path / "garbage.npz").write_bytes(b"not a zip at all")
    (tmp_path / "half.npz").write_bytes((tmp_path / "ckpt.npz").read_bytes()[:200])
    for bad in ("garbage.npz", "half.npz", "missing.npz"):
        with pytest.raises(ValueError, match="not a checkpoint of _lambda__train_step"):
            again.restore(tmp_path / bad)
    other = ig.compile(ig.passes.differentiate(_loss_module(), wrt=[0, 1], grad=False, train="sgd")).load()
    with pytest.raises(ValueError, match="saved from"):
        other.trainer([W0, B0]).restore(tmp_path / "ckpt.npz")
    for got, want in zip(again.params(), saved):  # refused files changed nothing
        assert got.shape == want.shape


def test_a_save_killed_midway_leaves_the_previous_checkpoint(train_artifact, tmp_path):
    """A process saving in a loop is SIGKILLed at different moments: the checkpoint always
    restores (one of the saved versions, never a torn file)."""
    import signal
    import subprocess
    import sys
    import time
    ckpt = tmp_path / "ckpt.npz"
    script = f"""
import numpy as np, irgrad as ig
X, Y = np.load({str(tmp_path / 'xy.npz')!r})['x'], np.load({str(tmp_path / 'xy.npz')!r})['y']
t = ig.load({str(train_artifact)!r}).trainer([np.load({str(tmp_path / 'xy.npz')!r})['w'], np.zeros(2, np.float32)])
while True:
    t.step(X, Y)
    t.save({str(ckpt)!r})
"""
    np.savez(tmp_path / "xy.npz", x=X, y=Y, w=W0)
    trainer = ig.load(str(train_artifact)).trainer([W0, B0])
    for delay in (0.05, 0.13, 0.31):
        before = ckpt.stat().st_mtime_ns if ckpt.exists() else None
        proc = subprocess.Popen([sys.executable, "-c", script])
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and (not ckpt.exists() or ckpt.stat().st_mtime_ns == before):
                time.sleep(0.005)
            assert proc.poll() is None, "the saving process ended by itself"
            time.sleep(delay)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        trainer.restore(ckpt)


def test_trainer_refuses_wrong_arguments(train_artifact):
    module = ig.load(str(train_artifact))
    with pytest.raises(TypeError, match=r"expected 2 parameter arrays \(args 0, 1\), got 1"):
        module.trainer([W0])
    with pytest.raises(ValueError, match="'_lambda_' is not a training step of this module"):
        module.trainer([W0, B0], function="_lambda_")
    trainer = module.trainer([W0, B0])
    with pytest.raises(TypeError, match=r"a step takes 2 data arrays \(args 2, 3\), got 1"):
        trainer.step(X)
    plain = ig.compile(_loss_module()).load()
    with pytest.raises(ValueError, match="0 training steps; choose one with function="):
        plain.trainer([W0, B0])
