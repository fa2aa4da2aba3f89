"""Seed 000 §1.1–1.5 (`stepbill lab backprop`): finite differences vs backprop, the chain of local rates,
softmax + cross-entropy's p − y, and backward = 2× forward counted by FlopCounterMode."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from stepbill.errors import StepbillError
from stepbill.lab import backprop
from tests.conftest import run_cli


def test_finite_difference_cost() -> None:
    """bp-finite-diff-10k-years: 3e11 forwards × 1 s = 9,506 years ("nearly 10,000")."""
    assert round(backprop.finite_difference_years(3e11, 1.0)) == 9506
    assert backprop.finite_difference_years(671e9, 1.0) == pytest.approx(21_263, abs=1)  # the catalog's V3 note


def test_chain_rule_numpy_matches_finite_differences() -> None:
    """A real (tiny) network: the chain of local rates equals central differences on all 67 parameters."""
    net = backprop.tiny_net(seed=3)
    checks = backprop.gradient_checks(net, with_torch=False)
    assert checks["params"] == 4 * 8 + 8 + 8 * 3 + 3
    assert checks["chain_vs_finite_difference"] < 1e-8 and checks["largest_gradient"] > 1e-3


def test_chain_rule_matches_autograd() -> None:
    pytest.importorskip("torch")
    checks = backprop.gradient_checks(backprop.tiny_net(seed=1), with_torch=True)
    assert checks["chain_vs_autograd"] < 1e-12


def test_softmax_cross_entropy_is_p_minus_y() -> None:
    """bp-softmax-ce-grad: probabilities 0.3 / 0.2 / 0.5 with the second correct → [0.3, −0.8, 0.5]."""
    z = np.log([0.3, 0.2, 0.5])
    assert backprop.softmax_ce_grad(z, 1) == pytest.approx([0.3, -0.8, 0.5])
    fd = backprop.central_difference(lambda v: backprop.cross_entropy(v, 1), z.copy())
    assert fd == pytest.approx([0.3, -0.8, 0.5], abs=1e-8)
    torch = pytest.importorskip("torch")
    assert torch is not None and backprop.autograd_softmax_ce(z, 1) == pytest.approx([0.3, -0.8, 0.5], abs=1e-12)


def test_flop_counter_backward_is_twice_forward() -> None:
    """bp-3x-compute: FlopCounterMode on nn.Linear: backward = 2 × forward; 1 × when the input needs no grad."""
    pytest.importorskip("torch")
    c = backprop.counted_linear_flops(64, 32, 48)
    assert c["forward"] == 2 * 64 * 32 * 48 == backprop.matmul_flops(64, 32, 48)["forward"]
    assert c["backward"] == 2 * c["forward"]
    first = backprop.counted_linear_flops(64, 32, 48, input_requires_grad=False)
    assert first["backward"] == first["forward"]


def test_vanishing_and_exploding_chain() -> None:
    """vg-0.8-pow-59, vg-1.2-pow-59, vg-ten-orders, vg-sigmoid-max-0.25, bp-exchange-rate-chain."""
    assert backprop.chain_power(0.8, 59) == pytest.approx(1.916e-6, rel=1e-3)
    assert round(backprop.chain_power(1.2, 59)) == 46956
    assert backprop.sigmoid_slope_max() == pytest.approx(0.25)
    assert backprop.chain_rate([2, 0.5, 3]) == 3.0
    with pytest.raises(StepbillError):
        backprop.chain_rate([])


def test_torch_missing_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    code, out, err = run_cli(["lab", "backprop"], capsys)
    assert code == 2 and "stepbill[measure]" in err and len(err.strip().splitlines()) == 1 and not out
    code, out, _ = run_cli(["lab", "backprop", "--no-torch", "--json"], capsys)
    assert code == 0 and json.loads(out)["values"]["finite_difference_years"] == pytest.approx(9506, abs=1)


def test_descent_and_memory_topics(capsys: pytest.CaptureFixture[str]) -> None:
    """gd-half-steps-ratio25/1000, momentum-toy-landscape, muon-diag-sign via `lab descent`; `lab memory`."""
    code, out, _ = run_cli(["lab", "descent", "--json"], capsys)
    v = json.loads(out)["values"]
    assert code == 0 and round(v["steps_to_half"]["25"], 2) == 8.77 and round(v["steps_to_half"]["1000"], 1) == 364.5
    assert round(v["final_x_plain_gd"], 3) == 8.101 and round(v["final_x_heavy_ball"], 3) == 2.706
    assert v["msign_of_diag"] == pytest.approx([1, -1, 1, -1])
    code, out, _ = run_cli(["lab", "memory", "--json"], capsys)
    v = json.loads(out)["values"]
    assert code == 0 and round(v["resident_gib"]["7e+09_x2"], 1) == 52.2 and v["optimizer_step_bytes_per_param"] == 28
