"""Seed 002 §05: clip by norm keeps the direction, clip by value turns it; trigger counts on a trace."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepbill.errors import StepbillError
from stepbill.lab import clip
from tests.lab.facts import FACTS, fact

vectors = st.lists(st.floats(-100, 100), min_size=2, max_size=8).filter(lambda v: np.linalg.norm(v) > 1e-3)


@given(vectors, st.floats(1e-3, 10))
@settings(max_examples=80, deadline=None)
def test_clip_by_norm_keeps_the_direction(g: list[float], c: float) -> None:  # clip-norm-angle-0
    out = clip.clip_by_norm(g, c)
    assert clip.angle_deg(g, out) == pytest.approx(fact("clip-norm-angle-0")["printed"], abs=1e-4)
    assert np.linalg.norm(out) == pytest.approx(min(c, np.linalg.norm(g)), rel=1e-9)


def test_clip_by_value_turns_2_1_by_18_4_degrees() -> None:  # clip-value-18.4deg
    f = fact("clip-value-18.4deg")
    out = clip.clip_by_value(f["inputs"]["g"], f["inputs"]["clip_value"])
    assert list(out) == f["printed"]["clipped"]
    angle = clip.angle_deg(f["inputs"]["g"], out)
    assert angle == pytest.approx(f["printed"]["angle_deg"], abs=0.05)
    assert angle == pytest.approx(math.degrees(math.atan2(1, 1) - math.atan2(1, 2)))  # closed form


@pytest.mark.torch
def test_torch_clippers_agree() -> None:
    torch = pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")
    g = np.random.default_rng(0).normal(size=50) * 3
    p = torch.nn.Parameter(torch.zeros(50, dtype=torch.float64))
    p.grad = torch.tensor(g)
    torch.nn.utils.clip_grad_norm_([p], 1.0)
    assert p.grad.numpy() == pytest.approx(clip.clip_by_norm(g, 1.0), rel=1e-6)
    p.grad = torch.tensor(g)
    torch.nn.utils.clip_grad_value_([p], 1.0)
    assert p.grad.numpy() == pytest.approx(clip.clip_by_value(g, 1.0))


def test_trace_stats_count_triggers_and_effective_lr() -> None:  # clip-trace (mechanism; counts not printed)
    norms = np.array([0.5, 0.05, 2.0, 7.39, 0.9])
    s = clip.trace_stats(norms, 1.0)
    assert (s.triggered, s.untouched, s.max_norm) == (2, 3, 7.39)
    assert s.mean_lr_multiplier == pytest.approx((1 + 1 + 0.5 + 1 / 7.39 + 1) / 5)  # c·η/‖g‖ when clipped
    assert clip.trace_stats(norms, 0.1).triggered == 4
    syn = clip.synthetic_trace(200, seed=0, spikes=4)
    assert clip.trace_stats(syn, 1.0).triggered == 4 and clip.trace_stats(syn, 1.0).untouched == 196
    assert "clip-trace-4-of-200" in FACTS["not_reproducible"]


def test_read_trace(tmp_path: Path) -> None:
    p = tmp_path / "norms.txt"
    p.write_text("# norms\n0.5\n\n1.5  # spike\n")
    assert list(clip.read_trace(p)) == [0.5, 1.5]
    with pytest.raises(StepbillError, match="cannot read"):
        clip.read_trace(tmp_path / "missing.txt")
    p.write_text("0.5\nabc\n")
    with pytest.raises(StepbillError, match="not a number"):
        clip.read_trace(p)
    p.write_text("-1\n")
    with pytest.raises(StepbillError, match=">= 0"):
        clip.read_trace(p)
