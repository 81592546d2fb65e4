"""Fixtures exported by other frameworks (JAX, TensorFlow): one layout, one set of checks.

``<name>.mlir`` is a module with a public ``@main``; ``<name>.npz`` holds its inputs
``arg*``, outputs ``out*``, the framework's gradient of the sum of the float outputs
``grad*`` (one per float argument, positions in ``wrt``) and, for random cotangents
``cotangent*`` of the float outputs (positions in ``float_outs``), the VJPs ``vjp*``.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

import irgrad as ig
from irgrad import passes

import loopforms

RTOL, ATOL = 1e-4, 1e-5


def numbered(data: dict, prefix: str) -> list[np.ndarray]:
    out, i = [], 0
    while f"{prefix}{i}" in data:
        out.append(data[f"{prefix}{i}"])
        i += 1
    return out


class Fixtures:
    def __init__(self, directory: Path):
        self.directory = directory
        self.names = sorted(p.stem for p in directory.glob("*.mlir"))

    def text(self, name: str) -> str:
        return (self.directory / f"{name}.mlir").read_text()

    @functools.cache  # noqa: B019 (one instance per fixture folder, alive for the session)
    def data(self, name: str) -> dict[str, np.ndarray]:
        with np.load(self.directory / f"{name}.npz") as z:
            return {k: z[k] for k in z.files}

    @loopforms.cached
    def compiled(self, name: str, form: str | None):
        """@main, @main_grad and @main_vjp in one module, compiled once per fixture and loop form
        (``choices.loop_form``: the form of the while adjoint, None for the default)."""
        return ig.compile(passes.differentiate(self.text(name), "main", grad=True, vjp=True)).load()

    @functools.cache  # noqa: B019 (one instance per fixture folder, alive for the session)
    def forward_only(self, name: str):
        return ig.compile(self.text(name)).load()

    @functools.cache  # noqa: B019 (one instance per fixture folder, alive for the session)
    def compiled_jvp(self, name: str):
        """@main and @main_jvp (forward mode) in one module."""
        return ig.compile(passes.differentiate(self.text(name), "main", grad=False, jvp=True)).load()

    def check_jvp(self, name: str, seed: int = 0) -> None:
        """<J v, u> from @main_jvp against <v, Jᵀu> from the framework's own VJP, for random
        tangents v of the float arguments and the fixture's cotangents u."""
        data = self.data(name)
        args, outs = numbered(data, "arg"), numbered(data, "out")
        wrt, float_outs = data["wrt"].tolist(), data["float_outs"].tolist()
        rng = np.random.default_rng(seed)
        tangents = [rng.standard_normal(args[i].shape).astype(args[i].dtype) for i in wrt]
        got = self.compiled_jvp(name)["main_jvp"].call_flat(*args, *tangents)[len(outs):]
        assert len(got) == sum(o.dtype.kind == "f" for o in outs)
        floats = [i for i, o in enumerate(outs) if o.dtype.kind == "f"]
        given = dict(zip(float_outs, numbered(data, "cotangent")))
        lhs = sum(np.vdot(np.asarray(t, np.float64), given[i].astype(np.float64)) for i, t in zip(floats, got)
                  if i in given)
        rhs = sum(np.vdot(v.astype(np.float64), ref.astype(np.float64)) for v, ref in zip(tangents, numbered(data, "vjp")))
        scale = sum(np.abs(np.asarray(t, np.float64)).sum() * np.abs(given[i]).max() for i, t in zip(floats, got)
                    if i in given) + 1.0
        assert abs(lhs - rhs) <= 1e-4 * scale, f"{name}: <J v, u> = {lhs} (irgrad forward mode), <v, Jᵀu> = {rhs} (JAX)"

    def check_forward(self, name: str, module) -> None:
        data = self.data(name)
        outs = module["main"].call_flat(*numbered(data, "arg"))
        for got, want in zip(outs, numbered(data, "out"), strict=True):
            if want.dtype.kind == "f":
                np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
            else:
                np.testing.assert_array_equal(got, want)

    def check_grad(self, name: str, form: str | None = None) -> None:
        data = self.data(name)
        grads = self.compiled(name, form)["main_grad"].call_flat(*numbered(data, "arg"))
        want = numbered(data, "grad")
        assert len(grads) == len(want) == len(data["wrt"])
        for k, (got, ref) in enumerate(zip(grads, want)):
            np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL, err_msg=f"{name}: d arg{data['wrt'][k]}")

    def check_vjp(self, name: str, form: str | None = None) -> None:
        data = self.data(name)
        args, outs = numbered(data, "arg"), numbered(data, "out")
        given = dict(zip(data["float_outs"].tolist(), numbered(data, "cotangent")))
        # @main_vjp takes one cotangent per result; those of integer results are ignored.
        cts = [given.get(i, np.zeros_like(o)) for i, o in enumerate(outs)]
        vjps = self.compiled(name, form)["main_vjp"].call_flat(*args, *cts)
        want = numbered(data, "vjp")
        assert len(vjps) == len(want)
        for k, (got, ref) in enumerate(zip(vjps, want)):
            np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL, err_msg=f"{name}: vjp arg{data['wrt'][k]}")
