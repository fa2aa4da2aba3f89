"""A rank's timeline with the micro-batches in flight left open (`TimelineTemplate`): pipeline stages that hold the
same rows and run the same layers differ only there (engine/parallel/ranks.stage_classes makes one template per such
class). Its moments are memory/timeline.py's builders' (`rank_timeline`'s), each moment's activations rounded after the
in-flight bytes are added, as one rank's own builder does. All values are bytes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from stepbill.engine.kinds import Phase
from stepbill.engine.memory.eager import EagerTerms
from stepbill.engine.memory.timeline import (
    RankView,
    Row,
    TemplateRow,
    Timeline,
    eager_moments,
    ideal_moments,
    moment_keys,
    phase_runs,
)
from stepbill.engine.recompute import RecomputePlan


@dataclass(frozen=True)
class TimelineTemplate:
    """A rank's moments with the micro-batches in flight left open: pipeline stages that hold the same rows and
    run the same layers differ only there (engine/parallel/ranks.stage_classes makes one template per such class)."""

    keys: tuple[str, ...]
    rows: tuple[TemplateRow, ...]

    def timeline(self, in_flight_bytes: int) -> Timeline:
        """The timeline with `in_flight_bytes` of other micro-batches' activations alive outside the optimizer step
        (each moment's activations rounded after the addition, as one rank's own builder does). Its totals are
        summed here; a row's items are made only when its moment is read (`_InFlightRows`)."""
        fixed, live, moves = self._sums
        flight = in_flight_bytes
        if fixed is None:  # an item that is not an int: each row summed in its own order
            rows = _InFlightRows(self.rows, flight)
            totals = [sum(rows[i][4]) for i in range(len(rows))]
        else:  # ints: the sum of the other items + the rounded activations is the row's sum, exactly
            totals = [f + round(a + flight) if m else f + round(a) for f, a, m in zip(fixed, live, moves, strict=True)]
        return Timeline.from_rows(self.keys, _InFlightRows(self.rows, flight), totals, self.phases)  # type: ignore[arg-type]

    @cached_property
    def _sums(self) -> tuple[tuple[int, ...] | None, tuple[float, ...], tuple[bool, ...]]:
        """Per row: the sum of its items but the activations (None when an item is not an int), its activation
        bytes before the in-flight ones, and whether the in-flight ones are added (every phase but the optimizer
        step). Shared: read it only."""
        live = tuple(row[5] for row in self.rows)
        moves = tuple(row[0] is not Phase.OPTIMIZER for row in self.rows)
        items = [(*row[4], *row[6]) for row in self.rows]
        if not all(type(x) is int for values in items for x in values):
            return None, live, moves
        return tuple(sum(values) for values in items), live, moves

    @cached_property
    def phases(self) -> dict[Phase, Sequence[int]]:
        """The moments of each phase (row indices, in step order). Shared: read it only."""
        return phase_runs(self.rows)


class _InFlightRows(Sequence[Row]):
    """A template's rows with `flight` in-flight bytes added, each row made when it is read (a timeline's peaks read
    three of them). Equal to the tuple of its rows."""

    def __init__(self, rows: tuple[TemplateRow, ...], flight: int) -> None:
        self._rows, self._flight = rows, flight
        self._made: dict[int, Row] = {}  # the rows read so far

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        made = self._made.get(index)
        if made is None:
            phase, part, layer, kind, head, live, tail = self._rows[index]
            added = self._flight if phase is not Phase.OPTIMIZER else 0
            made = self._made[index] = phase, part, layer, kind, (*head, round(live + added), *tail)
        return made

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    def __hash__(self) -> int:
        return hash(tuple(self))


def timeline_template(view: RankView, plan: RecomputePlan, outside: float = 0,
                      eager: EagerTerms | None = None) -> TimelineTemplate:
    """rank_timeline's moments for every `in_flight_bytes` (the view's own is not read)."""
    rows = eager_moments(view, plan, outside, eager) if eager is not None else ideal_moments(view, plan, outside)
    return TimelineTemplate(moment_keys(view, eager), tuple(rows))  # type: ignore[arg-type]
