"""Parallel layout: the 3-D product, and every invalid layout rejected with one StepbillError line."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepbill.engine.comm import parallel_world_size
from stepbill.errors import StepbillError
from stepbill.spec import load_preset
from stepbill.spec.parallel import Parallel, validate_layout


def test_3d_1024() -> None:
    """3d-1024: 32-way DP × 8-way TP × 4-way PP = 1,024 GPUs."""
    assert Parallel(dp=32, tp=8, pp=4).world == 1024
    assert parallel_world_size(32, 8, 4) == 1024


@pytest.mark.parametrize(
    ("model", "kwargs", "gpus", "message"),
    [
        ("llama2-7b", {"dp": 2, "tp": 2}, 8, "must equal --gpus"),
        ("llama2-7b", {"tp": 3}, None, "must divide the attention heads"),
        ("llama3-8b", {"tp": 16}, None, "key/value heads"),
        ("llama2-7b", {"pp": 33}, None, "exceeds the layers"),
        ("llama2-7b", {"pp": 4, "pp_schedule": "interleaved", "vpp": 3, "micro_batches": 4}, None, "pp·vpp"),
        ("llama2-7b", {"ep": 2, "dp": 2}, None, "dense"),
        ("mixtral-8x7b", {"ep": 3, "dp": 3}, None, "routed experts"),
        ("llama2-7b", {"cp": 3}, None, "2·cp"),
    ],
)
def test_invalid_layouts(model: str, kwargs: dict, gpus: int | None, message: str) -> None:
    with pytest.raises(StepbillError, match=message):
        validate_layout(load_preset(model), Parallel(**kwargs), seq_len=4096, gpus=gpus)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dp": 0}, re.escape("--dp must be an integer in [1, 1,048,576], got 0")),
        ({"zero": 4}, "--zero must be one of 0, 1, 2, 3, got 4"),
        ({"pp_schedule": "zb"}, "--pp-schedule must be one of gpipe, 1f1b, interleaved, got 'zb'"),
        ({"sp": True}, "--sp"),
        ({"pp": 2, "pp_schedule": "interleaved", "vpp": 1}, "--vpp >= 2"),
        ({"pp": 2, "pp_schedule": "interleaved", "vpp": 2, "micro_batches": 3}, "divisible by --pp"),
        ({"vpp": 2}, "--vpp needs"),
        ({"dp": 4, "shard_group": 2}, "needs --zero"),
        ({"dp": 4, "zero": 3, "shard_group": 3}, "must divide dp·cp"),
        ({"dp": 2, "ep": 4}, "must divide dp·cp·tp"),
    ],
)
def test_invalid_alone(kwargs: dict, message: str) -> None:
    with pytest.raises(StepbillError, match=message):
        Parallel(**kwargs)


@settings(max_examples=150, deadline=None)
@given(
    dp=st.integers(-1, 9), tp=st.integers(0, 9), pp=st.integers(0, 5), cp=st.integers(0, 4), ep=st.integers(0, 9),
    zero=st.integers(-1, 4), sp=st.booleans(), sched=st.sampled_from(["gpipe", "1f1b", "interleaved", "bad"]),
    vpp=st.integers(0, 3), m=st.integers(0, 9), model=st.sampled_from(["llama2-7b", "mixtral-8x7b", "deepseek-v3"]),
)
def test_layouts_valid_or_one_line_error(dp: int, tp: int, pp: int, cp: int, ep: int, zero: int, sp: bool,
                                          sched: str, vpp: int, m: int, model: str) -> None:
    """Any layout is either accepted or rejected with a one-line StepbillError, never another exception."""
    try:
        layout = Parallel(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, zero=zero, sp=sp, pp_schedule=sched, vpp=vpp,  # type: ignore[arg-type]
                          micro_batches=m)
        validate_layout(load_preset(model), layout, seq_len=4096)
    except StepbillError as exc:
        assert "\n" not in str(exc) and str(exc)
