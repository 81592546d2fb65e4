"""Shared test fixtures. Test helpers (gradcheck.py) import as top-level modules because
pytest puts this directory on sys.path."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def isolated_cache_dir(tmp_path_factory):
    """A module's own compile cache: keeps tests that count cache hits (or spawn irgrad
    subprocesses, which inherit the variable) away from the user's cache."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("irgrad-cache")
        mp.setenv("IRGRAD_CACHE_DIR", str(path))
        yield path
