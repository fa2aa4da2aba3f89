"""Seed 000 §3.3 maths shown by the adam topic: GD on different steepness, Newton, momentum toy, Muon."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stepbill.lab import descent
from tests.lab.facts import fact


@pytest.mark.parametrize("claim", ["gd-half-steps-ratio25", "gd-half-steps-ratio1000"])
def test_gd_steps_to_half_within_one_step_of_simulation(claim: str) -> None:
    f = fact(claim)
    r = f["inputs"]["ratio"]
    closed = descent.gd_steps_to_half(r)
    assert closed == pytest.approx(f["catalog_computed"], abs=0.005)
    # simulate: η = 1.9/a_steep with a_steep = r, a_flat = 1; count steps until x ≤ ½
    x, steps = 1.0, 0
    while x > 0.5:
        x *= 1 - 1.9 / r
        steps += 1
    assert abs(steps - closed) <= 1


def test_stability_threshold_and_newton() -> None:  # gd-stability-threshold, newton-step-parabola
    assert descent.gd_converges(0.95 * 2 / 3.0, 3.0) and not descent.gd_converges(1.05 * 2 / 3.0, 3.0)
    assert descent.newton_step(2.5, 7.0) == pytest.approx(2.5)


def test_momentum_reaches_the_deep_valley() -> None:  # momentum-toy-landscape (x0, lr, β assumed)
    f = fact("momentum-toy-landscape")
    gd = descent.heavy_ball(f["inputs"]["x0"], f["inputs"]["lr"], 0.0)[-1]
    hb = descent.heavy_ball(f["inputs"]["x0"], f["inputs"]["lr"], 0.8)[-1]
    assert gd == pytest.approx(f["catalog_computed"]["shallow"], abs=1e-3)
    assert hb == pytest.approx(f["catalog_computed"]["deep"], abs=1e-3)
    assert descent.toy_grad(gd) == pytest.approx(0.0, abs=1e-6) and descent.toy_loss(hb) < descent.toy_loss(gd)


def test_msign_of_a_diagonal_is_sign() -> None:  # muon-diag-sign
    f = fact("muon-diag-sign")
    assert np.diag(descent.msign(np.diag(f["inputs"]["diag"]))) == pytest.approx(f["printed"])
    assert math.isclose(abs(np.linalg.det(descent.msign(np.random.default_rng(0).normal(size=(5, 5))))), 1.0)
