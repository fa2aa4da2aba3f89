"""Exact lower bounds of a candidate's step time, made by the bill's own time model: what the branch-and-bound
search (search.py) prunes with.

`time_floor` — a candidate with an explicit recompute policy: the step time's numbers (engine/timing/step_terms,
which `steptime.step_time` turns into the bill's lines) on the candidate's recipe, collectives and FLOPs lines,
exactly as make_bill calls them (bill_parts.bill_step_terms), but with the judged rank's memory at zero. The step
time reads the rank's memory in three places only, each monotone: the optimizer step's bytes (2 × optimizer +
grads + weights: added to the pipeline time), the activation bytes in the HBM traffic (inside a max with the
compute, under `--efficiency`) and, under activation offload, the kept bytes copied over PCIe (inside a max with
the hidden network time). Zero bytes there can only lower each term, so floor ≤ time.step of `stepbill bill`.

`budget_floor` (the budget solver's candidates, their policy unsolved): engine/plan/budget_bound.py.

`peak_floor` — a lower bound of the judged peak (the eager bill's worst rank class), read off four moments of each
stage's timeline (engine/memory/timeline.eager_moments), every other item of which is ≥ 0: the optimizer step
(weights, optimizer, every gradient, the layout's buffers then: a DDP / ZeRO-1 bucket), the forward's last layer
(the gradients already there — all of them under gradient accumulation, none otherwise — the kept activations of
every micro-batch in flight, and that layer's buffers), each layer's backward (its live activations,
RecomputePlan.backward_live, plus the other micro-batches' kept ones and the layer's buffers: ZeRO-3's two gathered
units, the reduce-scatter input, CP's K/V block, SP's gathered input, EP's all-to-all buffer), and on the last stage
the loss's backward (the outside-layer rows — the LM head's input, the logits and loss inputs — the loss's activation
change and fp32 temporaries, the rank's EagerTerms, and the root unit gathered). So

    peak ≥ max over stages of  weights + optimizer + max(grads + buffers(step),
                                                         resting + in flight × kept + buffers(last layer, forward),
                                                         resting + (in flight − 1) × kept
                                                             + max over layers (live(backward) + buffers(backward)),
                                                         [last stage] resting + in flight × kept + loss + buffers(loss))

less 8 bytes for the timeline's rounding. The buffers are parallel/buffers.layout_buffers, the function the rank's
timeline reads, on the approximate per-stage model only (the measured FSDP2 / ZeRO-1 rules place their own: there
the floor leaves them out). The budget solver's candidates (policy unsolved) get the same with the `none` policy's
rows less every droppable one (`least_kept`: the solver drops droppable rows only, whatever its budget, and a layer's
backward holds the rows kept before it plus its own every row); models without an eager bill keep the resident
bound. All three floors are tested against full bills over random candidates (tests/test_plan_bounds.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import NamedTuple

from stepbill.engine.bill import without_layout
from stepbill.engine.bill_parts import bill_eager_parts, bill_step_terms
from stepbill.engine.kinds import Part, Phase
from stepbill.engine.memo import Memo
from stepbill.engine.memory.eager import EagerTerms
from stepbill.engine.parallel.buffers import layout_buffers
from stepbill.engine.parallel.collectives import rank_param_elements
from stepbill.engine.parallel.fsdp2_ranks import exact_reason
from stepbill.engine.parallel.holdings import held_key, rank_holdings, stage_held
from stepbill.engine.parallel.layout import representative_stage, stage_layer_indices
from stepbill.engine.parallel.rank_class import MEMORY_KEYS, RankClass
from stepbill.engine.parallel.rank_share import in_flight_microbatches, rank_eager, rank_plan, row_divisor
from stepbill.engine.parallel.ranks import OPTIMIZER_SIDE
from stepbill.engine.params import param_inventory
from stepbill.engine.plan.axes import BUDGET_AT_FREE
from stepbill.engine.plan.evaluate import recipe_for
from stepbill.engine.plan.layer_moments import beyond, layer_extra
from stepbill.engine.plan.space import Candidate, PlanRequest
from stepbill.engine.recompute import RecomputePlan
from stepbill.engine.timing.step_terms import (
    OffloadTerms,
    StepTerms,
    offload_terms,
    pcie_copy_bytes_per_s,
    per_op_total,
)
from stepbill.errors import StepbillError
from stepbill.spec.hardware import GPU
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import Recipe
from stepbill.spec.recompute_policy import parse_recompute

#: A rank holding nothing: the step time's memory-dependent terms at their floor (see the module's docstring).
EMPTY_RANK = RankClass("empty", (), 0, {}, 1.0, [], [], [], dict.fromkeys(MEMORY_KEYS, 0.0))


ROUNDING_SLACK_BYTES = 8  # the timeline rounds each item of a moment to whole bytes
MEMO_MAX = 1 << 16  # entries of each of peak_floor's memos (a few MB each)
#: entries of the buffers' and rows' memos: a whole DeepSeek-V3 × 2,048 search reads ~465,000 and ~232,000 keys, in
#: the bills' floor order (a memo emptied each 65,536 recomputed ~150,000 and ~45,000 of them); ~1 kB an entry
ROWS_MEMO_MAX = 1 << 18


def peak_floor(req: PlanRequest, cand: Candidate, resident: float, enough: float = math.inf,
               rows: bool = True) -> float:
    """A lower bound (bytes) of the candidate's judged peak, never below `resident` (its group's resident bound).
    With `enough`, the stages left are not read once the bound reaches it (the bound so far is returned: a lower
    bound still, and a caller that only asks whether the floor reaches `enough` has its answer). Without `rows`, no
    activation row is held at any moment (`resting_floor`)."""
    solved = cand.recompute == BUDGET_AT_FREE  # the budget solver's policy, not yet solved
    if solved:
        cand = replace(cand, recompute="none")  # its rows: the none policy's, less what it may drop
    recipe = recipe_for(req, cand)
    if solved and recipe.lora is not None:
        return resident  # the solver ranks full fine-tuning rows under LoRA (engine/recompute/plan.make_plan)
    try:
        plan, eager, outside_rows = bill_eager_parts(req.spec, recipe)
    except StepbillError:  # no eager bill for this model: the verdict reads the ideal peaks
        return resident
    spec, par = req.spec, recipe.parallel
    # what a rank's activation rows are divided by (rank_share.row_divisor; rank_plan's other divisors read the same)
    rows_key = (spec, without_layout(recipe), solved, par.cp, par.tp, par.sp, par.expert_tp)
    best = resident
    # what a layer's own backward moments hold beyond its rows, the same on every stage (without rows: resting_floor,
    # one floor for every policy of the cell)
    extra = layer_extra(eager, par, every_policy=not rows)
    for side in stage_sides(req, recipe, plan, eager, outside_rows, rows_key):
        buf, resting = side.buffers, side.resting
        if rows:
            kept, live_of = stage_rows(rows_key, plan, recipe, side.order)
            # a layer's backward: its live activations, the other micro-batches' kept ones, its buffers (by kind), and
            # what its own moments hold beyond those (layer_extra)
            backward = max(live + buf.backward_of.get(k, 0.0) + max(0.0, beyond(extra.get(k, ()), live))
                           for k, live in live_of.items()) if live_of else 0.0
            # the optimizer step; the forward's last layer (the loss's backward on the last stage); each layer's
            # backward
            live = max(side.grads + buf.optimizer, resting + kept * side.flight + side.after_forward,
                       resting + kept * (side.flight - 1) + max(backward, buf.backward))
        else:  # the optimizer step; the forward's end with no row kept; a layer's backward with no row
            backward = max((buf.backward_of.get(k, 0.0) + max(0.0, beyond(extra.get(k, ()), 0.0))
                            for k in side.order), default=0.0)
            live = max(side.grads + buf.optimizer, resting + side.after_forward, resting + backward)
        best = max(best, side.on_gpu + live - ROUNDING_SLACK_BYTES)
        if best >= enough:
            break
    return best


def resting_floor(req: PlanRequest, cand: Candidate, enough: float = math.inf) -> float:
    """A lower bound (bytes) of the judged peak of the candidate under every recompute policy of its layout and
    micro-batch: peak_floor without rows — its optimizer-step and after-forward moments with no activation row held:
    the weights and optimizer states, then every gradient and the step's buffers, or the resting gradients with the
    last layer's buffers and, on the last stage, the loss's backward (the outside-layer rows, the loss's activation
    change and fp32 temporaries). Every term is read of no recompute policy (the held bytes and the buffers are
    memoised on keys without one; the outside rows and the loss read the micro-batch, the sequence, cp and tp, the
    precision), so it is computed on the `none` policy, whose layout alone may take the measured FSDP2 / ZeRO-1 rules
    without the layout's buffers (the fewest bytes: exact_reason names every other policy approximate); the planner
    plans full fine-tuning (evaluate.recipe_for makes no LoRA). The search reads it for a candidate's whole cell
    before its own peak floor (branch_bound.sharpen): on DeepSeek-V3 × 64 it decides 85 % of the candidates whose
    resident bound could not. 0.0 without an eager bill."""
    return peak_floor(req, replace(cand, recompute="none"), 0.0, enough, rows=False)


def resting_key(holdings_layout: Parallel, offload_optimizer: bool, variant: tuple) -> tuple:
    """What resting_floor reads of a candidate (a group's holdings layout and optimizer offload, a variant (sp,
    micro-batch, micro-batches, activation offload, policy)), as a key: candidates with one key have one resting
    floor (tests/test_plan_bounds.py: equal, ==). Not the recompute policy (resting_floor reads none); not the
    pipeline schedule (time_layout: GPipe's is 1F1B's — the schedule reaches the rank's memory through the
    micro-batches in flight, which only the kept rows read, and the resting floor holds none); and activation
    offload only on a layout with tp = pp = cp = ep = 1, the one place it is read: the measured FSDP2 / ZeRO-1 rules
    (fsdp2_ranks.exact_reason: offload takes a layout off them, and with them the layout's buffers) cover no other.
    On DeepSeek-V3 × 64 H100 the search's 21,982 resting floors had 6,771 keys."""
    sp, micro_batch, micro_batches, offload_activations = variant[:4]
    par = holdings_layout
    read = offload_activations and par.tp * par.pp * par.cp * par.ep == 1
    return (time_layout(par), offload_optimizer, sp, micro_batch, micro_batches, read)


class StageSide(NamedTuple):
    """What a rank of a group of pipeline stages (peak_floor's `_stage_groups`: the same rows, the same layers) holds
    at peak_floor's moments besides its activation rows, on the group's first stage (the most micro-batches in
    flight; every term grows with them), bytes unless said."""

    order: tuple[str, ...]  # the stages' layer kinds in order
    stage: int  # the group's first stage
    flight: float  # micro-batches in flight on the first stage (in_flight_microbatches)
    on_gpu: float  # weights + optimizer states on the GPU
    grads: float  # every gradient
    resting: float  # the gradients held between micro-batches (all of them under accumulation, none otherwise)
    buffers: StageBuffers
    #: besides the kept rows in flight, the most held after the forward: the last layer's buffers, or on the last
    #: stage (with an eager bill) the loss's backward — the logits' inputs, the loss's activations and fp32
    #: temporaries, its buffers — when that is more
    after_forward: float


def stage_sides(req: PlanRequest, recipe: Recipe, plan: RecomputePlan, eager: EagerTerms | None,
                 outside_rows: Callable | None, rows_key: tuple) -> Iterator[StageSide]:
    """Each group's StageSide for `recipe` (its eager plan, terms and outside-layer rows: bill_eager_parts), in stage
    order; `rows_key`: what its rows read (peak_floor's)."""
    spec, par = req.spec, recipe.parallel
    # the layout's buffers (parallel/buffers.py) are on the timeline of the approximate per-stage model only; the
    # measured FSDP2 / ZeRO-1 rules place their own (engine/bill_parts.verdict_ranks: which model judges)
    with_buffers = not par.is_trivial and bool(exact_reason(spec, recipe, "eager"))
    # what a stage's held bytes read (holdings.held_key, with the precision, optimizer and LoRA) and the optimizer
    # offload
    holding = (spec, recipe.precision, recipe.optimizer, recipe.lora, held_key(par))
    held = (holding, par.offload_optimizer)
    # what the buffers read (parallel/buffers.layout_buffers): the held grads and one unit's weights and grads
    # (Held.grads, unit_weights, unit_grads, unit_grads_held: the holding's), the ZeRO stage and group (DDP's
    # buckets read the group at ZeRO 0, where the held key does not), cp, tp, ep, sp, the tokens — not dp apart from
    # the groups, the schedule's name or offload, which would multiply the keys by four (~465,000 → ~150,000 in a
    # whole DeepSeek-V3 × 2,048 search)
    buffers_key = (holding, par.zero_group, par.cp, par.ep, par.sp, recipe.tokens,
                   par.offload_optimizer and not par.zero)  # DDP's buckets, not under offload
    m = par.micro_batches
    for rep, stage, order in _stage_groups(spec, par, plan.order):
        on_gpu, grads = _HELD.get((held, rep), _stage_held, spec, recipe, stage)
        buf = _BUFFERS.get((buffers_key, rep, order), stage_buffers, spec, recipe, order,
                           stage) if with_buffers and order else NO_BUFFERS
        after = buf.forward_last
        if stage == par.pp - 1 and eager is not None and outside_rows is not None:
            outside = _MEMO.get(("outside", *rows_key), outside_rows, row_divisor(recipe))
            loss = _MEMO.get(("loss", spec, rows_key[1], par.cp * par.tp), _loss_bytes, spec, recipe, stage, eager)
            after = max(after, outside + loss + buf.loss)
        yield StageSide(order, stage, in_flight_microbatches(recipe, stage), on_gpu, grads,
                        grads if m > 1 else 0.0, buf, after)


#: peak_floor's memos, each on what its value reads (see the callers' keys; engine/memo.Memo: emptied when full).
_HELD = Memo(MEMO_MAX)
_BUFFERS = Memo(ROWS_MEMO_MAX)


def _stage_held(spec: ModelSpec, recipe: Recipe, stage: int) -> tuple[float, float]:
    """(weights + optimizer states on the GPU, every gradient on the GPU at the optimizer step) of a rank of
    `stage`, bytes: holdings.stage_held, rank_holdings' held bytes without its other sums (equal, bit for bit:
    tests/test_resident_bound.py); under optimizer offload the optimizer side and the gradients are in host memory
    (parallel/ranks._cpu_items, memory/timeline.RankView.grads_offloaded)."""
    held = stage_held(spec, recipe.precision, recipe.optimizer, recipe.lora, recipe.parallel, stage)
    weights = sum(v for k, v in held.items() if k.startswith("weights"))
    if recipe.parallel.offload_optimizer:
        return weights, 0.0
    return weights + sum(v for k, v in held.items() if k.startswith(OPTIMIZER_SIDE)), held.get("grads", 0.0)


def _stage_groups(spec: ModelSpec, par: Parallel, order: tuple[str, ...]) -> tuple[tuple[int, int, tuple[str, ...]], ...]:
    """(representative stage, the first stage so represented, its layer kinds in order) for each distinct pair:
    stages holding the same rows and running the same layers (`order`: the model's layer kinds) have the same
    terms. Memoised on what it reads (layout.stage_layer_indices and representative_stage read the pipeline's
    stages, chunks and split only). Shared: read it, never change it."""
    return _GROUPS.get((spec, par.pp, par.vpp, par.pp_layers, order), _groups_of, spec, par, order)


def _groups_of(spec: ModelSpec, par: Parallel, order: tuple[str, ...]) -> tuple[tuple[int, int, tuple[str, ...]], ...]:
    groups: dict[tuple[int, tuple[str, ...]], int] = {}
    for stage, layers in enumerate(stage_layer_indices(spec, par)):
        groups.setdefault((representative_stage(spec, par, stage), tuple(order[i] for i in layers)), stage)
    return tuple((rep, stage, kinds) for (rep, kinds), stage in groups.items())


_GROUPS = Memo(MEMO_MAX)


@dataclass(frozen=True)
class StageBuffers:
    """The layout's buffers (bytes) a stage's timeline holds at the moments peak_floor reads: the optimizer step,
    the forward of the stage's last layer, the backward of its layer with the largest, the loss's backward."""

    optimizer: float = 0.0
    forward_last: float = 0.0
    backward: float = 0.0  # the largest over the stage's layers
    loss: float = 0.0
    backward_of: dict[str, float] = field(default_factory=dict)  # a layer's backward, by its kind


NO_BUFFERS = StageBuffers()


def stage_buffers(spec: ModelSpec, recipe: Recipe, order: tuple[str, ...], stage: int) -> StageBuffers:
    """parallel/buffers.layout_buffers of a rank of `stage` running `order`, at peak_floor's moments
    (memory/timeline.eager_moments' items: the optimizer step's Part.STEP, the forward's Part.LAYER of the last
    layer, every layer's backward Part.LAYER, the loss's Part.LOSS) — the same function the rank's timeline reads,
    so each is that moment's `buffers` item."""
    buffers = layout_buffers(spec, recipe, order, rank_holdings(spec, recipe, stage))[0]
    # a layer's buffers read its kind only
    backward_of = {kind: float(buffers(Phase.BACKWARD, Part.LAYER, order.index(kind))) for kind in dict.fromkeys(order)}
    return StageBuffers(buffers(Phase.OPTIMIZER, Part.STEP, None), buffers(Phase.FORWARD, Part.LAYER, len(order) - 1),
                        max(backward_of.values()), buffers(Phase.BACKWARD, Part.LOSS, None), backward_of)


def least_kept(plan: RecomputePlan) -> RecomputePlan:
    """The `none` plan with every droppable row dropped: what any budget policy keeps at least. The solver drops
    droppable rows only (engine/recompute/budget.py: its items) and keeps the rest of the none policy's rows
    (recompute/plan.make_plan, `drop`), so each layer's kept rows — and their bytes on any rank (for_rank sums the
    kept rows) — contain these."""
    layers = {k: replace(lp, kept=tuple(t for t in lp.kept if not t.recompute.droppable),
                         dropped=lp.dropped + tuple(t for t in lp.kept if t.recompute.droppable))
              for k, lp in plan.layers.items()}
    return replace(plan, layers=layers)


def stage_rows(rows_key: tuple, plan: RecomputePlan, recipe: Recipe, order: tuple[str, ...]
                ) -> tuple[float, dict[str, float]]:
    """(kept activation bytes per micro-batch after the forward, and the most alive in the backward of a layer of
    each kind — a layer's buffers read its kind only) on a stage
    running `order`: rank_plan's kept_after_forward and backward_live, which the timeline's last forward Part.LAYER
    and its backward Part.LAYER moments hold plus items ≥ 0. Under activation offload, nothing is kept and the
    backward is RecomputePlan.offloaded's. A budget candidate (rows_key[2]) reads least_kept(plan): its layers keep and
    drop the `none` rows (segment 1), so its backward holds the rows kept before the layer plus the layer's every
    row, and least_kept keeps the fewest. Memoised on what it reads: the rows (rows_key), the order, the offload."""
    return _ROWS.get((rows_key, order, recipe.parallel.offload_activations), _rows_of, rows_key, plan, recipe, order)


def _rows_of(rows_key: tuple, plan: RecomputePlan, recipe: Recipe, order: tuple[str, ...]
             ) -> tuple[float, dict[str, float]]:
    if rows_key[2]:
        least = (rows_key[0], rows_key[1])
        if least not in _LEAST:
            _LEAST.clear()  # one model and recipe at a time, as a search runs
            _LEAST[least] = least_kept(plan)
        plan = _LEAST[least]
    rank = rank_plan(plan, recipe, order)
    offload = recipe.parallel.offload_activations
    kept = 0.0 if offload else rank.kept_after_forward()
    most: dict[str, float] = {}  # the most alive in the backward of a layer of each kind
    for kind, live in zip(order, (rank.offloaded() if offload else rank).backward_live(), strict=True):
        most[kind] = max(live, most.get(kind, live))
    return kept, most


_ROWS = Memo(ROWS_MEMO_MAX)
_LEAST: dict[tuple, RecomputePlan] = {}  # least_kept of the last one-GPU plan a budget candidate read


def _loss_bytes(spec: ModelSpec, recipe: Recipe, stage: int, eager: EagerTerms) -> float:
    """The loss's activation change and fp32 temporaries on a rank of the last stage (rank_eager): EagerTerms.for_rank
    divides both by its `vocab` divisor alone (cp × tp), so peak_floor memoises them on that."""
    e = rank_eager(eager, recipe, rank_holdings(spec, recipe, stage), param_inventory(spec), spec)
    return e.loss_act + e.loss_temp


#: peak_floor's memo: the last stage's outside-layer bytes depend only on the model, the one-GPU recipe
#: (bill_eager_parts' rows) and the row divisors (row_divisor: cp, tp, sp, expert tp), the loss's bytes on cp × tp
#: (_loss_bytes) — the same for every ZeRO stage, pipeline schedule, expert degree and optimizer offload of a layout,
#: which the planner varies most. Cleared when full (as _ROWS, _HELD and _BUFFERS).
_MEMO = Memo(MEMO_MAX)


def time_floor(req: PlanRequest, cand: Candidate, recipe: Recipe | None = None) -> float:
    """A lower bound of the candidate's time.step (s) under `stepbill bill`; the policy must be explicit. The same
    with and without activation offload (its PCIe traffic is the floor's zero)."""
    return time_floor_terms(req, cand, recipe).t_step


def time_floor_terms(req: PlanRequest, cand: Candidate, recipe: Recipe | None = None) -> StepTerms:
    """The numbers of the candidate's time floor (`time_floor` is their t_step). Shared: read them, never change
    them."""
    recipe = recipe or recipe_for(req, cand)
    return empty_rank_time(req.spec, recipe, req.gpu, req.efficiency)


@lru_cache(maxsize=1 << 16)
def time_layout(par: Parallel) -> Parallel:
    """The layout as the floors' step time reads it: a GPipe layout is read as the same layout under 1F1B. The step
    time reads the schedule through the bubble alone, comm.pipeline_bubble(pp, v·m) — the same for both — and the
    schedule's other effect, the micro-batches in flight (parallel/rank_share.in_flight_microbatches), is memory, which
    the floors' rank does not hold (EMPTY_RANK). So every floor of this module and of budget_bound.budget_floor
    (not its fitted form, which reads the peak) is the same for a candidate and its time layout's
    (tests/test_plan_bounds.py: equal, ==); floor_pass.floors computes them once per time layout."""
    return par.with_fields(pp_schedule="1f1b") if par.pp_schedule == "gpipe" else par


@lru_cache(maxsize=256)
def time_policy(policy: str) -> str:
    """An explicit recompute policy (not the budget solver's unsolved one) as the floors' step time reads it, by its
    parsed kind (spec/recompute_policy.parse_recompute; memoised: a search asks per candidate): every:K as every K's.
    Under every:K each layer of a segment is rebuilt once whatever K (recompute/plan.make_plan: the same per-layer
    recompute FLOPs and reruns as every:1), and the segment length (RecomputePlan.segment) is read by the memory
    alone — the kept checkpoints and the backward's live rows. So the time floor of every:K is every:K''s
    (tests/test_plan_bounds.py: equal, ==); floor_pass.floors computes it once per variant."""
    return "every" if parse_recompute(policy).kind == "every" else policy


def offload_twin_floor(req: PlanRequest, cand: Candidate, twin: StepTerms) -> float:
    """time_floor of a candidate with optimizer offload from `twin`, the time floor's numbers of the same candidate
    without it (per-op model): the step time reads the optimizer offload in its offload terms alone
    (step_terms.offload_terms; the collectives, kernels and FLOPs read no offload field, and the floor's optimizer
    step is zero either way), so its t_step is step_terms.per_op_total of the twin's pipeline time, collectives and
    kernels with the candidate's offload terms — the same numbers through the same arithmetic as time_floor's
    (tests/test_plan_bounds.py: equal, ==)."""
    assert twin.comm is not None and req.efficiency is None, "the per-op model's numbers"
    return per_op_total(twin.t_pipe, twin.comm, twin.t_rank, floor_offload_terms(req, recipe_for(req, cand)))[1]


def offload_traffic_floor(req: PlanRequest, cand: Candidate) -> float:
    """A lower bound (s) of the step of a candidate with activation offload, sharper than time_floor's where the
    traffic dominates: the step is at least the PCIe time of the kept activations it moves, 2 × kept × micro-batches
    / PCIe (steptime's spill is at least the offload's hideable time less the rank's kernels, and the pipeline time
    at least those kernels, in both the per-op model and under `--efficiency`), where kept is the offloading rank's
    kept bytes per micro-batch on the eager convention (engine/bill.offloaded_rank) — at least the least of any
    stage's (stage_rows' kept_after_forward, the same rank plan the rank class reads; for the budget solver's
    candidates the rows no drop set drops, `least_kept`). 0.0 without activation offload or an eager bill (the bill
    then moves its own convention's bytes). Tested ≤ the bill's step, and equal to its traffic line on one stage
    (tests/test_plan_bounds.py)."""
    par = cand.parallel
    if not par.offload_activations:
        return 0.0
    solved = cand.recompute == BUDGET_AT_FREE
    if solved:
        cand = replace(cand, recompute="none")
    recipe = recipe_for(req, cand)
    try:
        plan, _, _ = bill_eager_parts(req.spec, recipe)
    except StepbillError:
        return 0.0
    kept_on_gpu = replace(recipe, parallel=replace(par, offload_activations=False))  # stage_rows' kept, not zero
    rows_key = (req.spec, without_layout(recipe), solved, par.cp, par.tp, par.sp, par.expert_tp)
    kept = min(stage_rows(rows_key, plan, kept_on_gpu, order)[0]
               for _, _, order in _stage_groups(req.spec, par, plan.order))
    return 2 * kept * par.micro_batches / pcie_copy_bytes_per_s(req.gpu)


def floor_offload_terms(req: PlanRequest, recipe: Recipe) -> OffloadTerms:
    """The offload terms of the floors' step time (step_terms.offload_terms of a rank holding nothing, EMPTY_RANK):
    what a candidate with optimizer offload adds to its twin's numbers without it."""
    held = rank_param_elements(req.spec, recipe, param_inventory(req.spec))
    return offload_terms(recipe, EMPTY_RANK, req.gpu, held)


@lru_cache(maxsize=64)
def empty_rank_time(spec: ModelSpec, recipe: Recipe, gpu: GPU, efficiency: float | None) -> StepTerms:
    """bill_step_terms with EMPTY_RANK (the numbers of bill_step_time's lines, no line made), the last few
    memoised: a budget candidate's floor reads the terms of its `none` twin, whose own floor the same group has just
    computed. Shared: read it, never change it."""
    return bill_step_terms(spec, recipe, EMPTY_RANK, gpu, efficiency)
