"""Seed 002 §06 and seed 000 §3.2/§6.6: format properties from the bit layout, RNE rounding, lost updates."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stepbill.errors import StepbillError
from stepbill.lab import formats
from tests.lab.facts import FACTS, fact

BF16, FP16, FP32 = formats.get("bf16"), formats.get("fp16"), formats.get("fp32")


def test_bit_split_and_range() -> None:  # fp16-bf16-bit-split, bf16-max-fp16-max, fp16-vs-bf16-3-bits
    split = fact("fp16-bf16-bit-split")["printed"]
    for name, f in (("fp16", FP16), ("bf16", BF16), ("fp32", FP32)):
        assert [f.exp_bits, f.man_bits] == split[name]
    assert BF16.exp_bits == FP32.exp_bits
    mx = fact("bf16-max-fp16-max")["printed"]
    assert float(f"{BF16.max:.1e}") == mx["bf16"]
    assert float(f"{FP16.max:.2e}") == mx["fp16"]  # 65,504; the seed's "6.6e4" is this at 2 digits
    assert BF16.exp_bits - FP16.exp_bits == fact("fp16-vs-bf16-3-bits")["printed"]


def test_digits_gap_and_subnormal() -> None:  # decimal-digits, gap-0.78-vs-0.098, fp16-min-subnormal, fp16-bounds
    d = fact("decimal-digits-2.4-3.3")["printed"]
    assert round(BF16.decimal_digits, 1) == d["bf16"] and round(FP16.decimal_digits, 1) == d["fp16"]
    g = fact("gap-0.78-vs-0.098")["printed"]
    assert BF16.relative_gap == pytest.approx(g["bf16"], abs=5e-5) and BF16.relative_gap == 2.0**-7
    assert FP16.relative_gap == pytest.approx(g["fp16"], abs=5e-6)
    assert BF16.relative_gap / FP16.relative_gap == g["ratio"]
    assert FP16.min_subnormal == pytest.approx(fact("fp16-min-subnormal-5.96e-8")["printed"], abs=5e-11)
    b = fact("fp16-bounds")["printed"]
    assert FP16.min_normal == b["fp16_min_normal"] and FP16.min_subnormal == b["fp16_min_subnormal"]
    assert BF16.min_normal == b["bf16_min_normal"] == 2.0**-126


def test_properties_equal_numpy_finfo() -> None:
    for f, dt in ((FP16, np.float16), (FP32, np.float32)):
        fi = np.finfo(dt)
        assert (f.max, f.min_normal, f.relative_gap) == (float(fi.max), float(fi.tiny), float(fi.eps))
        assert f.min_subnormal == float(fi.smallest_subnormal)


@pytest.mark.torch
def test_properties_equal_torch_finfo() -> None:
    torch = pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")
    pairs = [("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp8_e4m3", torch.float8_e4m3fn),
             ("fp8_e5m2", torch.float8_e5m2)]
    for name, dt in pairs:
        f, fi = formats.get(name), torch.finfo(dt)
        assert (f.max, f.min_normal, f.relative_gap, f.bits) == (fi.max, fi.tiny, fi.eps, fi.bits)


def test_relative_gap_is_the_same_at_1e_minus_30_and_1e30() -> None:  # gap-0.78: "same at 1e-30 and 1e30"
    for x in (1e-30, 1.0, 1e30):
        lo = 2.0 ** math.floor(math.log2(x))  # the binade's power of two
        up = formats.round_nearest_even(lo * (1 + BF16.relative_gap), BF16)
        assert (up - lo) / lo == BF16.relative_gap


def _sample() -> np.ndarray:
    """Random float32 bit patterns, typical gradient magnitudes and exact ties (midpoints of the bf16 grid)."""
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, size=60_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    typical = (rng.standard_normal(60_000) * np.exp2(rng.integers(-40, 20, 60_000))).astype(np.float32)
    grid = formats.round_nearest_even(typical.astype(np.float64), BF16)
    ties = (grid + grid * 2.0**-9).astype(np.float32)  # exactly half a bf16 ulp above a grid point
    x = np.concatenate([bits, typical, ties, np.float32([0.0, -0.0, 1.0, 65504, 65520, 448, 464, 57344, 61440])])
    return x[np.isfinite(x)].astype(np.float64)


def test_rne_matches_bit_trick_and_numpy_float16() -> None:  # bf16-rounding-asserts (rounding route)
    x = _sample()
    assert np.array_equal(formats.round_nearest_even(x, BF16), formats.bf16_by_bits(x))
    with np.errstate(over="ignore"):
        ref16 = x.astype(np.float32).astype(np.float16).astype(np.float64)
    assert np.array_equal(formats.round_nearest_even(x, FP16), ref16)


@pytest.mark.torch
@pytest.mark.parametrize("name", ["bf16", "fp16", "fp8_e5m2", "fp8_e4m3"])
def test_rne_matches_torch_bit_for_bit(name: str) -> None:
    torch = pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8_e5m2": torch.float8_e5m2,
          "fp8_e4m3": torch.float8_e4m3fn}[name]
    x = _sample()
    ref = torch.from_numpy(x.astype(np.float32)).to(dt).to(torch.float64).numpy()
    # torch's float8_e4m3fn cast saturates at ±448; the others overflow to ±inf
    mine = formats.round_nearest_even(x, name, saturate=(name == "fp8_e4m3"))
    assert np.array_equal(mine, ref, equal_nan=True)


def test_lost_update_in_fp16_and_bf16() -> None:  # fp16-1plus1e-3, bf16-lost-update-3e-4
    f = fact("fp16-1plus1e-3")
    w, u = f["inputs"]["w"], f["inputs"]["update"]
    assert formats.add_in(w, u, FP16) - w == pytest.approx(f["printed"]["fp16"], abs=5e-7)
    assert formats.add_in(w, u, FP16) - w == 2.0**-10  # one fp16 gap at 1.0
    assert formats.add_in(w, u, BF16) - w == f["printed"]["bf16"]
    assert u < BF16.relative_gap / 2 and BF16.relative_gap == pytest.approx(f["printed"]["bf16_gap"], abs=5e-5)
    for upd in fact("bf16-lost-update-3e-4")["inputs"]["updates"]:
        assert formats.add_in(1.0, upd, BF16) - 1.0 == fact("bf16-lost-update-3e-4")["printed"]
        assert formats.add_in(1.0, upd, FP32) - 1.0 == pytest.approx(upd, rel=1e-3)  # the fp32 master keeps it


def test_rounding_asserts_below_half_full_gap_and_1000_adds() -> None:  # bf16-rounding-asserts
    f = fact("bf16-rounding-asserts")
    p, i = f["printed"], f["inputs"]
    assert formats.round_nearest_even(i["x"] + 0.49 * i["gap"], BF16) == p["below_half"]
    assert formats.round_nearest_even(i["x"] + i["gap"], BF16) == p["full_gap"]
    assert formats.repeated_add(i["x"], i["small_step"], i["n"], BF16)[0] == p["after_1000"]


def test_stochastic_rounding_recovers_the_update_in_expectation() -> None:
    final = formats.repeated_add(1.0, 1e-3, 1000, BF16, stochastic=True, trials=400, seed=1)
    u = float(formats.round_nearest_even(1e-3, BF16))  # the update itself as bf16 holds it
    expected = 1.0 + 1000 * u
    # per add the rounding noise has variance ≤ gap²/4 with gap ≤ 2^-7 on [1, 2]
    se = math.sqrt(1000 * (2.0**-7) ** 2 / 4 / 400)
    assert abs(final.mean() - expected) < 4 * se
    assert formats.repeated_add(1.0, 1e-3, 1000, BF16)[0] == 1.0  # nearest rounding loses all of it


def test_loss_scaling_fractions_closed_form_and_sampling() -> None:  # loss-scaling (fit, not the seed's data)
    assert "loss-scaling-8.0-0.05-5.9" in FACTS["not_reproducible"]
    mu, sigma = -4.945, 1.6226
    rng = np.random.default_rng(0)
    mags = 10.0 ** rng.normal(mu, sigma, 400_000)
    for k in (0, 10, 24):
        fr = formats.loss_scaling_fractions(k, mu, sigma)
        scaled = mags * 2.0**k
        assert fr["underflow"] == pytest.approx(np.mean(scaled < FP16.min_subnormal), abs=2e-3)
        assert fr["overflow"] == pytest.approx(np.mean(scaled > FP16.max), abs=2e-3)
        assert formats.loss_scaling_fractions(k, mu, sigma, fmt="bf16")["kept"] == pytest.approx(1.0)


def test_h100_ratios() -> None:  # h100-989-495-67
    t = formats.H100_TFLOPS
    p = fact("h100-989-495-67")["printed"]
    assert round(t["bf16 tensor"] / t["tf32 tensor"]) == p["tensor_ratio"]
    assert round(t["bf16 tensor"] / t["fp32 vector"]) == p["misleading_ratio"]


def test_unknown_format_suggests_a_name() -> None:
    with pytest.raises(StepbillError, match="did you mean 'bf16'"):
        formats.get("bf61")
