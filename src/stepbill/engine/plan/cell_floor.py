"""Whether a cell's least step-time floor is its `none` policy's, known without the other policies' floors: then
the floors pass (floor_pass.floors) gives the cell's node that floor and computes the others only when the node
gives way to its candidates.

A cell's explicit policies differ only in what they recompute. On the floors' rank (bounds.time_floor: memory at
zero), with the slowest pipeline stage the same for every policy of the cell, policy p's floor is the `none`
policy's numbers with x = recompute_forwards (timing/step.stage_compute: the recompute as a number of forwards, ≥ 0)
moved, and with p's collectives:

    floor_p = (T + F·x + critical_p) / (1 − bubble) + exposed + offload + max(spill_p(x), H − T − F·x)

T the kernels without recompute, F = StageCompute.rebuild (what one forward of recompute adds to the kernels and to
the backward window), H the offload traffic the compute may hide (its exposed arm: step_terms.per_op_total), and
spill_p the hidden collectives' spill (timing/comm_time.comm_timing) with the backward window grown by F·x, the
attention window by StageCompute.rebuild_attention·x. A policy's reruns add TP / EP / PP collectives (critical) and
CP's (hidden behind attention) only (engine/recompute/plan.Rerun), so critical_p ≥ critical_none and spill_p ≥ the
spill of the `none` collectives at the same windows: floor_p ≥ g(x), g the `none` floor with x moved. g is convex (a
line plus a max of sums of maxes of lines), so when its slope at x = 0 is ≥ 0 — F / (1 − bubble) against the rate at
which the spill or the exposed offload falls (comm_time.spill_shrink_rate, or F where the offload arm is the larger)
— g(x) ≥ g(0) for every x ≥ 0, and g(0) is the `none` floor: floor_p ≥ floor_none.

Under `--efficiency` the floor is t_rank / (1 − bubble) + exposed + offload + max(0, hideable − t_rank), which grows
with t_rank (slope 1 / (1 − bubble) − 1 ≥ 0 where the spill counts), and t_rank = max(executed / (peak × efficiency),
HBM bytes / bandwidth) grows with the recompute whatever stage it picks (the busiest stage executes at least the
`none` policy's busiest work): the `none` floor is the least there always.

The budget solver's policy (unsolved in the floors pass) is a drop set: recompute per layer by kind, ≥ 0, no whole
layer, and its reruns add collectives as any policy's. So its floor is at least the `none` one too where that rises
and its busiest stage cannot move: the `none` policy's busiest stage does more work than every other stage by more
than that stage's extra layers of a kind could add, each rebuilding every droppable tensor
(`busiest_stage_dominates`); when the node gives way, its budget floor is read with the node's as a floor (the
larger).

Not claimed (the cell's floors are all computed): LoRA (a whole-layer policy changes the stage's work without
recompute: flops.stage_step_flops' input gradient), quantised or fp8 recipes (their precision time reads the GEMMs'
achieved efficiency, which moves with x), and a policy whose busiest stage is not the `none` policy's (per-op).
"""

from __future__ import annotations

from operator import itemgetter

from stepbill.engine.bill import without_layout
from stepbill.engine.bill_parts import bill_plan
from stepbill.engine.memo import Memo
from stepbill.engine.parallel.layout import stage_layer_kinds
from stepbill.engine.params import param_inventory
from stepbill.engine.plan.budget_bound import SUM_SLACK, rebuild_all_per_token
from stepbill.engine.plan.evaluate import recipe_for
from stepbill.engine.plan.space import Candidate, PlanRequest
from stepbill.engine.timing.comm_time import spill_shrink_rate
from stepbill.engine.timing.step_terms import OffloadTerms, StepTerms, slowest_stage, stage_works
from stepbill.spec.parallel import Parallel


def none_floor_rises(req: PlanRequest, cand: Candidate, terms: StepTerms, offload: OffloadTerms) -> bool:
    """Whether the time floor of `cand` (the `none` policy; `terms` its floor's numbers, `offload` its offload
    terms) only rises with the recompute, on its busiest stage (per-op; under `--efficiency` on any): the slope
    test of the module's docstring, and not LoRA or a quantised / fp8 recipe. With `same_busiest_stage` of the
    cell's policies (per-op), the `none` floor is the cell's least."""
    if terms.precision_lines:
        return False
    if req.efficiency is not None:
        return True
    if recipe_for(req, cand).lora is not None:
        return False
    sc, ct = terms.stage_compute, terms.comm
    assert sc is not None and ct is not None, "the per-op model's numbers"
    falls = spill_shrink_rate(ct, sc.micro_batches, sc.forward, sc.backward, sc.attention, sc.rebuild,
                              sc.rebuild_attention)
    exposed_offload = offload.hideable - terms.t_rank  # per_op_total's other arm, falling at F
    if exposed_offload > ct.hidden_spill:
        falls = sc.rebuild
    elif exposed_offload == ct.hidden_spill:
        falls = min(falls, sc.rebuild)  # the max of the two falls as the slower does
    return sc.rebuild / (1 - terms.bubble) >= falls


def same_busiest_stage(req: PlanRequest, layout: Parallel, micro_batch: int, policies: tuple[str, ...]) -> bool:
    """Whether a candidate of `layout` at `micro_batch` has one busiest pipeline stage (step_terms.slowest_stage)
    under the `none` policy and each of `policies`; memoised on what that reads of the candidate: the stages'
    split and the micro-batch (with the request: the model, recipe and sequence)."""
    return _SAME.get((req, layout.pp, layout.vpp, layout.pp_layers, micro_batch, policies), _same_stage, req,
                     layout, micro_batch, policies)


def _same_stage(req: PlanRequest, layout: Parallel, micro_batch: int, policies: tuple[str, ...]) -> bool:
    spec, inv = req.spec, param_inventory(req.spec)
    stages = set()
    for policy in ("none", *policies):
        recipe = recipe_for(req, Candidate(layout, micro_batch, policy))
        stages.add(slowest_stage(spec, inv, recipe, bill_plan(spec, recipe))[0])
    return len(stages) == 1


_SAME = Memo(1 << 12)


def busiest_stage_dominates(req: PlanRequest, layout: Parallel, micro_batch: int) -> bool:
    """Whether the `none` policy's busiest stage of `layout` at `micro_batch` stays the busiest under the budget
    solver's policy, whatever it drops: a drop set adds FLOPs per layer by kind (no whole layer), at most rebuilding
    every droppable tensor (budget_bound.rebuild_all_per_token), so the busiest stage keeps its place when its work
    exceeds every other distinct stage's by more than the most those stages' extra layers of a kind could add
    (step_terms.slowest_stage keeps the first of equal stages: strictly more, with room for the last digits).
    Memoised as `same_busiest_stage`."""
    return _DOMINATES.get((req, layout.pp, layout.vpp, layout.pp_layers, micro_batch), _dominates, req, layout,
                          micro_batch)


def _dominates(req: PlanRequest, layout: Parallel, micro_batch: int) -> bool:
    spec, inv = req.spec, param_inventory(req.spec)
    recipe = recipe_for(req, Candidate(layout, micro_batch, "none"))
    rebuild = rebuild_all_per_token(spec, without_layout(recipe))
    tokens = recipe.seq_len * recipe.micro_batch
    kinds = tuple(tuple(k.items()) for k in stage_layer_kinds(spec, layout))
    # each distinct stage's work without recompute, weighed as slowest_stage weighs it; the first of the most is the
    # `none` policy's busiest
    works = stage_works(spec, inv, kinds, recipe.seq_len, recipe.micro_batch, {}, recipe.lora, False)
    busiest, most = max(works, key=itemgetter(1))  # max keeps the first of equal ones, as slowest_stage does
    held = dict(kinds[busiest])
    for stage, work in works:
        extra = sum(max(0, n - held.get(kind, 0)) * rebuild.get(kind, 0.0) for kind, n in kinds[stage]) * tokens
        if stage != busiest and not work + extra < most * (1 - SUM_SLACK):
            return False
    return True


_DOMINATES = Memo(1 << 12)
