"""Export JAX modules with complex numbers, FFTs and linear algebra, and JAX's gradients of
them, for ``tests/test_spectral_peers.py`` (issue 34: "checked ... against TensorFlow's (and
JAX's, conjugated) gradients on exported modules").

JAX is a DEV-ONLY dependency: irgrad and its tests never import it. What this writes
(``tests/fixtures/jax_spectral/*.mlir`` + ``*.npz`` + ``README.md``) is committed.

    /work/main/benchmarks/.venv/bin/python dev/make_spectral_fixtures_jax.py [NAME ...]

Each ``<name>.mlir`` is ``jax.jit(f).lower(*args).as_text()`` on CPU (so ``cholesky`` and
``triangular_solve`` arrive as ``stablehlo.custom_call @lapack_spotrf_ffi`` /
``@lapack_strsm_ffi``), except the ``*_portable`` ones: ``jax.export.export(jax.jit(f),
platforms=["tpu"])``'s module, JAX's platform-independent lowering, which emits
``stablehlo.cholesky`` / ``stablehlo.triangular_solve`` (no TPU is needed to lower).

``<name>.npz``: ``arg0..`` the inputs, ``out0`` the (real, scalar) output of the jitted
function, ``wrt`` the positions of the float and complex arguments, and ``grad0..`` the
gradient with respect to each, **in TensorFlow's convention**: for a complex argument
``z = x + iy`` that is ``dL/dx + i dL/dy``, the complex conjugate of ``jax.grad``'s
(which is ``dL/dx - i dL/dy``); ``jax_grad0..`` keep ``jax.grad``'s own values.
"""
from __future__ import annotations

import os
import re
import sys
from collections import Counter

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jax.scipy.linalg as jsl  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "jax_spectral")
F32, C64 = np.float32, np.complex64


def spectral_layer(x, wr, wi):
    """A Fourier layer (FNO): rfft, a complex weight per retained mode, irfft."""
    modes = wr.shape[-1]
    xf = jnp.fft.rfft(x, axis=-1)
    w = jax.lax.complex(wr, wi)
    kept = xf[..., :modes] * w
    yf = jnp.concatenate([kept, jnp.zeros(xf.shape[:-1] + (xf.shape[-1] - modes,), xf.dtype)], axis=-1)
    y = jnp.fft.irfft(yf, n=x.shape[-1], axis=-1)
    return jnp.sum(jnp.tanh(y) * x)


def spectral_layer_2d(x, wr, wi):
    """rfft2 / irfft2 over the last two axes, the spectrum scaled by complex weights."""
    y = jnp.fft.irfft2(jnp.fft.rfft2(x) * jax.lax.complex(wr, wi), s=x.shape[-2:])
    return jnp.sum(y ** 2)


def fft_magnitude(x):
    return jnp.sum(jnp.abs(jnp.fft.fft(x)))


def ifft_complex_arg(z, w):
    """A complex argument through FFT, a real filter and IFFT."""
    return jnp.sum(jnp.real(jnp.fft.ifft(jnp.fft.fft(z) * w)) ** 2 + jnp.imag(z) * w)


def complex_abs2(z, w):
    return jnp.sum(jnp.abs(z) ** 2 * w)


def complex_elementwise(z, c):
    """complex exp, multiply, abs, real/imag of two complex arguments."""
    e = jnp.exp(z) * c + z * z
    return jnp.sum(jnp.abs(e)) + jnp.sum(jnp.real(z * jnp.conj(c)))


def cholesky_solve(a, b):
    spd = a @ a.T + 4 * jnp.eye(a.shape[0], dtype=a.dtype)
    return jnp.sum(jsl.cho_solve(jsl.cho_factor(spd, lower=True), b) ** 2)


def triangular_solves(m, b):
    """Lower and transposed, upper with a unit diagonal, and from the right."""
    eye = jnp.eye(m.shape[0], dtype=m.dtype)
    low = jnp.tril(m) + 3 * eye
    up = jnp.triu(m) + 3 * eye
    x1 = jsl.solve_triangular(low, b, lower=True)
    x2 = jsl.solve_triangular(low, b, lower=True, trans=1)
    x3 = jsl.solve_triangular(up, b, lower=False, unit_diagonal=True)
    x4 = jax.lax.linalg.triangular_solve(up, b.T, left_side=False, lower=False)
    return jnp.sum(x1 * x2) + jnp.sum(jnp.sin(x3)) + jnp.sum(x4 ** 2)


def cholesky_logdet(a):
    """log det of an SPD matrix from its Cholesky factor (batched)."""
    spd = a @ jnp.swapaxes(a, -1, -2) + 2 * jnp.eye(a.shape[-1], dtype=a.dtype)
    chol = jnp.linalg.cholesky(spd)
    return jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)))


def einsum_contractions(a, b, c):
    return jnp.sum(jnp.einsum("bij,bjk,k->bi", a, b, c) ** 2) + jnp.sum(jnp.einsum("bii->b", a[:, :, :3]))


def _rand(rng, dtype, shape, scale=0.5):
    if np.dtype(dtype).kind == "c":
        return ((rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) * scale).astype(dtype)
    return (rng.standard_normal(shape) * scale).astype(dtype)


# name -> (function, argument (dtype, shape) specs, lowering, what it exercises)
FIXTURES = [
    ("spectral_layer", spectral_layer, [(F32, (2, 16)), (F32, (5,)), (F32, (5,))], "cpu",
     "rfft, complex weights (stablehlo.complex), truncated modes, irfft, tanh"),
    ("spectral_layer_2d", spectral_layer_2d, [(F32, (2, 6, 8)), (F32, (6, 5)), (F32, (6, 5))], "cpu",
     "2-D rfft / irfft (fft_length of two dimensions), complex multiply"),
    ("fft_magnitude", fft_magnitude, [(F32, (8,))], "cpu", "real to complex convert, FFT, complex abs"),
    ("ifft_complex_arg", ifft_complex_arg, [(C64, (6,)), (F32, (6,))], "cpu",
     "a complex argument through FFT, IFFT, real and imag"),
    ("complex_abs2", complex_abs2, [(C64, (5,)), (F32, (5,))], "cpu", "|z|^2 w of a complex argument"),
    ("complex_elementwise", complex_elementwise, [(C64, (4,)), (C64, (4,))], "cpu",
     "complex exp, multiply, abs, conj (a complex constant multiply), real; two complex arguments"),
    ("cholesky_solve", cholesky_solve, [(F32, (4, 4)), (F32, (4, 2))], "cpu",
     "cho_factor / cho_solve: custom_call @lapack_spotrf_ffi and @lapack_strsm_ffi"),
    ("cholesky_solve_portable", cholesky_solve, [(F32, (4, 4)), (F32, (4, 2))], "portable",
     "the same, platform-independent lowering: stablehlo.cholesky and stablehlo.triangular_solve"),
    ("triangular_solves", triangular_solves, [(F32, (4, 4)), (F32, (4, 3))], "cpu",
     "solve_triangular lower, transposed, upper with unit diagonal, right side (lapack_strsm_ffi)"),
    ("triangular_solves_portable", triangular_solves, [(F32, (4, 4)), (F32, (4, 3))], "portable",
     "the same as stablehlo.triangular_solve"),
    ("cholesky_logdet", cholesky_logdet, [(F32, (2, 3, 3))], "cpu",
     "batched jnp.linalg.cholesky (lapack_spotrf_ffi with a batch dimension), log of its diagonal"),
    ("einsum_contractions", einsum_contractions, [(F32, (2, 3, 4)), (F32, (2, 4, 5)), (F32, (5,))], "cpu",
     "jnp.einsum with three operands and a batched trace (dot_general, diagonal via iota/select)"),
]


def export(fn, args, lowering: str) -> str:
    if lowering == "portable":
        return jax.export.export(jax.jit(fn), platforms=["tpu"])(*args).mlir_module()
    return jax.jit(fn).lower(*args).as_text()


OP_RE = re.compile(r'(?<![#!\w.])"?((?:stablehlo|chlo)\.[a-z_0-9]+)')
CALL_RE = re.compile(r"custom_call @(\w+)")


def op_summary(text: str) -> str:
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#loc"))
    counts = Counter(m.group(1) for m in OP_RE.finditer(body))
    counts.update(f"custom_call @{m.group(1)}" for m in CALL_RE.finditer(body))
    counts.pop("stablehlo.custom_call", None)
    return ", ".join(f"`{k}` {v}" for k, v in sorted(counts.items()))


def make(name, fn, specs, lowering, rng) -> None:
    args = [_rand(rng, dtype, shape) for dtype, shape in specs]
    text = export(fn, args, lowering)
    out = np.asarray(jax.jit(fn)(*args))
    wrt = [i for i, a in enumerate(args) if a.dtype.kind in "fc"]
    grads = jax.grad(fn, argnums=tuple(wrt))(*args)
    data = {f"arg{i}": a for i, a in enumerate(args)}
    data["out0"] = out
    data["wrt"] = np.asarray(wrt, np.int64)
    for k, g in enumerate(grads):
        g = np.asarray(g)
        data[f"jax_grad{k}"] = g
        data[f"grad{k}"] = np.conj(g) if g.dtype.kind == "c" else g  # TensorFlow's convention
    with open(os.path.join(OUT_DIR, f"{name}.mlir"), "w") as f:
        f.write(text)
    np.savez(os.path.join(OUT_DIR, f"{name}.npz"), **data)


README = """# JAX-produced fixtures: complex numbers, FFTs, Cholesky, triangular solves, einsum

Made by `dev/make_spectral_fixtures_jax.py` with JAX {version} on CPU:

```
/work/main/benchmarks/.venv/bin/python dev/make_spectral_fixtures_jax.py
```

`<name>.mlir` is `jax.jit(f).lower(*args).as_text()` (CPU lowering: JAX's `cholesky` and
`triangular_solve` become `stablehlo.custom_call @lapack_spotrf_ffi` / `@lapack_strsm_ffi`,
which irgrad rewrites to the StableHLO ops: `passes/lowering/lapack.py`), or for `*_portable`
`jax.export.export(jax.jit(f), platforms=["tpu"])(*args).mlir_module()`, JAX's
platform-independent lowering (`stablehlo.cholesky`, `stablehlo.triangular_solve`).

`<name>.npz`: `arg*` inputs, `out0` the jitted function's (scalar, real) output, `wrt` the
positions of the float and complex arguments, `grad*` the gradients **in TensorFlow's
convention** (irgrad's): `conj(jax.grad(f))` for a complex argument, `dL/dx + i dL/dy`;
`jax_grad*` are `jax.grad`'s own values (`dL/dx - i dL/dy` for complex arguments).
`tests/test_spectral_peers.py` differentiates each module with `passes.differentiate`,
compiles it with irgrad and compares with `grad*` (rtol 1e-4).

| fixture | exercises | ops |
| --- | --- | --- |
"""


def main(names) -> None:
    os.makedirs(OUT_DIR, exist_ok=True)
    for name, fn, specs, lowering, _ in FIXTURES:
        if names and name not in names:
            continue
        make(name, fn, specs, lowering, np.random.default_rng(sum(map(ord, name))))
        print("wrote", name)
    rows = []
    for name, _, _, _, what in FIXTURES:
        path = os.path.join(OUT_DIR, f"{name}.mlir")
        if os.path.exists(path):
            rows.append(f"| `{name}` | {what} | {op_summary(open(path).read())} |")
    with open(os.path.join(OUT_DIR, "README.md"), "w") as f:
        f.write(README.format(version=jax.__version__) + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
