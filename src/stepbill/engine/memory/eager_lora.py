"""The eager timeline's LoRA terms that need the adapters' shapes (engine/memory/eager.py uses them): AdamW's
temporaries over the adapters, and under amp the A casts of layer 0's adapters that autocast caches but nothing saves.
Measured against MemTracker on a PEFT-wrapped tiny Llama and Llama-3.2-1B (tests/measure/test_lora_amp_recompute.py).
"""

from __future__ import annotations

import math

from stepbill.engine.memory.adamw_step import adamw_step_temporaries
from stepbill.engine.params import ParamInventory
from stepbill.engine.recompute import RecomputePlan
from stepbill.engine.states import lora_adapter_groups
from stepbill.spec.recipe import LoRA


def lora_optimizer_temporaries(inventory: ParamInventory, lora: LoRA, impl: str, state_bytes: int) -> int:
    """optimizer_temporaries under LoRA: AdamW steps the adapters only (A then B of each targeted Linear, in module
    order, layer after layer), never the frozen base (whose embedding/LM head would otherwise set the single-tensor
    maximum: measured on Llama-3.2-1B, LoRA q,v under full recompute, where the optimizer moment was the bill's
    step peak, +5.8 %)."""
    groups = lora_adapter_groups(inventory, lora)
    layer = [math.prod(shape) for shape, copies, _ in groups if copies > 1]
    rest = [math.prod(shape) for shape, copies, _ in groups if copies <= 1]
    order = layer + layer[:1] + rest if layer else rest  # one layer read cyclically gives every consecutive pair
    total = sum(math.prod(shape) * copies for shape, copies, _ in groups)
    return adamw_step_temporaries(impl, state_bytes, order, total)


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
