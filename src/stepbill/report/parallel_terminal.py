"""Terminal tables of the per-rank bill, the step's collectives and the step time. Formatting only."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from stepbill.engine.bill import Bill
from stepbill.engine.fit import Fit
from stepbill.engine.states import rank_checkpoint_bytes
from stepbill.report.units import fmt_bytes

RANK_COLUMNS = ("weights", "grads", "optimizer", "activations", "transient", "peak")


def _layout(bill: Bill, layout_note: str = "") -> str:
    par = bill.recipe.parallel
    parts = [f"dp {par.dp}", f"tp {par.tp}" + (" +sp" if par.sp else ""), f"pp {par.pp}", f"cp {par.cp}"]
    if bill.model.moe is not None:
        parts.append(f"ep {par.ep} etp {par.expert_tp} (edp {par.edp})")
    zero = f"ZeRO-{par.zero}" + (f" hybrid/{par.shard_group}" if par.shard_group else "")
    sched = f"{par.pp_schedule}" + (f" v={par.vpp}" if par.vpp > 1 else "") + f", {par.micro_batches} micro-batches"
    off = [w for w, on in (("optimizer", par.offload_optimizer), ("activations", par.offload_activations)) if on]
    return (" × ".join(parts) + f" = {par.world} GPUs · {zero} · {sched}"
            + (f" · offload {', '.join(off)}" if off else "") + (f" · {layout_note}" if layout_note else ""))


def fit_title(fit: Fit) -> str:
    """The budget a verdict is judged against, e.g. "NVIDIA H100 SXM5 80GB: usable 79.65 GiB − reserve 4.09 GiB
    = budget 75.56 GiB"."""
    return (f"{fit.card.name}: usable {fmt_bytes(fit.card.usable_bytes, 'GiB')} − reserve "
            f"{fmt_bytes(fit.reserve.total_bytes, 'GiB')} = budget {fmt_bytes(fit.budget_bytes, 'GiB')}")


def fit_lines(fit: Fit) -> list[Text]:
    """The verdict, the convention it is judged on, the reserve's parts and where the usable figure comes from."""
    worst = fit.worst
    head = Text.assemble(("Fits ", "bold"), ("yes" if fit.fits else "NO", "bold green" if fit.fits else "bold red"),
                         f" · worst {worst.rank_class}: peak {fmt_bytes(worst.peak_bytes, 'GiB')}, headroom "
                         f"{fmt_bytes(worst.headroom_bytes, 'GiB')} of budget {fmt_bytes(fit.budget_bytes, 'GiB')}"
                         + ("" if fit.host_fits else " · a node's host memory cannot hold what its GPUs offload"))
    lines = [fit.convention_note(), f"budget: {fit_title(fit)}", fit.reserve.summary(),
             f"usable memory: {fit.card.source}"]
    host = [] if fit.host is None else [Text(escape(fit.host.summary()),
                                             style="dim" if fit.host.fits else "bold red")]
    return [head, *host, *(Text(escape(line), style="dim") for line in lines)]


def rank_table(bill: Bill, fit: Fit | None = None) -> Table:
    """One row per rank class: memory per item and the peak (binary units); with a fit verdict, whether the class
    fits (judged on `fit.convention`'s peak against the budget: `fit_table` shows the headroom)."""
    title = f"Per GPU ({bill.convention} convention; binary units: GiB = 2^30 B)"
    if fit is not None:
        title += f" on {fit.card.name}"
    table = Table(title=escape(title), title_justify="left", pad_edge=False)
    for col in ("class", "GPUs", "layers", "μb in\nflight", "weights", "grads", "optimizer", "activ.", "transient",
                "peak"):
        table.add_column(col, justify="left" if col == "class" else "right", no_wrap=col != "layers")
    if fit is not None:
        table.add_column("fits")
    worst = bill.worst_rank
    for c in bill.ranks:
        cells = [escape(c.name), str(c.ranks), "+".join(f"{n} {k}" for k, n in c.layers.items()), f"{c.in_flight:g}"]
        cells += [fmt_bytes(c.memory[k]) for k in RANK_COLUMNS]
        if fit is not None:
            cells.append("yes" if fit.for_class(c.name).fits else "NO")
        table.add_row(*cells, style="bold" if c is worst else "")
    return table


def fit_table(fit: Fit) -> Table:
    """One row per judged rank class: the peak judged, the budget, the headroom (negative: does not fit)."""
    title = f"Fit per GPU (the {fit.convention} convention's peak against the budget)"
    table = Table(title=escape(title), title_justify="left")
    for col in ("class", "GPUs", f"peak ({fit.convention})", "budget", "headroom", "fits"):
        table.add_column(col, justify="left" if col in ("class", "fits") else "right")
    for r in fit.ranks:
        table.add_row(escape(r.rank_class), str(r.ranks), fmt_bytes(r.peak_bytes, "GiB"),
                      fmt_bytes(fit.budget_bytes, "GiB"), fmt_bytes(r.headroom_bytes, "GiB"),
                      "yes" if r.fits else "NO", style="bold" if r is fit.worst else "")
    return table


def comm_table(bill: Bill) -> Table:
    """One row per collective: volume per rank per step, link, time, and whether it can hide."""
    table = Table(title="Communication per GPU per step (bytes over its busiest link; links per direction)",
                  title_justify="left")
    for col in ("collective", "op", "group", "link", "calls", "volume", "time", "can hide"):
        table.add_column(col, justify="right" if col in ("group", "calls", "volume", "time") else "left")
    for c in bill.collectives:
        seconds = "-" if c.seconds is None else f"{c.seconds * 1e3:,.1f} ms"
        table.add_row(c.name, c.op, str(c.group), c.link or c.scope, f"{c.calls:,}", fmt_bytes(c.bytes), seconds,
                      c.overlap)
    return table


def time_lines(bill: Bill) -> list[Text]:
    """Step time, bubble, MFU and HFU with their derivations."""
    if bill.time is None:
        return [Text("step time: give --gpu NAME for link bandwidths, peak FLOP/s and HBM bandwidth", style="dim")]
    t = bill.time
    out = [Text.assemble(("Step time ", "bold"), f"{t['time.step'].value:.3f} s  ·  MFU {100 * t['time.mfu'].value:.1f} %"
                         f" (causal {100 * t['time.mfu_causal'].value:.1f} %)"
                         f"  ·  HFU {100 * t['time.hfu'].value:.1f} %  ·  bubble {100 * t['time.bubble'].value:.1f} %"
                         f"  ·  {t['time.tokens_per_s'].value:,.0f} tokens/s"
                         f" ({t['time.tokens_per_s_per_gpu'].value:,.0f} per GPU)")]
    out += bubble_hint(bill)
    keys = ["time.model_flops", "time.rank_flops", "time.peak", "time.compute", "time.memory", "time.bubble"]
    precision = [k for k in ("time.dequant", "time.fp8_bf16_share") if k in t.lines]  # engine/precision_time.py
    keys[5:5] = [*precision, "time.roofline"] if precision else []
    keys[4:4] = [k for k in ("time.gemm_efficiency", "time.comm_critical") if k in t.lines]  # the per-op model's
    keys += [k for k in t.lines if k.startswith("time.offload_") and not k.endswith(("_exposed", "_hideable")) and t[k].value]
    keys += ["time.step", "time.mfu", "time.hfu"]
    for key in keys:
        line = t[key]
        note = f" — {line.convention}" if key in ("time.peak", "time.mfu", "time.hfu", *precision) and line.convention else ""
        out.append(Text(escape(f"  {key}: {line.explain()}{note}"), style="dim"))
    return out


#: Bubble share above which the step line is followed by a hint (Megatron-LM keeps m ≫ p; at m = 4·p the 1F1B
#: bubble (p − 1)/(m + p − 1) is under 20 %).
BUBBLE_HINT_SHARE = 0.25


def bubble_hint(bill: Bill) -> list[Text]:
    """One line when the pipeline bubble takes a large share of the step (pp > 1 with few micro-batches: the
    default --micro-batches 1 idles half of a pp 2 pipeline), naming the flags that shrink it."""
    assert bill.time is not None
    share = bill.time["time.bubble"].value
    par = bill.recipe.parallel
    if par.pp < 2 or share <= BUBBLE_HINT_SHARE:
        return []
    more = "" if par.pp_schedule == "interleaved" else " or interleaving (--pp-schedule interleaved --vpp V)"
    return [Text(f"  bubble {100 * share:.1f} % of the step: pp {par.pp} with {par.micro_batches} micro-batch"
                 f"{'es' if par.micro_batches != 1 else ''} per step; more micro-batches (--micro-batches, or "
                 f"--global-batch-tokens){more} shrink it", style="yellow")]


def run_text(bill: Bill) -> list[Text]:
    """The run totals (engine/run.py): global batch, steps, days, GPU-hours, cost, each with its derivation; nothing
    unless --global-batch-tokens or --train-tokens was given."""
    r = bill.run
    if not r or ("run.train_tokens" not in r and "derived" not in r["run.global_batch_tokens"].convention):
        return []
    head = [f"global batch {r['run.global_batch_tokens'].value:,.0f} tokens"]
    if "run.steps" in r:
        head.append(f"{r['run.steps'].value:,.0f} steps")
    if "run.days" in r:
        head.append(f"{r['run.days'].value:,.2f} days")
        head.append(f"{r['run.gpu_hours'].value:,.0f} GPU-hours")
    if "run.cost" in r:
        head.append(f"cost {r['run.cost'].value:,.0f} (price's currency)")
    if "run.tokens_per_s_per_gpu" in r:
        head.append(f"{r['run.tokens_per_s_per_gpu'].value:,.0f} tokens/s per GPU")
    out = [Text.assemble(("Run ", "bold"), "  ·  ".join(head))]
    for line in r.values():
        out.append(Text(escape(f"  {line.name}: {line.explain()}"), style="dim"))
    if "rounded" in r["run.global_batch_tokens"].convention:
        out.append(Text(escape(f"  {r['run.global_batch_tokens'].convention}"), style="yellow"))
    if "run.steps" in r and "run.seconds" not in r:
        out.append(Text("  run time: give --gpu NAME for the step time", style="dim"))
    elif "run.seconds" in r:
        out.append(Text(escape(f"  {r['run.seconds'].convention}"), style="dim"))
    return out


def model_notes(bill: Bill) -> list[Text]:
    """Which model produced the per-GPU numbers with the notes every class shares, once per distinct line; then each
    note only some classes carry, with their names."""
    common = [n for n in (bill.ranks[0].notes if bill.ranks else ()) if all(n in c.notes for c in bill.ranks)]
    seen: list[str] = []
    for c in bill.ranks:
        text = f"per-GPU model: {c.model}" + (f" — {'; '.join(common)}" if common else "")
        if text not in seen:
            seen.append(text)
    some: dict[str, list[str]] = {}
    for c in bill.ranks:
        for note in c.notes:
            if note not in common:
                some.setdefault(note, []).append(c.name)
    seen += [f"{', '.join(names)}: {note}" for note, names in some.items()]
    return [Text(escape(t), style="dim") for t in seen]


def checkpoint_share_line(bill: Bill) -> Text:
    """The most any rank writes of the checkpoint to resume (engine/states.rank_checkpoint_bytes), against the
    whole."""
    share, worst = max(((rank_checkpoint_bytes(c.owned), c) for c in bill.ranks), key=lambda pair: pair[0])
    return Text(escape(f"checkpoint to resume per GPU: {fmt_bytes(share)} on a rank of {worst.name} (its share of "
                       f"master + optimizer states, of {fmt_bytes(bill.lines['checkpoint.bytes'].value)} in all: "
                       "torch.distributed.checkpoint writes every shard once)"), style="dim")


def host_lines(bill: Bill) -> list[Text]:
    """Host memory each GPU's process holds under offload (ranks[].cpu in the JSON), one line per rank class: what
    the node's RAM must hold for every GPU it serves."""
    out = []
    for c in bill.ranks:
        if c.cpu:
            items = " + ".join(f"{k} {fmt_bytes(v)}" for k, v in c.cpu.items())
            out.append(Text(escape(f"host memory (offloaded) for each GPU of {c.name}: {fmt_bytes(sum(c.cpu.values()))} "
                                   f"({items}); a node holds this for each of its GPUs"), style="dim"))
    return out


def rank_explain(bill: Bill) -> list[Text]:
    """--explain for the per-GPU table: every item of every rank class with its formula and inputs."""
    out = []
    for c in bill.ranks:
        out.append(Text(escape(f"  {c.name} ({c.ranks} GPUs, {c.in_flight:g} micro-batches in flight):"), style="bold"))
        for line in [*c.resident_items, *c.activation_items, *c.transient_items]:
            out.append(Text(escape(f"    {line.name} = {fmt_bytes(line.value)}: {line.explain()}"), style="dim"))
        for item, value in c.cpu.items():
            how = ("sent down to host memory as each layer's backward makes them, for the CPU optimizer step; the "
                   "GPU keeps none between layers" if item == "grads" else "offloaded to host memory")
            out.append(Text(escape(f"    cpu.{item} = {fmt_bytes(value)} ({how})"), style="dim"))
    return out


def fit_explain(fit: Fit) -> list[Text]:
    """--explain for the fit verdict: the reserve's parts and the usable / budget / headroom lines, with formulas."""
    out = [Text("  fit:", style="bold")]
    for line in [*fit.reserve.items, *fit.lines.values()]:
        out.append(Text(escape(f"    {line.name} = {fmt_bytes(line.value)}: {line.explain()} · {line.provenance}"),
                        style="dim"))
    return out


def render_parallel(bill: Bill, fit: Fit | None = None, layout_note: str = "", explain: bool = False) -> list:
    """Renderables appended to the bill when a layout or a GPU is given; `fit` adds the verdict, `explain` every
    rank item's and the fit's formulas."""
    parts: list = [Text(escape(_layout(bill, layout_note)), style="bold"), rank_table(bill, fit), *model_notes(bill),
                   *host_lines(bill)]
    if not bill.recipe.parallel.is_trivial:
        parts.append(checkpoint_share_line(bill))
    if explain:
        parts += rank_explain(bill)
    if fit is not None:
        parts += [fit_table(fit), *fit_lines(fit), *(fit_explain(fit) if explain else [])]
    if bill.collectives:
        parts.append(comm_table(bill))
    parts += time_lines(bill)
    return parts
