"""Export StableHLO fixtures with a symbolic batch from PyTorch (torch-mlir, ``dynamic_shapes``).

PyTorch and torch-mlir are DEV-ONLY dependencies: irgrad and its tests never import them.
Set-up as for ``dev/make_torch_fixtures.py`` (torch 2.13.0 CPU, torch-mlir 20261001), then,
from the repository root:

    /work/torchvenv/bin/python dev/make_torch_dynamic_fixtures.py [NAME ...]

The export path:

    batch = torch.export.Dim("batch", min=1, max=4096)
    torch_mlir.fx.export_and_import(Functional(model), *params, *inputs, output_type="stablehlo",
                                    dynamic_shapes=[None] * len(params) + [{0: batch}] * len(inputs))

so ``@main`` takes the parameters (``named_parameters()`` order, static shapes) then the inputs
with ``?`` as their first dimension. For each fixture ``<name>`` it writes to
``tests/fixtures/torch_dynamic/`` ``<name>.mlir`` (torch-mlir's text, unchanged) and
``<name>.npz`` with the layout of ``tests/fixtures/jax_dynamic``: for each batch size ``B`` in
``BATCHES`` ``arg{i}_b{B}``, ``out{i}_b{B}`` (eager PyTorch) and ``grad{k}_b{B}``
(``torch.autograd.grad`` of the sum of the float outputs with respect to float argument
``wrt[k]``); plus ``wrt`` and ``batches``. The parameters are the same at every batch size.
"""
from __future__ import annotations

import os
import sys
import warnings
import zlib

import numpy as np

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch_mlir import fx  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "torch_dynamic")
BATCHES = (1, 3, 32)
EXPORT_BATCH = 4  # the example batch of the trace (not 0 or 1: torch.export specialises those)


class Functional(nn.Module):
    """``forward(*params, *inputs)``: the model with the given tensors as its parameters."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.names = [n for n, _ in model.named_parameters()]

    def forward(self, *args):
        k = len(self.names)
        return torch.func.functional_call(self.model, dict(zip(self.names, args[:k])), tuple(args[k:]))


class MLPLoss(nn.Module):
    """linear -> tanh -> linear -> mean over the batch of -sum(log_softmax); scalar loss. One batched
    input: two inputs with their own ``?`` batch (x, labels) are broadcast against each other by
    torch-mlir, and nothing in the IR says their sizes are equal (the shared ``Dim`` is lost), so
    neither irgrad nor IREE can prove the broadcast does not expand."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        logits = self.fc2(torch.tanh(self.fc1(x)))
        return -F.log_softmax(logits, dim=-1).sum(-1).mean()


class SmallCNN(nn.Module):
    """conv 3x3 pad 1 -> ReLU -> max pool 2x2 -> flatten -> linear -> tanh (NCHW)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 3 * 3, 3)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv(x)), 2)
        return torch.tanh(self.fc(h.flatten(1)))


class Attention(nn.Module):
    """One head of self-attention over a sequence of 5 (d 8): q, k, v projections, softmax of the
    scaled scores, output projection, mean over the sequence, tanh."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(8, 8) for _ in range(4))

    def forward(self, x):
        scores = self.q(x) @ self.k(x).transpose(-1, -2) / 8 ** 0.5
        return torch.tanh(self.o(torch.softmax(scores, dim=-1) @ self.v(x)).mean(1))


class LSTM(nn.Module):
    """An LSTM cell over a 4-step sequence (input 3, hidden 5) written as PyTorch users write one
    by hand: a Python loop, so torch-mlir exports the steps unrolled. Returns the last hidden state
    and the sum of the hidden states."""

    def __init__(self):
        super().__init__()
        self.x = nn.Linear(3, 20)
        self.h = nn.Linear(5, 20, bias=False)

    def forward(self, xs):
        h = c = torch.zeros(xs.shape[0], 5)
        total = torch.zeros(xs.shape[0], 5)
        for t in range(xs.shape[1]):
            i, f, g, o = (self.x(xs[:, t]) + self.h(h)).chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            total = total + h
        return h, total


# name: (model class, [(per-example shape, kind)]); kind "x" normal inputs, "onehot" labels.
FIXTURES = {
    "mlp_loss": (MLPLoss, [((4,), "x")]),
    "cnn": (SmallCNN, [((2, 6, 6), "x")]),
    "attention": (Attention, [((5, 8), "x")]),
    "lstm": (LSTM, [((4, 3), "x")]),
}


def _draw(rng, shape, kind, batch):
    if kind == "onehot":
        return np.eye(shape[-1], dtype=np.float32)[rng.integers(0, shape[-1], batch)]
    return rng.standard_normal((batch, *shape)).astype(np.float32)


def make(name: str) -> None:
    cls, inputs = FIXTURES[name]
    seed = zlib.crc32(name.encode()) & 0xFFFFFFFF
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = cls()
    params = [p.detach().numpy().copy() for p in model.parameters()]
    example = [*params, *(_draw(rng, s, k, EXPORT_BATCH) for s, k in inputs)]
    batch = torch.export.Dim("batch", min=1, max=4096)
    dynamic = [None] * len(params) + [{0: batch}] * len(inputs)
    module = fx.export_and_import(Functional(model), *map(torch.tensor, example), output_type="stablehlo",
                                  dynamic_shapes=(tuple(dynamic),))  # forward(*args): one element
    text = str(module)
    assert "tensor<?x" in text, f"{name}: the export kept no dynamic dimension"
    with open(os.path.join(OUT_DIR, f"{name}.mlir"), "w") as f:
        f.write(text)

    wrt = [i for i in range(len(params))] + [len(params) + j for j, (_, k) in enumerate(inputs) if k == "x"]
    data = {"wrt": np.array(wrt, np.int64), "batches": np.array(BATCHES, np.int64)}
    for b in BATCHES:
        values = [*params, *(_draw(rng, s, k, b) for s, k in inputs)]
        targs = [torch.tensor(v, requires_grad=i in wrt) for i, v in enumerate(values)]
        out = Functional(model)(*targs)
        outs = out if isinstance(out, tuple) else (out,)
        grads = torch.autograd.grad(sum(o.sum() for o in outs), [targs[i] for i in wrt])
        for i, v in enumerate(values):
            data[f"arg{i}_b{b}"] = v
        for i, o in enumerate(outs):
            data[f"out{i}_b{b}"] = o.detach().numpy()
        for k, g in enumerate(grads):
            data[f"grad{k}_b{b}"] = g.numpy()
    np.savez_compressed(os.path.join(OUT_DIR, f"{name}.npz"), **data)
    print(f"{name}: {len(values)} args, {len(outs)} outputs, {text.count('?x')} '?x' in the text")


if __name__ == "__main__":
    for n in sys.argv[1:] or FIXTURES:
        make(n)
