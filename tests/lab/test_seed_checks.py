"""`stepbill lab seed-checks` and `stepbill lab torch-defaults`: engine values beside the seed's, both readings with
their reason, and torch's defaults read from the installed version."""

from __future__ import annotations

import json
import sys

import pytest

from stepbill.lab import seed_checks
from tests.conftest import run_cli


def test_every_check_has_a_seed_value_and_inputs() -> None:
    groups = seed_checks.all_checks()
    assert len(groups) == len(seed_checks.GROUPS)
    for checks in groups.values():
        for c in checks:
            assert c.seed and c.inputs and c.unit, c.claim
            assert (c.preset_value is None) or c.note, f"{c.claim}: a second reading needs its reason"


def test_contradictions_show_both_readings(capsys: pytest.CaptureFixture[str]) -> None:
    """bill-6nd-29.1PF, bill-attn-82.1pct, gpt3s-resident-1.86, gpt3s-totals: the seed's number with its inputs and
    the preset's (the one `stepbill bill` prints), and why."""
    code, out, _ = run_cli(["lab", "seed-checks", "--json"], capsys)
    v = json.loads(out)["values"]
    assert code == 0
    six = v["bill-6nd-29.1PF"]
    assert round(six["value"], 1) == 29.1 and round(six["preset_value"], 2) == 29.53 and "37" in six["inputs"]
    attn = v["bill-attn-82.1pct"]
    assert round(attn["value"], 1) == 82.1 and round(attn["preset_value"], 1) == 81.7 and "whole model" in attn["note"]
    res = v["gpt3s-resident-1.86"]
    assert round(res["value"], 2) == 1.86 and round(res["preset_value"], 3) == 1.866 and "125,226,240" in res["note"]
    tot = v["gpt3s-totals"]
    assert round(tot["value"], 2) == 3.97 and round(tot["preset_value"], 2) == 3.83 and "timeline" in tot["note"]
    comp = v["gpt3s-totals:compute"]
    assert round(comp["value"]) == 33 and round(comp["preset_value"], 1) == 23.7 and "LM head" in comp["note"]
    assert v["v3-full-recompute-106.75"]["value"] == 106.75
    assert json.loads(out)["pending"] == seed_checks.PENDING


def test_bill_notes_only_for_the_seed_examples() -> None:
    assert seed_checks.bill_notes("gpt3-125m", 2048, 1, "none") == []
    notes = seed_checks.bill_notes("deepseek-v3", 131_072, 1, "none")
    assert len(notes) == 2 and all(n.startswith("seed 000 prints") for n in notes)


def test_torch_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    """fw-preserve-rng-default, fw-ddp-bucket-25, fw-api-names (torch's part)."""
    pytest.importorskip("torch")
    code, out, _ = run_cli(["lab", "torch-defaults", "--json"], capsys)
    v = json.loads(out)["values"]
    assert code == 0 and v["checkpoint_preserves_rng_by_default"] is True and v["ddp_bucket_cap_mib"] == 25
    assert {"MUST_SAVE", "PREFER_RECOMPUTE"} <= set(v["checkpoint_policy_members"])


def test_torch_defaults_without_torch(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    code, out, err = run_cli(["lab", "torch-defaults"], capsys)
    assert code == 2 and not out and "stepbill[measure]" in err and len(err.strip().splitlines()) == 1


def test_backprop_takes_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["lab", "backprop", "--no-torch", "--model", "gpt3-125m", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["values"]["forward_mode_sweeps"] == 125_226_240 and data["settings"]["model"] == "gpt3-125m"


@pytest.mark.parametrize("topic", ["memory", "seed-checks", "torch-defaults"])
def test_table_only_topics_have_no_plot_option(topic: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["lab", topic, "--plot", "x.png"], capsys)
    assert code == 2 and "--plot" in err
