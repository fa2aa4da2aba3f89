"""JSON of the per-rank bill, the step's collectives and the step time (keys documented in docs/parallel.md)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from stepbill.engine.bill import Bill
from stepbill.engine.parallel import MEMORY_KEYS


def _bytes(value: float) -> int:
    return round(value)


def parallel_to_json(bill: Bill) -> dict[str, Any]:
    """{"parallel", "ranks", "worst_rank", "comm", "time", "gpu"}: bytes as integers, seconds as floats."""
    par = bill.recipe.parallel
    gpu = bill.gpu
    worst = bill.worst_rank
    ranks = []
    for c in bill.ranks:
        entry: dict[str, Any] = {
            "class": c.name,
            "pp_stages": list(c.stages),
            "ranks": c.ranks,
            "layers": c.layers,
            "micro_batches_in_flight": c.in_flight,
            "model": c.model,
            "notes": list(c.notes),
            "memory": {k: _bytes(c.memory[k]) for k in MEMORY_KEYS},
            "cpu": {k: _bytes(v) for k, v in c.cpu.items()},
            "items": [x.to_json() for x in [*c.resident_items, *c.activation_items, *c.transient_items]],
        }
        if gpu is not None:
            entry["fits"] = c.memory["peak"] <= gpu.memory_bytes
        ranks.append(entry)
    collectives = [
        {"name": c.name, "axis": c.axis, "op": c.op, "group": c.group, "scope": c.scope, "link": c.link,
         "calls": c.calls, "bytes": _bytes(c.bytes), "seconds": c.seconds, "overlap": c.overlap,
         "formula": c.line.formula, "explain": c.line.explain()}
        for c in bill.collectives
    ]
    out: dict[str, Any] = {
        "parallel": {**asdict(par), "world": par.world, "edp": par.edp},
        "ranks": ranks,
        "worst_rank": worst.name,
        "comm": {
            "per": "one rank of the largest pipeline stage, one optimizer step; bytes over its busiest link",
            "collectives": collectives,
            "total_bytes": _bytes(sum(c.bytes for c in bill.collectives)),
        },
        "time": None if bill.time is None else {
            name.removeprefix("time."): {"value": line.value, "unit": line.unit, "explain": line.explain(),
                                         "provenance": line.provenance}
            for name, line in bill.time.lines.items()
        },
        "gpu": None if gpu is None else {"name": gpu.name, "display": gpu.display, "memory_bytes": _bytes(gpu.memory_bytes),
                                         "memory_note": gpu.memory_note},
    }
    return out
