"""Seed 002 §03: the first step is sign(g), the √v̂ band, and what linear warmup buys."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepbill.errors import StepbillError
from stepbill.lab import adam, warmup
from tests.lab.facts import FACTS, fact


@given(
    st.lists(st.floats(-1e6, 1e6).filter(lambda x: abs(x) > 1e-30), min_size=1, max_size=20),
    st.floats(0.0, 0.999),
    st.floats(0.0, 0.9999),
)
@settings(max_examples=60, deadline=None)
def test_first_update_is_sign_for_every_beta2(g: list[float], b1: float, b2: float) -> None:  # warmup-step1-pm1
    u = warmup.first_update(g, b1, b2)
    assert np.abs(u) == pytest.approx(np.full(len(g), fact("warmup-step1-pm1")["printed"]))
    assert np.array_equal(np.sign(u), np.sign(g))


def test_first_step_displacement_with_and_without_warmup() -> None:  # warmup-first-step-1.5e-7
    f = fact("warmup-first-step-1.5e-7")
    lr, w = f["inputs"]["lr"], f["inputs"]["warmup"]
    assert warmup.first_step_displacement(lr, 0) == pytest.approx(f["printed"]["no_warmup"])
    assert warmup.first_step_displacement(lr, w) == pytest.approx(f["printed"]["warmup"])
    assert f["printed"]["no_warmup"] / f["printed"]["warmup"] == pytest.approx(w)


def test_warmup_fraction_and_beta2_window() -> None:  # warmup-fraction
    f = fact("warmup-fraction")
    assert adam.window(f["inputs"]["beta2"]) == pytest.approx(f["printed"]["window"])
    for (w, t), frac in zip(f["inputs"]["cases"], f["printed"]["fractions"], strict=True):
        assert warmup.warmup_fraction(w, t) == pytest.approx(frac)
    with pytest.raises(StepbillError, match="longer than the run"):
        warmup.warmup_fraction(2000, 1000)


def test_sqrt_v_band_step1_is_the_sample_and_narrows_with_beta2() -> None:  # vband-* (mechanism only)
    long_ = warmup.sqrt_v_band(0.999, steps=1000, n_params=12, seed=0)
    short = warmup.sqrt_v_band(0.95, steps=1000, n_params=12, seed=0)
    assert long_[0] == pytest.approx(short[0])  # step 1: each is |g₁|/σ whatever β₂
    assert np.abs(long_[-1] - 1).max() < np.abs(short[-1] - 1).max()
    assert {"vband-step1-0.01-2.86", "vband-step1000"} <= set(FACTS["not_reproducible"])


@pytest.mark.parametrize("beta2", [0.95, 0.999])
def test_band_theory_matches_simulation(beta2: float) -> None:
    sim = warmup.sqrt_v_band(beta2, steps=1000, n_params=3000, seed=4)[-1]
    assert np.std(sim) / np.mean(sim) == pytest.approx(warmup.sqrt_v_relative_std(beta2, 1000), rel=0.1)


def test_count_large_updates_on_a_biased_stream() -> None:  # warmup-30-of-40 (mechanism only)
    g = np.random.default_rng(0).normal(0.75, 1.0, size=40)
    n = warmup.count_large_updates(g)
    u = adam.registers(g, 0.9, 0.95).update
    assert n == int(np.sum(np.abs(u) > 0.5))


def test_negative_step_is_rejected() -> None:
    with pytest.raises(StepbillError, match="step"):
        warmup.warmup_factor(-3, 100)
