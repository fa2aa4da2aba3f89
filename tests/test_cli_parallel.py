"""`stepbill bill` with a parallel layout: per-rank and comm tables, ranks[] and comm in JSON, one-line errors."""

from __future__ import annotations

import json

import pytest

from tests.conftest import GIB, run_cli


def test_json_has_ranks_and_comm(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["bill", "llama2-7b", "--dp", "2", "--zero", "3", "--gpu", "h100-sxm", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    (rank,) = data["ranks"]
    # Per-rank memory has the global sizes; the per-rank timeline (peak_forward/backward, moment) is still open.
    timeline_only = {"peak_phase", "peak_moment", "peak_dominant", "advice", "peak_forward", "peak_backward",
                     "items", "activation_items"}
    assert set(data["memory"]) - timeline_only <= set(rank["memory"])
    # fsdp-2way-52.2 on the preset: 16 B × params / 2
    assert rank["memory"]["resident"] == pytest.approx(16 * data["model"]["params_total"] / 2, abs=2)
    assert {c["op"] for c in data["comm"]["collectives"]} == {"reduce-scatter", "all-gather"}
    assert data["time"]["mfu"]["unit"] == "1"
    assert data["gpu"]["memory_bytes"] == 80 * GIB


def test_terminal_shows_rank_and_comm_tables(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["bill", "llama2-7b", "--dp", "2", "--tp", "2", "--pp", "2", "--micro-batches", "4",
                            "--gpus", "8", "--gpu", "a100-80gb"], capsys)
    assert code == 0
    assert "Per GPU" in out and "Communication per GPU per step" in out and "stage 0" in out and "MFU" in out


@pytest.mark.parametrize(
    "argv",
    [["--tp", "3"], ["--dp", "2", "--gpus", "8"], ["--zero", "5"], ["--pp-schedule", "zb"], ["--gpu", "h100"],
     ["--ep", "2", "--dp", "2"], ["--sp"], ["--pp", "5"], ["--efficiency", "0"], ["--dp", "0"]],
)
def test_invalid_layout_exits_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["bill", "llama2-7b", *argv], capsys)
    assert code == 2 and out == ""
    assert err.startswith("stepbill: error: ") and err.count("\n") == 1
