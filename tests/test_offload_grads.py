"""Optimizer offload keeps no gradient shard on the GPU (memory/timeline.RankView.grads_offloaded): each layer's
gradients leave for the host as its backward makes them — DeepSpeed's `copy_grads_in_partition` under cpu_offload
sets `param.grad = None` once copied, FSDP2's CPUOffloadPolicy frees the GPU shard after the reduce-scatter's D2H
copy (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py). Checked against ZeRO-Offload's own figures (arXiv
2101.06840: 2 B a parameter on the GPU, 12 + 2 on the CPU; a 13B model trains on one 32 GB V100), against the bill
without offload, and through the planner's resident bound."""

from __future__ import annotations

import pytest

import stepbill
from stepbill.api import make_step_bill
from stepbill.engine.kinds import Part, Phase
from stepbill.engine.params import param_inventory
from stepbill.engine.plan.resident import resident_bound
from stepbill.engine.plan.space import PlanRequest
from stepbill.spec.hardware import load_gpu
from stepbill.spec.parallel import Parallel
from stepbill.spec.presets import load_preset

GIB = 2**30


def test_zero_offload_trains_13b_on_one_32gb_card() -> None:
    """ZeRO-Offload's headline: a 13B model on one 32 GB V100. gpt3-13b at seq 2,048, micro-batch 1, full recompute:
    with optimizer offload the GPU holds 2 B a parameter of model state (the bf16 weights) and fits; the host holds
    12 + 2 B; without offload the 16 B a parameter cannot fit."""
    options = dict(seq=2048, recompute="full", gpu_mem_gib=32)
    run = make_step_bill("gpt3-13b", offload_optimizer=True, **options)
    params = param_inventory(load_preset("gpt3-13b")).total
    rank = run.bill.ranks[0]
    assert rank.memory["grads"] == 0 and rank.memory["optimizer"] == 0
    assert rank.memory["resident"] == pytest.approx(2 * params, rel=1e-9)
    assert sum(rank.cpu.values()) == pytest.approx(14 * params, rel=1e-9)
    assert run.fit is not None and run.fit.fits
    assert run.fit.ranks[0].peak_bytes < 27 * GIB  # 26.12 GiB: weights 23.94 + one layer's work + the LM head's grads
    without = make_step_bill("gpt3-13b", **options)
    assert without.fit is not None and not without.fit.fits


def test_offload_removes_exactly_the_gradients_that_accumulate() -> None:
    """Llama-2-7B, ZeRO-2 over 8 GPUs: with offload, at the optimizer step the GPU holds no gradient; during each
    layer's backward it holds that layer's share (and the LM head's) — the moments of the bill without offload less
    the earlier layers' shares and the optimizer side."""
    base = dict(seq=4096, gpu="h100", gpus=8, zero=2, recompute="full")
    off = make_step_bill("llama2-7b", offload_optimizer=True, **base).bill.ranks[0]
    on = make_step_bill("llama2-7b", **base).bill.ranks[0]
    assert off.timeline is not None and on.timeline is not None
    step = [m for m in off.timeline.moments if m.phase is Phase.OPTIMIZER]
    assert step and all(m.items["grads"] == 0 for m in step)
    layers = [m for m in off.timeline.moments if m.phase is Phase.BACKWARD and m.part is Part.LAYER]
    share = {m.items["grads"] for m in layers}
    assert len(share) == 1 and 0 < share.pop() < on.memory["grads"] / 16  # one of 32 layers, plus the head's
    assert off.memory["peak"] < on.memory["peak"] - 0.9 * (on.memory["grads"] + on.memory["optimizer"])


def test_resident_bound_is_the_weights_under_offload() -> None:
    """The planner's resident bound (a lower bound of every rank's peak) reads the weights alone under offload, and
    stays below the bill's peak."""
    spec = load_preset("llama3-8b")
    req = PlanRequest(spec, load_gpu("h100-sxm"), "h100-sxm", (8,), 4096, "llama3-8b", global_batch_tokens=2**20)
    layout = Parallel(dp=8, zero=1, micro_batches=2)
    run = stepbill.bill("llama3-8b", seq=4096, gpu="h100-sxm", gpus=8, zero=1, micro_batches=2,
                        offload_optimizer=True)
    bound = resident_bound(req, layout, True)
    assert bound == pytest.approx(2 * param_inventory(spec).total, rel=1e-9)  # ZeRO-1 shards no weight
    assert bound <= min(r.peak_bytes for r in run.fit.ranks)
