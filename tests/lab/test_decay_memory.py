"""Seed 002 §02 and §08: AdamW vs L2 decay, the ceiling, and the 16-byte memory ledger."""

from __future__ import annotations

import numpy as np
import pytest

from stepbill.errors import StepbillError
from stepbill.lab import decay, memory
from tests.lab.facts import FACTS, fact

GIB = 2**30


def test_adamw_decays_every_group_by_3e_5() -> None:  # adamw-decay-3e-5, loop-hyperparams
    f = fact("adamw-decay-3e-5")
    assert decay.adamw_decay_per_step(**f["inputs"]) == pytest.approx(f["printed"])
    loop = fact("loop-hyperparams")["printed"]
    assert loop["lr"] * loop["weight_decay"] == pytest.approx(f["printed"])


def test_l2_decay_spread_750x() -> None:  # l2-decay-750x
    f = fact("l2-decay-750x")
    i = f["inputs"]
    emb = decay.l2_decay_per_step(i["lr"], i["weight_decay"], i["sqrt_v_embedding"])
    bias = decay.l2_decay_per_step(i["lr"], i["weight_decay"], i["sqrt_v_bias"])
    assert emb == pytest.approx(f["printed"]["embedding"])
    assert bias == pytest.approx(f["printed"]["bias"])
    assert bias / emb == pytest.approx(f["printed"]["spread"])
    sv = np.array([v for _, v in decay.DEFAULT_GROUPS])
    d = decay.l2_decay_per_step(3e-4, 0.1, sv)
    assert d.max() / d.min() == pytest.approx(750)


def test_decoupled_decay_settles_at_the_ceiling() -> None:  # wd-ceiling (mechanism; 1.70/3.51 not reproducible)
    lr, wd = 0.01, 0.1
    run = decay.simulate_weight(steps=6000, lr=lr, weight_decay=wd, seed=2)
    # closed form of w ← w + η(u − λw) from w₀ = 0: an EMA of u/λ with coefficient ηλ
    k = lr * wd
    ages = np.arange(len(run.updates) - 1, -1, -1)
    assert run.with_decay[-1] == pytest.approx(np.sum(k * (1 - k) ** ages * run.updates) / wd, rel=1e-9)
    assert run.with_decay[-1] == pytest.approx(run.equilibrium, rel=0.35)  # hovers at E[u]/λ
    assert run.without_decay[-1] == pytest.approx(lr * run.updates.sum())  # keeps climbing, no ceiling
    assert run.without_decay[-1] > 3 * run.with_decay[-1]
    assert decay.decay_equilibrium(1.0, 0.1) == pytest.approx(10.0)  # "a ceiling of height 1/λ" for unit updates
    assert "wd-ceiling-1.70-3.51" in FACTS["not_reproducible"]


def test_bad_decay_input() -> None:
    with pytest.raises(StepbillError, match="weight decay"):
        decay.adamw_decay_per_step(3e-4, -0.1)
    with pytest.raises(StepbillError, match="lr"):
        decay.simulate_weight(lr=0.0)


def test_sixteen_bytes_four_model_twelve_optimizer() -> None:  # bytes-16-split-002
    assert memory.bytes_split() == (fact("bytes-16-split-002")["printed"]["model"],
                                    fact("bytes-16-split-002")["printed"]["optimizer"])


def test_7b_70b_and_fsdp_memory() -> None:  # mem-7b-104GiB, mem-70b-1043GiB, fsdp-2way-52.2
    f7 = fact("mem-7b-104GiB")
    gib = memory.resident_gib(f7["inputs"]["params"])
    assert round(gib) == f7["printed"]["gib"]
    assert (gib - f7["inputs"]["card_gib"]) / gib == pytest.approx(f7["printed"]["above_line"], abs=0.02)
    assert round(memory.resident_gib(fact("mem-70b-1043GiB")["inputs"]["params"])) == fact("mem-70b-1043GiB")["printed"]
    f = fact("fsdp-2way-52.2")
    assert memory.resident_gib(f["inputs"]["params"], shards=f["inputs"]["shards"]) == pytest.approx(f["printed"], abs=0.05)
    assert memory.resident_gib(7e9) == pytest.approx(7e9 * 16 / GIB)


def test_optimizer_step_moves_28_bytes_forward_2() -> None:  # iter-bytes-56-28-2 (28 and 2 only)
    t = memory.optimizer_step_traffic()
    f = fact("iter-bytes-56-28-2")["printed"]
    assert t["optimizer"] == f["optimizer"] and t["forward"] == f["forward"]
