"""Sliding-window attention at seq ≥ window, row by row against what autograd saves (saved_tensors_hooks, fake
tensors) and against MemTracker: the explicit mask SDPA keeps per masked layer and the k/v copies `repeat_kv` makes
once a mask turns SDPA's `enable_gqa` off (engine/activations/eager/masks.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")

from stepbill.check import compare, predictions
from stepbill.engine.activations import eager
from stepbill.engine.activations.eager.masks import masked_layer_rows, masked_layers
from stepbill.engine.bill import make_bill
from stepbill.measure.saved import saved_tensors, total_bytes
from stepbill.measure.step import measure_step
from stepbill.measure.tiny import TINY_CONFIGS
from stepbill.spec.hf import from_hf_config
from stepbill.spec.recipe import make_recipe

B, T, WINDOW = 2, 64, 16
SDPA = "ScaledDotProductFlashAttentionForCpuBackward0"


def config(family: str, window: int = WINDOW) -> dict:
    base = TINY_CONFIGS["llama"] if family == "mistral" else TINY_CONFIGS[family]
    return {**base, "model_type": family, "sliding_window": window}


def _sdpa_saved(rows: list, layer: int) -> dict[str, tuple[int, str]]:
    """SDPA's saved arguments of one layer: argument -> (bytes per token, dtype)."""
    prefix = f"model.layers.{layer}.self_attn"
    return {r.argument: (r.bytes // (B * T), r.dtype) for r in rows
            if r.kind == "activation" and r.module == prefix and r.node == SDPA}


@pytest.mark.parametrize("recipe", ["fp32", "pure-bf16", "amp-bf16"])
def test_mistral_masked_layer_rows_are_what_sdpa_saves(recipe: str) -> None:
    """Mistral (4 heads, 2 kv heads of 32) with window 16 < seq 64: every layer's SDPA saves the mask (B·1·S·S,
    compute dtype) and k, v at 4 heads; the rows of masks.py say the same, and the whole forward's saved bytes
    equal eager.saved_bytes to the byte."""
    cfg = config("mistral")
    spec = from_hf_config(cfg, "tiny")
    act = eager.from_precision(make_recipe(recipe, "adamw", B, T).precision)
    rows = saved_tensors(cfg, recipe=recipe, micro_batch=B, seq_len=T, mode="fake")
    added, replaced = masked_layer_rows(spec, act)
    assert replaced == ("attn.k", "attn.v")
    by_name = {r.name: r for r in added}
    dtype = "float32" if recipe == "fp32" else "bfloat16"
    c = by_name["attn.window_mask"].dtype_bytes
    assert _sdpa_saved(rows, 0)["attn_mask"] == (by_name["attn.window_mask"].bytes_at(T), dtype) == (c * T, dtype)
    assert _sdpa_saved(rows, 0)["key"] == (by_name["attn.k_rep"].bytes_per_token, dtype) == (c * 128, dtype)
    assert _sdpa_saved(rows, 1)["value"] == (by_name["attn.v_rep"].bytes_per_token, dtype)
    assert masked_layers(spec, T) == (0, 1)
    assert total_bytes(rows) == eager.saved_bytes(spec, act, T, B)


def test_mistral_below_the_window_has_no_mask() -> None:
    """seq 64 < window 65: transformers skips the mask (SDPA is_causal, enable_gqa): full-attention rows."""
    cfg = config("mistral", window=T + 1)
    spec = from_hf_config(cfg, "tiny")
    rows = saved_tensors(cfg, micro_batch=B, seq_len=T, mode="fake")
    assert "attn_mask" not in _sdpa_saved(rows, 0) and _sdpa_saved(rows, 0)["key"] == (4 * 64, "float32")
    assert masked_layers(spec, T) == ()
    assert total_bytes(rows) == eager.saved_bytes(spec, 4, T, B)


@pytest.mark.parametrize(("family", "recipe"), [("gemma3_text", "fp32"), ("gemma3_text", "pure-bf16"),
                                                ("phi3", "fp32"), ("phi3", "amp-bf16"), ("gemma2", "fp32")])
def test_interleaved_and_fused_families_saved_bytes_exact(family: str, recipe: str) -> None:
    """Gemma3 (layer 0 sliding, layer 1 full): only layer 0 keeps a mask and expanded k/v. Phi-3 (fused qkv):
    the expanded v replaces the whole fused output SDPA kept through its v view. Gemma2 runs eager attention,
    whose additive mask autograd does not keep: no change. Saved bytes equal the bill's to the byte."""
    cfg = config(family)
    spec = from_hf_config(cfg, "tiny")
    act = eager.from_precision(make_recipe(recipe, "adamw", B, T).precision)
    rows = saved_tensors(cfg, recipe=recipe, micro_batch=B, seq_len=T, mode="fake")
    if family == "gemma3_text":
        assert "attn_mask" in _sdpa_saved(rows, 0) and "attn_mask" not in _sdpa_saved(rows, 1)
        assert masked_layers(spec, T) == (0,)
    if family == "phi3":
        assert masked_layer_rows(spec, act)[1] == ("attn.k", "attn.qkv")
    if family == "gemma2":
        assert masked_layers(spec, T) == ()
    assert total_bytes(rows) == eager.saved_bytes(spec, act, T, B)


QWEN_WINDOWS = {
    "qwen2": {"use_sliding_window": True, "max_window_layers": 1},  # layer 1 slides
    "qwen2_moe": {"use_sliding_window": True, "max_window_layers": 2},  # even layers below 2: layer 0
    "qwen3": {"use_sliding_window": True, "max_window_layers": 0},  # every layer
    "mixtral": {},  # every layer
}


@pytest.mark.parametrize("family", list(QWEN_WINDOWS))
def test_qwen_and_mixtral_masked_layers_and_saved_bytes(family: str) -> None:
    """The loader's sliding layers are the layers transformers gives a mask, and the saved bytes are exact."""
    base = TINY_CONFIGS.get(family) or {**TINY_CONFIGS["llama"], "model_type": family}
    cfg = {**base, "sliding_window": WINDOW, **QWEN_WINDOWS[family]}
    spec = from_hf_config(cfg, "tiny")
    rows = saved_tensors(cfg, micro_batch=B, seq_len=T, mode="fake")
    masked = tuple(int(r.module.split(".")[2]) for r in rows if r.argument == "attn_mask")
    assert masked == masked_layers(spec, T) != ()
    assert total_bytes(rows) == eager.saved_bytes(spec, 4, T, B)


MEMORY = ("memory.activations", "memory.peak_forward", "memory.peak_backward", "memory.peak")


@pytest.mark.parametrize(("family", "recipe", "recompute"), [
    ("mistral", "fp32", "none"), ("mistral", "pure-bf16", "full"),
    pytest.param("gemma3_text", "amp-bf16", "none", marks=pytest.mark.slow),
    pytest.param("phi3", "pure-bf16", "none", marks=pytest.mark.slow),
])
def test_window_step_within_three_percent_of_memtracker(family: str, recipe: str, recompute: str) -> None:
    """The whole step against MemTracker (real tensors, tiny models, window 16 < seq 64). Full recompute: the
    checkpoints also hold transformers' boolean mask (S² bytes, one per model; masks.bool_mask_bytes)."""
    cfg = config(family)
    bill = make_bill(from_hf_config(cfg, "tiny"), make_recipe(recipe, "adamw", B, T, recompute), convention="eager")
    measured = measure_step(cfg, recipe=recipe, micro_batch=B, seq_len=T, recompute=recompute, flops=False)
    errs = {r.line: r.error for r in compare(predictions(bill), measured) if r.line in MEMORY}
    assert errs and all(abs(e) <= 0.03 for e in errs.values()), errs
