"""HF config.json loader: real configs, per-family rules, round trips, and bad input (no torch needed).

The expected totals below are transformers' own counts (AutoModelForCausalLM.from_config on the meta device,
transformers 5.24) — tests/test_params_vs_transformers.py recomputes them where torch is installed; here they
pin the loader + inventory for a core-only install.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stepbill.engine.params import param_inventory
from stepbill.errors import StepbillError
from stepbill.spec.hf import SUPPORTED_MODEL_TYPES, from_hf_config, to_hf_config
from stepbill.spec.model import AttentionSpec, FFNSpec, ModelSpec, MoESpec
from stepbill.spec.presets import load_model, load_preset, preset_names

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
EXAMPLES = Path(__file__).parent.parent / "examples" / "configs"

# name: (total, active) as transformers builds it; the totals match the models' published sizes.
EXPECTED = {
    "gpt2": (124_439_808, 124_439_808),
    "gpt2-xl": (1_557_611_200, 1_557_611_200),  # openai-community/gpt2-xl: GPT-2's published 1.5B
    "pythia-160m": (162_322_944, 162_322_944),
    "pythia-1.4b": (1_414_647_808, 1_414_647_808),
    "llama-2-7b": (6_738_415_616, 6_738_415_616),
    "llama-2-13b": (13_015_864_320, 13_015_864_320),
    "llama-2-70b": (68_976_648_192, 68_976_648_192),
    "llama-65b": (65_285_660_672, 65_285_660_672),  # huggyllama/llama-65b: LLaMA-1 (QLoRA's 65B)
    "llama-3-8b": (8_030_261_248, 8_030_261_248),
    "llama-3-70b": (70_553_706_496, 70_553_706_496),
    "llama-3.2-1b": (1_235_814_400, 1_235_814_400),
    "mistral-7b": (7_241_732_096, 7_241_732_096),
    "qwen2-0.5b": (494_032_768, 494_032_768),
    "qwen2-7b": (7_615_616_512, 7_615_616_512),
    "qwen3-0.6b": (596_049_920, 596_049_920),
    "qwen3-8b": (8_190_735_360, 8_190_735_360),
    "mixtral-8x7b": (46_702_792_704, 12_879_925_248),
    "qwen1.5-moe-a2.7b": (14_315_784_192, 2_689_173_504),
    "qwen3-30b-a3b": (30_532_122_624, 3_353_032_704),
    "deepseek-v2-lite": (15_706_484_224, 2_661_150_208),
    "deepseek-v3": (671_026_404_352, 37_552_282_624),
    # Hub repos: google/gemma-2-9b, google/gemma-3-1b-it, google/gemma-3-4b-it (its text_config),
    # microsoft/Phi-3-mini-4k-instruct, allenai/OLMo-2-1124-7B, openai/gpt-oss-20b. Independent values:
    # keras-hub's presets give gemma3_1b 999,885,952 and phi3_mini_4k 3,821,079,552 (and gemma3_4b_text
    # 3,880,099,328 with 262,144 rows, 64 fewer than HF's 262,208: 64 × 2,560 = 163,840); OpenAI's gpt-oss
    # model card gives 20.9B total and 3.61B active without the input embedding (4,187,440,704 − 201,088 × 2,880
    # = 3,608,307,264).
    "gemma-2-9b": (9_241_705_984, 9_241_705_984),
    "gemma-3-1b": (999_885_952, 999_885_952),
    "gemma-3-4b-text": (3_880_263_168, 3_880_263_168),
    "phi-3-mini-4k": (3_821_079_552, 3_821_079_552),
    "olmo-2-1124-7b": (7_298_617_344, 7_298_617_344),
    "gpt-oss-20b": (20_914_757_184, 4_187_440_704),
}


def real(name: str) -> dict[str, Any]:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def test_every_real_config_is_shipped_and_every_family_covered() -> None:
    assert sorted(p.stem for p in CONFIGS.glob("*.json")) == sorted(EXPECTED)
    assert {real(n)["model_type"] for n in EXPECTED} == set(SUPPORTED_MODEL_TYPES)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_config_totals(name: str) -> None:
    inv = param_inventory(from_hf_config(real(name), name=name))
    assert (inv.total, inv.active) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_config_round_trips(name: str) -> None:
    spec = from_hf_config(real(name), name=name)
    back = from_hf_config(to_hf_config(spec), name=name)
    assert dataclasses.replace(back, notes=spec.notes) == spec


@pytest.mark.parametrize("preset", preset_names())
def test_presets_round_trip(preset: str) -> None:
    spec = load_preset(preset)
    config = to_hf_config(spec)
    assert config["model_type"] == spec.family
    back = from_hf_config(config, name=spec.name)
    assert dataclasses.replace(back, notes=spec.notes) == spec  # notes are prose, not architecture


@pytest.mark.parametrize(
    ("preset", "config"),
    [("llama2-7b", "llama-2-7b"), ("llama2-13b", "llama-2-13b"), ("llama2-70b", "llama-2-70b"),
     ("llama3-8b", "llama-3-8b"), ("llama3-70b", "llama-3-70b"), ("mixtral-8x7b", "mixtral-8x7b"),
     ("deepseek-v3", "deepseek-v3")],
)
def test_presets_agree_with_real_configs(preset: str, config: str) -> None:
    spec = load_preset(preset)
    loaded = from_hf_config(real(config), name=spec.name)
    assert dataclasses.replace(loaded, notes=spec.notes) == spec


# --- per-family rules --------------------------------------------------------------------------------------


def test_gpt2_defaults() -> None:
    spec = from_hf_config({"model_type": "gpt2", "vocab_size": 100, "n_embd": 64, "n_layer": 2, "n_head": 4})
    assert spec.ffn == FFNSpec(256, "gelu_mlp", bias=True)  # n_inner None -> 4 × hidden
    assert spec.tied_embeddings and spec.positions == "learned" and spec.norm == "layernorm"
    assert spec.max_position_embeddings == 1024
    assert spec.attention.qkv_bias and spec.attention.out_bias
    # attribute_map spellings are accepted too
    alias = from_hf_config({"model_type": "gpt2", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
                            "num_attention_heads": 4, "n_inner": 100, "tie_word_embeddings": False})
    assert alias.ffn.intermediate_size == 100 and not alias.tied_embeddings


def test_gpt_neox_rules() -> None:
    spec = from_hf_config(real("pythia-160m"))
    assert spec.rotary_fraction == 0.25 and spec.parallel_residual and not spec.tied_embeddings
    assert spec.attention.qkv_bias and spec.attention.out_bias and spec.ffn.bias
    small = {"model_type": "gpt_neox", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4}
    assert from_hf_config(small).ffn.intermediate_size == 24576  # the class default, not 4 × hidden
    no_bias = from_hf_config({**small, "attention_bias": False, "use_parallel_residual": False,
                              "rope_scaling": {"rope_type": "default", "partial_rotary_factor": 0.5}})
    assert not no_bias.attention.qkv_bias and not no_bias.parallel_residual and no_bias.rotary_fraction == 0.5


def test_llama_biases_and_head_dim() -> None:
    base = {"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 128}
    spec = from_hf_config({**base, "attention_bias": True, "mlp_bias": True, "head_dim": None})
    assert spec.attention.qkv_bias and spec.attention.out_bias and spec.ffn.bias
    assert spec.attention.head_dim == 16 and spec.attention.kv_heads == 4
    assert from_hf_config({**base, "head_dim": 32}).attention.head_dim == 32
    assert from_hf_config(real("llama-3.2-1b")).tied_embeddings


def test_mistral_ignores_bias_keys() -> None:
    spec = from_hf_config({**real("mistral-7b"), "attention_bias": True, "mlp_bias": True})
    assert not spec.attention.qkv_bias and not spec.ffn.bias


def test_qwen2_bias_pattern_and_tying() -> None:
    small, big = from_hf_config(real("qwen2-0.5b")), from_hf_config(real("qwen2-7b"))
    assert small.attention.qkv_bias and not small.attention.out_bias
    assert small.tied_embeddings and not big.tied_embeddings
    assert from_hf_config({**real("qwen2-0.5b"), "attention_bias": False}).attention.qkv_bias  # key ignored


def test_qwen3_head_dim_default_and_qk_norm() -> None:
    spec = from_hf_config(real("qwen3-0.6b"))
    assert spec.attention.qk_norm and spec.attention.head_dim == 128  # 1024 / 16 would be 64
    config = real("qwen3-0.6b")
    del config["head_dim"]
    assert from_hf_config(config).attention.head_dim == 128  # Qwen3Config's default, not hidden // heads


def test_qwen2_moe_sparse_layers_and_shared_expert() -> None:
    spec = from_hf_config(real("qwen1.5-moe-a2.7b"))
    assert spec.moe == MoESpec(60, 4, 1408, n_shared_experts=1, shared_intermediate_size=5632,
                               shared_expert_gate=True)
    step = from_hf_config({**real("qwen1.5-moe-a2.7b"), "decoder_sparse_step": 2, "mlp_only_layers": [1, 5]})
    assert step.moe is not None
    # dense where (i + 1) % 2 != 0 (even i) or listed
    assert step.moe.dense_layers == tuple(sorted({*range(0, 24, 2), 1, 5}))
    no_experts = from_hf_config({**real("qwen1.5-moe-a2.7b"), "num_experts": 0})
    assert no_experts.moe is None


def test_qwen3_moe_head_dim_and_mlp_only_layers() -> None:
    spec = from_hf_config({**real("qwen3-30b-a3b"), "mlp_only_layers": [0, 47]})
    assert spec.attention.head_dim == 128 and spec.attention.qk_norm
    assert spec.moe is not None and spec.moe.dense_layers == (0, 47) and spec.moe.n_shared_experts == 0


def test_deepseek_rules() -> None:
    lite = from_hf_config(real("deepseek-v2-lite"))
    assert lite.attention.kind == "mla" and lite.attention.q_lora_rank is None
    assert lite.moe is not None and lite.moe.dense_layers == (0,)
    assert lite.moe.shared_intermediate_size == 2 * 1408
    v3 = from_hf_config(real("deepseek-v3"))
    assert v3.moe is not None and not v3.moe.router_bias  # e_score_correction_bias is a buffer
    assert "multi-token-prediction" in v3.notes
    dense = from_hf_config({**real("deepseek-v3"), "num_hidden_layers": 2})
    assert dense.moe is None  # first_k_dense_replace 3 covers every layer


@pytest.mark.parametrize(
    ("spec", "family"),
    [
        (ModelSpec("d", 64, 32, 2, AttentionSpec(4, n_kv_heads=2), FFNSpec(64, "swiglu")), "llama"),
        (ModelSpec("b", 64, 32, 2, AttentionSpec(4, qkv_bias=True), FFNSpec(64, "swiglu")), "qwen2"),
        (ModelSpec("n", 64, 32, 2, AttentionSpec(4, qk_norm=True, head_dim=16), FFNSpec(64, "swiglu")), "qwen3"),
        (ModelSpec("g", 64, 32, 2, AttentionSpec(4, qkv_bias=True, out_bias=True), FFNSpec(64, bias=True),
                   norm="layernorm", positions="learned", tied_embeddings=True), "gpt2"),
        (ModelSpec("x", 64, 32, 2, AttentionSpec(4, qkv_bias=True, out_bias=True), FFNSpec(64, bias=True),
                   norm="layernorm", rotary_fraction=0.5, parallel_residual=True), "gpt_neox"),
        (ModelSpec("m", 64, 32, 2, AttentionSpec(4), FFNSpec(48, "swiglu"), moe=MoESpec(4, 2, 48)), "mixtral"),
        (ModelSpec("q", 64, 32, 3, AttentionSpec(4), FFNSpec(48, "swiglu"),
                   moe=MoESpec(4, 2, 16, 1, 32, shared_expert_gate=True, dense_layers=(1,))), "qwen2_moe"),
        (ModelSpec("l", 64, 32, 2, AttentionSpec(4, kind="mla", q_lora_rank=8, kv_lora_rank=8,
                                                qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=4),
                   FFNSpec(48, "swiglu"), moe=MoESpec(4, 2, 16, 1, 16, dense_layers=(0,))), "deepseek_v3"),
    ],
)
def test_custom_specs_pick_the_closest_family(spec: ModelSpec, family: str) -> None:
    config = to_hf_config(spec)
    assert config["model_type"] == family
    assert param_inventory(from_hf_config(config, name=spec.name)).total == param_inventory(spec).total


def test_inexpressible_spec_is_one_line_error() -> None:
    spec = ModelSpec("odd", 64, 32, 2, AttentionSpec(4), FFNSpec(48), norm="layernorm",
                     moe=MoESpec(4, 2, 16))  # LayerNorm + MoE: no supported family builds it
    with pytest.raises(StepbillError) as err:
        to_hf_config(spec)
    assert "\n" not in str(err.value) and "odd" in str(err.value)


# --- bad input ---------------------------------------------------------------------------------------------


def one_line_error(config: Any) -> str:
    with pytest.raises(StepbillError) as err:
        from_hf_config(config)
    message = str(err.value)
    assert "\n" not in message and message
    return message


def test_gemma_rules() -> None:
    g2 = from_hf_config(real("gemma-2-9b"))
    a = g2.attention
    assert (a.head_dim, a.kv_heads, a.logit_softcap, g2.final_logit_softcap) == (256, 8, 50.0, 30.0)
    assert a.sliding_window == 4096 and a.sliding_layers == tuple(range(0, 42, 2))  # every 2nd layer is full
    assert (g2.norm_placement, g2.norm_weight_offset, g2.scaled_embeddings, g2.tied_embeddings) == (
        "sandwich", True, True, True)
    assert (g2.ffn.kind, g2.ffn.glu_act, a.qk_norm) == ("swiglu", "gelu_tanh", False)
    g3 = from_hf_config(real("gemma-3-1b"))
    assert g3.attention.qk_norm and g3.attention.qk_norm_scope == "head" and g3.attention.logit_softcap is None
    assert g3.attention.sliding_layers == tuple(i for i in range(26) if (i + 1) % 6)  # sliding_window_pattern 6
    assert g3.final_logit_softcap is None
    norms = {t.name: t.copies for t in param_inventory(g3).tensors if t.component == "norms"}
    assert {n.split(".")[0] for n in norms} == {"input_norm", "post_attn_norm", "pre_ffn_norm", "post_ffn_norm",
                                                "attn", "final_norm"}


def test_gemma_layer_types_and_null_window() -> None:
    config = {**real("gemma-2-9b"), "num_hidden_layers": 3,
              "layer_types": ["full_attention", "sliding_attention", "sliding_attention"]}
    assert from_hf_config(config).attention.sliding_layers == (1, 2)
    assert from_hf_config({**config, "sliding_window": None}).attention.sliding_layers == ()


def test_phi3_olmo2_gpt_oss_rules() -> None:
    phi = from_hf_config(real("phi-3-mini-4k"))
    assert phi.attention.fused_qkv and phi.ffn.fused_gate_up and not phi.attention.qkv_bias
    assert phi.attention.sliding_window == 2047 and phi.attention.sliding_layers == tuple(range(32))
    olmo = from_hf_config(real("olmo-2-1124-7b"))
    assert olmo.norm_placement == "post" and olmo.attention.qk_norm_scope == "projection"
    q_norm = next(t for t in param_inventory(olmo).tensors if t.name == "attn.q_norm.weight")
    assert q_norm.shape == (4096,)  # over all 32 heads × 128, not one head
    oss = from_hf_config(real("gpt-oss-20b"))
    assert oss.moe is not None and oss.n_moe_layers == 24 and oss.n_dense_layers == 0
    assert (oss.moe.router_bias, oss.moe.expert_bias, oss.moe.swiglu_limit) == (True, True, 7.0)
    assert oss.attention.sinks and oss.attention.qkv_bias and oss.attention.out_bias
    assert oss.attention.sliding_window == 128 and oss.attention.sliding_layers == tuple(range(0, 24, 2))
    assert "quantization_config" in oss.notes


def test_multimodal_gemma3_points_to_text_config() -> None:
    message = one_line_error({"model_type": "gemma3", "text_config": real("gemma-3-4b-text")})
    assert "text_config" in message and "gemma3_text" in message


def test_unsupported_model_type_names_the_supported_ones() -> None:
    message = one_line_error({"model_type": "bert", "hidden_size": 768})
    assert "'bert'" in message and all(family in message for family in SUPPORTED_MODEL_TYPES)
    assert "None" in one_line_error({"hidden_size": 768})  # no model_type at all


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"hidden_size": "4096"}, "hidden_size"),
        ({"hidden_size": 4096.0}, "hidden_size"),
        ({"num_hidden_layers": True}, "num_hidden_layers"),
        ({"vocab_size": -1}, "vocab_size"),
        ({"num_attention_heads": 0}, "num_attention_heads"),
        ({"intermediate_size": None}, "intermediate_size"),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
        ({"num_key_value_heads": 5}, "n_kv_heads"),
        ({"head_dim": "x" * 200}, "head_dim"),
        ({"rope_scaling": {"partial_rotary_factor": 2}}, "partial_rotary_factor"),
    ],
)
def test_malformed_values(change: dict[str, Any], needle: str) -> None:
    assert needle in one_line_error({**real("llama-3-8b"), **change})


@pytest.mark.parametrize(("name", "key"), [("llama-3-8b", "hidden_size"), ("gpt2", "n_embd"),
                                           ("deepseek-v3", "num_hidden_layers"), ("qwen2-7b", "vocab_size")])
def test_missing_required_field(name: str, key: str) -> None:
    config = real(name)
    del config[key]
    assert key in one_line_error(config)


@pytest.mark.parametrize(
    ("name", "change", "needle"),
    [
        ("qwen3-8b", {"head_dim": None}, "head_dim"),
        ("qwen1.5-moe-a2.7b", {"decoder_sparse_step": 0}, "decoder_sparse_step"),
        ("qwen3-30b-a3b", {"mlp_only_layers": "0,1"}, "mlp_only_layers"),
        ("qwen3-30b-a3b", {"num_experts_per_tok": 200}, "top_k"),
        ("deepseek-v2-lite", {"num_experts_per_tok": None}, "num_experts_per_tok"),
        ("deepseek-v3", {"first_k_dense_replace": None}, "first_k_dense_replace"),
        ("deepseek-v3", {"kv_lora_rank": 0}, "kv_lora_rank"),
        ("gpt2", {"n_head": 5}, "num_attention_heads"),
        ("gpt2", {"add_cross_attention": True}, "add_cross_attention"),
        ("gemma-2-9b", {"num_attention_heads": 15, "num_key_value_heads": 5}, "num_attention_heads"),
        ("gemma-2-9b", {"head_dim": None}, "head_dim"),
        ("gemma-2-9b", {"hidden_activation": "relu"}, "hidden_activation"),
        ("gemma-2-9b", {"attn_logit_softcapping": -1}, "attn_logit_softcapping"),
        ("gemma-2-9b", {"final_logit_softcapping": "30"}, "final_logit_softcapping"),
        ("gemma-2-9b", {"layer_types": ["full_attention"]}, "layer_types"),
        # the fuzzer's find: Qwen's layer_types were read for their sliding entries only, "bogus" passed
        ("qwen3-8b", {"use_sliding_window": True, "sliding_window": 4096,
                      "layer_types": ["sliding_attention", "bogus", *["full_attention"] * 34]}, "layer_types"),
        ("gemma-3-1b", {"sliding_window_pattern": 0}, "sliding_window_pattern"),
        ("gemma-3-1b", {"use_bidirectional_attention": True}, "use_bidirectional_attention"),
        ("gpt-oss-20b", {"head_dim": None}, "head_dim"),
        ("gpt-oss-20b", {"swiglu_limit": float("nan")}, "swiglu_limit"),
        ("gpt-oss-20b", {"num_local_experts": 2}, "top_k"),
        ("olmo-2-1124-7b", {"attention_bias": "false"}, "attention_bias"),
    ],
)
def test_family_specific_bad_values(name: str, change: dict[str, Any], needle: str) -> None:
    assert needle in one_line_error({**real(name), **change})


def test_deepseek_v2_without_top_k_is_an_error() -> None:
    config = real("deepseek-v2-lite")
    del config["num_experts_per_tok"]  # DeepseekV2Config's default is None: no usable router
    assert "num_experts_per_tok" in one_line_error(config)


def test_not_an_object() -> None:
    one_line_error(["model_type", "llama"])


# --- files ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["qwen3-8b", "qwen2.5-7b", "deepseek-v2-lite", "qwen3-30b-a3b"])
def test_shipped_examples_load_by_path(name: str) -> None:
    spec = load_model(str(EXAMPLES / name / "config.json"))
    assert spec.name == name and spec.family == json.loads((EXAMPLES / name / "config.json").read_text())[
        "model_type"]


def test_config_json_path_in_tmp(tmp_path: Path) -> None:
    path = tmp_path / "my-model" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(real("mistral-7b")))
    spec = load_model(str(path))
    assert spec.name == "my-model" and param_inventory(spec).total == EXPECTED["mistral-7b"][0]


def test_loader_does_not_import_torch() -> None:
    code = "import sys, stepbill.spec.hf; sys.exit('torch' in sys.modules or 'transformers' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.parametrize(("model_type", "first", "layers"), [("qwen2", 26, (26, 27)), ("qwen3", 0, tuple(range(28))),
                                                             ("qwen2_moe", 4, (0, 2))])
def test_qwen_use_sliding_window_layers(model_type: str, first: int, layers: tuple[int, ...]) -> None:
    """use_sliding_window with max_window_layers (0 allowed: every layer): qwen2/qwen3 slide from that layer on,
    qwen2_moe on its even layers below it (the layers transformers 5.24 gives a sliding mask; measured in
    tests/measure/test_window_saved.py)."""
    config = {**real("qwen2-7b"), "model_type": model_type, "use_sliding_window": True, "sliding_window": 4096,
              "max_window_layers": first}
    a = from_hf_config(config).attention
    assert (a.sliding_window, a.sliding_layers) == (4096, layers)


def test_a_config_file_is_named_by_its_stem_a_config_json_by_its_folder(tmp_path: Path) -> None:
    """`llama65b.json` is the model llama65b; `Llama-65B/config.json` (the Hub's layout) and its folder Llama-65B."""
    from stepbill.spec.presets import config_name, load_model

    data = (CONFIGS / "llama-2-7b.json").read_text()
    (tmp_path / "Llama-65B").mkdir()
    (tmp_path / "Llama-65B" / "config.json").write_text(data)
    (tmp_path / "llama65b.json").write_text(data)
    assert load_model(str(tmp_path / "llama65b.json")).name == "llama65b"
    assert load_model(str(tmp_path / "Llama-65B")).name == "Llama-65B"
    assert load_model(str(tmp_path / "Llama-65B" / "config.json")).name == "Llama-65B"
    assert config_name(Path("config.json")) == "config"
