"""`stepbill check --json`: the comparison as one JSON object (schema: report/schema_check.py CheckJson, CheckShardedJson).

Formatting only: the rows come from stepbill.check, the measurements from stepbill.measure (not imported here).
"""

from __future__ import annotations

import math
from typing import Any


def _finite_or_none(error: float | None) -> float | None:
    """A relative error for JSON: null when there is none or it is infinite (measured 0, predicted not)."""
    return error if error is not None and math.isfinite(error) else None


def single_check_json(spec: Any, mode: str, bill: Any, measured: Any, rows: list, summary: str) -> dict[str, Any]:
    """The object `stepbill check --json` prints (one process); `stepbill.check(...).to_json()` returns it too."""
    return {
        "model": spec.name, "mode": mode, "convention": bill.convention, "settings": measured.settings,
        "rows": [{"category": r.category, "unit": r.unit, "line": r.line, "predicted": r.predicted,
                  "measured": r.measured, "error": _finite_or_none(r.error), "verdict": r.verdict} for r in rows],
        "measured": {"peak_phase": measured.peak_phase, "breakdown_at_peak": measured.breakdown},
        "predicted_flops_causal": bill.lines["flops.step"].value,
        "verdict": summary,
    }


def sharded_check_json(name: str, dp: int, zero: int, results: list[tuple[int, str, Any, Any, list]],
                       verdicts: list[str]) -> dict[str, Any]:
    """The object `stepbill check --dp N --zero Z --json` prints; `verdicts[i]` summarises `results[i]`."""
    return {"model": name, "dp": dp, "zero": zero, "ranks": [
        {"rank": r, "mode": mode, "convention": pred.convention,
         "rows": [{"category": x.category, "predicted": x.predicted, "measured": x.measured,
                   "error": _finite_or_none(x.error), "verdict": x.verdict} for x in rows],
         "measured_breakdown_at_peak": m.breakdown, "predicted_transient": pred.transient,
         "verdict": summary} for (r, mode, pred, m, rows), summary in zip(results, verdicts, strict=True)]}
