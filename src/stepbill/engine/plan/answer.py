"""The branch and bound's answer so far: the billed rows that fit, and whether a lead's floors can still enter the
top K or a Pareto front (branch_bound.py asks before each step).
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator

from stepbill.engine.plan.evaluate import Row
from stepbill.engine.plan.leads import Lead
from stepbill.engine.plan.pareto import front_time
from stepbill.engine.plan.peers import Taken
from stepbill.engine.plan.rank import row_key


class Answer:
    """The billed rows that fit, and what the top K and the two fronts need to know of them."""

    def __init__(self, objective: str, k: int, fixed_batch: bool) -> None:
        self.objective, self.k, self.fixed_batch = objective, k, fixed_batch
        self.rows: list[Row] = []
        self._top: list[tuple[float, ...]] = []  # the k best keys so far, ascending
        self._by_world: dict[int, float] = {}  # GPUs → the best front time among rows with that many
        self._worlds: list[int] = []  # its GPU counts ascending, ...
        self._fastest_upto: list[float] = []  # ... and the best front time among rows with at most that many
        self._peaks: list[float] = []  # the memory-vs-time staircase: peaks ascending ...
        self._times: list[float] = []  # ... times strictly descending

    def add(self, row: Row) -> Taken:
        """Add a billed row that fits; what `take` read of it (peers.Peers publishes that to other partitions)."""
        self.rows.append(row)
        taken = (row_key(self.objective, self.fixed_batch, row),
                 front_time(self.fixed_batch, row.step_s, row.tokens_per_step), row.world, row.peak_bytes)
        self.take(taken)
        return taken

    def take(self, taken: Taken) -> None:
        """Rule with a row's numbers (its objective key, front time, GPUs and peak: another partition's row, which
        is not added to `rows`)."""
        key, t, world, peak = taken
        bisect.insort(self._top, key)
        del self._top[self.k:]
        self._by_world[world] = min(t, self._by_world.get(world, t))
        self._worlds = sorted(self._by_world)
        self._fastest_upto = list(itertools.accumulate((self._by_world[w] for w in self._worlds), min))
        i = bisect.bisect_right(self._peaks, peak)
        if i and self._times[i - 1] <= t:
            return  # a row with no more memory is at least as fast
        first = bisect.bisect_left(self._peaks, peak)  # rows with this peak and a slower time leave, ...
        j = i
        while j < len(self._peaks) and self._times[j] >= t:
            j += 1  # ... as do rows with more memory that are no faster
        self._peaks[first:j], self._times[first:j] = [peak], [t]

    def cannot_take(self, lead: Lead) -> bool:
        """Whether a candidate with these floors can be neither in the top K nor on a front (search.py's module
        docstring): K rows beat its key, a row with no more GPUs is strictly faster, and a row with no more memory
        than its peak floor is strictly faster — its peak floor is at least `peak_to_beat`."""
        return lead[2] >= self.peak_to_beat(lead)

    def peak_to_beat(self, lead: Lead) -> float:
        """The least peak floor at which the lead cannot be taken, the rest of it as it is: the peak of the first
        staircase row strictly faster than its time floor, when its key and GPUs already rule it out of the top K and
        the GPUs-vs-time front (inf otherwise). Those two only grow stricter as rows are added, so a lead with at
        least this peak floor stays ruled out. (Under `--objective memory` the key reads the peak: a larger peak
        floor only raises it.)"""
        key, t, world = lead[0], lead[1], lead[3]
        if len(self._top) < self.k or not key > self._top[-1]:
            return math.inf
        j = bisect.bisect_right(self._worlds, world)  # the fastest row with no more GPUs
        if not j or not self._fastest_upto[j - 1] < t:
            return math.inf
        i = bisect.bisect_right(self._times, -t, key=operator.neg)  # times descend: the first strictly faster than t
        return self._peaks[i] if i < len(self._peaks) else math.inf
