"""The eager convention against saved_tensors_hooks on small real models (acceptance: within 1 %; exact today).

Needs stepbill.measure.saved (the measurement layer) and torch + transformers; skipped where they are missing.
Every supported family's tiny config (measure/tiny.py), two (B, T) shapes (B=1 exercises the views that only
exist at micro-batch 1), fp32 and pure-bf16; amp-bf16 for every family at one shape; recompute full.
"""

from __future__ import annotations

import pytest

from stepbill.engine.activations import saved_bytes
from stepbill.engine.activations.eager import EagerBytes
from stepbill.engine.activations.eager import saved_bytes as eager_saved_bytes
from stepbill.spec.hf import from_hf_config
from stepbill.spec.model import AttentionSpec, FFNSpec, ModelSpec

saved = pytest.importorskip("stepbill.measure.saved", reason="measure/saved.py (the measurement layer) not present")
tiny = pytest.importorskip("stepbill.measure.tiny")

# tiny llama of measure/tiny.py, written as a ModelSpec by hand (hidden 128, 4 heads, 2 kv heads, ffn 176)
TINY_LLAMA = ModelSpec("tiny-llama", 320, 128, 2, AttentionSpec(4, n_kv_heads=2), FFNSpec(176, "swiglu"),
                       family="llama", max_position_embeddings=512)
FAMILIES = ("llama", "gpt2", "gpt_neox", "qwen3", "mixtral", "qwen2_moe", "deepseek_v3")
BYTES = {"fp32": EagerBytes(4, 4), "pure-bf16": EagerBytes(2, 2), "amp-bf16": EagerBytes(2, 4)}
SHAPES = [(2, 64), (1, 96)]


def _measured(family: str, recipe: str, micro_batch: int, seq_len: int, recompute: str = "none") -> int:
    tensors = saved.saved_tensors(tiny.TINY_CONFIGS[family], recipe=recipe, micro_batch=micro_batch,
                                  seq_len=seq_len, recompute=recompute)
    return saved.total_bytes(tensors)


def _predicted(family: str, recipe: str, micro_batch: int, seq_len: int, recompute: str = "none") -> int:
    spec = from_hf_config(tiny.TINY_CONFIGS[family], f"tiny-{family}")
    return eager_saved_bytes(spec, BYTES[recipe], seq_len, micro_batch, recompute)


@pytest.mark.parametrize(("recipe", "dtype_bytes"), [("fp32", 4), ("pure-bf16", 2)])
@pytest.mark.parametrize(("micro_batch", "seq_len"), SHAPES)
def test_llama_eager_saved_bytes(recipe: str, dtype_bytes: int, micro_batch: int, seq_len: int) -> None:
    """Through the engine's entry point with a plain int (compute dtype = parameter dtype)."""
    measured = _measured("llama", recipe, micro_batch, seq_len)
    predicted = saved_bytes(TINY_LLAMA, dtype_bytes, seq_len, micro_batch, "eager")
    assert predicted == pytest.approx(measured, rel=0.01)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("recipe", ["fp32", "pure-bf16"])
@pytest.mark.parametrize(("micro_batch", "seq_len"), SHAPES)
def test_eager_saved_bytes_every_family(family: str, recipe: str, micro_batch: int, seq_len: int) -> None:
    measured = _measured(family, recipe, micro_batch, seq_len)
    predicted = _predicted(family, recipe, micro_batch, seq_len)
    assert predicted == pytest.approx(measured, rel=0.01)
    assert predicted == measured  # exact today: a drift means torch/transformers changed what they keep


@pytest.mark.parametrize("family", FAMILIES)
def test_eager_saved_bytes_amp(family: str) -> None:
    """amp-bf16: fp32 residual stream and norms, per-linear bf16 input casts and weight copies, fp32 experts."""
    measured = _measured(family, "amp-bf16", 2, 48)
    assert _predicted(family, "amp-bf16", 2, 48) == pytest.approx(measured, rel=0.01)


@pytest.mark.parametrize(("family", "recipe", "micro_batch", "seq_len"), [
    ("llama", "fp32", 2, 64), ("gpt2", "pure-bf16", 1, 96), ("deepseek_v3", "fp32", 2, 48), ("qwen2_moe", "amp-bf16", 2, 48),
    ("mixtral", "pure-bf16", 1, 64),
])
def test_eager_saved_bytes_full_recompute(family: str, recipe: str, micro_batch: int, seq_len: int) -> None:
    """Full recompute: saved_tensors_hooks sees each layer's input (the checkpoint) and what is outside."""
    measured = _measured(family, recipe, micro_batch, seq_len, "full")
    assert _predicted(family, recipe, micro_batch, seq_len, "full") == pytest.approx(measured, rel=0.01)
