"""Site-packages folders that hold only some distributions: a device's install, made of links
to this environment's files (tests/test_device.py, tests/test_fleet.py, benchmarks/bench_fleet.py).
Run Python on one with ``-I -S`` and the folder alone on ``sys.path``: nothing else imports."""
from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import irgrad as ig


def closure(dists: list[str]) -> set[str]:
    """These distributions and everything they require here (extras and requirements for
    other Pythons left out), as normalized names."""
    from packaging.requirements import Requirement

    found, todo = set(), list(dists)
    while todo:
        dist = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if dist not in found:
            found.add(dist)
            for r in map(Requirement, importlib.metadata.requires(dist) or []):
                if r.marker is None or r.marker.evaluate({"extra": ""}):
                    todo.append(r.name)
    return found


def runtime_only_site(root: Path, dists: list[str], wheel: Path | None = None) -> Path:
    """``root/site``: irgrad, and ``dists`` with what they require, as links to this install's
    files. ``iree`` is a namespace the compiler shares, so its subfolders are linked one by one:
    the compiler's 350 MB are not there to be imported. With ``wheel`` (``build_runtime_wheel``),
    irgrad is that wheel's files, as ``pip install`` would place them, not this tree's package."""
    site = root / "site"
    (site / "iree").mkdir(parents=True)
    for name in closure(dists):
        dist = importlib.metadata.distribution(name)
        base = Path(dist.locate_file(""))
        tops = set()
        for file in dist.files or []:
            parts = file.parts
            if parts[0] == ".." or parts[0].endswith((".dist-info", ".data")) or parts[0] == "bin":
                continue
            tops.add(parts[:2] if parts[0] == "iree" and len(parts) > 1 else parts[:1])
        for top in tops:
            target, link = base.joinpath(*top), site.joinpath(*top)
            if target.exists() and not link.exists():
                link.symlink_to(target, target_is_directory=target.is_dir())
        info = next(base.glob(f"{dist.metadata['Name'].replace('-', '_')}-*.dist-info"), None)
        if info is not None and not (site / info.name).exists():
            (site / info.name).symlink_to(info, target_is_directory=True)  # flwr reads its own version
    if wheel is None:
        (site / "irgrad").symlink_to(Path(ig.__file__).parent, target_is_directory=True)
    else:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    return site


RUNTIME_DIST = Path(__file__).resolve().parents[1] / "runtime-dist"


def build_runtime_wheel(out: Path) -> Path:
    """The irgrad-runtime wheel built from ``runtime-dist/`` with pip, as a user's
    ``pip install ./runtime-dist`` builds it (build isolation: setuptools from the index)."""
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                           str(RUNTIME_DIST)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return next(out.glob("irgrad_runtime-*.whl"))
