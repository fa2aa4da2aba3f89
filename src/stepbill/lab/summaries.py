"""One summary per `stepbill lab` topic: the numbers as tables plus a flat dict of headline values.

A summary is plain JSON-able data: {"topic", "settings", "values", "tables": [{"title", "columns", "rows"}]}.
Column headers carry the units; the CLI only formats. Defaults reproduce the seeds' figures.
"""

from __future__ import annotations

import numpy as np

from stepbill.engine import comm
from stepbill.lab import adam, clip, collectives, decay, formats, memory, schedule, warmup
from stepbill.lab._summary import BATCHES, SEED_REGISTERS, Summary, _f, _table

#: Most per-step rows a lab table prints; longer runs show the first steps, then log-spaced ones to the last.
MAX_STEP_ROWS = 60
_FIRST_ROWS = 20


def _shown_steps(steps: int) -> tuple[list[int], str]:
    """The 0-based steps a per-step table prints, and the note its title carries when that is not all of them."""
    if steps <= MAX_STEP_ROWS:
        return list(range(steps)), ""
    later = np.geomspace(_FIRST_ROWS + 1, steps, MAX_STEP_ROWS - _FIRST_ROWS).round().astype(int) - 1
    shown = sorted(set(range(_FIRST_ROWS)) | {int(i) for i in later} | {steps - 1})
    return shown, (f"; {len(shown)} of {steps:,} steps shown: the first {_FIRST_ROWS}, then log-spaced to the last")


def adam_summary(
    beta1: float = 0.9, beta2: float = 0.95, steps: int = 12, scale: float = 0.02, seed: int = 0
) -> Summary:
    """Seed 002 §01 and seed 000 §3.3–3.6 (β₁ = 0.9, β₂ = 0.95, 12 steps, stream shrunk 50×)."""
    s1, s2 = adam.ema_shares(beta1, steps), adam.ema_shares(beta2, steps)
    raw1 = adam.ema_shares(beta1, steps, bias_corrected=False)
    g = adam.demo_stream(steps, seed)
    big, small = adam.registers(g, beta1, beta2), adam.registers(g * scale, beta1, beta2)
    lin = adam.lineage_constant_gradient(600, beta1, 0.999)
    rms_mc = adam.update_rms_monte_carlo(beta1, 0.999, n_params=300, steps=2000, seed=seed)
    ks = [1, 10, 100, 1000, 10_000, 100_000]
    values = {
        "window_beta1_steps": adam.window(beta1),
        "window_beta2_steps": adam.window(beta2),
        "latest_share_beta1": _f(s1[-1]),
        "oldest_share_beta1": _f(s1[0]),
        "latest_share_beta2": _f(s2[-1]),
        "bias_correction_step1": _f(adam.bias_correction(beta1, 1)),
        "bias_correction_last_step": _f(adam.bias_correction(beta1, steps)),
        "update_rms_closed_form": adam.update_rms_closed_form(beta1),
        "update_rms_monte_carlo": rms_mc,
        "adagrad_step_at_600": _f(lin["adagrad"][-1]),
        "rmsprop_no_correction_step1": _f(lin["rmsprop_no_correction"][0]),
        "adam_no_correction_peak": _f(lin["adam_no_correction"].max()),
    }
    shown, rows_note = _shown_steps(steps)
    shares = [[i + 1, steps - 1 - i, _f(s1[i]) * 100, _f(raw1[i]) * 100, _f(s2[i]) * 100] for i in shown]
    regs = [
        [t + 1, _f(g[t]), _f(big.m[t]), _f(big.m_hat[t]), _f(np.sqrt(big.v_hat[t])), _f(big.update[t]),
         _f(small.m_hat[t]), _f(np.sqrt(small.v_hat[t])), _f(small.update[t])]
        for t in shown
    ]
    return {
        "topic": "adam",
        "units_note": "Units: lr and decays per optimizer step; updates in units of η.",
        "settings": {"beta1": beta1, "beta2": beta2, "steps": steps, "scale": scale, "seed": seed},
        "values": values,
        "tables": [
            _table(f"EMA shares after {steps:,} steps (bias-corrected unless 'raw'){rows_note}",
                   ["step", "age (steps)", f"share β₁={beta1} (%)", "raw share β₁ (%)", f"share β₂={beta2} (%)"],
                   shares, "β₁ = 0.9 is a ~10-step window: the newest gradient weighs ~14 %, the oldest still ~4 %."),
            _table(f"Registers on a seeded stream (g₁ = 1.353, g_last = 0.769; middle illustrative, so step 12 differs from "
                   f"the seed's m̂ 0.470 / √v̂ 0.677, whose middle gradients are not printed), and ×{scale}{rows_note}",
                   ["step", "g", "m raw", "m̂", "√v̂", "m̂/√v̂", f"m̂ ×{scale}", f"√v̂ ×{scale}", f"m̂/√v̂ ×{scale}"],
                   regs, "scaling the gradients scales m̂ and √v̂ alike: the update m̂/√v̂ does not change."),
            _table(f"The seed's step-12 registers (m̂ {SEED_REGISTERS[0]}, √v̂ {SEED_REGISTERS[1]}) on a stream ×{scale}",
                   ["quantity", "registers", f"×{scale}"],
                   [["m̂", SEED_REGISTERS[0], SEED_REGISTERS[0] * scale], ["√v̂", SEED_REGISTERS[1], SEED_REGISTERS[1] * scale],
                    ["m̂/√v̂", SEED_REGISTERS[0] / SEED_REGISTERS[1],
                     _f(adam.registers(np.array([SEED_REGISTERS[0]]) * scale).m_hat[0]
                        / np.sqrt(adam.registers(np.array([SEED_REGISTERS[1]]) * scale).v_hat[0]))]],
                   "both registers shrink with the gradients, so the update m̂/√v̂ keeps its size."),
            _table("Lineage on a constant gradient (effective step, units of η; β₂ = 0.999)",
                   ["optimizer", "step 1", "peak", "step 600"],
                   [[k, _f(v[0]), _f(v.max()), _f(v[-1])] for k, v in lin.items() if k != "step"],
                   "AdaGrad's step decays forever; without bias correction the first steps are amplified."),
            _table("Update RMS under pure-noise gradients (units of η)",
                   ["route", "RMS"],
                   [["closed form √((1−β₁)/(1+β₁))", values["update_rms_closed_form"]],
                    ["Monte-Carlo (300 params × 2,000 steps, seeded)", rms_mc]],
                   "on pure noise Adam moves each parameter ~0.2 η per step."),
            _table("PaLM β₂(k) = 1 − k^−0.8", ["step k", "β₂", "window (steps)"],
                   [[k, _f(adam.palm_beta2(k)), k**0.8] for k in ks],
                   "PaLM's β₂ grows the window with training (~k^0.8), approaching 0.9999."),
        ],
    }


def decay_summary(
    lr: float = 3e-4, weight_decay: float = 0.1, params: float = 7e9, card_gib: float = 80.0, shards: int = 1,
    seed: int = 0,
) -> Summary:
    """Seed 002 §02 (η = 3e-4, λ = 0.1; 7B on an 80 GiB card)."""
    wd_adamw = decay.adamw_decay_per_step(lr, weight_decay)
    groups = [[name, sv, wd_adamw, _f(decay.l2_decay_per_step(lr, weight_decay, sv))] for name, sv in decay.DEFAULT_GROUPS]
    l2 = [r[3] for r in groups]
    run = decay.simulate_weight(weight_decay=weight_decay, seed=seed)
    half = run.with_decay[run.with_decay.size // 2:]  # after ~25 time constants 1/(ηλ) = 1,000 steps
    gib = _f(memory.resident_gib(params, shards=shards))
    model_b, opt_b = memory.bytes_split()
    traffic = memory.optimizer_step_traffic()
    values = {
        "adamw_decay_per_step": wd_adamw,
        "l2_decay_max_per_step": max(l2),
        "l2_decay_min_per_step": min(l2),
        "l2_spread": max(l2) / min(l2),
        "expected_equilibrium_weight": run.equilibrium,
        "sim_final_with_decay": _f(run.with_decay[-1]),
        "sim_with_decay_second_half_mean": _f(half.mean()),
        "sim_with_decay_second_half_std": _f(half.std()),
        "sim_with_decay_second_half_max": _f(half.max()),
        "sim_final_without_decay": _f(run.without_decay[-1]),
        "bytes_model_per_param": model_b,
        "bytes_optimizer_per_param": opt_b,
        "resident_gib_per_gpu": gib,
        "share_above_card": max(0.0, (gib - card_gib) / gib),
        "optimizer_step_bytes_per_param": traffic["optimizer"],
        "forward_bytes_per_param": traffic["forward"],
    }
    return {
        "topic": "decay",
        "units_note": "Units: GiB = 2^30 B, MiB = 2^20 B, TiB = 2^40 B; lr and decays per optimizer step.",
        "settings": {"lr": lr, "weight_decay": weight_decay, "params": params, "card_gib": card_gib,
                     "shards": shards, "seed": seed},
        "values": values,
        "tables": [
            _table("Decay per step by parameter group (fraction of the weight removed each step)",
                   ["group", "√v̂", "AdamW η·λ", "L2-in-gradient η·λ/√v̂"], groups,
                   "AdamW decays every group alike; L2 in the gradient is divided by √v̂, a 750× spread here."),
            _table("One weight pushed one way (seeded Adam updates, η = 0.01, 5,000 steps; illustrative: the seed's 1.70 "
                   "with decay and 3.51 without come from its own stream, η and step count, which it does not print)",
                   ["quantity", "value"],
                   [["expected equilibrium E[u]/λ (mean of the updates / λ)", run.equilibrium],
                    ["with decay, steps 2,500–5,000: mean", values["sim_with_decay_second_half_mean"]],
                    ["with decay, steps 2,500–5,000: std", values["sim_with_decay_second_half_std"]],
                    ["with decay, steps 2,500–5,000: max", values["sim_with_decay_second_half_max"]],
                    ["final weight with decay", values["sim_final_with_decay"]],
                    ["final weight without decay", values["sim_final_without_decay"]]],
                   "decay pulls the weight to E[u]/λ on average, not a hard ceiling: the noisy updates move it "
                   "around that level (the std above); without decay it keeps climbing."),
            _table(f"Memory: {params:.3g} params × 16 B over {shards} shard(s)",
                   ["quantity", "value"],
                   [["model bytes/param (bf16 w + g)", model_b], ["optimizer bytes/param (fp32 master, m, v)", opt_b],
                    ["resident per GPU (GiB)", gib], [f"share above a {card_gib:g} GiB card", values["share_above_card"]],
                    ["AdamW step traffic (B/param)", traffic["optimizer"]], ["forward traffic (B/param)", 2]],
                   "the optimizer's 12 B/param, not the bf16 weights, fill the card (see also `stepbill lab memory`)."),
        ],
    }


def warmup_summary(
    lr: float = 3e-4, warmup_steps: int = 2000, total_steps: int = 100_000, betas2: tuple[float, ...] = (0.999, 0.95),
    steps: int = 1000, params: int = 12, seed: int = 0,
) -> Summary:
    """Seed 002 §03 (η = 3e-4, W = 2,000; √v̂ band of 12 parameters at β₂ = 0.999 and 0.95)."""
    band_rows = []
    for b2 in betas2:
        band = warmup.sqrt_v_band(b2, steps, params, seed)
        band_rows.append([b2, _f(band[0].min()), _f(band[0].max()), _f(np.abs(band[-1] - 1).max()) * 100,
                          warmup.sqrt_v_relative_std(b2, steps) * 100])
    values = {
        "first_update_abs": _f(np.abs(warmup.first_update([0.3, -2.0])).max()),
        "first_step_no_warmup": warmup.first_step_displacement(lr, 0),
        "first_step_with_warmup": warmup.first_step_displacement(lr, warmup_steps),
        "warmup_fraction": warmup.warmup_fraction(warmup_steps, total_steps),
        "beta2_windows": [adam.window(b) for b in betas2],
    }
    return {
        "topic": "warmup",
        "units_note": "Units: lr and decays per optimizer step; updates in units of η.",
        "settings": {"lr": lr, "warmup_steps": warmup_steps, "total_steps": total_steps, "betas2": list(betas2),
                     "steps": steps, "params": params, "seed": seed},
        "values": values,
        "tables": [
            _table("First step (|m̂/√v̂| = 1 for every β₂)", ["quantity", "value"],
                   [["|update| at t = 1 (units of η)", values["first_update_abs"]],
                    ["displacement, no warmup", values["first_step_no_warmup"]],
                    [f"displacement, {warmup_steps}-step linear warmup", values["first_step_with_warmup"]],
                    ["warmup share of the run", values["warmup_fraction"]]],
                   "Adam's first update is ±1 η whatever the gradient; warmup shrinks that first step 2,000×."),
            _table(f"√v̂/σ band of {params} independent parameters (seeded draw; the seed's 0.01×–2.86× and ±2 % / ±19 % "
                   "are one unprinted draw of its own)",
                   ["β₂", "step-1 min (×)", "step-1 max (×)", f"step-{steps} max dev (%)", "theory rel. std (%)"],
                   band_rows,
                   "√v̂ is untrustworthy for ~1/(1−β₂) steps: the first steps scatter it 0.01×–3× the truth."),
        ],
    }


def schedule_summary(
    peak: float = 3e-4, warmup_steps: int = 2000, total: int = 100_000, floor: float = 0.1,
    decay_frac: float = 0.2, decay_shape: str = "linear",
) -> Summary:
    """Seed 002 §04 and seed 000 §3.5 (100k steps, peak 3e-4, 2,000-step warmup, 10 % floor, WSD last 20 %)."""
    kw = {"peak": peak, "warmup": warmup_steps, "floor": floor, "decay_frac": decay_frac, "decay_shape": decay_shape}
    areas = {s: schedule.area(s, total, **kw) for s in schedule.SHAPES}
    no_floor = schedule.area("cosine", total, **{**kw, "floor": 0.0})
    n = np.array([r[1] for r in schedule.GPT3_TABLE])
    lrs = np.array([r[2] for r in schedule.GPT3_TABLE])
    k, c = schedule.powerlaw_fit(n, lrs)
    at37 = _f(schedule.loglog_interp(37e9, n, lrs))
    v3_peak = _f(schedule.v3_lr(5e12))  # DeepSeek-V3's constant stage: its peak 2.2e-4
    values = {
        "areas_lr_steps": areas,
        "floor_gain": areas["cosine"] / no_floor - 1 if no_floor > 0 else float("nan"),
        "gpt3_lr_exponent": k,
        "gpt3_lr_at_37b": at37,
        "gpt3_size_span": float(n.max() / n.min()),
        "gpt3_lr_span": float(lrs.max() / lrs.min()),
        "v3_over_gpt3_175b": v3_peak / _f(lrs[n.argmax()]),
        "v3_over_gpt3_at_37b": v3_peak / at37,
        "cosine_above_linear_at_quarter": bool(schedule.lr_at(total // 4, "cosine", total=total, **kw)
                                               > schedule.lr_at(total // 4, "linear", total=total, **kw)),
        "cosine_below_linear_at_nine_tenths": bool(schedule.lr_at(total * 9 // 10, "cosine", total=total, **kw)
                                                   < schedule.lr_at(total * 9 // 10, "linear", total=total, **kw)),
        "gpt3_warmup_share": warmup.warmup_fraction(375_000_000, 300_000_000_000),
        "gpt3_lr_over_peak_at_260b": schedule.gpt3_lr(260e9) / 6e-5,
        "gpt3_lr_over_peak_at_300b": schedule.gpt3_lr(300e9) / 6e-5,
        "v3_floor_over_peak": schedule.v3_lr(14.4e12) / schedule.v3_lr(5e12),
        "v3_lr_last_167b": schedule.v3_lr(14.7e12),
        "palm_lr_at_10000": schedule.palm_lr(10_000),
        "palm_lr_at_10001": schedule.palm_lr(10_001),
        "lr_batch_bounded": [float(x) for x in schedule.lr_batch_bounded(BATCHES, 1000.0)],
        "gpt3_lr_at_37b_seed_rounded": float(f"{at37:.1g}"),
        "v3_over_gpt3_at_37b_seed_rounded": v3_peak / float(f"{at37:.1g}"),
    }
    return {
        "topic": "schedule",
        "units_note": "Units: lr and decays per optimizer step; updates in units of η.",
        "settings": {"total": total, **kw},
        "values": values,
        "tables": [
            _table(f"Area Σ lr over {total:,} steps (lr × steps)", ["shape", "area", "final lr"],
                   [[s, a, _f(schedule.lr_at(total, s, total=total, **kw))] for s, a in areas.items()],
                   "cosine and linear decay spend the same area; WSD holds the peak longer and spends more."),
            _table("Floor", ["quantity", "value"],
                   [["cosine area, floor 0", no_floor], [f"cosine area, floor {floor:g}", areas["cosine"]],
                    ["gain from the floor", values["floor_gain"]]],
                   "a 10 % floor adds about a tenth to the area."),
            _table(f"GPT-3 Table 2.1 peak lr (fit: lr ≈ {c:.3g}·N^{k:.3f})", ["model", "params", "peak lr", "fit"],
                   [[name, nn, lr_, c * nn**k] for name, nn, lr_ in schedule.GPT3_TABLE]
                   + [["37B (log-log interpolated)", 37e9, at37, c * 37e9**k]],
                   f"peak lr falls only ~10× over GPT-3's 1,400× in size (exponent {k:.2f})."),
            _table("Published schedules (GPT-3 175B: peak 0.6e-4, tokens; DeepSeek-V3: tokens; PaLM: steps)",
                   ["quantity", "value"],
                   [["GPT-3 warmup share: 375M of 300B tokens", values["gpt3_warmup_share"]],
                    ["GPT-3 lr / peak at 260B tokens (cosine end)", values["gpt3_lr_over_peak_at_260b"]],
                    ["GPT-3 lr / peak at 300B tokens (held)", values["gpt3_lr_over_peak_at_300b"]],
                    ["V3 lr at 14.4T / lr at 5T (floor over peak)", values["v3_floor_over_peak"]],
                    ["V3 lr in the last 167B tokens", values["v3_lr_last_167b"]],
                    ["PaLM lr at step 10,000 (then 1/√k)", values["palm_lr_at_10000"]],
                    ["PaLM lr at step 10,001", values["palm_lr_at_10001"]]]
                   + [[f"η*/η_max at batch {b:,} (B_noise = 1,000)", v]
                      for b, v in zip(BATCHES, values["lr_batch_bounded"], strict=True)],
                   "real schedules decay to ~10 % of peak; the best lr grows with batch but never past η_max."),
            _table("DeepSeek-V3's peak lr 2.2e-4 over GPT-3's", ["reading", "GPT-3 peak lr", "V3 / GPT-3"],
                   [["GPT-3 175B (Table 2.1: 0.6e-4)", 0.6e-4, values["v3_over_gpt3_175b"]],
                    ["GPT-3 interpolated at 37B (V3's active size), exact", at37, values["v3_over_gpt3_at_37b"]],
                    ["the seed: interpolation rounded to 0.8e-4, ratio 2.75 printed as 2.8",
                     values["gpt3_lr_at_37b_seed_rounded"], values["v3_over_gpt3_at_37b_seed_rounded"]]],
                   "the seed's 2.8× comes from rounding the interpolated lr to 0.8e-4; the exact log-log value "
                   "gives 2.7×."),
        ],
    }


def clip_summary(
    threshold: float = 1.0, trace: np.ndarray | None = None, steps: int = 200, seed: int = 0,
    vector: tuple[float, ...] = (2.0, 1.0), clip_value: float = 1.0,
) -> Summary:
    """Seed 002 §05 (threshold 1.0 on a 200-step trace; (2, 1) clipped at 1.0)."""
    source = "file" if trace is not None else f"synthetic (seed {seed})"
    norms = trace if trace is not None else clip.synthetic_trace(steps, seed)
    by_norm, by_value = clip.clip_by_norm(vector, clip_value), clip.clip_by_value(vector, clip_value)
    thresholds = sorted({threshold, 0.1, 0.5, 1.0, 2.0})
    stats = [clip.trace_stats(norms, c) for c in thresholds]
    values = {
        "trace_source": source,
        "trace_steps": int(norms.size),
        "max_norm": _f(norms.max()),
        "triggered": clip.trace_stats(norms, threshold).triggered,
        "mean_lr_multiplier": clip.trace_stats(norms, threshold).mean_lr_multiplier,
        "angle_by_norm_deg": clip.angle_deg(vector, by_norm),
        "angle_by_value_deg": clip.angle_deg(vector, by_value),
        "clipped_by_value": [float(x) for x in by_value],
        "clipped_by_norm": [float(x) for x in by_norm],
    }
    return {
        "topic": "clip",
        "settings": {"threshold": threshold, "steps": int(norms.size), "seed": seed, "vector": list(vector),
                     "clip_value": clip_value, "trace": source},
        "values": values,
        "tables": [
            _table(f"Clipping {list(vector)} at {clip_value:g}", ["rule", "result", "angle to original (°)"],
                   [["by norm (clip_grad_norm_)", str(np.round(by_norm, 4).tolist()), values["angle_by_norm_deg"]],
                    ["by value (clip_grad_value_)", str(np.round(by_value, 4).tolist()), values["angle_by_value_deg"]]],
                   "clipping by norm keeps the direction; clipping by value turns it."),
            _table(f"Norm trace: {norms.size} steps, {source}, max {norms.max():.3g}"
                   + ("" if trace is not None else " (the seed's trace, max 7.39, is not printed: illustrative)"),
                   ["threshold", "triggered (steps)", "untouched (steps)", "mean lr multiplier"],
                   [[s.threshold, s.triggered, s.untouched, s.mean_lr_multiplier] for s in stats],
                   "at threshold 1.0 clipping only catches the spikes; a low threshold rescales almost every step."),
        ],
        "_arrays": {"norms": norms},  # for the plot; keys starting with "_" stay out of --json
    }


def formats_summary(
    names: tuple[str, ...] = ("fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"), value: float = 1.0,
    update: float = 1e-3, adds: int = 1000, scales: tuple[float, ...] = (0, 10, 24), seed: int = 0,
) -> Summary:
    """Seed 002 §06 and seed 000 §3.2/§6.6 (1 + 1e-3; 1,000 adds; loss scales 2^0, 2^10, 2^24)."""
    fmts = [formats.get(n) for n in names]
    props = [f.properties() for f in fmts]
    lost = []
    for f in fmts:
        sr = formats.repeated_add(value, update, adds, f, stochastic=True, trials=64, seed=seed)
        lost.append([f.name, _f(formats.round_nearest_even(update, f)), formats.add_in(value, update, f) - value,
                     _f(formats.repeated_add(value, update, adds, f)[0]), _f(sr.mean())])
    ls = [formats.loss_scaling_fractions(k) for k in scales]
    return {
        "topic": "formats",
        "settings": {"formats": list(names), "value": value, "update": update, "adds": adds,
                     "scales_log2": list(scales), "seed": seed},
        "values": {"properties": props, "h100_tflops": formats.H100_TFLOPS,
                   "lost_update": {r[0]: r[2] for r in lost}, "rounded_update": {r[0]: r[1] for r in lost},
                   "loss_scaling_fp16": ls},
        "tables": [
            _table("Formats from their bit layout",
                   ["format", "bits", "exp", "mant", "max", "min normal", "min subnormal", "rel. gap", "digits"],
                   [[p["name"], p["bits"], p["exponent_bits"], p["mantissa_bits"], p["max"], p["min_normal"],
                     p["min_subnormal"], p["relative_gap"], p["decimal_digits"]] for p in props],
                   "bf16 keeps fp32's range with 8× fp16's gap; fp16 trades range for digits."),
            _table(f"Adding a nominal {update:g} to {value:g}: the update is first rounded to the format, then the sum "
                   "(round to nearest even; stochastic = mean of 64 seeded runs)",
                   ["format", f"update {update:g} as stored", "gain of one add", f"after {adds} adds (nearest)",
                    f"after {adds} adds (stochastic)"],
                   lost,
                   "below half a gap of the weight an update is lost every time; stochastic rounding keeps it on "
                   "average. fp8 stores the update itself inexactly (e4m3: 0.001 → 0.00195)."),
            _table("fp16 loss scaling, log10|g| ~ N(−4.945, 1.623) (catalog fit; seed's distribution not printed)",
                   ["scale", "underflow (%)", "overflow (%)", "kept (%)"],
                   [[f"2^{r['scale_log2']:g}", r["underflow"] * 100, r["overflow"] * 100, r["kept"] * 100]
                    for r in ls],
                   "unscaled fp16 flushes the smallest gradients to zero; too large a scale overflows the largest."),
        ],
        "units_note": "Units: values are plain numbers (a weight of 1.0); rel. gap = 2^−mantissa bits.",
    }


def collectives_summary(
    gpus: tuple[int, ...] = (8, 512), message_bytes: float = collectives.SEED_GRAD_BYTES, ring_n: int = 4,
    hidden: int = 4096, tp: int = 8, tokens: int = 8192, stages: int = 4, microbatches: tuple[int, ...] = (1, 16),
    dp: int = 32,
) -> Summary:
    """Seed 002 §07 (14e9 B of bf16 gradients on 8 and 512 GPUs; h = 4096, 8-way TP; 4 stages; 32 × 8 × 4)."""
    rv = collectives.ring_vs_server(list(gpus), message_bytes)
    run = collectives.simulate_ring(ring_n, message_bytes)
    tpd = collectives.tensor_parallel(hidden, tp, tokens)
    pls = [collectives.pipeline(stages, m) for m in microbatches]
    world = comm.parallel_world_size(dp, tp, stages)
    ring_rows = [[s, "reduce-scatter" if 0 < s < ring_n else ("start" if s == 0 else "all-gather"),
                  "; ".join(f"GPU{g}: {c}" for g, c in enumerate(collectives.finished_chunks(ph)))]
                 for s, ph in enumerate(run.phases)]
    return {
        "topic": "collectives",
        "units_note": "Units: GiB = 2^30 B, MiB = 2^20 B, TiB = 2^40 B; lr and decays per optimizer step.",
        "settings": {"gpus": list(gpus), "message_bytes": message_bytes, "ring_n": ring_n, "hidden": hidden,
                     "tp": tp, "tokens": tokens, "stages": stages, "microbatches": list(microbatches), "dp": dp},
        "values": {
            "ring_link_gib": (rv["ring"] / collectives.GIB).tolist(),
            "server_link_gib": (rv["server"] / collectives.GIB).tolist(),
            "ring_sim_link_bytes": run.link_bytes.tolist(),
            "ring_stages": len(run.phases) - 1,
            "ring_first_stage_every_gpu_holds_a_reduced_chunk": next(
                st for st, ph in enumerate(run.phases) if all(collectives.finished_chunks(ph))),
            "tp_allreduces_per_layer": tpd["allreduces_per_layer"],
            "tp_layer_params": tpd["layer_params"],
            "tp_params_per_rank": tpd["params_per_rank"],
            "tp_traffic_mib": tpd["traffic_bytes"] / collectives.MIB,
            "tp_activation_mib": tpd["activation_bytes"] / collectives.MIB,
            "pipeline_bubble": [p["bubble"] for p in pls],
            "world_size": int(world),
            "zero_comm_psi": [comm.zero_comm_volume(s, 1.0) for s in (0, 1, 2, 3)],
        },
        "tables": [
            _table(f"All-reduce of {message_bytes / collectives.GIB:.2f} GiB: busiest link",
                   ["GPUs", "ring 2(N−1)/N·M (GiB)", "central server 2NM (GiB)", "server (TiB)"],
                   [[int(n), r / collectives.GIB, s / collectives.GIB, s / collectives.TIB]
                    for n, r, s in zip(rv["n"], rv["ring"], rv["server"], strict=True)],
                   "a ring's busiest link carries < 2M at any N; a central server's grows with N."),
            _table(f"Ring of {ring_n}: fully reduced chunks held after each stage", ["stage", "phase", "finished"],
                   ring_rows, "after N−1 reduce-scatter stages every GPU holds one fully reduced chunk."),
            _table(f"Tensor parallel: h = {hidden}, {tp}-way, {tokens:,} tokens, bf16", ["quantity", "value"],
                   [["layer params (12h²)", tpd["layer_params"]], ["params per GPU", tpd["params_per_rank"]],
                    ["all-reduces per layer per iteration", tpd["allreduces_per_layer"]],
                    ["activation (MiB)", tpd["activation_bytes"] / collectives.MIB],
                    ["traffic per layer per iteration (MiB)", tpd["traffic_bytes"] / collectives.MIB]],
                   "TP splits the weights but all-reduces activations four times per layer per iteration."),
            _table(f"Pipeline, {stages} stages", ["micro-batches", "bubble (p−1)/(m+p−1)", "idle cells in grid"],
                   [[p["microbatches"], p["bubble"], p["bubble_from_grid"]] for p in pls],
                   "more micro-batches shrink the pipeline bubble (p−1)/(m+p−1)."),
            _table("3-D layout and ZeRO", ["quantity", "value"],
                   [[f"{dp} DP × {tp} TP × {stages} PP GPUs", int(world)],
                    ["ZeRO comm per step, stage 0/1/2/3 (×Ψ)", " / ".join(f"{v:g}" for v in
                                                                          (comm.zero_comm_volume(k, 1.0) for k in range(4)))]],
                   "ZeRO-1/2 cost the same traffic as plain DP; ZeRO-3 costs 1.5×."),
        ],
    }


# The step-mechanics topics live in summaries_step.py; one namespace for the CLI and the web.
from stepbill.lab.summaries_cited import citations_summary, megatron_defaults_summary  # noqa: E402
from stepbill.lab.summaries_step import (  # noqa: E402
    backprop_summary,
    descent_summary,
    memory_summary,
    seed_checks_summary,
    torch_defaults_summary,
)

__all__ = ["adam_summary", "backprop_summary", "citations_summary", "clip_summary", "collectives_summary",
           "decay_summary", "descent_summary", "formats_summary", "megatron_defaults_summary", "memory_summary",
           "schedule_summary", "seed_checks_summary", "torch_defaults_summary", "warmup_summary"]
