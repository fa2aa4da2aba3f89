"""FlopCounterMode's convention (`flops.step_noncausal`) beside the seed's (`flops.step`), torch-free.

The measured check is tests/measure/test_flops_vs_bill.py; these pin the closed forms and that the seed's
causal lines do not move.
"""

from __future__ import annotations

import numpy as np
import pytest

from stepbill.engine import flops as fl
from stepbill.engine.bill import make_bill
from stepbill.spec import load_preset
from stepbill.spec.recipe import make_recipe

V3 = load_preset("deepseek-v3")
LLAMA = load_preset("llama3-8b")
GPT3 = load_preset("gpt3-125m")


def test_rescore_is_one_qk_per_layer_on_fused_sdpa_only() -> None:
    a = LLAMA.attention
    assert fl.attention_backward_rescore(LLAMA)
    assert fl.attention_rescore_flops(LLAMA, 4096, causal=False) == 2 * 4096**2 * a.n_heads * a.qk_head_dim
    assert fl.attention_rescore_flops(LLAMA, 4096) == 4096**2 * a.n_heads * a.qk_head_dim
    assert not fl.attention_backward_rescore(LLAMA, "eager")
    assert not fl.attention_backward_rescore(V3)  # MLA: d_qk 192 ≠ d_v 128, SDPA's math path on CPU
    assert fl.attention_rescore_flops(V3, 4096) == 0


def test_checkpoint_skipped_ops_per_family() -> None:
    assert [op.name for op in fl.checkpoint_skipped_ops(LLAMA, "dense")] == ["mlp.down"]
    assert [op.name for op in fl.checkpoint_skipped_ops(GPT3, "dense")] == ["mlp.down"]
    assert [op.name for op in fl.checkpoint_skipped_ops(V3, "moe")] == ["moe.shared.down"]
    assert fl.checkpoint_skipped_ops(load_preset("mixtral-8x7b"), "moe") == []


def test_broadcasts() -> None:
    s = np.array([1024, 2048, 4096])
    out = fl.counted_step_flops(LLAMA, s, 2)
    assert out.shape == (3,)
    assert out[1] == fl.counted_step_flops(LLAMA, 2048, 2)
    rec = fl.layer_recompute_flops(V3, "moe", s, 1, False, True)
    assert rec[2] == fl.layer_recompute_flops(V3, "moe", 4096, 1, False, True)
    assert fl.attention_rescore_flops(V3, s).shape == (3,)


@pytest.mark.parametrize("recompute", ["none", "full", "selective:core_attn"])
def test_seed_lines_unchanged_and_counted_lines_sum(recompute: str) -> None:
    bill = make_bill(LLAMA, make_recipe("pure-bf16", "adamw", 1, 8192, recompute))
    v = {k: line.value for k, line in bill.lines.items()}
    assert v["flops.step"] == 3 * v["flops.forward"] + v["flops.recompute"]  # the seed's convention
    assert v["flops.step_noncausal"] == pytest.approx(
        v["flops.forward_noncausal"] + v["flops.backward_noncausal"] + v["flops.recompute_noncausal"], rel=1e-15)
    assert "FlopCounterMode" in bill.lines["flops.step_noncausal"].convention
    assert "seed" in bill.lines["flops.step"].convention


def test_full_recompute_counted_drops_down_projection() -> None:
    s = 8192
    none = make_bill(LLAMA, make_recipe("pure-bf16", "adamw", 1, s, "none"))
    full = make_bill(LLAMA, make_recipe("pure-bf16", "adamw", 1, s, "full"))
    down = 2 * s * LLAMA.ffn.intermediate_size * LLAMA.hidden_size
    layer = fl.layer_forward_flops(LLAMA, "dense", s, 1, False)
    assert full["flops.recompute_noncausal"].value == pytest.approx(LLAMA.n_layers * (layer - down), rel=1e-12)
    assert full["flops.recompute"].value == pytest.approx(LLAMA.n_layers * fl.layer_forward_flops(LLAMA, "dense", s))
    assert none["flops.recompute_noncausal"].value == 0


def test_v3_counted_equals_seed_full_square() -> None:
    """MLA takes the math path: backward exactly 2× forward, so without recompute the counted step is the
    seed's 3 × forward with the attention core as a full square."""
    bill = make_bill(V3, make_recipe(seq_len=131_072))
    assert bill["flops.step_noncausal"].value == 3 * bill["flops.forward_noncausal"].value
    assert round(bill["flops.step"].value / 1e15, 1) == 157.6


def test_residual_dropout_skips_nothing() -> None:
    """A dropout after the down projection (hidden_dropout > 0: GPT-2's resid_pdrop) saves a mask its backward needs,
    so the rebuild reruns the projection: no early stop (measured: tests/measure/test_checkpointing.py)."""
    import dataclasses

    assert fl.checkpoint_skipped_ops(dataclasses.replace(GPT3, hidden_dropout=0.1), "dense") == []


@pytest.mark.parametrize(("k", "runs"), [(4, 8), (5, 7), (32, 1), (1, 32)])
def test_every_k_counted_stops_once_a_run(k: int, runs: int) -> None:
    """every:K under FlopCounterMode's convention: each of the ⌈32/K⌉ runs reruns its layers' whole forward but the
    trailing down projection of its last layer (non-reentrant checkpointing's early stop; every:1 is full)."""
    seq = 2048
    bill = make_bill(LLAMA, make_recipe("pure-bf16", "adamw", 1, seq, f"every:{k}"))
    down = 2 * seq * LLAMA.hidden_size * LLAMA.ffn.intermediate_size  # the down projection of one layer
    whole = 32 * fl.layer_forward_flops(LLAMA, "dense", seq, 1, False)
    assert bill.lines["flops.recompute_noncausal"].value == whole - runs * down
    if k == 1:
        full = make_bill(LLAMA, make_recipe("pure-bf16", "adamw", 1, seq, "full"))
        assert bill.lines["flops.recompute_noncausal"].value == full.lines["flops.recompute_noncausal"].value
