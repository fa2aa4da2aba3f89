"""Rank the rows that fit by an objective and keep the top K.

    time    step time, s (ascending; with no global batch, tokens/s descending: steps then differ in tokens)
    gpus    GPUs, then step time
    cost    GPU-seconds per token = step time × GPUs / tokens per step (∝ the run's cost at any price), then time
    memory  per-GPU peak of the judged rank class, then step time

Ties end on the `stepbill bill` command (a total order: the same request always ranks the same way).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from stepbill.engine.plan.evaluate import Row
from stepbill.errors import unknown_name

OBJECTIVES = ("time", "gpus", "cost", "memory")


def objective_key(objective: str, fixed_batch: bool, step_s: float, world: int, peak: float,
                  tokens: int) -> tuple[float, ...]:
    """The numeric part of a row's key under `objective` (the command, its last tie-break, left out), from its step
    time (s), GPUs, judged peak (bytes) and tokens per step: monotone in each, so the branch and bound's floors
    (branch_bound.py) give a key never above the bill's."""
    speed = step_s if fixed_batch else -(tokens / step_s)  # step time, or −tokens/s (time.tokens_per_s)
    if objective == "time":
        return (speed, world, peak)
    if objective == "gpus":
        return (world, speed, peak)
    if objective == "cost":
        return (step_s * world / tokens, speed)  # Row.gpu_seconds_per_token
    return (peak, speed)  # memory


def row_key(objective: str, fixed_batch: bool, row: Row) -> tuple[float, ...]:
    """objective_key of a billed row."""
    return objective_key(objective, fixed_batch, row.step_s, row.world, row.peak_bytes, row.tokens_per_step)


def sort_key(objective: str, fixed_batch: bool = True) -> Callable[[Row], tuple]:
    """The key that orders rows best first under `objective`."""
    if objective not in OBJECTIVES:
        raise unknown_name("objective", objective, OBJECTIVES)
    return lambda r: (*row_key(objective, fixed_batch, r), r.command)


def top(rows: Iterable[Row], objective: str, k: int, fixed_batch: bool = True) -> list[Row]:
    """The best `k` rows under `objective`."""
    return sorted(rows, key=sort_key(objective, fixed_batch))[:k]
