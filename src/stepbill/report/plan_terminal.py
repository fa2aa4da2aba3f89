"""`stepbill plan`'s terminal output: the top K, the Pareto fronts, the rejections, every row's command.
Units: GiB = 2^30 B, seconds, tokens/s; run totals in days, GPU-hours and the price's currency."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from stepbill.engine.plan.evaluate import Row
from stepbill.engine.plan.search import PlanResult
from stepbill.engine.plan.space import REASONS
from stepbill.report.plan_json import known_ranks

GIB = 2**30


def layout_words(row: Row) -> str:
    """`dp 8 tp 8 pp 16 ep 8 etp 2 zero 1 sp 1f1b` — the axes that differ from the default, in a short form (an
    explicit stage split as `stages 2/4/4/2`)."""
    par = row.candidate.parallel
    words = [f"dp {par.dp}", f"tp {par.tp}", f"pp {par.pp}"]
    words += [f"{k} {getattr(par, k)}" for k in ("cp", "ep") if getattr(par, k) > 1]
    words += [f"etp {par.etp}"] if par.expert_tp > 1 else []
    words.append(f"zero {par.zero}" + (f"/hsdp {par.shard_group}" if par.shard_group else ""))
    if par.sp:
        words.append("sp")
    if par.pp > 1:
        words.append(f"interleaved v{par.vpp}" if par.pp_schedule == "interleaved" else par.pp_schedule)
    if par.pp_layers is not None:
        words.append("stages " + "/".join(str(n) for n in par.pp_layers))
    words += [w for w, on in (("offload-opt", par.offload_optimizer), ("offload-act", par.offload_activations)) if on]
    return " ".join(words)


def _table(title: str, rows: list[Row], ranks: dict[int, int], run: bool) -> Table:
    """Rows with their rank ("–": a front row outside the top K under branch and bound, rank unknown)."""
    table = Table(title=title, title_justify="left")
    for col in ("#", "GPUs", "layout", "mb × m", "recompute", "peak GiB", "headroom GiB", "step s", "MFU",
                "tokens/s"):
        table.add_column(col, justify="left" if col in ("layout", "recompute") else "right")
    keys = [k for k in ("days", "gpu_hours", "cost") if run and rows and k in rows[0].run]
    for k in keys:
        table.add_column({"days": "days", "gpu_hours": "GPU-hours", "cost": "cost"}[k], justify="right")
    for row in rows:
        par = row.candidate.parallel
        cells = [str(ranks.get(id(row), "–")), f"{row.world:,}", layout_words(row),
                 f"{row.candidate.micro_batch} × {par.micro_batches}", row.candidate.recompute,
                 f"{row.peak_bytes / GIB:.2f}", f"{row.headroom_bytes / GIB:.2f}", f"{row.step_s:.3f}",
                 f"{row.mfu:.1%}", f"{row.tokens_per_s:,.0f}"]
        cells += [f"{row.run[k]:,.1f}" if k != "cost" else f"{row.run[k]:,.0f}" for k in keys]
        table.add_row(*cells)
    return table


def render_plan(result: PlanResult, space_note: str) -> Group:
    """The whole answer as rich renderables."""
    req, stats = result.request, result.stats
    ranks = known_ranks(result)
    batch = (f"global batch {req.global_batch_tokens:,} tokens" if req.global_batch_tokens
             else f"micro-batch {req.micro_batch or 1}")
    gpus = ", ".join(f"{w:,}" for w in req.worlds)
    head = (f"{req.model_name} on {gpus} × {req.gpu.display}, seq {req.seq:,}, {batch}, {req.recipe} {req.optimizer}: "
            + (f"{len(result.rows):,} layouts fit of {stats.candidates:,}" if stats.exhaustive else
               f"{stats.candidates:,} candidates, branch and bound ({stats.by_floor:,} outranked by their exact floors "
               f"without a bill; --exhaustive lists every layout that fits)") + f"; objective {result.objective}")
    parts: list = [Text(head)]
    if not stats.complete:
        # of the candidates the stated rules leave (the rules' rejections cost nothing to decide)
        share = stats.evaluated / max(stats.evaluated + stats.not_searched, 1)
        parts.append(Text(f"incomplete: the deadline stopped the search with {stats.not_searched:,} candidates not "
                          f"decided ({share:.1%} of those the stated rules leave decided, their layouts in a fixed "
                          "random order); a layout not searched may beat these rows", style="bold"))
    run = req.train_tokens is not None
    # without a global batch steps carry different token counts: the fronts (as the ranking) use time per token
    pace = "step time" if req.global_batch_tokens is not None else "time per token (1 / tokens/s)"
    if not result.rows and not stats.candidates and req.fixed:
        pins = ",".join(f"{k}={v}" for k, v in req.fixed)
        plural = "s" if req.worlds != (1,) else ""
        parts.append(Text(f"no candidate at all: the space has no layout with --fix {pins} at {gpus} GPU{plural} "
                          "(a pinned value the space never takes: a degree that does not divide the GPUs, a ZeRO "
                          "stage without data parallelism, ...); loosen the pins"))
    elif not result.rows and not stats.complete:
        parts.append(Text("no layout found that fits in the part searched: a longer --max-seconds, or --fix to "
                          "narrow the space"))
    elif not result.rows:
        parts.append(Text("no layout fits: see the rejections below (--reserve, more GPUs, or --fix to widen)"))
    else:
        parts.append(_table(f"Top {len(result.top)} by {result.objective} (peak: the fit verdict's worst rank, eager "
                            f"convention on {req.device.upper()} kernels; headroom: usable − reserve − peak)", result.top, ranks,
                            run))
        parts.append(_commands(result.top, ranks))
        if len({r.world for r in result.rows}) > 1:
            parts.append(_table(f"Pareto front: GPUs vs {pace}", result.gpus_vs_time, ranks, run))
            parts.append(_commands(result.gpus_vs_time, ranks, shown=result.top))
        parts.append(_table(f"Pareto front: per-GPU peak vs {pace}", result.memory_vs_time, ranks, run))
        parts.append(_commands(result.memory_vs_time, ranks, shown=result.top))
        host = _host_line(result)
        if host is not None:
            parts.append(host)
    parts.append(_rejections(result))
    parts.append(Text(f"search: {stats.evaluated:,} candidates evaluated in {stats.seconds:.2f} s wall-clock, "
                      f"{stats.cpu_seconds:.2f} s CPU in {stats.jobs} process{'es' if stats.jobs > 1 else ''} "
                      f"({stats.layouts_per_cpu_s:,.0f}/CPU-s; {stats.by_bill:,} by "
                      f"bill, {stats.by_bound:,} by an exact memory bound"
                      + (f", {stats.by_floor:,} by the exact floors" if not stats.exhaustive else "") + ")"))
    parts.append(Text(f"space: {space_note}"))
    return Group(*parts)


def _host_line(result: PlanResult) -> Text | None:
    """Under offload, the host memory the rows shown were judged against (engine/fit_host.py): the node's figure and
    its source, the most a node of them offloads; or that it is unknown and so not checked. None when no row shown
    offloads."""
    shown = [r for r in (*result.top, *result.gpus_vs_time, *result.memory_vs_time) if r.host_node_bytes is not None]
    if not shown:
        return None
    req = result.request
    most = max(r.host_node_bytes or 0.0 for r in shown) / GIB
    if req.host_mem_gib is not None:
        node = f"{req.host_mem_gib:,g} GiB (--host-mem)"
    elif req.gpu.host_memory_bytes is not None:
        node = f"{req.gpu.host_memory_bytes / GIB:,.0f} GiB ({req.gpu.host_memory_source})"
    else:
        return Text(f"host memory: offload rows above put up to {most:,.2f} GiB on a node, not checked: no host memory "
                    f"figure for {req.gpu.display}'s node (--host-mem GiB checks it)", style="yellow")
    return Text(f"host memory: offload rows above put up to {most:,.2f} GiB on a node of {node}; rows over it were "
                "rejected (host_over_budget)", style="dim")


def _commands(rows: list[Row], ranks: dict[int, int], shown: list[Row] | None = None) -> Text:
    seen = {id(r) for r in shown or []}
    lines = [f"  #{ranks.get(id(r), '–')}: {r.command}" for r in rows if id(r) not in seen]
    return Text("\n".join(["reproduce with:", *lines]) if lines else "")


def _rejections(result: PlanResult) -> Text:
    rejected = result.stats.rejected
    if not rejected:
        return Text("rejected: none")
    lines = ["rejected (candidates, why):"]
    for reason, n in sorted(rejected.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {n:>10,}  {REASONS.get(reason, reason)}")
    return Text("\n".join(lines))
