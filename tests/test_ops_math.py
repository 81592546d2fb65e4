"""The ops of issue 42, items 1-4 (activations, losses, special functions, safe divisions, scans,
norms, arg and segment reductions): every derivative through the numeric checker, forward mode
and ``vectorized_map`` on the custom-gradient ones, Vulkan against the CPU, and the refusals.

TensorFlow's values and gradients at the special points (kinks, zeros, ties, empty and dropped
segments) are in ``fixtures/tf/cases_math.py`` (run by ``test_tf_references.py``)."""
from __future__ import annotations

import numpy as np
import pytest

import irgrad as ig
from irgrad import runtime

from gradcheck import check_fn

# Away from every kink (x - 0.5, 8x - 2 never 0 or 6; no ties within a row or column).
X = np.array([[0.21, 0.37, 0.62], [0.83, 0.46, 0.71]])
Y = np.array([[0.55, 1.1, 0.33], [0.74, 0.41, 0.95]])


def activations_and_losses(x, y):
    s = x - 0.5
    return [ig.nn.relu6(x * 8.0 - 2.0), ig.nn.leaky_relu(s), ig.nn.leaky_relu(s, alpha=1.5), ig.nn.elu(s),
            ig.nn.selu(s), ig.nn.gelu(s), ig.nn.gelu(s, approximate=True), ig.nn.silu(s), ig.nn.swish(y, 1.7),
            ig.nn.softsign(s), ig.math.log_sigmoid(s * 4.0),
            ig.nn.sparse_softmax_cross_entropy_with_logits(labels=np.array([2, 0], np.int32), logits=x * y),
            ig.nn.sigmoid_cross_entropy_with_logits(labels=y * 0.5, logits=s),
            ig.nn.weighted_cross_entropy_with_logits(y * 0.5, s, 2.0), ig.nn.l2_loss(x * y),
            ig.nn.log_poisson_loss(y * 3.0, x), ig.nn.log_poisson_loss(y * 3.0, x, compute_full_loss=True),
            ig.math.squared_difference(x, y[0])]


def elementwise(x, y):
    return [ig.math.reciprocal(y), ig.atan2(x, y - 0.6), ig.asin(x), ig.acos(x), ig.atan(x), ig.sinh(x), ig.cosh(x),
            ig.asinh(x - 0.5), ig.acosh(y + 1.0), ig.atanh(x), ig.math.erfc(x), ig.math.erfinv(x),
            ig.math.lgamma(y), ig.math.digamma(y), ig.math.xlogy(x, y), ig.math.xdivy(x, y),
            ig.math.divide_no_nan(x, y), ig.math.multiply_no_nan(x, y[1]), ig.add_n([x, y, x])]


def reductions(x, y):
    mean, var = ig.nn.moments(x * y, axes=[0])
    xt = ig.transpose(x)
    ids = np.array([1, -1, 1], np.int32)
    out = [ig.reduce_logsumexp(x, axis=1), ig.math.reduce_variance(x, axis=0), ig.math.reduce_std(x, axis=1),
           ig.math.reduce_euclidean_norm(x), ig.norm(x, ord=3, axis=1), ig.norm(x, ord=np.inf),
           ig.norm(x, ord=1, axis=[0, 1]), ig.norm(y, ord=np.inf, axis=(1, 0), keepdims=True),
           ig.math.l2_normalize(x, axis=1), mean, var, ig.math.cumulative_logsumexp(y, axis=1, reverse=True),
           ig.math.cumulative_logsumexp(x, axis=0, exclusive=True)[1:]]
    out += [ig.cumsum(x * y, axis=a, exclusive=e, reverse=r) for a in (0, 1) for e in (False, True)
            for r in (False, True)]
    out += [ig.math.cumprod(x, axis=1, exclusive=e, reverse=r) for e in (False, True) for r in (False, True)]
    out += [f(x, [0, 0]) for f in (ig.math.segment_sum, ig.math.segment_mean, ig.math.segment_max,
                                   ig.math.segment_min)]
    out += [f(xt * 2.0, ids, 2) for f in (ig.math.unsorted_segment_sum, ig.math.unsorted_segment_mean,
                                          ig.math.unsorted_segment_max, ig.math.unsorted_segment_min)]
    return out


GROUPS = [activations_and_losses, elementwise, reductions]


@pytest.mark.parametrize("group", GROUPS, ids=[g.__name__ for g in GROUPS])
def test_gradients_and_tangents_match_finite_differences(group):
    """Reverse mode (ig.gradients and the module pass) and forward mode of every op in the group,
    float64, one compile per form for the whole group."""
    check_fn(group, X, Y)


def test_forward_accumulator_and_vectorized_map_through_custom_gradients():
    """cumprod, the segment max and multiply_no_nan carry TensorFlow's gradient in a custom-gradient
    composite: their tangents (the adjoint transposed) and batched forms agree with the loop."""
    xs = np.array([[0.5, -1.25, 1.7, 0.75], [1.5, 0.25, -0.5, 3.0], [-2.0, 0.6, 0.9, 1.1]], np.float32)
    v = np.array([1.0, -0.5, 0.25, 2.0], np.float32)

    def f(x):
        return (ig.math.cumprod(x) + ig.math.segment_max(x, [0, 0, 1, 1])[0]
                + ig.math.multiply_no_nan(x, ig.nn.relu6(x * 3.0)) + ig.math.xlogy(x, ig.abs(x) + 1.0))

    @ig.function
    def both(x, xs, v):
        with ig.ForwardAccumulator(x, v) as acc:
            y = f(x)
        return acc.jvp(y), ig.gradients(ig.reduce_sum(y * v), x)[0], ig.vectorized_map(f, xs)

    jvp, vjp, batched = both(xs[0], xs, v)
    loop = ig.function(f)
    for k in range(xs.shape[0]):
        np.testing.assert_allclose(batched[k], loop(xs[k]), rtol=1e-6, atol=1e-6)
    eps = 1e-3
    fd = (np.asarray(loop(xs[0] + eps * v)) - np.asarray(loop(xs[0] - eps * v))) / (2 * eps)
    np.testing.assert_allclose(jvp, fd, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(float(np.dot(jvp, v)), float(np.dot(vjp, v)), rtol=1e-5)  # <J v, v> both ways


@pytest.mark.vulkan
@pytest.mark.parametrize("group", GROUPS, ids=[g.__name__ for g in GROUPS])
def test_vulkan_runs_the_ops_and_their_gradients_like_the_cpu(group):
    if "vulkan" not in runtime.available_drivers():
        pytest.skip("no vulkan device on this machine")
    x, y = X.astype(np.float32), Y.astype(np.float32)

    def values_and_gradients(x, y):
        outs = group(x, y)
        return outs + ig.gradients([ig.reduce_sum(o * 0.5) for o in outs], [x, y])

    cpu = ig.function(values_and_gradients, target="llvm-cpu")(x, y)
    gpu = ig.function(values_and_gradients, target="vulkan-spirv")(x, y)
    assert len(cpu) == len(gpu)
    for k, (a, b) in enumerate(zip(cpu, gpu)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-5, err_msg=f"output {k}")


# ----- refusals --------------------------------------------------------------------------------

def _trace(fn, *args):
    return ig.function(fn).lower(*[ig.TensorSpec(np.shape(a), ig.as_dtype(np.asarray(a).dtype)) for a in args])


@pytest.mark.parametrize("fn,args,error,match", [
    (lambda x, i: ig.math.segment_sum(x, i), (X, np.array([0, 1], np.int32)), ValueError, "known when tracing"),
    (lambda x: ig.math.segment_max(x, [1, 0]), (X,), ValueError, "sorted and non-negative"),
    (lambda x, n: ig.math.unsorted_segment_max(x, [1, 0], n), (X, np.int32(2)), ValueError, "known when tracing"),
    (lambda x: ig.math.segment_sum(x, [[0, 1]]), (X,), ValueError, "1-D"),
    (lambda x: ig.math.unsorted_segment_sum(x, [0, 1, 1], 2), (X,), ValueError, "prefix"),
    (lambda x: ig.math.unsorted_segment_sum(x, [0.0, 1.0], 2), (X,), TypeError, "int32 or int64"),
    (lambda x: ig.add_n([x, x[0]]), (X,), ValueError, "same shape"),
    (lambda x: ig.add_n([]), (X,), ValueError, "non-empty"),
    (lambda x: ig.add_n(x), (X,), TypeError, "list or tuple"),
    (lambda x: ig.norm(x, ord=2, axis=[0, 1]), (X,), ValueError, "singular value"),
    (lambda x: ig.norm(x, ord=-1), (X,), ValueError, "supported vector norm"),
    (lambda x: ig.norm(x, axis=[0, 0]), (X,), ValueError, "unique integers"),
    (lambda k: ig.math.reciprocal(k), (np.array([1, 2], np.int32),), TypeError, "floating-point"),
    (lambda k: ig.nn.gelu(k), (np.array([1, 2], np.int32),), ValueError, "floating point"),
    (lambda k: ig.math.reduce_variance(k), (np.array([1, 2], np.int32),), TypeError, "real or complex"),
    (lambda x: ig.argmax(x[0, 0]), (X,), ValueError, "rank >= 1"),
    (lambda x: ig.argmax(x, output_type=ig.float32), (X,), TypeError, "output_type"),
    (lambda x: ig.nn.sparse_softmax_cross_entropy_with_logits(labels=np.array([0.0, 1.0]), logits=x), (X,),
     TypeError, "int32 or int64"),
    (lambda x: ig.nn.sparse_softmax_cross_entropy_with_logits(labels=np.array([0, 1, 1]), logits=x), (X,),
     ValueError, "labels.shape"),
    (lambda x: ig.nn.sigmoid_cross_entropy_with_logits(labels=x[0], logits=x), (X,), ValueError, "same shape"),
    (lambda x: ig.math.is_nan(ig.cast(x, ig.int32)), (X,), TypeError, "floating-point"),
    (lambda x: ig.cumsum(x, axis=2), (X,), ValueError, "out of range"),
])
def test_bad_arguments_raise_one_precise_error(fn, args, error, match):
    with pytest.raises(error, match=match):
        _trace(fn, *args)


def test_segment_ids_and_counts_given_as_constant_tensors():
    """Sorted segment ids (and num_segments) may be constants of the graph, a splat included."""
    @ig.function
    def f(x):
        return (ig.math.segment_sum(x, ig.constant([0, 0, 1])), ig.math.segment_mean(x, ig.zeros([3], ig.int32)),
                ig.math.unsorted_segment_sum(x, [0, 1, 1], ig.constant(2)))

    a, b, c = f(np.array([1.0, 2.0, 3.0], np.float32))
    np.testing.assert_array_equal(a, [3.0, 3.0])
    np.testing.assert_array_equal(b, [2.0])
    np.testing.assert_array_equal(c, [1.0, 5.0])


def test_moments_of_float16_and_labels_out_of_range():
    """moments of float16 are computed in float32 and cast back (TensorFlow's rule); a sparse label
    outside [0, classes) gives a NaN loss for its row (TensorFlow's GPU kernel; its CPU one raises)."""
    h = (np.arange(12, dtype=np.float16) / 4).reshape(3, 4)
    logits = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, 0.0], [0.2, 0.3, 0.1]], np.float32)

    @ig.function
    def f(h, logits):
        mean, var = ig.nn.moments(h, axes=[1], keepdims=True)
        loss = ig.nn.sparse_softmax_cross_entropy_with_logits(labels=np.array([2, 3, -1], np.int32), logits=logits)
        return mean, var, loss

    mean, var, loss = f(h, logits)
    assert mean.dtype == np.float16 and var.dtype == np.float16 and mean.shape == (3, 1)
    np.testing.assert_allclose(mean[:, 0], h.astype(np.float32).mean(1), rtol=1e-3)
    np.testing.assert_allclose(var[:, 0], h.astype(np.float32).var(1), rtol=1e-3)
    shifted = logits[0] - logits[0].max()
    np.testing.assert_allclose(loss[0], -(shifted[2] - np.log(np.exp(shifted).sum())), rtol=1e-6)
    assert np.isnan(loss[1]) and np.isnan(loss[2])


def test_the_op_table_lists_every_op_of_this_family():
    """docs/reference/ops.md has a row (adjoint, tangent, batching, targets) for each op here."""
    import inspect
    from pathlib import Path

    from irgrad.ops import activations

    page = (Path(__file__).parents[1] / "docs" / "reference" / "ops.md").read_text()
    ops = {n for n, v in vars(activations).items() if inspect.isfunction(v) and not n.startswith("_")
           and v.__module__ == activations.__name__}
    ops |= {n for group in GROUPS for n in group.__code__.co_names} - {"ig", "nn", "math", "np", "inf", "transpose",
                                                                       "reduce_sum", "array", "int32"}
    missing = sorted(n for n in ops if f"`{n}`" not in page)
    assert not missing, f"docs/reference/ops.md has no row for {missing}"
