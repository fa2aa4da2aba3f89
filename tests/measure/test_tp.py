"""Tensor / sequence parallelism measured on a fake process group (measure/tp.py) vs the bill's rank.

The tiny Llama has 8 heads of 16 and 4 kv heads so that tp 2 and tp 4 both divide them."""

from __future__ import annotations

import pytest

from stepbill.errors import StepbillError
from stepbill.measure.tiny import TINY_CONFIGS

CFG = {**TINY_CONFIGS["llama"], "num_attention_heads": 8, "num_key_value_heads": 4}
SEQ = 128
SPLIT = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "embed_tokens", "lm_head")
LAYOUTS = [(2, False), (2, True), (4, False), (4, True)]


def test_tp_measure_refuses_bad_layouts():
    from stepbill.measure.tp import measure_tp_rank

    with pytest.raises(StepbillError, match="covers llama"):
        measure_tp_rank(TINY_CONFIGS["gpt2"], 2)
    with pytest.raises(StepbillError, match="must divide"):
        measure_tp_rank(TINY_CONFIGS["llama"], 4)  # 2 kv heads
    with pytest.raises(StepbillError, match="divisible"):
        measure_tp_rank(CFG, 4, sp=True, seq_len=130)
    with pytest.raises(StepbillError, match="recipes"):
        measure_tp_rank(CFG, 2, recipe="amp-bf16")


def _expected_params(tp: int) -> tuple[int, int, int]:
    """(elements this rank holds, elements of the embedding, parameter tensors) from transformers' own model:
    the plan's matrices split tp ways, the norms whole."""
    import torch
    from transformers import AutoModelForCausalLM

    from stepbill.measure.build import make_config

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(make_config(CFG))
    held = sum(p.numel() // tp if any(s in n for s in SPLIT) else p.numel() for n, p in model.named_parameters())
    return held, model.model.embed_tokens.weight.numel(), len(list(model.parameters()))


_cache: dict[tuple[int, bool], tuple] = {}


def _measure(tp: int, sp: bool):  # type: ignore[no-untyped-def]
    if (tp, sp) not in _cache:
        from stepbill.engine.bill import make_bill
        from stepbill.measure.tp import measure_tp_rank
        from stepbill.spec.hf import from_hf_config
        from stepbill.spec.parallel import Parallel
        from stepbill.spec.recipe import make_recipe

        measured = measure_tp_rank(CFG, tp, sp, 1, SEQ, "fp32")
        recipe = make_recipe("fp32", "adamw", 1, SEQ, parallel=Parallel(tp=tp, sp=sp))
        predicted = make_bill(from_hf_config(CFG), recipe, convention="eager").ranks[0].memory
        _cache[(tp, sp)] = (measured, predicted)
    return _cache[(tp, sp)]


@pytest.mark.slow
@pytest.mark.parametrize(("tp", "sp"), LAYOUTS)
def test_tp_rank_resident_state_as_torch_holds_it(tp, sp):
    """The harness against transformers' own tensors: params = the plan's slices (fp32); grads = the same plus
    the rest of the embedding table (torch 2.13: the gradient of a RowwiseParallel embedding is a Replicate
    DTensor of the whole (V, h) table); AdamW states = 2 × params + one 4-byte step per tensor."""
    measured, _ = _measure(tp, sp)
    held, embed, tensors = _expected_params(tp)
    assert measured.params == 4 * held
    assert measured.grads == 4 * (held + embed - embed // tp)
    assert measured.optimizer_states == 8 * held + 4 * tensors


@pytest.mark.slow
@pytest.mark.parametrize(("tp", "sp"), LAYOUTS)
def test_tp_rank_params_equal_bill(tp, sp):
    measured, predicted = _measure(tp, sp)
    assert measured.params == predicted["weights"]


@pytest.mark.slow
@pytest.mark.xfail(strict=False, reason=(
    "per-rank TP bill (approximate model, engine/parallel/ranks.py) vs measure/tp.py, tiny llama fp32 seq 128, "
    "torch 2.13: grads tp2 633,344 B vs measured 715,264 B, tp4 317,952 vs 440,832 (torch's RowwiseParallel "
    "embedding gradient is the whole (V, h) table on every rank; the bill's is vocab-parallel, Megatron's); "
    "optimizer tp2 1,266,730 vs 1,266,772, tp4 635,925 vs 635,988 (AdamW's step counters); peak tp2 3,710,580 vs "
    "3,955,868, tp2+sp 3,216,724 vs 3,627,932, tp4 2,419,797 vs 2,729,116, tp4+sp 1,626,917 vs 2,236,700 (the "
    "bill's logits are vocab-parallel, torchtitan's default head replicates them: docs/accuracy.md)"))
@pytest.mark.parametrize(("tp", "sp"), LAYOUTS)
def test_tp_rank_grads_optimizer_peak_equal_bill(tp, sp):
    measured, predicted = _measure(tp, sp)
    assert measured.grads == predicted["grads"]
    assert measured.optimizer_states == predicted["optimizer"]
    assert measured.peak == pytest.approx(predicted["peak"], rel=0.03)


@pytest.mark.slow
@pytest.mark.parametrize("tp", [2, 4])
def test_tp_note_names_the_measured_embedding_gradient_gap(tp):
    """The bill's grads are Megatron's vocab-parallel embedding's; its first-stage note names what torch's
    RowwiseParallel embedding adds, and that figure is the measured gap to the byte."""
    import re

    from stepbill.engine.bill import make_bill
    from stepbill.spec.hf import from_hf_config
    from stepbill.spec.parallel import Parallel
    from stepbill.spec.recipe import make_recipe

    measured, predicted = _measure(tp, False)
    recipe = make_recipe("fp32", "adamw", 1, SEQ, parallel=Parallel(tp=tp))
    notes = make_bill(from_hf_config(CFG), recipe, convention="eager").ranks[0].notes
    (note,) = [n for n in notes if "RowwiseParallel" in n]
    more = int(re.search(r"([\d,]+) B \(", note).group(1).replace(",", ""))
    assert predicted["grads"] + more == measured.grads


@pytest.mark.slow
def test_tp_loss_parallel_keeps_the_vocab_shard_of_the_logits():
    """torchtitan's default head (Shard(-1) logits, loss_parallel()): same resident state, and the forward
    holds 1/tp of the logits instead of all of them (at least tp−1 tp-ths of the fp32 logits saved)."""
    from stepbill.measure.tp import measure_tp_rank

    replicated, _ = _measure(2, True)
    sharded = measure_tp_rank(CFG, 2, True, 1, SEQ, "fp32", loss_parallel=True)
    assert (sharded.params, sharded.grads, sharded.optimizer_states) == (
        replicated.params, replicated.grads, replicated.optimizer_states)
    logits_fp32 = SEQ * CFG["vocab_size"] * 4
    assert replicated.peak_forward - sharded.peak_forward >= logits_fp32 // 2
    assert sharded.settings["lm_head_output"].startswith("Shard(-1)")
