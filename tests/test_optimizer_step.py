"""Each optimizer's step temporaries and `step` counters (engine/memory/optimizer_step.py) in closed form, the
default implementation per optimizer and device, and check's one-line refusals of what torch.optim cannot run.
The rules are held to MemTracker in tests/measure/test_optimizers.py."""

from __future__ import annotations

import pytest

from stepbill.engine.bill import make_bill
from stepbill.engine.memory.eager import stepped_tensors
from stepbill.engine.memory.optimizer_step import (
    Stepped,
    adafactor_step_temporaries,
    muon_step_temporaries,
    step_counter_bytes,
    step_temporaries,
)
from stepbill.spec.hf import from_hf_config
from stepbill.spec.recipe import default_optimizer_impl, make_recipe
from tests.conftest import run_cli

TINY_LLAMA = {"model_type": "llama", "vocab_size": 320, "num_hidden_layers": 2, "max_position_embeddings": 512,
              "hidden_size": 128, "intermediate_size": 176, "num_attention_heads": 4, "num_key_value_heads": 2,
              "tie_word_embeddings": False}
TINY = "tests/data/tiny-llama.json"


def test_sgd_holds_nothing_beyond_its_buffers() -> None:
    """torch's defaults (no weight decay, no Nesterov): SGD adds every gradient in place, its momentum buffers are
    updated in place — no temporaries on any path."""
    tensors = [Stepped((320, 128)), Stepped((128,))]
    for optimizer in ("sgd", "sgd-momentum"):
        assert {step_temporaries(optimizer, impl, 4, tensors) for impl in ("single", "foreach", "fused")} == {0}


def test_muon_newton_schulz_bytes() -> None:
    """One 176×128 fp32 matrix: the Nesterov update (4·rc), two bf16 iterates (2·2·rc) and two bf16 128² Gram
    matrices (2·2·m²) — 245,760 B, MemTracker's on the tiny Llama; in bf16 the update is 2·rc (200,704 B)."""
    rc, m = 176 * 128, 128
    assert muon_step_temporaries(4, [Stepped((176, 128), True)]) == 4 * rc + 4 * rc + 4 * m * m == 245_760
    assert muon_step_temporaries(2, [Stepped((128, 176), True)]) == 2 * rc + 4 * rc + 4 * m * m == 200_704


def test_muon_is_the_larger_of_its_step_and_the_adamw_beside_it() -> None:
    tensors = stepped_tensors(from_hf_config(TINY_LLAMA, "tiny"))
    # the AdamW's single-tensor LM head (2 · 320·128 · 4 B + the final norm's 512 B) tops Newton–Schulz's 245,760 B
    assert step_temporaries("muon", "single", 4, tensors) == 328_192
    assert step_temporaries("muon", "fused", 4, tensors) == 245_760
    rest = sum(t.numel for t in tensors if not t.muon)
    assert step_temporaries("muon", "foreach", 4, tensors) == 4 * rest == 330_240


def test_adafactor_single_keeps_the_previous_update() -> None:
    """q_proj after the embedding: the embedding's update (320·128) lives until q_proj's is bound, beside q_proj's
    row and column means and its estimate (128·128) and that estimate's row mean (one element): 230,404 B fp32."""
    tensors = stepped_tensors(from_hf_config(TINY_LLAMA, "tiny"))
    assert adafactor_step_temporaries("single", 4, tensors) == 4 * (320 * 128 + 128 + 128 + 128 * 128 + 1) == 230_404
    assert adafactor_step_temporaries("single", 2, tensors) == 115_202


def test_adafactor_foreach_holds_every_estimate() -> None:
    """Matrices first (the embedding is one): their estimates live while the vectors' squares, then clones, are
    made: one copy of every element."""
    tensors = stepped_tensors(from_hf_config(TINY_LLAMA, "tiny"))
    assert adafactor_step_temporaries("foreach", 4, tensors) == 4 * sum(t.numel for t in tensors)


def test_step_counters_per_optimizer() -> None:
    tensors = [Stepped((8, 8), True), Stepped((8,)), Stepped((8, 8), True)]
    assert [step_counter_bytes(o, tensors) for o in ("adamw", "adafactor", "muon", "sgd-momentum", "lion")] == [
        12, 12, 4, 0, 0]


def test_muon_takes_the_hidden_matrices_its_states_count() -> None:
    """Muon's tensors are the ones its momentum is billed for: the layer matrices, not the embedding, norms or head."""
    spec = from_hf_config(TINY_LLAMA, "tiny")
    bill = make_bill(spec, make_recipe("fp32", "muon"))
    muon = sum(t.numel for t in stepped_tensors(spec) if t.muon)
    assert bill.lines["memory.optimizer"].value == 4 * muon + 2 * 4 * (spec_total(spec) - muon)


def spec_total(spec: object) -> int:
    from stepbill.engine.params import param_inventory

    return param_inventory(spec).total  # type: ignore[arg-type]


@pytest.mark.parametrize(("optimizer", "cuda"), [("adamw", "foreach"), ("adam", "foreach"), ("sgd", "foreach"),
                                                 ("sgd-momentum", "foreach"), ("muon", "foreach"),
                                                 ("adafactor", "single"), ("lion", "single")])
def test_default_impl_follows_torch(optimizer: str, cuda: str) -> None:
    """torch.optim's default on CUDA: foreach where its functional form asks _default_to_fused_or_foreach (Muon: the
    AdamW beside it), single for Adafactor (foreach only when asked); the CPU runs single."""
    assert default_optimizer_impl(optimizer, "cuda") == cuda
    assert default_optimizer_impl(optimizer, "cpu") == "single"


@pytest.mark.parametrize(("argv", "needle"), [
    (["--optimizer", "lion"], "torch.optim has no Lion, so check cannot measure it"),
    (["--optimizer", "adafactor", "--optimizer-impl", "fused"], "torch.optim's adafactor has no fused implementation"),
    (["--optimizer", "muon", "--dp", "2", "--zero", "1"], "--optimizer muon is measured in one process"),
    (["--optimizer", "sgd-momentm"], "did you mean 'sgd-momentum'"),
])
def test_check_refuses_in_one_line(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["check", TINY, *argv], capsys)
    assert code == 2 and needle in err and err.count("\n") == 1 and out == "" and "Traceback" not in err


def test_check_under_torchrun_refuses_another_optimizer(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A launched rank (RANK and WORLD_SIZE set) measures AdamW: --optimizer muon is refused, not ignored."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    code, _, err = run_cli(["check", TINY, "--optimizer", "muon"], capsys)
    assert code == 2 and "--optimizer muon is measured in one process" in err and err.count("\n") == 1


def test_bill_refuses_a_path_torch_has_not_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """`bill` refuses what `check` cannot run: Adafactor has no fused kernel in torch.optim (Lion, which torch lacks,
    is billed on any path)."""
    from tests.conftest import run_cli

    code, out, err = run_cli(["bill", "llama3-8b", "--optimizer", "adafactor", "--optimizer-impl", "fused"], capsys)
    assert code == 2 and not out and err.count("\n") == 1
    assert "adafactor has no fused implementation" in err
    code, _, err = run_cli(["bill", "llama3-8b", "--optimizer", "lion", "--optimizer-impl", "fused"], capsys)
    assert code == 0, err


def test_plans_step_fused_wherever_torch_has_it() -> None:
    from stepbill.engine.plan.space import PlanRequest
    from stepbill.spec.hardware import load_gpu
    from stepbill.spec.presets import load_model

    def impl(optimizer: str) -> str:
        return PlanRequest(load_model("llama3-8b"), load_gpu("h100-sxm"), "h100-sxm", (8,), 4096, "llama3-8b",
                           micro_batch=1, optimizer=optimizer).optimizer_impl

    assert [impl(o) for o in ("adamw", "adam", "sgd", "sgd-momentum", "muon")] == ["fused"] * 5
    assert impl("adafactor") == "single" and impl("lion") == "single"
