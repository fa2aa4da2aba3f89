"""Branch and bound over a part of the space — the whole of it in one process, or one partition of it in a worker
(search.py's `jobs`): the resident bound of each group, every candidate's floors, then the bills in floor order
against the part's answer (its own rows and, in workers, the rows the other partitions billed: peers.py); and the
partitions, the workers and what they share.

A partition is whole (tp, pp, cp) cells of the space, dealt by candidate count: the groups of a cell share most of
their memoised parts (held bytes, collectives, kernels, rows), so a worker computes them once. Merging the
partitions' rows is exact: a row in the top K or on a front of the whole space is in the top K or on that front of
its partition, also with the other partitions' rows ruling there (they are rows of the space), and a partition's
branch and bound bills every such row (branch_bound.py).
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from stepbill.engine.plan.branch_bound import Billed, bill_in_order
from stepbill.engine.plan.floor_pass import Floors, Progress, floors
from stepbill.engine.plan.peers import Peers, shared_array
from stepbill.engine.plan.resident import HOST_BOUND, budget_bytes, host_budget_exceeded, resident_bound
from stepbill.engine.plan.space import Group, PlanRequest

T = TypeVar("T")


@dataclass
class Bound:
    """What one partition's branch and bound found: its floors pass, the candidates its resident bound rejected, its
    bills, and its CPU seconds."""

    floors: Floors
    by_bound: int
    billed: Billed
    cpu_seconds: float

    @property
    def decided(self) -> int:
        """Candidates of the groups its floors pass went through (a deadline may stop it before the last)."""
        return self.floors.decided

    @property
    def not_searched(self) -> int:
        return self.billed.not_searched


def bound_part(req: PlanRequest, indexed: list[tuple[int, Group]], objective: str, k: int,
                deadline_at: float | None, floors_progress: Progress | None = None,
                bills_progress: Progress | None = None, total: int = 0, peers: Peers | None = None) -> Bound:
    """Branch and bound over the (index, group) pairs: their floors (`floors_part`; progress in candidates of
    `total`), then their bills in floor order against their own answer — with `peers`, and the rows the other
    partitions billed (branch_bound.bill_in_order; progress in leads)."""
    cpu0 = time.process_time()
    found, by_bound = floors_part(req, indexed, objective, deadline_at, floors_progress, total)
    billed = bill_in_order(req, dict(indexed), found.leads, objective, k, deadline_at, bills_progress,
                           found.nodes, peers)
    # the bills have taken the leads and nodes, and the search reads only the counts: a worker's Bound goes back
    # pickled (half the DeepSeek-V3 × 2,048 space's leads and nodes: ~27 MB, ~0.5 s to pickle and unpickle)
    found.leads, found.nodes = [], []
    return Bound(found, by_bound, billed, time.process_time() - cpu0)


#: What a worker process shares with the search's (set by the pool's initializer): the search — its request,
#: objective, K and deadline, sent once a worker as search._decide_parallel sends its request — its progress counters
#: (candidates through the floors, leads decided, leads made: multiprocessing Values, added to under their locks), and
#: the partitions' billed rows (peers.shared_array: the records and their count).
_SHARED: tuple[tuple[PlanRequest, str, int, float | None], tuple[Any, Any, Any], tuple[Any, Any]] | None = None
PROGRESS_POLL_S = 0.25  # how often the search's process reads the workers' counters


def _share(search: tuple[PlanRequest, str, int, float | None], counters: tuple[Any, Any, Any],
           rows: tuple[Any, Any]) -> None:
    global _SHARED
    _SHARED = search, counters, rows


def _add(counter: Any, n: int) -> None:
    if n:
        with counter.get_lock():
            counter.value += n


def _bound_worker(indexed: list[tuple[int, Group]], number: int) -> Bound:
    """bound_part of partition `number` in a worker process, its progress added to the shared counters as it goes,
    its rows shared with the other partitions' (peers.py)."""
    assert _SHARED is not None
    (req, objective, k, deadline_at), (through, decided, made), rows = _SHARED
    return bound_part(req, indexed, objective, k, deadline_at, _reporter(through), _reporter(decided, made),
                      peers=Peers(*rows, writer=number))


def _reporter(counter: Any, totals: Any = None) -> Progress:
    """A progress callback that adds to `counter` what it has not added yet, and once to `totals` its pass's
    total."""
    added, total_added = 0, False

    def report(done: int, total: int) -> None:
        nonlocal added, total_added
        _add(counter, done - added)
        added = done
        if totals is not None and not total_added:
            _add(totals, total)
            total_added = True

    return report


def bound_in_workers(req: PlanRequest, parts: list[list[tuple[int, Group]]], objective: str, k: int,
                     deadline_at: float | None, jobs: int, progress: Progress | None, total: int) -> list[Bound]:
    """bound_part of each partition of `parts` in `jobs` worker processes, their billed rows shared (peers.py);
    `progress` reads their shared counters every PROGRESS_POLL_S: the candidates through the floors (of `total`)
    until every partition is through, then the leads decided (of those made), as one process reports its two
    passes."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    context = worker_context()
    counters = (context.Value("q", 0), context.Value("q", 0), context.Value("q", 0))
    through, decided, made = counters
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=_share,
                             initargs=((req, objective, k, deadline_at), counters, shared_array(context))) as pool:
        futures = [pool.submit(_bound_worker, part, i) for i, part in enumerate(parts)]
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=PROGRESS_POLL_S, return_when=FIRST_COMPLETED)
            if progress is not None:
                if through.value < total:
                    progress(through.value, total)
                else:
                    progress(decided.value, made.value)
        return [future.result() for future in futures]


def partitions(indexed: list[tuple[int, Group]], n: int) -> list[list[tuple[int, Group]]]:
    """The (index, group) pairs in `n` partitions of about equal candidate counts (`deal`), each (tp, pp, cp) cell
    whole in one (its groups share the most memoised parts: a worker computes them once), each partition in the
    given order."""
    cells: dict[tuple[int, int, int], list[int]] = {}
    for i, (_, group) in enumerate(indexed):
        par = group.holdings_layout
        cells.setdefault((par.tp, par.pp, par.cp), []).append(i)
    dealt = deal(list(cells.values()), n, lambda cell: sum(len(indexed[i][1].variants) for i in cell))
    return [[indexed[i] for i in sorted(i for cell in part for i in cell)] for part in dealt]


def deal(items: list[T], n: int, size: Callable[[T], int]) -> list[list[T]]:
    """`items` dealt into at most `n` non-empty lists of about equal total `size` (largest first, each to the
    lightest list so far), each list keeping the items' order."""
    loads = [0] * n
    members: list[list[int]] = [[] for _ in range(n)]
    for i in sorted(range(len(items)), key=lambda i: -size(items[i])):
        j = loads.index(min(loads))
        loads[j] += size(items[i])
        members[j].append(i)
    return [[items[i] for i in sorted(m)] for m in members if m]


def resident_fits(req: PlanRequest, group: Group) -> float | None:
    """The group's resident bound (bytes) when it is within the budget; None when it alone exceeds it (the exact
    bound rejects every candidate of the group; the stages past the first one over the budget are not summed)."""
    budget = budget_bytes(req, group.holdings_layout)
    bound = resident_bound(req, group.holdings_layout, group.offload_optimizer, budget)
    return None if bound > budget else bound


#: The share of the time a deadline leaves that the floors pass may take: the rest bills the candidates it found, best
#: floor first. Without it a deadline shorter than the floors pass (DeepSeek-V3 × 2,048: ~30 CPU-s) left no time to
#: bill anything, and the answer had no row.
FLOORS_SHARE = 0.5


def floors_part(req: PlanRequest, indexed: list[tuple[int, Group]], objective: str, deadline_at: float | None,
                 progress: Progress | None = None, total: int = 0) -> tuple[Floors, int]:
    """The resident bound of each (index, group) and, under optimizer offload, its host bound
    (resident.host_budget_exceeded), then the floors of the candidates they leave, stopping at FLOORS_SHARE of the
    time `deadline_at` leaves then: (Floors, candidates the resident bound rejected; the host bound's are
    Floors.rejected[HOST_BOUND])."""
    cpu0 = time.process_time()
    kept: list[tuple[int, Group, float]] = []
    rejected = by_host = 0
    for index, group in indexed:
        bound = resident_fits(req, group)
        if bound is None:
            rejected += len(group.variants)
        elif host_budget_exceeded(req, group):  # the node's host memory cannot hold the optimizer states alone
            by_host += len(group.variants)
        else:
            kept.append((index, group, bound))
    if deadline_at is not None:
        now = time.time()
        deadline_at = now + FLOORS_SHARE * max(deadline_at - now, 0.0)
    found = floors(req, kept, objective, deadline_at, progress, total)
    found.decided += rejected + by_host
    if by_host:  # the floors pass rejects nothing for this reason: the count is the host bound's alone
        found.rejected[HOST_BOUND] = by_host
    if progress is not None:
        progress(found.decided, total)  # with the candidates the resident bound decided
    found.cpu_seconds = time.process_time() - cpu0  # the bounds' CPU too (a worker's, under jobs > 1)
    return found, rejected


def worker_context() -> multiprocessing.context.BaseContext:
    """Fork where the platform has it and this process runs no other thread (workers inherit its memos), else
    spawn."""
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1 \
        else "spawn"
    return multiprocessing.get_context(method)
