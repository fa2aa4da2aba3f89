"""The JSON every command prints, declared once: pydantic models → JSON Schema (`stepbill schema [COMMAND]`),
docs/json.md's key tables (scripts/refresh_docs.py) and the tests that validate every `--json` output.

Conventions held by every schema: bytes, parameter counts and FLOPs the bill rounds are JSON integers; no NaN or
Infinity anywhere (`allow_inf_nan=False`); no undeclared key (`extra="forbid"`) except where a map's keys are data
(timeline items, per-kind layer counts, a line's inputs). To add a key to a command's JSON, add a field here with a
description: the docs table and the tests follow.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stepbill.report.schema_base import Absent, Number, Strict
from stepbill.report.schema_check import CheckAnyJson
from stepbill.report.schema_fit import FitMaxJson
from stepbill.report.schema_layout import ParallelPart
from stepbill.report.schema_plan import PlanJson
from stepbill.report.schema_tools import LabJson, ModelsJson, RecomputeJson

# --------------------------------------------------------------------------------------------------- the bill


class LineJson(Strict):
    """One line of the bill: a number with its unit, formula, inputs and provenance."""

    name: str = Field(description="the line's name, e.g. `memory.peak`, `weights`, `optimizer.m`")
    value: Number = Field(description="the number in `unit` (an integer when whole bytes, params, FLOPs or cards)")
    unit: str = Field(description="bytes, FLOPs, params, B/param, s, cards, numbers/token, 1 (a ratio), ...")
    formula: str = Field(description="the formula as a template over `inputs`")
    explain: str = Field(description="the formula with its inputs filled in")
    inputs: dict[str, Any] = Field(description="the named inputs of the formula")
    provenance: str = Field(description="`derived` or `cited: <source>`")
    bytes: Number = Absent("= `value`, only when the unit is bytes")
    convention: str = Absent("the accounting convention the number follows, when it has one")


class Units(Strict):
    memory: Literal["bytes"] = Field(description="every memory number is in bytes")
    params: Literal["count"] = Field(description="parameter numbers are counts")
    text_output: str = Field(description="the units the terminal output uses (binary: GiB = 2^30 B)")


class ComponentParams(Strict):
    total: int = Field(description="parameters of this component (tied embeddings once)")
    active: int = Field(description="parameters of this component one token uses")


class ModelPart(Strict):
    name: str = Field(description="the model's name (preset, file or Hub repo name)")
    family: str = Field(description="the architecture family, e.g. llama, gpt2, deepseek_v3")
    params_total: int = Field(description="unique parameters (tied embeddings once); equals `transformers`' count")
    params_active: int = Field(description="parameters one token uses (MoE: only its `top_k` routed experts)")
    params_trainable: int = Field(description="what the optimizer updates (LoRA: adapters only)")
    params_by_component: dict[str, ComponentParams] = Field(
        description="per component (embedding, attention, ffn, experts, shared_experts, router, norms, lm_head)")
    spec: dict[str, Any] = Field(description="the ModelSpec, readable back with `ModelSpec.from_dict`")


class BytesPerParam(Strict):
    weights: Number = Field(description="bytes per weight")
    grads: Number = Field(description="bytes per gradient")
    master: Number = Field(description="bytes per fp32 master weight (0 without a master copy)")
    optimizer_state: Number = Field(description="bytes per element of each optimizer state")
    activation: Number = Field(description="bytes per kept activation element")


class LoraPart(Strict):
    rank: int = Field(description="LoRA rank r")
    targets: list[str] = Field(description="the adapted matrices, e.g. q_proj, v_proj")


class RecipePart(Strict):
    precision: str = Field(description="the precision recipe, e.g. mixed-bf16, fp32, pure-bf16")
    bytes_per_param: BytesPerParam = Field(description="bytes per item under that recipe")
    optimizer: str = Field(description="adamw, adam, sgd, sgd-momentum, lion, adafactor or muon")
    micro_batch: int = Field(description="sequences per micro-batch")
    seq_len: int = Field(description="tokens per sequence")
    tokens: int = Field(description="micro_batch × seq_len")
    recompute: str = Field(description="the activation recompute policy, as given")
    lora: LoraPart | None = Field(description="the LoRA adapters, or null for full fine-tuning / pre-training")


class MemoryPart(Strict):
    weights: int = Field(description="weights, frozen base included (bytes)")
    grads: int = Field(description="gradients of trainable parameters (bytes)")
    optimizer: int = Field(
        description='fp32 master copy + every optimizer state ("optimizer" side of the 2 + 2 | 12 split)')
    model: int = Field(description='weights + grads ("model" side)')
    resident: int = Field(description="model + optimizer: what lives through the whole step")
    activations: int = Field(description="tensors kept for backward over the micro-batch (full recompute: layer "
                             "inputs + one layer's working set; eager convention: MemTracker's ACT at the forward "
                             "peak)")
    peak: int = Field(description="the largest total of live bytes over the step's timeline; `items[]` is the "
                      "breakdown at that moment")
    peak_forward: int = Field(description="largest total within the forward")
    peak_backward: int = Field(description="largest total within the backward")
    peak_phase: str = Field(description="when the peak happens: forward, backward or optimizer")
    peak_moment: str = Field(description="the moment of the timeline that holds the peak")
    peak_dominant: str = Field(description="the item that dominates at the peak")
    advice: str = Field(description="the seed's advice for that dominant item")
    activation_items: list[LineJson] = Field(description="the activation lines at the forward peak")
    items: list[LineJson] = Field(description="every resident and activation item at the peak (eager convention "
                                  "adds inputs, temporaries, autocast_cache, optimizer.step_counters); their bytes "
                                  "sum to `peak`")


class FlopsPart(Strict):
    step: int = Field(description="forward 1× + backward 2× + recompute, causal-halved attention (FLOPs)")
    step_noncausal: int = Field(description="the same with full-square attention (what FlopCounterMode counts)")
    forward: int = Field(description="one forward, causal-halved attention")
    forward_noncausal: int = Field(description="one forward, full-square attention")
    attention: int = Field(description="the attention score and value matmuls of one forward")
    lm_head: int = Field(description="the LM head matmul of one forward")
    recompute: int = Field(description="forward FLOPs recomputed in the backward")
    six_nd: int = Field(description="6 · N_active · D (Kaplan et al.)")
    attention_share: float = Field(description="attention's share of the forward (what 6ND misses)")
    step_over_6nd: float = Field(description="step / six_nd")
    convention: str = Field(description="how FLOPs are counted (2 per multiply-add, matmuls only)")


class Moment(BaseModel):
    """One moment of the step: its phase, label, total and the bytes of every item alive (keys are item names)."""

    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)
    __pydantic_extra__: dict[str, Number] = Field(init=False)  # the items: name → bytes

    phase: str = Field(description="forward, backward or optimizer")
    moment: str = Field(description="the moment's label, e.g. `backward, layer 11 (dense)`")
    total: Number = Field(description="bytes alive at that moment; the other keys are its items (bytes)")


class LayerRow(Strict):
    name: str = Field(description="the kept tensor")
    width_per_token: Number = Field(description="numbers kept per token")
    dtype_bytes: Number = Field(description="bytes per number")
    bytes_per_token: Number = Field(description="width_per_token × dtype_bytes")
    saved_for: str = Field(description="the backward op that needs it")
    recompute: str = Field(description="how it is recomputed when dropped (linear, elementwise, input, ...)")


class ActivationsPart(Strict):
    convention_note: str = Field(description="the convention the activation numbers follow")
    layer_rows: dict[str, list[LayerRow]] = Field(description="per layer kind (dense, moe): every kept tensor")


class CheckpointPart(Strict):
    bytes: int = Field(description="what a resumable checkpoint holds (bytes)")
    items: list[LineJson] = Field(description="master weights, each optimizer state, step, RNG, data position")
    weights_export: LineJson = Field(description="the weights alone, as save_pretrained writes them (LoRA: the "
                                     "adapters), in the weights' training dtype: not resumable")


class CardsPart(Strict):
    resident: int = Field(description="cards needed for the resident bytes, ceil(bytes / card bytes)")
    peak: int = Field(description="cards needed for the peak")


class RankMemory(Strict):
    weights: int = Field(description="this rank's weights (bytes)")
    grads: int = Field(description="this rank's gradients")
    optimizer: int = Field(description="this rank's master copy + optimizer states")
    model: int = Field(description="weights + grads")
    resident: int = Field(description="model + optimizer")
    activations: int = Field(description="activations kept on this rank")
    transient: int = Field(description="gathered / reduce-scattered buffers alive at the peak")
    peak: int = Field(description="this rank's peak")
    peak_forward: int = Field(description="this rank's peak within the forward")
    peak_backward: int = Field(description="this rank's peak within the backward")


class RankFit(Strict):
    usable_bytes: int = Field(description="the card's usable bytes")
    reserve_bytes: int = Field(description="bytes kept back (CUDA context, NCCL, fragmentation)")
    peak_bytes: int = Field(description="the judged peak of this class (eager convention)")
    headroom_bytes: int = Field(description="usable − reserve − peak (negative: does not fit)")
    fits: bool = Field(description="whether headroom ≥ 0")
    convention: str = Field(description="the convention the peak is judged on")
    judged_class: str = Field(description="the rank class judged")


class RankEntry(Strict):
    """One rank class of the per-GPU bill. The one place to declare a new key of `ranks[]`."""

    class_: str = Field(alias="class", description="the class's label, e.g. `all ranks`, `pp stage 0`")
    pp_stages: list[int] = Field(description="the pipeline stages in this class")
    ranks: int = Field(description="GPUs in the class")
    layers: dict[str, int] = Field(description="layers per kind on one of its ranks")
    micro_batches_in_flight: Number = Field(description="micro-batches whose activations are alive at once")
    model: Literal["measured-exact", "approximate", "ideal"] = Field(
        description="which per-rank model produced the numbers: rules measured against PyTorch (measured-exact), "
        "the approximate per-stage model, or the seed's ideal accounting")
    notes: list[str] = Field(description="what the per-rank model does not cover for this class")
    memory: RankMemory = Field(description="bytes per GPU")
    cpu: dict[str, int] = Field(description="offloaded bytes per item (CPU memory)")
    checkpoint_bytes: int = Field(description="one rank's share of the checkpoint to resume (its owned master and "
                                  "optimizer states: every shard written once, as torch.distributed.checkpoint "
                                  "does); × ranks, summed over classes = `checkpoint.bytes`")
    items: list[LineJson] = Field(description="every resident, activation and transient line with its formula")
    fit: RankFit = Absent("with a card (`--gpu` or `--gpu-mem`): this class's fit verdict")
    fits: bool = Absent("with a card: = `fit.fits`")


class CollectiveJson(Strict):
    name: str = Field(description="the collective, e.g. `dense.zero_reduce_scatter`")
    axis: str = Field(description="the parallel axis it runs over (dp, zero, tp, pp, cp, ep)")
    op: str = Field(description="all-reduce, all-gather, reduce-scatter, all-to-all, send/recv")
    group: int = Field(description="ranks in its group")
    scope: str = Field(description="intra-node or inter-node")
    link: str | None = Field(description="the link it uses: nvlink, pcie, infiniband, or ethernet (assumed 100 Gb/s where the GPU has no InfiniBand); null without --gpu (no GPU, no node size to place the group on); "
                      "intra+inter (nvlink+infiniband) for a hierarchical DP / ZeRO collective or an EP all-to-all "
                      "spanning nodes")
    calls: int = Field(description="calls per step")
    bytes: int = Field(description="bytes per rank per step over that link")
    seconds: float | None = Field(description="seconds per step; null without a GPU or when the link is absent")
    overlap: str = Field(description="whether it hides behind compute: yes, no, partly")
    formula: str = Field(description="the formula as a template")
    explain: str = Field(description="the formula with its inputs filled in")


class CommPart(Strict):
    per: str = Field(description="what the numbers are per")
    collectives: list[CollectiveJson] = Field(description="every collective of one rank in one step")
    total_bytes: int = Field(description="sum of the collectives' bytes")


class TimeLineJson(Strict):
    value: Number = Field(description="the number in `unit`")
    unit: str = Field(description="s, FLOPs, bytes, 1 (a ratio) or tokens/s")
    explain: str = Field(description="the formula with its inputs filled in")
    provenance: str = Field(description="`derived` or `cited: <source>`")
    convention: str = Field(description="how the number is counted (causal or full square, peak dtype, overlap)")


_TIME = {
    "model_flops": "model FLOPs of the step over all GPUs: PaLM appendix B, 6N + 12·L·H·Q·T per token, full square",
    "model_flops_causal": "the same with the attention term halved (causal)",
    "rank_flops": "FLOPs one GPU executes (causal attention, recompute included)",
    "recompute_flops": "recompute FLOPs one GPU executes (causal)",
    "peak": "the compute dtype's dense peak of the GPU (FLOP/s), with its catalog source",
    "compute": "seconds of compute on one GPU: the per-op model's kernels + optimizer step, or matmul FLOPs at "
               "--efficiency when given",
    "hbm_traffic": "bytes one GPU moves through HBM",
    "memory": "seconds of that traffic at HBM bandwidth",
    "roofline": "max(compute, memory) + the recipe's precision lines (dequant, fp8's bf16 share)",
    "bubble": "pipeline bubble share",
    "pipeline": "roofline / (1 − bubble)",
    "comm_exposed": "seconds of collectives that cannot hide behind compute",
    "comm_hideable": "seconds of collectives that overlap compute",
    "offload_exposed": "seconds of offload on the critical path (CPU optimizer, weights back up)",
    "offload_hideable": "seconds of PCIe offload traffic that overlaps compute",
    "comm_spill": "hideable seconds compute cannot cover (the busier of network and PCIe)",
    "step": "seconds per step: pipeline + exposed comm + exposed offload + spill",
    "mfu": "model FLOPs utilisation (PaLM appendix B, full attention square)",
    "mfu_causal": "model FLOPs utilisation with the attention term halved",
    "hfu": "hardware FLOPs utilisation (model + recompute FLOPs, full square)",
    "tokens_per_s": "tokens per second over the whole job",
    "tokens_per_s_per_gpu": "tokens per second per GPU",
}
_TIME_OPTIONAL = {
    "offload_grads_down": "--offload-optimizer: seconds of gradients down over PCIe (hideable)",
    "offload_cpu_optimizer": "--offload-optimizer: seconds of the CPU optimizer step (exposed)",
    "offload_weights_up": "--offload-optimizer: seconds of updated weights up over PCIe (exposed)",
    "offload_activations": "--offload-activations: seconds of kept activations down and back up (hideable)",
    "gemm": "per-op model (no --efficiency): seconds of GEMMs timed by shape on the efficiency curve",
    "gemm_efficiency": "per-op model: achieved share of dense peak on the GEMMs",
    "attention": "per-op model: seconds of the fused attention kernels, forward and backward",
    "memory_bound": "per-op model: seconds of norms, adds, activations, casts, cross-entropy at HBM bandwidth",
    "optimizer_step": "per-op model: seconds of the optimizer step at HBM bandwidth",
    "comm_critical": "per-op model: seconds of TP / EP / PP collectives on the critical path (alpha-beta)",
    "dequant": "--recipe qlora-nf4: seconds of dequantising the 4-bit weights (HBM-bound, serial with the GEMMs)",
    "fp8_bf16_share": "--recipe fp8 / fp8-deepseek: seconds the LM head (and, under --efficiency, the attention "
    "core) add at the bf16 peak",
}
TimePart = type("TimePart", (Strict,), {
    "__annotations__": {**dict.fromkeys(_TIME, TimeLineJson), **dict.fromkeys(_TIME_OPTIONAL, TimeLineJson | None)},
    **{key: Field(description=text) for key, text in _TIME.items()},
    **{key: Field(default=None, description=text) for key, text in _TIME_OPTIONAL.items()},
    "__doc__": "The step time with a GPU: every time line by name.",
    "__module__": __name__,
})


_RUN_OPTIONAL = {
    "tokens_per_s_per_gpu": "with a GPU: tokens per second per GPU",
    "train_tokens": "with `--train-tokens`: tokens of the run",
    "steps": "with `--train-tokens`: ceil(train tokens / global batch)",
    "seconds": "with `--train-tokens` and a GPU: steps × step time (no evaluation, checkpoints or failures)",
    "days": "the same in days",
    "gpu_hours": "seconds × GPUs / 3,600",
    "cost": "with `--price-per-gpu-hour`: GPU-hours × price (the price's currency)",
}
RunPart = type("RunPart", (Strict,), {
    "__annotations__": {"global_batch_tokens": TimeLineJson,
                        **dict.fromkeys(_RUN_OPTIONAL, TimeLineJson | None)},
    "global_batch_tokens": Field(description="tokens per optimizer step: dp × micro-batches × micro-batch × seq"),
    **{key: Field(default=None, description=text) for key, text in _RUN_OPTIONAL.items()},
    "__doc__": "Run totals: the global batch always; steps, time, GPU-hours and cost with their options.",
    "__module__": __name__,
})


class GpuPart(Strict):
    name: str = Field(description="the catalog name, e.g. h100-sxm")
    display: str = Field(description="the product name")
    memory_bytes: int = Field(description="memory per GPU (bytes)")
    memory_note: str = Field(description="how the memory figure is stated by the vendor")
    usable_bytes: int = Field(description="what the driver reports as usable (bytes)")
    usable_source: str = Field(description="where the usable figure comes from")


class FitRank(Strict):
    class_: str = Field(alias="class", description="the rank class")
    ranks: int = Field(description="GPUs in the class")
    peak_bytes: int = Field(description="its judged peak (bytes)")
    headroom_bytes: int = Field(description="usable − reserve − peak")
    fits: bool = Field(description="whether headroom ≥ 0")


class FitHost(Strict):
    node_bytes: int = Field(description="what the fullest node's ranks offload to its host memory (bytes)")
    first_rank: int = Field(description="the fullest node's first rank (tp fastest, then cp, dp, pp slowest)")
    gpus: int = Field(description="GPUs on a node")
    budget_bytes: int | None = Field(description="the node's host memory (bytes); null: unknown, not checked")
    source: str = Field(description="where the host memory figure comes from")
    fits: bool = Field(description="whether the node's host memory holds it (true when not checked)")
    checked: bool = Field(description="whether a host memory figure was known")
    summary: str = Field(description="the verdict in one line, with what it does not count")


class FitPart(Strict):
    fits: bool = Field(description="whether every rank class fits, and each node's host memory holds what its GPUs "
                       "offload")
    convention: str = Field(description="the convention the peaks are judged on (eager)")
    convention_note: str = Field(description="why that convention, and the peak it gives")
    usable_bytes: int = Field(description="the card's usable bytes")
    usable_source: str = Field(description="where the usable figure comes from")
    reserve_bytes: int = Field(description="bytes kept back per GPU")
    reserve_items: list[LineJson] = Field(description="the reserve's items (CUDA context, NCCL, fragmentation)")
    reserve_given: bool = Field(description="whether `--reserve` set it")
    budget_bytes: int = Field(description="usable − reserve")
    worst: str = Field(description="the class with the least headroom")
    headroom_bytes: int = Field(description="its headroom (bytes)")
    ranks: list[FitRank] = Field(description="every judged rank class")
    advice: str = Field(description="the per-GPU hint")
    lines: dict[str, LineJson] = Field(description="the verdict's lines with formulas")
    host: FitHost | None = Field(description="under offload: the host-memory verdict of the fullest node; null "
                                 "when nothing is offloaded")


class BillJson(Strict):
    """`stepbill bill --json` (and `stepbill.bill(...).to_json()`)."""

    schema_: Literal["stepbill.bill/1"] = Field(alias="schema", description="this schema's name and version")
    units: Units = Field(description="the units of the numbers")
    convention: Literal["ideal", "eager", "megatron"] = Field(
        description="activation accounting: `ideal` (the seed's: every kept tensor once, fused attention, no "
        "logits), `eager` (what eager PyTorch keeps; what `check` measures) or `megatron` (Korthikanti et al. "
        "2022 Table 2: sbh(34 + 5as/h) per layer)")
    attention: Literal["sdpa", "eager"] = Field(
        description="`sdpa` (fused, no S² scores) or `eager` (S² probabilities stored)")
    model: ModelPart = Field(description="the model and its parameters")
    recipe: RecipePart = Field(description="precision, optimizer, batch, sequence, recompute, LoRA")
    memory: MemoryPart = Field(description="the memory of one step on one replica (bytes)")
    flops: FlopsPart = Field(description="FLOPs of one step (2 per multiply-add, matmuls only)")
    timeline: list[Moment] = Field(description="every moment of the step with the bytes of each item")
    activations: ActivationsPart = Field(description="what each layer keeps for the backward")
    checkpoint: CheckpointPart = Field(description="what a resumable checkpoint holds")
    lines: dict[str, LineJson] = Field(description="every named line of the bill, by name")
    cards: CardsPart = Absent("with `--gpu-mem` or `--gpu` only: cards needed")
    parallel: ParallelPart = Field(description="the layout (see docs/parallel.md)")
    ranks: list[RankEntry] = Field(description="the per-GPU bill, one entry per rank class")
    worst_rank: str = Field(description="the `class` with the highest peak")
    comm: CommPart = Field(description="the step's collectives, per rank")
    time: TimePart | None = Field(description="with `--gpu`: the step time, each line with value, unit, explain "  # type: ignore[valid-type]
                                  "and provenance; null without")
    gpu: GpuPart | None = Field(description="the catalog GPU, or null")
    run: RunPart = Field(description="run totals (`--global-batch-tokens`, `--train-tokens`, "  # type: ignore[valid-type]
                         "`--price-per-gpu-hour`): each a line with value, unit, explain, provenance, convention")
    fit: FitPart | None = Field(description="with a card (`--gpu` or `--gpu-mem`): the fit verdict, usable − reserve − "
                                "the eager peak per rank class; null without")
    seed_notes: list[str] = Absent("on seed 000's worked examples only (`stepbill lab seed-checks`): where the seed "
                                   "prints another number, both numbers and the reason")
    dropout_option: float = Absent("with `--dropout 0` only: every dropout probability set to 0")
    unmodelled: list[str] = Field(description="configured fields the bill does not model yet, one line each "
                                  "(the field, its value, what the bill assumes)")


class SweepRowJson(Strict):
    value: int | str = Field(description="the swept option's value")
    error: str | None = Field(description="why the bill refused this value (one line); null when it made one")
    bill: BillJson | None = Field(description="the whole bill at this value, as `stepbill bill --json` prints it; "
                                  "null when refused")


class SweepJson(Strict):
    """`stepbill bill MODEL … --sweep AXIS=V1,V2,… --json` (and `stepbill.sweep(...).to_json()`)."""

    schema_: Literal["stepbill.sweep/1"] = Field(alias="schema", description="this schema's name and version")
    model: str = Field(description="the model as given")
    axis: str = Field(description="the swept option's Python name, e.g. micro_batch")
    flag: str = Field(description="its flag, e.g. --micro-batch")
    rows: list[SweepRowJson] = Field(description="one per value, in the order given")


# ---------------------------------------------------------------------------------------------- recompute


# ------------------------------------------------------------------------------------------------- models


# -------------------------------------------------------------------------------------------------- check


# ---------------------------------------------------------------------------------------------------- lab


# ----------------------------------------------------------------------------------------------- registry

SCHEMAS: dict[str, type[BaseModel]] = {
    "bill": BillJson,
    "recompute": RecomputeJson,
    "models": ModelsJson,
    "check": CheckAnyJson,
    "lab": LabJson,
    "fit": FitMaxJson,
    "plan": PlanJson,
    "sweep": SweepJson,
}


def json_schema(command: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of `stepbill COMMAND --json`."""
    from stepbill.errors import unknown_name

    if command not in SCHEMAS:
        raise unknown_name("command with JSON output", command, SCHEMAS)
    schema = SCHEMAS[command].model_json_schema(by_alias=True, mode="serialization")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": f"urn:stepbill:{command}", **schema}


def validate(command: str, data: Any) -> BaseModel:
    """Validate a command's JSON output (as parsed) against its schema; raises pydantic.ValidationError."""
    return SCHEMAS[command].model_validate(data)
