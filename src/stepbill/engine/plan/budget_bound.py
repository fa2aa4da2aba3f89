"""Step-time floors of the budget solver's candidates (the space's budget at the rank's free memory), made before
their policy is solved (solving costs eager bills) by the bill's own time model and the solver's own staircase.

`budget_floor` — any drop set: the policy drops some set of tensors, so the step reruns r ≥ 0 FLOPs. With r the
pipeline's kernels only grow (stage_compute adds the recompute's share of a forward, ≥ 0, at the same scale — the
budget is not a checkpointing policy, so the stage's work without recompute is the `none` policy's), but the slowest
stage may change and the hideable collectives' spill may shrink (their window grows), so the floor keeps what r
cannot lower: the lightest stage's kernels without recompute, the critical TP / EP / PP collectives, the bubble, the
ZeRO weight all-gather after the optimizer, exposed offload, and the hideable collectives' spill with every window
at its largest — each stage's windows with every droppable tensor rebuilt (no drop set reruns more ops: a budget's
FLOPs are a sum over a subset of the same ops), the largest over stages — and the optimizer step at zero:

    per-op:       floor = (min over stages of kernels(r = 0) + critical comm) / (1 − bubble) + all-gather + offload
                          + spill(the `none` policy's collectives, windows at r_max)
    --efficiency: floor = (executed FLOPs without recompute / (peak × efficiency)) / (1 − bubble) + exposed comm
                          + offload

(the budget reruns no TP / EP collective: engine/recompute/plan.Rerun).

`budget_floor(..., fitted=True)` — the same floor for a candidate that fits, with the recompute its budget forces
in the kernels (per-op model). The policy `budget:X` is solved twice at the same X (engine/recompute/budget.py: the
cheapest staircase step whose peak fits X, `first_fitting_step`): under the eager convention for the fit verdict,
under the ideal one for the step time. So:

1. Every eager step k is checked against each stage group's peak_floor moment after the forward (bounds.StageSide:
   on the GPU + resting gradients + the kept rows of every micro-batch in flight + the buffers, or the loss's
   backward): kept(k) = kept(none) − the bytes step k drops on the rank. A step over the budget there cannot be the
   fitting candidate's. The first step that passes, k_min, is the cheapest the fitting candidate can have; any X ≥
   peak(k_min − 1) would pick an earlier step (one that does not fit), so X < X_up = peak(k_min − 1).
2. The ideal solver at X < X_up picks a step at or after i₀ = first_fitting_step(ideal, X_up) (steps are in
   ascending FLOPs, descending peak). Each stage's recompute r_s is then at least the least any such step reruns on
   its layers (the staircase's per-kind fronts: FLOPs per layer).
3. The slowest stage s* (timing/step_terms.slowest_stage: the most executed FLOPs) executes at least
   E = max_s (work_s + r_min,s), so its recompute is at least max(r_min,s*, E − work_s*), and its kernels (growing
   with r) at least min over stages of kernels_s(max(r_min,s, E − work_s)) — the floor's kernels when larger than
   the first floor's. No step passing 1: the candidate cannot fit (inf).

A candidate that does not fit is rejected whatever its floor, so a floor that holds for fitting candidates only is
exact for the answer (tests/test_plan_bounds.py checks it against solved, fitting bills).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache

import numpy as np

from stepbill.engine import flops as fl
from stepbill.engine.activations import ActTensor
from stepbill.engine.bill import activation_width, without_layout
from stepbill.engine.bill_parts import bill_eager_parts, bill_plan
from stepbill.engine.kinds import Split
from stepbill.engine.memo import Memo, fields_except
from stepbill.engine.memory.eager import EagerTerms
from stepbill.engine.parallel.collectives import rank_param_elements, step_collectives
from stepbill.engine.parallel.layout import stage_layer_indices, stage_layer_kinds
from stepbill.engine.parallel.rank_share import row_divisor
from stepbill.engine.params import param_inventory
from stepbill.engine.plan.bounds import (
    EMPTY_RANK,
    MEMO_MAX,
    ROUNDING_SLACK_BYTES,
    empty_rank_time,
    floor_offload_terms,
    stage_rows,
    stage_sides,
)
from stepbill.engine.plan.evaluate import recipe_for
from stepbill.engine.plan.resident import budget_bytes
from stepbill.engine.plan.space import Candidate, PlanRequest
from stepbill.engine.recompute import RecomputePlan, op_flops
from stepbill.engine.recompute.budget import Staircase, first_fitting_step, spec_problem
from stepbill.engine.timing.comm_time import comm_timing
from stepbill.engine.timing.step import StageCompute, stage_compute
from stepbill.engine.timing.step_terms import StepTerms
from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import Recipe

#: Relative room for the last digits: the staircase's peaks and FLOPs are numpy sums of the same terms the solver's
#: peak_of and the plan's op_flops add in another order (relative differences ~1e-15).
SUM_SLACK = 1e-9


def budget_floor(req: PlanRequest, cand: Candidate, fitted: bool = False, twin: StepTerms | None = None) -> float:
    """A lower bound of time.step (s) for any recompute policy of the candidate that adds no TP / EP collective —
    the budget solver's, whatever it drops; with `fitted`, of the budget solver's policy when the candidate fits
    (inf: it cannot fit). See the module's docstring. `twin`: the time floor's numbers of the candidate's `none`
    policy without optimizer offload (per-op model), for a candidate with it: they differ in the offload terms alone
    (bounds.offload_twin_floor), which are then the candidate's own."""
    none = replace(cand, recompute="none")
    recipe = recipe_for(req, none)
    if twin is None:
        terms = empty_rank_time(req.spec, recipe, req.gpu, req.efficiency)
        offload = terms.offload.exposed  # time.offload_exposed
    else:
        terms, offload = twin, floor_offload_terms(req, recipe).exposed
    bubble = terms.bubble  # time.bubble
    if req.efficiency is not None:  # time.compute / (1 − bubble) + time.comm_exposed + offload
        return terms.t_compute / (1 - bubble) + terms.comm_exposed + offload
    critical = terms.comm_critical  # time.comm_critical
    gather = terms.comm_exposed - critical  # time.comm_exposed − critical: the ZeRO weight all-gather after the optimizer
    kernels, windows = _stage_bounds(req, recipe)
    if fitted:
        kernels = max(kernels, _fitted_kernels(req, recipe))
    par = recipe.parallel
    timed = [c for c in step_collectives(req.spec, recipe, param_inventory(req.spec), req.gpu) if c.seconds is not None]
    layers = max(max(map(len, stage_layer_indices(req.spec, par))), 1)  # the most layers a stage holds
    spill = comm_timing(timed, par.zero, par.micro_batches, layers, *windows).hidden_spill
    return (kernels + critical) / (1 - bubble) + gather + offload + spill


def _fitted_kernels(req: PlanRequest, recipe: Recipe) -> float:
    """A lower bound of the slowest stage's kernel seconds under the budget policy of a candidate that fits (inf: none
    of the eager solver's steps lets it fit); `recipe` is the `none` policy's. Steps 1–3 of the module's docstring;
    0 where the bound does not apply (LoRA: the solver ranks full fine-tuning rows there; activation offload; no
    eager bill)."""
    spec, par = req.spec, recipe.parallel
    if recipe.lora is not None or par.offload_activations:  # offload: no kept row stays on the GPU
        return 0.0
    try:
        parts = bill_eager_parts(spec, recipe)
    except StepbillError:
        return 0.0
    one = without_layout(recipe)
    eager_steps = _staircase(spec, one, "eager")
    k_min, stages = _cheapest_fitting_step(req, recipe, parts, eager_steps)
    if k_min is None:
        return math.inf  # no step the eager solver can take lets the candidate fit
    if k_min == 0:
        return 0.0  # the cheapest step may fit: no recompute forced
    x_up = float(eager_steps[0].peak[k_min - 1]) * (1 + SUM_SLACK)
    ideal_steps = _staircase(spec, one, "ideal")
    first = min(first_fitting_step(ideal_steps[0], x_up), len(ideal_steps[0].peak) - 1)
    per_layer = _FLOPS.get((spec, one), _rerun_per_layer, ideal_steps)
    split, m = par.tp * par.cp, par.micro_batches
    rows = []  # (layer kinds, last, work, least recompute) per stage group, one micro-batch on one GPU
    for stage in stages:
        kinds = stage_layer_kinds(spec, par)[stage]
        last = stage == par.pp - 1
        work = _stage_work(req, recipe, kinds, stage == 0, last)
        rerun = sum(n * per_layer[k][first:] for k, n in kinds.items())  # at each step the solver may take
        rows.append((kinds, last, work, float(np.min(rerun)) * (1 - SUM_SLACK) if kinds else 0.0))
    busiest = max(work + least for _, _, work, least in rows)  # E: the slowest stage executes at least this
    kernels = math.inf
    for kinds, last, work, least in rows:
        rerun = max(least, busiest - work)
        kernels = min(kernels, _stage_kernels(req, recipe, kinds, last, (work + rerun) * m / split,
                                              rerun * m / split).kernels)
    return kernels


def _cheapest_fitting_step(req: PlanRequest, recipe: Recipe, parts: EagerParts, eager_steps: Steps
                           ) -> tuple[int | None, list[int]]:
    """(the first eager staircase step whose kept rows pass every stage group's peak-floor moment after the forward
    — None when none does — and each group's first stage): step 1 of the module's docstring. `parts`: the `none`
    recipe's bill_eager_parts."""
    spec, par = req.spec, recipe.parallel
    plan, eager, outside_rows = parts
    one, divisors = without_layout(recipe), (par.cp, par.tp, par.sp, par.expert_tp)
    freed = _FREED.get((spec, one, divisors), _freed_on_rank, spec, recipe, eager_steps)
    rows_key = (spec, one, False, *divisors)  # peak_floor's key of the none policy's rows
    limit = budget_bytes(req, par) + ROUNDING_SLACK_BYTES  # peak ≥ the moment − the slack, and fits at ≤ budget
    fits = np.ones(len(eager_steps[0].peak), dtype=bool)
    stages = []
    for side in stage_sides(req, recipe, plan, eager, outside_rows, rows_key):
        kept = stage_rows(rows_key, plan, recipe, side.order)[0]  # the none policy's, per micro-batch
        dropped = sum(side.order.count(k) * freed[k] for k in eager_steps[1] if k in side.order)
        fits &= (kept - dropped) * side.flight + side.resting + side.after_forward + side.on_gpu <= limit
        stages.append(side.stage)
    return (int(np.argmax(fits)) if fits.any() else None), stages


Steps = tuple[Staircase, dict[str, int]]
#: bill_parts.bill_eager_parts' answer: the eager plan, its eager terms, the outside-layer bytes by row divisor
EagerParts = tuple[RecomputePlan, EagerTerms | None, Callable[[Callable[[ActTensor], float]], float] | None]


def _staircase(spec: ModelSpec, one: Recipe, convention: str) -> Steps:
    """The solver's staircase for the one-GPU recipe under `convention`, as make_plan solves a budget policy
    (engine/bill._convention_terms' activation width, sdpa), and the model's layers of each kind in the order of
    its fronts."""
    width = activation_width(one.precision, one.device, convention)
    problem, steps, _ = spec_problem(spec, one.seq_len, one.micro_batch, width, convention, "sdpa")
    return steps, problem.layers


def _freed_on_rank(spec: ModelSpec, recipe: Recipe, eager_steps: Steps) -> dict[str, np.ndarray]:
    """Per layer kind, the bytes one layer of it frees on a rank of `recipe`'s layout (one micro-batch) at each eager
    staircase step: its dropped tensors' bytes, each divided as the rank holds it (rank_share.row_divisor, which reads a
    tensor's Split only), as RecomputePlan.for_rank divides kept rows."""
    by_split, examples = _FREED_BY_SPLIT.get((spec, without_layout(recipe)), _freed_by_split, spec, recipe,
                                              eager_steps)
    divisor = row_divisor(recipe)
    shares = np.array([1.0 / divisor(t) for t in examples])
    return {kind: freed @ shares for kind, freed in by_split.items()}


def _freed_by_split(spec: ModelSpec, recipe: Recipe, eager_steps: Steps
                    ) -> tuple[dict[str, np.ndarray], list[ActTensor]]:
    """Per layer kind, the one-GPU bytes (one micro-batch) one layer of it frees at each eager staircase step, a
    column per Split of the tensors (steps × splits), and a tensor of each Split (what row_divisor reads). It reads
    the one-GPU recipe only: memoised on it, the layouts' divisors applied after (`_freed_on_rank`)."""
    steps, layers = eager_steps
    plan = bill_eager_parts(spec, recipe)[0]  # the none policy keeps every row
    examples: dict[Split, ActTensor] = {}
    for lp in plan.layers.values():
        for t in lp.kept:
            examples.setdefault(t.split, t)
    column = {split: i for i, split in enumerate(examples)}
    out = {}
    for n, (kind, front) in enumerate(zip(layers, steps.fronts, strict=True)):
        rows = {t.name: t for t in plan.layers[kind].kept} if kind in plan.layers else {}
        entries = np.zeros((len(front), len(column)))
        for e, (_, _, keys) in enumerate(front):
            for _, name in keys:
                entries[e, column[rows[name].split]] += rows[name].bytes_at(plan.seq_len)
        out[kind] = entries[steps.picks[:, n]] * plan.tokens
    return out, list(examples.values())


def _rerun_per_layer(ideal_steps: Steps) -> dict[str, np.ndarray]:
    """Per layer kind, the FLOPs one layer of it reruns at each (ideal) staircase step, one micro-batch on one GPU:
    its front's FLOPs (the kind's layers × its ops' FLOPs, budget.Problem.op_cost: causal, as op_flops) over its
    layers."""
    steps, layers = ideal_steps
    return {kind: np.array([cost for cost, _, _ in front])[steps.picks[:, n]] / layers[kind]
            for n, (kind, front) in enumerate(zip(layers, steps.fronts, strict=True))}


#: Memos of the fitted floor, their values arrays over a staircase's steps: per one-GPU recipe (and row divisors), the
#: bytes each eager step frees per layer kind; per one-GPU recipe, the FLOPs each ideal step reruns per layer kind. A
#: search has a few one-GPU recipes (one per micro-batch size) and divisors (cp, tp, sp, etp).
FITTED_MEMO_MAX = 4096
_FREED = Memo(FITTED_MEMO_MAX)
_FREED_BY_SPLIT = Memo(FITTED_MEMO_MAX)
_FLOPS = Memo(FITTED_MEMO_MAX)


def _stage_bounds(req: PlanRequest, recipe: Recipe) -> tuple[float, tuple[float, float, float]]:
    """(the smallest over pipeline stages of the stage's kernel seconds without recompute, and the largest
    forward / backward / attention windows over stages with every droppable tensor rebuilt) — timing/step.py's
    stage_compute, called as steptime._per_op calls it for the slowest stage. `recipe` is the `none` policy's.
    Memoised on what it reads: the one-GPU recipe, the GPU and the layout's fields but dp, ZeRO, the shard group,
    the schedule's name and offload (_STAGE_BOUNDS_FIELDS) — the budget candidates of a layout's ZeRO stages and
    offload choices share one entry."""
    key = (req.spec, req.gpu, without_layout(recipe), _STAGE_BOUNDS_FIELDS(recipe.parallel))
    return _STAGE_BOUNDS.get(key, _stage_bounds_of, req, recipe)


#: stage_compute reads the layout's kernel fields (timing/step.kernel_layout: tp, cp, ep, etp, sp), the micro-batches
#: and the stage split (pp, vpp, pp_layers: layout.stage_layer_kinds and the held weights, rank_param_elements' key)
_STAGE_BOUNDS_FIELDS = fields_except(Parallel, {"dp", "zero", "shard_group", "pp_schedule", "offload_optimizer",
                                                "offload_activations"})
_STAGE_BOUNDS = Memo(MEMO_MAX)


def _stage_bounds_of(req: PlanRequest, recipe: Recipe) -> tuple[float, tuple[float, float, float]]:
    spec, par = req.spec, recipe.parallel
    split, m, tokens = par.tp * par.cp, par.micro_batches, recipe.tokens
    rebuild_all = rebuild_all_per_token(req.spec, without_layout(recipe))
    kernels, fwd, bwd, attn = float("inf"), 0.0, 0.0, 0.0
    seen: set[tuple] = set()
    for stage, kinds in enumerate(stage_layer_kinds(spec, par)):
        first, last = stage == 0, stage == par.pp - 1
        key = (tuple(sorted(kinds.items())), first, last)
        if key in seen:
            continue
        seen.add(key)
        work = _stage_work(req, recipe, kinds, first, last)
        rest = _stage_kernels(req, recipe, kinds, last, work * m / split, 0.0)
        rebuilt = sum(n * rebuild_all.get(k, 0.0) for k, n in kinds.items()) * tokens * m / split
        most = _stage_kernels(req, recipe, kinds, last, work * m / split + rebuilt, rebuilt)
        kernels = min(kernels, rest.kernels)
        fwd, bwd, attn = max(fwd, most.forward), max(bwd, most.backward), max(attn, most.attention)
    return kernels, (fwd, bwd, attn)


def _stage_work(req: PlanRequest, recipe: Recipe, kinds: dict[str, int], first: bool, last: bool) -> float:
    """One micro-batch's executed FLOPs of a stage running `kinds`, without recompute (flops.stage_step_flops, as
    step_terms.slowest_stage counts them)."""
    return fl.stage_step_flops(req.spec, param_inventory(req.spec), recipe.seq_len, recipe.micro_batch, kinds, first,
                               last, {}, recipe.lora, False)


def _stage_kernels(req: PlanRequest, recipe: Recipe, kinds: dict[str, int], last: bool, executed: float,
                   recompute: float) -> StageCompute:
    """timing/step.stage_compute of a stage running `kinds` on a rank holding nothing (EMPTY_RANK), `executed` and
    `recompute` its FLOPs over the step, as step_terms calls it for the slowest stage."""
    held = rank_param_elements(req.spec, recipe, param_inventory(req.spec))
    return stage_compute(req.spec, recipe, EMPTY_RANK, req.gpu, req.gpu.peak_flops(recipe.precision.compute), kinds,
                         last, executed, recompute, held["dense_weights"] + held["expert_weights"])


@lru_cache(maxsize=256)
def rebuild_all_per_token(spec: ModelSpec, one_gpu: Recipe) -> dict[str, float]:
    """FLOPs per token (causal, as LayerPlan.recompute_flops) to rebuild every droppable tensor of each layer kind:
    an upper bound of any drop set's (op_flops sums each distinct producing op once, all nonnegative). It reads
    the one-GPU plan only (`one_gpu`: without_layout(recipe)), so it is memoised on it. Shared: never change it."""
    recipe = one_gpu
    plan = bill_plan(spec, recipe)  # the `none` policy keeps every row
    return {k: op_flops([t for t in lp.kept if t.recompute.droppable], recipe.seq_len) for k, lp in plan.layers.items()}
