"""What a rank may hold and what it holds at rest, for the planner: the budget (usable memory − reserve, as
`stepbill bill` judges it), the exact resident bound and, under optimizer offload, the host bound — each memoised per
request on what it reads.

`resident_bound` is the exact lower bound the search prunes with: a rank's weights + gradients + optimizer states
(engine/parallel/holdings.rank_holdings, what the rank holds after the tp / ep split and ZeRO sharding; the weights
alone under optimizer offload, whose optimizer side and gradients are in host memory) are all alive together at
the end of the backward, so every rank class's peak is at least that sum. When it exceeds the budget, no
micro-batch, recompute policy, sp or activation-offload choice can fit: each of those candidates is rejected with
the same verdict a full bill gives (tested against full bills in tests/test_plan_bounds.py). `host_bound` sums the
optimizer side the same held bytes put in host memory over the fullest node (engine/fit_host.py's placement).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stepbill.engine.fit import Card, Reserve, communicators, default_reserve, fit_budget, user_reserve
from stepbill.engine.fit_host import layout_fullest_node
from stepbill.engine.parallel.holdings import held_key, stage_held
from stepbill.engine.parallel.layout import representative_stage
from stepbill.engine.parallel.ranks import OPTIMIZER_SIDE
from stepbill.engine.plan.space import Group, PlanRequest
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import make_recipe


def card_for(req: PlanRequest) -> Card:
    """The card `stepbill bill` judges on: the catalog GPU, in its reference node or one of --host-mem GiB (made
    once a request: the search asks for every candidate it judges)."""
    memo = _memo(req)
    if memo.card is None:
        memo.card = Card.from_gpu(req.gpu).with_host(req.host_mem_gib)
    return memo.card


def reserve_for(req: PlanRequest, parallel: Parallel) -> Reserve:
    """The reserve `stepbill bill` keeps for this layout: --reserve, else engine/fit.py's default."""
    if req.reserve_gib is not None:
        return user_reserve(req.reserve_gib)
    return default_reserve(card_for(req), parallel)


def budget_bytes(req: PlanRequest, parallel: Parallel) -> float:
    """Usable memory − reserve (bytes): what a rank's peak must stay under. Memoised per request on the layout's
    NCCL communicators (engine/fit.communicators), the one thing of the layout the reserve reads (default_reserve;
    --reserve reads none of it)."""
    memo = _memo(req)
    key = communicators(parallel)
    found = memo.budgets.get(key)
    if found is None:
        found = memo.budgets[key] = fit_budget(req.gpu.usable_bytes, reserve_for(req, parallel))
    return found


def resident_bound(req: PlanRequest, holdings_layout: Parallel, offload_optimizer: bool,
                   stop_above: float = float("inf")) -> float:
    """The largest over pipeline stages of a rank's resident bytes on the GPU (weights + grads + master +
    optimizer states; the weights alone under offload): a lower bound of every rank class's peak.
    Stops at the first stage above `stop_above` (that stage alone decides the verdict)."""
    worst = 0.0
    for on_gpu in _stage_resident(req, holdings_layout, offload_optimizer):
        worst = max(worst, on_gpu)
        if worst > stop_above:
            break
    return worst


def _stage_resident(req: PlanRequest, holdings_layout: Parallel, offload_optimizer: bool) -> tuple[float, ...]:
    """Each pipeline stage's resident bytes on the GPU (rank_holdings' held items — engine/parallel/holdings.
    stage_held, equal to them — the optimizer side left out under offload), middle stages first (they hold the most
    layers). Memoised per request on holdings.held_key (what `held` reads of the layout) and the offload: the groups
    of a space that differ in the dp / cp split, the schedule or anything else `held` does not read share one entry,
    computed for the first layout met (the recipe's precision and optimizer come from the request alone; without
    LoRA, make_recipe's checks read no field of the layout)."""
    memo = _memo(req)
    held_of = held_key(holdings_layout)
    found = memo.resident.get((held_of, offload_optimizer))
    if found is None:
        pp = holdings_layout.pp
        stages = sorted(range(pp), key=lambda s: (s in (0, pp - 1), s))
        held = _held_by_class(req, holdings_layout, memo)
        on_gpu = {c: _on_gpu(items, offload_optimizer) for c, items in held.items()}
        found = tuple(on_gpu[representative_stage(req.spec, holdings_layout, s)] for s in stages)
        if len(memo.resident) >= MEMO_ENTRIES:
            memo.resident.clear()
            memo.held.clear()
        memo.resident[(held_of, offload_optimizer)] = found
    return found


def _held_by_class(req: PlanRequest, holdings_layout: Parallel, memo: _Memo) -> dict[int, dict[str, float]]:
    """Each stage class's held items (holdings.stage_held), memoised per request on holdings.held_key."""
    held_of = held_key(holdings_layout)
    held = memo.held.get(held_of)
    if held is None:
        recipe = make_recipe(req.recipe, req.optimizer, 1, req.seq, "none", None, None, holdings_layout,
                             req.optimizer_impl, req.device)
        classes = {representative_stage(req.spec, holdings_layout, s) for s in range(holdings_layout.pp)}
        held = {c: stage_held(req.spec, recipe.precision, recipe.optimizer, recipe.lora, holdings_layout, c)
                for c in classes}
        memo.held[held_of] = held
    return held


#: The rejection reason of a group or candidate whose offloaded bytes' lower bound overfills a node's host memory
#: (host_bound, plan/host_floor.py; engine/plan/space.REASONS).
HOST_BOUND = "host_resident_over_budget"


def host_bound(req: PlanRequest, holdings_layout: Parallel) -> float:
    """Under optimizer offload, a lower bound (bytes) of what the fullest node's GPUs offload: each rank's optimizer
    side (master + states, which parallel/ranks.cpu_items puts in host memory; its gradients and, under activation
    offload, its kept activations only add to it), summed over the fullest node as engine/fit_host.host_fit sums its
    ranks (fit_host.fullest_node: Megatron's rank order). It reads no micro-batch, recompute, sp or activation
    offload: one bound for a whole group (memoised on holdings.held_key and the world)."""
    memo = _memo(req)
    key = (held_key(holdings_layout), holdings_layout.world)
    found = memo.host.get(key)
    if found is None:
        found = layout_fullest_node(optimizer_side_per_stage(req, holdings_layout), holdings_layout,
                                    card_for(req).gpus_per_node)[0]
        if len(memo.host) >= MEMO_ENTRIES:
            memo.host.clear()
        memo.host[key] = found
    return found


def optimizer_side_per_stage(req: PlanRequest, holdings_layout: Parallel) -> list[float]:
    """Each pipeline stage's optimizer side (fp32 master + optimizer states) held by one of its ranks, bytes:
    what optimizer offload puts in host memory besides the gradients (parallel/ranks.cpu_items)."""
    held = _held_by_class(req, holdings_layout, _memo(req))
    side = {c: sum(v for k, v in items.items() if k.startswith(OPTIMIZER_SIDE)) for c, items in held.items()}
    return [side[representative_stage(req.spec, holdings_layout, s)] for s in range(holdings_layout.pp)]


def host_budget_exceeded(req: PlanRequest, group: Group) -> bool:
    """The group offloads its optimizer and the node's host memory (catalog or --host-mem; unknown: never) cannot
    hold even `host_bound`: none of its candidates can fit (engine/fit_host.HostFit.fits)."""
    if not group.offload_optimizer:
        return False
    budget = card_for(req).host_bytes
    return budget is not None and host_bound(req, group.holdings_layout) > budget


def _on_gpu(held: dict[str, float], offload_optimizer: bool) -> float:
    """Bytes of the held items on the GPU: all, or the weights alone under optimizer offload (the optimizer side
    and the gradients in host memory: parallel/ranks._cpu_items)."""
    return sum(v for k, v in held.items() if not (offload_optimizer and (k.startswith(OPTIMIZER_SIDE) or
                                                                           k == "grads")))


#: Entries a request's resident memo keeps before it starts over (a DeepSeek-V3 × 2,048 space needs ~1,800).
MEMO_ENTRIES = 1 << 16


@dataclass
class _Memo:
    """The last request's memo of budgets (by NCCL communicators), stage resident bytes (by held_key, offload) and
    held items per stage class (by held_key)."""

    req: PlanRequest
    budgets: dict[int, float] = field(default_factory=dict)
    resident: dict[tuple[Any, ...], tuple[float, ...]] = field(default_factory=dict)
    held: dict[tuple[Any, ...], dict[int, dict[str, float]]] = field(default_factory=dict)  # by stage class
    host: dict[tuple[Any, ...], float] = field(default_factory=dict)  # host_bound, by held_key and world
    card: Card | None = None  # card_for(req), made once


_last_memo: list[_Memo] = []


def _memo(req: PlanRequest) -> _Memo:
    """The memo of `req`, the request itself held: a search asks with one request object thousands of times, and
    hashing a request (its ModelSpec) would cost more than the memo saves; another request starts a new memo."""
    if not _last_memo or _last_memo[0].req is not req:
        _last_memo[:] = [_Memo(req)]
    return _last_memo[0]
