"""`stepbill check --launch N`: real ranks under torchrun (gloo, CPU), tiny real model, every rank measured and
compared with the bill (issue 11, item 4). Each run starts N Python processes that import torch and
transformers: tens of seconds on a loaded 2-core machine, hence `slow`."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

TINY = "tests/data/tiny-llama.json"
TOLERANCE = 0.03


def _launched(capsys: pytest.CaptureFixture[str], nproc: int, zero: int) -> dict:
    code, out, err = run_cli(["check", TINY, "--launch", str(nproc), "--zero", str(zero), "--seq", "32", "--json"],
                             capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["launched"] and data["backend"] == "gloo" and data["dp"] == nproc
    assert [r["rank"] for r in data["ranks"]] == list(range(nproc))
    from stepbill.report.schema import validate

    validate("check", data)  # CheckLaunchedJson
    return data


@pytest.mark.slow
@pytest.mark.parametrize(("nproc", "zero"), [(2, 0), (4, 0), (2, 1), (4, 1)])
def test_ddp_and_zero1_every_rank_within_3_percent(nproc: int, zero: int, capsys: pytest.CaptureFixture[str]) -> None:
    """DDP (the single-rank eager bill plus its gradient buckets, = the gradients' bytes) and ZeRO-1
    (engine/check_rank.py's predict_rank): every category of every rank, the step peak included."""
    data = _launched(capsys, nproc, zero)
    for rank in data["ranks"]:
        errors = {r["category"]: r["error"] for r in rank["rows"] if r["error"] is not None}
        assert all(abs(e) <= TOLERANCE for e in errors.values()), (rank["rank"], errors)
        if zero == 0:
            assert rank["measured_extra"]["ddp_buckets"] > 0


@pytest.mark.slow
@pytest.mark.parametrize(("nproc", "zero"), [(2, 2), (2, 3), (4, 2), (4, 3)])
def test_fsdp2_on_gloo_every_rank(nproc: int, zero: int, capsys: pytest.CaptureFixture[str]) -> None:
    """FSDP2 on gloo, every category of every rank within 3 % (the step peak included): the bill's gloo
    convention holds gloo's reduce-scatter clone of its input (engine/parallel/fsdp2_moments.py), and the
    measurement waits for gloo's worker thread to free each clone (measure/gloo.py), so the figures are the
    same on every run (5 runs each, 0.00 % on every rank: docs/accuracy.md "Real ranks")."""
    data = _launched(capsys, nproc, zero)
    assert data["recipe"] == "fsdp-mixed-bf16"
    for rank in data["ranks"]:
        errors = {r["category"]: r["error"] for r in rank["rows"] if r["error"] is not None}
        assert "peak of the step" in errors
        assert all(abs(e) <= TOLERANCE for e in errors.values()), (rank["rank"], errors)


def test_launch_command_is_torchrun_on_a_free_local_port() -> None:
    from stepbill.measure.distributed import free_port, launch_command

    cmd = launch_command(4, ["tiny.json", "--zero", "3"], port=23456)
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    assert cmd[cmd.index("--nproc-per-node") + 1] == "4" and cmd[cmd.index("--master-port") + 1] == "23456"
    assert cmd[-5:] == ["stepbill", "check", "tiny.json", "--zero", "3"]
    assert 0 < free_port() < 65536


def test_a_failed_launch_names_the_ranks_exception_not_torchruns_border() -> None:
    from stepbill.cli_check import _failure_line

    stderr = ("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
              "RuntimeError: The server socket has failed to listen on any local network address. port: 29500\n"
              "=====\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n=====\n")
    assert _failure_line(stderr).startswith("RuntimeError: The server socket has failed")
    assert _failure_line("=====\nexit 1\n=====\n") == "exit 1"
    assert _failure_line("") == "no output"
