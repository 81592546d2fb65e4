"""Which formulation of an op (or of its adjoint) irgrad emits for IREE: the one place
where a choice depends on shapes. Every choice is measured (benchmarks/, per-dispatch
profiles with benchmarks/profile.py) and every branch is covered by the numeric checker.

Convolutions (IREE 3.13, llvm-cpu, measured on a 2-core x86 with AVX-512; single
convolutions, ``benchmarks/README.md``, "Convolutions left to IREE"): IREE runs a forward
``stablehlo.convolution`` of one feature group over overlapping windows itself (im2col a
tile at a time, no patches in memory) 1.3–4.6× faster than the same work written as patches
and a ``dot_general``, and an input gradient written as JAX's transposed convolution 1.6–5.9×
faster than ``col2im(ct · wᵀ)`` over 8 input features or more (``conv_forward_by_matmul``,
``conv_input_gradient_by_conv``). It is slow on a few input features (one: 6×; an input
gradient onto 3: 2–6×), on disjoint windows (ViT's patch embedding, a reshape as patches:
10×) and on the weight gradient as a convolution (batch and features swapped, the cotangent as
the window: 3–4× slower than patches). Those are written as window patches (a pad and one
strided slice per window offset, stacked by a select: one dispatch) and a ``dot_general``:
forward ``patches(x) · w``, weight gradient ``patches(x)ᵀ · ct``, input gradient
``col2im(ct · wᵀ)`` (by stride phase, ``patches.window_sum``: one pad and one elementwise
dispatch). No multiply touches an inserted zero, and feature groups (depthwise included) are
a batch dimension of the ``dot_general``. The patches cost ``taps / stride²`` times the input's
memory, so the choice is bounded by ``MAX_CONV_TAPS``; convolutions with an input dilation
(transposed convolutions) or batch groups keep the convolution form. Past
``MAX_PATCH_BYTES`` of patches (one feature group), no patches: one ``dot_general`` per
window offset over a strided slice of the input, summed in a chain, each slice behind an
optimization barrier (``conv_by_taps``): the ResNet block's weight gradient at batch 64
(patches of 18 MB); below the limit the patches stay (nine small products take twice the time).

Pooling (``reduce_window``): for max/min the winner of each window is found by an
elementwise chain over its taps (first in row-major order, as TensorFlow's
select_and_scatter), and the cotangent goes back through ``window_sum``: elementwise
work IREE fuses (3 dispatches a pool), instead of a variadic ``reduce_window`` and a
serial scatter. For sums the cotangent is spread by ``window_sum`` (a reshape for
non-overlapping windows) instead of a window sum over a cotangent with inserted zeros.
Bounded by ``MAX_POOL_TAPS`` (cumulative sums and maxima use windows as long as the
axis: those keep the reduce_window forms).

Sums that undo a broadcast (a bias's gradient): IREE 3.13 reduces over leading axes
(the kept axes innermost, as a bias over NHWC or a batch) at 1–6 GB/s, and runs the same
sum written as ``ones · x`` (a vecmat) 3–5× faster: the CNN's conv bias, 16×28×28×16 →
16, 32 → 7 µs in a call; 16×14×14×32 → 32, 13 → 4 µs; a 64×256 batch, the same. Sums
over trailing or interleaved axes (NCHW's bias) stay reductions: the vecmat would need a
transpose.

Loops (``while`` with a static trip count): IREE 3.13 copies every loop-carried tensor
on every iteration (a 32-step loop writing one row of a 32×16×256 tape per step runs
in 0.9 ms, of a 256×16×256 tape in 6.2 ms), so a taped loop pays its whole tape per
step. A short loop is unrolled instead (trip count × body ops ≤ ``MAX_UNROLLED_OPS``,
as torch-mlir exports recurrent models): straight-line code IREE fuses, with no tape.
Longer loops keep the taped forward loop and the reverse loop (memory linear in the
trip count, compile time independent of it). ``loop_form("unrolled" | "looped")`` forces one
form for the loops differentiated while it is active (the tests run every loop test in both:
``tests/conftest.py``, ``loop_form``), and ``LOOP_FORMS_TAKEN`` counts the forms taken.

Matmul widths (IREE 3.13, llvm-cpu, measured on a 2-core x86 with AVX-512, one thread):
the speed of a float ``dot_general`` falls off a cliff when its width ``n`` (the rhs's
free size, the result's last dimension) is not a multiple of 16: 200×200×200 runs at
75 GFLOP/s, 200×208×200 at 133, 200×256×200 at 211 and 200×192×200 at 223 (the
vector tiles IREE picks divide ``n``). The same product computed ``n`` wide with zero
columns appended to the rhs and the result sliced back takes 0.10 instead of 0.21 ms
(the 200×200 Hessian: 0.12 instead of 0.20 ms a call, two 3 µs copies included);
1000×1000×1000 gains 12 %. ``matmul_width`` pads to a multiple of 64 when that adds at
most 30 % of the work, else to a multiple of 16, and only products big enough
(``MIN_WIDENED_MACS``) for the gain to outweigh the two copies.
IREE's global alternatives lose elsewhere: ``--iree-llvmcpu-vector-pproc-strategy=peel``
(the same cliff gone) made the ResNet gradient 1.6× slower and MobileNetV2's compile 4×
longer; ``--iree-opt-data-tiling`` failed to compile MobileNetV2's gradient.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from .summation import THRESHOLD

MAX_UNROLLED_OPS = 2048  # trip count × ops in the loop body
MAX_UNROLLED_LOOPS = 16  # trip count × loops in the loop body
MAX_FORCED_SCALAR_STEPS = 10  # a scalar recurrence unrolled by loop_form("unrolled") (0.6 s to compile)
MAX_CONV_TAPS = 121  # up to 11×11 kernels (7×7 stems, 1-D kernels up to 121)
MAX_POOL_TAPS = 64
MIN_CONV_FEATURES = 3  # a forward convolution IREE runs itself (conv_forward_by_matmul)
MIN_CONV_GRADIENT_FEATURES = 8  # an input gradient as a transposed convolution (conv_input_gradient_by_conv)
IREE_CONV_NHWC_ONLY = True  # both: only 2-D convolutions with their features last (bench_conv.py lifts it)
MAX_PATCH_BYTES = 8 << 20  # a convolution's patches past this: one product per window offset
MIN_WIDENED_MACS = 1 << 22  # multiply-adds of a product worth widening (200×200×200 is 8M)


def conv_adjoint_by_matmul(taps: int, lhs_dilation: Sequence[int], batch_groups: int, same_element: bool) -> bool:
    """A convolution's weight gradient as patches and ``dot_general`` (depthwise: multiply and
    reduce), and its input gradient too unless ``conv_input_gradient_by_conv``."""
    return same_element and taps <= MAX_CONV_TAPS and all(d == 1 for d in lhs_dilation) and batch_groups == 1


def _conv_by_iree(taps: int, features: int, groups: int, disjoint: bool, nhwc: bool, fewest: int) -> bool:
    return (nhwc or not IREE_CONV_NHWC_ONLY) and groups == 1 and taps > 1 and features >= fewest and not disjoint


def conv_forward_by_matmul(taps: int, lhs_dilation: Sequence[int], batch_groups: int, same_element: bool,
                           depthwise: bool, features: int = 0, groups: int = 1, disjoint: bool = False,
                           nhwc: bool = False) -> bool:
    """A forward convolution as patches and ``dot_general``, or left to IREE. Depthwise
    convolutions stay convolutions: IREE recognises them and runs them 2× faster than any
    rewrite measured. So does one feature group of overlapping windows over at least
    ``MIN_CONV_FEATURES`` input ``features`` (``_conv_by_iree``): IREE 3.13 runs it 1.3–4.6× faster than
    the patches' product, without the patches in memory (ResNet's 3×3 32→32 at batch 64: 1.6
    against 3.7 ms; 5×5 16→32: 1.0 against 4.5 ms), but 6× slower over one input feature
    (an MNIST CNN's first layer) and 10× slower over ViT's disjoint 8×8 patches (3 features),
    whose patches are a reshape. Only 2-D convolutions whose input and output have their features
    last (``nhwc``): IREE runs NCHW (torch's layout) 5–22× slower than the patches, with or
    without transposes around it, and 1-D convolutions 1.3–1.7× slower (``benchmarks/bench_conv.py``)."""
    if depthwise:
        return False
    return conv_adjoint_by_matmul(taps, lhs_dilation, batch_groups, same_element) \
        and not _conv_by_iree(taps, features, groups, disjoint, nhwc, MIN_CONV_FEATURES)


def conv_input_gradient_by_conv(taps: int, features: int, groups: int, disjoint: bool, nhwc: bool) -> bool:
    """The input gradient of a convolution that ``conv_adjoint_by_matmul`` would write as
    ``col2im(ct · wᵀ)`` written as JAX's transposed convolution instead, when it has one feature group,
    overlapping windows and at least ``MIN_CONV_GRADIENT_FEATURES`` input ``features`` (the
    transposed convolution's outputs): 1.6–5.9× faster at stride 1 (ResNet's 3×3 32→32 at batch
    64: 3.0 against 7.8 ms with the forward; 64→128: 8.7 against 21 ms), as fast or faster at stride 2, and
    no ``[rows, taps · features]`` product; over 3 features 2–6× slower. ``nhwc`` as for the forward."""
    return _conv_by_iree(taps, features, groups, disjoint, nhwc, MIN_CONV_GRADIENT_FEATURES)


def conv_by_taps(taps: int, rows: int, features: int) -> bool:
    """A convolution (forward and adjoints, one feature group) as one ``dot_general`` per window
    offset over a strided slice of the input, the products summed, instead of one over its
    patches, when the patches (``rows × taps × features`` floats) pass ``MAX_PATCH_BYTES``."""
    return taps > 1 and rows * taps * features * 4 > MAX_PATCH_BYTES


def sum_by_vecmat(x_shape: Sequence[int], dims: Sequence[int], is_float: bool) -> bool:
    """A sum over the leading axes ``dims`` of a float tensor as ``ones · x``, up to
    ``summation.THRESHOLD`` terms. A longer sum is blocked (``summation``), and IREE 3.13 runs
    a blocked ``ones · x`` as a reduction anyway, but one that cannot take in the elementwise
    op that made ``x``; a ``reduce`` blocked along ``x``'s own dimensions does (a batch norm's
    ``Σ dy·x̂``: one dispatch, not two and a full-size intermediate)."""
    return is_float and 0 < len(dims) < len(x_shape) and sorted(dims) == list(range(len(dims))) \
        and math.prod(x_shape[d] for d in dims) <= THRESHOLD


def unroll_loop(trip_count: int, body_ops: int, inner_loops: int = 0, scalar_recurrence: bool = False) -> bool:
    """Differentiate a static-trip-count ``while`` by unrolling it (``body_ops`` counts the ops
    nested in the body's regions too). At most ``MAX_UNROLLED_LOOPS`` copies of inner loops:
    each is two or three loops of the gradient, and IREE 3.13 fails at run time on 40 copies
    of a data-dependent one ("binding count 41 > 32"; 12 run).

    Never a loop with a ``scalar_recurrence`` (a one-element float carry that changes each
    iteration, ``y = y * 1.3 + x * x``): IREE 3.13 clones the whole upstream DAG of
    single-element elementwise ops into every dispatch that reads one and fuses the copies
    (FuseMultiUseElementwiseProducer), which grows exponentially with the chain. Unrolled, a
    50-step scalar loop under ``maximum_iterations`` (about 600 scalar ops) made iree-compile
    grow past 24 GB; 20 steps took 19 s and 1.2 GB, 10 steps 0.6 s. Tensors of two elements
    or more are not cloned that way (the same loop over 2-element vectors compiles in 1.4 s),
    and a scalar loop costs little as a loop: its tapes are ``n`` scalars."""
    return not scalar_recurrence and trip_count * body_ops <= MAX_UNROLLED_OPS \
        and trip_count * inner_loops <= MAX_UNROLLED_LOOPS


LOOP_FORMS = ("unrolled", "looped")
_LOOP_FORM: ContextVar[str | None] = ContextVar("loop_form", default=None)
# The forms the while adjoint took ("unrolled", "looped"), and how many of the loops it
# differentiated loop_form("unrolled") would unroll ("unrollable"): what the tests check.
LOOP_FORMS_TAKEN: Counter[str] = Counter()


@contextmanager
def loop_form(form: str | None) -> Iterator[None]:
    """While active, the while adjoint differentiates every loop in ``form``: ``"looped"`` (the
    taped loop and the reverse loop), ``"unrolled"`` (every loop with a trip count known at
    compile time whose copies fit the unrolling budget, a scalar recurrence too if it runs at
    most ``MAX_FORCED_SCALAR_STEPS`` times), None (``unroll_loop`` decides)."""
    if form is not None and form not in LOOP_FORMS:
        raise ValueError(f"loop_form must be one of {LOOP_FORMS} or None, got {form!r}")
    token = _LOOP_FORM.set(form)
    try:
        yield
    finally:
        _LOOP_FORM.reset(token)


def loop_adjoint_form(trip_count: int | None, body_ops: int, inner_loops: int = 0,
                      scalar_recurrence: bool = False) -> str:
    """``"unrolled"`` or ``"looped"``: how the while adjoint differentiates a loop (a trip count
    of None, known only at run time: looped), ``unroll_loop`` deciding unless ``loop_form``
    forces a form. Counted in ``LOOP_FORMS_TAKEN``."""
    unrollable = trip_count is not None and unroll_loop(trip_count, body_ops, inner_loops) \
        and (not scalar_recurrence or trip_count <= MAX_FORCED_SCALAR_STEPS)
    forced = _LOOP_FORM.get()
    if forced is None:
        unrolled = trip_count is not None and unroll_loop(trip_count, body_ops, inner_loops, scalar_recurrence)
    else:
        unrolled = unrollable and forced == "unrolled"
    form = "unrolled" if unrolled else "looped"
    LOOP_FORMS_TAKEN[form] += 1
    LOOP_FORMS_TAKEN["unrollable"] += unrollable
    return form


def pool_by_patches(window: Sequence[int], base_dilation: Sequence[int]) -> bool:
    """A max/min ``reduce_window`` adjoint through patches and ``col2im``."""
    return math.prod(window) <= MAX_POOL_TAPS and all(b == 1 for b in base_dilation)


def matmul_width(batch: int, m: int, n: int, k: int, is_float: bool) -> int:
    """The width a ``batch``-fold ``m×k · k×n`` product is computed at: ``n``, or ``n``
    rounded up (zero rhs columns, the result sliced back) where IREE's kernels are faster."""
    if not is_float or n % 16 == 0 or m < 16 or k < 16 or batch * m * n * k < MIN_WIDENED_MACS:
        return n
    wide = -(-n // 64) * 64
    return wide if (wide - n) * 10 <= 3 * n else -(-n // 16) * 16
