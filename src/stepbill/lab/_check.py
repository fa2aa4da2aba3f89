"""Input validation shared by the lab topics: every failure is a one-line StepbillError."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from stepbill.errors import StepbillError


def beta(name: str, value: float) -> float:
    """An EMA coefficient must lie in [0, 1): β = 1 would never forget and never learn."""
    if not (0.0 <= value < 1.0) or math.isnan(value):
        raise StepbillError(f"{name} must be in [0, 1), got {value}")
    return float(value)


def positive(name: str, value: float) -> float:
    """A strictly positive finite number (learning rate, threshold, model size)."""
    if not (value > 0.0) or math.isinf(value):
        raise StepbillError(f"{name} must be > 0, got {value}")
    return float(value)


def non_negative(name: str, value: float) -> float:
    """A finite number >= 0 (weight decay, floor)."""
    if not (value >= 0.0) or math.isinf(value):
        raise StepbillError(f"{name} must be >= 0, got {value}")
    return float(value)


def fraction(name: str, value: float) -> float:
    """A number in [0, 1] (floor as a fraction of peak, decay fraction)."""
    if not (0.0 <= value <= 1.0):
        raise StepbillError(f"{name} must be in [0, 1], got {value}")
    return float(value)


def count(name: str, value: int, low: int = 1) -> int:
    """An integer count (steps, ranks, parameters) of at least `low`."""
    if int(value) != value or value < low:
        raise StepbillError(f"{name} must be an integer >= {low}, got {value}")
    return int(value)


def steps_array(name: str, steps: npt.ArrayLike) -> np.ndarray:
    """Step indices must be >= 0 (a negative step has no learning rate)."""
    arr = np.asarray(steps, dtype=float)
    if np.any(arr < 0) or np.any(np.isnan(arr)):
        raise StepbillError(f"{name} must be >= 0, got a minimum of {np.nanmin(arr)}")
    return arr
