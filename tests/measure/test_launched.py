"""`stepbill check --launch N`: real ranks under torchrun (gloo, CPU), tiny real model, every rank measured and
compared with the bill (issue 11, item 4). Each run starts N Python processes that import torch and
transformers: tens of seconds on a loaded 2-core machine, hence `slow`."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

TINY = "tests/data/tiny-llama.json"
TOLERANCE = 0.03
RESIDENT = ("params", "grads", "optimizer states", "activations", "peak of the forward")


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
@pytest.mark.parametrize("zero", [2, 3])
def test_fsdp2_on_gloo_every_rank(zero: int, capsys: pytest.CaptureFixture[str]) -> None:
    """FSDP2 on gloo: the resident shards, activations and the forward peak within 3 % on every rank. The
    backward peak sits a few % above the bill: gloo's reduce_scatter_single copies its whole input (a temporary
    of the input's size per call, measured; NCCL does not) and its async all-gathers keep buffers a little
    longer, depending on timing — not modelled yet (the fake process group, which completes every collective
    at once, matches the bill to the byte in tests/test_sharded.py)."""
    data = _launched(capsys, 2, zero)
    assert data["recipe"] == "fsdp-mixed-bf16"
    for rank in data["ranks"]:
        rows = {r["category"]: r for r in rank["rows"]}
        for name, row in rows.items():
            if name.startswith(RESIDENT):
                assert abs(row["error"]) <= TOLERANCE, (rank["rank"], name, row["error"])
        # gloo's copies only add memory (never above the bill), by an amount that varies from run to run: −12.5 %
        # and 0 % were seen on the same rank, −11.0 % once in CI (docs/accuracy.md "Real ranks")
        assert -0.15 <= rows["peak of the step"]["error"] <= TOLERANCE


def test_launch_command_is_torchrun_on_a_free_local_port() -> None:
    from stepbill.measure.distributed import free_port, launch_command

    cmd = launch_command(4, ["tiny.json", "--zero", "3"], port=23456)
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    assert cmd[cmd.index("--nproc-per-node") + 1] == "4" and cmd[cmd.index("--master-port") + 1] == "23456"
    assert cmd[-5:] == ["stepbill", "check", "tiny.json", "--zero", "3"]
    assert 0 < free_port() < 65536
