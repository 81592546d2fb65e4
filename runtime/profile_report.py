"""A profile as data, and its report in the model's terms (``irgrad profile`` prints it).

``Profile.table()`` explains what a dispatch is, lists the dispatches slowest first, each with
what it computes (from IREE's name for it) and the model's ops it came from (their MLIR
locations, ``profile_sources``), and ends with where one call's time goes: inside the
dispatches, and IREE's per-call overhead around them.
"""

from __future__ import annotations

import dataclasses
import math
import re
import textwrap
from collections.abc import Sequence

__all__ = ["DispatchTime", "Profile", "describe_dispatch"]

_SHAPE = re.compile(r"^\d+(?:x\d+)*$")
_WIDTH = 110  # the report's prose lines wrap here

# What a call adds around its dispatches, per IREE driver (the "rest" of the breakdown).
_OVERHEAD = {
    "local-task": "importing the arguments, transient allocations, waking local-task's worker threads, "
                  "the barriers between dispatches",
    "local-sync": "importing the arguments, transient allocations and recording the dispatches "
                  "(local-sync runs them on the calling thread: no workers to wake)",
}
_GPU_OVERHEAD = ("importing the arguments, transient allocations, kernel launches, the barriers between "
                 "dispatches and waiting for the device")


@dataclasses.dataclass(frozen=True)
class DispatchTime:
    """One dispatch: one kernel IREE runs (one exported function of an IREE executable),
    made by IREE's compiler from one or more fused StableHLO ops.

    Attributes:
        name: IREE's name, e.g. ``loss_grad_dispatch_34_matmul_144x32x3136_f32``.
        function: the public function it was formed in (``None`` if the name
            does not say).
        ordinal: the N of ``_dispatch_N_``.
        kind: IREE's summary of the op, e.g. ``matmul``, ``elementwise``, ``slow_memcpy``.
        description: what it computes, e.g. ``matmul M×N×K = 144×32×3136, f32``.
        seconds: one invocation, benchmarked alone (median of the repetitions;
            the mean over its benchmark configurations if IREE dumped several).
        calls: invocations per call of the function, from IREE's dispatch
            statistics (``None`` when they were not available).
        in_call_seconds: time inside one whole call, all invocations together,
            from the same statistics (``None`` when not available).
        flops: floating-point operations of one invocation for matmuls and
            convolutions (2 per multiply-add over the loop ranges), else ``None``.
        sources: the model's ops it computes, by their MLIR locations: the op IREE
            formed it around first, then the ops fused into it
            (``("loss_grad/tanh_grad", "loss_grad/MatMul_1_grad")``); empty when no
            location survived (see ``irgrad.runtime.profile_sources``).
    """

    name: str
    function: str | None
    ordinal: int | None
    kind: str
    description: str
    seconds: float
    calls: int | None = None
    in_call_seconds: float | None = None
    flops: int | None = None
    sources: tuple[str, ...] = ()

    @property
    def seconds_per_call(self) -> float:
        """Time per call of the function: ``seconds`` × ``calls`` (1 when unknown)."""
        return self.seconds * (self.calls if self.calls is not None else 1)

    @property
    def gflops_per_second(self) -> float | None:
        """``flops`` per second of ``seconds`` in units of 10⁹ (``None`` for non-contractions)."""
        return self.flops / self.seconds / 1e9 if self.flops and self.seconds > 0 else None

    @property
    def short_name(self) -> str:
        """``#34 matmul_144x32x3136_f32`` (without the function's name)."""
        match = re.search(r"_dispatch_(\d+)(?:_(.*))?$", self.name)
        if match is None:
            encoding = re.match(r"_encoding_(\d+)_", self.name)
            return f"encoding #{encoding.group(1)}" if encoding else self.name
        return f"#{match.group(1)} {match.group(2) or ''}".rstrip()


@dataclasses.dataclass
class Profile:
    """The result of ``profile_dispatches``.

    Attributes:
        function: the profiled function (``None``: every public function).
        dispatches: slowest first by ``seconds_per_call``.
        whole_call_seconds: median time of one call of ``function`` on random
            inputs (``None`` when not measured; ``note`` says why).
        device: the IREE driver the times were taken on.
        flags: the iree-compile flags used.
        skipped: dispatches that a call of ``function`` does not run (e.g. run
            once by a module initializer), left out of ``dispatches``.
        note: why something is missing, or ``""``.
        measured_peak: bytes: how far the first call of ``function`` raised the peak memory of
            a fresh process over its memory after loading, its arguments already on the device
            (``None`` when not measured; ``note`` says why).
    """

    function: str | None
    dispatches: list[DispatchTime]
    whole_call_seconds: float | None
    device: str
    flags: list[str]
    skipped: list[str] = dataclasses.field(default_factory=list)
    note: str = ""
    measured_peak: int | None = None

    @property
    def total_seconds(self) -> float:
        """Sum of the dispatches' isolated times per call."""
        return sum(d.seconds_per_call for d in self.dispatches)

    @property
    def in_call_seconds(self) -> float | None:
        """Sum of the dispatches' times inside a whole call (IREE's statistics)."""
        times = [d.in_call_seconds for d in self.dispatches]
        return sum(t for t in times if t is not None) if times and all(t is not None for t in times) else None

    @property
    def overhead_seconds(self) -> float | None:
        """What a whole call spends outside its dispatches: the whole call less the dispatches'
        time inside it (``None`` unless both were measured)."""
        inside = self.in_call_seconds
        return None if inside is None or self.whole_call_seconds is None else self.whole_call_seconds - inside

    def by_kind(self) -> list[tuple[str, int, float]]:
        """(kind, number of dispatches, seconds per call alone), most time first."""
        kinds: dict[str, list[float]] = {}
        for d in self.dispatches:
            kinds.setdefault(d.kind, []).append(d.seconds_per_call)
        return sorted(((k, len(v), sum(v)) for k, v in kinds.items()), key=lambda row: row[2], reverse=True)

    def table(self, top: int | None = None, width: int = 46, sources_width: int = 60) -> str:
        """The report: what a dispatch is; one row per dispatch, slowest first (``top`` rows at
        most), with the model's ops it came from; then where one call's time goes."""
        total = self.total_seconds
        header = ("#", "dispatch", "what it computes", "calls", "alone µs", "share", "cum.", "GFLOP/s",
                  "in call µs", "from (the model's ops)")
        rows = [header]
        cumulative = 0.0
        for rank, d in enumerate(self.dispatches, 1):
            share = d.seconds_per_call / total if total > 0 else 0.0
            cumulative += share
            if top is not None and rank > top:
                continue
            label = d.short_name if self.function else f"{d.function or '?'} {d.short_name}"
            rate = d.gflops_per_second
            rows.append((
                str(rank), _cut(label, 34), _cut(d.description, width),
                "?" if d.calls is None else str(d.calls),
                f"{d.seconds_per_call * 1e6:,.1f}", f"{share:.1%}", f"{cumulative:.1%}",
                "" if rate is None else f"{rate:,.1f}" if rate >= 1 else f"{rate:.2g}",
                "" if d.in_call_seconds is None else f"{d.in_call_seconds * 1e6:,.1f}",
                _sources(d.sources, sources_width),
            ))
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        aligned = lambda i, cell: cell.ljust(widths[i]) if i in (1, 2, 9) else cell.rjust(widths[i])  # noqa: E731
        lines = self._intro()
        lines += ["  ".join(aligned(i, cell) for i, cell in enumerate(row)).rstrip() for row in rows]
        count = len(self.dispatches)
        shown = len(rows) - 1
        if shown < count:
            rest = sum(d.seconds_per_call for d in self.dispatches[shown:])
            share = f" ({rest / total:.1%})" if total > 0 else ""
            lines.append(f"... {count - shown} more: {rest * 1e6:,.1f} µs alone{share}")
        kinds = self.by_kind()
        if len(kinds) > 1 and total > 0:
            lines.append("by kind: " + ", ".join(f"{kind} ×{n} {seconds / total:.0%}" for kind, n, seconds in kinds))
        unnamed = sum(1 for d in self.dispatches if not d.sources)
        if unnamed:
            lines.append(self._unnamed_line(unnamed))
        lines += self.breakdown()
        if self.skipped:
            lines.append(f"not part of a call (left out): {', '.join(self.skipped)}")
        if self.note:
            lines.append(f"note: {self.note}")
        return "\n".join(lines)

    def _intro(self) -> list[str]:
        what = f"@{self.function}" if self.function else "all public functions"
        count = len(self.dispatches)
        return textwrap.wrap(
            f"{what} on {self.device}: {count} dispatch{'es' if count != 1 else ''}. A dispatch is one kernel IREE "
            "runs: its compiler fuses neighbouring StableHLO ops (a matmul with the elementwise ops around it, a "
            "reduction, ...) into one. alone µs: a dispatch timed by itself (IREE's per-dispatch benchmarks) × its "
            "calls per call; in call µs: its time inside a whole call; from: the model's ops it computes (their "
            "MLIR locations), the op it was formed around first.", _WIDTH, break_on_hyphens=False)

    def _unnamed_line(self, unnamed: int) -> str:
        if unnamed == len(self.dispatches):
            return ("from: no source location is known for any dispatch (the module carries none: "
                    "ops printed without loc(...) or with loc(unknown))")
        return (f"from: '?' ({unnamed} dispatch{'es' if unnamed != 1 else ''}): no source location is known "
                "(a dispatch IREE made on its own, e.g. a layout change, or ops without locations)")

    def breakdown(self) -> list[str]:
        """Where one call's time goes: the whole call, the dispatches inside it and the rest
        (IREE's per-call overhead), with the sum of the dispatches timed alone beside them."""
        total, inside, whole = self.total_seconds, self.in_call_seconds, self.whole_call_seconds
        count = len(self.dispatches)
        plural = "dispatch" if count == 1 else f"{count} dispatches"

        def row(label: str, seconds: float | None, why: str) -> list[str]:
            share = f"{seconds / whole:5.0%}" if whole and seconds is not None else "     "
            amount = "?" if seconds is None else f"{seconds * 1e6:,.1f}"
            head = f"  {label:<36}{amount:>12} µs {share}  "
            wrapped = textwrap.wrap(why, _WIDTH - len(head), break_on_hyphens=False) or [""]
            return [(head + wrapped[0]).rstrip(), *(" " * len(head) + line for line in wrapped[1:])]

        alone = row("dispatches timed alone, summed", total,
                    "each by itself, batched: its kernel and its share of a submission; this ranks the "
                    "dispatches and is no part of the call")
        if not whole:
            return [f"where the time goes ({self.device}):", *alone]
        lines = [f"where one call's time goes (medians, {self.device}):", *row("whole call", whole, "")]
        if inside is None:
            lines += row(f"  inside the {plural}", None, "no in-call statistics: see the note")
        else:
            rest = whole - inside
            each = f"≈{rest / count * 1e6:,.1f} µs a dispatch on average: " if count else ""
            lines += row(f"  inside the {plural}", inside, "IREE's --dispatch_statistics")
            lines += row("  the rest: IREE's per-call overhead", rest, each + self._overhead())
        return [*lines, *alone]

    def _overhead(self) -> str:
        known = _OVERHEAD.get(self.device)
        return known if known else _GPU_OVERHEAD if self.device not in ("local-task", "local-sync") else ""


def _sources(sources: Sequence[str], width: int) -> str:
    """The names, joined, cut to ``width`` with ``+N more``; ``?`` when none is known."""
    if not sources:
        return "?"
    text = sources[0]
    for i, name in enumerate(sources[1:], 1):
        candidate = f"{text}, {name}"
        left = len(sources) - i - 1
        if len(candidate) + (len(f" +{left} more") if left else 0) > width:
            return f"{text} +{len(sources) - i} more"
        text = candidate
    return text


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# ----- what a dispatch computes ---------------------------------------------------------

_KINDS = {
    "slow_memcpy": "strided copy",
    "fill": "fill",
    "generic": "generic loop nest",
    "elementwise": "elementwise",
    "elementwise_transpose": "elementwise + transpose",
    "elementwise_broadcast": "elementwise + broadcast",
    "transpose": "transpose",
    "broadcast": "broadcast",
    "reduction": "reduction",
    "matmul_like": "matmul-like contraction",
    "contract": "contraction",
    "conv": "window loop (conv-like, e.g. a pool)",
    "pack": "data-tiling pack",
    "unpack": "data-tiling unpack",
    "mmt4d": "tiled matmul (mmt4d)",
}


def describe_dispatch(name: str, buffers: Sequence[str] = ()) -> tuple[str, str, int | None]:
    """Kind, what a dispatch computes and its FLOPs (where known), from IREE's name.

    ``f_dispatch_3_matmul_64x32x16_f32`` -> ``("matmul", "matmul M×N×K = 64×32×16, f32", 65536)``.
    ``buffers`` (types of its bindings, e.g. ``16x30x30xf32``) describe a
    dispatch whose name carries no shape, such as ``slow_memcpy``.
    """
    encoding = re.fullmatch(r"_encoding_\d+_(encode|decode)_(.*)", name)
    if encoding:  # data tiling: an argument or result changing layout
        return encoding.group(1), f"data-tiling {encoding.group(1)} {encoding.group(2).replace('_to_', ' → ')}", None
    match = re.search(r"_dispatch_\d+(?:_(.*))?$", name)
    rest = match.group(1) if match else name
    if not rest:
        return "dispatch", "dispatch (IREE gave it no summary)", None
    tokens = rest.split("_")
    at = next((i for i, t in enumerate(tokens) if _SHAPE.match(t)), None)
    if at is None:
        kind, dims, types = rest, [], []
    else:
        kind = "_".join(tokens[:at])
        dims = [int(d) for d in tokens[at].split("x")]
        types = list(dict.fromkeys("_".join(tokens[at + 1:]).split("x"))) if at + 1 < len(tokens) else []
    loops = "×".join(map(str, dims))
    flops = None
    if kind in ("matmul", "matmul_transpose_a", "matmul_transpose_b") and len(dims) == 3:
        text = f"{kind.replace('_', ' ')} M×N×K = {loops}"
        flops = 2 * math.prod(dims)
    elif kind.startswith("batch_matmul") and len(dims) == 4:
        text = f"{kind.replace('_', ' ')} B×M×N×K = {loops}"
        flops = 2 * math.prod(dims)
    elif kind.startswith(("conv_", "depthwise_conv_")) or kind in ("matmul_like", "contract", "mmt4d"):
        if "conv" in kind:  # conv_2d_nhwc_hwcf: loops in the order of IREE's named op
            layout = kind.split("conv_", 1)[1].replace("_", " ")
            text = ("depthwise conv " if kind.startswith("depthwise") else "conv ") + layout
        else:
            text = _KINDS[kind]
        text += f", loops {loops}" if dims else ""
        flops = 2 * math.prod(dims) if dims else None
    else:
        text = _KINDS.get(kind, kind.replace("_", " ") or "dispatch")
        if dims:
            text += f" {loops}"
        elif buffers:
            shapes = [_squeeze(b) for b in buffers]
            types = list(dict.fromkeys(t for _, t in shapes))
            text += " " + " → ".join(s for s, _ in shapes)
    types_text = "/".join(t for t in types if t)
    if types_text:
        text += f", {types_text}"
    return kind, text, flops


def _squeeze(buffer: str) -> tuple[str, str]:
    """``16x1x28x1xf32`` -> (``16×28``, ``f32``): the shape without unit dimensions, the type."""
    *dims, element = buffer.split("x")
    shape = "×".join(d for d in dims if d != "1") or "1"
    return shape, element
