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
    # Per-rank memory has the global keys, per-phase peaks included (moment / advice / items are global-only).
    timeline_only = {"peak_phase", "peak_moment", "peak_dominant", "advice", "items", "activation_items"}
    assert set(data["memory"]) - timeline_only <= set(rank["memory"])
    # fsdp-2way-52.2 on the preset: 16 B × params / 2
    assert rank["memory"]["resident"] == pytest.approx(16 * data["model"]["params_total"] / 2, abs=2)
    assert {c["op"] for c in data["comm"]["collectives"]} == {"reduce-scatter", "all-gather"}
    assert data["time"]["mfu"]["unit"] == "1"
    assert data["gpu"]["memory_bytes"] == 80 * GIB


def test_eager_dp_ranks_equal_the_sharded_check(capsys: pytest.CaptureFixture[str]) -> None:
    """`bill --dp N --zero Z --convention eager` prints what `check --dp N --zero Z` predicts (engine/parallel/fsdp2.py)."""
    from stepbill.engine.check_rank import predict_rank
    from stepbill.spec.presets import load_model

    tiny = "tests/data/tiny-llama.json"
    for zero, recipe in ((3, "mixed-bf16"), (1, "fp32")):
        code, out, _ = run_cli(["bill", tiny, "--dp", "4", "--zero", str(zero), "--convention", "eager", "--seq",
                                "128", "--recipe", recipe, "--json"], capsys)
        assert code == 0
        ranks = json.loads(out)["ranks"]
        assert sum(r["ranks"] for r in ranks) == 4
        spec = load_model(tiny)
        p = predict_rank(spec, 4, zero, 0, 1, 128, "fp32" if zero == 3 else recipe)
        mem = ranks[0]["memory"]
        assert (mem["weights"], mem["grads"], mem["optimizer"]) == (p.params, p.grads, p.optimizer_states)
        assert (mem["peak"], mem["peak_forward"], mem["peak_backward"]) == (
            round(p.peak), round(p.peak_forward), round(p.peak_backward))


def test_terminal_shows_rank_and_comm_tables(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["bill", "llama2-7b", "--dp", "2", "--tp", "2", "--pp", "2", "--micro-batches", "4",
                            "--gpus", "8", "--gpu", "a100-80gb"], capsys)
    assert code == 0
    assert "Per GPU" in out and "Communication per GPU per step" in out and "stage 0" in out and "MFU" in out


@pytest.mark.parametrize(
    "argv",
    [["--tp", "3"], ["--dp", "2", "--gpus", "8"], ["--zero", "5"], ["--pp-schedule", "zb"], ["--gpu", "h10"],
     ["--ep", "2", "--dp", "2"], ["--sp"], ["--pp", "33"], ["--efficiency", "0"], ["--dp", "0"]],
)
def test_invalid_layout_exits_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["bill", "llama2-7b", *argv], capsys)
    assert code == 2 and out == ""
    assert err.startswith("stepbill: error: ") and err.count("\n") == 1
