"""The branch and bound's first pass (branch_bound.py's docstring): every candidate's step-time floor and, for a peak
floor, its group's resident bound — a lead per candidate, or one per cell (its node) — with each floor computed once
for the candidates that read the same numbers: a time layout's groups share theirs (GPipe's are 1F1B's:
bounds.time_layout), every:K's is every K's (bounds.time_policy), a candidate with optimizer offload reads its twin's
without it (bounds.offload_twin_floor), and a cell whose least floor is provably its `none` policy's
(plan/cell_floor.py) computes only that one until its node gives way (`waited_floor`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from stepbill.engine.plan.axes import BUDGET_AT_FREE
from stepbill.engine.plan.bounds import (
    floor_offload_terms,
    offload_twin_floor,
    time_floor_terms,
    time_layout,
    time_policy,
)
from stepbill.engine.plan.budget_bound import budget_floor
from stepbill.engine.plan.cell_floor import busiest_stage_dominates, none_floor_rises, same_busiest_stage
from stepbill.engine.plan.evaluate import recipe_for
from stepbill.engine.plan.leads import RESIDENT, Lead, Node, make_lead
from stepbill.engine.plan.space import Candidate, Group, PlanRequest, Variant
from stepbill.engine.timing.step_terms import StepTerms
from stepbill.errors import StepbillError
from stepbill.spec.parallel import Parallel

Progress = Callable[[int, int], None]


@dataclass
class Floors:
    """What the first pass found: the leads, and the candidates it rejected or did not reach."""

    leads: list[Lead] = field(default_factory=list)
    #: the cells its nodes stand for, a node's lead[5] = −(its index here + 1): each cell's variant indices and their
    #: step-time floors
    nodes: list[Node] = field(default_factory=list)
    rejected: dict[str, int] = field(default_factory=dict)
    decided: int = 0  # candidates of the groups it went through
    cpu_seconds: float = 0.0


def floors(req: PlanRequest, groups: list[tuple[int, Group, float]], objective: str, deadline_at: float | None,
           progress: Progress | None = None, total: int = 0) -> Floors:
    """The leads of `groups` ((index, group, its resident bound) in order): each candidate's time floor, and its
    group's resident bound for a peak floor (`sharpen` computes the exact one when it is needed). Stops starting
    groups once `deadline_at` (time.time()) has passed."""
    cpu0 = time.process_time()
    out = Floors()
    fixed_batch = req.global_batch_tokens is not None
    # What the groups so far of the current time layout (bounds.time_layout: GPipe's is 1F1B's) found, which the
    # next ones read: their floors by optimizer offload choice and floor key — a group of the same time layout and
    # choice has the same floors — and the time floors' numbers without offload, which a group with offload reads
    # (bounds.offload_twin_floor). search._shuffled keeps a time layout's groups together; a group that finds none
    # computes its own.
    # A cell whose least floor is its `none` policy's (plan/cell_floor.py: that floor rises with the recompute —
    # kept per time layout, offload choice and floor key — and, per-op, every explicit policy of the cell has one
    # busiest stage, or for the budget solver's that stage stays the busiest under any recompute) leaves the other
    # policies' floors unset (None) until its node gives way to its candidates (branch_bound.bill_in_order).
    # a Variants' cells, floor keys and what of each cell waits (groups share one Variants: space._Point)
    cells_of: dict[int, tuple[list[tuple[int, ...]], list[tuple], list[Waits]]] = {}
    layout: Parallel | None = None
    same_time: dict[bool, dict[tuple, float]] = {}
    unloaded: dict[tuple, StepTerms] = {}
    verdicts: dict[bool, dict[tuple, bool]] = {}
    for index, group, peak_floor_of_group in groups:
        if deadline_at is not None and time.time() > deadline_at:
            break
        if time_layout(group.holdings_layout) != layout:
            layout, same_time, unloaded, verdicts = time_layout(group.holdings_layout), {}, {}, {}
        known = same_time.setdefault(group.offload_optimizer, {})
        rising = verdicts.setdefault(group.offload_optimizer, {})
        twins = unloaded if group.offload_optimizer and req.efficiency is None else {}
        variants = group.variants
        if id(variants) not in cells_of:
            cells, keys = _cells(variants), [_floor_key(variant) for variant in variants]
            cells_of[id(variants)] = (cells, keys, [_waits(variants, members, keys) for members in cells])
        cells, keys, waits = cells_of[id(variants)]
        for members, wait in zip(cells, waits, strict=True):
            none = wait[0]
            deferred: tuple[int, ...] = ()
            if none is not None and (wait[1] or wait[3]):
                rises = rising.get(keys[none])
                if rises is None:
                    rises = rising[keys[none]] = _none_rises(req, group, variants[none], keys[none], known, twins,
                                                             unloaded)
                if rises:
                    deferred = _deferred(req, group.holdings_layout, variants[none][1], wait)
            kept: list[int] = []  # the cell's valid variants, and their floors (None: deferred)
            floors_of: list[float | None] = []
            for v in members:
                if v in deferred:
                    kept.append(v)
                    floors_of.append(None)
                    continue
                try:
                    floors_of.append(_step_floor(req, group, variants[v], keys[v], known, twins, unloaded))
                except StepbillError:
                    out.rejected["layout_invalid"] = out.rejected.get("layout_invalid", 0) + 1
                    continue
                kept.append(v)
            if len(kept) == 1:
                out.leads.append(make_lead(req, objective, fixed_batch, group, variants[kept[0]], floors_of[0],
                                           peak_floor_of_group, index, kept[0], RESIDENT))
            elif kept:  # the cell's node: its least floor, its group's resident bound
                step = min(f for f in floors_of if f is not None)
                if deferred:
                    step *= 1 - ROUNDING_SLACK
                out.nodes.append((tuple(kept), tuple(floors_of)))
                out.leads.append(make_lead(req, objective, fixed_batch, group, variants[kept[0]], step,
                                           peak_floor_of_group, index, -len(out.nodes), RESIDENT))
        out.decided += len(group.variants)
        if progress is not None:
            progress(out.decided, total)
    out.cpu_seconds = time.process_time() - cpu0
    return out


#: What of a cell may wait: its `none` variant's index, the indices of its other explicit policies' variants with
#: another floor key, a policy of each of their time policies (bounds.time_policy), sorted, and the indices of its
#: budget solver's variants; (None, (), (), ()) when nothing may.
Waits = tuple[int | None, tuple[int, ...], tuple[str, ...], tuple[int, ...]]
#: Relative room for the last digits of a node whose floors wait: floor_p ≥ floor_none holds of the model's real
#: numbers (cell_floor.py), and the two are rounded along different sums (relative differences ~1e-15).
ROUNDING_SLACK = 1e-12


def _waits(variants: Sequence[Variant], members: tuple[int, ...], keys: list[tuple]) -> Waits:
    """What of the cell `members` may wait for its node to give way (`floors`)."""
    none = next((v for v in members if variants[v][4] == "none"), None)
    if none is None:
        return None, (), (), ()
    waiting = tuple(v for v in members if variants[v][4] != BUDGET_AT_FREE and keys[v] != keys[none])
    policies: dict[str, str] = {}  # a policy of each time policy (every:K's for every K: bounds.time_policy)
    for v in waiting:
        policies.setdefault(keys[v][4], variants[v][4])
    budgets = tuple(v for v in members if variants[v][4] == BUDGET_AT_FREE)
    return none, waiting, tuple(policies[p] for p in sorted(policies)), budgets


def _deferred(req: PlanRequest, layout: Parallel, micro_batch: int, wait: Waits) -> tuple[int, ...]:
    """The variants of a cell whose `none` floor rises (`_none_rises`) that may wait: its other explicit policies'
    when every one has the `none` policy's busiest stage, its budget solver's when that stage cannot move under any
    drop set (plan/cell_floor.py; under `--efficiency` the `none` floor is the least on any stage)."""
    _, waiting, policies, budgets = wait
    per_op = req.efficiency is None
    deferred: tuple[int, ...] = ()
    if waiting and (not per_op or same_busiest_stage(req, layout, micro_batch, policies)):
        deferred = waiting
    if budgets and (not per_op or busiest_stage_dominates(req, layout, micro_batch)):
        deferred += budgets
    return deferred


def _none_rises(req: PlanRequest, group: Group, variant: Variant, key: tuple, known: dict[tuple, float],
                twins: dict[tuple, StepTerms], unloaded: dict[tuple, StepTerms]) -> bool:
    """cell_floor.none_floor_rises of the `none` variant, its floor computed and kept in `known` as `_step_floor`
    does; False when the variant breaks a layout rule (its cell's floors are then each computed, and each
    rejected)."""
    try:
        cand = group.candidate(variant)
        known[key], terms = _floor_of(req, group, cand, key, twins, unloaded)
    except StepbillError:
        return False
    assert terms is not None, "an explicit policy's floor has its numbers"
    return none_floor_rises(req, cand, terms, floor_offload_terms(req, recipe_for(req, cand)))


def _floor_key(variant: Variant) -> tuple:
    """The variant's floor key: the same time floor with and without activation offload, and for every K of
    every:K (bounds.time_policy); a budget candidate's is itself."""
    if variant[4] == BUDGET_AT_FREE:
        return variant
    return (*variant[:3], False, time_policy(variant[4]))


def _step_floor(req: PlanRequest, group: Group, variant: Variant, key: tuple, known: dict[tuple, float],
                twins: dict[tuple, StepTerms], unloaded: dict[tuple, StepTerms]) -> float:
    """The variant's step-time floor: read from `known` (the floors its time layout's groups with its optimizer
    offload choice found, by its floor key `key`, `_floor_key`) or computed and kept there — a budget candidate's
    budget_floor, an offload candidate's off its twin without offload (`twins`: their numbers, by floor key), else
    time_floor, whose numbers a group without offload keeps in `unloaded` for its offload twins. A floor found was computed for a valid candidate,
    and its sharers differ from that one in activation offload, every:K's K or GPipe for 1F1B, which no layout rule
    reads: the candidate is built only if not (StepbillError: it breaks a layout rule)."""
    step = known.get(key)
    if step is None:
        step = known[key] = _floor_of(req, group, group.candidate(variant), key, twins, unloaded)[0]
    return step


def _floor_of(req: PlanRequest, group: Group, cand: Candidate, key: tuple, twins: dict[tuple, StepTerms],
              unloaded: dict[tuple, StepTerms]) -> tuple[float, StepTerms | None]:
    """`_step_floor`'s computation: (the candidate's floor, the numbers of its time floor — None for a budget
    candidate's)."""
    if cand.recompute == BUDGET_AT_FREE:
        return budget_floor(req, cand, twin=twins.get((*key[:3], False, "none"))), None
    if key in twins:
        return offload_twin_floor(req, cand, twins[key]), twins[key]
    terms = time_floor_terms(req, cand)
    if not group.offload_optimizer:
        unloaded[key] = terms
    return terms.t_step, terms


def _cells(variants: Sequence[Variant]) -> list[tuple[int, ...]]:
    """The indices of `variants` by cell (sp, micro-batch, micro-batches, activation offload: every recompute policy
    of one), in order of their first variant."""
    cells: dict[tuple, list[int]] = {}
    for v, variant in enumerate(variants):
        cells.setdefault(variant[:4], []).append(v)
    return [tuple(members) for members in cells.values()]


def waited_floor(req: PlanRequest, group: Group, variant: Variant, waited: dict[tuple, float]) -> float:
    """The step-time floor of a variant whose floor waited (`floors`): its time floor, or a budget candidate's
    budget_floor; kept in `waited` by its time layout, optimizer offload and floor key (the floors pass's sharing:
    the same floor). branch_bound.bill_in_order asks, when the variant's node gives way."""
    key = _floor_key(variant)
    shared = (time_layout(group.holdings_layout), group.offload_optimizer, key)
    step = waited.get(shared)
    if step is None:  # computed as the floors pass computes one, with no twin at hand
        step = waited[shared] = _floor_of(req, group, group.candidate(variant), key, {}, {})[0]
    return step
