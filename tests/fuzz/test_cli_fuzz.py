"""Fuzz the command line in-process (hypothesis): random, mostly-plausible argument lists for bill, recompute,
models and lab. Each must answer within the time limit with exit 0 and valid JSON, or exit 2 and one line.

Example counts (FUZZ_SCALE multiplies them): bill 2,000, bill with layouts 600, recompute 1,000, lab 300, models 20,
model files 500 (4,420; with test_invariants.py's 5,600: 10,020 per run).
`stepbill check` is left out: a valid check runs PyTorch for seconds; its input errors are in test_validation.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from stepbill.lab._check import OPTIONS as LAB_OPTIONS
from tests.fuzz.harness import check_contract

SCALE = float(os.environ.get("FUZZ_SCALE", "1"))


def examples(n: int) -> settings:
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


MODELS = ["gpt3-125m", "gpt3-350m", "gpt3-1.3b", "llama2-7b", "llama3-8b", "mixtral-8x7b", "deepseek-v3"]
GPUS = ["h100-sxm", "a100-80gb", "mi300x", "rtx-4090"]

weird_text = st.text(st.characters(codec="utf-8"), max_size=12)
long_names = st.text(st.sampled_from("ab/."), min_size=250, max_size=600)  # over NAME_MAX / deep paths
small_ints = st.one_of(st.integers(1, 8), st.integers(1, 8), st.integers(-2, 0),
                       st.sampled_from([16, 64, 128, 1024, 2048, 4096, 2**20, 2**24, 2**24 + 1, 10**12, 10**30]))
seqs = st.one_of(st.sampled_from([1, 128, 512, 1024, 2048, 4096, 8192]), st.integers(1, 5000),
                 st.sampled_from([0, -1, 2**24, 2**24 + 1, 10**20]))
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0.0, 1e-310, 1e-3, 0.5, 1.0, 80.0, 1e300]))


def as_text(value: object) -> str:
    return value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)


def pool(*valid: str) -> st.SearchStrategy[str]:
    """Mostly valid names, sometimes a near miss or arbitrary text."""
    return st.one_of(st.sampled_from(valid), st.sampled_from(valid), st.sampled_from(valid),
                     st.sampled_from([v + "x" for v in valid] + [v.upper() for v in valid]), weird_text)


RECOMPUTE = pool("none", "full", "every:1", "every:2", "every:4", "every:auto", "selective:core_attn",
                 "selective:core_attn,mlp", "selective:moe_act", "selective:mla_up_proj", "every:²", "every:0",
                 "budget:", "full:1", "selective:")

BILL_OPTIONS: dict[str, st.SearchStrategy] = {
    "--seq": seqs,
    "--micro-batch": small_ints,
    "--recipe": pool("mixed-bf16", "fp32", "amp-bf16", "fp32-grad-accum", "bf16-moments", "adamw-8bit", "pure-bf16",
                     "qlora-nf4", "fp8", "fp8-deepseek"),
    "--optimizer": pool("adamw", "adam", "sgd", "sgd-momentum", "lion", "adafactor", "muon"),
    "--recompute": RECOMPUTE,
    "--optimizer-impl": pool("single", "foreach", "fused"),
    "--convention": pool("ideal", "eager"),
    "--attention": pool("sdpa", "eager"),
    "--lora-rank": small_ints,
    "--lora-targets": pool("q_proj", "q_proj,v_proj", "o_proj,down_proj", "bogus", ""),
    "--gpu-mem": floats,
    "--dp": small_ints, "--tp": small_ints, "--pp": small_ints, "--cp": small_ints, "--ep": small_ints,
    "--etp": small_ints, "--zero": st.integers(-1, 4), "--shard-group": small_ints,
    "--pp-schedule": pool("gpipe", "1f1b", "interleaved"), "--vpp": small_ints, "--micro-batches": small_ints,
    "--gpu": pool(*GPUS), "--gpus": small_ints, "--efficiency": floats,
}
BILL_FLAGS = ["--sp", "--offload-optimizer", "--offload-activations", "--explain"]

RECOMPUTE_OPTIONS: dict[str, st.SearchStrategy] = {
    "--seq": seqs, "--micro-batch": small_ints, "--recipe": BILL_OPTIONS["--recipe"],
    "--layer-kind": pool("moe", "dense"), "--group": pool("op", "seed"), "--row7": pool("seed", "label"),
    "--threshold": floats, "--convention": pool("ideal", "eager"), "--attention": pool("sdpa", "eager"),
}


@st.composite
def command_line(draw: st.DrawFn, command: str, options: dict[str, st.SearchStrategy], flags: list[str]) -> list[str]:
    model = draw(st.one_of(st.sampled_from(MODELS), st.sampled_from(MODELS), weird_text, long_names))
    argv = [command, model, "--json"]
    for name in draw(st.lists(st.sampled_from(sorted(options)), max_size=6, unique=True)):
        argv += [name, as_text(draw(options[name]))]
    argv += draw(st.lists(st.sampled_from(flags), max_size=2, unique=True)) if flags else []
    return argv


@examples(2000)
@given(command_line("bill", BILL_OPTIONS, BILL_FLAGS))
def test_bill_exits_0_with_json_or_2_with_one_line(argv: list[str]) -> None:
    code, result = check_contract(argv)
    event(f"exit {code}")
    if code == 0:
        assert result["model"]["params_total"] > 0


@st.composite
def layout_line(draw: st.DrawFn) -> list[str]:
    """Layouts that mostly pass validation, so the per-rank bill, collectives and step time run."""
    model = draw(st.sampled_from(["gpt3-350m", "llama3-8b", "llama2-7b", "mixtral-8x7b", "deepseek-v3"]))
    degree = st.sampled_from([1, 1, 2, 4, 8])
    argv = ["bill", model, "--json", "--seq", str(draw(st.sampled_from([1024, 2048, 4096]))),
            "--dp", str(draw(degree)), "--tp", str(draw(degree)), "--pp", str(draw(st.sampled_from([1, 2, 4]))),
            "--zero", str(draw(st.integers(0, 3))), "--micro-batches", str(draw(st.sampled_from([1, 4, 8])))]
    if draw(st.booleans()):
        argv += ["--cp", str(draw(st.sampled_from([2, 4])))]
    if model in ("mixtral-8x7b", "deepseek-v3") and draw(st.booleans()):
        argv += ["--ep", str(draw(st.sampled_from([2, 4, 8])))]
    for flag in ("--sp", "--offload-optimizer", "--offload-activations"):
        if draw(st.booleans()):
            argv.append(flag)
    if draw(st.booleans()):
        argv += ["--gpu", draw(st.sampled_from(GPUS))]
    argv += ["--pp-schedule", draw(st.sampled_from(["1f1b", "gpipe"])),
             "--convention", draw(st.sampled_from(["ideal", "eager"])),
             "--recompute", draw(st.sampled_from(["none", "full", "every:2", "selective:core_attn"]))]
    return argv


@examples(600)
@given(layout_line())
def test_bill_with_a_parallel_layout(argv: list[str]) -> None:
    code, result = check_contract(argv)
    event(f"exit {code}")  # --hypothesis-show-statistics: how many reached a per-rank bill
    if code == 0:
        assert result["ranks"], argv


@examples(1000)
@given(command_line("recompute", RECOMPUTE_OPTIONS, []))
def test_recompute_exits_0_with_json_or_2_with_one_line(argv: list[str]) -> None:
    check_contract(argv)


@st.composite
def lab_line(draw: st.DrawFn) -> list[str]:
    topic = draw(st.sampled_from(sorted(LAB_OPTIONS)))
    argv = ["lab", topic, "--json"]
    names = sorted(LAB_OPTIONS[topic])
    for name in draw(st.lists(st.sampled_from(names), max_size=3, unique=True)):
        flag = {"warmup_steps": "--warmup", "total_steps": "--total", "betas2": "--beta2",
                "seconds": "--seconds-per-forward"}.get(
            name, "--" + name.replace("_", "-"))
        value = draw(st.one_of(small_ints, floats, st.floats(0, 1), weird_text))
        argv += [flag, as_text(value)]
    return argv


@examples(300)
@given(lab_line())
def test_lab_exits_0_with_json_or_2_with_one_line(argv: list[str]) -> None:
    check_contract(argv)


@examples(20)
@given(st.lists(st.sampled_from(["--json", "--help", "-x", "extra"]), max_size=2))
def test_models(tail: list[str]) -> None:
    if "--help" in tail:
        return
    check_contract(["models", *(tail if tail else ["--json"])])


# --- model files: a valid ModelSpec / HF config with one field replaced by anything JSON can hold -------------

ROOT = Path(__file__).parents[2]
SPEC = json.loads((ROOT / "src/stepbill/presets/models/gpt3-125m.json").read_text())
HF = json.loads((ROOT / "tests/data/hf_configs/qwen1.5-moe-a2.7b.json").read_text())
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
              weird_text, st.sampled_from(["false", "no", "1", "nan"])),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(weird_text, inner, max_size=3),
    max_leaves=6,
)


def _paths(obj: dict, prefix: tuple = ()) -> list[tuple]:
    out = []
    for key, value in obj.items():
        out.append((*prefix, key))
        if isinstance(value, dict):
            out += _paths(value, (*prefix, key))
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-models")


@examples(500)
@given(st.sampled_from(["spec", "hf"]), st.data())
def test_model_files_with_one_field_replaced(folder: Path, kind: str, data: st.DataObject) -> None:
    base = json.loads(json.dumps(SPEC if kind == "spec" else HF))
    path = data.draw(st.sampled_from([*_paths(base), ("unknown_key",)]))
    target = base
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = data.draw(json_values)
    file = folder / ("config.json" if kind == "hf" else "spec.json")
    file.write_text(json.dumps(base))
    check_contract(["bill", str(file), "--seq", "1024", "--json"])
