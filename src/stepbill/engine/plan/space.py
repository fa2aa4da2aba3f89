"""The planner's candidate space: every layout of one model on one GPU kind, and the rules that cut it.

A candidate is a `Parallel` layout plus the micro-batch size and the recompute policy: exactly the options of one
`stepbill bill` command. The space (each axis's values, unless `--fix` pins it):

    world        --gpus N, or with --max-gpus N every power of two ≤ N and N itself
    tp           1, 2, 4, … ≤ world                      (a tp group inside a node unless --cross-node)
    pp           every divisor of world / tp, ≤ layers
    cp           1, 2, 4, … dividing world / (tp·pp)     (2·cp must divide the sequence: load-balanced causal CP)
    dp           world / (tp·pp·cp)
    ep           MoE: 1, 2, 4, … ≤ dp·cp·tp               (an ep·etp group inside a node unless --cross-node)
    etp          MoE: 1, 2, 4, … with ep·etp dividing dp·cp·tp (etp must divide the expert FFN width; an etp group
                 inside a node unless --cross-node)
    zero         0, 1, 2, 3 when dp·cp > 1 (one replica: 0 only, ZeRO has nothing to shard over); with zero ≥ 1
                 also hybrid sharding over one node's dp·cp ranks (--shard-group)
    schedule     1f1b; with pp > 1 also gpipe, and interleaved with every v ≥ 2 chunks per stage such that pp·v
                 divides the layers
    stage split  1f1b and gpipe: the bill's default (Megatron-LM's, spec/parallel.pipeline_stage_layers) and, with
                 pp ≥ 3, that split with one layer moved from the first and from the last stage (embedding, LM head
                 + loss) to the lightest middle stages (--pp-layers; engine/plan/axes.ends_lighter)
    offload      optimizer offload off / on; activation offload off / on
    sp           off / on when tp > 1
    micro-batch  --micro-batch B, else 1, 2, 4, … with dp·b·seq dividing --global-batch-tokens
    recompute    none, selective:core_attn, full; every:K for the divisors K of the segment's layers (the largest
                 stage's, an interleaved chunk's) nearest √ from below and above (axes.every_segments); the budget
                 solver at the rank's free memory (usable − reserve − resident, scaled to the solver's whole-model
                 units: engine/plan/evaluate.budget_policy). every:K and the budget go without
                 activation offload (it moves every kept tensor off the GPU, so they change no GPU byte)
    micro-batches  --global-batch-tokens / (dp·b·seq); without a global batch: 1, pp and 4·pp

Rules (each a rejection reason, counted in candidates): the ones `validate_layout` states (heads, kv heads, FFN
and expert widths, experts, layers, sequence for sp and cp), tp, etp and ep·etp groups inside a node, the global
batch a whole number of micro-batches, interleaving's micro-batches divisible by pp. Counting is group-wise: a rule
on a (tp, pp, cp) point, an ep or an etp rejects the candidates under it by multiplication, and the variants of a
group (micro-batch × sp × offload × recompute) are a lazy `Variants` sequence, not a tuple each. Not searched yet
(pin them with `--fix`, e.g. `--fix pp_layers=7,8,8,7` or `--fix recompute=every:5`): other stage splits, every:K
at other K or every:auto, budgets other than the rank's free memory, recompute modules other than core_attn.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from stepbill.engine.plan.axes import (
    BUDGET_AT_FREE,
    EVERY_SEARCHED,
    Pipe,
    every_segments,
    expert_tp_degrees,
    pipes,
    segment_layers,
)
from stepbill.engine.plan.fix import FIX_ALIASES as FIX_ALIASES  # re-exported: `--fix` lives in fix.py
from stepbill.engine.plan.fix import FIX_KEYS as FIX_KEYS
from stepbill.engine.plan.fix import parse_fix as parse_fix
from stepbill.errors import StepbillError
from stepbill.spec.hardware import GPU
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import Parallel, validate_layout
from stepbill.spec.recipe import TORCH_OPTIMIZER_IMPLS, default_optimizer_impl

RECOMPUTE_POLICIES = ("none", "selective:core_attn", "full")

#: Rejection reasons: key → the rule in words (the keys are what --json reports).
REASONS: dict[str, str] = {
    "tp_outside_node": "tp group larger than a node (--cross-node to allow)",
    "ep_outside_node": "ep·etp group larger than a node (--cross-node to allow)",
    "etp_outside_node": "etp group larger than a node (--cross-node to allow)",
    "tp_divides_model": "tp must divide the heads, kv heads and FFN / shared-expert widths",
    "ep_divides_experts": "ep must divide the routed experts",
    "etp_divides_experts": "etp must divide the expert FFN width",
    "budget_drops_nothing": "the budget at the rank's free memory drops nothing: the none policy's twin",
    "pp_layers": "pp (× vpp chunks) must fit and divide the layers",
    "seq_divides": "the sequence must divide by tp under sp and by 2·cp under cp",
    "batch_whole": "the global batch must be dp × micro-batch × micro-batches × seq, all whole",
    "interleaved_micro_batches": "interleaving needs micro-batches divisible by pp",
    "layout_invalid": "another layout rule of spec/parallel.py",
    "resident_over_budget": "weights + grads + optimizer states of a rank exceed the budget alone (exact bound)",
    "peak_over_budget": "a rank's peak exceeds usable memory − reserve",
    "host_over_budget": "the ranks fit, but what a node's GPUs offload exceeds its host memory (engine/fit_host.py)",
    "host_resident_over_budget": "what a node's GPUs must offload (optimizer states; under activation offload, the "
    "kept activations too) exceeds its host memory: an exact bound, not billed (branch and bound; --exhaustive "
    "bills it)",
    "peak_floor_over_budget": "an exact lower bound of a rank's peak (its peak floor; for the budget solver's, at "
    "every step the solver can take) exceeds usable memory − reserve: cannot fit, not billed (branch and bound; "
    "--exhaustive bills it)",
    "outranked": "its exact floors (step time, peak) cannot reach the top K or a Pareto front: not billed "
    "(branch and bound; --exhaustive bills it)",
}


@dataclass(frozen=True)
class PlanRequest:
    """What to plan: the model, the GPU kind and count, the batch, the recipe, and the axes pinned by --fix.

    worlds: GPU counts to try; seq: tokens per sequence; global_batch_tokens: tokens per optimizer step (None:
    micro-batches 1, pp, 4·pp); micro_batch: sequences per micro-batch (None: searched); reserve_gib: GiB kept
    back per GPU (None: engine/fit.py's default); model_name: how commands name the model."""

    spec: ModelSpec
    gpu: GPU
    gpu_name: str
    worlds: tuple[int, ...]
    seq: int
    model_name: str
    global_batch_tokens: int | None = None
    micro_batch: int | None = None
    recipe: str = "mixed-bf16"
    optimizer: str = "adamw"
    reserve_gib: float | None = None
    efficiency: float | None = None  # None: the per-op time model; a number: the --efficiency override
    fixed: tuple[tuple[str, object], ...] = ()
    cross_node: bool = False
    train_tokens: int | None = None
    price_per_gpu_hour: float | None = None
    host_mem_gib: float | None = None  # a node's host memory, GiB (None: the catalog's reference node)
    #: the kernels the eager convention follows (spec/recipe.DEVICES): a plan is for GPUs, so CUDA's — dropout's
    #: bool masks, SDPA's fused kernels with attention dropout and for MLA's unequal head widths, no S×S tensor kept
    device: str = "cuda"

    @property
    def optimizer_impl(self) -> str:
        """How the planned runs step the optimizer: fused wherever torch.optim has a fused path — Adam, AdamW, SGD,
        the AdamW beside Muon (fused=True: no temporaries; Megatron-LM, DeepSpeed and recent transformers' Trainer
        run fused Adam too; a plan is the best way to run, and its rows say `--optimizer-impl fused`) — any other as
        PyTorch runs it on the device (Adafactor: single)."""
        fused = "fused" in TORCH_OPTIMIZER_IMPLS.get(self.optimizer, ())
        return "fused" if fused else default_optimizer_impl(self.optimizer, self.device)

    @property
    def fix(self) -> dict[str, object]:
        return dict(self.fixed)


@dataclass(frozen=True)
class Candidate:
    """One point of the space: a layout, a micro-batch size (sequences) and a recompute policy."""

    parallel: Parallel
    micro_batch: int
    recompute: str


Variant = tuple[bool, int, int, bool, str]  # (sp, micro-batch, micro-batches, activation offload, recompute)


class Variants(tuple[Variant, ...]):
    """The variants of a group: every (micro-batch, micro-batches) × sp × (activation offload, recompute)
    combination, in that nesting order. A tuple (indexed at C speed: a search reads millions of variants by index);
    groups of one pipeline option at one (tp, pp, cp) point share one, so a search builds a few thousand."""

    def __new__(cls, batches: list[tuple[int, int]], sps: list[bool], pairs: list[tuple[bool, str]]) -> Variants:
        return super().__new__(cls, [(sp, b, m, act, policy) for b, m in batches for sp in sps
                                     for act, policy in pairs])

    def __reduce__(self) -> tuple:
        return _variants_of, (tuple(self),)  # pickled as its items (the planner's workers receive groups)


def _variants_of(items: tuple[Variant, ...]) -> Variants:
    return tuple.__new__(Variants, items)


@dataclass
class Group:
    """Candidates that share a rank's resident state (every axis but sp, micro-batch, recompute, activation
    offload): one exact bound decides them all when their weights + grads + optimizer alone overflow. The
    candidates are kept as variants and built on demand (`candidate`): a group the bound rejects builds none."""

    holdings_layout: Parallel  # the layout with micro-batch-independent fields only (rank_holdings' key)
    offload_optimizer: bool
    variants: Sequence[Variant] = field(default_factory=list)

    def candidate(self, variant: Variant) -> Candidate:
        """The variant's candidate; a layout rule of spec/parallel.py it breaks raises StepbillError."""
        sp, micro_batch, micro_batches, offload_activations, recompute = variant
        return Candidate(_variant_layout(self.holdings_layout, self.offload_optimizer, sp, micro_batches,
                                         offload_activations), micro_batch, recompute)

    @property
    def candidates(self) -> list[Candidate]:
        """Every candidate of the group (those that break a layout rule left out)."""
        out = []
        for v in self.variants:
            try:
                out.append(self.candidate(v))
            except StepbillError:
                continue
        return out


@lru_cache(maxsize=1 << 16)  # the bills and peak floors visit layouts in floor order, not group by group
def _variant_layout(holdings_layout: Parallel, offload_optimizer: bool, sp: bool, micro_batches: int,
                    offload_activations: bool) -> Parallel:
    """A group's layout with a variant's fields; a rule it breaks raises StepbillError (not memoised: raised
    again). Memoised: a group's variants share one layout per (sp, micro-batches, activation offload) — every
    recompute policy and micro-batch size of it — and making one validates a new Parallel."""
    return holdings_layout.with_fields(sp=sp, micro_batches=micro_batches, offload_optimizer=offload_optimizer,
                                       offload_activations=offload_activations)


def powers_of_two(high: int) -> list[int]:
    """1, 2, 4, … ≤ high."""
    out, n = [], 1
    while n <= high:
        out.append(n)
        n *= 2
    return out


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _axis(fix: dict[str, object], key: str, default: list) -> list:
    return [fix[key]] if key in fix else default


class Rejections:
    """Counts of rejected candidates per reason (REASONS' keys)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, reason: str, n: int = 1) -> None:
        if n:
            self.counts[reason] = self.counts.get(reason, 0) + n


def _model_rule(spec: ModelSpec, tp: int) -> bool:
    """tp divides the heads, kv heads and FFN / shared-expert widths (validate_layout's first rules)."""
    a = spec.attention
    if a.n_heads % tp or a.kv_heads % tp:
        return False
    if spec.n_dense_layers and spec.ffn.intermediate_size % tp:
        return False
    return not (spec.moe is not None and spec.moe.shared_intermediate_size % tp)


def _micro_batch_options(req: PlanRequest, dp: int, pp: int) -> list[tuple[int, int | None]]:
    """(micro-batch, micro-batches) pairs; micro-batches None when the global batch leaves no whole number."""
    fix = req.fix
    if req.global_batch_tokens is None:
        sizes = _axis(fix, "micro_batch", [req.micro_batch or 1])
        counts = _axis(fix, "micro_batches", sorted({1, pp, 4 * pp}))
        return [(b, m) for b in sizes for m in counts]
    per_seq = req.global_batch_tokens // req.seq if req.global_batch_tokens % req.seq == 0 else 0
    high = max(per_seq // dp, 1)
    sizes = _axis(fix, "micro_batch", [req.micro_batch] if req.micro_batch else powers_of_two(high))
    out: list[tuple[int, int | None]] = []
    for b in sizes:
        unit = dp * b * req.seq
        m = req.global_batch_tokens // unit if req.global_batch_tokens % unit == 0 else None
        if m is not None and "micro_batches" in fix and fix["micro_batches"] != m:
            continue
        out.append((b, m))
    return out


def enumerate_space(req: PlanRequest, rejected: Rejections) -> Iterator[Group]:
    """Every group of candidates that passes the stated rules; what fails is counted in `rejected` (one count per
    candidate: a structural rule rejects every micro-batch, recompute and sp variant under it)."""
    fix = req.fix
    for world in req.worlds:
        for tp in _axis(fix, "tp", powers_of_two(world)):
            if world % tp:
                continue
            for pp in _axis(fix, "pp", [d for d in divisors(world // tp)]):
                if (world // tp) % pp:
                    continue
                for cp in _axis(fix, "cp", powers_of_two(world // (tp * pp))):
                    if (world // (tp * pp)) % cp:
                        continue
                    dp = world // (tp * pp * cp)
                    if "dp" in fix and fix["dp"] != dp:
                        continue
                    yield from _groups(req, world, tp, pp, cp, dp, rejected)


@dataclass(frozen=True)
class _Point:
    """What every group of one (world, tp, pp, cp) point shares: the variant axes and the pipeline options."""

    world: int
    tp: int
    pp: int
    cp: int
    dp: int
    seq: int
    sps: list[bool]
    batches: list[tuple[int, int | None]]
    pipes: list[Pipe]
    pairs: dict[tuple, list[tuple[bool, str]]]  # pipe key → (activation offload, recompute) pairs

    cache: dict[tuple, tuple[Variants, dict[str, int]]] = field(default_factory=dict)

    def variants(self, pipe: Pipe) -> int:
        """Candidates one group of `pipe` holds before the batch and sp rules."""
        return len(self.sps) * len(self.batches) * len(self.pairs[pipe.key])

    def variants_of(self, pipe: Pipe, rejected: Rejections, groups: int) -> Variants:
        """The variants of a group of `pipe` that pass the batch and sp rules; what fails is counted `groups`
        times (once per group of the layout)."""
        if pipe.key not in self.cache:
            pairs, counts = self.pairs[pipe.key], dict[str, int]()
            per_batch = len(self.sps) * len(pairs)
            batches: list[tuple[int, int]] = []
            for b, m in self.batches:
                if m is None or m < 1:
                    counts["batch_whole"] = counts.get("batch_whole", 0) + per_batch
                elif pipe.schedule == "interleaved" and m % self.pp:
                    counts["interleaved_micro_batches"] = counts.get("interleaved_micro_batches", 0) + per_batch
                else:
                    batches.append((b, m))
            sps = [sp for sp in self.sps if not (sp and self.seq % self.tp)]
            if len(sps) < len(self.sps):
                counts["seq_divides"] = len(batches) * len(pairs)
            self.cache[pipe.key] = (Variants(batches, sps, pairs), counts)
        variants, counts = self.cache[pipe.key]
        for reason, n in counts.items():
            rejected.add(reason, n * groups)
        return variants


def _policy_pairs(req: PlanRequest, pp: int, pipe: Pipe, acts: list[bool]) -> list[tuple[bool, str]]:
    """(activation offload, recompute policy) pairs of a pipeline option. Unless --fix pins the policy, every:K
    and the budget solver go without activation offload: under it every kept tensor leaves the GPU, so K and the
    budget change no GPU byte (every:K is then full's bill; the budget none's peak with more recompute)."""
    fixed = req.fix.get("recompute")
    ks = [f"every:{k}" for k in every_segments(segment_layers(req.spec.n_layers, pp, pipe))]
    budget = [BUDGET_AT_FREE]
    if fixed is None:
        base, extra = list(RECOMPUTE_POLICIES), ks + budget
        return [(a, p) for a in acts for p in base] + [(a, p) for a in acts if not a for p in extra]
    policies = ks if fixed == EVERY_SEARCHED else [str(fixed)]
    return [(a, p) for a in acts for p in policies]


def _groups(req: PlanRequest, world: int, tp: int, pp: int, cp: int, dp: int,
            rejected: Rejections) -> Iterator[Group]:
    spec, fix, per_node = req.spec, req.fix, req.gpu.gpus_per_node
    moe = spec.moe
    acts = _axis(fix, "offload_activations", [False, True])
    schedules = _axis(fix, "schedule", ["1f1b", "gpipe", "interleaved"] if pp > 1 else ["1f1b"])
    splits = [fix["pp_layers"]] if "pp_layers" in fix else None
    vpps = [int(fix["vpp"])] if "vpp" in fix else None  # type: ignore[call-overload]
    options = pipes(spec.n_layers, pp, schedules, vpps, splits)  # type: ignore[arg-type]
    point = _Point(world, tp, pp, cp, dp, req.seq, _axis(fix, "sp", [False, True] if tp > 1 else [False]),
                   _micro_batch_options(req, dp, pp), options,
                   {p.key: _policy_pairs(req, pp, p, acts) for p in options})
    zero_shards = [(z, s) for z in _axis(fix, "zero", [0, 1, 2, 3] if dp * cp > 1 else [0])  # one replica: 0
                   for s in _shard_groups(req, tp, dp * cp, z)]
    offloads = _axis(fix, "offload_optimizer", [False, True])
    eps = _axis(fix, "ep", powers_of_two(dp * cp * tp) if moe is not None else [1])
    etps = {ep: _axis(fix, "etp", expert_tp_degrees(dp * cp * tp, ep) if moe is not None else [1]) for ep in eps}
    unit = len(zero_shards) * len(offloads) * sum(point.variants(p) for p in options)  # under one (ep, etp)
    # rules of the (tp, pp, cp) triple reject every candidate under it
    reason = ""
    if tp > per_node and not req.cross_node:
        reason = "tp_outside_node"
    elif not _model_rule(spec, tp):
        reason = "tp_divides_model"
    elif pp > spec.n_layers:
        reason = "pp_layers"
    elif cp > 1 and req.seq % (2 * cp):
        reason = "seq_divides"
    if reason:
        rejected.add(reason, unit * sum(len(e) for e in etps.values()))
        return
    for ep in eps:
        if moe is not None and moe.n_routed_experts % ep:
            rejected.add("ep_divides_experts", unit * len(etps[ep]))
            continue
        if ep > per_node and not req.cross_node:
            rejected.add("ep_outside_node", unit * len(etps[ep]))
            continue
        for etp in etps[ep]:
            reason = ""
            if moe is not None and moe.expert_intermediate_size % etp:
                reason = "etp_divides_experts"
            elif etp > per_node and not req.cross_node:
                reason = "etp_outside_node"
            elif ep * etp > per_node and not req.cross_node:
                reason = "ep_outside_node"
            if reason:
                rejected.add(reason, unit)
                continue
            for zero, shard in zero_shards:
                for pipe in options:
                    yield from _groups_of_pipe(req, point, ep, etp, zero, shard, pipe, offloads, rejected)


def _shard_groups(req: PlanRequest, tp: int, replicas: int, zero: int) -> list[int | None]:
    """Hybrid-sharding groups at `zero`: the whole dp·cp group, and one node's dp·cp ranks when that is smaller."""
    if "shard_group" in req.fix:
        return [req.fix["shard_group"]]  # type: ignore[list-item]
    node = req.gpu.gpus_per_node // tp
    if zero >= 1 and node > 1 and replicas > node and replicas % node == 0:
        return [None, node]
    return [None]


def _groups_of_pipe(req: PlanRequest, point: _Point, ep: int, etp: int, zero: int, shard: int | None, pipe: Pipe,
                    offloads: list[bool], rejected: Rejections) -> Iterator[Group]:
    """The groups of one layout, one per optimizer-offload choice (the layout is built and checked once)."""
    pp, tp = point.pp, point.tp
    n_var = point.variants(pipe) * len(offloads)
    if pipe.schedule == "interleaved" and req.spec.n_layers % (pp * pipe.vpp):
        rejected.add("pp_layers", n_var)
        return
    base = dict(dp=point.dp, tp=tp, pp=pp, cp=point.cp, ep=ep, etp=None if etp == 1 else etp, zero=zero,
                shard_group=shard, pp_schedule=pipe.schedule, vpp=pipe.vpp, pp_layers=pipe.pp_layers)
    try:
        holdings_layout = Parallel(**base, micro_batches=pp if pipe.schedule == "interleaved" else 1)  # type: ignore[arg-type]
        validate_layout(req.spec, holdings_layout, req.seq, point.world)
    except StepbillError:
        rejected.add("layout_invalid", n_var)
        return
    variants = point.variants_of(pipe, rejected, len(offloads))
    if len(variants):
        for offload in offloads:
            yield Group(holdings_layout, offload, variants)
