"""The rows the other partitions of a search have billed, shared between its worker processes, so that each
partition's branch and bound prunes against the whole space's answer so far rather than its own rows alone.

What is shared is what `Answer.cannot_take` reads of a row — its objective key, its front time, its GPUs, its peak —
never the row itself: a partition returns only the rows it billed, and the search merges those (search.py). Pruning
against another partition's rows stays exact: they are rows of the space, so a candidate that K of them beat on the
key, and a row with no more GPUs and one with no more memory beat strictly on time, is in neither the top K nor a
front of the whole space (branch_bound.py's argument, over more rows). What changes is how many candidates each
partition bills: with its own rows alone, 16 partitions of the whole DeepSeek-V3 × 2,048 space spent 57 CPU-s
against one process's 48 (memos warm), the difference being candidates a partition billed or sharpened that another's
rows already ruled out.

One shared array of fixed records, appended under a lock and read from where each reader stopped: records are never
changed once written, and a reader reads only below the count it read under the lock. When the array is full,
records are dropped (the partitions then prune against less: still exact).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: A shared record: its writer (a partition's number), GPUs, front time (s), peak (bytes), then the objective key's
#: numbers (rank.objective_key: 2 or 3; NaN-padded).
KEY_SLOTS = 3
RECORD = 4 + KEY_SLOTS
#: Records the array holds: the whole DeepSeek-V3 × 2,048 search bills ~2,000 candidates (0.4 MB at 56 B a record).
CAPACITY = 1 << 16

#: What Answer.take reads of a row: (objective key, front time, GPUs, peak bytes).
Taken = tuple[tuple[float, ...], float, int, float]


def shared_array(context: Any) -> tuple[Any, Any]:
    """The shared array of records and its count (whose lock guards both), made in the search's process before its
    workers start (they receive them as a pool initializer's arguments)."""
    return context.Array("d", CAPACITY * RECORD, lock=False), context.Value("q", 0)


@dataclass
class Peers:
    """One partition's view of the shared records: it publishes its rows under its own number and reads the others'
    from where it stopped."""

    records: Any  # the shared array (shared_array)
    count: Any  # the records written, with the lock
    writer: int  # this partition's number
    seen: int = 0  # records read so far (its own included)

    def publish(self, taken: Taken) -> None:
        """Append a record of one of this partition's rows (dropped when the array is full)."""
        key, t, world, peak = taken
        assert len(key) <= KEY_SLOTS, key
        record = [float(self.writer), float(world), t, peak, *key, *[math.nan] * (KEY_SLOTS - len(key))]
        with self.count.get_lock():
            n = self.count.value
            if n < CAPACITY:
                self.records[n * RECORD:(n + 1) * RECORD] = record
                self.count.value = n + 1

    def news(self) -> list[Taken]:
        """The other partitions' records written since the last call."""
        with self.count.get_lock():
            n = self.count.value
            flat = self.records[self.seen * RECORD:n * RECORD] if n > self.seen else []
        self.seen = n
        out: list[Taken] = []
        for i in range(0, len(flat), RECORD):
            writer, world, t, peak, *key = flat[i:i + RECORD]
            if int(writer) != self.writer:
                out.append((tuple(k for k in key if not math.isnan(k)), t, int(world), peak))
        return out
