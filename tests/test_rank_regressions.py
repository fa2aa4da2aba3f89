"""The per-GPU bill's reported failures, each a regression test (commands from the user trial §4 and the design
review §1.4, run in-process with --json)."""

from __future__ import annotations

import json

import pytest

from stepbill.engine.bill import make_bill
from stepbill.engine.parallel import fsdp2_ranks as parallel_exact
from stepbill.spec.parallel import Parallel
from stepbill.spec.presets import load_model
from stepbill.spec.recipe import make_recipe
from tests.conftest import GIB, run_cli


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    code, out, err = run_cli([*argv, "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


def _peaks(data: dict) -> list[float]:
    return [r["memory"]["peak"] for r in data["ranks"]]


def test_every_k_lowers_the_rank_peak_below_no_recompute(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["bill", "llama3-8b", "--seq", "4096", "--dp", "2", "--gpus", "2", "--gpu", "h100-sxm"]
    every = _json([*base, "--recompute", "every:2"], capsys)
    none = _json([*base, "--recompute", "none"], capsys)
    assert _peaks(every)[0] < _peaks(none)[0]
    # the rank is the one-GPU bill plus DDP's buckets, a copy of every gradient (PyTorch's default)
    assert _peaks(every)[0] == every["memory"]["peak"] + every["memory"]["grads"]


@pytest.mark.parametrize("policy", ["every:2", "selective:core_attn,mlp", "every:auto", "full"])
def test_readme_70b_layout_any_policy_below_none(policy: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["bill", "llama3-70b", "--seq", "8192", "--gpus", "64", "--dp", "8", "--tp", "8", "--zero", "1",
            "--gpu", "h100-sxm"]
    assert max(_peaks(_json([*base, "--recompute", policy], capsys))) < max(_peaks(_json(base, capsys)))


def test_selective_under_tp_pp_lowers_stage_activations(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["bill", "gpt3-175b", "--seq", "2048", "--tp", "8", "--pp", "8", "--dp", "1", "--sp", "--micro-batches",
            "16", "--gpus", "64", "--gpu", "a100-80gb", "--zero", "1"]
    sel = _json([*base, "--recompute", "selective:core_attn"], capsys)["ranks"][0]["memory"]["activations"]
    none = _json(base, capsys)["ranks"][0]["memory"]["activations"]
    assert sel < none


def test_eager_attention_is_kept_per_rank(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(["bill", "llama3-8b", "--seq", "4096", "--attention", "eager", "--dp", "2", "--gpus", "2"], capsys)
    assert data["ranks"][0]["memory"]["activations"] == data["memory"]["activations"]
    assert data["memory"]["activations"] == pytest.approx(48 * GIB, rel=0.01)


def test_eager_logits_are_on_the_rank(capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen2.5-7B, micro-batch 32, dp 8, ZeRO-3, full recompute: the logits alone are 111 GiB, so no rank can
    peak below them (the old per-rank model said 79.56 GiB, "fits")."""
    data = _json(["bill", "examples/configs/qwen2.5-7b/config.json", "--seq", "4096", "--micro-batch", "32",
                  "--dp", "8", "--zero", "3", "--gpus", "8", "--recompute", "full", "--convention", "eager",
                  "--gpu", "h100-sxm"], capsys)
    logits = 152064 * 4096 * 32 * (2 + 4)  # bf16 logits + their fp32 upcast
    assert logits / GIB > 111
    assert min(_peaks(data)) > logits


def test_expert_tensor_parallel_splits_expert_activations() -> None:
    spec = load_model("mixtral-8x7b")
    act = {}
    for etp in (1, 2, 4):
        bill = make_bill(spec, make_recipe(seq_len=4096, parallel=Parallel(dp=8, ep=2, etp=etp)))
        act[etp] = bill.ranks[0].memory["activations"]
    assert act[4] < act[2] < act[1]


def test_the_per_rank_model_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    """The measured FSDP2 rules cover one micro-batch; with two the approximate model is used — and said."""
    base = ["bill", "llama3-8b", "--dp", "8", "--zero", "3", "--convention", "eager", "--recipe", "mixed-bf16"]
    one = _json(base, capsys)["ranks"]
    two = _json([*base, "--micro-batches", "2"], capsys)["ranks"]
    assert {r["model"] for r in one} == {"measured-exact"}
    assert {r["model"] for r in two} == {"approximate"}
    assert any("one micro-batch" in n for r in two for n in r["notes"])
    code, out, _ = run_cli([*base, "--micro-batches", "2"], capsys)
    assert code == 0 and "per-GPU model: approximate" in out


def test_llama_405b_own_layout_gives_per_stage_bills(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama 3 paper §3.3: 126 layers on 16 stages, one fewer layer on the first and the last."""
    data = _json(["bill", "llama3.1-405b", "--seq", "8192", "--tp", "8", "--pp", "16", "--dp", "8", "--sp",
                  "--micro-batches", "16", "--gpus", "1024", "--zero", "1", "--gpu", "h100-sxm"], capsys)
    layers = {r["class"].split(" (")[0]: r["layers"]["dense"] for r in data["ranks"]}
    assert layers["stage 0"] == 7 and layers["stage 15"] == 7
    assert sum(r["layers"]["dense"] * len(r["pp_stages"]) for r in data["ranks"]) == 126


def test_deepseek_v3_pp16_ep64(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(["bill", "deepseek-v3", "--seq", "4096", "--pp", "16", "--dp", "128", "--ep", "64",
                  "--micro-batches", "32", "--gpus", "2048", "--zero", "1", "--recipe", "bf16-moments"], capsys)
    stages = sorted(s for r in data["ranks"] for s in r["pp_stages"])
    assert stages == list(range(16))
    assert sum(sum(r["layers"].values()) * len(r["pp_stages"]) for r in data["ranks"]) == 61


def test_explicit_pp_layers(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(["bill", "llama3-8b", "--pp", "4", "--pp-layers", "6,9,9,8", "--micro-batches", "4"], capsys)
    assert [r["layers"]["dense"] for r in sorted(data["ranks"], key=lambda r: r["pp_stages"][0])] == [6, 9, 9, 8]
    code, _, err = run_cli(["bill", "llama3-8b", "--pp", "4", "--pp-layers", "6,9,9"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--pp-layers" in err


def test_per_rank_cost_does_not_grow_with_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """One evaluation per rank class: FSDP2 ranks fall into a few intervals, whatever the world size."""
    calls = []
    real = parallel_exact.predict_rank

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(parallel_exact, "predict_rank", counting)
    spec = load_model("llama3-70b")
    counts = {}
    for dp in (1024, 4096):
        calls.clear()
        make_bill(spec, make_recipe(seq_len=8192, parallel=Parallel(dp=dp, zero=3)), convention="eager")
        counts[dp] = len(calls)
    assert counts[1024] <= 8 and counts[4096] <= 8


def test_models_names_grouped_query_attention(capsys: pytest.CaptureFixture[str]) -> None:
    """User trial W13: GQA models were listed as "mha"."""
    _code, out, _ = run_cli(["models", "--json"], capsys)
    kinds = {row["name"]: row["attention"] for row in json.loads(out)}
    assert kinds["llama3-8b"] == "gqa (8 kv heads)" and kinds["mixtral-8x7b"] == "gqa (8 kv heads)"
    assert kinds["gpt3-125m"] == "mha" and kinds["deepseek-v3"] == "mla"


def test_lora_with_activation_offload_bills_no_negative_bytes() -> None:
    """The fuzzer's find: eager convention + LoRA + --offload-activations printed `activations.dense_layers =
    -32.01 MiB` (layer 0's unsaved rows, which LoRA takes off its kept bytes, subtracted from the nothing a layer
    keeps on the GPU under offload). Every activation line and timeline moment is ≥ 0 now, and the host still holds
    what the layers keep."""
    recipe = make_recipe(seq_len=2048, lora_rank=8, parallel=Parallel(offload_activations=True))
    bill = make_bill(load_model("llama3-8b"), recipe, convention="eager")
    for rank in bill.ranks:
        assert all(line.value >= 0 for line in rank.activation_items), rank.activation_items
        assert rank.memory["activations"] >= 0 and rank.cpu["activations"] > 0
    assert bill.plan is not None and min(bill.plan.offloaded().forward_live()) >= 0
