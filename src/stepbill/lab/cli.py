"""`stepbill lab <topic>` commands: parse options, call `stepbill.lab.summaries`, print a table, JSON or a plot.

No arithmetic here. Bad input raises StepbillError, which the main CLI prints as one line with exit code 2.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from stepbill.errors import StepbillError, one_line, shown, unknown_name
from stepbill.lab import _check, summaries
from stepbill.lab.schedule import SHAPES
from stepbill.spec.presets import read_text_file
from stepbill.spec.schema import Int

app = typer.Typer(no_args_is_help=True, help="Backprop, optimizer, schedule, precision and collective mechanics; "
                                             "the seeds' numbers (seed-checks).")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
PlotOpt = Annotated[Path | None, typer.Option("--plot", help="Also draw the figure to FILE.png or FILE.svg.")]


def _floats(option: str, text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise StepbillError(f"{option} takes comma-separated numbers, got {text!r}") from None


def _ints(option: str, text: str) -> tuple[int, ...]:
    vals = _floats(option, text)
    if not vals or any(v != int(v) for v in vals):
        raise StepbillError(f"{option} takes comma-separated integers, got {text!r}")
    return tuple(int(v) for v in vals)


def _fmt(x: Any) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int) or (float(x).is_integer() and abs(x) < 1e15):
        return f"{int(x):,}"
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    return f"{x:.4g}" if 1e-3 <= abs(x) < 1e5 else f"{x:.3e}"


def _json_safe(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items() if not str(k).startswith("_")}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def _draw(summary: dict[str, Any], plot: Path | None) -> None:
    if plot is not None:
        from stepbill.lab.plots import plot as draw  # keeps matplotlib out of the default path

        try:
            draw(summary, plot)
        except OSError as exc:  # the folder vanished or the disk is full while drawing
            raise StepbillError(f"cannot write plot file {one_line(str(plot))}: {exc.strerror or exc}") from None


def _emit(summary: dict[str, Any], as_json: bool, plot: Path | None) -> None:
    _draw(summary, plot)
    if as_json:
        typer.echo(json.dumps(_json_safe(summary), ensure_ascii=False))
        return
    # piped output gets a fixed width so wide tables are not truncated to 80 columns
    console = Console() if sys.stdout.isatty() else Console(width=120)
    for t in summary["tables"]:
        table = Table(title=escape(t["title"]), title_justify="left")
        for c in t["columns"]:
            table.add_column(escape(c), justify="left" if c in ("group", "quantity", "format", "optimizer", "rule", "route",
                                                        "shape", "model", "phase", "finished", "token", "check",
                                                        "claim", "seed inputs", "reason", "reading",
                                                        "seed prints (seed inputs)", "setting", "source",
                                                        "source text", "stepbill's value", "cited", "arithmetic") else "right")
        for row in t["rows"]:
            table.add_row(*(escape(_fmt(v)) for v in row))
        console.print(table)
        if t.get("takeaway"):
            console.print(f"→ {escape(t['takeaway'])}")
    if summary.get("units_note"):
        console.print(escape(summary["units_note"]))
    if plot is not None:
        console.print(f"figure written to {plot}")


@app.command("adam")
def adam_cmd(
    beta1: float = typer.Option(0.9, help="First-moment EMA coefficient β₁ in [0, 1)."),
    beta2: float = typer.Option(0.95, help="Second-moment EMA coefficient β₂ in [0, 1)."),
    steps: int = typer.Option(12, help="Steps of gradient history, 2 to 100,000 (over 60, the per-step tables "
                               "print the first 20 steps, then log-spaced ones to the last)."),
    scale: float = typer.Option(0.02, help="Factor the gradient stream is multiplied by (scale invariance)."),
    seed: int = typer.Option(0, help="Seed of the illustrative stream and the Monte-Carlo."),
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Adam's registers: EMA shares, window, bias correction, update RMS, AdaGrad/RMSProp lineage, PaLM β₂."""
    _emit(summaries.adam_summary(beta1, beta2, steps, scale, seed), as_json, plot)


@app.command("decay")
def decay_cmd(
    lr: float = typer.Option(3e-4, help="Learning rate η."),
    weight_decay: float = typer.Option(0.1, help="Weight decay λ."),
    params: float = typer.Option(7e9, help="Model parameters for the memory ledger."),
    card_gib: float = typer.Option(80.0, help="GPU memory in GiB."),
    shards: int = typer.Option(1, help="FSDP shards (1 = unsharded)."),
    seed: int = typer.Option(0, help="Seed of the weight simulation."),
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """AdamW's η·λ vs L2's η·λ/√v̂ per group, the expected equilibrium E[u]/λ and the weight's spread, the 16 B/param memory bill."""
    _emit(summaries.decay_summary(lr, weight_decay, params, card_gib, shards, seed), as_json, plot)


@app.command("warmup")
def warmup_cmd(
    lr: float = typer.Option(3e-4, help="Peak learning rate η."),
    warmup_steps: int = typer.Option(2000, "--warmup", help="Linear warmup steps W (0 = none)."),
    total_steps: int = typer.Option(100_000, "--total", help="Steps in the run."),
    betas2: str = typer.Option("0.999,0.95", "--beta2", help="Comma-separated β₂ values for the √v̂ band."),
    steps: int = typer.Option(1000, help="Steps simulated for the band."),
    params: int = typer.Option(12, help="Independent parameters in the band."),
    seed: int = typer.Option(0, help="Seed of the band simulation."),
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """First-step size with and without warmup; how fast √v̂ becomes trustworthy."""
    s = summaries.warmup_summary(lr, warmup_steps, total_steps, _floats("--beta2", betas2), steps, params, seed)
    _emit(s, as_json, plot)


@app.command("schedule")
def schedule_cmd(
    peak: float = typer.Option(3e-4, help="Peak learning rate."),
    warmup_steps: int = typer.Option(2000, "--warmup", help="Linear warmup steps."),
    total: int = typer.Option(100_000, help="Steps in the run."),
    floor: float = typer.Option(0.1, help="Final lr as a fraction of peak."),
    decay_frac: float = typer.Option(0.2, help="WSD: share of post-warmup steps spent decaying."),
    decay_shape: str = typer.Option("linear", help="WSD decay: linear, cosine or 1-sqrt."),
    shape: str = typer.Option("cosine", help="Shape exported by --torch: constant, linear, cosine, wsd, inverse_sqrt."),
    torch: bool = typer.Option(False, "--torch", help="Print an equivalent torch LambdaLR snippet instead (with "
                               "--json: the topic's JSON, the snippet under values.torch_snippet)."),
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Schedule shapes and their areas, floors, GPT-3 Table 2.1 power law; --torch exports a LambdaLR."""
    if shape not in SHAPES:  # checked even without --torch: a typo is never silently ignored
        raise unknown_name("schedule shape", shape, SHAPES)
    s = summaries.schedule_summary(peak, warmup_steps, total, floor, decay_frac, decay_shape)
    if torch:
        from stepbill.lab.schedule import torch_snippet

        code = torch_snippet(shape, peak, warmup_steps, total, floor, decay_frac, decay_shape)
        if not as_json:
            _draw(s, plot)
            typer.echo(code, nl=False)
            return
        s["settings"].update(shape=shape, torch=True)
        s["values"]["torch_snippet"] = code  # --json prints JSON, never bare Python
    _emit(s, as_json, plot)


@app.command("clip")
def clip_cmd(
    threshold: float = typer.Option(1.0, help="clip_grad_norm_ threshold c."),
    trace: Annotated[
        Path | None, typer.Option(help="File with one gradient norm per line (default: a synthetic trace).")
    ] = None,
    steps: int = typer.Option(200, help="Length of the synthetic trace."),
    seed: int = typer.Option(0, help="Seed of the synthetic trace."),
    vector: str = typer.Option("2,1", help="Gradient to clip, comma-separated."),
    clip_value: float = typer.Option(1.0, help="Clip level for the vector demo (norm and value)."),
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Clip by norm vs by value, trigger counts and effective lr on a norm trace."""
    from stepbill.lab.clip import read_trace

    norms = read_trace(trace) if trace is not None else None
    s = summaries.clip_summary(threshold, norms, steps, seed, _floats("--vector", vector), clip_value)
    _emit(s, as_json, plot)


@app.command("formats")
def formats_cmd(
    names: str = typer.Option("fp32,bf16,fp16,fp8_e4m3,fp8_e5m2", "--formats", help="Comma-separated formats."),
    value: float = typer.Option(1.0, help="Weight the update is added to."),
    update: float = typer.Option(1e-3, help="Update added."),
    adds: int = typer.Option(1000, help="Repeated additions."),
    scales: str = typer.Option("0,10,24", help="Loss scales as powers of two, comma-separated."),
    seed: int = typer.Option(0, help="Seed of stochastic rounding."),
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """fp32/bf16/fp16/fp8 from the bit layout, lost updates, stochastic rounding, fp16 loss scaling."""
    fmts = tuple(n.strip() for n in names.split(",") if n.strip())
    s = summaries.formats_summary(fmts, value, update, adds, _floats("--scales", scales), seed)
    _emit(s, as_json, plot)


@app.command("collectives")
def collectives_cmd(
    gpus: str = typer.Option("8,512", help="Data-parallel sizes N, comma-separated."),
    message_gib: float = typer.Option(14e9 / 2**30, "--message-gib", help="All-reduced gradient size in GiB."),
    ring: int = typer.Option(4, help="GPUs in the step-by-step ring."),
    hidden: int = typer.Option(4096, help="Hidden size h."),
    tp: int = typer.Option(8, help="Tensor-parallel degree."),
    tokens: int = typer.Option(8192, help="Tokens per micro-batch."),
    stages: int = typer.Option(4, help="Pipeline stages p."),
    microbatches: str = typer.Option("1,16", help="Micro-batch counts m, comma-separated."),
    dp: int = typer.Option(32, help="Data-parallel degree of the 3-D layout."),
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Ring all-reduce stage by stage, ring vs server, TP traffic, pipeline bubble, dp × tp × pp."""
    s = summaries.collectives_summary(_ints("--gpus", gpus), message_gib * 2**30, ring, hidden, tp, tokens, stages,
                                      _ints("--microbatches", microbatches), dp)
    _emit(s, as_json, plot)


@app.command("backprop")
def backprop_cmd(
    params: float = typer.Option(3e11, help="Parameters, i.e. forwards one finite-difference gradient needs."),
    model: str | None = typer.Option(None, help="Take the parameter count from a model (preset, ModelSpec JSON or "
                                     "HF config.json) instead of --params."),
    seconds: float = typer.Option(1.0, "--seconds-per-forward", help="Wall-clock seconds of one forward."),
    rates: str = typer.Option("2,0.5,3", help="Local rates of the illustrative chain, comma-separated."),
    links: int = typer.Option(59, help="Links of the vanishing/exploding chain, 0 to 2,000 (0.8^links and "
                               "1.2^links stay finite and nonzero)."),
    tokens: int = typer.Option(128, help="Rows S of the counted Linear layer."),
    k: int = typer.Option(256, help="Input width k of the counted Linear layer."),
    n: int = typer.Option(512, help="Output width n of the counted Linear layer."),
    seed: int = typer.Option(0, help="Seed of the tiny network."),
    use_torch: bool = typer.Option(True, "--torch/--no-torch", help="Run the autograd and FlopCounterMode checks."),
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Finite differences vs backprop, the chain of local rates, p − y, and backward = 2× forward (FLOPs)."""
    if model is not None:
        from stepbill.engine.params import param_inventory
        from stepbill.spec.presets import load_model

        params = float(param_inventory(load_model(model)).total)
    s = summaries.backprop_summary(params, seconds, _floats("--rates", rates), links, tokens, k, n, seed, use_torch)
    s["settings"]["model"] = model
    _emit(s, as_json, plot)


@app.command("descent")
def descent_cmd(
    ratios: str = typer.Option("25,1000", help="Steepness ratios a_steep/a_flat, comma-separated, in [1e-12, 1e15] "
                                "(at or below 0.95 the flat direction never halves)."),
    x0: float = typer.Option(12.0, help="Start of the heavy-ball run on the toy landscape."),
    lr: float = typer.Option(2.0, help="Learning rate of the heavy-ball run."),
    beta: float = typer.Option(0.8, help="Momentum β of the heavy-ball run (compared with β = 0)."),
    steps: int = typer.Option(500, help="Steps of the heavy-ball run."),
    width: int = typer.Option(16_384, help="Weight width m for Muon's Newton–Schulz overhead."),
    batch_tokens: float = typer.Option(16e6, help="Tokens per batch B for Muon's overhead."),
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Gradient descent's one-lr problem, the 2/a threshold, Newton, heavy-ball momentum, Muon's msign."""
    s = summaries.descent_summary(_floats("--ratios", ratios), x0, lr, beta, steps, width, batch_tokens)
    _emit(s, as_json, plot)


@app.command("memory")
def memory_cmd(
    params: str = typer.Option("7e9,70e9", help="Model sizes in parameters, comma-separated."),
    shards: str = typer.Option("1,2", help="FSDP shard counts, comma-separated."),
    card_gib: float = typer.Option(80.0, help="GPU memory in GiB."),
    as_json: JsonOpt = False,
) -> None:
    """The 16-byte AdamW ledger (4 model | 12 optimizer), resident GiB per GPU, bytes moved per step."""
    _emit(summaries.memory_summary(_floats("--params", params), _ints("--shards", shards), card_gib), as_json, None)


@app.command("seed-checks")
def seed_checks_cmd(as_json: JsonOpt = False) -> None:
    """Seed 000's worked numbers recomputed by the bill engine, beside the seed's values, inputs and reasons."""
    _emit(summaries.seed_checks_summary(), as_json, None)


@app.command("torch-defaults")
def torch_defaults_cmd(as_json: JsonOpt = False) -> None:
    """Checkpoint RNG preservation (measured), DDP's bucket size, checkpoint API names, from the installed torch."""
    _emit(summaries.torch_defaults_summary(), as_json, None)


@app.command("megatron-defaults")
def megatron_defaults_cmd(as_json: JsonOpt = False) -> None:
    """Megatron-LM's --clip-grad and --recompute-modules defaults, cited from its source at a pinned commit."""
    _emit(summaries.megatron_defaults_summary(), as_json, None)


@app.command("citations")
def citations_cmd(as_json: JsonOpt = False) -> None:
    """Published figures the seed quotes (dates, a page range, DeepSeek-V3's batch ramp, ST-MoE Table 4), cited."""
    _emit(summaries.citations_summary(), as_json, None)


def _list_values(option: str, text: str, integers: bool) -> tuple[float | int, ...]:
    """The elements of a comma-separated option, as numbers (integral ones as int when `integers`)."""
    values: list[float | int] = []
    for part in text.split(",")[: _check.MAX_LIST + 1]:
        if not part.strip():
            continue
        try:
            v = float(part)
        except ValueError:
            raise StepbillError(f"{option} takes comma-separated numbers, got {shown(text)}") from None
        values.append(int(v) if integers and v.is_integer() else v)
    return tuple(values)


def _check_plot_target(path: Path) -> None:
    """A --plot target must be a new or regular file in a writable folder, with a name the file system takes."""
    where = one_line(str(path))
    if len(path.name.encode()) > 255:
        raise StepbillError(f"cannot write plot file {where[:80]}...: file name over 255 bytes")
    try:
        if path.exists() and not path.is_file():
            raise StepbillError(f"cannot write plot file {where}: not a regular file")
        parent = path.parent
        if parent.is_dir() and not os.access(parent, os.W_OK):
            raise StepbillError(f"cannot write plot file {where}: folder not writable")
    except OSError as exc:
        raise StepbillError(f"cannot write plot file {where}: {exc.strerror or exc}") from None


def _validated(topic: str, command: Callable[..., None]) -> Callable[..., None]:
    """`command` behind a check of every option against lab/_check.OPTIONS (before any arithmetic)."""

    flags = {}  # parameter name → the flag a user types (--warmup for warmup_steps)
    for name, parameter in inspect.signature(command).parameters.items():
        decls = getattr(parameter.default, "param_decls", None) or ()
        flags[name] = next((d for d in decls if d.startswith("--")), "--" + name.replace("_", "-"))

    @functools.wraps(command)
    def run(**options: Any) -> None:
        for name, value in options.items():
            rule = _check.OPTIONS.get(topic, {}).get(name)
            if isinstance(value, str) and rule is not None:
                value = _list_values(flags[name], value, isinstance(rule, Int))
            _check.option(topic, name, value, flags[name])
        if options.get("trace") is not None:
            read_text_file(Path(options["trace"]), "trace file")  # regular, size-capped, UTF-8
        if options.get("plot") is not None:
            _check_plot_target(Path(options["plot"]))
        command(**options)

    return run


for _command in app.registered_commands:
    if _command.name in _check.OPTIONS and _command.callback is not None:
        _command.callback = _validated(_command.name, _command.callback)
