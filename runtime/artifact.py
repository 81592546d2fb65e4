"""Compiled artifacts: the .vmfb bytes plus metadata (see ``vmfb.py`` for how it is read
back), saved atomically."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .loader import Module, load
from .options import CompileOptions
from .signature import Signature
from .vmfb import SIDECAR_SUFFIX, signatures_from_metadata

__all__ = ["Artifact", "atomic_write"]


@dataclasses.dataclass(frozen=True)
class Artifact:
    """A compiled IREE module.

    Attributes:
        vmfb: the IREE VM flatbuffer.
        target: canonical target name (``llvm-cpu``, ``vmvx``, ``vulkan-spirv``, ``cuda``, ``rocm``).
        options: the options it was compiled with.
        metadata: ``functions`` (name -> inputs/outputs as shape + dtype),
            ``target``, ``flags``, ``iree_compiler``, ``producer``.
        cached: ``None`` when just compiled, else ``"memory"`` or ``"disk"``:
            which cache it came from.
    """

    vmfb: bytes = dataclasses.field(repr=False)
    target: str
    options: CompileOptions | None
    metadata: dict[str, Any] = dataclasses.field(repr=False)
    cached: str | None = None

    @property
    def functions(self) -> dict[str, Signature]:
        """Public functions by name."""
        return signatures_from_metadata(self.metadata)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Writes the .vmfb to ``path`` and the metadata to ``path + '.json'``.

        Both writes are atomic (temporary file in the same folder, then
        ``os.replace``): a reader never sees a half-written file.
        """
        path = Path(path)
        atomic_write(path, self.vmfb)
        sidecar = json.dumps(self.metadata, indent=2, sort_keys=True) + "\n"
        atomic_write(Path(str(path) + SIDECAR_SUFFIX), sidecar.encode())
        return path

    def load(self, device: str | None = None) -> Module:
        """Loads this artifact on ``device`` (see ``irgrad.runtime.load``)."""
        return load(self.vmfb, device)


def atomic_write(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` through a temporary file and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
