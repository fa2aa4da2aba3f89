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


def sort_key(objective: str, fixed_batch: bool = True) -> Callable[[Row], tuple]:
    """The key that orders rows best first under `objective`."""
    if objective not in OBJECTIVES:
        raise unknown_name("objective", objective, OBJECTIVES)

    def time(r: Row) -> float:
        return r.step_s if fixed_batch else -r.tokens_per_s

    keys: dict[str, Callable[[Row], tuple]] = {
        "time": lambda r: (time(r), r.world, r.peak_bytes, r.command),
        "gpus": lambda r: (r.world, time(r), r.peak_bytes, r.command),
        "cost": lambda r: (r.gpu_seconds_per_token, time(r), r.command),
        "memory": lambda r: (r.peak_bytes, time(r), r.command),
    }
    return keys[objective]


def top(rows: Iterable[Row], objective: str, k: int, fixed_batch: bool = True) -> list[Row]:
    """The best `k` rows under `objective`."""
    return sorted(rows, key=sort_key(objective, fixed_batch))[:k]
