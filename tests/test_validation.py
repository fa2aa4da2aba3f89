"""Bad input, issue 14: every example of its "Why" (and the causes found since) gives one stderr line and exit 2,
or a correct answer. Inputs are written out in each case so a reader sees exactly what was tried."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from pathlib import Path

import pytest

from stepbill.engine.bill import make_bill
from stepbill.engine.recompute import best_segment, make_plan
from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec
from stepbill.spec.presets import load_preset
from stepbill.spec.recipe import make_recipe
from stepbill.spec.recompute_policy import RecomputePolicy, parse_size
from tests.conftest import GIB, run_cli

DATA = Path(__file__).parent / "data"
GPT3_SMALL = json.loads((Path(__file__).parents[1] / "src/stepbill/presets/models/gpt3-125m.json").read_text())
QWEN_MOE = json.loads((DATA / "hf_configs/qwen1.5-moe-a2.7b.json").read_text())


def one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str], needle: str) -> str:
    code, out, err = run_cli(argv, capsys)
    assert code == 2, (code, err)
    assert err.count("\n") == 1 and err.startswith("stepbill: error: ") and out == "", err
    assert needle in err, err
    return err


def write(tmp_path: Path, name: str, content: str | bytes | dict) -> str:
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, dict):
        content = json.dumps(content)
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content)
    return str(p)


# --- crashes (a traceback before) -------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-8", "1e300", "1e-310"])
def test_gpu_mem_must_be_finite_positive_gib(value: str, capsys) -> None:
    one_line_error(["bill", "gpt3-125m", "--gpu-mem", value], capsys, "--gpu-mem (GiB) must be a finite number in")


@pytest.mark.parametrize("policy", ["every:²", "every:٣", "every:-1", "every:0", "every:1e3", "every:99999"])
def test_every_k_takes_ascii_digits_only(policy: str, capsys) -> None:
    one_line_error(["bill", "gpt3-125m", "--recompute", policy], capsys, "every:K needs an integer K in [1, 10,000]")


@pytest.mark.parametrize(("name", "content", "needle"), [
    ("deep.json", "[" * 50_000 + "]" * 50_000, "nests JSON deeper than 64 levels"),
    ("bigint.json", '{"n_layers": ' + "9" * 5_000 + "}", "an integer of 5,000 digits (at most 20 allowed)"),
    ("huge-float.json", '{"n_layers": 1e400}', "'1e400' overflows a finite number"),
    ("nan.json", '{"rotary_fraction": NaN}', "NaN is not a JSON number"),
    ("latin1.json", b'{"model_type": "gpt2", "name": "\xe9"}', "is not UTF-8 text (byte 32)"),
    ("empty.json", "", "is not valid JSON"),
    ("list.json", "[]", "must hold a JSON object"),
])
def test_bad_json_files(tmp_path: Path, name: str, content: str | bytes, needle: str, capsys) -> None:
    one_line_error(["bill", write(tmp_path, name, content)], capsys, needle)


def test_oversized_file_is_refused_before_reading(tmp_path: Path, capsys) -> None:
    path = tmp_path / "big.json"
    with path.open("wb") as f:
        f.truncate(4 * 2**20 + 1)  # sparse: no disk used
    one_line_error(["bill", str(path)], capsys, "bytes (at most 4,194,304)")


def test_dev_zero_fifo_and_directory_are_not_regular_files(tmp_path: Path, capsys) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    folder = tmp_path / "dir.json"
    folder.mkdir()
    for model in ("/dev/zero", str(fifo), str(folder)):
        start = time.monotonic()
        one_line_error(["bill", model], capsys, "not a regular file")
        assert time.monotonic() - start < 5  # a FIFO used to block, /dev/zero to read until memory ran out


@pytest.mark.parametrize(("change", "needle"), [
    ({"n_layers": None}, "model.n_layers must be an integer in [1, 10,000], got None"),
    ({"vocab_size": None}, "model.vocab_size must be an integer in [1, 10,000,000], got None"),
    ({"name": 3}, "model.name must be a printable string of at most 200 characters, got 3"),
    ({"name": None}, "model.name must be a printable string"),
    ({"name": "gpt\nx"}, r"got 'gpt\nx'"),
    ({"n_layers": True}, "model.n_layers must be an integer in [1, 10,000], got True"),
    ({"n_layers": 12.0}, "got 12.0"),
    ({"hidden_size": "768"}, "model.hidden_size must be an integer"),
    ({"rotary_fraction": 2}, "model.rotary_fraction must be a finite number in [0, 1], got 2"),
    ({"attention": {"n_heads": None}}, "attention.n_heads must be an integer in [1, 65,536], got None"),
    ({"attention": {"n_heads": 12, "kind": "gqa"}}, "attention.kind must be one of mha, mla, got 'gqa'"),
    ({"ffn": {"intermediate_size": 3072, "kind": ["swiglu"]}}, "ffn.kind must be one of gelu_mlp, swiglu"),
    ({"moe": {"n_routed_experts": 4, "top_k": 2, "expert_intermediate_size": 8, "dense_layers": [[0]]}},
     "moe.dense_layers must be a list of at most 10,000 integers"),
    ({"moe": "yes"}, "moe must be a JSON object, got 'yes'"),
])
def test_model_spec_types_are_strict(tmp_path: Path, change: dict, needle: str, capsys) -> None:
    one_line_error(["bill", write(tmp_path, "spec.json", {**GPT3_SMALL, **change})], capsys, needle)


# --- accepted and wrong before ----------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "needle"), [
    ({"tied_embeddings": "false"}, "model.tied_embeddings must be true or false, got 'false'"),
    ({"tied_embeddings": 0}, "model.tied_embeddings must be true or false, got 0"),
    ({"ffn": {"intermediate_size": 3072, "bias": "no"}}, "ffn.bias must be true or false, got 'no'"),
    ({"attention": {"n_heads": 12, "qkv_bias": "no"}}, "attention.qkv_bias must be true or false, got 'no'"),
])
def test_truthy_strings_are_not_booleans(tmp_path: Path, change: dict, needle: str, capsys) -> None:
    one_line_error(["bill", write(tmp_path, "spec.json", {**GPT3_SMALL, **change})], capsys, needle)


@pytest.mark.parametrize(("change", "needle"), [
    ({"tie_word_embeddings": "false"}, "qwen2_moe config: tie_word_embeddings must be true or false, got 'false'"),
    ({"num_hidden_layers": None}, "num_hidden_layers must be an integer in [1, 10,000], got None"),
    ({"num_hidden_layers": 10**12}, "num_hidden_layers must be an integer in [1, 10,000], got 1000000000000"),
    ({"vocab_size": 1.5}, "vocab_size must be an integer in [1, 10,000,000], got 1.5"),
    ({"hidden_size": 2**21}, "hidden_size must be an integer in [1, 1,048,576]"),
    ({"num_experts_per_tok": 1000}, "moe.top_k (1000) exceeds moe.n_routed_experts (60)"),
    ({"mlp_only_layers": [10**9]}, "mlp_only_layers must be a list of at most 10,000 integers in [0, 9,999]"),
    ({"qkv_bias": "no"}, "qkv_bias must be true or false, got 'no'"),
])
def test_hf_config_fields_are_strict_and_bounded(tmp_path: Path, change: dict, needle: str, capsys) -> None:
    start = time.monotonic()
    one_line_error(["bill", write(tmp_path, "config.json", {**QWEN_MOE, **change})], capsys, needle)
    assert time.monotonic() - start < 5  # 10^12 layers used to hang building the dense-layer list


def test_lora_rank_above_the_matrix_width(capsys) -> None:
    one_line_error(["bill", "gpt3-125m", "--lora-rank", "1000000"], capsys,
                   "--lora-rank 1,000,000 exceeds the width of q_proj (768)")


@pytest.mark.parametrize(("targets", "needle"), [
    ("q_proj,bogus", "--lora-targets bogus: no such matrix in gpt3-125m (matrices: down_proj, "),
    ("", "--lora-targets must be a list of 1 to 64 printable names, got ()"),
])
def test_lora_targets_must_all_exist(targets: str, needle: str, capsys) -> None:
    one_line_error(["bill", "gpt3-125m", "--lora-rank", "8", "--lora-targets", targets], capsys, needle)


def test_default_lora_targets_the_model_lacks_are_named_as_defaults(capsys) -> None:
    # the fuzzer's find: `--lora-rank 8` on an MLA model blamed --lora-targets, which the user had not given
    one_line_error(["bill", "deepseek-v3", "--lora-rank", "8"], capsys,
                   "the default --lora-targets q_proj, v_proj: no such matrix in deepseek-v3")


def test_seq_beyond_learned_positions(capsys) -> None:
    one_line_error(["bill", "gpt3-125m", "--seq", "4096"], capsys,
                   "--seq 4,096 exceeds the 2,048 learned positions of gpt3-125m")
    one_line_error(["recompute", "gpt3-125m"], capsys, "--seq 131,072 exceeds the 2,048 learned positions")
    code, _, _ = run_cli(["bill", "gpt3-125m", "--seq", "2048", "--json"], capsys)
    assert code == 0  # the last learned position is fine; rotary models have no table to run off
    assert run_cli(["bill", "llama3-8b", "--seq", "131072", "--json"], capsys)[0] == 0


@pytest.mark.parametrize("command", [["bill", "llama3-8b"], ["recompute", "llama3-8b", "--seq", "1024"]])
def test_attention_is_checked_on_every_command(command: list[str], capsys) -> None:
    one_line_error([*command, "--attention", "foo"], capsys, "unknown attention implementation 'foo'")


@pytest.mark.parametrize(("argv", "needle"), [
    (["bill", "gpt3-125m", "--efficiency", "1e-310", "--json"], "--efficiency must be a finite number in [0.001, 1]"),
    (["bill", "gpt3-125m", "--efficiency", "nan"], "--efficiency must be a finite number in [0.001, 1], got nan"),
    (["recompute", "llama3-8b", "--threshold", "nan", "--json"], "--threshold (TFLOP/GiB) must be a finite number"),
    (["recompute", "llama3-8b", "--threshold", "inf"], "--threshold (TFLOP/GiB) must be a finite number"),
    (["recompute", "llama3-8b", "--row7", "foo"], "unknown --row7 reading 'foo'"),
    (["bill", "gpt3-125m", "--recompute", "budget:1e400"], "must lie in (0, 2^60] bytes"),
    (["bill", "gpt3-125m", "--recompute", "budget:nan"], "cannot read memory size 'nan'"),
    (["bill", "gpt3-125m", "--gpus", "0"], "--gpus must be"),
    (["bill", "gpt3-125m", "--dp", "1048576", "--tp", "1048576"], "exceeds 16,777,216"),
    (["bill", "gpt3-125m", "--seq", "99999999999999999999"], "--seq must be an integer in [1, 16,777,216]"),
    (["check", "llama3-8b", "--dp", "100000000", "--zero", "1"], "--dp must be an integer in [1, 64]"),
    (["check", "llama3-8b", "--dp", "2", "--zero", "1", "--rank", "5"], "--rank must be an integer in [0, 1], got 5"),
    (["bill", "gpt3-125m", "--gpu", "h100", "--reserve", "100"], "--reserve 100 GiB leaves nothing of the card's usable"),
    (["plan", "gpt3-125m", "--gpu", "h100", "--gpus", "1", "--seq", "512", "--global-batch-tokens", "4Ki", "--reserve",
      "80"], "--reserve 80 GiB leaves nothing"),
    (["fit", "gpt3-125m", "--max", "micro-batch", "--gpu", "h100", "--reserve", "90"], "--reserve 90 GiB leaves nothing"),
    (["check", "gpt3-125m", "--recompute", "selective:mlp"],
     "check measures --recompute none, full, every:K (K >= 1) or selective:core_attn; got 'selective:mlp'"),
])
def test_numbers_are_finite_and_bounded(argv: list[str], needle: str, capsys) -> None:
    one_line_error(argv, capsys, needle)


def test_budget_bare_number_is_gib() -> None:
    """`budget:10` is 10 GiB (it was 10 bytes); explicit units still work, `B` for bytes."""
    assert parse_size("10") == 10 * GIB
    assert parse_size("2.5e10B") == 2.5e10 and parse_size("512MiB") == 512 * 2**20 and parse_size("1GB") == 1e9
    assert make_recipe(recompute="budget:10").recompute_policy.budget_bytes == 10 * GIB


def test_eager_model_plus_optimizer_equals_resident() -> None:
    """Under the eager convention AdamW's 4-byte `step` tensors are in memory.optimizer and memory.resident
    alike (resident was 592 B short on gpt3-125m: 148 tensors × 4 B)."""
    for convention in ("ideal", "eager"):
        lines = make_bill(load_preset("gpt3-125m"), make_recipe(), None, convention).lines
        assert lines["memory.model"].value + lines["memory.optimizer"].value == lines["memory.resident"].value


# --- hangs before -----------------------------------------------------------------------------------------


def test_layer_count_is_capped() -> None:
    with pytest.raises(StepbillError, match=r"^model.n_layers must be an integer in \[1, 10,000\], got 10{12}$"):
        ModelSpec.from_dict({**GPT3_SMALL, "n_layers": 10**12})


def test_pipeline_stages_times_layers_is_capped(tmp_path: Path, capsys) -> None:
    """10,000 layers on 1,000 stages used to run for minutes (each stage's bill walks the whole model)."""
    deep = {**GPT3_SMALL, "n_layers": 10_000, "positions": "rotary"}
    start = time.monotonic()
    one_line_error(["bill", write(tmp_path, "deep.json", deep), "--pp", "1000"], capsys,
                   "--pp 1000 × 10,000 layers = 10,000,000 exceeds 200,000")
    assert time.monotonic() - start < 5


def _best_segment_by_plans(spec: ModelSpec, seq: int, a_bytes: int, convention: str) -> int:
    """The old scan: one plan per K (quadratic), kept as the reference."""
    best, best_peak = 1, math.inf
    for k in range(1, spec.n_layers + 1):
        peak = make_plan(spec, RecomputePolicy("every", every=k), seq, 1, a_bytes, convention).peak_activations()
        if peak < best_peak:
            best, best_peak = k, peak
    return best


@pytest.mark.parametrize("name", ["gpt3-125m", "llama3-8b", "mixtral-8x7b", "deepseek-v3"])
@pytest.mark.parametrize("convention", ["ideal", "eager"])
def test_every_auto_closed_form_equals_the_plan_scan(name: str, convention: str) -> None:
    spec = load_preset(name)
    for seq in (128, 4096):
        assert best_segment(spec, seq, 1, 2, convention) == _best_segment_by_plans(spec, seq, 2, convention)


def test_every_auto_is_fast_at_the_layer_cap() -> None:
    spec = dataclasses.replace(load_preset("llama3-8b"), n_layers=10_000)
    start = time.monotonic()
    best_segment(spec, 4096, 1, 2)
    assert time.monotonic() - start < 3  # 4,000 layers took 15 s


# --- one line, whatever the name or path holds --------------------------------------------------------------


def test_newline_in_a_path_or_name_stays_one_line(tmp_path: Path, capsys) -> None:
    one_line_error(["bill", "gpt3-125m\nx"], capsys, r"unknown model preset 'gpt3-125m\nx'")
    one_line_error(["bill", write(tmp_path, "a\nb/missing.json", "{")], capsys, r"a\nb/missing.json is not valid JSON")
    one_line_error(["bill", str(tmp_path / "no\nsuch.json")], capsys, r"no\nsuch.json")
    one_line_error(["bill", "gpt3-125m", "--recipe", "bf16\n"], capsys, r"unknown recipe 'bf16\n'")
    one_line_error(["bill", "\x00"], capsys, "MODEL must be a preset name")
    one_line_error(["bill", "a" * 300], capsys, "unknown model preset 'aaaa")  # over NAME_MAX: stat() raised
    one_line_error(["bill", "a" * 300 + ".json"], capsys, ".json: File name too long")


def test_hf_config_in_an_odd_folder_is_named_printably(tmp_path: Path, capsys) -> None:
    code, out, _ = run_cli(["bill", write(tmp_path, "we\nird/config.json", QWEN_MOE), "--json"], capsys)
    assert code == 0 and json.loads(out)["model"]["name"] == "we\\nird"


# --- lab parameters ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "needle"), [
    (["lab", "adam", "--steps", "1000000000"], "--steps must be an integer in [2, 100,000]"),
    (["lab", "adam", "--seed", "-1"], "--seed must be an integer in [0, 4,294,967,295], got -1"),
    (["lab", "adam", "--scale", "nan"], "--scale must be a finite number"),
    (["lab", "adam", "--beta1", "1"], "--beta1 must be a finite number in [0, 1), got 1.0"),
    (["lab", "decay", "--weight-decay", "0"], "--weight-decay must be a finite number in [1e-12, 100]"),
    (["lab", "decay", "--params", "inf"], "--params must be a finite number"),
    (["lab", "decay", "--card-gib", "nan"], "--card-gib must be a finite number"),
    (["lab", "warmup", "--steps", "1000000000"], "--steps must be an integer in [1, 10,000]"),
    (["lab", "warmup", "--beta2", "0.9,nan"], "--beta2 must be a finite number in [0, 1), got nan"),
    (["lab", "schedule", "--total", "1000000000"], "--total must be an integer in [1, 10,000,000]"),
    (["lab", "clip", "--steps", "1000000000"], "--steps must be an integer in [1, 1,000,000]"),
    (["lab", "clip", "--vector", "nan"], "--vector must be a finite number"),
    (["lab", "clip", "--vector", ""], "--vector takes 1 to 64 values, got 0"),
    (["lab", "formats", "--adds", "1000000000"], "--adds must be an integer in [1, 100,000]"),
    (["lab", "formats", "--value", "inf"], "--value must be a finite number"),
    (["lab", "collectives", "--gpus", "nan"], "--gpus must be an integer in [2, 1,048,576], got nan"),
    (["lab", "collectives", "--gpus", "1e400,2"], "--gpus must be an integer in [2, 1,048,576], got inf"),
    (["lab", "collectives", "--ring", "1000000000"], "--ring must be an integer in [2, 64]"),
    (["lab", "collectives", "--microbatches", "1.5"], "--microbatches must be an integer in [1, 4,096], got 1.5"),
])
def test_lab_options_are_finite_and_bounded(argv: list[str], needle: str, capsys) -> None:
    start = time.monotonic()
    one_line_error([*argv, "--json"], capsys, needle)
    assert time.monotonic() - start < 5


def test_lab_trace_must_be_a_regular_file(tmp_path: Path, capsys) -> None:
    fifo = tmp_path / "norms"
    os.mkfifo(fifo)
    one_line_error(["lab", "clip", "--trace", str(fifo)], capsys, "cannot read trace file")
    one_line_error(["lab", "clip", "--trace", "/dev/zero"], capsys, "not a regular file")


def test_every_input_field_has_a_declared_rule() -> None:
    """A new field of an input cannot slip in unvalidated: each has a rule (spec/schema.py) from its annotation."""
    from stepbill.spec.model import AttentionSpec, FFNSpec, MoESpec
    from stepbill.spec.parallel import Parallel
    from stepbill.spec.recipe import LoRA, Recipe
    from stepbill.spec.schema import _rules

    for cls in (ModelSpec, AttentionSpec, FFNSpec, MoESpec, Recipe, LoRA, Parallel):
        ruled = {name for name, _, _ in _rules(cls)}
        assert ruled == {f.name for f in dataclasses.fields(cls)} - {"extra"}, cls.__name__


def test_lora_targets_from_python_become_a_tuple() -> None:
    from stepbill.spec.recipe import LoRA

    assert LoRA(8, ["q_proj"]).targets == ("q_proj",)
    with pytest.raises(StepbillError, match=r"^--lora-targets must be a list of 1 to 64 printable names, got \(\)$"):
        LoRA(8, [])


def test_plot_target_must_be_writable_as_a_file(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "figure.png"
    folder.mkdir()
    one_line_error(["lab", "adam", "--plot", str(folder)], capsys, "figure.png: not a regular file")
    one_line_error(["lab", "adam", "--plot", str(tmp_path / ("a" * 300 + ".png"))], capsys,
                   "file name over 255 bytes")
