"""`check --recompute every:K` (the decoder layers in runs of K, each run one non-reentrant checkpoint) and
`check --recompute selective:core_attn` (the attention core checkpointed), measure/checkpointing.py, against the
bill's every-K timeline, its selective rows and FLOPs.

At realistic sizes on fake tensors every memory category is as close as under full recompute (a few KiB) and
FlopCounterMode's FLOPs are exact (Llama-3.2-1B with an uneven last run, Qwen3-0.6B; docs/accuracy.md lists more).
The FLOPs needed one change to the bill: a run's rebuild stops early once, after its last layer's down projection
(engine/recompute/plan.py), as full recompute's per-layer checkpoints each do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepbill.errors import StepbillError

DATA = Path(__file__).parents[1] / "data" / "hf_configs"
LINES = {"activations": "memory.activations", "peak_forward": "memory.peak_forward",
         "peak_backward": "memory.peak_backward", "peak": "memory.peak"}


def _bill_and_measure(config: dict, recompute: str, recipe: str, micro_batch: int, seq: int, mode: str
                      ) -> tuple[object, object]:
    from stepbill.engine.bill import make_bill
    from stepbill.measure.step import measure_step
    from stepbill.spec.hf import from_hf_config
    from stepbill.spec.recipe import make_recipe

    bill = make_bill(from_hf_config(config), make_recipe(recipe, seq_len=seq, micro_batch=micro_batch,
                                                         recompute=recompute), convention="eager")
    return bill, measure_step(config, recipe=recipe, micro_batch=micro_batch, seq_len=seq, recompute=recompute,
                              mode=mode)


@pytest.mark.torch
@pytest.mark.parametrize(("config", "recompute", "recipe", "micro_batch", "seq"), [
    ("llama-3.2-1b.json", "every:3", "pure-bf16", 2, 512),  # 16 layers: runs of 3, the last of 1
    ("qwen3-0.6b.json", "every:5", "pure-bf16", 2, 256),
    # fp32: RMSNorm's x.to(float32) is the checkpointed input itself, counted once (LayerPlan.input_alias)
    ("llama-3.2-1b.json", "every:4", "fp32", 1, 512),
    # the core's output stays (the output projection saves it); SDPA's logsumexp is rebuilt
    ("llama-3.2-1b.json", "selective:core_attn", "pure-bf16", 2, 512),
])
def test_checkpointing_adds_no_error_of_its_own(config: str, recompute: str, recipe: str, micro_batch: int,
                                          seq: int) -> None:
    """Fake tensors at realistic size: every memory category's error (bill − measured, bytes) is the one full
    recompute of the same step has (a few bytes: Llama-3.2-1B −8 B at the backward's peak),
    and FlopCounterMode's FLOPs are exact."""
    from stepbill.check import compare, predictions

    cfg = json.loads((DATA / config).read_text())

    def errors(policy: str) -> tuple[dict[str, int], bool]:
        bill, measured = _bill_and_measure(cfg, policy, recipe, micro_batch, seq, "fake")
        rows = {r.line: r for r in compare(predictions(bill), measured)}  # type: ignore[arg-type]
        flops = rows["flops.step_noncausal"]
        return ({f: int(bill.lines[line].value) - getattr(measured, f) for f, line in LINES.items()},  # type: ignore[attr-defined]
                flops.predicted == flops.measured)

    every, every_flops = errors(recompute)
    full, full_flops = errors("full")
    assert every == full and every_flops and full_flops, (every, full)
    assert all(abs(e) <= 8192 for e in every.values()), every


@pytest.mark.torch
def test_core_attn_frees_the_core_output_where_the_projection_copies_it() -> None:
    """GPT-NeoX's output projection saves its own copy of the merged heads (attn.dense_in), so a checkpointed core's
    output goes: pythia-160m, fake, every memory category within 0.1 % (the backward peak 1.5 MB above the bill at
    seq 256, one hidden-wide fp32 tensor, not explained yet: docs/accuracy.md) and FLOPs exact."""
    from stepbill.check import compare, predictions

    bill, measured = _bill_and_measure(json.loads((DATA / "pythia-160m.json").read_text()), "selective:core_attn",
                                       "fp32", 2, 256, "fake")
    for field, line in LINES.items():
        got = getattr(measured, field)  # type: ignore[attr-defined]
        assert abs(bill.lines[line].value - got) <= 1e-3 * got, field
    rows = {r.line: r for r in compare(predictions(bill), measured)}  # type: ignore[arg-type]
    assert rows["flops.step_noncausal"].predicted == rows["flops.step_noncausal"].measured


@pytest.mark.torch
@pytest.mark.parametrize(("config", "recipe", "micro_batch", "slack"), [
    ("gpt2.json", "fp32", 2, 0),  # attention dropout 0.1: SDPA's math path; q, k, v three views of c_attn's output
    ("gpt2.json", "pure-bf16", 2, 0),  # the checkpoint holds them in bf16, not the math path's fp32 copies
    ("deepseek-v2-lite.json", "pure-bf16", 1, 4096),  # MLA's math path: q and k held in bf16
    # seq 512 = its window: sliding layers get a mask; the checkpoint holds the boolean mask and k, v unrepeated
    ("gemma-3-1b.json", "fp32", 1, 8192),
    # amp: RoPE makes q and k fp32 (cos / sin in the residual's dtype); the checkpoint holds those, their bf16 casts
    # are rebuilt (was −0.99 %)
    ("llama-3.2-1b.json", "amp-bf16", 1, 4096),
])
def test_core_attn_checkpoint_holds_the_sdpa_inputs(config: str, recipe: str, micro_batch: int,
                                                           slack: int) -> None:
    """selective:core_attn (recompute/core_attn.py): the checkpoint holds SDPA's inputs as handed, in their dtype,
    and on the math path its rebuild stops before P·V. Activations (bytes) and FlopCounterMode's FLOPs exact at seq 512,
    fake tensors (were −2.43 % / +1.17 % on gpt2 fp32, +5.0 % / +0.37 % on deepseek-v2-lite pure-bf16, +2.67 % on
    gemma-3-1b fp32: memory/eager.py's masked layers keep nothing beyond full attention under it)."""
    from stepbill.check import compare, predictions

    bill, measured = _bill_and_measure(json.loads((DATA / config).read_text()), "selective:core_attn", recipe,
                                       micro_batch, 512, "fake")
    assert abs(int(bill.lines["memory.activations"].value) - measured.activations) <= slack  # type: ignore[attr-defined]
    rows = {r.line: r for r in compare(predictions(bill), measured)}  # type: ignore[arg-type]
    assert rows["flops.step_noncausal"].predicted == rows["flops.step_noncausal"].measured


@pytest.mark.torch
def test_every_one_measures_what_full_measures() -> None:
    """every:1 (one checkpoint a layer) is transformers' gradient_checkpointing_enable: the same step,
    byte for byte, on real tensors of the tiny Llama."""
    from stepbill.measure.step import measure_step
    from stepbill.measure.tiny import TINY_CONFIGS

    def measured(recompute: str) -> tuple[int, ...]:
        m = measure_step(TINY_CONFIGS["llama"], recipe="fp32", micro_batch=2, seq_len=64, recompute=recompute)
        return (*(getattr(m, field) for field in LINES), m.flops)

    assert measured("every:1") == measured("full")


@pytest.mark.torch
def test_residual_dropout_reruns_the_down_projection() -> None:
    """GPT-2 as configured (resid_pdrop 0.1): the dropout after the MLP's down projection saves a mask, so a
    checkpoint's rebuild reruns the projection — no early stop (engine/flops.checkpoint_skipped_ops). FlopCounterMode's
    count equals the bill's under full recompute (it was 5.7 % above before) and under every:4."""
    from stepbill.check import compare, predictions

    config = json.loads((DATA / "gpt2.json").read_text())
    for recompute in ("full", "every:4"):
        bill, measured = _bill_and_measure(config, recompute, "fp32", 1, 256, "fake")
        rows = {r.line: r for r in compare(predictions(bill), measured)}  # type: ignore[arg-type]
        assert rows["flops.step_noncausal"].predicted == rows["flops.step_noncausal"].measured, recompute


@pytest.mark.torch
def test_mixed_layer_types_are_refused() -> None:
    """Gemma-3 mixes sliding and full attention layers, each given its own mask by the decoder loop: a run would
    hand its first layer's mask to all, so check refuses in one line instead of measuring the wrong masks."""
    from stepbill.measure.step import measure_step

    with pytest.raises(StepbillError, match="sliding_attention"):
        measure_step(json.loads((DATA / "gemma-3-1b.json").read_text()), recipe="fp32", seq_len=64,
                     recompute="every:2", mode="fake")


def test_check_cli_refuses_what_it_cannot_measure(capsys: pytest.CaptureFixture[str]) -> None:
    """One line, exit 2: a K below 1, a selective set other than core_attn, and every:K or selective:core_attn beside
    --dp (measured in one process only)."""
    from tests.conftest import run_cli

    for args, message in ((["--recompute", "every:0"], "every:K (K >= 1)"),
                          (["--recompute", "every:2", "--dp", "2", "--zero", "1"], "measured in one process"),
                          (["--recompute", "selective:core_attn", "--dp", "2", "--zero", "1"], "in one process"),
                          (["--recompute", "selective:mlp"], "or selective:core_attn; got 'selective:mlp'")):
        code, out, err = run_cli(["check", "gpt3-125m", "--fake", *args], capsys)
        assert code == 2 and message in err and "Traceback" not in err and not out.strip(), (args, err)


@pytest.mark.torch
def test_a_refusal_during_the_measurement_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A refusal raised once the model is built (Gemma-3's mixed layers under every:K) is one line on stderr, exit 2:
    the spinner stays off when stderr is not a terminal (it left a blank line before the error)."""
    from tests.conftest import run_cli

    code, out, err = run_cli(["check", str(DATA / "gemma-3-1b.json"), "--fake", "--seq", "64", "--recompute",
                              "every:2"], capsys)
    assert code == 2 and not out.strip() and err.startswith("stepbill: error: ") and err.count("\n") == 1, err
