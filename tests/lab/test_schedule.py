"""Seed 002 §04 and seed 000 §3.5–3.6: schedule shapes, areas, floors, published schedules, GPT-3 lr power law."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stepbill.errors import StepbillError
from stepbill.lab import schedule
from tests.lab.facts import fact


def _closed_form_area(f: dict, mean_decay_mult: float) -> float:
    """Continuous area: warmup triangle peak·W/2 plus (T−W)·peak·(mean multiplier) — independent of lr_at."""
    i = f["inputs"]
    return i["peak"] * (i["warmup"] / 2 + (i["total"] - i["warmup"]) * mean_decay_mult)


@pytest.mark.parametrize("shape", ["cosine", "linear"])
def test_cosine_and_linear_areas_are_16_47(shape: str) -> None:  # sched-area-cosine/linear-16.47
    f = fact(f"sched-area-{shape}-16.47")
    i = f["inputs"]
    got = schedule.area(shape, total=i["total"], peak=i["peak"], warmup=i["warmup"], floor=i["floor"])
    assert got == pytest.approx(f["printed"], abs=0.005)
    assert got == pytest.approx(_closed_form_area(f, (1 + i["floor"]) / 2), rel=1e-4)


def test_wsd_area_is_27_05() -> None:  # sched-area-wsd-27.05
    f = fact("sched-area-wsd-27.05")
    i = f["inputs"]
    got = schedule.area("wsd", total=i["total"], peak=i["peak"], warmup=i["warmup"], floor=i["floor"],
                        decay_frac=i["decay_frac"])
    assert got == pytest.approx(f["printed"], abs=0.005)
    d = i["decay_frac"]
    assert got == pytest.approx(_closed_form_area(f, (1 - d) + d * (1 + i["floor"]) / 2), rel=1e-4)


def test_floor_of_ten_percent_buys_9_8_percent() -> None:  # sched-floor-9.8pct
    gain = schedule.area("cosine", floor=0.1) / schedule.area("cosine", floor=0.0) - 1
    assert gain == pytest.approx(fact("sched-floor-9.8pct")["printed"], abs=5e-4)


def test_cosine_is_front_loaded_against_linear() -> None:  # sched-cos-front-loaded
    t = np.arange(2000, 100_001)
    cos, lin = schedule.lr_at(t, "cosine"), schedule.lr_at(t, "linear")
    mid = 2000 + (100_000 - 2000) // 2
    assert np.all(cos[t <= mid] >= lin[t <= mid] - 1e-18)
    assert np.all(cos[t >= mid] <= lin[t >= mid] + 1e-18)


def test_shape_values_at_landmarks() -> None:
    assert schedule.lr_at(1, "cosine") == pytest.approx(3e-4 / 2000)
    assert schedule.lr_at(2000, "cosine") == pytest.approx(3e-4)
    assert schedule.lr_at(100_000, "cosine") == pytest.approx(3e-5)
    assert schedule.lr_at(80_000, "wsd") == pytest.approx(3e-4)  # WSD holds the peak until the last fifth
    assert schedule.lr_at(100_000, "wsd", decay_shape="1-sqrt") == pytest.approx(3e-5)
    assert schedule.lr_at(8000, "inverse_sqrt") == pytest.approx(3e-4 * math.sqrt(2000 / 8000))


def test_gpt3_warmup_and_cosine_to_ten_percent() -> None:  # gpt3-warmup-0.125pct, gpt3-cosine-to-10pct
    f = fact("gpt3-warmup-0.125pct")["inputs"]
    assert f["warmup_tokens"] / f["total_tokens"] == pytest.approx(fact("gpt3-warmup-0.125pct")["printed"])
    c = fact("gpt3-cosine-to-10pct")
    peak = 6e-5
    assert schedule.gpt3_lr(f["warmup_tokens"], peak=peak) == pytest.approx(peak)
    assert schedule.gpt3_lr(c["inputs"]["decay_tokens"], peak=peak) == pytest.approx(c["printed"] * peak)
    assert schedule.gpt3_lr(300e9, peak=peak) == pytest.approx(c["printed"] * peak)  # then constant


def test_v3_multistage_schedule() -> None:  # v3-lr-schedule
    f = fact("v3-lr-schedule")
    i = f["inputs"]
    assert i["floor"] / i["peak"] == pytest.approx(f["printed"]["floor_over_peak"])
    assert schedule.v3_lr(5e12) == pytest.approx(i["peak"])
    assert schedule.v3_lr(10e12 + 4.3e12 / 2) == pytest.approx((i["peak"] + i["floor"]) / 2)
    assert schedule.v3_lr(14.3e12 + 100e9) == pytest.approx(i["floor"])
    assert schedule.v3_lr(14.3e12 + 400e9) == pytest.approx(i["final"])
    assert f["printed"]["tail_tokens"] == 333e9 + 167e9


def test_gpt3_table_power_law_and_interpolation() -> None:  # gpt3-lr-powerlaw-0.31, gpt3-1400x-10x, v3-vs-*
    f = fact("gpt3-lr-powerlaw-0.31")
    n, lr = np.array(f["inputs"]["N"]), np.array(f["inputs"]["lr"])
    assert [r[1] for r in schedule.GPT3_TABLE] == list(n) and [r[2] for r in schedule.GPT3_TABLE] == list(lr)
    k, _ = schedule.powerlaw_fit(n, lr)
    assert round(k, 2) == f["printed"]
    # independent route: the OLS slope from its definition
    x, y = np.log(n), np.log(lr)
    assert k == pytest.approx(np.sum((x - x.mean()) * (y - y.mean())) / np.sum((x - x.mean()) ** 2))
    g = fact("gpt3-1400x-10x")
    assert g["inputs"]["N"][1] / g["inputs"]["N"][0] == pytest.approx(g["printed"]["size"])
    assert g["inputs"]["lr"][0] / g["inputs"]["lr"][1] == pytest.approx(g["printed"]["lr"])
    v = fact("v3-vs-gpt3-3.7x")["inputs"]
    assert v["v3"] / v["gpt3_175b"] == pytest.approx(fact("v3-vs-gpt3-3.7x")["printed"], abs=0.05)
    p = fact("v3-vs-gpt3-37b-2.8x")
    at37 = schedule.loglog_interp(p["inputs"]["N"], n, lr)
    assert round(at37, 5) == pytest.approx(p["printed"]["lr"])  # 8.14e-5 → "0.8e-4 上下"
    assert 2.2e-4 / round(at37, 5) == pytest.approx(p["printed"]["ratio"], abs=0.05)


def test_palm_lr_continuous_and_batch_bound() -> None:  # palm-lr-continuity, lr-batch-bounded
    assert schedule.palm_lr(10_000) == pytest.approx(fact("palm-lr-continuity")["printed"])
    assert schedule.palm_lr(10_001) == pytest.approx(1 / math.sqrt(10_001))
    f = fact("lr-batch-bounded")
    got = schedule.lr_batch_bounded(f["inputs"]["B"], f["inputs"]["B_noise"], f["inputs"]["eta_max"])
    assert np.round(got, 3) == pytest.approx(f["printed"])
    assert np.all(np.diff(got) > 0) and np.all(got < f["inputs"]["eta_max"])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shape": "cosin"}, "did you mean 'cosine'"),
        ({"warmup": 200_000}, "warmup"),
        ({"step": -1}, "step"),
        ({"floor": 1.5}, "floor"),
        ({"total": 0}, "total"),
    ],
)
def test_bad_schedule_input(kwargs: dict, match: str) -> None:
    step = kwargs.pop("step", 10)
    with pytest.raises(StepbillError, match=match):
        schedule.lr_at(step, **kwargs)


def _torch_lrs(sched_factory, n: int) -> np.ndarray:
    torch = pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=3e-4)
    sched = sched_factory(opt)
    out = []
    for _ in range(n):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return np.array(out)


@pytest.mark.torch
def test_cosine_without_warmup_equals_torch_cosine_annealing() -> None:
    torch = pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")
    total = 1000
    ref = _torch_lrs(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=total, eta_min=3e-5), total)
    # with no warmup our progress is step/total; torch's i-th lr (0-based) has progress i/T_max
    ours = schedule.lr_at(np.arange(0, total), "cosine", warmup=0, total=total, floor=0.1)
    assert ref == pytest.approx(ours, rel=1e-9)


@pytest.mark.torch
def test_warmup_linear_equals_torch_sequential() -> None:
    torch = pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")
    w, total = 100, 1000
    ref = _torch_lrs(
        lambda o: torch.optim.lr_scheduler.SequentialLR(
            o,
            [
                torch.optim.lr_scheduler.LinearLR(o, start_factor=1 / w, end_factor=1.0, total_iters=w - 1),
                torch.optim.lr_scheduler.LinearLR(o, start_factor=1.0, end_factor=0.1, total_iters=total - w),
            ],
            milestones=[w - 1],
        ),
        total,
    )
    ours = schedule.lr_at(np.arange(1, total + 1), "linear", warmup=w, total=total, floor=0.1)
    assert ref == pytest.approx(ours, rel=1e-6)


@pytest.mark.torch
@pytest.mark.parametrize("shape", schedule.SHAPES)
def test_torch_snippet_reproduces_lr_at(shape: str) -> None:
    torch = pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")
    ns: dict = {}
    exec(schedule.torch_snippet(shape, warmup=50, total=600), ns)
    lrs = _torch_lrs(lambda o: torch.optim.lr_scheduler.LambdaLR(o, ns["lr_lambda"]), 600)
    assert lrs == pytest.approx(schedule.lr_at(np.arange(1, 601), shape, warmup=50, total=600), rel=1e-9)
