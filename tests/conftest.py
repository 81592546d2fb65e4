"""Shared test fixtures. Test helpers (gradcheck.py) import as top-level modules because
pytest puts this directory on sys.path."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

# Property tests (test_properties.py): "ci" keeps them to a couple of minutes in the suite;
# "long" is for releases: pytest tests/test_properties.py --hypothesis-profile=long.
_SLOW_IS_FINE = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("ci", max_examples=30, deadline=None, derandomize=True,
                          suppress_health_check=_SLOW_IS_FINE, print_blob=True)
settings.register_profile("long", max_examples=1000, deadline=None, suppress_health_check=_SLOW_IS_FINE,
                          print_blob=True)
settings.load_profile("ci")


@pytest.fixture(scope="module")
def isolated_cache_dir(tmp_path_factory):
    """A module's own compile cache: keeps tests that count cache hits (or spawn irgrad
    subprocesses, which inherit the variable) away from the user's cache."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("irgrad-cache")
        mp.setenv("IRGRAD_CACHE_DIR", str(path))
        yield path
