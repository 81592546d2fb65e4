"""Export TensorFlow functions with complex numbers, FFTs and linear algebra as StableHLO, and
TensorFlow's gradients of them, for ``tests/test_spectral_peers.py`` (issue 34).

TensorFlow is a DEV-ONLY dependency: irgrad and its tests never import it. What this writes
(``tests/fixtures/tf_spectral/*.mlir`` + ``*.npz`` + ``README.md``) is committed.

    /work/tfvenv/bin/python dev/make_spectral_fixtures_tf.py [NAME ...]

Export: ``tf.function(f, jit_compile=True, autograph=False).experimental_get_compiler_ir(*args)
(stage="stablehlo")`` (as ``dev/make_tf_stablehlo_fixtures.py``; only absolute file paths in
locations are shortened). ``<name>.npz``: ``arg0..`` the inputs, ``out0`` the jit-compiled
function's (real, scalar) output, ``wrt`` the positions of the float and complex arguments,
``grad0..`` ``tf.GradientTape``'s gradients over the eager TF ops, TensorFlow's convention
(``dL/dx + i dL/dy`` for a complex argument), which is irgrad's.
"""
from __future__ import annotations

import os
import re
import sys
from collections import Counter

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "tf_spectral")
F32, C64 = np.float32, np.complex64


def spectral_layer(x, wr, wi):
    """A Fourier layer (FNO): rfft, a complex weight per retained mode, irfft."""
    modes, n = wr.shape[-1], x.shape[-1]
    xf = tf.signal.rfft(x, fft_length=[n])
    kept = xf[..., :modes] * tf.complex(wr, wi)
    yf = tf.concat([kept, tf.zeros(xf.shape[:-1] + [xf.shape[-1] - modes], xf.dtype)], axis=-1)
    y = tf.signal.irfft(yf, fft_length=[n])
    return tf.reduce_sum(tf.tanh(y) * x)


def spectral_layer_2d(x, wr, wi):
    """rfft2d / irfft2d over the last two axes, the spectrum scaled by complex weights."""
    shape = x.shape[-2:]
    y = tf.signal.irfft2d(tf.signal.rfft2d(x, fft_length=shape) * tf.complex(wr, wi), fft_length=shape)
    return tf.reduce_sum(y ** 2)


def fft_magnitude(x):
    return tf.reduce_sum(tf.abs(tf.signal.fft(tf.cast(x, tf.complex64))))


def ifft_complex_arg(z, w):
    """A complex argument through FFT, a real filter and IFFT."""
    y = tf.signal.ifft(tf.signal.fft(z) * tf.cast(w, tf.complex64))
    return tf.reduce_sum(tf.math.real(y) ** 2 + tf.math.imag(z) * w)


def complex_abs2(z, w):
    return tf.reduce_sum(tf.abs(z) ** 2 * w)


def complex_elementwise(z, c):
    """complex exp, multiply, abs, conj, real of two complex arguments."""
    e = tf.exp(z) * c + z * z
    return tf.reduce_sum(tf.abs(e)) + tf.reduce_sum(tf.math.real(z * tf.math.conj(c)))


def cholesky_solve(a, b):
    spd = tf.matmul(a, a, transpose_b=True) + 4 * tf.eye(a.shape[0])
    return tf.reduce_sum(tf.linalg.cholesky_solve(tf.linalg.cholesky(spd), b) ** 2)


def triangular_solves(m, b):
    """Lower, lower adjoint, and upper triangular solves."""
    eye = tf.eye(m.shape[0])
    low = tf.linalg.band_part(m, -1, 0) + 3 * eye
    up = tf.linalg.band_part(m, 0, -1) + 3 * eye
    x1 = tf.linalg.triangular_solve(low, b, lower=True)
    x2 = tf.linalg.triangular_solve(low, b, lower=True, adjoint=True)
    x3 = tf.linalg.triangular_solve(up, b, lower=False)
    return tf.reduce_sum(x1 * x2) + tf.reduce_sum(tf.sin(x3))


def cholesky_logdet(a):
    """log det of SPD matrices from their Cholesky factors (batched)."""
    spd = tf.matmul(a, a, transpose_b=True) + 2 * tf.eye(a.shape[-1], batch_shape=a.shape[:-2])
    return tf.reduce_sum(tf.math.log(tf.linalg.diag_part(tf.linalg.cholesky(spd))))


def einsum_contractions(a, b, c):
    return tf.reduce_sum(tf.einsum("bij,bjk,k->bi", a, b, c) ** 2) + tf.reduce_sum(tf.einsum("bii->b", a[:, :, :3]))


FIXTURES = [
    ("spectral_layer", spectral_layer, [(F32, (2, 16)), (F32, (5,)), (F32, (5,))],
     "rfft, complex weights (complex), truncated modes, irfft, tanh"),
    ("spectral_layer_2d", spectral_layer_2d, [(F32, (2, 6, 8)), (F32, (6, 5)), (F32, (6, 5))],
     "rfft2d / irfft2d, complex multiply"),
    ("fft_magnitude", fft_magnitude, [(F32, (8,))], "cast to complex, FFT, complex abs"),
    ("ifft_complex_arg", ifft_complex_arg, [(C64, (6,)), (F32, (6,))],
     "a complex argument through FFT, IFFT, real and imag"),
    ("complex_abs2", complex_abs2, [(C64, (5,)), (F32, (5,))], "|z|^2 w of a complex argument"),
    ("complex_elementwise", complex_elementwise, [(C64, (4,)), (C64, (4,))],
     "complex exp, multiply, abs, conj, real; two complex arguments"),
    ("cholesky_solve", cholesky_solve, [(F32, (4, 4)), (F32, (4, 2))],
     "tf.linalg.cholesky and cholesky_solve (stablehlo.cholesky, triangular_solve)"),
    ("triangular_solves", triangular_solves, [(F32, (4, 4)), (F32, (4, 3))],
     "tf.linalg.triangular_solve lower, adjoint, upper"),
    ("cholesky_logdet", cholesky_logdet, [(F32, (2, 3, 3))], "batched cholesky, log of its diagonal"),
    ("einsum_contractions", einsum_contractions, [(F32, (2, 3, 4)), (F32, (2, 4, 5)), (F32, (5,))],
     "tf.einsum with three operands and a batched trace"),
]

_PATH_RE = re.compile(r'"(/[^"]+\.py)"')


def _relative(path: str) -> str:
    marker = "site-packages/"
    if marker in path:
        return path.split(marker, 1)[1]
    if path.startswith(ROOT + os.sep):
        return os.path.relpath(path, ROOT)
    return os.path.basename(path)


def export(fn, args) -> str:
    jit = tf.function(fn, jit_compile=True, autograph=False)
    text = jit.experimental_get_compiler_ir(*[tf.constant(a) for a in args])(stage="stablehlo")
    return _PATH_RE.sub(lambda m: f'"{_relative(m.group(1))}"', text)


def _rand(rng, dtype, shape, scale=0.5):
    if np.dtype(dtype).kind == "c":
        return ((rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) * scale).astype(dtype)
    return (rng.standard_normal(shape) * scale).astype(dtype)


def make(name, fn, specs, rng) -> None:
    args = [_rand(rng, dtype, shape) for dtype, shape in specs]
    text = export(fn, args)
    out = tf.function(fn, jit_compile=True, autograph=False)(*[tf.constant(a) for a in args]).numpy()
    wrt = [i for i, a in enumerate(args) if a.dtype.kind in "fc"]
    xs = [tf.constant(a) for a in args]
    with tf.GradientTape() as tape:
        for i in wrt:
            tape.watch(xs[i])
        y = fn(*xs)
    grads = tape.gradient(y, [xs[i] for i in wrt], unconnected_gradients=tf.UnconnectedGradients.ZERO)
    data = {f"arg{i}": a for i, a in enumerate(args)}
    data["out0"] = out
    data["wrt"] = np.asarray(wrt, np.int64)
    for k, g in enumerate(grads):
        data[f"grad{k}"] = tf.convert_to_tensor(g).numpy()
    with open(os.path.join(OUT_DIR, f"{name}.mlir"), "w") as f:
        f.write(text)
    np.savez(os.path.join(OUT_DIR, f"{name}.npz"), **data)


OP_RE = re.compile(r'(?<![#!\w.])"?((?:stablehlo|chlo|mhlo)\.[a-z_0-9]+)')
CALL_RE = re.compile(r"custom_call @(\w+)")


def op_summary(text: str) -> str:
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#loc"))
    counts = Counter(m.group(1) for m in OP_RE.finditer(body))
    counts.update(f"custom_call @{m.group(1)}" for m in CALL_RE.finditer(body))
    counts.pop("stablehlo.custom_call", None)
    for attribute in [k for k in counts if k.startswith("mhlo.") and not re.search(r"= \"?" + re.escape(k), body)]:
        counts.pop(attribute)
    return ", ".join(f"`{k}` {v}" for k, v in sorted(counts.items()))


README = """# TensorFlow-produced fixtures: complex numbers, FFTs, Cholesky, triangular solves, einsum

Made by `dev/make_spectral_fixtures_tf.py` with TensorFlow {version} (`tensorflow-cpu`):

```
/work/tfvenv/bin/python dev/make_spectral_fixtures_tf.py
```

`<name>.mlir` is `tf.function(f, jit_compile=True, autograph=False)
.experimental_get_compiler_ir(*args)(stage="stablehlo")` (TF's XLA bridge output as StableHLO,
`func.func @main`; only absolute file paths in locations were shortened).

`<name>.npz`: `arg*` inputs, `out0` the jit-compiled function's (scalar, real) output, `wrt`
the positions of the float and complex arguments, `grad*` `tf.GradientTape`'s gradients over
the eager TF ops: TensorFlow's convention for complex arguments (`dL/dx + i dL/dy`), irgrad's.
`tests/test_spectral_peers.py` differentiates each module with `passes.differentiate`, compiles
it with irgrad and compares with `grad*` (rtol 1e-4).

| fixture | exercises | ops |
| --- | --- | --- |
"""


def main(names) -> None:
    os.makedirs(OUT_DIR, exist_ok=True)
    for name, fn, specs, _ in FIXTURES:
        if names and name not in names:
            continue
        make(name, fn, specs, np.random.default_rng(sum(map(ord, name))))
        print("wrote", name)
    rows = []
    for name, _, _, what in FIXTURES:
        path = os.path.join(OUT_DIR, f"{name}.mlir")
        if os.path.exists(path):
            rows.append(f"| `{name}` | {what} | {op_summary(open(path).read())} |")
    with open(os.path.join(OUT_DIR, "README.md"), "w") as f:
        f.write(README.format(version=tf.__version__) + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
