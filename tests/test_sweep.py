"""`stepbill bill … --sweep AXIS=V1,V2,…` / `stepbill.sweep`: one bill per value, the others held — each row is the
bill `stepbill bill` prints with that value; a value the bill refuses is a row with its reason; bad input is one
line, exit 2."""

from __future__ import annotations

import json

import pytest

import stepbill
from stepbill.api_sweep import MAX_VALUES, parse_sweep
from stepbill.errors import StepbillError
from tests.conftest import run_cli


@pytest.mark.parametrize(("text", "axis", "values"), [
    ("micro-batch=1,2,4", "micro_batch", [1, 2, 4]),
    ("--seq=1024..8192", "seq", [1024, 2048, 4096, 8192]),
    ("micro_batch=3..20", "micro_batch", [3, 6, 12]),
    ("recompute=none, full,every:2", "recompute", ["none", "full", "every:2"]),
    ("gpu=h100,a100", "gpu", ["h100", "a100"]),
])
def test_parse(text: str, axis: str, values: list) -> None:
    assert parse_sweep(text) == (axis, values)


@pytest.mark.parametrize(("text", "message"), [
    ("colour=1,2", "takes AXIS=V1,V2,..."),
    ("micro-batch", "takes AXIS=V1,V2,..."),
    ("micro-batch=", "give values"),
    ("micro-batch=1,,2", "give values"),
    ("micro-batch=a,b", "takes whole numbers"),
    ("seq=4096..1024", "1 <= LO <= HI"),
    (f"micro-batch={','.join(map(str, range(1, MAX_VALUES + 2)))}", f"at most {MAX_VALUES} values"),
])
def test_parse_refuses(text: str, message: str) -> None:
    with pytest.raises(StepbillError, match=message):
        parse_sweep(text)


def test_each_row_is_the_bill_of_its_value(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3-8B at seq 8K on 8 H100 with ZeRO-3: micro-batch 1 fits, 2 does not; each row's JSON bill equals
    `stepbill bill … --micro-batch V --json`, and the table shows both verdicts."""
    base = ["bill", "llama3-8b", "--seq", "8192", "--gpus", "8", "--zero", "3", "--gpu", "h100"]
    code, out, err = run_cli([*base, "--sweep", "micro-batch=1,2", "--json"], capsys)
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert [r["value"] for r in rows] == [1, 2] and all(r["error"] is None for r in rows)
    for row in rows:
        code, single, err = run_cli([*base, "--micro-batch", str(row["value"]), "--json"], capsys)
        assert code == 0, err
        assert row["bill"] == json.loads(single)
    assert [r["bill"]["fit"]["fits"] for r in rows] == [True, False]
    code, out, err = run_cli([*base, "--sweep", "micro-batch=1,2"], capsys)
    text = " ".join(out.split())
    assert code == 0 and "one bill per --micro-batch" in text and " yes " in text and " NO " in text


def test_a_refused_value_is_a_row_and_a_bad_option_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """tp 3 does not divide Llama-3-8B's 32 heads: that row says why, the others are bills; a model that does not
    exist refuses every value for one reason: one line, exit 2, nothing on stdout."""
    sweep = stepbill.sweep("llama3-8b", "tp", [1, 3, 2], gpus=8, gpu="h100")
    assert [r.bill is None for r in sweep.rows] == [False, True, False]
    assert "tp" in sweep.rows[1].error
    assert sweep.rows[2].bill is not None and sweep.rows[2].bill.engine.recipe.parallel.tp == 2
    code, out, err = run_cli(["bill", "no-such-model", "--sweep", "micro-batch=1,2"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    code, out, err = run_cli(["bill", "llama3-8b", "--sweep", "colour=1"], capsys)
    assert code == 2 and out == "" and "--sweep takes AXIS=" in err
    code, out, err = run_cli(["bill", "llama3-8b", "--sweep", "seq=1024,2048", "--explain"], capsys)
    assert code == 2 and out == "" and "drop --explain" in err
