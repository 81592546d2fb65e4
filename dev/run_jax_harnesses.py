"""Export JAX's primitive harnesses as StableHLO and run them through irgrad's numeric checker.

OpenXLA StableHLO's ``testdata/`` was generated from JAX's primitive harnesses
(``jax._src.internal_test_util.test_harnesses``: one primitive per program, random inputs);
this script writes programs the same way from the JAX installed beside it and checks each
like ``dev/run_stablehlo_testdata.py`` does (``check_program``: irgrad's ``@main_vjp`` and
``@main_jvp`` against float64 central differences, float32 programs widened to float64)::

    python dev/run_jax_harnesses.py OUT --export-with /work/tfvenv/bin/python [--per-group 2] [--match RE]
    python dev/run_jax_harnesses.py OUT            # check what OUT holds

Export runs the harnesses' functions under ``jax.jit`` with ``jax.export`` (the Python given
by ``--export-with`` must have JAX; irgrad's own environment does not need it) and writes
``OUT/<harness>.mlir`` and its inputs ``OUT/<harness>.npz`` (a name over 120 characters cut, with a hash), for the harnesses of float32 or
float64 dtype that JAX implements on CPU, at most ``--per-group`` per primitive. Then every
program is checked in a child process under an 8 GB address-space limit, one line each
(``ok`` / ``forward`` / ``refused`` / ``wrong`` / ``error`` / ``skipped`` and the reason), and
the counts.
"""
from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def export(out: Path, per_group: int, match: str) -> int:
    """Write the harnesses' programs and inputs (needs JAX: run under ``--export-with``)."""
    import jax
    import numpy as np
    jax.config.update("jax_enable_x64", True)
    from jax._src.internal_test_util import test_harnesses

    out.mkdir(parents=True, exist_ok=True)
    taken: dict[str, int] = {}
    for h in test_harnesses.all_harnesses:
        if np.dtype(h.dtype) not in (np.float32, np.float64) or not re.search(match, h.fullname):
            continue
        if not h.filter("cpu") or taken.get(h.group_name, 0) >= per_group:
            continue
        args = [np.asarray(a) for a in h.dyn_args_maker(np.random.RandomState(0))]
        try:
            text = jax.export.export(jax.jit(h.dyn_fun, keep_unused=True))(*args).mlir_module()
        except Exception as error:  # noqa: BLE001 - reported per harness
            print(f"{h.fullname}\tnot exported: {(str(error).splitlines() or [type(error).__name__])[0]}")
            continue
        taken[h.group_name] = taken.get(h.group_name, 0) + 1
        name = h.fullname if len(h.fullname) <= 120 else \
            f"{h.fullname[:100]}_{hashlib.sha1(h.fullname.encode()).hexdigest()[:8]}"
        (out / f"{name}.mlir").write_text(text)
        np.savez(out / f"{name}.npz", *args)
    print(f"exported {sum(taken.values())} programs of {len(taken)} primitives to {out}")
    return 0


def check_one(path: Path) -> tuple[str, str]:
    """(verdict, reason) for one exported program."""
    import numpy as np
    sys.path.insert(0, str(HERE))
    from run_stablehlo_testdata import _to_f64, as_written, check_program, widening_breaks

    with np.load(path.with_suffix(".npz")) as saved:
        args = [saved[k] for k in sorted(saved.files, key=lambda k: int(k.split("_")[1]))]
    args = [a.astype(np.float64) if a.dtype == np.float32 else a for a in args]
    text = path.read_text()
    if widening_breaks(text):
        return as_written(text)
    return check_program(_to_f64(text), args)


def check(out: Path, match: str) -> int:
    sys.path.insert(0, str(HERE))
    from run_stablehlo_testdata import run_children

    run_children(__file__, [f for f in sorted(out.glob("*.mlir")) if re.search(match, f.stem)])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder of the exported programs")
    parser.add_argument("--export-with", metavar="PYTHON", help="a Python with JAX: export the harnesses first")
    parser.add_argument("--per-group", type=int, default=2, help="harnesses per primitive (default 2)")
    parser.add_argument("--match", default=".*", help="only harnesses whose name matches this regex")
    options = parser.parse_args()
    if options.export_with:
        subprocess.run([options.export_with, __file__, "--export", str(options.out), str(options.per_group),
                        options.match], check=True)
    return check(options.out, options.match)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        verdict, reason = check_one(Path(sys.argv[2]))
        print(f"{verdict}\t{reason}")
        sys.exit(0)
    if len(sys.argv) == 5 and sys.argv[1] == "--export":
        sys.exit(export(Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
    sys.exit(main())
