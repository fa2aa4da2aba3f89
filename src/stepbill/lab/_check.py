"""Input validation of the lab topics: every failure is a one-line StepbillError.

`OPTIONS` declares, once, the rule of every `stepbill lab TOPIC` option (spec/schema.py rules: finite, bounded
so that nothing hangs or exhausts memory); the lab CLI checks each command's options against it before any
arithmetic. The functions below guard the library route (calling stepbill.lab.* from Python).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from stepbill.errors import StepbillError, shown
from stepbill.spec.schema import Int, Real, Rule

#: An EMA coefficient: β = 1 would never forget and never learn.
BETA = Real(0.0, 1.0, high_open=True)
#: A learning rate: at least 1e-12 (subnormal rates overflow the ratios), at most 10 (no run goes above it).
LR = Real(1e-12, 10.0)
#: A seed of numpy's generator: 0 … 2^32 − 1.
SEED = Int(0, 2**32 - 1)
#: Simulated steps: the simulations are O(steps × parameters); 10^9 steps hung.
SIM_STEPS = Int(2, 100_000)
#: Steps of a schedule or run: 10^7 (well above Llama 3's 1.2M) keeps the per-step arrays under 100 MB.
RUN_STEPS = Int(1, 10_000_000)
#: GPUs or ranks drawn one by one (the step-by-step ring, pipeline stages): 64 keeps the tables printable.
DRAWN_RANKS = Int(2, 64)
#: A parallel degree or GPU count in a formula: 2^20.
DEGREE = Int(1, 2**20)
#: A number that lives in fp32 (a weight, an update): |x| ≤ 10^38.
FP32_VALUE = Real(-1e38, 1e38)
#: A model size in parameters: at least one parameter (0 divides by zero), at most 10^15.
PARAMS = Real(1.0, 1e15)
#: GPU memory in GiB.
CARD_GIB = Real(1e-6, 2.0**20)
#: Links of lab backprop's chain: 0.8^links and 1.2^links stay normal floats up to 3,174 links (0.8^3,175 is
#: subnormal, 0.8^3,340 underflows to 0, 1.2^3,894 overflows) and --plot's log axis overflows from ~2,900 links;
#: 2,000 is the round maximum (0.8^2,000 ≈ 1.5e-194, 1.2^2,000 ≈ 2.3e158).
LINKS = Int(0, 2_000)
#: lab descent's steepness ratio a_steep/a_flat: at or below 0.95 the flat direction never halves (an answer, inf); above
#: 10^15 (≈ 1/ε of float64) the curvatures are numerically indistinguishable from a singular problem.
STEEPNESS_RATIO = Real(1e-12, 1e15)
#: A side of the Linear layer lab backprop counts in torch (X[S, k] · W[k, n]): 4,096³ takes ~5 s on 2 CPU cores.
LINEAR_SIDE = Int(1, 4_096)

#: The rule of every lab option, by topic and parameter name (list options: the rule of each element).
OPTIONS: dict[str, dict[str, Rule]] = {
    "adam": {"beta1": BETA, "beta2": BETA, "steps": SIM_STEPS, "scale": Real(1e-12, 1e6),
             "seed": SEED},
    "decay": {"lr": LR, "weight_decay": Real(1e-12, 100.0), "params": PARAMS,
              "card_gib": CARD_GIB, "shards": DEGREE, "seed": SEED},
    "warmup": {"lr": LR, "warmup_steps": Int(0, RUN_STEPS.high), "total_steps": RUN_STEPS, "betas2": BETA,
               "steps": Int(1, 10_000), "params": Int(1, 1_000), "seed": SEED},
    "schedule": {"peak": LR, "warmup_steps": Int(0, RUN_STEPS.high), "total": RUN_STEPS,
                 "floor": Real(0.0, 1.0), "decay_frac": Real(0.0, 1.0)},
    "clip": {"threshold": Real(1e-12, 1e12), "steps": Int(1, 1_000_000), "seed": SEED,
             "vector": Real(-1e150, 1e150), "clip_value": Real(1e-12, 1e12)},
    "formats": {"value": FP32_VALUE, "update": FP32_VALUE, "adds": Int(1, 100_000), "scales": Int(0, 127),
                "seed": SEED},
    # rates: 64 local rates of at most 10^4 multiply to at most 10^256, still finite
    "backprop": {"params": PARAMS, "seconds": Real(1e-12, 1e12), "rates": Real(-1e4, 1e4), "links": LINKS,
                 "tokens": LINEAR_SIDE, "k": LINEAR_SIDE, "n": LINEAR_SIDE, "seed": SEED},
    "descent": {"ratios": STEEPNESS_RATIO, "x0": Real(-1e6, 1e6), "lr": LR, "beta": BETA, "steps": Int(1, 100_000),
                "width": Int(1, 2**20), "batch_tokens": Real(1.0, 1e15)},
    "memory": {"params": PARAMS, "shards": DEGREE, "card_gib": CARD_GIB},
    "collectives": {"gpus": Int(2, 2**20), "message_gib": Real(1e-9, 2.0**20), "ring": DRAWN_RANKS,
                    "hidden": Int(1, 2**20), "tp": Int(2, 2**10), "tokens": Int(1, 2**30),
                    "stages": Int(1, 64), "microbatches": Int(1, 4096), "dp": DEGREE},
}
#: Longest comma-separated list an option takes.
MAX_LIST = 64


def option(topic: str, name: str, value: object, flag: str = "") -> None:
    """Check one lab option (a list option element by element) against OPTIONS; `flag` names it."""
    rule = OPTIONS.get(topic, {}).get(name)
    if rule is None:
        return
    flag = flag or "--" + name.replace("_", "-")
    values = value if isinstance(value, tuple | list) else (value,)
    if not 0 < len(values) <= MAX_LIST:
        raise StepbillError(f"{flag} takes 1 to {MAX_LIST} values, got {len(values):,}")
    for v in values:
        if not rule.accepts(v):
            raise StepbillError(f"{flag} must be {rule.allowed}, got {shown(v)}")


def beta(name: str, value: float) -> float:
    """An EMA coefficient must lie in [0, 1): β = 1 would never forget and never learn."""
    if not BETA.accepts(value):
        raise StepbillError(f"{name} must be in [0, 1), got {value}")
    return float(value)


def positive(name: str, value: float) -> float:
    """A strictly positive finite number (learning rate, threshold, model size)."""
    if not (value > 0.0) or math.isinf(value):
        raise StepbillError(f"{name} must be > 0 and finite, got {value}")
    return float(value)


def non_negative(name: str, value: float) -> float:
    """A finite number >= 0 (weight decay, floor)."""
    if not (value >= 0.0) or math.isinf(value):
        raise StepbillError(f"{name} must be >= 0 and finite, got {value}")
    return float(value)


def fraction(name: str, value: float) -> float:
    """A number in [0, 1] (floor as a fraction of peak, decay fraction)."""
    if not (0.0 <= value <= 1.0):
        raise StepbillError(f"{name} must be in [0, 1], got {value}")
    return float(value)


def count(name: str, value: int, low: int = 1) -> int:
    """An integer count (steps, ranks, parameters) of at least `low`."""
    if (isinstance(value, float) and not math.isfinite(value)) or int(value) != value or value < low:
        raise StepbillError(f"{name} must be an integer >= {low}, got {value}")
    return int(value)


def steps_array(name: str, steps: npt.ArrayLike) -> np.ndarray:
    """Step indices must be finite and >= 0 (a negative step has no learning rate)."""
    arr = np.asarray(steps, dtype=float)
    if np.any(arr < 0) or not np.all(np.isfinite(arr)):
        raise StepbillError(f"{name} must be finite and >= 0, got a minimum of {np.nanmin(arr)}")
    return arr
