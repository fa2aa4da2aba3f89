"""The eager convention's dropout rows per device (engine/activations/eager/dropout.py), without torch: CUDA's
bool masks and fused attention, CPU's masks in the input dtype and SDPA math path (its rows are held to
saved_tensors_hooks in tests/measure/test_eager_dropout.py), the kernel the bill names, what is still
unmodelled, and the ideal convention staying dropout-free."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from stepbill.engine.activations import layer_rows
from stepbill.engine.activations.eager import EagerBytes, saved_bytes
from stepbill.engine.activations.eager.outside import outside_rows
from stepbill.engine.bill import make_bill
from stepbill.engine.unmodelled import unmodelled
from stepbill.errors import StepbillError
from stepbill.spec.hf import from_hf_config
from stepbill.spec.recipe import make_recipe
from tests.conftest import run_cli

CFG = Path(__file__).resolve().parent / "data" / "hf_configs"
GPT2 = from_hf_config(json.loads((CFG / "gpt2.json").read_text()), "gpt2")  # attn/resid/embd_pdrop 0.1
NO_DROPOUT = dataclasses.replace(GPT2, attention_dropout=0.0, hidden_dropout=0.0, embedding_dropout=0.0)


def _rows(spec, device: str, act: int = 2) -> dict[str, object]:
    return {r.name: r for r in layer_rows(spec, "dense", EagerBytes(act, act, device), "eager")}


def test_cuda_keeps_bool_masks_and_the_fused_kernel_rows() -> None:
    """CUDA: native_dropout's bool mask (1 B) per residual dropout, the flash kernel's rows unchanged by
    attention dropout (no S² row), the embedding mask 1 B."""
    cuda, plain = _rows(GPT2, "cuda"), _rows(NO_DROPOUT, "cuda")
    assert cuda["attn.dropout_mask"].dtype_bytes == 1 and cuda["mlp.dropout_mask"].dtype_bytes == 1
    assert set(cuda) - set(plain) == {"attn.dropout_mask", "mlp.dropout_mask"}
    assert not any(r.per_token2 for r in cuda.values())
    mask = [r for r in outside_rows(GPT2, EagerBytes(2, 2, "cuda")) if r.name == "embed.dropout_mask"]
    assert len(mask) == 1 and mask[0].bytes_per_token == GPT2.hidden_size


def test_cpu_masks_in_input_dtype_and_math_path() -> None:
    """CPU: masks in the output's dtype (bf16: 2 B), three fp32 B·H·S² tensors and fp32 q/k/v on SDPA's math
    path, the flash kernel's q/k/v/output/logsumexp gone."""
    cpu = _rows(GPT2, "cpu")
    assert cpu["attn.dropout_mask"].dtype_bytes == 2
    s2 = [r for r in cpu.values() if r.per_token2]
    assert [r.name for r in s2] == ["attn.probs", "attn.probs_dropout_mask", "attn.probs_dropped"]
    assert all(r.dtype_bytes == 4 and r.width == GPT2.attention.n_heads for r in s2)
    assert not {"attn.qkv", "attn.logsumexp", "attn.core_out"} & set(cpu)
    h = GPT2.hidden_size
    assert (cpu["attn.q_scaled"].bytes_per_token, cpu["attn.v_math"].bytes_per_token) == (4 * h, 4 * h)


def test_devices_agree_without_dropout() -> None:
    args = (NO_DROPOUT, 2, 1024, 2)
    assert saved_bytes(*args[:1], EagerBytes(2, 2, "cpu"), *args[2:]) == \
        saved_bytes(*args[:1], EagerBytes(2, 2, "cuda"), *args[2:])
    assert saved_bytes(GPT2, EagerBytes(2, 2, "cpu"), 1024, 2) > 2 * saved_bytes(GPT2, EagerBytes(2, 2, "cuda"), 1024, 2)


def test_bill_names_the_kernel_per_device() -> None:
    def note(device: str) -> str:
        recipe = make_recipe("pure-bf16", seq_len=1024, device=device)
        return make_bill(GPT2, recipe, convention="eager").lines["memory.activations"].convention

    assert "device cpu: attention dropout 0.1 sends SDPA to its math path" in note("cpu")
    assert "device cuda: attention dropout 0.1 on SDPA's flash / memory-efficient kernel" in note("cuda")
    assert "bool masks (1 B)" in note("cuda")
    cpu = make_bill(GPT2, make_recipe("pure-bf16", seq_len=1024), convention="eager")
    cuda = make_bill(GPT2, make_recipe("pure-bf16", seq_len=1024, device="cuda"), convention="eager")
    assert cpu.lines["memory.peak"].value > cuda.lines["memory.peak"].value


def test_ideal_convention_keeps_no_dropout_masks() -> None:
    """The ideal convention is dropout-free by definition, whatever the config and the device say."""
    for device in ("cpu", "cuda"):
        a = make_bill(GPT2, make_recipe("pure-bf16", seq_len=1024, device=device))
        b = make_bill(NO_DROPOUT, make_recipe("pure-bf16", seq_len=1024, device=device))
        assert a.lines["memory.peak"].value == b.lines["memory.peak"].value
        assert "no dropout masks" in a.lines["memory.activations"].convention


def test_unmodelled_keeps_only_what_is_not_modelled() -> None:
    assert unmodelled(GPT2) == []
    neox = from_hf_config({**json.loads((CFG / "pythia-160m.json").read_text()), "attention_dropout": 0.1,
                           "hidden_dropout": 0.1}, "neox")
    assert unmodelled(neox) == []
    mla = from_hf_config({**json.loads((CFG / "deepseek-v2-lite.json").read_text()), "attention_dropout": 0.1}, "v2")
    notes = unmodelled(mla)
    assert len(notes) == 1 and notes[0].startswith("attention_dropout 0.1") and "deepseek_v2" in notes[0]


def test_recipe_refuses_an_unknown_device() -> None:
    with pytest.raises(StepbillError, match="device") as err:
        make_recipe(device="tpu")
    assert "\n" not in str(err.value)


def test_cli_device_option(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["bill", str(CFG / "gpt2.json"), "--seq", "1024", "--convention", "eager",
                            "--device", "cuda", "--recipe", "pure-bf16"], capsys)
    text = " ".join(out.split())  # the terminal wraps long lines
    assert code == 0 and "device cuda: attention dropout 0.1" in text and "note: attn_pdrop" not in text
    code, out, err = run_cli(["bill", str(CFG / "gpt2.json"), "--device", "tpu"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "device" in err


def test_flops_kernel_follows_the_device() -> None:
    """CPU with attention dropout: the math path (no QKᵀ rebuilt in the backward); CUDA: the fused kernel."""
    cpu = make_bill(GPT2, make_recipe("fp32", seq_len=1024), convention="eager").lines["flops.step_noncausal"]
    cuda = make_bill(GPT2, make_recipe("fp32", seq_len=1024, device="cuda"), convention="eager")
    rebuilt = GPT2.n_layers * 2 * 1024 * 1024 * GPT2.hidden_size  # 2·S²·H·d_qk per layer, full square
    assert cuda.lines["flops.step_noncausal"].value - cpu.value == rebuilt


def test_recompute_on_the_math_path_says_what_is_not_modelled() -> None:
    """Full recompute with attention dropout on CPU: the math path's S² temporaries inside a recomputed layer's
    forward are not modelled yet (tests/measure/test_eager_dropout.py measures the gap); the bill says so."""
    note = make_bill(GPT2, make_recipe("fp32", seq_len=1024, recompute="full"),
                     convention="eager").lines["memory.activations"].convention
    assert "not modelled yet: the math path's B·H·S² temporaries" in note
    assert "not modelled" not in make_bill(GPT2, make_recipe("fp32", seq_len=1024),
                                           convention="eager").lines["memory.activations"].convention
