"""ModelSpec: the architecture of a decoder-only transformer, and nothing about how it is trained.

Frozen and validated. `ModelSpec.from_dict` is strict: an unknown key is an error naming the nearest valid
one, so a typo in a preset or a user file never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from stepbill.errors import StepbillError
from stepbill.spec.schema import (
    EXPERTS,
    EXPERTS_OR_ZERO,
    FRACTION,
    HEADS,
    LAYERS,
    NOTE,
    TOKENS,
    VOCAB,
    WIDTH,
    WIDTH_OR_ZERO,
    IntTuple,
    Real,
    check_fields,
    from_plain,
    hash_once,
)

AttentionKind = Literal["mha", "mla"]
FFNKind = Literal["gelu_mlp", "swiglu"]
NormKind = Literal["layernorm", "rmsnorm"]
PositionKind = Literal["learned", "rotary"]
NormPlacement = Literal["pre", "sandwich", "post"]
GluAct = Literal["silu", "gelu_tanh"]
QKNormScope = Literal["head", "projection"]
#: a soft-capping constant (Gemma2: 50 on attention scores, 30 on logits) or a SwiGLU clamp (gpt-oss: 7)
CAP = Real(0.0, 1e9, low_open=True)


@dataclass(frozen=True)
class AttentionSpec:
    """Self-attention. `mha` covers MHA, GQA and MQA (n_kv_heads < n_heads); `mla` is DeepSeek's latent
    attention, where q/kv are compressed to ranks q_lora_rank / kv_lora_rank and the head splits into a
    no-position part (qk_nope_head_dim) and a rotary part (qk_rope_head_dim)."""

    n_heads: Annotated[int, HEADS]
    kind: AttentionKind = "mha"
    n_kv_heads: Annotated[int | None, HEADS] = None  # None: same as n_heads (MHA)
    head_dim: Annotated[int | None, WIDTH] = None  # None: hidden_size // n_heads
    qkv_bias: bool = False  # bias on the input projections (MLA: on q_a / kv_a)
    out_bias: bool = False  # bias on the output projection
    qk_norm: bool = False  # RMSNorm on q and k (Qwen3, Gemma3: per head; OLMo2: over the whole projection)
    qk_norm_scope: QKNormScope = "head"  # "head": weight of head_dim; "projection": of heads·head_dim (OLMo2)
    fused_qkv: bool = False  # one qkv_proj matrix instead of q/k/v (Phi-3): same parameters, one output
    sinks: bool = False  # a learned logit per head added to the softmax (gpt-oss attention sinks)
    logit_softcap: Annotated[float | None, CAP] = None  # scores become cap·tanh(scores / cap) (Gemma2)
    # Sliding-window attention: the window in tokens and the layers that use it (the others attend fully);
    # ModelSpec fills in every layer when a window comes with no layer list (Mistral).
    sliding_window: Annotated[int | None, TOKENS] = None
    sliding_layers: Annotated[tuple[int, ...], IntTuple(LAYERS.high - 1, LAYERS.high)] = ()
    # MLA only
    q_lora_rank: Annotated[int | None, WIDTH] = None  # None: q is projected directly from the hidden state
    kv_lora_rank: Annotated[int, WIDTH_OR_ZERO] = 0
    qk_nope_head_dim: Annotated[int, WIDTH_OR_ZERO] = 0
    qk_rope_head_dim: Annotated[int, WIDTH_OR_ZERO] = 0
    v_head_dim: Annotated[int, WIDTH_OR_ZERO] = 0

    def __post_init__(self) -> None:
        check_fields(self, "attention")
        object.__setattr__(self, "sliding_layers", tuple(sorted(set(self.sliding_layers))))
        if self.sliding_layers and self.sliding_window is None:
            raise StepbillError("attention.sliding_layers needs attention.sliding_window")
        if self.n_kv_heads is not None and self.n_heads % self.n_kv_heads:
            raise StepbillError(
                f"attention.n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads})"
            )
        if self.kind == "mla":
            for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self, name) <= 0:
                    raise StepbillError(f"attention.{name} must be positive under MLA, got {getattr(self, name)}")

    @property
    def kv_heads(self) -> int:
        """Number of key/value heads (MLA: every head has its own K/V after up-projection)."""
        return self.n_heads if self.kind == "mla" or self.n_kv_heads is None else self.n_kv_heads

    @property
    def qk_head_dim(self) -> int:
        """Width of one query/key head (MLA: nope + rope)."""
        if self.kind == "mla":
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        assert self.head_dim is not None
        return self.head_dim

    @property
    def v_dim(self) -> int:
        """Width of one value head."""
        if self.kind == "mla":
            return self.v_head_dim
        assert self.head_dim is not None
        return self.head_dim


@dataclass(frozen=True)
class FFNSpec:
    """The dense feed-forward block: GELU-MLP (up, act, down) or a gated MLP, kind "swiglu" (gate, up,
    act(gate)·up, down) whose gate activation `glu_act` is SiLU (SwiGLU) or tanh-GELU (GeGLU, Gemma): the
    same matrices either way. `fused_gate_up`: gate and up are one matrix of 2 × width (Phi-3)."""

    intermediate_size: Annotated[int, WIDTH]
    kind: FFNKind = "gelu_mlp"
    bias: bool = False
    glu_act: GluAct = "silu"
    fused_gate_up: bool = False

    def __post_init__(self) -> None:
        check_fields(self, "ffn")


@dataclass(frozen=True)
class MoESpec:
    """Mixture of experts replacing the FFN in every layer not listed in `dense_layers`.

    Experts are SwiGLU of width `expert_intermediate_size`, without biases. Shared experts run on every token;
    their total width is `shared_intermediate_size` (DeepSeek: n_shared_experts × expert width; Qwen2-MoE: its
    own size) and, being built by the family's dense MLP class, they carry the dense FFN's bias (`ffn.bias`).
    """

    n_routed_experts: Annotated[int, EXPERTS]
    top_k: Annotated[int, EXPERTS]
    expert_intermediate_size: Annotated[int, WIDTH]
    n_shared_experts: Annotated[int, EXPERTS_OR_ZERO] = 0
    shared_intermediate_size: Annotated[int, WIDTH_OR_ZERO] = 0
    shared_expert_gate: bool = False  # Qwen2-MoE: a sigmoid gate hidden -> 1 on the shared expert
    # A learned bias on the router logits. No supported HF family has one: DeepSeek-V3's
    # e_score_correction_bias is a buffer in transformers, not a parameter.
    router_bias: bool = False
    # layer indices that keep the dense FFN (first-k-dense, frequency)
    dense_layers: Annotated[tuple[int, ...], IntTuple(LAYERS.high - 1, LAYERS.high)] = ()
    expert_bias: bool = False  # gpt-oss: every expert's gate/up and down projections carry a bias
    # gpt-oss's SwiGLU variant: gate clamped to ≤ limit, up to [-limit, limit], out = gate·σ(1.702·gate)·(up + 1);
    # None: the plain SwiGLU. Changes no parameter.
    swiglu_limit: Annotated[float | None, CAP] = None

    def __post_init__(self) -> None:
        check_fields(self, "moe")
        if self.top_k > self.n_routed_experts:
            raise StepbillError(
                f"moe.top_k ({self.top_k}) exceeds moe.n_routed_experts ({self.n_routed_experts})"
            )
        if (self.n_shared_experts > 0) != (self.shared_intermediate_size > 0):
            raise StepbillError("moe.n_shared_experts and moe.shared_intermediate_size must be set together")
        object.__setattr__(self, "dense_layers", tuple(sorted(set(self.dense_layers))))


#: ModelSpec fields holding a dropout probability.
DROPOUT_FIELDS: tuple[str, ...] = ("attention_dropout", "hidden_dropout", "embedding_dropout")


@hash_once
@dataclass(frozen=True)
class ModelSpec:
    """Architecture of a decoder-only LM: sizes, block kinds, and the details that change parameter counts."""

    name: str
    vocab_size: Annotated[int, VOCAB]
    hidden_size: Annotated[int, WIDTH]
    n_layers: Annotated[int, LAYERS]
    attention: AttentionSpec
    ffn: FFNSpec
    moe: MoESpec | None = None
    norm: NormKind = "rmsnorm"
    positions: PositionKind = "rotary"
    max_position_embeddings: Annotated[int, TOKENS] = 2048
    rotary_fraction: Annotated[float, FRACTION] = 1.0  # share of each head's dims that get rotary (GPT-NeoX rotary_pct)
    tied_embeddings: bool = False
    parallel_residual: bool = False  # GPT-NeoX: attention and MLP read the same input
    # Dropout probabilities the model trains with (the family's config keys, read by the HF loader):
    attention_dropout: Annotated[float, FRACTION] = 0.0  # on the attention probabilities (attn_pdrop, ...)
    hidden_dropout: Annotated[float, FRACTION] = 0.0  # on the attention and MLP outputs (resid_pdrop, ...)
    embedding_dropout: Annotated[float, FRACTION] = 0.0  # on the embedding output (embd_pdrop; NeoX: hidden_dropout)
    # Where the norms sit in a layer: "pre" (input and post-attention norm before each block), "sandwich"
    # (Gemma2/3: also a norm on each block's output, four per layer), "post" (OLMo2: only on each block's
    # output, two per layer).
    norm_placement: NormPlacement = "pre"
    norm_weight_offset: bool = False  # Gemma: RMSNorm scales by (1 + weight), computed in fp32
    scaled_embeddings: bool = False  # Gemma: token embeddings multiplied by √hidden_size
    final_logit_softcap: Annotated[float | None, CAP] = None  # Gemma2: logits become cap·tanh(logits / cap)
    family: str = "custom"  # HF model_type this spec came from, or "custom"
    notes: Annotated[str, NOTE] = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_fields(self, "model")
        attn = self.attention
        if attn.sliding_window is not None and not attn.sliding_layers:  # a window with no layer list: every layer
            attn = dataclasses.replace(attn, sliding_layers=tuple(range(self.n_layers)))
            object.__setattr__(self, "attention", attn)
        if any(not 0 <= i < self.n_layers for i in attn.sliding_layers):
            raise StepbillError(f"attention.sliding_layers must lie in [0, {self.n_layers})")
        if attn.kind == "mha" and attn.head_dim is None:
            if self.hidden_size % attn.n_heads:
                raise StepbillError(
                    f"attention.n_heads ({attn.n_heads}) must divide hidden_size ({self.hidden_size}) "
                    "when head_dim is not given"
                )
            object.__setattr__(self, "attention", dataclasses.replace(attn, head_dim=self.hidden_size // attn.n_heads))
        if self.moe is not None and any(not 0 <= i < self.n_layers for i in self.moe.dense_layers):
            raise StepbillError(f"moe.dense_layers must lie in [0, {self.n_layers})")

    # --- layer kinds -------------------------------------------------------------------------------
    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer `layer` (0-based) uses the mixture of experts instead of the dense FFN."""
        return self.moe is not None and layer not in self.moe.dense_layers

    @property
    def n_moe_layers(self) -> int:
        return 0 if self.moe is None else self.n_layers - len(self.moe.dense_layers)

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers

    # --- (de)serialisation ---------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSpec:
        """Build from a plain dict (a preset file). Unknown keys are errors; nested blocks are dicts."""
        if not isinstance(data, dict):
            raise StepbillError("a model spec must be a JSON object")
        data = dict(data)
        for block in ("attention", "ffn"):
            if block not in data:
                raise StepbillError(f"model spec is missing {block!r}")
        attention = from_plain(AttentionSpec, data.pop("attention"), "attention")
        ffn = from_plain(FFNSpec, data.pop("ffn"), "ffn")
        moe_data = data.pop("moe", None)
        moe = None if moe_data is None else from_plain(MoESpec, moe_data, "moe")
        return from_plain(cls, data, "model", attention=attention, ffn=ffn, moe=moe)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict that `from_dict` reads back to an equal spec."""
        out = dataclasses.asdict(self)
        out.pop("extra")
        if self.moe is not None:
            out["moe"]["dense_layers"] = list(self.moe.dense_layers)
        out["attention"]["sliding_layers"] = list(self.attention.sliding_layers)
        return out

    # --- sliding windows -----------------------------------------------------------------------------
    @property
    def sliding_window(self) -> int | None:
        """The sliding-window width in tokens (None: full attention everywhere); see AttentionSpec."""
        return self.attention.sliding_window

    @property
    def sliding_layers(self) -> tuple[int, ...]:
        """Layer indices that attend within `sliding_window`."""
        return self.attention.sliding_layers

