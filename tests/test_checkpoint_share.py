"""The checkpoint beside the one to resume: the weights alone (a weights-only export), against a published file
size, and each rank's share of the checkpoint to resume, which sums over the ranks to the whole."""

from __future__ import annotations

import json

import pytest

from stepbill.api import make_step_bill
from tests.conftest import run_cli

#: meta-llama/Llama-2-7b-hf's model.safetensors.index.json "total_size" (bytes of every stored tensor): its
#: 6,738,415,616 parameters in fp16 and the 32 layers' rotary `inv_freq` buffers, 64 fp32 values each, which
#: transformers keeps as a non-persistent buffer today and the bill does not count
LLAMA2_7B_SAFETENSORS = 13_476_839_424
INV_FREQ = 32 * 64 * 4


def test_weights_only_export_is_the_published_file_size() -> None:
    run = make_step_bill("llama2-7b", seq=2048)
    line = run.bill.lines["checkpoint.weights_export"]
    assert line.value == LLAMA2_7B_SAFETENSORS - INV_FREQ
    assert line.inputs == {"params": 6_738_415_616, "bytes": 2}


def test_weights_only_export_of_deepseek_v3_and_of_lora() -> None:
    """DeepSeek-V3's 671.03 B parameters in bf16: the user trial's 1.22 TiB (task g); LoRA saves its adapters."""
    v3 = make_step_bill("deepseek-v3", seq=4096).bill.lines["checkpoint.weights_export"]
    assert v3.value == 671_026_404_352 * 2 and round(v3.value / 2**40, 2) == 1.22
    lora = make_step_bill("llama3-8b", seq=2048, lora_rank=16).bill.lines["checkpoint.weights_export"]
    assert lora.inputs["params"] < 10**7 and lora.value == lora.inputs["params"] * 2
    assert "LoRA adapter" in lora.formula


@pytest.mark.parametrize("layout", [
    {"gpus": 8, "zero": 3},
    {"gpus": 8, "zero": 0},
    {"gpus": 8, "dp": 2, "tp": 2, "pp": 2, "zero": 1, "recipe": "pure-bf16"},
    {"gpus": 8, "zero": 3, "lora_rank": 16},
    {"gpus": 8, "zero": 3, "convention": "eager"},  # the measured FSDP2 classes: fp32 shards are the master
    {"gpus": 64, "zero": 3, "convention": "eager", "model": "mixtral-8x7b"},  # uneven dim-0 chunks
])
def test_rank_shares_sum_to_the_checkpoint(layout: dict) -> None:
    """Σ over rank classes of ranks × checkpoint_bytes = checkpoint.bytes (torch.distributed.checkpoint writes every
    shard once): ZeRO-3, replicas without ZeRO, tp × pp × ZeRO-1 with the weights as master, LoRA, and the measured
    FSDP2 classes (ranks holding uneven chunks)."""
    options = dict(layout)
    run = make_step_bill(options.pop("model", "llama3-8b"), seq=2048, **options)
    data = run.to_json()
    assert all(r["checkpoint_bytes"] > 0 for r in data["ranks"])
    total = sum(r["ranks"] * r["checkpoint_bytes"] for r in data["ranks"])
    assert total == pytest.approx(data["checkpoint"]["bytes"], abs=len(data["ranks"]))


def test_bill_prints_the_export_and_the_per_gpu_share(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["bill", "llama3-8b", "--gpus", "8", "--zero", "3", "--json"], capsys)
    assert code == 0, err
    share = json.loads(out)["ranks"][0]["checkpoint_bytes"]
    code, out, err = run_cli(["bill", "llama3-8b", "--gpus", "8", "--zero", "3"], capsys)
    text = " ".join(out.split())
    assert "weights only (export): 14.96 GiB" in text
    assert "checkpoint to resume per GPU: " in text and f"{share / 2**30:.2f} GiB" in text
