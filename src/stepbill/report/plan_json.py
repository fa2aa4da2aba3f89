"""`stepbill plan --json`: the planner's result as one JSON object (schema: report/schema_plan.py)."""

from __future__ import annotations

from typing import Any

from stepbill.engine.plan.evaluate import Row
from stepbill.engine.plan.search import PlanResult
from stepbill.engine.plan.space import REASONS
from stepbill.report.parallel_json import layout_to_json

_INT_RUN = ("global_batch_tokens", "train_tokens", "steps")


def row_to_json(row: Row, rank: int | None) -> dict[str, Any]:
    """One row: layout, micro-batch, recompute, memory (bytes), time (s), throughput, run totals, command."""
    par = row.candidate.parallel
    return {
        "rank": rank,
        "gpus": row.world,
        "layout": layout_to_json(par),
        "micro_batch": row.candidate.micro_batch,
        "recompute": row.candidate.recompute,
        "peak_bytes": round(row.peak_bytes),
        "headroom_bytes": round(row.headroom_bytes),
        "budget_bytes": round(row.budget_bytes),
        "step_s": row.step_s,
        "mfu": row.mfu,
        "tokens_per_s": row.tokens_per_s,
        "tokens_per_step": row.tokens_per_step,
        "gpu_seconds_per_token": row.gpu_seconds_per_token,
        "host_node_bytes": None if row.host_node_bytes is None else round(row.host_node_bytes),
        "run": {k: (int(v) if k in _INT_RUN else float(v)) for k, v in row.run.items()},
        "command": row.command,
    }


def known_ranks(result: PlanResult) -> dict[int, int]:
    """Each row's 1-based position under the objective, by id: every row's when the search was exhaustive; under
    branch and bound only the top K's (layouts left unbilled may sit between the other rows billed)."""
    rows = result.rows if result.stats.exhaustive else result.top
    return {id(r): i + 1 for i, r in enumerate(rows)}


def plan_to_json(result: PlanResult, space_note: str) -> dict[str, Any]:
    """The whole answer: request, top K, fronts, search statistics, reasons."""
    req, stats = result.request, result.stats
    position = known_ranks(result)
    return {
        "request": {
            "model": req.model_name, "gpu": req.gpu_name, "gpus": list(req.worlds), "seq": req.seq,
            "global_batch_tokens": req.global_batch_tokens, "micro_batch": req.micro_batch, "recipe": req.recipe,
            "optimizer": req.optimizer, "reserve_gib": req.reserve_gib, "host_mem_gib": req.host_mem_gib,
            "efficiency": req.efficiency,
            "fixed": dict(req.fixed), "cross_node": req.cross_node, "device": req.device,
            "optimizer_impl": req.optimizer_impl,
        },
        "objective": result.objective,
        "top": [row_to_json(r, i + 1) for i, r in enumerate(result.top)],
        "fits": len(result.rows),
        "pareto": {
            "gpus_vs_time": [row_to_json(r, position.get(id(r))) for r in result.gpus_vs_time],
            "memory_vs_time": [row_to_json(r, position.get(id(r))) for r in result.memory_vs_time],
        },
        "search": {
            "candidates": stats.candidates, "evaluated": stats.evaluated, "evaluated_by_bill": stats.by_bill,
            "decided_by_bound": stats.by_bound, "decided_by_floor": stats.by_floor, "exhaustive": stats.exhaustive,
            "seconds": stats.seconds, "layouts_per_s": stats.layouts_per_s,
            "cpu_seconds": stats.cpu_seconds, "jobs": stats.jobs, "layouts_per_cpu_s": stats.layouts_per_cpu_s,
            "rejected": dict(stats.rejected),
            "not_searched": stats.not_searched, "complete": stats.complete,
        },
        "reasons": dict(REASONS),
        "space": space_note,
    }
