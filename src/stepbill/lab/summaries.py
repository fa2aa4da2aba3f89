"""One summary per `stepbill lab` topic: the numbers as tables plus a flat dict of headline values.

A summary is plain JSON-able data: {"topic", "settings", "values", "tables": [{"title", "columns", "rows"}]}.
Column headers carry the units; the CLI only formats. Defaults reproduce the seeds' figures.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stepbill.engine import comm
from stepbill.lab import adam, clip, collectives, decay, formats, memory, schedule, warmup

Summary = dict[str, Any]


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> dict[str, Any]:
    return {"title": title, "columns": columns, "rows": rows}


def _f(x: Any) -> float:
    return float(x)


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
    shares = [[i + 1, steps - 1 - i, _f(s1[i]) * 100, _f(raw1[i]) * 100, _f(s2[i]) * 100] for i in range(steps)]
    regs = [
        [t + 1, _f(g[t]), _f(big.m[t]), _f(big.m_hat[t]), _f(np.sqrt(big.v_hat[t])), _f(big.update[t]),
         _f(small.m_hat[t]), _f(np.sqrt(small.v_hat[t])), _f(small.update[t])]
        for t in range(steps)
    ]
    return {
        "topic": "adam",
        "settings": {"beta1": beta1, "beta2": beta2, "steps": steps, "scale": scale, "seed": seed},
        "values": values,
        "tables": [
            _table(f"EMA shares after {steps} steps (bias-corrected unless 'raw')",
                   ["step", "age (steps)", f"share β₁={beta1} (%)", "raw share β₁ (%)", f"share β₂={beta2} (%)"],
                   shares),
            _table(f"Registers on a seeded stream (g₁ = 1.353, g_last = 0.769; middle illustrative), and ×{scale}",
                   ["step", "g", "m raw", "m̂", "√v̂", "m̂/√v̂", f"m̂ ×{scale}", f"√v̂ ×{scale}", f"m̂/√v̂ ×{scale}"],
                   regs),
            _table("Lineage on a constant gradient (effective step, units of η; β₂ = 0.999)",
                   ["optimizer", "step 1", "peak", "step 600"],
                   [[k, _f(v[0]), _f(v.max()), _f(v[-1])] for k, v in lin.items() if k != "step"]),
            _table("Update RMS under pure-noise gradients (units of η)",
                   ["route", "RMS"],
                   [["closed form √((1−β₁)/(1+β₁))", values["update_rms_closed_form"]],
                    ["Monte-Carlo (300 params × 2,000 steps, seeded)", rms_mc]]),
            _table("PaLM β₂(k) = 1 − k^−0.8", ["step k", "β₂", "window (steps)"],
                   [[k, _f(adam.palm_beta2(k)), k**0.8] for k in ks]),
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
    gib = _f(memory.resident_gib(params, shards=shards))
    model_b, opt_b = memory.bytes_split()
    traffic = memory.optimizer_step_traffic()
    values = {
        "adamw_decay_per_step": wd_adamw,
        "l2_decay_max_per_step": max(l2),
        "l2_decay_min_per_step": min(l2),
        "l2_spread": max(l2) / min(l2),
        "ceiling_weight": run.ceiling,
        "sim_final_with_decay": _f(run.with_decay[-1]),
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
        "settings": {"lr": lr, "weight_decay": weight_decay, "params": params, "card_gib": card_gib,
                     "shards": shards, "seed": seed},
        "values": values,
        "tables": [
            _table("Decay per step by parameter group (fraction of the weight removed each step)",
                   ["group", "√v̂", "AdamW η·λ", "L2-in-gradient η·λ/√v̂"], groups),
            _table("One weight pushed one way (seeded Adam updates, η = 0.01, 5,000 steps)",
                   ["quantity", "value"],
                   [["ceiling E[u]/λ", run.ceiling], ["final weight with decay", values["sim_final_with_decay"]],
                    ["final weight without decay", values["sim_final_without_decay"]]]),
            _table(f"Memory: {params:.3g} params × 16 B over {shards} shard(s)",
                   ["quantity", "value"],
                   [["model bytes/param (bf16 w + g)", model_b], ["optimizer bytes/param (fp32 master, m, v)", opt_b],
                    ["resident per GPU (GiB)", gib], [f"share above a {card_gib:g} GiB card", values["share_above_card"]],
                    ["AdamW step traffic (B/param)", traffic["optimizer"]], ["forward traffic (B/param)", 2]]),
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
        "settings": {"lr": lr, "warmup_steps": warmup_steps, "total_steps": total_steps, "betas2": list(betas2),
                     "steps": steps, "params": params, "seed": seed},
        "values": values,
        "tables": [
            _table("First step (|m̂/√v̂| = 1 for every β₂)", ["quantity", "value"],
                   [["|update| at t = 1 (units of η)", values["first_update_abs"]],
                    ["displacement, no warmup", values["first_step_no_warmup"]],
                    [f"displacement, {warmup_steps}-step linear warmup", values["first_step_with_warmup"]],
                    ["warmup share of the run", values["warmup_fraction"]]]),
            _table(f"√v̂/σ band of {params} independent parameters (seeded draw)",
                   ["β₂", "step-1 min (×)", "step-1 max (×)", f"step-{steps} max dev (%)", "theory rel. std (%)"],
                   band_rows),
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
    values = {
        "areas_lr_steps": areas,
        "floor_gain": areas["cosine"] / no_floor - 1 if no_floor > 0 else float("nan"),
        "gpt3_lr_exponent": k,
        "gpt3_lr_at_37b": at37,
        "v3_over_gpt3_175b": 2.2e-4 / 0.6e-4,
        "v3_over_gpt3_at_37b": 2.2e-4 / at37,
    }
    return {
        "topic": "schedule",
        "settings": {"total": total, **kw},
        "values": values,
        "tables": [
            _table(f"Area Σ lr over {total:,} steps (lr × steps)", ["shape", "area", "final lr"],
                   [[s, a, _f(schedule.lr_at(total, s, total=total, **kw))] for s, a in areas.items()]),
            _table("Floor", ["quantity", "value"],
                   [["cosine area, floor 0", no_floor], [f"cosine area, floor {floor:g}", areas["cosine"]],
                    ["gain from the floor", values["floor_gain"]]]),
            _table(f"GPT-3 Table 2.1 peak lr (fit: lr ≈ {c:.3g}·N^{k:.3f})", ["model", "params", "peak lr", "fit"],
                   [[name, nn, lr_, c * nn**k] for name, nn, lr_ in schedule.GPT3_TABLE]
                   + [["37B (log-log interpolated)", 37e9, at37, c * 37e9**k]]),
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
                    ["by value (clip_grad_value_)", str(np.round(by_value, 4).tolist()), values["angle_by_value_deg"]]]),
            _table(f"Norm trace: {norms.size} steps, {source}, max {norms.max():.3g}",
                   ["threshold", "triggered (steps)", "untouched (steps)", "mean lr multiplier"],
                   [[s.threshold, s.triggered, s.untouched, s.mean_lr_multiplier] for s in stats]),
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
        lost.append([f.name, formats.add_in(value, update, f) - value,
                     _f(formats.repeated_add(value, update, adds, f)[0]), _f(sr.mean())])
    ls = [formats.loss_scaling_fractions(k) for k in scales]
    return {
        "topic": "formats",
        "settings": {"formats": list(names), "value": value, "update": update, "adds": adds,
                     "scales_log2": list(scales), "seed": seed},
        "values": {"properties": props, "h100_tflops": formats.H100_TFLOPS,
                   "lost_update": {r[0]: r[1] for r in lost}, "loss_scaling_fp16": ls},
        "tables": [
            _table("Formats from their bit layout",
                   ["format", "bits", "exp", "mant", "max", "min normal", "min subnormal", "rel. gap", "digits"],
                   [[p["name"], p["bits"], p["exponent_bits"], p["mantissa_bits"], p["max"], p["min_normal"],
                     p["min_subnormal"], p["relative_gap"], p["decimal_digits"]] for p in props]),
            _table(f"Adding {update:g} to {value:g} (round to nearest even; stochastic = mean of 64 seeded runs)",
                   ["format", "gain of one add", f"after {adds} adds (nearest)", f"after {adds} adds (stochastic)"],
                   lost),
            _table("fp16 loss scaling, log10|g| ~ N(−4.945, 1.623) (catalog fit; seed's distribution not printed)",
                   ["scale", "underflow (%)", "overflow (%)", "kept (%)"],
                   [[f"2^{r['scale_log2']:g}", r["underflow"] * 100, r["overflow"] * 100, r["kept"] * 100]
                    for r in ls]),
        ],
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
        "settings": {"gpus": list(gpus), "message_bytes": message_bytes, "ring_n": ring_n, "hidden": hidden,
                     "tp": tp, "tokens": tokens, "stages": stages, "microbatches": list(microbatches), "dp": dp},
        "values": {
            "ring_link_gib": (rv["ring"] / collectives.GIB).tolist(),
            "server_link_gib": (rv["server"] / collectives.GIB).tolist(),
            "ring_sim_link_bytes": run.link_bytes.tolist(),
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
                    for n, r, s in zip(rv["n"], rv["ring"], rv["server"], strict=True)]),
            _table(f"Ring of {ring_n}: fully reduced chunks held after each stage", ["stage", "phase", "finished"],
                   ring_rows),
            _table(f"Tensor parallel: h = {hidden}, {tp}-way, {tokens:,} tokens, bf16", ["quantity", "value"],
                   [["layer params (12h²)", tpd["layer_params"]], ["params per GPU", tpd["params_per_rank"]],
                    ["all-reduces per layer per iteration", tpd["allreduces_per_layer"]],
                    ["activation (MiB)", tpd["activation_bytes"] / collectives.MIB],
                    ["traffic per layer per iteration (MiB)", tpd["traffic_bytes"] / collectives.MIB]]),
            _table(f"Pipeline, {stages} stages", ["micro-batches", "bubble (p−1)/(m+p−1)", "idle cells in grid"],
                   [[p["microbatches"], p["bubble"], p["bubble_from_grid"]] for p in pls]),
            _table("3-D layout and ZeRO", ["quantity", "value"],
                   [[f"{dp} DP × {tp} TP × {stages} PP GPUs", int(world)],
                    ["ZeRO comm per step, stage 0/1/2/3 (×Ψ)", "2 / 2 / 2 / 3"]]),
        ],
    }
