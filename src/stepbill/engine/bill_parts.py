"""Parts of `make_bill` without the whole bill: the rank classes of a fit verdict, the step time of a judged rank,
the recompute plan and eager terms a rank's memory is built from. What the planner (engine/plan) reads; each is
make_bill's own step (bill.py's helpers), so the numbers are the bill's (tests/test_bill_verdict.py,
tests/test_steptime_terms.py, tests/test_bill_golden.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stepbill.engine import activations as act
from stepbill.engine.bill import (
    _convention_terms,
    _core,
    _outside_rows,
    _time_inputs,
    make_bill,
    offloaded_rank,
    without_layout,
)
from stepbill.engine.memory.eager import EagerTerms
from stepbill.engine.parallel import RankClass
from stepbill.engine.parallel.fsdp2_ranks import exact_reason
from stepbill.engine.parallel.ranks import stage_classes
from stepbill.engine.parallel.worst_stage import stage_peak, stage_worst
from stepbill.engine.recompute import RecomputePlan
from stepbill.engine.steptime import DEFAULT_EFFICIENCY, StepTime, step_time
from stepbill.engine.timing.step_terms import StepTerms, step_terms
from stepbill.errors import unknown_name
from stepbill.spec.hardware import GPU
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import validate_layout
from stepbill.spec.recipe import Recipe


def verdict_ranks(spec: ModelSpec, recipe: Recipe, convention: str = "eager", attention: str = "sdpa") -> list[RankClass]:
    """`make_bill(spec, recipe, None, convention, attention).ranks` — the same rank classes, numbers and lines —
    without the bill's other lines where the layout allows: under the approximate per-stage model the classes
    read only the plan, the eager terms and the holdings, so the one-GPU timeline, FLOPs, collectives and
    checkpoint lines are not made (what a fit verdict needs: engine/plan/evaluate.py). The one-GPU layout and the
    layouts the measured FSDP2 / ZeRO-1 rules cover read the one-GPU bill: there, the bill is made."""
    reason = _approximate(spec, recipe, convention)
    if not reason:
        return make_bill(spec, recipe, None, convention, attention).ranks
    return stage_classes(*_stage_inputs(spec, recipe, convention, attention), reason)


def verdict_peak(spec: ModelSpec, recipe: Recipe, convention: str = "eager", attention: str = "sdpa") -> float:
    """The worst rank class's peak (bytes): `max(c.memory["peak"] for c in verdict_ranks(...))` — all a fit verdict
    reads of them — under the approximate per-stage model without making the classes (ranks.stage_peak: one
    timeline per stage key); elsewhere from verdict_ranks' classes."""
    if not _approximate(spec, recipe, convention):
        return max(c.memory["peak"] for c in make_bill(spec, recipe, None, convention, attention).ranks)
    return stage_peak(*_stage_inputs(spec, recipe, convention, attention))


def verdict_worst(spec: ModelSpec, recipe: Recipe, convention: str = "eager", attention: str = "sdpa") -> RankClass:
    """`max(verdict_ranks(...), key=peak)` — the worst rank class (the first of the largest peak), as
    make_bill's `worst_rank` — its numbers, lines and timeline; under the approximate per-stage model made without
    the other classes (ranks.stage_worst: its name, stages and ranks are then its first stage's alone)."""
    reason = _approximate(spec, recipe, convention)
    if not reason:
        return max(make_bill(spec, recipe, None, convention, attention).ranks, key=lambda c: c.memory["peak"])
    return stage_worst(*_stage_inputs(spec, recipe, convention, attention), reason)


def _approximate(spec: ModelSpec, recipe: Recipe, convention: str) -> str:
    """Why the layout's rank classes come from the approximate per-stage model ('' where make_bill's classes are
    read: the one-GPU layout, a quantised recipe, the layouts the measured FSDP2 / ZeRO-1 rules cover)."""
    if recipe.parallel.is_trivial or recipe.precision.quant is not None:
        return ""
    return exact_reason(spec, recipe, convention)


def _stage_inputs(spec: ModelSpec, recipe: Recipe, convention: str, attention: str) -> tuple[Any, ...]:
    """What the approximate per-stage model reads of make_bill's core (stage_classes', stage_peak's and
    stage_worst's leading arguments), once the layout is checked as make_bill checks it."""
    core = _core(spec, recipe, convention, attention, None)
    validate_layout(spec, recipe.parallel, recipe.seq_len)
    return spec, recipe, core.inv, core.plan, core.eager, core.outside_rows


def rank_peaks(spec: ModelSpec, recipe: Recipe, convention: str = "eager", attention: str = "sdpa") -> list[float]:
    """Each rank class's peak (bytes), as make_bill's `ranks[i].memory["peak"]` (see verdict_ranks)."""
    return [c.memory["peak"] for c in verdict_ranks(spec, recipe, convention, attention)]


def bill_step_time(spec: ModelSpec, recipe: Recipe, worst: RankClass, gpu: GPU,
                   efficiency: float | None = DEFAULT_EFFICIENCY, convention: str = "ideal",
                   attention: str = "sdpa", offloaded: tuple[RankClass, str] | None = None) -> StepTime:
    """make_bill's step time (its `time`) with `worst` as the judged rank class (and `offloaded`: the class whose
    kept activations activation offload moves, engine/bill.offloaded_rank), without the bill's memory: the same
    recompute plan, collectives and FLOPs lines, the same step_time call. The planner's bounds give it a rank that
    holds nothing (engine/plan/bounds.py)."""
    core, collectives, flops = _time_inputs(spec, recipe, gpu, convention, attention)
    return step_time(spec, core.inv, recipe, worst, collectives, gpu, flops, efficiency, plan=core.plan,
                     offloaded=offloaded)


def bill_time(spec: ModelSpec, recipe: Recipe, gpu: GPU, efficiency: float | None = DEFAULT_EFFICIENCY,
              convention: str = "ideal", attention: str = "sdpa", eager_worst: RankClass | None = None) -> StepTime:
    """make_bill(spec, recipe, None, convention, attention, gpu, efficiency).time — its worst rank class by peak
    (verdict_worst: the same class's numbers) judged by bill_step_time — without the bill's other lines: what the
    planner's rows read (engine/plan/evaluate.py). `eager_worst`: the eager convention's worst class when the
    caller has it already (activation offload's traffic reads it: engine/bill.offloaded_rank)."""
    worst = verdict_worst(spec, recipe, convention, attention)  # the memory, in-flight and CPU numbers it reads
    offloaded = offloaded_rank(recipe, convention, worst, lambda: eager_worst if eager_worst is not None
                               else verdict_worst(spec, recipe, "eager", attention))
    return bill_step_time(spec, recipe, worst, gpu, efficiency, convention, attention, offloaded)


def bill_step_terms(spec: ModelSpec, recipe: Recipe, worst: RankClass, gpu: GPU,
                    efficiency: float | None = DEFAULT_EFFICIENCY, convention: str = "ideal",
                    attention: str = "sdpa") -> StepTerms:
    """bill_step_time's numbers (engine/timing/step_terms.py), the same call without its lines: what the planner's
    bounds read (engine/plan/bounds.py)."""
    core, collectives, flops = _time_inputs(spec, recipe, gpu, convention, attention)
    return step_terms(spec, core.inv, recipe, worst, collectives, gpu, flops, efficiency, plan=core.plan)


def bill_plan(spec: ModelSpec, recipe: Recipe, convention: str = "ideal", attention: str = "sdpa") -> RecomputePlan:
    """make_bill's recompute plan of `recipe` (one GPU, one micro-batch). Shared: read it, never change it."""
    return _convention_terms(spec, without_layout(recipe), convention, attention)[1]


def bill_eager_parts(spec: ModelSpec, recipe: Recipe, attention: str = "sdpa"
                     ) -> tuple[RecomputePlan, EagerTerms | None, Callable[[Callable[[act.ActTensor], float]], float] | None]:
    """make_bill's eager-convention recompute plan, eager terms and outside-layer bytes by row divisor (the last
    stage's logits and loss inputs) — what its rank classes are built from. Shared: read them, never change them."""
    if attention not in act.ATTENTIONS:
        raise unknown_name("attention implementation", attention, act.ATTENTIONS)
    a_bytes, plan, _, eager = _convention_terms(spec, without_layout(recipe), "eager", attention)  # as _core does
    return plan, eager, _outside_rows(spec, recipe, a_bytes)
