"""Every command's `--json` against its declared schema (report/schema.py), and no NaN or Infinity anywhere."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from stepbill.report.schema import SCHEMAS, json_schema, validate
from tests.conftest import run_cli

SAMPLES = Path(__file__).resolve().parent / "data" / "json_samples"
LAB_TOPICS = ("adam", "decay", "warmup", "schedule", "clip", "formats", "collectives", "backprop", "descent", "memory",
              "torch-defaults", "seed-checks", "megatron-defaults", "citations")

# (schema, argv): bill with and without a layout and a GPU, recompute, models, every lab topic
CASES: list[tuple[str, list[str]]] = [
    ("bill", ["bill", "--json"]),
    ("bill", ["bill", "deepseek-v3", "--seq", "4096", "--gpu-mem", "80", "--json"]),
    ("bill", ["bill", "llama2-7b", "--seq", "4096", "--dp", "2", "--tp", "2", "--sp", "--pp", "2", "--micro-batches",
              "4", "--zero", "1", "--gpus", "8", "--gpu", "h100-sxm", "--json"]),
    ("bill", ["bill", "mixtral-8x7b", "--seq", "4096", "--dp", "2", "--ep", "2", "--zero", "3", "--convention", "eager",
              "--lora-rank", "8", "--recompute", "every:2", "--offload-optimizer", "--gpu", "a100-80gb", "--json"]),
    # a layout without --gpu: the collectives have no link yet (null), the JSON stays valid
    ("bill", ["bill", "llama2-13b", "--tp", "2", "--sp", "--gpus", "2", "--json"]),
    # the sliding-window model as published, eager: its mask line and windowed / executed attention FLOPs
    ("bill", ["bill", "tests/data/hf_configs/mistral-7b.json", "--seq", "8192", "--convention", "eager", "--json"]),
    ("recompute", ["recompute", "llama3-8b", "--seq", "4096", "--json"]),
    ("models", ["models", "--json"]),
    *[("lab", ["lab", topic, "--json"]) for topic in LAB_TOPICS],
    ("fit", ["fit", "llama3-8b", "--max", "seq", "--gpu", "h100", "--lora-rank", "16", "--json"]),
    # a refused value (tp 3 does not divide the heads) beside two bills
    ("sweep", ["bill", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--sweep", "tp=1,2,3", "--json"]),
    # --fix pp_layers: its request echoes a list (the fuzzer's find: the schema took only int / bool / str)
    ("plan", ["plan", "gpt3-125m", "--gpu", "h100", "--seq", "512", "--micro-batch", "1", "--gpus", "2", "--fix",
              "pp=2", "--fix", "pp_layers=5,7", "--top", "1", "--json"]),
]


def strict_json(text: str) -> Any:
    """Parse JSON, refusing the NaN / Infinity tokens Python's json module would accept."""
    def refuse(token: str) -> None:
        raise AssertionError(f"non-finite number {token} in the JSON")

    return json.loads(text, parse_constant=refuse)


def non_finite(value: Any, path: str = "$") -> list[str]:
    """Paths of every NaN / Infinity in a parsed JSON value (floats, or strings standing for them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [path]
    if isinstance(value, str) and value.strip().lower() in ("nan", "inf", "-inf", "infinity", "-infinity"):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in non_finite(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in non_finite(v, f"{path}[{i}]")]
    return []


def validate_both(command: str, data: Any) -> None:
    """The pydantic model (the source) and the published JSON Schema (what `stepbill schema` prints) agree."""
    validate(command, data)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator(json_schema(command)).validate(data)


@pytest.mark.parametrize(("command", "argv"), CASES, ids=[" ".join(a[:2]) + f"-{i}" for i, (_, a) in enumerate(CASES)])
def test_every_json_output_matches_its_schema(command: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    data = strict_json(out)
    assert non_finite(data) == []
    validate_both(command, data)


def test_recompute_budget_matches_its_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["recompute", "llama3-8b", "--seq", "4096", "--budget", "20GiB", "--json"], capsys)
    assert code == 0
    data = strict_json(out)
    assert set(data["budget"]) and non_finite(data) == []
    validate_both("recompute", data)


@pytest.mark.parametrize("sample", ["check.json", "check-sharded.json"])
def test_stored_check_outputs_match_the_check_schema(sample: str) -> None:
    """`stepbill check tests/data/tiny-llama.json --seq 32 [--dp 2 --zero 3] --json` (20 s each: stored)."""
    data = strict_json((SAMPLES / sample).read_text())
    assert non_finite(data) == []
    validate_both("check", data)


def test_the_schema_refuses_what_the_docs_promise_never_happens() -> None:
    from pydantic import ValidationError

    good = strict_json((SAMPLES / "check.json").read_text())
    for mutate in (lambda d: d["rows"][0].update(error=float("nan")),  # NaN
                   lambda d: d["rows"][0].update(predicted="427264"),  # a number as a string
                   lambda d: d.update(surprise=1),  # an undeclared key
                   lambda d: d.pop("verdict")):  # a missing key
        bad = json.loads(json.dumps(good))
        mutate(bad)
        with pytest.raises(ValidationError):
            validate("check", bad)


def test_timeline_items_must_be_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    from pydantic import ValidationError

    data = strict_json(run_cli(["bill", "--json"], capsys)[1])
    data["timeline"][0]["weights"] = "250452480"
    with pytest.raises(ValidationError, match=r"timeline\.0\.weights"):
        validate("bill", data)


def test_api_to_json_matches_the_bill_schema() -> None:
    import stepbill

    data = stepbill.bill("llama3-8b", seq=8192, dp=8, zero=3, gpu="h100-sxm").to_json()
    validate_both("bill", json.loads(json.dumps(data, allow_nan=False)))


def test_schema_command_prints_every_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["schema"], capsys)
    assert code == 0 and set(json.loads(out)) == set(SCHEMAS)
    code, out, _ = run_cli(["schema", "bill"], capsys)
    schema = json.loads(out)
    assert code == 0 and schema == json_schema("bill")
    assert schema["properties"]["memory"]["$ref"].endswith("/MemoryPart")
    jsonschema = pytest.importorskip("jsonschema")
    for name in SCHEMAS:
        jsonschema.Draft202012Validator.check_schema(json_schema(name))


def test_schema_of_an_unknown_command_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["schema", "bil"], capsys)
    assert code == 2 and not out and "did you mean 'bill'" in err and err.count("\n") == 1


def test_docs_key_tables_are_generated_from_the_schema() -> None:
    """docs/json.md holds `key_table(COMMAND)` for every command: run scripts/refresh_docs.py after a change."""
    from stepbill.report.schema_docs import key_table

    text = (Path(__file__).resolve().parent.parent / "docs" / "json.md").read_text()
    for command in SCHEMAS:
        block = f"<!-- schema:{command} -->\n{key_table(command)}\n<!-- /schema:{command} -->"
        assert block in text, f"docs/json.md's {command} table is stale: python scripts/refresh_docs.py"


def test_every_preset_sharded_on_a_gpu_is_schema_valid_and_finite() -> None:
    """The bill of every preset, global and per rank (dp 2, ZeRO-3, H100): valid, no NaN or Infinity."""
    import stepbill

    for info in stepbill.models():
        seq = min(4096, stepbill.load_model(info.name).max_position_embeddings or 4096)
        data = json.loads(json.dumps(stepbill.bill(info.name, seq=seq, dp=2, zero=3, gpu="h100-sxm").to_json(),
                                     allow_nan=False))
        assert non_finite(data) == [], info.name
        validate("bill", data)
