"""The parameter tensors as torch holds them (transformers' modules, registration order), from the inventory.

The inventory names one logical matrix per row; transformers fuses some of them into one tensor, which matters
wherever PyTorch works per tensor (AdamW's `step` counters, the `single` implementation's per-tensor
temporaries, FSDP2's dim-0 chunks, ZeRO-1's partition):
- grouped experts (every MoE family): `experts.gate_up_proj` [E, 2f, h] and `experts.down_proj` [E, h, f], one
  tensor each per layer; the router comes before them (mixtral, qwen2_moe) or after them (qwen3_moe, deepseek);
- GPT-2's `c_attn` and GPT-NeoX's `query_key_value`: q, k and v in one weight (and one bias); Phi-3's
  `qkv_proj` and `gate_up_proj` (ModelSpec fused_qkv / fused_gate_up).
- GPT-2's layer matrices are `Conv1D` weights stored (in, out): dim 0, the one FSDP2 chunks, is the input width
  (transformers.pytorch_utils.Conv1D: `weight = nn.Parameter(torch.empty(nx, nf))`).
A layer's norms come where its module registers them: after its attention and MLP in most families (Llama's
decoder layer makes `self_attn` and `mlp` before `input_layernorm`; what the single-tensor Adafactor's leftovers
and AdamW's consecutive pairs read), first in GPT-NeoX, each before its block in GPT-2 (`ln_1`, `attn`, `ln_2`,
`mlp`). Phi-3's attention makes `o_proj` before `qkv_proj`, gpt-oss's its `sinks` before `q_proj`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from stepbill.engine.params import ParamInventory, ParamTensor, param_inventory
from stepbill.spec.model import ModelSpec

FUSED_QKV = ("gpt2", "gpt_neox")
CONV1D = ("gpt2",)  # layer matrices stored transposed, (in, out)
ROUTER_AFTER_EXPERTS = ("qwen3_moe", "deepseek_v2", "deepseek_v3")
NORMS_FIRST = ("gpt_neox",)  # the layer's norms before its attention (GPTNeoXLayer registers them first)
NORMS_BETWEEN = ("gpt2",)  # ln_1 before the attention, ln_2 before the MLP (GPT2Block)
#: attention tensors registered before the rest of the attention's: Phi3Attention's o_proj, GptOssAttention's sinks
ATTENTION_FIRST = {"phi3": "attn.o_proj.", "gpt_oss": "attn.sinks"}
QKV = ("q_proj", "k_proj", "v_proj")
GATE_UP = ("gate_proj", "up_proj")


@dataclass(frozen=True)
class TorchTensor:
    """One parameter tensor as torch holds it; `unit` is its decoder layer, or -1 for the root (embedding,
    final norm, LM head) — FSDP's wrapping units."""

    name: str
    shape: tuple[int, ...]
    unit: int = -1

    numel: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "numel", math.prod(self.shape))


def _grouped_experts(rows: list[ParamTensor], n_layers: int) -> list[TorchTensor]:
    gate = next((t for t in rows if t.component == "experts" and "gate_proj" in t.name), None)
    down = next((t for t in rows if t.component == "experts" and "down_proj" in t.name), None)
    if gate is None or down is None:
        return []
    experts = gate.copies // n_layers
    if any(t.component == "experts" and t.name.endswith(".bias") for t in rows):
        # gpt-oss: [E, h, 2f] and [E, f, h] (transposed), each followed by its bias
        return [TorchTensor("experts.gate_up_proj", (experts, gate.shape[1], 2 * gate.shape[0])),
                TorchTensor("experts.gate_up_proj_bias", (experts, 2 * gate.shape[0])),
                TorchTensor("experts.down_proj", (experts, down.shape[1], down.shape[0])),
                TorchTensor("experts.down_proj_bias", (experts, down.shape[0]))]
    return [TorchTensor("experts.gate_up_proj", (experts, 2 * gate.shape[0], gate.shape[1])),
            TorchTensor("experts.down_proj", (experts, *down.shape))]


def _layer(spec: ModelSpec, inventory: ParamInventory, kind: str, n_layers: int) -> list[TorchTensor]:
    """The torch tensors of one layer of `kind`, in registration order."""
    rows = [t for t in inventory.tensors if t.layer_kind == kind]
    router = [TorchTensor(t.name, t.shape) for t in rows if t.component == "router" for _ in range(t.copies // n_layers)]
    grouped = _grouped_experts(rows, n_layers)
    moe_block = grouped + router if spec.family in ROUTER_AFTER_EXPERTS else router + grouped
    out: list[TorchTensor] = []
    qkv: dict[str, int] = {}  # fused q/k/v: index in `out` of the weight and of the bias
    for t in rows:
        if t.component in ("experts", "router"):
            out += moe_block
            moe_block = []
        elif (spec.family in FUSED_QKV or spec.attention.fused_qkv) and t.name.split(".")[1] in QKV:
            end = t.name.rsplit(".", 1)[1]
            if end not in qkv:
                qkv[end] = len(out)
                out.append(TorchTensor(f"attn.qkv.{end}", (0, *t.shape[1:])))
            fused = out[qkv[end]]
            out[qkv[end]] = TorchTensor(fused.name, (fused.shape[0] + t.shape[0], *t.shape[1:]))
        elif spec.ffn.fused_gate_up and t.component == "ffn" and t.name.split(".")[1] in GATE_UP:
            # Phi-3's gate_up_proj: gate and up stacked in one weight [2f, h]
            end = "gate_up." + t.name.rsplit(".", 1)[1]
            if end not in qkv:
                qkv[end] = len(out)
                out.append(TorchTensor(f"mlp.{end}", (0, *t.shape[1:])))
            fused = out[qkv[end]]
            out[qkv[end]] = TorchTensor(fused.name, (fused.shape[0] + t.shape[0], *t.shape[1:]))
        else:
            out += [TorchTensor(t.name, t.shape)] * (t.copies // n_layers)
    if spec.family in CONV1D:
        out = [TorchTensor(x.name, x.shape[::-1]) if len(x.shape) == 2 else x for x in out]
    if spec.family in ATTENTION_FIRST:
        first = [x for x in out if x.name.startswith(ATTENTION_FIRST[spec.family])]
        at = next(i for i, x in enumerate(out) if x.name.startswith("attn."))
        rest = [x for x in out if x not in first]
        out = rest[:at] + first + rest[at:]
    return _norms_in_place(spec, out)


def _norms_in_place(spec: ModelSpec, tensors: list[TorchTensor]) -> list[TorchTensor]:
    """A layer's tensors with its norms (inventory: first) where the family's layer module registers them."""
    norms = [t for t in tensors if t.name.split(".")[0].endswith("_norm")]
    rest = tensors[len(norms):]
    if spec.family in NORMS_FIRST or not norms:
        return tensors
    if spec.family in NORMS_BETWEEN:
        ffn = next((i for i, t in enumerate(rest) if not t.name.startswith("attn.")), len(rest))
        before = [t for t in norms if t.name.startswith("input_norm")]
        return before + rest[:ffn] + norms[len(before):] + rest[ffn:]
    return rest + norms


def torch_tensors(spec: ModelSpec) -> list[TorchTensor]:
    """Every parameter tensor transformers builds for `spec`, in registration order, with its FSDP unit."""
    inventory = param_inventory(spec)
    kinds = ["moe" if spec.is_moe_layer(i) else "dense" for i in range(spec.n_layers)]
    per_kind = {k: _layer(spec, inventory, k, kinds.count(k)) for k in set(kinds)}
    root = [(t, TorchTensor(t.name, t.shape)) for t in inventory.tensors if not t.layer_kind for _ in range(t.copies)]
    embed = [x for t, x in root if t.component == "embedding"]
    head = [x for t, x in root if t.component != "embedding"]
    layers = [TorchTensor(f"layers.{i}.{x.name}", x.shape, i) for i, k in enumerate(kinds) for x in per_kind[k]]
    return embed + layers + head


def torch_tensor_sizes(spec: ModelSpec) -> list[int]:
    """Elements of every parameter tensor of the model in registration order."""
    return [t.numel for t in torch_tensors(spec)]
