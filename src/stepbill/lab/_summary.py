"""What every `stepbill lab` summary is built from: a summary is plain JSON-able data {"topic", "settings", "values",
"tables": [{"title", "columns", "rows", "takeaway"}]}, column headers carrying the units."""

from __future__ import annotations

from typing import Any

Summary = dict[str, Any]


BATCHES = (1, 10, 100, 1000, 10_000, 100_000, 1_000_000)  # batch sizes for η* = η_max/(1 + B_noise/B)


SEED_REGISTERS = (0.470, 0.677)  # seed 002 §01: m̂ and √v̂ after 12 steps (its stream is not printed)


def _table(title: str, columns: list[str], rows: list[list[Any]], takeaway: str = "") -> dict[str, Any]:
    """One printed table; `takeaway` is the one line printed under it."""
    return {"title": title, "columns": columns, "rows": rows, "takeaway": takeaway}


def _f(x: Any) -> float:
    return float(x)
