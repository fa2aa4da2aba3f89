"""Per-family knowledge for the HF config.json loader: defaults, key aliases, parse and emit rules.

Everything here is written down from transformers' own ``configuration_<family>.py`` and
``modeling_<family>.py`` (v5.24) rather than imported, so the core package stays torch-free. The rules that
change parameter counts, family by family (each one a place where a plain reading of config.json goes wrong):

- gpt2: Conv1D layers always carry biases; ``n_inner`` None means 4 × hidden; learned positions
  (``n_positions`` rows); LayerNorm; embeddings tied by default.
- gpt_neox: ``attention_bias`` (default True) on query_key_value and dense; the MLP always has biases;
  ``intermediate_size`` defaults to 24576 (not 4 × hidden); ``rotary_pct`` defaults to 0.25; untied by default.
- llama: ``attention_bias`` on q, k, v *and* o; ``mlp_bias`` on all three MLP matrices; ``head_dim`` null
  means hidden // heads.
- mistral, mixtral: no biases at all (the keys are ignored); ``num_key_value_heads`` defaults to 8.
- qwen2: q/k/v always have a bias and o never does (``attention_bias`` is ignored); ``head_dim`` is not a
  declared field but the attention reads it when present.
- qwen3: ``head_dim`` defaults to 128 (not hidden // heads) and may not be null; ``attention_bias`` on all
  four projections; a per-head RMSNorm on q and k (qk-norm).
- qwen2_moe: ``qkv_bias`` (default True) on q/k/v; one shared expert of ``shared_expert_intermediate_size``
  and a ``shared_expert_gate`` (hidden → 1) in every sparse layer; a layer is dense when listed in
  ``mlp_only_layers`` or when (layer + 1) is not a multiple of ``decoder_sparse_step``.
- qwen3_moe: like qwen2_moe for sparse-layer selection, no shared expert, qk-norm, ``attention_bias``.
- deepseek_v2 / deepseek_v3: MLA; ``q_lora_rank`` null replaces q_a/q_b by one q_proj; layers below
  ``first_k_dense_replace`` are dense. transformers ignores ``moe_layer_freq`` (every later layer is MoE), so
  the loader does too — stepbill counts what transformers builds. Shared experts are one MLP of width
  ``n_shared_experts × moe_intermediate_size`` with the dense MLP's bias (``mlp_bias``, V2 only). The
  router of V3 has ``e_score_correction_bias``, a *buffer*, not a parameter; the multi-token-prediction
  module (``num_nextn_predict_layers``) is not built by transformers and is not counted.
- gemma2 / gemma3_text: four norms per layer (input, post-attention, pre- and post-feedforward: "sandwich");
  RMSNorm scales by (1 + weight) and embeddings by √hidden (no parameter change); the MLP is GeGLU
  (``hidden_activation`` gelu_pytorch_tanh: the same three matrices as SwiGLU); ``head_dim`` (default 256) is
  its own field, yet ``hidden_size`` must still be a multiple of the head count (validate_architecture);
  ``attention_bias`` on all four projections; layers alternate sliding-window / full attention
  (``layer_types``, else every 2nd layer full for gemma2, every ``sliding_window_pattern``-th, default 6, for
  gemma3); gemma2 soft-caps attention scores (``attn_logit_softcapping``, 50) and the logits
  (``final_logit_softcapping``, 30); gemma3 adds a per-head qk-norm. Embeddings tied by default. The
  multimodal ``gemma3`` (Gemma3ForConditionalGeneration, a vision tower) is not read: its ``text_config`` is.
- phi3: ``qkv_proj`` and ``gate_up_proj`` are fused matrices (the same parameters as q/k/v and gate/up); no
  bias anywhere; ``head_dim`` read when present; a non-null ``sliding_window`` applies to every layer.
- olmo2: norms only on each block's output (post_attention / post_feedforward: "post"); qk-norm over the whole
  q and k projections (weights of heads·head_dim and kv_heads·head_dim); ``attention_bias`` on all four.
- gpt_oss: every layer is MoE: ``num_local_experts`` experts of ``intermediate_size``, each with biases on its
  gate/up and down projections; the router has a bias; no shared expert; ``attention_bias`` (default True)
  on all four projections; one learned sink logit per head; layers alternate sliding-window / full
  (``layer_types``, default every 2nd full); the expert SwiGLU clamps at ``swiglu_limit``.

Fields that change what the step keeps, not the parameter count (read so that `check` can build the model as
configured and the bill can say what it does not model):

- dropout: gpt2 ``attn_pdrop`` (attention probabilities), ``resid_pdrop`` (attention and MLP outputs),
  ``embd_pdrop`` (embeddings), all 0.1 by default; gpt_neox ``attention_dropout`` and ``hidden_dropout`` (the
  latter on the attention / MLP outputs *and* the embeddings), 0.0; every other family ``attention_dropout``,
  0.0. ``summary_*_dropout`` and ``classifier_dropout`` belong to heads a causal LM does not build.
- sliding window: mistral ``sliding_window`` (default 4096, every layer; null: full attention), mixtral the
  same with default null; qwen2 / qwen3 / qwen2_moe / qwen3_moe only with ``use_sliding_window`` true, on the
  layers of ``layer_types`` when given, else qwen2 / qwen3 layers ≥ ``max_window_layers``, qwen2_moe even
  layers below ``max_window_layers``, qwen3_moe every layer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec

# Class defaults of each transformers config, for the keys the loader reads. `None` where the class
# default is None and is resolved in __post_init__ or the modeling code (see the parse functions).
_LLAMA_LIKE = {
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": None,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
    "head_dim": None,
    "attention_dropout": 0.0,
}
_QWEN_SLIDING = {"use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 28}
DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt2": {
        "vocab_size": 50257,
        "n_positions": 1024,
        "n_embd": 768,
        "n_layer": 12,
        "n_head": 12,
        "n_inner": None,
        "tie_word_embeddings": True,
        "add_cross_attention": False,
        "attn_pdrop": 0.1,
        "resid_pdrop": 0.1,
        "embd_pdrop": 0.1,
    },
    "gpt_neox": {
        "vocab_size": 50432,
        "hidden_size": 6144,
        "num_hidden_layers": 44,
        "num_attention_heads": 64,
        "intermediate_size": 24576,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
        "use_parallel_residual": True,
        "attention_bias": True,
        "rotary_pct": 0.25,
        "attention_dropout": 0.0,
        "hidden_dropout": 0.0,
    },
    "llama": {**_LLAMA_LIKE, "attention_bias": False, "mlp_bias": False},
    "mistral": {**_LLAMA_LIKE, "intermediate_size": 14336, "num_key_value_heads": 8,
                "max_position_embeddings": 4096 * 32, "sliding_window": 4096},
    "qwen2": {**_LLAMA_LIKE, **_QWEN_SLIDING, "vocab_size": 151936, "intermediate_size": 22016,
              "num_key_value_heads": 32, "max_position_embeddings": 32768},
    "qwen3": {**_LLAMA_LIKE, **_QWEN_SLIDING, "vocab_size": 151936, "intermediate_size": 22016,
              "num_key_value_heads": 32, "max_position_embeddings": 32768, "head_dim": 128, "attention_bias": False},
    "mixtral": {**_LLAMA_LIKE, "intermediate_size": 14336, "num_key_value_heads": 8,
                "max_position_embeddings": 4096 * 32, "num_local_experts": 8, "num_experts_per_tok": 2,
                "sliding_window": None},
    "qwen2_moe": {**_LLAMA_LIKE, **_QWEN_SLIDING, "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632,
                  "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
                  "max_position_embeddings": 32768, "decoder_sparse_step": 1, "moe_intermediate_size": 1408,
                  "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4, "num_experts": 60,
                  "mlp_only_layers": None, "qkv_bias": True},
    "qwen3_moe": {**_LLAMA_LIKE, **_QWEN_SLIDING, "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144,
                  "num_hidden_layers": 24, "num_attention_heads": 32, "num_key_value_heads": 4,
                  "max_position_embeddings": 32768, "attention_bias": False, "decoder_sparse_step": 1,
                  "moe_intermediate_size": 768, "num_experts_per_tok": 8, "num_experts": 128,
                  "mlp_only_layers": None},
    "deepseek_v2": {"vocab_size": 102400, "hidden_size": 4096, "intermediate_size": 11008,
                    "num_hidden_layers": 32, "num_attention_heads": 32, "max_position_embeddings": 2048,
                    "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
                    "attention_dropout": 0.0, "first_k_dense_replace": 0, "kv_lora_rank": 512, "q_lora_rank": 1536,
                    "n_routed_experts": 64, "n_shared_experts": 2, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128, "num_experts_per_tok": None,
                    "moe_intermediate_size": 1407},
    "deepseek_v3": {"vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432,
                    "num_hidden_layers": 61, "num_attention_heads": 128, "max_position_embeddings": 4096,
                    "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
                    "attention_dropout": 0.0, "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536,
                    "n_routed_experts": 256, "n_shared_experts": 1, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128, "num_experts_per_tok": 8,
                    "moe_intermediate_size": 2048},
    "gemma2": {"vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
               "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
               "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 8192,
               "tie_word_embeddings": True, "attention_bias": False, "sliding_window": 4096, "layer_types": None,
               "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0},
    "gemma3_text": {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131072,
                    "tie_word_embeddings": True, "attention_bias": False, "sliding_window": 4096,
                    "layer_types": None, "sliding_window_pattern": 6, "final_logit_softcapping": None,
                    "attn_logit_softcapping": None, "use_bidirectional_attention": False},
    "phi3": {**_LLAMA_LIKE, "vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192,
             "max_position_embeddings": 4096, "sliding_window": None},
    "olmo2": {**_LLAMA_LIKE, "vocab_size": 50304, "attention_bias": False},
    "gpt_oss": {"vocab_size": 201088, "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 36,
                "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": 128,
                "num_experts_per_tok": 4, "max_position_embeddings": 131072, "tie_word_embeddings": False,
                "attention_bias": True, "sliding_window": 128, "layer_types": None, "swiglu_limit": 7.0},
}

# attribute_map of each config class: other spellings transformers accepts for the same field.
ALIASES: dict[str, dict[str, str]] = {
    "gpt2": {"n_embd": "hidden_size", "n_positions": "max_position_embeddings", "n_head": "num_attention_heads",
             "n_layer": "num_hidden_layers"},
    "mixtral": {"num_local_experts": "num_experts"},
    "deepseek_v2": {"n_routed_experts": "num_experts"},
    "deepseek_v3": {"n_routed_experts": "num_local_experts"},
    "gpt_oss": {"num_local_experts": "num_experts"},
}

# The keys a config.json must state: without them the file describes no particular model, and filling
# them from a class default (e.g. llama's 4096 hidden) would bill a different model without a word.
REQUIRED: dict[str, tuple[str, ...]] = {
    family: (("vocab_size", "n_embd", "n_layer", "n_head") if family == "gpt2"
             else ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"))
    for family in DEFAULTS
}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(DEFAULTS)

# Order in which `to_hf_config` tries families for a spec: the closest ones first within each shape.
DENSE_ROTARY = ("llama", "mistral", "qwen2", "qwen3")
MOE_MHA = ("mixtral", "qwen2_moe", "qwen3_moe")
MLA = ("deepseek_v3", "deepseek_v2")
GEMMA = ("gemma2", "gemma3_text")
NEW_FAMILIES = (*GEMMA, "phi3", "olmo2", "gpt_oss")
# Where a layer's attention is full when config.json has no layer_types: every n-th layer (i + 1) % n == 0.
FULL_EVERY = {"gemma2": 2, "gpt_oss": 2}  # gemma3_text: sliding_window_pattern (default 6)


# --- emitters: ModelSpec -> config dict of one family (hf.to_hf_config checks that it reads back equal) ---

Emitter = Callable[[ModelSpec], dict[str, Any]]


def _common(spec: ModelSpec, family: str) -> dict[str, Any]:
    a = spec.attention
    out: dict[str, Any] = {
        "model_type": family,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.ffn.intermediate_size,
        "num_hidden_layers": spec.n_layers,
        "num_attention_heads": a.n_heads,
        "max_position_embeddings": spec.max_position_embeddings,
        "tie_word_embeddings": spec.tied_embeddings,
    }
    if a.kind == "mha":
        out["num_key_value_heads"] = a.kv_heads
        out["head_dim"] = a.head_dim
    if spec.rotary_fraction != 1.0 and family in (*DENSE_ROTARY, *MOE_MHA, *NEW_FAMILIES):
        out["partial_rotary_factor"] = spec.rotary_fraction
    out["attention_dropout"] = spec.attention_dropout
    return out


QWEN_FAMILIES = ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe")


def _emit_sliding(spec: ModelSpec, family: str) -> dict[str, Any]:
    """The sliding-window keys of `family` for `spec` (read back by hf._sliding)."""
    if family in ("mistral", "mixtral"):
        return {"sliding_window": spec.sliding_window}
    if family not in QWEN_FAMILIES:
        return {}
    if spec.sliding_window is None:
        return {"use_sliding_window": False}
    out: dict[str, Any] = {"use_sliding_window": True, "sliding_window": spec.sliding_window}
    if family != "qwen3_moe":  # qwen3_moe has no layer_types: every layer slides
        out["layer_types"] = ["sliding_attention" if i in spec.sliding_layers else "full_attention"
                              for i in range(spec.n_layers)]
    return out


def _emit_gpt2(spec: ModelSpec) -> dict[str, Any]:
    return {
        "model_type": "gpt2",
        "vocab_size": spec.vocab_size,
        "n_embd": spec.hidden_size,
        "n_layer": spec.n_layers,
        "n_head": spec.attention.n_heads,
        "n_inner": spec.ffn.intermediate_size,
        "n_positions": spec.max_position_embeddings,
        "tie_word_embeddings": spec.tied_embeddings,
        "attn_pdrop": spec.attention_dropout,
        "resid_pdrop": spec.hidden_dropout,
        "embd_pdrop": spec.embedding_dropout,
    }


def _emit_gpt_neox(spec: ModelSpec) -> dict[str, Any]:
    out = _common(spec, "gpt_neox")
    for key in ("num_key_value_heads", "head_dim"):
        out.pop(key, None)
    return out | {
        "attention_bias": spec.attention.qkv_bias,
        "rotary_pct": spec.rotary_fraction,
        "use_parallel_residual": spec.parallel_residual,
        "hidden_act": "gelu",
        "hidden_dropout": spec.hidden_dropout,  # also the embedding dropout (GPTNeoXModel.emb_dropout)
    }


def _emit_llama_like(family: str) -> Emitter:
    def emit(spec: ModelSpec) -> dict[str, Any]:
        a, moe = spec.attention, spec.moe
        out = _common(spec, family)
        if family in ("llama", "qwen3", "qwen3_moe"):
            out["attention_bias"] = a.qkv_bias
        if family == "llama":
            out["mlp_bias"] = spec.ffn.bias
        if family == "qwen2_moe":
            out["qkv_bias"] = a.qkv_bias
        out |= _emit_sliding(spec, family)
        if moe is None:
            return out
        if family == "mixtral":
            return out | {"intermediate_size": moe.expert_intermediate_size,
                          "num_local_experts": moe.n_routed_experts, "num_experts_per_tok": moe.top_k}
        if family in ("qwen2_moe", "qwen3_moe"):
            out |= {"num_experts": moe.n_routed_experts, "num_experts_per_tok": moe.top_k,
                    "moe_intermediate_size": moe.expert_intermediate_size, "decoder_sparse_step": 1,
                    "mlp_only_layers": list(moe.dense_layers)}
            if family == "qwen2_moe":
                out["shared_expert_intermediate_size"] = moe.shared_intermediate_size
        return out

    return emit


def _emit_deepseek(family: str) -> Emitter:
    def emit(spec: ModelSpec) -> dict[str, Any]:
        a, moe = spec.attention, spec.moe
        out = _common(spec, family) | {
            "num_key_value_heads": a.n_heads,
            "q_lora_rank": a.q_lora_rank,
            "kv_lora_rank": a.kv_lora_rank,
            "qk_nope_head_dim": a.qk_nope_head_dim,
            "qk_rope_head_dim": a.qk_rope_head_dim,
            "v_head_dim": a.v_head_dim,
            "attention_bias": a.qkv_bias,
        }
        if family == "deepseek_v2":
            out["mlp_bias"] = spec.ffn.bias
        if moe is None or spec.n_moe_layers == 0:
            # No sparse layer: every layer below first_k_dense_replace is dense; the expert sizes are moot.
            return out | {"first_k_dense_replace": spec.n_layers, "n_routed_experts": 1, "num_experts_per_tok": 1,
                          "n_shared_experts": 0, "n_group": 1, "topk_group": 1}
        experts, k = moe.n_routed_experts, moe.top_k
        # Routing groups change no parameter but must fit the expert count for a forward pass to run:
        # keep V3's 8 groups / 4 chosen when they fit, else one group.
        n_group, topk_group = (8, 4) if experts % 8 == 0 and 4 * (experts // 8) >= k else (1, 1)
        shared = moe.shared_intermediate_size // moe.expert_intermediate_size
        return out | {
            "first_k_dense_replace": len(moe.dense_layers),
            "n_routed_experts": experts,
            "num_experts_per_tok": k,
            "moe_intermediate_size": moe.expert_intermediate_size,
            "n_shared_experts": shared,
            "n_group": n_group,
            "topk_group": topk_group,
        }

    return emit


def _layer_types(spec: ModelSpec) -> list[str]:
    sliding = set(spec.attention.sliding_layers)
    return ["sliding_attention" if i in sliding else "full_attention" for i in range(spec.n_layers)]


def _emit_gemma(family: str) -> Emitter:
    def emit(spec: ModelSpec) -> dict[str, Any]:
        a = spec.attention
        return _common(spec, family) | {
            "num_key_value_heads": a.kv_heads,
            "head_dim": a.head_dim,
            "attention_bias": a.qkv_bias,
            "hidden_activation": "gelu_pytorch_tanh" if spec.ffn.glu_act == "gelu_tanh" else "silu",
            "sliding_window": a.sliding_window,
            "layer_types": _layer_types(spec),
            "attn_logit_softcapping": a.logit_softcap,
            "final_logit_softcapping": spec.final_logit_softcap,
        }

    return emit


def _emit_phi3(spec: ModelSpec) -> dict[str, Any]:
    a = spec.attention
    # pad_token_id: the class default (32000) must lie inside the vocabulary for the model to build.
    return _common(spec, "phi3") | {"num_key_value_heads": a.kv_heads, "head_dim": a.head_dim,
                                    "sliding_window": a.sliding_window, "pad_token_id": None}


def _emit_olmo2(spec: ModelSpec) -> dict[str, Any]:
    return _common(spec, "olmo2") | {"attention_bias": spec.attention.qkv_bias}


def _emit_gpt_oss(spec: ModelSpec) -> dict[str, Any]:
    a, moe = spec.attention, spec.moe
    if moe is None or spec.n_dense_layers:
        raise StepbillError("gpt_oss has no dense layers: every layer is a mixture of experts")
    return _common(spec, "gpt_oss") | {
        "num_key_value_heads": a.kv_heads,
        "head_dim": a.head_dim,
        "attention_bias": a.qkv_bias,
        "intermediate_size": moe.expert_intermediate_size,
        "num_local_experts": moe.n_routed_experts,
        "num_experts_per_tok": moe.top_k,
        "sliding_window": a.sliding_window,
        "layer_types": _layer_types(spec),
        "swiglu_limit": moe.swiglu_limit,
    }


EMIT: dict[str, Emitter] = {
    "gpt2": _emit_gpt2,
    "gpt_neox": _emit_gpt_neox,
    **{f: _emit_llama_like(f) for f in (*DENSE_ROTARY, *MOE_MHA)},
    **{f: _emit_deepseek(f) for f in MLA},
    **{f: _emit_gemma(f) for f in GEMMA},
    "phi3": _emit_phi3,
    "olmo2": _emit_olmo2,
    "gpt_oss": _emit_gpt_oss,
}
