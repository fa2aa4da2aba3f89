"""The command line: default run, JSON shape, and one-line errors with exit code 2 for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import GIB, run_cli


def test_no_arguments_prints_the_seed_worked_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli([], capsys)
    assert code == 0 and not err
    assert "gpt3-125m" in out and "8,192 tokens" in out
    assert "2.11 GiB" in out  # the seed's activations for micro-batch 8 × seq 1,024
    assert "GiB = 2^30 B" in out


def test_bill_json_has_the_documented_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["bill", "gpt3-125m", "--micro-batch", "8", "--seq", "1024", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    for key in ("params_total", "params_active"):
        assert isinstance(data["model"][key], int)
    for key in ("weights", "grads", "optimizer", "activations", "peak"):
        assert isinstance(data["memory"][key], int)
    assert isinstance(data["checkpoint"]["bytes"], int)
    items = data["memory"]["items"]
    assert {"name", "bytes", "formula", "provenance"} <= set(items[0])
    assert sum(i["bytes"] for i in items) == data["memory"]["peak"]
    assert round(data["memory"]["activations"] / GIB, 2) == 2.11


def test_explain_shows_formulas_with_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["bill", "gpt3-125m", "--explain"], capsys)
    assert code == 0
    assert "125,226,240 params × 2 B" in out
    assert "cited: ZeRO" in out
    assert "layer total" in out and "11,520" in out


def test_gpu_mem_gives_cards(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["bill", "deepseek-v3", "--gpu-mem", "80", "--json"], capsys)
    assert code == 0 and json.loads(out)["cards"]["resident"] == 125


def test_lora_options(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["bill", "llama2-7b", "--lora-rank", "16", "--lora-targets", "q_proj,v_proj", "--json"], capsys)
    assert code == 0 and json.loads(out)["model"]["params_trainable"] == 8_388_608


def test_models_lists_presets_with_params(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["models", "--json"], capsys)
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and len(rows) >= 15
    assert rows["llama2-7b"]["params_total"] == 6_738_415_616
    assert rows["mixtral-8x7b"]["params_active"] < rows["mixtral-8x7b"]["params_total"]


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.json"
    path.write_text(text)
    return str(path)


BAD_SPEC = {
    "name": "x", "vocab_size": 100, "hidden_size": 64, "n_layers": 2,
    "attention": {"n_heads": 4}, "ffn": {"intermediate_size": 128},
}


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["bill", "gpt3-126m"], "did you mean 'gpt3-125m'"),
        (["bill", "/nonexistent/config.json"], "cannot read"),
        (["bill", "gpt3-125m", "--recipe", "bf17"], "unknown recipe"),
        (["bill", "gpt3-125m", "--optimizer", "adamx"], "unknown optimizer"),
        (["bill", "gpt3-125m", "--seq", "0"], "--seq must be"),
        (["bill", "gpt3-125m", "--micro-batch", "-1"], "--micro-batch must be"),
        (["bill", "gpt3-125m", "--recompute", "some"], "unknown recompute policy"),
        (["bill", "gpt3-125m", "--gpu-mem", "-8"], "--gpu-mem"),
        (["bill", "gpt3-125m", "--lora-rank", "0"], "--lora-rank must be"),
        (["bill", "gpt3-125m", "--lora-rank", "8", "--lora-targets", "nope"], "nope"),
        (["bill", "gpt3-125m", "--seq", "abc"], "Invalid value for '--seq'"),
        (["bill", "gpt3-125m", "--frobnicate"], "No such option"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(argv, capsys)
    assert code == 2, err
    assert needle in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert out == ""


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"model_type": "bert", "hidden_size": 8}', "unsupported model_type 'bert'"),
        (json.dumps({**BAD_SPEC, "hidden_sise": 64}), "unknown key in model 'hidden_sise'"),
        (json.dumps({**BAD_SPEC, "n_layers": 0}), "model.n_layers must be an integer in [1, 10,000], got 0"),
        (json.dumps({**BAD_SPEC, "vocab_size": -5}), "model.vocab_size must be an integer in [1, 10,000,000], got -5"),
        (json.dumps({**BAD_SPEC, "attention": {"n_heads": 5}}), "must divide hidden_size"),
        (json.dumps({**BAD_SPEC, "attention": {"n_heads": 4, "n_kv_heads": 3}}), "must divide n_heads"),
        (json.dumps({k: v for k, v in BAD_SPEC.items() if k != "ffn"}), "missing 'ffn'"),
    ],
)
def test_bad_model_file_is_one_line_and_exit_2(
    tmp_path: Path, text: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["bill", _write(tmp_path, text)], capsys)
    assert code == 2, err
    assert needle in err
    assert err.count("\n") == 1 and out == ""


def test_model_spec_json_file_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["bill", _write(tmp_path, json.dumps(BAD_SPEC)), "--json"], capsys)
    assert code == 0 and json.loads(out)["model"]["params_total"] > 0


def test_quiet_is_one_line_with_the_bill_s_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    """`--quiet`: one line — the verdict and the judged peak against the budget with a card (and the node's host
    under offload), the step with a GPU — the same numbers as the JSON."""
    argv = ["bill", "llama3-70b", "--seq", "8192", "--gpu", "h100", "--gpus", "8", "--zero", "3",
            "--offload-optimizer", "--recompute", "full"]
    code, out, err = run_cli([*argv, "--quiet"], capsys)
    assert code == 0, err
    assert len(out.strip().splitlines()) == 1
    code, js, _ = run_cli([*argv, "--json"], capsys)
    data = json.loads(js)
    assert out.startswith("llama3-70b, 8 GPUs: fits yes · peak ")
    assert f"step {data['time']['step']['value']:.3f} s" in out and " of 2.00 TiB a node" in out
    code, out, _ = run_cli(["bill", "llama3-8b", "--quiet"], capsys)
    assert code == 0 and "no card: --gpu for a verdict" in out and len(out.strip().splitlines()) == 1
