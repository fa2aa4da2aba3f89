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
        assert "--optimizer-impl fused" in row.command  # the planner's Adam: fused, not bill's default foreach
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


@pytest.mark.parametrize(("options", "impl"), [
    ({}, "single"),  # the CPU: torch.optim's for-loop AdamW
    ({"gpu": "h100-sxm"}, "foreach"),  # CUDA: torch.optim's default multi-tensor AdamW
    ({"gpu": "h100-sxm", "optimizer": "adam"}, "foreach"),
    ({"gpu": "h100-sxm", "optimizer": "sgd-momentum"}, "foreach"),  # torch.optim.SGD asks for foreach too
    ({"gpu": "h100-sxm", "optimizer": "muon"}, "foreach"),  # the AdamW beside Muon
    ({"gpu": "h100-sxm", "optimizer": "adafactor"}, "single"),  # torch.optim.Adafactor: foreach only when asked
    ({"gpu": "h100-sxm", "optimizer_impl": "fused"}, "fused"),
    ({"gpu": "h100-sxm", "device": "cpu"}, "single"),
])
def test_the_optimizer_runs_as_pytorch_runs_it_on_the_device(options: dict, impl: str) -> None:
    assert make_step_bill(GPT2, seq=1024, **options).bill.recipe.optimizer_impl == impl


def test_foreach_on_a_gpu_holds_one_more_copy_of_a_state_at_the_step() -> None:
    """Llama-3.2-1B, amp, seq 128 on an H100: the optimizer step is the peak, the resident state plus foreach's sqrt
    of every second moment (4 B a parameter, torch/optim/adamw.py `_multi_tensor_adamw`: exp_avg_sq_sqrt); with
    --optimizer-impl single it is a backward moment, lower."""
    cfg = str(Path(__file__).parent / "data" / "hf_configs" / "llama-3.2-1b.json")
    on_gpu = stepbill.bill(cfg, seq=128, recipe="amp-bf16", gpu="h100-sxm", convention="eager").to_json()["memory"]
    single = stepbill.bill(cfg, seq=128, recipe="amp-bf16", gpu="h100-sxm", convention="eager",
                           optimizer_impl="single").to_json()["memory"]
    params = 1_235_814_400  # transformers' count for Llama-3.2-1B (tied embeddings: tests/test_hf_loader.py)
    assert on_gpu["peak_moment"] == "optimizer step"
    assert on_gpu["peak"] - on_gpu["resident"] == pytest.approx(4 * params, abs=4096)
    assert single["peak"] < on_gpu["peak"] - 2 * 2**30
