"""Tied embeddings (GPT-2, Llama-3.2-1B, Gemma): at the token embedding's backward autograd holds three V·h gradients
of the shared weight (the LM head's contribution, the embedding's, and their sum: engine/memory/eager.
tied_gradient_sum). The user trial's W9: `check gpt3-125m --real --seq 128` had the backward peak 13.35 % low."""

from __future__ import annotations

import pytest

from stepbill.check import compare, predictions
from stepbill.engine.bill import make_bill
from stepbill.engine.kinds import Part
from stepbill.measure.step import measure_step
from stepbill.measure.tiny import TINY_CONFIGS
from stepbill.spec.hf import from_hf_config
from stepbill.spec.recipe import make_recipe

MEMORY = ("memory.activations", "memory.peak_forward", "memory.peak_backward", "memory.peak")
# A vocabulary large against the layers (as GPT-2's 50,257 against 768-wide layers at seq 128): the embedding's
# backward is the backward peak.
GPT2_WIDE_VOCAB = {**TINY_CONFIGS["gpt2"], "vocab_size": 8192}


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["fp32", "pure-bf16", "amp-bf16"])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_tied_embedding_backward_exact(recipe: str, recompute: str) -> None:
    bill = make_bill(from_hf_config(GPT2_WIDE_VOCAB, "tiny"), make_recipe(recipe, "adamw", 1, 64, recompute),
                     convention="eager")
    measured = measure_step(GPT2_WIDE_VOCAB, recipe=recipe, seq_len=64, recompute=recompute, flops=False)
    errors = {r.line: r.error for r in compare(predictions(bill), measured) if r.line in MEMORY}
    assert abs(errors["memory.peak_backward"]) < 1e-6, errors  # 8 B: the B = 1 label view, not billed here
    assert abs(errors["memory.peak"]) < 1e-6, errors
    assert bill.timeline is not None
    if bill.timeline.peak_backward.part is Part.EMBEDDING:  # the shared weight's three gradients, as MemTracker sees
        assert measured.phase_breakdown["backward"]["temp"] == 3 * 8192 * 128 * (2 if recipe == "pure-bf16" else 4)


@pytest.mark.slow
@pytest.mark.parametrize("zero", [2, 3])
def test_tied_embedding_backward_fsdp2_rank(zero: int) -> None:
    """FSDP2 (fake process group, one rank of 2): the same three unsharded bf16 gradients of the tied weight at the
    embedding's backward (engine/parallel/fsdp2_moments.py); `check gpt3-125m --dp 2 --zero 3` was −11.07 %."""
    from stepbill.engine.check_rank import predict_rank
    from stepbill.measure.sharded import measure_rank

    measured = measure_rank(GPT2_WIDE_VOCAB, world=2, zero=zero, rank=0, seq_len=64)
    predicted = predict_rank(from_hf_config(GPT2_WIDE_VOCAB), 2, zero, 0, 1, 64)
    for key in ("peak_backward", "peak"):
        assert getattr(predicted, key) == pytest.approx(getattr(measured, key), rel=1e-6), key
