"""The values of the planner's newer axes, one function each: pipeline options (schedule, chunks, stage split),
every:K segment lengths and expert tensor-parallel degrees. Pure arithmetic on the model's shape; the rules that
reject values are counted by engine/plan/space.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stepbill.spec.parallel import pipeline_stage_layers

#: The recompute axis's stand-in for "the budget solver at the rank's free memory": engine/plan/evaluate.py
#: replaces it with `budget:<GiB>` (a size `stepbill bill --recompute` reads) before any bill is made.
BUDGET_AT_FREE = "budget:free"
#: `--fix recompute=every`: the every:K values the space searches (rather than one K).
EVERY_SEARCHED = "every"


@dataclass(frozen=True)
class Pipe:
    """One pipeline option of a (tp, pp, cp) point: schedule, model chunks per stage, explicit stage split."""

    schedule: str  # 1f1b | gpipe | interleaved
    vpp: int = 1
    pp_layers: tuple[int, ...] | None = None  # None: the bill's default split (Megatron-LM's)

    @property
    def key(self) -> tuple[str, int, tuple[int, ...] | None]:
        return (self.schedule, self.vpp, self.pp_layers)


def ends_lighter(n_layers: int, pp: int) -> tuple[int, ...] | None:
    """The default split (spec/parallel.pipeline_stage_layers) with one layer taken from the first and one from
    the last stage (they also hold the embedding and the LM head + loss) and given to the middle stages with the
    fewest layers, earliest first. None when there is no middle stage (pp < 3) or an end stage has one layer."""
    if pp < 3 or pp >= n_layers:  # no middle stage, or an end with at most one layer (not built: O(pp))
        return None
    default = list(pipeline_stage_layers(n_layers, pp))
    if default[0] < 2 or default[-1] < 2:
        return None
    default[0] -= 1
    default[-1] -= 1
    for _ in range(2):
        middle = min(range(1, pp - 1), key=lambda s: (default[s], s))
        default[middle] += 1
    return tuple(default)


def chunk_counts(n_layers: int, pp: int) -> list[int]:
    """Every v ≥ 2 (model chunks per stage) with pp·v dividing the layers (spec/parallel.validate_layout)."""
    if pp < 2:
        return []
    return [v for v in range(2, n_layers // pp + 1) if n_layers % (pp * v) == 0]


def pipes(n_layers: int, pp: int, schedules: list[str], vpps: list[int] | None,
          splits: list[tuple[int, ...] | None] | None) -> list[Pipe]:
    """The pipeline options searched at `pp`: each schedule; interleaved once per chunk count (`vpps`, None: every
    count `chunk_counts` gives), the others once per stage split (`splits`, None: the default and `ends_lighter`).
    An interleaved option takes no explicit split (not modelled by the bill)."""
    out: list[Pipe] = []
    for schedule in schedules:
        if schedule == "interleaved":
            if splits is not None and any(s is not None for s in splits):
                continue
            out += [Pipe(schedule, v) for v in (chunk_counts(n_layers, pp) if vpps is None else vpps)]
            continue
        if splits is not None:
            out += [Pipe(schedule, 1, s) for s in splits]
            continue
        alt = ends_lighter(n_layers, pp)
        out += [Pipe(schedule), *([Pipe(schedule, 1, alt)] if alt is not None else [])]
    return out


def segment_layers(n_layers: int, pp: int, pipe: Pipe) -> int:
    """Layers one recompute segment can span on a rank: an interleaved chunk's, else the largest stage's."""
    if pipe.schedule == "interleaved":
        return n_layers // (pp * pipe.vpp)
    if pipe.pp_layers is None and pp >= n_layers:  # a layer a stage at most (the split is not built: O(pp))
        return min(n_layers, 1)
    return max(pipeline_stage_layers(n_layers, pp, pipe.pp_layers))


def every_segments(n: int) -> list[int]:
    """The K of every:K searched for a stage of `n` layers: the divisors of n in [2, n/2] nearest √n from below
    and from above (every:K rebuilds each layer once whatever K, so K moves only the peak, lowest near √n:
    engine/recompute/plan.best_segment); when n has none (prime), ⌊√n⌋ and ⌈√n⌉ within [2, n − 1]."""
    root = math.sqrt(n)
    divisors = [k for k in range(2, n // 2 + 1) if n % k == 0]
    if divisors:
        below = [k for k in divisors if k <= root]
        above = [k for k in divisors if k > root]
        return sorted({*below[-1:], *above[:1]})
    return sorted({k for k in (math.floor(root), math.ceil(root)) if 2 <= k <= n - 1})


def expert_tp_degrees(ranks: int, ep: int) -> list[int]:
    """etp values at `ep`: 1, 2, 4, … with ep·etp dividing the stage's dp·cp·tp ranks (the bill re-cuts them,
    spec/parallel.Parallel). Whether etp divides the expert width is a rule, counted by the space."""
    out, etp = [], 1
    while ep * etp <= ranks:
        if ranks % (ep * etp) == 0:
            out.append(etp)
        etp *= 2
    return out
