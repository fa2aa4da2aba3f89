"""The recompute ranking as a terminal table and as JSON (formatting only; numbers come from the engine)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from stepbill.engine.recompute.budget import Solution
from stepbill.engine.recompute.ranking import GIB, TFLOP, Crossover, Ranking
from stepbill.report.units import fmt_bytes


def ranking_to_json(ranking: Ranking, crossings: list[Crossover], slope: float,
                    budget: tuple[Solution, Solution] | None = None) -> dict[str, Any]:
    cum = ranking.cumulative()
    out: dict[str, Any] = {
        "schema": "stepbill.recompute/1",
        "units": {"memory": "bytes", "flops": "FLOPs (2 per multiply-add, causal-halved attention)",
                  "tflop_per_gib": "TFLOP (1e12) per GiB (2^30 B)"},
        "layer_kind": ranking.layer_kind,
        "rows": [
            {"label": r.label, "tensors": list(r.tensors), "bytes": round(r.bytes), "flops": round(r.flops),
             "flops_per_byte": r.flops_per_byte, "tflop_per_gib": r.tflop_per_gib, "input_width": r.input_width,
             "cumulative_bytes": round(b), "cumulative_flops": round(f), "below_cut": r in ranking.cut}
            for r, (b, f) in zip(ranking.rows, cum, strict=True)
        ],
        "threshold_tflop_per_gib": ranking.threshold,
        "cut": {"bytes": round(ranking.saved), "flops": round(ranking.cost), **ranking.shares()},
        "layer_bytes": round(ranking.layer_bytes),
        "layer_input_bytes": round(ranking.input_bytes),
        "layer_step_flops": round(ranking.step_flops),
        "attention_slope": slope,
        "crossovers": [{"input_width": c.input_width, "seq_len": c.seq_len} for c in crossings],
    }
    if budget:
        out["budget"] = {s.method: {"flops": round(s.flops), "peak_bytes": round(s.peak),
                                    "drop": {k: list(v) for k, v in s.drop.items()}} for s in budget}
    return out


def render_ranking(ranking: Ranking, crossings: list[Crossover], slope: float, title: str,
                   budget: tuple[Solution, Solution] | None = None) -> Group:
    table = Table(title=title, title_justify="left")
    for col in ("#", "recompute unit", "saves", "costs", "TFLOP/GiB", "cum. saved", "cum. cost"):
        table.add_column(col, justify="left" if col == "recompute unit" else "right")
    cut_drawn = False
    for i, (r, (b, f)) in enumerate(zip(ranking.rows, ranking.cumulative(), strict=True), 1):
        if not cut_drawn and r.tflop_per_gib >= ranking.threshold:
            table.add_row("", f"── cut at {ranking.threshold:g} TFLOP/GiB ──", "", "", "", "", "", style="bold")
            cut_drawn = True
        table.add_row(str(i), r.label, fmt_bytes(r.bytes, "GiB"), f"{r.flops / TFLOP:,.2f} TFLOP",
                      f"{r.tflop_per_gib:,.2f}", fmt_bytes(b, "GiB"), f"{f / TFLOP:,.2f} TFLOP")
    s = ranking.shares()
    notes = [
        f"cut: saves {ranking.saved / GIB:.2f} GiB for {ranking.cost / TFLOP:.2f} TFLOP per layer = "
        f"{100 * s['selective_cost_of_step']:.1f} % of the layer's step (3 × forward, causal); "
        f"{100 * s['selective_saving_excl_input']:.1f} % of its activations without the kept input "
        f"({100 * s['selective_saving_of_total']:.1f} % of all)",
        f"full recompute: +{100 * s['full_cost_of_step']:.0f} % compute, removes "
        f"{100 * s['full_saving_of_total']:.1f} % of the layer's activations",
        f"attention output costs {slope:g}·S FLOPs per byte (causal); it overtakes a linear row of input width k "
        "at S* = k / slope: " + ", ".join(f"k={c.input_width:,} → S*={c.seq_len:,.1f}" for c in crossings),
    ]
    parts: list[Any] = [table, *[Text(n, style="dim") for n in notes]]
    if budget:
        for sol in budget:
            dropped = sum(len(v) for v in sol.drop.values())
            parts.append(Text(f"budget, {sol.method}: {dropped} tensors dropped, peak {fmt_bytes(sol.peak)}, "
                              f"recompute {sol.flops / TFLOP:,.2f} TFLOP per step"))
    return Group(*parts)
