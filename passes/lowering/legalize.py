"""Semantics-preserving rewrites for IREE 3.13 lowering bugs, applied just before compiling.

* Float ``stablehlo.power``: IREE computes ``exp(y * log(x))``, which is NaN
  for a negative base even with an integral exponent (``(-2)^3``) and for
  ``0^0``. StableHLO (like C's ``pow``) defines both. The rewrite computes
  ``|x|^y`` and fixes the sign for odd integral exponents, NaN for a negative
  base with a non-integral exponent, and 1 for a zero exponent.
* ``stablehlo.reduce`` over every dimension of an operand of rank ≥ 2: llvm-cpu
  fails with "'vector.contract' op invalid accumulator/result vector shape" when
  the operand is a product with a broadcast along leading dimensions
  (``sum(x[None, :] * w)``, ``sum(mean(x, 0) * x)``;
  ../shared/repro/iree313_vector_contract_reduce.mlir). The operand is reshaped
  to one dimension first (collapsed, over run-time sizes): the same reduction, which IREE
  compiles. Not a large sum's (below): its blocked form reduces the operand's inner
  dimensions first, as they are, and its last partial sums flat; IREE computes the operand
  inside that first reduce, where a flat reshape before it made IREE store the whole operand
  (a 16 MiB buffer for a mean-squared error over 4 M elements).

* A scalar integer ``stablehlo.convert`` to float64 (a loop counter made a float inside a
  loop, where IREE runs scalars on the host): the VM has no integer-to-f64 conversion
  ("failed to legalize operation 'arith.sitofp'", with or without its f64 extension),
  but converts through float32. Integers of up to 16 bits go through float32 exactly;
  32-bit ones as two 16-bit halves, ``f64(x >> 16) * 65536 + f64(x & 0xFFFF)``, exact.

* ``stablehlo.dynamic_update_slice`` of an operand with a run-time size (the tape of a
  loop whose trip count is data-dependent): IREE 3.13 fails to legalize it ("failed to
  legalize operation 'stablehlo.dynamic_update_slice'"). It becomes the ``scatter`` that
  writes the same window, its starts clamped as ``dynamic_update_slice`` clamps them.

* ``stablehlo.get_dimension_size`` of an unsigned tensor (a tape of a PRNG key): IREE 3.13
  fails to legalize its ``tensor.dim``; it reads the size of the same bits as a signless
  integer (``unsigned_sizes.py``).

* ``stablehlo.scatter`` with a window IREE 3.13 cannot lower (partial along a dimension that
  is not indexed, or wider than 1 along an indexed one: "'iree_linalg_ext.scatter' op shape of
  update value dim#2 must match original value at dim#1"): the same scatter of single
  elements into the operand flattened (``indexing.scatter_by_elements``).
* ``stablehlo.gather`` / ``stablehlo.scatter`` with indices that may be out of bounds: IREE
  3.13 reads and writes at them unchecked (a scatter's write lands past the end of its
  buffer, in malloc's next chunk); they get StableHLO's clamp and drop (``bounds.py``).
* ``stablehlo.einsum`` / ``unary_einsum`` (IREE 3.13 refuses the latter): diagonals, sums,
  a ``dot_general`` and a transpose (``einsum.py``).
* JAX's CPU LAPACK calls (``custom_call @lapack_?potrf_ffi`` / ``@lapack_?trsm_ffi``): the
  ``cholesky`` / ``triangular_solve`` they compute (``lapack.py``), then lowered as those are.
* A ``while`` loop's carry whose initial value is a constant, an argument or read elsewhere (a
  scan's output stack, a gradient's tape and its reverse loop's cotangents, all zeros): IREE
  3.13 copies the whole carried buffer at every iteration, and, once the loop's device is named
  (``runtime.compiler``), changes carries that share a buffer in that one buffer. Where every
  loop is simple, each such carry gets a tied copy of its own (``loop_inits.py``).

And one for accuracy: a float sum of more than ``summation.BLOCK`` terms (a ``reduce``, or a
``dot_general`` with a long contraction and a small result) becomes a blocked sum
(``summation.py``: IREE 3.13 sums sequentially, and 64 M float32 terms summed to half their
total).

And two rewrites for speed (the measurements are in ``choices.py``):

* ``stablehlo.convolution`` becomes window patches and a ``dot_general`` where
  ``choices.conv_forward_by_matmul`` says so (over one or two input features, or disjoint
  windows, IREE 3.13 runs its convolution loops 6–10× slower than the same work as a
  matmul). This covers every convolution the module holds: the user's, those copied into
  gradient functions and the adjoint rules' transposed convolutions.
* A float ``dot_general`` whose width (the rhs's one free dimension) is not a multiple
  of 16 is computed wider, as ``choices.matmul_width`` says: zero columns appended to
  the rhs, the result sliced back (IREE 3.13's kernels run 200 wide at a third of
  their speed 256 wide).
"""
from __future__ import annotations

import math

from ...boundary import respell_foreign
from . import choices
from ..ir import hlo
from .bounds import guard_indices
from ..rules.convolution import lower_convolution
from .dynamic_shapes import annotate_nonexpanding, collapse, rewrite_dynamic
from ..rules.control_flow import unroll_short_loops
from ..rules.einsum import EINSUMS, lower_einsum
from ..rules.indexing import iree_rejects_scatter, scatter_by_elements
from .lapack import rewrite_lapack_calls
from .loop_inits import loops_run_in_place, separate_loop_inits  # noqa: F401  (runtime.compiler asks it)
from .loop_slices import sink_sliced_elementwise
from .shared_values import split_shared_elementwise
from .reverse_loops import barrier_reverse_loops
from ..rules.linalg import lower_cholesky, lower_triangular_solve
from ..rules.spectral import lower_complex_pad, lower_fft
from .unsigned_dynamic import signless_dimension_sizes, signless_loop_carries
from .summation import contraction_chunks, is_large_sum, rewrite_contraction, rewrite_sum
from ..ir.mlir import elem, ir, is_float, is_integer_type, parse_module, run_pipeline, shape, tensor_type
from ..ir.regions import nested_ops


# IREE 3.13 refuses these on llvm-cpu ("failed to legalize operation ... explicitly marked illegal"):
# loops over columns / rows instead (linalg.py), DFT products for the FFTs it does not take (spectral.py);
# and a complex pad, which crashes it, as the complex of two real pads.
LOWERED = {"stablehlo.cholesky": lower_cholesky, "stablehlo.triangular_solve": lower_triangular_solve,
           "stablehlo.fft": lower_fft, "stablehlo.pad": lower_complex_pad}


def _candidates(op: ir.Operation, out: list[ir.Operation]) -> None:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                if inner.name == "stablehlo.power" and is_float(inner.results[0]) \
                        or inner.name == "stablehlo.convolution" and _static(inner) or _reduces_everything(inner) \
                        or is_large_sum(inner) \
                        or inner.name == "stablehlo.dot_general" and (_wider(inner) or contraction_chunks(inner)) \
                        or inner.name == "stablehlo.dynamic_update_slice" and not hlo.is_static(inner.operands[0]) \
                        or _host_int_to_f64(inner) or inner.name in LOWERED or inner.name in EINSUMS \
                        or iree_rejects_scatter(inner):
                    out.append(inner)
                if len(inner.regions):
                    _candidates(inner, out)


def _static(op: ir.Operation) -> bool:
    return all(hlo.is_static(v) for v in list(op.operands) + list(op.results))


def _host_int_to_f64(op: ir.Operation) -> bool:
    if op.name != "stablehlo.convert" or shape(op.results[0]) or str(elem(op.results[0])) != "f64":
        return False
    source = elem(op.operands[0])
    return is_integer_type(source) and ir.IntegerType(source).width <= 32


def _int_to_f64_through_f32(x: ir.Value) -> ir.Value:
    f32, f64 = ir.F32Type.get(), ir.F64Type.get()
    if ir.IntegerType(elem(x)).width <= 16:
        return hlo.convert(hlo.convert(x, f32), f64)
    unsigned = ir.IntegerType(elem(x)).is_unsigned
    high = hlo.binary(f"stablehlo.shift_right_{'logical' if unsigned else 'arithmetic'}", x, hlo.like(16, x))
    low = hlo.binary("stablehlo.and", x, hlo.like(0xFFFF, x))
    wide = [hlo.convert(hlo.convert(h, f32), f64) for h in (high, low)]
    return hlo.add(hlo.multiply(wide[0], hlo.like(65536.0, wide[0])), wide[1])


def _reduces_everything(op: ir.Operation) -> bool:
    if op.name != "stablehlo.reduce":
        return False
    inputs = list(op.operands)[:len(op.operands) // 2]
    ranks = {len(shape(v)) for v in inputs}
    return len(ranks) == 1 and ranks.pop() >= 2 and len(hlo.read_i64_array(op, "dimensions")) == len(shape(inputs[0]))


def _flatten_reduce(op: ir.Operation) -> None:
    """The same reduce over its inputs reshaped to one dimension (in place; run-time sizes
    through ``tensor.collapse_shape``)."""
    n = len(op.operands) // 2
    for i in range(n):
        v = op.operands[i]
        op.operands[i] = hlo.reshape(v, [math.prod(shape(v))]) if hlo.is_static(v) \
            else collapse(v, [list(range(len(shape(v))))])
    op.attributes["dimensions"] = ir.DenseI64ArrayAttr.get([0])


def _rhs_free_dims(op: ir.Operation) -> list[int]:
    """The dimensions of a ``dot_general``'s rhs that are neither batch nor contracted."""
    dims = hlo.dot_dimensions(op)
    fixed = dims.rhs_batch + dims.rhs_contract
    return [d for d in range(len(shape(op.operands[1]))) if d not in fixed]


def _wider(op: ir.Operation) -> int:
    """The width ``choices.matmul_width`` picks for this ``dot_general`` if it is wider
    than the op's own (the rhs has one free dimension, every shape static), else 0."""
    lhs, rhs = (shape(v) for v in op.operands)
    free = _rhs_free_dims(op)
    if len(free) != 1 or any(s < 0 for s in lhs + rhs):
        return 0
    dims = hlo.dot_dimensions(op)
    lhs_fixed = dims.lhs_batch + dims.lhs_contract
    batch = math.prod(rhs[d] for d in dims.rhs_batch)
    k = math.prod(rhs[d] for d in dims.rhs_contract)
    m = math.prod(s for d, s in enumerate(lhs) if d not in lhs_fixed)
    n = rhs[free[0]]
    width = choices.matmul_width(batch, m, n, k, is_float(op.results[0]))
    return width if width > n else 0


def _widened(op: ir.Operation, width: int) -> ir.Value:
    """``op`` computed ``width`` wide: zero columns appended to the rhs, the result sliced back."""
    lhs, rhs = op.operands
    free = _rhs_free_dims(op)[0]
    high = [width - s if d == free else 0 for d, s in enumerate(shape(rhs))]
    padded = hlo.pad(rhs, hlo.splat(0, tensor_type([], elem(rhs))), [0] * len(high), high, [0] * len(high))
    out = shape(op.results[0])
    wide_type = tensor_type([*out[:-1], width], elem(op.results[0]))
    wide = ir.Operation.create("stablehlo.dot_general", results=[wide_type], operands=[lhs, padded],
                               attributes={name: op.attributes[name] for name in op.attributes}).result
    return hlo.slice(wide, [0] * len(out), list(out), [1] * len(out))


def _update_by_scatter(op: ir.Operation) -> ir.Value:
    """``dynamic_update_slice(x, u, starts)`` as a scatter of the window ``u`` at the starts
    clamped to ``[0, dim(x) - dim(u)]``. A dimension the window spans whole needs no start
    (its clamped start is 0), and IREE's scatter only lowers with the others indexed."""
    x, update, *starts = op.operands
    i32 = ir.IntegerType.get_signless(32)
    indexed = [d for d, (full, size) in enumerate(zip(shape(x), shape(update))) if full != size]
    clamped = []
    for d in indexed:
        start = hlo.convert(starts[d], i32)
        room = hlo.subtract(hlo.dimension_size(x, d), hlo.splat(shape(update)[d], start.type))
        clamped.append(hlo.reshape(hlo.clamp(hlo.splat(0, start.type), start, room), [1]))
    rank = len(shape(update))
    # One scatter index (a batch of 1): the form IREE's scatter lowering accepts.
    indices = hlo.reshape(hlo.concatenate(clamped, 0) if len(clamped) > 1 else clamped[0], [1, len(clamped)])
    dims = {"update_window_dims": list(range(1, rank + 1)), "inserted_window_dims": [],
            "scatter_dims_to_operand_dims": indexed, "index_vector_dim": 1}
    return hlo.scatter(x, indices, hlo.reshape(update, [1, *shape(update)]), dims, kind="replace")


def _safe_power(x: ir.Value, y: ir.Value) -> ir.Value:
    t = x.type
    zero, one, two = hlo.splat(0, t), hlo.splat(1, t), hlo.splat(2, t)
    magnitude = hlo.binary("stablehlo.power", hlo.unary("stablehlo.abs", x), y)
    integral = hlo.compare(hlo.unary("stablehlo.floor", y), y, "EQ")
    odd = hlo.compare(hlo.binary("stablehlo.remainder", y, two), zero, "NE")
    negative_base = hlo.select(integral, hlo.select(odd, hlo.negate(magnitude), magnitude),
                               hlo.splat(float("nan"), t))
    value = hlo.select(hlo.compare(x, zero, "LT"), negative_base, magnitude)
    return hlo.select(hlo.compare(y, zero, "EQ"), one, value)


def legalize_for_iree(module: ir.Module, dynamic: bool = True) -> int:
    """Rewrite ``module`` in place; returns the number of ops rewritten. ``dynamic=False`` skips
    the rewrites for run-time sizes (``dynamic_shapes.py``), for a module that has none."""
    done = 0
    if dynamic:
        with module.context:
            done += barrier_reverse_loops(module)  # before the tapes' run-time sizes are rewritten
            # IREE 3.13 miscompiles loops over run-time-sized carries (wrong values: JAX's LSTM
            # over a symbolic batch; tests/test_dynamic.py has the smallest case): short counted
            # ones run unrolled. Calls are inlined first (IREE inlines them anyway): the size
            # classes follow a private function called once, and the copies call it n times.
            if any(o.name == "func.call" for o in nested_ops(module.operation)):
                run_pipeline(module.operation, "builtin.module(inline{default-pipeline=})")
            done = unroll_short_loops(module.operation, keep=lambda loop: all(hlo.is_static(v) for v in loop.operands))
            done += annotate_nonexpanding(module)
            done += rewrite_dynamic(module)
    done += rewrite_lapack_calls(module)  # then lowered with the other cholesky / triangular_solve ops
    with module.context:
        done += guard_indices(module)  # before the rewrites below, whose scatters are in bounds by construction
    found: list[ir.Operation] = []
    _candidates(module.operation, found)
    for op in found:
        with ir.InsertionPoint(op), op.location:
            if op.name == "stablehlo.reduce":
                if not is_large_sum(op):  # so a reduce over every dimension
                    _flatten_reduce(op)
                    done += 1
                    continue
                replacement = rewrite_sum(op)
            elif op.name == "stablehlo.power":
                replacement = _safe_power(op.operands[0], op.operands[1])
            elif op.name == "stablehlo.dot_general":
                chunks = contraction_chunks(op)
                replacement = rewrite_contraction(op, chunks) if chunks else _widened(op, _wider(op))
            elif op.name == "stablehlo.dynamic_update_slice":
                replacement = _update_by_scatter(op)
            elif op.name == "stablehlo.convert":
                replacement = _int_to_f64_through_f32(op.operands[0])
            elif op.name in LOWERED:
                replacement = LOWERED[op.name](op)
            elif op.name in EINSUMS:
                replacement = lower_einsum(op)
            elif op.name == "stablehlo.scatter":
                replacement = scatter_by_elements(op)
            else:
                replacement = lower_convolution(op)
        if replacement is not None:
            op.results[0].replace_all_uses_with(replacement)
            op.erase()
            done += 1
    if dynamic and done:
        # The lowerings above (einsum's reshapes and contractions, among others) may have written
        # forms over run-time sizes that IREE refuses: those get the same rewrites.
        with module.context:
            done += annotate_nonexpanding(module) + rewrite_dynamic(module)
    if dynamic:
        # Last: the rewrites above read run-time sizes of the tensors they write (tapes included).
        with module.context:
            done += signless_loop_carries(module) + signless_dimension_sizes(module)
    with module.context:
        done += sink_sliced_elementwise(module)
        done += split_shared_elementwise(module)
        done += separate_loop_inits(module)
    return done


def legalize_text(text: str) -> str:
    """``legalize_for_iree`` on module text (returned unchanged when nothing applies)."""
    text = respell_foreign(text)
    if not any(name in text for name in ("stablehlo.power", "stablehlo.convolution", "stablehlo.reduce",
                                         "stablehlo.dot_general", "stablehlo.dynamic_update_slice",
                                         "stablehlo.convert", "stablehlo.scatter", "stablehlo.gather",
                                         "dynamic_broadcast_in_dim", "?", "stablehlo.while",
                                         "@lapack_",
                                         *LOWERED, *EINSUMS)):
        return text
    module = parse_module(text)
    if not legalize_for_iree(module, dynamic="<?" in text or "x?" in text):
        return text
    return module.operation.get_asm(enable_debug_info=True)
