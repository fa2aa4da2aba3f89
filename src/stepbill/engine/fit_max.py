"""The largest micro-batch or sequence length that fits each rank class on a card, by the bill's own fit verdict.

For a fixed recipe and layout, every rank class's peak grows with the micro-batch and with the sequence length
(activations and the layout's per-token buffers grow, resident state does not), so "fits" is a monotone
predicate: true up to some value, false above it. The search evaluates the bill (engine/bill.make_bill) and its
verdict (engine/fit.fit_verdict: the card's usable memory − the reserve, judged on the eager peak) at 1, 2, 4, ...
until every class fails or the value reaches its limit, then bisects each class's last-fit / first-fail bracket.
The answer of a class is therefore always an evaluated value that fits next to an evaluated value one step above
it that does not; the peaks of all evaluated values are checked to be non-decreasing (else a one-line error: the
answer would not be guaranteed).

Values: micro-batch in sequences, sequence length in tokens (in multiples of `seq_step`: tp under --sp, 2·cp
under context parallelism). Memory in bytes. Pure: no I/O; about 2 bills per evaluated value.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from stepbill.engine.bill import Bill, make_bill
from stepbill.engine.fit import Card, Fit, default_reserve, eager_bill_for, fit_verdict, user_reserve
from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import Recipe
from stepbill.spec.schema import BATCH, TOKENS

Axis = Literal["micro_batch", "seq"]
AXES: dict[str, Axis] = {"micro-batch": "micro_batch", "micro_batch": "micro_batch", "seq": "seq"}
AXIS_WORDS = {"micro_batch": "micro-batch", "seq": "seq"}
GIB = 2**30


@dataclass(frozen=True)
class Probe:
    """One evaluated value: the fit verdict of the bill there, and each judged class's resident bytes
    (weights + grads + optimizer, per GPU)."""

    value: int
    fit: Fit
    resident_bytes: dict[str, float]


@dataclass(frozen=True)
class ClassMax:
    """The answer for one rank class: the largest value that fits (None: not even the smallest), the peak and
    headroom there, and the first value above it (None when `largest` is the limit) with its peak."""

    rank_class: str
    ranks: int
    largest: int | None
    peak_bytes: float  # at `largest` (at the smallest value when nothing fits)
    headroom_bytes: float  # budget − peak at `largest`; negative when nothing fits
    next_value: int | None
    next_peak_bytes: float | None
    resident_bytes: float  # weights + grads + optimizer per GPU (does not change with the value)


@dataclass(frozen=True)
class FitMax:
    """The search's result: one ClassMax per rank class of the judged bill, and the value every class fits."""

    axis: Axis
    step: int  # values are multiples of it
    limit: int  # the largest value the inputs allow
    limit_reason: str
    fixed: dict[str, int]  # the other axis: {"seq": 4096} or {"micro_batch": 1}
    card: Card
    budget_bytes: float
    reserve_bytes: float
    convention: str  # the convention the verdicts were judged on (eager, or ideal as a fallback)
    classes: tuple[ClassMax, ...]
    evaluated: int  # values at which the bill was made
    #: the smallest value at which every rank class fits its card but the node's host memory cannot hold what the
    #: ranks offload (engine/fit_host.py), and that verdict in one line; None and "" when the host never limits
    host_value: int | None = None
    host_summary: str = ""

    @property
    def largest(self) -> int | None:
        """The largest value at which every rank class fits (None: nothing fits at the smallest value)."""
        values = [c.largest for c in self.classes]
        return None if any(v is None for v in values) else min(v for v in values if v is not None)

    @property
    def limited_by_memory(self) -> bool:
        """False when the answer is the limit itself (the card would take more than the inputs allow)."""
        return self.largest is None or self.largest < self.limit


def seq_step(tp: int, sp: bool, cp: int) -> int:
    """The granularity of a sequence length the layout accepts: tp must divide it under --sp, 2·cp under context
    parallelism (spec/parallel.validate_layout); 1 otherwise."""
    step = 1
    if sp and tp > 1:
        step = math.lcm(step, tp)
    if cp > 1:
        step = math.lcm(step, 2 * cp)
    return step


def axis_limit(spec: ModelSpec, axis: Axis, step: int) -> tuple[int, str]:
    """The largest value the inputs allow, and why: 2^20 sequences per micro-batch; 2^24 tokens, or the learned
    position table's rows (GPT-2 family), rounded down to a multiple of `step`."""
    if axis == "micro_batch":
        return BATCH.high, f"the largest micro-batch stepbill takes ({BATCH.high:,})"
    if spec.positions == "learned" and spec.max_position_embeddings < TOKENS.high:
        high, why = spec.max_position_embeddings, f"the {spec.max_position_embeddings:,} learned positions of {spec.name}"
    else:
        high, why = TOKENS.high, f"the longest sequence stepbill takes ({TOKENS.high:,} tokens)"
    return high // step * step, why


def largest_fitting(spec: ModelSpec, recipe: Recipe, card: Card, axis: Axis, *, reserve_gib: float | None = None,
                    convention: str = "ideal", attention: str = "sdpa", multiple_of: int = 1) -> FitMax:
    """The largest `axis` value (micro-batch or seq) at which each rank class of `recipe` on `card` fits, by the
    bill's fit verdict (usable − reserve, eager peak), the other axis held at the recipe's value. Values are
    multiples of `multiple_of` (and of the layout's sequence granularity, for seq)."""
    step = seq_step(recipe.parallel.tp, recipe.parallel.sp, recipe.parallel.cp) if axis == "seq" else 1
    step = math.lcm(step, multiple_of)
    limit, why = axis_limit(spec, axis, step)
    if limit < step:
        raise StepbillError(f"no {AXIS_WORDS[axis]} is a multiple of {step:,} within {why}")
    reserve = user_reserve(reserve_gib) if reserve_gib is not None else default_reserve(card, recipe.parallel)

    def probe(value: int) -> Probe:
        the_recipe = replace(recipe, micro_batch=value) if axis == "micro_batch" else replace(recipe, seq_len=value)
        bill = make_bill(spec, the_recipe, None, convention, attention)
        eager, missing = eager_bill_for(bill)
        judged: Bill = bill if bill.convention == "eager" or eager is None else eager
        fit = fit_verdict(bill, eager, card, reserve, missing)
        resident = {r.name: sum(r.memory[k] for k in ("weights", "grads", "optimizer")) for r in judged.ranks}
        return Probe(value, fit, resident)

    probes = search(probe, step, limit)
    check_monotone(probes, axis)
    first = probes[min(probes)]
    classes = tuple(_class_max(name, probes) for name in (r.rank_class for r in first.fit.ranks))
    fixed = {"seq": recipe.seq_len} if axis == "micro_batch" else {"micro_batch": recipe.micro_batch}
    host_limited = sorted(v for v, p in probes.items()
                          if p.fit.host is not None and all(r.fits for r in p.fit.ranks) and not p.fit.host.fits)
    host = probes[host_limited[0]].fit.host if host_limited else None
    return FitMax(axis, step, limit, why, fixed, card, first.fit.budget_bytes, reserve.total_bytes,
                  first.fit.convention, classes, len(probes), host_limited[0] if host_limited else None,
                  host.summary() if host is not None else "")


def search(probe: Callable[[int], Probe], step: int, limit: int) -> dict[int, Probe]:
    """Evaluate `probe` at step, 2·step, 4·step, ... (capped at `limit`) until every class fails, then bisect each
    class's bracket (last value that fits, first that does not) down to one step. Returns every evaluated value."""
    probes: dict[int, Probe] = {}

    def at(value: int) -> Probe:
        if value not in probes:
            probes[value] = probe(value)
        return probes[value]

    value = step
    while True:
        verdicts = at(value).fit.ranks
        if not any(_fits(at(value), r.rank_class) for r in verdicts) or value >= limit:
            break
        value = min(value * 2, limit)
    for name in [r.rank_class for r in at(step).fit.ranks]:
        good, bad = _bracket(probes, name)
        while good is not None and bad is not None and bad - good > step:
            middle = (good + bad) // 2 // step * step
            if _fits(at(middle), name):
                good = middle
            else:
                bad = middle
    return probes


def _fits(p: Probe, name: str) -> bool:
    """Class `name` fits its card, and the node's host memory holds what the ranks offload (engine/fit_host.py)."""
    return p.fit.for_class(name).fits and p.fit.host_fits


def _bracket(probes: dict[int, Probe], name: str) -> tuple[int | None, int | None]:
    """The largest evaluated value where class `name` fits and the smallest above it where it does not."""
    good = max((v for v, p in probes.items() if _fits(p, name)), default=None)
    above = [v for v, p in probes.items() if not _fits(p, name) and (good is None or v > good)]
    return good, min(above, default=None)


def check_monotone(probes: dict[int, Probe], axis: Axis) -> None:
    """Every class's peak never decreases as the value grows over the evaluated values (the search's premise)."""
    ordered = [probes[v] for v in sorted(probes)]
    for low, high in itertools.pairwise(ordered):
        for r in low.fit.ranks:
            after = high.fit.for_class(r.rank_class)
            if after.peak_bytes < r.peak_bytes:
                raise StepbillError(
                    f"the peak of {r.rank_class} falls from {r.peak_bytes / GIB:.2f} GiB at {AXIS_WORDS[axis]} "
                    f"{low.value:,} to {after.peak_bytes / GIB:.2f} GiB at {high.value:,}: not monotone, so the "
                    "largest value that fits cannot be found by search (not supported yet)")


def _class_max(name: str, probes: dict[int, Probe]) -> ClassMax:
    good, bad = _bracket(probes, name)
    smallest = probes[min(probes)]
    at = probes[good] if good is not None else smallest
    verdict = at.fit.for_class(name)
    nxt = probes[bad].fit.for_class(name) if bad is not None else None
    return ClassMax(name, verdict.ranks, good, verdict.peak_bytes, verdict.headroom_bytes, bad,
                    None if nxt is None else nxt.peak_bytes, at.resident_bytes.get(name, 0.0))


def nothing_fits_message(result: FitMax) -> str:
    """One line for a search where the smallest value does not fit: the worst class, its peak against the budget,
    and whether its resident state alone already exceeds the budget."""
    word = AXIS_WORDS[result.axis]
    smallest = result.step
    if result.host_value == smallest:
        return f"nothing fits: at {word} {smallest:,} every rank fits its card, but {result.host_summary}"
    worst = min((c for c in result.classes if c.largest is None), key=lambda c: c.headroom_bytes)
    budget = result.budget_bytes / GIB
    head = (f"nothing fits: at {word} {smallest:,} {worst.rank_class} peaks at {worst.peak_bytes / GIB:.2f} GiB > "
            f"budget {budget:.2f} GiB ({result.card.name}: usable {result.card.usable_bytes / GIB:.2f} GiB − reserve "
            f"{result.reserve_bytes / GIB:.2f} GiB)")
    if worst.resident_bytes > result.budget_bytes:
        return (f"{head}; its resident state alone (weights + grads + optimizer) is {worst.resident_bytes / GIB:.2f} "
                "GiB, above the budget before any activation: shard it (--zero, --tp, --pp), offload the optimizer "
                "or use LoRA")
    return (f"{head}; its resident state {worst.resident_bytes / GIB:.2f} GiB fits, the activations and buffers "
            f"at {word} {smallest:,} do not: recompute (--recompute full), --cp or a shorter --seq")
