"""MLA on CPU SDPA's math path without recompute (engine/memory/eager_mla.py): at sequences where its B·H·T² fp32
tensors make the step's peaks — the forward's at the last layer's mask addition, the backward's at its softmax
backward — the eager bill matches MemTracker on tiny DeepSeek-V3 (real tensors, seconds each)."""

from __future__ import annotations

import pytest

from stepbill.check import compare, predictions
from stepbill.engine.bill import make_bill
from stepbill.engine.kinds import Part
from stepbill.measure.step import measure_step
from stepbill.measure.tiny import TINY_CONFIGS
from stepbill.spec.hf import from_hf_config
from stepbill.spec.recipe import make_recipe

CONFIG = TINY_CONFIGS["deepseek_v3"]
LINES = ("memory.activations", "memory.peak_forward", "memory.peak_backward")


@pytest.mark.parametrize(("recipe", "micro_batch", "seq", "tolerance"), [
    ("fp32", 1, 512, 1e-5),
    ("fp32", 2, 512, 1e-5),  # at B > 1 in fp32, v's copy is made at P·V, after the forward's peak
    # pure-bf16: transformers keeps the router's weight in fp32, the bill in bf16 (weights −0.14 %, its gradient and
    # AdamW states alike); amp-bf16: RoPE's cos / sin through the backward are fp32, the bill's bf16 (−64 B a token)
    ("pure-bf16", 1, 512, 1e-3),
    ("amp-bf16", 1, 1024, 1e-3),
])
def test_math_path_peaks_without_recompute(recipe: str, micro_batch: int, seq: int, tolerance: float) -> None:
    bill = make_bill(from_hf_config(CONFIG, "tiny"), make_recipe(recipe, "adamw", micro_batch, seq, "none"),
                     convention="eager")
    measured = measure_step(CONFIG, recipe=recipe, micro_batch=micro_batch, seq_len=seq, recompute="none",
                            flops=False)
    errors = {r.line: r.error for r in compare(predictions(bill), measured) if r.line in LINES}
    assert all(abs(e) <= tolerance for e in errors.values()), errors
    timeline = bill.timeline
    assert timeline is not None
    # both peaks are the attention's moments inside the last layer (not its end, nor the loss)
    assert timeline.peak_forward.part is Part.LAYER_INNER and timeline.peak_forward.layer == 1
    assert timeline.peak_backward.part is Part.LAYER_INNER and timeline.peak_backward.layer == 1
