"""The eager timeline's LoRA terms that need the adapters' shapes (engine/memory/eager.py uses them): the tensors the
optimizer steps (the adapters), and under amp the A casts of layer 0's adapters that autocast caches but nothing saves.
Measured against MemTracker on a PEFT-wrapped tiny Llama and Llama-3.2-1B (tests/measure/test_lora_amp_recompute.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from stepbill.engine.memory.optimizer_step import Stepped
from stepbill.engine.params import ParamInventory
from stepbill.engine.recompute import RecomputePlan
from stepbill.engine.states import lora_adapter_groups
from stepbill.spec.recipe import LoRA


def lora_stepped(inventory: ParamInventory, lora: LoRA, order: Sequence[str]) -> list[Stepped]:
    """The tensors the optimizer steps under LoRA, in PEFT's module order: A then B of each targeted matrix, layer
    after layer (`order`: the layer kind of each layer), never the frozen base (whose embedding / LM head would
    otherwise set AdamW's single-tensor maximum: measured on Llama-3.2-1B, LoRA q,v under full recompute, where the
    optimizer moment was the bill's step peak, +5.8 %). Every adapter is a matrix: Muon takes them all."""
    per_kind: dict[str, list[Stepped]] = {}
    for kind in dict.fromkeys(order):
        n = order.count(kind)
        mine = ParamInventory(tuple(x for x in inventory.tensors if x.layer_kind == kind))
        per_kind[kind] = [Stepped(shape, muon=True) for shape, copies, _ in lora_adapter_groups(mine, lora)
                          for _ in range(copies // n)]
    return [t for kind in order for t in per_kind[kind]]


def first_layer_adapter_a_casts(inventory: ParamInventory, plan: RecomputePlan, lora: LoRA, compute_bytes: int) -> int:
    """amp under LoRA: bytes of the A weight casts of layer 0's q/k/v adapters (one layer's share): autocast caches
    them (a leaf that requires grad), but A's matmul saves no weight, its input needing no gradient (measured with
    saved_tensors_hooks on a PEFT-wrapped tiny Llama: layer 0's lora_A saves its input cast only)."""
    if not plan.order:
        return 0
    first = plan.order[0]
    n = max(1, plan.order.count(first))
    mine = ParamInventory(tuple(x for x in inventory.tensors if x.layer_kind == first
                                and x.name in ("attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight")))
    a_casts = lora_adapter_groups(mine, lora)[0::2]  # (A, B) per targeted matrix: A of (r, in)
    return sum(math.prod(shape) * copies for shape, copies, _ in a_casts) // n * compute_bytes
