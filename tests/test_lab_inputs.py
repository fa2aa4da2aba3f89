"""`stepbill lab` input validation: every bad input is one line on stderr and exit 2 (nothing on stdout), and the
edge inputs that have an answer print it (descent's small steepness ratios, adam's longest run, schedule's
--torch --json)."""

from __future__ import annotations

import inspect
import json
import math

import pytest

from stepbill.lab import _check, adam, backprop, descent
from stepbill.lab import cli as lab_cli
from stepbill.spec.schema import Real
from tests.conftest import run_cli


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    """Run `stepbill argv`; assert the one-line refusal (exit 2, empty stdout) and return the line."""
    code, out, err = run_cli(argv, capsys)
    assert code == 2, (argv, out[:200], err[:300])
    assert out == ""
    assert err.startswith("stepbill: error: ") and err.count("\n") == 1 and err.endswith("\n"), err[:300]
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def json_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    code, out, err = run_cli([*argv, "--json"], capsys)
    assert code == 0 and err == "", err[:300]
    return json.loads(out)


# 1. descent: a steepness ratio <= 1.9 has an answer (the flat direction oscillates, or never halves)

def test_descent_small_ratios_give_steps_or_never(capsys: pytest.CaptureFixture[str]) -> None:
    v = json_of(["lab", "descent", "--ratios", "1,1.5,1.9,0.95,0.5", "--steps", "1"], capsys)["values"]
    halves = v["steps_to_half"]
    # ratio 1: the flat direction is multiplied by 1 − 1.9 = −0.9 per step: |x| halves after ln ½ / ln 0.9 steps
    assert halves["1"] == pytest.approx(math.log(0.5) / math.log(0.9))
    assert halves["1.5"] == pytest.approx(math.log(0.5) / math.log(1.9 / 1.5 - 1))
    assert halves["1.9"] == 0.0  # the first step lands on the minimum
    assert halves["0.95"] == "inf" and halves["0.5"] == "inf"  # |1 − 1.9/ratio| >= 1: never halves
    code, out, _ = run_cli(["lab", "descent", "--ratios", "0.5", "--steps", "1"], capsys)
    assert code == 0 and "never" in out


def test_gd_steps_to_half_matches_a_simulation_on_both_sides_of_1_9() -> None:
    for ratio in (1.0, 1.2, 1.8, 2.0, 3.0):
        x, steps = 1.0, 0
        while abs(x) > 0.5:
            x *= descent.flat_contraction(ratio)
            steps += 1
        assert abs(steps - descent.gd_steps_to_half(ratio)) <= 1, ratio
    assert descent.gd_steps_to_half(0.95) == math.inf and descent.gd_steps_to_half(0.1) == math.inf
    huge = descent.gd_steps_to_half(1e300)  # 1 − 1.9/ratio rounds to 1; log1p keeps the answer
    assert math.isfinite(huge) and huge == pytest.approx(math.log(2) * 1e300 / 1.9)


# 2. descent: non-positive ratios

@pytest.mark.parametrize("ratio", ["0", "-1", "25,0"])
def test_descent_non_positive_ratio_refused(ratio: str, capsys: pytest.CaptureFixture[str]) -> None:
    refused(["lab", "descent", "--ratios", ratio], capsys, "--ratios")


# 3. memory: params < 1

@pytest.mark.parametrize("params", ["0", "0.5", "7e9,0", "-7e9"])
def test_memory_params_below_one_refused(params: str, capsys: pytest.CaptureFixture[str]) -> None:
    refused(["lab", "memory", "--params", params], capsys, "--params", "[1, ")


# 4. backprop: negative seed

def test_backprop_negative_seed_refused(capsys: pytest.CaptureFixture[str]) -> None:
    refused(["lab", "backprop", "--seed", "-1"], capsys, "--seed", "[0, 4,294,967,295]")
    with pytest.raises(ValueError, match="seed"):  # the library route: a StepbillError, not numpy's
        backprop.tiny_net(seed=-1)


# 5, 6. backprop: --links bounded so that 0.8^links and 1.2^links stay finite and nonzero

@pytest.mark.parametrize("links", ["3400", "3900", str(_check.LINKS.high + 1)])
def test_backprop_links_above_the_maximum_refused(links: str, capsys: pytest.CaptureFixture[str]) -> None:
    refused(["lab", "backprop", "--links", links], capsys, "--links", f"[0, {_check.LINKS.high:,}]")


def test_backprop_links_at_the_maximum_stay_finite(capsys: pytest.CaptureFixture[str]) -> None:
    links = _check.LINKS.high
    v = json_of(["lab", "backprop", "--links", str(links), "--no-torch"], capsys)["values"]
    assert 0.0 < v["chain_power_low"] == pytest.approx(0.8**links) and math.isfinite(v["chain_power_high"])
    assert v["orders_between"] == pytest.approx(links * math.log10(1.5))
    assert backprop.chain_power(1.2, 3900) == math.inf and backprop.chain_power(0.8, 3400) == 0.0  # library route


# 7. adam: the documented maximum of --steps runs fast and prints a subsampled per-step table

def test_adam_max_steps_is_subsampled_and_correct(capsys: pytest.CaptureFixture[str]) -> None:
    steps = _check.OPTIONS["adam"]["steps"].high
    s = json_of(["lab", "adam", "--steps", str(steps)], capsys)
    shares, regs = s["tables"][0], s["tables"][1]
    for table in (shares, regs):
        assert len(table["rows"]) <= 60 and f"of {steps:,} steps shown" in table["title"]
        assert table["rows"][0][0] == 1 and table["rows"][-1][0] == steps
    exact = adam.ema_shares(0.9, steps) * 100
    for row in shares["rows"]:
        assert row[2] == pytest.approx(exact[row[0] - 1])
    code, out, _ = run_cli(["lab", "adam", "--steps", "12"], capsys)  # the seed's 12 steps: every row, no note
    assert code == 0 and "steps shown" not in out


# 8. schedule: --torch --json prints JSON (the snippet inside it)

def test_schedule_torch_json_is_json(capsys: pytest.CaptureFixture[str]) -> None:
    s = json_of(["lab", "schedule", "--torch", "--shape", "wsd"], capsys)
    assert s["topic"] == "schedule" and s["settings"]["shape"] == "wsd" and s["settings"]["torch"] is True
    assert "LambdaLR" in s["values"]["torch_snippet"]
    compile(s["values"]["torch_snippet"], "<snippet>", "exec")  # valid Python (running it imports torch: slow)


# 9. non-finite numbers: refused by every lab float option

def _lab_options() -> list[tuple[str, str, str, object]]:
    """(topic, parameter name, flag, annotation) of every option of every `stepbill lab` command."""
    out = []
    for command in lab_cli.app.registered_commands:
        assert command.name is not None and command.callback is not None
        for name, parameter in inspect.signature(command.callback).parameters.items():
            decls = getattr(parameter.default, "param_decls", None) or ()
            flag = next((d for d in decls if d.startswith("--")), "--" + name.replace("_", "-"))
            out.append((command.name, name, flag.split("/")[0], parameter.annotation))
    return out


def _real_options() -> list[tuple[str, str]]:
    """(topic, flag) of every lab option whose rule is a Real, list options included."""
    return [(topic, flag) for topic, name, flag, _ in _lab_options()
            if isinstance(_check.OPTIONS.get(topic, {}).get(name), Real)]


def test_every_lab_float_option_has_a_finite_rule() -> None:
    floats = [(topic, name) for topic, name, _, annotation in _lab_options() if annotation in (float, "float")]
    assert ("descent", "x0") in floats
    for topic, name in floats:
        assert isinstance(_check.OPTIONS.get(topic, {}).get(name), Real), (topic, name)


def test_descent_x0_inf_refused(capsys: pytest.CaptureFixture[str]) -> None:
    refused(["lab", "descent", "--x0", "inf"], capsys, "--x0", "finite")


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e400"])
@pytest.mark.parametrize(("topic", "flag"), _real_options())
def test_non_finite_lab_float_refused(topic: str, flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    refused(["lab", topic, flag, value], capsys, flag, "finite")
