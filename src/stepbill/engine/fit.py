"""Does the step fit on the card? One verdict per rank class, judged against the card's usable memory minus a
reserve, on the peak of the convention that describes what the framework really keeps.

- **Usable memory**: the total the driver reports (nvidia-smi / rocm-smi; presets/hardware/gpus.json `usable`),
  not the datasheet figure: an H100 SXM shows 81,559 MiB = 79.65 GiB, not 80 GiB.
- **Reserve** (default, `default_reserve`): memory a training process holds outside the tensors the bill counts —
  the CUDA context and driver, NCCL's communicator buffers, and the caching allocator's fragmentation. `--reserve
  GiB` replaces it.
- **Host memory** (engine/fit_host.py): under offload, the node's host memory must hold what its GPUs' ranks
  offload; the layout fits only when it does (unchecked, and said, where the node's host memory is unknown).
- **Convention**: the `ideal` convention (the seed's) leaves out the logits, the loss and the tensors outside the
  layers, so "fits" under it is optimistic (Qwen2.5-7B on one 80 GB card: micro-batch 24 with full recompute fits
  under ideal, not under eager). The verdict is taken on the `eager` bill (what eager PyTorch + transformers keeps,
  measured by `stepbill check`); where no eager bill exists it falls back to the ideal one and says so.

Pure: reads `Bill.ranks[i].memory["peak"]` and `Bill.lines["memory.peak"]` only; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from stepbill.engine.bill import Bill, make_bill
from stepbill.engine.fit_host import HostFit, host_fit
from stepbill.engine.line import Line, cited
from stepbill.engine.parallel import RankClass
from stepbill.errors import StepbillError
from stepbill.spec.hardware import GPU
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import Recipe

GIB = 2**30
MIB = 2**20

# CUDA context (~0.4 GiB with lazy module loading, CUDA >= 11.7: pytorch/pytorch#109888, #107667) plus the memory
# the driver keeps outside cudaMemGetInfo's total (H100 SXM: nvidia-smi 79.65 GiB, PyTorch's OOM message "total
# capacity of 79.11 GiB", vllm-project/vllm#27508: 0.54 GiB), cuBLAS/cuDNN workspaces on top: 1 GiB.
CUDA_CONTEXT_BYTES = 1 * GIB
# One NCCL communicator after its first collective: ~1.6 GB on 8 GPUs (NVIDIA/nccl#864, where >= 3 communicators
# took ~6 GB); memory grows with the number of communicators (NVIDIA/nccl#986). One communicator per parallel
# axis of degree > 1 (dp, tp, pp, cp, ep), 1.5 GiB each.
NCCL_PER_COMMUNICATOR_BYTES = 1.5 * GIB
# PyTorch's caching allocator: reserved-but-unallocated blocks. Observed 1.83 GiB at 78.09 GiB in use on an 80 GB
# H100 (vllm-project/compressed-tensors#587: 2.3 %); expandable_segments lowers it. 2 % of the usable memory.
FRAGMENTATION_SHARE = 0.02

CONVENTION_WORDS = {
    "eager": "eager convention (logits and loss, outside-layer tensors: what eager PyTorch keeps)",
    "ideal": "ideal convention (the seed's: no logits, no outside-layer tensors)",
}


#: GPUs a node holds when the card is given by its memory alone (--gpu-mem): the catalog's reference nodes' count
GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Card:
    """The memory one GPU offers: the driver-reported total in bytes, with where that figure comes from; and the
    node it sits in: GPUs per node and the node's host memory (bytes, None: unknown), which they share."""

    name: str
    usable_bytes: float
    source: str
    gpus_per_node: int = GPUS_PER_NODE
    host_bytes: float | None = None
    host_source: str = ""

    @classmethod
    def from_gpu(cls, gpu: GPU) -> Card:
        """A catalog GPU's usable memory (nvidia-smi's total, not the datasheet's) and its reference node's."""
        return cls(gpu.display, gpu.usable_bytes, gpu.usable_source, gpu.gpus_per_node, gpu.host_memory_bytes,
                   gpu.host_memory_source)

    @classmethod
    def from_gib(cls, gib: float, gpu: GPU | None = None) -> Card:
        """A card of `gib` GiB as the user gave it (`--gpu-mem`), taken as usable memory; in the reference node of
        `gpu` when one is named too (its GPUs per node and host memory), else in a node of unknown host memory."""
        card = cls(f"{gib:g} GiB card", gib * GIB, "--gpu-mem (taken as the usable memory)")
        if gpu is None:
            return card
        return replace(card, gpus_per_node=gpu.gpus_per_node, host_bytes=gpu.host_memory_bytes,
                       host_source=gpu.host_memory_source)

    def with_host(self, gib: float | None) -> Card:
        """The card in a node of `gib` GiB host memory (`--host-mem`); unchanged for None."""
        if gib is None:
            return self
        return replace(self, host_bytes=gib * GIB, host_source=f"--host-mem {gib:g} GiB")


@dataclass(frozen=True)
class Reserve:
    """Bytes kept back from the usable memory, as lines that sum to `total_bytes`."""

    items: tuple[Line, ...]
    user_given: bool

    @property
    def total_bytes(self) -> float:
        return sum(x.value for x in self.items)

    def summary(self) -> str:
        """One line, e.g. "reserve 4.09 GiB: CUDA context + driver 1.00 GiB + NCCL 1 communicator × 1.50 GiB + ..."."""
        total = self.total_bytes / GIB
        if self.user_given:
            return f"reserve {total:.2f} GiB (--reserve)"
        parts = " + ".join(f"{_WORDS[x.name]} {x.value / GIB:.2f} GiB" for x in self.items if x.value)
        return f"reserve {total:.2f} GiB: {parts} (--reserve GiB to change)"


_WORDS = {
    "fit.reserve.cuda_context": "CUDA context + driver",
    "fit.reserve.nccl": "NCCL buffers",
    "fit.reserve.fragmentation": "allocator fragmentation",
    "fit.reserve.user": "--reserve",
}


def communicators(parallel: Parallel) -> int:
    """NCCL communicators a rank uses: one per parallel axis of degree > 1 (dp, tp, pp, cp, ep)."""
    return sum(1 for degree in (parallel.dp, parallel.tp, parallel.pp, parallel.cp, parallel.ep) if degree > 1)


def default_reserve(card: Card, parallel: Parallel) -> Reserve:
    """The reserve kept when the user gives none: CUDA context + driver, NCCL per communicator, fragmentation."""
    n_comm = communicators(parallel)
    items = (
        Line("fit.reserve.cuda_context", CUDA_CONTEXT_BYTES, "bytes",
             "CUDA context ~0.4 GiB (lazy loading) + driver memory outside cudaMemGetInfo (H100: 0.54 GiB) + "
             "library workspaces", {}, cited("pytorch/pytorch#109888; vllm-project/vllm#27508")),
        Line("fit.reserve.nccl", n_comm * NCCL_PER_COMMUNICATOR_BYTES, "bytes",
             "{communicators} communicators (parallel axes of degree > 1) × {per} B",
             {"communicators": n_comm, "per": int(NCCL_PER_COMMUNICATOR_BYTES)},
             cited("NVIDIA/nccl#864: ~1.6 GB per communicator after its first all-reduce")),
        Line("fit.reserve.fragmentation", FRAGMENTATION_SHARE * card.usable_bytes, "bytes",
             "{share} × {usable} B usable", {"share": FRAGMENTATION_SHARE, "usable": int(card.usable_bytes)},
             cited("vllm-project/compressed-tensors#587: 1.83 GiB unallocated at 78.09 GiB in use (2.3 %)")),
    )
    return Reserve(items, user_given=False)


def check_reserve(card: Card, gib: float | None, flag: str = "--reserve") -> None:
    """A reserve the user gave that leaves nothing of the card's usable memory is a bad input, not a verdict: one
    line naming both figures. (The default reserve can exceed a tiny `--gpu-mem` card: then nothing fits, as said.)"""
    if gib is not None and gib * GIB >= card.usable_bytes:
        raise StepbillError(f"{flag} {gib:g} GiB leaves nothing of the card's usable {card.usable_bytes / GIB:,.2f} "
                            "GiB for the step: give less")


def user_reserve(gib: float) -> Reserve:
    """The reserve the user gave with --reserve GiB (0 allowed)."""
    return Reserve((Line("fit.reserve.user", gib * GIB, "bytes", "--reserve {gib} GiB", {"gib": gib}),),
                   user_given=True)


@dataclass(frozen=True)
class RankFit:
    """The verdict for one rank class of the judged bill: its peak, the headroom left, and whether it fits."""

    rank_class: str
    ranks: int
    peak_bytes: float
    headroom_bytes: float  # budget − peak; negative when it does not fit

    @property
    def fits(self) -> bool:
        return self.headroom_bytes >= 0


@dataclass(frozen=True)
class Fit:
    """Fit verdicts of one bill on one card: usable − reserve = budget, each rank class's peak against it."""

    card: Card
    reserve: Reserve
    convention: str  # the convention whose peaks were judged: "eager", or "ideal" (given, or as a fallback)
    shown_convention: str  # the convention of the bill the user asked for
    fallback: str  # why the eager peaks could not be used ("" when they were, or not needed)
    ranks: tuple[RankFit, ...]
    lines: dict[str, Line]
    advice: str  # the largest per-GPU item of the worst judged class and the next flags to try
    host: HostFit | None = None  # the node's host memory against what its ranks offload (None: nothing offloaded)
    device: str = "cpu"  # the kernels the judged eager rows follow (spec/recipe.DEVICES)

    @property
    def budget_bytes(self) -> float:
        return fit_budget(self.card.usable_bytes, self.reserve)

    @property
    def host_fits(self) -> bool:
        """The node's host memory holds what its GPUs offload (True when nothing is offloaded or it is unknown)."""
        return self.host is None or self.host.fits

    @property
    def fits(self) -> bool:
        return all(r.fits for r in self.ranks) and self.host_fits

    @property
    def worst(self) -> RankFit:
        return min(self.ranks, key=lambda r: r.headroom_bytes)

    def for_class(self, name: str) -> RankFit:
        """The verdict of the judged class named `name`, else the worst one (classes differ between models)."""
        return next((r for r in self.ranks if r.rank_class == name), self.worst)

    def convention_note(self) -> str:
        """Which convention the verdict uses, and how it relates to the table the user reads."""
        words = CONVENTION_WORDS[self.convention]
        if self.convention == "eager":
            words += f" on {self.device.upper()} kernels"
        if self.fallback:
            return f"fits: judged on the {words} — {self.fallback}"
        if self.convention != self.shown_convention:
            return (f"fits: judged on the {words}: peak {self.worst.peak_bytes / GIB:.2f} GiB; the "
                    f"{self.shown_convention} figures of this bill leave the logits out")
        return f"fits: judged on the {words}"


def judge(bill: Bill, card: Card, reserve_gib: float | None = None) -> Fit:
    """The fit verdict of `bill` on `card`: `reserve_gib` GiB kept back (None: `default_reserve`), judged on the
    same step under the eager convention (made here; the ideal peak, said, when the model has no eager bill)."""
    check_reserve(card, reserve_gib)
    reserve = user_reserve(reserve_gib) if reserve_gib is not None else default_reserve(card, bill.recipe.parallel)
    eager, missing = eager_bill_for(bill)
    return fit_verdict(bill, eager, card, reserve, missing)


def eager_bill_for(bill: Bill) -> tuple[Bill | None, str]:
    """The same step under the eager convention, or (None, why) where it cannot be made. Made without a GPU: the
    verdict reads its ranks only, not its step time."""
    if bill.convention == "eager":
        return bill, ""
    try:
        return make_bill(bill.model, bill.recipe, None, "eager", bill.attention), ""
    except StepbillError as exc:
        return None, str(exc)


def fit_verdict(bill: Bill, bill_eager: Bill | None, card: Card, reserve: Reserve,
                eager_missing: str = "") -> Fit:
    """Judge every rank class of `bill_eager` (or of `bill` when it is already eager, or when no eager bill could
    be made: `eager_missing` says why) against `card.usable_bytes − reserve`."""
    if bill.convention == "eager":
        judged, fallback = bill, ""
    elif bill_eager is not None:
        judged, fallback = bill_eager, ""
    else:
        judged = bill
        fallback = (f"no eager bill for this model ({eager_missing or 'not modelled'}), so the ideal peak, which "
                    "leaves the logits and outside-layer tensors out: an optimistic verdict")
    return fit_of_ranks(judged.ranks, judged.recipe, judged.convention, bill.convention, card, reserve, fallback)


def fit_of_ranks(classes: list[RankClass], recipe: Recipe, convention: str, shown_convention: str, card: Card,
                 reserve: Reserve, fallback: str = "") -> Fit:
    """fit_verdict on the judged rank classes themselves (`classes` of a bill of `convention` for `recipe`, e.g.
    engine.bill_parts.verdict_ranks's): the planner judges them without making the judged bill's other lines."""
    budget = fit_budget(card.usable_bytes, reserve)
    ranks = tuple(rank_fit(c.name, c.ranks, c.memory["peak"], budget) for c in classes)
    worst = min(ranks, key=lambda r: r.headroom_bytes)
    lines = {
        "fit.usable": Line("fit.usable", card.usable_bytes, "bytes", "{mib} MiB × 2^20 B as the driver reports it",
                           {"mib": round(card.usable_bytes / MIB)}, cited(card.source)),
        "fit.reserve": Line("fit.reserve", reserve.total_bytes, "bytes",
                            " + ".join(x.name for x in reserve.items), {}),
        "fit.budget": Line("fit.budget", budget, "bytes", "usable {usable} B − reserve {reserve} B",
                           {"usable": int(card.usable_bytes), "reserve": int(reserve.total_bytes)}),
        "fit.headroom": Line("fit.headroom", worst.headroom_bytes, "bytes",
                             "budget {budget} B − peak {peak} B of {rank_class}",
                             {"budget": int(budget), "peak": int(worst.peak_bytes), "rank_class": worst.rank_class},
                             convention=f"{convention} convention"),
    }
    worst_class = max(classes, key=lambda c: c.memory["peak"])  # Bill.worst_rank
    advice = per_gpu_advice(worst_class, recipe.parallel, recipe.recompute, budget, full_precision_lora(recipe))
    host = host_fit(classes, recipe.parallel, card.gpus_per_node, card.host_bytes, card.host_source, convention)
    if host is not None:
        lines["fit.host_node"] = host.line()
        if host.budget_bytes is not None and not host.fits and all(r.fits for r in ranks):
            advice = (f"per node: host memory {host.node_bytes / GIB:,.2f} GiB offloaded > "
                      f"{host.budget_bytes / GIB:,.2f} GiB → offload less (a smaller --micro-batch, recompute "
                      "instead of --offload-activations), "
                      "more GPUs, or --host-mem for a larger node")
    return Fit(card, reserve, convention, shown_convention, fallback, ranks, lines, advice, host, recipe.device)


def fit_budget(usable_bytes: float, reserve: Reserve) -> float:
    """What a rank's peak must stay under (bytes): the card's usable memory less the reserve."""
    return usable_bytes - reserve.total_bytes


def rank_fit(name: str, ranks: int, peak_bytes: float, budget_bytes: float) -> RankFit:
    """The verdict of one rank class whose peak is `peak_bytes`: headroom budget − peak (it fits at ≥ 0)."""
    return RankFit(name, ranks, peak_bytes, budget_bytes - peak_bytes)


def full_precision_lora(recipe: Recipe) -> bool:
    """LoRA over a frozen base kept in the training dtype (not a quantised one): the base can go 4-bit."""
    return recipe.lora is not None and recipe.precision.quant is None


# The next flag to try for the item that dominates a rank's memory, given what the layout already does.
def per_gpu_advice(rank: RankClass, parallel: Parallel, recompute: str, budget_bytes: float | None,
                   lora_base: bool = False) -> str:
    """One line naming the largest per-GPU item of `rank` and the next flags to try (at most three, in the order
    to try them), e.g. "per GPU (all ranks): optimizer 98.56 GiB > budget 75.56 GiB → --offload-optimizer or more
    dp (--dp)"."""
    items = {k: rank.memory[k] for k in ("weights", "grads", "optimizer", "activations", "transient")}
    item = max(items, key=lambda k: items[k])
    size = items[item] / GIB
    peak = rank.memory["peak"]
    if budget_bytes is None:
        where = f"{item} {size:.2f} GiB of {peak / GIB:.2f} GiB peak"
    elif items[item] > budget_bytes:
        where = f"{item} {size:.2f} GiB > budget {budget_bytes / GIB:.2f} GiB"
    elif peak > budget_bytes:
        where = f"peak {peak / GIB:.2f} GiB > budget {budget_bytes / GIB:.2f} GiB, largest item {item} {size:.2f} GiB"
    else:
        return (f"per GPU: fits with {(budget_bytes - peak) / GIB:.2f} GiB headroom; largest item {item} {size:.2f} "
                f"GiB ({rank.name})")
    flags = _next_flags(item, parallel, recompute)
    if item == "weights" and lora_base and parallel.is_trivial:  # QLoRA: one GPU (spec/recipe.py), 4-bit frozen base
        flags = ["--recipe qlora-nf4 (the frozen base in 4 bits)", *flags]
    return f"per GPU ({rank.name}): {where} → {' or '.join(flags[:3])}"


def _next_flags(item: str, par: Parallel, recompute: str) -> list[str]:
    more_dp = "more dp (--dp)"

    def zero(stage: int) -> list[str]:  # ZeRO shards over dp·cp: on one replica it needs dp first
        if par.zero >= stage:
            return []
        return [f"--zero {stage}" if par.dp * par.cp > 1 else f"--dp N with --zero {stage}"]

    if item == "optimizer":
        return [*zero(1), *([] if par.offload_optimizer else ["--offload-optimizer"]), more_dp]
    if item == "grads":  # optimizer offload moves the gradients to the host too (memory/timeline.RankView)
        return [*zero(2), *([] if par.offload_optimizer else ["--offload-optimizer"]), more_dp, "--tp / --pp"]
    if item == "weights":
        return [*zero(3), "--tp", "--pp"]
    if item == "activations":
        flags = [] if recompute == "full" else ["--recompute full"]
        flags += ["--sp" if par.tp > 1 and not par.sp else "--tp with --sp", "--cp", "a smaller --micro-batch"]
        if not par.offload_activations:
            flags.append("--offload-activations")
        return list(dict.fromkeys(flags))
    # transient: ZeRO-3's gathered unit and prefetch, gradient buckets, CP blocks
    if par.zero == 3:
        return ["--tp (smaller gathered units)", "--zero 2 (whole weights, no gathers)"]
    return ["a smaller --micro-batch", "--tp"]
