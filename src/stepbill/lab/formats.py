"""Floating-point formats from their bit layout: range, precision, round-to-nearest-even, stochastic rounding,
the lost update, and loss scaling.

Conventions: `relative_gap` is the spacing between 1 and the next number (2^−mantissa bits): every binade has the
same relative spacing, so this is the gap as a fraction of the binade's power of two. Decimal digits are
(m+1)·log10 2. Rounding works on float64 inputs and returns float64 values that are exactly representable in the
target format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from stepbill.errors import unknown_name
from stepbill.lab import _check


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point layout: 1 sign bit, `exp_bits` exponent bits, `man_bits` stored mantissa bits.

    `ieee` formats reserve the all-ones exponent for inf/NaN; the fp8 "fn" format (e4m3fn) has no inf and only
    uses the all-ones exponent with an all-ones mantissa for NaN, so it reaches one binade higher.
    """

    name: str
    exp_bits: int
    man_bits: int
    ieee: bool = True

    @property
    def bits(self) -> int:
        return 1 + self.exp_bits + self.man_bits

    @property
    def bias(self) -> int:
        return 2 ** (self.exp_bits - 1) - 1

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number: 1 − bias."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite number."""
        top = 2**self.exp_bits - (2 if self.ieee else 1)
        return top - self.bias

    @property
    def max(self) -> float:
        """Largest finite value: (2 − 2^−m)·2^emax (IEEE); e4m3fn loses its top mantissa code to NaN."""
        frac = 2.0 - 2.0 ** -(self.man_bits if self.ieee else self.man_bits - 1)
        return frac * 2.0**self.emax

    @property
    def min_normal(self) -> float:
        return 2.0**self.emin

    @property
    def min_subnormal(self) -> float:
        """2^(emin − m): one unit in the last place below the smallest normal."""
        return 2.0 ** (self.emin - self.man_bits)

    @property
    def relative_gap(self) -> float:
        """2^−m: the gap after 1.0 (bf16 0.78 %, fp16 0.098 %). Source: seed 002 §06."""
        return 2.0**-self.man_bits

    @property
    def decimal_digits(self) -> float:
        """(m+1)·log10 2 significant decimal digits (bf16 2.4, fp16 3.3). Source: seed 002 §06."""
        return (self.man_bits + 1) * math.log10(2.0)

    @property
    def has_inf(self) -> bool:
        return self.ieee

    def properties(self) -> dict[str, float | int | str]:
        """All derived numbers, for tables and JSON."""
        return {
            "name": self.name,
            "bits": self.bits,
            "exponent_bits": self.exp_bits,
            "mantissa_bits": self.man_bits,
            "max": self.max,
            "min_normal": self.min_normal,
            "min_subnormal": self.min_subnormal,
            "relative_gap": self.relative_gap,
            "decimal_digits": self.decimal_digits,
        }


FORMATS: dict[str, FloatFormat] = {
    f.name: f
    for f in (
        FloatFormat("fp32", 8, 23),
        FloatFormat("bf16", 8, 7),
        FloatFormat("fp16", 5, 10),
        FloatFormat("fp8_e4m3", 4, 3, ieee=False),  # OCP e4m3fn (torch.float8_e4m3fn)
        FloatFormat("fp8_e5m2", 5, 2),
    )
}

# H100 SXM dense throughput, TFLOPS (NVIDIA datasheet, cited by seed 002 §06): bf16 and TF32 run on the same
# tensor cores (≈2×); vector fp32 is another datapath, so 989/67 ≈ 15× compares different units.
H100_TFLOPS = {"bf16 tensor": 989.0, "tf32 tensor": 495.0, "fp32 vector": 67.0}


def get(name: str | FloatFormat) -> FloatFormat:
    """Look a format up by name ("bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e5m2")."""
    if isinstance(name, FloatFormat):
        return name
    if name not in FORMATS:
        raise unknown_name("format", name, FORMATS)
    return FORMATS[name]


def _quantum(a: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Spacing of the format's grid around |x| = a: 2^(e − m) with e = floor(log2 a), floored at emin."""
    _, k = np.frexp(a)  # a = f·2^k with f in [0.5, 1) → floor(log2 a) = k − 1, exactly
    e = np.maximum(k.astype(np.int64) - 1, fmt.emin)
    return np.ldexp(1.0, e - fmt.man_bits)


def _finish(sign: np.ndarray, r: np.ndarray, x: np.ndarray, fmt: FloatFormat, saturate: bool) -> np.ndarray:
    """Apply overflow policy and signs: IEEE → ±inf; e4m3fn → NaN (OCP non-saturating); saturate → ±max."""
    over = r > fmt.max
    overflow_value = fmt.max if saturate else (np.inf if fmt.has_inf else np.nan)
    r = np.where(over, overflow_value, r)
    out = sign * r
    return np.where(np.isnan(x), np.nan, out)


def round_nearest_even(x: npt.ArrayLike, fmt: str | FloatFormat, saturate: bool = False) -> np.ndarray:
    """Round to the nearest representable value, ties to the even mantissa (IEEE default), with subnormals.

    Scaling by the power-of-two quantum is exact in float64 and np.rint rounds half to even, so this is exact
    for any format with at most 52 mantissa bits. Source: IEEE 754-2008 §4.3.1; seed 000 §3.2 and 002 §06.
    """
    f = get(fmt)
    xa = np.asarray(x, dtype=np.float64)
    a = np.abs(xa)
    finite = np.isfinite(a)
    a_safe = np.where(finite, a, 1.0)
    q = _quantum(a_safe, f)
    r = np.where(finite, np.rint(a_safe / q) * q, np.inf)
    return _finish(np.sign(xa) + (xa == 0) * np.copysign(1.0, xa), r, xa, f, saturate)


def round_stochastic(
    x: npt.ArrayLike, fmt: str | FloatFormat, rng: np.random.Generator | None = None
) -> np.ndarray:
    """Round down or up to the neighbouring grid points with probability proportional to proximity, so the
    expected result equals x (unbiased). Source: seed 000 §3.2 (stochastic rounding recovers small updates)."""
    f = get(fmt)
    rng = rng or np.random.default_rng(0)
    xa = np.asarray(x, dtype=np.float64)
    a = np.abs(xa)
    finite = np.isfinite(a)
    q = _quantum(np.where(finite, a, 1.0), f)
    with np.errstate(invalid="ignore", over="ignore"):  # inf/inf past the format's range: masked by `finite`
        lo = np.floor(a / q)
        up = rng.random(np.shape(a)) < np.where(finite, a / q - lo, 0.0)
        r = np.where(finite & np.isfinite(lo), (lo + up) * q, np.inf)
    return _finish(np.sign(xa), r, xa, f, saturate=False)


def bf16_by_bits(x: npt.ArrayLike) -> np.ndarray:
    """bf16 rounding by bit surgery on float32: add 0x7FFF + (bit 16) and keep the top 16 bits (RNE).

    An independent route to `round_nearest_even(x, "bf16")` for float32 inputs (NaN not handled).
    Source: seed-facts catalog item 17; the same trick as PyTorch's c10::round_to_nearest_even.
    """
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def add_in(w: float, update: float, fmt: str | FloatFormat) -> float:
    """w + update computed in the format: both operands rounded, the exact sum rounded once (IEEE addition).

    Source: seed 002 §06 (1 + 1e-3: +9.77e-4 in fp16, +0 in bf16)."""
    f = get(fmt)
    a = round_nearest_even(w, f)
    b = round_nearest_even(update, f)
    return float(round_nearest_even(a + b, f))  # float64 holds the exact sum of two ≤ 24-bit operands


def repeated_add(
    w: float, update: float, n: int, fmt: str | FloatFormat, stochastic: bool = False, trials: int = 1, seed: int = 0
) -> np.ndarray:
    """Add `update` to `w` n times in the format, rounding after every add; returns the `trials` final values.

    With nearest rounding a sub-half-gap update is lost every time (1,000 adds of 1e-3 to 1.0 in bf16 stay
    1.0); stochastic rounding keeps it in expectation. Source: seed 000 §3.2, seed 002 §06.
    """
    n = _check.count("n (adds)", n, 0)
    trials = _check.count("trials", trials)
    f = get(fmt)
    rng = np.random.default_rng(seed)
    u = float(round_nearest_even(update, f))
    acc = np.full(trials, float(round_nearest_even(w, f)))
    for _ in range(n):
        acc = round_stochastic(acc + u, f, rng) if stochastic else round_nearest_even(acc + u, f)
    return acc


def _normal_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def loss_scaling_fractions(
    scale_log2: float, mu_log10: float = -4.945, sigma_log10: float = 1.6226, fmt: str | FloatFormat = "fp16"
) -> dict[str, float]:
    """Share of gradient magnitudes that underflow (|g|·s < min subnormal) or overflow (|g|·s > max) after
    multiplying the loss by s = 2^k, for log10|g| ~ N(μ, σ).

    Default μ, σ are the seed-facts catalog's best fit to seed 002 §06 (8.0 % / 0.05 % / 5.9 %); the seed does
    not print its distribution, so they are an assumption, not the seed's.
    """
    f = get(fmt)
    _check.positive("sigma", sigma_log10)
    shift = scale_log2 * math.log10(2.0)
    under = _normal_cdf((math.log10(f.min_subnormal) - shift - mu_log10) / sigma_log10)
    over = 1.0 - _normal_cdf((math.log10(f.max) - shift - mu_log10) / sigma_log10)
    return {"scale_log2": float(scale_log2), "underflow": under, "overflow": over, "kept": 1.0 - under - over}
