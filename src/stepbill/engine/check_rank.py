"""One rank of a data-parallel FSDP2 / ZeRO-1 run predicted on its own, as `stepbill check --dp N --zero Z`
measures it: the one-GPU bill of the measured setup is built here (FSDP2 computes in bf16 with fp32 shards;
ZeRO-1 runs the recipe as is), then engine/parallel/fsdp2.py places the buffers on its timeline. Nothing in the
engine imports this module (it builds a bill), so the bill never contains a second bill."""

from __future__ import annotations

from stepbill.engine.bill import make_bill
from stepbill.engine.parallel.fsdp2 import RankPrediction, ShardedContext, hf_tensors
from stepbill.engine.parallel.fsdp2 import predict_rank as predict_on
from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import make_recipe


def sharded_context(spec: ModelSpec, zero: int, micro_batch: int = 1, seq_len: int = 128,
                    recipe: str = "fp32", backend: str = "nccl", device: str = "cpu",
                    optimizer_impl: str = "single") -> ShardedContext:
    """The shared part of predict_rank (build once, predict every rank). `backend`: whose collective buffers
    are billed, "nccl" (none; also the fake process group's) or "gloo" (its reduce-scatter clones the input);
    `device`: the kernels the eager rows follow (a launched CUDA run: cuda); `optimizer_impl`: AdamW's path
    (single | foreach | fused: its step's temporaries)."""
    tensors = hf_tensors(spec)
    compute = "pure-bf16" if zero in (2, 3) else recipe
    convention = "eager"
    try:
        bill = make_bill(spec, make_recipe(compute, "adamw", micro_batch, seq_len, optimizer_impl=optimizer_impl,
                                           device=device), convention=convention)
    except StepbillError:  # no eager rows for this family: resident state stays exact, peaks rough
        convention = "ideal"
        bill = make_bill(spec, make_recipe(compute, "adamw", micro_batch, seq_len, optimizer_impl=optimizer_impl,
                                           device=device),
                         convention=convention)
    return ShardedContext(tensors, bill, convention, backend=backend)



def predict_rank(spec: ModelSpec, world: int, zero: int, rank: int = 0, micro_batch: int = 1, seq_len: int = 128,
                 recipe: str = "fp32", context: ShardedContext | None = None,
                 backend: str = "nccl", device: str = "cpu", optimizer_impl: str = "single") -> RankPrediction:
    """Predicted memory of rank `rank` of `world` under ZeRO-`zero` as measure/sharded.py runs it (on `backend`'s
    collectives and `device`'s kernels: see sharded_context)."""
    ctx = context or sharded_context(spec, zero, micro_batch, seq_len, recipe, backend, device, optimizer_impl)
    return predict_on(spec, world, zero, rank, micro_batch, seq_len, ctx)
