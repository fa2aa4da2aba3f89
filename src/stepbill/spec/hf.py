"""Hugging Face config.json <-> ModelSpec for the families stepbill supports.

`from_hf_config` reads a transformers config dict the way transformers itself does — the same class defaults
for missing keys, the same per-family quirks (which projections carry biases, what a null head_dim means,
which layers are MoE) — so that `param_inventory(spec).total` equals the parameter count of the model
transformers builds. The per-family facts live in `stepbill.spec.hf_families`; this module stays torch-free.

`to_hf_config` goes the other way (for `stepbill check` and the tests): it tries the spec's own family first,
then the closest supported ones, and returns the first config that reads back to the same architecture.
"""

from __future__ import annotations

from typing import Any

from stepbill.errors import StepbillError, shown
from stepbill.spec.hf_families import (
    ALIASES,
    DEFAULTS,
    DENSE_ROTARY,
    EMIT,
    FULL_EVERY,
    GEMMA,
    MLA,
    MOE_MHA,
    QWEN_FAMILIES,
    REQUIRED,
    SUPPORTED_MODEL_TYPES,
)
from stepbill.spec.model import AttentionSpec, FFNSpec, ModelSpec, MoESpec
from stepbill.spec.schema import (
    EXPERTS,
    EXPERTS_OR_ZERO,
    HEADS,
    LAYERS,
    TOKENS,
    VOCAB,
    WIDTH,
    WIDTH_OR_ZERO,
    Int,
    IntTuple,
    Rule,
)

__all__ = ["SUPPORTED_MODEL_TYPES", "dropout_config_keys", "from_hf_config", "to_hf_config"]

_MISSING = object()

#: The bound of every integer field read from a config (spec/schema.py); a key not listed is a width (WIDTH).
FIELD_RULES: dict[str, Rule] = {
    "vocab_size": VOCAB,
    "num_hidden_layers": LAYERS, "n_layer": LAYERS, "decoder_sparse_step": LAYERS,
    "first_k_dense_replace": Int(0, LAYERS.high),
    "max_position_embeddings": TOKENS, "n_positions": TOKENS,
    "num_attention_heads": HEADS, "n_head": HEADS, "num_key_value_heads": HEADS,
    "num_local_experts": EXPERTS, "n_routed_experts": EXPERTS, "num_experts_per_tok": EXPERTS,
    "num_experts": EXPERTS_OR_ZERO, "n_shared_experts": EXPERTS_OR_ZERO,
    "shared_expert_intermediate_size": WIDTH_OR_ZERO,
}
LAYER_LIST = IntTuple(LAYERS.high - 1, LAYERS.high)


class _Config:
    """Typed, defaulted access to one config dict; every failure is a one-line StepbillError."""

    def __init__(self, data: dict[str, Any], family: str) -> None:
        self.data = data
        self.family = family
        self.defaults = DEFAULTS[family]
        self.aliases = ALIASES.get(family, {})
        for key in REQUIRED[family]:
            if self._lookup(key) is _MISSING:
                raise StepbillError(f"{family} config is missing {key!r}")

    def _lookup(self, key: str) -> Any:
        if key in self.data:
            return self.data[key]
        alias = self.aliases.get(key)
        if alias is not None and alias in self.data:
            return self.data[alias]
        return _MISSING

    def raw(self, key: str) -> Any:
        """The value as written, else the config class's default."""
        value = self._lookup(key)
        return self.defaults.get(key) if value is _MISSING else value

    def _bad(self, key: str, what: str, value: Any) -> StepbillError:
        return StepbillError(f"{self.family} config: {key} must be {what}, got {shown(value)}")

    def integer(self, key: str, *, nullable: bool = False) -> Any:
        """An integer field within its FIELD_RULES bound; None passes through only when nullable."""
        value = self.raw(key)
        if value is None and nullable:
            return None
        rule = FIELD_RULES.get(key, WIDTH)
        if not rule.accepts(value):
            raise self._bad(key, rule.allowed + (" or null" if nullable else ""), value)
        return value

    def flag(self, key: str) -> bool:
        value = self.raw(key)
        if not isinstance(value, bool):
            raise self._bad(key, "true or false", value)
        return value

    def fraction(self, value: Any, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise self._bad(key, "a number in [0, 1]", value)
        return float(value)

    def int_list(self, key: str) -> tuple[int, ...]:
        value = self.raw(key)
        if value is None:
            return ()
        if not isinstance(value, list) or not LAYER_LIST.accepts(value):
            raise self._bad(key, LAYER_LIST.allowed, value)
        return tuple(value)


def from_hf_config(config: dict[str, Any], name: str = "custom") -> ModelSpec:
    """ModelSpec from the dict of a transformers config.json (see hf_families for the per-family rules)."""
    if not isinstance(config, dict):
        raise StepbillError("a Hugging Face config must be a JSON object")
    family = config.get("model_type")
    if family == "gemma3" and isinstance(config.get("text_config"), dict):
        raise StepbillError("model_type 'gemma3' is the multimodal Gemma 3 (a vision tower too): pass its "
                            "text_config (model_type gemma3_text) to bill the language model")
    if family not in SUPPORTED_MODEL_TYPES:
        raise StepbillError(
            f"unsupported model_type {family!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    c = _Config(config, family)
    if family == "gpt2":
        return _gpt2(c, name)
    if family == "gpt_neox":
        return _gpt_neox(c, name)
    if family in MLA:
        return _deepseek(c, name)
    if family in GEMMA:
        return _gemma(c, name)
    if family == "phi3":
        return _phi3(c, name)
    if family == "olmo2":
        return _olmo2(c, name)
    if family == "gpt_oss":
        return _gpt_oss(c, name)
    return _llama_like(c, name)


def _base(c: _Config, name: str) -> dict[str, Any]:
    """Fields every family states the same way."""
    return {
        "name": name,
        "family": c.family,
        "vocab_size": c.integer("vocab_size"),
        "hidden_size": c.integer("hidden_size" if c.family != "gpt2" else "n_embd"),
        "n_layers": c.integer("num_hidden_layers" if c.family != "gpt2" else "n_layer"),
        "max_position_embeddings": c.integer("max_position_embeddings" if c.family != "gpt2" else "n_positions"),
        "tied_embeddings": c.flag("tie_word_embeddings"),
        **_dropouts(c),
    }


# ModelSpec dropout field -> the family's config key (see hf_families: "Fields that change what the step keeps").
_DROPOUT_KEYS: dict[str, dict[str, str]] = {
    "gpt2": {"attention_dropout": "attn_pdrop", "hidden_dropout": "resid_pdrop", "embedding_dropout": "embd_pdrop"},
    "gpt_neox": {"attention_dropout": "attention_dropout", "hidden_dropout": "hidden_dropout",
                 "embedding_dropout": "hidden_dropout"},
}


def dropout_config_key(family: str, field: str) -> str:
    """The config key of `family` that sets ModelSpec's dropout `field` (e.g. gpt2 attention_dropout: attn_pdrop)."""
    return _DROPOUT_KEYS.get(family, {}).get(field, field)


def dropout_config_keys(family: str) -> tuple[str, ...]:
    """The config keys holding a dropout probability that `family`'s causal LM applies."""
    if family not in SUPPORTED_MODEL_TYPES:
        raise StepbillError(f"unsupported model_type {family!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    return tuple(dict.fromkeys(_DROPOUT_KEYS.get(family, {"attention_dropout": "attention_dropout"}).values()))


def _dropouts(c: _Config) -> dict[str, float]:
    """The dropout probabilities the family reads (null counts as 0, as transformers' modules treat it)."""
    keys = _DROPOUT_KEYS.get(c.family, {"attention_dropout": "attention_dropout"})
    return {name: c.fraction(0.0 if c.raw(key) is None else c.raw(key), key) for name, key in keys.items()}


def _sliding(c: _Config, n_layers: int) -> dict[str, Any]:
    """sliding_window / sliding_layers as transformers builds them (rules in hf_families' docstring)."""
    f = c.family
    if f in ("mistral", "mixtral"):
        return {"sliding_window": c.integer("sliding_window", nullable=True)}  # every layer
    if f not in QWEN_FAMILIES or not c.flag("use_sliding_window"):
        return {}
    window = c.integer("sliding_window", nullable=True)
    types = c.data.get("layer_types")
    if window is None:
        return {}
    if types is not None and f != "qwen3_moe":
        if not isinstance(types, list) or len(types) != n_layers:
            raise c._bad("layer_types", f"a list of {n_layers} layer types", types)
        layers = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    elif f in ("qwen2", "qwen3"):
        layers = tuple(range(c.integer("max_window_layers", zero_ok=True), n_layers))
    elif f == "qwen2_moe":
        first_full = c.integer("max_window_layers", zero_ok=True)
        layers = tuple(i for i in range(min(first_full, n_layers)) if (i + 1) % 2)
    else:  # qwen3_moe
        layers = tuple(range(n_layers))
    return {"sliding_window": window, "sliding_layers": layers} if layers else {}


def _heads_divide(c: _Config, hidden: int, heads: int) -> int:
    """hidden // heads, for the families that derive the head width from it (and fail otherwise)."""
    if hidden % heads:
        raise StepbillError(f"{c.family} config: num_attention_heads ({heads}) must divide hidden_size ({hidden})")
    return hidden // heads


def _gpt2(c: _Config, name: str) -> ModelSpec:
    base = _base(c, name)
    if c.flag("add_cross_attention"):
        raise StepbillError("gpt2 config: add_cross_attention is not supported (decoder-only models only)")
    d, heads = base["hidden_size"], c.integer("n_head")
    inner = c.integer("n_inner", nullable=True) or 4 * d  # GPT2Block: n_inner None means 4 × hidden
    return ModelSpec(
        **base,
        # Conv1D always has a bias: c_attn (q, k, v) and c_proj both.
        attention=AttentionSpec(heads, head_dim=_heads_divide(c, d, heads), qkv_bias=True, out_bias=True),
        ffn=FFNSpec(inner, "gelu_mlp", bias=True),
        norm="layernorm",
        positions="learned",
    )


def _rotary_fraction(c: _Config, legacy_key: str, default: float) -> float:
    """Share of each head that gets rotary: rope_parameters / rope_scaling, else the legacy top-level key."""
    for rope_key in ("rope_scaling", "rope_parameters"):
        rope = c.data.get(rope_key)
        if isinstance(rope, dict) and "partial_rotary_factor" in rope:
            return c.fraction(rope["partial_rotary_factor"], f"{rope_key}.partial_rotary_factor")
    if legacy_key in c.data:
        return c.fraction(c.data[legacy_key], legacy_key)
    return default


def _gpt_neox(c: _Config, name: str) -> ModelSpec:
    base = _base(c, name)
    d, heads = base["hidden_size"], c.integer("num_attention_heads")
    bias = c.flag("attention_bias")
    return ModelSpec(
        **base,
        attention=AttentionSpec(heads, head_dim=_heads_divide(c, d, heads), qkv_bias=bias, out_bias=bias),
        ffn=FFNSpec(c.integer("intermediate_size"), "gelu_mlp", bias=True),  # nn.Linear defaults: always biased
        norm="layernorm",
        positions="rotary",
        rotary_fraction=_rotary_fraction(c, "rotary_pct", 0.25),
        parallel_residual=c.flag("use_parallel_residual"),
    )


def _llama_like(c: _Config, name: str) -> ModelSpec:
    """llama, mistral, qwen2, qwen3 and the MHA MoE families built on the same block."""
    f = c.family
    base = _base(c, name)
    d, heads = base["hidden_size"], c.integer("num_attention_heads")
    kv = c.integer("num_key_value_heads", nullable=True) or heads  # None: __post_init__ makes it MHA
    # qwen3 declares head_dim: int = 128, so null is rejected there; elsewhere null means hidden // heads.
    head_dim = c.integer("head_dim", nullable=f != "qwen3") or _heads_divide(c, d, heads)
    if f in ("llama", "qwen3", "qwen3_moe"):
        qkv_bias = out_bias = c.flag("attention_bias")  # one switch for q, k, v and o
    elif f == "qwen2":
        qkv_bias, out_bias = True, False  # Qwen2Attention hard-codes bias=True on q/k/v, False on o
    elif f == "qwen2_moe":
        qkv_bias, out_bias = c.flag("qkv_bias"), False
    else:  # mistral, mixtral: no bias anywhere, whatever the file says
        qkv_bias = out_bias = False
    attention = AttentionSpec(
        heads, n_kv_heads=kv, head_dim=head_dim, qkv_bias=qkv_bias, out_bias=out_bias,
        qk_norm=f in ("qwen3", "qwen3_moe"), **_sliding(c, base["n_layers"]),
    )
    mlp_bias = c.flag("mlp_bias") if f == "llama" else False
    return ModelSpec(
        **base,
        attention=attention,
        ffn=FFNSpec(c.integer("intermediate_size"), "swiglu", bias=mlp_bias),
        moe=_mha_moe(c, base["n_layers"]),
        rotary_fraction=_rotary_fraction(c, "partial_rotary_factor", 1.0),
    )


def _mha_moe(c: _Config, n_layers: int) -> MoESpec | None:
    """The MoE block of mixtral / qwen2_moe / qwen3_moe; None for the dense families or no sparse layer."""
    if c.family == "mixtral":
        return MoESpec(c.integer("num_local_experts"), c.integer("num_experts_per_tok"), c.integer("intermediate_size"))
    if c.family not in ("qwen2_moe", "qwen3_moe"):
        return None
    experts, step = c.integer("num_experts"), c.integer("decoder_sparse_step")
    only_mlp = set(c.int_list("mlp_only_layers"))
    # Qwen*MoeDecoderLayer: sparse iff not in mlp_only_layers and num_experts > 0 and (i + 1) % step == 0.
    dense = tuple(i for i in range(n_layers) if i in only_mlp or (i + 1) % step or not experts)
    if len(dense) == n_layers:
        return None
    shared = c.integer("shared_expert_intermediate_size") if c.family == "qwen2_moe" else 0
    return MoESpec(
        experts, c.integer("num_experts_per_tok"), c.integer("moe_intermediate_size"),
        n_shared_experts=1 if shared else 0,
        shared_intermediate_size=shared,
        shared_expert_gate=c.family == "qwen2_moe",  # built in every sparse block, even with no shared width
        dense_layers=dense,
    )


def _deepseek(c: _Config, name: str) -> ModelSpec:
    base = _base(c, name)
    n_layers = base["n_layers"]
    bias = c.flag("attention_bias")  # q_a_proj, kv_a_proj_with_mqa and o_proj
    attention = AttentionSpec(
        c.integer("num_attention_heads"), kind="mla", qkv_bias=bias, out_bias=bias,
        q_lora_rank=c.integer("q_lora_rank", nullable=True),  # null (V2-Lite): a plain q_proj
        kv_lora_rank=c.integer("kv_lora_rank"),
        qk_nope_head_dim=c.integer("qk_nope_head_dim"),
        qk_rope_head_dim=c.integer("qk_rope_head_dim"),
        v_head_dim=c.integer("v_head_dim"),
    )
    # DeepseekV3MLP has no bias at all; V2's follows mlp_bias (dense layers and shared experts alike).
    mlp_bias = c.flag("mlp_bias") if c.family == "deepseek_v2" else False
    first_dense = c.integer("first_k_dense_replace")
    moe = None
    if first_dense < n_layers:
        expert = c.integer("moe_intermediate_size")
        n_shared = c.integer("n_shared_experts")
        moe = MoESpec(
            c.integer("n_routed_experts"), c.integer("num_experts_per_tok"), expert,
            n_shared_experts=n_shared, shared_intermediate_size=n_shared * expert,
            dense_layers=tuple(range(first_dense)),
        )
    notes = []
    mtp = c.data.get("num_nextn_predict_layers")
    if isinstance(mtp, int) and not isinstance(mtp, bool) and mtp > 0:
        notes.append(f"its {mtp} multi-token-prediction layer(s) are not counted: transformers does not build them")
    freq = c.data.get("moe_layer_freq", 1)
    if freq != 1:
        notes.append(f"moe_layer_freq={shown(freq)} is ignored, as transformers does (every layer from "
                     "first_k_dense_replace on is MoE)")
    return ModelSpec(
        **base,
        attention=attention,
        ffn=FFNSpec(c.integer("intermediate_size"), "swiglu", bias=mlp_bias),
        moe=moe,
        notes="; ".join(notes),
    )


def _cap(c: _Config, key: str) -> float | None:
    """A soft-capping constant: null (none) or a positive number."""
    value = c.raw(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise c._bad(key, "a positive number or null", value)
    return float(value)


def _sliding_layers(c: _Config, n_layers: int, window: int | None) -> tuple[int, ...]:
    """Indices of the sliding-window layers: from ``layer_types`` when given, else the family's default pattern
    (configuration_<family>.py __post_init__). A null window means no layer slides (the attention's
    sliding_window is config.sliding_window)."""
    types = c.raw("layer_types")
    if types is None:
        every = c.integer("sliding_window_pattern") if c.family == "gemma3_text" else FULL_EVERY[c.family]
        sliding = tuple(i for i in range(n_layers) if (i + 1) % every)
    else:
        allowed = ("sliding_attention", "full_attention")
        if not isinstance(types, list) or len(types) != n_layers or any(t not in allowed for t in types):
            raise c._bad("layer_types", f"a list of {n_layers} 'sliding_attention' / 'full_attention'", types)
        sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    return sliding if window is not None else ()


def _head_dim_or_derived(c: _Config, d: int, heads: int) -> int:
    """head_dim when config.json states it (null or absent: hidden // heads), as modeling_<family>.py reads it."""
    return c.integer("head_dim", nullable=True) or _heads_divide(c, d, heads)


def _gemma(c: _Config, name: str) -> ModelSpec:
    base = _base(c, name)
    d, heads, n_layers = base["hidden_size"], c.integer("num_attention_heads"), base["n_layers"]
    _heads_divide(c, d, heads)  # Gemma{2,3}TextConfig.validate_architecture, although head_dim is its own field
    if c.family == "gemma3_text" and c.raw("use_bidirectional_attention") is True:
        raise StepbillError("gemma3_text config: use_bidirectional_attention (an encoder) is not supported")
    act = c.raw("hidden_activation")
    glu = {"gelu_pytorch_tanh": "gelu_tanh", "silu": "silu"}.get(act) if isinstance(act, str) else None
    if glu is None:
        raise c._bad("hidden_activation", "gelu_pytorch_tanh or silu", act)
    window = c.integer("sliding_window", nullable=True)
    bias = c.flag("attention_bias")  # q, k, v and o alike
    attention = AttentionSpec(
        heads, n_kv_heads=c.integer("num_key_value_heads"), head_dim=c.integer("head_dim"), qkv_bias=bias,
        out_bias=bias, qk_norm=c.family == "gemma3_text", logit_softcap=_cap(c, "attn_logit_softcapping"),
        sliding_window=window, sliding_layers=_sliding_layers(c, n_layers, window),
    )
    return ModelSpec(
        **base,
        attention=attention,
        ffn=FFNSpec(c.integer("intermediate_size"), "swiglu", glu_act=glu),
        rotary_fraction=_rotary_fraction(c, "partial_rotary_factor", 1.0),
        norm_placement="sandwich",
        norm_weight_offset=True,
        scaled_embeddings=True,
        final_logit_softcap=_cap(c, "final_logit_softcapping"),
    )


def _phi3(c: _Config, name: str) -> ModelSpec:
    base = _base(c, name)
    d, heads = base["hidden_size"], c.integer("num_attention_heads")
    window = c.integer("sliding_window", nullable=True)  # Phi3Model: one sliding-window mask for every layer
    attention = AttentionSpec(
        heads, n_kv_heads=c.integer("num_key_value_heads", nullable=True) or heads,
        head_dim=_head_dim_or_derived(c, d, heads), fused_qkv=True, sliding_window=window,
        sliding_layers=tuple(range(base["n_layers"])) if window is not None else (),
    )
    return ModelSpec(
        **base,
        attention=attention,
        ffn=FFNSpec(c.integer("intermediate_size"), "swiglu", fused_gate_up=True),
        rotary_fraction=_rotary_fraction(c, "partial_rotary_factor", 1.0),
    )


def _olmo2(c: _Config, name: str) -> ModelSpec:
    base = _base(c, name)
    d, heads = base["hidden_size"], c.integer("num_attention_heads")
    bias = c.flag("attention_bias")
    attention = AttentionSpec(
        heads, n_kv_heads=c.integer("num_key_value_heads", nullable=True) or heads,
        head_dim=_head_dim_or_derived(c, d, heads), qkv_bias=bias, out_bias=bias, qk_norm=True,
        qk_norm_scope="projection",
    )
    return ModelSpec(
        **base,
        attention=attention,
        ffn=FFNSpec(c.integer("intermediate_size"), "swiglu"),
        rotary_fraction=_rotary_fraction(c, "partial_rotary_factor", 1.0),
        norm_placement="post",
    )


def _gpt_oss(c: _Config, name: str) -> ModelSpec:
    base = _base(c, name)
    heads, n_layers = c.integer("num_attention_heads"), base["n_layers"]
    window = c.integer("sliding_window", nullable=True)
    bias = c.flag("attention_bias")
    attention = AttentionSpec(
        heads, n_kv_heads=c.integer("num_key_value_heads", nullable=True) or heads,
        head_dim=c.integer("head_dim"),  # GptOssConfig: head_dim: int = 64, never hidden // heads (null rejected)
        qkv_bias=bias, out_bias=bias, sinks=True, sliding_window=window,
        sliding_layers=_sliding_layers(c, n_layers, window),
    )
    width = c.integer("intermediate_size")
    limit = _cap(c, "swiglu_limit")
    moe = MoESpec(c.integer("num_local_experts"), c.integer("num_experts_per_tok"), width, router_bias=True,
                  expert_bias=True, swiglu_limit=limit)
    notes = []
    if isinstance(c.data.get("quantization_config"), dict):
        notes.append("its quantization_config (e.g. mxfp4 experts) is not billed: the recipe sets the weight dtype")
    return ModelSpec(
        **base,
        attention=attention,
        ffn=FFNSpec(width, "swiglu"),  # never built: every layer is MoE
        moe=moe,
        rotary_fraction=_rotary_fraction(c, "partial_rotary_factor", 1.0),
        notes="; ".join(notes),
    )


# --- ModelSpec -> config ---------------------------------------------------------------------------------


def to_hf_config(spec: ModelSpec) -> dict[str, Any]:
    """A transformers config dict (with "model_type") that builds the same architecture as `spec`.

    Tries `spec.family` first, then the supported families closest to the spec's shape (llama-like for dense
    rotary + RMSNorm, gpt2 / gpt_neox for LayerNorm blocks, mixtral / qwen MoE for MHA experts, deepseek for
    MLA); a candidate is accepted only if `from_hf_config` reads it back to the same architecture.
    """
    if spec.attention.kind == "mla":
        shape = MLA
    elif spec.moe is not None and spec.n_moe_layers:
        shape = MOE_MHA
    else:
        shape = (*DENSE_ROTARY, "gpt2", "gpt_neox")
    first = spec.family if spec.family in SUPPORTED_MODEL_TYPES else shape[0]
    candidates = dict.fromkeys((first, *shape, *SUPPORTED_MODEL_TYPES))
    want = _canonical(spec)
    reason = ""
    for family in candidates:
        try:
            config = EMIT[family](spec)
            got = _canonical(from_hf_config(config, spec.name))
        except StepbillError as exc:
            reason = reason or str(exc)
            continue
        if got == want:
            return config
        reason = reason or _first_difference(want, got)
    raise StepbillError(f"cannot express model {spec.name!r} as a transformers config; as {first}: {reason}")


def _canonical(spec: ModelSpec) -> dict[str, Any]:
    """The parts of a spec that define the architecture, with equivalent spellings made equal."""
    out = spec.to_dict()
    for key in ("name", "notes", "family"):
        out.pop(key)
    attn = out["attention"]
    if spec.attention.kind == "mha":
        attn["n_kv_heads"] = spec.attention.kv_heads  # None and n_heads both mean MHA
    else:
        attn["n_kv_heads"] = attn["head_dim"] = None  # unused by MLA
    if spec.moe is not None and spec.n_moe_layers == 0:
        out["moe"] = None
    if spec.moe is not None and spec.n_dense_layers == 0:
        out["ffn"] = None  # no layer builds the dense FFN
    if spec.positions == "learned" or spec.attention.kind == "mla":
        out["rotary_fraction"] = None  # no partial rotary to speak of
    return out


def _first_difference(want: dict[str, Any], got: dict[str, Any], prefix: str = "") -> str:
    for key in want:
        a, b = want[key], got.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found = _first_difference(a, b, f"{prefix}{key}.")
            if found:
                return found
        elif a != b:
            return f"{prefix}{key} would be {b!r}, not {a!r}"
    return ""
