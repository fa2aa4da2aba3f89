"""The eager bill's token-embedding backward under tied embeddings (engine/memory/eager.tied_gradient_sum), held to
MemTracker's figures measured once (fake tensors, torch 2.13 CPU, transformers 5.24; the user trial's W9)."""

from __future__ import annotations

from stepbill.engine.bill import make_bill
from stepbill.engine.kinds import Part
from stepbill.spec.presets import load_model
from stepbill.spec.recipe import make_recipe

# `check gpt3-125m --seq 128` (fp32, AdamW single): the backward's peak, 2 × V·h·4 B of the shared weight's gradient
# above all the gradients (MemTracker: grads 346,515,456 + temp 463,168,512 = 3 × 50,257 × 768 × 4 + the rest).
GPT3_125M_SEQ128_PEAK_BACKWARD = 2_312_400_472


def test_gpt3_125m_backward_peak_is_the_embedding_gradient_sum() -> None:
    bill = make_bill(load_model("gpt3-125m"), make_recipe("fp32", "adamw", 1, 128), convention="eager")
    assert bill.timeline is not None
    peak = bill.timeline.peak_backward
    assert peak.part is Part.EMBEDDING
    assert peak.items["temporaries"] == 2 * 50_257 * 768 * 4
    assert abs(peak.total - GPT3_125M_SEQ128_PEAK_BACKWARD) <= 8  # 8 B: the B = 1 label view, not billed here


def test_untied_and_lora_have_no_sum() -> None:
    """No summed V·h gradient: untied, the embedding's backward holds only its incoming B·T·h gradient (the
    residual's dtype; helper-measured on llama3-8b under recompute, where that moment is the backward peak); under
    LoRA (frozen embedding) nothing."""
    for model, lora, temporaries in (("llama2-7b", None, 128 * 4096 * 4), ("gpt3-125m", 16, 0)):
        recipe = make_recipe("fp32", "adamw", 1, 128, **({"lora_rank": lora} if lora else {}))
        bill = make_bill(load_model(model), recipe, convention="eager")
        assert bill.timeline is not None
        (moment,) = [m for m in bill.timeline.moments if m.part is Part.EMBEDDING]
        assert moment.items["temporaries"] == temporaries
