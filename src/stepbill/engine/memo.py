"""A bounded memo keyed on what the value reads, for the engine's hot paths (a planner asks millions of times).

functools.lru_cache keys a call on all its arguments; a part of the bill that reads only some fields of a Recipe
would need a Recipe with the others reset as its key — a dataclasses.replace and a validation per lookup. A `Memo`
takes the key from the caller instead: a tuple of exactly the fields the value reads, built with `fields_except`
(every field of the dataclass but the ones named as unread, so a new field stays in the key)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from operator import attrgetter
from typing import Any, TypeVar

T = TypeVar("T")


class Memo:
    """compute(*args) by `key`, at most `maxsize` values (emptied when full). `cache_clear` as functools' caches
    (benchmarks empty every stepbill cache through it). The values are shared: read them, never change them."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.values: dict[Any, Any] = {}
        self.cache_clear = self.values.clear  # an attribute, not a method: the class itself is no cache to empty

    def get(self, key: Any, compute: Callable[..., T], *args: Any) -> T:
        try:
            return self.values[key]
        except KeyError:
            pass
        if len(self.values) >= self.maxsize:
            self.values.clear()
        value = self.values[key] = compute(*args)
        return value


def fields_except(cls: type, unread: set[str]) -> Callable[[Any], tuple[Any, ...]]:
    """A getter of the tuple of `cls`'s fields but `unread` (each must be a field: a renamed field fails here, at
    import, not silently in a key)."""
    names = [f.name for f in fields(cls)]
    missing = unread - set(names)
    assert not missing, f"{cls.__name__} has no field {sorted(missing)}"
    kept = [n for n in names if n not in unread]
    getter = attrgetter(*kept)
    return (lambda obj: (getter(obj),)) if len(kept) == 1 else getter
