"""Adam's two registers: EMA shares, window, bias correction, update RMS, and its lineage.

Conventions: step t counts from 1; a "share" is the weight of one past gradient in the register (shares sum
to 1 after bias correction); updates are in units of the learning rate η (a step moves a weight by
η · update). eps is ignored (taken as 0) unless passed, as in seed 002, since 1e-8 ≪ any √v̂ there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from stepbill.errors import StepbillError
from stepbill.lab import _check


def window(beta: float) -> float:
    """Effective memory of an EMA in steps: 1/(1−β). Source: seed 002 §01, seed 000 §3.6 (0.99 → 100)."""
    return 1.0 / (1.0 - _check.beta("beta", beta))


def bias_correction(beta: float, t: npt.ArrayLike) -> np.ndarray | float:
    """The factor 1 − βᵗ an EMA started at 0 falls short by after t steps. Source: Kingma & Ba 2015, Alg. 1."""
    _check.beta("beta", beta)
    t_arr = _check.steps_array("t", t)
    out = 1.0 - beta**t_arr
    return float(out) if out.ndim == 0 else out


def ema_shares(beta: float, t: int, bias_corrected: bool = True) -> np.ndarray:
    """Share of each of the t gradients in the register at step t, oldest (step 1) first.

    Raw share of step i: βᵗ⁻ⁱ(1−β); bias correction divides by 1−βᵗ so the shares sum to 1.
    Source: seed 002 §01 (β = 0.9, t = 12: latest 13.9 %, oldest 4.4 %; β = 0.95: latest 10.9 %).
    """
    _check.beta("beta", beta)
    t = _check.count("steps", t)
    age = np.arange(t - 1, -1, -1, dtype=float)  # oldest has age t-1
    raw = beta**age * (1.0 - beta)
    return raw / (1.0 - beta**t) if bias_corrected else raw


@dataclass(frozen=True)
class Registers:
    """Per-step Adam state for one gradient stream (arrays of length T, index 0 = step 1)."""

    m: np.ndarray  # raw first moment (uncorrected sum)
    v: np.ndarray  # raw second moment
    m_hat: np.ndarray  # m / (1 − β₁ᵗ)
    v_hat: np.ndarray  # v / (1 − β₂ᵗ)
    update: np.ndarray  # m̂ / (√v̂ + eps), in units of η


def registers(
    grads: npt.ArrayLike, beta1: float = 0.9, beta2: float = 0.95, eps: float = 0.0, corrected: bool = True
) -> Registers:
    """Run Adam's two EMAs over a gradient stream (time along axis 0; extra axes are independent parameters).

    m_t = β₁m + (1−β₁)g, v_t = β₂v + (1−β₂)g². With `corrected=False` m̂ = m and v̂ = v (RMSProp-style, no
    bias correction). Source: Kingma & Ba 2015, Alg. 1; seed 002 §01.
    """
    _check.beta("beta1", beta1)
    _check.beta("beta2", beta2)
    g = np.asarray(grads, dtype=float)
    if g.ndim == 0 or g.shape[0] == 0:
        raise StepbillError("gradient stream must have at least one step")
    m = np.empty_like(g)
    v = np.empty_like(g)
    m_prev = np.zeros_like(g[0])
    v_prev = np.zeros_like(g[0])
    for i in range(g.shape[0]):  # a loop, not a closed form: this is the reference the closed forms are checked on
        m_prev = beta1 * m_prev + (1.0 - beta1) * g[i]
        v_prev = beta2 * v_prev + (1.0 - beta2) * g[i] ** 2
        m[i], v[i] = m_prev, v_prev
    t = np.arange(1, g.shape[0] + 1, dtype=float).reshape((-1,) + (1,) * (g.ndim - 1))
    m_hat = m / (1.0 - beta1**t) if corrected else m
    v_hat = v / (1.0 - beta2**t) if corrected else v
    with np.errstate(divide="ignore", invalid="ignore"):
        update = m_hat / (np.sqrt(v_hat) + eps)
    return Registers(m=m, v=v, m_hat=m_hat, v_hat=v_hat, update=update)


def demo_stream(steps: int = 12, seed: int = 0) -> np.ndarray:
    """A seeded 12-step gradient stream whose first and last values are the seed's 1.353 and 0.769.

    Seed 002 prints only g₁ = 1.353 and g₁₂ = 0.769; the middle is a seeded draw (N(0.45, 0.35)), so the
    register readings it gives are illustrative, not the seed's 0.470 / 0.677.
    """
    steps = _check.count("steps", steps, 2)
    g = np.random.default_rng(seed).normal(0.45, 0.35, size=steps)
    g[0], g[-1] = 1.353, 0.769
    return g


def update_rms_closed_form(beta1: float) -> float:
    """RMS of Adam's update under pure-noise gradients: √((1−β₁)/(1+β₁)) (v̂ → σ², m̂ an EMA of white noise).

    Source: seed 000 §3.3 (β₁ = 0.9 → 0.2294; Su, kexue.fm 11267).
    """
    b = _check.beta("beta1", beta1)
    return float(np.sqrt((1.0 - b) / (1.0 + b)))


def update_rms_monte_carlo(
    beta1: float = 0.9, beta2: float = 0.999, n_params: int = 1000, steps: int = 4000, seed: int = 0
) -> float:
    """Seeded simulation of the same RMS: Adam on N(0, 1) gradients, RMS of updates over the last half."""
    n_params = _check.count("n_params", n_params)
    steps = _check.count("steps", steps, 2)
    g = np.random.default_rng(seed).standard_normal((steps, n_params))
    u = registers(g, beta1, beta2).update
    return float(np.sqrt(np.mean(u[steps // 2 :] ** 2)))  # skip the warm-up of v̂


def lineage_constant_gradient(steps: int, beta1: float = 0.9, beta2: float = 0.999) -> dict[str, np.ndarray]:
    """Effective step (in units of η, gradient = 1 every step) of AdaGrad, RMSProp and Adam with/without correction.

    AdaGrad 1/√t; RMSProp without bias correction 1/√(1−β₂ᵗ); Adam without correction (1−β₁ᵗ)/√(1−β₂ᵗ);
    Adam 1. Source: seed 000 §3.4 (4.1 % at t = 600, 32× and 6.6× with β₂ = 0.999 assumed).
    """
    steps = _check.count("steps", steps)
    _check.beta("beta1", beta1)
    _check.beta("beta2", beta2)
    t = np.arange(1, steps + 1, dtype=float)
    return {
        "step": t,
        "adagrad": 1.0 / np.sqrt(t),
        "rmsprop_no_correction": 1.0 / np.sqrt(1.0 - beta2**t),
        "adam_no_correction": (1.0 - beta1**t) / np.sqrt(1.0 - beta2**t),
        "adam": np.ones_like(t),
    }


def palm_beta2(k: npt.ArrayLike) -> np.ndarray | float:
    """PaLM's step-dependent β₂(k) = 1 − k^−0.8 (window k^0.8 grows with training). Source: seed 000 §3.6."""
    k_arr = np.asarray(k, dtype=float)
    if np.any(k_arr < 1):
        raise StepbillError(f"PaLM step k must be >= 1, got a minimum of {k_arr.min()}")
    out = 1.0 - k_arr**-0.8
    return float(out) if out.ndim == 0 else out
