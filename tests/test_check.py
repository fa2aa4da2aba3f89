"""`stepbill check`: the pure comparison, the mode choice, and one real measured run of a tiny model."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from stepbill.check import CATEGORIES, choose_mode, compare, verdict
from stepbill.errors import StepbillError
from tests.conftest import GIB, run_cli

TINY = "tests/data/tiny-llama.json"


def _measured(**values: float) -> SimpleNamespace:
    fields = {field: 100.0 for _, _, field, _ in CATEGORIES}
    return SimpleNamespace(**{**fields, **values})


def test_error_is_relative_to_the_measurement() -> None:
    rows = compare({"memory.weights": 103.0, "memory.grads": 90.0}, _measured())
    by = {r.line: r for r in rows}
    assert by["memory.weights"].error == pytest.approx(0.03) and by["memory.weights"].verdict == "ok"
    assert by["memory.grads"].error == pytest.approx(-0.10) and by["memory.grads"].verdict == "off"
    assert by["memory.peak"].error is None and by["memory.peak"].verdict == "not predicted"
    assert verdict(rows) == "1 of 2 predicted categories within 3% of PyTorch's measurement"


def test_mode_choice_by_free_memory() -> None:
    assert choose_mode("auto", 1 * GIB, free_bytes=16 * GIB) == "real"
    assert choose_mode("auto", 100 * GIB, free_bytes=16 * GIB) == "fake"
    assert choose_mode("fake", 1 * GIB, free_bytes=16 * GIB) == "fake"
    with pytest.raises(StepbillError, match="--real refused"):
        choose_mode("real", 100 * GIB, free_bytes=16 * GIB)


@pytest.mark.parametrize(("argv", "needle"), [
    (["check", TINY, "--recipe", "mixed-bf16"], "check measures --recipe fp32 | pure-bf16 | amp-bf16"),
    (["check", TINY, "--dp", "2", "--zero", "3", "--recipe", "pure-bf16"],
     "check under ZeRO-3 measures FSDP2's mixed precision only: --recipe fsdp-mixed-bf16"),
    (["check", TINY, "--dp", "2", "--zero", "1", "--recipe", "amp-bf16"],
     "check under ZeRO-1 measures --recipe fp32 | pure-bf16"),
    (["check", TINY, "--launch", "2", "--fake"], "--launch measures real tensors"),
    (["check", TINY, "--launch", "2", "--dp", "4"], "--dp 4 must equal --launch 2"),
    (["check", TINY, "--device", "cuda"], "--device cuda needs real ranks"),
    (["check", TINY, "--device", "tpu"], "--device must be cpu or cuda"),
    (["check", TINY, "--dp", "2"], "--dp N with --zero 0 is DDP, measured on real ranks only"),
    (["check", TINY, "--real", "--fake"], "choose one of --real and --fake"),
    (["check", "llama2-70b", "--real", "--seq", "4096"], "--real refused"),
])
def test_check_bad_input(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and needle in err and err.count("\n") == 1 and out == ""


@pytest.mark.torch
def test_tiny_real_check_matches_resident_state(capsys: pytest.CaptureFixture[str]) -> None:
    """fp32 AdamW, single-tensor: params, grads, states, activations and the three peaks are measured exactly
    as predicted (the parameter count itself is checked against transformers elsewhere)."""
    pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")
    pytest.importorskip("transformers", reason="needs transformers: pip install 'stepbill[measure]'")
    code, out, _ = run_cli(["check", TINY, "--real", "--seq", "64", "--micro-batch", "2", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["mode"] == "real"
    assert data["convention"] == "eager"
    # eager convention: every memory category to the byte (AdamW's 4-byte `step` counters included)
    assert all(r["error"] == 0 for r in data["rows"] if r["unit"] == "bytes")


def test_check_without_torch_names_the_extra(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """torch missing → one line naming the extra to install, exit 2."""
    import sys

    for name in [m for m in sys.modules if m == "stepbill.measure" or m.startswith(("stepbill.measure.", "torch"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    code, out, err = run_cli(["check", TINY, "--fake"], capsys)
    assert code == 2 and "stepbill[measure]" in err and err.count("\n") == 1 and out == ""


@pytest.mark.torch
@pytest.mark.parametrize("dropout", [None, 0])
def test_check_measures_the_configured_dropout(dropout: float | None, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """A GPT-2 config with the family's default dropout (0.1) is measured with it and billed with it (the eager
    convention's dropout rows: masks and SDPA's math path on CPU); `--dropout 0` switches it off in both. The
    activations agree either way, and no dropout note is left."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from stepbill.measure.tiny import TINY_CONFIGS

    config = {k: v for k, v in TINY_CONFIGS["gpt2"].items() if not k.endswith("_pdrop")}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    argv = ["check", str(path), "--real", "--seq", "32", "--json"]
    code, out, _ = run_cli(argv + ([] if dropout is None else ["--dropout", "0"]), capsys)
    assert code == 0
    data = json.loads(out)
    rows = {r["line"]: r for r in data["rows"]}
    assert data["unmodelled"] == []
    assert abs(rows["memory.activations"]["error"]) <= 0.03
    if dropout is not None:
        assert data["dropout_option"] == 0


@pytest.mark.torch
def test_sharded_check_names_the_fsdp_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    """Under --zero 2/3 the measured recipe is FSDP2's mixed precision, named in the JSON (and the header)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    code, out, _ = run_cli(["check", TINY, "--dp", "2", "--zero", "2", "--rank", "0", "--seq", "16", "--real",
                            "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["recipe"] == "fsdp-mixed-bf16"
    assert data["mixed_precision"]["sharded_params"] == "fp32"
    assert data["mixed_precision"]["reduce_dtype"].startswith("fp32")
    assert data["mixed_precision"]["compute_params"].startswith("bf16")
