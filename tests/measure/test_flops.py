"""FLOPs: FlopCounterMode (with the CPU SDPA and grouped-mm formulas) against closed forms."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")

from stepbill.measure.step import measure_step
from stepbill.measure.tiny import TINY_CONFIGS

B, T = 2, 64


def _attention_full_square(layers: int, heads: int, head_dim: int) -> int:
    """Forward QKᵀ and PV (2 matmuls) + backward (scores recomputed + 4 matmuls) = 7 matmuls of
    2·B·H·T²·d FLOPs each, non-causal as FlopCounterMode counts them."""
    return layers * 7 * 2 * B * heads * T * T * head_dim


def test_dense_llama_flops_closed_form() -> None:
    h, f, v, heads, kv, layers = 128, 176, 320, 4, 2, 2
    d = h // heads
    linear = layers * (h * h + 2 * h * kv * d + h * h + 3 * h * f) + h * v  # + lm_head; not the embedding
    expected = 6 * linear * B * T + _attention_full_square(layers, heads, d)
    m = measure_step(TINY_CONFIGS["llama"], mode="fake", micro_batch=B, seq_len=T)
    assert m.flops == expected
    sdpa = [op for op in m.flops_by_op if "flash_attention_for_cpu" in op]
    assert len(sdpa) == 2  # forward and backward both counted


def test_moe_experts_are_counted() -> None:
    h, f, v, heads, kv, layers, experts, top_k = 128, 176, 320, 4, 2, 2, 4, 2
    d = h // heads
    routed = top_k * 3 * h * f  # each token meets top_k experts: gate+up (h→2f) and down (f→h)
    per_token = layers * (h * h + 2 * h * kv * d + h * h + h * experts + routed) + h * v
    expected = 6 * per_token * B * T + _attention_full_square(layers, heads, d)
    for recipe in ("fp32", "pure-bf16"):  # fp32: transformers' fallback op; bf16: aten._grouped_mm
        m = measure_step(TINY_CONFIGS["mixtral"], recipe=recipe, mode="fake", micro_batch=B, seq_len=T)
        assert m.flops == expected, recipe


def test_mla_on_cuda_backward_is_torchs_efficient_attention_count() -> None:
    """DeepSeek's MLA (d_qk 192 ≠ d_v 128) on CUDA runs SDPA's memory-efficient kernel (flash needs one head
    width), which FlopCounterMode counts with `sdpa_backward_flop_count` (the rebuilt QKᵀ included); the bill's
    counted backward of the attention core is that, per layer, on the card's kernels — and the math path's
    2 × forward on the CPU's."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    from stepbill.engine.bill import make_bill
    from stepbill.spec import load_preset
    from stepbill.spec.recipe import make_recipe

    spec = load_preset("deepseek-v3")
    a, seq = spec.attention, 1024
    q, v = (1, a.n_heads, seq, a.qk_head_dim), (1, a.n_heads, seq, a.v_dim)
    torch_backward = sdpa_backward_flop_count(v, q, q, v)
    forward = sdpa_flop_count(q, q, v)
    rescore = {}
    for device in ("cpu", "cuda"):
        bill = make_bill(spec, make_recipe("mixed-bf16", "adamw", 1, seq, device=device))
        rescore[device] = bill.lines["flops.backward_noncausal"].inputs["rescore"]
    assert rescore["cpu"] == 0
    assert 2 * forward + rescore["cuda"] // spec.n_layers == torch_backward
