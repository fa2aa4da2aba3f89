"""Branch and bound over the candidates the resident bound leaves (search.py's docstring says why it is exact).

Two passes: `floors` gives every candidate its step-time floor (bounds.py; no bill) and, for a peak floor, its
group's resident bound; `bill_in_order` takes them best key first (leads.LeadQueue) and skips each candidate that
can no longer reach the top K or a Pareto front (answer.Answer.cannot_take). The exact peak floor (bounds.peak_floor: a stage's
kept activations, the loss's moment; for the budget solver's candidates the rows no drop set can drop) costs about
as much as the time floor, and many candidates are skipped on the resident bound alone (on Llama-3-70B × 64 H100,
about three in four of those skipped), so it is computed only for a candidate that would otherwise be billed, and
only when its cell's resting floor (bounds.resting_floor: the same for every recompute policy of a layout,
micro-batch, sp and activation offload; computed once per cell) does not already decide it; the candidate then goes
back into the queue with its key made of the sharper floor (the key of `--objective memory` reads the peak). A
sharper floor above the budget rejects the candidate outright (reason `peak_floor_over_budget`: its judged peak is
at least the floor, so no bill of it can fit; on DeepSeek-V3 × 64 H100 these were 2,754 of 4,390 bills, mostly
budget-solver candidates whose correction steps each cost an eager bill). The floor is read only as far as it
decides: its stages stop once it passes the budget, or reaches the peak at which the answer's rows already rule the
candidate out (`Answer.peak_to_beat`). A budget-solver candidate that would still be billed first gets the step-time
floor of its policy if it fits (`fit_budget`: engine/plan/budget_bound.py) and goes back into the queue with that
key: on the whole DeepSeek-V3 × 2,048 space 9,402 budget bills became 2,473.

A cell's candidates (one group, sp, micro-batch size and count, activation offload: every recompute policy) enter
the queue as one lead, their node (`Node`): the least of their step-time floors, the group's resident bound. Its key
is at most each of theirs, so when the answer rules it out it rules them all out; when it does not, the cell's
resting floor (one for the whole cell) rejects them all past the budget or rules them all out at peak_to_beat, and
only else do their own leads enter the queue, with that floor as their peak floor. On the whole DeepSeek-V3 × 2,048
space the 2.45 M leads made, sorted and taken became 588,596 nodes and the 251,384 leads of the candidates whose
nodes could not decide them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from stepbill.engine.plan.answer import Answer
from stepbill.engine.plan.axes import BUDGET_AT_FREE
from stepbill.engine.plan.bounds import (
    floor_offload_terms,
    offload_twin_floor,
    peak_floor,
    resting_floor,
    resting_key,
    time_floor_terms,
    time_layout,
    time_policy,
)
from stepbill.engine.plan.budget_bound import budget_floor
from stepbill.engine.plan.cell_floor import none_floor_rises, same_busiest_stage
from stepbill.engine.plan.evaluate import (
    Row,
    budget_bytes,
    budget_drops_nothing,
    evaluate,
    recipe_for,
    resolve_recompute,
)
from stepbill.engine.plan.leads import FITTED, PEAK, RESIDENT, RESTING, Lead, LeadQueue, Node, make_lead
from stepbill.engine.plan.space import Candidate, Group, PlanRequest, Variant
from stepbill.engine.timing.step_terms import StepTerms
from stepbill.errors import StepbillError
from stepbill.spec.parallel import Parallel

Progress = Callable[[int, int], None]
#: The groups a lead's group index (Lead[4]) reads: the search's list, or a partition's (index → group).
Groups = Sequence[Group] | Mapping[int, Group]

#: A cell: candidates with one resting floor (bounds.resting_key: a layout read as its time layout, its optimizer
#: offload, sp, micro-batch size and count, activation offload where it is read; every recompute policy).
Cell = tuple
#: What `sharpen` returns for a lead its sharper floor shows cannot be taken (Answer.cannot_take of the lead remade
#: with it, which the search then need not make).
OUTRANKED = "outranked"
#: The rejection reason of a candidate whose exact peak floor exceeds the budget (engine/plan/space.REASONS).
PEAK_FLOOR_OVER_BUDGET = "peak_floor_over_budget"


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
    # kept per time layout, offload choice and floor key — and, per-op, every policy of the cell has one busiest
    # stage) leaves its other explicit policies' floors unset (None) until its node gives way to its candidates
    # (`bill_in_order`).
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
        for members, (none, waiting, policies) in zip(cells, waits, strict=True):
            deferred: tuple[int, ...] = ()
            if waiting:
                rises = rising.get(keys[none])
                if rises is None:
                    rises = rising[keys[none]] = _none_rises(req, group, variants[none], keys[none], known, twins,
                                                             unloaded)
                if rises and (req.efficiency is not None or same_busiest_stage(req, group.holdings_layout,
                                                                               variants[none][1], policies)):
                    deferred = waiting
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
                out.leads.append(make_lead(req, objective, fixed_batch, group, group.variants[kept[0]], floors_of[0],
                                           peak_floor_of_group, index, kept[0], RESIDENT))
            elif kept:  # the cell's node: its least floor, its group's resident bound
                step = min(f for f in floors_of if f is not None)
                if deferred:
                    step *= 1 - ROUNDING_SLACK
                out.nodes.append((tuple(kept), tuple(floors_of)))
                out.leads.append(make_lead(req, objective, fixed_batch, group, group.variants[kept[0]],
                                           step, peak_floor_of_group, index, -len(out.nodes), RESIDENT))
        out.decided += len(group.variants)
        if progress is not None:
            progress(out.decided, total)
    out.cpu_seconds = time.process_time() - cpu0
    return out


#: What of a cell may wait: its `none` variant's index, the indices of its other explicit policies' variants with
#: another floor key, and a policy of each of their time policies (bounds.time_policy), sorted; (None, (), ()) when
#: nothing may.
Waits = tuple[int | None, tuple[int, ...], tuple[str, ...]]
#: Relative room for the last digits of a node whose floors wait: floor_p ≥ floor_none holds of the model's real
#: numbers (cell_floor.py), and the two are rounded along different sums (relative differences ~1e-15).
ROUNDING_SLACK = 1e-12


def _waits(variants: Sequence[Variant], members: tuple[int, ...], keys: list[tuple]) -> Waits:
    """What of the cell `members` may wait for its node to give way (`floors`)."""
    none = next((v for v in members if variants[v][4] == "none"), None)
    if none is None:
        return None, (), ()
    waiting = tuple(v for v in members if variants[v][4] != BUDGET_AT_FREE and keys[v] != keys[none])
    policies: dict[str, str] = {}  # a policy of each time policy (every:K's for every K: bounds.time_policy)
    for v in waiting:
        policies.setdefault(keys[v][4], variants[v][4])
    return none, waiting, tuple(policies[p] for p in sorted(policies))


def _none_rises(req: PlanRequest, group: Group, variant: Variant, key: tuple, known: dict[tuple, float],
                twins: dict[tuple, StepTerms], unloaded: dict[tuple, StepTerms]) -> bool:
    """cell_floor.none_floor_rises of the `none` variant (its floor computed and kept in `known` as `_step_floor`
    does; its numbers those the group's twin or the group itself kept, else recomputed, memoised); False when the
    variant breaks a layout rule (its cell's floors are then each computed, and each rejected)."""
    try:
        cand = group.candidate(variant)
        if key in known:  # another cell's policies asked first: its numbers, kept or recomputed (memoised)
            terms = (twins if group.offload_optimizer else unloaded).get(key) or time_floor_terms(req, cand)
        else:
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
    offload choice found, by its floor key `key`, `_floor_key`) or computed and kept there — a budget candidate's budget_floor, an offload
    candidate's off its twin without offload (`twins`: their numbers, by floor key), else time_floor, whose numbers a
    group without offload keeps in `unloaded` for its offload twins. A floor found was computed for a valid candidate,
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


def sharpen(req: PlanRequest, groups: Groups, lead: Lead, objective: str, peak_to_beat: float = math.inf,
            cells: dict[Cell, float] | None = None) -> Lead | str | None:
    """The lead with a sharper peak floor (its key remade: `--objective memory` reads the peak); None when that floor
    exceeds the budget (usable − reserve): the judged peak is at least the floor, so no bill of the candidate can fit
    (engine/fit.rank_fit: it fits at headroom ≥ 0) — its verdict is decided without one. A lead with its resident
    bound first reads its cell's resting floor (`rest`: the same for every recompute policy, kept in `cells` once
    computed) and stops there when that decides — past the budget, or at `peak_to_beat` (Answer.peak_to_beat: a
    floor there already rules the lead out: OUTRANKED); else it gets bounds.peak_floor (PEAK), which stops reading
    stages once it decides."""
    group = groups[lead[4]]
    variant = group.variants[lead[5]]
    peak: float | str | None = lead[2]
    if lead[6] == RESIDENT:
        peak = rest(req, group, variant, lead[2], peak_to_beat, cells)
        if peak is None or isinstance(peak, str):
            return peak  # decided: None or OUTRANKED
    budget = budget_bytes(req, group.holdings_layout)  # reads the layout's degrees alone, which a variant keeps
    # read only as far as it decides: past the budget, or at a peak the answer's rows beat
    peak = peak_floor(req, group.candidate(variant), peak, enough=min(math.nextafter(budget, math.inf), peak_to_beat))
    if peak > budget:
        return None
    return _remade(req, groups, lead, objective, lead[7], peak, PEAK)


def rest(req: PlanRequest, group: Group, variant: Variant, peak: float, peak_to_beat: float,
         cells: dict[Cell, float] | None) -> float | str | None:
    """A peak floor `peak` of the variant (or of its whole cell, for a node) raised to its cell's resting floor
    (bounds.resting_floor, kept in `cells` by its bounds.resting_key once computed); None when that exceeds the
    budget (no candidate of the cell can fit), OUTRANKED when it reaches `peak_to_beat`. The floor is read only as
    far as it decides: stopped early it is still a floor of the cell, and it decides the cell's leads taken after
    this one, whose peak_to_beat is no larger (under the time objectives: their time floors are no smaller, the
    answer's rows only more); a lead it does not decide reads it as a lower bound."""
    budget = budget_bytes(req, group.holdings_layout)
    cell = resting_key(group.holdings_layout, group.offload_optimizer, variant)
    resting = cells.get(cell) if cells is not None else None
    if resting is None:
        resting = resting_floor(req, group.candidate(variant), min(math.nextafter(budget, math.inf), peak_to_beat))
        if cells is not None:
            cells[cell] = resting
    peak = max(peak, resting)
    if peak > budget:
        return None
    return OUTRANKED if peak >= peak_to_beat else peak


def fit_budget(req: PlanRequest, groups: Groups, lead: Lead, objective: str) -> Lead | None:
    """A sharpened lead of the budget solver (its policy unsolved) with the step-time floor of its policy if it fits
    (budget_bound.budget_floor(fitted=True): the recompute the budget forces), computed only once the lead would
    otherwise be billed (the floor reads the solver's staircases: ~0.6 ms, ~17 peak floors); None when no step of the
    solver lets it fit."""
    cand = _candidate(groups, lead)
    step = budget_floor(req, cand, fitted=True)
    if step == math.inf:
        return None
    return _remade(req, groups, lead, objective, max(step, lead[7]), lead[2], FITTED)


def _remade(req: PlanRequest, groups: Groups, lead: Lead, objective: str, step: float, peak: float,
            sharpness: int) -> Lead:
    """The lead with sharper floors: its step-time floor `step`, its peak floor `peak`."""
    group = groups[lead[4]]
    return make_lead(req, objective, req.global_batch_tokens is not None, group, group.variants[lead[5]], step, peak,
                 lead[4], lead[5], sharpness)


def _candidate(groups: Groups, lead: Lead) -> Candidate:
    group = groups[lead[4]]
    return group.candidate(group.variants[lead[5]])


def _sharper(groups: Groups, lead: Lead) -> bool:
    """Whether the lead has a sharper floor to compute before its bill: the peak floor, then for the budget solver's
    the fitted time floor."""
    return lead[6] < PEAK or (lead[6] == PEAK and groups[lead[4]].variants[lead[5]][4] == BUDGET_AT_FREE)


@dataclass
class Billed:
    """What the second pass found."""

    rows: list[Row]
    by_bill: int
    by_floor: int  # outranked: their floors cannot reach the top K or a front
    not_searched: int
    rejected: dict[str, int]
    by_bound: int = 0  # their peak floors exceed the budget (reason PEAK_FLOOR_OVER_BUDGET)


def bill_in_order(req: PlanRequest, groups: Groups, leads: list[Lead], objective: str, k: int,
                  deadline_at: float | None, progress: Progress | None = None, nodes: Sequence[Node] = ()) -> Billed:
    """Bill the leads best floor first; skip those `Answer.cannot_take`; sharpen a lead's peak floor (and a budget
    solver's time floor: `fit_budget`) before billing it, rejecting it when they show it cannot fit (module
    docstring). A sharpened lead that still comes first is decided at once, as a heap would pop it. A node (a cell's
    lead: `nodes`) is decided whole on its floors or its cell's resting floor, or else gives way to its candidates'
    own leads. Progress and the candidates a deadline leaves are counted in candidates."""
    answer = Answer(objective, k, req.global_batch_tokens is not None)
    fixed_batch = req.global_batch_tokens is not None
    rejected: dict[str, int] = {}
    by_bill = by_floor = by_bound = done = 0
    cells: dict[Cell, float] = {}  # the resting floors read so far (rest)
    waited: dict[tuple, float] = {}  # the floors that waited, computed so far (_waited_floor)

    def count(lead: Lead) -> int:  # the candidates a lead stands for
        return len(nodes[-lead[5] - 1][0]) if lead[5] < 0 else 1

    queue = LeadQueue(leads)
    total = sum(map(count, leads))
    reported = 0
    if progress is not None:
        progress(0, total)  # the pass's total, before its first lead
    lead: Lead | None = None  # a sharpened lead that comes before every lead left
    while lead is not None or queue:
        if deadline_at is not None and time.time() > deadline_at:
            left = sum(map(count, queue.left())) + (count(lead) if lead is not None else 0)
            return Billed(answer.rows, by_bill, by_floor, left, rejected, by_bound)
        if lead is None:
            lead = queue.pop()
        n = len(nodes[-lead[5] - 1][0]) if lead[5] < 0 else 1  # count(lead), inline: the loop takes ~1 M leads
        to_beat = answer.peak_to_beat(lead)
        if lead[2] >= to_beat:  # answer.cannot_take(lead)
            by_floor += n
        elif lead[5] < 0:  # a cell's node: its resting floor decides the whole cell, or its candidates go on alone
            group = groups[lead[4]]
            members, steps = nodes[-lead[5] - 1]
            peak = rest(req, group, group.variants[members[0]], lead[2], to_beat, cells)
            if peak is None:
                by_bound += n
                rejected[PEAK_FLOOR_OVER_BUDGET] = rejected.get(PEAK_FLOOR_OVER_BUDGET, 0) + n
            elif isinstance(peak, str):  # OUTRANKED: its candidates' to_beat is no larger, their floors no smaller
                by_floor += n
            else:
                for v, step in zip(members, steps, strict=True):
                    if step is None:  # its floor waited for this (`floors`)
                        try:
                            step = _waited_floor(req, group, group.variants[v], waited)
                        except StepbillError:
                            rejected["layout_invalid"] = rejected.get("layout_invalid", 0) + 1
                            done += 1
                            continue
                    queue.push(make_lead(req, objective, fixed_batch, group, group.variants[v], step, peak, lead[4], v,
                                     RESTING))
                lead = None
                continue
        elif _sharper(groups, lead):
            sharper = sharpen(req, groups, lead, objective, to_beat, cells) if lead[6] < PEAK \
                else fit_budget(req, groups, lead, objective)
            if sharper is None:  # it cannot fit
                by_bound += 1
                rejected[PEAK_FLOOR_OVER_BUDGET] = rejected.get(PEAK_FLOOR_OVER_BUDGET, 0) + 1
            elif isinstance(sharper, str):  # OUTRANKED
                by_floor += 1
            else:
                lead = sharper
                if queue.before(lead):
                    queue.push(lead)
                    lead = None
                continue  # decided on its sharper floors
        else:
            reason, row = bill_lead(req, groups[lead[4]], lead[5])
            if row is not None:
                answer.add(row)
            by_bill += reason in ("", "peak_over_budget")  # billed (whether or not it fits)
            if reason:
                rejected[reason] = rejected.get(reason, 0) + 1
        lead = None
        done += n
        if progress is not None and done - reported >= 256:
            progress(done, total)
            reported = done
    if progress is not None:
        progress(total, total)
    return Billed(answer.rows, by_bill, by_floor, 0, rejected, by_bound)


def _waited_floor(req: PlanRequest, group: Group, variant: Variant, waited: dict[tuple, float]) -> float:
    """The time floor of a variant whose floor waited (`floors`), kept in `waited` by its time layout, optimizer
    offload and floor key (the floors pass's sharing: the same floor)."""
    key = (time_layout(group.holdings_layout), group.offload_optimizer, _floor_key(variant))
    step = waited.get(key)
    if step is None:
        step = waited[key] = time_floor_terms(req, group.candidate(variant)).t_step
    return step


def bill_lead(req: PlanRequest, group: Group, v: int) -> tuple[str, Row | None]:
    """Bill variant `v` of `group`: ("", its row) when it fits; ("peak_over_budget", None) when billed and it does
    not; else (the reason it was not billed, None)."""
    try:
        cand = resolve_recompute(req, group.candidate(group.variants[v]))
    except StepbillError:
        return "layout_invalid", None
    if budget_drops_nothing(req, cand):  # its `none` twin is a candidate of the same group
        return "budget_drops_nothing", None
    row = evaluate(req, cand)
    return ("peak_over_budget", None) if row is None else ("", row)
