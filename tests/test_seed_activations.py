"""Seed facts about activations (ideal convention), from the seed's own inputs. GiB = 2^30, KiB = 2^10."""

from __future__ import annotations

import pytest

from stepbill.engine import activations as act
from stepbill.engine.bill import make_bill
from stepbill.engine.states import resident_bytes
from stepbill.spec import load_preset
from stepbill.spec.recipe import make_recipe
from tests.conftest import GIB, KIB, TIB

GPT3_SMALL = load_preset("gpt3-125m")
V3 = load_preset("deepseek-v3")
V3_TOKENS = 131_072


def test_gpt3_125m_layer_width_11520() -> None:
    """gpt3s-act-width-11520: 2×768 norm outs + 3×768 QKV + 768 attn out + 3072 + 3072 + 768 = 11,520."""
    rows = act.layer_rows(GPT3_SMALL, "dense", 2)
    assert sum(r.width for r in rows) == 11_520
    widths = {r.name: r.width for r in rows}
    assert widths["attn.norm_out"] + widths["mlp.norm_out"] == 2 * 768
    assert widths["attn.q"] + widths["attn.k"] + widths["attn.v"] == 3 * 768
    assert widths["mlp.up_out"] == widths["mlp.act_out"] == 3072


def test_gpt3_125m_per_token_and_micro_batch() -> None:
    """gpt3s-act-22.5KiB, gpt3s-act-270KiB, gpt3s-act-2.11GiB (batch 8 × seq 1,024 = 8,192 tokens)."""
    per_layer = act.layer_bytes_per_token(GPT3_SMALL, "dense", 2)
    assert per_layer / KIB == 22.5
    assert 12 * per_layer / KIB == 270
    bill = make_bill(GPT3_SMALL, make_recipe(micro_batch=8, seq_len=1024))
    assert round(bill["memory.activations"].value / GIB, 2) == 2.11


def test_gpt3_125m_full_recompute() -> None:
    """gpt3s-recompute-0.32: 12 × 768 layer inputs + one 11,520-wide working set, × 2 B × 8,192 = 0.32 GiB;
    gpt3s-6.7x: 2.11 → 0.32 GiB saves 6.7×."""
    none = make_bill(GPT3_SMALL, make_recipe(micro_batch=8, seq_len=1024))
    full = make_bill(GPT3_SMALL, make_recipe(micro_batch=8, seq_len=1024, recompute="full"))
    assert full["memory.activations"].value == (12 * 768 + 11_520) * 2 * 8192
    assert round(full["memory.activations"].value / GIB, 2) == 0.32
    assert round(none["memory.activations"].value / full["memory.activations"].value, 1) == 6.7


def test_gpt3_125m_totals() -> None:
    """gpt3s-totals: 3.97 GiB without recompute, 2.18 GiB with (resident at the seed's P = 125e6);
    gpt3s-act-gt-resident: activations 2.11 > resident 1.86."""
    resident = resident_bytes(125e6, 16)
    none = make_bill(GPT3_SMALL, make_recipe(micro_batch=8, seq_len=1024))["memory.activations"].value
    full = make_bill(GPT3_SMALL, make_recipe(micro_batch=8, seq_len=1024, recompute="full"))["memory.activations"].value
    assert round((resident + none) / GIB, 2) == 3.97
    assert round((resident + full) / GIB, 2) == 2.18
    assert none > resident


def _gib(width: int, dtype_bytes: int = 2) -> float:
    return V3_TOKENS * width * dtype_bytes / GIB


def test_v3_unit_and_mla_rows() -> None:
    """v3-act-unit-1.75GiB, v3-mla-row1..8, v3-mla-subtotal (≈22.6 GiB) at 128K tokens, bf16."""
    assert _gib(V3.hidden_size) == 1.75
    rows = {r.name: r for r in act.layer_rows(V3, "moe", 2) if r.block == "mla"}
    by_width = {
        "attn.norm_in": 1.75, "attn.norm_out": 1.75, "attn.q_up": 6.00, "attn.kv_up": 8.00,
        "attn.core_out": 4.00, "attn.logsumexp": 0.0625,
    }
    for name, gib in by_width.items():
        assert _gib(rows[name].width, rows[name].dtype_bytes) == pytest.approx(gib), name
    assert _gib(rows["attn.q_down"].width + rows["attn.q_down_norm"].width) == 0.75
    assert round(_gib(rows["attn.kv_down"].width + rows["attn.kv_down_norm"].width), 2) == 0.27
    subtotal = sum(r.bytes_per_token for r in rows.values()) * V3_TOKENS / GIB
    assert round(subtotal, 1) == 22.6


def test_v3_moe_rows() -> None:
    """v3-moe-row1..5, v3-moe-subtotal (≈48.6 GiB), v3-moe-nine-copies-31.5. The seed's rows group tensors
    that recompute differently (gate/up are matmuls, the product is elementwise; 8 routed + 1 shared copy),
    so the engine keeps them apart and the test sums them."""
    rows = {r.name: r for r in act.layer_rows(V3, "moe", 2) if r.block == "moe"}

    def width(*names: str) -> int:
        return sum(rows[n].width for n in names)

    dispatched = width("moe.dispatched", "moe.shared.input")
    gate_up_product = width("moe.gate", "moe.up", "moe.product", "moe.shared.gate", "moe.shared.up",
                            "moe.shared.product")
    expert_out = width("moe.expert_out", "moe.shared.out")
    assert _gib(width("moe.norm_in", "moe.norm_out")) == 3.50
    assert _gib(rows["moe.router_scores"].width) == 0.0625
    assert _gib(dispatched) == 15.75
    assert _gib(gate_up_product) == 13.50
    assert _gib(expert_out) == 15.75
    assert _gib(dispatched + expert_out) == 31.5
    assert round(sum(r.bytes_per_token for r in rows.values()) * V3_TOKENS / GIB, 1) == 48.6


def test_v3_layers_and_total() -> None:
    """v3-layer-moe-71, v3-layer-dense-40 (dense FFN output not counted), v3-total-4.15TiB."""
    moe = act.layer_bytes_per_token(V3, "moe", 2) * V3_TOKENS / GIB
    dense = act.layer_bytes_per_token(V3, "dense", 2) * V3_TOKENS / GIB
    assert round(moe) == 71 and round(dense) == 40
    bill = make_bill(V3, make_recipe(seq_len=V3_TOKENS))
    assert round(bill["memory.activations"].value / GIB) == 4245
    assert round(bill["memory.activations"].value / TIB, 2) == 4.15


def test_v3_full_recompute_without_working_set() -> None:
    """v3-full-recompute-106.75: 61 layer inputs × 1.75 GiB; the seed leaves out the working set."""
    kept = act.full_recompute_bytes_per_token(V3, 2, with_working_set=False) * V3_TOKENS
    assert kept / GIB == 106.75
    with_ws = act.full_recompute_bytes_per_token(V3, 2) * V3_TOKENS
    assert round(with_ws / GIB, 2) == 177.89
    bill = make_bill(V3, make_recipe(seq_len=V3_TOKENS, recompute="full"))
    assert bill["memory.activations"].value == with_ws
