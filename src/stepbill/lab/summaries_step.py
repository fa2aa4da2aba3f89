"""Summaries of the step's mechanics for `stepbill lab`: backprop, gradient descent, the memory ledger, the seed's worked
numbers (seed-checks) and the installed torch's defaults. Same shape as lab/summaries.py's."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from stepbill.lab import _check, backprop, descent, memory
from stepbill.lab._summary import Summary, _f, _table


def backprop_summary(
    params: float = 3e11, seconds_per_forward: float = 1.0, rates: tuple[float, ...] = (2.0, 0.5, 3.0),
    links: int = 59, tokens: int = 128, k: int = 256, n: int = 512, seed: int = 0, with_torch: bool = True,
) -> Summary:
    """Seed 000 §1.1–1.5 (3e11 params × 1 s per forward; rates ×2, ×0.5, ×3; 59 links at 0.8 and 1.2;
    probabilities 的 0.3 / 了 0.2 / other 0.5 with 了 correct; one matmul Y = X·W)."""
    years = backprop.finite_difference_years(params, seconds_per_forward)
    sw = backprop.sweeps(params, 1)
    low, high = backprop.chain_power(0.8, links), backprop.chain_power(1.2, links)
    probs = np.array([0.3, 0.2, 0.5])
    logits = np.log(probs)
    grad = backprop.softmax_ce_grad(logits, 1)
    grad_fd = backprop.central_difference(lambda z: backprop.cross_entropy(z, 1), logits.copy())
    net = backprop.tiny_net(seed=seed)
    checks = backprop.gradient_checks(net, with_torch)
    mm = backprop.matmul_flops(tokens, k, n)
    values: dict[str, Any] = {
        "finite_difference_years": years,
        "forward_mode_sweeps": sw["forward_mode"],
        "reverse_mode_sweeps": sw["reverse_mode"],
        "chain_total_rate": backprop.chain_rate(rates),
        "chain_smallest_link": float(min(rates)),
        "chain_power_low": low,
        "chain_power_high": high,
        "orders_between": links * float(np.log10(1.2 / 0.8)),  # log10(1.2^links / 0.8^links), in log space
        "sigmoid_slope_max": backprop.sigmoid_slope_max(),
        "softmax_ce_grad": [float(x) for x in grad],
        "softmax_ce_grad_correct_token": float(grad[1]),
        "softmax_ce_vs_finite_difference": float(np.max(np.abs(grad - grad_fd))),
        "network": checks,
        "matmul_step_over_forward": mm["step"] / mm["forward"],
        "post_ln_coefficient": {str(layer): backprop.post_ln_coefficient(layer) for layer in (1, 6, 12, 24)},
    }
    flop_rows = [["formula: forward 2Skn", mm["forward"]], ["formula: dX + dW 4Skn", mm["grad_input"] + mm["grad_weight"]],
                 ["formula: step / forward", values["matmul_step_over_forward"]]]
    grad_rows = [["softmax+CE: p − y vs central differences", values["softmax_ce_vs_finite_difference"]],
                 [f"tiny MLP ({checks['params']} params): chain rule vs central differences "
                  f"({checks['forwards_for_finite_difference']} forwards)", checks["chain_vs_finite_difference"]]]
    if with_torch:
        auto = backprop.autograd_softmax_ce(logits, 1)
        values["softmax_ce_vs_autograd"] = float(np.max(np.abs(grad - auto)))
        counted = backprop.counted_linear_flops(tokens, k, n)
        first = backprop.counted_linear_flops(tokens, k, n, input_requires_grad=False)
        values["counted_forward_flops"] = counted["forward"]
        values["counted_backward_flops"] = counted["backward"]
        values["counted_step_over_forward"] = (counted["forward"] + counted["backward"]) / counted["forward"]
        values["counted_step_over_forward_no_input_grad"] = (first["forward"] + first["backward"]) / first["forward"]
        grad_rows.insert(1, ["softmax+CE: p − y vs torch autograd", values["softmax_ce_vs_autograd"]])
        grad_rows.append(["tiny MLP: chain rule vs torch autograd", checks["chain_vs_autograd"]])
        flop_rows += [["FlopCounterMode: forward", counted["forward"]], ["FlopCounterMode: backward", counted["backward"]],
                      ["FlopCounterMode: step / forward", values["counted_step_over_forward"]],
                      ["FlopCounterMode: step / forward, input needs no grad (no dX)",
                       values["counted_step_over_forward_no_input_grad"]]]
    else:
        grad_rows.append(["torch autograd checks", "not run (--no-torch)"])
        flop_rows.append(["FlopCounterMode count", "not run (--no-torch)"])
    labels = ["的 (wrong)", "了 (correct)", "other (wrong)"]
    return {
        "topic": "backprop",
        "settings": {"params": params, "seconds_per_forward": seconds_per_forward, "rates": list(rates),
                     "links": links, "tokens": tokens, "k": k, "n": n, "seed": seed, "torch": with_torch},
        "values": values,
        "tables": [
            _table("Finite differences vs reverse mode (one step, one forward per parameter)", ["quantity", "value"],
                   [[f"{params:,.0f} params × {seconds_per_forward:g} s per forward (years of 365.25 days)", years],
                    ["forward-mode sweeps (one per input)", sw["forward_mode"]],
                    ["reverse-mode sweeps (one per scalar loss)", sw["reverse_mode"]]],
                   f"finite differences would take {years:,.0f} years for one step; one backward sweep does it."),
            _table("Chain rule: local rates multiply", ["quantity", "value"],
                   [[f"rates {' × '.join(f'{r:g}' for r in rates)}", values["chain_total_rate"]],
                    [f"0.8 through {links} links", low], [f"1.2 through {links} links", high],
                    ["orders of magnitude between them", values["orders_between"]],
                    ["max σ′ = σ(1 − σ) (10,001-point grid)", values["sigmoid_slope_max"]]],
                   "a rate just below 1 vanishes and just above 1 explodes over a deep chain; σ′ ≤ 0.25 vanishes."),
            _table("Softmax + cross-entropy: dL/dlogits = p − y", ["token", "p", "y", "p − y"],
                   [[lab, float(p), int(i == 1), float(g)] for i, (lab, p, g) in enumerate(zip(labels, probs, grad,
                                                                                            strict=True))],
                   "the first backward gradient is just prediction minus the one-hot answer."),
            _table("Gradient checks, max |difference| (float64)", ["check", "max |Δ|"], grad_rows,
                   "autograd is the chain rule: they agree to rounding; finite differences to ~1e-9."),
            _table(f"FLOPs of one Linear: X[{tokens}, {k}] · W[{k}, {n}], no bias", ["quantity", "value"], flop_rows,
                   "backward is two matmuls (dX, dW): a step is 3× the forward, 2× where no dX is needed."),
            _table("Post-LN: x₀'s coefficient after l layers, 2^(−l/2)", ["layers", "coefficient"],
                   [[int(k_), v] for k_, v in values["post_ln_coefficient"].items()],
                   "each Post-LN norm divides the residual by √2, so the input's share halves every two layers."),
        ],
        "units_note": "Units: FLOPs = 2 per multiply-add; years of 365.25 days; gradients in nats per logit.",
    }


def descent_summary(
    ratios: tuple[float, ...] = (25.0, 1000.0), x0: float = 12.0, lr: float = 2.0, beta: float = 0.8, steps: int = 500,
    width: int = 16_384, batch_tokens: float = 16e6,
) -> Summary:
    """Seed 000 §3.3: one lr for directions of different steepness (ratios 25 and 1,000), the 2/a threshold at
    ±5 %, Newton's step, heavy-ball momentum on the toy landscape (x0 = 12, η = 2, β = 0.8: the catalog's
    inputs, not printed in the seed), Muon's msign on a diagonal matrix and its Newton–Schulz FLOP overhead."""
    halves = [[r, descent.flat_contraction(r), descent.gd_steps_to_half(r)] for r in ratios]
    plain, heavy = descent.heavy_ball(x0, lr, 0.0, steps), descent.heavy_ball(x0, lr, beta, steps)
    diag = np.diag([3.0, -2.0, 0.5, -1.0])
    sign = np.diag(descent.msign(diag))
    values = {
        "steps_to_half": {f"{r:g}": h for r, _, h in halves},
        "converges_5pct_below_2_over_a": descent.gd_converges(0.95 * 2.0, 1.0),
        "converges_5pct_above_2_over_a": descent.gd_converges(1.05 * 2.0, 1.0),
        "newton_step_at_x_3": descent.newton_step(3.0, 0.7),
        "final_x_plain_gd": float(plain[-1]),
        "final_x_heavy_ball": float(heavy[-1]),
        "msign_of_diag": [float(v) for v in sign],
        "muon_flop_overhead": descent.muon_flop_overhead(width, batch_tokens),
    }
    return {
        "topic": "descent",
        "settings": {"ratios": list(ratios), "x0": x0, "lr": lr, "beta": beta, "steps": steps, "width": width,
                     "batch_tokens": batch_tokens},
        "values": values,
        "tables": [
            _table("One lr for two directions (η = 1.9/a_steep)",
                   ["steepness ratio", "flat contraction per step", "steps to halve"],
                   [[r, c, h if math.isfinite(h) else "never (|contraction| ≥ 1)"] for r, c, h in halves],
                   "the steep direction caps η, so the flat one crawls: steps grow linearly with the ratio."
                   + (" At ratio ≤ 0.95, η = 1.9/a_steep ≥ 2/a_flat: the flat direction never converges."
                      if any(not math.isfinite(h) for _, _, h in halves) else "")),
            _table("Stability on a·x²/2 (a = 1): x ← (1 − ηa)·x", ["quantity", "value"],
                   [["η = 0.95 · 2/a converges", values["converges_5pct_below_2_over_a"]],
                    ["η = 1.05 · 2/a converges", values["converges_5pct_above_2_over_a"]],
                    ["Newton |f′|/f″ on f = 0.7x² at x = 3", values["newton_step_at_x_3"]]],
                   "GD diverges just past η = 2/a; Newton's step is exactly the distance to the minimum."),
            _table(f"Toy landscape L(x) = 0.015x² + 0.45cos(1.1x), x0 = {x0:g}, η = {lr:g}, {steps} steps",
                   ["optimizer", "final x", "final loss"],
                   [["plain GD (β = 0)", float(plain[-1]), float(descent.toy_loss(plain[-1]))],
                    [f"heavy ball (β = {beta:g})", float(heavy[-1]), float(descent.toy_loss(heavy[-1]))]],
                   "plain GD stops in the shallow pit (±8.101); momentum carries over it to the deep valley (±2.706)."),
            _table("Muon", ["quantity", "value"],
                   [["msign(diag(3, −2, 0.5, −1)) diagonal", str([round(v, 6) for v in values["msign_of_diag"]])],
                    [f"Newton–Schulz FLOP overhead, 5 steps, width {width:,}, {batch_tokens:.3g} tokens (T·m/B)",
                     values["muon_flop_overhead"]]],
                   "on a diagonal matrix Muon is the element-wise sign; its FLOP overhead at 405B scale is ~0.5 %."),
        ],
        "units_note": "Units: η in units of 1/a (curvature); FLOP overhead as a fraction of the layer's step FLOPs.",
    }


def memory_summary(
    params: tuple[float, ...] = (7e9, 70e9), shards: tuple[int, ...] = (1, 2), card_gib: float = 80.0,
) -> Summary:
    """Seed 002 §02/§08: the 4 | 12 split of 16 B/param, resident GiB per GPU under FSDP, step traffic."""
    params = tuple(_check.positive("params", p) for p in params)  # 0 params: the share column divides by zero
    _check.positive("card_gib", card_gib)
    model_b, opt_b = memory.bytes_split()
    traffic = memory.optimizer_step_traffic()
    rows = [[p, n, _f(memory.resident_gib(p, shards=n)), max(0.0, 1 - card_gib / _f(memory.resident_gib(p, shards=n)))]
            for p in params for n in shards]
    values = {
        "bytes_model_per_param": model_b,
        "bytes_optimizer_per_param": opt_b,
        "resident_gib": {f"{p:g}_x{n}": r for p, n, r, _ in rows},  # params_xshards
        "optimizer_step_bytes_per_param": traffic["optimizer"],
        "optimizer_read_bytes_per_param": traffic["optimizer_read"],
        "optimizer_write_bytes_per_param": traffic["optimizer_write"],
        "forward_bytes_per_param": traffic["forward"],
    }
    return {
        "topic": "memory",
        "settings": {"params": list(params), "shards": list(shards), "card_gib": card_gib},
        "values": values,
        "tables": [
            _table("Mixed-precision AdamW: bytes per parameter", ["quantity", "B/param"],
                   [["model: bf16 weight + bf16 grad", model_b], ["optimizer: fp32 master + m + v", opt_b],
                    ["total", model_b + opt_b]],
                   "three quarters of the 16 bytes are the optimizer's."),
            _table(f"Resident weights + grads + optimizer per GPU (16 B/param ÷ FSDP shards; {card_gib:g} GiB card)",
                   ["params", "shards", "GiB per GPU", "share above the card"], rows,
                   "before any activation a 7B model does not fit one 80 GiB card; sharding divides it."),
            _table("Memory traffic per parameter per step (fused AdamW)", ["quantity", "B/param"],
                   [["optimizer reads g, master, m, v", traffic["optimizer_read"]],
                    ["optimizer writes master, m, v, bf16 copy", traffic["optimizer_write"]],
                    ["optimizer step", traffic["optimizer"]], ["forward reads the bf16 weight", traffic["forward"]]],
                   "the optimizer step moves 14× the bytes the forward reads per parameter."),
        ],
        "units_note": "Units: B/param = bytes per parameter; GiB = 2^30 B.",
    }


def seed_checks_summary() -> Summary:
    """Seed 000's worked numbers (§1.6–§5) recomputed by the engine beside the seed's printed values."""
    from stepbill.lab import seed_checks  # imports the bill engine: only for this topic

    groups = seed_checks.all_checks()
    values = {c.claim: seed_checks.as_dict(c) for checks in groups.values() for c in checks}
    tables = []
    for title, checks in groups.items():
        rows = [[c.claim, c.quantity, c.seed, c.value, c.unit] for c in checks]
        tables.append(_table(title, ["claim", "quantity", "seed prints", "stepbill", "unit"], rows,
                             "every stepbill number comes from the engine, with the seed's own inputs."))
    two = [[c.claim, f"{c.seed} {c.unit} ({c.inputs})", c.preset_value, c.note]
           for checks in groups.values() for c in checks if c.note and c.preset_value is not None]
    tables.append(_table("Two readings: the seed's inputs vs the preset's (or another convention)",
                         ["claim", "seed prints (seed inputs)", "other reading", "reason"], two,
                         "both numbers are right for their inputs; where `stepbill bill` prints one, it is the other reading."))
    if seed_checks.PENDING:
        tables.append(_table("Pending (not modelled yet)", ["claim", "reason"],
                             [[k, v] for k, v in seed_checks.PENDING.items()],
                             "these seed claims wait for an engine feature; nothing is printed for them."))
    return {
        "topic": "seed-checks",
        "settings": {},
        "values": values,
        "pending": dict(seed_checks.PENDING),
        "tables": tables,
        "units_note": "Units: GiB = 2^30 B, TiB = 2^40 B, KiB = 2^10 B, GB = 1e9 B; TFLOP = 1e12, PFLOP = 1e15 "
                      "(2 FLOPs per multiply-add, causal-halved attention).",
    }


def torch_defaults_summary() -> Summary:
    """Seed 000 §2.6/§7's framework defaults, read from or measured on the installed torch."""
    from stepbill.lab import torch_defaults as td

    api = td.checkpoint_api()
    values = {"checkpoint_preserves_rng_by_default": td.checkpoint_preserves_rng(),
              "ddp_bucket_cap_mib": td.ddp_bucket_cap_mib(), **api,
              "checkpoint_policy_count": len(api["checkpoint_policy_members"])}
    return {
        "topic": "torch-defaults",
        "settings": {},
        "values": values,
        "tables": [
            _table(f"PyTorch {api['torch_version']} defaults the seed quotes", ["quantity", "value"],
                   [["checkpoint recomputes dropout with the same masks (preserve_rng_state default)",
                     values["checkpoint_preserves_rng_by_default"]],
                    ["DDP default bucket_cap_mb (MiB)", values["ddp_bucket_cap_mib"]],
                    ["torch.utils.checkpoint.checkpoint exists", api["checkpoint"]],
                    ["create_selective_checkpoint_contexts exists", api["create_selective_checkpoint_contexts"]],
                    ["CheckpointPolicy members", ", ".join(api["checkpoint_policy_members"])]],
                   "measured on this torch: the member list depends on the version (older releases have four)."),
        ],
    }
