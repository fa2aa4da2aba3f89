"""`stepbill check`: the command-line face of stepbill.check (parsing and printing only)."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from stepbill.check import notes_json
from stepbill.check_ranks import measure_sharded
from stepbill.errors import StepbillError, one_line
from stepbill.report.check_json import sharded_check_json, single_check_json

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
    console = Console(stderr=True)
    if not console.is_terminal:  # a spinner on a pipe or file leaves a blank line before any error line
        return measure_step(config, mode=mode, **settings)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        progress.add_task(f"measuring two training steps in PyTorch ({mode} tensors)…", total=None)
        return measure_step(config, mode=mode, **settings)


def check(
    model: Annotated[str, typer.Argument(help="preset name, ModelSpec JSON or HF config.json")],
    seq: Annotated[int, typer.Option("--seq", help="sequence length (tokens)")] = 128,
    micro_batch: Annotated[int, typer.Option("--micro-batch", help="sequences per micro-batch")] = 1,
    recipe: Annotated[str | None, typer.Option(
        "--recipe", help="fp32 (default) | pure-bf16 | amp-bf16; ZeRO-1: fp32 | pure-bf16; ZeRO-2/3: fsdp-mixed-bf16 "
        "(the only one, FSDP2's mixed precision)")] = None,
    optimizer: Annotated[str, typer.Option(
        "--optimizer", help="adamw (default) | adam | sgd | sgd-momentum | adafactor | muon: torch.optim's, at the "
        "bill's hyperparameters (muon: Muon on the hidden matrices, AdamW on the rest); one process")] = "adamw",
    optimizer_impl: Annotated[str, typer.Option(
        "--optimizer-impl", help="single | foreach | fused, where torch.optim has it (Adafactor: no fused; muon: the "
        "AdamW's)")] = "single",
    recompute: Annotated[str, typer.Option(
        "--recompute", help="none | full | every:K (runs of K layers, one checkpoint each) | selective:core_attn (the "
        "attention core checkpointed)")] = "none",
    real: Annotated[bool, typer.Option("--real", help="real tensors (refused if the peak would not fit in RAM)")]
    = False,
    fake: Annotated[bool, typer.Option("--fake", help="fake tensors: any size, no memory used")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    dp: Annotated[int, typer.Option("--dp", help="data-parallel ranks: > 1 measures one rank of N (fake process "
                                             "group)")] = 1,
    zero: Annotated[int, typer.Option("--zero", help="with --dp: 1 (ZeroRedundancyOptimizer), 2 or 3 (FSDP2)")] = 0,
    rank: Annotated[int | None, typer.Option("--rank", help="with --dp: this rank only (default: one rank per "
                                                            "distinct predicted class)")] = None,
    dropout: Annotated[float | None, typer.Option(
        "--dropout", help="0: train without dropout (every dropout probability set to 0, bill and model)")] = None,
    launch: Annotated[int | None, typer.Option(
        "--launch", help="start N local ranks with torchrun (python -m torch.distributed.run) and relay rank 0's "
        "output; under torchrun itself, check measures every rank of the launched run")] = None,
    device: Annotated[str, typer.Option("--device", help="launched runs: cpu (gloo, MemTracker) | cuda (nccl, "
                                                         "torch.cuda max_memory_allocated/reserved); the bill's "
                                                         "eager rows follow that device's dropout and SDPA "
                                                         "kernels")] = "cpu",
    lora_rank: Annotated[int | None, typer.Option(
        "--lora-rank", help="LoRA rank: measure the model wrapped by PEFT's get_peft_model (fp32 | pure-bf16)")] = None,
    lora_targets: Annotated[str | None, typer.Option(
        "--lora-targets", help="with --lora-rank: comma-separated module names (default q_proj,v_proj) or all-linear")]
    = None,
    lora_alpha: Annotated[float | None, typer.Option("--lora-alpha", help="LoraConfig lora_alpha (default: PEFT's, 8)")]
    = None,
    lora_dropout: Annotated[float | None, typer.Option(
        "--lora-dropout", help="LoraConfig lora_dropout (default: PEFT's, 0.0; > 0 is measured, not billed yet)")]
    = None,
    attention: Annotated[str, typer.Option(
        "--attention", help="sdpa | eager: the model built with attn_implementation=\"eager\" (transformers' "
        "eager_attention_forward), billed with --attention eager; one process only")] = "sdpa",
) -> None:
    """Measure a real training step in PyTorch and compare it with the bill, category by category.

    The model is built from its config as given (dropout, sliding windows); what the bill does not model yet
    is said in one line each (JSON: `unmodelled`)."""
    from stepbill.check import model_and_config
    from stepbill.measure.session import refuse_beyond_one_process
    from stepbill.measure.sharded import measured_recipe
    from stepbill.spec.schema import Int, check_value

    check_value(Int(1, MAX_CHECK_DP), "--dp", dp)
    if rank is not None:
        check_value(Int(0, dp - 1), "--rank", rank)
    refuse_beyond_one_process(recompute, dp > 1 or bool(zero) or launch is not None, "--recompute",
                              "--dp/--zero/--launch")
    from stepbill.measure.distributed import launched_world
    from stepbill.measure.optimizers import refuse_optimizer

    refuse_optimizer(optimizer, optimizer_impl, dp > 1 or bool(zero) or launch is not None
                     or launched_world() is not None, "--dp/--zero/--launch (or run outside torchrun)")

    if real and fake:
        raise StepbillError("choose one of --real and --fake")
    if attention not in ("sdpa", "eager"):
        raise StepbillError(f"--attention must be sdpa or eager, got {attention!r}")
    if attention != "sdpa" and (dp > 1 or zero or launch is not None or lora_rank is not None):
        raise StepbillError("--attention eager is measured in one process without LoRA; drop --dp/--zero/--launch/"
                            "--lora-rank")
    from stepbill.check_lora import QLORA_REFUSED, bill_lora, lora_header, lora_setup, lora_unmodelled

    if recipe == "qlora-nf4":
        raise StepbillError(QLORA_REFUSED)
    recipe = measured_recipe(zero, recipe)  # refuses, in one line, what cannot be measured
    spec, config = model_and_config(model, dropout)
    lora = lora_setup(spec, recipe, recompute, dp > 1 or zero != 0 or launch is not None or launched_world() is not None,
                      lora_rank, lora_targets, lora_alpha, lora_dropout)
    if device not in ("cpu", "cuda"):
        raise StepbillError(f"--device must be cpu or cuda, got {device!r}")
    if launch is not None:
        if fake:
            raise StepbillError("--launch measures real tensors on real ranks; drop --fake")
        if dp not in (1, launch):
            raise StepbillError(f"--dp {dp} must equal --launch {launch} (one data-parallel rank per process)")
        args = [model, "--seq", str(seq), "--micro-batch", str(micro_batch), "--dp", str(launch), "--zero", str(zero),
                "--recipe", recipe, "--device", device, "--optimizer-impl", optimizer_impl] + (
                    ["--json"] if as_json else []) + (
                    [] if dropout is None else ["--dropout", f"{dropout:g}"])
        _launch(launch, args)
        return
    here = launched_world()
    if here is not None:
        if fake:
            raise StepbillError("a launched check measures real tensors; drop --fake")
        from stepbill.measure.distributed import leave_rank

        try:
            _check_launched(spec, config, seq, micro_batch, recipe, here[1] if dp == 1 else dp, zero, device,
                            as_json, dropout, optimizer_impl)
        except StepbillError as exc:
            print(f"stepbill: error: {one_line(str(exc))}", file=sys.stderr)
            leave_rank(2)
        leave_rank(0)
    if device != "cpu":
        raise StepbillError("--device cuda needs real ranks: run under torchrun or with --launch N")
    if dp > 1 or zero:
        _check_sharded(model, spec, config, seq, micro_batch, recipe, dp, zero, rank,
                       "real" if real else "fake" if fake else "auto", as_json, dropout, optimizer_impl)
        return
    from stepbill.check import bill_command, choose_mode, compare, predict, predictions, verdict
    from stepbill.spec.recipe import make_recipe

    bill, note = predict(spec, make_recipe(recipe, optimizer, micro_batch, seq, recompute,
                                           optimizer_impl=optimizer_impl, **bill_lora(lora)), attention)
    if note:
        typer.echo(note, err=True)
    mode = choose_mode("real" if real else "fake" if fake else "auto", bill.lines["memory.peak"].value)
    measured = _measure_with_progress(
        config, mode, recipe=recipe, optimizer_impl=optimizer_impl, micro_batch=micro_batch,
        seq_len=seq, recompute=recompute, attention=attention, optimizer=optimizer,
        **({} if lora is None else {"lora": lora}),
    )
    rows = compare(predictions(bill), measured)
    command = bill_command(model, seq=seq, micro_batch=micro_batch, recipe=recipe, convention=bill.convention,
                           recompute=recompute, optimizer_impl=optimizer_impl, dropout=dropout, attention=attention,
                           lora=lora, optimizer=optimizer)
    if as_json:
        out = single_check_json(spec, mode, bill, measured, rows, verdict(rows)) | notes_json(spec, recipe, dropout,
                                                                                              command)
        out["unmodelled"] += lora_unmodelled(lora)
        from stepbill.report.notes import attention_unmodelled

        out["unmodelled"] += attention_unmodelled(bill)  # --attention eager where not modelled yet
        print(json.dumps(out, indent=2))
        return
    _print_header(dropout, recipe)
    if optimizer != "adamw":
        from stepbill.measure.optimizers import describe

        typer.echo(f"optimizer {optimizer}: {describe(optimizer, optimizer_impl)}")
    if lora is not None:
        typer.echo(lora_header(lora))
    _print_rows(spec.name, mode, bill.convention, rows, verdict(rows))
    _print_notes(spec)
    from stepbill.report.notes import attention_unmodelled

    for line in attention_unmodelled(bill):
        typer.echo(f"note: {line}")
    for line in lora_unmodelled(lora):
        typer.echo(f"note: {line}")
    from stepbill.report.units import fmt_flops

    typer.echo(f"causal-halved step FLOPs (the seed's convention; FlopCounterMode counts the full square): "
               f"{fmt_flops(bill.lines['flops.step'].value)}")
    typer.echo(f"the bill compared: {command}")


def _print_header(dropout: float | None, recipe: str) -> None:
    from stepbill.engine.unmodelled import DROPOUT_OFF_HEADER
    from stepbill.measure.sharded import recipe_header

    typer.echo(recipe_header(recipe))
    if dropout is not None:
        typer.echo(DROPOUT_OFF_HEADER)


def _print_notes(spec: Any) -> None:
    from stepbill.engine.unmodelled import unmodelled

    for line in unmodelled(spec):
        typer.echo(f"note: {line}")


def _print_rows(name: str, mode: str, convention: str, rows: list, summary: str,
                measured_by: str = "MemTracker, FlopCounterMode") -> None:
    from rich.table import Table

    from stepbill.report.terminal import make_console
    from stepbill.report.units import fmt_bytes, fmt_flops

    table = Table(title=f"{name}: bill ({convention} convention) vs PyTorch ({mode} tensors, {measured_by}); "
                        "GiB = 2^30 B", title_justify="left")
    for col in ("category", "predicted", "measured", "error", "verdict"):
        table.add_column(col, justify="left" if col in ("category", "verdict") else "right")
    for r in rows:
        fmt = fmt_flops if r.unit == "FLOPs" else (lambda n: f"{n:,.0f}") if r.unit == "params" else fmt_bytes
        table.add_row(r.category, "-" if r.predicted is None else fmt(r.predicted), fmt(r.measured),
                      "-" if r.error is None else f"{100 * r.error:+.2f} %", r.verdict)
    console = make_console()
    console.print(table)
    console.print(summary)


def _check_sharded(model: str, spec: Any, config: dict[str, Any], seq: int, micro_batch: int, recipe: str, dp: int,
                   zero: int, rank: int | None, requested: str, as_json: bool, dropout: float | None,
                   optimizer_impl: str = "single") -> None:
    """One rank of `dp` under ZeRO-`zero`: predicted (engine/parallel/fsdp2.py) vs measured (measure/sharded.py)."""
    from stepbill.check import bill_command, verdict

    if zero == 0:
        raise StepbillError("--dp N with --zero 0 is DDP, measured on real ranks only: add --launch N (or run under "
                            "torchrun)")
    if dp < 2 or zero not in (1, 2, 3):
        raise StepbillError("a sharded check needs --dp >= 2 and --zero 1, 2 or 3")
    results = measure_sharded(spec, seq, micro_batch, recipe, dp, zero, rank, requested, config, optimizer_impl)
    command = bill_command(model, seq=seq, micro_batch=micro_batch, recipe=recipe, convention="eager",
                           optimizer_impl=optimizer_impl, dp=dp, zero=zero, dropout=dropout)
    if as_json:
        summaries = [verdict(rows) for *_, rows in results]
        print(json.dumps(sharded_check_json(spec.name, dp, zero, results, summaries)
                         | notes_json(spec, recipe, dropout, command), indent=2))
        return
    _print_header(dropout, recipe)
    for r, mode, pred, _, rows in results:
        _print_rows(f"{spec.name} rank {r} of {dp}, ZeRO-{zero}, {recipe}", mode, pred.convention, rows,
                    verdict(rows))
    _print_notes(spec)
    typer.echo(f"the bill compared (its per-rank eager classes): {command}")


GLOO_FSDP_NOTE = ("gloo convention: gloo's reduce-scatter clones its whole input (fp32, one unit) and is billed "
                  "so (NCCL does not); the measurement waits for gloo's worker thread to free each clone, so every "
                  "run measures the same; gloo's all-gather staging buffer lives on its worker thread, seen by "
                  "no tracker and not billed")


def _launch(nproc: int, args: list[str]) -> None:
    """`--launch N`: run this check under torchrun with N local ranks; relay rank 0's output, or the failing rank's
    error line (measure/launch.py)."""
    from stepbill.measure.launch import run_launched

    typer.echo(run_launched(nproc, args), nl=False)


def _check_launched(spec: Any, config: dict[str, Any], seq: int, micro_batch: int, recipe: str, dp: int, zero: int,
                    device: str, as_json: bool, dropout: float | None, optimizer_impl: str = "single") -> None:
    """Every rank of a torchrun-launched run measured, AdamW on `optimizer_impl`'s path in the run and in its bill;
    rank 0 prints predicted vs measured per rank."""
    from stepbill.check import verdict
    from stepbill.check_ranks import compare_launched
    from stepbill.measure.distributed import launched_world, measure_launched
    from stepbill.report.check_json import _finite_or_none

    here = launched_world()
    assert here is not None
    if dp != here[1]:
        raise StepbillError(f"--dp {dp} must equal torchrun's WORLD_SIZE {here[1]}")
    rank, measured = measure_launched(config, zero=zero, micro_batch=micro_batch, seq_len=seq, recipe=recipe,
                                      device=device, optimizer_impl=optimizer_impl)
    if rank != 0 or measured is None:
        return
    backend = "nccl" if device == "cuda" else "gloo"
    results = compare_launched(spec, measured, zero=zero, micro_batch=micro_batch, seq=seq, recipe=recipe,
                               backend=backend, device=device, optimizer_impl=optimizer_impl)
    stage = {0: "DDP", 1: "ZeRO-1 (ZeroRedundancyOptimizer)", 2: "ZeRO-2 (FSDP2)", 3: "ZeRO-3 (FSDP2)"}[zero]
    tracker = ("torch.cuda max_memory_allocated" if device == "cuda"
               else "FSDPMemTracker" if zero in (2, 3) else "MemTracker")
    notes = [GLOO_FSDP_NOTE] if zero in (2, 3) and backend == "gloo" else []
    if as_json:
        print(json.dumps({
            "model": spec.name, "launched": True, "backend": backend, "device": device, "dp": dp, "zero": zero,
            "stage": stage, **notes_json(spec, recipe, dropout), "measured_by": tracker, "notes": notes,
            "ranks": [{"rank": m.rank, "convention": pred.convention,
                       "rows": [{"category": x.category, "line": x.line, "predicted": x.predicted,
                                 "measured": x.measured, "error": _finite_or_none(x.error), "verdict": x.verdict}
                                for x in rows],
                       "measured_breakdown_at_peak": m.breakdown, "measured_extra": m.extra,
                       "verdict": verdict(rows)} for pred, m, rows in results]}, indent=2))
        return
    _print_header(dropout, recipe)
    for pred, m, rows in results:
        _print_rows(f"{spec.name} rank {m.rank} of {dp} (torchrun, {backend}), {stage}, {recipe}", "real",
                    pred.convention, rows, verdict(rows), measured_by=tracker)
    _print_notes(spec)
    for note in notes:
        typer.echo(f"note: {note}")
