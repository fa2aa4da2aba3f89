"""Parameter totals against transformers itself: every supported family, real and small configs, presets,
and random specs (hypothesis). Models are built on the meta device, so even DeepSeek-V3 (671B) is instant.

Skipped on a core-only install (no torch / transformers).
"""

from __future__ import annotations

import json
import warnings
from functools import cache
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")
transformers = pytest.importorskip("transformers", reason="needs transformers: pip install 'stepbill[measure]'")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from stepbill.engine.params import param_inventory  # noqa: E402
from stepbill.spec.hf import from_hf_config, to_hf_config  # noqa: E402
from stepbill.spec.model import AttentionSpec, FFNSpec, ModelSpec, MoESpec  # noqa: E402
from stepbill.spec.presets import load_preset, preset_names  # noqa: E402

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
REAL = sorted(p.stem for p in CONFIGS.glob("*.json"))


@cache
def _hf_count(config_json: str) -> int:
    config = json.loads(config_json)
    # Hub-only keys: auto_map points at remote code, quantization_config at fp8 kernels; neither changes
    # which parameters the transformers class builds.
    for key in ("auto_map", "quantization_config"):
        config.pop(key, None)
    transformers.logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_config = transformers.AutoConfig.for_model(**config)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(hf_config)
    return sum(p.numel() for p in model.parameters())  # parameters() already skips tied duplicates


def hf_count(config: dict[str, Any]) -> int:
    """Unique parameters of the model transformers builds from `config` (cached per config)."""
    return _hf_count(json.dumps(config, sort_keys=True))


def real(name: str) -> dict[str, Any]:
    return json.loads((CONFIGS / f"{name}.json").read_text())


@pytest.mark.parametrize("name", REAL)
def test_real_configs_match_transformers(name: str) -> None:
    config = real(name)
    assert param_inventory(from_hf_config(config, name=name)).total == hf_count(config)


@pytest.mark.parametrize("name", REAL)
def test_to_hf_config_of_real_configs_builds_the_same_count(name: str) -> None:
    spec = from_hf_config(real(name), name=name)
    assert hf_count(to_hf_config(spec)) == param_inventory(spec).total


@pytest.mark.parametrize("preset", preset_names())
def test_presets_build_in_transformers_with_our_count(preset: str) -> None:
    spec = load_preset(preset)
    assert hf_count(to_hf_config(spec)) == param_inventory(spec).total


# Small configs that switch on each count-changing field of each family.
_LLAMA = {"vocab_size": 97, "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
          "num_key_value_heads": 2, "intermediate_size": 80}
_MLA = {"vocab_size": 97, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
        "intermediate_size": 80, "kv_lora_rank": 16, "q_lora_rank": 24, "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 4, "v_head_dim": 12, "moe_intermediate_size": 20, "n_routed_experts": 8,
        "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1}
SMALL: dict[str, dict[str, Any]] = {
    "gpt2-defaults": {"model_type": "gpt2", "vocab_size": 97, "n_embd": 64, "n_layer": 2, "n_head": 4},
    "gpt2-inner-untied": {"model_type": "gpt2", "vocab_size": 97, "n_embd": 64, "n_layer": 2, "n_head": 4,
                          "n_inner": 72, "n_positions": 33, "tie_word_embeddings": False},
    "gpt_neox-defaults": {"model_type": "gpt_neox", "vocab_size": 97, "hidden_size": 64, "num_hidden_layers": 2,
                          "num_attention_heads": 4},
    "gpt_neox-nobias-tied": {"model_type": "gpt_neox", **_LLAMA, "attention_bias": False, "rotary_pct": 1.0,
                             "use_parallel_residual": False, "tie_word_embeddings": True},
    "llama-biases": {"model_type": "llama", **_LLAMA, "attention_bias": True, "mlp_bias": True},
    "llama-head_dim-gqa-tied": {"model_type": "llama", **_LLAMA, "head_dim": 24, "num_key_value_heads": 2,
                                "tie_word_embeddings": True},
    "llama-head_dim-null": {"model_type": "llama", **_LLAMA, "head_dim": None, "num_key_value_heads": None},
    "mistral-default-kv": {"model_type": "mistral", **{k: v for k, v in _LLAMA.items() if k != "num_key_value_heads"},
                           "num_attention_heads": 8, "attention_bias": True},
    "mistral-head_dim-null": {"model_type": "mistral", **_LLAMA, "head_dim": None, "num_key_value_heads": 4},
    "qwen2-head_dim-tied": {"model_type": "qwen2", **_LLAMA, "head_dim": 8, "tie_word_embeddings": True},
    "qwen2-untied": {"model_type": "qwen2", **_LLAMA, "num_key_value_heads": 1},
    "qwen3-default-head_dim": {"model_type": "qwen3", **_LLAMA},
    "qwen3-bias": {"model_type": "qwen3", **_LLAMA, "head_dim": 16, "attention_bias": True},
    "mixtral-small": {"model_type": "mixtral", **_LLAMA, "num_local_experts": 4, "num_experts_per_tok": 1,
                      "num_key_value_heads": 2,
                      "head_dim": 8},
    "mixtral-defaults": {"model_type": "mixtral", **{k: v for k, v in _LLAMA.items() if k != "num_key_value_heads"},
                         "num_attention_heads": 8},
    "qwen2_moe-step-only": {"model_type": "qwen2_moe", **_LLAMA, "num_experts": 4, "num_experts_per_tok": 2,
                            "moe_intermediate_size": 20, "shared_expert_intermediate_size": 36,
                            "decoder_sparse_step": 2, "mlp_only_layers": [1]},
    "qwen2_moe-noshared-nobias": {"model_type": "qwen2_moe", **_LLAMA, "num_experts": 4, "num_experts_per_tok": 2,
                                  "moe_intermediate_size": 20, "shared_expert_intermediate_size": 0,
                                  "qkv_bias": False, "tie_word_embeddings": True},
    "qwen2_moe-defaults": {"model_type": "qwen2_moe", **_LLAMA},
    "qwen3_moe-mlp_only": {"model_type": "qwen3_moe", **_LLAMA, "num_experts": 4, "num_experts_per_tok": 2,
                           "moe_intermediate_size": 20, "mlp_only_layers": [0, 2], "head_dim": 32,
                           "attention_bias": True},
    "qwen3_moe-step": {"model_type": "qwen3_moe", **_LLAMA, "num_experts": 4, "num_experts_per_tok": 2,
                       "moe_intermediate_size": 20, "decoder_sparse_step": 3},
    "deepseek_v2-biases": {"model_type": "deepseek_v2", **_MLA, "attention_bias": True, "mlp_bias": True,
                           "first_k_dense_replace": 2, "n_shared_experts": 2},
    "deepseek_v2-q-null-noshared": {"model_type": "deepseek_v2", **_MLA, "q_lora_rank": None,
                                    "n_shared_experts": 0, "moe_layer_freq": 2},
    "deepseek_v3-small": {"model_type": "deepseek_v3", **_MLA, "first_k_dense_replace": 1},
    "deepseek_v3-q-null-all-moe-tied": {"model_type": "deepseek_v3", **_MLA, "q_lora_rank": None,
                                        "first_k_dense_replace": 0, "tie_word_embeddings": True,
                                        "attention_bias": True},
    "deepseek_v3-all-dense": {"model_type": "deepseek_v3", **_MLA, "first_k_dense_replace": 9},
    # gemma2 / gemma3_text: sandwich norms, GeGLU, head_dim ≠ hidden / heads, layer_types and their defaults.
    "gemma2-defaults": {"model_type": "gemma2", **_LLAMA},
    "gemma2-bias-untied-layer_types": {"model_type": "gemma2", **_LLAMA, "head_dim": 24, "attention_bias": True,
                                       "tie_word_embeddings": False, "attn_logit_softcapping": None,
                                       "layer_types": ["full_attention", "sliding_attention", "full_attention"]},
    "gemma3_text-defaults": {"model_type": "gemma3_text", **_LLAMA, "num_hidden_layers": 7},
    "gemma3_text-pattern-window-null": {"model_type": "gemma3_text", **_LLAMA, "head_dim": 12,
                                        "sliding_window_pattern": 2, "sliding_window": None,
                                        "attention_bias": True},
    # phi3: fused qkv_proj / gate_up_proj, head_dim when present.
    # (pad_token_id: the class default 32000 lies outside a 97-token vocabulary; it changes no count)
    "phi3-defaults": {"model_type": "phi3", **{k: v for k, v in _LLAMA.items() if k != "num_key_value_heads"},
                      "pad_token_id": 0},
    "phi3-gqa-head_dim-window": {"model_type": "phi3", **_LLAMA, "head_dim": 8, "sliding_window": 16,
                                 "tie_word_embeddings": True, "pad_token_id": 0},
    # olmo2: post-norms, qk-norm over the whole projections.
    "olmo2-gqa": {"model_type": "olmo2", **_LLAMA},
    "olmo2-bias-head_dim-tied": {"model_type": "olmo2", **_LLAMA, "attention_bias": True, "head_dim": 24,
                                 "tie_word_embeddings": True},
    # gpt_oss: biased experts and router, sinks, layer_types default.
    "gpt_oss-small": {"model_type": "gpt_oss", **_LLAMA, "num_local_experts": 4, "num_experts_per_tok": 2,
                      "head_dim": 12},
    "gpt_oss-nobias-head_dim-default-tied": {"model_type": "gpt_oss", **_LLAMA, "num_experts": 3,
                                             "num_experts_per_tok": 1, "attention_bias": False,
                                             "tie_word_embeddings": True, "sliding_window": 8,
                                             "layer_types": ["sliding_attention"] * 3},
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_configs_match_transformers(name: str) -> None:
    config = SMALL[name]
    spec = from_hf_config(config, name=name)
    assert param_inventory(spec).total == hf_count(config)
    assert hf_count(to_hf_config(spec)) == param_inventory(spec).total


def _hand_active(spec: ModelSpec) -> int:
    """Active = total minus the routed experts a token skips: (E - k) SwiGLU experts per MoE layer."""
    moe = spec.moe
    assert moe is not None
    per_expert = 3 * spec.hidden_size * moe.expert_intermediate_size
    if moe.expert_bias:  # gpt-oss: gate/up biases (2 × width) and the down bias (hidden)
        per_expert += 2 * moe.expert_intermediate_size + spec.hidden_size
    return param_inventory(spec).total - spec.n_moe_layers * (moe.n_routed_experts - moe.top_k) * per_expert


@pytest.mark.parametrize(
    ("name", "moe_layers"),
    [("mixtral-8x7b", 32), ("qwen1.5-moe-a2.7b", 24), ("qwen3-30b-a3b", 48), ("deepseek-v2-lite", 26),
     ("deepseek-v3", 58), ("gpt-oss-20b", 24)],
)
def test_moe_active_matches_hand_formula(name: str, moe_layers: int) -> None:
    spec = from_hf_config(real(name), name=name)
    assert spec.n_moe_layers == moe_layers
    inv = param_inventory(spec)
    assert inv.total == hf_count(real(name))
    assert inv.active == _hand_active(spec)


# --- property tests: random small specs through to_hf_config ------------------------------------------------

_sizes = st.sampled_from([4, 8, 12])


@st.composite
def dense_specs(draw: st.DrawFn) -> ModelSpec:
    heads = draw(st.sampled_from([1, 2, 4]))
    hidden = heads * draw(st.sampled_from([4, 8, 16]))
    layers = draw(st.integers(1, 3))
    vocab = draw(st.integers(5, 70))
    style = draw(st.sampled_from(["llama", "qwen2", "qwen3", "gpt2", "gpt_neox"]))
    tied = draw(st.booleans())
    ffn_width = draw(st.integers(1, 40))
    if style in ("gpt2", "gpt_neox"):
        bias = True if style == "gpt2" else draw(st.booleans())
        return ModelSpec(
            "p", vocab, hidden, layers, AttentionSpec(heads, qkv_bias=bias, out_bias=bias),
            FFNSpec(ffn_width, "gelu_mlp", bias=True), norm="layernorm",
            positions="learned" if style == "gpt2" else "rotary", tied_embeddings=tied,
            max_position_embeddings=draw(st.integers(1, 64)),
            rotary_fraction=1.0 if style == "gpt2" else draw(st.sampled_from([0.25, 0.5, 1.0])),
            parallel_residual=style == "gpt_neox" and draw(st.booleans()),
        )
    kv = draw(st.sampled_from([d for d in (1, 2, 4) if heads % d == 0]))
    head_dim = draw(st.sampled_from([None, 4, 8]))
    qkv_bias = draw(st.booleans())
    out_bias = {"llama": qkv_bias, "qwen2": False, "qwen3": qkv_bias}[style]
    return ModelSpec(
        "p", vocab, hidden, layers,
        AttentionSpec(heads, n_kv_heads=kv, head_dim=head_dim, qkv_bias=qkv_bias, out_bias=out_bias,
                      qk_norm=style == "qwen3"),
        FFNSpec(ffn_width, "swiglu", bias=style == "llama" and draw(st.booleans())), tied_embeddings=tied,
    )


@st.composite
def moe_specs(draw: st.DrawFn) -> ModelSpec:
    heads = draw(st.sampled_from([2, 4]))
    hidden = heads * 8
    layers = draw(st.integers(1, 4))
    experts = draw(st.integers(1, 6))
    top_k = draw(st.integers(1, experts))
    expert = draw(_sizes)
    style = draw(st.sampled_from(["mixtral", "qwen2_moe", "qwen3_moe"]))
    dense: tuple[int, ...] = ()
    shared = 0
    if style != "mixtral":
        dense = tuple(draw(st.sets(st.integers(0, layers - 1), max_size=layers - 1)))
    if style == "qwen2_moe":
        shared = draw(st.sampled_from([0, 8, 20]))
    bias = style != "mixtral" and draw(st.booleans())  # mixtral has no attention bias at all
    moe = MoESpec(experts, top_k, expert, n_shared_experts=1 if shared else 0, shared_intermediate_size=shared,
                  shared_expert_gate=style == "qwen2_moe", dense_layers=dense)
    return ModelSpec(
        "p", draw(st.integers(5, 70)), hidden, layers,
        AttentionSpec(heads, n_kv_heads=draw(st.sampled_from([1, heads])), qkv_bias=bias,
                      out_bias=bias and style == "qwen3_moe", qk_norm=style == "qwen3_moe"),
        FFNSpec(expert if style == "mixtral" else draw(_sizes), "swiglu"), moe=moe,
        tied_embeddings=draw(st.booleans()),
    )


@st.composite
def mla_specs(draw: st.DrawFn) -> ModelSpec:
    heads = draw(st.sampled_from([1, 2, 4]))
    layers = draw(st.integers(1, 3))
    bias = draw(st.booleans())
    attention = AttentionSpec(
        heads, kind="mla", qkv_bias=bias, out_bias=bias, q_lora_rank=draw(st.sampled_from([None, 8, 12])),
        kv_lora_rank=draw(_sizes), qk_nope_head_dim=draw(_sizes), qk_rope_head_dim=draw(st.sampled_from([2, 4])),
        v_head_dim=draw(_sizes),
    )
    moe = None
    if draw(st.booleans()):
        experts, expert = draw(st.integers(1, 6)), draw(_sizes)
        n_shared = draw(st.integers(0, 2))
        moe = MoESpec(experts, draw(st.integers(1, experts)), expert, n_shared_experts=n_shared,
                      shared_intermediate_size=n_shared * expert,
                      dense_layers=tuple(range(draw(st.integers(0, layers - 1)))))
    return ModelSpec("p", draw(st.integers(5, 70)), heads * 8, layers, attention,
                     FFNSpec(draw(_sizes), "swiglu"), moe=moe, tied_embeddings=draw(st.booleans()))


@pytest.mark.parametrize("strategy", [dense_specs(), moe_specs(), mla_specs()], ids=["dense", "moe", "mla"])
def test_random_specs_match_transformers(strategy: st.SearchStrategy[ModelSpec]) -> None:
    @settings(max_examples=15, deadline=None, derandomize=True)
    @given(strategy)
    def check(spec: ModelSpec) -> None:
        config = to_hf_config(spec)
        assert hf_count(config) == param_inventory(spec).total

    check()
