"""Every gradient choice the frontend makes is in the emitted StableHLO: ``ig.gradients`` in
process and ``irgrad.passes.differentiate`` on ``f.lower().mlir`` (what ``irgrad grad`` and
``irgrad compile --grad`` run) give the same numbers."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes
from irgrad.passes.lowering import choices
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
    "linalg.l2_normalize": lambda x, y, i, z, k: ig.linalg.l2_normalize(x, axis=0),
    "linalg.logdet": lambda x, y, i, z, k: ig.linalg.logdet(_spd(x)),
    "linalg.lu": lambda x, y, i, z, k: ig.linalg.lu(x)[0],
    "linalg.matmul": lambda x, y, i, z, k: ig.linalg.matmul(x, y),
    "linalg.matrix_transpose": lambda x, y, i, z, k: ig.linalg.matrix_transpose(x) * y,
    "linalg.matvec": lambda x, y, i, z, k: ig.linalg.matvec(x, y[0]),
    "linalg.norm": lambda x, y, i, z, k: ig.linalg.norm(x * y, axis=1),
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
    # issue 42, items 1-4 (activations, losses, special functions, scans, norms, segments)
    "acos": lambda x, y, i, z, k: ig.acos(x),
    "acosh": lambda x, y, i, z, k: ig.acosh(x + 1.5),
    "add_n": lambda x, y, i, z, k: ig.add_n([x, y, x]),
    "argmax": lambda x, y, i, z, k: _f(ig.argmax(x, axis=1)) * x[0],
    "argmin": lambda x, y, i, z, k: _f(ig.argmin(x)) * x[1],
    "asin": lambda x, y, i, z, k: ig.asin(x),
    "asinh": lambda x, y, i, z, k: ig.asinh(x),
    "atan": lambda x, y, i, z, k: ig.atan(x),
    "atan2": lambda x, y, i, z, k: ig.atan2(x, y - 0.5),
    "atanh": lambda x, y, i, z, k: ig.atanh(x),
    "cosh": lambda x, y, i, z, k: ig.cosh(x),
    "cumprod": lambda x, y, i, z, k: ig.math.cumprod(x, axis=1, exclusive=True),
    "cumsum": lambda x, y, i, z, k: ig.cumsum(x * y, axis=0, reverse=True),
    "cumulative_logsumexp": lambda x, y, i, z, k: ig.math.cumulative_logsumexp(x, axis=1),
    "digamma": lambda x, y, i, z, k: ig.math.digamma(x + 1.0),
    "divide_no_nan": lambda x, y, i, z, k: ig.math.divide_no_nan(x, y),
    "elu": lambda x, y, i, z, k: ig.nn.elu(x - 0.5),
    "erfc": lambda x, y, i, z, k: ig.math.erfc(x),
    "erfinv": lambda x, y, i, z, k: ig.math.erfinv(x),
    "gelu": lambda x, y, i, z, k: ig.nn.gelu(x - 0.5) + ig.nn.gelu(y, approximate=True),
    "is_finite": lambda x, y, i, z, k: _f(ig.math.is_finite(x)) * y,
    "is_inf": lambda x, y, i, z, k: _f(ig.math.is_inf(x)) + y,
    "is_nan": lambda x, y, i, z, k: _f(ig.math.is_nan(x)) + y,
    "l2_loss": lambda x, y, i, z, k: ig.nn.l2_loss(x),
    "l2_normalize": lambda x, y, i, z, k: ig.math.l2_normalize(x, axis=1),
    "leaky_relu": lambda x, y, i, z, k: ig.nn.leaky_relu(x - 0.5),
    "lgamma": lambda x, y, i, z, k: ig.math.lgamma(x),
    "log_poisson_loss": lambda x, y, i, z, k: ig.nn.log_poisson_loss(y * 3.0, x, compute_full_loss=True),
    "log_sigmoid": lambda x, y, i, z, k: ig.math.log_sigmoid(x),
    "moments": lambda x, y, i, z, k: ig.nn.moments(x * y, axes=[0])[1],
    "multiply_no_nan": lambda x, y, i, z, k: ig.math.multiply_no_nan(x, y),
    "norm": lambda x, y, i, z, k: ig.norm(x) + ig.norm(y, ord=1, axis=[0, 1]),
    "reciprocal": lambda x, y, i, z, k: ig.math.reciprocal(x),
    "reduce_euclidean_norm": lambda x, y, i, z, k: ig.math.reduce_euclidean_norm(x, axis=0),
    "reduce_logsumexp": lambda x, y, i, z, k: ig.reduce_logsumexp(x, axis=1),
    "reduce_std": lambda x, y, i, z, k: ig.math.reduce_std(x, axis=1),
    "reduce_variance": lambda x, y, i, z, k: ig.math.reduce_variance(x),
    "relu6": lambda x, y, i, z, k: ig.nn.relu6(x * 10.0),
    "segment_max": lambda x, y, i, z, k: ig.math.segment_max(z[0, :, :, 0], [0, 0, 2, 2]),
    "segment_mean": lambda x, y, i, z, k: ig.math.segment_mean(x, [0, 0]),
    "segment_min": lambda x, y, i, z, k: ig.math.segment_min(z[0, :, :, 1], [0, 1, 1, 1]),
    "segment_sum": lambda x, y, i, z, k: ig.math.segment_sum(x, [0, 1]),
    "selu": lambda x, y, i, z, k: ig.nn.selu(x - 0.5),
    "sigmoid_cross_entropy_with_logits": lambda x, y, i, z, k: ig.nn.sigmoid_cross_entropy_with_logits(
        labels=y, logits=x - 0.5),
    "silu": lambda x, y, i, z, k: ig.nn.silu(x),
    "sinh": lambda x, y, i, z, k: ig.sinh(x),
    "softsign": lambda x, y, i, z, k: ig.nn.softsign(x - 0.5),
    "sparse_softmax_cross_entropy_with_logits": lambda x, y, i, z, k: (
        ig.nn.sparse_softmax_cross_entropy_with_logits(labels=i[:2], logits=x)),
    "squared_difference": lambda x, y, i, z, k: ig.math.squared_difference(x, y),
    "swish": lambda x, y, i, z, k: ig.nn.swish(y, 2.0),
    "unsorted_segment_max": lambda x, y, i, z, k: ig.math.unsorted_segment_max(z[0, :2, 0, :], i[:2] * 2 - 1, 2),
    "unsorted_segment_mean": lambda x, y, i, z, k: ig.math.unsorted_segment_mean(x, i[1:], 2),
    "unsorted_segment_min": lambda x, y, i, z, k: ig.math.unsorted_segment_min(z[0, 0, :2], i[:2] + i[1:], 2),
    "unsorted_segment_sum": lambda x, y, i, z, k: ig.math.unsorted_segment_sum(x * y, i[:2], 3),
    "weighted_cross_entropy_with_logits": lambda x, y, i, z, k: ig.nn.weighted_cross_entropy_with_logits(
        y, x - 0.5, 2.0),
    "xdivy": lambda x, y, i, z, k: ig.math.xdivy(x - 0.35, y),
    "xlogy": lambda x, y, i, z, k: ig.math.xlogy(x - 0.35, y),
    # issue 42, items 5, 7 and 9: arrays, ig.nn layers, ig.image.resize
    "argsort": lambda x, y, i, z, k: _f(ig.argsort(x)) * x,
    "avg_pool1d": lambda x, y, i, z, k: ig.nn.avg_pool1d(z[0], 3, 2, "SAME"),
    "batch_normalization": lambda x, y, i, z, k: ig.nn.batch_normalization(z, x[0, 0], y[0, 0] + 1.0, x[1],
                                                                           y[1], 1e-3),
    "bias_add": lambda x, y, i, z, k: ig.nn.bias_add(z, x[0]),
    "boolean_mask": lambda x, y, i, z, k: ig.boolean_mask(x, np.array([True, False])),
    "clip_by_global_norm": lambda x, y, i, z, k: ig.clip_by_global_norm([x, None, y], 0.5)[0][2],
    "clip_by_norm": lambda x, y, i, z, k: ig.clip_by_norm(x, 0.5, axes=[1]),
    "conv1d": lambda x, y, i, z, k: ig.nn.conv1d(z[0], k[0], 1, "SAME"),
    "conv2d_transpose": lambda x, y, i, z, k: ig.nn.conv2d_transpose(z, ig.transpose(k, [0, 1, 3, 2]), [1, 8, 8, 3],
                                                                     2, "SAME"),
    "conv3d": lambda x, y, i, z, k: ig.nn.conv3d(ig.reshape(z, [1, 4, 2, 2, 2]), ig.reshape(k[0], [1, 1, 2, 2, 3]),
                                                 1, "VALID"),
    "depth_to_space": lambda x, y, i, z, k: ig.nn.depth_to_space(ig.tile(z, [1, 1, 1, 2]), 2),
    "depthwise_conv2d": lambda x, y, i, z, k: ig.nn.depthwise_conv2d(z, k[..., :2], [1, 2, 2, 1], "SAME"),
    "dropout": lambda x, y, i, z, k: ig.nn.dropout(z, 0.5, seed=1),
    "embedding_lookup": lambda x, y, i, z, k: ig.nn.embedding_lookup(x, i, max_norm=0.9),
    "eye": lambda x, y, i, z, k: ig.eye(2, dtype=ig.float64) * x,
    "fused_batch_norm": lambda x, y, i, z, k: _f(ig.nn.fused_batch_norm(ig.cast(z, ig.float32), ig.cast(x[0], ig.float32),
                                                                        ig.cast(y[0], ig.float32))[0]),
    "gather_nd": lambda x, y, i, z, k: ig.gather_nd(x, [[0, 1], [1, 0], [0, 1]]),
    "linspace": lambda x, y, i, z, k: ig.linspace(x[0, 0], y[1, 1], 4),
    "local_response_normalization": lambda x, y, i, z, k: ig.nn.local_response_normalization(z, 1, 0.5, 0.3, 0.75),
    "max_pool1d": lambda x, y, i, z, k: ig.nn.max_pool1d(z[0], 3, 2, "SAME"),
    "meshgrid": lambda x, y, i, z, k: ig.meshgrid(x[0], y[1])[0] * ig.meshgrid(x[0], y[1])[1],
    "pad": lambda x, y, i, z, k: ig.pad(x, [[1, 0], [0, 1]], "REFLECT") + ig.pad(y, [[1, 0], [0, 1]], "SYMMETRIC"),
    "pool": lambda x, y, i, z, k: ig.nn.pool(z, [2, 2], "AVG", strides=[2, 1], padding="SAME"),
    "range": lambda x, y, i, z, k: _f(ig.range(4)) * x[0, 0],
    "repeat": lambda x, y, i, z, k: ig.repeat(x, [2, 1], axis=1),
    "resize": lambda x, y, i, z, k: _f(ig.image.resize(z, [3, 5])) + _f(ig.image.resize(z, [3, 5], "nearest")),
    "reverse": lambda x, y, i, z, k: ig.reverse(x, [0]) * y,
    "roll": lambda x, y, i, z, k: ig.roll(x, 1, 1) * y,
    "scatter_nd": lambda x, y, i, z, k: ig.scatter_nd(ig.reshape(i, [3, 1]), ig.tile(ig.reduce_sum(x * y, 0), [2])[1:],
                                                      [3]),
    "searchsorted": lambda x, y, i, z, k: _f(ig.searchsorted(ig.sort(y), x)) * x,
    "separable_conv2d": lambda x, y, i, z, k: ig.nn.separable_conv2d(
        z, k[..., :2], ig.reshape(ig.concat([x, y], 0), [1, 1, 4, 2]), [1, 2, 2, 1], "SAME"),
    "sequence_mask": lambda x, y, i, z, k: _f(ig.sequence_mask(i, 3)) * y[0, 0],
    "sort": lambda x, y, i, z, k: ig.sort(x * y, axis=0),
    "space_to_depth": lambda x, y, i, z, k: ig.nn.space_to_depth(z, 2),
    "split": lambda x, y, i, z, k: ig.split(x, 2, axis=1)[1] * ig.split(y, [1, -1])[0],
    "tensor_scatter_nd_add": lambda x, y, i, z, k: ig.tensor_scatter_nd_add(x, [[1]], y[:1]),
    "tensor_scatter_nd_max": lambda x, y, i, z, k: ig.tensor_scatter_nd_max(x, [[1], [0]], y),
    "tensor_scatter_nd_min": lambda x, y, i, z, k: ig.tensor_scatter_nd_min(x, [[1], [0]], y),
    "tensor_scatter_nd_sub": lambda x, y, i, z, k: ig.tensor_scatter_nd_sub(x, [[1]], y[:1]),
    "tensor_scatter_nd_update": lambda x, y, i, z, k: ig.tensor_scatter_nd_update(x, [[1, 0]], y[0, :1]),
    "tile": lambda x, y, i, z, k: ig.tile(x, [2, 1]),
    "top_k": lambda x, y, i, z, k: ig.top_k(x * y, 1).values,
}

_OP_MODULES = ("array_ops", "math_ops", "reduce_ops", "control_flow", "nn_ops", "activations")
_NOT_OPS = {"binary_op"}  # a helper the op modules share


def _exported_ops() -> set[str]:
    names = {"stack"}  # lives in ops.core
    for module_name in _OP_MODULES:
        module = getattr(ig.ops, module_name)
        public = getattr(module, "__all__", None) or [
            n for n, v in vars(module).items()
            if not n.startswith("_") and inspect.isfunction(v) and v.__module__ == module.__name__]
        names |= set(public)
    names |= set(ig.image.__all__) - {"ResizeMethod"}
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


def _scalars(*args, names=None):
    """One scalar per op (``names``: those ops only): its output weighted by fixed pseudo-random
    numbers and summed."""
    out = []
    for n, name in enumerate(names or sorted(OP_TABLE)):
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


LOOP_ROWS = ["while_loop"]  # the ops whose gradients differentiate a while loop


@pytest.mark.parametrize("rows, loop_form", [pytest.param("ops", None, id="ops"),
                                             *(pytest.param("loops", f, id=f"loops-{f}") for f in choices.LOOP_FORMS)],
                         indirect=["loop_form"])
def test_every_op_differentiates_the_same_in_process_and_exported(rows, loop_form):
    """ig.gradients of each op's scalar against the vector-Jacobian products of the exported
    module (what irgrad grad / compile --grad build), for every float argument; the loops in
    each form of the while adjoint (conftest.py's loop_form), the other ops once."""
    names = [n for n in sorted(OP_TABLE) if (n in LOOP_ROWS) == (rows == "loops")]

    @ig.function(input_signature=_SPECS)
    def inside(*args):
        floats = [args[a] for a in _FLOAT]
        return [ig.gradients(s, floats, unconnected_gradients="zero") for s in _scalars(*args, names=names)]

    def scalars(*args):
        return _scalars(*args, names=names)

    lowered = ig.function(scalars).lower(*_SPECS)
    exported = ig.compile(passes.differentiate(lowered.mlir, lowered.name, wrt=_FLOAT, grad=False,
                                               vjp=True)).load()[f"{lowered.name}_vjp"]
    want = inside(*_ARGS)
    for n, name in enumerate(names):
        cts = [np.float64(n == m) for m in range(len(names))]
        got = exported.call_flat(*_ARGS, *cts)
        for a, (g_in, g_out) in enumerate(zip(want[n], got)):
            # float32 to a few ulps: the exported gradient recomputes cheap forward values in its
            # backward (passes.memory.recompute_elementwise), which IREE fuses into other kernels
            tol = 1e-12 if np.asarray(g_in).dtype == np.float64 else 1e-6
            np.testing.assert_allclose(g_out, g_in, rtol=tol, atol=tol,
                                       err_msg=f"{name}: gradient of argument {_FLOAT[a]}")
