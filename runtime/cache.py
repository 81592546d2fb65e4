"""The on-disk compile cache: where it is, its size cap, what it holds.

``$IRGRAD_CACHE_DIR`` (default ``~/.cache/irgrad``) holds one folder per IREE compiler version
(``iree-3.13.0/``) of self-describing ``.vmfb`` entries, written atomically, and ``failed/``
(IR that failed to verify or compile, the 20 newest). The entries of all versions together are
capped at ``$IRGRAD_CACHE_SIZE`` (default ``2G``; ``0`` keeps none): after each write the least
recently used entries are deleted until the rest fit. "Used" is the file's modification time,
which a cache hit refreshes. Processes sharing the folder may evict each other's entries; an
entry gone missing is compiled again.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from pathlib import Path

from .options import format_bytes, parse_bytes

__all__ = ["CacheInfo", "DEFAULT_SIZE_LIMIT", "cache_info", "cache_root", "cache_size_limit", "clear_cache"]

log = logging.getLogger(__name__)

DEFAULT_SIZE_LIMIT = 2 << 30  # 2 GiB: ~100 large training artifacts, thousands of small ones
SIZE_ENV = "IRGRAD_CACHE_SIZE"


def cache_root() -> Path:
    """``$IRGRAD_CACHE_DIR``, default ``~/.cache/irgrad`` (all compiler versions)."""
    return Path(os.environ.get("IRGRAD_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "irgrad"))


def cache_size_limit() -> int:
    """The cap on the entries' bytes: ``$IRGRAD_CACHE_SIZE`` (``2G``, ``500M``, bytes; ``0``: keep
    nothing), default ``DEFAULT_SIZE_LIMIT``. A malformed value is a ``ValueError``."""
    value = os.environ.get(SIZE_ENV, "").strip()
    if not value:
        return DEFAULT_SIZE_LIMIT
    if value == "0":
        return 0
    try:
        limit = parse_bytes(value, SIZE_ENV)
    except ValueError:  # parse_bytes' own text ("bytes > 0") would deny the 0 allowed above
        raise ValueError(f"bad {SIZE_ENV} {value!r}; allowed: 0 (keep nothing), a number of bytes, or a size "
                         "such as 2G or 500M") from None
    assert limit is not None
    return limit


@dataclasses.dataclass(frozen=True)
class CacheInfo:
    """What ``cache_info`` found: the folder, its entries (per compiler version) and their bytes."""

    location: Path
    entries: int
    size: int
    limit: int
    versions: dict[str, int]

    def describe(self) -> str:
        """The lines ``irgrad cache info`` prints."""
        versions = ", ".join(f"{name}: {n}" for name, n in sorted(self.versions.items()))
        default = "" if os.environ.get(SIZE_ENV, "").strip() else f", the default; ${SIZE_ENV} sets it"
        return "\n".join([
            f"location  {self.location}",
            f"entries   {self.entries}" + (f" ({versions})" if versions else ""),
            f"size      {format_bytes(self.size)}",
            f"cap       {format_bytes(self.limit)} ({self.limit:,} bytes{default})",
        ])


def _entries(root: Path) -> list[tuple[Path, int, float]]:
    """(path, bytes, last use) of every entry, of every compiler version; vanished ones skipped."""
    found = []
    for path in root.glob("iree-*/*.vmfb"):
        try:
            stat = path.stat()
        except OSError:
            continue
        found.append((path, stat.st_size, stat.st_mtime))
    return found


def cache_info() -> CacheInfo:
    """The cache folder, its entries and their size, and the cap (nothing is changed)."""
    root = cache_root()
    entries = _entries(root)
    versions: dict[str, int] = {}
    for path, _, _ in entries:
        versions[path.parent.name] = versions.get(path.parent.name, 0) + 1
    return CacheInfo(root, len(entries), sum(size for _, size, _ in entries), cache_size_limit(), versions)


def clear_cache() -> tuple[int, int]:
    """Deletes every entry (all compiler versions) and the failed IR kept in ``failed/``;
    returns (entries deleted, bytes freed). Other files in the folder are left alone."""
    root = cache_root()
    count = freed = 0
    for path, size, _ in _entries(root):
        try:
            path.unlink()
        except OSError:
            continue
        count, freed = count + 1, freed + size
    failed = root / "failed"
    if failed.is_dir():
        freed += sum(f.stat().st_size for f in failed.iterdir() if f.is_file())
        shutil.rmtree(failed, ignore_errors=True)
    for folder in root.glob("iree-*"):
        try:
            folder.rmdir()  # only when empty
        except OSError:
            pass
    log.info("cache cleared: %d entries, %s freed (%s)", count, format_bytes(freed), root)
    return count, freed


def touch(path: Path) -> None:
    """Marks an entry used (a cache hit), so that eviction takes it last."""
    try:
        os.utime(path)
    except OSError:
        pass


def evict(keep: Path, limit: int | None = None) -> list[Path]:
    """Deletes the least recently used entries until all fit in ``limit`` (default
    ``cache_size_limit()``); ``keep``, the entry just written, goes last. Returns what went."""
    limit = cache_size_limit() if limit is None else limit
    entries = _entries(cache_root())
    total = sum(size for _, size, _ in entries)
    gone: list[Path] = []
    for path, size, _ in sorted(entries, key=lambda e: (e[0] == keep, e[2])):
        if total <= limit:
            break
        try:
            path.unlink()
        except OSError:
            continue
        total -= size
        gone.append(path)
    if gone:
        log.info("cache over its cap of %s: evicted %d least recently used entr%s, %s left",
                 format_bytes(limit), len(gone), "y" if len(gone) == 1 else "ies", format_bytes(total))
    return gone
