"""Parameter inventory: every weight tensor of the model, grouped by component, total and active per token.

The layout mirrors what HF transformers builds for the same architecture (tests hold the total to
transformers' own count on the meta device), so LoRA targets and Muon's "2-D matrices" can be read off it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache

from stepbill.spec.model import ModelSpec

# Norm layers of one decoder layer by ModelSpec.norm_placement (transformers' DecoderLayer of each family):
# pre: input_layernorm + post_attention_layernorm (which normalises the MLP's input); sandwich (Gemma2/3):
# also post_attention / pre_feedforward / post_feedforward; post (OLMo2): post_attention + post_feedforward.
LAYER_NORMS = {
    "pre": ("input_norm", "post_attn_norm"),
    "sandwich": ("input_norm", "post_attn_norm", "pre_ffn_norm", "post_ffn_norm"),
    "post": ("post_attn_norm", "post_ffn_norm"),
}
COMPONENTS = ("embedding", "attention", "ffn", "experts", "shared_experts", "router", "norms", "lm_head")


@dataclass(frozen=True)
class ParamTensor:
    """One kind of weight tensor and how many copies of it the model holds.

    `shape` is (out, in) for a linear weight, as torch stores it. `copies` counts every instance in the
    model (layers × experts); `active_copies` counts those a single token passes through (routed experts:
    layers × top_k). `layer_kind` is "dense" or "moe" for per-layer tensors, "" for the model-level ones.
    """

    name: str
    component: str
    shape: tuple[int, ...]
    copies: int
    active_copies: int
    layer_kind: str = ""
    numel: int = field(init=False, compare=False, repr=False)  # elements of one copy
    total: int = field(init=False, compare=False, repr=False)  # elements of all copies
    active: int = field(init=False, compare=False, repr=False)  # elements a single token uses

    def __post_init__(self) -> None:  # computed once: the per-rank model reads them per tensor per rank class
        numel = math.prod(self.shape)
        object.__setattr__(self, "numel", numel)
        object.__setattr__(self, "total", numel * self.copies)
        object.__setattr__(self, "active", numel * self.active_copies)

    @property
    def is_matrix(self) -> bool:
        """A 2-D hidden-layer matrix (what Muon orthogonalises; embeddings and LM head excluded)."""
        return len(self.shape) == 2 and self.component not in ("embedding", "lm_head")


@dataclass(frozen=True)
class ParamInventory:
    """All parameter tensors of a model, with totals per component."""

    tensors: tuple[ParamTensor, ...]

    @property
    def total(self) -> int:
        """Parameter count (unique tensors; tied embeddings counted once)."""
        return sum(t.total for t in self.tensors)

    @property
    def active(self) -> int:
        """Parameters used per token (MoE: only top_k routed experts)."""
        return sum(t.active for t in self.tensors)

    def by_component(self) -> dict[str, tuple[int, int]]:
        """{component: (total, active)} in COMPONENTS order, components with no parameters left out."""
        out: dict[str, tuple[int, int]] = {}
        for comp in COMPONENTS:
            rows = [t for t in self.tensors if t.component == comp]
            if rows:
                out[comp] = (sum(t.total for t in rows), sum(t.active for t in rows))
        return out

    def matrix_total(self) -> int:
        """Elements in 2-D hidden matrices (Muon's share)."""
        return sum(t.total for t in self.tensors if t.is_matrix)


def _norm(spec: ModelSpec, width: int) -> tuple[tuple[int, ...], ...]:
    """Shapes of one norm layer: LayerNorm has weight and bias, RMSNorm only a weight."""
    return ((width,), (width,)) if spec.norm == "layernorm" else ((width,),)


def _linear(name: str, comp: str, d_in: int, d_out: int, bias: bool, n: int, act: int, kind: str) -> list[ParamTensor]:
    rows = [ParamTensor(f"{name}.weight", comp, (d_out, d_in), n, act, kind)]
    if bias:
        rows.append(ParamTensor(f"{name}.bias", comp, (d_out,), n, act, kind))
    return rows


def _attention(spec: ModelSpec, n: int, kind: str) -> list[ParamTensor]:
    a, d = spec.attention, spec.hidden_size
    rows: list[ParamTensor] = []
    if a.kind == "mla":
        qk = a.qk_head_dim
        if a.q_lora_rank is None:
            rows += _linear("attn.q_proj", "attention", d, a.n_heads * qk, False, n, n, kind)
        else:
            rows += _linear("attn.q_a_proj", "attention", d, a.q_lora_rank, a.qkv_bias, n, n, kind)
            rows += [ParamTensor("attn.q_a_layernorm.weight", "norms", (a.q_lora_rank,), n, n, kind)]
            rows += _linear("attn.q_b_proj", "attention", a.q_lora_rank, a.n_heads * qk, False, n, n, kind)
        rows += _linear(
            "attn.kv_a_proj_with_mqa", "attention", d, a.kv_lora_rank + a.qk_rope_head_dim, a.qkv_bias, n, n, kind
        )
        rows += [ParamTensor("attn.kv_a_layernorm.weight", "norms", (a.kv_lora_rank,), n, n, kind)]
        rows += _linear(
            "attn.kv_b_proj", "attention", a.kv_lora_rank, a.n_heads * (a.qk_nope_head_dim + a.v_head_dim),
            False, n, n, kind,
        )
        rows += _linear("attn.o_proj", "attention", a.n_heads * a.v_head_dim, d, a.out_bias, n, n, kind)
        return rows
    hd = a.qk_head_dim
    rows += _linear("attn.q_proj", "attention", d, a.n_heads * hd, a.qkv_bias, n, n, kind)
    rows += _linear("attn.k_proj", "attention", d, a.kv_heads * hd, a.qkv_bias, n, n, kind)
    rows += _linear("attn.v_proj", "attention", d, a.kv_heads * hd, a.qkv_bias, n, n, kind)
    rows += _linear("attn.o_proj", "attention", a.n_heads * hd, d, a.out_bias, n, n, kind)
    if a.qk_norm:
        # Qwen3 / Gemma3 normalise each head (weight of head_dim); OLMo2 the whole projection (modeling_olmo2.py).
        whole = a.qk_norm_scope == "projection"
        rows += [
            ParamTensor("attn.q_norm.weight", "norms", (a.n_heads * hd if whole else hd,), n, n, kind),
            ParamTensor("attn.k_norm.weight", "norms", (a.kv_heads * hd if whole else hd,), n, n, kind),
        ]
    if a.sinks:
        rows.append(ParamTensor("attn.sinks", "attention", (a.n_heads,), n, n, kind))  # gpt-oss: one logit per head
    return rows


def _mlp(prefix: str, comp: str, spec: ModelSpec, width: int, swiglu: bool, bias: bool, n: int, act: int,
         kind: str) -> list[ParamTensor]:
    d = spec.hidden_size
    if swiglu:
        return (
            _linear(f"{prefix}.gate_proj", comp, d, width, bias, n, act, kind)
            + _linear(f"{prefix}.up_proj", comp, d, width, bias, n, act, kind)
            + _linear(f"{prefix}.down_proj", comp, width, d, bias, n, act, kind)
        )
    return _linear(f"{prefix}.up_proj", comp, d, width, bias, n, act, kind) + _linear(
        f"{prefix}.down_proj", comp, width, d, bias, n, act, kind
    )


def _layer(spec: ModelSpec, n: int, kind: str) -> list[ParamTensor]:
    """Tensors of `n` layers of kind `dense` or `moe`."""
    d = spec.hidden_size
    rows = [ParamTensor(f"{name}.{i}", "norms", s, n, n, kind)
            for name in LAYER_NORMS[spec.norm_placement] for i, s in enumerate(_norm(spec, d))]
    rows += _attention(spec, n, kind)
    if kind == "dense":
        f = spec.ffn
        return rows + _mlp("mlp", "ffn", spec, f.intermediate_size, f.kind == "swiglu", f.bias, n, n, kind)
    moe = spec.moe
    assert moe is not None
    e, k = moe.n_routed_experts, moe.top_k
    rows += _linear("moe.router", "router", d, e, False, n, n, kind)
    if moe.router_bias:
        rows.append(ParamTensor("moe.router.bias", "router", (e,), n, n, kind))
    rows += _mlp("moe.experts", "experts", spec, moe.expert_intermediate_size, True, moe.expert_bias, n * e, n * k,
                 kind)
    if moe.shared_intermediate_size:
        # Shared experts are built by the family's dense MLP class, so they share its bias (DeepSeek-V2 mlp_bias).
        rows += _mlp("moe.shared", "shared_experts", spec, moe.shared_intermediate_size, True, spec.ffn.bias, n, n,
                     kind)
    if moe.shared_expert_gate:
        rows += _linear("moe.shared_expert_gate", "shared_experts", d, 1, False, n, n, kind)
    return rows


@cache
def param_inventory(spec: ModelSpec) -> ParamInventory:
    """Every parameter tensor of `spec`, as transformers would build it."""
    d, v = spec.hidden_size, spec.vocab_size
    rows = [ParamTensor("embed_tokens.weight", "embedding", (v, d), 1, 1)]
    if spec.positions == "learned":
        rows.append(ParamTensor("embed_positions.weight", "embedding", (spec.max_position_embeddings, d), 1, 1))
    if spec.n_dense_layers:
        rows += _layer(spec, spec.n_dense_layers, "dense")
    if spec.n_moe_layers:
        rows += _layer(spec, spec.n_moe_layers, "moe")
    rows += [ParamTensor(f"final_norm.{i}", "norms", s, 1, 1) for i, s in enumerate(_norm(spec, d))]
    if not spec.tied_embeddings:
        rows.append(ParamTensor("lm_head.weight", "lm_head", (v, d), 1, 1))
    return ParamInventory(tuple(rows))
