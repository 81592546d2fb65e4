"""Every gradient choice the frontend makes is in the emitted StableHLO: ``ig.gradients`` in
process and ``irgrad.passes.differentiate`` on ``f.lower().mlir`` (what ``irgrad grad`` and
``irgrad compile --grad`` run) give the same numbers."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes
from irgrad.passes.transforms.registry import NONDIFFERENTIABLE, RULES


def _both(fn, *args):
    """(in-process gradients, gradients of the exported module) of ``fn`` at ``args``."""
    specs = [ig.TensorSpec(a.shape, ig.as_dtype(a.dtype)) for a in args]
    f = ig.function(fn, input_signature=specs)
    lowered = f.lower()
    exported = ig.compile(passes.differentiate(lowered.mlir, lowered.name, grad=True)).load()
    outside = exported[f"{lowered.name}_grad"].call_flat(*args)

    @ig.function(input_signature=specs)
    def inside(*xs):
        return ig.gradients(fn(*xs), list(xs))

    return [np.asarray(g) for g in inside(*args)], [np.asarray(g) for g in outside]


def test_relu_at_zero_and_nan():
    x = np.array([-1.0, 0.0, np.nan, 2.0], np.float32)
    inside, outside = _both(lambda x: ig.reduce_sum(ig.nn.relu(x)), x)
    np.testing.assert_array_equal(inside[0], [0.0, 0.0, 0.0, 1.0])  # TensorFlow's ReluGrad
    np.testing.assert_array_equal(outside[0], inside[0])


def test_one_hot_on_and_off_values_get_no_gradient():
    idx = np.array([0, 2, 1], np.int32)
    on, off = np.array(2.0, np.float32), np.array(-1.0, np.float32)
    fn = lambda on, off: ig.reduce_sum(ig.one_hot(idx, 3, on_value=on, off_value=off) * 3.0)  # noqa: E731
    specs = [ig.TensorSpec([], ig.float32)] * 2
    f = ig.function(fn, input_signature=specs)

    @ig.function(input_signature=specs)
    def inside(on, off):
        return ig.gradients(fn(on, off), [on, off], unconnected_gradients="zero")

    lowered = f.lower()
    exported = ig.compile(passes.differentiate(lowered.mlir, lowered.name, grad=True)).load()
    outside = exported[f"{lowered.name}_grad"].call_flat(on, off)
    assert [float(g) for g in inside(on, off)] == [0.0, 0.0]
    assert [float(g) for g in outside] == [0.0, 0.0]


@pytest.mark.parametrize("x", [np.array([-1.5, 0.0, 0.5, 3.0], np.float64)])
def test_relu_times_x_agrees(x):
    inside, outside = _both(lambda x: ig.reduce_sum(ig.nn.relu(x) * x), x)
    np.testing.assert_allclose(inside[0], [0.0, 0.0, 1.0, 6.0])
    np.testing.assert_allclose(outside[0], inside[0])


@ig.RegisterGradient("test_ir_agreement.TanhTimesTen")
def _tanh_times_ten(op, grad):
    y = op.outputs[0]
    return grad * (1 - y * y) * 10.0


ig.no_gradient("test_ir_agreement.NoGradient")


def _overridden(x):
    graph = ig.get_default_graph()
    with graph.gradient_override_map({"stablehlo.tanh": "test_ir_agreement.TanhTimesTen",
                                      "stablehlo.exponential": "test_ir_agreement.NoGradient"}):
        y = ig.tanh(x)
        z = ig.exp(x)
    return ig.reduce_sum(y + z * 0.5 + ig.sin(x))


def test_overridden_tanh_and_a_no_gradient_override():
    x = np.array([-0.7, 0.0, 0.4], np.float32)
    inside, outside = _both(_overridden, x)
    np.testing.assert_allclose(inside[0], 10 * (1 - np.tanh(x) ** 2) + np.cos(x), rtol=1e-6)
    np.testing.assert_allclose(outside[0], inside[0], rtol=1e-6)


# ----- the whole op table -------------------------------------------------------------------

def _f(t):
    return ig.cast(t, ig.float64)


# One call per op the frontend exports (x, y: 2×2 float64 without ties or kinks; i: int32
# indices; z: a 1×4×4×2 image; k: a 2×2×2×3 filter). test_the_table_covers_every_exported_op
# derives the list of ops from the frontend's modules, so a new op needs a row here.
def _spd(x):
    return ig.matmul(x, x, transpose_b=True) + ig.linalg.eye(2, dtype=ig.float64)


OP_TABLE = {
    "abs": lambda x, y, i, z, k: ig.abs(x - 0.1),
    "add": lambda x, y, i, z, k: ig.add(x, y),
    "avg_pool2d": lambda x, y, i, z, k: ig.nn.avg_pool2d(z, 3, 2, "SAME"),
    "broadcast_to": lambda x, y, i, z, k: ig.broadcast_to(x[0], [3, 2]),
    "cast": lambda x, y, i, z, k: ig.cast(ig.cast(x, ig.float32), ig.float64),
    "ceil": lambda x, y, i, z, k: ig.ceil(x * 3.0),
    "clip_by_value": lambda x, y, i, z, k: ig.clip_by_value(x, 0.2, 0.6),
    "concat": lambda x, y, i, z, k: ig.concat([x, y], 1),
    "cond": lambda x, y, i, z, k: ig.cond(ig.reduce_sum(x) > 1.0, lambda: x * y, lambda: x + y),
    "constant": lambda x, y, i, z, k: x * ig.constant([[1.0, 2.0], [3.0, 4.0]], ig.float64),
    "conv2d": lambda x, y, i, z, k: ig.nn.conv2d(z, k, 2, "SAME"),
    "cos": lambda x, y, i, z, k: ig.cos(x),
    "divide": lambda x, y, i, z, k: ig.divide(x, y),
    "einsum": lambda x, y, i, z, k: ig.einsum("ij,jk->ik", x, y),
    "equal": lambda x, y, i, z, k: _f(ig.equal(x, y)) * x,
    "erf": lambda x, y, i, z, k: ig.erf(x),
    "exp": lambda x, y, i, z, k: ig.exp(x),
    "expand_dims": lambda x, y, i, z, k: ig.expand_dims(x, 1),
    "expm1": lambda x, y, i, z, k: ig.expm1(x),
    "fill": lambda x, y, i, z, k: ig.fill([2, 2], np.float64(3.0)) * x,
    "floor": lambda x, y, i, z, k: ig.floor(x * 3.0),
    "floordiv": lambda x, y, i, z, k: ig.floordiv(x * 5.0, y),
    "gather": lambda x, y, i, z, k: ig.gather(x, i, axis=1),
    "getitem": lambda x, y, i, z, k: x[::-1, 1],
    "greater": lambda x, y, i, z, k: _f(ig.greater(x, y)) * y,
    "greater_equal": lambda x, y, i, z, k: _f(ig.greater_equal(x, y)) * y,
    "identity": lambda x, y, i, z, k: ig.identity(x),
    "less": lambda x, y, i, z, k: _f(ig.less(x, y)) * y,
    "less_equal": lambda x, y, i, z, k: _f(ig.less_equal(x, y)) * y,
    "linalg.adjoint": lambda x, y, i, z, k: ig.linalg.adjoint(x) * y,
    "linalg.band_part": lambda x, y, i, z, k: ig.linalg.band_part(x, 0, -1),
    "linalg.cholesky": lambda x, y, i, z, k: ig.linalg.cholesky(_spd(x)),
    "linalg.cholesky_solve": lambda x, y, i, z, k: ig.linalg.cholesky_solve(ig.linalg.cholesky(_spd(x)), y),
    "linalg.det": lambda x, y, i, z, k: ig.linalg.det(x),
    "linalg.diag": lambda x, y, i, z, k: ig.linalg.diag(x, k=1),
    "linalg.diag_part": lambda x, y, i, z, k: ig.linalg.diag_part(x),
    "linalg.eigh": lambda x, y, i, z, k: ig.stack(ig.linalg.eigh(x + ig.transpose(x))[1]),
    "linalg.eigvalsh": lambda x, y, i, z, k: ig.linalg.eigvalsh(x + ig.transpose(x)),
    "linalg.eye": lambda x, y, i, z, k: ig.linalg.eye(2, dtype=ig.float64) * x,
    "linalg.inv": lambda x, y, i, z, k: ig.linalg.inv(x),
    "linalg.logdet": lambda x, y, i, z, k: ig.linalg.logdet(_spd(x)),
    "linalg.lu": lambda x, y, i, z, k: ig.linalg.lu(x)[0],
    "linalg.matmul": lambda x, y, i, z, k: ig.linalg.matmul(x, y),
    "linalg.matrix_transpose": lambda x, y, i, z, k: ig.linalg.matrix_transpose(x) * y,
    "linalg.matvec": lambda x, y, i, z, k: ig.linalg.matvec(x, y[0]),
    "linalg.qr": lambda x, y, i, z, k: ig.linalg.qr(x)[0] + ig.linalg.qr(x)[1],
    "linalg.set_diag": lambda x, y, i, z, k: ig.linalg.set_diag(x, y[0]),
    "linalg.slogdet": lambda x, y, i, z, k: ig.linalg.slogdet(x)[1],
    "linalg.solve": lambda x, y, i, z, k: ig.linalg.solve(x, y),
    "linalg.svd": lambda x, y, i, z, k: ig.concat(ig.linalg.svd(x)[1:], 0) * ig.linalg.svd(x)[0],
    "linalg.tensordot": lambda x, y, i, z, k: ig.linalg.tensordot(x, y, 1),
    "linalg.trace": lambda x, y, i, z, k: ig.linalg.trace(x * y),
    "linalg.triangular_solve": lambda x, y, i, z, k: ig.linalg.triangular_solve(x + 1.0, y, lower=False),
    "log": lambda x, y, i, z, k: ig.log(x),
    "log1p": lambda x, y, i, z, k: ig.log1p(x),
    "log_softmax": lambda x, y, i, z, k: ig.nn.log_softmax(x),
    "logical_and": lambda x, y, i, z, k: _f(ig.logical_and(x > 0.3, y > 0.3)) * x,
    "logical_not": lambda x, y, i, z, k: _f(ig.logical_not(x > 0.3)) * x,
    "logical_or": lambda x, y, i, z, k: _f(ig.logical_or(x > 0.3, y > 0.3)) * x,
    "matmul": lambda x, y, i, z, k: ig.matmul(x, y, transpose_b=True),
    "max_pool2d": lambda x, y, i, z, k: ig.nn.max_pool2d(z, 3, 2, "SAME"),
    "maximum": lambda x, y, i, z, k: ig.maximum(x, y),
    "minimum": lambda x, y, i, z, k: ig.minimum(x, y),
    "mod": lambda x, y, i, z, k: ig.mod(x * 5.0, y),
    "multiply": lambda x, y, i, z, k: ig.multiply(x, y),
    "negative": lambda x, y, i, z, k: ig.negative(x),
    "not_equal": lambda x, y, i, z, k: _f(ig.not_equal(x, y)) * x,
    "one_hot": lambda x, y, i, z, k: ig.one_hot(i, 3, on_value=x[0, 0], off_value=x[1, 1]),
    "ones": lambda x, y, i, z, k: ig.ones([2, 2], ig.float64) * x,
    "ones_like": lambda x, y, i, z, k: ig.ones_like(x) * y,
    "pow": lambda x, y, i, z, k: ig.pow(x, y),
    "rank": lambda x, y, i, z, k: _f(ig.rank(x)) * x,
    "reduce_all": lambda x, y, i, z, k: _f(ig.reduce_all(x > 0.0)) * x,
    "reduce_any": lambda x, y, i, z, k: _f(ig.reduce_any(x > 0.5)) * x,
    "reduce_max": lambda x, y, i, z, k: ig.reduce_max(x, axis=1),
    "reduce_mean": lambda x, y, i, z, k: ig.reduce_mean(x, axis=0),
    "reduce_min": lambda x, y, i, z, k: ig.reduce_min(x),
    "reduce_prod": lambda x, y, i, z, k: ig.reduce_prod(x, axis=1),
    "reduce_sum": lambda x, y, i, z, k: ig.reduce_sum(x * y, axis=0),
    "relu": lambda x, y, i, z, k: ig.nn.relu(x - 0.5),
    "reshape": lambda x, y, i, z, k: ig.reshape(x, [-1]),
    "round": lambda x, y, i, z, k: ig.round(x * 3.0),
    "rsqrt": lambda x, y, i, z, k: ig.rsqrt(x),
    "shape": lambda x, y, i, z, k: _f(ig.shape(x)) * x[0],
    "sigmoid": lambda x, y, i, z, k: ig.sigmoid(x),
    "sign": lambda x, y, i, z, k: ig.sign(x - 0.5),
    "sin": lambda x, y, i, z, k: ig.sin(x),
    "size": lambda x, y, i, z, k: _f(ig.size(x)) * x,
    "slice": lambda x, y, i, z, k: ig.slice(x, [0, 1], [2, 1]),
    "softmax": lambda x, y, i, z, k: ig.nn.softmax(x),
    "softmax_cross_entropy_with_logits": lambda x, y, i, z, k: ig.nn.softmax_cross_entropy_with_logits(
        labels=ig.nn.softmax(y), logits=x),
    "softplus": lambda x, y, i, z, k: ig.nn.softplus(x),
    "sqrt": lambda x, y, i, z, k: ig.sqrt(x),
    "square": lambda x, y, i, z, k: ig.square(x),
    "squeeze": lambda x, y, i, z, k: ig.squeeze(x[:1]),
    "stack": lambda x, y, i, z, k: ig.stack([x, y], axis=1),
    "stop_gradient": lambda x, y, i, z, k: ig.stop_gradient(x) * y,
    "subtract": lambda x, y, i, z, k: ig.subtract(x, y),
    "tan": lambda x, y, i, z, k: ig.tan(x),
    "tanh": lambda x, y, i, z, k: ig.tanh(x),
    "transpose": lambda x, y, i, z, k: ig.transpose(x) * y,
    "unstack": lambda x, y, i, z, k: ig.unstack(x, axis=1)[1],
    "where": lambda x, y, i, z, k: ig.where(x < y, x * 2.0, y),
    "while_loop": lambda x, y, i, z, k: ig.while_loop(lambda n, v: n < 3, lambda n, v: (n + 1, ig.sin(v) * y),
                                                       (0, x))[1],
    "zeros": lambda x, y, i, z, k: ig.zeros([2, 2], ig.float64) + x,
    "zeros_like": lambda x, y, i, z, k: ig.zeros_like(x) + y,
}

_OP_MODULES = ("array_ops", "math_ops", "reduce_ops", "control_flow", "nn_ops")
_NOT_OPS = {"binary_op"}  # a helper the op modules share


def _exported_ops() -> set[str]:
    names = {"stack"}  # lives in ops.core
    for module_name in _OP_MODULES:
        module = getattr(ig.ops, module_name)
        public = getattr(module, "__all__", None) or [
            n for n, v in vars(module).items()
            if not n.startswith("_") and inspect.isfunction(v) and v.__module__ == module.__name__]
        names |= set(public)
    names |= {f"linalg.{n}" for n in ig.linalg.__all__ if inspect.isfunction(getattr(ig.linalg, n))}
    return names - _NOT_OPS


def test_the_table_covers_every_exported_op():
    exported = _exported_ops()
    assert set(OP_TABLE) == exported, (f"ops without a row: {sorted(exported - set(OP_TABLE))}; "
                                       f"rows that are not ops: {sorted(set(OP_TABLE) - exported)}")


_SPECS = [ig.TensorSpec([2, 2], ig.float64), ig.TensorSpec([2, 2], ig.float64), ig.TensorSpec([3], ig.int32),
          ig.TensorSpec([1, 4, 4, 2], ig.float64), ig.TensorSpec([2, 2, 2, 3], ig.float64)]
_ARGS = [np.array([[0.35, 0.8], [0.55, 0.15]]), np.array([[0.6, 0.25], [0.9, 0.45]]),
         np.array([1, 0, 1], np.int32), np.random.default_rng(3).normal(size=(1, 4, 4, 2)),
         np.random.default_rng(4).normal(size=(2, 2, 2, 3))]
_FLOAT = [0, 1, 3, 4]


def _scalars(*args):
    """One scalar per op: its output weighted by fixed pseudo-random numbers and summed."""
    out = []
    for n, name in enumerate(sorted(OP_TABLE)):
        y = ig.cast(OP_TABLE[name](*args), ig.float64)
        w = np.cos(np.arange(np.prod(y.shape)) + n).reshape(tuple(y.shape))
        out.append(ig.reduce_sum(y * w))
    return out


def test_every_op_lowers_to_ops_with_an_adjoint_rule():
    module = passes.parse_module(ig.function(_scalars).lower(*_SPECS).mlir)
    seen = set()

    def walk(op):
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    seen.add(inner.operation.name)
                    walk(inner.operation)

    walk(module.operation)
    seen -= {"func.func", "func.return", "stablehlo.return"}
    missing = sorted(name for name in seen if name not in RULES and name not in NONDIFFERENTIABLE)
    assert not missing, f"frontend ops without an adjoint rule or nondifferentiable mark: {missing}"
    assert {"stablehlo.sine", "stablehlo.dot_general", "stablehlo.while", "stablehlo.convolution",
            "stablehlo.reduce_window", "stablehlo.composite"} <= seen


def test_every_op_differentiates_the_same_in_process_and_exported():
    """ig.gradients of each op's scalar against the vector-Jacobian products of the exported
    module (what irgrad grad / compile --grad build), for every float argument."""
    names = sorted(OP_TABLE)

    @ig.function(input_signature=_SPECS)
    def inside(*args):
        floats = [args[a] for a in _FLOAT]
        return [ig.gradients(s, floats, unconnected_gradients="zero") for s in _scalars(*args)]

    lowered = ig.function(_scalars).lower(*_SPECS)
    exported = ig.compile(passes.differentiate(lowered.mlir, lowered.name, wrt=_FLOAT, grad=False,
                                               vjp=True)).load()[f"{lowered.name}_vjp"]
    want = inside(*_ARGS)
    for n, name in enumerate(names):
        cts = [np.float64(n == m) for m in range(len(names))]
        got = exported.call_flat(*_ARGS, *cts)
        for a, (g_in, g_out) in enumerate(zip(want[n], got)):
            np.testing.assert_allclose(g_out, g_in, rtol=1e-12, atol=1e-12,
                                       err_msg=f"{name}: gradient of argument {_FLOAT[a]}")
