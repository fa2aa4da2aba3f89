"""The eager convention against saved_tensors_hooks on small real models (acceptance: within 1 %).

Needs stepbill.measure.saved (the measurement layer, built on main) and torch + transformers; skipped
where they are missing. Families the eager rows do not cover yet are listed in EAGER_PENDING.
"""

from __future__ import annotations

import pytest

from stepbill.engine.activations import saved_bytes
from stepbill.spec.model import AttentionSpec, FFNSpec, ModelSpec

saved = pytest.importorskip("stepbill.measure.saved", reason="measure/saved.py (the measurement layer) not present")
tiny = pytest.importorskip("stepbill.measure.tiny")

# tiny llama of measure/tiny.py, written as a ModelSpec by hand (hidden 128, 4 heads, 2 kv heads, ffn 176)
TINY_LLAMA = ModelSpec("tiny-llama", 320, 128, 2, AttentionSpec(4, n_kv_heads=2), FFNSpec(176, "swiglu"),
                       family="llama", max_position_embeddings=512)
EAGER_PENDING = ("gpt2", "gpt_neox", "qwen3", "mixtral", "qwen2_moe", "deepseek_v3")


@pytest.mark.parametrize(("recipe", "dtype_bytes"), [("fp32", 4), ("pure-bf16", 2)])
@pytest.mark.parametrize(("micro_batch", "seq_len"), [(2, 64), (1, 96)])
def test_llama_eager_saved_bytes(recipe: str, dtype_bytes: int, micro_batch: int, seq_len: int) -> None:
    tensors = saved.saved_tensors(tiny.TINY_CONFIGS["llama"], recipe=recipe, micro_batch=micro_batch,
                                  seq_len=seq_len)
    measured = saved.total_bytes(tensors)
    predicted = saved_bytes(TINY_LLAMA, dtype_bytes, seq_len, micro_batch, "eager")
    assert predicted == pytest.approx(measured, rel=0.01)
