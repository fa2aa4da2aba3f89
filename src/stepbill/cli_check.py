"""`stepbill check`: the command-line face of stepbill.check (parsing and printing only)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from stepbill.check import MEASURABLE_RECIPES, measure_sharded
from stepbill.errors import StepbillError
from stepbill.report.check_json import sharded_check_json, single_check_json

MEASURABLE_RECOMPUTE = ("none", "full")
#: Ranks of a sharded check: every rank is predicted to find the distinct classes, and one is measured per class
#: on a fake process group in this process, so the group stays small.
MAX_CHECK_DP = 64


def _measure_with_progress(config: dict[str, Any], mode: str, **settings: Any) -> Any:
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    try:
        from stepbill.measure.build import require_torch
        from stepbill.measure.step import measure_step
    except ImportError as exc:  # torch/transformers are an optional extra
        raise StepbillError(f"stepbill check needs PyTorch and transformers ({exc.name} is missing): "
                            "pip install 'stepbill[measure]'") from None
    require_torch()  # measure/ imports torch lazily: ask before the progress bar starts
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        progress.add_task(f"measuring two training steps in PyTorch ({mode} tensors)…", total=None)
        return measure_step(config, mode=mode, **settings)


def check(
    model: Annotated[str, typer.Argument(help="preset name, ModelSpec JSON or HF config.json")],
    seq: Annotated[int, typer.Option("--seq", help="sequence length (tokens)")] = 128,
    micro_batch: Annotated[int, typer.Option("--micro-batch", help="sequences per micro-batch")] = 1,
    recipe: Annotated[str, typer.Option("--recipe", help="fp32 | pure-bf16 | amp-bf16")] = "fp32",
    optimizer_impl: Annotated[str, typer.Option("--optimizer-impl", help="AdamW: single | foreach | fused")]
    = "single",
    recompute: Annotated[str, typer.Option("--recompute", help="none | full")] = "none",
    real: Annotated[bool, typer.Option("--real", help="real tensors (refused if the peak would not fit in RAM)")]
    = False,
    fake: Annotated[bool, typer.Option("--fake", help="fake tensors: any size, no memory used")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    dp: Annotated[int, typer.Option("--dp", help="data-parallel ranks: > 1 measures one rank of N (fake process "
                                             "group)")] = 1,
    zero: Annotated[int, typer.Option("--zero", help="with --dp: 1 (ZeroRedundancyOptimizer), 2 or 3 (FSDP2)")] = 0,
    rank: Annotated[int | None, typer.Option("--rank", help="with --dp: this rank only (default: one rank per "
                                                            "distinct predicted class)")] = None,
) -> None:
    """Measure a real training step in PyTorch and compare it with the bill, category by category."""
    from stepbill.spec.schema import Int, check_value

    check_value(Int(1, MAX_CHECK_DP), "--dp", dp)
    if rank is not None:
        check_value(Int(0, dp - 1), "--rank", rank)
    if recompute not in MEASURABLE_RECOMPUTE:
        raise StepbillError(f"check measures --recompute {' or '.join(MEASURABLE_RECOMPUTE)}; got {recompute!r}")
    if dp > 1 or zero:
        _check_sharded(model, seq, micro_batch, recipe, dp, zero, rank, "real" if real else "fake" if fake else
                       "auto", as_json)
        return
    from stepbill.check import choose_mode, compare, predict, predictions, verdict
    from stepbill.spec.hf import to_hf_config
    from stepbill.spec.presets import load_model
    from stepbill.spec.recipe import make_recipe

    if recipe not in MEASURABLE_RECIPES:
        raise StepbillError(f"check measures recipes {', '.join(MEASURABLE_RECIPES)}; got {recipe!r}")
    if real and fake:
        raise StepbillError("choose one of --real and --fake")
    spec = load_model(model)
    bill, note = predict(spec, make_recipe(recipe, "adamw", micro_batch, seq, recompute,
                                           optimizer_impl=optimizer_impl))
    if note:
        typer.echo(note, err=True)
    mode = choose_mode("real" if real else "fake" if fake else "auto", bill.lines["memory.peak"].value)
    measured = _measure_with_progress(
        to_hf_config(spec), mode, recipe=recipe, optimizer_impl=optimizer_impl, micro_batch=micro_batch,
        seq_len=seq, recompute=recompute,
    )
    rows = compare(predictions(bill), measured)
    if as_json:
        print(json.dumps(single_check_json(spec, mode, bill, measured, rows, verdict(rows)), indent=2))
        return
    _print_rows(spec.name, mode, bill.convention, rows, verdict(rows))
    from stepbill.report.units import fmt_flops

    typer.echo(f"causal-halved step FLOPs (the seed's convention; FlopCounterMode counts the full square): "
               f"{fmt_flops(bill.lines['flops.step'].value)}")


def _print_rows(name: str, mode: str, convention: str, rows: list, summary: str) -> None:
    from rich.table import Table

    from stepbill.report.terminal import make_console
    from stepbill.report.units import fmt_bytes, fmt_flops

    table = Table(title=f"{name}: bill ({convention} convention) vs PyTorch ({mode} tensors, MemTracker, "
                        "FlopCounterMode); GiB = 2^30 B", title_justify="left")
    for col in ("category", "predicted", "measured", "error", "verdict"):
        table.add_column(col, justify="left" if col in ("category", "verdict") else "right")
    for r in rows:
        fmt = fmt_flops if r.unit == "FLOPs" else fmt_bytes
        table.add_row(r.category, "-" if r.predicted is None else fmt(r.predicted), fmt(r.measured),
                      "-" if r.error is None else f"{100 * r.error:+.2f} %", r.verdict)
    console = make_console()
    console.print(table)
    console.print(summary)


def _check_sharded(model: str, seq: int, micro_batch: int, recipe: str, dp: int, zero: int, rank: int | None,
                   requested: str, as_json: bool) -> None:
    """One rank of `dp` under ZeRO-`zero`: predicted (engine/parallel/fsdp2.py) vs measured (measure/sharded.py)."""
    from stepbill.check import verdict
    from stepbill.spec.presets import load_model

    if dp < 2 or zero not in (1, 2, 3):
        raise StepbillError("a sharded check needs --dp >= 2 and --zero 1, 2 or 3")
    spec = load_model(model)
    results = measure_sharded(spec, seq, micro_batch, recipe, dp, zero, rank, requested)
    if as_json:
        summaries = [verdict(rows) for *_, rows in results]
        print(json.dumps(sharded_check_json(spec.name, dp, zero, results, summaries), indent=2))
        return
    for r, mode, pred, _, rows in results:
        _print_rows(f"{spec.name} rank {r} of {dp}, ZeRO-{zero}", mode, pred.convention, rows, verdict(rows))
