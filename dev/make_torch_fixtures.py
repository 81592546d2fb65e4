"""Export StableHLO fixtures from PyTorch (a third foreign producer, after JAX and TensorFlow).

PyTorch and torch-mlir are DEV-ONLY dependencies: irgrad and its tests never import them.
The files this script writes (``tests/fixtures/torch/*.mlir`` + ``*.npz`` + ``README.md``)
are committed, so ``tests/test_torch_fixtures.py`` needs only numpy and irgrad.

Set-up (once, outside the repository) and regeneration, from the repository root:

    python3 -m venv /work/torchvenv
    /work/torchvenv/bin/pip install torch==2.13.0 torch-mlir numpy   # the CPU torch wheel
    /work/torchvenv/bin/python dev/make_torch_fixtures.py [NAME ...]

The export path (torch-mlir 20261001):

    torch_mlir.fx.export_and_import(Functional(model), *params, *inputs, output_type="stablehlo")

``Functional`` is an ``nn.Module`` whose ``forward(*params, *inputs)`` runs the real model
through ``torch.func.functional_call`` with the given tensors as its parameters, so the
parameters are ``@main``'s leading arguments (in ``model.named_parameters()`` order) and the
inputs follow. Buffers (BatchNorm's running statistics, a registered attention mask) stay
constants of the module (``dense_resource`` blobs). A model in train mode whose forward
updates buffers (BatchNorm's running statistics) is exported by torch.export with those
updates as extra results, first, in the order of ``graph_signature.output_specs``
(``BUFFER_MUTATION``), followed by the model's own outputs.

For each fixture ``<name>`` it writes ``<name>.mlir`` (torch-mlir's text, unchanged) and
``<name>.npz`` with the layout of ``tests/fixtures/jax`` (see README.md there):

    arg0..       the parameters, then the inputs (float32; int64 token ids / labels)
    out0..       @main's results: the buffer updates (if any), then the model's outputs
    wrt          int64: positions of the float arguments
    grad0..      d(sum of every float output) / d arg[wrt[k]]          (torch.autograd)
    float_outs   int64: positions of the float outputs
    cotangent0.. random cotangents of the float outputs
    vjp0..       torch.autograd.grad(float outputs, float args, grad_outputs=cotangents)

Buffer updates: PyTorch's BatchNorm kernel updates the running statistics in place, outside
autograd, so torch.autograd gives them no gradient. The exported StableHLO computes them
with ordinary ops and nothing marks them as non-differentiable, so the derivative of the
exported function has a path through them. The references here are that true derivative:
the updates are recomputed as differentiable torch ops (``_bn_update``), checked equal to
the buffers torch itself updated, and torch.autograd differentiates them with the rest.
"""
from __future__ import annotations

import copy
import os
import re
import sys
import warnings
import zlib
from collections import Counter

import numpy as np

warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch_mlir  # noqa: E402
from torch import nn  # noqa: E402
from torch_mlir import fx  # noqa: E402
from torch_mlir.extras.fx_decomp_util import get_decomposition_table  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "torch")


def _seed(name: str) -> int:
    return zlib.crc32(name.encode()) & 0xFFFFFFFF


class Functional(nn.Module):
    """``forward(*params, *inputs)``: the model with the given tensors as its parameters."""

    def __init__(self, model: nn.Module, clone_buffers: bool = False):
        super().__init__()
        self.model = model
        self.names = [n for n, _ in model.named_parameters()]
        self.clone_buffers = clone_buffers

    def forward(self, *args):
        k = len(self.names)
        tensors = dict(zip(self.names, args[:k]))
        if self.clone_buffers:  # the model updates copies made here: no buffer-update results
            tensors.update({n: b.clone() for n, b in self.model.named_buffers()})
        return torch.func.functional_call(self.model, tensors, tuple(args[k:]))


# ---------------------------------------------------------------------------
# The models.  Each builder returns (model, inputs as numpy arrays) from a seeded state.
# ---------------------------------------------------------------------------

class SmallCNN(nn.Module):
    """conv 3x3 pad 1 -> BatchNorm2d -> ReLU -> max pool 2x2 -> flatten -> linear; returns
    (mean cross-entropy over int64 labels, logits)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x, labels):
        h = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        logits = self.fc(h.flatten(1))
        return F.cross_entropy(logits, labels), logits


def _cnn_inputs(rng):
    return [rng.standard_normal((4, 3, 8, 8)).astype(np.float32),
            rng.integers(0, 5, size=(4,)).astype(np.int64)]


def cnn_bn_train(rng):
    model = SmallCNN().train()
    return model, _cnn_inputs(rng)


def cnn_bn_eval(rng):
    model = SmallCNN()
    with torch.no_grad():  # running statistics that are not the initial 0 / 1
        for _ in range(3):
            model(torch.randn(4, 3, 8, 8) * 1.5 + 0.3, torch.zeros(4, dtype=torch.int64))
    return model.eval(), _cnn_inputs(rng)


class CausalEncoder(nn.Module):
    """nn.TransformerEncoderLayer (post-norm, GELU, no dropout) with a causal float mask
    held as a buffer (a constant of the exported module)."""

    def __init__(self, d_model=8, nhead=2, ff=16, t=4):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model, nhead, ff, dropout=0.0, activation="gelu",
                                                batch_first=True)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(t))

    def forward(self, x):
        return self.layer(x, src_mask=self.mask)


def transformer_encoder(rng):
    return CausalEncoder().train(), [rng.standard_normal((2, 4, 8)).astype(np.float32)]


class RecurrentLM(nn.Module):
    """nn.Embedding(int64 ids) -> LSTM/GRU -> linear -> mean cross-entropy (int64 targets)."""

    def __init__(self, cell, vocab=11, emb=6, hidden=8, **kw):
        super().__init__()
        self.vocab = vocab
        self.emb = nn.Embedding(vocab, emb)
        self.rnn = cell(emb, hidden, batch_first=True, **kw)
        self.out = nn.Linear(hidden * (2 if kw.get("bidirectional") else 1), vocab)

    def forward(self, ids, targets):
        h, _ = self.rnn(self.emb(ids))
        return F.cross_entropy(self.out(h).reshape(-1, self.vocab), targets.reshape(-1))


def _lm_inputs(rng):
    return [rng.integers(0, 11, size=(2, 5)).astype(np.int64),
            rng.integers(0, 11, size=(2, 5)).astype(np.int64)]


def lstm_lm(rng):
    return RecurrentLM(nn.LSTM, num_layers=2).train(), _lm_inputs(rng)


def gru_lm(rng):
    return RecurrentLM(nn.GRU, bidirectional=True).train(), _lm_inputs(rng)


class LayerNormMLP(nn.Module):
    """linear -> LayerNorm -> tanh-GELU -> linear -> GroupNorm(2 groups) over the features."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.ln = nn.LayerNorm(8)
        self.fc2 = nn.Linear(8, 6)
        self.gn = nn.GroupNorm(2, 6)

    def forward(self, x):
        h = F.gelu(self.ln(self.fc1(x)), approximate="tanh")
        return self.gn(self.fc2(h))


def layernorm_mlp(rng):
    model = LayerNormMLP()
    with torch.no_grad():  # affine parameters that are not the initial 1 / 0
        for m in (model.ln, model.gn):
            m.weight.add_(torch.randn_like(m.weight) * 0.3)
            m.bias.add_(torch.randn_like(m.bias) * 0.3)
    return model.train(), [rng.standard_normal((3, 6)).astype(np.float32)]


FIXTURES = [
    dict(name="cnn_bn_train", build=cnn_bn_train,
         covers="Conv2d + BatchNorm2d in train mode (batch statistics, f64 variance) + ReLU + max pool + "
                "linear + cross-entropy (int64 labels); the running-statistics updates are results "
                "(running_mean, running_var, num_batches_tracked as i64) before (loss, logits)"),
    dict(name="cnn_bn_train_nostats", build=cnn_bn_train, clone_buffers=True,
         covers="the same train-mode CNN with the buffers cloned inside the functional forward: the "
                "running-statistics updates are dropped, results (loss, logits); references are "
                "PyTorch's ordinary autograd (no path through buffer updates)"),
    dict(name="cnn_bn_eval", build=cnn_bn_eval,
         covers="the same CNN in eval mode: BatchNorm2d with its running statistics (constants of "
                "the module); results (loss, logits)"),
    dict(name="transformer_encoder", build=transformer_encoder,
         covers="nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0, gelu, "
                "batch_first) with a causal float mask buffer: in-projection split, scaled dot-product "
                "attention, softmax, residuals, two LayerNorms (f64 variance), exact GELU"),
    dict(name="lstm_lm", build=lstm_lm,
         covers="nn.Embedding(11, 6) on int64 token ids -> 2-layer nn.LSTM(6, 8) unrolled over 5 steps "
                "-> linear -> cross-entropy with int64 targets; scalar loss"),
    dict(name="gru_lm", build=gru_lm,
         covers="nn.Embedding(11, 6) on int64 token ids -> bidirectional nn.GRU(6, 8) -> linear -> "
                "cross-entropy with int64 targets; scalar loss"),
    dict(name="layernorm_mlp", build=layernorm_mlp,
         covers="linear -> nn.LayerNorm -> tanh GELU -> linear -> nn.GroupNorm(2, 6): the "
                "normalisation statistics are computed in f64 (convert, reduce, divide in f64)"),
]
MUST_HAVE_F64 = {"cnn_bn_train", "cnn_bn_train_nostats", "transformer_encoder", "layernorm_mlp"}


# ---------------------------------------------------------------------------

def _bn_update(bn: nn.modules.batchnorm._BatchNorm, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """The running-statistics update of a train-mode BatchNorm as differentiable torch ops."""
    dims = [d for d in range(x.dim()) if d != 1]
    m = bn.momentum
    mean = x.mean(dims)
    var = x.var(dims, unbiased=True)
    return {"running_mean": (1 - m) * bn.running_mean + m * mean,
            "running_var": (1 - m) * bn.running_var + m * var,
            "num_batches_tracked": bn.num_batches_tracked + 1}


def export_text(model: nn.Module, targs: list[torch.Tensor], clone_buffers: bool) -> str:
    module = fx.export_and_import(Functional(copy.deepcopy(model), clone_buffers), *targs, output_type="stablehlo")
    return str(module)


def output_specs(model: nn.Module, targs: list[torch.Tensor], clone_buffers: bool) -> list[tuple[str, str | None]]:
    """(kind, target) of each result of the exported module, as torch-mlir sees them (its
    export then its decomposition table: BatchNorm's buffer updates appear only after it)."""
    program = torch.export.export(Functional(copy.deepcopy(model), clone_buffers), tuple(targs), strict=False)
    program = program.run_decompositions(get_decomposition_table())
    return [(spec.kind.name, spec.target) for spec in program.graph_signature.output_specs]


def reference(model: nn.Module, args: list[np.ndarray], specs,
              clone_buffers: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(outputs in @main's result order, the float argument tensors) with autograd graphs."""
    model = copy.deepcopy(model)
    targs = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in args]
    twins: dict[str, torch.Tensor] = {}
    hooks = []
    for path, mod in model.named_modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm) and mod.training:
            def pre(mod, inputs, path=path):
                for k, v in _bn_update(mod, inputs[0]).items():
                    twins[f"model.{path}.{k}"] = v
            hooks.append(mod.register_forward_pre_hook(pre))
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):  # a ReLU follows: stay off its kink
            def away_from_zero(mod, inputs, out):
                assert out.abs().min() > 1e-5, f"a ReLU input {out.abs().min():.1e} from 0: pick another seed"
            hooks.append(mod.register_forward_hook(away_from_zero))
    user = Functional(model, clone_buffers)(*targs)
    for h in hooks:
        h.remove()
    user = list(user) if isinstance(user, (tuple, list)) else [user]
    outs = []
    buffers = dict(Functional(model).named_buffers())
    for kind, target in specs:
        if kind == "BUFFER_MUTATION":
            twin = twins[target]
            torch.testing.assert_close(twin.detach(), buffers[target], rtol=1e-6, atol=1e-6)
            outs.append(twin)
        else:
            assert kind == "USER_OUTPUT", (kind, target)
            outs.append(user.pop(0))
    assert not user
    return outs, [t for t in targs if t.requires_grad]


MAIN_RE = re.compile(r"func\.func @main\((.*?)\) -> (.*?) \{", re.S)


def export_fixture(spec) -> None:
    name = spec["name"]
    seed = _seed(name)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model, inputs = spec["build"](rng)
    params = [p.detach().numpy().copy() for p in model.parameters()]
    args = [*params, *inputs]
    targs = [torch.tensor(a) for a in args]

    clone = spec.get("clone_buffers", False)
    text = export_text(model, targs, clone)
    specs = output_specs(model, targs, clone)
    outs_t, fargs = reference(model, args, specs, clone)
    outs = [o.detach().numpy().copy() for o in outs_t]

    head = MAIN_RE.search(text)
    assert head and head.group(1).count("%arg") == len(args), name
    assert len(re.findall(r"tensor<", head.group(2))) == len(outs), (name, head.group(2), len(outs))
    if name in MUST_HAVE_F64:
        assert re.search(r"stablehlo\.reduce.*xf64>", text), f"{name}: expected f64 statistics"

    wrt = [i for i, a in enumerate(args) if a.dtype.kind == "f"]
    float_outs = [k for k, o in enumerate(outs) if o.dtype.kind == "f"]
    floats = [outs_t[k] for k in float_outs]
    total = sum(o.sum() for o in floats)
    grads = torch.autograd.grad(total, fargs, allow_unused=True, retain_graph=True)
    crng = np.random.default_rng(seed + 1)
    cots = [crng.standard_normal(outs[k].shape).astype(outs[k].dtype) for k in float_outs]
    vjps = torch.autograd.grad(floats, fargs, grad_outputs=[torch.tensor(c) for c in cots], allow_unused=True)

    data = {f"arg{i}": a for i, a in enumerate(args)}
    data.update({f"out{i}": o for i, o in enumerate(outs)})
    data["wrt"] = np.asarray(wrt, np.int64)
    data["float_outs"] = np.asarray(float_outs, np.int64)
    for k, g in enumerate(grads):
        g = np.zeros_like(args[wrt[k]]) if g is None else g.numpy()
        assert g.shape == args[wrt[k]].shape and np.all(np.isfinite(g)), (name, k)
        data[f"grad{k}"] = g
    for k, c in enumerate(cots):
        data[f"cotangent{k}"] = c
    for k, v in enumerate(vjps):
        v = np.zeros_like(args[wrt[k]]) if v is None else v.numpy()
        assert v.shape == args[wrt[k]].shape and np.all(np.isfinite(v)), (name, k)
        data[f"vjp{k}"] = v
    for o in outs:
        assert np.all(np.isfinite(o)), name

    with open(os.path.join(OUT_DIR, name + ".mlir"), "w") as f:
        f.write(text)
    np.savez_compressed(os.path.join(OUT_DIR, name + ".npz"), **data)
    print("wrote %-20s %6d chars, %d args, %d results" % (name, len(text), len(args), len(outs)))


# ---------------------------------------------------------------------------
# README: how the fixtures were made, the npz layout, and each fixture's arguments,
# results and ops (counted from the .mlir).
# ---------------------------------------------------------------------------

OP_RE = re.compile(r'(?<![#!\w.])"?((?:stablehlo|chlo|arith)\.[a-z_0-9]+)')


def op_counts(text: str) -> Counter:
    return Counter(m.group(1) for m in OP_RE.finditer(text))


def _shape(a: np.ndarray) -> str:
    tag = {"float32": "f32", "int64": "i64"}[str(a.dtype)]
    return "{}[{}]".format(tag, "x".join(map(str, a.shape)))


README_HEAD = """# PyTorch-produced StableHLO fixtures

Produced by a real foreign frontend: PyTorch {torchver} (CPU) exported with torch-mlir
{mlirver} as `torch_mlir.fx.export_and_import(Functional(model), *params, *inputs,
output_type="stablehlo")`, where `Functional`'s forward runs the model through
`torch.func.functional_call` so that the parameters are `@main`'s leading arguments (in
`named_parameters()` order), followed by the model's inputs. The module text is torch-mlir's,
unchanged: an unnamed `module` with `func.func @main`, `stablehlo.constant dense_resource<...>`
blobs (buffers: running statistics, the attention mask), `arith.constant`s, and f64 statistics
in the normalisation layers (`convert` to f64, `reduce`, `divide`, `convert` back).
PyTorch and torch-mlir are dev-only; neither irgrad nor its tests import them.

Regenerate (from the repository root; the CPU torch wheel, not a CUDA build):

```
python3 -m venv /work/torchvenv
/work/torchvenv/bin/pip install torch==2.13.0 torch-mlir numpy
/work/torchvenv/bin/python dev/make_torch_fixtures.py [NAME ...]
```

The models, their inputs and seeds (`crc32(name)` for `torch.manual_seed` and numpy) are in
`FIXTURES` of `dev/make_torch_fixtures.py`; regeneration is deterministic for given versions.

## npz layout (the same as `tests/fixtures/jax`)

| key | meaning |
| --- | --- |
| `arg0, arg1, ...` | inputs of `@main`, in order: the parameters, then the model's inputs (float32; int64 token ids and labels) |
| `out0, out1, ...` | results of `@main`, in order (float32; `num_batches_tracked` is int64) |
| `wrt` | int64: positions of the float arguments (integer arguments get no gradient) |
| `grad0, grad1, ...` | `grad{{k}}` = d(sum over all float outputs of sum(out))/d `arg[wrt[k]]` (`torch.autograd.grad`) |
| `float_outs` | int64: positions of the float outputs (int outputs get no cotangent) |
| `cotangent0, ...` | `cotangent{{k}}`: random cotangent with the shape of `out[float_outs[k]]` |
| `vjp0, vjp1, ...` | `vjp{{k}}`: VJP of all cotangents w.r.t. `arg[wrt[k]]` (`torch.autograd.grad(..., grad_outputs=...)`) |

## Buffer updates (`cnn_bn_train`)

A model in train mode whose BatchNorm updates its running statistics is exported with the
updates as extra results, before the model's own outputs (`BUFFER_MUTATION` in torch.export's
output specs): `running_mean`, `running_var` (f32) and `num_batches_tracked` (i64). PyTorch
updates these buffers in place outside autograd, so `loss.backward()` gives them no gradient;
the exported StableHLO computes them with ordinary ops and nothing marks them as
non-differentiable, so the derivative of `@main` has a path through them. The references are
that true derivative: the script recomputes the updates as differentiable torch ops (checked
equal to the buffers PyTorch updated) and `torch.autograd` differentiates them with the rest.
The gradient of the loss alone (the cotangents of the other results zero) is PyTorch's
ordinary one. `cnn_bn_train_nostats` is the same model exported without them: the functional
forward passes clones of the buffers made inside it, and torch.export drops updates of
temporaries; its references are PyTorch's ordinary autograd. A training step (`--train`)
needs a single float result: a train-mode BatchNorm model for it is exported that way, and
returns its loss alone.

## Checks

`tests/test_torch_fixtures.py` adds `@main_grad`, `@main_vjp` and `@main_jvp` with the module
pass, compiles for llvm-cpu (irgrad turns IREE's f64-to-f32 demotion off, so the f64
statistics run in f64) and compares with these references at rtol 1e-4 / atol 1e-5; the
forward mode is checked as <J v, u> = <v, Jᵀu>. `lstm_lm` is also trained with `train="adam"`:
its first step is Keras's Adam applied to `grad*`.

"""


def write_readme(specs) -> None:
    out = [README_HEAD.format(torchver=torch.__version__.split("+")[0],
                              mlirver=_torch_mlir_version())]
    out.append("## Fixtures\n\n| fixture | model, what it covers | args (params: names) | results |\n"
               "| --- | --- | --- | --- |\n")
    inventory = {}
    for spec in specs:
        name = spec["name"]
        path = os.path.join(OUT_DIR, name + ".mlir")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            inventory[name] = op_counts(f.read())
        with np.load(os.path.join(OUT_DIR, name + ".npz")) as z:
            args = [z[f"arg{i}"] for i in range(sum(k.startswith("arg") for k in z.files))]
            outs = [z[f"out{i}"] for i in range(sum(k.startswith("out") for k in z.files))]
        torch.manual_seed(_seed(name))
        model, _ = spec["build"](np.random.default_rng(_seed(name)))
        arg_text = ", ".join(_shape(a) for a in args)
        arg_text += " (params: " + ", ".join(n for n, _ in model.named_parameters()) + ")"
        out.append("| `{}` | {} | {} | {} |\n".format(name, spec["covers"], arg_text,
                                                     ", ".join(_shape(o) for o in outs)))
    out.append("\n## Ops (count in each .mlir)\n\n| fixture | ops |\n| --- | --- |\n")
    for name, c in inventory.items():
        out.append("| `{}` | {} |\n".format(name, ", ".join("%s×%d" % kv for kv in sorted(c.items()))))
    with open(os.path.join(OUT_DIR, "README.md"), "w") as f:
        f.write("".join(out))


def _torch_mlir_version() -> str:
    from importlib.metadata import version
    try:
        return version("torch-mlir")
    except Exception:  # noqa: BLE001
        return getattr(torch_mlir, "__version__", "?")


def main(argv) -> None:
    os.makedirs(OUT_DIR, exist_ok=True)
    only = set(argv[1:])
    unknown = only - {s["name"] for s in FIXTURES}
    if unknown:
        raise SystemExit("unknown fixture(s): {}".format(", ".join(sorted(unknown))))
    for spec in FIXTURES:
        if not only or spec["name"] in only:
            export_fixture(spec)
    write_readme(FIXTURES)
    total = sum(os.path.getsize(os.path.join(OUT_DIR, f)) for f in os.listdir(OUT_DIR))
    print("total fixture size: %.1f KiB" % (total / 1024))
    assert total < 2 * 1024 * 1024


if __name__ == "__main__":
    main(sys.argv)
