"""An int that carries tags: the byte width the engine passes everywhere as a plain int, with what some rows need
besides (eager/dtypes.EagerBytes: the parameter bytes and the device; fp8.Fp8Bytes: the fp8 convention).

Arithmetic and comparisons with plain ints read its value alone. Two tagged ints are equal only with the same value
and tags: the memos keyed on one (recompute/budget.spec_problem, ...) must keep recipes apart — an amp-bf16 and a
mixed-bf16 call of the same compute bytes shared a recompute staircase before (a KeyError, or the first recipe's
rows). The hash stays int's (equal values, equal hashes). Copies and pickles keep the tags (deepcopy of a fp8 bill
failed: int's own reduce calls __new__ with the value alone).
"""

from __future__ import annotations

from typing import Any, ClassVar


class TaggedInt(int):
    """An int with the tags named in `TAGS`, attributes set by the subclass's __new__, whose positional arguments
    are the value then the tags in that order."""

    TAGS: ClassVar[tuple[str, ...]] = ()

    def tags(self) -> tuple[Any, ...]:
        return tuple(getattr(self, t) for t in self.TAGS)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TaggedInt):
            return type(self) is type(other) and int(self) == int(other) and self.tags() == other.tags()
        return int.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = int.__hash__

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return type(self), (int(self), *self.tags())
