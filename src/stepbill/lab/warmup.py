"""Warmup: why Adam's first steps are full-size, how long √v̂ takes to be trusted, and what a ramp buys.

Conventions: steps count from 1; displacements are in weight units (η × update); the √v̂ band is the ratio of
each parameter's √v̂ to its true gradient RMS σ (1.0 = exact).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from stepbill.lab import _check
from stepbill.lab.adam import ema_shares, registers


def first_update(g1: npt.ArrayLike, beta1: float = 0.9, beta2: float = 0.95) -> np.ndarray:
    """Adam's update at t = 1: m̂ = g₁, v̂ = g₁², so m̂/√v̂ = sign(g₁) for every β₂ (eps = 0).

    Source: seed 002 §03 ("every β₂ gives 1.00").
    """
    return registers(np.asarray(g1, dtype=float)[None, ...], beta1, beta2).update[0]


def warmup_factor(step: npt.ArrayLike, warmup_steps: int) -> np.ndarray | float:
    """Linear warmup from 0: min(1, t/W) (t counted from 1, so the first step gets 1/W); W = 0 is no warmup."""
    t = _check.steps_array("step", step)
    _check.count("warmup steps", warmup_steps, 0)
    out = np.ones_like(t) if warmup_steps == 0 else np.minimum(1.0, t / warmup_steps)
    return float(out) if out.ndim == 0 else out


def first_step_displacement(lr: float, warmup_steps: int, first_update_size: float = 1.0) -> float:
    """How far the first step moves a weight: η · |u₁| · (1/W), with |u₁| = 1 from `first_update`.

    Source: seed 002 §03 (η = 3e-4: 3.00e-4 without warmup, 1.50e-7 with W = 2,000).
    """
    _check.positive("lr", lr)
    return float(lr * first_update_size * warmup_factor(1, warmup_steps))


def warmup_fraction(warmup_steps: int, total_steps: int) -> float:
    """Share of the run spent warming up: W/T. Source: seed 002 §03 (500–2,000 steps = 0.1 %–2 %)."""
    _check.count("warmup steps", warmup_steps, 0)
    total_steps = _check.count("total steps", total_steps)
    if warmup_steps > total_steps:
        raise _check.StepbillError(f"warmup ({warmup_steps}) is longer than the run ({total_steps})")
    return warmup_steps / total_steps


def sqrt_v_band(
    beta2: float, steps: int = 1000, n_params: int = 12, seed: int = 0
) -> np.ndarray:
    """√v̂_t / σ for `n_params` independent parameters with N(0, σ²) gradients, shape [steps, n_params].

    At t = 1 each is |g₁|/σ, a single sample; long windows (β₂ → 1) narrow the band.
    Seeded simulation: seed 002's 0.01–2.86× and ±2 % / ±19 % came from its own (unprinted) draw.
    """
    steps = _check.count("steps", steps)
    n_params = _check.count("n_params", n_params)
    g = np.random.default_rng(seed).standard_normal((steps, n_params))
    return np.sqrt(registers(g, 0.9, beta2).v_hat)


def sqrt_v_relative_std(beta2: float, t: int) -> float:
    """Theory for the band: relative std of √v̂_t ≈ ½·√(2·Σwᵢ²) for Gaussian g (delta method; Var g² = 2σ⁴).

    wᵢ are the bias-corrected EMA shares. Source: seed-facts catalog, item 15.
    """
    w = ema_shares(beta2, t)
    return float(0.5 * np.sqrt(2.0 * np.sum(w * w)))


def count_large_updates(
    grads: npt.ArrayLike, threshold: float = 0.5, first: int = 40, beta1: float = 0.9, beta2: float = 0.95
) -> int:
    """How many of the first `first` updates exceed `threshold` in magnitude (seed 002 §03: "30 of 40")."""
    u = registers(np.asarray(grads, dtype=float)[:first], beta1, beta2).update
    return int(np.sum(np.abs(u) > threshold))
