"""Where a module's time goes: each dispatch's share, from IREE's own per-dispatch benchmarks.

    python benchmarks/profile.py IN.mlir [--function F] [--grad] [--wrt 0,2]
                                 [--iree-flag FLAG ...] [--top N]
    python benchmarks/profile.py model.py:loss --grad       # an ig.function with an input_signature

``--grad`` first adds ``@F_grad`` (value and gradient: ``irgrad.passes.differentiate(text, F,
with_value=True)``) and profiles it. The module is compiled as irgrad compiles it (IREE
workarounds, then irgrad's iree-compile flags for llvm-cpu on this CPU, plus every
``--iree-flag``); IREE dumps a benchmark per dispatch, and ``iree-benchmark-module`` times
each dispatch alone. Printed: one row per dispatch, slowest first (what it computes, calls
per call of F, µs per call, share, cumulative share, GFLOP/s for matmuls and convolutions,
µs inside a whole call from IREE's ``--dispatch_statistics``), then the sum against the
time of a whole call on random inputs. The library function is
``irgrad.runtime.profile.profile_dispatches``; ``irgrad profile`` is the same from the CLI.

Times on a shared 2-core machine move by ±30 % from run to run; read shares, not digits.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Profile the source tree this script lives in, not some installed copy. This file's own
# folder leaves sys.path: "profile" would shadow the standard library's module of that name.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))

from irgrad import passes, runtime  # noqa: E402
from irgrad.cli import CLIError, load_source, parse_wrt  # noqa: E402
from irgrad.runtime.profile import profile_dispatches  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", metavar="IN.mlir|model.py:fn", help="StableHLO module or an ig.function")
    parser.add_argument("--function", "-f", metavar="F",
                        help="function to profile (with --grad: to differentiate; F_grad is profiled). "
                             "Default: the module's only public function")
    parser.add_argument("--grad", action="store_true", help="profile @F_grad (value and gradient of F)")
    parser.add_argument("--wrt", metavar="I,J", help="with --grad: argument indices (default: every float one)")
    parser.add_argument("--iree-flag", action="append", default=[], metavar="FLAG",
                        help="extra iree-compile flag, repeatable (e.g. --iree-flag=--iree-opt-data-tiling=true)")
    parser.add_argument("--top", type=int, default=25, metavar="N", help="rows to print (default 25; 0: all)")
    parser.add_argument("--device", help="IREE driver (default: local-task)")
    parser.add_argument("--repetitions", type=int, default=3, help="timed repetitions per benchmark (median)")
    parser.add_argument("--min-time", type=float, default=0.05, metavar="S",
                        help="seconds each repetition runs at least (default 0.05)")
    parser.add_argument("--batch-size", type=int, default=100,
                        help="dispatch invocations per timed iteration (default 100)")
    args = parser.parse_args(argv)
    try:
        options = runtime.CompileOptions(extra_flags=tuple(args.iree_flag))
        text, name = load_source(args.source)
        function = args.function or name
        if args.grad:
            if function is None:
                signatures = runtime.parse_signatures(text)
                if len(signatures) != 1:
                    raise ValueError(f"the module has {len(signatures)} public functions; name one with --function")
                function = next(iter(signatures))
            text = passes.differentiate(text, function, parse_wrt(args.wrt), with_value=True)
            function += "_grad"
        elif args.wrt is not None:
            raise ValueError("--wrt needs --grad")
        print(f"profiling {args.source}" + (f" @{function}" if function else "") + " (compiling, then timing "
              "every dispatch; this takes a while)...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        profile = profile_dispatches(text, options, function=function, device=args.device,
                                     repetitions=args.repetitions, min_time=args.min_time,
                                     batch_size=args.batch_size)
    except (CLIError, ValueError, RuntimeError, OSError) as error:
        print(f"profile.py: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    print(profile.table(top=args.top or None))
    print(f"flags: {' '.join(profile.flags)}")
    print(f"(profiled in {time.perf_counter() - start:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
