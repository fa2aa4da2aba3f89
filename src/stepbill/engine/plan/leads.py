"""A lead: a candidate (or a node, the candidates of one cell) waiting in the branch and bound's queue with the
floors it has so far — what it holds, how it is made, and the queue that hands the leads out best first
(branch_bound.py takes them).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator

from stepbill.engine.plan.pareto import front_time
from stepbill.engine.plan.rank import objective_key
from stepbill.engine.plan.space import Group, PlanRequest, Variant

#: A candidate waiting for its bill: (objective key of its floors, its time floor as the fronts read time, its peak
#: floor in bytes, GPUs, group index, variant index, how sharp its floors are (RESIDENT … TRAFFIC), its
#: step-time floor in s). Tuples sort by the key, then the indices (a total order).
Lead = tuple[tuple[float, ...], float, float, int, int, int, int, float]
#: How sharp a lead's floors are: its peak floor the group's resident bound; its cell's activation-free floor
#: (bounds.resting_floor: the lead of a candidate its node gave way to, `bill_in_order`); bounds.peak_floor's
#: (`sharpen`); for the budget solver's, its time floor the fitted one (`fit_budget`); and under activation offload,
#: its time floor at least the kept activations' PCIe time (`offload_traffic`). A lead is billed once it has no
#: sharper step.
RESIDENT, RESTING, PEAK, FITTED, TRAFFIC = 0, 1, 2, 3, 4
#: A node: the candidates of one cell of a group (sp, micro-batch, micro-batches, activation offload; every recompute
#: policy) — their variant indices and their step-time floors (None: not computed until the node gives way, its
#: least known without it: plan/cell_floor.py) — which the first pass gives one lead, of the least of those floors
#: (branch_bound's module docstring).
Node = tuple[tuple[int, ...], tuple[float | None, ...]]


def make_lead(req: PlanRequest, objective: str, fixed_batch: bool, group: Group, variant: Variant, step: float,
              peak: float, index: int, v: int, sharpness: int) -> Lead:
    """The lead of variant `v` (`variant`) of `group` (index `index`) with these floors."""
    layout = group.holdings_layout  # its dp and GPUs: a variant changes neither
    tokens = layout.dp * variant[2] * variant[1] * req.seq  # Recipe.tokens_per_step: dp × micro-batches × micro-batch
    return (objective_key(objective, fixed_batch, step, layout.world, peak, tokens),
            front_time(fixed_batch, step, tokens), peak, layout.world, index, v, sharpness, step)


def sort_leads(leads: list[Lead]) -> None:
    """Sort `leads` in their tuples' order, as `leads.sort()` does, faster: by the first number of their keys alone
    (stable), then each run of equal first numbers by the whole tuple. Comparing the nested tuples themselves costs
    several times more (the whole DeepSeek-V3 × 2,048 search's 2.45 M leads: 7.6 s against 2.9 s) and almost every
    comparison is decided by that first number."""
    leads.sort(key=_first_of_key)
    start = 0
    for end in range(1, len(leads) + 1):
        if end == len(leads) or leads[end][0][0] != leads[start][0][0]:
            if end - start > 1:
                leads[start:end] = sorted(leads[start:end])
            start = end


def _first_of_key(lead: Lead) -> float:
    return lead[0][0]


class LeadQueue:
    """The leads best first (Lead tuples' order, a total order): sorted once, with a heap for the leads that come
    back sharpened. The same order as one heap of them all, at a sort's cost instead of a heap pop each (the search
    takes millions)."""

    def __init__(self, leads: list[Lead]) -> None:
        sort_leads(leads)
        self._sorted, self._next = leads, 0
        self._back: list[Lead] = []  # sharpened leads, a heap

    def __len__(self) -> int:
        return len(self._sorted) - self._next + len(self._back)

    def pop(self) -> Lead:
        """The best lead left (IndexError when none is)."""
        i = self._next
        if self._back and (i == len(self._sorted) or self._back[0] < self._sorted[i]):
            return heapq.heappop(self._back)
        self._next = i + 1
        return self._sorted[i]

    def before(self, lead: Lead) -> bool:
        """Whether a lead left comes before `lead`."""
        i = self._next
        return (i < len(self._sorted) and self._sorted[i] < lead) or bool(self._back and self._back[0] < lead)

    def push(self, lead: Lead) -> None:
        heapq.heappush(self._back, lead)

    def left(self) -> Iterator[Lead]:
        """The leads left, in no order."""
        yield from itertools.islice(self._sorted, self._next, None)
        yield from self._back
