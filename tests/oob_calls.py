"""Programs whose indices leave their operands, and a loop that calls them many times.

StableHLO defines these indices: ``gather`` and ``dynamic_slice`` clamp their starts into the
operand, ``dynamic_update_slice`` clamps the window it writes, ``scatter`` drops an update
whose window would leave the operand. IREE 3.13 checks none of them for scatter and some
gathers (``passes/lowering/bounds.py``): OpenXLA's testdata program
``scatter_add_float32_1_5_float32_1`` (``SCATTER_ADD_1X5`` below) wrote past a heap buffer
and the process aborted in ``free()`` after a few hundred calls (issue 40).

``CASES`` holds each program (StableHLO text over element type ``T``), its arguments, and
its results and gradient (of the sum of its results) worked out by hand. Run as a script,
this module compiles them with their gradients (``passes.differentiate``), loads the
artifact with ``ig.load`` and calls every function ``--calls`` times, checking every result;
``tests/test_out_of_bounds.py`` runs it in a child process under glibc's heap checks::

    LD_PRELOAD=libc_malloc_debug.so.0 MALLOC_CHECK_=3 MALLOC_PERTURB_=165 \\
        python tests/oob_calls.py --calls 10000 --device local-sync
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable

import numpy as np

ROWS = "update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1"
SINGLE = "inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1"
ELEMENTS = "inserted_window_dims = [0, 1], scatter_dims_to_operand_dims = [0, 1], index_vector_dim = 1"

# OpenXLA's testdata scatter_add_float32_1_5_float32_1 with its constants made arguments: index 10
# of a dimension of 5, implicit index vector (index_vector_dim 0 of a 1-D index).
SCATTER_ADD_1X5 = """
func.func public @scatter_add_1x5(%x: tensor<1x5xT>, %u: tensor<1xT>) -> tensor<1x5xT> {
  %c = stablehlo.constant dense<10> : tensor<1xi64>
  %0 = "stablehlo.scatter"(%x, %c, %u) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0],
      inserted_window_dims = [1], scatter_dims_to_operand_dims = [1]>}> ({
  ^bb0(%p: tensor<T>, %q: tensor<T>):
    %1 = stablehlo.add %p, %q : tensor<T>
    stablehlo.return %1 : tensor<T>
  }) : (tensor<1x5xT>, tensor<1xi64>, tensor<1xT>) -> tensor<1x5xT>
  return %0 : tensor<1x5xT>
}"""


def _scatter(name: str, x: str, i: str, u: str, dims: str, body: str, result: str = "%r") -> str:
    """@name(x, i, u) = scatter(x, i, u) with the update computation ``body`` over %p (the
    operand's value) and %q (the update), returning ``result``."""
    return f"""
func.func public @{name}(%x: tensor<{x}>, %i: tensor<{i}>, %u: tensor<{u}>) -> tensor<{x}> {{
  %0 = "stablehlo.scatter"(%x, %i, %u) <{{scatter_dimension_numbers = #stablehlo.scatter<{dims}>}}> ({{
  ^bb0(%p: tensor<T>, %q: tensor<T>):
    {body}
    stablehlo.return {result} : tensor<T>
  }}) : (tensor<{x}>, tensor<{i}>, tensor<{u}>) -> tensor<{x}>
  return %0 : tensor<{x}>
}}"""


def _gather(name: str, x: str, i: str, out: str, dims: str, sizes: str) -> str:
    """@name(x, i) = gather(x, i) (``dims``: the #stablehlo.gather fields, ``sizes`` its slice sizes)."""
    return f"""
func.func public @{name}(%x: tensor<{x}>, %i: tensor<{i}>) -> tensor<{out}> {{
  %0 = "stablehlo.gather"(%x, %i) <{{dimension_numbers = #stablehlo.gather<{dims}>,
      slice_sizes = array<i64: {sizes}>}}> : (tensor<{x}>, tensor<{i}>) -> tensor<{out}>
  return %0 : tensor<{out}>
}}"""


ELEMENT = "collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1"
GATHER_ELEMENTS = _gather("gather_elements", "5xT", "4x1xi32", "4xT", ELEMENT, "1")
GATHER_ROWS = _gather("gather_rows", "6x3xT", "3xi64", "3x2x3xT",
                      "offset_dims = [1, 2], start_index_map = [0], index_vector_dim = 1", "2, 3")
# An unsigned index past the signed range: clamped to the last start, not to 0.
GATHER_UNSIGNED = _gather("gather_unsigned", "5xT", "3xui32", "3xT", ELEMENT, "1")

DYNAMIC_SLICE = """
func.func public @dynamic_slice(%x: tensor<5xT>, %s: tensor<i32>) -> tensor<2xT> {
  %0 = stablehlo.dynamic_slice %x, %s, sizes = [2] : (tensor<5xT>, tensor<i32>) -> tensor<2xT>
  return %0 : tensor<2xT>
}"""

DYNAMIC_UPDATE_SLICE = """
func.func public @dynamic_update_slice(%x: tensor<5xT>, %u: tensor<2xT>, %s: tensor<i32>) -> tensor<5xT> {
  %0 = stablehlo.dynamic_update_slice %x, %u, %s : (tensor<5xT>, tensor<2xT>, tensor<i32>) -> tensor<5xT>
  return %0 : tensor<5xT>
}"""

ADD = "%r = stablehlo.add %p, %q : tensor<T>"
MAX = "%r = stablehlo.maximum %q, %p : tensor<T>"

# Row 7 and -2 of 6 leave the operand; so do the extremes of int32.
ROW_INDICES = np.array([[1], [7], [-2], [4]], np.int32)
WIDE_ROW_INDICES = np.array([[2147483647], [3], [-2147483648], [0]], np.int32)
ROWS_KEPT = np.array([1, 0, 0, 1])
ELEMENT_INDICES = np.array([[1, 2], [4, 0], [0, -1], [3, 3]], np.int32)  # of a 4x4 operand: rows 1 and 2 leave


def _rows(n: int, m: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, (n, m))


def _signed_zeros(x: np.ndarray) -> np.ndarray:
    """``x`` with -0.0 in the first and last rows, where a clamped dropped row update lands."""
    x = x.copy()
    x[0, 0] = x[-1, -1] = -0.0
    return x


def _kept_rows(indices: np.ndarray, rows: int) -> list[tuple[int, int]]:
    """(update row, operand row) of the updates a row scatter keeps."""
    return [(k, int(r)) for k, r in enumerate(indices[:, 0]) if 0 <= r < rows]


def _scatter_rows_add(x, i, u):
    y = x.copy()
    for k, r in _kept_rows(i, len(x)):
        y[r] += u[k]
    return [y]


def _scatter_rows_add_partial(x, i, u):
    y = x.copy()
    for k, r in _kept_rows(i, len(x)):
        y[r, :u.shape[1]] += u[k]
    return [y]


def _scatter_rows_set(x, i, u):
    y = x.copy()
    for k, r in _kept_rows(i, len(x)):
        y[r] = u[k]
    return [y]


def _scatter_elements_max(x, i, u):
    y = x.copy()
    for k, (r, c) in enumerate(i):
        if 0 <= r < x.shape[0] and 0 <= c < x.shape[1]:
            y[r, c] = max(y[r, c], u[k])
    return [y]


def _clamped(i, last):
    return np.clip(i, 0, last)


@dataclasses.dataclass(frozen=True)
class Case:
    """A program (``T`` for its float element type), its arguments (float ones in float64,
    cast to ``T``), its results and the gradient of their sum (one per float argument; None:
    forward only)."""

    name: str
    text: str
    args: tuple[np.ndarray, ...]
    results: Callable[..., list[np.ndarray]]
    grads: Callable[..., list[np.ndarray]] | None

    def arguments(self, dtype) -> list[np.ndarray]:
        return [a.astype(dtype) if a.dtype.kind == "f" else a for a in self.args]


def _written(x, i):
    """Ones where a row scatter keeps no update, zeros on the rows it writes."""
    d = np.ones_like(x)
    for _, r in _kept_rows(i, len(x)):
        d[r] = 0
    return d


def _max_grads(x, i, u):
    y = _scatter_elements_max(x, i, u)[0]
    du = np.array([1.0 if 0 <= r < x.shape[0] and 0 <= c < x.shape[1] and u[k] > x[r, c] else 0.0
                   for k, (r, c) in enumerate(i)])
    return [(y == x).astype(float), du]


def _gather_grad(x, i):
    return [np.bincount(_clamped(i[:, 0], len(x) - 1), minlength=len(x)).astype(float)]


def _gather_rows(x, i):
    return [np.stack([x[s:s + 2] for s in _clamped(i, len(x) - 2)])]


def _gather_rows_grad(x, i):
    d = np.zeros_like(x)
    for s in _clamped(i, len(x) - 2):
        d[s:s + 2] += 1
    return [d]


def _dus(x, u, s):
    y = x.copy()
    start = _clamped(int(s), len(x) - len(u))
    y[start:start + len(u)] = u
    return [y]


def _dus_grads(x, u, s):
    d = np.ones_like(x)
    start = _clamped(int(s), len(x) - len(u))
    d[start:start + len(u)] = 0
    return [d, np.ones_like(u)]


def _ds_grad(x, s):
    d = np.zeros_like(x)
    d[_clamped(int(s), len(x) - 2):][:2] = 1
    return [d]


MAX_X = np.array([[0.5, -1.0, 2.0, 0.25], [1.5, 0.0, -0.5, -2.0], [-1.0, 1.0, 0.75, -0.25], [2.0, 0.3, -0.7, 1.2]])

CASES = [
    Case("scatter_add_1x5", SCATTER_ADD_1X5, (_rows(1, 5, 0), np.array([3.40705895])),
         lambda x, u: [x], lambda x, u: [np.ones_like(x), np.zeros_like(u)]),
    Case("scatter_add_rows", _scatter("scatter_add_rows", "6x3xT", "4x1xi32", "4x3xT", ROWS, ADD),
         (_signed_zeros(_rows(6, 3, 1)), ROW_INDICES, _rows(4, 3, 2)), _scatter_rows_add,
         lambda x, i, u: [np.ones_like(x), np.repeat(ROWS_KEPT[:, None], 3, 1).astype(float)]),
    Case("scatter_add_extremes", _scatter("scatter_add_extremes", "6x3xT", "4x1xi32", "4x3xT", ROWS, ADD),
         (_rows(6, 3, 3), WIDE_ROW_INDICES, _rows(4, 3, 4)), _scatter_rows_add,
         lambda x, i, u: [np.ones_like(x), np.array([[0.0] * 3, [1.0] * 3, [0.0] * 3, [1.0] * 3])]),
    # A window partial along a dimension that is not indexed: IREE cannot lower it, and
    # scatter_by_elements sends the dropped windows to a spare slot itself.
    Case("scatter_add_partial", _scatter("scatter_add_partial", "6x3xT", "4x1xi32", "4x2xT", ROWS, ADD),
         (_rows(6, 3, 22), ROW_INDICES, _rows(4, 2, 23)), _scatter_rows_add_partial,
         lambda x, i, u: [np.ones_like(x), np.repeat(ROWS_KEPT[:, None], 2, 1).astype(float)]),
    # A replace has no identity update: the spare-slot form.
    Case("scatter_set_rows", _scatter("scatter_set_rows", "6x3xT", "4x1xi32", "4x3xT", ROWS, "", "%q"),
         (_rows(6, 3, 5), ROW_INDICES, _rows(4, 3, 6)), _scatter_rows_set,
         lambda x, i, u: [_written(x, i), np.repeat(ROWS_KEPT[:, None], 3, 1).astype(float)]),
    Case("scatter_max_elements", _scatter("scatter_max_elements", "4x4xT", "4x2xi32", "4xT", ELEMENTS, MAX),
         (MAX_X, ELEMENT_INDICES, np.array([1.0, 5.0, 7.0, 3.0])), _scatter_elements_max, _max_grads),
    Case("scatter_add_int", _scatter("scatter_add_int", "6x3xi32", "4x1xi32", "4x3xi32", ROWS,
                                     ADD.replace("<T>", "<i32>")).replace("tensor<T>", "tensor<i32>"),
         (np.arange(18, dtype=np.int32).reshape(6, 3), ROW_INDICES, np.full((4, 3), 100, np.int32)),
         _scatter_rows_add, None),
    # int8 indices into 300 elements: compared in i64, where the bounds fit.
    Case("scatter_add_narrow", _scatter("scatter_add_narrow", "300xT", "3x1xi8", "3xT", SINGLE, ADD),
         (_rows(1, 300, 20)[0], np.array([[-1], [5], [127]], np.int8), np.array([1.5, 2.5, 3.5])),
         lambda x, i, u: [_scatter_rows_add(x[:, None], i, u[:, None])[0][:, 0]],
         lambda x, i, u: [np.ones_like(x), np.array([0.0, 1.0, 1.0])]),
    Case("scatter_add_dynamic", _scatter("scatter_add_dynamic", "?x3xT", "4x1xi32", "4x3xT", ROWS, ADD),
         (_rows(6, 3, 11), ROW_INDICES, _rows(4, 3, 12)), _scatter_rows_add, None),
    Case("scatter_set_dynamic", _scatter("scatter_set_dynamic", "?x3xT", "4x1xi32", "4x3xT", ROWS, "", "%q"),
         (_rows(6, 3, 13), ROW_INDICES, _rows(4, 3, 14)), _scatter_rows_set, None),
    Case("gather_elements", GATHER_ELEMENTS, (_rows(1, 5, 15)[0], np.array([[7], [-3], [2], [1000000]], np.int32)),
         lambda x, i: [x[_clamped(i[:, 0], len(x) - 1)]], _gather_grad),
    Case("gather_unsigned", GATHER_UNSIGNED, (_rows(1, 5, 21)[0], np.array([4000000000, 1, 9], np.uint32)),
         lambda x, i: [x[[4, 1, 4]]], lambda x, i: [np.array([0.0, 1.0, 0.0, 0.0, 2.0])]),
    Case("gather_rows", GATHER_ROWS, (_rows(6, 3, 16), np.array([5, -9, 2], np.int64)), _gather_rows,
         _gather_rows_grad),
    Case("dynamic_slice", DYNAMIC_SLICE, (_rows(1, 5, 17)[0], np.array(7, np.int32)),
         lambda x, s: [x[_clamped(int(s), len(x) - 2):][:2]], _ds_grad),
    Case("dynamic_update_slice", DYNAMIC_UPDATE_SLICE, (_rows(1, 5, 18)[0], _rows(1, 2, 19)[0], np.array(-4, np.int32)),
         _dus, _dus_grads),
]


def module_text(dtype: str = "f32", names: list[str] | None = None) -> str:
    """The cases' functions (``names``: those only) in one module, ``T`` made ``dtype``."""
    text = "".join(case.text for case in CASES if names is None or case.name in names)
    return "module {" + text.replace("<T>", f"<{dtype}>").replace("xT>", f"x{dtype}>") + "\n}"


def with_gradients(text: str) -> str:
    """``text`` with ``@F_grad`` (the gradient of the sum of F's results) for every case that has one."""
    from irgrad import passes

    for case in CASES:
        if case.grads is not None:
            text = passes.differentiate(text, case.name)
    return text


def expected(case: Case, dtype) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """The case's results and gradients, computed in ``dtype`` (float arguments cast to it)."""
    args = case.arguments(dtype)

    def cast(a) -> np.ndarray:
        a = np.asarray(a)
        return a.astype(dtype) if a.dtype.kind == "f" else a

    results = [cast(r) for r in case.results(*args)]
    return results, None if case.grads is None else [cast(g) for g in case.grads(*args)]


def call_many(path: str, calls: int, device: str | None) -> int:
    """Loads the artifact at ``path`` and calls every case (and gradient) ``calls`` times,
    checking every result; plus ``ig.function`` over a gather and its gradient. Returns
    the number of calls made."""
    import irgrad as ig

    module = ig.load(path, device=device)
    plan = []
    for case in CASES:
        results, grads = expected(case, np.float32)
        args = case.arguments(np.float32)
        plan.append((module[case.name], args, results))
        if grads is not None:
            plan.append((module[f"{case.name}_grad"], args, grads))

    @ig.function
    def gathered(x, i):
        y = ig.gather(x, i) * 2.0
        return y, ig.gradients(y, [x])[0]

    x, i = np.arange(5, dtype=np.float32), np.array([7, -3, 2], np.int32)
    plan.append((gathered, [x, i], [np.array([8.0, 0.0, 4.0], np.float32), np.array([2, 0, 2, 0, 2], np.float32)]))
    made = 0
    for n in range(calls):
        for function, args, want in plan:
            got = function(*args)
            got = list(got) if isinstance(got, (tuple, list)) else [got]
            for g, w in zip(got, want, strict=True):
                g = np.asarray(g)
                if g.dtype != w.dtype or g.shape != w.shape or g.tobytes() != w.tobytes():  # -0.0 is not 0.0
                    raise AssertionError(f"call {n} of {getattr(function, 'name', 'gathered')}: {g!r}, expected {w!r}")
            made += 1
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10_000, help="calls of each function")
    parser.add_argument("--device", default=None, help="local-sync, local-task (default: ig.load's choice)")
    parser.add_argument("--artifact", default=None, help="a .vmfb of module_text() with_gradients (default: compile)")
    options = parser.parse_args(argv)
    path = options.artifact
    if path is None:
        import tempfile

        import irgrad as ig

        path = tempfile.mkdtemp(prefix="oob-") + "/oob.vmfb"
        ig.compile(with_gradients(module_text())).save(path)
    start = time.perf_counter()
    made = call_many(path, options.calls, options.device)
    print(f"{made} calls in {time.perf_counter() - start:.2f} s, every result right", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
