"""ModelSpec builders of the newer families the loader reads (gemma2, gemma3_text, phi3, olmo2, gpt_oss): sandwich
and post norms, GeGLU, fused projections, qk-norm scopes, attention sinks, soft-capping and alternating
sliding windows (rules in hf_families' docstring)."""

from __future__ import annotations

from stepbill.errors import StepbillError
from stepbill.spec.hf_reader import (
    HFConfig,
    head_dim_or_derived,
    heads_divide,
    read_base,
    read_cap,
    read_rotary_fraction,
    read_sliding_layers,
)
from stepbill.spec.model import AttentionSpec, FFNSpec, ModelSpec, MoESpec


def gemma_spec(c: HFConfig, name: str) -> ModelSpec:
    base = read_base(c, name)
    d, heads, n_layers = base["hidden_size"], c.integer("num_attention_heads"), base["n_layers"]
    heads_divide(c, d, heads)  # Gemma{2,3}TextConfig.validate_architecture, although head_dim is its own field
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
        out_bias=bias, qk_norm=c.family == "gemma3_text", logit_softcap=read_cap(c, "attn_logit_softcapping"),
        sliding_window=window, sliding_layers=read_sliding_layers(c, n_layers, window),
    )
    return ModelSpec(
        **base,
        attention=attention,
        ffn=FFNSpec(c.integer("intermediate_size"), "swiglu", glu_act=glu),
        rotary_fraction=read_rotary_fraction(c, "partial_rotary_factor", 1.0),
        norm_placement="sandwich",
        norm_weight_offset=True,
        scaled_embeddings=True,
        final_logit_softcap=read_cap(c, "final_logit_softcapping"),
    )


def phi3_spec(c: HFConfig, name: str) -> ModelSpec:
    base = read_base(c, name)
    d, heads = base["hidden_size"], c.integer("num_attention_heads")
    window = c.integer("sliding_window", nullable=True)  # Phi3Model: one sliding-window mask for every layer
    attention = AttentionSpec(
        heads, n_kv_heads=c.integer("num_key_value_heads", nullable=True) or heads,
        head_dim=head_dim_or_derived(c, d, heads), fused_qkv=True, sliding_window=window,
        sliding_layers=tuple(range(base["n_layers"])) if window is not None else (),
    )
    return ModelSpec(
        **base,
        attention=attention,
        ffn=FFNSpec(c.integer("intermediate_size"), "swiglu", fused_gate_up=True),
        rotary_fraction=read_rotary_fraction(c, "partial_rotary_factor", 1.0),
    )


def olmo2_spec(c: HFConfig, name: str) -> ModelSpec:
    base = read_base(c, name)
    d, heads = base["hidden_size"], c.integer("num_attention_heads")
    bias = c.flag("attention_bias")
    attention = AttentionSpec(
        heads, n_kv_heads=c.integer("num_key_value_heads", nullable=True) or heads,
        head_dim=head_dim_or_derived(c, d, heads), qkv_bias=bias, out_bias=bias, qk_norm=True,
        qk_norm_scope="projection",
    )
    return ModelSpec(
        **base,
        attention=attention,
        ffn=FFNSpec(c.integer("intermediate_size"), "swiglu"),
        rotary_fraction=read_rotary_fraction(c, "partial_rotary_factor", 1.0),
        norm_placement="post",
    )


def gpt_oss_spec(c: HFConfig, name: str) -> ModelSpec:
    base = read_base(c, name)
    heads, n_layers = c.integer("num_attention_heads"), base["n_layers"]
    window = c.integer("sliding_window", nullable=True)
    bias = c.flag("attention_bias")
    attention = AttentionSpec(
        heads, n_kv_heads=c.integer("num_key_value_heads", nullable=True) or heads,
        head_dim=c.integer("head_dim"),  # GptOssConfig: head_dim: int = 64, never hidden // heads (null rejected)
        qkv_bias=bias, out_bias=bias, sinks=True, sliding_window=window,
        sliding_layers=read_sliding_layers(c, n_layers, window),
    )
    width = c.integer("intermediate_size")
    limit = read_cap(c, "swiglu_limit")
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
        rotary_fraction=read_rotary_fraction(c, "partial_rotary_factor", 1.0),
        notes="; ".join(notes),
    )
