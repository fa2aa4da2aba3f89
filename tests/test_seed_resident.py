"""Seed facts about resident state, checkpoints and LoRA, each from the seed's own inputs.

Values copied from ../shared/spec/seed-facts.md (ids in each test's docstring). GiB = 2^30, TiB = 2^40.
"""

from __future__ import annotations

import pytest

from stepbill.engine.bill import make_bill
from stepbill.engine.params import param_inventory
from stepbill.engine.states import (
    bytes_per_param,
    cards_needed,
    checkpoint_lines,
    lora_adapter_groups,
    resident_bytes,
)
from stepbill.spec import load_preset
from stepbill.spec.recipe import LoRA, make_recipe, precision
from tests.conftest import GIB, TIB


def total(table: dict[str, float]) -> float:
    return sum(table.values())


def test_per_param_ledger() -> None:
    """bytes-fp32-adam-16, bytes-mixed-adam-16, bytes-fp32-grad-accum-18, bytes-muon-12, bytes-lion-12,
    bytes-8bit-adam-10, bytes-v3-bf16-moments (inferred 14), bytes-zero-16psi."""
    assert bytes_per_param(precision("fp32"), "adamw") == {"weights": 4, "grads": 4, "m": 4, "v": 4}
    assert bytes_per_param(precision("mixed-bf16"), "adamw") == {"weights": 2, "grads": 2, "master": 4, "m": 4, "v": 4}
    assert total(bytes_per_param(precision("mixed-bf16"), "adamw")) == 16
    assert total(bytes_per_param(precision("fp32-grad-accum"), "adamw")) == 18
    assert total(bytes_per_param(precision("mixed-bf16"), "muon")) == 12
    assert total(bytes_per_param(precision("mixed-bf16"), "lion")) == 12
    assert total(bytes_per_param(precision("adamw-8bit"), "adamw")) == 10
    assert total(bytes_per_param(precision("bf16-moments"), "adamw")) == 14


def test_model_vs_optimizer_split_2_vs_12() -> None:
    """bytes-2-vs-12, bytes-16-split-002: weights+grads 4 B (model) vs master+m+v 12 B (optimizer)."""
    table = bytes_per_param(precision("mixed-bf16"), "adamw")
    assert table["weights"] + table["grads"] == 4
    assert table["master"] + table["m"] + table["v"] == 12


def test_adafactor_factored_second_moment() -> None:
    """bytes-adafactor-8: factored fp32 v of a 4096² matrix holds r + c numbers: 0.00195 B/param;
    2 + 2 + 4 (+ 0.00195) ≈ 8 B/param."""
    table = bytes_per_param(precision("mixed-bf16"), "adafactor", (4096, 4096))
    assert round(table["v_factored"], 5) == 0.00195
    assert round(total(table)) == 8


def test_lora_trainable_bytes_14_of_16() -> None:
    """lora-14-of-16-bytes: grads + master + m + v exist only for trainable params."""
    table = bytes_per_param(precision("mixed-bf16"), "adamw")
    assert total(table) - table["weights"] == 14


@pytest.mark.parametrize(
    ("item_bytes", "expected_gib"),
    [(2, 0.23), (2, 0.23), (12, 1.40), (16, 1.86)],
    ids=["gpt3s-weights-0.23", "gpt3s-grads-0.23", "gpt3s-opt-1.40", "gpt3s-resident-1.86"],
)
def test_gpt3_125m_resident_rows(item_bytes: int, expected_gib: float) -> None:
    """The seed's 125M rows use P = 125e6 exactly."""
    assert round(resident_bytes(125e6, item_bytes) / GIB, 2) == expected_gib


def test_gpt3_125m_resident_via_bill() -> None:
    """gpt3s-8x: the preset's own count (125.2M) gives the same 16/2 = 8× ratio and 1.40 GiB optimizer."""
    bill = make_bill(load_preset("gpt3-125m"), make_recipe(micro_batch=8, seq_len=1024))
    assert bill["memory.resident"].value / bill["memory.weights"].value == 8
    assert round(bill["memory.optimizer"].value / GIB, 2) == 1.40
    assert round(bill["memory.weights"].value / GIB, 2) == 0.23


def test_deepseek_v3_resident_and_cards() -> None:
    """bill-resident-9.76TiB, bill-split-1.22-1.22-7.32, bill-125-cards (P = 671e9, 80 GiB cards)."""
    table = bytes_per_param(precision("mixed-bf16"), "adamw")
    assert round(resident_bytes(671e9, total(table)) / TIB, 2) == 9.76
    assert round(resident_bytes(671e9, table["weights"]) / TIB, 2) == 1.22
    assert round(resident_bytes(671e9, table["grads"]) / TIB, 2) == 1.22
    assert round(resident_bytes(671e9, table["master"] + table["m"] + table["v"]) / TIB, 2) == 7.32
    assert cards_needed(resident_bytes(671e9, 16), 80 * GIB) == 125


def test_deepseek_v3_preset_bill_matches_seed() -> None:
    """The preset's own count (671.03B, MTP not built) gives the same 9.76 TiB and 125 cards."""
    bill = make_bill(load_preset("deepseek-v3"), make_recipe(seq_len=4096), gpu_mem_bytes=80 * GIB)
    assert round(bill["memory.resident"].value / TIB, 2) == 9.76
    assert bill["cards.resident"].value == 125


@pytest.mark.parametrize(("params", "expected_gib"), [(7e9, 104), (70e9, 1043)], ids=["mem-7b-104GiB", "mem-70b-1043GiB"])
def test_7b_and_70b_resident(params: float, expected_gib: int) -> None:
    assert round(resident_bytes(params, 16) / GIB) == expected_gib


def test_7b_quarter_above_80gib() -> None:
    """mem-7b-104GiB: about a quarter of the 104 GiB bar is above an 80 GiB card (23.3 %)."""
    resident = resident_bytes(7e9, 16)
    assert (resident - 80 * GIB) / resident == pytest.approx(0.233, abs=0.001)


def test_checkpoint_sizes() -> None:
    """ckpt-classic-7.3TiB (12 B: master + m + v) and ckpt-v3-4.9TiB (4 + 2 + 2 = 8 B, a third smaller)."""
    inv = param_inventory(load_preset("deepseek-v3"))
    classic = sum(x.value for x in checkpoint_lines(inv, make_recipe("mixed-bf16")))
    v3 = sum(x.value for x in checkpoint_lines(inv, make_recipe("bf16-moments")))
    assert round(classic / inv.total) == 12 and round(v3 / inv.total) == 8
    assert round(resident_bytes(671e9, 12) / TIB, 1) == 7.3
    assert round(resident_bytes(671e9, 8) / TIB, 1) == 4.9
    assert round(classic / TIB, 1) == 7.3 and round(v3 / TIB, 1) == 4.9
    assert 1 - v3 / classic == pytest.approx(1 / 3)


def test_checkpoint_names_what_resume_needs() -> None:
    names = {x.name for x in checkpoint_lines(param_inventory(load_preset("gpt3-125m")), make_recipe())}
    assert {"checkpoint.master_weights", "checkpoint.optimizer.m", "checkpoint.optimizer.v",
            "checkpoint.rng_state", "checkpoint.data_position", "checkpoint.step"} <= names


def test_lora_7b_example() -> None:
    """lora-7b-adapter-8.39M (32 layers × q,v × 2·4096·16), lora-7b-0.124pct (N = 6.738B), lora-7b-7.9x,
    lora-0.8pct-per-matrix."""
    spec = load_preset("llama2-7b")
    inv = param_inventory(spec)
    adapters = sum(shape[0] * shape[1] * copies for shape, copies, _ in lora_adapter_groups(inv, LoRA(16, ("q_proj", "v_proj"))))
    assert adapters == 8_388_608
    assert inv.total == 6_738_415_616
    assert round(100 * adapters / inv.total, 3) == 0.124
    full = make_bill(spec, make_recipe(seq_len=512))
    lora = make_bill(spec, make_recipe(seq_len=512, lora_rank=16, lora_targets=("q_proj", "v_proj")))
    assert lora["params.trainable"].value == adapters
    assert round(full["memory.resident"].value / lora["memory.resident"].value, 1) == 7.9
    assert lora["memory.resident"].value == 2 * inv.total + 16 * adapters
    assert round(100 * 2 * 4096 * 16 / 4096**2, 1) == 0.8


def test_lora_checkpoint_holds_adapters_only() -> None:
    inv = param_inventory(load_preset("llama2-7b"))
    ckpt = sum(x.value for x in checkpoint_lines(inv, make_recipe(lora_rank=16)))
    assert ckpt == 12 * 8_388_608
