"""The search: enumerate the space, decide whole groups with the exact resident bound, then either bill every candidate
(`exhaustive`) or branch and bound — bill only the candidates whose exact lower bounds can still reach the top K or
a Pareto front.

Branch and bound (the default). Every candidate the resident bound leaves gets exact lower bounds from the bill's
own model (engine/plan/bounds.py): a step-time floor (time_floor; the budget solver's policy, unsolved:
budget_floor) and a peak floor (peak_floor: the stage's resident state with its resting gradients and the kept
activations in flight, and on the last stage the loss's backward; the group's resident bound at least). Candidates
are billed in ascending order of the objective's key made of those floors; a candidate is left unbilled — reason
`outranked` — only when all three hold: K rows already billed beat its floors on the objective (strictly, so ties
are billed), a billed row with no more GPUs is strictly faster than its time floor (the GPUs-vs-time front), and a
billed row with a peak no larger than its peak floor is strictly faster (the memory-vs-time front). Its true key is
at least its floors' key, so it can be neither in the top K nor on a front: the answer — top K, both fronts — is the
exhaustive search's. A candidate whose peak floor, once computed, exceeds the budget cannot fit (its judged peak is
at least the floor): it is rejected unbilled — reason `peak_floor_over_budget` — as the resident bound rejects a
whole group. What is lost is the list of every layout that fits; `exhaustive` keeps it.

Counting (`SearchStats`): `candidates` is every point of the space; rule-rejected points are counted per reason but
not as evaluated. `evaluated` = `by_bill` (candidates whose bills were made) + `by_bound` (candidates the resident
bound or their peak floor rejected: the bound decides their verdict exactly — no peak of theirs can be under the
budget — though their peaks are not computed) + `by_floor` (candidates the floors showed cannot enter the answer).
`seconds` is wall-clock; `cpu_seconds` the CPU time of this process and of its worker processes (`jobs` > 1 spreads
the groups over processes), so layouts per CPU-second is the rate of one core whatever `jobs` is. Under `jobs` > 1,
which candidates are billed and which outranked depends on when each worker reads the others' rows (peers.py); the
answer does not, nor `evaluated` + `budget_drops_nothing` (a budget candidate billed and found to drop nothing is
counted there, one its floors rule out first as evaluated).
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from stepbill.engine.plan.bounds import time_layout
from stepbill.engine.plan.evaluate import Row, budget_drops_nothing, judged, resolve_recompute
from stepbill.engine.plan.pareto import gpus_vs_time, memory_vs_time
from stepbill.engine.plan.partition import (
    bound_in_workers,
    bound_part,
    deal,
    partitions,
    resident_fits,
    worker_context,
)
from stepbill.engine.plan.rank import sort_key, top
from stepbill.engine.plan.resident import HOST_BOUND
from stepbill.engine.plan.space import Group, PlanRequest, Rejections, enumerate_space
from stepbill.errors import StepbillError
from stepbill.spec.parallel import Parallel

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
    by_floor: int = 0  # candidates whose floors cannot reach the top K or a front (branch and bound; not billed)
    exhaustive: bool = True  # every candidate billed (False: branch and bound)

    @property
    def complete(self) -> bool:
        """Whether every candidate got its verdict (no deadline hit)."""
        return self.not_searched == 0

    @property
    def evaluated(self) -> int:
        return self.by_bill + self.by_bound + self.by_floor

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
    """The planner's answer: the rows billed that fit (best first under `objective`: every layout that fits when the
    search is exhaustive; the top K, both fronts and what the search billed on its way under branch and bound),
    the top K, the fronts, stats."""

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
           deadline_s: float | None = None, jobs: int = 1, exhaustive: bool = False) -> PlanResult:
    """Plan `req`: the top `k` rows under `objective` and both Pareto fronts, by branch and bound (module
    docstring), or with `exhaustive` every candidate's verdict and every fitting row. With `deadline_s` (wall-clock
    seconds) the search stops once it has run that long; the candidates left are counted in `stats.not_searched` and
    the answer covers only what was searched (layouts are taken in a fixed random order, so that is a uniform sample
    of the space's layouts: `_shuffled`). `jobs` > 1 decides the groups in that many worker processes (branch and
    bound: one partition of the space's (tp, pp, cp) cells each, `_branch_and_bound`, partition.py); the answer is
    the same (rows are ranked by a total order)."""
    sort_key(objective)  # an unknown objective fails before the search
    with collector_paused():
        return _search(req, objective, k, progress, deadline_s, jobs, exhaustive)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the search, back as it was after. The search makes no reference
    cycles (tests/test_plan.py: gc.collect() finds none after two searches in a fresh interpreter), so pausing costs
    no memory, while the collector's passes over the millions of leads and memo entries a large search holds cost
    about a sixth of its CPU time (DeepSeek-V3 × 64: 19.5 → 16.3 CPU-s). Worker processes forked inside it inherit
    the pause."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _search(req: PlanRequest, objective: str, k: int, progress: Progress | None, deadline_s: float | None,
            jobs: int, exhaustive: bool) -> PlanResult:
    start, start_cpu = time.perf_counter(), time.process_time()
    rejected = Rejections()
    groups = _shuffled(list(enumerate_space(req, rejected)))
    to_decide = sum(len(g.variants) for g in groups)
    ruled_out = sum(rejected.counts.values())
    deadline_at = None if deadline_s is None else time.time() + deadline_s
    jobs = jobs if jobs > 1 and to_decide >= PARALLEL_MIN_CANDIDATES else 1
    if not exhaustive:
        return _branch_and_bound(req, objective, k, groups, rejected, progress, deadline_at, jobs, start, start_cpu)
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


def _branch_and_bound(req: PlanRequest, objective: str, k: int, groups: list[Group], rejected: Rejections,
                      progress: Progress | None, deadline_at: float | None, jobs: int, start: float,
                      start_cpu: float) -> PlanResult:
    """The resident bound, every candidate's floors, then the bills in floor order — over the whole space, or with
    `jobs` > 1 over `jobs` partitions of it in worker processes, each its own branch and bound (partition.py)
    pruning against its rows and those the others billed so far (peers.py), their rows merged. Exact
    either way: a row in the top K or on a front of the whole space is in the top K or on that front of its
    partition, with any of the space's other rows beside its own, so its partition bills it."""
    to_decide = sum(len(g.variants) for g in groups)
    ruled_out = sum(rejected.counts.values())
    indexed = list(enumerate(groups))
    if jobs > 1:
        # one partition a worker: more, handed out as workers come free, balance the load but bill more — each
        # partition takes its own candidates best first, so one that runs early bills its own front before the others
        # publish the rows that would rule it out (Llama-3-8B × 8, jobs 2: 313 bills with 2 partitions, 889 with 8;
        # DeepSeek-V3 × 2,048 with 16 workers: the partitions' CPU scheduled onto 16 cores 4.9 s with 16, 4.8 with 64)
        parts = bound_in_workers(req, partitions(indexed, jobs), objective, k, deadline_at, jobs, progress, to_decide)
    else:
        parts = [bound_part(req, indexed, objective, k, deadline_at, progress, progress, to_decide)]
    rows = [row for p in parts for row in p.billed.rows]
    for p in parts:
        for reason, n in (*p.floors.rejected.items(), *p.billed.rejected.items()):
            rejected.add(reason, n)
        rejected.add("resident_over_budget", p.by_bound)
        rejected.add("outranked", p.billed.by_floor)
    fixed_batch = req.global_batch_tokens is not None
    workers_cpu = sum(p.cpu_seconds for p in parts) if jobs > 1 else 0.0
    not_searched = sum(p.not_searched for p in parts) + to_decide - sum(p.decided for p in parts)
    # the resident bound's, the host bound's and the peak floors'
    by_bound = sum(p.by_bound + p.floors.rejected.get(HOST_BOUND, 0) + p.billed.by_bound for p in parts)
    stats = SearchStats(ruled_out + to_decide, sum(p.billed.by_bill for p in parts), by_bound,
                        time.perf_counter() - start, time.process_time() - start_cpu + workers_cpu,
                        dict(sorted(rejected.counts.items())), not_searched, jobs,
                        sum(p.billed.by_floor for p in parts), exhaustive=False)
    return PlanResult(req, objective, k, top(rows, objective, len(rows), fixed_batch), stats,
                      gpus_vs_time(rows, fixed_batch), memory_vs_time(rows, fixed_batch))


def _shuffled(groups: list[Group]) -> list[Group]:
    """The groups in a fixed random order of their time layouts: a search stopped by its deadline has decided a
    uniform random sample of them, not the first corner of the enumeration (tp 1, pp 1, ...); a complete search
    ranks the same rows either way. A time layout's groups (bounds.time_layout: a layout under 1F1B and under GPipe,
    each with and without optimizer offload) stay together, in the enumeration's order, so the floors of the later
    ones read the earlier ones' (floor_pass.floors)."""
    units: dict[Parallel, list[Group]] = {}
    for group in groups:
        units.setdefault(time_layout(group.holdings_layout), []).append(group)
    layouts = list(units.values())
    random.Random(SAMPLE_SEED).shuffle(layouts)
    return [group for layout in layouts for group in layout]


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
        if resident_fits(req, group) is None:
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
                reason, row = judged(req, cand)
                by_bill += 1
                if row is None:
                    rejected.add(reason)
                else:
                    rows.append(row)
        done += n
        if progress is not None:
            progress(done, total)
    return _Part(rows, by_bill, by_bound, done, rejected.counts, time.process_time() - cpu0)


def _decide_parallel(req: PlanRequest, groups: list[Group], deadline_at: float | None, jobs: int,
                     progress: Progress | None, total: int) -> list[_Part]:
    """`_decide` over chunks of the groups in `jobs` worker processes. Progress is reported as chunks finish. The
    request reaches each worker once, through the pool's initializer, not pickled with each chunk: a worker's memos
    are keyed on its model and recipes, and a new, equal copy per chunk would make every memo hit compare them field
    by field (partition.py does the same for the branch and bound's partitions)."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    chunks = deal(groups, jobs * CHUNKS_PER_JOB, lambda g: len(g.variants))
    parts: list[_Part] = []
    done = 0
    with ProcessPoolExecutor(jobs, mp_context=worker_context(), initializer=_hold, initargs=(req,)) as pool:
        futures = [pool.submit(_decide_held, chunk, deadline_at) for chunk in chunks]
        for future in as_completed(futures):
            part = future.result()
            parts.append(part)
            done += part.decided
            if progress is not None:
                progress(done, total)
    return parts


_HELD: PlanRequest | None = None  # a worker's request (set by the pool's initializer)


def _hold(req: PlanRequest) -> None:
    global _HELD
    _HELD = req


def _decide_held(groups: list[Group], deadline_at: float | None) -> _Part:
    assert _HELD is not None
    return _decide(_HELD, groups, deadline_at)


#: Chunks per worker: enough that a slow chunk does not leave the other workers idle, few enough to pickle cheaply.
CHUNKS_PER_JOB = 8
