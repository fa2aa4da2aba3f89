"""The bill as rich tables for the terminal, like the seed's: item, bytes per param, size, share."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from stepbill.engine.bill import Bill
from stepbill.engine.fit import Fit, full_precision_lora, per_gpu_advice
from stepbill.engine.line import Line
from stepbill.engine.peak_items import peak_phase
from stepbill.report.notes import budget_note, counted_flops_note, mfu_note
from stepbill.report.units import fmt_bytes, fmt_count, fmt_flops

RECIPE_NOTES = ("transient.dequant", "recipe.qlora_fp32_upcast", "recipe.fp8", "recipe.fp8_activations")


def _explain_cell(line: Line) -> str:
    text = line.explain()
    return f"{text}  · {line.provenance}" if text else line.provenance


def one_line(bill: Bill, fit: Fit | None) -> str:
    """`stepbill bill --quiet`: the model, the verdict (with a card: the worst rank's eager peak against the budget,
    and the node's host memory under offload), else the peak of the bill's convention, and with a GPU the step."""
    head = f"{bill.model.name}, {bill.recipe.parallel.world} GPU{'s' if bill.recipe.parallel.world > 1 else ''}"
    if fit is not None:
        worst = fit.worst
        what = (f"fits {'yes' if fit.fits else 'NO'} · peak {fmt_bytes(worst.peak_bytes)} of budget "
                f"{fmt_bytes(fit.budget_bytes)} ({worst.rank_class}, {fit.convention} convention)")
        if fit.host is not None and fit.host.checked:
            what += f" · host {fmt_bytes(fit.host.node_bytes)} of {fmt_bytes(fit.host.budget_bytes or 0)} a node"
    else:
        what = f"peak {fmt_bytes(bill.worst_rank.memory['peak'])} per GPU ({bill.convention} convention; no card: --gpu for a verdict)"
    if bill.time is not None:
        t = bill.time
        what += (f" · step {t['time.step'].value:.3f} s · MFU {t['time.mfu'].value:.1%} · "
                 f"{t['time.tokens_per_s'].value:,.0f} tokens/s")
    return f"{head}: {what}"


def top_advice(bill: Bill, fit: Fit | None) -> str:
    """The hint for the view the user asked for: per GPU when a layout or a card is given (the largest item of the
    worst rank class and the next flag), else the one-GPU timeline's."""
    if fit is not None:
        return fit.advice
    if not bill.recipe.parallel.is_trivial:
        return per_gpu_advice(bill.worst_rank, bill.recipe.parallel, bill.recipe.recompute, None,
                              full_precision_lora(bill.recipe))
    assert bill.timeline is not None
    return bill.timeline.advice


def render_bill(bill: Bill, explain: bool = False, fit: Fit | None = None, layout_note: str = "") -> Group:
    """Renderables for the whole bill; `explain` adds the formula with its inputs to every row; `fit` adds the fit
    verdict (engine/fit.py) to the per-GPU table, or after the notes on one GPU."""
    spec, recipe, lines = bill.model, bill.recipe, bill.lines
    head = Text.assemble(
        (f"{spec.name}", "bold"),
        f"  {fmt_count(lines['params.total'].value)} params",
        f" ({fmt_count(lines['params.active'].value)} active/token)" if spec.moe else "",
        f"  ·  {recipe.precision.name} {recipe.optimizer}  ·  micro-batch {recipe.micro_batch} × seq {recipe.seq_len}"
        f" = {recipe.tokens:,} tokens  ·  recompute {recipe.recompute}  ·  {bill.convention} convention,"
        f" {bill.attention} attention",
        f"  ·  LoRA r={recipe.lora.rank} on {','.join(recipe.lora.targets)}" if recipe.lora else "",
    )
    peak = lines["memory.peak"].value
    table = Table(title="Memory of one step (binary units: GiB = 2^30 B)", title_justify="left")
    table.add_column("item")
    table.add_column("B/param", justify="right")
    table.add_column("size", justify="right")
    table.add_column("size ÷ peak", justify="right")  # items are full-step sizes; the peak is one moment
    if explain:
        table.add_column("formula with inputs · provenance", overflow="fold")
    n_train = lines["params.trainable"].value

    def row(line: Line, per_param: str = "", style: str = "") -> None:
        cells = [line.name, per_param, fmt_bytes(line.value), f"{100 * line.value / peak:.1f} %" if peak else "-"]
        if explain:
            cells.append(_explain_cell(line))
        table.add_row(*(Text(c) for c in cells), style=style)

    for item in bill.resident_items:
        per = item.inputs.get("bytes")
        if item.name.startswith("optimizer.") and n_train:
            per = item.value / n_train
        row(item, f"{per:.4g}" if per is not None else "")  # 4 digits: NF4 constants 0.01589, not 0.0158932
    row(lines["memory.resident"], f"{lines['memory.resident'].value / max(n_train, 1):.4g}"
        if not recipe.lora else "", "bold")
    for item in bill.activation_items:
        row(item)
    assert bill.timeline is not None
    tl = bill.timeline
    row(lines["memory.peak"], "", "bold")
    parts: list = [head, table]

    per_gpu = fit is not None or not recipe.parallel.is_trivial
    notes = [
        f"model (weights + grads) {fmt_bytes(lines['memory.model'].value)} · optimizer (master + states) "
        f"{fmt_bytes(lines['memory.optimizer'].value)}",
        f"peak {fmt_bytes(tl.peak.total)} at {tl.peak.label} ({peak_phase(bill)}); there "
        + ", ".join(f"{k} {fmt_bytes(v)}" for k, v in tl.peak.items.items())
        + ("" if per_gpu else f" → {tl.advice}"),
        f"forward peak {fmt_bytes(tl.peak_forward.total)} ({tl.peak_forward.label}) · backward peak "
        f"{fmt_bytes(tl.peak_backward.total)} ({tl.peak_backward.label})",
        f"activations: {lines['memory.activations'].convention}",
        f"FLOPs (decimal, one micro-batch): step {fmt_flops(lines['flops.step'].value)} causal-halved attention, "
        f"{fmt_flops(lines['flops.step_full_square'].value)} full square, "
        f"{fmt_flops(lines['flops.step_noncausal'].value)} as FlopCounterMode counts it{counted_flops_note(bill)}; "
        "recompute "
        f"{fmt_flops(lines['flops.recompute'].value)}; model (PaLM appendix B) "
        f"{fmt_flops(lines['flops.model'].value)} full square, {fmt_flops(lines['flops.model_causal'].value)} causal; "
        f"6ND {fmt_flops(lines['flops.6nd'].value)} "
        f"(misses attention: {100 * lines['flops.attention_share'].value:.1f} % of the forward)",
        *([f"LoRA: step / forward {lines['flops.lora_step_over_forward'].value:.3f}× (full fine-tuning: 3× + "
           "recompute): the frozen base skips its weight-gradient GEMMs; seed 000: ~2× instead of 3×"]
          if "flops.lora_step_over_forward" in lines else []),
        f"checkpoint to resume: {fmt_bytes(lines['checkpoint.bytes'].value)} "
        f"({', '.join(x.name.removeprefix('checkpoint.') for x in bill.checkpoint_items)}); weights only (export): "
        f"{fmt_bytes(lines['checkpoint.weights_export'].value)} ({lines['checkpoint.weights_export'].explain()})",
    ]
    for key in RECIPE_NOTES:  # what a quantised / fp8 recipe adds (engine/quant.py, engine/fp8.py)
        if key in lines:
            x = lines[key]
            size = fmt_bytes(x.value) if x.unit == "bytes" else fmt_count(x.value) + " params"
            notes.append(f"{key} {size}: {x.explain()}" + (f" ({x.convention})" if x.convention else "")
                         + f" · {x.provenance}")
    for key in ("cards.resident", "cards.peak"):
        if key in lines:
            notes.append(f"{key}: {lines[key].value:.0f} cards ({lines[key].explain()})"
                         + (f"; {bill.convention} convention, no reserve: the fit below is the verdict" if fit else ""))
    for note in (budget_note(bill), mfu_note(bill)):
        if note:
            notes.append(note)
    if per_gpu:
        parts.append(Text.assemble(("hint ", "bold"), top_advice(bill, fit)))
    parts += [Text(n, style="dim") for n in notes]
    if explain:
        parts.append(_activation_table(bill))
    if not bill.recipe.parallel.is_trivial or bill.gpu is not None:
        from stepbill.report.parallel_terminal import render_parallel

        parts += render_parallel(bill, fit, layout_note, explain)
    elif fit is not None:  # one GPU, --gpu-mem only: the verdict without the per-GPU table
        from stepbill.report.parallel_terminal import fit_explain, fit_lines, fit_table

        parts += [fit_table(fit), *fit_lines(fit), *(fit_explain(fit) if explain else [])]
    from stepbill.report.parallel_terminal import run_text

    parts += run_text(bill)
    return Group(*parts)


def _activation_table(bill: Bill) -> Table:
    tokens = bill.recipe.tokens
    table = Table(title=f"Kept per layer ({bill.convention} convention), × {tokens:,} tokens", title_justify="left")
    for col in ("layer kind", "tensor", "numbers/token", "dtype B", "per token", "per micro-batch", "kept for"):
        table.add_column(col, justify="right" if col not in ("tensor", "kept for", "layer kind") else "left")
    for kind, rows in bill.layer_rows.items():
        for r in rows:
            table.add_row(kind, r.name, f"{r.width:,}", str(r.dtype_bytes), fmt_bytes(r.bytes_per_token),
                          fmt_bytes(r.bytes_per_token * tokens), r.saved_for)
        total_width = sum(r.width for r in rows)
        per_token = sum(r.bytes_per_token for r in rows)
        table.add_row(kind, "layer total", f"{total_width:,}", "", fmt_bytes(per_token), fmt_bytes(per_token * tokens),
                      "", style="bold")
    return table


def make_console() -> Console:
    """A console 120 columns wide when output is not a terminal (pipes, docs), the terminal's width otherwise."""
    console = Console()
    return console if console.is_terminal else Console(width=120)


def print_bill(bill: Bill, explain: bool = False, console: Console | None = None, fit: Fit | None = None,
               layout_note: str = "") -> None:
    (console or make_console()).print(render_bill(bill, explain, fit, layout_note))
