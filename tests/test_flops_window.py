"""Sliding-window attention FLOPs: the model's (each query's attended keys) against a brute-force count of
transformers' mask (`sliding_window_overlay`: kv > q − w, causal), and the kernel's executed square."""

from __future__ import annotations

import json
from pathlib import Path

from stepbill.engine.bill import make_bill
from stepbill.engine.flops import attention_flops, executed_attention_flops, windowed_attention_flops
from stepbill.spec.hf import from_hf_config
from stepbill.spec.recipe import make_recipe

CONFIGS = Path(__file__).parent / "data" / "hf_configs"


def attended_pairs(seq_len: int, window: int) -> int:
    """Query-key pairs transformers' sliding-window causal mask lets through, counted one by one."""
    return sum(1 for q in range(seq_len) for k in range(seq_len) if k <= q and k > q - window)


def _spec(name: str):
    return from_hf_config(json.loads((CONFIGS / name).read_text()))


def test_windowed_flops_count_the_attended_pairs() -> None:
    """Per layer 2·H·(d_qk+d_v) FLOPs per attended pair; the causal-halved convention counts S²/2 for the
    triangle, i.e. the pairs less half the diagonal (S/2, or w/2 inside a window)."""
    spec = _spec("mistral-7b.json")  # every layer slides, window 4096
    a = spec.attention
    per_pair = spec.n_layers * 2 * a.n_heads * (a.qk_head_dim + a.v_dim)
    for seq, w in ((96, 4096), (128, 128), (200, 64)):
        spec_w = spec if w == 4096 else from_hf_config({**json.loads((CONFIGS / "mistral-7b.json").read_text()),
                                                        "sliding_window": w})
        pairs = attended_pairs(seq, min(w, seq)) - min(w, seq) / 2
        assert windowed_attention_flops(spec_w, seq) == per_pair * pairs


def test_mistral_8192_model_vs_executed() -> None:
    """Mistral-7B at seq 8192 = 2 windows: the model attends 3/4 of the causal triangle; SDPA with the explicit
    mask computes the whole square on every layer: 2× the causal count, 8/3 × the model's."""
    spec = _spec("mistral-7b.json")
    causal = attention_flops(spec, 8192)
    assert windowed_attention_flops(spec, 8192) * 4 == causal * 3
    assert executed_attention_flops(spec, 8192, 1, n_masked=32) == 2 * causal
    bill = make_bill(spec, make_recipe("pure-bf16", "adamw", 1, 8192), convention="eager")
    assert bill.lines["flops.attention_windowed"].value * 4 == causal * 3
    assert bill.lines["flops.attention_executed"].value == 2 * causal
    assert bill.lines["flops.attention"].value == causal  # the seed's convention: unchanged


def test_gemma3_executed_mixes_masked_and_causal_layers() -> None:
    """Gemma-3-4B (window 1024, 29 of 34 layers slide) at 4096: the 29 masked layers run the full square, the 5
    full layers SDPA's is_causal (half)."""
    spec = _spec("gemma-3-4b-text.json")
    assert len(spec.attention.sliding_layers) == 29
    per_layer_causal = attention_flops(spec, 4096) // spec.n_layers
    assert executed_attention_flops(spec, 4096, 1, n_masked=29) == per_layer_causal * (29 * 2 + 5)
