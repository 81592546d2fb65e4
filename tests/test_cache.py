"""The on-disk compile cache's size cap (LRU) and what ``irgrad.runtime`` reports of it (issue 33)."""
from __future__ import annotations

import os
import time

import pytest

from irgrad import runtime

MODULE = """func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = stablehlo.constant dense<VALUE> : tensor<4xf32>
  %y = stablehlo.add %x, %c : tensor<4xf32>
  return %y : tensor<4xf32>
}"""


def _module(value: str) -> str:
    return MODULE.replace("VALUE", value)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("IRGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("IRGRAD_CACHE_SIZE", raising=False)
    runtime.clear_memory_cache()
    yield tmp_path
    runtime.clear_memory_cache()


def _fake(root, name, size, age):
    path = root / "iree-0.0.0" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (time.time() - age, time.time() - age))
    return path


def test_the_cap_and_its_setting(monkeypatch):
    monkeypatch.delenv("IRGRAD_CACHE_SIZE", raising=False)
    assert runtime.cache_size_limit() == 2 << 30
    monkeypatch.setenv("IRGRAD_CACHE_SIZE", "500M")
    assert runtime.cache_size_limit() == 500 << 20
    monkeypatch.setenv("IRGRAD_CACHE_SIZE", "0")
    assert runtime.cache_size_limit() == 0
    monkeypatch.setenv("IRGRAD_CACHE_SIZE", "lots")
    with pytest.raises(ValueError, match="bad IRGRAD_CACHE_SIZE 'lots'"):
        runtime.cache_size_limit()
    with pytest.raises(ValueError, match="IRGRAD_CACHE_SIZE"):  # before compiling, not after
        runtime.compile(_module("1.0"))


def test_eviction_takes_the_least_recently_used_first(cache):
    from irgrad.runtime.cache import evict

    old, middle, new = (_fake(cache, f"{n}.vmfb", 100, age) for n, age in (("old", 300), ("middle", 200), ("new", 100)))
    other = _fake(cache, "notes.txt", 1000, 400)  # not an entry: never counted or deleted
    assert evict(keep=new, limit=250) == [old]
    assert evict(keep=old, limit=1000) == []
    assert evict(keep=middle, limit=100) == [new]  # the one just written goes last
    assert evict(keep=middle, limit=0) == [middle]  # a cap of 0 keeps nothing
    assert other.exists()


def test_compiles_stay_under_the_cap_and_a_hit_is_used_last(cache, monkeypatch):
    first = runtime.compile(_module("1.0"))
    size = len(first.vmfb)
    monkeypatch.setenv("IRGRAD_CACHE_SIZE", str(int(size * 2.5)))  # room for two entries
    runtime.compile(_module("2.0"))
    entries = sorted(cache.glob("iree-*/*.vmfb"), key=lambda p: p.stat().st_mtime)
    for i, path in enumerate(entries):  # distinct, older times: the first compiled is the oldest
        os.utime(path, (time.time() - 100 + i, time.time() - 100 + i))
    runtime.clear_memory_cache()
    assert runtime.compile(_module("1.0")).cached == "disk"  # a hit: now the most recently used
    runtime.compile(_module("3.0"))  # over the cap: the entry of 2.0 goes
    runtime.clear_memory_cache()
    assert runtime.compile(_module("1.0")).cached == "disk"
    assert runtime.compile(_module("3.0")).cached == "disk"
    info = runtime.cache_info()
    assert info.entries == 2 and info.size <= info.limit
    assert runtime.compile(_module("2.0")).cached is None  # evicted: compiled again


def test_info_and_clear(cache):
    runtime.compile(_module("1.0"))
    _fake(cache, "old-version.vmfb", 10, 0)
    (cache / "failed").mkdir()
    (cache / "failed" / "compile-error.mlir").write_text("module {}")
    info = runtime.cache_info()
    assert info.location == cache and info.entries == 2 and info.versions["iree-0.0.0"] == 1
    assert f"location  {cache}" in info.describe() and "cap       2 GiB" in info.describe()
    count, freed = runtime.clear_cache()
    assert count == 2 and freed > 10
    assert runtime.cache_info().entries == 0 and not (cache / "failed").exists()
