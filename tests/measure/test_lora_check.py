"""`check --lora-rank`: a PEFT-wrapped transformers Llama (peft.get_peft_model, LoraConfig defaults) against the LoRA
bill: every memory category to the byte, FLOPs exactly, PEFT's trainable count; what autograd stops saving
(saved_tensors_hooks) is exactly the frozen Linears' inputs and the frozen norms' x̂, less the adapters' r-wide rows.

Measured on llama2-7b too (fake tensors, seq 2048, q,v r 16, fp32; ~10 min on a loaded 2-core machine, so kept
out of the suite): every category exact, FLOPs LoRA / full = 0.694 (docs/accuracy.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from stepbill.measure.tiny import TINY_CONFIGS
from stepbill.report.schema import validate
from tests.conftest import run_cli

pytest.importorskip("peft", reason="needs peft: pip install 'stepbill[measure]'")

R, B, T = 8, 2, 64
ALL_SEVEN = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _bill(recipe: str, targets: tuple[str, ...] | None, rank: int | None = R):
    from stepbill.engine.bill import make_bill
    from stepbill.spec.hf import from_hf_config
    from stepbill.spec.recipe import make_recipe

    spec = from_hf_config(TINY_CONFIGS["llama"])
    return make_bill(spec, make_recipe(recipe, seq_len=T, micro_batch=B, lora_rank=rank, lora_targets=targets),
                     convention="eager")


@pytest.mark.parametrize(("recipe", "targets", "mode"), [
    ("fp32", ("q_proj", "v_proj"), "real"),
    ("pure-bf16", ("q_proj", "v_proj"), "real"),
    ("pure-bf16", ("all-linear",), "fake"),
    ("amp-bf16", ("q_proj", "v_proj"), "real"),
    ("amp-bf16", ("all-linear",), "fake"),
])
def test_peft_step_matches_the_lora_bill(recipe: str, targets: tuple[str, ...], mode: str) -> None:
    """Params (frozen base + adapters), grads, AdamW states, activations, the three peaks: the bill equals
    MemTracker to the byte (well inside check's 3 %); FLOPs equal FlopCounterMode's; trainable params equal PEFT's
    get_nb_trainable_parameters."""
    from stepbill.check import compare, predictions
    from stepbill.measure.lora import PeftLoRA
    from stepbill.measure.step import measure_step

    lora = PeftLoRA.for_recipe(recipe, R, targets)
    measured = measure_step(TINY_CONFIGS["llama"], recipe=recipe, micro_batch=B, seq_len=T, mode=mode, lora=lora)
    rows = compare(predictions(_bill(recipe, targets)), measured)
    assert [r.category for r in rows][-1].startswith("trainable params")
    for row in rows:
        assert row.verdict == "ok" and row.predicted == row.measured, row


def test_all_linear_adapts_the_same_seven_matrices_as_naming_them() -> None:
    """PEFT's "all-linear" (every Linear but the output layer) is the bill's all-linear: the same trainable count as
    naming the seven projections, and PEFT counts it."""
    from stepbill.measure.lora import PeftLoRA, trainable_parameters
    from stepbill.measure.session import StepSession

    with StepSession(TINY_CONFIGS["llama"], mode="fake", lora=PeftLoRA(R, ("all-linear",))) as s:
        trainable, total = trainable_parameters(s.model)
    assert trainable == _bill("fp32", ("all-linear",))["params.trainable"].value
    assert trainable == _bill("fp32", ALL_SEVEN)["params.trainable"].value
    assert total - trainable == _bill("fp32", None, rank=None)["params.trainable"].value


def test_lora_saves_less_by_exactly_the_frozen_linears_inputs() -> None:
    """saved_tensors_hooks on the same step, full fine-tuning vs PEFT q,v adapters (fp32): the saved bytes drop by
    the inputs of the Linears without an adapter (k shares q's input, which q's adapter keeps), the frozen RMSNorm
    weights' x̂, layer 0's input norm (the frozen embedding's output needs no gradient), and rise by the adapters'
    r-wide A outputs; and the bill's LoRA FLOPs are FlopCounterMode's on the PEFT model."""
    from stepbill.measure.lora import PeftLoRA
    from stepbill.measure.saved import collect, total_bytes
    from stepbill.measure.session import StepSession

    def saved(lora: PeftLoRA | None):
        with StepSession(TINY_CONFIGS["llama"], micro_batch=B, seq_len=T, mode="real", lora=lora) as s:
            s.iteration()
            return collect(s)

    full, lora = saved(None), saved(PeftLoRA(R))
    acts = [r for r in full if r.kind == "activation"]
    adapted = ("q_proj", "v_proj")
    frozen_inputs = sum(r.bytes for r in acts if r.node == "MmBackward0" and r.argument == "self"
                        and not r.module.endswith(adapted))
    norm_xhat = sum(r.bytes for r in acts if r.module.endswith("norm") and r.node == "MulBackward0"
                    and r.argument == "other")
    first_norm = sum(r.bytes for r in acts if r.module == "model.layers.0.input_layernorm"
                     and not (r.node == "MulBackward0" and r.argument == "other"))
    adapter_out = sum(r.bytes for r in lora if r.kind == "activation" and ".lora_B." in r.module)
    h, f, n = 128, 176, B * T
    assert frozen_inputs == 4 * n * (2 * (h + f) + h)  # per layer gate/up's and down's inputs; the LM head's input
    assert adapter_out == 4 * n * 2 * 2 * R  # two adapters a layer, two layers
    assert total_bytes(full) - total_bytes(lora) == frozen_inputs + norm_xhat + first_norm - adapter_out


def _tiny_config(tmp_path: Path) -> str:
    path = tmp_path / "tiny-llama" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TINY_CONFIGS["llama"]))
    return str(path)


def test_cli_lora_check_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`check CONFIG --lora-rank 8 --fake --json`: every row ok, the trainable-params row, PEFT's setup in settings;
    a non-zero --lora-dropout is measured and named in `unmodelled`."""
    code, out, err = run_cli(["check", _tiny_config(tmp_path), "--seq", "64", "--lora-rank", "8", "--fake",
                              "--lora-dropout", "0.05", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    validate("check", data)  # the declared schema (`stepbill schema check`)
    assert data["settings"]["lora_rank"] == 8 and data["settings"]["lora_dropout"] == 0.05
    assert data["settings"]["lora_targets"] == "q_proj,v_proj"
    assert any(r["unit"] == "params" and r["verdict"] == "ok" for r in data["rows"])
    flops = next(r for r in data["rows"] if r["unit"] == "FLOPs")
    assert flops["error"] == 0.0  # dropout costs no FLOPs FlopCounterMode counts
    assert any(line.startswith("--lora-dropout 0.05: not modelled") for line in data["unmodelled"])


DATA = Path(__file__).parents[1] / "data" / "hf_configs"


@pytest.mark.slow
def test_realistic_size_lora_check_llama_3_2_1b(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.2-1B as published (fake tensors, seq 1024, q,v r 16, fp32), through the CLI: every memory category
    within 3 % (exact when measured: 8,893,383,176 B step peak), FLOPs and PEFT's trainable count exactly; the bill's
    LoRA FLOPs about 2/3 of full fine-tuning's (the attention core, which has no weights, keeps it above)."""
    code, out, err = run_cli(["check", str(DATA / "llama-3.2-1b.json"), "--fake", "--seq", "1024", "--lora-rank", "16",
                              "--recipe", "fp32", "--json"], capsys)
    assert code == 0, err
    rows = {r["category"]: r for r in json.loads(out)["rows"]}
    assert all(abs(r["error"]) <= 0.03 for r in rows.values()), rows
    assert next(r for r in rows.values() if r["unit"] == "FLOPs")["error"] == 0.0
    assert next(r for r in rows.values() if r["unit"] == "params")["measured"] == 1_703_936
    lora, full = _bill_1b(16), _bill_1b(None)
    assert 0.6 < lora["flops.step"].value / full["flops.step"].value < 0.75


def _bill_1b(rank: int | None):  # type: ignore[no-untyped-def]
    from stepbill.engine.bill import make_bill
    from stepbill.spec.hf import from_hf_config
    from stepbill.spec.recipe import make_recipe

    spec = from_hf_config(json.loads((DATA / "llama-3.2-1b.json").read_text()), name="llama-3.2-1b")
    return make_bill(spec, make_recipe("fp32", seq_len=1024, lora_rank=rank))


@pytest.mark.parametrize(("argv", "message"), [
    (["--recipe", "qlora-nf4"], "bitsandbytes' NF4 base weights need a CUDA device"),
    (["--lora-rank", "8", "--dp", "2", "--zero", "1"], "LoRA in one process only"),

    (["--lora-targets", "q_proj"], "need --lora-rank"),
    (["--lora-rank", "8", "--lora-targets", "wq"], "no such matrix"),
])
def test_cli_refuses_in_one_line(argv: list[str], message: str, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["check", _tiny_config(tmp_path), "--fake", *argv], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err


def test_missing_peft_is_one_line_naming_the_measure_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Without peft (hidden as STEPBILL_HIDE=peft does): the CLI prints one line naming `stepbill[measure]`, exit 2;
    the Python API raises a StepbillError with the same line."""
    import stepbill
    from stepbill.errors import StepbillError

    for loaded in [m for m in sys.modules if m == "peft" or m.startswith("peft.")]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.setitem(sys.modules, "peft", None)
    config = _tiny_config(tmp_path)
    code, out, err = run_cli(["check", config, "--lora-rank", "8", "--fake"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "needs peft" in err and "pip install 'stepbill[measure]'" in err and "Traceback" not in err
    with pytest.raises(StepbillError, match=r"needs peft.*stepbill\[measure\]"):
        stepbill.check(config, seq=64, lora_rank=8, mode="fake")
