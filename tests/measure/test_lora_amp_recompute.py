"""`check --lora-rank` under the two setups a PEFT fine-tuning run turns on: bf16 autocast (`--recipe amp-bf16`) and
gradient checkpointing (`--recompute full`: transformers' gradient_checkpointing_enable(use_reentrant=False) before
get_peft_model, which with PEFT makes the embedding output require grad).

amp-bf16 is exact on the tiny Llama (tests/measure/test_lora_check.py parametrises it). Under full recompute LoRA adds
no error of its own: on the tiny Llama every category's error is the one full fine-tuning of the same checkpointed
step has (the checkpointed step's own small gaps, docs/accuracy.md), params, grads, optimizer states and FLOPs exact;
at a realistic size (Llama-3.2-1B, fake tensors, seq 1024) every memory category is within 8,192 B."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepbill.measure.tiny import TINY_CONFIGS
from tests.conftest import run_cli

pytest.importorskip("peft", reason="needs peft: pip install 'stepbill[measure]'")

R, B, T = 8, 2, 64
MEMORY = ("activations", "peak_forward", "peak_backward", "peak")
DATA = Path(__file__).parents[1] / "data" / "hf_configs"


def _errors(recipe: str, lora: bool) -> tuple[dict[str, int], object, object]:
    """(bill − measured) in bytes per memory category of the tiny Llama's step under full recompute, with q,v LoRA
    (r 8) or full fine-tuning; and the bill and the measurement."""
    from stepbill.engine.bill import make_bill
    from stepbill.measure.lora import PeftLoRA
    from stepbill.measure.step import measure_step
    from stepbill.spec.hf import from_hf_config
    from stepbill.spec.recipe import make_recipe

    peft = PeftLoRA.for_recipe(recipe, R, checkpointing=True) if lora else None
    bill = make_bill(from_hf_config(TINY_CONFIGS["llama"]),
                     make_recipe(recipe, seq_len=T, micro_batch=B, recompute="full", lora_rank=R if lora else None),
                     convention="eager")
    m = measure_step(TINY_CONFIGS["llama"], recipe=recipe, micro_batch=B, seq_len=T, recompute="full", lora=peft)
    lines = {"activations": "memory.activations", "peak_forward": "memory.peak_forward",
             "peak_backward": "memory.peak_backward", "peak": "memory.peak"}
    return {k: int(bill.lines[line].value) - getattr(m, k) for k, line in lines.items()}, bill, m


@pytest.mark.parametrize("recipe", ["fp32", "pure-bf16"])
def test_full_recompute_lora_adds_no_error_of_its_own(recipe: str) -> None:
    """Tiny Llama, B 2 × seq 64, real tensors: the LoRA bill's error in every memory category equals full fine-tuning's
    under the same checkpointing (fp32: forward −512 B, backward +65,016 B, +2.7 %; pure-bf16: −512 / −520 B);
    params, grads, optimizer states and FlopCounterMode's FLOPs (the rebuild reruns the adapters; layer 0 computes its
    input gradients) exactly."""
    from stepbill.check import compare, predictions

    lora, bill, measured = _errors(recipe, lora=True)
    full, _, _ = _errors(recipe, lora=False)
    assert lora == full, (lora, full)
    rows = {r.line: r for r in compare(predictions(bill), measured)}  # type: ignore[arg-type]
    for line in ("memory.weights", "memory.grads", "memory.optimizer", "flops.step_noncausal", "params.trainable"):
        assert rows[line].predicted == rows[line].measured, rows[line]
    assert all(r.verdict == "ok" for r in rows.values() if r.line != "memory.peak_optimizer"), rows
    # Known gap, not modelled: through the optimizer step MemTracker still holds two B·T·h tensors in the parameters'
    # dtype (one ACT, one TEMP: the embedding output that enable_input_require_grads makes require grad, and a
    # gradient of that width, by their categories; their holder is not traced) — LoRA + checkpointing only
    # (LoRA alone and full fine-tuning under full recompute are exact at the step: tests/measure/test_optimizers.py)
    width = 4 if recipe == "fp32" else 2
    gap = rows["memory.peak_optimizer"]
    assert gap.measured - gap.predicted == 2 * B * T * TINY_CONFIGS["llama"]["hidden_size"] * width, gap


def test_amp_full_recompute_lora_forward_as_full_finetuning() -> None:
    """Under amp-bf16 + full recompute a checkpointed layer's forward leaves only the adapters' casts in autocast's
    cache (frozen weights' casts are saved by matmuls whose saves the checkpoint discards): the forward peak's error
    is full fine-tuning's (none: the checkpoints' position ids, int64 · S, billed since eager/masks.checkpoint_held);
    the backward peak keeps the checkpointed amp step's known gap (+3.1 %, the FFN input norm's moment), FLOPs
    exact."""
    lora, _, measured = _errors("amp-bf16", lora=True)
    full, _, _ = _errors("amp-bf16", lora=False)
    assert lora["peak_forward"] == full["peak_forward"] == 0
    assert abs(lora["peak_backward"]) / measured.peak_backward < 0.032  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize(("recipe", "recompute", "slack_bytes"), [
    ("amp-bf16", "none", 0), ("fp32", "full", 8192), ("amp-bf16", "full", 8192)])
def test_realistic_size_lora_llama_3_2_1b(recipe: str, recompute: str, slack_bytes: int,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.2-1B as published (fake tensors, seq 1024, q,v r 16), through the CLI: amp-bf16 every category to the
    byte (10,381,443,592 B step peak); under full recompute every memory category within 8,192 B of MemTracker (the
    slack the checkpoints' position ids took before eager/masks.checkpoint_held billed them); params, grads, optimizer
    states, FLOPs and PEFT's trainable count exact. About 75 s each on a loaded 2-core machine."""
    code, out, err = run_cli(["check", str(DATA / "llama-3.2-1b.json"), "--fake", "--seq", "1024", "--lora-rank", "16",
                              "--recipe", recipe, "--recompute", recompute, "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["settings"]["peft_input_require_grads"] is (recompute == "full")
    for row in data["rows"]:
        if row["category"] == "peak of the optimizer step" and recompute == "full":
            # the gap test_full_recompute_lora_adds_no_error_of_its_own pins: two B·T·h tensors (params' dtype: fp32)
            assert row["measured"] - row["predicted"] == 2 * 1024 * 2048 * 4, row
        elif row["unit"] == "bytes":
            assert abs(row["predicted"] - row["measured"]) <= slack_bytes, row
        else:
            assert row["predicted"] == row["measured"], row


def test_cli_amp_full_all_linear_is_measured_with_its_unmodelled_line(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`check CONFIG --lora-rank 8 --lora-targets all-linear --recipe amp-bf16 --recompute full --fake --json`: measured,
    the JSON names the checkpointing path (settings.peft_input_require_grads) and says in `unmodelled` that the
    rebuild's moment at down_proj's adapter is not modelled; FLOPs exact (the rebuild reruns the frozen down
    projection and A when down carries an adapter)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_CONFIGS["llama"]))
    code, out, err = run_cli(["check", str(path), "--seq", "64", "--micro-batch", "2", "--lora-rank", "8",
                              "--lora-targets", "all-linear", "--recipe", "amp-bf16", "--recompute", "full", "--fake",
                              "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["settings"]["peft_input_require_grads"] is True
    assert any("down_proj" in line and "not modelled" in line for line in data["unmodelled"])
    flops = next(r for r in data["rows"] if r["unit"] == "FLOPs")
    assert flops["predicted"] == flops["measured"]
