"""Command line: `stepbill [bill|models|lab] ...`. Argument parsing and printing only; no arithmetic here."""

from __future__ import annotations

import functools
import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.main

from stepbill.errors import StepbillError, one_line

if TYPE_CHECKING:
    pass

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


# The layout and hardware options `bill` and `fit` share: one declaration each (flag, type, help).
DpOption = Annotated[int | None, typer.Option("--dp", help="data-parallel degree (default: --gpus ÷ tp·pp·cp, else 1)")]
TpOption = Annotated[int, typer.Option("--tp", help="tensor-parallel degree")]
PpOption = Annotated[int, typer.Option("--pp", help="pipeline stages")]
PpLayersOption = Annotated[str | None, typer.Option(
    "--pp-layers", help="transformer layers per stage, e.g. 7,8,8,7 (default: even, or Megatron-LM's uneven split)")]
CpOption = Annotated[int, typer.Option("--cp", help="context-parallel degree")]
EpOption = Annotated[int, typer.Option("--ep", help="expert-parallel degree (MoE)")]
EtpOption = Annotated[int | None, typer.Option("--etp", help="expert tensor-parallel degree (default 1)")]
ZeroOption = Annotated[int, typer.Option("--zero", help="ZeRO stage 0-3 (3 = FSDP full shard)")]
ShardGroupOption = Annotated[int | None, typer.Option("--shard-group", help="hybrid sharding group size")]
SpOption = Annotated[bool, typer.Option("--sp", help="sequence parallel (with --tp)")]
PpScheduleOption = Annotated[str, typer.Option("--pp-schedule", help="gpipe | 1f1b | interleaved")]
VppOption = Annotated[int, typer.Option("--vpp", help="model chunks per stage (interleaved)")]
MicroBatchesOption = Annotated[int, typer.Option("--micro-batches", help="micro-batches per step per pipeline")]
OffloadOptimizerOption = Annotated[bool, typer.Option("--offload-optimizer", help="master + states in CPU memory")]
OffloadActivationsOption = Annotated[bool, typer.Option("--offload-activations", help="kept activations to CPU")]
GpuOption = Annotated[str | None, typer.Option(
    "--gpu", help="catalog GPU (h100-sxm, a100-80gb, mi300x, ...; aliases such as h100, a100; any case)")]
GpusOption = Annotated[int | None, typer.Option("--gpus", help="GPU count; must equal dp·tp·pp·cp (alone: sets dp)")]
HostMemOption = Annotated[float | None, typer.Option(
    "--host-mem", help="host (CPU) memory of one node in GiB, shared by its GPUs for what they offload (default: the "
    "catalog's reference node, e.g. DGX H100 2,048 GiB)")]


@app.command()
def bill(
    model: Annotated[str, typer.Argument(
        help="preset name (see `stepbill models`), ModelSpec JSON, HF config.json or Hub id org/name")]
    = DEFAULT_MODEL,
    seq: Annotated[int, typer.Option("--seq", help="sequence length (tokens)")] = 2048,
    micro_batch: Annotated[int, typer.Option("--micro-batch", help="sequences per micro-batch")] = 1,
    recipe: Annotated[str, typer.Option("--recipe", help="precision recipe, e.g. mixed-bf16, fp32, pure-bf16, "
                                        "qlora-nf4 (with --lora-rank), fp8, fp8-deepseek")]
    = "mixed-bf16",
    optimizer: Annotated[str, typer.Option("--optimizer", help="adamw, adam, sgd, sgd-momentum, lion, adafactor, muon")]
    = "adamw",
    recompute: Annotated[str, typer.Option(
        "--recompute", help="none | full | every:K | every:auto | selective:core_attn,mlp,... | budget:40GiB "
        "(a bare budget number is GiB: budget:10 = 10 GiB)")]
    = "none",
    optimizer_impl: Annotated[str | None, typer.Option(
        "--optimizer-impl", help="AdamW in PyTorch: single | foreach | fused (their temporaries; eager convention). "
        "Default: PyTorch's own on the --device — foreach for Adam / AdamW on CUDA, single otherwise")] = None,
    convention: Annotated[str, typer.Option("--convention", help="ideal (the seed's) | eager (what PyTorch keeps) | megatron (Korthikanti et al. Table 2)")]
    = "ideal",
    attention: Annotated[str, typer.Option("--attention", help="sdpa (fused, no S² scores) | eager (stores them)")]
    = "sdpa",
    lora_rank: Annotated[int | None, typer.Option("--lora-rank", help="LoRA rank (enables LoRA)")] = None,
    lora_targets: Annotated[str | None, typer.Option("--lora-targets", help="comma-separated, e.g. q_proj,v_proj")]
    = None,
    gpu_mem: Annotated[float | None, typer.Option("--gpu-mem", help="usable memory per GPU in GiB (cards needed, fit)")]
    = None,
    reserve: Annotated[float | None, typer.Option(
        "--reserve", help="GiB kept back per GPU for the CUDA context, NCCL buffers and fragmentation (default: "
        "1 GiB + 1.5 GiB per parallel axis > 1 + 2 % of the card; see docs/parallel.md)")] = None,
    host_mem: HostMemOption = None,
    dp: DpOption = None,
    tp: TpOption = 1,
    pp: PpOption = 1,
    pp_layers: PpLayersOption = None,
    cp: CpOption = 1,
    ep: EpOption = 1,
    etp: EtpOption = None,
    zero: ZeroOption = 0,
    shard_group: ShardGroupOption = None,
    sp: SpOption = False,
    pp_schedule: PpScheduleOption = "1f1b",
    vpp: VppOption = 1,
    micro_batches: MicroBatchesOption = 1,
    offload_optimizer: OffloadOptimizerOption = False,
    offload_activations: OffloadActivationsOption = False,
    gpu: GpuOption = None,
    gpus: GpusOption = None,
    mfu: Annotated[float | None, typer.Option(
        "--efficiency", help="override: one achieved share of dense peak on every matmul (default: per-op model)")] = None,
    global_batch_tokens: Annotated[str | None, typer.Option(
        "--global-batch-tokens", help="tokens per optimizer step, e.g. 4Mi (binary) or 4M (decimal): sets "
        "--micro-batches = tokens ÷ (dp·micro-batch·seq), rounded to the nearest whole count")] = None,
    train_tokens: Annotated[str | None, typer.Option(
        "--train-tokens", help="tokens of the whole run, e.g. 2T: steps, days, GPU-hours (with --gpu)")] = None,
    price_per_gpu_hour: Annotated[float | None, typer.Option(
        "--price-per-gpu-hour", help="price of one GPU-hour (any currency): the run's cost")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object (bytes as integers)")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="show every number's formula, inputs and provenance")]
    = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="one line: the verdict, the peak and the step time")] = False,
    dropout: Annotated[float | None, typer.Option(
        "--dropout", help="0: train without dropout (every dropout probability of the config set to 0)")] = None,
    device: Annotated[str | None, typer.Option(
        "--device", help="the kernels the eager convention follows: cuda (default with --gpu or --gpu-mem: the fit "
        "verdict is judged on what the card runs) | cpu (default otherwise: what `stepbill check` measures) — "
        "dropout masks, and SDPA's kernel with attention dropout or MLA's unequal head widths, differ")] = None,
    sweep: Annotated[str | None, typer.Option(
        "--sweep", help="AXIS=V1,V2,... or AXIS=LO..HI (LO, 2·LO, ... HI): one bill per value of one option "
        "(micro-batch, seq, dp, tp, zero, recompute, gpu, ...), a row each: peak, fit, step time")] = None,
) -> None:
    """The bill of one training step for MODEL under a recipe."""
    from stepbill.api import cli_flag, make_step_bill
    from stepbill.engine.unmodelled import DROPOUT_OFF_HEADER, unmodelled

    options = dict(
        seq=seq, micro_batch=micro_batch, recipe=recipe, optimizer=optimizer, recompute=recompute,
        optimizer_impl=optimizer_impl, convention=convention, attention=attention, lora_rank=lora_rank,
        lora_targets=lora_targets, gpu_mem_gib=gpu_mem, reserve_gib=reserve, host_mem_gib=host_mem, dp=dp, tp=tp, pp=pp,
        pp_layers=pp_layers, cp=cp, ep=ep, etp=etp, zero=zero, shard_group=shard_group, sp=sp,
        pp_schedule=pp_schedule, vpp=vpp, micro_batches=micro_batches, offload_optimizer=offload_optimizer,
        offload_activations=offload_activations, gpu=gpu, gpus=gpus, efficiency=mfu, dropout=dropout,
        global_batch_tokens=global_batch_tokens, train_tokens=train_tokens, price_per_gpu_hour=price_per_gpu_hour,
        device=device)
    if sweep is not None:
        if explain or quiet:
            from stepbill.errors import StepbillError

            raise StepbillError(f"--sweep prints one row per value: drop {'--explain' if explain else '--quiet'} "
                                "(run one value's bill for its derivations)")
        _sweep(model, sweep, options, as_json)
        return
    run = make_step_bill(model, name=cli_flag, **options)  # type: ignore[arg-type]
    result, fit, dp_note = run.bill, run.fit, run.layout_note
    if as_json:
        _emit_json(run.to_json())
    elif quiet:
        from stepbill.report.terminal import one_line

        print(one_line(result, fit))
    else:
        from stepbill.report.notes import attention_unmodelled
        from stepbill.report.terminal import print_bill

        if dropout is not None:
            print(DROPOUT_OFF_HEADER)
        print_bill(result, explain=explain, fit=fit, layout_note=dp_note)
        for note in unmodelled(result.model) + attention_unmodelled(result, fit):
            print(f"note: {note}")
        if run.seed_notes:
            print("This is one of seed 000's worked examples; where the seed prints another number "
                  "(`stepbill lab seed-checks` has them all):")
        for line in run.seed_notes:
            print(f"- {line}")


def _sweep(model: str, text: str, options: dict, as_json: bool) -> None:
    """`bill --sweep`: one bill per value (api_sweep.py), as a table or one JSON object."""
    from stepbill.api import cli_flag
    from stepbill.api_sweep import parse_sweep, sweep
    from stepbill.cli_plan import progress_bar

    axis, values = parse_sweep(text, cli_flag)
    bar = progress_bar(as_json, label="sweep", unit="bills")
    try:
        result = sweep(model, axis, values, name=cli_flag, progress=bar, **{k: v for k, v in options.items()
                                                                            if k != axis})
    finally:
        if bar is not None:
            bar.close()
    if as_json:
        _emit_json(result.to_json())
        return
    from stepbill.report.sweep_terminal import render_sweep
    from stepbill.report.terminal import make_console

    make_console().print(render_sweep(result))


@app.command("fit")
def fit_cmd(
    model: Annotated[str, typer.Argument(help="preset name, ModelSpec JSON, HF config.json or Hub id org/name")],
    max_axis: Annotated[str, typer.Option("--max", help="micro-batch | seq: what to make as large as fits")],
    seq: Annotated[int | None, typer.Option("--seq", help="sequence length held while searching the micro-batch "
                                            "(default 2048)")] = None,
    micro_batch: Annotated[int | None, typer.Option("--micro-batch", help="micro-batch held while searching seq "
                                                    "(default 1)")] = None,
    multiple_of: Annotated[int, typer.Option("--multiple-of", help="search only multiples of N (e.g. 1024 tokens)")]
    = 1,
    recipe: Annotated[str, typer.Option("--recipe", help="precision recipe, e.g. mixed-bf16, fp32, pure-bf16")]
    = "mixed-bf16",
    optimizer: Annotated[str, typer.Option("--optimizer", help="adamw, adam, sgd, sgd-momentum, lion, adafactor, muon")]
    = "adamw",
    recompute: Annotated[str, typer.Option("--recompute", help="none | full | every:K | selective:... | budget:SIZE")]
    = "none",
    optimizer_impl: Annotated[str | None, typer.Option(
        "--optimizer-impl", help="single | foreach | fused (default: PyTorch's on the card: foreach for Adam / AdamW "
        "on CUDA)")] = None,
    convention: Annotated[str, typer.Option("--convention", help="ideal | eager | megatron (the verdict is judged on "
                                            "the eager peak either way)")] = "ideal",
    attention: Annotated[str, typer.Option("--attention", help="sdpa | eager")] = "sdpa",
    lora_rank: Annotated[int | None, typer.Option("--lora-rank", help="LoRA rank (enables LoRA)")] = None,
    lora_targets: Annotated[str | None, typer.Option("--lora-targets", help="comma-separated, e.g. q_proj,v_proj")]
    = None,
    gpu_mem: Annotated[float | None, typer.Option("--gpu-mem", help="usable memory per GPU in GiB")] = None,
    reserve: Annotated[float | None, typer.Option("--reserve", help="GiB kept back per GPU (default: see bill)")]
    = None,
    host_mem: HostMemOption = None,
    dp: DpOption = None,
    tp: TpOption = 1,
    pp: PpOption = 1,
    pp_layers: PpLayersOption = None,
    cp: CpOption = 1,
    ep: EpOption = 1,
    etp: EtpOption = None,
    zero: ZeroOption = 0,
    shard_group: ShardGroupOption = None,
    sp: SpOption = False,
    pp_schedule: PpScheduleOption = "1f1b",
    vpp: VppOption = 1,
    micro_batches: MicroBatchesOption = 1,
    offload_optimizer: OffloadOptimizerOption = False,
    offload_activations: OffloadActivationsOption = False,
    gpu: GpuOption = None,
    gpus: GpusOption = None,
    dropout: Annotated[float | None, typer.Option("--dropout", help="0: train without dropout")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object (bytes as integers)")] = False,
) -> None:
    """The largest micro-batch or sequence length that fits each rank class on the card (the bill's fit verdict)."""
    from stepbill.api import cli_flag
    from stepbill.api_fit import fit_max

    run = fit_max(
        model, axis=max_axis, seq=seq, micro_batch=micro_batch, multiple_of=multiple_of, name=cli_flag,
        recipe=recipe, optimizer=optimizer, recompute=recompute, optimizer_impl=optimizer_impl, convention=convention,
        attention=attention, lora_rank=lora_rank, lora_targets=lora_targets, gpu_mem_gib=gpu_mem,
        reserve_gib=reserve, host_mem_gib=host_mem, dp=dp, tp=tp, pp=pp, pp_layers=pp_layers, cp=cp, ep=ep,
        etp=etp, zero=zero,
        shard_group=shard_group, sp=sp, pp_schedule=pp_schedule, vpp=vpp, micro_batches=micro_batches,
        offload_optimizer=offload_optimizer, offload_activations=offload_activations, gpu=gpu, gpus=gpus,
        dropout=dropout)
    if as_json:
        _emit_json(run.to_json())
        return
    from stepbill.report.fit_max_report import fit_max_lines

    for line in fit_max_lines(run.result, run.model, run.command):
        print(line)


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
    budget: Annotated[str | None, typer.Option("--budget", help="activation budget, e.g. 1500GiB (a bare number is "
                                               "GiB): exact solver vs greedy")] = None,
    convention: Annotated[str, typer.Option("--convention", help="ideal | eager")] = "ideal",
    attention: Annotated[str, typer.Option("--attention", help="sdpa | eager")] = "sdpa",
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Rank every tensor of a layer by recompute FLOPs per byte saved, with the cut and the crossovers."""
    from stepbill.api import ranking_from_options
    from stepbill.spec.presets import load_model

    spec = load_model(model)
    kind, ranking, crossings, slope, solved = ranking_from_options(
        spec, seq=seq, micro_batch=micro_batch, recipe=recipe, layer_kind=layer_kind, group=group, row7=row7,
        threshold=threshold, budget=budget, convention=convention, attention=attention)
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
    from dataclasses import asdict

    from rich.table import Table

    from stepbill.api import models as model_infos
    from stepbill.report.terminal import make_console
    from stepbill.report.units import fmt_count

    rows = [asdict(info) for info in model_infos()]
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


@app.command("schema")
def schema_cmd(
    command: Annotated[str | None, typer.Argument(help="bill | recompute | models | check | lab | fit (default: all)")]
    = None,
) -> None:
    """Print the JSON Schema of a command's `--json` output (every command's, by name, without COMMAND)."""
    from stepbill.report.schema import SCHEMAS, json_schema

    _emit_json(json_schema(command) if command is not None else {name: json_schema(name) for name in SCHEMAS})


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="address to listen on (default: this machine only)")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port")] = 8000,
    open_browser: Annotated[bool, typer.Option("--open", help="open the page in the default browser")] = False,
) -> None:
    """A local web explorer: the bill, the step timeline, the recompute ranking and the labs (needs the web extra)."""
    from stepbill.web.server import serve as run_server

    run_server(host, port, open_browser)


def _register_subcommands() -> None:
    from stepbill.cli_check import check
    from stepbill.cli_plan import plan
    from stepbill.lab.cli import app as lab_app

    if not any(command.name == "check" for command in app.registered_commands):
        app.command(name="check")(check)
    if not any(command.name == "plan" for command in app.registered_commands):
        app.command(name="plan")(plan)
    if not any(group.name == "lab" for group in app.registered_groups):
        app.add_typer(lab_app, name="lab", help="Backprop, optimizer, schedule, precision and "
                      "collective mechanics; the seeds' numbers (seed-checks).")


@functools.cache
def _click_command() -> Any:
    """The click command tree, built once per process (typer builds it on every call: ~0.1 s)."""
    _register_subcommands()
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point: bad input becomes one line on stderr and exit code 2, never a traceback."""
    try:
        _click_command().main(args=argv, prog_name="stepbill", standalone_mode=False)
    except StepbillError as exc:
        print(f"stepbill: error: {one_line(str(exc))}", file=sys.stderr)
        sys.exit(2)
    except click_exceptions.ClickException as exc:  # usage errors: unknown option, "abc" for an integer, ...
        if type(exc).__name__ == "NoArgsIsHelpError":  # `stepbill lab` alone: the help itself, as click prints it
            print(exc.format_message(), file=sys.stderr)
        else:
            print(f"stepbill: error: {one_line(exc.format_message())}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)


if __name__ == "__main__":
    main()
