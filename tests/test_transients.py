"""The eager convention's transients (engine/memory/eager.py): closed forms, optimizer implementations, CLI."""

from __future__ import annotations

import json

import pytest

from stepbill.engine.bill import make_bill
from stepbill.engine.kinds import Part
from stepbill.engine.memory.eager import stepped_tensors
from stepbill.engine.memory.optimizer_step import step_temporaries
from stepbill.engine.params import param_inventory
from stepbill.engine.peak_items import peak_items
from stepbill.errors import StepbillError
from stepbill.spec import load_preset
from stepbill.spec.recipe import make_recipe
from tests.conftest import run_cli

LLAMA = load_preset("llama2-7b")


def test_optimizer_impl_is_validated() -> None:
    with pytest.raises(StepbillError, match="unknown optimizer implementation 'fusd'; did you mean 'fused'"):
        make_recipe("fp32", optimizer_impl="fusd")


def test_ideal_ignores_the_optimizer_impl() -> None:
    bills = [make_bill(LLAMA, make_recipe("fp32", seq_len=512, optimizer_impl=i)) for i in ("single", "fused")]
    assert bills[0].lines["memory.peak"].value == bills[1].lines["memory.peak"].value


def test_optimizer_temporaries_per_impl() -> None:
    inv = param_inventory(LLAMA)
    tensors = stepped_tensors(LLAMA)
    embed = 32_000 * 4096
    assert step_temporaries("adamw", "fused", 4, tensors) == 0
    assert step_temporaries("adamw", "foreach", 4, tensors) == 4 * inv.total  # one more copy of every state
    # single: exp_avg_sq.sqrt() and its division for the LM head while the final norm's denom lives
    assert step_temporaries("adamw", "single", 4, tensors) == 4 * (2 * embed + 4096)


def test_eager_peak_items_sum_to_the_peak() -> None:
    for impl in ("single", "foreach", "fused"):
        bill = make_bill(LLAMA, make_recipe("pure-bf16", seq_len=1024, optimizer_impl=impl), convention="eager")
        items = peak_items(bill)
        assert sum(x.value for x in items) == bill.lines["memory.peak"].value
        names = {x.name for x in items}
        assert "inputs" in names and "optimizer.step_counters" in names
        # the optimizer's temporaries, or with the fused step (none) the embedding's backward: every gradient made
        # and its incoming B·T·h gradient
        peak = bill.timeline.peak
        assert ("temporaries" in names) == ((impl != "fused" and peak.phase == "optimizer")
                                            or peak.part == Part.EMBEDDING)


def test_eager_forward_peak_holds_logits_and_upcast() -> None:
    """pure-bf16: bf16 logits + their fp32 upcast + padded labels (B > 1) + the loss, on top of the saved."""
    b, t, v = 2, 512, 32_000
    bill = make_bill(LLAMA, make_recipe("pure-bf16", micro_batch=b, seq_len=t), convention="eager")
    lines = {x.name: x.value for x in bill.activation_items}
    assert lines["activations.logits_and_loss"] == (2 + 4) * v * b * t + 8 * b * (t + 1) + 4


def test_bill_cli_optimizer_impl(capsys: pytest.CaptureFixture[str]) -> None:
    peaks = {}
    for impl in ("single", "foreach"):
        code, out, _ = run_cli(["bill", "llama2-7b", "--convention", "eager", "--recipe", "fp32", "--seq", "512",
                                "--optimizer-impl", impl, "--json"], capsys)
        assert code == 0
        peaks[impl] = json.loads(out)["memory"]["peak"]
    assert peaks["foreach"] > peaks["single"]
    code, _, err = run_cli(["bill", "llama2-7b", "--optimizer-impl", "fast"], capsys)
    assert code == 2 and "unknown optimizer implementation" in err and err.count("\n") == 1
