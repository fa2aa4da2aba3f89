"""Gradient clipping: by global norm (direction kept) against by value (direction changed), and what a threshold
does to a trace of gradient norms.

Conventions: norms are global L2 norms of the whole gradient; angles in degrees; the effective learning rate
multiplier is min(1, c/‖g‖) (the fraction of η a step actually gets).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from stepbill.errors import StepbillError
from stepbill.lab import _check


def clip_by_norm(g: npt.ArrayLike, max_norm: float) -> np.ndarray:
    """g · min(1, c/‖g‖): the whole vector is shortened, its direction untouched (torch clip_grad_norm_).

    Source: seed 002 §05; Pascanu et al. 2013."""
    c = _check.positive("max norm", max_norm)
    v = np.asarray(g, dtype=float)
    norm = float(np.linalg.norm(v))
    return v * min(1.0, c / norm) if norm > 0 else v.copy()


def clip_by_value(g: npt.ArrayLike, clip_value: float) -> np.ndarray:
    """Clamp every coordinate to [−c, c] (torch clip_grad_value_): big coordinates shrink, small ones do not,
    so the direction turns. Source: seed 002 §05 ((2, 1) → (1, 1), 18.4°)."""
    c = _check.positive("clip value", clip_value)
    return np.clip(np.asarray(g, dtype=float), -c, c)


def angle_deg(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """Angle between two vectors in degrees (0 = same direction; 0 too when either is the zero vector, which has
    no direction to turn)."""
    va, vb = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    norms = float(np.linalg.norm(va) * np.linalg.norm(vb))
    if norms == 0.0 or not np.isfinite(norms):
        return 0.0
    cos = float(np.dot(va, vb) / norms)
    return float(np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))))


@dataclass(frozen=True)
class TraceStats:
    """What a threshold does to a trace of gradient norms."""

    threshold: float
    steps: int
    triggered: int  # steps with ‖g‖ > c (the clip fires)
    untouched: int
    max_norm: float
    mean_lr_multiplier: float  # mean of min(1, c/‖g‖): the run's average share of η


def lr_multiplier(norms: npt.ArrayLike, threshold: float) -> np.ndarray:
    """Per-step share of η actually applied: min(1, c/‖g‖) (effective lr = c·η/‖g‖ when clipped)."""
    c = _check.positive("threshold", threshold)
    n = np.asarray(norms, dtype=float)
    with np.errstate(divide="ignore"):
        return np.minimum(1.0, c / n)


def trace_stats(norms: npt.ArrayLike, threshold: float = 1.0) -> TraceStats:
    """Trigger count, untouched steps, largest spike and mean lr multiplier of a norm trace.

    Source: seed 002 §05 (its 200-step trace: 4 triggers at 1.00, max 7.39, 180 at 0.10; trace not printed)."""
    n = np.asarray(norms, dtype=float)
    if n.ndim != 1 or n.size == 0:
        raise StepbillError("a norm trace must be a non-empty list of numbers")
    hit = int(np.sum(n > threshold))
    return TraceStats(
        threshold=float(threshold),
        steps=int(n.size),
        triggered=hit,
        untouched=int(n.size - hit),
        max_norm=float(n.max()),
        mean_lr_multiplier=float(np.mean(lr_multiplier(n, threshold))),
    )


def synthetic_trace(steps: int = 200, seed: int = 0, spikes: int = 4) -> np.ndarray:
    """A seeded gradient-norm trace: log-normal with median 0.2 (about 10 % below 0.1, capped below 1.0) plus
    `spikes` spikes of 1.5–8.

    Illustrative only: seed 002's own trace (4 spikes up to 7.39 in 200 steps) is not printed.
    """
    steps = _check.count("steps", steps)
    spikes = _check.count("spikes", spikes, 0)
    if spikes > steps:
        raise StepbillError(f"spikes ({spikes}) cannot exceed steps ({steps})")
    rng = np.random.default_rng(seed)
    norms = np.minimum(0.2 * np.exp(0.55 * rng.standard_normal(steps)), 0.95)
    where = rng.choice(steps, size=spikes, replace=False)
    norms[where] = rng.uniform(1.5, 8.0, size=spikes)
    return norms


def read_trace(path: str | Path) -> np.ndarray:
    """Read one gradient norm per line (blank lines and # comments skipped); bad files raise StepbillError."""
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise StepbillError(f"cannot read trace file {str(p)!r}: {exc.strerror or exc}") from None
    values = []
    for i, line in enumerate(text.splitlines(), start=1):
        s = line.split("#", 1)[0].strip()
        if not s:
            continue
        try:
            values.append(float(s))
        except ValueError:
            raise StepbillError(f"{p}:{i}: not a number: {s!r}") from None
        if not np.isfinite(values[-1]) or values[-1] < 0:
            raise StepbillError(f"{p}:{i}: a gradient norm must be finite and >= 0, got {s!r}")
    if not values:
        raise StepbillError(f"trace file {str(p)!r} has no numbers")
    return np.asarray(values)
