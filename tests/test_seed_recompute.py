"""Seed facts about FLOPs, the recompute ranking, slopes and crossovers (values copied from the seed catalog,
claim ids in each docstring). GiB = 2^30 B, TFLOP = 1e12, PFLOP = 1e15; attention causal-halved."""

from __future__ import annotations

import math

import pytest

from stepbill.engine import flops as fl
from stepbill.engine import korthikanti as kt
from stepbill.engine.recompute import sqrt_l_optimum
from stepbill.engine.recompute.ranking import attention_crossovers, rank_layer
from stepbill.spec import load_preset
from tests.conftest import GIB

V3 = load_preset("deepseek-v3")
GPT3 = load_preset("gpt3-175b")
S = 131_072
TF = 1e12

# rc-row1..8 (seed §2.3): GiB, TFLOP, TFLOP/GiB as printed; row 7 under the seed's reading (width 37,440).
SEED_ROWS = [
    (15.75, 0.0, 0.0), (3.50, 0.01, 0.0), (4.50, 0.01, 0.0), (8.00, 4.40, 0.55),
    (6.00, 9.90, 1.65), (15.75, 34.63, 2.20), (9.14, 70.35, 7.70), (4.00, 703.69, 175.92),
]


def test_eight_row_ranking_seed_reading() -> None:
    """rc-row1-dispatch … rc-row8-attn-out, rc-tflop-per-gib, rc-attn-23x."""
    ranking = rank_layer(V3, "moe", S, grouping="seed", row7="seed")
    assert len(ranking.rows) == 8
    for row, (gib, tflop, per_gib) in zip(ranking.rows, SEED_ROWS, strict=True):
        assert round(row.bytes / GIB, 2) == gib, row.label
        assert round(row.flops / TF, 2) == tflop, row.label
        assert round(row.tflop_per_gib, 2) == per_gib, row.label
    assert round(ranking.rows[7].tflop_per_gib / ranking.rows[6].tflop_per_gib) == 23
    assert "9 copies" in ranking.rows[0].label


def test_row7_label_reading() -> None:
    """rc-row7 assumption: taking the label literally (router + Q down-proj too) gives 9.58 GiB / 73.72 TFLOP."""
    row7 = rank_layer(V3, "moe", S, grouping="seed", row7="label").rows[6]
    assert round(row7.bytes / GIB, 2) == 9.58 and round(row7.flops / TF, 2) == 73.72
    assert round(row7.tflop_per_gib, 2) == 7.70


@pytest.mark.parametrize("threshold", [2.5, 3, 5])
def test_cut_at_three(threshold: float) -> None:
    """rc-threshold-3, rc-selective-saved-53.5, rc-selective-cost-48.9, rc-step-2571, rc-selective-1.9pct,
    rc-selective-77pct (both denominators), rc-full-33-97."""
    ranking = rank_layer(V3, "moe", S, grouping="seed", threshold=threshold)
    assert len(ranking.cut) == 6
    assert round(ranking.saved / GIB, 1) == 53.5
    assert round(ranking.cost / TF, 1) == 48.9
    assert round(ranking.step_flops / TF) == 2571
    shares = ranking.shares()
    assert round(100 * shares["selective_cost_of_step"], 1) == 1.9
    assert round(100 * shares["selective_saving_excl_input"]) == 77  # the seed's denominator (71.14 − 1.75)
    assert round(100 * shares["selective_saving_of_total"], 1) == 75.2  # the other reading
    assert round(100 * shares["full_cost_of_step"]) == 33
    assert round(100 * shares["full_saving_of_total"], 1) == 97.5  # the seed prints 97 (catalog: 97.5 %)


def test_old_denominator_6pct() -> None:
    """rc-selective-old-6pct: 48.9 over one layer forward (857.1 TFLOP) is ~6 %."""
    ranking = rank_layer(V3, "moe", S, grouping="seed")
    assert round(ranking.layer_forward_flops / TF, 1) == 857.1
    assert round(100 * ranking.cost / ranking.layer_forward_flops) == 6


def test_flops_per_byte_is_input_width() -> None:
    """rc-closed-form-flops-per-byte-k: a linear row's FLOPs per bf16 byte equal its input width."""
    for row in rank_layer(V3, "moe", S).rows:
        if row.input_width and "norm_in" not in row.label:
            assert row.flops_per_byte == pytest.approx(row.input_width)


def test_slopes_and_crossovers() -> None:
    """att-slope-v3-1.25, att-slope-gpt3-1.00 (2.5 / 2.0 full square), att-crossover-5734,
    att-crossovers-four-lines, att-gpt3-2048-vs-12288."""
    assert fl.attention_slope(V3) == 1.25 and fl.attention_slope(V3, causal=False) == 2.5
    assert fl.attention_slope(GPT3) == 1.00 and fl.attention_slope(GPT3, causal=False) == 2.0
    assert round(fl.crossover_seq_len(7168, 1.25)) == 5734
    crossings = {c.input_width: c.seq_len for c in attention_crossovers(V3, rank_layer(V3, "moe", S))}
    assert [crossings[k] for k in (512, 1536, 2048, 7168)] == [409.6, 1228.8, 1638.4, 5734.4]
    assert fl.attention_slope(GPT3) * 2048 == 2048 < GPT3.hidden_size == 12288


def test_6nd_and_attention_share() -> None:
    """bill-6nd-29.1PF, bill-attn-82.1pct (82.15 % dense), bill-6nd-5.6x-160PF (direct count 157.6 PFLOP)."""
    assert round(fl.six_nd(37e9, S) / 1e15, 1) == 29.1
    assert round(100 * fl.layer_attention_share(V3, "moe", S), 1) == 82.1
    assert round(100 * fl.layer_attention_share(V3, "dense", S), 2) == 82.15
    assert round(fl.step_flops(V3, S) / 1e15, 1) == 157.6
    assert 5 < fl.step_flops(V3, S) / fl.six_nd(37e9, S) < 6


def test_v3_layer_step_breakdown() -> None:
    """rc-step-2571 inputs: the per-op forward FLOPs of one MoE layer at 128K."""
    ops = {op.name: op.flops_per_token * S / TF for op in fl.layer_linear_ops(V3, "moe")}
    assert round(ops["attn.q_a_proj"], 3) == 2.886 and round(ops["attn.kv_a_proj"], 3) == 1.082
    assert round(ops["attn.q_b_proj"], 3) == 9.896 and round(ops["attn.kv_b_proj"], 3) == 4.398
    assert round(ops["attn.o_proj"], 3) == 30.786 and round(ops["moe.router"], 3) == 0.481
    assert round(ops["moe.experts.gate_up"] + ops["moe.shared.gate_up"], 3) == 69.269
    assert round(ops["moe.experts.down"] + ops["moe.shared.down"], 3) == 34.635
    assert round(fl.attention_core_flops(V3, S) / TF, 3) == 703.687


def test_gpt3_attention_share_causal_and_square() -> None:
    """kort-gpt3-causal-1.37, bill-6nd-short-seq-ok: S/(12h+S) = 1.37 % causal, S/(6h+S) = 2.70 % square."""
    assert round(100 * fl.layer_attention_share(GPT3, "dense", 2048), 2) == 1.37
    assert round(100 * fl.layer_attention_share(GPT3, "dense", 2048, causal=False), 2) == 2.70


def test_korthikanti() -> None:
    """kort-gpt3-70-2.7, kort-mtnlg-65-1.6 (arXiv 2205.05198; MT-NLG a=128, h=20480)."""
    assert round(100 * kt.selective_saving(2048, 12288, 96)) == 70
    assert round(100 * kt.selective_overhead(2048, 12288), 1) == 2.7
    assert round(100 * kt.selective_saving(2048, 20480, 128)) == 65
    assert round(100 * kt.selective_overhead(2048, 20480), 1) == 1.6
    assert round(100 * kt.selective_overhead(2048, 12288, causal=True), 2) == 1.37
    assert all("2205.05198" in line.provenance for line in kt.korthikanti_lines(2048, 12288, 96))


def test_sqrt_l() -> None:
    """rc-sqrt-L-segments: argmin_k L/k + k = √L, min 2√L (L = 61: 7.81, 15.62)."""
    k, units = sqrt_l_optimum(61)
    assert round(k, 2) == 7.81 and round(units, 2) == 15.62
    assert min(61 / j + j for j in range(1, 62)) >= units
    assert math.isclose(61 / k, k)


def test_full_recompute_plus_one_third() -> None:
    """rc-full-plus-33pct, rc-full-quarter-of-executed, gpt3s-totals (3× vs 4×)."""
    ranking = rank_layer(V3, "moe", S)
    executed = ranking.step_flops + ranking.layer_forward_flops
    assert round(100 * ranking.layer_forward_flops / ranking.step_flops) == 33
    assert ranking.layer_forward_flops / executed == 0.25
