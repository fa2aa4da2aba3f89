"""The branch and bound's second pass in worker processes (`jobs` > 1): the leads are taken best key first, as
branch_bound.bill_in_order takes them, but in rounds. A round pops the best leads that `Answer.cannot_take` cannot
skip — up to SHARPEN_PER_JOB × jobs that still carry their group's resident bound, up to `jobs` whose peak floor is
exact — and hands them to the workers: the first are sharpened (bounds.peak_floor) and go back into the queue, the
others are billed and their rows join the answer. Each round's skips are decided against the rows of the rounds
before it, so a round may bill a lead that a row of the same round would have let it skip: more bills than one
process makes, never a different answer (a lead is skipped only when billed rows beat its floors on the objective
and on both fronts — search.py's docstring — and a row more can only make that sooner). What it buys is wall-clock:
the bills and peak floors, the search's dearest part once the floors are spread (search._branch_and_bound), run on
every core.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor

from stepbill.engine.plan.branch_bound import Answer, Billed, Lead, LeadQueue, Progress, bill_lead, sharpen
from stepbill.engine.plan.evaluate import Row
from stepbill.engine.plan.space import Group, PlanRequest

SHARPEN_PER_JOB = 64  # leads a worker sharpens per round (a peak floor is ~0.2 ms: a chunk outweighs its pickling)

#: What every worker reads: (request, groups, objective), set by the pool's initializer (inherited under fork).
_SHARED: tuple[PlanRequest, list[Group], str] | None = None


def _init(req: PlanRequest, groups: list[Group], objective: str) -> None:
    global _SHARED
    _SHARED = (req, groups, objective)


def _sharpen_chunk(leads: list[Lead]) -> tuple[list[Lead], float]:
    """The leads with their exact peak floors, and the CPU seconds it took."""
    assert _SHARED is not None
    req, groups, objective = _SHARED
    cpu0 = time.process_time()
    return [sharpen(req, groups, lead, objective) for lead in leads], time.process_time() - cpu0


def _bill(lead: Lead) -> tuple[str, Row | None, float]:
    """branch_bound.bill_lead of the lead, and the CPU seconds it took."""
    assert _SHARED is not None
    req, groups, _ = _SHARED
    cpu0 = time.process_time()
    reason, row = bill_lead(req, groups[lead[4]], lead[5])
    return reason, row, time.process_time() - cpu0


def worker_context() -> multiprocessing.context.BaseContext:
    """Fork where the platform has it and this process runs no other thread (workers inherit its memos), else
    spawn."""
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1 \
        else "spawn"
    return multiprocessing.get_context(method)


def bill_in_rounds(req: PlanRequest, groups: list[Group], leads: list[Lead], objective: str, k: int,
                   deadline_at: float | None, jobs: int, progress: Progress | None = None) -> tuple[Billed, float]:
    """bill_in_order's answer in `jobs` worker processes (module docstring): (what it billed, the workers' CPU
    seconds)."""
    answer = Answer(objective, k, req.global_batch_tokens is not None)
    rejected: dict[str, int] = {}
    by_bill = by_floor = done = 0
    workers_cpu = 0.0
    queue = LeadQueue(leads)
    total = len(queue)
    with ProcessPoolExecutor(jobs, mp_context=worker_context(), initializer=_init,
                             initargs=(req, groups, objective)) as pool:
        while queue:
            if deadline_at is not None and time.time() > deadline_at:
                return Billed(answer.rows, by_bill, by_floor, len(queue), rejected), workers_cpu
            to_sharpen: list[Lead] = []
            to_bill: list[Lead] = []
            while queue and len(to_sharpen) < SHARPEN_PER_JOB * jobs and len(to_bill) < jobs:
                lead = queue.pop()
                if answer.cannot_take(lead):
                    by_floor += 1
                    done += 1
                else:
                    (to_bill if lead[6] else to_sharpen).append(lead)
            size = -(-len(to_sharpen) // jobs)  # ceil: one chunk per worker
            sharpening = [pool.submit(_sharpen_chunk, to_sharpen[i:i + size])
                          for i in range(0, len(to_sharpen), size)] if to_sharpen else []
            billing: list[Future] = [pool.submit(_bill, lead) for lead in to_bill]
            for future in sharpening:
                sharpened, cpu = future.result()
                workers_cpu += cpu
                for lead in sharpened:
                    queue.push(lead)
            for future in billing:  # the rows are ranked by a total order afterwards (search.py)
                reason, row, cpu = future.result()
                workers_cpu += cpu
                if row is not None:
                    answer.add(row)
                by_bill += reason in ("", "peak_over_budget")
                if reason:
                    rejected[reason] = rejected.get(reason, 0) + 1
                done += 1
            if progress is not None:
                progress(done, total)
    return Billed(answer.rows, by_bill, by_floor, 0, rejected), workers_cpu
