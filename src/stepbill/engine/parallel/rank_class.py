"""A rank class — one class of identical ranks and its memory — and what the per-rank model reads of the one-GPU
bill (SingleRank). Shared by the approximate per-stage model (ranks.py) and the measured FSDP2 / ZeRO-1 rules
(fsdp2_ranks.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from stepbill.engine.activations import ActTensor
from stepbill.engine.line import Line
from stepbill.engine.memory.eager import EagerTerms
from stepbill.engine.memory.timeline import Timeline
from stepbill.engine.params import ParamInventory
from stepbill.engine.recompute import RecomputePlan
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import Recipe

MEMORY_KEYS = ("weights", "grads", "optimizer", "model", "resident", "activations", "transient", "peak",
               "peak_forward", "peak_backward")
#: ranks[].model: rules measured against PyTorch (FSDPMemTracker / MemTracker), the approximate per-stage model,
#: or the seed's ideal accounting (not a measurement claim).
MEASURED_EXACT, APPROXIMATE, IDEAL = "measured-exact", "approximate", "ideal"


@dataclass(frozen=True)
class SingleRank:
    """What the per-rank model reads of the one-GPU bill (built once by make_bill; no bill inside the bill)."""

    model: ModelSpec
    recipe: Recipe
    inventory: ParamInventory
    plan: RecomputePlan
    timeline: Timeline
    eager: EagerTerms | None
    convention: str
    attention: str
    lines: dict[str, Line]
    resident: list[Line]
    activation_items: list[Line]
    outside_rows: Callable[[Callable[[ActTensor], float]], float] | None = None  # rank outside bytes by divisor


@dataclass(frozen=True)
class RankClass:
    """One class of identical ranks (a pipeline stage, or ranks with identical shards): its per-item lines,
    memory totals in bytes, the timeline they come from, and which model produced them."""

    name: str
    stages: tuple[int, ...]
    ranks: int
    layers: dict[str, int]
    in_flight: float
    resident_items: list[Line]
    activation_items: list[Line]
    transient_items: list[Line]
    memory: dict[str, float]
    cpu: dict[str, float] = field(default_factory=dict)
    owned: dict[str, float] = field(default_factory=dict)  # item bytes / holders: sums over all ranks to global
    model: str = APPROXIMATE  # measured-exact | approximate | ideal (the seed's accounting)
    notes: tuple[str, ...] = ()
    timeline: Timeline | None = field(default=None, compare=False, repr=False)


