"""The JSON output schemas of `stepbill check`: one process, one rank of N on a fake process group, and every rank of a
launched run (torchrun)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, RootModel

from stepbill.report.schema_base import JsonScalar, Number, Strict


class CheckRowJson(Strict):
    category: str = Field(description="what is compared, e.g. `peak of the step`")
    unit: Literal["bytes", "FLOPs", "params"] = Field(description="bytes, FLOPs or params (a LoRA check's trainable "
                                                      "parameters)")
    line: str = Field(description="the bill line that predicts it")
    predicted: Number | None = Field(description="the bill's number; null when not predicted")
    measured: Number = Field(description="PyTorch's number (MemTracker, FlopCounterMode)")
    error: float | None = Field(description="(predicted − measured) / measured; null when not predicted or the "
                                "measurement is 0")
    verdict: str = Field(description="ok (within 3 %), off, or not predicted")


class Measured(Strict):
    peak_phase: str = Field(description="the phase of the measured peak")
    breakdown_at_peak: dict[str, int] = Field(description="MemTracker's categories at the peak (bytes)")


class _MeasuredSetup(Strict):
    """What every `check --json` says about the setup it measured (the keys of stepbill.check.notes_json)."""

    recipe: str = Field(description="the recipe measured (under ZeRO-2/3: fsdp-mixed-bf16, FSDP2's mixed precision)")
    mixed_precision: dict[str, str] | None = Field(description="under ZeRO-2/3: FSDP2's mixed-precision setup "
                                                   "(sharded params, grads, states, compute, reduce dtypes); null "
                                                   "otherwise")
    dropout_option: float | None = Field(description="`--dropout` (0: no dropout in bill and model), or null")
    unmodelled: list[str] = Field(description="configured fields the bill does not model yet, one line each")
    bill_command: str | None = Field(description="the `stepbill bill` command whose numbers are compared (per-rank "
                                     "eager class under --dp/--zero); null for a launched run")


class CheckJson(_MeasuredSetup):
    """`stepbill check --json` (one process)."""

    model: str = Field(description="the model's name")
    mode: Literal["real", "fake"] = Field(description="real tensors or fake tensors")
    convention: str = Field(description="the bill's convention (eager)")
    settings: dict[str, JsonScalar] = Field(description="what was measured: recipe, sizes, attention, ...")
    rows: list[CheckRowJson] = Field(description="one row per category")
    measured: Measured = Field(description="the measured peak")
    predicted_flops_causal: Number = Field(description="the bill's causal-halved step FLOPs")
    verdict: str = Field(description="how many categories are within 3 %")


class ShardedRow(Strict):
    category: str = Field(description="what is compared on this rank")
    predicted: Number | None = Field(description="the bill's bytes")
    measured: Number = Field(description="PyTorch's bytes")
    error: float | None = Field(description="(predicted − measured) / measured")
    verdict: str = Field(description="ok, off or not predicted")


class ShardedRank(Strict):
    rank: int = Field(description="the rank measured")
    mode: Literal["real", "fake"] = Field(description="real tensors or fake tensors")
    convention: str = Field(description="the prediction's convention")
    rows: list[ShardedRow] = Field(description="one row per category")
    measured_breakdown_at_peak: dict[str, int] = Field(description="FSDPMemTracker's categories at the peak")
    predicted_transient: dict[str, int] = Field(description="the predicted gather / scatter buffers (bytes)")
    verdict: str = Field(description="how many categories are within 3 %")


class CheckShardedJson(_MeasuredSetup):
    """`stepbill check --dp N --zero Z --json`: one rank of N."""

    model: str = Field(description="the model's name")
    dp: int = Field(description="data-parallel ranks")
    zero: int = Field(description="ZeRO stage")
    ranks: list[ShardedRank] = Field(description="one entry per rank measured")


class LaunchedRow(Strict):
    category: str = Field(description="what is compared on this rank")
    line: str = Field(description="what predicts it (rank.*, ddp.buckets, cuda.reserved)")
    predicted: Number | None = Field(description="the bill's bytes; null when not predicted (the CUDA reserve)")
    measured: Number = Field(description="PyTorch's bytes")
    error: float | None = Field(description="(predicted − measured) / measured")
    verdict: str = Field(description="ok, off or not predicted")


class LaunchedRank(Strict):
    rank: int = Field(description="the rank")
    convention: str = Field(description="the prediction's convention")
    rows: list[LaunchedRow] = Field(description="one row per category")
    measured_breakdown_at_peak: dict[str, int] = Field(description="the tracker's categories at the peak (bytes)")
    measured_extra: dict[str, int] = Field(description="ddp_buckets (DDP's gradient buckets), reserved_peak (CUDA), "
                                           "gloo_unsettled_reduce_scatters (a count; absent when 0)")
    verdict: str = Field(description="how many categories are within 3 %")


class CheckLaunchedJson(_MeasuredSetup):
    """`stepbill check --json` under torchrun (or `--launch N`): every rank of a real run."""

    model: str = Field(description="the model's name")
    launched: Literal[True] = Field(description="measured on real ranks")
    backend: Literal["gloo", "nccl"] = Field(description="the process group's backend")
    device: Literal["cpu", "cuda"] = Field(description="where the ranks ran")
    dp: int = Field(description="data-parallel ranks (torchrun's WORLD_SIZE)")
    zero: int = Field(description="ZeRO stage (0: DDP)")
    stage: str = Field(description="DDP, ZeRO-1 (ZeroRedundancyOptimizer), ZeRO-2/3 (FSDP2)")
    measured_by: str = Field(description="MemTracker, FSDPMemTracker or torch.cuda max_memory_allocated")
    notes: list[str] = Field(description="the comparison's conventions and what it knows it misses (e.g. gloo's "
                             "reduce-scatter clone, billed; its all-gather staging buffer, unseen)")
    ranks: list[LaunchedRank] = Field(description="every rank, rank 0 first")


class CheckAnyJson(RootModel[CheckJson | CheckShardedJson | CheckLaunchedJson]):
    """`stepbill check --json`: one process, one rank of N with `--dp`, or every rank of a launched run."""
