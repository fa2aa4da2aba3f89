"""`stepbill fit --max`: the search's result as JSON (schema_fit.FitMaxJson) and as terminal text. No arithmetic."""

from __future__ import annotations

from typing import Any

from stepbill.engine.fit_max import AXIS_WORDS, FitMax
from stepbill.report.units import fmt_bytes

GIB = 2**30
METHOD = ("exponential (step, 2·step, 4·step, ... up to the limit) then bisection of each rank class's last-fit / "
          "first-fail bracket; every evaluated peak checked non-decreasing in the value")


def fit_max_to_json(result: FitMax, model: str, command: str) -> dict[str, Any]:
    """The JSON object of `stepbill fit --max ... --json` (bytes as integers)."""
    classes = []
    for c in result.classes:
        entry: dict[str, Any] = {"rank_class": c.rank_class, "ranks": c.ranks, "largest": c.largest,
                                 "peak_bytes": round(c.peak_bytes), "headroom_bytes": round(c.headroom_bytes),
                                 "resident_bytes": round(c.resident_bytes)}
        if c.next_value is not None and c.next_peak_bytes is not None:
            entry |= {"next_value": c.next_value, "next_peak_bytes": round(c.next_peak_bytes)}
        classes.append(entry)
    return {
        "schema": "stepbill.fit/1",
        "model": model,
        "axis": result.axis,
        "largest": result.largest,
        "limited_by": "memory" if result.limited_by_memory else "limit",
        "limit": result.limit,
        "limit_reason": result.limit_reason,
        "step": result.step,
        "fixed": dict(result.fixed),
        "card": {"name": result.card.name, "usable_bytes": round(result.card.usable_bytes),
                 "source": result.card.source},
        "reserve_bytes": round(result.reserve_bytes),
        "budget_bytes": round(result.budget_bytes),
        "convention": result.convention,
        "classes": classes,
        "host_limit": None if result.host_value is None else {"value": result.host_value,
                                                              "summary": result.host_summary},
        "search": {"evaluated": result.evaluated, "method": METHOD},
        "command": command,
    }


def fit_max_lines(result: FitMax, model: str, command: str) -> list[str]:
    """The terminal text: the answer, one line per rank class, the budget, the command that reproduces it."""
    word = AXIS_WORDS[result.axis]
    largest = result.largest
    assert largest is not None  # the API raises "nothing fits" before anything is printed
    unit = ("sequence" if largest == 1 else "sequences") if result.axis == "micro_batch" else "tokens"
    fixed = ", ".join(f"{AXIS_WORDS.get(k, k)} {v:,}" for k, v in result.fixed.items())  # type: ignore[call-overload]
    budget = (f"budget {result.budget_bytes / GIB:.2f} GiB per GPU = {result.card.name} usable "
              f"{result.card.usable_bytes / GIB:.2f} GiB − reserve {result.reserve_bytes / GIB:.2f} GiB; judged on "
              f"the {result.convention} peak (GiB = 2^30 B)")
    why = (f"{word} {largest + result.step:,} does not fit" if result.limited_by_memory
           else f"the limit: {result.limit_reason}; memory would take more")
    out = [f"{model}: largest {word} that fits, {fixed}: {largest:,} {unit} ({why})", budget]
    for c in result.classes:
        line = (f"  {c.rank_class} ({c.ranks} GPU{'s' if c.ranks != 1 else ''}): {word} {c.largest:,} → peak "
                f"{fmt_bytes(c.peak_bytes)}, headroom {fmt_bytes(c.headroom_bytes)}")
        if c.next_value is not None and c.next_peak_bytes is not None:
            over = c.next_peak_bytes - result.budget_bytes
            line += f"; {c.next_value:,} → peak {fmt_bytes(c.next_peak_bytes)}, " + (
                f"over by {fmt_bytes(over)}" if over > 0 else "fits the card, not the node's host memory")
        out.append(line + f" (resident {fmt_bytes(c.resident_bytes)})")
    if result.host_value is not None:
        out.append(f"  host memory from {word} {result.host_value:,}: {result.host_summary}")
    step = f" in steps of {result.step}" if result.step > 1 else ""
    values = "value" if result.evaluated == 1 else "values"
    out.append(f"searched {result.evaluated} {values}{step} (exponential, then bisection; peaks non-decreasing)")
    out.append(f"reproduce: {command}")
    return out
