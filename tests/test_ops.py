"""Forward correctness of irgrad's ops (CONTRACT section 1) against NumPy.

Every numeric check goes through a real trace -> StableHLO -> IREE compile ->
run via ``ig.function``. Compiles are the cost, so each test traces one
function that computes many ops at once (returning a dict/list) and the
parametrizations are over groups (dtype, broadcasting pattern, target), not
over single ops. Metadata (``.shape``, ``.dtype``, ``.name``, ``.op``) and
trace-time errors are checked without compiling.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import irgrad as ig

RNG = np.random.default_rng(1234)

F32_RTOL = 1e-6
F32_TRANSCENDENTAL_RTOL = 1e-5
F64_RTOL = 1e-12


# ----- helpers --------------------------------------------------------------------------

def check(got, want, rtol=None, atol=0.0, what=""):
    """Same dtype, same shape, and values equal (ints/bools) or close (floats)."""
    want = np.asarray(want)
    got_arr = np.asarray(got)
    assert isinstance(got, (np.ndarray, np.generic)), f"{what}: result is {type(got).__name__}, not numpy"
    assert got_arr.dtype == want.dtype, f"{what}: dtype {got_arr.dtype} != expected {want.dtype}"
    assert got_arr.shape == want.shape, f"{what}: shape {got_arr.shape} != expected {want.shape}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got_arr, want, err_msg=what)
    else:
        if rtol is None:
            rtol = F64_RTOL if want.dtype == np.float64 else F32_RTOL
        np.testing.assert_allclose(got_arr, want, rtol=rtol, atol=atol, err_msg=what)


def check_dict(got: dict, want: dict, rtol=None, atol=0.0, rtols: dict | None = None):
    assert isinstance(got, dict) and set(got) == set(want), (sorted(got), sorted(want))
    for k in want:
        r = (rtols or {}).get(k, rtol)
        check(got[k], want[k], rtol=r, atol=atol, what=k)


def uniform(shape, lo, hi, dtype):
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def randint(shape, lo, hi, dtype=np.int32):
    return RNG.integers(lo, hi, size=shape, endpoint=True).astype(dtype)


np_erf = np.vectorize(math.erf, otypes=[np.float64])


def np_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# ----- creation ops ---------------------------------------------------------------------

@ig.function
def _creation(x, xi):
    return {
        "constant_float": ig.constant(1.5),
        "constant_int": ig.constant([1, 2, 3]),
        "constant_bool": ig.constant([True, False]),
        "constant_nested": ig.constant([[1.0, 2.0], [3.0, 4.0]]),
        "constant_np_f64": ig.constant(np.array([0.5, 0.25])),
        "constant_dtype": ig.constant([1, 2], dtype=ig.float32),
        "constant_dtype_f64": ig.constant(2, dtype=ig.float64),
        "constant_fill_shape": ig.constant(7.0, shape=[2, 3]),
        "constant_reshape": ig.constant([1, 2, 3, 4, 5, 6], shape=(3, 2)),
        "ones": ig.ones([2, 3]),
        "ones_int": ig.ones((2,), dtype=ig.int32),
        "ones_scalar_shape": ig.ones([]),
        "zeros": ig.zeros([3, 1]),
        "zeros_f64": ig.zeros(4, dtype=ig.float64),
        "zeros_bool": ig.zeros([2], dtype=ig.bool),
        "ones_like": ig.ones_like(x),
        "zeros_like": ig.zeros_like(x),
        "ones_like_int": ig.ones_like(xi),
        "zeros_like_dtype": ig.zeros_like(x, dtype=ig.int32),
        "ones_like_dtype": ig.ones_like(xi, dtype=ig.float32),
        "fill_float": ig.fill([2, 2], 3.5),
        "fill_int": ig.fill((3,), 9),
        "fill_bool": ig.fill([2], True),
        "identity": ig.identity(x),
        "identity_int": ig.identity(xi),
    }


def test_creation_ops():
    x = uniform((2, 3), -1, 1, np.float32)
    xi = randint((4,), -5, 5)
    got = _creation(x, xi)
    want = {
        "constant_float": np.float32(1.5),
        "constant_int": np.array([1, 2, 3], np.int32),
        "constant_bool": np.array([True, False]),
        "constant_nested": np.array([[1, 2], [3, 4]], np.float32),
        "constant_np_f64": np.array([0.5, 0.25], np.float64),
        "constant_dtype": np.array([1, 2], np.float32),
        "constant_dtype_f64": np.float64(2),
        "constant_fill_shape": np.full((2, 3), 7, np.float32),
        "constant_reshape": np.arange(1, 7, dtype=np.int32).reshape(3, 2),
        "ones": np.ones((2, 3), np.float32),
        "ones_int": np.ones(2, np.int32),
        "ones_scalar_shape": np.float32(1),
        "zeros": np.zeros((3, 1), np.float32),
        "zeros_f64": np.zeros(4, np.float64),
        "zeros_bool": np.zeros(2, bool),
        "ones_like": np.ones_like(x),
        "zeros_like": np.zeros_like(x),
        "ones_like_int": np.ones_like(xi),
        "zeros_like_dtype": np.zeros((2, 3), np.int32),
        "ones_like_dtype": np.ones(4, np.float32),
        "fill_float": np.full((2, 2), 3.5, np.float32),
        "fill_int": np.full(3, 9, np.int32),
        "fill_bool": np.ones(2, bool),
        "identity": x,
        "identity_int": xi,
    }
    check_dict(got, want, rtol=0)


def test_creation_errors_and_dtypes():
    with ig.Graph().as_default():
        assert ig.constant(1.5).dtype == ig.float32
        assert ig.constant(3).dtype == ig.int32
        assert ig.constant(2 ** 40).dtype == ig.int64
        assert ig.constant(True).dtype == ig.bool
        assert ig.constant(np.float64(1.0)).dtype == ig.float64
        assert ig.constant([[1, 2, 3]]).shape == [1, 3]
        assert ig.fill([2, 3], 1.5).shape == [2, 3]
        assert ig.zeros([2, 3], ig.int32).dtype == ig.int32
        with pytest.raises(TypeError):
            ig.constant(1.5, dtype=ig.int32)
        with pytest.raises((TypeError, ValueError)):
            ig.constant([1, 2, 3], shape=[2, 2])
        with pytest.raises(ValueError):
            ig.zeros([2, -1])


# ----- cast ---------------------------------------------------------------------------

@ig.function
def _casts(xf, xi, xb):
    return {
        "f32_to_i32": ig.cast(xf, ig.int32),
        "f32_to_f64": ig.cast(xf, ig.float64),
        "f32_to_bool": ig.cast(xf, ig.bool),
        "f32_to_f32": ig.cast(xf, ig.float32),
        "i32_to_f32": ig.cast(xi, ig.float32),
        "i32_to_f64": ig.cast(xi, "float64"),
        "i32_to_bool": ig.cast(xi, ig.bool),
        "i32_to_i8": ig.cast(xi, ig.int8),
        "bool_to_f32": ig.cast(xb, ig.float32),
        "bool_to_i32": ig.cast(xb, np.int32),
    }


def test_cast():
    xf = np.array([-2.75, -1.5, -0.5, 0.0, 0.25, 1.7, 2.5, 3.0], np.float32)
    xi = np.array([-3, -1, 0, 1, 2, 5, 7, 100], np.int32)
    xb = np.array([True, False, True, True, False, False, True, False])
    got = _casts(xf, xi, xb)
    want = {
        "f32_to_i32": np.trunc(xf).astype(np.int32),   # toward zero, as TensorFlow
        "f32_to_f64": xf.astype(np.float64),
        "f32_to_bool": xf != 0,
        "f32_to_f32": xf,
        "i32_to_f32": xi.astype(np.float32),
        "i32_to_f64": xi.astype(np.float64),
        "i32_to_bool": xi != 0,
        "i32_to_i8": xi.astype(np.int8),
        "bool_to_f32": xb.astype(np.float32),
        "bool_to_i32": xb.astype(np.int32),
    }
    check_dict(got, want, rtol=0)


def test_cast_same_dtype_returns_input_and_sets_convert_op():
    with ig.Graph().as_default():
        x = ig.placeholder(ig.float32, [3], name="x")
        assert ig.cast(x, ig.float32) is x  # same dtype: the input itself, as tf.cast
        y = ig.cast(x, ig.int32)
        assert y.dtype == ig.int32 and y.shape == [3]
        assert y.op.type == "stablehlo.convert"


# ----- elementwise binary ops with broadcasting ------------------------------------------

BROADCAST_PAIRS = {
    "same": ((2, 3), (2, 3)),
    "scalar_tensor": ((), (2, 3)),
    "tensor_scalar": ((2, 3), ()),
    "col_row": ((3, 1), (1, 4)),
    "rank_extend_left": ((4,), (2, 3, 4)),
    "rank_extend_right": ((2, 3, 4), (3, 1)),
    "both_broadcast": ((2, 1, 4), (3, 1)),
}


def _binary_graph(x, y):
    return {
        "add": ig.add(x, y),
        "subtract": ig.subtract(x, y),
        "multiply": ig.multiply(x, y),
        "divide": ig.divide(x, y),
        "pow": ig.pow(x, y),
        "maximum": ig.maximum(x, y),
        "minimum": ig.minimum(x, y),
        "equal": ig.equal(x, y),
        "not_equal": ig.not_equal(x, y),
        "less": ig.less(x, y),
        "less_equal": ig.less_equal(x, y),
        "greater": ig.greater(x, y),
        "greater_equal": ig.greater_equal(x, y),
        "where": ig.where(ig.greater(x, y), x, y),
    }


@ig.function
def _binary_patterns(pairs):
    # One compile per dtype: every broadcasting pattern of every binary op.
    return {pattern: _binary_graph(x, y) for pattern, (x, y) in pairs.items()}


def _binary_inputs(dtype, sx, sy):
    if dtype == np.int32:
        return randint(sx, -4, 4), randint(sy, 1, 3)  # nonzero divisor, small non-negative exponent
    return uniform(sx, 0.5, 2.0, dtype), uniform(sy, 0.5, 2.0, dtype)  # positive base for pow


def _binary_expected(x, y):
    if x.dtype == np.int32:
        div = x.astype(np.float64) / y.astype(np.float64)  # TensorFlow truediv: int32 -> float64
    else:
        div = x / y
    return {
        "add": x + y, "subtract": x - y, "multiply": x * y, "divide": div,
        "pow": np.power(x, y), "maximum": np.maximum(x, y), "minimum": np.minimum(x, y),
        "equal": x == y, "not_equal": x != y, "less": x < y, "less_equal": x <= y,
        "greater": x > y, "greater_equal": x >= y, "where": np.where(x > y, x, y),
    }


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32], ids=["f32", "f64", "i32"])
def test_binary_ops_broadcast(dtype):
    """Every binary op and comparison, for each pattern of BROADCAST_PAIRS and one with ties."""
    pairs = {pattern: _binary_inputs(dtype, sx, sy) for pattern, (sx, sy) in BROADCAST_PAIRS.items()}
    if dtype == np.int32:
        pairs["ties"] = (np.array([1, 2, 3, 2, -1], dtype), np.array([1, 3, 2, 2, 1], dtype))
    else:
        pairs["ties"] = (np.array([1, 2, 3, 2, 0.5], dtype), np.array([1, 3, 2, 2, 0.5], dtype))
    got = _binary_patterns(pairs)
    assert set(got) == set(pairs)
    pow_rtol = 1e-5 if dtype == np.float32 else 1e-12
    for pattern, (x, y) in pairs.items():
        want = _binary_expected(x, y)
        assert set(got[pattern]) == set(want)
        for k in want:
            check(got[pattern][k], want[k], rtol=pow_rtol if k == "pow" else None, what=f"{pattern}/{k}")


def _pow_graph(x, y):
    return {"pow": ig.pow(x, y), "op": x ** y}


_pow_cpu = ig.function(_pow_graph)
_pow_vmvx = ig.function(_pow_graph, target="vmvx")

@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("target", ["llvm-cpu", "vmvx"])
def test_pow_negative_base_integral_exponent_and_zero_to_zero(target, dtype):
    x = np.array([-2.0, -2.0, -3.0, 0.0, 2.0, -0.5, 0.0], dtype)
    y = np.array([3.0, 2.0, 0.0, 0.0, -1.0, 2.0, 2.0], dtype)
    got = (_pow_cpu if target == "llvm-cpu" else _pow_vmvx)(x, y)
    want = np.power(x, y)
    check(got["pow"], want, rtol=1e-6, what="pow")
    check(got["op"], want, rtol=1e-6, what="**")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_full_sum_of_a_broadcast_product_compiles(dtype):
    """IREE 3.13 llvm-cpu rejects these valid programs ('vector.contract' op invalid
    accumulator/result vector shape); irgrad reshapes the reduced operand first."""
    @ig.function
    def f(x, w):
        return {"row_times_w": ig.reduce_sum(x[0] * w), "mean_times_x": ig.reduce_sum(ig.reduce_mean(x, 0) * x),
                "rank3": ig.reduce_sum(ig.expand_dims(x, 1) * ig.ones([2, 5, 2], x.dtype))}

    x = np.array([[0.5, -1.0], [2.0, 3.0]], dtype)
    w = np.arange(6, dtype=dtype).reshape(3, 2)
    got = f(x, w)
    check(got["row_times_w"], np.sum(x[0] * w), rtol=1e-6, what="sum(x[0] * w)")
    check(got["mean_times_x"], np.sum(x.mean(0) * x), rtol=1e-6, what="sum(mean(x, 0) * x)")
    check(got["rank3"], 5 * np.sum(x), rtol=1e-6, what="sum(x[:, None] * ones)")


WHERE_SHAPES = {"same": ((2, 3), (2, 3), (2, 3)), "c_col_x_row_y_scalar": ((3, 1), (1, 4), ()),
                "rank3": ((4,), (2, 1, 4), (3, 1)), "scalar_cond": ((), (2,), (2,)),
                "cond_widest": ((2, 3, 4), (4,), ())}


@ig.function
def _where_cases(cases):
    return {k: ig.where(c, x, y) for k, (c, x, y) in cases.items()}


def test_where_broadcasts_all_three():
    cases = {k: (np.asarray(RNG.random(sc) > 0.5), uniform(sx, -1, 1, np.float32),
                 uniform(sy, -1, 1, np.float32)) for k, (sc, sx, sy) in WHERE_SHAPES.items()}
    cases["int"] = (np.array([True, False, True]), np.array([1, 2, 3], np.int32), np.array([-1], np.int32))
    got = _where_cases(cases)
    check_dict(got, {k: np.where(c, x, y) for k, (c, x, y) in cases.items()}, rtol=0)


@ig.function
def _int_truediv(a, b):
    return {"divide": ig.divide(a, b), "op": a / b, "scalar": a / 2, "rscalar": 7 / b}


def test_truediv_of_ints_is_float64():
    a = np.array([7, -7, 1, 0], np.int32)
    b = np.array([2, 2, 3, 5], np.int32)
    got = _int_truediv(a, b)
    check(got["divide"], a.astype(np.float64) / b.astype(np.float64), what="divide")
    check(got["op"], a.astype(np.float64) / b.astype(np.float64), what="/")
    check(got["scalar"], a.astype(np.float64) / 2.0, what="a / 2")
    check(got["rscalar"], 7.0 / b.astype(np.float64), what="7 / b")


# ----- elementwise unary ops ------------------------------------------------------------

def _unary_graph(pos, sgn, with_sign=True):
    out = {
        "negative": ig.negative(sgn),
        "abs": ig.abs(sgn),
        "square": ig.square(sgn),
        "exp": ig.exp(sgn),
        "log": ig.log(pos),
        "log1p": ig.log1p(pos),
        "expm1": ig.expm1(sgn),
        "sqrt": ig.sqrt(pos),
        "rsqrt": ig.rsqrt(pos),
        "sin": ig.sin(sgn),
        "cos": ig.cos(sgn),
        "tanh": ig.tanh(sgn),
        "sigmoid": ig.sigmoid(sgn),
        "erf": ig.erf(sgn),
    }
    if with_sign:  # a static Python flag: vmvx cannot compile stablehlo.sign (see the xfail below)
        out["sign"] = ig.sign(sgn)
    return out


_unary_cpu = ig.function(_unary_graph)
_unary_vmvx = ig.function(_unary_graph, target="vmvx")


def _unary_expected(pos, sgn):
    p, s = pos.astype(np.float64), sgn.astype(np.float64)
    want = {
        "negative": -s, "abs": np.abs(s), "sign": np.sign(s), "square": s * s, "exp": np.exp(s),
        "log": np.log(p), "log1p": np.log1p(p), "expm1": np.expm1(s), "sqrt": np.sqrt(p),
        "rsqrt": 1 / np.sqrt(p), "sin": np.sin(s), "cos": np.cos(s), "tanh": np.tanh(s),
        "sigmoid": np_sigmoid(s), "erf": np_erf(s),
    }
    return {k: v.astype(pos.dtype) for k, v in want.items()}


@pytest.mark.parametrize("dtype,target", [(np.float32, "llvm-cpu"), (np.float64, "llvm-cpu"),
                                          (np.float64, "vmvx")], ids=["f32-cpu", "f64-cpu", "f64-vmvx"])
def test_unary_ops(dtype, target):
    pos = np.array([0.1, 0.5, 1.0, 2.0, 3.5, 1e-3], dtype)
    sgn = np.array([-3.0, -1.2, -0.3, 0.0, 0.7, 2.9], dtype)
    if target == "llvm-cpu":
        got = _unary_cpu(pos, sgn)
    else:
        got = _unary_vmvx(pos, sgn, with_sign=False)
    want = _unary_expected(pos, sgn)
    if target == "vmvx":
        del want["sign"]
    if dtype == np.float32:
        check_dict(got, want, rtol=F32_TRANSCENDENTAL_RTOL, atol=1e-6)
    else:
        check_dict(got, want, rtol=1e-10, atol=1e-14)


def test_log1p_expm1_accurate_for_tiny_inputs():
    # The point of log1p/expm1: no cancellation for |x| << 1 (log(1 + x) would give 0 here).
    pos = np.array([1e-7, 1e-6, 1e-5, 3e-8, 1e-4, 0.5], np.float32)
    sgn = np.array([-1e-7, 1e-7, -1e-5, 3e-8, 1e-4, -0.5], np.float32)
    got = _unary_cpu(pos, sgn)
    want = _unary_expected(pos, sgn)
    check(got["log1p"], want["log1p"], rtol=1e-5, what="log1p")
    check(got["expm1"], want["expm1"], rtol=1e-5, what="expm1")


def test_sigmoid_tanh_saturate():
    pos = np.ones(4, np.float32)
    sgn = np.array([-30.0, -15.0, 15.0, 30.0], np.float32)
    got = _unary_cpu(pos, sgn)
    want = _unary_expected(pos, sgn)
    check(got["sigmoid"], want["sigmoid"], rtol=1e-5, atol=1e-12, what="sigmoid")
    check(got["tanh"], want["tanh"], rtol=1e-6, what="tanh")
    assert np.all(np.isfinite(got["sigmoid"])) and np.all(np.isfinite(got["tanh"]))


@ig.function
def _int_unary(x):
    return {"negative": ig.negative(x), "abs": ig.abs(x), "sign": ig.sign(x), "square": ig.square(x),
            "neg_op": -x, "abs_builtin": abs(x)}


def test_int_unary_ops():
    x = np.array([[-5, -1, 0], [1, 3, 46340]], np.int32)
    got = _int_unary(x)
    want = {"negative": -x, "abs": np.abs(x), "sign": np.sign(x), "square": x * x, "neg_op": -x,
            "abs_builtin": np.abs(x)}
    check_dict(got, want)


@ig.function(target="vmvx")
def _sign_vmvx(x):
    return ig.sign(x)


@pytest.mark.xfail(reason="BUG: ig.sign of a float tensor does not compile for target vmvx (IREE cannot "
                          "legalize math.copysign); ig.function(lambda x: ig.sign(x), target='vmvx')"
                          "(np.ones(2, np.float32)) raises CompileError", strict=True)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_float_sign_on_vmvx(dtype):
    x = np.array([-2.5, 0.0, 3.0], dtype)
    check(_sign_vmvx(x), np.sign(x))


def test_int_sign_on_vmvx():
    x = np.array([-2, 0, 3], np.int32)
    check(_sign_vmvx(x), np.sign(x))


@pytest.mark.xfail(reason="BUG: float32 ig.sin on llvm-cpu is inaccurate for small negative inputs: "
                          "sin(-1e-7) -> -5.74e-08, sin(-1e-8) -> +6.23e-08 (wrong sign; absolute error "
                          "~1e-7, relative error up to 720%); positive inputs and vmvx are exact",
                   strict=True)
def test_sin_f32_small_negative_inputs():
    pos = np.ones(6, np.float32)
    sgn = np.array([-1e-8, -1e-7, -1e-6, -1e-5, -1e-4, -1e-3], np.float32)
    got = _unary_cpu(pos, sgn)
    check(got["sin"], np.sin(sgn.astype(np.float64)).astype(np.float32), rtol=1e-5, what="sin")


def test_sin_f32_small_positive_inputs():
    pos = np.ones(6, np.float32)
    sgn = np.array([1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3], np.float32)
    got = _unary_cpu(pos, sgn)
    check(got["sin"], np.sin(sgn.astype(np.float64)).astype(np.float32), rtol=1e-5, what="sin")
    check(got["tanh"], np.tanh(sgn.astype(np.float64)).astype(np.float32), rtol=1e-5, what="tanh")
    check(got["erf"], np_erf(sgn).astype(np.float32), rtol=1e-5, what="erf")


@pytest.mark.parametrize("target", [
    pytest.param("llvm-cpu", marks=pytest.mark.xfail(
        reason="BUG: float64 log1p/expm1 on llvm-cpu lose all precision for tiny inputs (computed as "
               "log(1 + x) / exp(x) - 1): ig.log1p(1e-12) -> 1.000089e-12, ig.log1p(1e-30) -> 0.0, "
               "ig.expm1(1e-20) -> 0.0 (float32 and vmvx are accurate)", strict=True)),
    "vmvx"])
def test_log1p_expm1_f64_tiny_inputs(target):
    pos = np.array([1e-30, 1e-12, 1e-9, 1e-7, 1e-5, 0.5])
    sgn = np.array([1e-20, -1e-12, 1e-9, -1e-7, 1e-5, -0.5])
    got = _unary_cpu(pos, sgn) if target == "llvm-cpu" else _unary_vmvx(pos, sgn, with_sign=False)
    check(got["log1p"], np.log1p(pos), rtol=1e-12, what="log1p")
    check(got["expm1"], np.expm1(sgn), rtol=1e-12, what="expm1")


@ig.function
def _special(x, y):
    return {"log": ig.log(x), "sqrt": ig.sqrt(x), "rsqrt": ig.rsqrt(x), "exp": ig.exp(y), "div": y / x,
            "max": ig.maximum(x, y), "min": ig.minimum(x, y), "tanh": ig.tanh(y), "sigmoid": ig.sigmoid(y),
            "sign": ig.sign(y), "expm1": ig.expm1(y), "abs": ig.abs(y)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_special_values_inf_nan(dtype):
    x = np.array([0, -1, np.inf, np.nan, 1, -0.0], dtype)
    y = np.array([1, 1, np.inf, 1, np.nan, -np.inf], dtype)
    got = _special(x, y)
    with np.errstate(all="ignore"):
        want = {"log": np.log(x), "sqrt": np.sqrt(x), "rsqrt": 1 / np.sqrt(x), "exp": np.exp(y), "div": y / x,
                "max": np.maximum(x, y), "min": np.minimum(x, y), "tanh": np.tanh(y),
                "sigmoid": np_sigmoid(y),
                "sign": np.sign(y), "expm1": np.expm1(y), "abs": np.abs(y)}
    check_dict(got, {k: v.astype(dtype) for k, v in want.items()}, rtol=1e-6)


@pytest.mark.parametrize("op", ["exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh",
                                "sigmoid", "erf"])
def test_float_only_unary_ops_reject_ints(op):
    with ig.Graph().as_default():
        x = ig.placeholder(ig.int32, [3], name="x")
        with pytest.raises(TypeError):
            getattr(ig, op)(x)


# ----- Python scalars, numpy operands and operators --------------------------------------

@ig.function
def _scalar_operands(x):
    return {
        "add": x + 1, "radd": 1 + x, "sub": x - 2, "rsub": 2 - x, "mul": x * 3, "rmul": 3 * x,
        "pow": x ** 2, "rpow": 2 ** x, "max": ig.maximum(x, 1), "min": ig.minimum(2, x),
        "lt": x < 1, "le": x <= 1, "gt": 1 < x, "ge": x >= 2, "eq": ig.equal(x, 1),
        "where": ig.where(x > 1, x, 0),
    }


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32], ids=["f32", "f64", "i32"])
def test_python_scalars_take_the_tensor_dtype(dtype):
    x = np.array([[0, 1, 2], [3, 4, 1]], dtype)
    got = _scalar_operands(x)
    c = lambda v: np.asarray(v, dtype)  # noqa: E731
    want = {
        "add": x + c(1), "radd": c(1) + x, "sub": x - c(2), "rsub": c(2) - x, "mul": x * c(3),
        "rmul": c(3) * x, "pow": x ** c(2), "rpow": c(2) ** x,
        "max": np.maximum(x, c(1)), "min": np.minimum(c(2), x), "lt": x < 1, "le": x <= 1, "gt": 1 < x,
        "ge": x >= 2, "eq": x == 1, "where": np.where(x > 1, x, c(0)),
    }
    check_dict(got, want)


@ig.function
def _float_scalar_operands(x):
    return {"add": x + 0.5, "rsub": 1.5 - x, "mul": 2.5 * x, "div": x / 4.0, "rdiv": 1.0 / x,
            "pow": x ** 0.5, "clip": ig.clip_by_value(x, 0.75, 2.5)}


def test_python_float_scalars_with_float_tensors():
    x = np.array([0.5, 1.0, 2.0, 4.0], np.float32)
    got = _float_scalar_operands(x)
    f = np.float32
    want = {"add": x + f(0.5), "rsub": f(1.5) - x, "mul": f(2.5) * x, "div": x / f(4), "rdiv": f(1) / x,
            "pow": np.sqrt(x), "clip": np.clip(x, f(0.75), f(2.5))}
    check_dict(got, want)


def test_python_float_with_int_tensor_is_a_type_error():
    with ig.Graph().as_default():
        x = ig.placeholder(ig.int32, [3], name="x")
        with pytest.raises(TypeError):
            x + 2.5
        with pytest.raises(TypeError):
            ig.multiply(0.1, x)


@ig.function
def _operators(x, y, m, n):
    return {
        "+": x + y, "-": x - y, "*": x * y, "/": x / y, "**": x ** y, "neg": -x, "@": m @ n,
        "<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y,
        "chain": (x + y) * (x - y) / y - -x ** 2,
    }


def test_tensor_operators():
    x = uniform((3, 2), 0.5, 2, np.float32)
    y = uniform((2,), 0.5, 2, np.float32)
    m = uniform((2, 3), -1, 1, np.float32)
    n = uniform((3, 4), -1, 1, np.float32)
    got = _operators(x, y, m, n)
    want = {
        "+": x + y, "-": x - y, "*": x * y, "/": x / y, "**": x ** y, "neg": -x, "@": m @ n,
        "<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y,
        "chain": (x + y) * (x - y) / y - -x ** 2,
    }
    check_dict(got, want, rtol=1e-5, rtols={"@": 1e-5})


@ig.function
def _numpy_operands(x):
    return {"radd": np.ones(3, np.float32) + x, "rmul": np.float32(2.0) * x,
            "sub": x - np.array([1.0, 2.0, 3.0], np.float32), "rlt": np.zeros(3, np.float32) < x}


def test_numpy_operands_defer_to_tensor_operators():
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    got = _numpy_operands(x)
    want = {"radd": 1 + x, "rmul": 2 * x, "sub": x - np.array([1, 2, 3], np.float32), "rlt": 0 < x}
    check_dict(got, want)


# ----- matmul -------------------------------------------------------------------------

@ig.function
def _matmuls(a, b, at, bt, ba, bb, bc, bd):
    return {
        "plain": ig.matmul(a, b),
        "transpose_a": ig.matmul(at, b, transpose_a=True),
        "transpose_b": ig.matmul(a, bt, transpose_b=True),
        "transpose_both": ig.matmul(at, bt, transpose_a=True, transpose_b=True),
        "batched": ig.matmul(ba, bb),
        "batched_transpose_b": ig.matmul(ba, ig.transpose(bb, [0, 2, 1]), transpose_b=True),
        "batch_broadcast": ig.matmul(bc, bd),
        "rank2_rank3": ig.matmul(a, bb),
        "rank3_rank2": ig.matmul(ba, b),
        "operator": a @ b,
    }


def _matmul_inputs(dtype):
    mk = (lambda s: randint(s, -3, 3)) if dtype == np.int32 else (lambda s: uniform(s, -1, 1, dtype))
    a, b = mk((2, 3)), mk((3, 4))
    return dict(a=a, b=b, at=np.ascontiguousarray(a.T), bt=np.ascontiguousarray(b.T), ba=mk((5, 2, 3)),
                bb=mk((5, 3, 4)), bc=mk((2, 1, 2, 3)), bd=mk((3, 3, 4)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32], ids=["f32", "f64", "i32"])
def test_matmul(dtype):
    i = _matmul_inputs(dtype)
    got = _matmuls(**i)
    a, b, ba, bb, bc, bd = i["a"], i["b"], i["ba"], i["bb"], i["bc"], i["bd"]
    want = {
        "plain": a @ b, "transpose_a": a @ b, "transpose_b": a @ b, "transpose_both": a @ b,
        "batched": ba @ bb, "batched_transpose_b": ba @ bb, "batch_broadcast": bc @ bd,
        "rank2_rank3": a @ bb, "rank3_rank2": ba @ b, "operator": a @ b,
    }
    assert got["batch_broadcast"].shape == (2, 3, 2, 4)
    check_dict(got, want, rtol=1e-5 if dtype == np.float32 else None, atol=1e-6 if dtype == np.float32 else 0)


def test_matmul_shape_metadata_and_errors():
    with ig.Graph().as_default():
        a = ig.placeholder(ig.float32, [2, 3], name="a")
        b = ig.placeholder(ig.float32, [4, 3], name="b")
        assert ig.matmul(a, b, transpose_b=True).shape == [2, 4]
        assert ig.matmul(a, b, transpose_b=True).op.type == "stablehlo.dot_general"
        with pytest.raises(ValueError) as e:
            ig.matmul(a, b)
        assert "(2, 3)" in str(e.value) and "(4, 3)" in str(e.value)
        c = ig.placeholder(ig.float32, [2, 3, 4], name="c")
        d = ig.placeholder(ig.float32, [3, 4, 5], name="d")
        with pytest.raises(ValueError):
            ig.matmul(c, d)  # batch dims 2 vs 3 do not broadcast


# ----- reductions ---------------------------------------------------------------------

REDUCE_AXES = [None, 0, 1, -1, -3, [0, 2], (-1, 0), [1], [], [0, 1, 2]]
REDUCERS = {"sum": (ig.reduce_sum, np.sum), "max": (ig.reduce_max, np.max), "min": (ig.reduce_min, np.min),
            "prod": (ig.reduce_prod, np.prod), "mean": (ig.reduce_mean, None)}


@ig.function
def _reductions(x):
    out = {}
    for name, (fn, _) in REDUCERS.items():
        for axis in REDUCE_AXES:
            for keepdims in (False, True):
                out[f"{name}/axis={axis}/keepdims={keepdims}"] = fn(x, axis=axis, keepdims=keepdims)
    out["sum_positional_axis"] = ig.reduce_sum(x, 1)
    out["mean_default"] = ig.reduce_mean(x)
    return out


def _np_reduce(name, x, axis, keepdims):
    ax = tuple(axis) if isinstance(axis, (list, tuple)) else axis
    if name == "mean":
        if x.dtype == np.int32:  # TensorFlow: integer sum / integer count, truncating
            s = np.sum(x.astype(np.int64), axis=ax, keepdims=keepdims)
            axes = range(x.ndim) if ax is None else [a % x.ndim for a in np.atleast_1d(ax).tolist()]
            n = int(np.prod([x.shape[a] for a in axes]))
            return np.asarray(np.trunc(s / n), np.int32)
        return np.asarray(np.mean(x, axis=ax, keepdims=keepdims), x.dtype)
    return np.asarray(REDUCERS[name][1](x, axis=ax, keepdims=keepdims), x.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32], ids=["f32", "f64", "i32"])
def test_reductions(dtype):
    if dtype == np.int32:
        x = randint((2, 3, 4), -2, 2)
        x[0, 0, 0] = -3  # make some integer means non-integral and negative
    else:
        x = uniform((2, 3, 4), 0.6, 1.4, dtype) * np.where(RNG.random((2, 3, 4)) > 0.5, 1, -1).astype(dtype)
    got = _reductions(x)
    want = {}
    for name in REDUCERS:
        for axis in REDUCE_AXES:
            for keepdims in (False, True):
                want[f"{name}/axis={axis}/keepdims={keepdims}"] = _np_reduce(name, x, axis, keepdims)
    want["sum_positional_axis"] = np.sum(x, axis=1).astype(dtype)
    want["mean_default"] = _np_reduce("mean", x, None, False)
    check_dict(got, want, rtol=1e-5 if dtype == np.float32 else None)


@ig.function
def _int_mean(x):
    return {"all": ig.reduce_mean(x), "axis0": ig.reduce_mean(x, axis=0)}


def test_integer_reduce_mean_truncates_toward_zero():
    x = np.array([[-3, 2], [-4, 5]], np.int32)
    got = _int_mean(x)
    check(got["all"], np.int32(0), what="all")           # 0 / 4
    check(got["axis0"], np.array([-3, 3], np.int32), what="axis0")  # -7/2 -> -3, 7/2 -> 3


def test_reduction_shapes_and_bad_axis():
    with ig.Graph().as_default():
        x = ig.placeholder(ig.float32, [2, 3, 4], name="x")
        assert ig.reduce_sum(x).shape == []
        assert ig.reduce_sum(x, axis=[0, -1], keepdims=True).shape == [1, 3, 1]
        assert ig.reduce_mean(x, axis=1).shape == [2, 4]
        assert ig.reduce_max(x, axis=-1).op.type == "stablehlo.reduce"
        with pytest.raises(ValueError):
            ig.reduce_sum(x, axis=3)
        with pytest.raises(ValueError):
            ig.reduce_sum(x, axis=-4)


# ----- shape manipulation -------------------------------------------------------------

@ig.function
def _shape_ops(x, y, z, w):
    # x: (2, 3, 4), y: (3, 1), z: (1, 3, 1, 2), w: (2, 3, 4)
    return {
        "reshape_flat": ig.reshape(x, [-1]),
        "reshape_minus1_last": ig.reshape(x, [4, -1]),
        "reshape_minus1_first": ig.reshape(x, (-1, 3, 2)),
        "reshape_full": ig.reshape(x, [6, 4]),
        "reshape_scalar": ig.reshape(ig.reduce_sum(y), [1, 1]),
        "reshape_to_scalar": ig.reshape(z[0, 0, 0, :1], []),
        "transpose_default": ig.transpose(x),
        "transpose_perm": ig.transpose(x, perm=[1, 0, 2]),
        "transpose_perm2": ig.transpose(x, [2, 0, 1]),
        "transpose_identity": ig.transpose(x, [0, 1, 2]),
        "broadcast_to": ig.broadcast_to(y, [2, 3, 4]),
        "broadcast_to_same": ig.broadcast_to(y, (3, 1)),
        "expand_dims_0": ig.expand_dims(y, 0),
        "expand_dims_1": ig.expand_dims(y, 1),
        "expand_dims_last": ig.expand_dims(y, -1),
        "expand_dims_neg_first": ig.expand_dims(y, -3),
        "squeeze_all": ig.squeeze(z),
        "squeeze_axis0": ig.squeeze(z, axis=0),
        "squeeze_axis_list": ig.squeeze(z, axis=[2]),
        "squeeze_neg": ig.squeeze(z, axis=-2),
        "squeeze_both": ig.squeeze(z, [0, 2]),
        "concat_0": ig.concat([x, w], 0),
        "concat_1": ig.concat([x, w, x], axis=1),
        "concat_neg": ig.concat([x, w], -1),
        "concat_single": ig.concat([x], 0),
        "stack_0": ig.stack([x, w]),
        "stack_1": ig.stack([x, w, x], axis=1),
        "stack_last": ig.stack([x, w], axis=3),
        "stack_neg1": ig.stack([x, w], axis=-1),
        "stack_neg_first": ig.stack([x, w], axis=-4),
        "slice": ig.slice(x, [0, 1, 1], [2, 2, 2]),
        "slice_minus1": ig.slice(x, [1, 0, 2], [-1, -1, -1]),
        "slice_mixed": ig.slice(x, [0, 2, 0], [1, -1, 3]),
        "unstack_0": ig.unstack(x)[1],
        "unstack_axis": ig.unstack(x, axis=2)[3],
    }


def _shape_expected(x, y, z, w):
    return {
        "reshape_flat": x.reshape(-1), "reshape_minus1_last": x.reshape(4, -1),
        "reshape_minus1_first": x.reshape(-1, 3, 2), "reshape_full": x.reshape(6, 4),
        "reshape_scalar": np.sum(y).reshape(1, 1).astype(y.dtype),
        "reshape_to_scalar": z[0, 0, 0, 0],
        "transpose_default": x.transpose(), "transpose_perm": x.transpose(1, 0, 2),
        "transpose_perm2": x.transpose(2, 0, 1), "transpose_identity": x,
        "broadcast_to": np.broadcast_to(y, (2, 3, 4)), "broadcast_to_same": y,
        "expand_dims_0": np.expand_dims(y, 0), "expand_dims_1": np.expand_dims(y, 1),
        "expand_dims_last": np.expand_dims(y, -1), "expand_dims_neg_first": np.expand_dims(y, -3),
        "squeeze_all": np.squeeze(z), "squeeze_axis0": np.squeeze(z, 0),
        "squeeze_axis_list": np.squeeze(z, 2),
        "squeeze_neg": np.squeeze(z, -2), "squeeze_both": np.squeeze(z, (0, 2)),
        "concat_0": np.concatenate([x, w], 0), "concat_1": np.concatenate([x, w, x], 1),
        "concat_neg": np.concatenate([x, w], -1), "concat_single": x,
        "stack_0": np.stack([x, w]), "stack_1": np.stack([x, w, x], 1), "stack_last": np.stack([x, w], 3),
        "stack_neg1": np.stack([x, w], -1), "stack_neg_first": np.stack([x, w], -4),
        "slice": x[0:2, 1:3, 1:3], "slice_minus1": x[1:, 0:, 2:], "slice_mixed": x[0:1, 2:, 0:3],
        "unstack_0": x[1], "unstack_axis": x[:, :, 3],
    }


@pytest.mark.parametrize("dtype", [np.float32, np.int32], ids=["f32", "i32"])
def test_shape_ops(dtype):
    x = np.arange(24).reshape(2, 3, 4).astype(dtype)
    y = np.array([[1], [2], [3]], dtype)
    z = np.arange(6).reshape(1, 3, 1, 2).astype(dtype)
    w = -np.arange(24).reshape(2, 3, 4).astype(dtype)
    got = _shape_ops(x, y, z, w)
    check_dict(got, _shape_expected(x, y, z, w), rtol=0)


@ig.function
def _bool_shape_ops(b):
    c = b[::-1]
    return {"reshape": ig.reshape(b, [-1]), "transpose": ig.transpose(b), "concat": ig.concat([b, b], 1),
            "stack": ig.stack([b, b], -1), "index": b[::-1, 1:], "where": ig.where(b, 1, 0),
            "equal": ig.equal(b, c), "not_equal": ig.not_equal(b, c), "equal_py": ig.equal(b, True),
            "where_bool": ig.where(b, c, False)}


def test_shape_ops_on_bool_tensors():
    b = np.array([[True, False, True], [False, False, True]])
    got = _bool_shape_ops(b)
    want = {"reshape": b.reshape(-1), "transpose": b.T, "concat": np.concatenate([b, b], 1),
            "stack": np.stack([b, b], -1), "index": b[::-1, 1:], "where": np.where(b, 1, 0).astype(np.int32),
            "equal": b == b[::-1], "not_equal": b != b[::-1], "equal_py": b == True,  # noqa: E712
            "where_bool": np.where(b, b[::-1], False)}
    check_dict(got, want)


def test_shape_op_static_shapes_and_errors():
    with ig.Graph().as_default():
        x = ig.placeholder(ig.float32, [2, 3, 4], name="x")
        assert ig.reshape(x, [-1, 4]).shape == [6, 4]
        assert ig.transpose(x).shape == [4, 3, 2]
        assert ig.expand_dims(x, -1).shape == [2, 3, 4, 1]
        assert ig.stack([x, x], axis=-1).shape == [2, 3, 4, 2]
        assert ig.concat([x, x], -2).shape == [2, 6, 4]
        assert ig.slice(x, [1, 1, 0], [-1, 2, -1]).shape == [1, 2, 4]
        assert ig.broadcast_to(ig.placeholder(ig.float32, [3, 1]), [2, 3, 5]).shape == [2, 3, 5]
        with pytest.raises(ValueError):
            ig.reshape(x, [5, -1])
        with pytest.raises(ValueError):
            ig.reshape(x, [-1, -1])
        with pytest.raises(ValueError):
            ig.squeeze(x, axis=0)
        with pytest.raises(ValueError):
            ig.transpose(x, [0, 0, 1])
        with pytest.raises(ValueError):
            ig.broadcast_to(x, [2, 5, 4])
        with pytest.raises(ValueError):
            ig.concat([x, ig.placeholder(ig.float32, [2, 4, 4])], 0)
        with pytest.raises(ValueError):
            ig.stack([x, ig.placeholder(ig.float32, [2, 3, 5])])
        with pytest.raises(ValueError):
            ig.slice(x, [0, 2, 0], [1, 2, 1])
        with pytest.raises(TypeError):
            ig.concat([x, ig.placeholder(ig.int32, [2, 3, 4])], 0)


@ig.function
def _scalar_shape_ops(s, v):
    # s: scalar, v: (3,)
    return {
        "expand_dims_0": ig.expand_dims(s, 0), "expand_dims_neg": ig.expand_dims(s, -1),
        "squeeze": ig.squeeze(s), "transpose": ig.transpose(s), "reshape_minus1": ig.reshape(s, [-1]),
        "reshape_3d": ig.reshape(s, [1, 1, -1]), "stack": ig.stack([s, s, s]), "stack_py": ig.stack([1.0, s]),
        "convert_list": ig.convert_to_tensor([s, 2.0]), "broadcast_to": ig.broadcast_to(s, [2, 2]),
        "reduce_sum": ig.reduce_sum(s), "reduce_mean_keepdims": ig.reduce_mean(s, keepdims=True),
        "transpose_1d": ig.transpose(v), "stack_1d_axis1": ig.stack([v, v], axis=1),
        "squeeze_tuple_axes": ig.squeeze(ig.reshape(v, [1, 3, 1]), axis=(0, -1)),
        "add_scalar_vector": s + v,
    }


def test_scalar_and_vector_shape_ops():
    s = np.float32(2.0)
    v = np.array([0.0, 1.0, 2.0], np.float32)
    got = _scalar_shape_ops(s, v)
    a = np.asarray(s)
    want = {
        "expand_dims_0": a.reshape(1), "expand_dims_neg": a.reshape(1), "squeeze": a, "transpose": a,
        "reshape_minus1": a.reshape(1), "reshape_3d": a.reshape(1, 1, 1), "stack": np.full(3, s),
        "stack_py": np.array([1, 2], np.float32), "convert_list": np.array([2, 2], np.float32),
        "broadcast_to": np.full((2, 2), s), "reduce_sum": a, "reduce_mean_keepdims": a,
        "transpose_1d": v, "stack_1d_axis1": np.stack([v, v], 1), "squeeze_tuple_axes": v,
        "add_scalar_vector": s + v,
    }
    check_dict(got, want, rtol=0)


RANK0_AXIS_CASES = {
    "reduce_sum": lambda s: ig.reduce_sum(s, axis=0),
    "reduce_max": lambda s: ig.reduce_max(s, axis=0),
    "reduce_mean": lambda s: ig.reduce_mean(s, axis=0),
    "concat": lambda s: ig.concat([s, s], 0),
    "squeeze": lambda s: ig.squeeze(s, axis=0),
    "unstack": lambda s: ig.unstack(s),
}


@pytest.mark.parametrize("case", list(RANK0_AXIS_CASES))
def test_axis_of_a_scalar_is_a_value_error(case):
    with ig.Graph().as_default():
        s = ig.placeholder(ig.float32, [], name="s")
        with pytest.raises(ValueError):
            RANK0_AXIS_CASES[case](s)


def test_axis_minus_one_of_a_scalar_is_a_value_error():
    with ig.Graph().as_default():
        s = ig.placeholder(ig.float32, [], name="s")
        with pytest.raises(ValueError):
            ig.reduce_sum(s, axis=-1)
        with pytest.raises(ValueError):
            ig.expand_dims(s, 1)


@ig.function
def _zero_size(x, y):
    # x: (0, 3), y: (1, 3)
    return {"add": x + y, "sum0": ig.reduce_sum(x, 0), "prod0": ig.reduce_prod(x, 0),
            "max0": ig.reduce_max(x, 0),
            "min0": ig.reduce_min(x, 0), "sum1": ig.reduce_sum(x, 1), "concat": ig.concat([x, y], 0),
            "slice": y[1:], "mean0": ig.reduce_mean(x, 0), "reshape": ig.reshape(x, [3, 0])}


def test_zero_size_tensors():
    x = np.zeros((0, 3), np.float32)
    y = np.array([[1.0, 2.0, 3.0]], np.float32)
    got = _zero_size(x, y)
    with np.errstate(all="ignore"):
        want = {"add": x + y, "sum0": np.zeros(3, np.float32), "prod0": np.ones(3, np.float32),
                "max0": np.full(3, -np.inf, np.float32), "min0": np.full(3, np.inf, np.float32),
                "sum1": np.zeros(0, np.float32), "concat": y, "slice": y[1:],
                "mean0": np.full(3, np.nan, np.float32), "reshape": x.reshape(3, 0)}
    check_dict(got, want)


@ig.function
def _matmul_empty_k(a, b):
    return ig.matmul(a, b)


def test_matmul_empty_contracting_dimension():
    a = np.zeros((2, 0), np.float32)
    b = np.zeros((0, 3), np.float32)
    check(_matmul_empty_k(a, b), np.zeros((2, 3), np.float32))


# ----- Python indexing ----------------------------------------------------------------

S = slice
INDEX_KEYS_3D = [
    1, -1, (0,), (1, 2), (-1, -2, -3), (0, 1, 5),
    S(None), S(1, 3), S(None, None, 2), S(None, None, -1), S(3, 0, -1), S(-1, None, -2), S(10, -10, -3),
    (S(None), 2), (S(None), S(None), S(1, 5, 2)), (S(None), S(None, None, -1), S(None, None, -2)),
    (Ellipsis, 0), (0, Ellipsis), (Ellipsis, S(None, None, -1)), (0, Ellipsis, -1), (Ellipsis,),
    (None,), (None, 0), (S(None), None, 1), (Ellipsis, None), (ig.newaxis, Ellipsis, ig.newaxis),
    (1, None, S(None, None, -1), None, S(2, 4)), (S(2, 2),), (S(0, 4, 5), Ellipsis, 0),
    (-2, S(-2, None), S(None, -3, -1)), (S(None, None, -3), -1, None, Ellipsis),
    S(None, None, 10), S(-100, 100), S(5, None), (S(None), S(None, None, -10)), (np.int64(1), np.int32(-1)),
    (S(1, None, -1), S(4, 1, -2), S(-1, -7, -4)),
]


@ig.function
def _index_3d(x):
    return [x[k] for k in INDEX_KEYS_3D]


@ig.function
def _index_small(v, s):
    # v: (5,), s: scalar
    return {"v_neg": v[-2], "v_rev": v[::-1], "v_step": v[4:0:-2], "v_newaxis": v[None, :, None],
            "v_empty": v[3:1], "s_ellipsis": s[...], "s_newaxis": s[None], "s_ellipsis_newaxis": s[..., None],
            "v_int_slice_chain": v[1:][::2][-1]}


def test_indexing_matches_numpy():
    x = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    got = _index_3d(x)
    assert isinstance(got, list) and len(got) == len(INDEX_KEYS_3D)
    for k, g in zip(INDEX_KEYS_3D, got):
        check(g, x[k], rtol=0, what=f"x[{k!r}]")


def test_indexing_small_and_scalar():
    v = np.arange(5, dtype=np.int32) * 10
    s = np.float32(3.5)
    got = _index_small(v, s)
    want = {"v_neg": v[-2], "v_rev": v[::-1], "v_step": v[4:0:-2], "v_newaxis": v[None, :, None],
            "v_empty": v[3:1], "s_ellipsis": np.asarray(s), "s_newaxis": np.asarray(s)[None],
            "s_ellipsis_newaxis": np.asarray(s)[..., None], "v_int_slice_chain": v[1:][::2][-1]}
    check_dict(got, want)


def test_newaxis_is_none():
    assert ig.newaxis is None


def test_indexing_errors():
    with ig.Graph().as_default():
        x = ig.placeholder(ig.float32, [4, 5], name="x")
        assert x[1].shape == [5] and x[:, ::2].shape == [4, 3] and x[None, ..., None].shape == [1, 4, 5, 1]
        with pytest.raises((ValueError, IndexError)):
            x[4]
        with pytest.raises((ValueError, IndexError)):
            x[0, -6]
        with pytest.raises((ValueError, IndexError)):
            x[0, 0, 0]
        with pytest.raises((ValueError, IndexError)):
            x[..., 0, ...]
        with pytest.raises(TypeError):
            x["a"]


# ----- clip_by_value, stop_gradient, identity -----------------------------------------

@ig.function
def _clip_etc(x, lo, hi, xi):
    return {
        "clip_scalar": ig.clip_by_value(x, -0.5, 0.5),
        "clip_tensor": ig.clip_by_value(x, lo, hi),
        "clip_int": ig.clip_by_value(xi, 0, 3),
        "stop_gradient": ig.stop_gradient(x),
        "stop_gradient_int": ig.stop_gradient(xi),
        "stop_gradient_expr": ig.stop_gradient(x * 2.0) + 1.0,
        "identity": ig.identity(x),
    }


def test_clip_stop_gradient_identity():
    x = uniform((2, 4), -1, 1, np.float32)
    lo = np.array([-0.8, -0.2, 0.0, -1.0], np.float32)
    hi = np.array([[0.1], [0.6]], np.float32)
    xi = np.array([[-2, 0, 2, 5], [1, 3, 4, -1]], np.int32)
    got = _clip_etc(x, lo, hi, xi)
    want = {
        "clip_scalar": np.clip(x, np.float32(-0.5), np.float32(0.5)),
        "clip_tensor": np.minimum(np.maximum(x, lo), hi),
        "clip_int": np.clip(xi, 0, 3).astype(np.int32),
        "stop_gradient": x, "stop_gradient_int": xi, "stop_gradient_expr": x * np.float32(2) + np.float32(1),
        "identity": x,
    }
    check_dict(got, want)


# ----- float16 smoke test ---------------------------------------------------------------

@ig.function
def _half(x, y):
    return {"add": x + y, "mul": x * y, "max": ig.maximum(x, y), "lt": x < y,
            "sum": ig.reduce_sum(x), "cast": ig.cast(x, ig.float32)}


def test_float16_arithmetic():
    x = np.array([0.5, 1.25, -2.0, 3.0], np.float16)
    y = np.array([1.0, -0.75, 0.5, 4.0], np.float16)
    got = _half(x, y)
    want = {"add": x + y, "mul": x * y, "max": np.maximum(x, y), "lt": x < y, "sum": np.sum(x),
            "cast": x.astype(np.float32)}
    check_dict(got, want, rtol=1e-3)


# ----- ig.math aliases ------------------------------------------------------------------

MATH_ALIASES = ["add", "subtract", "multiply", "divide", "pow", "negative", "abs", "sign", "exp", "log",
                "log1p", "expm1", "sqrt", "rsqrt", "square", "sin", "cos", "tanh", "sigmoid", "erf",
                "maximum", "minimum", "equal", "not_equal", "less", "less_equal", "greater",
                "greater_equal", "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod"]


@pytest.mark.parametrize("name", MATH_ALIASES)
def test_math_aliases(name):
    assert getattr(ig.math, name) is getattr(ig, name)


@ig.function
def _via_math(x):
    return {"log": ig.math.log(x), "sqrt": ig.math.sqrt(x), "tanh": ig.math.tanh(x),
            "sum": ig.math.reduce_sum(x, axis=0), "max": ig.math.maximum(x, 1.0)}


def test_math_aliases_run():
    x = uniform((3, 2), 0.5, 2, np.float32)
    got = _via_math(x)
    want = {"log": np.log(x), "sqrt": np.sqrt(x), "tanh": np.tanh(x), "sum": np.sum(x, 0),
            "max": np.maximum(x, np.float32(1))}
    check_dict(got, want, rtol=1e-5)


# ----- tensor and op metadata (no compile) ----------------------------------------------

OP_TYPES = [
    ("sin", lambda x, y: ig.sin(x), "stablehlo.sine"),
    ("cos", lambda x, y: ig.cos(x), "stablehlo.cosine"),
    ("tanh", lambda x, y: ig.tanh(x), "stablehlo.tanh"),
    ("sigmoid", lambda x, y: ig.sigmoid(x), "stablehlo.logistic"),
    ("exp", lambda x, y: ig.exp(x), "stablehlo.exponential"),
    ("log", lambda x, y: ig.log(x), "stablehlo.log"),
    ("log1p", lambda x, y: ig.log1p(x), "stablehlo.log_plus_one"),
    ("expm1", lambda x, y: ig.expm1(x), "stablehlo.exponential_minus_one"),
    ("sqrt", lambda x, y: ig.sqrt(x), "stablehlo.sqrt"),
    ("rsqrt", lambda x, y: ig.rsqrt(x), "stablehlo.rsqrt"),
    ("abs", lambda x, y: ig.abs(x), "stablehlo.abs"),
    ("sign", lambda x, y: ig.sign(x), "stablehlo.sign"),
    ("negative", lambda x, y: ig.negative(x), "stablehlo.negate"),
    ("neg_op", lambda x, y: -x, "stablehlo.negate"),
    ("erf", lambda x, y: ig.erf(x), "chlo.erf"),
    ("add", lambda x, y: ig.add(x, y), "stablehlo.add"),
    ("add_op", lambda x, y: x + y, "stablehlo.add"),
    ("subtract", lambda x, y: x - y, "stablehlo.subtract"),
    ("multiply", lambda x, y: x * y, "stablehlo.multiply"),
    ("divide", lambda x, y: x / y, "stablehlo.divide"),
    ("pow", lambda x, y: x ** y, "stablehlo.power"),
    ("maximum", lambda x, y: ig.maximum(x, y), "stablehlo.maximum"),
    ("minimum", lambda x, y: ig.minimum(x, y), "stablehlo.minimum"),
    ("less", lambda x, y: x < y, "stablehlo.compare"),
    ("equal", lambda x, y: ig.equal(x, y), "stablehlo.compare"),
    ("where", lambda x, y: ig.where(x < y, x, y), "stablehlo.select"),
    ("cast", lambda x, y: ig.cast(x, ig.int32), "stablehlo.convert"),
    ("constant", lambda x, y: ig.constant([1.0, 2.0]), "stablehlo.constant"),
    ("matmul", lambda x, y: ig.matmul(ig.reshape(x, [2, 3]), ig.reshape(y, [3, 2])), "stablehlo.dot_general"),
    ("reduce_sum", lambda x, y: ig.reduce_sum(x), "stablehlo.reduce"),
    ("transpose", lambda x, y: ig.transpose(ig.reshape(x, [2, 3])), "stablehlo.transpose"),
    ("reshape", lambda x, y: ig.reshape(x, [3, 2]), "stablehlo.reshape"),
    ("concat", lambda x, y: ig.concat([x, y], 0), "stablehlo.concatenate"),
    ("slice", lambda x, y: ig.slice(x, [1], [2]), "stablehlo.slice"),
    ("broadcast_to", lambda x, y: ig.broadcast_to(x, [2, 6]), "stablehlo.broadcast_in_dim"),
    ("clip_by_value", lambda x, y: ig.clip_by_value(x, 0.0, 1.0), "stablehlo.clamp"),
]


@pytest.mark.parametrize("name,build,op_type", OP_TYPES, ids=[t[0] for t in OP_TYPES])
def test_op_type_is_the_stablehlo_op(name, build, op_type):
    with ig.Graph().as_default():
        x = ig.placeholder(ig.float32, [6], name="x")
        y = ig.placeholder(ig.float32, [6], name="y")
        t = build(x, y)
        assert isinstance(t, ig.Tensor)
        assert t.op.type == op_type


def test_tensor_properties_and_op_graph():
    with ig.Graph().as_default() as g:
        x = ig.placeholder(ig.float32, [2, 3], name="x")
        y = ig.placeholder(ig.float32, [2, 3], name="y")
        assert x.shape == [2, 3] and x.shape == (2, 3) and isinstance(x.shape, ig.TensorShape)
        assert x.dtype == ig.float32 and x.dtype == "float32" and x.dtype == np.float32
        assert x.name == "x:0"
        assert x.op.type == "Placeholder"
        assert x.graph is g
        s = ig.add(x, y, name="my_sum")
        assert s.name == "my_sum:0" and s.op.name == "my_sum"
        s2 = ig.add(x, y, name="my_sum")
        assert s2.name != s.name and s2.name.startswith("my_sum")  # unique names, TF style ("my_sum_1")
        assert s.op.inputs == [x, y]
        assert s.op.outputs == [s]
        assert s.op.outputs[0].shape == [2, 3]
        c = x < y
        assert c.dtype == ig.bool and c.shape == [2, 3]
        assert "LT" in str(c.op.get_attr("comparison_direction"))
        i = ig.cast(x, ig.int32)
        assert i.dtype == ig.int32
        assert (i / i).dtype == ig.float64
        assert ig.divide(ig.cast(x, ig.int8), ig.cast(y, ig.int8)).dtype == ig.float32
        t = ig.transpose(x)
        assert t.op.get_attr("permutation") == [1, 0]
        cc = ig.concat([x, y], axis=1)
        assert cc.op.get_attr("dimension") == 1 and cc.shape == [2, 6]
        r = ig.reduce_sum(x, axis=-1)
        assert r.op.get_attr("dimensions") == [1] and r.shape == [2]
        sl = ig.slice(x, [0, 1], [2, 2])
        assert sl.op.get_attr("start_indices") == [0, 1] and sl.op.get_attr("limit_indices") == [2, 3]
        with pytest.raises(ValueError):
            s.op.get_attr("no_such_attribute")
        assert (x @ ig.transpose(y)).shape == [2, 2]
        assert ig.sin(x).op.type == "stablehlo.sine"
        assert ig.get_default_graph() is g


def test_ig_function_returns_structures():
    @ig.function
    def f(x):
        return {"t": (x, x + 1.0), "l": [x * 2.0], "none": None}

    x = np.array([1.0, 2.0], np.float32)
    out = f(x)
    assert isinstance(out, dict) and out["none"] is None
    assert isinstance(out["t"], tuple) and isinstance(out["l"], list)
    check(out["t"][1], x + 1, what="t[1]")
    check(out["l"][0], x * 2, what="l[0]")
    f(x + 1)
    assert f.trace_count == 1  # same signature: one trace, one compile


# ----- trace-time errors -------------------------------------------------------------

BINARY_FOR_ERRORS = ["add", "subtract", "multiply", "divide", "pow", "maximum", "minimum", "equal",
                     "not_equal", "less", "less_equal", "greater", "greater_equal"]


@pytest.mark.parametrize("op", BINARY_FOR_ERRORS)
def test_shape_mismatch_is_value_error_naming_shapes_and_op(op):
    @ig.function
    def f(x, y):
        return getattr(ig, op)(x, y)

    with pytest.raises(ValueError) as e:
        f(np.zeros((2, 3), np.float32), np.zeros((4,), np.float32))
    msg = str(e.value)
    assert "(2, 3)" in msg and "(4,)" in msg, msg
    assert op in msg or {"subtract": "sub", "multiply": "mul", "divide": "truediv"}.get(op, op) in msg, msg


@pytest.mark.parametrize("op", BINARY_FOR_ERRORS + ["matmul"])
def test_dtype_mismatch_is_type_error(op):
    @ig.function
    def f(x, y):
        return getattr(ig, op)(x, y)

    with pytest.raises(TypeError) as e:
        f(np.ones((2, 2), np.float32), np.ones((2, 2), np.int32))
    assert "float32" in str(e.value) and "int32" in str(e.value)


def test_dtype_mismatch_float32_float64_and_operators():
    @ig.function
    def f(x, y):
        return x + y

    with pytest.raises(TypeError):
        f(np.ones(2, np.float32), np.ones(2, np.float64))
    with ig.Graph().as_default():
        a = ig.placeholder(ig.float32, [2])
        b = ig.placeholder(ig.int32, [2])
        for fn in (lambda: a * b, lambda: a < b, lambda: a @ b, lambda: ig.where(a < 0, a, b),
                   lambda: a ** b, lambda: ig.concat([a, b], 0), lambda: ig.stack([a, b])):
            with pytest.raises(TypeError):
                fn()


def test_where_shape_mismatch_names_shapes():
    with ig.Graph().as_default():
        c = ig.placeholder(ig.bool, [2, 3])
        x = ig.placeholder(ig.float32, [4])
        with pytest.raises(ValueError) as e:
            ig.where(c, x, 0.0)
        assert "(2, 3)" in str(e.value) and "(4,)" in str(e.value) and "where" in str(e.value)
        with pytest.raises(TypeError):
            ig.where(ig.placeholder(ig.float32, [2, 3]), 1.0, 0.0)


def test_errors_reach_the_caller_unchanged_and_graph_stack_is_clean():
    @ig.function
    def f(x):
        return ig.reshape(x, [7])

    with pytest.raises(ValueError):
        f(np.zeros(6, np.float32))
    with pytest.raises(RuntimeError):  # the failed trace left no default graph behind
        ig.add(1.0, 2.0)


@pytest.mark.parametrize("call", [
    lambda: ig.add(1.0, 2.0),
    lambda: ig.constant([1.0, 2.0]),
    lambda: ig.sin(np.ones(3, np.float32)),
    lambda: ig.ones([2]),
    lambda: ig.reduce_sum(np.ones(3, np.float32)),
    lambda: ig.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32)),
    lambda: ig.get_default_graph(),
], ids=["add", "constant", "sin", "ones", "reduce_sum", "matmul", "get_default_graph"])
def test_ops_outside_a_graph_raise_runtime_error_saying_how_to_trace(call):
    with pytest.raises(RuntimeError) as e:
        call()
    assert "ig.function" in str(e.value) and "ig.Graph().as_default()" in str(e.value)
