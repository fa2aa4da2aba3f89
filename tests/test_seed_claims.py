"""Every reproducible seed claim is printed by a `stepbill` command (--json) and asserted here within its rounding.

The catalog is tests/data/seed_facts.json (a copy of ../shared/spec/seed-facts.yaml made by
scripts/refresh_seed_facts.py). `COVER` names, for each claim with `reproduced: true`, the command and the JSON
key(s) that print it and the seed's printed value; `test_claim_printed[<id>]` runs that command in-process with
--json and checks the value within half a unit of the seed's last printed digit (or an explicit range where the
seed words it so: "nearly 10,000", "5–6×"). `PENDING` lists the reproducible claims no command prints yet, each
with its reason; `test_every_reproducible_claim_is_covered` fails when a claim is in neither.
Units: `scale` converts the JSON value to the seed's unit (bytes → GiB, fraction → %).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import pytest

CATALOG = Path(__file__).parent / "data" / "seed_facts.json"
GIB, TIB = 2**30, 2**40
TF = 1e12


@dataclass(frozen=True)
class Printed:
    """Where one seed number is printed: `stepbill <argv> --json`, then the "/"-separated JSON path."""

    argv: tuple[str, ...]
    path: str
    seed: Any  # str: the seed's rounded decimal; bool/int/list: exact; tuple (lo, hi): the seed's words as a range
    scale: float = 1.0  # JSON value × scale = the seed's unit
    tol: float | None = None  # instead of half a unit in the last printed digit
    torch: bool = False  # the command needs torch (skipped where it is missing)


def load_catalog() -> list[dict[str, Any]]:
    return json.loads(CATALOG.read_text(encoding="utf-8"))["claims"]


# commands (arguments before --json)
A, A0, A99 = ("lab", "adam"), ("lab", "adam", "--beta1", "0"), ("lab", "adam", "--beta2", "0.99")
DC, W, S, CL, CO = ("lab", "decay"), ("lab", "warmup"), ("lab", "schedule"), ("lab", "clip"), ("lab", "collectives")
F, F3 = ("lab", "formats"), ("lab", "formats", "--update", "3e-4")
FG = ("lab", "formats", "--formats", "bf16", "--update", "0.0078125")
BPN, BP = ("lab", "backprop", "--no-torch"), ("lab", "backprop")
D, M, SC, TD = ("lab", "descent"), ("lab", "memory"), ("lab", "seed-checks"), ("lab", "torch-defaults")
CI, MD = ("lab", "citations"), ("lab", "megatron-defaults")
RC = ("recompute", "--group", "seed")
RC25, RC5 = (*RC, "--threshold", "2.5"), (*RC, "--threshold", "5")
RCG = ("recompute", "gpt3-175b", "--seq", "2048")


def p(argv: tuple[str, ...], path: str, seed: Any, **kw: Any) -> Printed:
    return Printed(argv, path, seed, **kw)


def sc(claim: str, seed: Any, key: str = "value", **kw: Any) -> Printed:
    """A number `stepbill lab seed-checks` prints for the claim (its engine value or its other reading)."""
    return Printed(SC, f"values/{claim}/{key}", seed, **kw)


def rows(i: int, gib: str, tflop: str, per_gib: str | None = None) -> list[Printed]:
    out = [p(RC, f"rows/{i}/bytes", gib, scale=1 / GIB), p(RC, f"rows/{i}/flops", tflop, scale=1 / TF)]
    return out + ([p(RC, f"rows/{i}/tflop_per_gib", per_gib)] if per_gib else [])


PCT = 100.0
COVER: dict[str, list[Printed]] = {
    # seed 000 §1.1–1.5: backprop
    "bp-exchange-rate-chain": [p(BPN, "values/chain_total_rate", "3"), p(BPN, "values/chain_smallest_link", "0.5")],
    "bp-finite-diff-10k-years": [p(BPN, "values/finite_difference_years", (9000, 10_000))],
    "bp-softmax-ce-grad": [p(BPN, "values/softmax_ce_grad/0", "0.3"), p(BPN, "values/softmax_ce_grad/1", "-0.8"),
                           p(BPN, "values/softmax_ce_grad/2", "0.5"),
                           p(BPN, "values/softmax_ce_vs_finite_difference", (0, 1e-8)),
                           p(BP, "values/softmax_ce_vs_autograd", (0, 1e-12), torch=True)],
    "bp-3x-compute": [p(BPN, "values/matmul_step_over_forward", "3"),
                      p(BP, "values/counted_step_over_forward", "3", torch=True)],
    "vg-0.8-pow-59": [p(BPN, "values/chain_power_low", "1.9e-06")],
    "vg-1.2-pow-59": [p(BPN, "values/chain_power_high", "46956")],
    "vg-ten-orders": [p(BPN, "values/orders_between", "10")],
    "vg-sigmoid-max-0.25": [p(BPN, "values/sigmoid_slope_max", "0.25")],
    "ad-reverse-vs-forward": [p(BPN, "values/reverse_mode_sweeps", 1), p(BPN, "values/forward_mode_sweeps", "3e11")],
    "postln-2-pow-minus-l-half": [p(BPN, "values/post_ln_coefficient/1", "0.707"),
                                  p(BPN, "values/post_ln_coefficient/6", "0.125"),
                                  p(BPN, "values/post_ln_coefficient/12", "0.0156"),
                                  p(BPN, "values/post_ln_coefficient/24", "0.000244")],
    # §1.6–1.7: DeepSeek-V3 activations at 128K
    **{f"v3-mla-row{i}": [sc(f"v3-mla-row{i}", v)] for i, v in
       enumerate(("1.75", "1.75", "0.75", "0.27", "6.00", "8.00", "4.00", "0.06"), start=1)},
    **{f"v3-moe-row{i}": [sc(f"v3-moe-row{i}", v)] for i, v in
       enumerate(("3.50", "0.06", "15.75", "13.50", "15.75"), start=1)},
    "v3-act-unit-1.75GiB": [sc("v3-act-unit-1.75GiB", "1.75")],
    "v3-mla-subtotal": [sc("v3-mla-subtotal", "22.6")],
    "v3-moe-subtotal": [sc("v3-moe-subtotal", "48.6")],
    "v3-moe-nine-copies-31.5": [sc("v3-moe-nine-copies-31.5", "31.5")],
    "v3-layer-moe-71": [sc("v3-layer-moe-71", "71")],
    "v3-layer-dense-40": [sc("v3-layer-dense-40", "40")],
    "v3-total-4.15TiB": [sc("v3-total-4.15TiB", "4.15")],
    "v3-full-recompute-106.75": [sc("v3-full-recompute-106.75", "106.75")],
    "dp-grad-comm-batch-independent": [sc("dp-grad-comm-batch-independent", "1.22"),
                                       sc("dp-grad-comm-batch-independent", "2.44", "preset_value")],
    # §2.2–2.6: recompute
    "rc-full-plus-33pct": [p(RC, "cut/full_cost_of_step", "33", scale=PCT)],
    "rc-sqrt-L-segments": [sc("rc-sqrt-L-segments", "7.81"), sc("rc-sqrt-L-segments", "15.62", "preset_value")],
    "rc-selective-old-6pct": [sc("rc-selective-old-6pct", "6")],
    "rc-closed-form-flops-per-byte-k": [p(RC, f"rows/{i}/flops_per_byte", w) for i, w in
                                        ((3, "512"), (4, "1536"), (5, "2048"))],
    "rc-row1-dispatch": rows(0, "15.75", "0.00"),
    "rc-row2-rmsnorm": rows(1, "3.50", "0.01"),
    "rc-row3-swiglu": rows(2, "4.50", "0.01"),
    "rc-row4-kv-up": rows(3, "8.00", "4.40", "0.55"),
    "rc-row5-q-up": rows(4, "6.00", "9.90", "1.65"),
    "rc-row6-expert-out": rows(5, "15.75", "34.63", "2.20"),
    "rc-row7-gate-up-router-down": rows(6, "9.14", "70.35", "7.70"),
    "rc-row8-attn-out": rows(7, "4.00", "703.69", "175.92"),
    "rc-tflop-per-gib": [p(RC, f"rows/{i}/tflop_per_gib", v) for i, v in
                         ((3, "0.55"), (4, "1.65"), (5, "2.20"), (6, "7.70"))],
    "rc-old-cell-39.08": [sc("rc-old-cell-39.08", "70")],
    "rc-attn-23x": [sc("rc-attn-23x", "23")],
    "rc-threshold-3": [p(cmd, f"rows/{i}/below_cut", i < 6) for cmd in (RC, RC25, RC5) for i in (5, 6)],
    "rc-selective-saved-53.5": [p(RC, "cut/bytes", "53.5", scale=1 / GIB)],
    "rc-selective-cost-48.9": [p(RC, "cut/flops", "48.9", scale=1 / TF)],
    "rc-step-2571": [p(RC, "layer_step_flops", "2571", scale=1 / TF)],
    "rc-selective-1.9pct": [p(RC, "cut/selective_cost_of_step", "1.9", scale=PCT)],
    "rc-selective-77pct": [p(RC, "cut/selective_saving_excl_input", "77", scale=PCT)],
    # the seed prints 97 for 97.54 %: it truncates; the bound is one unit
    "rc-full-33-97": [p(RC, "cut/full_cost_of_step", "33", scale=PCT),
                      p(RC, "cut/full_saving_of_total", "97", scale=PCT, tol=1.0)],
    "att-slope-v3-1.25": [p(RC, "attention_slope", "1.25")],
    "att-slope-gpt3-1.00": [p(RCG, "attention_slope", "1.00")],
    "att-crossovers-four-lines": [p(RC, f"crossovers/{i}/seq_len", v) for i, v in
                                  enumerate(("409.6", "1228.8", "1638.4", "5734.4"))],
    "att-crossover-5734": [p(RC, "crossovers/3/seq_len", "5734")],
    "kort-gpt3-70-2.7": [sc("kort-gpt3-70-2.7", "70"), sc("kort-gpt3-70-2.7", "2.7", "preset_value")],
    "kort-mtnlg-65-1.6": [sc("kort-mtnlg-65-1.6", "65"), sc("kort-mtnlg-65-1.6", "1.6", "preset_value")],
    "kort-gpt3-causal-1.37": [sc("kort-gpt3-causal-1.37", "1.37")],
    "att-gpt3-2048-vs-12288": [sc("att-gpt3-2048-vs-12288", "2048"),
                               sc("att-gpt3-2048-vs-12288", "12288", "preset_value")],
    "rc-megatron-modules-map": [sc("rc-megatron-modules-map", "22.0")],
    "fw-preserve-rng-default": [p(TD, "values/checkpoint_preserves_rng_by_default", True, torch=True)],
    "rc-full-quarter-of-executed": [sc("rc-full-quarter-of-executed", "0.25")],
    # §3.1–3.4: bytes per parameter, precision, optimizers
    "bytes-2-vs-12": [sc("bytes-2-vs-12", "6")],
    "bytes-fp32-adam-16": [sc("bytes-fp32-adam-16", "16")],
    "bytes-mixed-adam-16": [sc("bytes-mixed-adam-16", "16")],
    "bytes-fp32-grad-accum-18": [sc("bytes-fp32-grad-accum-18", "18")],
    "bytes-zero-16psi": [sc("bytes-zero-16psi", "16")],
    "bytes-v3-bf16-moments": [sc("bytes-v3-bf16-moments", "14")],
    "bytes-muon-12": [sc("bytes-muon-12", "12")],
    "bytes-lion-12": [sc("bytes-lion-12", "12")],
    "bytes-adafactor-8": [sc("bytes-adafactor-8", "8")],
    "bytes-8bit-adam-10": [sc("bytes-8bit-adam-10", "10")],
    "bf16-rounding-asserts": [p(F, "values/lost_update/bf16", 0), p(FG, "values/lost_update/bf16", "0.0078125"),
                              p(F, "tables/1/rows/1/3", 1.0)],
    "fp16-vs-bf16-3-bits": [p(F, "values/properties/1/exponent_bits", 8), p(F, "values/properties/2/exponent_bits", 5)],
    "momentum-toy-landscape": [p(D, "values/final_x_plain_gd", "8.101"), p(D, "values/final_x_heavy_ball", "2.706")],
    "gd-half-steps-ratio25": [p(D, "values/steps_to_half/25", "8.77")],
    "gd-half-steps-ratio1000": [p(D, "values/steps_to_half/1000", "364.47")],
    "gd-stability-threshold": [p(D, "values/converges_5pct_below_2_over_a", True),
                               p(D, "values/converges_5pct_above_2_over_a", False)],
    "newton-step-parabola": [p(D, "values/newton_step_at_x_3", "3")],
    "adam-update-rms-0.2294": [p(A, "values/update_rms_closed_form", "0.2294")],
    "adam-step-0.2-lr": [p(A, "values/update_rms_monte_carlo", "0.2")],
    "muon-flop-overhead-1pct": [p(D, "values/muon_flop_overhead", (0, 0.01))],
    "muon-diag-sign": [p(D, "values/msign_of_diag", [1.0, -1.0, 1.0, -1.0])],
    "adagrad-600-4.1pct": [p(A, "values/adagrad_step_at_600", "4.1", scale=PCT)],
    "rmsprop-nobias-32x": [p(A, "values/rmsprop_no_correction_step1", "32")],
    "adam-nobias-6.6x": [p(A, "values/adam_no_correction_peak", "6.6")],
    # §3.5–3.6: learning rate, β
    "gpt3-warmup-0.125pct": [p(S, "values/gpt3_warmup_share", "0.125", scale=PCT)],
    "gpt3-table-2.1": [p(S, "tables/2/rows/0/2", "6.0e-4"), p(S, "tables/2/rows/7/2", "0.6e-4"),
                       p(S, "tables/2/rows/0/1", "125e6"), p(S, "tables/2/rows/7/1", "175e9")],
    "gpt3-1400x-10x": [p(S, "values/gpt3_size_span", "1400"), p(S, "values/gpt3_lr_span", "10")],
    "lr-batch-bounded": [p(S, f"values/lr_batch_bounded/{i}", v) for i, v in
                         enumerate(("0.001", "0.010", "0.091", "0.500", "0.909", "0.990", "0.999"))],
    "v3-vs-gpt3-3.7x": [p(S, "values/v3_over_gpt3_175b", "3.7")],
    "v3-vs-gpt3-37b-2.8x": [p(S, "values/gpt3_lr_at_37b", "0.8e-4"),
                            p(S, "values/v3_over_gpt3_at_37b_seed_rounded", "2.8")],
    "gpt3-cosine-to-10pct": [p(S, "values/gpt3_lr_over_peak_at_260b", "0.1"),
                             p(S, "values/gpt3_lr_over_peak_at_300b", "0.1")],
    "v3-lr-schedule": [p(S, "values/v3_floor_over_peak", "0.10"), p(S, "values/v3_lr_last_167b", "7.3e-6")],
    "beta-window": [p(A, "values/window_beta1_steps", "10"), p(A99, "values/window_beta2_steps", "100"),
                    p(W, "values/beta2_windows/0", "1000")],
    "palm-beta2-schedule": [p(A, "tables/5/rows/5/1", "0.9999")],
    "palm-lr-continuity": [p(S, "values/palm_lr_at_10000", "1e-2"), p(S, "values/palm_lr_at_10001", "1e-2")],
    # checkpoint, LoRA, ZeRO
    "ckpt-classic-7.3TiB": [sc("ckpt-classic-7.3TiB", "7.3")],
    "ckpt-v3-4.9TiB": [sc("ckpt-v3-4.9TiB", "4.9"), sc("ckpt-v3-4.9TiB", "0.333", "preset_value")],
    "lora-0.8pct-per-matrix": [sc("lora-0.8pct-per-matrix", "0.8")],
    "lora-7b-7.9x": [sc("lora-7b-7.9x", "7.9")],
    "lora-7b-adapter-8.39M": [sc("lora-7b-adapter-8.39M", "8.39")],
    "lora-7b-0.124pct": [sc("lora-7b-0.124pct", "0.124")],
    "lora-14-of-16-bytes": [sc("lora-14-of-16-bytes", "14")],
    # the bill's LoRA FLOPs (flops.lora_step_over_forward): step / forward ~2 (full fine-tuning 3), ~1/3 saved
    "lora-compute-2x": [sc("lora-compute-2x", "2"), sc("lora-compute-2x", "3", "preset_value"),
                        sc("lora-compute-2x:saved", "0.33", tol=0.01)],
    "zero-comm-2-2-3": [p(CO, f"values/zero_comm_psi/{i}", v) for i, v in ((1, "2"), (2, "2"), (3, "3"))],
    "zero-fig1-baseline": [sc("zero-fig1-baseline", "120")],
    "zero-fig1-stage1-os": [sc("zero-fig1-stage1-os", "31.4")],
    "zero-fig1-stage2-os-g": [sc("zero-fig1-stage2-os-g", "16.6")],
    "zero-fig1-stage3-os-g-p": [sc("zero-fig1-stage3-os-g-p", "1.9")],
    # §5: the full bill of DeepSeek-V3 and the GPT-3 125M worked example
    "bill-93.7-sequences": [sc("bill-93.7-sequences", "93.7")],
    "bill-resident-9.76TiB": [sc("bill-resident-9.76TiB", "9.76"), sc("bill-resident-9.76TiB", "9.76", "preset_value")],
    "bill-split-1.22-1.22-7.32": [sc("bill-split-1.22-1.22-7.32:weights", "1.22"),
                                  sc("bill-split-1.22-1.22-7.32:grads", "1.22"),
                                  sc("bill-split-1.22-1.22-7.32", "7.32")],
    "bill-125-cards": [sc("bill-125-cards", 125), sc("bill-125-cards", 125, "preset_value")],
    "bill-94-seqs-12.3M-tokens": [sc("bill-94-seqs-12.3M-tokens", "12.3")],
    "bill-6nd-29.1PF": [sc("bill-6nd-29.1PF", "29.1")],
    "bill-attn-82.1pct": [sc("bill-attn-82.1pct", "82.1")],
    "bill-6nd-5.6x-160PF": [sc("bill-6nd-5.6x-160PF", (150, 170)), sc("bill-6nd-5.6x-160PF", (5, 6), "preset_value")],
    "bill-6nd-short-seq-ok": [sc("bill-6nd-short-seq-ok", (1, 2))],
    "gpt3s-params-consistency": [sc("gpt3s-params-consistency", "125")],
    "gpt3s-weights-0.23": [sc("gpt3s-weights-0.23", "0.23")],
    "gpt3s-grads-0.23": [sc("gpt3s-grads-0.23", "0.23")],
    "gpt3s-opt-1.40": [sc("gpt3s-opt-1.40", "1.40")],
    "gpt3s-resident-1.86": [sc("gpt3s-resident-1.86", "1.86")],
    "gpt3s-8x": [sc("gpt3s-8x", "8")],
    "gpt3s-act-22.5KiB": [sc("gpt3s-act-22.5KiB", "22.5")],
    "gpt3s-act-width-11520": [sc("gpt3s-act-width-11520", 11520)],
    "gpt3s-act-270KiB": [sc("gpt3s-act-270KiB", "270")],
    "gpt3s-act-2.11GiB": [sc("gpt3s-act-2.11GiB", "2.11")],
    "gpt3s-act-gt-resident": [sc("gpt3s-act-gt-resident", (0, math.inf))],
    "gpt3s-recompute-0.32": [sc("gpt3s-recompute-0.32", "0.32")],
    "gpt3s-6.7x": [sc("gpt3s-6.7x", "6.7")],
    "gpt3s-totals": [sc("gpt3s-totals", "3.97"), sc("gpt3s-totals:full-recompute", "2.18"),
                     sc("gpt3s-totals:compute", "33")],
    "gpt3s-5000x": [sc("gpt3s-5000x", (4000, 6000))],
    # §6–§7: numerics and framework defaults
    "fp16-bounds": [p(F, "values/properties/2/min_normal", 2.0**-14), p(F, "values/properties/2/min_subnormal", 2.0**-24),
                    p(F, "values/properties/1/min_normal", 2.0**-126), p(F, "values/properties/2/exponent_bits", 5)],
    "fw-ddp-bucket-25": [p(TD, "values/ddp_bucket_cap_mib", "25", torch=True)],
    "fw-megatron-clip-grad-1.0": [p(MD, "values/clip_grad_default", "1.0"),
                                  p(MD, "values/lab_clip_threshold_default", "1.0")],
    "fw-megatron-recompute-default": [p(MD, "values/recompute_modules_default", ["core_attn"]),
                                      p(MD, "values/recompute_default_modelled", True)],
    # pure citations: the cited values and the seed's arithmetic on them (lab citations)
    "vg-history-years": [p(CI, "values/years_thesis_to_paper", 3), p(CI, "values/years_thesis_to_chapter", 10),
                         p(CI, "values/rnn_chain_links", 1000)],
    "polyak-rho-range": [p(CI, "values/adam_beta1_in_polyak_range", True),
                         p(CI, "values/years_polyak_to_backprop", 22), p(CI, "values/lab_adam_beta1_default", "0.9")],
    "adagrad-jmlr-39-pages": [p(CI, "values/adagrad_page_count", 39)],
    "v3-batch-ramp": [p(CI, "values/v3_batch_sequences", [3072, 15360]), p(CI, "values/v3_batch_ramp_ratio", "5")],
    "stmoe-table4": [p(CI, "values/stmoe_baseline_crashes", 2),
                     p(CI, "values/stmoe_table4/baseline/quality", "-1.755"),
                     p(CI, "values/stmoe_table4/update clipping (0.1)/quality", "-4.206"),
                     p(CI, "values/stmoe_table4/router z-loss/quality", "-1.741")],
    "fw-api-names": [p(TD, "values/checkpoint", True, torch=True),
                     p(TD, "values/create_selective_checkpoint_contexts", True, torch=True),
                     p(TD, "values/CheckpointPolicy", True, torch=True)],
    # seed 002 §01–§08
    "adam-reg-beta0-0.769": [p(A0, "values/latest_share_beta1", "1"), p(A0, "tables/1/rows/11/3", "0.769")],
    "adam-reg-window-10": [p(A, "values/window_beta1_steps", "10")],
    "adam-reg-latest-13.9": [p(A, "values/latest_share_beta1", "13.9", scale=PCT)],
    "adam-reg-oldest-4.4": [p(A, "values/oldest_share_beta1", "4.4", scale=PCT)],
    "adam-reg-v-share-10.9": [p(A, "values/latest_share_beta2", "10.9", scale=PCT)],
    "adam-reg-scale50": [p(A, "tables/2/rows/0/2", "9.40e-3"), p(A, "tables/2/rows/1/2", "1.35e-2"),
                         p(A, "tables/2/rows/2/2", "0.69")],
    "adam-bias-step1": [p(A, "values/bias_correction_step1", "0.1"), p(A, "tables/1/rows/0/2", "0.135"),
                        p(A, "tables/1/rows/0/3", "1.353")],
    "adam-bias-step12": [p(A, "values/bias_correction_last_step", "0.718")],
    "adamw-decay-3e-5": [p(DC, "values/adamw_decay_per_step", "3e-5")],
    "l2-decay-750x": [p(DC, "values/l2_spread", "750"), p(DC, "values/l2_decay_min_per_step", "1e-3"),
                      p(DC, "values/l2_decay_max_per_step", "7.5e-1")],
    "bytes-16-split-002": [p(M, "values/bytes_model_per_param", 4), p(M, "values/bytes_optimizer_per_param", 12)],
    "mem-7b-104GiB": [p(M, "values/resident_gib/7e+09_x1", "104"), p(DC, "values/share_above_card", (0.2, 0.3))],
    "mem-70b-1043GiB": [p(M, "values/resident_gib/7e+10_x1", "1043")],
    "fsdp-2way-52.2": [p(M, "values/resident_gib/7e+09_x2", "52.2")],
    "warmup-step1-pm1": [p(W, "values/first_update_abs", "1.00")],
    "warmup-first-step-1.5e-7": [p(W, "values/first_step_no_warmup", "3.00e-4"),
                                 p(W, "values/first_step_with_warmup", "1.50e-7")],
    "warmup-fraction": [p(W, "values/warmup_fraction", "2", scale=PCT), p(W, "values/beta2_windows/0", "1000")],
    "sched-area-cosine-16.47": [p(S, "values/areas_lr_steps/cosine", "16.47")],
    "sched-area-linear-16.47": [p(S, "values/areas_lr_steps/linear", "16.47")],
    "sched-cos-front-loaded": [p(S, "values/cosine_above_linear_at_quarter", True),
                               p(S, "values/cosine_below_linear_at_nine_tenths", True)],
    "sched-area-wsd-27.05": [p(S, "values/areas_lr_steps/wsd", "27.05")],
    "sched-floor-9.8pct": [p(S, "values/floor_gain", "9.8", scale=PCT)],
    "gpt3-lr-powerlaw-0.31": [p(S, "values/gpt3_lr_exponent", "-0.31")],
    "clip-norm-angle-0": [p(CL, "values/angle_by_norm_deg", "0.0")],
    "clip-value-18.4deg": [p(CL, "values/angle_by_value_deg", "18.4"), p(CL, "values/clipped_by_value", [1.0, 1.0])],
    "h100-989-495-67": [p(F, "values/h100_tflops/bf16 tensor", "989"), p(F, "values/h100_tflops/tf32 tensor", "495"),
                        p(F, "values/h100_tflops/fp32 vector", "67")],
    "fp16-bf16-bit-split": [p(F, f"values/properties/{i}/{k}", v) for i, k, v in
                            ((2, "exponent_bits", 5), (2, "mantissa_bits", 10), (1, "exponent_bits", 8),
                             (1, "mantissa_bits", 7), (0, "exponent_bits", 8))],
    "bf16-max-fp16-max": [p(F, "values/properties/1/max", "3.4e38"), p(F, "values/properties/2/max", "6.6e4")],
    "decimal-digits-2.4-3.3": [p(F, "values/properties/1/decimal_digits", "2.4"),
                               p(F, "values/properties/2/decimal_digits", "3.3")],
    "gap-0.78-vs-0.098": [p(F, "values/properties/1/relative_gap", "0.78", scale=PCT),
                          p(F, "values/properties/2/relative_gap", "0.098", scale=PCT)],
    "fp16-min-subnormal-5.96e-8": [p(F, "values/properties/2/min_subnormal", "5.96e-8")],
    "fp16-1plus1e-3": [p(F, "values/lost_update/fp16", "9.77e-4"), p(F, "values/lost_update/bf16", 0),
                       p(F, "values/properties/1/relative_gap", "0.0078")],
    "bf16-lost-update-3e-4": [p(F3, "values/lost_update/bf16", 0)],
    "ring-phases-N4": [p(CO, "values/ring_first_stage_every_gpu_holds_a_reduced_chunk", 3),
                       p(CO, "values/ring_stages", 6)],
    "ring-allreduce-22.8-26.0": [p(CO, "values/ring_link_gib/0", "22.8"), p(CO, "values/ring_link_gib/1", "26.0")],
    "central-server-209-13.0": [p(CO, "values/server_link_gib/0", "209"),
                                p(CO, "values/server_link_gib/1", "13.0", scale=1 / 1024)],
    "tp-layer-201M": [p(CO, "values/tp_layer_params", "201", scale=1e-6),
                      p(CO, "values/tp_params_per_rank", "25.2", scale=1e-6)],
    "tp-4-allreduces": [p(CO, "values/tp_allreduces_per_layer", 4)],
    "tp-448-vs-64MiB": [p(CO, "values/tp_traffic_mib", "448"), p(CO, "values/tp_activation_mib", "64")],
    "pp-bubble-75-16": [p(CO, "values/pipeline_bubble/0", "75", scale=PCT),
                        p(CO, "values/pipeline_bubble/1", "16", scale=PCT)],
    "3d-1024": [p(CO, "values/world_size", 1024)],
    "loop-hyperparams": [p(DC, "settings/lr", "3e-4"), p(DC, "settings/weight_decay", "0.1"),
                         p(A, "settings/beta1", "0.9"), p(A, "settings/beta2", "0.95"),
                         p(CL, "settings/threshold", "1.0")],
}

# Covered claims whose check needs a word of caveat (rendered in docs/seed-claims.md).
CAVEATS: dict[str, str] = {
    "fw-api-names": "torch's names (checkpoint, create_selective_checkpoint_contexts, CheckpointPolicy) are checked on "
                    "the installed torch; Megatron's --recompute-granularity and jax.checkpoint / checkpoint_policies "
                    "are not dependencies and are not checked",
    "gpt3-table-2.1": "stepbill carries Table 2.1's sizes and peak lrs as data (lab/schedule.GPT3_TABLE); the check is "
                      "that `lab schedule` prints the rows the seed quotes",
    "loop-hyperparams": "the seed's loop constants are the lab topics' defaults; the check is that decay, adam and clip "
                        "run with lr 3e-4, λ 0.1, β 0.9 / 0.95 and threshold 1.0",
    "rc-full-33-97": "the seed prints 97 for 97.5 % (truncated); the check allows one unit",
    "adam-reg-scale50": "the seed's own registers 0.470 / 0.677 (from its unprinted stream) × 0.02; `lab adam` shows "
                        "the same invariance on its seeded stream",
    "bp-finite-diff-10k-years": "\"nearly 10,000 years\" is checked as 9,000–10,000 (9,506)",
    "bill-6nd-5.6x-160PF": "\"close to 160 PFLOP\" and \"5–6×\" are checked as 150–170 PFLOP (157.6) and 5–6× (5.41)",
    "bill-6nd-short-seq-ok": "\"one-point-something percent\" is checked as 1–2 % (1.37 %)",
    "gpt3s-5000x": "\"~5,000×\" is checked as 4,000–6,000 (5,358 with the presets)",
    "mem-7b-104GiB": "\"about a quarter above the line\" is checked as 20–30 % (23.3 %)",
    "muon-flop-overhead-1pct": "\"below 1 %\" is checked as 0–1 % (0.51 %, T·m/B with T = 5)",
}

# What stepbill prints for a claim the catalog marks not reproducible (rendered in docs/seed-claims.md).
NOT_REPRODUCIBLE_PRINTED: dict[str, str] = {
    "fw-torch-checkpointpolicy-6": "`lab torch-defaults` prints the installed torch's members (six in torch 2.13)",
    "iter-bytes-56-28-2": "`lab memory` prints the 28 B optimizer step and the 2 B forward, not a 56 B total",
    "loss-scaling-8.0-0.05-5.9": "`lab formats` prints 8.0 % / 0.056 % / 5.9 % from the catalog's log-normal fit, said so "
                                 "in the table title",
    "wd-ceiling-1.70-3.51": "`lab decay` runs its own seeded stream (equilibrium E[u]/λ 1.43, final 1.75 / 7.16) and "
                            "says the seed's 1.70 / 3.51 need its unprinted stream",
    "adam-reg-m-0.470": "`lab adam` runs a seeded stream pinned to g₁ and g₁₂ and says its step-12 registers differ",
    "adam-reg-sqrtv-0.677": "as adam-reg-m-0.470",
    "vband-step1-0.01-2.86": "`lab warmup` prints its own seeded band and says the seed's is an unprinted draw",
    "vband-step1000": "as vband-step1-0.01-2.86",
    "clip-trace-4-of-200": "`lab clip` prints a synthetic trace (or yours, --trace) and says the seed's is not printed",
    "bill-topic1-81.8pct": "`stepbill bill deepseek-v3 --seq 131072` prints 81.7 % for the whole model (LM head "
                           "included), beside the seed's 82.1 % for one layer",
    "gpt3-table-tiers-7-vs-8": "`lab schedule` prints Table 2.1's eight models",
    "cs231n-update-ratio": "nothing: the seed's random data and seed are not given",
    "bp-circuit-gates": "`lab backprop` checks the gate rules on a real network (chain rule = autograd), not the "
                        "figure's unprinted inputs",
}

# Reproducible claims no command prints yet, with the reason (rendered in docs/seed-claims.md).
PENDING: dict[str, str] = {}

# Covered claims whose printed number is a cited reference value (copied from its source, printed with it), not
# something stepbill computes; only the seed's arithmetic on it runs (rendered in docs/seed-claims.md).
CITED: dict[str, str] = {
    "vg-history-years": "`lab citations`: the years 1991 / 1994 / 2001 are cited (Hochreiter's thesis, Bengio et al. "
                        "IEEE TNN 5(2), the 2001 chapter); the differences and 0.8^1,000 (lab backprop's chain_power) "
                        "are computed",
    "polyak-rho-range": "`lab citations`: Polyak's ρ ∈ [0.8, 0.99] and the years 1964 / 1986 are cited; β₁ = 0.9 is "
                        "`lab adam`'s default, checked inside the range",
    "adagrad-jmlr-39-pages": "`lab citations`: the page range 2121–2159 of JMLR 12(61) is cited; 39 is its count",
    "v3-batch-ramp": "`lab citations`: 3,072 → 15,360 sequences (DeepSeek-V3 report §4.2) is cited; the 5× and the "
                     "tokens at seq 4,096 are computed; batch ramps are not modelled by `bill`",
    "stmoe-table4": "`lab citations`: ST-MoE Table 4's runs and qualities are cited; 6 − 4 = 2 crashes is computed",
    "fw-megatron-clip-grad-1.0": "`lab megatron-defaults`: cited from Megatron-LM's megatron/training/arguments.py "
                                 "lines 2615–2616 at commit d98e8a64 (Megatron is not a dependency, nothing is read "
                                 "at run time); beside it `lab clip`'s own default threshold 1.0",
    "fw-megatron-recompute-default": "`lab megatron-defaults`: cited from megatron/core/transformer/transformer_config.py "
                                     "lines 560–563 and 1940–1941 at commit d98e8a64; stepbill checks that "
                                     "`core_attn` is in its own module vocabulary (spec/recompute_policy)",
}

# The claims issue 15 names as contradicted by a command's output: the command must print the seed's own number,
# its inputs and the reason beside its own (`stepbill <argv>` text output contains every needle).
CONTRADICTED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "v3-vs-gpt3-37b-2.8x": (("lab", "schedule"), ("2.702", "2.75", "37B (log-log interpolated)")),
    "lora-compute-2x": (("bill", "llama2-7b", "--lora-rank", "16", "--seq", "512"),
                        ("step / forward 2.006×", "full fine-tuning: 3×", "seed 000: ~2× instead of 3×")),
    "gpt3s-totals": ((), ("3.97 GiB", "3.83 GiB", "sum of items")),
    "bill-6nd-29.1PF": (("bill", "deepseek-v3", "--seq", "131072"), ("29.1 PFLOP", "29.53 PFLOP", "37e9")),
    "bill-attn-82.1pct": (("bill", "deepseek-v3", "--seq", "131072"), ("82.1 %", "81.72%", "one MoE layer")),
    "gpt3s-resident-1.86": ((), ("1.86 GiB", "1.866 GiB", "125e6")),
}


@cache
def run_json(argv: tuple[str, ...]) -> Any:
    """`stepbill <argv> --json`, in-process, parsed (one run per distinct command)."""
    from stepbill.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([*argv, "--json"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    assert code == 0, f"stepbill {' '.join(argv)} --json exited {code}: {err.getvalue().strip()}"
    return json.loads(out.getvalue())


def lookup(data: Any, path: str) -> Any:
    for key in path.split("/"):
        data = data[int(key)] if isinstance(data, list) else data[key]
    return data


def rounding(printed: str) -> float:
    """Half a unit in the last printed digit: "13.9" → 0.05, "1.9e-06" → 5e-8, "46956" → 0.5."""
    exponent = Decimal(printed.replace(",", "")).as_tuple().exponent
    assert isinstance(exponent, int)
    return 0.5 * 10.0**exponent


def assert_printed(check: Printed) -> None:
    got = lookup(run_json(check.argv), check.path)
    where = f"stepbill {' '.join(check.argv)} --json → {check.path}"
    if isinstance(check.seed, str):
        value, want = float(got) * check.scale, float(check.seed.replace(",", ""))
        tol = check.tol if check.tol is not None else rounding(check.seed)
        assert abs(value - want) <= tol * (1 + 1e-9) + 1e-15, f"{where}: {value!r} vs the seed's {check.seed} (±{tol:g})"
    elif isinstance(check.seed, tuple):
        lo, hi = check.seed
        assert lo <= float(got) * check.scale <= hi, f"{where}: {got!r} outside the seed's range {check.seed}"
    elif isinstance(check.seed, list):
        assert got == pytest.approx(check.seed), f"{where}: {got!r} vs {check.seed!r}"
    else:
        assert got == check.seed, f"{where}: {got!r} vs the seed's {check.seed!r}"


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("claim", sorted(COVER))
def test_claim_printed(claim: str) -> None:
    """The claim's command prints the seed's value within the seed's own rounding."""
    for check in COVER[claim]:
        if check.torch and not _has_torch():
            pytest.skip("needs torch (the measure extra)")
        assert_printed(check)


def test_every_reproducible_claim_is_covered() -> None:
    claims = load_catalog()
    reproducible = {c["id"] for c in claims if c["reproduced"] is True}
    known = {c["id"] for c in claims}
    uncovered = sorted(reproducible - set(COVER) - set(PENDING))
    assert not uncovered, f"reproducible claims with no command and no pending reason: {uncovered}"
    assert not set(COVER) & set(PENDING), "a claim is both covered and pending"
    assert set(COVER) | set(PENDING) <= reproducible, sorted((set(COVER) | set(PENDING)) - reproducible)
    assert set(CAVEATS) <= set(COVER), sorted(set(CAVEATS) - set(COVER))
    assert set(CITED) <= set(COVER), sorted(set(CITED) - set(COVER))
    assert set(NOT_REPRODUCIBLE_PRINTED) <= known - reproducible, sorted(set(NOT_REPRODUCIBLE_PRINTED) - known)
    assert len(known) == len(claims), "duplicate ids in the catalog copy"


def test_docs_list_is_current() -> None:
    """docs/seed-claims.md is what scripts/refresh_seed_facts.py renders from this table and the catalog copy."""
    import importlib.util

    script = Path(__file__).parent.parent / "scripts" / "refresh_seed_facts.py"
    spec = importlib.util.spec_from_file_location("refresh_seed_facts", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    doc = Path(__file__).parent.parent / "docs" / "seed-claims.md"
    assert doc.read_text(encoding="utf-8") == module.render_doc(), "run: python scripts/refresh_seed_facts.py"


@pytest.mark.parametrize(("argv", "needles"), [
    ((), ("3.97 GiB", "3.83 GiB", "1.86 GiB", "1.866 GiB", "sum of items")),
    (("bill", "gpt3-125m", "--seq", "1024", "--micro-batch", "8", "--recompute", "full"),
     ("2.18 GiB", "33 %", "23.66%", "LM head")),
    (("bill", "deepseek-v3", "--seq", "131072"), ("29.1 PFLOP", "29.53 PFLOP", "82.1 %", "81.72%", "37e9")),
])
def test_bill_prints_the_seeds_number_beside_its_own(argv: tuple[str, ...], needles: tuple[str, ...],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """gpt3s-totals, gpt3s-resident-1.86, bill-6nd-29.1PF, bill-attn-82.1pct: where the bill of a seed's worked
    example differs from the seed, the seed's number, its inputs and the reason are printed beside it."""
    from tests.conftest import run_cli

    code, out, _ = run_cli(list(argv), capsys)
    assert code == 0 and all(n in out for n in needles), [n for n in needles if n not in out]
    code, out, _ = run_cli([*(argv or ("bill", "gpt3-125m", "--seq", "1024", "--micro-batch", "8")), "--json"], capsys)
    notes = json.loads(out)["seed_notes"]
    assert code == 0 and all(any(n in line for line in notes) for n in needles)


def test_other_bills_carry_no_seed_notes(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import run_cli

    code, out, _ = run_cli(["bill", "gpt3-125m", "--seq", "2048", "--json"], capsys)
    assert code == 0 and "seed_notes" not in json.loads(out)


def test_the_six_contradictions_of_issue_15_are_all_handled() -> None:
    assert set(CONTRADICTED) == {"v3-vs-gpt3-37b-2.8x", "lora-compute-2x", "gpt3s-totals", "bill-6nd-29.1PF",
                                 "bill-attn-82.1pct", "gpt3s-resident-1.86"}
    assert set(CONTRADICTED) <= set(COVER)


@pytest.mark.parametrize("claim", sorted(CONTRADICTED))
def test_contradicted_claim_prints_the_seeds_number_and_reason(claim: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Where a command prints a number other than the seed's for the same quantity, it prints the seed's number,
    its inputs and the reason beside its own (issue 15: resolved in the output, not in the tests)."""
    from tests.conftest import run_cli

    argv, needles = CONTRADICTED[claim]
    code, out, _ = run_cli(list(argv), capsys)
    flat = " ".join(out.split())  # rich wraps long lines
    assert code == 0 and all(n in flat for n in needles), [n for n in needles if n not in flat]


def test_lora_bill_does_not_claim_three_forwards(capsys: pytest.CaptureFixture[str]) -> None:
    """Under LoRA the bill's FLOPs convention names what LoRA removes; the step / forward ratio is a line."""
    from tests.conftest import run_cli

    code, out, _ = run_cli(["bill", "llama2-7b", "--lora-rank", "16", "--seq", "512", "--json"], capsys)
    data = json.loads(out)
    ratio = data["lines"]["flops.lora_step_over_forward"]["value"]
    assert code == 0 and "frozen base's weight-gradient GEMMs" in data["flops"]["convention"]
    assert ratio == pytest.approx(data["flops"]["step"] / data["flops"]["forward"]) and 2.0 <= ratio < 2.05
