"""`stepbill lab <topic>`: tables, one JSON object per topic, plots to files, one-line errors with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

TOPICS = ["adam", "decay", "warmup", "schedule", "clip", "formats", "collectives", "backprop", "descent", "memory"]
PLOT_TOPICS = [t for t in TOPICS if t != "memory"]  # memory prints tables only


@pytest.mark.parametrize("topic", TOPICS)
def test_json_is_one_object(topic: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["lab", topic, "--json"], capsys)
    assert code == 0 and not err
    data = json.loads(out)
    assert data["topic"] == topic and data["tables"] and data["values"]


@pytest.mark.slow
def test_default_json_prints_the_seed_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    def values(topic: str) -> dict:
        code, out, _ = run_cli(["lab", topic, "--json"], capsys)
        assert code == 0
        return json.loads(out)["values"]

    a = values("adam")
    assert round(a["latest_share_beta1"], 3) == 0.139 and round(a["oldest_share_beta1"], 3) == 0.044
    assert round(a["latest_share_beta2"], 3) == 0.109 and round(a["update_rms_closed_form"], 4) == 0.2294
    d = values("decay")
    assert d["adamw_decay_per_step"] == pytest.approx(3e-5) and d["l2_spread"] == pytest.approx(750)
    assert round(d["resident_gib_per_gpu"]) == 104
    w = values("warmup")
    assert w["first_step_with_warmup"] == pytest.approx(1.5e-7)
    s = values("schedule")
    assert round(s["areas_lr_steps"]["cosine"], 2) == 16.47 and round(s["areas_lr_steps"]["wsd"], 2) == 27.05
    assert round(s["floor_gain"], 3) == 0.098 and round(s["gpt3_lr_exponent"], 2) == -0.31
    c = values("clip")
    assert c["clipped_by_value"] == [1.0, 1.0] and round(c["angle_by_value_deg"], 1) == 18.4
    f = values("formats")
    assert f["lost_update"]["bf16"] == 0.0 and f["lost_update"]["fp16"] == pytest.approx(9.77e-4, abs=1e-6)
    k = values("collectives")
    assert [round(x, 1) for x in k["ring_link_gib"]] == [22.8, 26.0] and round(k["server_link_gib"][0]) == 209
    assert k["tp_traffic_mib"] == 448 and k["tp_activation_mib"] == 64 and k["world_size"] == 1024


def test_tables_say_their_units(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["lab", "collectives"], capsys)
    assert code == 0 and "GiB" in out and "22.82" in out and "448" in out and "2^30" in out


PLOTS = [(topic, ".png") for topic in PLOT_TOPICS] + [("adam", ".svg"), ("collectives", ".svg")]  # svg: two suffice


@pytest.mark.slow
@pytest.mark.needs("matplotlib")
@pytest.mark.parametrize(("topic", "suffix"), PLOTS)
def test_plot_writes_a_file(topic: str, suffix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / f"{topic}{suffix}"
    code, _, err = run_cli(["lab", topic, "--plot", str(target)], capsys)
    assert code == 0, err
    assert target.stat().st_size > 1000


def test_schedule_torch_snippet(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["lab", "schedule", "--torch", "--shape", "wsd"], capsys)
    assert code == 0 and "LambdaLR" in out
    compile(out, "<snippet>", "exec")


def test_clip_reads_a_trace_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "norms.txt"
    p.write_text("\n".join(["0.5"] * 196 + ["7.39", "2", "3", "1.5"]))
    code, out, _ = run_cli(["lab", "clip", "--trace", str(p), "--json"], capsys)
    v = json.loads(out)["values"]
    assert code == 0 and v["triggered"] == 4 and v["max_norm"] == 7.39 and v["trace_steps"] == 200


@pytest.mark.parametrize(
    "argv",
    [
        ["lab", "adam", "--beta1", "1.0"],
        ["lab", "adam", "--beta2", "-0.1"],
        ["lab", "adam", "--steps", "-3"],
        ["lab", "warmup", "--warmup", "200000"],
        ["lab", "schedule", "--warmup", "200000"],
        ["lab", "schedule", "--decay-shape", "cosin"],
        ["lab", "schedule", "--torch", "--shape", "cosin"],
        ["lab", "formats", "--formats", "bf61"],
        ["lab", "clip", "--trace", "/nonexistent/norms.txt"],
        ["lab", "collectives", "--ring", "1"],
        ["lab", "collectives", "--gpus", "8,x"],
        ["lab", "collectives", "--tp", "1"],
        ["lab", "adam", "--plot", "out.pdf"],
        ["lab", "adam", "--no-such-option"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and not out
    assert err.startswith("stepbill: error:") and len(err.strip().splitlines()) == 1
