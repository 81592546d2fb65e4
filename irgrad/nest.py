"""Flatten and rebuild nested Python structures (tuple, list, dict, namedtuple)."""
from __future__ import annotations

from typing import Any
from collections.abc import Callable


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def flatten(structure: Any) -> list[Any]:
    """Leaves in a deterministic order (dicts by sorted key); None is a leaf."""
    if isinstance(structure, dict):
        return [leaf for k in sorted(structure, key=repr) for leaf in flatten(structure[k])]
    if isinstance(structure, (list, tuple)):
        return [leaf for item in structure for leaf in flatten(item)]
    return [structure]


def leaf_names(structure: Any) -> list[str | None]:
    """A name per leaf of ``flatten(structure)``: the path of dict keys and namedtuple fields
    to it, ``/``-joined (``{"loss": l, "grads": [g, h]}`` -> ``grads/0, grads/1, loss``);
    None for a leaf reached by positions only (a tuple's items, a lone tensor)."""
    def walk(s: Any, path: list[str], named: bool) -> list[str | None]:
        if isinstance(s, dict):
            return [n for k in sorted(s, key=repr) for n in walk(s[k], [*path, str(k)], True)]
        if _is_namedtuple(s):
            return [n for f, x in zip(s._fields, s) for n in walk(x, [*path, f], True)]
        if isinstance(s, (list, tuple)):
            return [n for i, x in enumerate(s) for n in walk(x, [*path, str(i)], named)]
        return ["/".join(path) if named else None]
    return walk(structure, [], False)


def pack_sequence_as(structure: Any, leaves: list[Any]) -> Any:
    it = iter(leaves)

    def build(s):
        if isinstance(s, dict):
            built = {k: build(s[k]) for k in sorted(s, key=repr)}
            return type(s)((k, built[k]) for k in s) if type(s) is not dict else {k: built[k] for k in s}
        if _is_namedtuple(s):
            return type(s)(*[build(x) for x in s])
        if isinstance(s, (list, tuple)):
            return type(s)(build(x) for x in s)
        return next(it)

    return build(structure)


def map_structure(fn: Callable[[Any], Any], structure: Any) -> Any:
    return pack_sequence_as(structure, [fn(x) for x in flatten(structure)])
