"""Parallel layout: how one step is cut across GPUs (data, ZeRO/FSDP, tensor, pipeline, context, expert).

`Parallel` checks what it can alone (degrees positive, ZeRO stage known, schedule known); `validate_layout`
checks it against a model and a sequence length (heads, kv heads, experts, layers divisible). Both raise one
StepbillError line naming the flag to change.

Rank placement follows Megatron-LM's order, innermost first: tp, cp, dp, pp (world = dp·tp·pp·cp). Expert
layers re-cut the same tp·cp·dp ranks of a stage into etp × ep × edp (expert data parallel).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec
from stepbill.spec.schema import BATCH, DEGREE, WORLD, IntTuple, OneOf, check_fields, hash_once, unchecked_replace

PPSchedule = Literal["gpipe", "1f1b", "interleaved"]
ZERO_STAGES = (0, 1, 2, 3)
#: Largest pp × layers: each pipeline stage's bill walks the whole model today (about 8 µs per stage × layer),
#: so this keeps a pipelined bill under about 2 s (128 stages × 1,562 layers; real runs: 16 × 61).
MAX_STAGE_LAYERS = 200_000
#: The command-line flag of each field, for messages.
FLAGS = {"dp": "--dp", "tp": "--tp", "pp": "--pp", "cp": "--cp", "ep": "--ep", "etp": "--etp", "sp": "--sp",
         "zero": "--zero", "shard_group": "--shard-group", "micro_batches": "--micro-batches",
         "pp_schedule": "--pp-schedule", "vpp": "--vpp", "offload_optimizer": "--offload-optimizer",
         "offload_activations": "--offload-activations"}


@hash_once
@dataclass(frozen=True)
class Parallel:
    """Degrees of each parallel axis and the sharding / scheduling options.

    dp: data-parallel replicas (gradient sync group; ZeRO shards over dp·cp, as Megatron's distributed optimizer).
    tp: tensor parallel (Megatron column/row splits of attention and MLP matrices); sp: sequence parallel on top
        of tp (norm/dropout regions split along the sequence; all-gather + reduce-scatter instead of all-reduce).
    pp: pipeline stages; pp_layers: transformer layers of each stage (None: even, or the default uneven split of
        `pipeline_stage_layers`); micro_batches: micro-batches per step per pipeline (= gradient-accumulation steps);
        pp_schedule: gpipe | 1f1b | interleaved, with vpp model chunks per stage for interleaved.
    cp: context parallel (sequence split across ranks, ring exchange of K/V in attention).
    ep: expert parallel (routed experts split across ep ranks); etp: expert tensor parallel (None: 1).
    zero: ZeRO stage 0–3 (3 = FSDP full shard, 2 = FSDP shard-grad-op); shard_group: hybrid sharding — ZeRO
        shards within groups of this many dp·cp ranks and replicates across groups (None: the whole dp·cp group).
    offload_optimizer: master weights and optimizer states live in CPU memory (ZeRO-Offload).
    offload_activations: kept activations are copied to CPU memory after the forward of each layer.
    """

    dp: Annotated[int, DEGREE] = 1
    tp: Annotated[int, DEGREE] = 1
    pp: Annotated[int, DEGREE] = 1
    cp: Annotated[int, DEGREE] = 1
    ep: Annotated[int, DEGREE] = 1
    etp: Annotated[int | None, DEGREE] = None
    sp: bool = False
    zero: Annotated[int, OneOf(ZERO_STAGES)] = 0
    shard_group: Annotated[int | None, DEGREE] = None
    micro_batches: Annotated[int, BATCH] = 1
    pp_schedule: PPSchedule = "1f1b"
    vpp: Annotated[int, DEGREE] = 1
    offload_optimizer: bool = False
    offload_activations: bool = False
    pp_layers: Annotated[tuple[int, ...] | None, IntTuple(10_000, 2**20)] = None  # ≥ 1 each: checked below

    def __post_init__(self) -> None:
        check_fields(self, "parallel", FLAGS)
        self._check_rules()

    def with_fields(self, **changes: object) -> Parallel:
        """dataclasses.replace(self, **changes) — equal to it, the same errors — without checking again the fields
        it keeps (checked when this layout was made): the changed fields are checked, then every rule across
        fields. What a planner does for each variant of a layout (sp, micro-batches, offload): about 600,000 of
        them in a whole DeepSeek-V3 × 2,048 search, at about 3 µs each against replace's 5.7 µs (timeit)."""
        copy = unchecked_replace(self, **changes)
        check_fields(copy, "parallel", FLAGS, only=changes)
        copy._check_rules()
        return copy

    def _check_rules(self) -> None:
        """The rules across fields (each field's own range is check_fields')."""
        if self.world > WORLD.high:
            raise StepbillError(f"dp·tp·pp·cp = {self.world:,} GPUs exceeds {WORLD.high:,}")
        if self.sp and self.tp == 1:
            raise StepbillError("--sp (sequence parallel) needs --tp > 1")
        if self.pp_schedule == "interleaved":
            if self.pp == 1:
                raise StepbillError("--pp-schedule interleaved needs --pp > 1")
            if self.vpp < 2:
                raise StepbillError("--pp-schedule interleaved needs --vpp >= 2 model chunks per stage")
            if self.micro_batches % self.pp:
                raise StepbillError(
                    f"--pp-schedule interleaved needs --micro-batches ({self.micro_batches}) divisible by --pp ({self.pp})"
                )
        elif self.vpp != 1:
            raise StepbillError("--vpp needs --pp-schedule interleaved")
        if self.pp_layers is not None:
            layers = self.pp_layers
            if not isinstance(layers, tuple) or not all(
                    isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in layers):
                raise StepbillError(f"--pp-layers must be positive integers, one per stage, got {layers!r}")
            if len(layers) != self.pp:
                raise StepbillError(f"--pp-layers gives {len(layers)} stages, --pp is {self.pp}")
            if self.pp_schedule == "interleaved":
                raise StepbillError("--pp-layers with --pp-schedule interleaved is not modelled yet: give even stages")
        if self.shard_group is not None:
            if self.zero == 0:
                raise StepbillError("--shard-group (hybrid sharding) needs --zero 1, 2 or 3")
            if (self.dp * self.cp) % self.shard_group:
                raise StepbillError(
                    f"--shard-group ({self.shard_group}) must divide dp·cp ({self.dp * self.cp})"
                )
        if (self.dp * self.cp * self.tp) % (self.ep * self.expert_tp):
            raise StepbillError(
                f"ep·etp ({self.ep}·{self.expert_tp}) must divide dp·cp·tp ({self.dp * self.cp * self.tp}): "
                "expert layers re-cut the ranks of one pipeline stage"
            )

    # --- derived sizes -------------------------------------------------------------------------------
    @property
    def world(self) -> int:
        """GPUs: dp·tp·pp·cp (ep and etp re-cut the same ranks, they add none)."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel degree (etp, default 1: each expert whole on its rank)."""
        return 1 if self.etp is None else self.etp

    @property
    def edp(self) -> int:
        """Expert data parallel: replicas of each expert shard within one stage, dp·cp·tp / (ep·etp)."""
        return self.dp * self.cp * self.tp // (self.ep * self.expert_tp)

    @property
    def zero_group(self) -> int:
        """Ranks one dense parameter's ZeRO shards spread over: shard_group, or dp·cp."""
        return self.shard_group or self.dp * self.cp

    @property
    def expert_zero_group(self) -> int:
        """Ranks one expert parameter's ZeRO shards spread over (hybrid: at most shard_group)."""
        return min(self.shard_group, self.edp) if self.shard_group else self.edp

    @property
    def is_trivial(self) -> bool:
        """One GPU, nothing sharded: the global bill is the per-rank bill."""
        return self.world == 1 and self.zero == 0 and not (self.offload_optimizer or self.offload_activations)


def pipeline_stage_layers(n_layers: int, pp: int, explicit: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Transformer layers on each pipeline stage.

    `explicit` (--pp-layers) wins. Even when pp divides the layers. Otherwise Megatron-LM's rules, which give the
    first and last stages fewer transformer layers because they also hold the embedding and the LM head + loss:
    - when pp divides L + 2, `account_for_embedding_in_pipeline_split` + `account_for_loss_in_pipeline_split`
      (megatron/core/transformer/transformer_block.py, get_num_layers_to_build): the embedding and the loss count
      as one layer each, so every stage has (L + 2)/pp and the ends one fewer (Llama-3.1-405B: 126 layers, pp 16 →
      7, 8 × 14, 7, the layout of the Llama 3 paper §3.3.2);
    - else `num_layers_in_first_pipeline_stage` / `num_layers_in_last_pipeline_stage`: the middle stages take
      ⌈L/pp⌉ each and the ends share the rest, the first taking the larger half (DeepSeek-V3: 61 layers, pp 16 →
      3, 4 × 14, 2);
    - if the ends would be left empty, an even spread with the extra layers on the middle stages.
    """
    if explicit is not None:
        return tuple(explicit)
    if pp == 1 or n_layers % pp == 0:
        return tuple([n_layers // pp] * pp)
    if (n_layers + 2) % pp == 0 and (n_layers + 2) // pp >= 2:
        per = (n_layers + 2) // pp
        return (per - 1, *[per] * (pp - 2), per - 1)
    middle = -(-n_layers // pp)
    ends = n_layers - (pp - 2) * middle
    if pp > 2 and ends >= 2:
        last = ends // 2
        return (ends - last, *[middle] * (pp - 2), last)
    base, extra = divmod(n_layers, pp)
    counts = [base] * pp
    order = [s for s in range(1, pp - 1)] + [0, pp - 1]  # middle stages first
    for s in order[:extra]:
        counts[s] += 1
    return tuple(counts)


def validate_layout(spec: ModelSpec, parallel: Parallel, seq_len: int, gpus: int | None = None) -> None:
    """Check `parallel` against the model and sequence: one StepbillError naming the first violated rule."""
    if gpus is not None and parallel.world != gpus:
        raise StepbillError(
            f"dp·tp·pp·cp = {parallel.dp}·{parallel.tp}·{parallel.pp}·{parallel.cp} = {parallel.world} "
            f"must equal --gpus ({gpus})"
        )
    a, tp = spec.attention, parallel.tp
    if a.n_heads % tp:
        raise StepbillError(f"--tp ({tp}) must divide the attention heads ({a.n_heads})")
    if a.kv_heads % tp:
        raise StepbillError(f"--tp ({tp}) must divide the key/value heads ({a.kv_heads})")
    if spec.n_dense_layers and spec.ffn.intermediate_size % tp:
        raise StepbillError(f"--tp ({tp}) must divide the FFN width ({spec.ffn.intermediate_size})")
    chunks = parallel.pp * parallel.vpp
    if parallel.pp > 1 and parallel.pp * spec.n_layers > MAX_STAGE_LAYERS:
        raise StepbillError(
            f"--pp {parallel.pp} × {spec.n_layers:,} layers = {parallel.pp * spec.n_layers:,} exceeds "
            f"{MAX_STAGE_LAYERS:,}: the per-stage bill costs stages × layers (not computed faster yet)"
        )
    if parallel.pp_layers is not None and sum(parallel.pp_layers) != spec.n_layers:
        raise StepbillError(f"--pp-layers sum to {sum(parallel.pp_layers)}, the model has {spec.n_layers} layers")
    if parallel.vpp > 1 and spec.n_layers % chunks:
        raise StepbillError(f"pp·vpp ({chunks}) must divide the layers ({spec.n_layers})")
    if parallel.pp > spec.n_layers:
        raise StepbillError(f"--pp ({parallel.pp}) exceeds the layers ({spec.n_layers})")
    if parallel.sp and seq_len % tp:
        raise StepbillError(f"--tp ({tp}) must divide --seq ({seq_len}) under --sp")
    if parallel.cp > 1 and seq_len % (2 * parallel.cp):
        raise StepbillError(f"2·cp ({2 * parallel.cp}) must divide --seq ({seq_len}) (load-balanced causal CP)")
    moe = spec.moe
    if moe is None:
        if parallel.ep > 1 or parallel.etp is not None:
            raise StepbillError(f"--ep/--etp need a mixture-of-experts model; {spec.name} is dense")
        return
    if moe.n_routed_experts % parallel.ep:
        raise StepbillError(f"--ep ({parallel.ep}) must divide the routed experts ({moe.n_routed_experts})")
    if moe.expert_intermediate_size % parallel.expert_tp:
        raise StepbillError(
            f"--etp ({parallel.expert_tp}) must divide the expert width ({moe.expert_intermediate_size})"
        )
    if moe.shared_intermediate_size % tp:
        raise StepbillError(f"--tp ({tp}) must divide the shared-expert width ({moe.shared_intermediate_size})")
