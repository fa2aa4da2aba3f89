"""Activations: the tensors a layer keeps from its forward for its backward, per token, per block kind.

Convention `ideal` (the seed's accounting): each kept tensor counted once, fused attention that keeps no
S×S score matrix, no dropout masks, no logits. A decoder layer is an attention sub-block (`mha` or `mla`)
followed by an FFN sub-block (`gelu_mlp`, `swiglu` or `moe`); each kind has its own row builder, so new
kinds (and the `eager` convention) slot in as entries of BLOCK_ROWS, not as special cases.

The seed tabulates two layer shapes and they count the residual stream differently: its GPT-3 125M table
(MHA + GELU MLP) keeps no norm input but keeps the MLP output (d), while its DeepSeek-V3 tables (MLA,
MoE, dense SwiGLU) keep each sub-block's norm input and no FFN output. We keep each table's rows as
printed so both reproduce; the row names say which tensor is meant.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec

FP32 = 4


@dataclass(frozen=True)
class Recompute:
    """How a kept tensor is rebuilt from its producer's input: `linear` [tokens, k] × [k, n] (2kn FLOPs per
    token), `elementwise` over `n` numbers, `copy` (free), or the `attention` core (grows with sequence)."""

    kind: str
    k: int = 0
    n: int = 0


@dataclass(frozen=True)
class ActTensor:
    """One tensor kept for backward: `width` numbers per token (per token per sequence position)."""

    name: str
    width: int
    dtype_bytes: int
    saved_for: str  # the op whose backward reads it
    recompute: Recompute
    block: str

    @property
    def bytes_per_token(self) -> int:
        return self.width * self.dtype_bytes


def _mha_ideal(spec: ModelSpec, act: int) -> list[ActTensor]:
    a, d = spec.attention, spec.hidden_size
    q, kv, out = a.n_heads * a.qk_head_dim, a.kv_heads * a.qk_head_dim, a.n_heads * a.v_dim
    return [
        ActTensor("attn.norm_out", d, act, "QKV projections (weight grad)", Recompute("elementwise", n=d), "mha"),
        ActTensor("attn.q", q, act, "attention core", Recompute("linear", d, q), "mha"),
        ActTensor("attn.k", kv, act, "attention core", Recompute("linear", d, kv), "mha"),
        ActTensor("attn.v", kv, act, "attention core", Recompute("linear", d, kv), "mha"),
        ActTensor("attn.core_out", out, act, "output projection (weight grad)", Recompute("attention"), "mha"),
    ]


def _mla_ideal(spec: ModelSpec, act: int) -> list[ActTensor]:
    a, d = spec.attention, spec.hidden_size
    kv_a = a.kv_lora_rank + a.qk_rope_head_dim
    q_up, kv_up = a.n_heads * a.qk_head_dim, a.n_heads * (a.qk_nope_head_dim + a.v_head_dim)
    rows = [
        ActTensor("attn.norm_in", d, act, "input RMSNorm (residual entry)", Recompute("copy"), "mla"),
        ActTensor("attn.norm_out", d, act, "Q/KV down projections (weight grad)", Recompute("elementwise", n=d), "mla"),
    ]
    if a.q_lora_rank is not None:
        r = a.q_lora_rank
        rows += [
            ActTensor("attn.q_down", r, act, "q_a_layernorm", Recompute("linear", d, r), "mla"),
            ActTensor("attn.q_down_norm", r, act, "Q up projection (weight grad)", Recompute("elementwise", n=r), "mla"),
        ]
        q_in = r
    else:
        q_in = d
    rows += [
        ActTensor("attn.kv_down", kv_a, act, "kv_a_layernorm and RoPE", Recompute("linear", d, kv_a), "mla"),
        ActTensor("attn.kv_down_norm", a.kv_lora_rank, act, "K/V up projection (weight grad)",
                  Recompute("elementwise", n=a.kv_lora_rank), "mla"),
        ActTensor("attn.q_up", q_up, act, "attention core", Recompute("linear", q_in, q_up), "mla"),
        ActTensor("attn.kv_up", kv_up, act, "attention core", Recompute("linear", a.kv_lora_rank, kv_up), "mla"),
        ActTensor("attn.core_out", a.n_heads * a.v_head_dim, act, "output projection (weight grad)",
                  Recompute("attention"), "mla"),
        ActTensor("attn.logsumexp", a.n_heads, FP32, "attention core (softmax statistics)", Recompute("attention"), "mla"),
    ]
    return rows


def _gelu_ideal(spec: ModelSpec, act: int) -> list[ActTensor]:
    d, ff = spec.hidden_size, spec.ffn.intermediate_size
    return [
        ActTensor("mlp.norm_out", d, act, "MLP up projection (weight grad)", Recompute("elementwise", n=d), "gelu_mlp"),
        ActTensor("mlp.up_out", ff, act, "GELU", Recompute("linear", d, ff), "gelu_mlp"),
        ActTensor("mlp.act_out", ff, act, "MLP down projection (weight grad)", Recompute("elementwise", n=ff), "gelu_mlp"),
        ActTensor("mlp.down_out", d, act, "residual stream leaving the layer (the seed's GPT table counts it)",
                  Recompute("linear", ff, d), "gelu_mlp"),
    ]


def _swiglu_ideal(spec: ModelSpec, act: int) -> list[ActTensor]:
    d, ff = spec.hidden_size, spec.ffn.intermediate_size
    return [
        ActTensor("mlp.norm_in", d, act, "post-attention RMSNorm (residual)", Recompute("copy"), "swiglu"),
        ActTensor("mlp.norm_out", d, act, "gate/up projections (weight grad)", Recompute("elementwise", n=d), "swiglu"),
        ActTensor("mlp.gate", ff, act, "SiLU and the product", Recompute("linear", d, ff), "swiglu"),
        ActTensor("mlp.up", ff, act, "the product", Recompute("linear", d, ff), "swiglu"),
        ActTensor("mlp.product", ff, act, "down projection (weight grad)", Recompute("elementwise", n=ff), "swiglu"),
    ]


def _moe_ideal(spec: ModelSpec, act: int) -> list[ActTensor]:
    d, moe = spec.hidden_size, spec.moe
    assert moe is not None
    copies = moe.top_k + (1 if moe.shared_intermediate_size else 0)
    hidden = moe.top_k * moe.expert_intermediate_size + moe.shared_intermediate_size
    return [
        ActTensor("moe.norm_in", d, act, "post-attention RMSNorm (residual)", Recompute("copy"), "moe"),
        ActTensor("moe.norm_out", d, act, "router (weight grad)", Recompute("elementwise", n=d), "moe"),
        ActTensor("moe.router_scores", moe.n_routed_experts, act, "top-k gating (softmax/sigmoid)",
                  Recompute("linear", d, moe.n_routed_experts), "moe"),
        ActTensor("moe.dispatched", copies * d, act, "expert gate/up projections (weight grad)", Recompute("copy"), "moe"),
        ActTensor("moe.gate_up_product", 3 * hidden, act, "SiLU, the product and the down projection",
                  Recompute("linear", d, 2 * hidden), "moe"),
        ActTensor("moe.expert_out", copies * d, act, "weighted combine (gate grad)",
                  Recompute("linear", moe.expert_intermediate_size, copies * d), "moe"),
    ]


BLOCK_ROWS: dict[tuple[str, str], Callable[[ModelSpec, int], list[ActTensor]]] = {
    ("ideal", "mha"): _mha_ideal,
    ("ideal", "mla"): _mla_ideal,
    ("ideal", "gelu_mlp"): _gelu_ideal,
    ("ideal", "swiglu"): _swiglu_ideal,
    ("ideal", "moe"): _moe_ideal,
}

CONVENTIONS = ("ideal",)


def layer_blocks(spec: ModelSpec, layer_kind: str) -> tuple[str, str]:
    """Block kinds of a layer of kind "dense" or "moe": (attention kind, FFN kind)."""
    return spec.attention.kind, "moe" if layer_kind == "moe" else spec.ffn.kind


def layer_rows(spec: ModelSpec, layer_kind: str, activation_bytes: int, convention: str = "ideal") -> list[ActTensor]:
    """Every tensor one layer of `layer_kind` keeps, in forward order."""
    rows: list[ActTensor] = []
    for block in layer_blocks(spec, layer_kind):
        builder = BLOCK_ROWS.get((convention, block))
        if builder is None:
            raise StepbillError(f"no {convention!r} activation rows for block kind {block!r}")
        rows += builder(spec, activation_bytes)
    return rows


def layer_kinds(spec: ModelSpec) -> dict[str, int]:
    """{layer kind: number of layers}, kinds with no layers left out."""
    return {k: n for k, n in (("dense", spec.n_dense_layers), ("moe", spec.n_moe_layers)) if n}


def layer_bytes_per_token(spec: ModelSpec, layer_kind: str, activation_bytes: int, convention: str = "ideal") -> int:
    """Bytes one layer keeps per token."""
    return sum(r.bytes_per_token for r in layer_rows(spec, layer_kind, activation_bytes, convention))


def full_recompute_bytes_per_token(spec: ModelSpec, activation_bytes: int, with_working_set: bool = True,
                                   convention: str = "ideal") -> int:
    """Full recompute: every layer keeps only its input (hidden wide); during its backward one layer is
    rebuilt, adding its working set (the largest layer's rows). The seed's 125M example counts the working
    set, its V3 figure (61 × 1.75 GiB) does not: `with_working_set` chooses."""
    kept = spec.n_layers * spec.hidden_size * activation_bytes
    if not with_working_set:
        return kept
    return kept + max(layer_bytes_per_token(spec, k, activation_bytes, convention) for k in layer_kinds(spec))
