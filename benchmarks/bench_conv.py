"""Convolutions left to IREE against patches and ``dot_general``: is ``choices.py``'s pick the faster?

    .venv/bin/python benchmarks/bench_conv.py            # 19 shapes, 2 builds (about 2 minutes, 2 cores)
    .venv/bin/python benchmarks/bench_conv.py --quick    # 5 shapes, 1 build, few rounds (about 15 s)
    .venv/bin/python benchmarks/bench_conv.py --shapes 3x3_32_32_b64,1d_16_16

One module per shape: ``sum(tanh(conv(x, w)))``, one ``stablehlo.convolution`` (float32, padded to
keep the size at stride 1), differentiated by ``passes.differentiate(..., [0], with_value=True)``
(``main`` is the forward, ``main_grad`` the value and the gradient with respect to the input ``x``)
and compiled (llvm-cpu, ``cpu=host``) in each form, forced by setting ``choices.py``'s module
globals around the differentiation and the compile (both read them at call time):

* ``patches``: ``MIN_CONV_FEATURES`` and ``MIN_CONV_GRADIENT_FEATURES`` past any feature count:
  the forward as patches (or taps, ``choices.conv_by_taps``) and ``dot_general``, the input
  gradient as ``col2im(ct · wᵀ)`` (or taps), as before e22a2cd;
* ``IREE``: both 0 and ``IREE_CONV_NHWC_ONLY`` off: the forward stays ``stablehlo.convolution``
  and the input gradient is JAX's transposed convolution, in any layout, wherever the other
  conditions (one feature group, overlapping windows, ``conv_adjoint_by_matmul``) allow;
* the default (the constants as they are) is one of those two, or forward left to IREE and the
  input gradient on patches (``mixed``, measured too when the default picks it).

The form each artifact took is checked in the text IREE compiles (its convolutions counted per
function): a constant the rewrite did not read is an error, not a wrong table. Both forms' forward
value and gradient are compared (max |difference| / max |patches'|).

Timing (``bench_adjoint.py``'s method, see "Benchmarking IREE CPU code here" in the notes): every
program is compiled ``--builds`` times under module names of different lengths (the machine code
moves), warmed up, then timed in blocks of calls, all programs of a shape interleaved in a rotating
order; a time is the median over blocks, a ratio the median of ratios within blocks (patches ÷ IREE:
above 1, IREE's form is faster). Nothing asserts a time. Columns: the forward (``main``) and the
forward plus input gradient (``main_grad``) in ms, what the default picks (forward / gradient) and
whether it is the fastest form measured (else its time over the fastest's).
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_adjoint as ba  # noqa: E402  (also puts the source tree first on sys.path)

from irgrad import passes  # noqa: E402
from irgrad.passes.lowering import choices  # noqa: E402
from irgrad.runtime.compiler import for_iree  # noqa: E402

# The forms: (MIN_CONV_FEATURES, MIN_CONV_GRADIENT_FEATURES, IREE_CONV_NHWC_ONLY); None keeps choices.py's value.
NEVER = 1 << 62
FORMS = {"patches": (NEVER, NEVER, None), "IREE": (0, 0, False), "default": (None, None, None)}
# Dimension numbers per layout: [lhs]x[rhs]->[out].
LAYOUTS = {"nhwc": "[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]",
           "nchw": "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]",
           "nwc": "[b, 0, f]x[0, i, o]->[b, 0, f]"}


@dataclass(frozen=True)
class Shape:
    """One convolution: batch, spatial size (square, or a length for ``nwc``), input and output
    features, kernel size, stride and kernel dilation (``rhs_dilation``)."""

    name: str
    batch: int
    size: int
    cin: int
    cout: int
    k: int
    stride: int = 1
    dilation: int = 1
    layout: str = "nhwc"

    @property
    def rank(self) -> int:
        return 1 if self.layout == "nwc" else 2

    @property
    def label(self) -> str:
        spatial = "×".join([str(self.size)] * self.rank)
        kernel = "×".join([str(self.k)] * self.rank)
        extra = "".join([f" s{self.stride}" if self.stride > 1 else "",
                         f" d{self.dilation}" if self.dilation > 1 else "",
                         f" {self.layout.upper()}" if self.layout != "nhwc" else ""])
        return f"{self.batch}×{spatial} {kernel} {self.cin}→{self.cout}{extra}"

    def dims(self, kind: str) -> list[int]:
        """The shape of ``x``, ``w`` or ``y`` in this layout."""
        pad = self.dilation * (self.k - 1) // 2
        out = (self.size + 2 * pad - self.dilation * (self.k - 1) - 1) // self.stride + 1
        spatial = {"x": [self.size] * self.rank, "y": [out] * self.rank}
        if kind == "w":
            return [self.cout, self.cin, self.k, self.k] if self.layout == "nchw" else \
                [self.k] * self.rank + [self.cin, self.cout]
        features = self.cin if kind == "x" else self.cout
        return [self.batch, features, *spatial[kind]] if self.layout == "nchw" else \
            [self.batch, *spatial[kind], features]

    def module(self) -> str:
        x, w, y = (tensor(self.dims(kind)) for kind in "xwy")
        pad = self.dilation * (self.k - 1) // 2
        n = self.rank
        window = (f"stride = {[self.stride] * n}, pad = {[[pad, pad]] * n}, "
                  f"rhs_dilate = {[self.dilation] * n}")
        every = list(range(len(self.dims("y"))))
        return f"""module @conv {{
  func.func @main(%x: {x}, %w: {w}) -> tensor<f32> {{
    %y = stablehlo.convolution(%x, %w) dim_numbers = {LAYOUTS[self.layout]}, window = {{{window}}} \
{{batch_group_count = 1 : i64, feature_group_count = 1 : i64}} : ({x}, {w}) -> {y}
    %t = stablehlo.tanh %y : {y}
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %r = stablehlo.reduce(%t init: %z) applies stablehlo.add across dimensions = {every} : ({y}, tensor<f32>) \
-> tensor<f32>
    return %r : tensor<f32>
  }}
}}
"""

    def inputs(self) -> list[np.ndarray]:
        rng = np.random.default_rng(0)
        scale = 1.0 / np.sqrt(self.cin * self.k ** self.rank)
        return [rng.standard_normal(self.dims("x"), dtype=np.float32),
                (rng.standard_normal(self.dims("w"), dtype=np.float32) * scale).astype(np.float32)]


def tensor(dims: Sequence[int]) -> str:
    return f"tensor<{'x'.join(map(str, dims))}xf32>"


# sweep.sh's 13 NHWC shapes (batch, size, cin, cout, k, stride), then a 1-D one, three NCHW ones (PyTorch's
# layout, as torch-mlir exports it; two are NHWC rows above), a dilated one and a 7×7 stride-2 stem.
SHAPES = [Shape(f"{k}x{k}_{c}_{o}_b{b}_{h}{'_s2' if s > 1 else ''}", b, h, c, o, k, s)
          for b, h, c, o, k, s in [(8, 16, 32, 32, 3, 1), (64, 16, 32, 32, 3, 1), (16, 28, 1, 16, 3, 1),
                                   (16, 14, 16, 32, 3, 1), (8, 32, 16, 16, 3, 2), (8, 32, 3, 16, 3, 2),
                                   (32, 8, 64, 64, 3, 1), (8, 32, 64, 128, 3, 1), (4, 56, 64, 64, 3, 1),
                                   (8, 32, 16, 32, 5, 1), (8, 16, 32, 32, 3, 2), (64, 16, 8, 8, 3, 1),
                                   (8, 32, 3, 16, 3, 1)]]
SHAPES += [Shape("1d_16_16", 8, 1024, 16, 16, 5, layout="nwc"),
           Shape("nchw_32_32", 8, 16, 32, 32, 3, layout="nchw"),
           Shape("nchw_3_16", 8, 32, 3, 16, 3, layout="nchw"),
           Shape("nchw_64_64", 32, 8, 64, 64, 3, layout="nchw"),
           Shape("dilated_32_32", 8, 16, 32, 32, 3, dilation=2),
           Shape("stem_7x7_3_16", 8, 64, 3, 16, 7, stride=2)]
QUICK = ("3x3_32_32_b8_16", "3x3_1_16_b16_28", "3x3_3_16_b8_32", "1d_16_16", "nchw_32_32")


@contextmanager
def form(name: str) -> Iterator[None]:
    """``choices.py``'s thresholds and layout rule set for ``name`` (module globals, read at call time)."""
    names = ("MIN_CONV_FEATURES", "MIN_CONV_GRADIENT_FEATURES", "IREE_CONV_NHWC_ONLY")
    saved = [getattr(choices, n) for n in names]
    for n, old, new in zip(names, saved, FORMS[name]):
        setattr(choices, n, old if new is None else new)
    try:
        yield
    finally:
        for n, old in zip(names, saved):
            setattr(choices, n, old)


def conv_forms(legal: str) -> tuple[str, str]:
    """Which form the text IREE compiles took: (forward, input gradient), each ``IREE`` or
    ``patches``, from the ``stablehlo.convolution``s left in ``@main`` and ``@main_grad``."""
    bodies = dict(re.findall(r"func\.func (?:public |private )?@(\w+)\((.*?)\n  \}", legal, flags=re.S))
    in_main = bodies["main"].count("stablehlo.convolution")
    in_grad = bodies["main_grad"].count("stablehlo.convolution")
    forward = "IREE" if in_main else "patches"
    return forward, "IREE" if in_grad > in_main else "patches"


def form_label(forms: tuple[str, str]) -> str:
    return forms[0] if forms[0] == forms[1] else "mixed"


def build(shape: Shape, name: str) -> tuple[str, tuple[str, str]]:
    """``shape``'s differentiated module under form ``name``, and the forms it compiles to."""
    with form(name):
        text = passes.differentiate(shape.module(), "main", [0], with_value=True)
        return text, conv_forms(for_iree(text))


def compile_programs(shape: Shape, label: str, name: str, text: str, builds: int,
                     flags: Sequence[str]) -> list[ba.Program]:
    programs = []
    inputs = shape.inputs()
    for b in range(builds):
        with form(name):
            _, vmfb = ba.compile_timed(ba.with_module_name(text, ba.build_name(f"conv_{label}", b)), flags)
        programs += [ba.Program.load(f"{label} fwd", b, vmfb, "main", inputs),
                     ba.Program.load(f"{label} grad", b, vmfb, "main_grad", inputs)]
    return programs


def relative_difference(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> float:
    return max(float(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)).max()
                     / max(float(np.abs(np.asarray(w)).max()), 1e-30)) for g, w in zip(got, want))


def calls_for(programs: Sequence[ba.Program], block_seconds: float) -> int:
    """Calls per block: about ``block_seconds`` of the slowest program (1 to 50)."""
    slowest = 0.0
    for p in programs:
        p()
        start = time.perf_counter()
        p()
        slowest = max(slowest, time.perf_counter() - start)
    return max(1, min(50, round(block_seconds / max(slowest, 1e-6))))


def verdict(pick: str, times: dict[str, float]) -> str:
    best = min(times, key=lambda k: times[k])
    return "yes" if best == pick else f"no, {times[pick] / times[best]:.2f}× {best}"


def run_shape(shape: Shape, args: argparse.Namespace) -> str:
    texts, forms = {}, {}
    for name in FORMS:
        texts[name], forms[name] = build(shape, name)
    if forms["patches"] != ("patches", "patches"):
        raise SystemExit(f"{shape.name}: the patch form was not forced (compiled as {forms['patches']})")
    if forms["IREE"] != ("IREE", "IREE"):
        raise SystemExit(f"{shape.name}: IREE's form was not forced (compiled as {forms['IREE']})")
    default = form_label(forms["default"])
    measured = ["patches", "IREE"] + (["mixed"] if default == "mixed" else [])
    programs: list[ba.Program] = []
    for label in measured:
        name = "default" if label == "mixed" else label
        programs += compile_programs(shape, label, name, texts[name], args.builds, args.iree_flag)
    results = {p.label: p.results() for p in programs if p.build == 0}
    diff = max(relative_difference(results[f"{label} {part}"], results[f"patches {part}"])
               for label in measured[1:] for part in ("fwd", "grad"))
    calls = args.calls or calls_for(programs, args.block_ms / 1e3)
    timings = ba.run_interleaved(programs, args.rounds, calls)
    t = {p.label: timings.per_call(p.label) * 1e3 for p in programs if p.build == 0}
    cells = [shape.label]
    for part in ("fwd", "grad"):
        ratio, _ = timings.ratio(f"patches {part}", f"IREE {part}")
        cells += [f"{t[f'patches {part}']:.3f}", f"{t[f'IREE {part}']:.3f}", f"{ratio:.2f}"]
    cells.append(f"{forms['default'][0]} / {forms['default'][1]}")
    cells.append(verdict(forms["default"][0], {f: t[f"{f} fwd"] for f in ("patches", "IREE")}))
    cells.append(verdict(default, {f: t[f"{f} grad"] for f in measured}) +
                 (f" (mixed {t['mixed grad']:.3f})" if default == "mixed" else ""))
    cells.append(f"{diff:.1e}")
    return "| " + " | ".join(cells) + " |"


HEADER = ("| shape (NHWC unless said) | fwd patches ms | fwd IREE ms | patches/IREE | fwd+dx patches ms "
          "| fwd+dx IREE ms | patches/IREE | default picks (fwd / dx) | default fwd fastest? "
          "| default fwd+dx fastest? | max rel. diff |")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="5 shapes, one build, few rounds (a smoke run)")
    p.add_argument("--builds", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=0, help="calls per block (default: about --block-ms of the slowest)")
    p.add_argument("--block-ms", type=float, default=25.0)
    p.add_argument("--shapes", default=None, help="comma-separated names: " + ", ".join(s.name for s in SHAPES))
    p.add_argument("--iree-flag", action="append", default=[], help="extra iree-compile flag, repeatable")
    args = p.parse_args(argv)
    if args.quick:
        args.builds, args.rounds = 1, 3
    if min(args.builds, args.rounds) < 1 or args.calls < 0 or args.block_ms <= 0:
        p.error("--builds and --rounds must be at least 1, --calls at least 0, --block-ms positive")
    known = {s.name: s for s in SHAPES}
    names = args.shapes.split(",") if args.shapes else QUICK if args.quick else list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        p.error(f"unknown shape {', '.join(unknown)} (known: {', '.join(known)})")
    args.selected = [known[n] for n in names]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    print(f"irgrad convolution form benchmark{' (quick)' if args.quick else ''}: {args.builds} builds × "
          f"{args.rounds} rounds; default MIN_CONV_FEATURES={choices.MIN_CONV_FEATURES}, "
          f"MIN_CONV_GRADIENT_FEATURES={choices.MIN_CONV_GRADIENT_FEATURES}")
    print()
    print(HEADER)
    print("|" + "---|" * HEADER.count(" | ") + "---|")
    for shape in args.selected:
        print(run_shape(shape, args), flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
