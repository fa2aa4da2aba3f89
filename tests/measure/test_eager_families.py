"""Every family's tiny model under the eager convention: every memory category of the step within 3 % of
MemTracker (real tensors, seconds each), for fp32, pure-bf16 and amp-bf16, recompute none and full.

Known gaps are marked xfail in KNOWN_GAPS (strict: fixing one turns it into a failure to be removed from the list;
none today). The moments that closed them: inside a checkpointed layer's forward (full recompute: the layer's unsaved
intermediates; engine/memory/eager_layer.in_layer_forward for GPT-2's gelu_new, GPT-NeoX's parallel-residual MLP,
the Mixtral / Qwen2-MoE fp32 expert fallback, gpt-oss's MoE block, gemma2's / gpt-oss's eager attention and MLA's
math-path attention), layer-backward moments (GELU, sandwich norms, the routed experts: engine/memory/eager_moe.py),
the rebuild of a checkpointed layer at the start of its backward (eager_layer.mla_math_rebuild_low, gpt_oss_rebuild)
and the attention masks the checkpoints hold (engine/activations/eager/masks.py)."""

from __future__ import annotations

import pytest

from stepbill.check import compare, predictions
from stepbill.engine.activations.eager.families import MISSING
from stepbill.engine.bill import make_bill
from stepbill.measure.step import measure_step
from stepbill.measure.tiny import TINY_CONFIGS
from stepbill.spec.hf import from_hf_config
from stepbill.spec.recipe import make_recipe

MEMORY = ("memory.weights", "memory.grads", "memory.optimizer", "memory.activations", "memory.peak_forward",
          "memory.peak_backward", "memory.peak")
TOLERANCE = 0.03
KNOWN_GAPS: set[tuple[str, str, str]] = {
    # session 32 closed gpt_neox pure-bf16 / amp, llama, qwen3 and phi3 amp under full (the rebuilt input counted
    # once, GELU's two gradients, the amp LM head); the MoE layers' routed-expert backward (the combine's index
    # backward, the down and gate_up grouped GEMMs' backward with their whole 3-D bank gradients:
    # engine/memory/eager_moe.py) closed Mixtral and Qwen2-MoE under full; MLA's math path in bf16 / amp
    # (eager_layer.mla_math_forward_low) closed DeepSeek-V3's; the checkpoints' additive masks (eager/masks.py), the
    # sandwich post-FFN norm's backward and gpt-oss's in-layer MoE forward (eager_layer.py) closed gemma2's and
    # gpt_oss's; GPT-NeoX's parallel-residual MLP forward inside a checkpointed layer (eager_layer._ffn_forward)
    # closed gpt_neox fp32's
}


def errors(family: str, recipe: str, recompute: str, micro_batch: int = 2, seq: int = 64) -> dict[str, float]:
    config = TINY_CONFIGS[family]
    bill = make_bill(from_hf_config(config, "tiny"), make_recipe(recipe, "adamw", micro_batch, seq, recompute),
                     convention="eager")
    measured = measure_step(config, recipe=recipe, micro_batch=micro_batch, seq_len=seq, recompute=recompute,
                            flops=False)
    return {r.line: r.error for r in compare(predictions(bill), measured) if r.line in MEMORY}


# Every family with eager rows (those still in MISSING refuse the eager convention: tests/test_families.py).
MODELLED = [f for f in TINY_CONFIGS if f not in MISSING]
NEW_FAMILIES = ("olmo2", "phi3", "gemma3_text", "gemma2", "gpt_oss")  # issue 14: marked slow (seconds each)


def _marks(family: str, recipe: str, recompute: str) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.slow] if family in NEW_FAMILIES else []
    if (family, recipe, recompute) in KNOWN_GAPS:
        marks.append(pytest.mark.xfail(strict=True, reason="known gap (module docstring)"))
    return marks


CASES = [pytest.param(f, r, c, marks=_marks(f, r, c))
         for f in MODELLED for r in ("fp32", "pure-bf16", "amp-bf16") for c in ("none", "full")]


@pytest.mark.parametrize(("family", "recipe", "recompute"), CASES)
def test_every_category_within_three_percent(family: str, recipe: str, recompute: str) -> None:
    errs = errors(family, recipe, recompute)
    off = {k: v for k, v in errs.items() if abs(v) > TOLERANCE}
    assert not off, off


@pytest.mark.parametrize("family", ["llama", "qwen3", "qwen2_moe", "deepseek_v3"])
def test_amp_without_recompute_exact(family: str) -> None:
    """amp-bf16: EagerBytes (bf16 compute, fp32 params) through the plan, per-layer autocast casts and fixed
    rows, and the final norm's fp32 output at the forward end: every category within 0.2 %."""
    errs = errors(family, "amp-bf16", "none")
    assert all(abs(v) <= 0.002 for v in errs.values()), errs


@pytest.mark.slow
@pytest.mark.parametrize("seq", [160, 512])
@pytest.mark.parametrize("family", ["gemma2", "gpt_oss"])
@pytest.mark.parametrize("recipe", ["fp32", "pure-bf16", "amp-bf16"])
def test_eager_attention_families_full_at_long_sequences(family: str, recipe: str, seq: int) -> None:
    """Seq 160 ≥ the tiny window 128 and 512, full recompute: the forward's peak is the eager attention's B·H·S² steps
    inside a checkpointed layer (eager_layer.eager_attention_in_layer); the backward's gemma2's post-FFN norm or
    softmax backward, gpt-oss's rebuild at its combine or its attention; the checkpoints hold both B·S² masks
    (eager/masks.py). Every category within 0.01 % (traced: to 40 bytes) but gemma2 amp's softmax backward at 512
    (+0.4 %, dP's dtypes under autocast not traced)."""
    errs = errors(family, recipe, "full", seq=seq)
    bound = 0.005 if (family, recipe, seq) == ("gemma2", "amp-bf16", 512) else 1e-4
    assert all(abs(e) <= bound for e in errs.values()), errs
