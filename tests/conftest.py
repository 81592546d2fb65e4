"""Shared test fixtures. Test helpers (gradcheck.py) import as top-level modules because
pytest puts this directory on sys.path."""
from __future__ import annotations

import collections

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


# ----- loop forms (issue 40) ---------------------------------------------------------------------
# A test that uses the ``loop_form`` fixture (test_loops.py and test_loop_stress.py use it for every
# test) runs once per form of the while adjoint, choices.LOOP_FORMS, with that form forced; it fails
# when a form it runs in was not taken by any loop it differentiated, or was skipped, so that no
# choice in passes/lowering/choices.py can hide a path from the loop tests again. A test pins one
# form with ``@pytest.mark.loop_forms("looped", reason=...)`` (a pinned test fails if one of its
# loops could take the other form), or opts out with ``loop_forms(None, reason=...)``. A test over
# cases of which only some hold loops parametrizes ``loop_form`` itself (``loopforms.params``): a
# case run in no form (None) fails if it differentiates a loop after all.

_CALL_REPORT = pytest.StashKey[pytest.TestReport]()


def pytest_configure(config):
    config.addinivalue_line("markers", "loop_forms(*forms, reason): the while-adjoint forms a test using the "
                                       "loop_form fixture runs in (default: all of choices.LOOP_FORMS)")


def pytest_generate_tests(metafunc):
    explicit = any("loop_form" in (m.args[0].replace(" ", "").split(",") if isinstance(m.args[0], str) else m.args[0])
                   for m in metafunc.definition.iter_markers("parametrize"))
    if "loop_form" in metafunc.fixturenames and not explicit:
        from irgrad.passes.lowering import choices

        marker = metafunc.definition.get_closest_marker("loop_forms")
        metafunc.parametrize("loop_form", marker.args if marker else choices.LOOP_FORMS, indirect=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.stash[_CALL_REPORT] = report
    return report


@pytest.fixture
def loop_form(request):
    """The test's loops differentiated in one form (``choices.loop_form``); checked afterwards."""
    from irgrad.passes.lowering import choices

    form, marker = request.param, request.node.get_closest_marker("loop_forms")
    if marker is not None and not marker.kwargs.get("reason"):
        pytest.fail("loop_forms(...) needs a reason: every loop test runs in every form unless it says why not")
    before = collections.Counter(choices.LOOP_FORMS_TAKEN)
    with choices.loop_form(form):
        yield form
    report = request.node.stash.get(_CALL_REPORT, None)
    if report is None or report.failed or hasattr(report, "wasxfail"):
        return
    taken = collections.Counter(choices.LOOP_FORMS_TAKEN)
    taken.subtract(before)
    if form is None:
        if marker is None and (taken["looped"] or taken["unrolled"]):
            pytest.fail("a case run in no loop form differentiated a loop: list it among the loop cases "
                        "(loopforms.params)")
        return
    if report.skipped:
        pytest.fail(f"skipped in the {form} form: a loop test runs in every form it declares")
    if taken[form] == 0:
        pytest.fail(f"no loop was differentiated {form}: the test does not exercise that form (a test whose "
                    "loops all have a run-time trip count has no unrolled form: loop_forms('looped', reason=...))")
    if marker is not None and "unrolled" not in marker.args and taken["unrollable"]:
        pytest.fail(f"pinned to {marker.args}, but {taken['unrollable']} of its loops can be unrolled: "
                    "run it in every form")
