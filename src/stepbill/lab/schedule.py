"""Learning-rate schedules: warmup + constant / linear / cosine / WSD / inverse-sqrt, floors, areas, and the
published GPT-3, DeepSeek-V3 and PaLM schedules; the GPT-3 Table 2.1 peak-lr power law.

Conventions: `step` is 1-based as in seed 002 §08's loop (`for step in range(1, TOTAL + 1)`), so the first step
already gets peak/W; the schedule is defined for 1 ≤ step ≤ total. Warmup is linear from 0. `floor` is a
fraction of the peak. Area = Σ lr(step) over the run, in units of lr × steps (seed 002 §04's 16.47).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from stepbill.errors import StepbillError, unknown_name
from stepbill.lab import _check

SHAPES = ("constant", "linear", "cosine", "wsd", "inverse_sqrt")
DECAY_SHAPES = ("linear", "cosine", "1-sqrt")

# GPT-3 Table 2.1 (Brown et al. 2020, arXiv 2005.14165; external, not printed in the seeds): parameters and peak lr.
GPT3_TABLE = (
    ("Small", 125e6, 6.0e-4),
    ("Medium", 350e6, 3.0e-4),
    ("Large", 760e6, 2.5e-4),
    ("XL", 1.3e9, 2.0e-4),
    ("2.7B", 2.7e9, 1.6e-4),
    ("6.7B", 6.7e9, 1.2e-4),
    ("13B", 13e9, 1.0e-4),
    ("175B", 175e9, 0.6e-4),
)


def _decay(progress: np.ndarray, floor: float, decay_shape: str) -> np.ndarray:
    """Multiplier going from 1 at progress 0 to `floor` at progress 1."""
    if decay_shape == "linear":
        frac = 1.0 - progress
    elif decay_shape == "cosine":
        frac = 0.5 * (1.0 + np.cos(np.pi * progress))
    elif decay_shape == "1-sqrt":  # Hägele et al. 2024's WSD cooldown
        frac = 1.0 - np.sqrt(progress)
    else:
        raise unknown_name("decay shape", decay_shape, DECAY_SHAPES)
    return floor + (1.0 - floor) * frac


def lr_at(
    step: npt.ArrayLike,
    shape: str = "cosine",
    peak: float = 3e-4,
    warmup: int = 2000,
    total: int = 100_000,
    floor: float = 0.1,
    decay_frac: float = 0.2,
    decay_shape: str = "linear",
) -> np.ndarray | float:
    """Learning rate at 1-based `step` (scalar or array).

    After a linear warmup peak·step/W: constant → peak; linear / cosine → from peak to floor·peak over the rest;
    wsd → peak until the last `decay_frac` of the post-warmup steps, then `decay_shape` to the floor;
    inverse_sqrt → peak·√(W/step). Source: seed 002 §04 (defaults: T = 100k, η = 3e-4, W = 2,000, floor 10 %,
    WSD decaying over the last 20 % → areas 16.47 / 16.47 / 27.05; seed-facts catalog item 11).
    """
    if shape not in SHAPES:
        raise unknown_name("schedule shape", shape, SHAPES)
    if decay_shape not in DECAY_SHAPES:
        raise unknown_name("decay shape", decay_shape, DECAY_SHAPES)
    _check.positive("peak lr", peak)
    total = _check.count("total steps", total)
    warmup = _check.count("warmup steps", warmup, 0)
    if warmup >= total:
        raise StepbillError(f"warmup ({warmup} steps) must be shorter than the run ({total} steps)")
    _check.fraction("floor", floor)
    _check.fraction("WSD decay fraction", decay_frac)
    t = _check.steps_array("step", step)
    if np.any(t > total):
        raise StepbillError(f"step must be <= total ({total}), got {t.max():g}")
    # progress through the post-warmup phase: 0 at the end of warmup, 1 at the last step
    progress = np.clip((t - warmup) / (total - warmup), 0.0, 1.0)
    if shape == "constant":
        mult = np.ones_like(t)
    elif shape in ("linear", "cosine"):
        mult = _decay(progress, floor, shape)
    elif shape == "wsd":
        start = 1.0 - decay_frac  # decay begins after this share of the post-warmup steps
        p = np.clip((progress - start) / decay_frac, 0.0, 1.0) if decay_frac > 0 else np.zeros_like(t)
        mult = _decay(p, floor, decay_shape)
    else:  # inverse_sqrt, as in the original Transformer schedule
        mult = np.sqrt(warmup / np.maximum(t, max(warmup, 1))) if warmup > 0 else 1.0 / np.sqrt(np.maximum(t, 1))
    if warmup > 0:
        mult = np.where(t < warmup, t / warmup, mult)
    out = peak * mult
    return float(out) if out.ndim == 0 else out


def area(shape: str = "cosine", total: int = 100_000, **kwargs: float) -> float:
    """Σ lr(step) for step = 1..total: the total distance the optimizer may travel, in lr × steps.

    Source: seed 002 §04 (cosine = linear = 16.47, WSD 27.05; a 10 % floor adds 9.8 %).
    """
    steps = np.arange(1, _check.count("total steps", total) + 1)
    return float(np.sum(lr_at(steps, shape, total=total, **kwargs)))


def gpt3_lr(
    tokens: npt.ArrayLike,
    peak: float = 6e-5,
    warmup_tokens: float = 375e6,
    decay_tokens: float = 260e9,
    floor: float = 0.1,
) -> np.ndarray | float:
    """GPT-3's token-based schedule: linear warmup over 375M tokens, cosine to 10 % of peak by 260B tokens, then
    constant at 10 %. Progress is measured from the end of warmup. Source: seed 000 §3.5; Brown et al. 2020 §B."""
    x = _check.steps_array("tokens", tokens)
    progress = np.clip((x - warmup_tokens) / (decay_tokens - warmup_tokens), 0.0, 1.0)
    mult = np.where(x < warmup_tokens, x / warmup_tokens, _decay(progress, floor, "cosine"))
    out = peak * mult
    return float(out) if out.ndim == 0 else out


def v3_lr(
    tokens: npt.ArrayLike,
    peak: float = 2.2e-4,
    floor_lr: float = 2.2e-5,
    final_lr: float = 7.3e-6,
    warmup_tokens: float = 2000 * 3072 * 4096,
) -> np.ndarray | float:
    """DeepSeek-V3's multi-stage schedule against tokens: warmup → constant to 10T → cosine over 4.3T to 2.2e-5
    → 333B at 2.2e-5 → 167B at 7.3e-6 (14.8T in all). Source: seed 000 §3.5; DeepSeek-V3 report §4.2.

    The paper's warmup is 2,000 steps; in tokens that assumes the ramp's starting batch (3,072 × 4,096 tokens).
    """
    x = _check.steps_array("tokens", tokens)
    t_const, t_cos, t_hold = 10e12, 4.3e12, 333e9
    progress = np.clip((x - t_const) / t_cos, 0.0, 1.0)
    cosine = floor_lr + (peak - floor_lr) * 0.5 * (1.0 + np.cos(np.pi * progress))
    out = np.select(
        [x < warmup_tokens, x < t_const, x < t_const + t_cos, x < t_const + t_cos + t_hold],
        [peak * x / warmup_tokens, np.full_like(x, peak), cosine, np.full_like(x, floor_lr)],
        default=final_lr,
    )
    return float(out) if out.ndim == 0 else out


def palm_lr(step: npt.ArrayLike) -> np.ndarray | float:
    """PaLM: 1e-2 for the first 10k steps, then 1/√k (continuous at k = 10⁴). Source: seed 000 §3.6."""
    k = _check.steps_array("step", step)
    out = np.where(k <= 10_000, 1e-2, 1.0 / np.sqrt(np.maximum(k, 1.0)))
    return float(out) if out.ndim == 0 else out


def lr_batch_bounded(batch: npt.ArrayLike, b_noise: float, eta_max: float = 1.0) -> np.ndarray | float:
    """Optimal lr against batch size: η* ≈ η_max/(1 + B_noise/B), monotone and bounded by η_max.

    Source: seed 000 §3.5 (McCandlish et al. 2018)."""
    b = np.asarray(batch, dtype=float)
    if np.any(b <= 0):
        raise StepbillError("batch size must be > 0")
    out = eta_max / (1.0 + b_noise / b)
    return float(out) if out.ndim == 0 else out


def powerlaw_fit(n: npt.ArrayLike, y: npt.ArrayLike) -> tuple[float, float]:
    """Least-squares fit of ln y = a + k·ln N; returns (k, e^a) so y ≈ e^a·N^k.

    Source: seed 002 §04 (GPT-3 Table 2.1: η ∝ N^−0.31)."""
    ln_n, ln_y = np.log(np.asarray(n, dtype=float)), np.log(np.asarray(y, dtype=float))
    k, a = np.polyfit(ln_n, ln_y, 1)
    return float(k), float(np.exp(a))


def loglog_interp(x: npt.ArrayLike, xs: npt.ArrayLike, ys: npt.ArrayLike) -> np.ndarray | float:
    """Piecewise-linear interpolation on log-log axes (a local power law between neighbouring table rows).

    Source: seed 000 §3.5 (37B between GPT-3 13B and 175B → ≈ 0.8e-4)."""
    out = np.exp(np.interp(np.log(np.asarray(x, dtype=float)), np.log(xs), np.log(ys)))
    return float(out) if np.ndim(out) == 0 else out


def torch_snippet(
    shape: str = "cosine",
    peak: float = 3e-4,
    warmup: int = 2000,
    total: int = 100_000,
    floor: float = 0.1,
    decay_frac: float = 0.2,
    decay_shape: str = "linear",
) -> str:
    """Python source for an equivalent `torch.optim.lr_scheduler.LambdaLR` (the lambda is lr/peak).

    LambdaLR calls the lambda with 0 for the first optimizer step, so the snippet evaluates step + 1.
    """
    lr_at(1, shape, peak, warmup, total, floor, decay_frac, decay_shape)  # validate once, same errors
    decay = {
        "linear": "1.0 - p",
        "cosine": "0.5 * (1.0 + math.cos(math.pi * p))",
        "1-sqrt": "1.0 - math.sqrt(p)",
    }
    body = {
        "constant": "    return 1.0",
        "linear": f"    p = progress(step)\n    return FLOOR + (1.0 - FLOOR) * ({decay['linear']})",
        "cosine": f"    p = progress(step)\n    return FLOOR + (1.0 - FLOOR) * ({decay['cosine']})",
        "wsd": (
            f"    p = min(max((progress(step) - (1.0 - DECAY_FRAC)) / DECAY_FRAC, 0.0), 1.0)"
            f" if DECAY_FRAC > 0 else 0.0\n    return FLOOR + (1.0 - FLOOR) * ({decay[decay_shape]})"
        ),
        "inverse_sqrt": "    return math.sqrt(WARMUP / max(step, WARMUP, 1)) if WARMUP else 1.0 / math.sqrt(step)",
    }[shape]
    return f'''import math

import torch

PEAK, WARMUP, TOTAL, FLOOR, DECAY_FRAC = {peak!r}, {warmup!r}, {total!r}, {floor!r}, {decay_frac!r}


def progress(step):
    return min(max((step - WARMUP) / (TOTAL - WARMUP), 0.0), 1.0)


def lr_lambda(epoch):
    step = epoch + 1  # LambdaLR counts from 0; this schedule counts optimizer steps from 1
    if step < WARMUP:
        return step / WARMUP
{body}


model = torch.nn.Linear(4, 4)  # stand-in for your model
opt = torch.optim.AdamW(model.parameters(), lr=PEAK, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)  # {shape} schedule; call sched.step() after opt.step()
'''
