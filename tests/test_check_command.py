"""`check` names the `stepbill bill` command whose numbers it compares (`bill_command`, JSON and terminal): run, that
command prints the prediction check compares — the per-rank eager class under --dp/--zero (FSDP2's mixed precision,
check's fsdp-mixed-bf16, is the bill's mixed-bf16 there), measured-exact. Torch-free: the predictions only."""

from __future__ import annotations

import json
import shlex

import pytest

from stepbill.check import bill_command
from stepbill.engine.check_rank import predict_rank
from stepbill.spec.presets import load_preset
from tests.conftest import run_cli


def test_the_command_spells_what_check_measured() -> None:
    assert bill_command("llama3-8b", seq=2048, micro_batch=1, recipe="fsdp-mixed-bf16", convention="eager", dp=8,
                        zero=3) == ("stepbill bill llama3-8b --seq 2048 --micro-batch 1 --recipe mixed-bf16 --dp 8 "
                                    "--zero 3 --convention eager")
    assert bill_command("my dir/config.json", seq=128, micro_batch=2, recipe="fp32", convention="eager",
                        recompute="full", optimizer_impl="foreach", dropout=0.0, attention="eager") == (
        "stepbill bill 'my dir/config.json' --seq 128 --micro-batch 2 --recipe fp32 --recompute full "
        "--optimizer-impl foreach --attention eager --dropout 0 --convention eager")


@pytest.mark.parametrize(("zero", "recipe"), [(1, "fp32"), (2, "fsdp-mixed-bf16"), (3, "fsdp-mixed-bf16")])
def test_the_command_reproduces_the_sharded_prediction(zero: int, recipe: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """gpt3-125m, rank 0 of 4: the forward and backward peaks check predicts are the bill's rank class's, to the
    byte."""
    spec = load_preset("gpt3-125m")
    pred = predict_rank(spec, 4, zero, 0, 2, 512, recipe)
    command = bill_command("gpt3-125m", seq=512, micro_batch=2, recipe=recipe, convention="eager", dp=4, zero=zero)
    code, out, err = run_cli([*shlex.split(command)[1:], "--json"], capsys)
    assert code == 0, err
    rank = json.loads(out)["ranks"][0]
    assert rank["model"] == "measured-exact"
    assert (rank["memory"]["peak_forward"], rank["memory"]["peak_backward"]) == (pred.peak_forward,
                                                                                 pred.peak_backward)
