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
    DENSE_ROTARY,
    EMIT,
    GEMMA,
    MLA,
    MOE_MHA,
    SUPPORTED_MODEL_TYPES,
)
from stepbill.spec.hf_newer import gemma_spec, gpt_oss_spec, olmo2_spec, phi3_spec
from stepbill.spec.hf_reader import (
    HFConfig,
    dropout_config_key,
    dropout_config_keys,
    heads_divide,
    read_base,
    read_rotary_fraction,
    read_sliding,
)
from stepbill.spec.model import AttentionSpec, FFNSpec, ModelSpec, MoESpec

__all__ = ["SUPPORTED_MODEL_TYPES", "dropout_config_key", "dropout_config_keys", "from_hf_config", "to_hf_config"]


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
    c = HFConfig(config, family)
    if family == "gpt2":
        return _gpt2(c, name)
    if family == "gpt_neox":
        return _gpt_neox(c, name)
    if family in MLA:
        return _deepseek(c, name)
    if family in GEMMA:
        return gemma_spec(c, name)
    if family == "phi3":
        return phi3_spec(c, name)
    if family == "olmo2":
        return olmo2_spec(c, name)
    if family == "gpt_oss":
        return gpt_oss_spec(c, name)
    return _llama_like(c, name)


def _gpt2(c: HFConfig, name: str) -> ModelSpec:
    base = read_base(c, name)
    if c.flag("add_cross_attention"):
        raise StepbillError("gpt2 config: add_cross_attention is not supported (decoder-only models only)")
    d, heads = base["hidden_size"], c.integer("n_head")
    inner = c.integer("n_inner", nullable=True) or 4 * d  # GPT2Block: n_inner None means 4 × hidden
    return ModelSpec(
        **base,
        # Conv1D always has a bias: c_attn (q, k, v) and c_proj both.
        attention=AttentionSpec(heads, head_dim=heads_divide(c, d, heads), qkv_bias=True, out_bias=True),
        ffn=FFNSpec(inner, "gelu_mlp", bias=True),
        norm="layernorm",
        positions="learned",
    )


def _gpt_neox(c: HFConfig, name: str) -> ModelSpec:
    base = read_base(c, name)
    d, heads = base["hidden_size"], c.integer("num_attention_heads")
    bias = c.flag("attention_bias")
    return ModelSpec(
        **base,
        attention=AttentionSpec(heads, head_dim=heads_divide(c, d, heads), qkv_bias=bias, out_bias=bias),
        ffn=FFNSpec(c.integer("intermediate_size"), "gelu_mlp", bias=True),  # nn.Linear defaults: always biased
        norm="layernorm",
        positions="rotary",
        rotary_fraction=read_rotary_fraction(c, "rotary_pct", 0.25),
        parallel_residual=c.flag("use_parallel_residual"),
    )


def _llama_like(c: HFConfig, name: str) -> ModelSpec:
    """llama, mistral, qwen2, qwen3 and the MHA MoE families built on the same block."""
    f = c.family
    base = read_base(c, name)
    d, heads = base["hidden_size"], c.integer("num_attention_heads")
    kv = c.integer("num_key_value_heads", nullable=True) or heads  # None: __post_init__ makes it MHA
    # qwen3 declares head_dim: int = 128, so null is rejected there; elsewhere null means hidden // heads.
    head_dim = c.integer("head_dim", nullable=f != "qwen3") or heads_divide(c, d, heads)
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
        qk_norm=f in ("qwen3", "qwen3_moe"), **read_sliding(c, base["n_layers"]),
    )
    mlp_bias = c.flag("mlp_bias") if f == "llama" else False
    return ModelSpec(
        **base,
        attention=attention,
        ffn=FFNSpec(c.integer("intermediate_size"), "swiglu", bias=mlp_bias),
        moe=_mha_moe(c, base["n_layers"]),
        rotary_fraction=read_rotary_fraction(c, "partial_rotary_factor", 1.0),
    )


def _mha_moe(c: HFConfig, n_layers: int) -> MoESpec | None:
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


def _deepseek(c: HFConfig, name: str) -> ModelSpec:
    base = read_base(c, name)
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
