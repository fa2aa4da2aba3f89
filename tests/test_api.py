"""The public Python API (`import stepbill`): same numbers and JSON as the CLI, typed sections, named errors."""

from __future__ import annotations

import json

import pytest

import stepbill
from tests.conftest import run_cli

ISSUE_EXAMPLE = {"seq": 8192, "recipe": "mixed-bf16", "dp": 8, "zero": 3, "gpu": "h100-sxm"}


@pytest.fixture(scope="module")
def llama_bill() -> stepbill.StepBill:
    return stepbill.bill("llama3-8b", **ISSUE_EXAMPLE)


def test_issue_example_runs_as_written(llama_bill: stepbill.StepBill) -> None:
    b = llama_bill
    assert b.memory.peak == 148_270_301_184  # design review §8: 138.09 GiB on one GPU
    assert isinstance(b.memory.peak, int) and isinstance(b.flops.step, int)
    assert b.ranks[0].memory.peak < b.memory.peak  # ZeRO-3 over 8 ranks shards the states
    assert b.flops.step == round(b.line("flops.step").value)
    assert b.time is not None and b.time.step > 0 and 0 < b.time.mfu <= 1
    assert "provenance: derived" in b.explain("memory.peak")
    assert "6 × 8,030,261,248 active params × 8,192 tokens" in b.explain("flops.six_nd")
    assert b.explain("flops.6nd") == b.explain("flops.six_nd")


def test_to_json_is_exactly_what_the_cli_prints(llama_bill: stepbill.StepBill,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bill", "llama3-8b", "--seq", "8192", "--recipe", "mixed-bf16", "--dp", "8", "--zero", "3",
            "--gpu", "h100-sxm", "--json"]
    code, out, err = run_cli(argv, capsys)
    assert code == 0 and not err
    assert json.loads(out) == json.loads(json.dumps(llama_bill.to_json()))


def test_single_gpu_to_json_matches_cli(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["bill", "gpt3-125m", "--micro-batch", "8", "--seq", "1024", "--gpu-mem", "80",
                            "--json"], capsys)
    b = stepbill.bill("gpt3-125m", micro_batch=8, seq=1024, gpu_mem_gib=80)
    assert code == 0 and json.loads(out) == json.loads(json.dumps(b.to_json()))
    assert b.time is None and b.cards is not None and b.cards.peak == 1
    assert b.memory.as_dict()["activations"] == b.to_json()["memory"]["activations"]


def test_sections_list_valid_names_on_a_typo(llama_bill: stepbill.StepBill) -> None:
    with pytest.raises(AttributeError, match="valid: weights, grads"):
        _ = llama_bill.memory.peek
    with pytest.raises(AttributeError, match=r"valid: .*memory"):
        _ = llama_bill.ranks[0].memroy
    with pytest.raises(stepbill.StepbillError, match=r"unknown line .memory\.peek.; did you mean .memory\.peak."):
        llama_bill.explain("memory.peek")
    with pytest.raises(AttributeError):  # frozen
        llama_bill.memory.peak = 0  # type: ignore[misc]


def test_rank_view_exposes_every_json_key(llama_bill: stepbill.StepBill) -> None:
    rank = llama_bill.ranks[0]
    entry = llama_bill.to_json()["ranks"][0]
    assert rank.name == entry["class"] and rank.ranks == entry["ranks"] and rank.fits == entry["fits"]
    assert rank.memory.as_dict() == entry["memory"]
    assert llama_bill.worst_rank.memory.peak == max(r.memory.peak for r in llama_bill.ranks)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"micro_batch": 0}, "micro_batch must be a positive integer, got 0"),
    ({"seq": "8192"}, "seq must be a positive integer, got '8192'"),
    ({"dp": 2.0}, "dp must be a positive integer"),
    ({"zero": 4}, "zero must be 0, 1, 2 or 3"),
    ({"gpu_mem_gib": float("nan")}, r"gpu_mem_gib \(GiB\) must be a finite number"),
    ({"efficiency": float("inf")}, r"efficiency must be a finite number"),
    ({"sp": "yes"}, "sp must be True or False"),
    ({"lora_targets": [1, 2]}, "lora_targets must be names"),
    ({"gpu": 80}, "gpu must be a catalog GPU name"),
    ({"lora_targets": "q_proj"}, "lora_targets needs lora_rank"),
])
def test_api_errors_name_the_parameter(kwargs: dict, message: str) -> None:
    with pytest.raises(stepbill.StepbillError, match=message) as info:
        stepbill.bill("gpt3-125m", **kwargs)
    assert "--" not in str(info.value) and "\n" not in str(info.value)


def test_cli_checks_name_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["bill", "gpt3-125m", "--micro-batch", "0"], capsys)
    assert code == 2 and "--micro-batch must be a positive integer" in err


def test_model_may_be_a_spec_or_a_path(tmp_path) -> None:
    spec = stepbill.load_model("gpt3-125m")
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec.to_dict()))
    assert stepbill.load_model(str(path)) == spec
    assert stepbill.bill(spec).memory.peak == stepbill.bill(str(path)).memory.peak
    with pytest.raises(stepbill.StepbillError, match="model must be"):
        stepbill.bill(42)  # type: ignore[arg-type]


def test_hf_config_folder_is_read(tmp_path) -> None:
    from pathlib import Path

    src = Path(__file__).resolve().parent.parent / "examples" / "configs" / "qwen2.5-7b" / "config.json"
    (tmp_path / "qwen2.5-7b").mkdir()
    (tmp_path / "qwen2.5-7b" / "config.json").write_text(src.read_text())
    assert stepbill.load_model(str(tmp_path / "qwen2.5-7b")) == stepbill.load_model(str(src))


def test_models_and_gpus_list_the_catalogs(capsys: pytest.CaptureFixture[str]) -> None:
    from dataclasses import asdict

    code, out, _ = run_cli(["models", "--json"], capsys)
    assert code == 0 and json.loads(out) == [asdict(m) for m in stepbill.models()]
    names = [g.name for g in stepbill.gpus()]
    assert "h100-sxm" in names and all(g.memory_bytes > 0 for g in stepbill.gpus())


def test_check_is_callable_before_and_after_its_module_is_imported() -> None:
    import stepbill.check as check_module  # rebinds stepbill.check to the module: still callable

    assert callable(stepbill.check) and hasattr(check_module, "compare")
    with pytest.raises(stepbill.StepbillError, match="check measures recipe fp32"):
        stepbill.check("gpt3-125m", recipe="mixed-bf16")


def test_check_without_torch_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch → ImportError
    monkeypatch.delitem(sys.modules, "stepbill.measure.step", raising=False)
    with pytest.raises(stepbill.StepbillError, match=r"pip install 'stepbill\[measure\]'") as info:
        stepbill.check("gpt3-125m")
    assert "\n" not in str(info.value)


def test_import_stepbill_is_cheap() -> None:
    import subprocess
    import sys

    code = "import sys, stepbill; print(sorted(m for m in sys.modules if m.startswith(('stepbill.engine', 'torch'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


TINY = "tests/data/tiny-llama.json"


@pytest.mark.slow
def test_check_returns_what_the_cli_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """One real measurement through the API and one through the CLI: the same JSON, valid against its schema."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from stepbill.report.schema import validate

    result = stepbill.check(TINY, seq=32, mode="real")
    code, out, _ = run_cli(["check", TINY, "--seq", "32", "--real", "--json"], capsys)
    assert code == 0 and json.loads(out) == json.loads(json.dumps(result.to_json()))
    assert result.mode == "real" and result.verdict.startswith("9 of 9")
    assert all(row.error == 0 for row in result if row.unit == "bytes" and row.category.startswith("params"))
    validate("check", result.to_json())


@pytest.mark.slow
def test_sharded_check_through_the_api() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from stepbill.report.schema import validate

    result = stepbill.check(TINY, seq=32, dp=2, zero=3, rank=1, mode="fake")
    assert list(result.by_rank) == [1] and result.to_json()["ranks"][0]["rank"] == 1
    validate("check", result.to_json())


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"dp": 2}, "a sharded check needs dp >= 2 and zero 1, 2 or 3"),
    ({"dp": 2, "zero": 3, "rank": 2}, r"rank must be an integer in \[0, dp\)"),
    ({"mode": "fast"}, "mode must be 'auto', 'real' or 'fake'"),
    ({"seq": 0}, "seq must be a positive integer"),
])
def test_check_arguments_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(stepbill.StepbillError, match=message):
        stepbill.check(TINY, **kwargs)
