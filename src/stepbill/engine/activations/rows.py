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
from typing import Any

from stepbill.engine.kinds import Split
from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec

FP32 = 4


# FLOPs per output element charged for rebuilding an elementwise tensor (RMSNorm: square, mean, scale,
# weight; SwiGLU: sigmoid, two multiplies). The seed prints 0.01 TFLOP for its two elementwise rows without
# the constant; any c in [2.7, 6.2] reproduces both (seed-facts "Assumptions", rc-row2/rc-row3). Forward and
# step FLOPs count matmuls only, as the seed does; this constant only prices recompute.
ELEMENTWISE_FLOPS = 4


@dataclass(frozen=True)
class Recompute:
    """How a kept tensor is rebuilt from its producer's input.

    kinds: `linear` [tokens, k] × [k, n] (2kn FLOPs per token, or `flops` per token when the op is a sum of
    differently shaped matmuls, e.g. routed + shared experts), `elementwise` over `n` numbers per token,
    `copy` (free: a gather or a view), `attention` (the core QKᵀ/softmax/AV with `k` = H·(d_qk + d_v):
    S·k FLOPs per token causal-halved, 2·S·k full square), `input` (the layer input: the checkpoint itself,
    never dropped).
    """

    kind: str
    k: int = 0
    n: int = 0
    flops: int = 0

    def flops_per_token(self, seq_len: Any = 1, causal: bool = True) -> Any:
        """FLOPs to rebuild this tensor, per token (numpy-broadcastable over `seq_len`)."""
        if self.kind == "linear":
            return self.flops or 2 * self.k * self.n
        if self.kind == "elementwise":
            return ELEMENTWISE_FLOPS * self.n
        if self.kind == "attention":
            return (1 if causal else 2) * seq_len * self.k
        if self.kind == "copy":
            return 0
        return float("inf")  # "input": not rebuildable

    @property
    def droppable(self) -> bool:
        return self.kind != "input"


@dataclass(frozen=True)
class ActTensor:
    """One tensor kept for backward: `width` numbers per token (per token per sequence position)."""

    name: str
    width: int
    dtype_bytes: int
    saved_for: str  # the op whose backward reads it
    recompute: Recompute
    block: str
    op: str = ""  # the op that produces it; tensors of one op are rebuilt together (default: its own name)
    per_token2: bool = False  # eager attention scores: width is per token per key position (× seq_len)
    # "token" (the default: width per token), or — for eager rows kept outside the per-token plan — "position"
    # (per sequence position, shared by the batch: RoPE tables) or "constant" (per layer or per step).
    per: str = "token"
    split: Split = Split.SEQ  # how the tensor divides across a layout's ranks (engine/kinds.py)

    @property
    def bytes_per_token(self) -> int:
        return self.width * self.dtype_bytes

    @property
    def op_id(self) -> str:
        return self.op or self.name

    def bytes_at(self, seq_len: Any) -> Any:
        """Bytes per token at sequence length `seq_len` (only S² rows depend on it)."""
        return self.bytes_per_token * (seq_len if self.per_token2 else 1)


def _attn_core(spec: ModelSpec) -> Recompute:
    a = spec.attention
    return Recompute("attention", k=a.n_heads * (a.qk_head_dim + a.v_dim))


def _residual_mid(spec: ModelSpec) -> Recompute:
    """The residual after attention = layer input + o_proj(core out): one [H·d_v → d] matmul."""
    a = spec.attention
    return Recompute("linear", a.n_heads * a.v_dim, spec.hidden_size)


def _mha_ideal(spec: ModelSpec, act: int) -> list[ActTensor]:
    a, d = spec.attention, spec.hidden_size
    q, kv, out = a.n_heads * a.qk_head_dim, a.kv_heads * a.qk_head_dim, a.n_heads * a.v_dim
    return [
        ActTensor("attn.norm_out", d, act, "QKV projections (weight grad)", Recompute("elementwise", n=d), "mha"),
        ActTensor("attn.q", q, act, "attention core", Recompute("linear", d, q), "mha", split=Split.TP),
        ActTensor("attn.k", kv, act, "attention core", Recompute("linear", d, kv), "mha", split=Split.TP),
        ActTensor("attn.v", kv, act, "attention core", Recompute("linear", d, kv), "mha", split=Split.TP),
        ActTensor("attn.core_out", out, act, "output projection (weight grad)", _attn_core(spec), "mha", "attn.core", split=Split.TP),
    ]


def _mla_ideal(spec: ModelSpec, act: int) -> list[ActTensor]:
    a, d = spec.attention, spec.hidden_size
    kv_a = a.kv_lora_rank + a.qk_rope_head_dim
    q_up, kv_up = a.n_heads * a.qk_head_dim, a.n_heads * (a.qk_nope_head_dim + a.v_head_dim)
    rows = [
        ActTensor("attn.norm_in", d, act, "input RMSNorm (the layer input)", Recompute("input"), "mla"),
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
        ActTensor("attn.q_up", q_up, act, "attention core", Recompute("linear", q_in, q_up), "mla", split=Split.TP),
        ActTensor("attn.kv_up", kv_up, act, "attention core", Recompute("linear", a.kv_lora_rank, kv_up), "mla", split=Split.TP),
        ActTensor("attn.core_out", a.n_heads * a.v_head_dim, act, "output projection (weight grad)",
                  _attn_core(spec), "mla", "attn.core", split=Split.TP),
        ActTensor("attn.logsumexp", a.n_heads, FP32, "attention core (softmax statistics)", _attn_core(spec), "mla",
                  "attn.core", split=Split.TP),
    ]
    return rows


def _gelu_ideal(spec: ModelSpec, act: int) -> list[ActTensor]:
    d, ff = spec.hidden_size, spec.ffn.intermediate_size
    return [
        ActTensor("mlp.norm_out", d, act, "MLP up projection (weight grad)", Recompute("elementwise", n=d), "gelu_mlp"),
        ActTensor("mlp.up_out", ff, act, "GELU", Recompute("linear", d, ff), "gelu_mlp", split=Split.TP),
        ActTensor("mlp.act_out", ff, act, "MLP down projection (weight grad)", Recompute("elementwise", n=ff), "gelu_mlp", split=Split.TP),
        ActTensor("mlp.down_out", d, act, "residual stream leaving the layer (the seed's GPT table counts it)",
                  Recompute("linear", ff, d), "gelu_mlp"),
    ]


def _swiglu_ideal(spec: ModelSpec, act: int) -> list[ActTensor]:
    d, ff = spec.hidden_size, spec.ffn.intermediate_size
    return [
        ActTensor("mlp.norm_in", d, act, "post-attention RMSNorm (residual)", _residual_mid(spec), "swiglu"),
        ActTensor("mlp.norm_out", d, act, "gate/up projections (weight grad)", Recompute("elementwise", n=d), "swiglu"),
        ActTensor("mlp.gate", ff, act, "SiLU and the product", Recompute("linear", d, ff), "swiglu", split=Split.TP),
        ActTensor("mlp.up", ff, act, "the product", Recompute("linear", d, ff), "swiglu", split=Split.TP),
        ActTensor("mlp.product", ff, act, "down projection (weight grad)", Recompute("elementwise", n=ff), "swiglu", split=Split.TP),
    ]


def _moe_ideal(spec: ModelSpec, act: int) -> list[ActTensor]:
    """Routed experts as top_k copies of each token, plus the shared expert(s) — the seed's "9 copies" for
    V3 count the shared expert's input as a copy too (moe.shared.input)."""
    d, moe = spec.hidden_size, spec.moe
    assert moe is not None
    k, ef, sf = moe.top_k, moe.expert_intermediate_size, moe.shared_intermediate_size
    rows = [
        ActTensor("moe.norm_in", d, act, "post-attention RMSNorm (residual)", _residual_mid(spec), "moe"),
        ActTensor("moe.norm_out", d, act, "router (weight grad)", Recompute("elementwise", n=d), "moe"),
        ActTensor("moe.router_scores", moe.n_routed_experts, act, "top-k gating (softmax/sigmoid)",
                  Recompute("linear", d, moe.n_routed_experts), "moe"),
        ActTensor("moe.dispatched", k * d, act, "routed experts' gate/up projections (weight grad)",
                  Recompute("copy"), "moe"),
        ActTensor("moe.gate", k * ef, act, "SiLU and the product", Recompute("linear", d, k * ef), "moe", split=Split.EXPERT),
        ActTensor("moe.up", k * ef, act, "the product", Recompute("linear", d, k * ef), "moe", split=Split.EXPERT),
        ActTensor("moe.product", k * ef, act, "expert down projections (weight grad)",
                  Recompute("elementwise", n=k * ef), "moe", split=Split.EXPERT),
        ActTensor("moe.expert_out", k * d, act, "weighted combine (gate grad)", Recompute("linear", ef, k * d), "moe"),
    ]
    if sf:
        rows += [
            ActTensor("moe.shared.input", d, act, "shared expert gate/up projections (weight grad)",
                      Recompute("copy"), "moe"),
            ActTensor("moe.shared.gate", sf, act, "SiLU and the product", Recompute("linear", d, sf), "moe", split=Split.TP),
            ActTensor("moe.shared.up", sf, act, "the product", Recompute("linear", d, sf), "moe", split=Split.TP),
            ActTensor("moe.shared.product", sf, act, "shared down projection (weight grad)",
                      Recompute("elementwise", n=sf), "moe", split=Split.TP),
            ActTensor("moe.shared.out", d, act, "combine with the routed output", Recompute("linear", sf, d), "moe"),
        ]
    return rows


BLOCK_ROWS: dict[tuple[str, str], Callable[[ModelSpec, int], list[ActTensor]]] = {
    ("ideal", "mha"): _mha_ideal,
    ("ideal", "mla"): _mla_ideal,
    ("ideal", "gelu_mlp"): _gelu_ideal,
    ("ideal", "swiglu"): _swiglu_ideal,
    ("ideal", "moe"): _moe_ideal,
}

CONVENTIONS = ("ideal", "eager", "megatron")
ATTENTIONS = ("sdpa", "eager")


def layer_blocks(spec: ModelSpec, layer_kind: str) -> tuple[str, str]:
    """Block kinds of a layer of kind "dense" or "moe": (attention kind, FFN kind)."""
    return spec.attention.kind, "moe" if layer_kind == "moe" else spec.ffn.kind


def eager_attention_rows(spec: ModelSpec, act: int, block: str) -> list[ActTensor]:
    """Attention without a fused kernel: softmax saves its output P (B·H·S² numbers) for its own backward
    and for A·V; per token that is H·S numbers (`per_token2`: width × seq_len)."""
    a = spec.attention
    return [ActTensor("attn.probs", a.n_heads, act, "softmax backward and A·V (grad of V)", _attn_core(spec),
                      block, "attn.core", per_token2=True, split=Split.TP)]


def layer_rows(spec: ModelSpec, layer_kind: str, activation_bytes: int, convention: str = "ideal",
               attention: str = "sdpa") -> list[ActTensor]:
    """Every tensor one layer of `layer_kind` keeps, in forward order. `attention` "eager" adds the S²
    softmax output a non-fused attention keeps (the seed's note: then S² is back on the memory bill). Under
    LoRA use the package's `layer_rows(..., lora=)` (activations/__init__.py), which applies activations/lora.py."""
    rows: list[ActTensor] = []
    for block in layer_blocks(spec, layer_kind):
        builder = BLOCK_ROWS.get((convention, block))
        if attention == "eager" and convention == "eager" and block == spec.attention.kind:
            builder = BLOCK_ROWS.get(("eager_attention", block), builder)  # eager/eager_attention.py
        if builder is None:
            raise StepbillError(f"no {convention!r} activation rows for block kind {block!r}")
        block_rows = builder(spec, activation_bytes)
        if attention == "eager" and block == spec.attention.kind and convention == "ideal":
            block_rows += eager_attention_rows(spec, activation_bytes, block)
        rows += block_rows
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


def layer_order(spec: ModelSpec) -> tuple[str, ...]:
    """The layer kind of each layer index, in model order."""
    return tuple("moe" if spec.is_moe_layer(i) else "dense" for i in range(spec.n_layers))
