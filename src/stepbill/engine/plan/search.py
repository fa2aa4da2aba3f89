"""The search: enumerate the space, decide whole groups with the exact resident bound, evaluate the rest with the
engine, rank and keep the fronts.

Counting (`SearchStats`): `candidates` is every point of the space; rule-rejected points are counted per reason but
not as evaluated. `evaluated` = `by_bill` (candidates whose bills were made) + `by_bound` (candidates the resident
bound rejected: the bound decides their verdict exactly — no peak of theirs can be under the budget — though their
peaks are not computed). `seconds` is wall-clock; `cpu_seconds` the CPU time of this process and of its worker processes (`jobs` > 1
spreads the groups over processes), so layouts per CPU-second is the rate of one core whatever `jobs` is.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from stepbill.engine.plan.evaluate import (
    Row,
    budget_bytes,
    budget_drops_nothing,
    evaluate,
    resident_bound,
    resolve_recompute,
)
from stepbill.engine.plan.pareto import gpus_vs_time, memory_vs_time
from stepbill.engine.plan.rank import sort_key, top
from stepbill.engine.plan.space import Group, PlanRequest, Rejections, enumerate_space
from stepbill.errors import StepbillError

SAMPLE_SEED = 0  # the shuffle of the groups (fixed: the same request decides the same groups in the same order)

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
    jobs: int = 1  # worker processes that decided the candidates (1: this process)

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
        """Evaluated candidates per CPU second (this process and its workers: the rate of one core)."""
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
           deadline_s: float | None = None, jobs: int = 1) -> PlanResult:
    """Plan `req`: every candidate's verdict, the fitting rows ranked by `objective`, the top `k`, the fronts.
    With `deadline_s` (wall-clock seconds) the search stops starting new groups once it has run that long; the
    candidates left are counted in `stats.not_searched` and the answer covers only what was searched (groups are
    decided in a fixed random order, so that is a uniform sample of the space's groups). `jobs` > 1
    decides the groups in that many worker processes (the answer is the same: rows are ranked by a total order)."""
    sort_key(objective)  # an unknown objective fails before the search
    start, start_cpu = time.perf_counter(), time.process_time()
    rejected = Rejections()
    groups = list(enumerate_space(req, rejected))
    # A fixed shuffle: a search stopped by its deadline has decided a uniform random sample of the groups, not the
    # first corner of the enumeration (tp 1, pp 1, ...); a complete search ranks the same rows either way.
    random.Random(SAMPLE_SEED).shuffle(groups)
    to_decide = sum(len(g.variants) for g in groups)
    ruled_out = sum(rejected.counts.values())
    deadline_at = None if deadline_s is None else time.time() + deadline_s
    jobs = jobs if jobs > 1 and to_decide >= PARALLEL_MIN_CANDIDATES else 1
    if jobs > 1:
        parts = _decide_parallel(req, groups, deadline_at, jobs, progress, to_decide)
    else:
        parts = [_decide(req, groups, deadline_at, progress, to_decide)]
    rows = [row for part in parts for row in part.rows]
    for part in parts:
        for reason, n in part.rejected.items():
            rejected.add(reason, n)
    by_bill, by_bound = sum(p.by_bill for p in parts), sum(p.by_bound for p in parts)
    done = sum(p.decided for p in parts)
    workers_cpu = sum(p.cpu_seconds for p in parts) if jobs > 1 else 0.0
    fixed_batch = req.global_batch_tokens is not None
    ranked = top(rows, objective, len(rows), fixed_batch)
    stats = SearchStats(ruled_out + to_decide, by_bill, by_bound, time.perf_counter() - start,
                        time.process_time() - start_cpu + workers_cpu, dict(sorted(rejected.counts.items())),
                        to_decide - done, jobs)
    return PlanResult(req, objective, k, ranked, stats, gpus_vs_time(rows, fixed_batch),
                      memory_vs_time(rows, fixed_batch))


#: Below this many candidates to decide, worker processes cost more to start than they save.
PARALLEL_MIN_CANDIDATES = 64


@dataclass
class _Part:
    """What one worker decided: its fitting rows, counts, and its own CPU seconds."""

    rows: list[Row]
    by_bill: int
    by_bound: int
    decided: int
    rejected: dict[str, int]
    cpu_seconds: float


def _decide(req: PlanRequest, groups: list[Group], deadline_at: float | None, progress: Progress | None = None,
            total: int = 0) -> _Part:
    """Decide the groups in order: the exact resident bound for a whole group, else each candidate's bills. Stops
    starting groups once `deadline_at` (time.time()) has passed."""
    cpu0 = time.process_time()
    rejected = Rejections()
    rows: list[Row] = []
    by_bill = by_bound = done = 0
    for group in groups:
        if deadline_at is not None and time.time() > deadline_at:
            break
        n = len(group.variants)
        budget = budget_bytes(req, group.holdings_layout)
        if resident_bound(req, group.holdings_layout, group.offload_optimizer, budget) > budget:
            rejected.add("resident_over_budget", n)
            by_bound += n
        else:
            for variant in group.variants:
                try:
                    cand = resolve_recompute(req, group.candidate(variant))
                except StepbillError:
                    rejected.add("layout_invalid")
                    continue
                if budget_drops_nothing(req, cand):  # its `none` twin is a candidate of the same group
                    rejected.add("budget_drops_nothing")
                    continue
                row = evaluate(req, cand)
                by_bill += 1
                if row is None:
                    rejected.add("peak_over_budget")
                else:
                    rows.append(row)
        done += n
        if progress is not None:
            progress(done, total)
    return _Part(rows, by_bill, by_bound, done, rejected.counts, time.process_time() - cpu0)


def _chunks(groups: list[Group], n: int) -> list[list[Group]]:
    """`groups` dealt into `n` chunks of about equal candidate counts (largest groups first, each to the lightest
    chunk), each chunk keeping the enumeration order."""
    loads = [0] * n
    members: list[list[int]] = [[] for _ in range(n)]
    for i in sorted(range(len(groups)), key=lambda i: -len(groups[i].variants)):
        j = loads.index(min(loads))
        loads[j] += len(groups[i].variants)
        members[j].append(i)
    return [[groups[i] for i in sorted(m)] for m in members if m]


def _decide_parallel(req: PlanRequest, groups: list[Group], deadline_at: float | None, jobs: int,
                     progress: Progress | None, total: int) -> list[_Part]:
    """`_decide` over chunks of the groups in `jobs` worker processes (fork where the platform has it and the
    caller runs no other threads, else spawn). Progress is reported as chunks finish."""
    import multiprocessing
    import threading
    from concurrent.futures import ProcessPoolExecutor, as_completed

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1 \
        else "spawn"
    chunks = _chunks(groups, jobs * CHUNKS_PER_JOB)
    parts: list[_Part] = []
    done = 0
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context(method)) as pool:
        futures = [pool.submit(_decide, req, chunk, deadline_at) for chunk in chunks]
        for future in as_completed(futures):
            part = future.result()
            parts.append(part)
            done += part.decided
            if progress is not None:
                progress(done, total)
    return parts


#: Chunks per worker: enough that a slow chunk does not leave the other workers idle, few enough to pickle cheaply.
CHUNKS_PER_JOB = 8
