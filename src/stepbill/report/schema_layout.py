"""The parallel layout as the JSON outputs give it: the bill's `parallel` part and the planner's rows' `layout`
(one schema; report/parallel_json.layout_to_json makes both)."""

from __future__ import annotations

from pydantic import Field

from stepbill.report.schema_base import Strict


class ParallelPart(Strict):
    dp: int = Field(description="data-parallel degree")
    tp: int = Field(description="tensor-parallel degree")
    pp: int = Field(description="pipeline stages")
    cp: int = Field(description="context-parallel degree")
    ep: int = Field(description="expert-parallel degree")
    etp: int | None = Field(description="expert tensor-parallel degree (null: 1)")
    sp: bool = Field(description="sequence parallel")
    zero: int = Field(description="ZeRO stage 0-3 (3 = FSDP full shard)")
    shard_group: int | None = Field(description="hybrid sharding group size, or null")
    micro_batches: int = Field(description="micro-batches per step per pipeline")
    pp_schedule: str = Field(description="gpipe, 1f1b or interleaved")
    vpp: int = Field(description="model chunks per stage (interleaved)")
    offload_optimizer: bool = Field(description="master + states in CPU memory")
    offload_activations: bool = Field(description="kept activations in CPU memory")
    pp_layers: list[int] | None = Field(description="transformer layers per pipeline stage as given, or null")
    world: int = Field(description="GPUs: dp · tp · pp · cp")
    edp: int = Field(description="expert data-parallel degree")
    note: str = Field(description="how dp was derived from `--gpus` when `--dp` was not given, else empty")
