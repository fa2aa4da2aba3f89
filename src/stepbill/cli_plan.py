"""`stepbill plan`: the layouts that fit a model on a cluster, ranked. Parsing and printing only (api_plan.plan
does the work)."""

from __future__ import annotations

import sys
import time
from typing import Annotated, TextIO

import typer


class ProgressBar:
    """A one-line progress bar on stderr, shown once a search has run for more than `after_s` seconds. A new total
    starts a new pass (branch and bound: the floors, then the bills), timed from its first report."""

    def __init__(self, after_s: float = 1.0, width: int = 30, label: str = "plan", unit: str = "candidates") -> None:
        self.start = self.first = time.perf_counter()
        self.after_s, self.width, self.shown, self.total = after_s, width, False, 0
        self.label, self.unit = label, unit

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if total != self.total:  # a new pass: its own rate and estimate
            self.start, self.total = now, total
        elapsed = now - self.start
        if now - self.first < self.after_s or not total:
            return
        self.shown = True
        filled = round(self.width * done / total)
        eta = elapsed * (total - done) / done if done else 0.0
        sys.stderr.write(f"\r{self.label}: [{'#' * filled}{'.' * (self.width - filled)}] {done:,}/{total:,} {self.unit}, "
                         f"{elapsed:.0f} s, ~{eta:.0f} s left ")
        sys.stderr.flush()

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


def progress_bar(as_json: bool, stream: TextIO | None = None, label: str = "plan", unit: str = "candidates"
                 ) -> ProgressBar | None:
    """The progress bar, only for a person watching: none under --json or when stderr is not a terminal (a
    redirected stderr would otherwise collect hundreds of carriage-return lines)."""
    stream = sys.stderr if stream is None else stream
    return None if as_json or not stream.isatty() else ProgressBar(label=label, unit=unit)


def plan(
    model: Annotated[str, typer.Argument(help="preset name, ModelSpec JSON, HF config.json or Hub id")],
    gpu: Annotated[str, typer.Option("--gpu", help="catalog GPU (h100-sxm, a100-80gb, ...)")],
    seq: Annotated[int, typer.Option("--seq", help="sequence length (tokens)")],
    gpus: Annotated[int | None, typer.Option("--gpus", help="exactly this many GPUs")] = None,
    max_gpus: Annotated[int | None, typer.Option("--max-gpus", help="up to this many GPUs (powers of two and N)")]
    = None,
    global_batch_tokens: Annotated[str | None, typer.Option(
        "--global-batch-tokens", help="tokens per optimizer step, e.g. 4Mi or 4M")] = None,
    micro_batch: Annotated[int | None, typer.Option("--micro-batch", help="sequences per micro-batch (pins it)")]
    = None,
    recipe: Annotated[str, typer.Option("--recipe", help="precision recipe")] = "mixed-bf16",
    optimizer: Annotated[str, typer.Option("--optimizer", help="optimizer")] = "adamw",
    train_tokens: Annotated[str | None, typer.Option("--train-tokens", help="tokens of the run: days, GPU-hours")]
    = None,
    price_per_gpu_hour: Annotated[float | None, typer.Option("--price-per-gpu-hour", help="price of one GPU-hour")]
    = None,
    objective: Annotated[str, typer.Option("--objective", help="time | gpus | cost | memory")] = "time",
    top: Annotated[int, typer.Option("--top", help="rows to show")] = 10,
    reserve: Annotated[float | None, typer.Option("--reserve", help="GiB kept back per GPU (default: engine/fit.py)")]
    = None,
    host_mem: Annotated[float | None, typer.Option(
        "--host-mem", help="host (CPU) memory of one node in GiB, for what its GPUs offload (default: the catalog's "
        "reference node)")] = None,
    fix: Annotated[list[str] | None, typer.Option("--fix", help="pin axes, e.g. tp=8,pp=16 (repeatable): dp tp pp "
                                                  "cp ep etp zero shard_group vpp pp_layers mb m sp schedule "
                                                  "recompute offload_optimizer offload_activations")] = None,
    cross_node: Annotated[bool, typer.Option("--cross-node", help="let tp and ep groups span nodes")] = False,
    efficiency: Annotated[float | None, typer.Option(
        "--efficiency", help="override: one achieved share of dense peak on every matmul (default: the per-op "
        "time model)")] = None,
    max_seconds: Annotated[float | None, typer.Option(
        "--max-seconds", help="stop deciding new candidates after this many seconds: the answer then covers a "
        "random sample of the space, and says how much")] = None,
    jobs: Annotated[int | None, typer.Option("--jobs", help="worker processes (default: every core; 1: this "
                                             "process only); the answer does not depend on it")] = None,
    exhaustive: Annotated[bool, typer.Option(
        "--exhaustive", help="bill every candidate and list every layout that fits (default: branch and bound, "
        "billing only what can reach the top K or a Pareto front: the same top K and fronts, faster)")] = False,
    device: Annotated[str, typer.Option(
        "--device", help="the kernels fits are judged on: cuda (default, the GPUs') | cpu (what `stepbill check` "
        "measures: dropout masks in the input's dtype, SDPA's math path with attention dropout or MLA)")] = "cuda",
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """The layouts that fit MODEL on the GPUs and run fastest (or on fewest GPUs, cheapest, leanest)."""
    import json

    from stepbill.api import cli_flag
    from stepbill.api_plan import available_jobs
    from stepbill.api_plan import plan as run_plan

    bar = progress_bar(as_json)
    try:
        result = run_plan(model, gpu=gpu, seq=seq, gpus=gpus, max_gpus=max_gpus,
                          global_batch_tokens=global_batch_tokens, micro_batch=micro_batch, recipe=recipe,
                          optimizer=optimizer, train_tokens=train_tokens, price_per_gpu_hour=price_per_gpu_hour,
                          objective=objective, top=top, reserve_gib=reserve, host_mem_gib=host_mem, fix=fix,
                          cross_node=cross_node,
                          efficiency=efficiency, progress=bar, name=cli_flag,
                          jobs=available_jobs() if jobs is None else jobs, deadline_s=max_seconds,
                          exhaustive=exhaustive, device=device)
    finally:
        if bar is not None:
            bar.close()
    if as_json:
        print(json.dumps(result.to_json(), indent=2))
        return
    from stepbill.report.plan_terminal import render_plan
    from stepbill.report.terminal import make_console

    make_console().print(render_plan(result.result, result.space_note), soft_wrap=True)
