"""Collectives timed with a latency and a bandwidth term (alpha-beta), and the overlap rule of each.

    t(call) = NCCL base latency + steps × per-step latency(link) + ring bytes / (link bandwidth × protocol efficiency)

Steps of a ring over n ranks: all-reduce 2(n − 1), reduce-scatter / all-gather / all-to-all n − 1, a send/recv 1;
hierarchical (a group spanning nodes: `local` ranks per node over NVLink / PCIe, n / local nodes across) takes the
intra-node steps at the intra-node latency and the inter-node ones at the network's; an all-to-all spanning nodes
sends to its local − 1 node peers at the intra-node latency and to the group − local others at the network's (one
send per peer). The bandwidth term is the
collective's `seconds` from engine/parallel/collectives.py (ring volume at the link's line rate, hierarchical
already) over NCCL's protocol efficiency. Constants and their sources: timing/constants.py.

In nccl-tests' terms (all_reduce_perf): busbw = algbw × 2(n − 1)/n and algbw = S / t, so the bandwidth term above
is S · 2(n − 1)/n / busbw with busbw = line rate × protocol efficiency.

Overlap (when the rank's compute can hide a collective):
- TP all-reduce / all-gather / reduce-scatter, EP all-to-all, PP send/recv: on the critical path of each
  micro-batch (inside the pipeline's stage time).
- DP all-reduce, ZeRO-1 reduce-scatter, hybrid-shard replica all-reduce (once per step, bucketed): hide behind the
  last micro-batch's backward; the last gradient bucket (25 MiB, PyTorch DDP's default) cannot.
- ZeRO-2/3 reduce-scatter and ZeRO-3 backward all-gather (every micro-batch, prefetched): behind the backward;
  ZeRO-3's forward all-gather behind the forward; the first layer's gather cannot hide (1 / layers of it).
- ZeRO-1/2 weight all-gather after the optimizer step: exposed (once per step).
- CP's K/V ring: behind the attention kernels it feeds.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from stepbill.engine.memo import Memo
from stepbill.engine.parallel.collectives import Collective
from stepbill.engine.timing.constants import (
    GRAD_BUCKET_BYTES,
    NCCL_BASE_LATENCY_S,
    NCCL_PROTOCOL_EFFICIENCY,
    NCCL_STEP_LATENCY_S,
)

_STEPS = {"all-reduce": 2.0, "reduce-scatter": 1.0, "all-gather": 1.0, "all-to-all": 1.0}


def ring_steps(op: str, n: int) -> float:
    """Ring steps of one call over n ranks (a send/recv is one)."""
    return _STEPS[op] * (n - 1) if op in _STEPS else 1.0


def latency_per_call(c: Collective) -> float:
    """NCCL's latency of one call of `c` (seconds): base + steps × per-step latency of each link it crosses."""
    return _latency_per_call(c.op, c.group, c.link, c.local)


@lru_cache(maxsize=4096)
def _latency_per_call(op: str, group: int, link: str | None, local: int) -> float:
    """latency_per_call on what it reads (a planner times the same few calls for every candidate of a layout)."""
    links = (link or "").split("+")
    if len(links) == 2 and local >= 2 and op == "all-to-all":  # a send to each peer: local − 1 inside, the rest out
        return (NCCL_BASE_LATENCY_S + (local - 1) * NCCL_STEP_LATENCY_S.get(links[0], 0.0)
                + (group - local) * NCCL_STEP_LATENCY_S.get(links[1], 0.0))
    if len(links) == 2 and local >= 2:  # hierarchical: intra-node ring, then across the nodes
        nodes = max(1, group // local)
        return (NCCL_BASE_LATENCY_S + ring_steps(op, local) * NCCL_STEP_LATENCY_S.get(links[0], 0.0)
                + ring_steps(op, nodes) * NCCL_STEP_LATENCY_S.get(links[1], 0.0))
    return NCCL_BASE_LATENCY_S + ring_steps(op, group) * NCCL_STEP_LATENCY_S.get(links[-1], 0.0)


def collective_seconds(c: Collective) -> float:
    """Alpha-beta seconds of all of `c`'s calls in one step (0 when the link is unknown)."""
    if c.seconds is None:
        return 0.0
    return c.calls * latency_per_call(c) + c.seconds / NCCL_PROTOCOL_EFFICIENCY


def allreduce_seconds(message_bytes: float, n: int, busbw_bytes_per_s: float, link: str = "nvlink") -> float:
    """One flat ring all-reduce of `message_bytes` over n ranks at nccl-tests' bus bandwidth `busbw`:
    base + 2(n − 1) steps of latency + S · 2(n − 1)/n / busbw (nccl-tests doc/PERFORMANCE.md's busbw)."""
    return (NCCL_BASE_LATENCY_S + 2 * (n - 1) * NCCL_STEP_LATENCY_S[link]
            + message_bytes * 2 * (n - 1) / n / busbw_bytes_per_s)


def overlap_class(c: Collective, zero: int) -> str:
    """"critical" (each micro-batch's critical path), "once" (exposed once per step), "grad_once" (hides behind
    the last backward), "bwd" / "fwd" (hide behind every backward / forward), "attention" (behind attention)."""
    return _overlap_class(c.name, c.axis, c.overlap, zero)


@lru_cache(maxsize=4096)
def _overlap_class(name: str, axis: str, overlap: str, zero: int) -> str:
    """overlap_class on what it reads."""
    if axis in ("tp", "pp", "ep"):
        return "critical"
    if name.endswith("zero_allgather_weights"):
        return "once"
    if name.endswith(("grad_allreduce", "hybrid_replica_allreduce")):
        return "grad_once"
    if name.endswith("zero_reduce_scatter"):
        return "grad_once" if zero <= 1 else "bwd"
    if name.endswith("zero3_allgather_bwd"):
        return "bwd"
    if name.endswith("zero3_allgather_fwd"):
        return "fwd"
    if axis == "cp":
        return "attention"
    return "critical" if overlap != "yes" else "bwd"


class CommTiming(NamedTuple):
    """Seconds of the step's collectives by overlap class, and what of the hideable ones stays exposed. A
    NamedTuple, like StepTerms: made once per planner candidate."""

    critical_per_step: float  # TP / EP / PP: inside the pipeline stage time (all micro-batches)
    exposed_once: float  # ZeRO weight all-gather after the optimizer
    hideable: float  # every hideable collective's seconds
    hidden_spill: float  # what of the hideable ones compute cannot cover (tails included)
    by_name: dict[str, float]
    critical_by_axis: dict[str, float]  # tp / ep / pp seconds of the critical ones
    by_class: dict[str, float]  # seconds by overlap class (shared: read it, never change it)
    tails: dict[str, float]  # by class, the seconds that cannot hide (shared: read it, never change it)


def _hiding(micro_batches: int, t_forward: float, t_backward: float, t_attention: float, backward_rate: float = 0.0,
            attention_rate: float = 0.0) -> tuple[tuple[str, float, float], ...]:
    """Each hideable overlap class, in the order the spill sums them, with the window that hides it and how fast
    that window grows when the backward's grows at `backward_rate` and the attention's at `attention_rate`: a
    once-per-step gradient sync hides behind the last micro-batch's backward."""
    m = max(micro_batches, 1)
    return (("grad_once", t_backward / m, backward_rate / m), ("bwd", t_backward, backward_rate),
            ("fwd", t_forward, 0.0), ("attention", t_attention, attention_rate))


def comm_timing(collectives: list[Collective], zero: int, micro_batches: int, layers: int,
                t_forward: float, t_backward: float, t_attention: float) -> CommTiming:
    """Apply the overlap rules: `t_forward` / `t_backward` / `t_attention` are the rank's compute seconds (all
    micro-batches) that hide the collectives of each class. The tails that cannot hide: a once-per-step gradient
    sync's last bucket (GRAD_BUCKET_BYTES of a call), a per-micro-batch ZeRO collective's first layer of the first
    micro-batch."""
    key = (tuple(collectives), zero, micro_batches, layers)
    seconds, groups, tails, by_axis = _CLASS_SUMS.get(key, _class_sums, *key)
    spill = hideable = 0  # summed as sum() does, from the int 0, in the windows' order
    for cls, window, _ in _hiding(micro_batches, t_forward, t_backward, t_attention):
        group = groups.get(cls, 0.0)
        hideable += group
        if group > 0:
            spill += max(tails.get(cls, 0.0), group - window)
    return CommTiming(groups.get("critical", 0.0), groups.get("once", 0.0), hideable, spill, seconds, by_axis, groups,
                      tails)


def spill_shrink_rate(ct: CommTiming, micro_batches: int, t_forward: float, t_backward: float, t_attention: float,
                      backward_rate: float, attention_rate: float) -> float:
    """How fast `ct`'s hidden_spill (comm_timing with these micro-batches and windows) falls — its right derivative,
    negated — as the backward window grows at `backward_rate` and the attention window at `attention_rate` (the
    forward's does not move): the sum of the growth rates of the classes whose spill is past its tail. Each class's
    spill, max(tail, group − window), is convex in its window, so the spill falls at most this fast from here on
    (engine/plan/cell_floor.none_floor_rises)."""
    rate = 0.0
    for cls, window, grows in _hiding(micro_batches, t_forward, t_backward, t_attention, backward_rate,
                                      attention_rate):
        group = ct.by_class.get(cls, 0.0)
        if group > 0 and group - window > ct.tails.get(cls, 0.0):
            rate += grows
    return rate


#: comm_timing's sums by overlap class, per (collectives, ZeRO, micro-batches, layers): what the
#: overlap rules read besides the windows. A planner times every recompute variant of a layout and micro-batch
#: against the same collectives (a tuple of step_collectives' memoised, hash-once Collectives: a cheap key).
_CLASS_SUMS = Memo(1 << 16)


def _class_sums(collectives: tuple[Collective, ...], zero: int, micro_batches: int, layers: int
                ) -> tuple[dict[str, float], dict[str, float], dict[str, float], dict[str, float]]:
    """(seconds by collective name, by overlap class, the tails that cannot hide by class, the critical seconds by
    axis) of comm_timing. Shared: read them, never change them."""
    seconds: dict[str, float] = {}
    groups: dict[str, float] = {}
    tails: dict[str, float] = {}
    by_axis = {"tp": 0.0, "ep": 0.0, "pp": 0.0}
    per_layer, per_micro_batch = max(layers, 1), max(micro_batches, 1)
    for c in collectives:
        t, cls, bucket_share = _classed(c, zero)
        seconds[c.name] = t
        groups[cls] = groups.get(cls, 0.0) + t
        if cls == "critical":
            by_axis[c.axis] = by_axis.get(c.axis, 0.0) + t
        elif cls == "grad_once":
            tails[cls] = tails.get(cls, 0.0) + t * bucket_share
        elif cls in ("fwd", "bwd"):
            tails[cls] = tails.get(cls, 0.0) + t / per_layer / per_micro_batch
    return seconds, groups, tails, by_axis


def _classed(c: Collective, zero: int) -> tuple[float, str, float]:
    """(alpha-beta seconds, overlap class, the share of a call in its last gradient bucket) of one collective:
    what comm_timing sums, kept on the collective by ZeRO stage — a planner's candidates share
    step_collectives' memoised Collectives, so each is classed once. The Collective is frozen: the memo sits in
    its __dict__ beside its fields (eq, hash and repr never read it), as spec/schema.hash_once keeps a hash."""
    memo = c.__dict__.get(_CLASSED)
    if memo is None:
        memo = {}
        object.__setattr__(c, _CLASSED, memo)
    if zero not in memo:
        per_call = c.bytes / max(c.calls, 1)
        memo[zero] = (collective_seconds(c), overlap_class(c, zero),
                      min(1.0, GRAD_BUCKET_BYTES / max(per_call, 1.0)))
    return memo[zero]


_CLASSED = "_classed_by_zero"
