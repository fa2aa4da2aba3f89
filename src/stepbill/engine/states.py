"""Resident state: weights, gradients, master copy and optimizer states, per parameter and in total.

Also what a checkpoint must hold to resume, and how LoRA splits the model into a frozen base (weights
only) and trainable adapters (the full recipe).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stepbill.engine.line import Line, cited
from stepbill.engine.params import ParamInventory, ParamTensor
from stepbill.errors import StepbillError
from stepbill.spec.recipe import LoRA, Precision, Recipe

ZERO = cited("ZeRO, arXiv 1910.02054 §3.1 (2Ψ + 2Ψ + KΨ, K = 12)")
#: The frozen base of LoRA keeps its weights only: no gradient, no optimizer state (Hu et al. 2021, arXiv 2106.09685
#: §4.1: "W0 is frozen and does not receive gradient updates"); ZeRO's 2 + 2 + K accounting does not apply to it.
LORA_FROZEN = cited("LoRA, arXiv 2106.09685 §4.1 (W0 frozen: weights only, no gradient or optimizer state)")

# A parameter group as (shape of one tensor, copies, is a hidden 2-D matrix).
Group = tuple[tuple[int, ...], int, bool]


def optimizer_state_elements(optimizer: str, groups: list[Group]) -> dict[str, int]:
    """Elements of each optimizer state over the trainable `groups`, by state name.

    Adafactor (no momentum) keeps row and column sums of the second moment for matrices (r + c per
    matrix instead of r·c) and a full second moment for vectors. Muon keeps one momentum for hidden 2-D
    matrices and AdamW's two moments for everything else (embeddings, LM head, norms, biases).
    """
    full = sum(math.prod(shape) * copies for shape, copies, _ in groups)
    if optimizer in ("adamw", "adam"):
        return {"m": full, "v": full}
    if optimizer == "sgd":
        return {}
    if optimizer in ("sgd-momentum", "lion"):
        return {"momentum": full}
    if optimizer == "adafactor":
        factored = sum((sum(shape) if len(shape) == 2 else math.prod(shape)) * copies for shape, copies, _ in groups)
        return {"v_factored": factored}
    if optimizer == "muon":
        matrices = sum(math.prod(shape) * copies for shape, copies, is_matrix in groups if is_matrix)
        rest = full - matrices
        return {"muon_momentum": matrices, "adamw_m": rest, "adamw_v": rest}
    raise ValueError(optimizer)


def bytes_per_param(precision: Precision, optimizer: str, matrix_shape: tuple[int, int] = (4096, 4096)) -> dict[str, float]:
    """Bytes per parameter of each resident item for one hidden matrix of `matrix_shape`.

    The seed's per-parameter ledger: mixed-bf16 AdamW 2+2+4+4+4 = 16, fp32 AdamW 4+4+4+4 = 16, an fp32
    grad accumulator 18, Muon/Lion 12, Adafactor ≈ 8 (factored v ≈ 0), 8-bit AdamW 10.
    """
    numel = math.prod(matrix_shape)
    states = optimizer_state_elements(optimizer, [(matrix_shape, 1, True)])
    table: dict[str, float] = {"weights": precision.weights, "grads": precision.grads}
    if precision.master:
        table["master"] = precision.master
    for name, elements in states.items():
        if elements:
            table[name] = precision.state * elements / numel
    return table


def resident_bytes(n_params: float, bytes_per_parameter: float) -> float:
    """Resident bytes of `n_params` parameters at `bytes_per_parameter` (e.g. 671e9 × 16 B = 9.76 TiB)."""
    return n_params * bytes_per_parameter


def cards_needed(total_bytes: float, card_bytes: float) -> int:
    """Cards of `card_bytes` each needed to hold `total_bytes` (ceil), ignoring everything else on them."""
    return math.ceil(total_bytes / card_bytes)


@dataclass(frozen=True)
class Trainable:
    """The split of a model's parameters into what is trained and what is frozen."""

    trainable: tuple[Group, ...]
    frozen_params: int

    @property
    def trainable_params(self) -> int:
        return sum(math.prod(shape) * copies for shape, copies, _ in self.trainable)


def _groups(tensors: tuple[ParamTensor, ...]) -> tuple[Group, ...]:
    return tuple((t.shape, t.copies, t.is_matrix) for t in tensors)


def lora_adapter_groups(inventory: ParamInventory, lora: LoRA) -> tuple[Group, ...]:
    """Adapter tensors: for each targeted (out, in) matrix, A of (r, in) and B of (out, r) per copy."""
    groups: list[Group] = []
    for t in inventory.tensors:
        if len(t.shape) == 2 and lora.targets_matrix(t.name, t.component):
            out_dim, in_dim = t.shape
            groups += [((lora.rank, in_dim), t.copies, True), ((out_dim, lora.rank), t.copies, True)]
    return tuple(groups)


def trainable_split(inventory: ParamInventory, lora: LoRA | None) -> Trainable:
    """Full fine-tuning trains everything; LoRA trains adapters and freezes the whole base."""
    if lora is None:
        return Trainable(_groups(inventory.tensors), 0)
    adapters = lora_adapter_groups(inventory, lora)
    if not adapters:
        names = sorted({t.name.removesuffix(".weight").split(".")[-1] for t in inventory.tensors if len(t.shape) == 2})
        raise StepbillError(f"no matrix matches lora targets {', '.join(lora.targets)} (matrices: {', '.join(names)})")
    return Trainable(adapters, inventory.total)


def resident_lines(inventory: ParamInventory, recipe: Recipe) -> list[Line]:
    """Lines for weights, grads, master and each optimizer state, in bytes (trainable + frozen)."""
    p = recipe.precision
    split = trainable_split(inventory, recipe.lora)
    n_train, n_frozen = split.trainable_params, split.frozen_params
    prov = ZERO if p.name == "mixed-bf16" and recipe.optimizer == "adamw" else p.provenance
    lines = []
    if n_frozen and p.quant is not None:  # QLoRA: 4-bit codes + constants + the bf16 rest (engine/quant.py)
        from stepbill.engine.quant import frozen_lines

        lines += frozen_lines(inventory, p, prov)
    elif n_frozen:
        frozen = p.frozen if p.frozen is not None else p.weights
        lines.append(Line("weights.frozen", n_frozen * frozen, "bytes", "{params} frozen params × {bytes} B",
                          {"params": n_frozen, "bytes": frozen}, LORA_FROZEN))
    lines.append(Line("weights", n_train * p.weights, "bytes", "{params} params × {bytes} B",
                      {"params": n_train, "bytes": p.weights}, prov))
    lines.append(Line("grads", n_train * p.grads, "bytes", "{params} params × {bytes} B",
                      {"params": n_train, "bytes": p.grads}, prov))
    if p.master:
        lines.append(Line("master", n_train * p.master, "bytes", "{params} params × {bytes} B (fp32 copy)",
                          {"params": n_train, "bytes": p.master}, prov))
    for name, elements in optimizer_state_elements(recipe.optimizer, list(split.trainable)).items():
        lines.append(Line(f"optimizer.{name}", elements * p.state, "bytes", "{elements} elements × {bytes} B",
                          {"elements": elements, "bytes": p.state}, prov))
    if p.fp8 == "te":  # Transformer Engine's fp8 copy + transpose of every GEMM weight (engine/fp8.py)
        from stepbill.engine.fp8 import weight_cache_line

        at = next(i for i, x in enumerate(lines) if x.name == "weights") + 1
        lines.insert(at, weight_cache_line(inventory))
    return lines


MODEL_ITEMS = ("weights.frozen", "weights", "grads", "weights.nf4", "weights.nf4_constants", "weights.fp8")


def is_model_item(name: str) -> bool:
    """Whether a resident item is on the "model" side (weights + grads) rather than the optimizer side."""
    return name in MODEL_ITEMS


def export_line(inventory: ParamInventory, recipe: Recipe) -> Line:
    """What saving the trained weights alone writes (a weights-only export, transformers' save_pretrained): every
    trained parameter in the weights' training dtype — under LoRA the adapters alone (PEFT saves the adapter; the
    base is reloaded from its own file). Not part of the checkpoint to resume."""
    n = trainable_split(inventory, recipe.lora).trainable_params
    b = recipe.precision.weights
    what = "LoRA adapter params" if recipe.lora is not None else "params"
    return Line("checkpoint.weights_export", n * b, "bytes", "{params} " + what + " × {bytes} B",
                {"params": n, "bytes": b},
                convention="weights only, in the weights' training dtype (save_pretrained); not resumable")


def rank_checkpoint_bytes(owned: dict[str, float]) -> float:
    """One rank's share (bytes) of the checkpoint to resume (checkpoint_lines' master weights and optimizer
    states): its owned bytes of each — RankClass.owned, an item's bytes over the ranks that hold it, which sums over
    the ranks to the whole, as torch.distributed.checkpoint writes every shard once and spreads duplicated items
    over their holders (its save planner's deduplication). The weights stand for the master where there is no
    master item: a recipe without one, or the measured FSDP2 classes, whose fp32 shards are the master and whose
    optimizer states are one item."""
    master = "master" if "master" in owned else "weights"
    return sum(v for k, v in owned.items() if k in (master, "optimizer") or k.startswith("optimizer."))


def checkpoint_lines(inventory: ParamInventory, recipe: Recipe) -> list[Line]:
    """What must be saved to resume exactly: the master weights (or the weights where they are the master),
    every optimizer state, the step counter, RNG states and the data loader position.

    LoRA saves only the adapters and their states; the frozen base is reloaded from its own file.
    """
    p = recipe.precision
    split = trainable_split(inventory, recipe.lora)
    n = split.trainable_params
    master_bytes = p.master or p.weights
    lines = [Line("checkpoint.master_weights", n * master_bytes, "bytes", "{params} params × {bytes} B",
                  {"params": n, "bytes": master_bytes})]
    for name, elements in optimizer_state_elements(recipe.optimizer, list(split.trainable)).items():
        lines.append(Line(f"checkpoint.optimizer.{name}", elements * p.state, "bytes",
                          "{elements} elements × {bytes} B", {"elements": elements, "bytes": p.state}))
    for name, what in (
        ("checkpoint.step", "optimizer step counter (bias correction, schedule position)"),
        ("checkpoint.rng_state", "RNG states of every rank (dropout, data shuffling)"),
        ("checkpoint.data_position", "data loader position (which samples were consumed)"),
    ):
        lines.append(Line(name, 0, "bytes", what + "; a few KiB, counted as 0"))
    return lines
