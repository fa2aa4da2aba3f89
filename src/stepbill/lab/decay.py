"""Weight decay: AdamW's decoupled η·λ against L2-in-the-gradient's η·λ/√v̂, and the expected equilibrium
E[u]/λ the decayed weight fluctuates around (not a hard ceiling).

Conventions: decays are fractions of the weight removed per step (3e-5 = the weight loses 0.003 % of itself
each step); √v̂ is the RMS gradient of a parameter group in gradient units; updates are in units of η.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from stepbill.lab import _check
from stepbill.lab.adam import registers

# Six parameter groups and their gradient RMS √v̂. Only the two extremes are implied by seed 002 §02
# (embedding loses 1e-3 and bias 7.5e-1 at η·λ = 3e-5, so √v̂ = 3e-2 and 4e-5); the middle four are
# illustrative values between them, not the seed's.
DEFAULT_GROUPS: tuple[tuple[str, float], ...] = (
    ("embedding", 3.0e-2),
    ("lm head (illustrative)", 1.0e-2),
    ("attention (illustrative)", 3.0e-3),
    ("mlp (illustrative)", 1.0e-3),
    ("norm gains (illustrative)", 2.0e-4),
    ("biases", 4.0e-5),
)


def adamw_decay_per_step(lr: float, weight_decay: float) -> float:
    """Fraction of itself a weight loses per step under AdamW: η·λ, the same for every group.

    Source: seed 002 §02 (η = 3e-4, λ = 0.1 → 3e-5); Loshchilov & Hutter 2019.
    """
    return _check.positive("lr", lr) * _check.non_negative("weight decay", weight_decay)


def l2_decay_per_step(lr: float, weight_decay: float, sqrt_v: npt.ArrayLike) -> np.ndarray | float:
    """Fraction lost per step when λw is added to the gradient: η·λ/√v̂ (the decay goes through Adam's divisor).

    Source: seed 002 §02 (embedding 1e-3, bias 7.5e-1: a 750× spread for one λ).
    """
    sv = np.asarray(sqrt_v, dtype=float)
    if np.any(sv <= 0):
        raise _check.StepbillError("sqrt(v_hat) must be > 0")
    out = adamw_decay_per_step(lr, weight_decay) / sv
    return float(out) if out.ndim == 0 else out


def decay_equilibrium(mean_abs_update: float, weight_decay: float) -> float:
    """Expected equilibrium weight, where decay's mean pull η·λ·w equals Adam's mean push η·E[m̂/√v̂]: w* = E[u]/λ.

    The weight fluctuates around it (noisy updates), so single runs go above it. Source: seed 002 §02 (its
    "ceiling of height 1/λ" for unit updates).
    """
    return _check.non_negative("E|update|", mean_abs_update) / _check.positive("weight decay", weight_decay)


@dataclass(frozen=True)
class WeightRun:
    """One weight pushed the same way every step, with and without decoupled decay."""

    step: np.ndarray
    with_decay: np.ndarray
    without_decay: np.ndarray
    updates: np.ndarray  # the Adam updates m̂/√v̂ that drove both (units of η)
    equilibrium: float  # mean(update)/λ over the run: the expected equilibrium, not a bound


def simulate_weight(
    steps: int = 5000,
    lr: float = 0.01,
    weight_decay: float = 0.1,
    grad_mean: float = 0.15,
    grad_std: float = 1.0,
    beta1: float = 0.9,
    beta2: float = 0.95,
    seed: int = 0,
) -> WeightRun:
    """w ← w + η(u − λw) against w ← w + ηu, u = Adam's update on a seeded gradient stream N(μ, σ).

    The gradient sign is flipped so the weight grows (the gradient "wants" it bigger). Illustrative: seed
    002's 1.70 / 3.51 needs its unprinted stream, η and step count.
    """
    steps = _check.count("steps", steps)
    _check.positive("lr", lr)
    _check.non_negative("weight decay", weight_decay)
    g = np.random.default_rng(seed).normal(grad_mean, grad_std, size=steps)
    u = registers(g, beta1, beta2).update
    w_decay = np.empty(steps + 1)
    w_free = np.empty(steps + 1)
    w_decay[0] = w_free[0] = 0.0
    for i in range(steps):  # decoupled decay is applied after the adaptive step, on the current weight
        w_decay[i + 1] = w_decay[i] + lr * (u[i] - weight_decay * w_decay[i])
        w_free[i + 1] = w_free[i] + lr * u[i]
    equilibrium = float(np.mean(u)) / weight_decay if weight_decay > 0 else float("inf")
    return WeightRun(np.arange(steps + 1), w_decay, w_free, u, equilibrium)
