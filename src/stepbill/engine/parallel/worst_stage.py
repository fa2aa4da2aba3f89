"""The worst rank class of the approximate per-stage model without every stage's class (engine/parallel/ranks.py's
stage_classes): its peak (`stage_peak`, what a fit verdict reads) and the class itself (`stage_worst`, what a judged
rank's step time reads), from one timeline per stage key. The stages of one key (the rows they hold and their layer
order: ranks.stage_parts) differ only in their micro-batches in flight, which every moment but the optimizer step
adds to its activations before rounding, so each moment's total, hence the peak, is non-decreasing in them: the
key's stage with the most in flight has its largest peak. Equal to stage_classes' numbers (tests/test_bill_verdict.py).
All values are bytes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from stepbill.engine.activations import ActTensor
from stepbill.engine.memory.eager import EagerTerms
from stepbill.engine.memory.timeline import Timeline, rank_timeline
from stepbill.engine.parallel.rank_class import RankClass
from stepbill.engine.parallel.ranks import in_flight_bytes, kept_by_kind, stage_class, stage_parts
from stepbill.engine.params import ParamInventory
from stepbill.engine.recompute import RecomputePlan
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import Recipe


class Stages:
    """One call's stages (`stage_parts`) with their timelines made on demand, one per stage key and in-flight
    bytes (each built by rank_timeline, as stage_classes builds a stage of its own)."""

    def __init__(self, spec: ModelSpec, recipe: Recipe, inventory: ParamInventory, one_plan: RecomputePlan,
                 one_eager: EagerTerms | None,
                 outside_rows: Callable[[Callable[[ActTensor], float]], float] | None) -> None:
        self.keys, self.parts = stage_parts(spec, recipe, inventory, one_plan, one_eager, outside_rows)
        self.flights = [in_flight_bytes(recipe, stage, self.parts[key].kept) for stage, key in enumerate(self.keys)]
        self._made: dict[tuple[Any, int], Timeline] = {}

    def timeline(self, stage: int) -> Timeline:
        key, flight_bytes = self.keys[stage], self.flights[stage]
        tl = self._made.get((key, flight_bytes))
        if tl is None:
            part = self.parts[key]
            tl = rank_timeline(replace(part.base, in_flight_bytes=flight_bytes), part.plan, part.outside, part.eager)
            self._made[(key, flight_bytes)] = tl
        return tl

    def key_peaks(self) -> dict[tuple[int, tuple[str, ...]], int]:
        """Each stage key's largest peak (bytes): its stage with the most in flight's (the module docstring)."""
        most: dict[tuple[int, tuple[str, ...]], int] = {}
        for stage, key in enumerate(self.keys):
            if key not in most or self.flights[stage] > self.flights[most[key]]:
                most[key] = stage
        return {key: self.timeline(stage).peak_value() for key, stage in most.items()}


def stage_peak(spec: ModelSpec, recipe: Recipe, inventory: ParamInventory, one_plan: RecomputePlan,
               one_eager: EagerTerms | None,
               outside_rows: Callable[[Callable[[ActTensor], float]], float] | None) -> float:
    """`max(c.memory["peak"] for c in stage_classes(...))` (bytes) — the worst rank class's peak, what a fit verdict
    reads — from one timeline per stage key instead of one per stage (`Stages.key_peaks`; tests/
    test_bill_verdict.py)."""
    return float(max(Stages(spec, recipe, inventory, one_plan, one_eager, outside_rows).key_peaks().values()))


def stage_worst(spec: ModelSpec, recipe: Recipe, inventory: ParamInventory, one_plan: RecomputePlan,
                one_eager: EagerTerms | None, outside_rows: Callable[[Callable[[ActTensor], float]], float] | None,
                reason: str) -> RankClass:
    """`worst_rank(stage_classes(...))` — the first class of the largest peak — with the timelines of the stage keys
    (`Stages.key_peaks`) and of that class's first stage alone: its numbers, lines and timeline are the class's (a
    class's are its first stage's); its name, stages and ranks are that stage's alone (stage_classes merges the
    stages of identical memory into one class). What a judged rank's step time reads (engine/bill_parts.bill_time)."""
    stages = Stages(spec, recipe, inventory, one_plan, one_eager, outside_rows)
    peaks = stages.key_peaks()
    peak = max(peaks.values())
    for stage, key in enumerate(stages.keys):
        if peaks[key] == peak and stages.timeline(stage).peak_value() == peak:
            part = stages.parts[key]
            return stage_class(spec, recipe, stage, part, stages.timeline(stage), kept_by_kind(part.plan), reason)
    raise AssertionError("a stage of the largest peak")  # the key's own stage of the most in flight reaches it
