"""Per-rank classes of data-parallel sharding alone (tp = pp = cp = ep = 1, one micro-batch, ZeRO 1/2/3 over dp,
eager convention) under the rules measured exact against FSDPMemTracker (engine/parallel/fsdp2.py): FSDP2 ZeRO-3/2 with
fp32 sharded parameters and bf16 compute (MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): what the
`mixed-bf16` recipe is under FSDP2) and ZeroRedundancyOptimizer (ZeRO-1) on the recipe as it is.

The buffers are placed on the one-GPU bill's own timeline (no second bill). A class is a set of ranks with
identical shards: FSDP2's dim-0 chunks are uneven only around each tensor's last non-empty chunk, so the ranks
fall into intervals between those breakpoints and one rank per interval is evaluated; ZeRO-1's greedy partition is
computed once. The cost grows with the distinct tensor shapes, not with the number of ranks.
"""

from __future__ import annotations

import heapq
from itertools import pairwise

from stepbill.engine.line import Line
from stepbill.engine.parallel.fsdp2 import (
    RankPrediction,
    ShardedContext,
    Tensor,
    chunk_rows,
    hf_tensors,
    local_rows,
    predict_rank,
    shape_counts,
)
from stepbill.engine.parallel.rank_class import MEASURED_EXACT, MEMORY_KEYS, RankClass, SingleRank
from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import Recipe

# Precision recipes the measured setups stand for: FSDP2 with a bf16 MixedPrecisionPolicy keeps fp32 shards (the
# master) and computes in bf16 — the mixed-bf16 recipe; ZeRO-1 runs the recipe as is.
FSDP_RECIPES = ("mixed-bf16",)
ZERO1_RECIPES = ("fp32", "pure-bf16")


def exact_reason(spec: ModelSpec, recipe: Recipe, convention: str) -> str:
    """'' when the measured FSDP2 / ZeRO-1 rules cover this layout, else why the approximate model is used."""
    par = recipe.parallel
    why = "approximate per-rank model (rules not measured against PyTorch for this layout): "
    if convention != "eager":
        return why + "ideal convention"
    if par.zero not in (1, 2, 3) or par.dp < 2:
        return why + "measured rules cover ZeRO 1/2/3 over dp ≥ 2"
    if (par.tp, par.pp, par.cp, par.ep, par.expert_tp) != (1, 1, 1, 1, 1) or par.sp:
        return why + "tp/pp/cp/ep layouts"
    if par.micro_batches != 1:
        return why + "measured rules cover one micro-batch per step"
    if par.shard_group or par.offload_optimizer or par.offload_activations:
        return why + "hybrid sharding and offload"
    if recipe.lora is not None:
        return why + "LoRA"
    if recipe.optimizer != "adamw":
        return why + "measured with AdamW"
    if recipe.recompute != "none":
        return why + "measured without recompute"
    names = FSDP_RECIPES if par.zero in (2, 3) else ZERO1_RECIPES
    if recipe.precision.name not in names:
        return why + f"ZeRO-{par.zero} measured with recipe {' / '.join(names)}"
    try:
        hf_tensors(spec)
    except StepbillError as err:
        return why + str(err)
    return ""


def _fsdp_representatives(tensors: list[Tensor], world: int) -> list[tuple[int, int]]:
    """(first rank, ranks) of each interval of ranks with identical FSDP2 local rows for every tensor."""
    cuts = {0, world}
    for d0 in {t.shape[0] for t in tensors}:  # a few distinct row counts
        full = d0 // chunk_rows(d0, world)
        cuts.update(r for r in (full, full + 1) if 0 < r < world)
    edges = sorted(cuts)
    return [(a, b - a) for a, b in pairwise(edges)]


def _zero1_partition(tensors: list[Tensor], world: int) -> list[list[Tensor]]:
    """torch ZeroRedundancyOptimizer's partition: largest first (stable sort), each to the emptiest rank (the
    lowest rank among equals), with a heap: O(T log N)."""
    heap = [(0, r) for r in range(min(world, len(tensors)))]
    parts: list[list[Tensor]] = [[] for _ in range(world)]
    for t in sorted(tensors, key=lambda x: x.numel, reverse=True):
        size, r = heapq.heappop(heap)
        parts[r].append(t)
        heapq.heappush(heap, (size + t.numel, r))
    return parts


def _owned(p: RankPrediction, ctx: ShardedContext, world: int, rank: int) -> dict[str, float]:
    """Unpadded bytes this rank owns of each resident item (sums over the ranks to the global items)."""
    tensors = ctx.tensors
    if p.zero == 1:
        mine = sum(t.numel for t in ctx.partitions[world][rank])
        state = ctx.bill.recipe.precision.state
        return {"weights": p.params / world, "grads": p.grads / world, "optimizer": 2 * state * mine}
    if ("shapes", 0) not in ctx.partitions:
        ctx.partitions[("shapes", 0)] = shape_counts(tensors)  # type: ignore[index]
    shapes = ctx.partitions[("shapes", 0)]  # type: ignore[index]
    local = sum(n * local_rows(d0, world, rank) * rest for (d0, rest), n in shapes.items())
    return {"weights": 4 * local, "grads": 4 * local, "optimizer": 8 * local}


def exact_classes(one: SingleRank) -> list[RankClass]:
    """One RankClass per distinct rank prediction (rank numbers in its name), from the one-GPU bill `one`
    (engine.parallel.SingleRank)."""
    spec, recipe = one.model, one.recipe
    par = recipe.parallel
    world, zero = par.dp, par.zero
    ctx = ShardedContext(hf_tensors(spec), one, "eager")
    if zero == 1:
        ctx.partitions[world] = _zero1_partition(ctx.tensors, world)
        seen: dict[tuple, list[int]] = {}
        for r, part in enumerate(ctx.partitions[world]):
            seen.setdefault((sum(t.numel for t in part), len(part), max((t.numel for t in part), default=0)),
                            []).append(r)
        reps = [(ranks[0], ranks) for ranks in seen.values()]
    else:
        reps = [(a, list(range(a, a + n))) for a, n in _fsdp_representatives(ctx.tensors, world)]
    groups: dict[tuple, tuple[RankPrediction, list[int]]] = {}
    for r, ranks in reps:
        p = predict_rank(spec, world, zero, r, recipe.micro_batch, recipe.seq_len, ctx)
        key = (p.params, p.grads, p.optimizer_states, round(p.peak_forward), round(p.peak_backward),
               round(p.peak_optimizer))
        if key in groups:
            groups[key][1].extend(ranks)
        else:
            groups[key] = (p, list(ranks))
    setup = ("FSDP2 (fp32 shards, bf16 compute: MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32))"
             if zero in (2, 3) else "ZeroRedundancyOptimizer")
    kinds = {k: n for k, n in (("dense", spec.n_dense_layers), ("moe", spec.n_moe_layers)) if n}
    out = []
    for p, ranks in groups.values():
        ranks.sort()
        r0 = ranks[0]
        resident = p.params + p.grads + p.optimizer_states
        transient = max(0.0, p.peak - resident - p.activations)
        memory = {"weights": p.params, "grads": p.grads, "optimizer": p.optimizer_states,
                  "model": p.params + p.grads, "resident": resident, "activations": p.activations,
                  "transient": transient, "peak": p.peak, "peak_forward": p.peak_forward,
                  "peak_backward": p.peak_backward}
        memory = {k: float(memory[k]) for k in MEMORY_KEYS}
        items = [Line(k, memory[k], "bytes", "{setup}, rank {rank} of {world}", {"setup": setup, "rank": r0,
                                                                                  "world": world, "zero": zero})
                 for k in ("weights", "grads", "optimizer")]
        activ = [Line("activations", p.activations, "bytes", "eager timeline at the forward peak", {})]
        trans = [Line(f"transient.{k}", v, "bytes", "FSDP2 buffer of one unit", {}) for k, v in p.transient.items()]
        trans.append(Line("transient.at_peak", transient, "bytes",
                          "peak − resident − activations: buffers, inputs, temporaries at {moment}",
                          {"moment": max(p.moments, key=lambda m: m[1])[0]}))
        owned = _owned(p, ctx, world, r0)
        out.append(RankClass(_name(ranks, world), (0,), len(ranks), kinds, 1.0, items, activ, trans, memory, {},
                             owned, MEASURED_EXACT, (setup,)))
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
