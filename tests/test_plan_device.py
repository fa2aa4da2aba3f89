"""Whose kernels a fit verdict is judged on: a bill for a card (`--gpu` / `--gpu-mem`) and every plan follow CUDA's
(MLA's unequal head widths run SDPA's memory-efficient kernel: no S² tensor; dropout keeps bool masks), a bill for
no card the CPU's that `stepbill check` measures; `--device` overrides either. Plan rows carry `--device` only
where it differs from bill's default, so every printed command still reproduces its row."""

from __future__ import annotations

from pathlib import Path

import pytest

import stepbill
from stepbill.api import make_step_bill
from stepbill.errors import StepbillError

LITE = str(Path(__file__).parent / "data" / "hf_configs" / "deepseek-v2-lite.json")
GPT2 = str(Path(__file__).parent / "data" / "hf_configs" / "gpt2.json")


@pytest.mark.parametrize(("options", "device"), [
    ({}, "cpu"),
    ({"gpu": "h100-sxm"}, "cuda"),
    ({"gpu_mem_gib": 80.0}, "cuda"),
    ({"gpu": "h100-sxm", "device": "cpu"}, "cpu"),
    ({"device": "cuda"}, "cuda"),
])
def test_bill_follows_the_card_unless_told(options: dict, device: str) -> None:
    run = make_step_bill(GPT2, seq=1024, **options)
    assert run.bill.recipe.device == device
    if run.fit is not None:
        assert f"on {device.upper()} kernels" in run.fit.convention_note()


def test_a_bad_device_is_one_error() -> None:
    with pytest.raises(StepbillError, match="device"):
        make_step_bill(GPT2, seq=1024, device=3)  # type: ignore[arg-type]
    with pytest.raises(StepbillError, match="device"):
        stepbill.plan(GPT2, gpu="h100-sxm", gpus=1, seq=1024, micro_batch=1, device="tpu")


def _plan(device: str, seq: int) -> stepbill.PlanRun:
    return stepbill.plan(LITE, gpu="h100-sxm", gpus=8, seq=seq, micro_batch=1, device=device, top=3,
                         fix="tp=1,pp=1,cp=1,ep=8,zero=3,recompute=none,offload_optimizer=false,"
                             "offload_activations=false")


def _reproduced(run: stepbill.PlanRun, flag: str | None) -> None:
    assert run.result.rows
    for row in run.result.top:
        assert (flag in row.command) if flag else ("--device" not in row.command)
        fit = make_step_bill(LITE, **row.options).fit
        assert fit is not None and fit.worst.peak_bytes == pytest.approx(row.peak_bytes, rel=1e-12)


def test_plan_judges_mla_on_the_gpus_kernels_and_its_commands_reproduce() -> None:
    """DeepSeek-V2-Lite at seq 4,096 without recompute on 8 H100s: on CUDA no B·H·S² probabilities are kept and it
    fits; on the CPU's math path (fp32 P, and dP and dS at its backward) nothing fits — the bill of the GPU row's
    own command with `--device cpu` says so too. Each row's options rebuild its peak through `bill`."""
    on_gpu, on_cpu = _plan("cuda", 4096), _plan("cpu", 4096)
    _reproduced(on_gpu, None)
    assert not on_cpu.result.rows
    fit = make_step_bill(LITE, **{**on_gpu.result.top[0].options, "device": "cpu"}).fit
    assert fit is not None and not fit.fits
    assert on_gpu.to_json()["request"]["device"] == "cuda"
    shorter = _plan("cpu", 1024)
    _reproduced(shorter, "--device cpu")
    assert shorter.to_json()["request"]["device"] == "cpu"
