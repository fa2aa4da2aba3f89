"""Every optimizer torch.optim has, billed against MemTracker (`stepbill check --optimizer`): on the tiny Llama, for
each implementation torch has and each recipe check measures, every memory category of the step is exact to the
byte — the optimizer's states (SGD's momentum buffers, Adafactor's row / column variances and `step`, Muon's momentum
with the AdamW moments and `step` of the rest) and the optimizer step's peak (engine/memory/optimizer_step.py)
among them, the peak's phase too.

The tiny Llama's optimizer moment is set by the AdamW beside Muon (its LM head) and by Adafactor's estimate of the
second matrix after the embedding; the same Llama with a wider FFN (384) makes Muon's Newton–Schulz iteration on the
FFN matrices the largest moment, and Adafactor's foreach step the step's peak."""

from __future__ import annotations

import pytest

from stepbill.check import compare, predictions
from stepbill.engine.bill import make_bill
from stepbill.errors import StepbillError
from stepbill.measure.step import measure_step
from stepbill.measure.tiny import TINY_CONFIGS
from stepbill.spec.hf import from_hf_config
from stepbill.spec.recipe import TORCH_OPTIMIZER_IMPLS, make_recipe

LLAMA = TINY_CONFIGS["llama"]
WIDE_FFN = {**LLAMA, "intermediate_size": 384}
MEASURED = [o for o, impls in TORCH_OPTIMIZER_IMPLS.items() if impls]
RECIPES = ("fp32", "pure-bf16", "amp-bf16")


def _errors(config: dict, optimizer: str, impl: str, recipe: str, lora: object = None) -> dict[str, float]:
    """Bytes predicted − measured per memory category, and whether the peak's phase differs."""
    bill = make_bill(from_hf_config(config, "tiny"),
                     make_recipe(recipe, optimizer, 2, 64, optimizer_impl=impl,
                                 **({} if lora is None else {"lora_rank": 8})), convention="eager")
    measured = measure_step(config, recipe=recipe, optimizer_impl=impl, micro_batch=2, seq_len=64, flops=False,
                            optimizer=optimizer, lora=lora)
    errors = {r.line: r.predicted - r.measured for r in compare(predictions(bill), measured)
              if r.unit == "bytes" and r.predicted is not None}
    assert bill.timeline is not None
    errors["phase"] = float(bill.timeline.peak.phase != measured.peak_phase)
    return errors


CASES = [(o, i, r) for o in MEASURED for i in TORCH_OPTIMIZER_IMPLS[o] for r in RECIPES]


@pytest.mark.parametrize(("optimizer", "impl", "recipe"), CASES)
def test_every_category_exact(optimizer: str, impl: str, recipe: str) -> None:
    errors = _errors(LLAMA, optimizer, impl, recipe)
    assert "memory.peak_optimizer" in errors
    assert errors == dict.fromkeys(errors, 0.0)


@pytest.mark.parametrize(("optimizer", "impl", "recipe"),
                         [(o, i, r) for o in ("muon", "adafactor") for i in TORCH_OPTIMIZER_IMPLS[o] for r in RECIPES])
def test_wide_ffn_optimizer_moments_exact(optimizer: str, impl: str, recipe: str) -> None:
    """Muon's Newton–Schulz iterates on a 384×128 matrix, s·rc + 4·rc + 4·m² bytes, above the AdamW's LM head;
    Adafactor's foreach estimate of every tensor at once the step's peak (fp32, amp). The fp32 backward peak is
    8 B under the measurement here, whatever the optimizer (AdamW's too): not the optimizer's."""
    errors = _errors(WIDE_FFN, optimizer, impl, recipe)
    for line in ("memory.optimizer", "memory.peak_optimizer", "phase"):
        assert errors[line] == 0, line
    assert all(abs(v) <= 8 for v in errors.values()), errors


@pytest.mark.parametrize("recipe", ["fp32", "pure-bf16"])
@pytest.mark.parametrize(("optimizer", "impl"), [("sgd-momentum", "foreach"), ("adafactor", "single"),
                                                 ("adafactor", "foreach"), ("muon", "single")])
def test_lora_adapters_exact(optimizer: str, impl: str, recipe: str) -> None:
    """Under LoRA the optimizer steps the adapters alone (engine/memory/eager_lora.lora_stepped): Muon takes
    every adapter (all 2-D), Adafactor factors them; every category exact."""
    from stepbill.measure.lora import PeftLoRA

    errors = _errors(LLAMA, optimizer, impl, recipe, lora=PeftLoRA.for_recipe(recipe, 8))
    assert errors == dict.fromkeys(errors, 0.0)


def test_adafactor_needs_real_tensors() -> None:
    """Adafactor's step reads `.item()`, which a fake tensor has not: one line, not a FakeTensor traceback."""
    with pytest.raises(StepbillError, match="real tensors"):
        measure_step(LLAMA, optimizer="adafactor", mode="fake", flops=False)


def test_fake_tensors_measure_muon_and_sgd_as_real_ones() -> None:
    for optimizer in ("muon", "sgd-momentum"):
        real, fake = (measure_step(LLAMA, optimizer=optimizer, micro_batch=2, seq_len=64, mode=mode, flops=False)
                      for mode in ("real", "fake"))
        assert (fake.optimizer_states, fake.peak_optimizer) == (real.optimizer_states, real.peak_optimizer)


def test_check_cli_optimizer(capsys: pytest.CaptureFixture[str]) -> None:
    """`stepbill check --optimizer adafactor --optimizer-impl foreach`: 9 of 9 categories, the header naming the
    torch.optim class, the bill command carrying --optimizer."""
    import json

    from tests.conftest import run_cli

    code, out, _ = run_cli(["check", "tests/data/tiny-llama.json", "--seq", "64", "--micro-batch", "2", "--real",
                            "--optimizer", "adafactor", "--optimizer-impl", "foreach", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["settings"]["optimizer"] == "adafactor" and data["verdict"].startswith("9 of 9")
    assert all(r["error"] == 0 for r in data["rows"] if r["unit"] == "bytes")
    assert "--optimizer adafactor --optimizer-impl foreach" in data["bill_command"]
    code, out, _ = run_cli(["check", "tests/data/tiny-llama.json", "--seq", "64", "--real", "--optimizer", "muon"],
                           capsys)
    assert code == 0 and "torch.optim.Muon on the hidden 2-D matrices" in out
