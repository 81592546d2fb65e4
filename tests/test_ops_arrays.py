"""The array, ig.nn layer and image ops of issue 42 (items 5, 7, 9): every gradient under the
numeric checker (reverse and forward mode, in process and through the module pass), batching
under ``vectorized_map``, tangents under ``ForwardAccumulator``, dropout's mask, the refusals of
shapes that depend on the data, and a Vulkan run. TensorFlow's own numbers for these ops are in
``fixtures/tf/cases_arrays.py`` (``test_tf_references.py``)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import irgrad as ig
from gradcheck import check_fn

RNG = np.random.default_rng(42)


def _r(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


# ----- the numeric checker over every differentiable op -------------------------------------

def _arrays(x, y, img, s):
    """tile, the three pads, split, gathers with batch dimensions, scatter_nd, reverse, both rolls,
    repeat, linspace, meshgrid, boolean_mask, depth/space."""
    a, b = ig.split(x, [1, -1], axis=1)
    return [
        ig.tile(x, [2, 1]), ig.pad(x, [[1, 0], [0, 2]]), ig.pad(x, [[1, 1], [2, 1]], "REFLECT"),
        ig.pad(x, [[2, 0], [0, 3]], "SYMMETRIC"), a * 2.0, ig.sin(b),
        ig.gather(y, [[2, 0], [1, 1], [0, 0]], axis=1, batch_dims=1),
        ig.gather_nd(y, [[[1], [0]], [[2], [2]], [[0], [1]]], batch_dims=1),
        ig.gather_nd(x, [[0, 1], [2, 3], [0, 1]]),
        ig.scatter_nd([[1], [3], [1]], x[:, 0], [4]),
        ig.reverse(x, [0, 1]), ig.roll(x, [1, -2], [0, 1]), ig.roll(x, s, 1),
        ig.repeat(x, [2, 0, 1], axis=0), ig.linspace(x[0, 0], x[1, 1], 5),
        ig.meshgrid(x[0], x[1, :3])[1] * ig.meshgrid(x[0], x[1, :3])[0],
        ig.boolean_mask(y, np.array([[True, False, True], [False, True, True], [True, True, False]])),
        ig.nn.depth_to_space(img, 2), ig.nn.space_to_depth(img, 2),
    ]


def test_array_op_gradients():
    check_fn(_arrays, _r(3, 4), _r(3, 3, 2), _r(1, 2, 4, 8), np.int32(3))


def _selections(x, u, v):
    """The tensor scatters (update's TF gradient is a custom gradient), sort, top_k, the norms."""
    idx = [[2], [0]]
    top = ig.top_k(x, 2)
    clipped, norm = ig.clip_by_global_norm([x, None, u], 1.5)
    return [
        ig.tensor_scatter_nd_update(x, idx, u), ig.tensor_scatter_nd_add(x, idx, u),
        ig.tensor_scatter_nd_sub(x, idx, u), ig.tensor_scatter_nd_max(x, idx, u),
        ig.tensor_scatter_nd_min(x, [[1, 2], [0, 0]], v),
        ig.sort(x), ig.sort(x, axis=0, direction="DESCENDING"), top.values, ig.cast(top.indices, ig.float64) * 1.0,
        ig.clip_by_norm(x, 0.7), ig.clip_by_norm(x, 0.5, axes=[1]), clipped[0], clipped[2], norm,
    ]


def test_scatter_sort_and_norm_gradients():
    check_fn(_selections, _r(3, 4), _r(2, 4), _r(2))


def _layers(x1, w1, x3, w3, img, wt, dw, pw, b, m, v):
    """Convolutions (1-D, 3-D, transposed, depthwise, separable), bias_add, pools,
    batch_normalization, LRN, embedding_lookup and dropout."""
    y = ig.nn.conv2d_transpose(img, wt, [2, 9, 7, 2], 2, "SAME")
    return [
        ig.nn.bias_add(ig.nn.conv1d(x1, w1, 2, "SAME"), b), ig.nn.conv1d(x1, w1, 1, "VALID", dilations=2),
        ig.nn.conv3d(x3, w3, [1, 2, 1, 1, 1], "SAME"), y,
        ig.nn.depthwise_conv2d(img, dw, [1, 2, 2, 1], "SAME"),
        ig.nn.separable_conv2d(img, dw, pw, [1, 1, 1, 1], "VALID"),
        ig.nn.max_pool1d(x1, 3, 2, "SAME"), ig.nn.avg_pool1d(x1, 2, 1, "VALID"),
        ig.nn.pool(img, [3, 2], "AVG", strides=[2, 1], padding="SAME"), ig.nn.pool(img, [2, 2], "MAX"),
        ig.nn.batch_normalization(img, m, v * v + 0.5, b[:3], b[1:], 1e-3),
        ig.nn.local_response_normalization(ig.tile(img, [1, 1, 1, 2]), 2, 0.5, 0.3, 0.75),
        ig.nn.embedding_lookup(w1[0], [[2, 0], [2, 1]], max_norm=1.0),
        ig.nn.dropout(img, 0.3, seed=7),
    ]


def test_layer_gradients():
    check_fn(_layers, _r(2, 7, 3), _r(3, 3, 4), _r(1, 4, 3, 2, 2), _r(2, 2, 1, 2, 3), _r(2, 5, 4, 3),
             _r(3, 3, 2, 3), _r(3, 3, 3, 2), _r(1, 1, 6, 4), _r(4), _r(3), _r(3))


def _float32_inside(x, scale, offset, img):
    """fused_batch_norm (float32 inside, as TensorFlow; the population statistics of inference
    get no gradient, as in TensorFlow, so they are constants here) and resize (bilinear: a
    float32 result)."""
    y, _, _ = ig.nn.fused_batch_norm(x, scale, offset)
    yi, _, _ = ig.nn.fused_batch_norm(x, scale, offset, np.array([0.2, -0.1], np.float32),
                                      np.array([0.5, 2.0], np.float32), is_training=False)
    return [y, yi, ig.image.resize(img, [5, 7]), ig.image.resize(img, [2, 3]),
            ig.image.resize(img, [5, 2], "nearest"), ig.image.resize(img[0], [3, 3])]


def test_float32_op_gradients():
    """Float32 programs: the checker's differences need a larger step and tolerance."""
    f = np.float32
    check_fn(_float32_inside, _r(2, 3, 3, 2, dtype=f), _r(2, dtype=f), _r(2, dtype=f), _r(2, 3, 4, 2, dtype=f),
             eps=1e-2, rtol=2e-3, atol=1e-4)


# ----- TensorFlow's gradient where it is not the textbook one -------------------------------

def test_tensor_scatter_nd_update_gives_every_repeated_update_the_gradient():
    """TensorFlow's TensorScatterUpdate gradient: gather_nd(ct) to every update, the overwritten
    ones included; zeros at the written positions for the tensor."""
    @ig.function
    def grads(x, u):
        y = ig.tensor_scatter_nd_update(x, [[1], [1], [0]], u)
        return ig.gradients(ig.reduce_sum(y * np.array([1.0, 2.0, 3.0])), [x, u])

    dx, du = grads(np.ones(3), np.array([5.0, 6.0, 7.0]))
    np.testing.assert_array_equal(dx, [0.0, 0.0, 3.0])
    np.testing.assert_array_equal(du, [2.0, 2.0, 1.0])


def test_pad_constant_values_and_fused_batch_norm_statistics_get_no_gradient():
    @ig.function
    def grads(x, c, mean, var):
        y = ig.pad(x, [[1, 1]], constant_values=c)
        z, m, v = ig.nn.fused_batch_norm(ig.reshape(x, [1, 1, 2, 1]), [1.0], [0.0], mean, var, is_training=False)
        z2, m2, v2 = ig.nn.fused_batch_norm(ig.reshape(x, [1, 1, 2, 1]), [1.0], [0.0])
        return (ig.gradients(ig.reduce_sum(y), [x, c]), ig.gradients(ig.reduce_sum(z), [mean, var]),
                ig.gradients(ig.reduce_sum(m2) + ig.reduce_sum(v2), x))

    (dx, dc), stats, through_stats = grads(np.array([1.0, 2.0], np.float32), np.float32(3.0),
                                           np.zeros(1, np.float32), np.ones(1, np.float32))
    np.testing.assert_array_equal(dx, [1.0, 1.0])
    assert dc is None and stats == [None, None] and through_stats == [None]


# ----- batching and forward mode ------------------------------------------------------------

def _per_example(e):
    x, w = e
    conv = ig.nn.conv1d(x[None], w, 1, "SAME")[0]
    top = ig.top_k(ig.pad(x, [[1, 0], [0, 0]], "REFLECT"), 2).values
    return ig.reduce_sum(ig.tile(conv, [1, 2]) * 0.5) + ig.reduce_sum(ig.sin(top)) \
        + ig.reduce_sum(ig.gather(x, [[1, 0], [2, 2], [0, 1], [3, 0]], axis=1, batch_dims=1))


def test_vectorized_map_matches_a_loop():
    xs, ws = _r(3, 4, 2), _r(3, 2, 2, 3)

    @ig.function
    def mapped(xs, ws):
        return ig.vectorized_map(_per_example, (xs, ws))

    @ig.function
    def looped(xs, ws):
        return ig.stack([_per_example((xs[i], ws[i])) for i in range(3)])

    np.testing.assert_allclose(mapped(xs, ws), looped(xs, ws), rtol=1e-12)


def test_forward_accumulator_tangents_match_finite_differences():
    x, v = _r(1, 3, 3, 2), _r(1, 3, 3, 2)
    w = _r(3, 3, 4, 2)

    def f(x):
        up = ig.nn.conv2d_transpose(x, w, [1, 6, 5, 4], 2, "SAME")
        return ig.image.resize(up, [4, 4], "nearest"), ig.sort(ig.reshape(x, [-1]))

    @ig.function
    def jvp(x, v):
        with ig.ForwardAccumulator(x, v) as acc:
            a, b = f(x)
        return acc.jvp(a), acc.jvp(b)

    eps = 1e-6
    plus, minus = ig.function(f)(x + eps * v), ig.function(f)(x - eps * v)
    ta, tb = jvp(x, v)
    np.testing.assert_allclose(ta, (plus[0] - minus[0]) / (2 * eps), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(tb, (plus[1] - minus[1]) / (2 * eps), rtol=1e-6, atol=1e-8)


# ----- dropout ------------------------------------------------------------------------------

def test_dropout_mask_scaling_seed_and_gradient():
    @ig.function
    def drop(x, seed):
        y = ig.nn.dropout(x, 0.25, seed=seed)
        shared = ig.nn.dropout(x[:8, :8], 0.5, noise_shape=[8, 1], seed=seed)
        return y, ig.gradients(ig.reduce_sum(y * 3.0), x)[0], shared

    x = np.ones((64, 64), np.float32)
    y, g, shared = drop(x, np.int32(1))
    kept = y != 0
    assert 0.70 < kept.mean() < 0.80, kept.mean()
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)
    np.testing.assert_allclose(g, np.where(kept, 3 / 0.75, 0.0), rtol=1e-6)
    assert all(len(set(row)) == 1 for row in shared.tolist())  # one draw per row
    y_again, _, _ = drop(x, np.int32(1))
    y_other, _, _ = drop(x, np.int32(2))
    np.testing.assert_array_equal(y_again, y)
    assert (y_other != y).mean() > 0.2


def test_dropout_needs_a_seed_and_a_rate_below_one():
    x = ig.TensorSpec([4], ig.float32)
    with pytest.raises(ValueError, match="needs a seed"):
        ig.function(lambda x: ig.nn.dropout(x, 0.5)).lower(x)
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\)"):
        ig.function(lambda x: ig.nn.dropout(x, 1.0, seed=1)).lower(x)


# ----- shapes that depend on the data: one-line refusals ------------------------------------

@pytest.mark.parametrize("fn, message", [
    (lambda x, n: ig.boolean_mask(x, x > 0.0), "computed at run time"),
    (lambda x, n: ig.sequence_mask(n), "depends on the data; pass maxlen"),
    (lambda x, n: ig.range(n[0]), "length that depends on the data"),
    (lambda x, n: ig.repeat(x, n), "depends on the data"),
    (lambda x, n: ig.pad(x, [[1, 3]], "REFLECT"), "at most 2"),
    (lambda x, n: ig.split(x, 2), "2 equal pieces"),
    (lambda x, n: ig.nn.conv2d_transpose(ig.reshape(x, [1, 1, 3, 1]), np.ones((3, 3, 1, 1), np.float32),
                                         [1, 4, 4, 1], 2, "SAME"), "gives spatial size 2"),
    (lambda x, n: ig.image.resize(ig.reshape(x, [1, 3, 1]), [2, 2], "bicubic"), "method must be one of"),
])
def test_data_dependent_shapes_and_bad_arguments_are_refused(fn, message):
    with pytest.raises(ValueError, match=message):
        ig.function(fn).lower(ig.TensorSpec([3], ig.float32), ig.TensorSpec([3], ig.int32))


def test_a_constant_mask_tensor_is_read_when_tracing():
    @ig.function
    def masked(x):
        return ig.boolean_mask(x, ig.constant([True, False, True])), ig.sequence_mask(ig.constant([2, 0]))

    picked, mask = masked(np.array([1.0, 2.0, 3.0], np.float32))
    np.testing.assert_array_equal(picked, [1.0, 3.0])
    np.testing.assert_array_equal(mask, [[True, True], [False, False]])


# ----- Vulkan (lavapipe in CI) -------------------------------------------------------------

def _vulkan_program(x, img, w):
    y = ig.nn.conv2d_transpose(img, w, [1, 6, 6, 2], 2, "SAME")
    z = ig.image.resize(y, [4, 5]) + ig.reduce_sum(ig.nn.depthwise_conv2d(img, w[:, :, :1, :1] * ig.ones([1, 1, 3, 2]),
                                                                          [1, 1, 1, 1], "SAME"))
    loss = (ig.reduce_sum(z * z) + ig.reduce_sum(ig.sort(ig.pad(x, [[1, 1], [0, 1]], "SYMMETRIC")) * 0.5)
            + ig.reduce_sum(ig.tensor_scatter_nd_max(x, [[1]], x[:1] * 2.0)) + ig.reduce_sum(ig.top_k(x, 2).values))
    return [loss, *ig.gradients(loss, [x, img, w])]


@pytest.mark.vulkan
def test_ops_and_gradients_on_vulkan_match_the_cpu():
    args = [_r(3, 4, dtype=np.float32), _r(1, 3, 3, 3, dtype=np.float32), _r(3, 3, 2, 3, dtype=np.float32)]
    cpu = ig.function(_vulkan_program)(*args)
    gpu = ig.function(_vulkan_program, target="vulkan")(*args)
    for a, b in zip(gpu, cpu):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


# ----- IREE 3.13 failures met on the way (kept as reproducers) ------------------------------

@pytest.mark.xfail(strict=True, raises=ig.CompileError, reason="IREE 3.13 crashes in BubbleUpExpandShapes on "
                   "gather -> slice -> reshape -> pad (the gradient of a gather's result sliced, as scatter_nd's "
                   "adjoint sliced by a concatenation's)")
def test_iree_gather_slice_reshape_pad():
    ig.compile("""func.func @f(%x: tensor<3xf32>, %i: tensor<3x1xi32>) -> tensor<2x2xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %g = "stablehlo.gather"(%x, %i) <{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0],
         start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1>}>
         : (tensor<3xf32>, tensor<3x1xi32>) -> tensor<3xf32>
  %s = stablehlo.slice %g [2:3] : (tensor<3xf32>) -> tensor<1xf32>
  %r = stablehlo.reshape %s : (tensor<1xf32>) -> tensor<1x1xf32>
  %p = stablehlo.pad %r, %z, low = [0, 0], high = [1, 1], interior = [0, 0] : (tensor<1x1xf32>, tensor<f32>) -> tensor<2x2xf32>
  return %p : tensor<2x2xf32>
}""")


# ----- the blocks of issue 42 on Vulkan: TensorFlow's recorded numbers ------------------------

@pytest.mark.vulkan
def test_blocks_on_vulkan_match_tensorflow():
    """The six blocks of fixtures/tf/cases_blocks.py (values and gradients) traced into one
    function, compiled once for Vulkan, against TensorFlow's recorded numbers."""
    from test_tf_references import T, _args, _refs, cases

    blocks = [c for c in cases.CASES if c.group == "blocks"]
    assert len(blocks) == 6
    starts = np.cumsum([0] + [len(c.args) for c in blocks])

    def all_blocks(*a):
        return [c.fn(T, *a[i:j]) for c, i, j in zip(blocks, starts[:-1], starts[1:])]

    got = ig.function(all_blocks, target="vulkan")(*[x for c in blocks for x in _args(c.name)])
    for c, out in zip(blocks, got):
        leaves, _ = cases.flatten(out)
        assert len(leaves) == len([k for k in _refs() if k.startswith(f"{c.name}__out")])
        for j, leaf in enumerate(leaves):
            np.testing.assert_allclose(leaf, _refs()[f"{c.name}__out{j}"], rtol=1e-4, atol=1e-5,
                                       err_msg=f"{c.name}: output {j}")


@pytest.mark.parametrize("name", ["block_dense_layernorm_gelu", "block_causal_attention"])
def test_the_dense_and_attention_blocks_pass_the_numeric_checker(name):
    """The two blocks built from ops of other families (moments, rsqrt, gelu; band_part,
    softmax, batched matmul): their gradients under the numeric checker, in float64."""
    from test_tf_references import T, cases

    c = cases.by_name(name)
    check_fn(lambda *a: c.fn(T, *a)[0], *[a.astype(np.float64) for a in c.args])


def _depthwise_reference(x, w, stride, pads, dilation):
    """Depthwise convolution by loops (numpy)."""
    xp = np.pad(x, [(0, 0), pads[0], pads[1], (0, 0)])
    kh, kw, c, m = w.shape
    oh = (xp.shape[1] - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (xp.shape[2] - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    out = np.zeros((x.shape[0], oh, ow, c, m))
    for i in range(kh):
        for j in range(kw):
            win = xp[:, i * dilation[0]:, j * dilation[1]:][:, :(oh - 1) * stride[0] + 1:stride[0],
                                                            :(ow - 1) * stride[1] + 1:stride[1]]
            out += win[..., None] * w[i, j]
    return out.reshape(x.shape[0], oh, ow, c * m)


@pytest.mark.parametrize("shape, stride, padding, pads, dilation", [
    ((1, 2, 2, 3), 2, [[0, 0], [1, 1], [1, 1], [0, 0]], [(1, 1), (1, 1)], (1, 1)),  # IREE 3.13 failed on this
    ((2, 6, 5, 2), 1, "SAME", [(2, 2), (1, 1)], (2, 1)),
])
def test_depthwise_conv2d_small_and_dilated_inputs(shape, stride, padding, pads, dilation):
    """The taps lowering on the shapes IREE's grouped convolution failed to compile (NOTES.md)."""
    x, w = _r(*shape), _r(3, 3, shape[-1], 2)
    got = ig.function(lambda x, w: ig.nn.depthwise_conv2d(x, w, [1, stride, stride, 1], padding,
                                                          dilations=list(dilation)))(x, w)
    np.testing.assert_allclose(got, _depthwise_reference(x, w, (stride, stride), pads, dilation), rtol=1e-12)


# ----- the docs' op table ---------------------------------------------------------------------

NEW_OPS = [
    "argsort", "boolean_mask", "clip_by_global_norm", "clip_by_norm", "eye", "gather", "gather_nd", "linspace",
    "meshgrid", "pad", "range", "repeat", "reverse", "roll", "scatter_nd", "searchsorted", "sequence_mask", "sort",
    "split", "tensor_scatter_nd_add", "tensor_scatter_nd_max", "tensor_scatter_nd_min", "tensor_scatter_nd_sub",
    "tensor_scatter_nd_update", "tile", "top_k", "nn.depth_to_space", "nn.space_to_depth", "nn.bias_add",
    "nn.conv1d", "nn.conv3d", "nn.conv2d_transpose", "nn.depthwise_conv2d", "nn.separable_conv2d", "nn.max_pool1d",
    "nn.avg_pool1d", "nn.pool", "nn.batch_normalization", "nn.fused_batch_norm", "nn.local_response_normalization",
    "nn.embedding_lookup", "nn.dropout", "image.resize",
]


def test_the_op_table_has_a_row_for_every_new_op():
    from pathlib import Path

    rows = [line for line in (Path(__file__).parents[1] / "docs/reference/ops.md").read_text().splitlines()
            if line.startswith("| `")]
    listed = {name for row in rows for name in re.findall(r"`([\w.]+)`", row.split("|")[1])}
    assert sorted(set(NEW_OPS) - listed) == []
    for name in NEW_OPS:
        namespace, _, attr = name.rpartition(".")
        assert callable(getattr(getattr(ig, namespace) if namespace else ig, attr)), name
