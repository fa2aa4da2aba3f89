"""Command line: `stepbill [bill|models|lab] ...`. Argument parsing and printing only; no arithmetic here."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from stepbill.errors import StepbillError

try:  # typer >= 0.2x vendors its own click
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as click_exceptions

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="The complete bill of one LLM training step: memory, checkpoint, with derivations. "
    "With no command: the seed's worked example (gpt3-125m, micro-batch 8, seq 1024, mixed-bf16 AdamW).",
)

GIB = 2**30
DEFAULT_MODEL = "gpt3-125m"


def _emit_json(obj: object) -> None:
    print(json.dumps(obj, indent=2))


@app.callback(invoke_without_command=True)
def _default(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:
        bill(model=DEFAULT_MODEL, seq=1024, micro_batch=8)


@app.command()
def bill(
    model: Annotated[str, typer.Argument(help="preset name (see `stepbill models`), ModelSpec JSON or HF config.json")]
    = DEFAULT_MODEL,
    seq: Annotated[int, typer.Option("--seq", help="sequence length (tokens)")] = 2048,
    micro_batch: Annotated[int, typer.Option("--micro-batch", help="sequences per micro-batch")] = 1,
    recipe: Annotated[str, typer.Option("--recipe", help="precision recipe, e.g. mixed-bf16, fp32, pure-bf16")]
    = "mixed-bf16",
    optimizer: Annotated[str, typer.Option("--optimizer", help="adamw, adam, sgd, sgd-momentum, lion, adafactor, muon")]
    = "adamw",
    recompute: Annotated[str, typer.Option(
        "--recompute", help="none | full | every:K | every:auto | selective:core_attn,mlp,... | budget:40GiB")]
    = "none",
    optimizer_impl: Annotated[str, typer.Option(
        "--optimizer-impl", help="AdamW in PyTorch: single | foreach | fused (their temporaries; eager convention)")]
    = "single",
    convention: Annotated[str, typer.Option("--convention", help="ideal (the seed's) | eager (what PyTorch keeps) | megatron (Korthikanti et al. Table 2)")]
    = "ideal",
    attention: Annotated[str, typer.Option("--attention", help="sdpa (fused, no S² scores) | eager (stores them)")]
    = "sdpa",
    lora_rank: Annotated[int | None, typer.Option("--lora-rank", help="LoRA rank (enables LoRA)")] = None,
    lora_targets: Annotated[str | None, typer.Option("--lora-targets", help="comma-separated, e.g. q_proj,v_proj")]
    = None,
    gpu_mem: Annotated[float | None, typer.Option("--gpu-mem", help="memory per GPU in GiB (cards needed)")] = None,
    dp: Annotated[int, typer.Option("--dp", help="data-parallel degree")] = 1,
    tp: Annotated[int, typer.Option("--tp", help="tensor-parallel degree")] = 1,
    pp: Annotated[int, typer.Option("--pp", help="pipeline stages")] = 1,
    cp: Annotated[int, typer.Option("--cp", help="context-parallel degree")] = 1,
    ep: Annotated[int, typer.Option("--ep", help="expert-parallel degree (MoE)")] = 1,
    etp: Annotated[int | None, typer.Option("--etp", help="expert tensor-parallel degree (default 1)")] = None,
    zero: Annotated[int, typer.Option("--zero", help="ZeRO stage 0-3 (3 = FSDP full shard)")] = 0,
    shard_group: Annotated[int | None, typer.Option("--shard-group", help="hybrid sharding group size")] = None,
    sp: Annotated[bool, typer.Option("--sp", help="sequence parallel (with --tp)")] = False,
    pp_schedule: Annotated[str, typer.Option("--pp-schedule", help="gpipe | 1f1b | interleaved")] = "1f1b",
    vpp: Annotated[int, typer.Option("--vpp", help="model chunks per stage (interleaved)")] = 1,
    micro_batches: Annotated[int, typer.Option("--micro-batches", help="micro-batches per step per pipeline")] = 1,
    offload_optimizer: Annotated[bool, typer.Option("--offload-optimizer", help="master + states in CPU memory")]
    = False,
    offload_activations: Annotated[bool, typer.Option("--offload-activations", help="kept activations to CPU")]
    = False,
    gpu: Annotated[str | None, typer.Option("--gpu", help="catalog GPU (h100-sxm, a100-80gb, mi300x, ...)")] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", help="GPU count; must equal dp·tp·pp·cp")] = None,
    mfu: Annotated[float, typer.Option("--efficiency", help="achieved share of dense peak on matmuls")] = 0.5,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object (bytes as integers)")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="show every number's formula, inputs and provenance")]
    = False,
    dropout: Annotated[float | None, typer.Option(
        "--dropout", help="0: train without dropout (every dropout probability of the config set to 0)")] = None,
) -> None:
    """The bill of one training step for MODEL under a recipe."""
    from stepbill.engine.bill import make_bill
    from stepbill.spec.hardware import load_gpu
    from stepbill.spec.parallel import Parallel, validate_layout
    from stepbill.spec.presets import load_model
    from stepbill.spec.recipe import make_recipe

    if gpu_mem is not None and gpu_mem <= 0:
        raise StepbillError(f"--gpu-mem must be positive GiB, got {gpu_mem}")
    if not 0 < mfu <= 1:
        raise StepbillError(f"--efficiency must lie in (0, 1], got {mfu}")
    targets = tuple(t.strip() for t in lora_targets.split(",") if t.strip()) if lora_targets is not None else None
    from stepbill.engine.unmodelled import DROPOUT_OFF_HEADER, apply_dropout_option, unmodelled

    spec = apply_dropout_option(load_model(model), dropout)
    notes = unmodelled(spec)
    layout = Parallel(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, sp=sp, zero=zero, shard_group=shard_group,
                      micro_batches=micro_batches, pp_schedule=pp_schedule, vpp=vpp,  # type: ignore[arg-type]
                      offload_optimizer=offload_optimizer, offload_activations=offload_activations)
    validate_layout(spec, layout, seq, gpus)
    the_gpu = load_gpu(gpu) if gpu is not None else None
    the_recipe = make_recipe(recipe, optimizer, micro_batch, seq, recompute, lora_rank, targets, layout,
                             optimizer_impl)
    card = gpu_mem * GIB if gpu_mem else (the_gpu.memory_bytes if the_gpu else None)
    result = make_bill(spec, the_recipe, card, convention, attention, gpu=the_gpu, efficiency=mfu)
    if as_json:
        from stepbill.report.bill_json import bill_to_json

        _emit_json(bill_to_json(result) | {"dropout_option": dropout, "unmodelled": notes})
    else:
        from stepbill.report.terminal import print_bill

        if dropout is not None:
            typer.echo(DROPOUT_OFF_HEADER)
        print_bill(result, explain=explain)
        for note in notes:
            typer.echo(f"note: {note}")


@app.command("recompute")
def recompute_cmd(
    model: Annotated[str, typer.Argument(help="preset name, ModelSpec JSON or HF config.json")] = "deepseek-v3",
    seq: Annotated[int, typer.Option("--seq", help="sequence length (tokens)")] = 131_072,
    micro_batch: Annotated[int, typer.Option("--micro-batch", help="sequences per micro-batch")] = 1,
    recipe: Annotated[str, typer.Option("--recipe", help="precision recipe (sets the activation dtype)")]
    = "mixed-bf16",
    layer_kind: Annotated[str | None, typer.Option("--layer-kind", help="moe | dense (default: moe if any)")] = None,
    group: Annotated[str, typer.Option("--group", help="op (every tensor, by producing op) | seed (V3 eight rows)")]
    = "op",
    row7: Annotated[str, typer.Option("--row7", help="seed's 7th row: seed (width 37,440) | label (+router, Q down)")]
    = "seed",
    threshold: Annotated[float, typer.Option("--threshold", help="cut, TFLOP per GiB")] = 3.0,
    budget: Annotated[str | None, typer.Option("--budget", help="activation budget, e.g. 1500GiB: exact MILP vs "
                                               "greedy")] = None,
    convention: Annotated[str, typer.Option("--convention", help="ideal | eager")] = "ideal",
    attention: Annotated[str, typer.Option("--attention", help="sdpa | eager")] = "sdpa",
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Rank every tensor of a layer by recompute FLOPs per byte saved, with the cut and the crossovers."""
    from stepbill.engine import activations as act
    from stepbill.engine import flops as fl
    from stepbill.engine import recompute_budget as rb
    from stepbill.engine.recompute_rank import attention_crossovers, rank_layer
    from stepbill.spec.presets import load_model
    from stepbill.spec.recipe import make_recipe
    from stepbill.spec.recompute_policy import parse_size

    spec = load_model(model)
    the_recipe = make_recipe(recipe, micro_batch=micro_batch, seq_len=seq)
    if convention not in act.CONVENTIONS:
        raise StepbillError(f"unknown convention {convention!r} (known: {', '.join(act.CONVENTIONS)})")
    kind = layer_kind or ("moe" if spec.n_moe_layers else "dense")
    a_bytes = the_recipe.precision.activation
    ranking = rank_layer(spec, kind, seq, micro_batch, a_bytes, convention, attention, group, row7, threshold)
    slope = fl.attention_slope(spec)
    crossings = attention_crossovers(spec, ranking)
    solved = None
    if budget is not None:
        problem = rb.problem_for_spec(spec, parse_size(budget), seq, micro_batch, a_bytes, convention, attention)
        solved = (rb.solve_milp(problem), rb.solve_greedy(problem))
    if as_json:
        from stepbill.report.recompute_table import ranking_to_json

        _emit_json(ranking_to_json(ranking, crossings, slope, solved))
        return
    from stepbill.report.recompute_table import render_ranking
    from stepbill.report.terminal import make_console

    title = (f"{spec.name}: recompute ranking of one {kind} layer, micro-batch {micro_batch} × seq {seq:,} "
             f"({convention} convention; GiB = 2^30 B, TFLOP = 1e12)")
    make_console().print(render_ranking(ranking, crossings, slope, title, solved))


@app.command()
def models(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """List the built-in model presets with total and active parameters."""
    from rich.table import Table

    from stepbill.engine.params import param_inventory
    from stepbill.report.terminal import make_console
    from stepbill.report.units import fmt_count
    from stepbill.spec.presets import load_preset, preset_names

    rows = []
    for name in preset_names():
        spec = load_preset(name)
        inv = param_inventory(spec)
        rows.append({"name": name, "family": spec.family, "params_total": inv.total, "params_active": inv.active,
                     "layers": spec.n_layers, "hidden": spec.hidden_size, "attention": spec.attention.kind,
                     "moe": spec.moe is not None})
    if as_json:
        _emit_json(rows)
        return
    table = Table(title="Built-in presets (params in decimal units: B = 1e9)", title_justify="left")
    for col in ("name", "family", "layers", "hidden", "attention", "total params", "active params"):
        table.add_column(col, justify="left" if col in ("name", "family", "attention") else "right")
    for r in rows:
        table.add_row(r["name"], r["family"], str(r["layers"]), f"{r['hidden']:,}",
                      r["attention"] + (" + MoE" if r["moe"] else ""), fmt_count(r["params_total"]),
                      fmt_count(r["params_active"]))
    make_console().print(table)


def _register_subcommands() -> None:
    from stepbill.cli_check import check
    from stepbill.lab.cli import app as lab_app

    if not any(command.name == "check" for command in app.registered_commands):
        app.command(name="check")(check)
    if not any(group.name == "lab" for group in app.registered_groups):
        app.add_typer(lab_app, name="lab", help="Optimizer, schedule, precision and collective mechanics.")


def main(argv: list[str] | None = None) -> None:
    """Entry point: bad input becomes one line on stderr and exit code 2, never a traceback."""
    _register_subcommands()
    try:
        app(args=argv, standalone_mode=False)
    except StepbillError as exc:
        print(f"stepbill: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except click_exceptions.UsageError as exc:
        print(f"stepbill: error: {exc.format_message()}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)


if __name__ == "__main__":
    main()
