"""``stablehlo.einsum`` and ``stablehlo.unary_einsum`` (issue 34, item 3): lowered to
diagonals, sums, ``dot_general`` and a transpose in the compile path (IREE 3.13 refuses
``unary_einsum``) and in the adjoint; forward values against numpy, gradients and
tangents through ``gradcheck.check_module``, batching through ``passes.vectorize``."""
from __future__ import annotations

import numpy as np
import pytest

import irgrad as ig
from irgrad import passes
from irgrad.passes.ir.mlir import IRError

from gradcheck import check_module


def _t(shape, dtype="f64") -> str:
    return f"tensor<{'x'.join(map(str, shape))}{'x' if len(shape) else ''}{dtype}>"


def _numpy_config(config: str) -> str:
    return config.lstrip(",")


def einsum_module(config: str, shapes, out) -> str:
    args = ", ".join(f"%x{k}: {_t(s)}" for k, s in enumerate(shapes))
    names = ", ".join(f"%x{k}" for k in range(len(shapes)))
    op = "stablehlo.einsum" if len(shapes) == 2 else "stablehlo.unary_einsum"
    types = ", ".join(_t(s) for s in shapes)
    return (f"func.func @f({args}) -> {_t(out)} {{\n"
            f"  %0 = \"{op}\"({names}) {{einsum_config = \"{config}\"}} : ({types}) -> {_t(out)}\n"
            f"  %1 = stablehlo.sine %0 : {_t(out)}\n  return %1 : {_t(out)}\n}}")


CASES = {
    "matmul": ("ab,bc->ac", [(2, 3), (3, 4)]),
    "batched_transposed_out": ("bij,bjk->kbi", [(2, 3, 4), (2, 4, 3)]),
    "outer": ("i,j->ij", [(3,), (2,)]),
    "dot": ("i,i->", [(4,), (4,)]),
    "summed_free_label": ("abc,cd->ad", [(2, 3, 4), (4, 2)]),
    "diagonal_both": ("ii,ij->ij", [(3, 3), (3, 2)]),
    "ellipsis": ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 2)]),
    "implicit_output": ("ij,jk", [(2, 3), (3, 4)]),
    "unary_sum": ("ab->b", [(3, 4)]),
    "unary_transpose": ("abc->cab", [(2, 3, 4)]),
    "unary_trace": ("ii->", [(3, 3)]),
    "unary_diagonal": ("iji->ij", [(3, 2, 3)]),
    "unary_comma_spelling": (",ab->ba", [(3, 2)]),
}


def _case(name):
    config, shapes = CASES[name]
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s) for s in shapes]
    expected = np.einsum(_numpy_config(config), *args)
    return einsum_module(config, shapes, expected.shape), args, expected


@pytest.mark.parametrize("name", sorted(CASES))
def test_einsum(name):
    text, args, expected = _case(name)
    np.testing.assert_allclose(ig.compile(text).load()["f"](*args), np.sin(expected), rtol=1e-12)
    check_module(text, args, what=name)


@pytest.mark.parametrize("name", ["matmul", "unary_trace", "diagonal_both"])
def test_batched(name):
    text, args, _ = _case(name)
    module = ig.compile(passes.vectorize(text, size=2)).load()
    rng = np.random.default_rng(1)
    batched = [np.stack([a, rng.standard_normal(a.shape)]) for a in args]
    got = module["f_batched"](*batched)
    for k in range(2):
        np.testing.assert_allclose(got[k], module["f"](*[b[k] for b in batched]), rtol=1e-12)


def test_second_order():
    text, args, _ = _case("batched_transposed_out")
    check_module(passes.differentiate(text), args, func="f_grad")


def test_integer_operands_with_a_wider_result_type():
    text = """func.func @f(%a: tensor<2x3xi8>, %b: tensor<3x2xi8>) -> tensor<2x2xi32> {
  %0 = "stablehlo.einsum"(%a, %b) {einsum_config = "ab,bc->ac"} : (tensor<2x3xi8>, tensor<3x2xi8>) -> tensor<2x2xi32>
  return %0 : tensor<2x2xi32>
}"""
    a = np.arange(6, dtype=np.int8).reshape(2, 3) * 20
    b = np.arange(6, dtype=np.int8).reshape(3, 2) * 20
    np.testing.assert_array_equal(ig.compile(text).load()["f"](a, b), a.astype(np.int32) @ b.astype(np.int32))


def test_bad_config_is_a_clear_error():
    text = einsum_module("ab,bc->ac", [(2, 3), (3, 4)], (2, 4)).replace('"ab,bc->ac"', '"ab,bd->ac"')
    with pytest.raises(IRError, match="stablehlo.einsum.*label 'c'|each output label"):
        passes.differentiate(text)
