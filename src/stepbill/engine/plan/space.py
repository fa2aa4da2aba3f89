"""The planner's candidate space: every layout of one model on one GPU kind, and the rules that cut it.

A candidate is a `Parallel` layout plus the micro-batch size and the recompute policy: exactly the options of one
`stepbill bill` command. The space (each axis's values, unless `--fix` pins it):

    world        --gpus N, or with --max-gpus N every power of two ≤ N and N itself
    tp           1, 2, 4, … ≤ world                      (a tp group inside a node unless --cross-node)
    pp           every divisor of world / tp, ≤ layers   (uneven stages: Megatron-LM's split, spec/parallel.py)
    cp           1, 2, 4, … dividing world / (tp·pp)     (2·cp must divide the sequence: load-balanced causal CP)
    dp           world / (tp·pp·cp)
    ep           MoE: 1, 2, 4, … ≤ dp·cp·tp               (an ep group inside a node unless --cross-node); etp 1
    zero         0, 1, 2, 3 when dp·cp > 1 (one replica: 0 only, ZeRO has nothing to shard over); with zero ≥ 1
                 also hybrid sharding over one node's dp·cp ranks (--shard-group)
    schedule     1f1b; interleaved with 2 chunks per stage when pp > 1
    offload      optimizer offload off / on; activation offload off / on
    sp           off / on when tp > 1
    micro-batch  --micro-batch B, else 1, 2, 4, … with dp·b·seq dividing --global-batch-tokens
    recompute    none, selective:core_attn, full
    micro-batches  --global-batch-tokens / (dp·b·seq); without a global batch: 1, pp and 4·pp

Rules (each a rejection reason, counted in candidates): the ones `validate_layout` states (heads, kv heads, FFN
width, experts, layers, sequence for sp and cp), tp and ep groups inside a node, the global batch a whole number
of micro-batches, interleaving's micro-batches divisible by pp. Not searched yet (say `--fix` to pin them): GPipe
(its memory is 1F1B's or more at the same bubble), expert tensor parallelism (etp > 1), more than 2 virtual
chunks, recompute every:K and the budget solver, explicit --pp-layers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from stepbill.errors import StepbillError
from stepbill.spec.hardware import GPU
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import Parallel, validate_layout

RECOMPUTE_POLICIES = ("none", "selective:core_attn", "full")

#: Fixable axes (`--fix key=value`) and the type of their value.
FIX_KEYS: dict[str, type] = {
    "dp": int, "tp": int, "pp": int, "cp": int, "ep": int, "zero": int, "shard_group": int, "vpp": int,
    "micro_batch": int, "micro_batches": int, "sp": bool, "schedule": str, "recompute": str,
    "offload_optimizer": bool, "offload_activations": bool,
}
FIX_ALIASES = {"mb": "micro_batch", "m": "micro_batches", "pp_schedule": "schedule"}

#: Rejection reasons: key → the rule in words (the keys are what --json reports).
REASONS: dict[str, str] = {
    "tp_outside_node": "tp group larger than a node (--cross-node to allow)",
    "ep_outside_node": "ep group larger than a node (--cross-node to allow)",
    "tp_divides_model": "tp must divide the heads, kv heads and FFN / shared-expert widths",
    "ep_divides_experts": "ep must divide the routed experts",
    "pp_layers": "pp (× vpp chunks) must fit and divide the layers",
    "seq_divides": "the sequence must divide by tp under sp and by 2·cp under cp",
    "batch_whole": "the global batch must be dp × micro-batch × micro-batches × seq, all whole",
    "interleaved_micro_batches": "interleaving needs micro-batches divisible by pp",
    "layout_invalid": "another layout rule of spec/parallel.py",
    "resident_over_budget": "weights + grads + optimizer states of a rank exceed the budget alone (exact bound)",
    "peak_over_budget": "a rank's peak exceeds usable memory − reserve",
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


@dataclass
class Group:
    """Candidates that share a rank's resident state (every axis but sp, micro-batch, recompute, activation
    offload): one exact bound decides them all when their weights + grads + optimizer alone overflow. The
    candidates are kept as variants and built on demand (`candidate`): a group the bound rejects builds none."""

    holdings_layout: Parallel  # the layout with micro-batch-independent fields only (rank_holdings' key)
    offload_optimizer: bool
    variants: list[Variant] = field(default_factory=list)

    def candidate(self, variant: Variant) -> Candidate:
        """The variant's candidate; a layout rule of spec/parallel.py it breaks raises StepbillError."""
        sp, micro_batch, micro_batches, offload_activations, recompute = variant
        layout = replace(self.holdings_layout, sp=sp, micro_batches=micro_batches,
                         offload_optimizer=self.offload_optimizer, offload_activations=offload_activations)
        return Candidate(layout, micro_batch, recompute)

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


def parse_fix(texts: list[str] | tuple[str, ...] | Mapping[str, object] | None) -> tuple[tuple[str, object], ...]:
    """`["tp=8,pp=16", "zero=1"]` (or a mapping) → sorted (axis, value) pairs; unknown axes and bad values raise."""
    if not texts:
        return ()
    pairs: list[tuple[str, str | object]] = []
    if isinstance(texts, Mapping):
        pairs = list(texts.items())
    else:
        for text in texts:
            for part in str(text).split(","):
                if not part.strip():
                    continue
                key, sep, value = part.partition("=")
                if not sep:
                    raise StepbillError(f"--fix takes axis=value pairs such as tp=8,pp=16, got {part.strip()!r}")
                pairs.append((key.strip(), value.strip()))
    out: dict[str, object] = {}
    for key, value in pairs:
        key = FIX_ALIASES.get(key.replace("-", "_"), key.replace("-", "_"))
        if key not in FIX_KEYS:
            raise StepbillError(f"--fix: unknown axis {key!r}; axes: {', '.join(FIX_KEYS)}")
        out[key] = _fix_value(key, value)
    return tuple(sorted(out.items()))


def _fix_value(key: str, value: object) -> object:
    kind = FIX_KEYS[key]
    if kind is bool:
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("1", "true", "on", "yes"):
            return True
        if str(value).lower() in ("0", "false", "off", "no"):
            return False
        raise StepbillError(f"--fix {key} takes on or off, got {value!r}")
    if kind is int:
        text = str(value)
        if isinstance(value, bool) or not text.isdigit() or int(text) < (0 if key == "zero" else 1):
            raise StepbillError(f"--fix {key} takes a positive integer, got {value!r}")
        if key == "zero" and int(text) > 3:
            raise StepbillError(f"--fix zero takes 0, 1, 2 or 3, got {value!r}")
        return int(text)
    if key == "schedule" and value not in ("1f1b", "interleaved", "gpipe"):
        raise StepbillError(f"--fix schedule takes 1f1b, interleaved or gpipe, got {value!r}")
    if key == "recompute":
        from stepbill.spec.recompute_policy import parse_recompute

        parse_recompute(str(value))
    return str(value)


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
    spec, fix, per_node = req.spec, req.fix, req.gpu.gpus_per_node
    moe = spec.moe
    policies = _axis(fix, "recompute", list(RECOMPUTE_POLICIES))
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
                    yield from _groups(req, world, tp, pp, cp, dp, policies, per_node, moe, rejected)


def _variants(req: PlanRequest, tp: int, pp: int, dp: int, policies: list[str]) -> int:
    sps = len(_axis(req.fix, "sp", [False, True] if tp > 1 else [False]))
    return sps * len(_micro_batch_options(req, dp, pp)) * len(policies) * len(
        _axis(req.fix, "offload_activations", [False, True]))


def _groups(req: PlanRequest, world: int, tp: int, pp: int, cp: int, dp: int, policies: list[str], per_node: int,
            moe: object, rejected: Rejections) -> Iterator[Group]:
    spec, fix = req.spec, req.fix
    eps = _axis(fix, "ep", powers_of_two(dp * cp * tp) if moe is not None else [1])
    zeros = _axis(fix, "zero", [0, 1, 2, 3] if dp * cp > 1 else [0])  # one replica: ZeRO shards nothing
    schedules = _axis(fix, "schedule", ["1f1b", "interleaved"] if pp > 1 else ["1f1b"])
    offloads = _axis(fix, "offload_optimizer", [False, True])
    n_var = _variants(req, tp, pp, dp, policies)
    n_struct = len(eps) * len(zeros) * len(schedules) * len(offloads)
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
        rejected.add(reason, n_var * n_struct)
        return
    for ep in eps:
        if moe is not None and moe.n_routed_experts % ep:
            rejected.add("ep_divides_experts", n_var * n_struct // len(eps))
            continue
        if ep > per_node and not req.cross_node:
            rejected.add("ep_outside_node", n_var * n_struct // len(eps))
            continue
        for zero in zeros:
            shard_groups = [None]
            if "shard_group" in fix:
                shard_groups = [fix["shard_group"]]
            elif zero >= 1 and per_node // tp > 1 and dp * cp > per_node // tp and (dp * cp) % (per_node // tp) == 0:
                shard_groups = [None, per_node // tp]
            for shard in shard_groups:
                for schedule in schedules:
                    vpp = int(fix.get("vpp", 2)) if schedule == "interleaved" else 1
                    for offload in offloads:
                        yield from _group(req, world, tp, pp, cp, dp, ep, zero, shard, schedule, vpp, offload,
                                          policies, rejected)


def _group(req: PlanRequest, world: int, tp: int, pp: int, cp: int, dp: int, ep: int, zero: int, shard: int | None,
           schedule: str, vpp: int, offload: bool, policies: list[str], rejected: Rejections) -> Iterator[Group]:
    fix = req.fix
    n_var = _variants(req, tp, pp, dp, policies)
    if schedule == "interleaved" and req.spec.n_layers % (pp * vpp):
        rejected.add("pp_layers", n_var)
        return
    base = dict(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, zero=zero, shard_group=shard, pp_schedule=schedule, vpp=vpp)
    try:
        holdings_layout = Parallel(**base, micro_batches=pp if schedule == "interleaved" else 1)  # type: ignore[arg-type]
        validate_layout(req.spec, holdings_layout, req.seq, world)
    except StepbillError:
        rejected.add("layout_invalid", n_var)
        return
    group = Group(holdings_layout, offload)
    sps = _axis(fix, "sp", [False, True] if tp > 1 else [False])
    acts = _axis(fix, "offload_activations", [False, True])
    per_batch = len(sps) * len(policies) * len(acts)
    for b, m in _micro_batch_options(req, dp, pp):
        if m is None or m < 1:
            rejected.add("batch_whole", per_batch)
            continue
        if schedule == "interleaved" and m % pp:
            rejected.add("interleaved_micro_batches", per_batch)
            continue
        for sp in sps:
            if sp and req.seq % tp:
                rejected.add("seq_divides", len(policies) * len(acts))
                continue
            group.variants += [(sp, b, m, act, policy) for act in acts for policy in policies]
    if group.variants:
        yield group
