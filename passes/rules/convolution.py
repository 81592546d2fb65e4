"""Adjoint rules of ``stablehlo.convolution``, and its forward lowering for IREE.

Which formulation is used is decided in ``choices.py``:

* as patches and ``dot_general`` (every convolution without input dilation or
  batch groups): in the canonical layout (batch, *spatial, feature) and kernel
  (*spatial, in, out), with ``P = patches(x)`` (taps before features) and ``G``
  feature groups as a batch dimension of the products,
  ``out = P · w``, ``d w = Pᵀ · ct``, ``d x = col2im(ct · wᵀ)`` (``patches.py``);
* as convolutions, JAX's ``_conv_general_dilated_transpose_lhs`` / ``_rhs``
  (jax/_src/lax/convolution.py), for any strides, padding, lhs/rhs dilation,
  feature_group_count, batch_group_count and dimension layout:
  d lhs = conv(ct, kernel reversed in space, with in/out features swapped),
  window strides = lhs_dilation, lhs_dilation = window strides; d rhs =
  conv(lhs, ct) with batch and feature roles swapped, window strides =
  rhs_dilation, rhs_dilation = window strides. Feature groups move into the
  kernel's input-feature dimension for d lhs and become batch groups for d rhs
  (and vice versa).

A layout is written as JAX's spec: (batch, feature, *spatial) for the input and
output, (output feature, input feature, *spatial) for the kernel.
``window_reversal`` is handled as a convolution with a reversed kernel.
"""
from __future__ import annotations

import math

from ..ir import hlo
from ..lowering.choices import (conv_adjoint_by_matmul, conv_by_taps, conv_forward_by_matmul,
                                conv_input_gradient_by_conv)
from ..ir.mlir import elem, ir, shape, tensor_type
from ..lowering.patches import Windows, col2im, pad_operand, patches, tap_slice
from ..transforms.forward import bilinear
from ..transforms.batching import Batcher, MissingBatchingRule, moved_to_front, remake
from ..transforms.registry import adjoint, batching, tangent
from ..lowering.summation import THRESHOLD

Spec = tuple[int, ...]


def conv_spec(op: ir.Operation) -> tuple[Spec, Spec, Spec]:
    """(lhs, rhs, out) specs from ``#stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>``, or
    from its ``raw`` form (printed where the short one cannot say it)."""
    if "raw" in str(op.attributes["dimension_numbers"]):
        f = hlo.read_struct(op, "dimension_numbers")
        return tuple((f[f"{side}_{first}_dimension"], f[f"{side}_{second}_dimension"],
                      *f.get(f"{side}_spatial_dimensions", []))
                     for side, first, second in (("input", "batch", "feature"), ("kernel", "output_feature",
                                                 "input_feature"), ("output", "batch", "feature")))
    specs = []
    for labels, (first, second) in zip(hlo.read_conv_layouts(op), (("b", "f"), ("o", "i"), ("b", "f"))):
        spatial = sorted((int(t), i) for i, t in enumerate(labels) if t.isdigit())
        specs.append((labels.index(first), labels.index(second), *[i for _, i in spatial]))
    return tuple(specs)


def _swap(spec: Spec) -> Spec:
    return (spec[1], spec[0], *spec[2:])


def _dilate(sizes, dilation) -> list[int]:
    return [0 if s == 0 else 1 + d * (s - 1) for s, d in zip(sizes, dilation)]


def _axis_out_of(src: int, size1: int, x: ir.Value) -> ir.Value:
    """Split dimension src into (size1, rest)."""
    s = list(shape(x))
    return hlo.reshape(x, s[:src] + [size1, s[src] // size1] + s[src + 1:])


def _axis_into(src: int, dst: int, x: ir.Value) -> ir.Value:
    """Merge dimension src into dst (dst counted without src), src major."""
    s = list(shape(x))
    perm = [i for i in range(len(s)) if i != src]
    perm.insert(dst, src)
    merged = [d for i, d in enumerate(s) if i != src]
    merged[dst] *= s[src]
    return hlo.reshape(hlo.transpose(x, perm), merged)


class Conv:
    """The attributes of a convolution op."""

    def __init__(self, op: ir.Operation) -> None:
        self.spec = conv_spec(op)
        n = len(self.spec[0]) - 2
        self.strides = hlo.read_i64s(op, "window_strides", [1] * n)
        self.padding = hlo.read_padding(op, "padding", n)
        self.lhs_dilation = hlo.read_i64s(op, "lhs_dilation", [1] * n)
        self.rhs_dilation = hlo.read_i64s(op, "rhs_dilation", [1] * n)
        self.reversed = [i for i, r in enumerate(hlo.read_bools(op, "window_reversal")) if r]
        self.groups = hlo.read_int(op, "feature_group_count") if "feature_group_count" in op.attributes else 1
        self.batch_groups = hlo.read_int(op, "batch_group_count") if "batch_group_count" in op.attributes else 1
        self.precision = op.attributes["precision_config"] if "precision_config" in op.attributes else None

    def spatial(self, v: ir.Value, spec: Spec) -> list[int]:
        return [shape(v)[d] for d in spec[2:]]

    def by_matmul(self, lhs: ir.Value, rhs: ir.Value, forward: bool = False) -> bool:
        """``choices.conv_*_by_matmul`` for this convolution."""
        taps = math.prod(self.spatial(rhs, self.spec[1]))
        args = (taps, self.lhs_dilation, self.batch_groups, elem(lhs) == elem(rhs))
        if forward:
            features = shape(lhs)[self.spec[0][1]]
            return conv_forward_by_matmul(*args, self.groups > 1 and features == self.groups, features,
                                          self.groups, self.disjoint(rhs), self.nhwc)
        return conv_adjoint_by_matmul(*args)

    def disjoint(self, rhs: ir.Value) -> bool:
        """No two windows share an input element (``Windows.disjoint``)."""
        n = len(self.strides)
        return Windows(self.spatial(rhs, self.spec[1]), self.strides, [(0, 0)] * n, self.rhs_dilation).disjoint

    @property
    def nhwc(self) -> bool:
        """Two spatial dimensions, and the input's and output's features last."""
        lsp, _, osp = self.spec
        return len(lsp) == 4 and lsp[1] == 3 and osp[1] == 3

    def input_gradient_by_conv(self, lhs: ir.Value, rhs: ir.Value) -> bool:
        """``choices.conv_input_gradient_by_conv`` for this convolution."""
        return conv_input_gradient_by_conv(math.prod(self.spatial(rhs, self.spec[1])), shape(lhs)[self.spec[0][1]],
                                           self.groups, self.disjoint(rhs), self.nhwc)


def _transpose_lhs(ct: ir.Value, lhs: ir.Value, rhs: ir.Value, c: Conv) -> ir.Value:
    lsp, rsp, osp = c.spec
    groups = max(c.groups, c.batch_groups)
    if groups > 1:  # the group axis moves into the kernel's input features
        rhs = _axis_into(rsp[0], rsp[1], _axis_out_of(rsp[0], groups, rhs))
    lhs_d = _dilate(c.spatial(lhs, lsp), c.lhs_dilation)
    rhs_d = _dilate(c.spatial(rhs, rsp), c.rhs_dilation)
    out_d = _dilate(c.spatial(ct, osp), c.strides)
    before = [r - lo - 1 for r, (lo, _) in zip(rhs_d, c.padding)]
    padding = [(b, lh + r - 1 - o - b) for b, lh, r, o in zip(before, lhs_d, rhs_d, out_d)]
    out = hlo.convolution(ct, hlo.reverse(rhs, list(rsp[2:])), (osp, _swap(rsp), lsp),
                          strides=c.lhs_dilation, padding=padding, lhs_dilation=c.strides,
                          rhs_dilation=c.rhs_dilation, feature_group_count=groups,
                          precision=c.precision, element=elem(lhs))
    if c.batch_groups > 1:  # the batch groups come back out of the features
        out = _axis_into(lsp[1], lsp[0], _axis_out_of(lsp[1], c.batch_groups, out))
    return out


def _transpose_rhs(ct: ir.Value, lhs: ir.Value, rhs: ir.Value, c: Conv) -> ir.Value:
    lsp, rsp, osp = c.spec
    lhs_d = _dilate(c.spatial(lhs, lsp), c.lhs_dilation)
    rhs_d = _dilate(c.spatial(rhs, rsp), c.rhs_dilation)
    out_d = _dilate(c.spatial(ct, osp), c.strides)
    padding = [(lo, o - lh + r - lo - 1) for (lo, _), lh, r, o in zip(c.padding, lhs_d, rhs_d, out_d)]
    return hlo.convolution(lhs, ct, (_swap(lsp), _swap(osp), _swap(rsp)),
                           strides=c.rhs_dilation, padding=padding, lhs_dilation=c.lhs_dilation,
                           rhs_dilation=c.strides, feature_group_count=c.batch_groups,
                           batch_group_count=c.groups, precision=c.precision, element=elem(rhs))


# ----- patches and dot_general -------------------------------------------------------


def _canonical(spec: Spec) -> list[int]:
    """The permutation to (batch, *spatial, feature), or to (*spatial, in, out) for a kernel spec."""
    return [spec[0], *spec[2:], spec[1]]


def _kernel_canonical(spec: Spec) -> list[int]:
    return [*spec[2:], spec[1], spec[0]]


def _from_canonical(v: ir.Value, perm: list[int]) -> ir.Value:
    return hlo.transpose(v, [perm.index(i) for i in range(len(perm))])


class Matmul:
    """A convolution as patches and dot_general, in the canonical layouts:
    x ``[B, *S, C]``, w ``[*K, C/G, O]``, out ``[B, *Q, O]``; ``M = B · prod(Q)``."""

    def __init__(self, c: Conv, lhs: ir.Value, rhs: ir.Value) -> None:
        lsp, rsp, _ = c.spec
        self.c = c
        self.x_shape = [shape(lhs)[d] for d in _canonical(lsp)]
        self.kernel = c.spatial(rhs, rsp)
        self.groups = c.groups
        self.cin, self.cout = self.x_shape[-1], shape(rhs)[rsp[0]]
        n = len(self.kernel)
        self.windows = Windows([1, *self.kernel, 1], [1, *c.strides, 1], [(0, 0), *c.padding, (0, 0)],
                               [1, *c.rhs_dilation, 1])
        self.out = self.windows.output(self.x_shape)[: n + 1]  # [B, *Q]
        self.m, self.taps = math.prod(self.out), math.prod(self.kernel)

    def patches(self, x: ir.Value) -> ir.Value:
        """``[M, taps, G, C/G]`` (``[M, taps · C]`` without groups)."""
        zero = hlo.zeros(tensor_type([], elem(x)))
        p = patches(x, zero, self.windows, len(self.x_shape) - 1)
        g = self.groups
        return hlo.reshape(p, [self.m, self.taps * self.cin] if g == 1 else [self.m, self.taps, g, self.cin // g])

    def kernel_matrix(self, w: ir.Value) -> ir.Value:
        """``[taps, C/G, G, O/G]`` (``[taps · C, O]`` without groups)."""
        g = self.groups
        ci = self.cin // g
        return hlo.reshape(w, [self.taps * ci, self.cout] if g == 1 else [self.taps, ci, g, self.cout // g])

    def cotangent_matrix(self, ct: ir.Value) -> ir.Value:
        """``[M, G, O/G]`` (``[M, O]`` without groups)."""
        g = self.groups
        return hlo.reshape(ct, [self.m, self.cout] if g == 1 else [self.m, g, self.cout // g])

    def _product(self, a: ir.Value, a_dims: str, b: ir.Value, b_dims: str, out: str,
                 element: ir.Type) -> ir.Value:
        """Depthwise (one input feature per group): ``a · b`` over the letters of
        ``m t g o`` missing from ``out``, as a broadcast multiply and a reduce (a
        ``dot_general`` with a contraction of size 1 per group runs far slower in IREE)."""
        full = "mtgo"
        sizes = dict(zip(full, [self.m, self.taps, self.groups, self.cout // self.groups]))
        target = [sizes[d] for d in full]
        a = hlo.broadcast_in_dim(hlo.convert(a, element), target, [full.index(d) for d in a_dims])
        b = hlo.broadcast_in_dim(hlo.convert(b, element), target, [full.index(d) for d in b_dims])
        return hlo.reduce_sum(hlo.multiply(a, b), [i for i, d in enumerate(full) if d not in out])

    @property
    def depthwise(self) -> bool:
        return self.groups > 1 and self.cin == self.groups

    @property
    def by_taps(self) -> bool:
        """``choices.conv_by_taps``: one product per window offset, no patches tensor."""
        return self.groups == 1 and conv_by_taps(self.taps, self.m, self.cin)

    def _tap_chain(self, x: ir.Value, windows: Windows, step, tie: bool = False,
                   first: int | None = None) -> list[ir.Value]:
        """``step(t, slice_t, last)`` for each window offset ``t`` in turn (tap ``first`` before the
        others), ``slice_t`` ``x``'s strided slice at that offset (``patches`` unstacked) as
        ``[rows, C]`` and ``last`` the value the step before returned (None at first): the values
        it returns, in tap order.
        Each slice waits for the value before it: IREE copies a strided slice out before a product
        reads it, and would make all of them at once. It waits behind an optimization barrier, or
        (``tie``, for small step values) by reading ``-0 · is_finite(last[0])`` (``hlo.tie``): a
        barrier keeps what passes through it allocated until the call ends."""
        out = windows.output(shape(x))
        xp = pad_operand(x, hlo.zeros(tensor_type([], elem(x))), windows)
        taps = list(enumerate(windows.offsets()))
        if first is not None:
            taps.insert(0, taps.pop(first))
        values: dict[int, ir.Value] = {}
        last = None
        for t, offset in taps:
            if last is not None and not tie:
                last, xp = hlo.optimization_barrier([last, xp])
            p = hlo.reshape(tap_slice(xp, offset, windows, out), [math.prod(out[:-1]), out[-1]])
            if last is not None and tie:
                p = hlo.tie(p, last)
            values[t] = last = step(t, p, last)
        return [values[t] for t in sorted(values)]

    def _tap_sum(self, x: ir.Value, windows: Windows, k: ir.Value, contract: int, element: ir.Type) -> ir.Value:
        """``Σ_t slice_t(x) · k[t]`` (``k`` ``[taps, C, O]``, contracted over ``contract``), a chain of
        products each adding the last (IREE takes the add into the product's dispatch): two
        ``[rows, O]`` sums and one slice alive at a time, where the patches are ``taps`` × the input."""
        def step(t: int, p: ir.Value, last: ir.Value | None) -> ir.Value:
            kt = hlo.reshape(hlo.slice(k, [t, 0, 0], [t + 1, *shape(k)[1:]], [1, 1, 1]), shape(k)[1:])
            term = hlo.dot_general(p, kt, [], [], [1], [contract], element)
            return term if last is None else hlo.add(last, term)

        return self._tap_chain(x, windows, step)[-1]

    def forward(self, x: ir.Value, w: ir.Value, element: ir.Type) -> ir.Value:
        if self.by_taps:
            k = hlo.reshape(w, [self.taps, self.cin, self.cout])
            return hlo.reshape(self._tap_sum(x, self.windows, k, 0, element), [*self.out, self.cout])
        p, k = self.patches(x), self.kernel_matrix(w)
        if self.depthwise:
            out = self._product(hlo.reshape(p, [self.m, self.taps, self.groups]), "mtg",
                                hlo.reshape(k, [self.taps, self.groups, self.cout // self.groups]), "tgo",
                                "mgo", element)
        elif self.groups == 1:
            out = hlo.dot_general(p, k, [], [], [1], [0], element)
        else:  # [G, M, O/G] -> [M, G, O/G]
            out = hlo.transpose(hlo.dot_general(p, k, [2], [2], [1, 3], [0, 1], element), [1, 0, 2])
        return hlo.reshape(out, [*self.out, self.cout])

    def depthwise_weight_gradient(self, x: ir.Value, dy: ir.Value, element: ir.Type) -> ir.Value:
        """The weight gradient of a depthwise convolution with one output per input feature
        (x ``[B, *S, C]``, dy ``[B, *Q, C]``) as a depthwise convolution itself: the input,
        batch folded into its features (``[1, *S, B·C]``), correlated with dy as the kernel
        (``[*Q, 1, B·C]``; the old strides become its dilation), then a sum over B. IREE runs
        depthwise convolutions without materialising the ``taps``× patches.

        Each of its outputs sums ``prod(Q)`` terms in one running sum; past
        ``summation.THRESHOLD`` the rows of Q are cut into chunks that join the batch (their
        windows of x sliced from the padded input), so no running sum is longer and the sum over
        the batch is a blocked one (``summation``), as the patches' sum over rows was."""
        n, c = len(self.kernel), self.c
        batch, channels, q = self.x_shape[0], self.cin, self.out[1:]
        padding = c.padding
        if batch * math.prod(q) <= THRESHOLD:
            return self._batch_grouped_weight_gradient(x, dy, element)
        rows = _chunk_rows(q)
        if rows < q[0]:
            zero = hlo.zeros(tensor_type([], elem(x)))
            x = hlo.pad(x, zero, [0, *[lo for lo, _ in padding], 0], [0, *[hi for _, hi in padding], 0],
                        [0] * (n + 2))
            padding = [(0, 0)] * n
            stride = c.strides[0]
            span = (rows - 1) * stride + (self.kernel[0] - 1) * c.rhs_dilation[0] + 1
            full = list(shape(x))
            chunks = q[0] // rows
            x = hlo.concatenate([hlo.slice(x, [0, k * rows * stride, *[0] * n], [full[0], k * rows * stride + span,
                                                                                 *full[2:]], [1] * (n + 2))
                                 for k in range(chunks)], 0)
            dy = hlo.reshape(dy, [batch, chunks, rows, *q[1:], channels])
            dy = hlo.reshape(hlo.transpose(dy, [1, 0, *range(2, n + 3)]), [chunks * batch, rows, *q[1:], channels])
            batch *= chunks
        perm = [*range(1, n + 1), 0, n + 1]
        xt = hlo.reshape(hlo.transpose(x, perm), [1, *shape(x)[1:n + 1], batch * channels])
        dyt = hlo.reshape(hlo.transpose(dy, perm), [*shape(dy)[1:n + 1], 1, batch * channels])
        spec = (0, n + 1, *range(1, n + 1))
        out = hlo.convolution(xt, dyt, (spec, (n + 1, n, *range(n)), spec), strides=c.rhs_dilation,
                              padding=padding, lhs_dilation=[1] * n, rhs_dilation=c.strides,
                              feature_group_count=batch * channels, precision=c.precision, element=element)
        if list(shape(out)[1:n + 1]) != self.kernel:  # windows left over past the last tap
            out = hlo.slice(out, [0] * (n + 2), [1, *self.kernel, batch * channels], [1] * (n + 2))
        summed = hlo.reduce_sum(hlo.reshape(out, [*self.kernel, batch, channels]), [n])
        return hlo.reshape(summed, [*self.kernel, 1, channels])

    def _batch_grouped_weight_gradient(self, x: ir.Value, dy: ir.Value, element: ir.Type) -> ir.Value:
        """The depthwise weight gradient as one convolution that sums over the batch too: x's
        channels as its batch (``batch_group_count`` = C: channel c correlates only with dy's
        channel c), x's batch as its features, contracted with dy's. No transposes, and no
        separate sum over the batch; one running sum of ``B·prod(Q)`` terms per weight, so
        only where that is within ``summation.THRESHOLD``."""
        n, c = len(self.kernel), self.c
        spatial = [*range(1, n + 1)]
        out = hlo.convolution(x, dy, ((n + 1, 0, *spatial), (n + 1, 0, *spatial), (0, n + 1, *spatial)),
                              strides=c.rhs_dilation, padding=c.padding, lhs_dilation=[1] * n,
                              rhs_dilation=c.strides, batch_group_count=self.cin, precision=c.precision,
                              element=element)
        if list(shape(out)[1:n + 1]) != self.kernel:  # windows left over past the last tap
            out = hlo.slice(out, [0] * (n + 2), [1, *self.kernel, self.cin], [1] * (n + 2))
        return hlo.reshape(out, [*self.kernel, 1, self.cin])

    def weight_gradient(self, x: ir.Value, ct: ir.Value, element: ir.Type) -> ir.Value:
        if self.depthwise and self.cout == self.cin:
            return self.depthwise_weight_gradient(x, ct, element)
        if self.by_taps:  # one [C, O] product per window offset
            dy = self.cotangent_matrix(ct)
            if any(lo or hi for lo, hi in self.windows.padding):
                x = apart(x, ct)
            parts = self._tap_chain(x, self.windows, lambda t, p, last: hlo.reshape(
                hlo.dot_general(p, dy, [], [], [0], [0], element), [1, self.cin, self.cout]), tie=True,
                first=centre_tap(self.windows, self.x_shape))
            return hlo.reshape(hlo.concatenate(parts, 0), [*self.kernel, self.cin, self.cout])
        p, dy = self.patches(x), self.cotangent_matrix(ct)
        if self.depthwise:
            dw = self._product(hlo.reshape(p, [self.m, self.taps, self.groups]), "mtg", dy, "mgo", "tgo", element)
        elif self.groups == 1:
            dw = hlo.dot_general(p, dy, [], [], [0], [0], element)
        else:  # [G, taps, C/G, O/G] -> [taps, C/G, G, O/G]
            dw = hlo.transpose(hlo.dot_general(p, dy, [2], [1], [0], [0], element), [1, 2, 0, 3])
        return hlo.reshape(dw, [*self.kernel, self.cin // self.groups, self.cout])

    def input_gradient(self, ct: ir.Value, w: ir.Value, element: ir.Type) -> ir.Value:
        if self.by_taps and all(s == 1 for s in self.c.strides):
            return self._input_gradient_by_taps(ct, w, element)
        dy, k = self.cotangent_matrix(ct), self.kernel_matrix(w)
        if self.depthwise:
            y = self._product(dy, "mgo", hlo.reshape(k, [self.taps, self.groups, self.cout // self.groups]), "tgo",
                              "mtg", element)
        elif self.groups == 1:
            y = hlo.dot_general(dy, k, [], [], [1], [1], element)
        else:  # [G, M, taps, C/G] -> [M, taps, G, C/G]
            y = hlo.transpose(hlo.dot_general(dy, k, [1], [2], [2], [3], element), [1, 2, 0, 3])
        y = hlo.reshape(y, [*self.out, self.taps, self.cin])
        return col2im(y, self.x_shape, self.windows, len(self.x_shape) - 1)


    def _input_gradient_by_taps(self, ct: ir.Value, w: ir.Value, element: ir.Type) -> ir.Value:
        """Stride 1: the input gradient is the correlation of ``ct``, padded by what the windows
        reach past it, with the kernel reversed in space: ``dx[i] = Σ_t ctp[i + t·d] · w[K-1-t]ᵀ``,
        the forward's tap sum again (no ``[M, taps·C]`` product and no col2im)."""
        n = len(self.kernel)
        span = [(k - 1) * d for k, d in zip(self.kernel, self.c.rhs_dilation)]
        lows = [sp - lo for sp, (lo, _) in zip(span, self.c.padding)]
        highs = [s - q - low + sp for s, q, low, sp in zip(self.x_shape[1:-1], self.out[1:], lows, span)]
        windows = Windows([1, *self.kernel, 1], [1] * (n + 2), [(0, 0), *zip(lows, highs), (0, 0)],
                          [1, *self.c.rhs_dilation, 1])
        k = hlo.reshape(hlo.reverse(w, list(range(n))), [self.taps, self.cin, self.cout])
        return hlo.reshape(self._tap_sum(ct, windows, k, 1, element), self.x_shape)


def centre_tap(windows: Windows, x_shape: list[int]) -> int | None:
    """The tap whose slice of the padded input is the input itself (a SAME convolution's centre,
    stride 1), which IREE folds to the input: the weight gradient takes it first, so that the
    input (a copy, ``apart``) dies there instead of halfway through the taps. None if none is."""
    if windows.output(x_shape) != list(x_shape) or any(s != 1 for s in windows.strides):
        return None
    for t, offset in enumerate(windows.offsets()):
        if all(k * d == lo for k, d, (lo, _) in zip(offset, windows.dilation, windows.padding)):
            return t
    return None


def apart(x: ir.Value, anchor: ir.Value) -> ir.Value:
    """``x`` to the bit, tied to ``anchor`` (``hlo.tie``), for a weight gradient that pads ``x``
    where the forward convolution padded it. IREE makes a buffer of a padded input and merges
    two pads of one value, so the forward's padded ``x`` would stay allocated from the forward to
    the weight gradient; padding a tied copy makes each pad where it is read."""
    return hlo.tie(x, anchor)


def _chunk_rows(q: list[int]) -> int:
    """Rows of the output ``q`` per chunk of a depthwise weight gradient: the most that divide
    ``q[0]`` and keep a chunk within ``summation.THRESHOLD`` terms (at least one row)."""
    per_row = math.prod(q[1:])
    return max([r for r in range(1, q[0] + 1) if q[0] % r == 0 and r * per_row <= THRESHOLD], default=1)


def _matmul_adjoint(ct: ir.Value, lhs: ir.Value, kernel: ir.Value, c: Conv) -> tuple[ir.Value, ir.Value]:
    """The weight gradient as patches (or taps) and ``dot_general``; the input gradient too,
    or as a transposed convolution where ``Conv.input_gradient_by_conv``."""
    lsp, rsp, osp = c.spec
    mm = Matmul(c, lhs, kernel)
    x = hlo.transpose(lhs, _canonical(lsp))
    dy = hlo.transpose(ct, _canonical(osp))
    if c.input_gradient_by_conv(lhs, kernel):
        dx = _transpose_lhs(ct, lhs, kernel, c)
    else:
        w = hlo.transpose(kernel, _kernel_canonical(rsp))
        dx = _from_canonical(mm.input_gradient(dy, w, elem(lhs)), _canonical(lsp))
    dw = _from_canonical(mm.weight_gradient(x, dy, elem(kernel)), _kernel_canonical(rsp))
    return dx, dw


def lower_convolution(op: ir.Operation) -> ir.Value | None:
    """``op``'s result as patches and dot_general (built at the insertion point), or None
    when ``choices.conv_forward_by_matmul`` keeps the convolution."""
    lhs, rhs = op.operands
    c = Conv(op)
    if not c.by_matmul(lhs, rhs, forward=True):
        return None
    lsp, rsp, osp = c.spec
    kernel = hlo.reverse(rhs, [rsp[2 + i] for i in c.reversed])
    mm = Matmul(c, lhs, kernel)
    out = mm.forward(hlo.transpose(lhs, _canonical(lsp)), hlo.transpose(kernel, _kernel_canonical(rsp)),
                     elem(op.results[0]))
    return _from_canonical(out, _canonical(osp))


@adjoint("stablehlo.convolution")
def _convolution(op, cts):
    """d lhs = col2im(ct · wᵀ), d rhs = patches(lhs)ᵀ · ct; or JAX's transposed convolutions"""
    (ct,) = cts
    lhs, rhs = op.operands
    c = Conv(op)
    flip = [c.spec[1][2 + i] for i in c.reversed]  # window_reversal: a conv with a reversed kernel
    kernel = hlo.reverse(rhs, flip)
    if not (hlo.is_static(lhs) and hlo.is_static(ct)):
        # A run-time batch: JAX's transposed convolutions (no patches, reshapes or slices of it).
        lsp = c.spec[0]
        dynamic = [d for d, n in enumerate(shape(lhs)) if n == hlo.DYNAMIC]
        if dynamic != [lsp[0]] or not hlo.is_static(rhs) or c.batch_groups != 1:
            raise ValueError(f"convolution: dimension {dynamic[0] if dynamic else '?'} needs a static size "
                             "(only the input's batch dimension may be dynamic)")
        return _transpose_lhs(ct, lhs, kernel, c), hlo.reverse(_transpose_rhs(ct, lhs, kernel, c), flip)
    if c.by_matmul(lhs, rhs) and Matmul(c, lhs, kernel).depthwise:
        # Depthwise: the input gradient is a depthwise convolution too (IREE runs those without
        # patches; the forward stays one for the same reason, ``choices.conv_forward_by_matmul``).
        lsp, rsp, osp = c.spec
        mm = Matmul(c, lhs, kernel)
        dw = mm.weight_gradient(hlo.transpose(lhs, _canonical(lsp)), hlo.transpose(ct, _canonical(osp)), elem(kernel))
        dx, dw = _transpose_lhs(ct, lhs, kernel, c), _from_canonical(dw, _kernel_canonical(rsp))
    elif c.by_matmul(lhs, rhs):
        dx, dw = _matmul_adjoint(ct, lhs, kernel, c)
    else:
        dx, dw = _transpose_lhs(ct, lhs, kernel, c), _transpose_rhs(ct, lhs, kernel, c)
    return dx, hlo.reverse(dw, flip)


tangent("stablehlo.convolution")(bilinear)


# ----- batching ------------------------------------------------------------------------------

def _merged(x: ir.Value, into: int) -> ir.Value:
    """Batched ``x`` with its batch merged into dimension ``into`` (of the unbatched
    layout), batch-major."""
    s = list(shape(x))
    rank = len(s)
    perm = [*range(1, into + 1), 0, *range(into + 1, rank)]
    moved = hlo.transpose(x, perm)
    merged = s[1:]
    merged[into] *= s[0]
    return hlo.reshape(moved, merged)


def _split(y: ir.Value, at: int, size: int) -> ir.Value:
    """``y`` with dimension ``at`` (batch-major, ``size`` × rest) split and the batch moved
    to the front."""
    s = list(shape(y))
    split = [*s[:at], size, s[at] // size, *s[at + 1:]]
    return moved_to_front(hlo.reshape(y, split), at)


@batching("stablehlo.convolution")
def _convolution_batched(b: Batcher, op):
    """lhs batched: folded into the batch dimension; rhs batched: into the output features;
    both: a grouped convolution with ``size`` times the groups"""
    lhs, rhs = b.operands(op)
    (lb, lf, *_), (ro, ri, *_), (ob, of, *_) = conv_spec(op)
    groups, batch_groups = hlo.read_int(op, "feature_group_count"), hlo.read_int(op, "batch_group_count")
    out_type = shape(op.result)
    if batch_groups != 1:
        raise MissingBatchingRule(op, "batch_group_count > 1")
    attrs = {}
    if lhs in b.batched and rhs in b.batched:
        lhs, rhs = _merged(lhs, lf), _merged(rhs, ro)
        attrs["feature_group_count"] = hlo.i64(groups * b.size)
        at = of
    elif lhs in b.batched:
        lhs, at = _merged(lhs, lb), ob
    else:
        if groups != 1:
            lhs = b.lift(lhs)
            return _convolution_batched(b, op)
        rhs, at = _merged(rhs, ro), of
    merged = list(out_type)
    merged[at] *= b.size
    y = remake(op, [lhs, rhs], [tensor_type(merged, elem(op.result))], attrs).result
    return b.mark([_split(y, at, b.size)])
