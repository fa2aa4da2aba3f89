"""Small hand-written transformers config dicts, one per supported family (tests and docs).

Two decoder layers each; widths are distinct numbers so that a saved tensor's width per token tells which
projection made it (e.g. q = heads·head_dim = 128, kv = kv_heads·head_dim = 64, ffn = 176).
"""

from __future__ import annotations

from typing import Any

_COMMON: dict[str, Any] = {"vocab_size": 320, "num_hidden_layers": 2, "max_position_embeddings": 512}

TINY_CONFIGS: dict[str, dict[str, Any]] = {
    "llama": {
        **_COMMON,
        "model_type": "llama",
        "hidden_size": 128,
        "intermediate_size": 176,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "tie_word_embeddings": False,
    },
    "gpt2": {
        "model_type": "gpt2",
        "vocab_size": 320,
        "n_layer": 2,
        "n_embd": 128,
        "n_head": 4,
        "n_positions": 512,
        "n_inner": None,  # 4·hidden = 512
        # trains without dropout (GPT-2's default is 0.1; tests/measure/test_eager_dropout.py sets it back)
        "attn_pdrop": 0.0,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
    },
    "gpt_neox": {
        **_COMMON,
        "model_type": "gpt_neox",
        "hidden_size": 128,
        "intermediate_size": 512,
        "num_attention_heads": 4,
        "rotary_pct": 0.25,
        "use_parallel_residual": True,
        "tie_word_embeddings": False,
    },
    "qwen3": {
        **_COMMON,
        "model_type": "qwen3",
        "hidden_size": 128,
        "intermediate_size": 176,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "tie_word_embeddings": False,
    },
    "mixtral": {
        **_COMMON,
        "model_type": "mixtral",
        "hidden_size": 128,
        "intermediate_size": 176,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "tie_word_embeddings": False,
    },
    "qwen2_moe": {
        **_COMMON,
        "model_type": "qwen2_moe",
        "hidden_size": 128,
        "intermediate_size": 176,
        "moe_intermediate_size": 48,
        "shared_expert_intermediate_size": 96,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "tie_word_embeddings": False,
    },
    "deepseek_v3": {
        **_COMMON,
        "model_type": "deepseek_v3",
        "hidden_size": 128,
        "intermediate_size": 176,
        "moe_intermediate_size": 48,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "q_lora_rank": 96,
        "kv_lora_rank": 64,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16,
        "v_head_dim": 24,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
        "first_k_dense_replace": 1,
        "tie_word_embeddings": False,
    },
    "olmo2": {
        **_COMMON,
        "model_type": "olmo2",
        "hidden_size": 128,
        "intermediate_size": 176,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "tie_word_embeddings": False,
    },
    "phi3": {
        **_COMMON,
        "model_type": "phi3",
        "hidden_size": 128,
        "intermediate_size": 176,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "pad_token_id": 0,  # the class default 32000 lies outside the tiny vocabulary
        "tie_word_embeddings": False,
    },
    "gemma3_text": {
        **_COMMON,
        "model_type": "gemma3_text",
        "hidden_size": 128,
        "intermediate_size": 176,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 40,  # ≠ hidden / heads, as in every Gemma
        "sliding_window": 128,  # above the tests' seq 64: no mask (windows at seq ≥ window: tests/measure/test_window_saved.py)
        "layer_types": ["sliding_attention", "full_attention"],
        "tie_word_embeddings": True,
    },
    "gemma2": {
        **_COMMON,
        "model_type": "gemma2",
        "hidden_size": 128,
        "intermediate_size": 176,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 40,
        "sliding_window": 128,  # above the tests' seq 64: no mask (windows at seq ≥ window: tests/measure/test_window_saved.py)
        "layer_types": ["sliding_attention", "full_attention"],
        "tie_word_embeddings": True,
    },
    "gpt_oss": {
        **_COMMON,
        "model_type": "gpt_oss",
        "hidden_size": 128,
        "intermediate_size": 48,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "sliding_window": 128,  # above the tests' seq 64: no mask (windows at seq ≥ window: tests/measure/test_window_saved.py)
        "layer_types": ["sliding_attention", "full_attention"],
        "tie_word_embeddings": False,
    },
}
