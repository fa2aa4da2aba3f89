"""JSON of the per-rank bill, the step's collectives and the step time (keys documented in docs/parallel.md)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from stepbill.engine.bill import Bill
from stepbill.engine.fit import Fit
from stepbill.engine.parallel import MEMORY_KEYS
from stepbill.engine.states import rank_checkpoint_bytes
from stepbill.spec.parallel import Parallel


def _bytes(value: float) -> int:
    return round(value)


def fit_to_json(fit: Fit) -> dict[str, Any]:
    """The verdict: usable − reserve = budget, the judged convention, every judged rank class, the per-GPU hint."""
    return {
        "fits": fit.fits,
        "convention": fit.convention,
        "convention_note": fit.convention_note(),
        "usable_bytes": _bytes(fit.card.usable_bytes),
        "usable_source": fit.card.source,
        "reserve_bytes": _bytes(fit.reserve.total_bytes),
        "reserve_items": [x.to_json() for x in fit.reserve.items],
        "reserve_given": fit.reserve.user_given,
        "budget_bytes": _bytes(fit.budget_bytes),
        "worst": fit.worst.rank_class,
        "headroom_bytes": _bytes(fit.worst.headroom_bytes),
        "ranks": [{"class": r.rank_class, "ranks": r.ranks, "peak_bytes": _bytes(r.peak_bytes),
                   "headroom_bytes": _bytes(r.headroom_bytes), "fits": r.fits} for r in fit.ranks],
        "advice": fit.advice,
        "lines": {name: line.to_json() for name, line in fit.lines.items()},
        "host": None if fit.host is None else {
            "node_bytes": _bytes(fit.host.node_bytes), "first_rank": fit.host.first_rank, "gpus": fit.host.gpus,
            "budget_bytes": None if fit.host.budget_bytes is None else _bytes(fit.host.budget_bytes),
            "source": fit.host.source, "fits": fit.host.fits, "checked": fit.host.checked,
            "summary": fit.host.summary()},
    }


def _rank_fit(fit: Fit, name: str) -> dict[str, Any]:
    verdict = fit.for_class(name)
    return {"usable_bytes": _bytes(fit.card.usable_bytes), "reserve_bytes": _bytes(fit.reserve.total_bytes),
            "peak_bytes": _bytes(verdict.peak_bytes), "headroom_bytes": _bytes(verdict.headroom_bytes),
            "fits": verdict.fits, "convention": fit.convention, "judged_class": verdict.rank_class}


def layout_to_json(par: Parallel, note: str = "") -> dict[str, Any]:
    """A layout as the bill's `parallel` part (schema.ParallelPart) and the planner's rows give it: every field of
    Parallel, the GPUs, the expert data-parallel degree and how dp was derived (`note`)."""
    return {**asdict(par), "world": par.world, "edp": par.edp, "note": note}


def parallel_to_json(bill: Bill, fit: Fit | None = None, layout_note: str = "") -> dict[str, Any]:
    """{"parallel", "ranks", "worst_rank", "comm", "time", "gpu", "fit"}: bytes as integers, seconds as floats.
    `ranks[].fits` and `ranks[].fit` only with a verdict (a card given: --gpu or --gpu-mem)."""
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
            "checkpoint_bytes": _bytes(rank_checkpoint_bytes(c.owned)),
            "items": [x.to_json() for x in [*c.resident_items, *c.activation_items, *c.transient_items]],
        }
        if fit is not None:
            entry["fit"] = _rank_fit(fit, c.name)
            entry["fits"] = entry["fit"]["fits"]
        ranks.append(entry)
    collectives = [
        {"name": c.name, "axis": c.axis, "op": c.op, "group": c.group, "scope": c.scope, "link": c.link,
         "calls": c.calls, "bytes": _bytes(c.bytes), "seconds": c.seconds, "overlap": c.overlap,
         "formula": c.line.formula, "explain": c.line.explain()}
        for c in bill.collectives
    ]
    out: dict[str, Any] = {
        "parallel": layout_to_json(par, layout_note),
        "ranks": ranks,
        "worst_rank": worst.name,
        "comm": {
            "per": "one rank of the largest pipeline stage, one optimizer step; bytes over its busiest link",
            "collectives": collectives,
            "total_bytes": _bytes(sum(c.bytes for c in bill.collectives)),
        },
        "time": None if bill.time is None else {
            name.removeprefix("time."): {"value": line.value, "unit": line.unit, "explain": line.explain(),
                                         "provenance": line.provenance, "convention": line.convention}
            for name, line in bill.time.lines.items()
        },
        "gpu": None if gpu is None else {"name": gpu.name, "display": gpu.display, "memory_bytes": _bytes(gpu.memory_bytes),
                                         "memory_note": gpu.memory_note, "usable_bytes": _bytes(gpu.usable_bytes),
                                         "usable_source": gpu.usable_source},
        "fit": None if fit is None else fit_to_json(fit),
    }
    return out
