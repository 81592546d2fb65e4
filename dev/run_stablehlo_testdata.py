"""Run OpenXLA StableHLO's ``testdata/`` programs through irgrad's numeric checker.

Each testdata file is a JAX-generated module: ``@main()`` calls ``@inputs()`` for its
arguments, applies one primitive and checks the result against ``@expected()``. This script
turns ``@main`` into a function of those inputs (the check and ``@expected`` dropped), reads
the inputs by running ``@inputs`` through IREE, and checks irgrad's ``@main_vjp`` against
float64 central differences (``tests/gradcheck.py``: float32 programs are promoted to f64
first, so the differences are exact enough to compare).

    python dev/run_stablehlo_testdata.py DIR_OR_FILES... [--match REGEX]

``DIR`` is a checkout's ``stablehlo/testdata`` (``git clone https://github.com/openxla/stablehlo``).
It prints one line per file (``ok`` / ``forward`` (IREE cannot compile the forward) /
``refused`` / ``wrong`` / ``error`` / ``skipped``, with the first line of the reason) and the counts; every
compile runs in a child process under a 8 GB address-space limit. Skipped: no float input or
result, float16/bfloat16 inputs or complex results (this checker compares float64 differences),
non-finite forward values, points where one-sided differences disagree (no derivative there),
``reduce_precision`` whose rounding the differences see (its straight-through gradient is a
documented convention) and f32 bitcasts (widening changes them). ``tests/test_peer_suites.py``
holds small programs converted this way (``as_function``).
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

_CALL = re.compile(r"^\s*(%\w+)(?::(\d+))? = (?:func\.)?call @inputs\(\) : \(\) -> \(?(.*?)\)?\s*$")
_EXPECTED = re.compile(r"^\s*%\w+(?::\d+)? = (?:func\.)?call @expected\(\).*$")
_CHECK = re.compile(r"^\s*stablehlo\.custom_call @check\..*$")
_MAIN = re.compile(r"func\.func public @main\(\)")


def _split_types(types: str) -> list[str]:
    """``tensor<2x3xf32>, tensor<f32>`` → its types (commas inside ``<>`` kept)."""
    out, depth, cur = [], 0, ""
    for ch in types:
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + ([cur.strip()] if cur.strip() else [])


def as_function(text: str, f64: bool = False) -> tuple[str, str]:
    """(the module with ``@main`` taking the inputs as arguments, the module whose public
    ``@inputs`` gives them). ``f64``: every f32 type becomes f64 (the checker's precision)."""
    lines: list[str] = []
    types: list[str] = []
    name = count = None
    for line in text.splitlines():
        if line.startswith("//"):
            continue
        m = _CALL.match(line)
        if m:
            name, count, types = m.group(1), m.group(2), _split_types(m.group(3))
            continue
        if _EXPECTED.match(line) or _CHECK.match(line):
            continue
        lines.append(line)
    if name is None:
        raise ValueError("no `call @inputs()` in @main")
    body = "\n".join(lines)
    args = ", ".join(f"%input{i}: {t}" for i, t in enumerate(types))
    body = _MAIN.sub(f"func.func public @main({args})", body, count=1)
    start = body.index("func.func public @main(")
    end = body.find("\n  func.func", start)
    end = len(body) if end < 0 else end
    main = body[start:end]  # the names are @main's own: other functions reuse them
    if count is None:
        main = re.sub(re.escape(name) + r"\b(?![#:])", "%input0", main)
    else:
        for i in range(int(count)):
            main = re.sub(re.escape(name) + f"#{i}" + r"\b", f"%input{i}", main)
    body = body[:start] + main + body[end:]
    inputs = text.replace("func.func private @inputs", "func.func public @inputs")
    inputs = re.sub(r"func\.func public @main\(\).*?\n  }\n", "", inputs, count=1, flags=re.S)
    if f64:
        body, inputs = _to_f64(body), _to_f64(inputs)
    return body, inputs


_HEX = re.compile(r'dense<("?)0x([0-9A-Fa-f]+)"?>(\s*:\s*tensor<[^>]*f32>)')
_HEX_LIST = re.compile(r'dense<(\[[^<>"]*\])>(\s*:\s*tensor<[^>]*f32>)')  # [[0x7FC00000, 1.0], ...]
_HEX_ELEMENT = re.compile(r"\b0x([0-9A-Fa-f]{8})\b")


def _f32_bits_as_f64(digits: str) -> str:
    import numpy as np
    bits = np.array([int(digits, 16)], np.uint32).view(np.float32).astype(np.float64).view(np.uint64)[0]
    return f"0x{int(bits):016X}"


def _to_f64(text: str) -> str:
    """Every f32 type made f64, hex-encoded f32 constants re-encoded (a splat's bits, a
    tensor's little-endian bytes, the elements of a list), JAX's float32 LAPACK calls renamed
    (``lapack_strsm_ffi`` -> ``lapack_dtrsm_ffi``)."""
    import numpy as np

    def widen(m: re.Match) -> str:
        quote, digits = m.group(1), m.group(2)
        if quote:  # little-endian bytes
            data = np.frombuffer(bytes.fromhex(digits), np.float32).astype("<f8")
            return f'dense<"0x{data.tobytes().hex().upper()}">{m.group(3)}'
        return f"dense<{_f32_bits_as_f64(digits)}>{m.group(3)}"

    def widen_list(m: re.Match) -> str:
        return "dense<" + _HEX_ELEMENT.sub(lambda e: _f32_bits_as_f64(e.group(1)), m.group(1)) + ">" + m.group(2)
    text = _HEX_LIST.sub(widen_list, _HEX.sub(widen, text))
    text = re.sub(r"@lapack_s(\w+)", r"@lapack_d\1", re.sub(r"@lapack_c(\w+)", r"@lapack_z\1", text))
    return text.replace("xf32>", "xf64>").replace("<f32>", "<f64>")


def read_inputs(inputs_module: str):
    """The arrays ``@inputs`` returns (run through IREE on llvm-cpu)."""
    import numpy as np

    import irgrad as ig
    m = ig.compile(inputs_module, target="llvm-cpu").load()
    return [np.asarray(a) for a in m["inputs"].call_flat()]


def check_file(path: Path) -> tuple[str, str]:
    """(verdict, reason) for one testdata file."""
    text = path.read_text()
    if widening_breaks(text):
        try:
            return as_written(as_function(text)[0])
        except Exception as error:  # noqa: BLE001 - a verdict, reported per file
            return "skipped", f"{widening_breaks(text)}; {error}"
    try:
        module, inputs = as_function(text, f64=True)
        args = read_inputs(inputs)
    except Exception as error:  # noqa: BLE001 - a verdict, reported per file
        return "skipped", str(error).splitlines()[0] if str(error) else type(error).__name__
    return check_program(module, args)


def widening_breaks(text: str) -> str:
    """Why widening ``text``'s f32 to f64 changes what it computes ("" if it does not)."""
    if "stablehlo.bitcast_convert" in text and "f32" in text:
        return "a bitcast of f32 bits: widened to f64 it reinterprets other bits"
    return ""


def as_written(module: str) -> tuple[str, str]:
    """(verdict, reason) for a program that widening would change: its f32 values are not
    checked, but its gradient (``@main_vjp``, as written) must compile wherever its forward
    does (random_gamma's rejection loop, for one, is such a program)."""
    import irgrad as ig

    why = widening_breaks(module)
    try:
        ig.compile(module, target="llvm-cpu")
    except Exception as error:  # noqa: BLE001
        return "forward", (str(error).splitlines() or [""])[0]
    try:
        ig.compile(ig.passes.differentiate(module, "main", vjp=True, grad=False), target="llvm-cpu")
    except Exception as error:  # noqa: BLE001
        first = (str(error).splitlines() or [""])[0]
        return ("refused" if "No adjoint rule" in first else "error"), f"its f32 gradient, as written: {first}"
    return "skipped", f"{why} (its f32 gradient, as written, compiles)"


def check_program(module: str, args: list) -> tuple[str, str]:
    """(verdict, reason) for ``@main`` of ``module`` (float64) at ``args``: also the verdict of
    ``dev/run_jax_harnesses.py`` on programs exported from JAX's primitive harnesses."""
    import numpy as np
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import gradcheck

    if not any(np.asarray(a).dtype.kind == "f" for a in args):
        return "skipped", "no float input"
    low = [str(a.dtype) for a in map(np.asarray, args) if a.dtype.kind in "fV" and a.dtype.itemsize < 4]
    if low:
        return "skipped", f"a {low[0]} input: central differences at that precision are noise"
    try:
        outputs = gradcheck._load(module)["main"].call_flat(*args)
    except Exception as error:  # noqa: BLE001
        return "forward", (str(error).splitlines() or [""])[0]
    kinds = {np.asarray(o).dtype.kind for o in outputs}
    if "c" in kinds:
        return "skipped", "a complex result: tests/complexcheck.py's convention, not this checker's"
    if "f" not in kinds:
        return "skipped", "no float result: nothing to differentiate"
    if not all(np.isfinite(np.asarray(o)).all() for o in outputs if np.asarray(o).dtype.kind == "f"):
        return "skipped", "the forward has non-finite values at these inputs: no differences to compare"
    kinks = _kinks(lambda *a: gradcheck._load(module)["main"].call_flat(*a), args)
    if kinks:
        return "skipped", (f"not differentiable at these inputs: one-sided differences disagree at {kinks} "
                           "elements (a jump or a kink: round at .5, a tie of max)")
    try:
        gradcheck.check_module(module, args, func="main", rtol=1e-5, atol=1e-8)
    except AssertionError as error:
        if "stablehlo.reduce_precision" in module:  # rounding to fewer bits than the step sees
            return "skipped", "reduce_precision: its documented straight-through gradient (JAX's) is not its derivative (0)"
        return "wrong", str(error).splitlines()[0]
    except Exception as error:  # noqa: BLE001
        first = (str(error).splitlines() or [""])[0]
        return ("refused" if "No adjoint rule" in first else "error"), first
    return "ok", ""


def _kinks(forward, args: list, h: float = 1e-7) -> int:
    """How many float result elements have one-sided differences along a random direction that
    disagree (beyond 1e-3 relative): points where the function has no derivative, whatever
    gradient a convention gives there."""
    import numpy as np
    rng = np.random.default_rng(1)
    dirs = [rng.standard_normal(np.shape(a)) if np.asarray(a).dtype.kind == "f" else None for a in args]

    def at(t):
        return [np.asarray(o) for o in forward(*[a + t * d if d is not None else a for a, d in zip(args, dirs)])]
    base, plus, minus = at(0.0), at(h), at(-h)
    count = 0
    for y, p, m in zip(base, plus, minus):
        if y.dtype.kind == "f":
            ahead, behind = (p - y) / h, (y - m) / h
            count += int(np.sum(np.abs(ahead - behind) > 1e-3 * (1 + np.abs(ahead) + np.abs(behind))))
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--match", default=".*", help="only files whose name matches this regex")
    options = parser.parse_args()
    files = []
    for p in options.paths:
        files += sorted(p.glob("*.mlir")) if p.is_dir() else [p]
    files = [f for f in files if re.search(options.match, f.name) and re.search(r"float(32|64)", f.name)]
    run_children(__file__, files)
    return 0


def run_children(script: str, files: list[Path]) -> dict[str, int]:
    """``script --one FILE`` for each file, in a child under an 8 GB address-space limit: print
    each verdict line and the counts; return the counts."""
    counts: dict[str, int] = {}
    for f in files:
        child = subprocess.run(["prlimit", "--as=8000000000", sys.executable, script, "--one", str(f)],
                               capture_output=True, text=True, timeout=900)
        last = (child.stderr.strip().splitlines() or ["crashed"])[-1]
        line = (child.stdout.strip().splitlines() or [f"error\t{last}"])[-1]
        verdict = line.split("\t")[0]
        counts[verdict] = counts.get(verdict, 0) + 1
        print(f"{f.stem}\t{line}", flush=True)
    print(" ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    return counts


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        verdict, reason = check_file(Path(sys.argv[2]))
        print(f"{verdict}\t{reason}")
        sys.exit(0)
    sys.exit(main())
