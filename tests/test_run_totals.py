"""Run totals (issue 10 item 4): global batch → micro-batches, train tokens → steps, days, GPU-hours, cost."""

from __future__ import annotations

import json
import math

import pytest

import stepbill
from stepbill.api import parse_tokens
from stepbill.errors import StepbillError
from tests.conftest import run_cli

ISSUE = ["bill", "llama3-8b", "--seq", "8192", "--global-batch-tokens", "4Mi", "--train-tokens", "2T", "--gpus", "64",
         "--dp", "64", "--gpu", "h100-sxm", "--price-per-gpu-hour", "2.5"]


@pytest.mark.parametrize(("text", "count"), [("4M", 4_000_000), ("2T", 2 * 10**12), ("4Mi", 4_194_304),
                                             ("1.5T", 1_500_000_000_000), ("300B", 300 * 10**9), ("8192", 8192),
                                             ("1,024", 1024), (4096, 4096)])
def test_token_counts(text: str | int, count: int) -> None:
    """Decimal K/M/B/T, binary Ki/Mi/Gi/Ti, plain integers."""
    assert parse_tokens(text, "train_tokens") == count


@pytest.mark.parametrize("bad", ["4X", "0", "1.5", "M", "-3M", "", True, 2.5])
def test_bad_token_counts(bad: object) -> None:
    with pytest.raises(StepbillError, match="train_tokens"):
        parse_tokens(bad, "train_tokens")  # type: ignore[arg-type]


def test_issue_command_prints_days_gpu_hours_and_cost(capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's command (global batch 4Mi = 4,194,304 = 512 sequences of 8,192: Llama 3's 4M-token batch):
    8 micro-batches per replica, ceil(2e12 / 4,194,304) = 476,838 steps, then steps × step time, × 64 GPUs, × 2.5."""
    code, out, err = run_cli(ISSUE, capsys)
    assert code == 0, err
    assert "days" in out and "GPU-hours" in out and "cost" in out
    assert "run.steps: ceil(2,000,000,000,000 tokens / 4,194,304 tokens per step)" in out
    assert "run.global_batch_tokens: dp 64 × micro-batches 8 × micro-batch 1 × seq 8,192" in out
    code, out, _ = run_cli([*ISSUE, "--json"], capsys)
    data = json.loads(out)
    run, step = data["run"], data["time"]["step"]["value"]
    assert run["steps"]["value"] == math.ceil(2e12 / 4_194_304) == 476_838
    assert run["seconds"]["value"] == pytest.approx(476_838 * step)
    assert run["days"]["value"] == pytest.approx(476_838 * step / 86_400)
    assert run["gpu_hours"]["value"] == pytest.approx(476_838 * step * 64 / 3600)
    assert run["cost"]["value"] == pytest.approx(run["gpu_hours"]["value"] * 2.5)
    assert run["tokens_per_s_per_gpu"]["value"] == pytest.approx(4_194_304 / step / 64)
    assert data["parallel"]["micro_batches"] == 8


def test_decimal_4m_rounds_to_whole_micro_batches(capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's literal command: 4M (decimal) over dp 64 × 8,192 is 7.63 micro-batches; the bill rounds to the
    nearest whole count (8: 4,194,304 tokens, Llama 3's "4M" batch) and says so, with the deviation (+4.9 %)."""
    argv = [a if a != "4Mi" else "4M" for a in ISSUE]
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    assert "--global-batch-tokens 4,000,000, rounded to the nearest whole count" in " ".join(out.split())
    assert "+4.9 %" in out and "476,838 steps" in out
    code, out, _ = run_cli([*argv, "--json"], capsys)
    data = json.loads(out)
    assert data["parallel"]["micro_batches"] == 8
    assert data["run"]["global_batch_tokens"]["value"] == 4_194_304
    assert "+4.9 %" in data["run"]["global_batch_tokens"]["convention"]


def test_tiny_global_batch_rounds_up_to_one_micro_batch() -> None:
    """Below half a micro-batch the nearest count would be 0: one micro-batch is the least a step can take."""
    b = stepbill.bill("gpt3-125m", seq=1024, dp=4, global_batch_tokens="1Ki")
    assert b.run.global_batch_tokens == 4096
    assert "rounded" in b.lines["run.global_batch_tokens"].convention


def test_api_run_section() -> None:
    """The Python API takes the same options and exposes b.run (the CLI's make_step_bill underneath)."""
    b = stepbill.bill("gpt3-125m", seq=1024, dp=4, global_batch_tokens="64Ki", train_tokens="1B", gpu="a100-80gb",
                      price_per_gpu_hour=1.0)
    assert b.run.global_batch_tokens == 65_536
    assert b.run.steps == math.ceil(1e9 / 65_536)
    assert b.run.cost == pytest.approx(b.run.gpu_hours)
    assert b.to_json()["run"]["steps"]["value"] == b.run.steps


def test_run_options_need_their_inputs() -> None:
    with pytest.raises(StepbillError, match="price_per_gpu_hour needs train_tokens and gpu"):
        stepbill.bill("gpt3-125m", train_tokens="1B", price_per_gpu_hour=2.0)
    with pytest.raises(StepbillError, match="global_batch_tokens or micro_batches, not both"):
        stepbill.bill("gpt3-125m", global_batch_tokens="4Ki", micro_batches=2)
    b = stepbill.bill("gpt3-125m", train_tokens="1M")  # no GPU: steps only
    assert b.run.steps == math.ceil(1e6 / 2048) and "run.seconds" not in b.lines


@pytest.mark.parametrize("argv", [
    ["bill", "gpt3-125m", "--gpu", "h100", "--train-tokens", "1T", "--price-per-gpu-hour", "1e308", "--json"],
    ["bill", "gpt3-125m", "--gpu", "h100", "--train-tokens", "2e18", "--json"],
    ["plan", "gpt3-125m", "--gpu", "h100", "--seq", "512", "--gpus", "1", "--micro-batch", "1", "--train-tokens", "1T",
     "--price-per-gpu-hour", "1e308", "--json"],
])
def test_run_totals_never_overflow(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """The fuzzer's find: a price of 1e308 or 1e296T tokens made the cost or the run's seconds inf (invalid JSON).
    Both options are bounded now (api_options.MAX_PRICE_PER_GPU_HOUR, MAX_TOKENS): one line, exit 2."""
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "at most" in err
