"""Gradient descent and its fixes, seed 000 §3.3 (`stepbill lab descent`): one learning rate for directions of
different steepness, the stability threshold, Newton's step, heavy-ball momentum on a toy landscape, Muon's msign.

Conventions: quadratics f = a·x²/2 along each direction (curvature a); steps are gradient-descent iterations.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from stepbill.lab import _check


def flat_contraction(steepness_ratio: float, lr_times_a_steep: float = 1.9) -> float:
    """The flat direction's factor per step when η is set by the steep one (η = 1.9/a_steep): x ← (1 − 1.9/ratio)·x.

    Negative below ratio 1.9 (the flat direction overshoots the minimum and oscillates); below 0.95 its
    magnitude exceeds 1 (η > 2/a_flat: it diverges). Source: seed 000 §3.3."""
    return 1.0 - lr_times_a_steep / _check.positive("steepness ratio", steepness_ratio)


def gd_steps_to_half(steepness_ratio: float, lr_times_a_steep: float = 1.9) -> float:
    """Steps for the flat direction to halve when η is set by the steep one (η = 1.9/a_steep):
    |x| shrinks by |1 − 1.9/ratio| per step, so ln ½ / ln|1 − 1.9/ratio| (continuous: fractional steps).

    ratio > 1.9: monotone contraction; ratio = 1.9: the first step lands on the minimum (the formula's limit, 0);
    0.95 < ratio < 1.9: the sign flips every step but |x| still shrinks; ratio ≤ 0.95 (η ≥ 2/a_flat): |factor| ≥ 1,
    the flat direction never halves (math.inf). ln(1 − q) is log1p(−q), exact for huge ratios (q ≈ 0).

    Source: seed 000 §3.3 figure Ⓑ (ratio 25 → 8.77 steps; 1,000 → 364.5)."""
    q = lr_times_a_steep / _check.positive("steepness ratio", steepness_ratio)  # η·a_flat
    if q == 1.0:
        return 0.0
    if q >= 2.0:
        return math.inf
    log_factor = math.log1p(-q) if q < 1.0 else math.log(q - 1.0)  # ln|1 − q| < 0
    return math.log(0.5) / log_factor


def gd_converges(lr: float, curvature: float) -> bool:
    """GD on a·x²/2 multiplies x by (1 − η·a) each step: it converges iff |1 − η·a| < 1, i.e. η < 2/a.

    Source: seed 000 §3.3 (stability threshold)."""
    return abs(1.0 - lr * curvature) < 1.0


def newton_step(x: float, a: float) -> float:
    """|f′|/f″ on f = a·x²: 2ax / 2a = x, the exact distance to the minimum. Source: seed 000 §3.3."""
    return abs(2.0 * a * x) / (2.0 * a)


def toy_loss(x: npt.ArrayLike) -> np.ndarray:
    """Seed 000 §3.3's landscape L(x) = 0.015x² + 0.45cos(1.1x): deep valleys at ±2.706, shallow pits at ±8.101."""
    x = np.asarray(x, dtype=float)
    return 0.015 * x**2 + 0.45 * np.cos(1.1 * x)


def toy_grad(x: npt.ArrayLike) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return 0.03 * x - 0.495 * np.sin(1.1 * x)


def heavy_ball(x0: float = 12.0, lr: float = 2.0, beta: float = 0.8, steps: int = 500) -> np.ndarray:
    """Polyak momentum on the toy loss: v ← βv − η∇L(x), x ← x + v. β = 0 is plain GD.

    x0, η and β are not printed in the seed; with x0 = 12, η = 2 GD stops in the shallow pit (8.101) and
    β = 0.8 reaches the deep valley (2.706) (seed-facts catalog, momentum-toy-landscape)."""
    _check.beta("beta", beta)
    steps = _check.count("steps", steps)
    xs = np.empty(steps + 1)
    xs[0], v = x0, 0.0
    for i in range(steps):
        v = beta * v - lr * float(toy_grad(xs[i]))
        xs[i + 1] = xs[i] + v
    return xs


def msign(m: npt.ArrayLike) -> np.ndarray:
    """Muon's orthogonalised update U·Vᵀ from the SVD M = U·S·Vᵀ (computed exactly, not by Newton–Schulz).

    On a diagonal matrix it is the element-wise sign. Source: seed 000 §3.3 (Muon figure Ⓐ)."""
    u, _, vt = np.linalg.svd(np.asarray(m, dtype=float))
    return u @ vt


def muon_flop_overhead(width: int, batch_tokens: float, ns_steps: int = 5) -> float:
    """Newton–Schulz FLOPs relative to the layer's training matmuls for one m×m weight: T·m/B.

    Each of T iterations costs ~6m³ (three m×m matmuls of 2m³) against the 6·m²·B of forward + backward over
    B tokens. Source: Keller Jordan's Muon write-up, as cited in seed 000 §3.3 (Llama-405B width 16,384,
    16M tokens per batch → 0.51 %, "below 1 %"). FLOP count, not wall-clock."""
    return _check.count("ns_steps", ns_steps) * _check.count("width", width) / _check.positive("batch tokens",
                                                                                              batch_tokens)
