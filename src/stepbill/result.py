"""Typed views of a bill (what `stepbill.bill` returns): one frozen dataclass per section, generated from the
Line names (`b.memory.peak`, `b.flops.six_nd`), rank classes by attribute, `explain` and `to_json`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, make_dataclass
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stepbill.engine.bill import Bill as EngineBill
    from stepbill.engine.fit import Fit
    from stepbill.engine.line import Line

_INTEGER_UNITS = ("bytes", "params", "FLOPs", "cards")  # values the JSON prints as integers
_ATTR_ALIASES = {"6nd": "six_nd", "6nd_ratio": "step_over_6nd"}  # line suffixes that are not identifiers


@dataclass(frozen=True)
class BillRun:
    """What `stepbill bill` computes from its options: the engine's Bill, the fit verdict (None without a card)
    and the note on a dp derived from gpus ("" when dp was given)."""

    bill: EngineBill
    fit: Fit | None
    layout_note: str
    seed_notes: tuple[str, ...] = ()  # on seed 000's worked examples: the seed's other numbers and why
    dropout_option: float | None = None  # `--dropout 0`: every dropout probability set to 0

    def to_json(self) -> dict[str, Any]:
        """The `stepbill bill --json` object of this run (the CLI and the API print the same)."""
        from stepbill.report.bill_json import bill_to_json

        out = bill_to_json(self.bill, fit=self.fit, layout_note=self.layout_note)
        if self.seed_notes:
            out["seed_notes"] = list(self.seed_notes)
        if self.dropout_option is not None:
            out["dropout_option"] = self.dropout_option
        return out


class Section:
    """Base of the generated section types (`b.memory`, `b.flops`, ...): values by attribute, typo-safe."""

    _section: str = ""

    def __getattr__(self, attr: str) -> Any:  # only called when normal lookup fails: a typo
        valid = ", ".join(f.name for f in fields(self))  # type: ignore[arg-type]
        raise AttributeError(f"{self._section} has no {attr!r}; valid: {valid}")

    def as_dict(self) -> dict[str, float | int]:
        """{attribute: value} in the order of the bill's lines."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]


def _attr(suffix: str) -> str:
    attr = _ATTR_ALIASES.get(suffix, re.sub(r"\W", "_", suffix))
    return attr if attr.isidentifier() and not attr[0].isdigit() else f"_{attr}"


@cache
def _section_type(section: str, attrs: tuple[str, ...]) -> type:
    cls_name = "".join(part.capitalize() for part in re.split(r"\W|_", section) if part) or "Section"
    return make_dataclass(cls_name, [(a, float) for a in attrs], bases=(Section,), frozen=True,
                          namespace={"_section": section})


def _section(section: str, values: Mapping[str, float | int]) -> Section:
    """A frozen `section` object with one attribute per key of `values` (line suffixes)."""
    attrs = {_attr(k): v for k, v in values.items()}
    return _section_type(section, tuple(attrs))(**attrs)


def _number(line: Line) -> float | int:
    """The value as the JSON prints it: bytes, params, FLOPs and cards as integers."""
    return round(line.value) if line.unit in _INTEGER_UNITS else line.value


class RankView:
    """One rank class of the per-GPU bill: `memory` (bytes), `cpu` (offloaded bytes) and its JSON keys.

    Built from that class's entry in `to_json()["ranks"]`, so every key the bill's JSON has (`ranks`,
    `pp_stages`, `layers`, `fits`, ...) is an attribute here too (`class` is spelled `name`).
    """

    def __init__(self, entry: dict[str, Any]) -> None:
        self._entry = entry
        self.memory = _section("ranks[].memory", entry["memory"])
        self.cpu = dict(entry.get("cpu", {}))

    @property
    def name(self) -> str:
        """The class's label, e.g. "all ranks" or "pp stage 0"."""
        return str(self._entry["class"])

    def to_json(self) -> dict[str, Any]:
        """This class's entry of the bill's JSON."""
        return self._entry

    def __getattr__(self, attr: str) -> Any:
        entry = self.__dict__.get("_entry", {})
        if attr in entry:
            return entry[attr]
        valid = ", ".join(sorted({"name", "memory", "cpu", *entry} - {"class"}))
        raise AttributeError(f"a rank class has no {attr!r}; valid: {valid}")

    def __repr__(self) -> str:
        return f"RankView({self.name!r}, peak={self.memory.peak:,} B)"


class StepBill:
    """The bill of one training step, as returned by `stepbill.bill`.

    Sections hold the bill's lines by name: `memory`, `params`, `flops`, `checkpoint` always; `cards` when a
    card size is known (`gpu_mem_gib` or `gpu`), `time` when a `gpu` is given (else None). Bytes, params,
    FLOPs and cards are integers (as in the JSON); ratios are floats. `engine` is the engine's own Bill, `fit`
    the fit verdict with a card (None without).
    """

    def __init__(self, run: BillRun) -> None:
        self.engine: EngineBill = run.bill
        self.fit: Fit | None = run.fit  # the fit verdict on the card (`gpu` or `gpu_mem_gib`), else None
        self.layout_note = run.layout_note  # how dp was derived from gpus, or ""
        self.seed_notes = run.seed_notes  # on seed 000's worked examples: the seed's other numbers and why
        self._run = run

    def _lines_of(self, section: str) -> dict[str, Line]:
        prefix = f"{section}."
        return {k.removeprefix(prefix): v for k, v in self.lines.items() if k.startswith(prefix)}

    def _section_or_none(self, section: str) -> Section | None:
        lines = self._lines_of(section)
        return _section(section, {k: _number(v) for k, v in lines.items()}) if lines else None

    @cached_property
    def lines(self) -> dict[str, Line]:
        """Every named line of the bill (time.* included with a GPU), by name."""
        extra = self.engine.time.lines if self.engine.time is not None else {}
        return {**self.engine.lines, **extra, **self.engine.run}

    @cached_property
    def memory(self) -> Section:
        """memory.* lines in bytes: weights, grads, optimizer, model, resident, activations, peak, ..."""
        return _section("memory", {k: _number(v) for k, v in self._lines_of("memory").items()})

    @cached_property
    def params(self) -> Section:
        """params.* lines: total, active, trainable (counts)."""
        return _section("params", {k: _number(v) for k, v in self._lines_of("params").items()})

    @cached_property
    def flops(self) -> Section:
        """flops.* lines: step, forward, attention, ... (FLOPs, 2 per multiply-add); six_nd, step_over_6nd."""
        return _section("flops", {k: _number(v) for k, v in self._lines_of("flops").items()})

    @cached_property
    def checkpoint(self) -> Section:
        """checkpoint.* lines: bytes of a resumable checkpoint."""
        return _section("checkpoint", {k: _number(v) for k, v in self._lines_of("checkpoint").items()})

    @cached_property
    def cards(self) -> Section | None:
        """cards.resident and cards.peak (whole cards) when a card size is known; else None."""
        return self._section_or_none("cards")

    @cached_property
    def time(self) -> Section | None:
        """time.* lines (seconds, ratios, tokens/s) when a `gpu` was given; else None."""
        return self._section_or_none("time")

    @cached_property
    def run(self) -> Section:
        """run.* lines: global_batch_tokens always; steps, seconds, days, gpu_hours, cost, tokens_per_s_per_gpu with
        `train_tokens`, `gpu` and `price_per_gpu_hour`."""
        return _section("run", {k: _number(v) for k, v in self._lines_of("run").items()})

    @cached_property
    def _json(self) -> dict[str, Any]:
        return self._run.to_json()

    def to_json(self) -> dict[str, Any]:
        """Exactly the object `stepbill bill --json` prints for the same inputs (a fresh copy)."""
        import copy

        return copy.deepcopy(self._json)

    @cached_property
    def ranks(self) -> tuple[RankView, ...]:
        """The per-GPU bill: one entry per distinct rank class (a single one without a parallel layout)."""
        return tuple(RankView(entry) for entry in self._json["ranks"])

    @property
    def worst_rank(self) -> RankView:
        """The rank class with the highest peak."""
        return max(self.ranks, key=lambda r: r.memory.peak)

    def line(self, name: str) -> Line:
        """The Line `name` ("memory.peak", "flops.six_nd" or "flops.6nd", ...): value, unit, formula, inputs."""
        if name in self.lines:
            return self.lines[name]
        section, _, attr = name.partition(".")
        for key, line in self._lines_of(section).items():
            if _attr(key) == attr:
                return line
        from stepbill.errors import unknown_name

        raise unknown_name("line", name, self.lines)

    def explain(self, name: str) -> str:
        """The line's value, formula with its inputs filled in, and provenance (what `--explain` prints)."""
        line = self.line(name)
        text = [f"{line.name} = {_fmt_value(line)}"]
        if line.formula:
            text.append(f"  formula: {line.formula}")
            text.append(f"  = {line.explain()}")
        text.append(f"  provenance: {line.provenance}")
        if line.convention:
            text.append(f"  convention: {line.convention}")
        return "\n".join(text)

    def __repr__(self) -> str:
        spec, recipe = self.engine.model, self.engine.recipe
        return (f"StepBill({spec.name!r}, {recipe.precision.name}, micro-batch {recipe.micro_batch} × seq "
                f"{recipe.seq_len}: peak {self.memory.peak:,} B)")


def _fmt_value(line: Line) -> str:
    from stepbill.report.units import fmt_bytes

    if line.unit == "bytes":
        return f"{round(line.value):,} B ({fmt_bytes(line.value)})"
    if line.unit in _INTEGER_UNITS:
        return f"{round(line.value):,} {line.unit}"
    return f"{line.value:.6g} {line.unit}" if line.unit != "1" else f"{line.value:.6g}"
