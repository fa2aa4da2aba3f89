"""Pareto fronts of the rows that fit: no other row is at least as good on both axes and better on one.

    gpus_vs_time    (GPUs, step time)        — how much faster more GPUs make the step
    memory_vs_time  (per-GPU peak, step time) — how much memory buys speed (recompute, micro-batch, sharding)

"Time" is the ranking's: the step time when the global batch is fixed (every row's step carries the same tokens);
without one (`--micro-batch` only) steps carry different token counts, so seconds per token (1 / tokens/s).
"""

from __future__ import annotations

from collections.abc import Callable

from stepbill.engine.plan.evaluate import Row


def front(rows: list[Row], x: Callable[[Row], float], y: Callable[[Row], float]) -> list[Row]:
    """The rows no other row dominates on (x, y), both minimised, by ascending x (one row per point)."""
    best: list[Row] = []
    for row in sorted(rows, key=lambda r: (x(r), y(r), r.command)):
        if not best or y(row) < y(best[-1]):
            if best and x(best[-1]) == x(row):
                continue
            best.append(row)
    return best


def front_time(fixed_batch: bool, step_s: float, tokens: int) -> float:
    """Time as the fronts compare it: the step (s), or seconds per token (1 / tokens/s) without a global batch."""
    return step_s if fixed_batch else 1.0 / (tokens / step_s)


def _time(fixed_batch: bool) -> Callable[[Row], float]:
    return lambda r: front_time(fixed_batch, r.step_s, r.tokens_per_step)


def gpus_vs_time(rows: list[Row], fixed_batch: bool = True) -> list[Row]:
    return front(rows, lambda r: r.world, _time(fixed_batch))


def memory_vs_time(rows: list[Row], fixed_batch: bool = True) -> list[Row]:
    return front(rows, lambda r: r.peak_bytes, _time(fixed_batch))
