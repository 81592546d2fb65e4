"""Export shape-polymorphic StableHLO fixtures from JAX (``jax.export`` with a symbolic batch).

JAX is a DEV-ONLY dependency: irgrad and its tests never import it. Regenerate, from the
repository root (``benchmarks/.venv`` has jax):

    benchmarks/.venv/bin/python dev/make_jax_dynamic_fixtures.py [NAME ...]

For each fixture ``<name>`` it writes to ``tests/fixtures/jax_dynamic/``

* ``<name>.mlir``: ``jax.export.export(jax.jit(f))(*specs).mlir_module()``, the batch dimension
  symbolic (``tensor<?x4xf32>``), JAX's shape assertions included;
* ``<name>.mlirbc``: the same export's portable artifact (``.mlir_module_serialized``);
* ``<name>.npz`` with, for each batch size ``B`` in ``BATCHES``: ``arg{i}_b{B}`` (the inputs),
  ``out{i}_b{B}`` (JAX's forward outputs) and ``grad{k}_b{B}`` (``jax.grad`` of the sum of the float
  outputs with respect to float argument ``wrt[k]``); plus ``wrt`` and ``batches``.
"""
from __future__ import annotations

import os
import sys

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "jax_dynamic")
BATCHES = (1, 3, 32)


def mlp(x, w1, b1, w2, b2):
    h = jnp.tanh(x @ w1 + b1)
    return jax.nn.relu(h @ w2 + b2) + 0.1 * (h @ w2)


def mlp_loss(x, labels, w1, b1, w2):
    logits = jnp.tanh(x @ w1 + b1) @ w2
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.sum(labels * logp, axis=-1))


def softmax(x, w):
    return jax.nn.softmax(x, axis=-1) @ w


def layernorm(x, gamma, beta):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return jnp.sin((x - mean) * jax.lax.rsqrt(var + 1e-5) * gamma + beta)


def attention(x, wq, wk, wv):
    q, k, v = x @ wq, x @ wk, x @ wv
    scores = jnp.einsum("bqd,bkd->bqk", q, k) / np.sqrt(q.shape[-1]).astype(np.float32)
    return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(scores, axis=-1), v)


def batchnorm(x, gamma):
    """Statistics over the dynamic batch: a mean divided by the run-time batch size."""
    mean = jnp.mean(x, axis=0)
    var = jnp.mean(jnp.square(x - mean), axis=0)
    return (x - mean) / jnp.sqrt(var + 1e-3) * gamma


def cnn(x, k1, w):
    y = jax.lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = jax.nn.relu(y)
    y = jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    return jnp.tanh(y.reshape(y.shape[0], -1) @ w)


def lstm(xs, wx, wh, b):
    """An LSTM over a static 4-step sequence with a symbolic batch (``lax.scan``)."""
    hidden = wh.shape[0]
    h0 = jnp.zeros((xs.shape[0], hidden), xs.dtype)

    def step(carry, x):
        h, c = carry
        z = x @ wx + h @ wh + b
        i, f, g, o = jnp.split(z, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    (h, _), hs = jax.lax.scan(step, (h0, h0), jnp.swapaxes(xs, 0, 1))
    return h, jnp.sum(hs, axis=0)


# name: (function, [(shape with "b" for the batch, kind)]); kind "x" is drawn per batch size,
# "w" once (parameters), "onehot" one-hot labels.
FIXTURES = {
    "mlp": (mlp, [(("b", 4), "x"), ((4, 16), "w"), ((16,), "w"), ((16, 3), "w"), ((3,), "w")]),
    "mlp_loss": (mlp_loss, [(("b", 4), "x"), (("b", 3), "onehot"), ((4, 8), "w"), ((8,), "w"), ((8, 3), "w")]),
    "softmax": (softmax, [(("b", 5), "x"), ((5, 2), "w")]),
    "layernorm": (layernorm, [(("b", 8), "x"), ((8,), "w"), ((8,), "w")]),
    "attention": (attention, [(("b", 6, 8), "x"), ((8, 8), "w"), ((8, 8), "w"), ((8, 8), "w")]),
    "batchnorm": (batchnorm, [(("b", 5), "x"), ((5,), "w")]),
    "cnn": (cnn, [(("b", 6, 6, 2), "x"), ((3, 3, 2, 4), "w"), ((36, 3), "w")]),
    "lstm": (lstm, [(("b", 4, 3), "x"), ((3, 20), "w"), ((5, 20), "w"), ((20,), "w")]),
}


def _specs(args):
    (batch,) = jax.export.symbolic_shape("b")
    return [jax.ShapeDtypeStruct(tuple(batch if s == "b" else s for s in shape), jnp.float32)
            for shape, _ in args]


def _draw(rng, shape, kind, batch):
    shape = tuple(batch if s == "b" else s for s in shape)
    if kind == "onehot":
        return np.eye(shape[-1], dtype=np.float32)[rng.integers(0, shape[-1], shape[:-1])]
    return (rng.standard_normal(shape) * 0.5).astype(np.float32)


def make(name: str) -> None:
    fn, args = FIXTURES[name]
    exported = jax.export.export(jax.jit(fn))(*_specs(args))
    with open(os.path.join(OUT_DIR, f"{name}.mlir"), "w") as f:
        f.write(exported.mlir_module())
    with open(os.path.join(OUT_DIR, f"{name}.mlirbc"), "wb") as f:
        f.write(exported.mlir_module_serialized)
    rng = np.random.default_rng(sum(map(ord, name)))
    weights = {i: _draw(rng, shape, kind, 0) for i, (shape, kind) in enumerate(args) if kind == "w"}
    wrt = [i for i, (_, kind) in enumerate(args) if kind != "onehot"]
    data = {"wrt": np.array(wrt, np.int64), "batches": np.array(BATCHES, np.int64)}

    def total(*a):
        out = fn(*a)
        outs = out if isinstance(out, tuple) else (out,)
        return sum(jnp.sum(o) for o in outs)

    for batch in BATCHES:
        values = [weights[i] if i in weights else _draw(rng, shape, kind, batch)
                  for i, (shape, kind) in enumerate(args)]
        out = exported.call(*values)
        outs = out if isinstance(out, tuple) else (out,)
        grads = jax.grad(total, argnums=tuple(wrt))(*values)
        for i, v in enumerate(values):
            data[f"arg{i}_b{batch}"] = v
        for i, o in enumerate(outs):
            data[f"out{i}_b{batch}"] = np.asarray(o)
        for k, g in enumerate(grads):
            data[f"grad{k}_b{batch}"] = np.asarray(g)
    np.savez_compressed(os.path.join(OUT_DIR, f"{name}.npz"), **data)
    print(f"{name}: {len(args)} args, {len(outs)} outputs")


def main(names: list[str]) -> None:
    os.makedirs(OUT_DIR, exist_ok=True)
    for name in names or FIXTURES:
        make(name)


if __name__ == "__main__":
    main(sys.argv[1:])
