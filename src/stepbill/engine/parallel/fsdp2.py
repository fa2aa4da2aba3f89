"""Per-rank memory of data-parallel sharding as PyTorch implements it: FSDP2 (ZeRO-3 / ZeRO-2) and ZeRO-1
(ZeroRedundancyOptimizer), rank by rank. What measure/sharded.py measures, predicted (tp = pp = 1).

Parameter tensors are those transformers builds (the ParamInventory expanded per layer; MoE experts fused into
`gate_up_proj` (E, 2·F, d) and `down_proj` (E, d, F) as transformers 5 stores them).

FSDP2 (`fully_shard` per decoder layer + root, MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), fp32
sharded parameters, AdamW single-tensor):
- each parameter is chunked along dim 0 into N chunks of ceil(d0/N) rows, padded: every rank allocates the padded
  chunk for its sharded parameter and its sharded gradient (4 B per element), while AdamW's `exp_avg` and
  `exp_avg_sq` follow the unpadded local rows (rank r holds clamp(d0 − r·ceil(d0/N), 0, ceil(d0/N)) rows), plus
  one 4-byte `step` tensor per parameter;
- a unit (a layer, or the root: embedding, final norm, LM head) is all-gathered in bf16 into a flat buffer of its
  padded size and copied out into unsharded parameters; the buffer lives until the next unit's all-gather (two
  copies of one unit while it computes); the root is gathered during the forward and again for the backward;
  ZeRO-3 reshards every unit after its forward and prefetches the next unit's all-gather in the backward;
  ZeRO-2 (reshard_after_forward=False) keeps every layer unsharded from its forward to its backward;
- a unit's bf16 gradients are cast to an fp32 reduce-scatter input of its padded size, which lives until the next
  unit's reduce-scatter; the output (the sharded fp32 gradient) is kept.
ZeRO-1 (ZeroRedundancyOptimizer over AdamW): full parameters and gradients on every rank; AdamW states only for
the rank's partition: parameters sorted by size (largest first, stable) and each given to the rank with the
fewest elements so far (torch's greedy partition).

Peaks: the single-rank eager timeline's activations at each moment (bill.timeline, compute dtype bf16) plus the
pieces above at that moment, plus the loss's logits temporaries (bf16 logits and their fp32 upcast at the loss).
All values are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from stepbill.engine.activations.eager.outside import rope_buffer_bytes
from stepbill.engine.activations.eager.torch_params import TorchTensor, torch_tensors
from stepbill.engine.kinds import Part
from stepbill.engine.memory.eager import eager_terms, muon_takes
from stepbill.engine.memory.optimizer_step import Stepped, step_temporaries
from stepbill.engine.parallel.fsdp2_moments import Units, fsdp_moments
from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec

FP32, BF16, STEP = 4, 2, 4


Tensor = TorchTensor  # the FSDP/ZeRO-1 arithmetic below works on torch's own tensors


def hf_tensors(spec: ModelSpec) -> list[Tensor]:
    """Every parameter tensor transformers builds for `spec`, with its FSDP unit (engine/activations/eager/torch_params):
    every family the loader reads (GPT-2's Conv1D weights as stored, (in, out)). The list is shared (memoised): read
    it, never change it."""
    return _torch_tensors(spec)


@lru_cache(maxsize=64)
def _torch_tensors(spec: ModelSpec) -> list[Tensor]:
    return torch_tensors(spec)


# --- FSDP2 -----------------------------------------------------------------------------------------------

def chunk_rows(d0: int, world: int) -> int:
    """Rows of one FSDP2 chunk (torch.chunk: ceil(d0 / N)); the padded shard of every rank has this many."""
    return -(-d0 // world)


def local_rows(d0: int, world: int, rank: int) -> int:
    """Unpadded rows rank `rank` holds of a dim-0 of `d0`."""
    c = chunk_rows(d0, world)
    return max(0, min(c, d0 - rank * c))


def _rest(t: Tensor) -> int:
    return t.numel // t.shape[0]


def padded_shard(t: Tensor, world: int) -> int:
    return chunk_rows(t.shape[0], world) * _rest(t)


def unit_padded(tensors: list[Tensor], world: int, unit: int) -> int:
    """Elements of one unit all-gathered (padded: N × padded shards)."""
    return sum(world * padded_shard(t, world) for t in tensors if t.unit == unit)


@dataclass(frozen=True)
class RankPrediction:
    """Predicted memory of one rank (bytes), fields as RankMeasurement's; `moments`: (label, total)."""

    rank: int
    world: int
    zero: int
    params: float
    grads: float
    optimizer_states: float
    buffers: float
    inputs: float
    activations: float
    peak_forward: float
    peak_backward: float
    peak_optimizer: float
    transient: dict[str, float] = field(default_factory=dict)
    moments: list[tuple[str, float]] = field(default_factory=list)
    convention: str = "eager"  # activations' convention ("ideal" where eager rows are missing: peaks rough)

    @property
    def peak(self) -> float:
        return max(self.peak_forward, self.peak_backward, self.peak_optimizer)


def fsdp_units(tensors: list[Tensor], world: int, layers: int) -> Units:
    """Bytes of each FSDP2 unit (-1: the root) at world size `world`, in one pass over the tensors."""
    padded = dict.fromkeys(range(-1, layers), 0)
    numel = dict.fromkeys(range(-1, layers), 0)
    last = dict.fromkeys(range(-1, layers), 0)
    head = 0
    for t in tensors:
        padded[t.unit] += padded_shard(t, world)
        numel[t.unit] += t.numel
        if t.unit == -1 and "embed" not in t.name:
            head += t.numel
        if (t.unit >= 0 and ".input_norm." in t.name) or t.name.startswith("embed_tokens."):
            last[t.unit] += t.numel
    return Units(gathered={u: world * n * BF16 for u, n in padded.items()},
                 reduce_scatter={u: world * n * FP32 for u, n in padded.items()},
                 shard_grad={u: n * FP32 for u, n in padded.items()},
                 grad_bf16={u: n * BF16 for u, n in numel.items()},
                 head_grad_bf16=head * BF16, last_grad_bf16={u: n * BF16 for u, n in last.items()})


def shape_counts(tensors: list[Tensor]) -> dict[tuple[int, int], int]:
    """{(dim-0 rows, elements per row): how many tensors}: FSDP2's per-rank arithmetic depends on nothing else."""
    out: dict[tuple[int, int], int] = {}
    for t in tensors:
        key = (t.shape[0], _rest(t))
        out[key] = out.get(key, 0) + 1
    return out


def fsdp_resident(tensors: list[Tensor], world: int, rank: int,
                  shapes: dict[tuple[int, int], int] | None = None) -> dict[str, float]:
    """Bytes rank `rank` of `world` holds: padded fp32 parameter and gradient shards, AdamW states of its
    unpadded rows + one 4-byte step per tensor."""
    shapes = shapes if shapes is not None else shape_counts(tensors)
    params = sum(n * chunk_rows(d0, world) * rest for (d0, rest), n in shapes.items()) * FP32
    local = {key: local_rows(key[0], world, rank) * key[1] for key in shapes}
    opt = 2 * FP32 * sum(shapes[k] * v for k, v in local.items()) + STEP * len(tensors)
    return {"params": params, "grads": params, "optimizer_states": opt}


def zero1_partition(tensors: list[Tensor], world: int) -> list[list[Tensor]]:
    """torch ZeroRedundancyOptimizer's partition: largest first (stable sort), each to the emptiest rank."""
    sizes = [0] * world
    parts: list[list[Tensor]] = [[] for _ in range(world)]
    for t in sorted(tensors, key=lambda x: x.numel, reverse=True):
        r = sizes.index(min(sizes))
        parts[r].append(t)
        sizes[r] += t.numel
    return parts


def rank_classes(predict, world: int) -> dict[tuple, list[int]]:  # type: ignore[no-untyped-def]
    """Group ranks with identical predictions: {key: [ranks]} (key = the prediction's resident numbers)."""
    out: dict[tuple, list[int]] = {}
    for r in range(world):
        p = predict(r)
        out.setdefault((p.params, p.grads, p.optimizer_states, round(p.peak)), []).append(r)
    return out


def _live(moment: Any) -> float:
    """Activations plus the moment's temporaries and autocast copies (eager timeline; 0 under ideal)."""
    items = moment.items
    return items["activations"] + items.get("temporaries", 0) + items.get("autocast_cache", 0)


@dataclass(frozen=True)
class ShardedContext:
    """What every rank's prediction shares: the tensors and the single-rank bill of the compute recipe."""

    tensors: list[Tensor]
    bill: Any
    convention: str
    partitions: dict[int, list[list[Tensor]]] = field(default_factory=dict)  # ZeRO-1, per world size
    #: the collectives' buffers billed: "nccl" (none of their own) or "gloo" (reduce-scatter clones its input)
    backend: str = "nccl"


def predict_rank(spec: ModelSpec, world: int, zero: int, rank: int, micro_batch: int, seq_len: int,
                 context: ShardedContext) -> RankPrediction:
    """Predicted memory of rank `rank` of `world` under ZeRO-`zero` as measure/sharded.py runs it, on the one-GPU
    bill in `context` (see engine/check_rank.sharded_context to build one outside a bill)."""
    if zero not in (1, 2, 3):
        raise StepbillError(f"--zero must be 1, 2 or 3 for a sharded prediction, got {zero}")
    if not 0 <= rank < world:
        raise StepbillError(f"--rank must be in 0..{world - 1}, got {rank}")
    if context.bill.recipe.optimizer != "adamw":  # the states below are AdamW's, as measure/sharded.py runs it
        raise StepbillError(f"the sharded prediction follows measure/sharded.py, which steps AdamW; got "
                            f"--optimizer {context.bill.recipe.optimizer}")
    ctx = context
    tensors, bill, convention = ctx.tensors, ctx.bill, ctx.convention
    assert bill.timeline is not None
    act_bytes = bill.recipe.precision.activation
    tokens = micro_batch * seq_len
    # The eager timeline already holds the logits (and their fp32 upcast) at the loss and each backward
    # moment's temporaries; the ideal one has neither, so add the loss's logits here.
    loss_temp = 0 if convention == "eager" else tokens * spec.vocab_size * (act_bytes + (FP32 if act_bytes != FP32 else 0))
    inputs = tokens * 8
    buffers = rope_buffer_bytes(spec)
    moments = list(bill.timeline.moments)
    layers = spec.n_layers
    if zero == 1:
        p = bill.recipe.precision
        if world not in ctx.partitions:
            ctx.partitions[world] = zero1_partition(tensors, world)
        parts = ctx.partitions[world]
        mine = sum(t.numel for t in parts[rank])
        params = sum(t.numel for t in tensors) * p.weights
        grads = sum(t.numel for t in tensors) * p.grads
        opt = 2 * p.state * mine + STEP * len(parts[rank])
        base = params + opt + inputs + buffers
        out: list[tuple[str, str, float]] = []
        for m in moments:
            if m.phase == "optimizer":  # the one GPU's step updates every tensor: the rank's own follows
                continue
            extra = loss_temp if m.part in (Part.HEAD, Part.LOSS) else 0
            out.append((m.phase, m.label, base + m.items["grads"] + _live(m) + extra))
        # the rank's local AdamW steps its partition in the partition's order (largest first)
        out.append(("optimizer", "AdamW temporaries", base + grads + step_temporaries(
            bill.recipe.optimizer, bill.recipe.optimizer_impl, p.state,
            [Stepped(t.shape, muon_takes(t)) for t in parts[rank]])))
        return _finish(rank, world, zero, params, grads, opt, buffers, inputs, bill, out, {}, loss_temp, convention)
    if ("shapes", 0) not in ctx.partitions:
        ctx.partitions[("shapes", 0)] = shape_counts(tensors)  # type: ignore[index]
    res = fsdp_resident(tensors, world, rank, ctx.partitions[("shapes", 0)])  # type: ignore[index]
    if ("units", world) not in ctx.partitions:  # the same for every rank of this world size
        ctx.partitions[("units", world)] = fsdp_units(tensors, world, layers)  # type: ignore[index]
    units = ctx.partitions[("units", world)]  # type: ignore[index]
    u_bf16, rs_fp32 = units.gathered, units.reduce_scatter
    eager = getattr(bill, "eager", None)
    if eager is None and convention == "eager":
        eager = eager_terms(spec, bill.recipe, bill.inventory, bill.plan)
    # alive from the first layer to the last backward: the RoPE tables, and what the checkpoints hold (masks, position
    # ids); the decoder's masks are in the timeline's forward layer moments, which fsdp_moments reads as the kept bytes
    rope = eager.rope + eager.held_at(None) if eager is not None else 0
    masks = eager.decoder_masks if eager is not None else 0
    base = res["params"] + res["optimizer_states"] + inputs + buffers
    key = ("moments", world, zero, ctx.backend)
    if key not in ctx.partitions:  # the buffers and activations are the same on every rank: only `base` differs
        ctx.partitions[key] = fsdp_moments(bill, units, zero, 0.0, rope, ctx.backend, masks)  # type: ignore[index]
    out = [(phase, label, base + v) for phase, label, v in ctx.partitions[key]]  # type: ignore[index]
    # AdamW steps the rank's unpadded rows of every tensor in module order (model.parameters())
    local = [Stepped((local_rows(t.shape[0], world, rank), *t.shape[1:]), muon_takes(t)) for t in tensors]
    temporaries = step_temporaries(bill.recipe.optimizer, bill.recipe.optimizer_impl, FP32, local)
    out.append(("optimizer", "optimizer step", base + res["grads"] + temporaries))
    transient = {"all_gather_layer": max(u_bf16[u] for u in range(layers)), "all_gather_root": u_bf16[-1],
                 "reduce_scatter_layer": max(rs_fp32[u] for u in range(layers)), "reduce_scatter_root": rs_fp32[-1]}
    if ctx.backend == "gloo":  # gloo's reduce-scatter clones its input (fsdp2_moments.py)
        transient["reduce_scatter_clone_gloo"] = max(rs_fp32.values())
    return _finish(rank, world, zero, res["params"], res["grads"], res["optimizer_states"], buffers, inputs, bill,
                   out, transient, loss_temp, convention)


def _finish(rank, world, zero, params, grads, opt, buffers, inputs, bill, out, transient, loss_temp,  # type: ignore[no-untyped-def]
            convention):
    def peak(phase: str) -> float:
        return max(v for ph, _, v in out if ph == phase)

    return RankPrediction(rank, world, zero, params, grads, opt, buffers, inputs,
                          bill.lines["memory.activations"].value + loss_temp, peak("forward"), peak("backward"),
                          peak("optimizer"), transient, [(label, v) for _, label, v in out], convention)
