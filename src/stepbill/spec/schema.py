"""Field rules of every input, declared once on the input's own dataclass.

A field of an input dataclass (ModelSpec, AttentionSpec, FFNSpec, MoESpec, Recipe, LoRA, Parallel) carries its
rule in its annotation — `n_layers: Annotated[int, LAYERS]` — and the dataclass's `__post_init__` calls
`check_fields(self)`. The same rule objects bound what the Hugging Face reader (spec/hf.py), the GPU catalog
(spec/hardware.py) and the CLI accept, so a bound is written in one place.

Types are strict: `True` is not an integer, `"false"` is not a boolean, `null` only where the annotation says
`| None`, floats are finite. Every failure is one StepbillError line naming the field, the value and what is
allowed. The upper bounds are far above any published model and keep every command fast (no hang).
"""

from __future__ import annotations

import dataclasses
import math
import operator
import types
from collections.abc import Collection
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

from stepbill.errors import StepbillError, shown

_HASH = "_hash_once"  # where hash_once keeps an instance's hash (not a field: eq, repr, asdict never see it)


def hash_once(cls: type) -> type:
    """Keep a frozen dataclass's hash once computed. The engine's memos are keyed on ModelSpec, Recipe, Parallel and
    GPU, whose generated __hash__ walks every nested field on every lookup — a planner's main cost after the
    arithmetic. The instances are immutable, so their hash never changes. The cached value is left out of pickles:
    string hashes differ between processes (the planner's spawned workers), so a copy recomputes its own."""
    generated = cls.__hash__

    def __hash__(self: Any) -> int:
        try:
            return self.__dict__[_HASH]
        except KeyError:
            value = generated(self)  # type: ignore[misc]
            object.__setattr__(self, _HASH, value)
            return value

    def __getstate__(self: Any) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != _HASH}

    cls.__hash__ = __hash__  # type: ignore[assignment]
    cls.__getstate__ = __getstate__  # type: ignore[attr-defined]
    return cls


@dataclass(frozen=True)
class Int:
    """An integer in [low, high] (bool is not an integer)."""

    low: int
    high: int

    @property
    def allowed(self) -> str:
        return f"an integer in [{self.low:,}, {self.high:,}]"

    def accepts(self, value: Any) -> bool:
        return not isinstance(value, bool) and isinstance(value, int) and self.low <= value <= self.high


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e9 else f"{x:g}"


@dataclass(frozen=True)
class Real:
    """A finite number in [low, high] (or (low, high] with low_open); integers are numbers too."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False

    @property
    def allowed(self) -> str:
        return (f"a finite number in {'(' if self.low_open else '['}{_num(self.low)}, "
                f"{_num(self.high)}{')' if self.high_open else ']'}")

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        above = self.low < value if self.low_open else self.low <= value  # int vs float compares exactly
        below = value < self.high if self.high_open else value <= self.high
        return above and below


@dataclass(frozen=True)
class Text:
    """A printable string (no newline or other control character) of at most max_len characters."""

    max_len: int = 200

    @property
    def allowed(self) -> str:
        return f"a printable string of at most {self.max_len} characters"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and len(value) <= self.max_len and value.isprintable()


@dataclass(frozen=True)
class Flag:
    """true or false (not "false", not 0)."""

    @property
    def allowed(self) -> str:
        return "true or false"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool)


@dataclass(frozen=True)
class OneOf:
    """One of a fixed set of names (a Literal annotation)."""

    values: tuple[Any, ...]

    @property
    def allowed(self) -> str:
        return "one of " + ", ".join(str(v) for v in self.values)

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str | int) and not isinstance(value, bool) and value in self.values


@dataclass(frozen=True)
class IntTuple:
    """A list of integers, each in [0, high] (layer indices), at most max_len long."""

    high: int
    max_len: int

    @property
    def allowed(self) -> str:
        return f"a list of at most {self.max_len:,} integers in [0, {self.high:,}]"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, list | tuple) and len(value) <= self.max_len and all(
            not isinstance(i, bool) and isinstance(i, int) and 0 <= i <= self.high for i in value)


@dataclass(frozen=True)
class Names:
    """A non-empty list of names (printable strings of at most 100 characters), at most max_len long."""

    max_len: int = 64

    @property
    def allowed(self) -> str:
        return f"a list of 1 to {self.max_len} printable names"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, list | tuple) and 0 < len(value) <= self.max_len and all(
            isinstance(n, str) and 0 < len(n) <= 100 and n.isprintable() for n in value)


@dataclass(frozen=True)
class Instance:
    """An object of a given class (a nested input that validated itself)."""

    cls: type

    @property
    def allowed(self) -> str:
        return f"a {self.cls.__name__}"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, self.cls)


Rule = Int | Real | Text | Flag | OneOf | IntTuple | Names | Instance

# --- the bounds (why each is where it is) -----------------------------------------------------------------
#: Layers: the deepest published LMs have under 200; 10,000 keeps every per-layer loop (timeline, every:K,
#: pipeline stages) well under a second. 10^12 layers used to hang.
LAYERS = Int(1, 10_000)
#: Vocabulary: the largest published is ~262K (Gemma 3); 10M leaves room and keeps the embedding bytes finite.
VOCAB = Int(1, 10_000_000)
#: Any matrix width (hidden, FFN, expert, head, MLA ranks): 2^20, over 10× DeepSeek-V3's widest (18,432).
WIDTH = Int(1, 2**20)
#: Widths that may be 0 (an absent part: no shared expert, no rotary share).
WIDTH_OR_ZERO = Int(0, 2**20)
#: Heads and experts: 2^16 (DeepSeek-V3: 128 heads, 256 experts).
HEADS = Int(1, 2**16)
EXPERTS = Int(1, 2**16)
EXPERTS_OR_ZERO = Int(0, 2**16)
#: Tokens of one sequence or position table: 2^24 = 16,777,216 (above Llama 4 Scout's 10M context).
TOKENS = Int(1, 2**24)
#: Sequences per micro-batch, micro-batches per step: 2^20.
BATCH = Int(1, 2**20)
#: One parallel degree (dp, tp, pp, cp, ep, etp, shard group, vpp): 2^20 ranks.
DEGREE = Int(1, 2**20)
#: A share in [0, 1] (rotary fraction).
FRACTION = Real(0.0, 1.0)
#: GPU count (dp·tp·pp·cp): 2^24, far above any cluster built.
WORLD = Int(1, 2**24)
#: --gpu-mem, GiB per card: from 0.001 GiB (about 1 MiB; 1e-310 GiB made the card count overflow) to 2^20 GiB.
GPU_MEM_GIB = Real(1e-3, 2.0**20)
#: --efficiency, share of the dense peak achieved: below 0.1 % a step time means nothing (1e-310 gave Infinity).
EFFICIENCY = Real(1e-3, 1.0)
#: --threshold of the recompute cut, TFLOP per GiB saved.
THRESHOLD = Real(0.0, 1e9)
#: Names, families, notes.
NAME = Text(200)
NOTE = Text(2_000)


@cache
def _rules(cls: type) -> tuple[tuple[str, Rule, bool], ...]:
    """(field, rule, nullable) for every validated field of `cls`, read from its annotations."""
    hints = get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        rule = None
        if get_origin(hint) is Annotated:
            hint, *meta = get_args(hint)
            rule = next((m for m in meta if isinstance(m, Rule)), None)
        args = get_args(hint)
        nullable = get_origin(hint) in (Union, types.UnionType) and type(None) in args
        base = next((a for a in args if a is not type(None)), hint) if nullable else hint
        if rule is None:
            rule = _default_rule(base)
        if rule is not None:
            out.append((f.name, rule, nullable))
    return tuple(out)


def _default_rule(base: Any) -> Rule | None:
    if base is bool:
        return Flag()
    if base is str:
        return NAME
    if get_origin(base) is Literal:
        return OneOf(get_args(base))
    if isinstance(base, type) and dataclasses.is_dataclass(base):
        return Instance(base)
    return None  # dict / Any: not validated here


def unchecked_replace(obj: Any, **changes: Any) -> Any:
    """dataclasses.replace(obj, **changes) without running __init__ / __post_init__: no field is checked, the caller
    checks what it must (Recipe.on_layout, Parallel.with_fields). The copy holds the dataclass fields alone, never
    what else `obj` keeps in its __dict__ (hash_once's hash); an unknown field is a TypeError, as replace's."""
    cls = type(obj)
    names, known, values = _fields_of(cls)
    if not known.issuperset(changes):
        raise TypeError(f"{cls.__name__} has no field {sorted(set(changes) - known)}")
    copy = object.__new__(cls)
    copy.__dict__.update(zip(names, values(obj), strict=True), **changes)
    return copy


@cache
def _fields_of(cls: type) -> tuple[tuple[str, ...], frozenset[str], Any]:
    """A dataclass's field names, as a tuple and a set, and a getter of their values (a tuple, in that order)."""
    names = tuple(f.name for f in dataclasses.fields(cls))
    return names, frozenset(names), operator.attrgetter(*names)


def check_fields(obj: Any, owner: str, flags: dict[str, str] | None = None,
                 only: Collection[str] | None = None) -> None:
    """Check every annotated field of the dataclass `obj` (or those named in `only`); the first violation is a
    one-line StepbillError.

    A field is named `owner.field`, or by its command-line flag where `flags` gives one (e.g. "--seq")."""
    for name, rule, nullable in _rules(type(obj)):
        if only is not None and name not in only:
            continue
        value = getattr(obj, name)
        if value is None and nullable:
            continue
        if not rule.accepts(value):
            label = flags[name] if flags and name in flags else f"{owner}.{name}"
            raise StepbillError(f"{label} must be {rule.allowed}{' or null' if nullable else ''}, "
                                f"got {shown(value)}")


def check_value(rule: Rule, what: str, value: Any) -> Any:
    """`value` if `rule` accepts it, else a one-line StepbillError naming `what` (a flag or a key)."""
    if not rule.accepts(value):
        raise StepbillError(f"{what} must be {rule.allowed}, got {shown(value)}")
    return value


def from_plain(cls: type, data: Any, owner: str, **already: Any) -> Any:
    """Build the dataclass `cls` from a JSON object: unknown keys and missing required keys are errors.

    The values are checked by `cls.__post_init__` (check_fields and the cross-field rules)."""
    from stepbill.errors import unknown_name

    if not isinstance(data, dict):
        raise StepbillError(f"{owner} must be a JSON object, got {shown(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "extra"}
    names = set(fields) - set(already)
    for key in data:
        if key not in names:
            raise unknown_name(f"key in {owner}", str(key), names)
    missing = sorted(
        n for n in names
        if fields[n].default is dataclasses.MISSING and fields[n].default_factory is dataclasses.MISSING
        and n not in data
    )
    if missing:
        raise StepbillError(f"{owner} is missing {', '.join(missing)}")
    return cls(**data, **already)
