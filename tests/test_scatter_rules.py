"""Adjoint, tangent and batching rules of ``stablehlo.scatter`` with any update computation
(issue 34): add, subtract, multiply, divide, max/min, scaled and squared updates, constants,
replace with colliding indices (the winner IREE picked gets the cotangent), and general
regions under ``unique_indices``; plus the dimension-number layouts IREE 3.13 cannot compile
and irgrad rewrites (passes/lowering/legalize.py).

Every case goes through ``gradcheck.check_module``: float64 central differences of the
compiled forward against the compiled VJP and JVP."""
from __future__ import annotations

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes
from irgrad.passes.lowering.legalize import legalize_text
from irgrad.passes.transforms.registry import MissingAdjointError

from gradcheck import check_module

ROWS = "update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1"
ELEMENTS = "inserted_window_dims = [0, 1], scatter_dims_to_operand_dims = [0, 1], index_vector_dim = 1"


def _t(shape, dtype="f64") -> str:
    return f"tensor<{'x'.join(map(str, shape))}{'x' if len(shape) else ''}{dtype}>"


REGIONS = {
    "add": "%r = stablehlo.add %p, %q : tensor<f64>",
    "subtract": "%r = stablehlo.subtract %p, %q : tensor<f64>",
    "multiply": "%r = stablehlo.multiply %p, %q : tensor<f64>",
    "multiply_swapped": "%r = stablehlo.multiply %q, %p : tensor<f64>",
    "divide": "%r = stablehlo.divide %p, %q : tensor<f64>",
    "scaled": ("%c = stablehlo.constant dense<2.0> : tensor<f64>\n  %s = stablehlo.multiply %c, %q : tensor<f64>\n"
               "  %r = stablehlo.add %p, %s : tensor<f64>"),
    "squared": "%s = stablehlo.multiply %q, %q : tensor<f64>\n  %r = stablehlo.add %p, %s : tensor<f64>",
    "sine_times": "%s = stablehlo.sine %q : tensor<f64>\n  %r = stablehlo.multiply %p, %s : tensor<f64>",
    "max": "%r = stablehlo.maximum %p, %q : tensor<f64>",
    "min": "%r = stablehlo.minimum %q, %p : tensor<f64>",
    "constant": "%r = stablehlo.constant dense<3.0> : tensor<f64>",
    "replace": "%r = stablehlo.add %q, %q : tensor<f64>\n  %z = stablehlo.subtract %r, %q : tensor<f64>\n"
               "  %w = stablehlo.reshape %z : (tensor<f64>) -> tensor<f64>\n  %v = stablehlo.abs %w : tensor<f64>\n"
               "  %r2 = stablehlo.multiply %v, %q : tensor<f64>\n  %r3 = stablehlo.tanh %r2 : tensor<f64>",
    "keep": "%r = stablehlo.reshape %p : (tensor<f64>) -> tensor<f64>",
    "general": "%s = stablehlo.multiply %p, %q : tensor<f64>\n  %r = stablehlo.add %s, %q : tensor<f64>",
}


def _body(region: str) -> str:
    last = region.strip().split("\n")[-1].split("=")[0].strip()
    return f"^bb0(%p: tensor<f64>, %q: tensor<f64>):\n  {region}\n  stablehlo.return {last} : tensor<f64>"


def scatter_module(operand, indices, updates, dims, region, *, unique=False, indices_constant=None, square=True):
    """@f(a, [i,] u) = scatter(a, i, u)^2 (the square makes the cotangent vary by position)."""
    ta, ti, tu = _t(operand), _t(np.shape(indices), "i32"), _t(updates)
    extra = ", unique_indices = true" if unique else ""
    if indices_constant is None:
        sig, pre = f"%a: {ta}, %i: {ti}, %u: {tu}", ""
    else:
        values = ", ".join("[" + ", ".join(map(str, row)) + "]" for row in np.asarray(indices_constant))
        sig, pre = f"%a: {ta}, %u: {tu}", f"%i = stablehlo.constant dense<[{values}]> : {ti}\n  "
    tail = f"%1 = stablehlo.multiply %0, %0 : {ta}\n  return %1 : {ta}" if square else f"return %0 : {ta}"
    return (f"func.func @f({sig}) -> {ta} {{\n  {pre}%0 = \"stablehlo.scatter\"(%a, %i, %u) "
            f"<{{scatter_dimension_numbers = #stablehlo.scatter<{dims}>{extra}}}> ({{\n{_body(REGIONS[region])}\n}}) "
            f": ({ta}, {ti}, {tu}) -> {ta}\n  {tail}\n}}")


def normal(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


DUPLICATES = np.array([[1], [4], [1], [5], [1]], np.int32)


def _args(indices, operand=(6, 3), updates=(5, 3)):
    return [normal(*operand), indices, normal(*updates, seed=1)]


@pytest.mark.parametrize("region", ["add", "subtract", "multiply", "multiply_swapped", "divide", "scaled", "squared",
                                    "sine_times", "max", "min", "constant", "replace", "keep"])
def test_colliding_rows(region):
    """Three updates hit row 1: every form is exact whatever order they are applied in
    (replace: IREE's winner gets the cotangent)."""
    args = _args(DUPLICATES)
    if region in ("max", "min"):  # no ties: ties are checked apart
        args[2] = args[2] * 3
    check_module(scatter_module((6, 3), DUPLICATES, (5, 3), ROWS, region), args, what=region)


def test_multiply_with_zero_updates():
    """d u of a product scatter where one or two colliding factors are zero (no division by 0)."""
    u = normal(5, 3, seed=1)
    u[0, 0] = 0.0  # one zero among the three updates of row 1, column 0
    u[2, 1] = u[4, 1] = 0.0  # two zeros in column 1
    text = scatter_module((6, 3), DUPLICATES, (5, 3), ROWS, "multiply")
    check_module(text, [normal(6, 3), DUPLICATES, u])
    plain = scatter_module((6, 3), DUPLICATES, (5, 3), ROWS, "multiply", square=False)
    module = ig.compile(passes.differentiate(plain, vjp=True, grad=False)).load()
    a = normal(6, 3)
    da, du = module["f_vjp"](a, DUPLICATES, u, np.ones((6, 3)))
    # y[1] = a[1] u0 u2 u4: d u0[col 0] = a[1,0] u2[0] u4[0]; column 1 has two zeros: all 0.
    np.testing.assert_allclose(du[0, 0], a[1, 0] * u[2, 0] * u[4, 0])
    np.testing.assert_array_equal(du[[0, 2, 4], 1], 0.0)
    np.testing.assert_allclose(da[1], u[0] * u[2] * u[4])


def test_max_ties_share_the_cotangent():
    text = scatter_module((6, 3), DUPLICATES, (5, 3), ROWS, "max", square=False)
    module = ig.compile(passes.differentiate(text, vjp=True, grad=False)).load()
    a = np.zeros((6, 3))
    u = np.full((5, 3), -1.0)
    u[0] = u[2] = 2.0  # a tie of two updates at row 1
    da, du = module["f_vjp"](a, DUPLICATES, u, np.ones((6, 3)))
    np.testing.assert_allclose(du[[0, 2]], 0.5)
    np.testing.assert_allclose(du[[1, 3, 4]], 0.0)  # rows 4 and 5 keep a = 0 > -1
    np.testing.assert_allclose(da[1], 0.0)
    np.testing.assert_allclose(da[[0, 2, 3, 4, 5]], 1.0)


def test_element_scatter_collisions_2d_indices():
    indices = np.array([[0, 2], [3, 1], [0, 2], [0, 2]], np.int32)
    for region in ("multiply", "subtract", "replace"):
        check_module(scatter_module((4, 3), indices, (4,), ELEMENTS, region),
                     [normal(4, 3), indices, normal(4, seed=2)], what=region)


def test_general_region_needs_unique_indices():
    text = scatter_module((6, 3), DUPLICATES, (5, 3), ROWS, "general")
    with pytest.raises(MissingAdjointError, match="unique_indices"):
        passes.differentiate(text)


@pytest.mark.parametrize("how", ["attribute", "constant_indices"])
def test_general_region_unique(how):
    indices = np.array([[2], [0], [5]], np.int32)
    if how == "attribute":
        text = scatter_module((6, 3), indices, (3, 3), ROWS, "general", unique=True)
        args = [normal(6, 3), indices, normal(3, 3, seed=1)]
    else:
        text = scatter_module((6, 3), indices, (3, 3), ROWS, "general", indices_constant=indices)
        args = [normal(6, 3), normal(3, 3, seed=1)]
    check_module(text, args)


def test_replace_collisions_winner_matches_iree():
    """A replace-scatter with many collisions: the adjoint must be the derivative of what
    IREE computed (the last colliding update wins there; the ids scatter agrees)."""
    rng = np.random.default_rng(3)
    rows, n = 7, 200
    indices = rng.integers(0, rows, (n, 1)).astype(np.int32)
    text = scatter_module((rows, 3), indices, (n, 3), ROWS, "replace", square=False)
    module = ig.compile(passes.differentiate(text, vjp=True, grad=False, with_value=True)).load()
    a, u = normal(rows, 3), normal(n, 3, seed=4)
    y, da, du = module["f_vjp"](a, indices, u, np.ones((rows, 3)))
    last = {int(r): j for j, r in enumerate(indices[:, 0])}
    np.testing.assert_allclose(y, np.tanh(np.abs(u) * u)[[last[r] for r in range(rows)]])
    winners = np.zeros(n, bool)
    winners[list(last.values())] = True
    assert np.count_nonzero(du.any(axis=1)) == rows
    np.testing.assert_array_equal(du.any(axis=1), winners)
    np.testing.assert_array_equal(da, 0.0)
    check_module(text, [a, indices, u], directions=1)


def test_variadic_scatter_is_refused_clearly():
    t, ti = "tensor<4xf64>", "tensor<2x1xi32>"
    text = f"""func.func @f(%a: {t}, %b: {t}, %i: {ti}, %u: tensor<2xf64>, %v: tensor<2xf64>) -> {t} {{
  %0:2 = "stablehlo.scatter"(%a, %b, %i, %u, %v) <{{scatter_dimension_numbers = #stablehlo.scatter<
      inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}}> ({{
  ^bb0(%p: tensor<f64>, %q: tensor<f64>, %r: tensor<f64>, %s: tensor<f64>):
    %x = stablehlo.add %p, %r : tensor<f64>
    %y = stablehlo.add %q, %s : tensor<f64>
    stablehlo.return %x, %y : tensor<f64>, tensor<f64>
  }}) : ({t}, {t}, {ti}, tensor<2xf64>, tensor<2xf64>) -> ({t}, {t})
  return %0#0 : {t}
}}"""
    with pytest.raises(MissingAdjointError, match="stablehlo.scatter.*variadic"):
        passes.differentiate(text)


@pytest.mark.parametrize("region", ["multiply", "subtract", "replace", "max"])
def test_batched(region):
    """vectorize (@f_batched) of a scatter with this update computation matches the loop."""
    text = scatter_module((6, 3), DUPLICATES, (5, 3), ROWS, region)
    module = ig.compile(passes.vectorize(text, size=2)).load()
    xs = [normal(2, 6, 3), np.stack([DUPLICATES, DUPLICATES[::-1]]), normal(2, 5, 3, seed=5)]
    got = module["f_batched"](*xs)
    for k in range(2):
        np.testing.assert_allclose(got[k], module["f"](xs[0][k], xs[1][k], xs[2][k]), rtol=1e-12)


def test_second_order_multiply():
    text = scatter_module((6, 3), DUPLICATES, (5, 3), ROWS, "multiply")
    check_module(passes.differentiate(text), _args(DUPLICATES), func="f_grad")


# ----- layouts IREE 3.13 cannot compile (issue 34, item 6) ----------------------------------

def _reference(region, operand, indices, updates, dims):
    """numpy: the scatter applied update window by update window, in order (windows that
    would leave the operand dropped)."""
    combine = {"add": np.add, "multiply": np.multiply, "replace": lambda a, b: np.tanh(np.abs(b) * b)}[region]
    fields = {k.strip(): v.strip() for k, v in (f.split("=") for f in dims.replace("], ", "];").split(";"))}
    read = lambda k: [int(c) for c in fields.get(k, "[]").strip("[]").split(",") if c.strip()]  # noqa: E731
    uwd, iwd, sd, ivd = read("update_window_dims"), read("inserted_window_dims"), \
        read("scatter_dims_to_operand_dims"), int(fields["index_vector_dim"])
    y = operand.copy()
    scatter_dims = [i for i in range(updates.ndim) if i not in uwd]
    idx = indices if ivd < indices.ndim else indices[..., None]
    idx = np.moveaxis(idx, ivd, -1)
    window = [n for i, n in enumerate(updates.shape) if i in uwd]
    sizes, it = [], iter(window)
    for k in range(operand.ndim):
        sizes.append(1 if k in iwd else next(it))
    for pos in np.ndindex(*[updates.shape[i] for i in scatter_dims]):
        start = [0] * operand.ndim
        for j, k in enumerate(sd):
            start[k] = int(idx[pos][j])
        if any(s < 0 or s + z > n for s, z, n in zip(start, sizes, operand.shape)):
            continue
        for off in np.ndindex(*window):
            full, w = [], iter(off)
            for k in range(operand.ndim):
                full.append(start[k] + (0 if k in iwd else next(w)))
            u_index, p, w = [], iter(pos), iter(off)
            for i in range(updates.ndim):
                u_index.append(next(p) if i in scatter_dims else next(w))
            y[tuple(full)] = combine(y[tuple(full)], updates[tuple(u_index)])
    return y


REJECTED_LAYOUTS = {
    # the message: "shape of update value dim#2 must match original value at dim#1"
    "partial_leading_window": ((3, 6), [[4], [1], [4], [0]], (4, 2),
                               "update_window_dims = [1], inserted_window_dims = [1], "
                               "scatter_dims_to_operand_dims = [1], index_vector_dim = 1"),
    "partial_trailing_window": ((6, 3), [[4], [1], [4], [2]], (4, 2),
                                "update_window_dims = [1], inserted_window_dims = [0], "
                                "scatter_dims_to_operand_dims = [0], index_vector_dim = 1"),
    "wide_indexed_window": ((6, 3), [[4], [1], [3], [5]], (4, 2, 3),
                            "update_window_dims = [1, 2], scatter_dims_to_operand_dims = [0], index_vector_dim = 1"),
    "inserted_middle_partial": ((3, 6, 4), [[1], [5], [1]], (3, 3, 2),
                                "update_window_dims = [1, 2], inserted_window_dims = [1], "
                                "scatter_dims_to_operand_dims = [1], index_vector_dim = 1"),
    "window_first_two_indices": ((5, 4), [[1, 0], [3, 2], [1, 0]], (2, 3),
                                 "update_window_dims = [0], inserted_window_dims = [0], "
                                 "scatter_dims_to_operand_dims = [0, 1], index_vector_dim = 1"),
}


@pytest.mark.parametrize("region", ["add", "multiply", "replace"])
@pytest.mark.parametrize("name", sorted(REJECTED_LAYOUTS))
def test_layouts_iree_rejects_compile_and_differentiate(name, region):
    operand, indices, updates, dims = REJECTED_LAYOUTS[name]
    indices = np.array(indices, np.int32)
    text = scatter_module(operand, indices, updates, dims, region, square=False)
    assert legalize_text(text) != text  # rewritten for IREE
    a, u = normal(*operand), normal(*updates, seed=1)
    got = ig.compile(text).load()["f"](a, indices, u)
    np.testing.assert_allclose(got, _reference(region, a, indices, u, dims), rtol=1e-12)
    if region != "replace" or name == "partial_trailing_window":
        check_module(scatter_module(operand, indices, updates, dims, region), [a, indices, u], what=name)


def test_layouts_iree_compiles_are_left_alone():
    """Not flattened to single elements; with indices known only at run time, guarded against
    out-of-bounds ones (lowering/bounds.py, tests/test_out_of_bounds.py), the layout kept."""
    text = scatter_module((6, 3), DUPLICATES, (5, 3), ROWS, "add")
    legal = legalize_text(text)
    assert "update_window_dims = [1], inserted_window_dims = [0]" in legal and "tensor<19xf64>" not in legal
    constant = scatter_module((6, 3), DUPLICATES, (5, 3), ROWS, "add", indices_constant=DUPLICATES)
    assert legalize_text(constant) == constant
