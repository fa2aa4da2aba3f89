"""ModelSpec: the architecture of a decoder-only transformer, and nothing about how it is trained.

Frozen and validated. `ModelSpec.from_dict` is strict: an unknown key is an error naming the nearest valid
one, so a typo in a preset or a user file never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from stepbill.errors import StepbillError, unknown_name

AttentionKind = Literal["mha", "mla"]
FFNKind = Literal["gelu_mlp", "swiglu"]
NormKind = Literal["layernorm", "rmsnorm"]
PositionKind = Literal["learned", "rotary"]
NormPlacement = Literal["pre", "sandwich", "post"]
GluAct = Literal["silu", "gelu_tanh"]
QKNormScope = Literal["head", "projection"]


def _positive(owner: str, **values: int | None) -> None:
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise StepbillError(f"{owner}.{name} must be an integer, got {value!r}")
        if value <= 0:
            raise StepbillError(f"{owner}.{name} must be positive, got {value}")


def _one_of(owner: str, name: str, value: str, kind: Any) -> None:
    allowed = get_args(kind)
    if value not in allowed:
        raise StepbillError(f"{owner}.{name} must be one of {', '.join(allowed)}; got {value!r}")


def _cap(name: str, value: float | None) -> None:
    """A soft-capping constant: None (no capping) or a finite positive number."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise StepbillError(f"{name} must be a positive number or null, got {value!r}")


@dataclass(frozen=True)
class AttentionSpec:
    """Self-attention. `mha` covers MHA, GQA and MQA (n_kv_heads < n_heads); `mla` is DeepSeek's latent
    attention, where q/kv are compressed to ranks q_lora_rank / kv_lora_rank and the head splits into a
    no-position part (qk_nope_head_dim) and a rotary part (qk_rope_head_dim)."""

    n_heads: int
    kind: AttentionKind = "mha"
    n_kv_heads: int | None = None  # None: same as n_heads (MHA)
    head_dim: int | None = None  # None: hidden_size // n_heads
    qkv_bias: bool = False  # bias on the input projections (MLA: on q_a / kv_a)
    out_bias: bool = False  # bias on the output projection
    qk_norm: bool = False  # RMSNorm on q and k (Qwen3, Gemma3: per head; OLMo2: over the whole projection)
    qk_norm_scope: QKNormScope = "head"  # "head": weight of head_dim; "projection": of heads·head_dim (OLMo2)
    fused_qkv: bool = False  # one qkv_proj matrix instead of q/k/v (Phi-3): same parameters, one output
    sinks: bool = False  # a learned logit per head added to the softmax (gpt-oss attention sinks)
    logit_softcap: float | None = None  # scores become cap·tanh(scores / cap) (Gemma2); None: no capping
    sliding_window: int | None = None  # window of the sliding-window layers, in tokens
    sliding_layers: tuple[int, ...] = ()  # layer indices that attend within sliding_window (the rest: full)
    # MLA only
    q_lora_rank: int | None = None  # None: q is projected directly from the hidden state
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0

    def __post_init__(self) -> None:
        _one_of("attention", "kind", self.kind, AttentionKind)
        _positive("attention", n_heads=self.n_heads, n_kv_heads=self.n_kv_heads, head_dim=self.head_dim,
                  sliding_window=self.sliding_window)
        _one_of("attention", "qk_norm_scope", self.qk_norm_scope, QKNormScope)
        _cap("attention.logit_softcap", self.logit_softcap)
        if any(isinstance(i, bool) or not isinstance(i, int) for i in self.sliding_layers):
            raise StepbillError(f"attention.sliding_layers must be layer indices, got {self.sliding_layers!r}")
        object.__setattr__(self, "sliding_layers", tuple(sorted(set(self.sliding_layers))))
        if self.sliding_layers and self.sliding_window is None:
            raise StepbillError("attention.sliding_layers needs attention.sliding_window")
        if self.n_kv_heads is not None and self.n_heads % self.n_kv_heads:
            raise StepbillError(
                f"attention.n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads})"
            )
        if self.kind == "mla":
            _positive(
                "attention",
                q_lora_rank=self.q_lora_rank,
                kv_lora_rank=self.kv_lora_rank,
                qk_nope_head_dim=self.qk_nope_head_dim,
                qk_rope_head_dim=self.qk_rope_head_dim,
                v_head_dim=self.v_head_dim,
            )

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

    intermediate_size: int
    kind: FFNKind = "gelu_mlp"
    bias: bool = False
    glu_act: GluAct = "silu"
    fused_gate_up: bool = False

    def __post_init__(self) -> None:
        _one_of("ffn", "kind", self.kind, FFNKind)
        _one_of("ffn", "glu_act", self.glu_act, GluAct)
        _positive("ffn", intermediate_size=self.intermediate_size)


@dataclass(frozen=True)
class MoESpec:
    """Mixture of experts replacing the FFN in every layer not listed in `dense_layers`.

    Experts are SwiGLU of width `expert_intermediate_size`, without biases. Shared experts run on every token;
    their total width is `shared_intermediate_size` (DeepSeek: n_shared_experts × expert width; Qwen2-MoE: its
    own size) and, being built by the family's dense MLP class, they carry the dense FFN's bias (`ffn.bias`).
    """

    n_routed_experts: int
    top_k: int
    expert_intermediate_size: int
    n_shared_experts: int = 0
    shared_intermediate_size: int = 0
    shared_expert_gate: bool = False  # Qwen2-MoE: a sigmoid gate hidden -> 1 on the shared expert
    # A learned bias on the router logits. No supported HF family has one: DeepSeek-V3's
    # e_score_correction_bias is a buffer in transformers, not a parameter.
    router_bias: bool = False
    dense_layers: tuple[int, ...] = ()  # layer indices that keep the dense FFN (first-k-dense, frequency)
    expert_bias: bool = False  # gpt-oss: every expert's gate/up and down projections carry a bias
    # gpt-oss's SwiGLU variant: gate clamped to ≤ limit, up to [-limit, limit], out = gate·σ(1.702·gate)·(up + 1);
    # None: the plain SwiGLU. Changes no parameter.
    swiglu_limit: float | None = None

    def __post_init__(self) -> None:
        _positive(
            "moe",
            n_routed_experts=self.n_routed_experts,
            top_k=self.top_k,
            expert_intermediate_size=self.expert_intermediate_size,
        )
        if self.top_k > self.n_routed_experts:
            raise StepbillError(
                f"moe.top_k ({self.top_k}) exceeds moe.n_routed_experts ({self.n_routed_experts})"
            )
        if self.n_shared_experts < 0 or self.shared_intermediate_size < 0:
            raise StepbillError("moe shared expert sizes must not be negative")
        if (self.n_shared_experts > 0) != (self.shared_intermediate_size > 0):
            raise StepbillError("moe.n_shared_experts and moe.shared_intermediate_size must be set together")
        object.__setattr__(self, "dense_layers", tuple(sorted(set(self.dense_layers))))
        _cap("moe.swiglu_limit", self.swiglu_limit)


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of a decoder-only LM: sizes, block kinds, and the details that change parameter counts."""

    name: str
    vocab_size: int
    hidden_size: int
    n_layers: int
    attention: AttentionSpec
    ffn: FFNSpec
    moe: MoESpec | None = None
    norm: NormKind = "rmsnorm"
    positions: PositionKind = "rotary"
    max_position_embeddings: int = 2048
    rotary_fraction: float = 1.0  # share of each head's dims that get rotary (GPT-NeoX rotary_pct)
    tied_embeddings: bool = False
    parallel_residual: bool = False  # GPT-NeoX: attention and MLP read the same input
    # Where the norms sit in a layer: "pre" (input and post-attention norm before each block), "sandwich"
    # (Gemma2/3: also a norm on each block's output, four per layer), "post" (OLMo2: only on each block's
    # output, two per layer).
    norm_placement: NormPlacement = "pre"
    norm_weight_offset: bool = False  # Gemma: RMSNorm scales by (1 + weight), computed in fp32
    scaled_embeddings: bool = False  # Gemma: token embeddings multiplied by √hidden_size
    final_logit_softcap: float | None = None  # Gemma2: logits become cap·tanh(logits / cap)
    family: str = "custom"  # HF model_type this spec came from, or "custom"
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        _positive(
            "model",
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            n_layers=self.n_layers,
            max_position_embeddings=self.max_position_embeddings,
        )
        _one_of("model", "norm", self.norm, NormKind)
        _one_of("model", "positions", self.positions, PositionKind)
        _one_of("model", "norm_placement", self.norm_placement, NormPlacement)
        _cap("model.final_logit_softcap", self.final_logit_softcap)
        if not 0.0 <= self.rotary_fraction <= 1.0:
            raise StepbillError(f"model.rotary_fraction must lie in [0, 1], got {self.rotary_fraction}")
        attn = self.attention
        if attn.kind == "mha" and attn.head_dim is None:
            if self.hidden_size % attn.n_heads:
                raise StepbillError(
                    f"attention.n_heads ({attn.n_heads}) must divide hidden_size ({self.hidden_size}) "
                    "when head_dim is not given"
                )
            object.__setattr__(self, "attention", dataclasses.replace(attn, head_dim=self.hidden_size // attn.n_heads))
        if self.moe is not None and any(not 0 <= i < self.n_layers for i in self.moe.dense_layers):
            raise StepbillError(f"moe.dense_layers must lie in [0, {self.n_layers})")
        if any(not 0 <= i < self.n_layers for i in self.attention.sliding_layers):
            raise StepbillError(f"attention.sliding_layers must lie in [0, {self.n_layers})")

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
        try:
            attention = _strict(AttentionSpec, data.pop("attention"), "attention")
            ffn = _strict(FFNSpec, data.pop("ffn"), "ffn")
        except KeyError as missing:
            raise StepbillError(f"model spec is missing {missing.args[0]!r}") from None
        moe_data = data.pop("moe", None)
        moe = None if moe_data is None else _strict(MoESpec, moe_data, "moe")
        return _strict(cls, data, "model", attention=attention, ffn=ffn, moe=moe)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict that `from_dict` reads back to an equal spec."""
        out = dataclasses.asdict(self)
        out.pop("extra")
        if self.moe is not None:
            out["moe"]["dense_layers"] = list(self.moe.dense_layers)
        out["attention"]["sliding_layers"] = list(self.attention.sliding_layers)
        return out


def _strict(cls: type, data: Any, owner: str, **already: Any) -> Any:
    if not isinstance(data, dict):
        raise StepbillError(f"{owner} must be a JSON object")
    names = {f.name for f in dataclasses.fields(cls) if f.name != "extra"} - set(already)
    for key in data:
        if key not in names:
            raise unknown_name(f"key in {owner}", key, names)
    required = {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    } - set(already)
    missing = sorted(required - set(data))
    if missing:
        raise StepbillError(f"{owner} is missing {', '.join(missing)}")
    values = dict(data)
    for key in ("dense_layers", "sliding_layers"):
        if key in values:
            values[key] = tuple(values[key])
    try:
        return cls(**values, **already)
    except TypeError as exc:  # wrong value types that slipped past validation
        raise StepbillError(f"{owner}: {exc}") from None
