"""Pareto fronts of the rows that fit: no other row is at least as good on both axes and better on one.

    gpus_vs_time    (GPUs, step time)        — how much faster more GPUs make the step
    memory_vs_time  (per-GPU peak, step time) — how much memory buys speed (recompute, micro-batch, sharding)
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


def gpus_vs_time(rows: list[Row]) -> list[Row]:
    return front(rows, lambda r: r.world, lambda r: r.step_s)


def memory_vs_time(rows: list[Row]) -> list[Row]:
    return front(rows, lambda r: r.peak_bytes, lambda r: r.step_s)
