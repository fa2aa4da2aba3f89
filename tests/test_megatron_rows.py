"""Convention `megatron` = Korthikanti et al. 2022 (arXiv 2205.05198) Table 2, byte for byte, for the four
models of their Table 3 (presets megatron-22b/175b/530b/1t; s = 2048, b = 1, 16-bit activations, t = 8)."""

from __future__ import annotations

import pytest

from stepbill.engine import korthikanti
from stepbill.engine.activations import layer_rows
from stepbill.engine.activations.megatron import SPLIT, layer_bytes
from stepbill.engine.bill import make_bill
from stepbill.errors import StepbillError
from stepbill.spec.presets import load_preset
from stepbill.spec.recipe import make_recipe

# Table 3: attention heads, hidden size, layers (sequence 2048, vocabulary 51200, tensor parallel 8).
TABLE3 = {"megatron-22b": (64, 6144, 48), "megatron-175b": (96, 12288, 96), "megatron-530b": (128, 20480, 105),
          "megatron-1t": (160, 25600, 128)}
S, B, T = 2048, 1, 8


@pytest.fixture(params=sorted(TABLE3))
def model(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    spec = load_preset(request.param)
    a, h, layers = TABLE3[request.param]
    assert (spec.attention.n_heads, spec.hidden_size, spec.n_layers) == (a, h, layers)
    assert spec.vocab_size == 51200 and spec.ffn.intermediate_size == 4 * h
    return spec, a, h


def test_no_parallelism_is_eq1(model) -> None:  # type: ignore[no-untyped-def]
    spec, a, h = model
    expected = 34 * S * B * h + 5 * a * S * S * B  # sbh(34 + 5as/h), in integers: byte for byte
    assert layer_bytes(spec, S, B) == expected
    assert korthikanti.activation_bytes_per_layer(S, B, h, a) == pytest.approx(expected, rel=1e-15)


def test_tensor_parallel_is_eq2(model) -> None:  # type: ignore[no-untyped-def]
    spec, a, h = model
    assert layer_bytes(spec, S, B, tp=T) == pytest.approx(S * B * h * (10 + 24 / T + 5 * a * S / (h * T)), rel=1e-12)


def test_tensor_and_sequence_parallel_is_eq4(model) -> None:  # type: ignore[no-untyped-def]
    spec, a, h = model
    assert layer_bytes(spec, S, B, tp=T, sp=True) == pytest.approx(S * B * h / T * (34 + 5 * a * S / h), rel=1e-12)


def test_selective_recompute_drops_the_5as_over_h_term(model) -> None:  # type: ignore[no-untyped-def]
    spec, _a, h = model
    sbh = S * B * h
    assert layer_bytes(spec, S, B, selective=True) == 34 * sbh
    assert layer_bytes(spec, S, B, tp=T, selective=True) == pytest.approx(sbh * (10 + 24 / T), rel=1e-12)
    assert layer_bytes(spec, S, B, tp=T, sp=True, selective=True) == pytest.approx(34 * sbh / T, rel=1e-12)


def test_the_bill_under_megatron_sums_table2_over_the_layers(model) -> None:  # type: ignore[no-untyped-def]
    """memory.activations = L · sbh(34 + 5as/h); selective:core_attn → L · 34sbh; full → the layer inputs 2sbh
    each plus one layer rebuilt."""
    spec, a, h = model
    sbh, layers = S * B * h, spec.n_layers
    per_layer = 34 * sbh + 5 * a * S * S * B
    bill = make_bill(spec, make_recipe("mixed-bf16", "adamw", B, S), convention="megatron")
    assert bill.lines["memory.activations"].value == pytest.approx(layers * per_layer, rel=1e-12)
    sel = make_bill(spec, make_recipe("mixed-bf16", "adamw", B, S, "selective:core_attn"), convention="megatron")
    assert sel.plan is not None
    assert sel.plan.kept_after_forward() == pytest.approx(layers * 34 * sbh, rel=1e-12)
    # the bill's activation peak adds the one layer whose 5as²b is alive (made or rebuilt) at a time
    assert sel.lines["memory.activations"].value == pytest.approx(layers * 34 * sbh + 5 * a * S * S * B, rel=1e-12)
    full = make_bill(spec, make_recipe("mixed-bf16", "adamw", B, S, "full"), convention="megatron")
    assert full.plan is not None
    assert full.plan.kept_after_forward() == pytest.approx(layers * 2 * sbh, rel=1e-12)  # the layer inputs


def test_rows_carry_the_derivation_and_the_split() -> None:
    spec = load_preset("megatron-175b")
    rows = layer_rows(spec, "dense", 2, "megatron")
    assert {r.name for r in rows} == set(SPLIT)
    masks = [r for r in rows if "mask" in r.name]
    assert masks and all(r.dtype_bytes == 1 for r in masks)  # 1-byte dropout masks
    assert all("sbh" in r.saved_for or "as²b" in r.saved_for for r in rows)  # each row names its Table 2 term
    # 24sbh/t + 5as²b/t are tagged tp; the 10sbh TP cannot split are tagged sp
    sbh_per_token = {tag: sum(r.bytes_per_token for r in rows if SPLIT[r.name] == tag and not r.per_token2)
                     for tag in ("tp", "sp")}
    assert sbh_per_token == {"tp": 24 * spec.hidden_size, "sp": 10 * spec.hidden_size}


def test_megatron_convention_bills_gpt_blocks_only() -> None:
    with pytest.raises(StepbillError, match="no 'megatron' activation rows for block kind 'swiglu'"):
        make_bill(load_preset("llama3-8b"), make_recipe("mixed-bf16", "adamw", 1, 2048), convention="megatron")
