"""The search: enumerate the space, decide whole groups with the exact resident bound, evaluate the rest with the
engine, rank and keep the fronts.

Counting (`SearchStats`): `candidates` is every point of the space; rule-rejected points are counted per reason but
not as evaluated. `evaluated` = `by_bill` (candidates whose bills were made) + `by_bound` (candidates the resident
bound rejected: the bound decides their verdict exactly — no peak of theirs can be under the budget — though their
peaks are not computed). `seconds` is wall-clock; `cpu_seconds` the process's CPU time (one core: the search is
single-threaded), which is the rate to quote on a shared machine where wall-clock includes waiting for a core.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from stepbill.engine.plan.evaluate import Row, budget_bytes, evaluate, resident_bound
from stepbill.engine.plan.pareto import gpus_vs_time, memory_vs_time
from stepbill.engine.plan.rank import sort_key, top
from stepbill.engine.plan.space import PlanRequest, Rejections, enumerate_space
from stepbill.errors import StepbillError

Progress = Callable[[int, int], None]  # (candidates decided, candidates to decide)


@dataclass(frozen=True)
class SearchStats:
    """How the search went: counts in candidates, seconds wall-clock."""

    candidates: int
    by_bill: int
    by_bound: int
    seconds: float
    cpu_seconds: float
    rejected: dict[str, int]
    not_searched: int = 0  # candidates left when the deadline stopped the search (0: the whole space)

    @property
    def complete(self) -> bool:
        """Whether every candidate got its verdict (no deadline hit)."""
        return self.not_searched == 0

    @property
    def evaluated(self) -> int:
        return self.by_bill + self.by_bound

    @property
    def layouts_per_s(self) -> float:
        """Evaluated candidates per wall-clock second."""
        return self.evaluated / self.seconds if self.seconds > 0 else 0.0

    @property
    def layouts_per_cpu_s(self) -> float:
        """Evaluated candidates per CPU second of this process (one core)."""
        return self.evaluated / self.cpu_seconds if self.cpu_seconds > 0 else 0.0


@dataclass(frozen=True)
class PlanResult:
    """The planner's answer: every row that fits (best first under `objective`), the top K, the fronts, stats."""

    request: PlanRequest
    objective: str
    k: int
    rows: list[Row]
    stats: SearchStats
    gpus_vs_time: list[Row] = field(default_factory=list)
    memory_vs_time: list[Row] = field(default_factory=list)

    @property
    def top(self) -> list[Row]:
        return self.rows[: self.k]

    @property
    def best(self) -> Row | None:
        return self.rows[0] if self.rows else None


def search(req: PlanRequest, objective: str = "time", k: int = 10, progress: Progress | None = None,
           deadline_s: float | None = None) -> PlanResult:
    """Plan `req`: every candidate's verdict, the fitting rows ranked by `objective`, the top `k`, the fronts.
    With `deadline_s` (wall-clock seconds) the search stops starting new groups once it has run that long; the
    candidates left are counted in `stats.not_searched` and the answer covers only what was searched."""
    sort_key(objective)  # an unknown objective fails before the search
    start, start_cpu = time.perf_counter(), time.process_time()
    rejected = Rejections()
    groups = list(enumerate_space(req, rejected))
    to_decide = sum(len(g.variants) for g in groups)
    ruled_out = sum(rejected.counts.values())
    rows: list[Row] = []
    by_bill = by_bound = done = 0
    for group in groups:
        n = len(group.variants)
        if deadline_s is not None and time.perf_counter() - start > deadline_s:
            break
        budget = budget_bytes(req, group.holdings_layout)
        if resident_bound(req, group.holdings_layout, group.offload_optimizer, budget) > budget:
            rejected.add("resident_over_budget", n)
            by_bound += n
        else:
            for variant in group.variants:
                try:
                    cand = group.candidate(variant)
                except StepbillError:
                    rejected.add("layout_invalid")
                    continue
                row = evaluate(req, cand)
                by_bill += 1
                if row is None:
                    rejected.add("peak_over_budget")
                else:
                    rows.append(row)
        done += n
        if progress is not None:
            progress(done, to_decide)
    fixed_batch = req.global_batch_tokens is not None
    ranked = top(rows, objective, len(rows), fixed_batch)
    stats = SearchStats(ruled_out + to_decide, by_bill, by_bound, time.perf_counter() - start,
                        time.process_time() - start_cpu, dict(sorted(rejected.counts.items())), to_decide - done)
    return PlanResult(req, objective, k, ranked, stats, gpus_vs_time(rows), memory_vs_time(rows))
