"""``ig.random``: TensorFlow's stateless random ops, bit for bit.

TensorFlow's ``tf.random.stateless_*`` (algorithm ``auto_select`` on CPU: Philox4x32-10) turn
the seed ``[s0, s1]`` into a Philox key and counter (``StatelessRandomGetKeyCounter``: the
counter ``(s0, s1)`` as four 32-bit words, sign-extended from int32, run once through Philox
under the key ``(0x3ec8f720, 0x02461e29)``; the output's first two words are the key, its last
two the counter's high words), then fill the output from consecutive Philox blocks of four
32-bit words. irgrad computes the same Philox4x32-10 rounds in StableHLO integer ops (the
32×32→64 multiply in 64-bit integers), so the bits are
TensorFlow's: ``stateless_uniform`` (float32, float64, int32) equals TensorFlow's exactly, and
``stateless_normal`` / ``stateless_truncated_normal`` use the same words and TensorFlow's
Box-Muller transform (they agree to the last bit or two of ``log`` / ``sin`` / ``cos``).
``stateless_categorical`` follows TensorFlow's CPU kernel (one stream for the batch, its
cumulative sums in the logits' dtype where TensorFlow uses float64).

StableHLO's ``rng_bit_generator`` (``PHILOX``) is not used: IREE 3.13 compiles it for llvm-cpu
and vulkan-spirv, but its bits are implementation-defined (its state and output order are
XLA's, not TensorFlow's), and matching TensorFlow is worth more. The ops are not differentiable (TensorFlow:
``NotDifferentiable``); their results are constants to ``ig.gradients``.
"""
from __future__ import annotations

import math

import numpy as np

from . import dtypes
from .framework import Tensor
from .ops.core import convert_to_tensor, emit
from .passes.ir import hlo
from .passes.ir.mlir import element_type, ir, shape as value_shape, tensor_type

_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_SEED_KEY = (0x3EC8F720, 0x02461E29)
_TRUNCATE_SKIP = 256  # TensorFlow's kReservedSamplesPerOutput: Philox blocks per 4 outputs (float32)


def _u32() -> ir.Type:
    return ir.IntegerType.get_unsigned(32)


def _k(value: int, like: ir.Value) -> ir.Value:
    return hlo.splat(value & 0xFFFFFFFF, tensor_type(value_shape(like), _u32()))


def _b(name: str, a: ir.Value, b: ir.Value) -> ir.Value:
    return hlo.binary(name, a, b)


def _mulhilo(m: int, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """``(lo, hi)`` words of the 64-bit product ``m · x``."""
    u64 = ir.IntegerType.get_unsigned(64)
    wide = hlo.multiply(hlo.convert(x, u64), hlo.splat(m, tensor_type(value_shape(x), u64)))
    hi = _b("stablehlo.shift_right_logical", wide, hlo.splat(32, wide.type))
    return hlo.convert(wide, _u32()), hlo.convert(hi, _u32())


def philox(counter: list[ir.Value], key: list[ir.Value]) -> list[ir.Value]:
    """Philox4x32-10 of four ui32 counter words (any one shape) under a two-word key (scalars
    or that shape): TensorFlow's ``random::PhiloxRandom``'s block."""
    c = list(counter)
    k0, k1 = (hlo.broadcast_in_dim(k, value_shape(c[0]), []) if value_shape(k) != value_shape(c[0]) else k
              for k in key)
    for i in range(10):
        lo0, hi0 = _mulhilo(_M0, c[0])
        lo1, hi1 = _mulhilo(_M1, c[2])
        c = [_b("stablehlo.xor", _b("stablehlo.xor", hi1, c[1]), k0), lo1,
             _b("stablehlo.xor", _b("stablehlo.xor", hi0, c[3]), k1), lo0]
        if i < 9:
            k0, k1 = hlo.add(k0, _k(_W0, k0)), hlo.add(k1, _k(_W1, k1))
    return c


def _seed_words(seed: Tensor, name: str) -> list[ir.Value]:
    """The two 64-bit seeds as four ui32 scalars (int32 seeds sign-extended, as TensorFlow)."""
    if tuple(seed.shape) != (2,):
        raise ValueError(f"{name}: seed must have shape [2], got {tuple(seed.shape)}")
    words = []
    for i in range(2):
        s = hlo.reshape(hlo.slice(seed.value, [i], [i + 1], [1]), [])
        if seed.dtype == dtypes.int32:
            lo = _bitcast(s, _u32())
            neg = hlo.compare(s, hlo.zeros(s.type), "LT")
            hi = hlo.select(neg, _k(0xFFFFFFFF, lo), _k(0, lo))
        else:
            u64 = _bitcast(s, ir.IntegerType.get_unsigned(64))
            lo = hlo.convert(_b("stablehlo.and", u64, hlo.splat(0xFFFFFFFF, u64.type)), _u32())
            hi = hlo.convert(_b("stablehlo.shift_right_logical", u64, hlo.splat(32, u64.type)), _u32())
        words += [lo, hi]
    return words


def _bitcast(x: ir.Value, et: ir.Type) -> ir.Value:
    return ir.Operation.create("stablehlo.bitcast_convert", results=[tensor_type(value_shape(x), et)],
                               operands=[x]).result


def _key_counter(seed: Tensor, name: str) -> tuple[list[ir.Value], list[ir.Value]]:
    """TensorFlow's ``StatelessRandomGetKeyCounter`` (Philox): (key, counter), ui32 scalars."""
    words = _seed_words(seed, name)
    mix = philox(words, [_k(_SEED_KEY[0], words[0]), _k(_SEED_KEY[1], words[0])])
    zero = _k(0, words[0])
    return [mix[0], mix[1]], [zero, zero, mix[2], mix[3]]


def _blocks(key, counter, offsets: ir.Value) -> list[ir.Value]:
    """Philox blocks at ``counter + offsets`` (ui32 offsets, the 128-bit counter carried)."""
    base = [hlo.broadcast_in_dim(c, value_shape(offsets), []) for c in counter]
    c0 = hlo.add(base[0], offsets)
    carry = hlo.compare(c0, base[0], "LT")
    words = [c0]
    for w in base[1:]:
        nxt = hlo.add(w, hlo.select(carry, _k(1, w), _k(0, w)))
        carry = hlo.binary("stablehlo.and", carry, hlo.compare(nxt, _k(0, nxt), "EQ"))
        words.append(nxt)
    return philox(words, key)


def _stream(key, counter, n_blocks: int, first: int = 0, stride: int = 1) -> ir.Value:
    """``[n_blocks, 4]`` words of blocks ``first + stride·g``."""
    g = hlo.iota([n_blocks], _u32(), 0)
    if stride != 1:
        g = hlo.multiply(g, _k(stride, g))
    if first:
        g = hlo.add(g, _k(first, g))
    out = _blocks(key, counter, g)
    return hlo.concatenate([hlo.reshape(w, [n_blocks, 1]) for w in out], 1)


def _unit(words_hi: ir.Value, words_lo: ir.Value | None, et: ir.Type) -> ir.Value:
    """TensorFlow's ``Uint32ToFloat`` (23 mantissa bits) or ``Uint64ToDouble`` (52): [0, 1)."""
    if words_lo is None:
        m = _b("stablehlo.and", words_hi, _k(0x7FFFFF, words_hi))
        return hlo.multiply(hlo.convert(m, et), hlo.like(2.0 ** -23, hlo.convert(m, et)))
    hi = hlo.convert(_b("stablehlo.and", words_hi, _k(0xFFFFF, words_hi)), et)
    lo = hlo.convert(words_lo, et)
    return hlo.multiply(hlo.add(hlo.multiply(hi, hlo.like(2.0 ** 32, hi)), lo), hlo.like(2.0 ** -52, hi))


def _shape_list(shape, name: str) -> list[int]:
    if isinstance(shape, Tensor):
        raise TypeError(f"{name}: shape must be a list of Python ints (irgrad traces static shapes)")
    dims = [int(d) for d in (np.asarray(shape).reshape(-1).tolist() if not isinstance(shape, (list, tuple))
                             else shape)]
    if any(d < 0 for d in dims):
        raise ValueError(f"{name}: negative dimension in shape {dims}")
    return dims


def _seed(seed, name: str) -> Tensor:
    s = convert_to_tensor(seed)
    if s.dtype not in (dtypes.int32, dtypes.int64):
        raise TypeError(f"{name}: seed must be int32 or int64, got {s.dtype.name}")
    return s


def _float_dtype(dtype, name: str, allowed=(dtypes.float32, dtypes.float64)) -> dtypes.DType:
    dt = dtypes.as_dtype(dtype)
    if dt not in allowed:
        raise TypeError(f"{name}: dtype must be one of {', '.join(d.name for d in allowed)}, got {dt.name}")
    return dt


def _words(seed: Tensor, count: int, name: str) -> ir.Value:
    """The first ``count`` words of the seed's stream, flat."""
    key, counter = _key_counter(seed, name)
    blocks = max(1, -(-count // 4))
    flat = hlo.reshape(_stream(key, counter, blocks), [4 * blocks])
    return hlo.slice(flat, [0], [count], [1])


def _uniform_values(seed: Tensor, dims: list[int], dt: dtypes.DType, name: str) -> ir.Value:
    n = int(np.prod(dims, dtype=np.int64))
    et = element_type(dt.name)
    if dt == dtypes.float32:
        u = _unit(_words(seed, max(n, 1), name), None, et)
    else:
        w = hlo.reshape(_words(seed, 2 * max(n, 1), name), [max(n, 1), 2])
        u = _unit(hlo.reshape(hlo.slice(w, [0, 0], [max(n, 1), 1], [1, 1]), [max(n, 1)]),
                  hlo.reshape(hlo.slice(w, [0, 1], [max(n, 1), 2], [1, 1]), [max(n, 1)]), et)
    return hlo.reshape(hlo.slice(u, [0], [n], [1]), dims)


def stateless_uniform(shape, seed, minval=0, maxval=None, dtype=dtypes.float32, name=None, alg="auto_select") -> Tensor:
    """Uniform values in ``[minval, maxval)`` (``tf.random.stateless_uniform``), the same for the
    same ``seed`` (shape ``[2]``, int32 or int64): TensorFlow's numbers, bit for bit.

    Floats: ``maxval`` defaults to 1, ``u · (maxval - minval) + minval``. int32: ``minval`` and
    ``maxval`` required, ``minval + word mod (maxval - minval)`` (TensorFlow's rule, slightly
    biased). Not differentiable.
    """
    name = name or "stateless_random_uniform"
    if alg not in ("auto_select", "philox", None):
        raise ValueError(f"{name}: alg {alg!r} is not supported (irgrad implements TensorFlow's Philox)")
    dt = dtypes.as_dtype(dtype)
    dims = _shape_list(shape, name)
    s = _seed(seed, name)
    if dt == dtypes.int32:
        if maxval is None:
            raise ValueError(f"{name}: an integer dtype needs both minval and maxval")
        lo, hi = convert_to_tensor(minval, dt), convert_to_tensor(maxval, dt)
        n = int(np.prod(dims, dtype=np.int64))

        def ints():
            w = _words(s, max(n, 1), name)
            span = _bitcast(hlo.subtract(hi.value, lo.value), _u32())
            r = hlo.binary("stablehlo.remainder", w, hlo.broadcast_in_dim(span, value_shape(w), []))
            v = hlo.add(hlo.broadcast_in_dim(lo.value, value_shape(w), []), _bitcast(r, element_type("int32")))
            return hlo.reshape(hlo.slice(v, [0], [n], [1]), dims)

        return emit(name, ints)
    dt = _float_dtype(dt, name)
    lo = convert_to_tensor(minval, dt)
    hi = convert_to_tensor(1 if maxval is None else maxval, dt)

    def build():
        u = _uniform_values(s, dims, dt, name)
        span = hlo.broadcast_in_dim(hlo.subtract(hi.value, lo.value), dims, []) if not value_shape(hi.value) \
            else hlo.subtract(hi.value, lo.value)
        low = hlo.broadcast_in_dim(lo.value, dims, []) if not value_shape(lo.value) else lo.value
        return hlo.add(hlo.multiply(u, span), low)

    return emit(name, build)


def _box_muller(u1: ir.Value, u2: ir.Value) -> tuple[ir.Value, ir.Value]:
    """TensorFlow's BoxMuller: ``u1`` at least 1e-7, ``r = √(-2 log u1)``, ``(r sin 2πu2, r cos 2πu2)``."""
    u1 = hlo.binary("stablehlo.maximum", u1, hlo.like(1e-7, u1))
    v = hlo.multiply(hlo.like(2 * math.pi, u2), u2)
    r = hlo.unary("stablehlo.sqrt", hlo.multiply(hlo.like(-2.0, u1), hlo.unary("stablehlo.log", u1)))
    return hlo.multiply(hlo.unary("stablehlo.sine", v), r), hlo.multiply(hlo.unary("stablehlo.cosine", v), r)


def _normals(words: ir.Value, dt: dtypes.DType) -> ir.Value:
    """``words [..., 4]`` -> TensorFlow's normals of one Philox block: ``[..., 4]`` (float32)
    or ``[..., 2]`` (float64)."""
    et = element_type(dt.name)
    lead = value_shape(words)[:-1]
    r = len(lead)

    def word(i):
        return hlo.reshape(hlo.slice(words, [0] * r + [i], [*lead, i + 1], [1] * (r + 1)), lead)

    if dt == dtypes.float32:
        pairs = [_box_muller(_unit(word(2 * p), None, et), _unit(word(2 * p + 1), None, et)) for p in (0, 1)]
        outs = [v for pair in pairs for v in pair]
    else:
        outs = list(_box_muller(_unit(word(0), word(1), et), _unit(word(2), word(3), et)))
    return hlo.concatenate([hlo.reshape(o, [*lead, 1]) for o in outs], r)


def _moments(x: ir.Value, mean: Tensor, stddev: Tensor, dims: list[int]) -> ir.Value:
    def full(t):
        return hlo.broadcast_in_dim(t.value, dims, []) if not value_shape(t.value) else t.value
    return hlo.add(hlo.multiply(x, full(stddev)), full(mean))


def _normal_args(shape, seed, mean, stddev, dtype, name: str):
    """(dtype, dims, seed, mean, stddev, element count, outputs per Philox block) of a normal op."""
    dt = _float_dtype(dtype, name)
    dims = _shape_list(shape, name)
    return (dt, dims, _seed(seed, name), convert_to_tensor(mean, dt), convert_to_tensor(stddev, dt),
            int(np.prod(dims, dtype=np.int64)), 4 if dt == dtypes.float32 else 2)


def stateless_normal(shape, seed, mean=0.0, stddev=1.0, dtype=dtypes.float32, name=None, alg="auto_select") -> Tensor:
    """Normal values (``tf.random.stateless_normal``): TensorFlow's Philox words and Box-Muller
    transform, ``x · stddev + mean``. float32 or float64. Not differentiable."""
    name = name or "stateless_random_normal"
    dt, dims, s, mu, sd, n, per = _normal_args(shape, seed, mean, stddev, dtype, name)

    def build():
        key, counter = _key_counter(s, name)
        blocks = max(1, -(-n // per))
        x = hlo.reshape(_normals(_stream(key, counter, blocks), dt), [per * blocks])
        return _moments(hlo.reshape(hlo.slice(x, [0], [n], [1]), dims), mu, sd, dims)

    return emit(name, build)


def stateless_truncated_normal(shape, seed, mean=0.0, stddev=1.0, dtype=dtypes.float32, name=None,
                               alg="auto_select") -> Tensor:
    """Normal values redrawn until within two standard deviations
    (``tf.random.stateless_truncated_normal``): TensorFlow's scheme, each group of 4 outputs
    (2 for float64) taking the first accepted candidates of its own 256 (128) Philox blocks;
    irgrad draws 3 blocks per group (12 or 6 candidates: a shortfall has probability below
    1e-9 per group, and leaves a 0). Not differentiable."""
    name = name or "stateless_truncated_normal"
    dt, dims, s, mu, sd, n, per = _normal_args(shape, seed, mean, stddev, dtype, name)
    draws = 3

    def build():
        key, counter = _key_counter(s, name)
        groups = max(1, -(-n // per))
        skip = _TRUNCATE_SKIP if dt == dtypes.float32 else _TRUNCATE_SKIP // 2
        g = hlo.multiply(hlo.iota([groups, draws], _u32(), 0), hlo.splat(skip, tensor_type([groups, draws], _u32())))
        off = hlo.add(g, hlo.iota([groups, draws], _u32(), 1))
        words = hlo.concatenate([hlo.reshape(w, [groups, draws, 1]) for w in _blocks(key, counter, off)], 2)
        cand = hlo.reshape(_normals(words, dt), [groups, draws * per])  # in the order TensorFlow draws them
        c = draws * per
        ok = hlo.compare(hlo.unary("stablehlo.abs", cand), hlo.like(2.0, cand), "LT")
        okf = hlo.select(ok, hlo.ones(cand.type), hlo.zeros(cand.type))
        upto = hlo.constant(np.triu(np.ones((c, c))).astype(dt.as_numpy_dtype), dt.name)  # inclusive prefix sums
        rank = hlo.dot_general(okf, upto, [], [], [1], [0])  # [groups, c]: accepted so far
        picks = []
        for k in range(per):
            hit = hlo.binary("stablehlo.and", ok, hlo.compare(rank, hlo.like(k + 1, rank), "EQ"))
            picks.append(hlo.reshape(hlo.reduce_sum(hlo.select(hit, cand, hlo.zeros(cand.type)), [1]), [groups, 1]))
        x = hlo.reshape(hlo.concatenate(picks, 1), [groups * per])
        return _moments(hlo.reshape(hlo.slice(x, [0], [n], [1]), dims), mu, sd, dims)

    return emit(name, build)


def stateless_categorical(logits, num_samples, seed, dtype=dtypes.int64, name=None) -> Tensor:
    """``num_samples`` class indices per row of ``logits [batch, classes]``
    (``tf.random.stateless_categorical``), drawn as TensorFlow's CPU kernel draws them: one
    stream of doubles (``Uint64ToDouble`` of word pairs) for the whole batch, row-major, each
    found in the row's unnormalised cumulative ``exp(logit - max)`` (non-finite logits never
    drawn). TF-compat: the sums are in the logits' dtype (TensorFlow: float64), so a draw
    within rounding of a boundary can differ for float32 logits, and TensorFlow splits very
    large batches into independently seeded shards. Not differentiable."""
    name = name or "stateless_categorical"
    x = convert_to_tensor(logits)
    if not x.dtype.is_floating or x.ndim != 2 or None in x.shape:
        raise ValueError(f"{name}: logits must be a static 2-D float tensor [batch, classes], got "
                         f"{x.dtype.name} {tuple(x.shape)}")
    out = dtypes.as_dtype(dtype)
    if out not in (dtypes.int32, dtypes.int64):
        raise TypeError(f"{name}: dtype must be int32 or int64, got {out.name}")
    if isinstance(num_samples, Tensor) or int(num_samples) < 0:
        raise TypeError(f"{name}: num_samples must be a non-negative Python int, got {num_samples!r}")
    ns = int(num_samples)
    b, c = x.shape
    s = _seed(seed, name)

    def build():
        et = x.value.type
        el = ir.RankedTensorType(et).element_type
        total = b * ns
        w = hlo.reshape(_words(s, 2 * max(total, 1), name), [max(total, 1), 2])
        hi = hlo.reshape(hlo.slice(w, [0, 0], [max(total, 1), 1], [1, 1]), [max(total, 1)])
        lo = hlo.reshape(hlo.slice(w, [0, 1], [max(total, 1), 2], [1, 1]), [max(total, 1)])
        u = hlo.reshape(hlo.slice(_unit(hi, lo, el), [0], [total], [1]), [b, ns])
        i1 = ir.IntegerType.get_signless(1)
        finite = ir.Operation.create("stablehlo.is_finite", results=[tensor_type([b, c], i1)],
                                     operands=[x.value]).result
        top = hlo.reduce(hlo.select(finite, x.value, hlo.like(-np.inf, x.value)), [1], "max")
        p = hlo.unary("stablehlo.exponential", hlo.subtract(x.value, hlo.broadcast_in_dim(top, [b, c], [0])))
        p = hlo.select(finite, p, hlo.zeros(et))
        upto = hlo.constant(np.triu(np.ones((c, c))).astype(x.dtype.as_numpy_dtype), x.dtype.name)
        cdf = hlo.dot_general(p, upto, [], [], [1], [0])  # [b, c]
        whole = hlo.reshape(hlo.slice(cdf, [0, c - 1], [b, c], [1, 1]), [b])
        find = hlo.multiply(u, hlo.broadcast_in_dim(whole, [b, ns], [0]))
        le = hlo.compare(hlo.broadcast_in_dim(cdf, [b, ns, c], [0, 2]), hlo.broadcast_in_dim(find, [b, ns, c], [0, 1]),
                         "LE")
        idx = hlo.reduce_sum(hlo.convert(le, element_type(out.name)), [2])
        return idx

    return emit(name, build)


__all__ = ["philox", "stateless_categorical", "stateless_normal", "stateless_truncated_normal", "stateless_uniform"]
