"""Bill.ranks for data-parallel sharding alone (tp = pp = cp = ep = 1, ZeRO 1/2/3 over dp, eager convention):
the rank classes come from engine/sharded.py, the per-rank model measured exact against FSDPMemTracker
(FSDP2 ZeRO-3/2 with fp32 sharded parameters and bf16 compute) and ZeroRedundancyOptimizer (ZeRO-1).

`stepbill bill MODEL --dp N --zero Z --convention eager` therefore prints what `stepbill check MODEL --dp N
--zero Z` predicts. Other layouts keep engine/parallel.py's ideal per-rank model. A class is a set of ranks with
identical resident bytes and peak (FSDP: uneven dim-0 chunks; ZeRO-1: the greedy partition).
"""

from __future__ import annotations

from typing import Any

from stepbill.engine.line import Line
from stepbill.engine.sharded import RankPrediction, hf_tensors, local_rows, predict_rank, sharded_context
from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import Recipe

# Precision recipes the measured setups stand for: FSDP2 keeps fp32 shards (the master) and computes in bf16;
# ZeRO-1 runs the recipe as is.
FSDP_RECIPES = ("fp32", "mixed-bf16", "amp-bf16")
ZERO1_RECIPES = ("fp32", "pure-bf16")


def exact_applies(spec: ModelSpec, recipe: Recipe, convention: str) -> bool:
    """True when the layout is data-parallel sharding alone and the recipe is one measure/sharded.py runs."""
    par = recipe.parallel
    if convention != "eager" or par.zero not in (1, 2, 3) or par.dp < 2:
        return False
    if (par.tp, par.pp, par.cp, par.ep, par.expert_tp, par.micro_batches) != (1, 1, 1, 1, 1, 1) or par.sp:
        return False
    if par.shard_group or par.offload_optimizer or par.offload_activations or recipe.lora is not None:
        return False
    if recipe.optimizer != "adamw" or recipe.optimizer_impl != "single" or recipe.recompute != "none":
        return False
    names = FSDP_RECIPES if par.zero in (2, 3) else ZERO1_RECIPES
    if recipe.precision.name not in names:
        return False
    try:
        hf_tensors(spec)
    except StepbillError:
        return False
    return True


def _owned(p: RankPrediction, ctx: Any, world: int, rank: int) -> dict[str, float]:
    """Unpadded bytes this rank owns of each resident item (sums over the ranks to the global items)."""
    tensors = ctx.tensors
    total = sum(t.numel for t in tensors)
    if p.zero == 1:
        mine = sum(t.numel for t in ctx.partitions[world][rank])
        state = ctx.bill.recipe.precision.state
        return {"weights": p.params / world, "grads": p.grads / world, "optimizer": 2 * state * mine}
    local = sum(local_rows(t.shape[0], world, rank) * (t.numel // t.shape[0]) for t in tensors)
    return {"weights": 4 * local, "grads": 4 * local, "optimizer": 8 * local, "total_elements": total}


def exact_classes(spec: ModelSpec, recipe: Recipe, kinds: dict[str, int]) -> list[Any]:
    """One RankClass per distinct rank prediction (rank numbers in its name)."""
    from stepbill.engine.parallel import MEMORY_KEYS, RankClass

    par = recipe.parallel
    world, zero = par.dp, par.zero
    ctx = sharded_context(spec, zero, recipe.micro_batch, recipe.seq_len,
                          recipe.precision.name if zero == 1 else "fp32")
    groups: dict[tuple, list[tuple[int, RankPrediction]]] = {}
    for r in range(world):
        p = predict_rank(spec, world, zero, r, recipe.micro_batch, recipe.seq_len, context=ctx)
        key = (p.params, p.grads, p.optimizer_states, round(p.peak_forward), round(p.peak_backward),
               round(p.peak_optimizer))
        groups.setdefault(key, []).append((r, p))
    setup = "FSDP2 (fp32 shards, bf16 compute)" if zero in (2, 3) else "ZeroRedundancyOptimizer"
    out = []
    for members in groups.values():
        ranks = [r for r, _ in members]
        r0, p = members[0]
        resident = p.params + p.grads + p.optimizer_states
        transient = max(0.0, p.peak - resident - p.activations)
        memory = {"weights": p.params, "grads": p.grads, "optimizer": p.optimizer_states,
                  "model": p.params + p.grads, "resident": resident, "activations": p.activations,
                  "transient": transient, "peak": p.peak, "peak_forward": p.peak_forward,
                  "peak_backward": p.peak_backward}
        memory = {k: float(memory[k]) for k in MEMORY_KEYS}
        items = [Line(k, memory[k], "bytes", f"{setup}, rank {r0} of {world}: engine/sharded.py", {"zero": zero})
                 for k in ("weights", "grads", "optimizer")]
        activ = [Line("activations", p.activations, "bytes", "eager timeline at the forward peak", {})]
        trans = [Line(f"transient.{k}", v, "bytes", "FSDP2 buffer of one unit", {}) for k, v in p.transient.items()]
        trans.append(Line("transient.at_peak", transient, "bytes",
                          "peak − resident − activations: buffers, inputs, temporaries at {moment}",
                          {"moment": max(p.moments, key=lambda m: m[1])[0]}))
        owned = _owned(p, ctx, world, r0)
        owned.pop("total_elements", None)
        name = _name(ranks, world)
        out.append(RankClass(name, (0,), len(ranks), kinds, 1.0, items, activ, trans, memory, {}, owned))
    return out


def _name(ranks: list[int], world: int) -> str:
    if len(ranks) == world:
        return "all ranks"
    runs: list[str] = []
    start = prev = ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        runs.append(str(start) if start == prev else f"{start}–{prev}")
        if r is not None:
            start = prev = r
    return "rank " + ",".join(runs) if len(ranks) == 1 else "ranks " + ",".join(runs)
