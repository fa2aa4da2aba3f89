"""The parameter tensors as torch holds them (transformers' modules, registration order), from the inventory.

The inventory names one logical matrix per row; transformers fuses some of them into one tensor, which matters
wherever PyTorch works per tensor (AdamW's `step` counters, the `single` implementation's per-tensor
temporaries):
- grouped experts (every MoE family): `experts.gate_up_proj` [E, 2f, h] and `experts.down_proj` [E, h, f], one
  tensor each per layer; the router comes before them (mixtral, qwen2_moe) or after them (qwen3_moe, deepseek);
- GPT-2's `c_attn` and GPT-NeoX's `query_key_value`: q, k and v in one weight (and one bias).
Norms keep the inventory's place (after the layer's matrices): their tensors are small next to any pair of
matrices, so their place does not move the per-pair maximum.
"""

from __future__ import annotations

from stepbill.engine.params import ParamInventory
from stepbill.spec.model import ModelSpec

FUSED_QKV = ("gpt2", "gpt_neox")
ROUTER_AFTER_EXPERTS = ("qwen3_moe", "deepseek_v2", "deepseek_v3")


def _layer(spec: ModelSpec, inventory: ParamInventory, kind: str, n_layers: int) -> list[int]:
    """Elements of each torch tensor of one layer of `kind`, in registration order."""
    rows = [t for t in inventory.tensors if t.layer_kind == kind]
    gate_up = sum(t.numel * t.copies for t in rows if t.component == "experts" and "down_proj" not in t.name)
    down = sum(t.numel * t.copies for t in rows if t.component == "experts" and "down_proj" in t.name)
    router = [t.numel for t in rows if t.component == "router" for _ in range(t.copies // n_layers)]
    grouped = [gate_up // n_layers, down // n_layers] if gate_up else []
    moe_block = grouped + router if spec.family in ROUTER_AFTER_EXPERTS else router + grouped
    out: list[int] = []
    qkv: dict[str, int] = {}  # fused q/k/v: index in `out` of the weight and of the bias
    for t in rows:
        if t.component in ("experts", "router"):
            out += moe_block
            moe_block = []
        elif spec.family in FUSED_QKV and t.name.split(".")[1] in ("q_proj", "k_proj", "v_proj"):
            end = t.name.rsplit(".", 1)[1]
            if end not in qkv:
                qkv[end] = len(out)
                out.append(0)
            out[qkv[end]] += t.numel
        else:
            out += [t.numel] * (t.copies // n_layers)
    return out


def torch_tensor_sizes(spec: ModelSpec, inventory: ParamInventory, order: tuple[str, ...]) -> list[int]:
    """Elements of every parameter tensor of the model in registration order (layers in `order`)."""
    counts = {k: order.count(k) for k in set(order)}
    layers = {k: _layer(spec, inventory, k, n) for k, n in counts.items()}
    head = [t.numel for t in inventory.tensors for _ in range(t.copies) if not t.layer_kind
            and t.component != "embedding"]
    embed = [t.numel for t in inventory.tensors for _ in range(t.copies) if t.component == "embedding"]
    return embed + [n for k in order for n in layers[k]] + head
