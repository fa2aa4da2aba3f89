"""Branch and bound over the candidates the resident bound leaves (search.py's docstring says why it is exact).

Two passes: floor_pass.floors gives every candidate its step-time floor (bounds.py; no bill) and, for a peak floor, its
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
key: on the whole DeepSeek-V3 × 2,048 space 9,402 budget bills became 2,473. A candidate with activation offload is
sharpened last to its kept activations' PCIe time (`offload_traffic`: bounds.offload_traffic_floor), which the
shared time floors leave at zero.

A cell's candidates (one group, sp, micro-batch size and count, activation offload: every recompute policy) enter
the queue as one lead, their node (`Node`): the least of their step-time floors, the group's resident bound. Its key
is at most each of theirs, so when the answer rules it out it rules them all out; when it does not, the cell's
resting floor (one for the whole cell) rejects them all past the budget or rules them all out at peak_to_beat, and
only else do their own leads enter the queue, with that floor as their peak floor. On the whole DeepSeek-V3 × 2,048
space the 2.45 M leads made, sorted and taken became 588,596 nodes and the 251,384 leads of the candidates whose
nodes could not decide them. Where a cell's least step-time floor is provably its `none` policy's
(engine/plan/cell_floor.py), the node carries that one and the other policies' floors are computed only when it gives
way (floor_pass.waited_floor, read with the node's): 331,586 time floors → 131,907 in the first pass and 32,430 at
the nodes that gave way, 150,389 budget floors → 79,727 and 3,711.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stepbill.engine.plan.answer import Answer
from stepbill.engine.plan.axes import BUDGET_AT_FREE
from stepbill.engine.plan.bounds import offload_traffic_floor, peak_floor, resting_floor, resting_key
from stepbill.engine.plan.budget_bound import budget_floor
from stepbill.engine.plan.evaluate import Row, budget_drops_nothing, judged, resolve_recompute
from stepbill.engine.plan.floor_pass import Progress, waited_floor
from stepbill.engine.plan.host_floor import host_floor_exceeded
from stepbill.engine.plan.leads import FITTED, PEAK, RESIDENT, RESTING, TRAFFIC, Lead, LeadQueue, Node, make_lead
from stepbill.engine.plan.peers import Peers
from stepbill.engine.plan.resident import HOST_BOUND, budget_bytes
from stepbill.engine.plan.space import Candidate, Group, PlanRequest, Variant
from stepbill.errors import StepbillError

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


def offload_traffic(req: PlanRequest, groups: Groups, lead: Lead, objective: str) -> Lead:
    """The lead of a candidate with activation offload, its time floor raised to the kept activations' PCIe time
    (bounds.offload_traffic_floor): the floors before leave that traffic at zero, which made the planner bill the
    offloading candidates whose kernels alone looked fast (Llama-3-8B × 8 H100: 46 bills → 272 once the traffic
    became the eager convention's, 89 with this floor; session 28)."""
    step = offload_traffic_floor(req, _candidate(groups, lead))
    return _remade(req, groups, lead, objective, max(step, lead[7]), lead[2], TRAFFIC)


def _sharper(groups: Groups, lead: Lead) -> int | None:
    """The sharper floor the lead has to compute before its bill, by the sharpness it gives (None: none left): the
    peak floor (PEAK), then for the budget solver's the fitted time floor (FITTED), then under activation offload the
    traffic floor (TRAFFIC)."""
    if lead[6] < PEAK:
        return PEAK
    variant = groups[lead[4]].variants[lead[5]]
    if lead[6] == PEAK and variant[4] == BUDGET_AT_FREE:
        return FITTED
    if lead[6] < TRAFFIC and variant[3]:  # activation offload
        return TRAFFIC
    return None


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
                  deadline_at: float | None, progress: Progress | None = None, nodes: Sequence[Node] = (),
                  peers: Peers | None = None) -> Billed:
    """Bill the leads best floor first; skip those `Answer.cannot_take`; sharpen a lead's peak floor (and a budget
    solver's time floor: `fit_budget`) before billing it, rejecting it when they show it cannot fit (module
    docstring). A sharpened lead that still comes first is decided at once, as a heap would pop it. A node (a cell's
    lead: `nodes`) is decided whole on its floors or its cell's resting floor, or else gives way to its candidates'
    own leads. Progress and the candidates a deadline leaves are counted in candidates. With `peers` (a partition's
    view of the rows the search's other partitions billed: peers.py) the answer also rules with their rows, read
    every PULL_EVERY leads and before each bill, and publishes its own."""
    answer = Answer(objective, k, req.global_batch_tokens is not None)
    fixed_batch = req.global_batch_tokens is not None
    rejected: dict[str, int] = {}
    by_bill = by_floor = by_bound = done = 0
    cells: dict[Cell, float] = {}  # the resting floors read so far (rest)
    waited: dict[tuple, float] = {}  # the floors that waited, computed so far (floor_pass.waited_floor)

    def count(lead: Lead) -> int:  # the candidates a lead stands for
        return len(nodes[-lead[5] - 1][0]) if lead[5] < 0 else 1

    queue = LeadQueue(leads)
    total = sum(map(count, leads))
    reported = 0
    if progress is not None:
        progress(0, total)  # the pass's total, before its first lead
    lead: Lead | None = None  # a sharpened lead that comes before every lead left
    since_pull = PULL_EVERY  # leads taken since the peers' rows were last read
    while lead is not None or queue:
        if deadline_at is not None and time.time() > deadline_at:
            left = sum(map(count, queue.left())) + (count(lead) if lead is not None else 0)
            return Billed(answer.rows, by_bill, by_floor, left, rejected, by_bound)
        if lead is None:
            lead = queue.pop()
        if peers is not None:
            since_pull += 1
            if since_pull >= PULL_EVERY:
                _pull(peers, answer)
                since_pull = 0
        n = count(lead)
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
                    if step is None:  # its floor waited for this (floor_pass.floors); the node's is one too
                        try:
                            step = max(waited_floor(req, group, group.variants[v], waited), lead[7])
                        except StepbillError:
                            rejected["layout_invalid"] = rejected.get("layout_invalid", 0) + 1
                            done += 1
                            continue
                    queue.push(make_lead(req, objective, fixed_batch, group, group.variants[v], step, peak, lead[4], v,
                                     RESTING))
                lead = None
                continue
        elif (step_kind := _sharper(groups, lead)) is not None:
            if step_kind == PEAK:
                sharper = sharpen(req, groups, lead, objective, to_beat, cells)
            elif step_kind == FITTED:
                sharper = fit_budget(req, groups, lead, objective)
            else:
                sharper = offload_traffic(req, groups, lead, objective)
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
        elif peers is not None and _pull(peers, answer) and answer.cannot_take(lead):
            by_floor += 1  # ruled out by rows another partition billed since
        else:
            reason, row = bill_lead(req, groups[lead[4]], lead[5])
            if row is not None:
                taken = answer.add(row)
                if peers is not None:
                    peers.publish(taken)
            by_bill += reason in BILLED  # billed (whether or not it fits)
            by_bound += reason == HOST_BOUND  # decided by plan/host_floor.py
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


#: Leads taken between two reads of the peers' rows (a read takes their lock: ~1 µs).
PULL_EVERY = 256


def _pull(peers: Peers, answer: Answer) -> bool:
    """Rule with the rows the other partitions billed since the last read; whether there were any."""
    news = peers.news()
    for taken in news:
        answer.take(taken)
    return bool(news)


#: bill_lead's reasons of a billed candidate: it fits, or its verdict says why not
BILLED = ("", "peak_over_budget", "host_over_budget")


def bill_lead(req: PlanRequest, group: Group, v: int) -> tuple[str, Row | None]:
    """Bill variant `v` of `group`: ("", its row) when it fits; ("peak_over_budget" or "host_over_budget", None)
    when billed and it does not (evaluate.judged); else (the reason it was not billed, None): HOST_BOUND when its
    host floor (plan/host_floor.py) already overfills the node."""
    try:
        cand = resolve_recompute(req, group.candidate(group.variants[v]))
    except StepbillError:
        return "layout_invalid", None
    if budget_drops_nothing(req, cand):  # its `none` twin is a candidate of the same group
        return "budget_drops_nothing", None
    if host_floor_exceeded(req, cand):  # its offloaded activations cannot fit the node's host memory
        return HOST_BOUND, None
    return judged(req, cand)
