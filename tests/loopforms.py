"""Loop tests over cases of which only some hold loops (conftest.py's ``loop_form``, issue 40).

``params(names, loops, run_time)`` parametrizes ``name, loop_form``: a loop case once per form of
the while adjoint (``choices.LOOP_FORMS``), a case whose loops have a trip count known at run time
only in the looped form (pinned, with the reason), any other case once with no form forced (None:
conftest fails it if it differentiates a loop after all). ``cached`` is ``functools.cache`` for what
differentiates and compiles once for several tests: keyed on the form as well, and a hit counts
again the forms the first call took, since conftest checks per test that its form was taken."""
from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import pytest

from irgrad.passes.lowering import choices

RUN_TIME = "its loops' trip counts are known at run time only"


def params(names: Iterable[str], loops: Iterable[str], run_time: Iterable[str] = (),
           marks: Mapping[str, Any] = MappingProxyType({}), unrolled_only: Mapping[str, str] = MappingProxyType({})
           ) -> list:
    """The cases ``names`` (``marks``: a case's pytest marks) as ``name, loop_form`` parameters;
    ``unrolled_only``: the cases whose loops have no looped form, and why."""
    loops, run_time = set(loops), set(run_time)
    out = []
    for name in names:
        mark = list(marks.get(name, ()))
        if name in unrolled_only:
            out.append(pytest.param(name, "unrolled", id=f"{name}-unrolled",
                                    marks=[*mark, pytest.mark.loop_forms("unrolled", reason=unrolled_only[name])]))
        elif name in run_time:
            out.append(pytest.param(name, "looped", id=f"{name}-looped",
                                    marks=[*mark, pytest.mark.loop_forms("looped", reason=RUN_TIME)]))
        elif name in loops:
            out += [pytest.param(name, form, id=f"{name}-{form}", marks=mark) for form in choices.LOOP_FORMS]
        else:
            out.append(pytest.param(name, None, id=name, marks=mark))
    return out


def cached(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn(*args, form)`` differentiates under ``choices.loop_form(form)``, once per arguments."""
    results: dict[tuple, tuple[Any, collections.Counter[str]]] = {}

    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        if args not in results:
            before = collections.Counter(choices.LOOP_FORMS_TAKEN)
            with choices.loop_form(args[-1]):
                value = fn(*args)
            taken = collections.Counter(choices.LOOP_FORMS_TAKEN)
            taken.subtract(before)
            results[args] = value, +taken
        else:
            choices.LOOP_FORMS_TAKEN.update(results[args][1])
        return results[args][0]

    return call
