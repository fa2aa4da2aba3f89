"""The JSON output schema of `stepbill plan` (and of `stepbill.plan(...).to_json()`)."""

from __future__ import annotations

from pydantic import Field

from stepbill.report.schema_base import Number, Strict
from stepbill.report.schema_layout import ParallelPart


class PlanRowJson(Strict):
    rank: int | None = Field(description="1-based position under the objective; null for a front row outside the "
                             "top K under branch and bound (layouts left unbilled may rank between)")
    gpus: int = Field(description="GPUs: dp·tp·pp·cp")
    layout: ParallelPart = Field(description="the parallel layout, as `stepbill bill --json` gives it (its `parallel`)")
    micro_batch: int = Field(description="sequences per micro-batch")
    recompute: str = Field(description="the recompute policy")
    peak_bytes: int = Field(description="per-GPU peak of the worst rank class, as the fit verdict judges it "
                            "(eager convention; bytes)")
    headroom_bytes: int = Field(description="usable memory − reserve − peak_bytes (bytes)")
    budget_bytes: int = Field(description="usable memory − reserve (bytes)")
    step_s: float = Field(description="time.step of the bill (s)")
    mfu: float = Field(description="time.mfu (PaLM model FLOPs over peak, ratio)")
    tokens_per_s: float = Field(description="time.tokens_per_s (whole cluster, tokens/s)")
    tokens_per_step: int = Field(description="dp × micro-batches × micro-batch × seq")
    gpu_seconds_per_token: float = Field(description="step_s × gpus / tokens_per_step (the cost objective)")
    host_node_bytes: int | None = Field(description="under offload: what the fullest node's GPUs offload to its host "
                                        "memory (bytes; the fit verdict's `fit.host.node_bytes`); null without")
    run: dict[str, Number] = Field(description="run.* values of the bill: global_batch_tokens, tokens_per_s_per_gpu; "
                                   "with --train-tokens steps, seconds, days, gpu_hours; with a price, cost")
    command: str = Field(description="the `stepbill bill` command that prints these numbers")


class PlanSearchJson(Strict):
    candidates: int = Field(description="every point of the space, rule-rejected ones included")
    evaluated: int = Field(description="candidates decided: evaluated_by_bill + decided_by_bound + decided_by_floor")
    evaluated_by_bill: int = Field(description="candidates whose bills were made (make_bill, eager + ideal)")
    decided_by_bound: int = Field(description="candidates rejected by an exact lower bound of their peak over the "
                                  "budget: their group's resident bound or (branch and bound) their peak floor (their "
                                  "verdict is exact; their peak is not computed)")
    decided_by_floor: int = Field(description="branch and bound: candidates whose exact floors (step time, peak) "
                                  "cannot reach the top K or a Pareto front, left unbilled (reason `outranked`); 0 "
                                  "when exhaustive")
    exhaustive: bool = Field(description="every candidate billed (--exhaustive: `fits` counts every layout that "
                             "fits) or branch and bound (`fits` counts the layouts billed that fit)")
    seconds: float = Field(description="wall-clock seconds of the search")
    layouts_per_s: float = Field(description="evaluated / seconds")
    cpu_seconds: float = Field(description="CPU seconds of the search: this process and its worker processes")
    jobs: int = Field(description="worker processes that shared the search (1: the calling process alone)")
    layouts_per_cpu_s: float = Field(description="evaluated / cpu_seconds: the one-core rate on a shared machine")
    rejected: dict[str, int] = Field(description="rejected candidates per reason (keys of `reasons`)")
    not_searched: int = Field(description="candidates left unsearched when a deadline stopped the search (the web "
                              "page's bounded requests); 0 from the CLI")
    complete: bool = Field(description="whether every candidate got its verdict")


class PlanRequestJson(Strict):
    model: str = Field(description="the model as given")
    gpu: str = Field(description="the catalog GPU")
    gpus: list[int] = Field(description="GPU counts searched")
    seq: int = Field(description="tokens per sequence")
    global_batch_tokens: int | None = Field(description="tokens per step, null when not given")
    micro_batch: int | None = Field(description="the micro-batch given, null when searched")
    recipe: str = Field(description="precision recipe")
    optimizer: str = Field(description="optimizer")
    reserve_gib: float | None = Field(description="--reserve GiB, null: the default reserve")
    host_mem_gib: float | None = Field(description="--host-mem GiB per node, null: the catalog's reference node")
    efficiency: float | None = Field(description="--efficiency override (null: the per-op time model)")
    fixed: dict[str, int | bool | str | list[int]] = Field(description="axes pinned by --fix (pp_layers: a list)")
    cross_node: bool = Field(description="whether tp and ep groups may span nodes")
    device: str = Field(description="the kernels fits were judged on under the eager convention: cuda | cpu")
    optimizer_impl: str = Field(description="how the planned runs step the optimizer: fused wherever torch.optim "
                                "has it (Adam, AdamW, SGD, Muon's AdamW: no temporaries), else PyTorch's default on "
                                "the device")


class PlanJson(Strict):
    """`stepbill plan --json`."""

    request: PlanRequestJson = Field(description="what was planned")
    objective: str = Field(description="time | gpus | cost | memory")
    top: list[PlanRowJson] = Field(description="the best rows under the objective (at most --top)")
    fits: int = Field(description="layouts found that fit: every one with search.exhaustive, else the ones billed")
    pareto: dict[str, list[PlanRowJson]] = Field(description="gpus_vs_time and memory_vs_time fronts")
    search: PlanSearchJson = Field(description="how the search went")
    reasons: dict[str, str] = Field(description="every rejection reason in words")
    space: str = Field(description="what the space holds and what it does not search yet")
