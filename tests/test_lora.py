"""LoRA done right (issue 10, user trial W6/W7): the frozen base skips its weight-gradient GEMMs, frozen Linears
keep no input unless an adapter needs one (measured: tests/measure/test_lora_saved.py), PEFT's all-linear."""

from __future__ import annotations

import pytest

from stepbill.engine.bill import make_bill
from stepbill.spec import load_preset
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import make_recipe

LLAMA = load_preset("llama2-7b")
SEQ = 2048


def _bill(lora_rank: int | None = None, targets: tuple[str, ...] | None = None, **kw):  # type: ignore[no-untyped-def]
    return make_bill(LLAMA, make_recipe(seq_len=SEQ, lora_rank=lora_rank, lora_targets=targets, **kw))


def test_trainable_params_match_peft() -> None:
    """PEFT's print_trainable_parameters on Llama-2-7b: r 8 on q,v 4,194,304; r 16 on all-linear 39,976,960."""
    assert _bill(8)["params.trainable"].value == 4_194_304
    assert _bill(16, ("all-linear",))["params.trainable"].value == 39_976_960


def test_lora_step_flops_about_two_thirds_of_full() -> None:
    """W6: q,v LoRA on llama2-7b: no weight-gradient GEMM for the frozen base (= the forward's matmuls with
    weights), the adapters' forward and backward added; about 2/3 of full fine-tuning (above it by the attention
    core's share, whose backward is unchanged)."""
    full, lora = _bill(), _bill(16)
    fwd, attn = full["flops.forward"].value, full["flops.attention"].value
    adapters = 3 * SEQ * 32 * 2 * 16 * (4096 + 4096) * 2  # q and v: A [4096→16], B [16→4096], 32 layers
    # layer 0 reads the frozen embedding's output: its q/k/v and their adapters' A skip the input gradient
    first_layer = SEQ * (2 * 4096 * 3 * 4096 + 2 * 2 * 4096 * 16)
    assert lora["flops.step"].value == full["flops.step"].value - (fwd - attn) - first_layer + adapters
    ratio = lora["flops.step"].value / full["flops.step"].value
    assert 2 / 3 < ratio < 0.70
    assert lora["flops.step_full_square"].value >= lora["flops.step"].value
    # model FLOPs (MFU): 4N + 6·N_adapters + attention instead of 6N + attention
    n = 6_738_415_616 - 131_072_000
    assert lora["flops.model"].value == (4 * n + 6 * 4_194_304 * 2 + 12 * 32 * 32 * 128 * SEQ) * SEQ


def test_lora_activations_lower_by_the_frozen_linears_inputs() -> None:
    """W7: q,v LoRA: gate/up's input (mlp.norm_out, 4,096 wide) and down's input (mlp.product, 11,008) are kept
    for frozen weights' gradients only, so they go; q/v keep their shared input (A reads it) and add A's output
    (16 wide each). The attention output stays: SDPA's backward reads it."""
    full, lora = _bill(), _bill(16)
    per_token_layer = (4096 + 11008) * 2 - 2 * 16 * 2
    drop = full["memory.activations"].value - lora["memory.activations"].value
    assert drop == 32 * SEQ * per_token_layer
    names = {r.name for r in lora.layer_rows["dense"]}
    assert "mlp.norm_out" not in names and "mlp.product" not in names
    assert {"attn.norm_out", "attn.core_out", "lora.attn.q_proj.a_out", "lora.attn.v_proj.a_out"} <= names


def test_all_linear_keeps_every_input_and_adds_adapters() -> None:
    """all-linear: every Linear of the layers has an adapter, so every input stays; only the r-wide rows add."""
    full, lora = _bill(), _bill(16, ("all-linear",))
    extra = lora["memory.activations"].value - full["memory.activations"].value
    assert extra == 32 * SEQ * 7 * 16 * 2


def test_per_rank_model_gets_the_lora_rows() -> None:
    """The per-GPU classes read the same plan: with dp 2 the rank's activations drop as the one-GPU bill's."""
    par = Parallel(dp=2, zero=1)
    full, lora = _bill(parallel=par), _bill(16, parallel=par)
    assert lora.ranks[0].memory["activations"] < full.ranks[0].memory["activations"]
    assert lora.ranks[0].memory["activations"] == pytest.approx(lora["memory.activations"].value, rel=0.01)


def test_lora_recompute_keeps_the_rule() -> None:
    """Full recompute under LoRA still rebuilds the LoRA rows: its recompute FLOPs are the whole forward."""
    bill = _bill(16, recompute="full")
    assert bill.plan is not None and bill.plan.recompute_flops() > 0


def test_lora_optimizer_temporaries_are_the_adapters() -> None:
    """AdamW (single tensor) under LoRA steps the adapters only: its largest temporaries are 2·s_j + s_{j−1} over
    consecutive adapter tensors (A then B), never a frozen embedding's (measured on the tiny Llama, q,v r 8, fp32:
    OPT at the optimizer peak 69,664 B = 57,376 B of states + 12,288 B)."""
    from stepbill.engine.activations import layer_order
    from stepbill.engine.memory.eager_lora import lora_stepped
    from stepbill.engine.memory.optimizer_step import step_temporaries
    from stepbill.engine.params import param_inventory
    from stepbill.spec.hf import from_hf_config
    from stepbill.spec.recipe import LoRA

    tiny = from_hf_config({"vocab_size": 320, "num_hidden_layers": 2, "max_position_embeddings": 512,
                           "model_type": "llama", "hidden_size": 128, "intermediate_size": 176,
                           "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False})
    adapters = lora_stepped(param_inventory(tiny), LoRA(8), layer_order(tiny))
    assert step_temporaries("adamw", "single", 4, adapters) == 12_288
    assert step_temporaries("adamw", "fused", 4, adapters) == 0


def test_check_says_what_full_recompute_lora_does_not_model() -> None:
    """check --lora-rank --recompute full: MoE layers are refused in one line; under amp-bf16 an adapter on down_proj
    (all-linear) is measured with one line saying the rebuild's moment at it is not modelled; q,v under amp and
    all-linear under fp32 have no such line."""
    from stepbill.check_lora import full_refusal, full_unmodelled
    from stepbill.errors import StepbillError
    from stepbill.spec.recipe import LoRA

    with pytest.raises(StepbillError, match="dense models only"):
        full_refusal(load_preset("mixtral-8x7b"))
    full_refusal(LLAMA)
    (line,) = full_unmodelled("amp-bf16", LoRA(8, ("all-linear",)))
    assert "down_proj" in line and "not modelled" in line
    assert full_unmodelled("amp-bf16", LoRA(8)) == full_unmodelled("fp32", LoRA(8, ("all-linear",))) == []


def test_checkpointed_lora_flops_rerun_adapters_and_first_layer_dgrad() -> None:
    """Under full recompute (transformers' checkpointing makes the embedding output require grad) layer 0 computes its
    q/k/v input gradients and the rebuild reruns every adapter: flops.step of LoRA + full exceeds LoRA's by the
    layers' rebuild plus exactly those terms (measured with FlopCounterMode: tests/measure/test_lora_amp_recompute.py)."""
    none, full = _bill(16), _bill(16, recompute="full")
    assert full["flops.lora_first_layer_dgrad"].value == 0 < none["flops.lora_first_layer_dgrad"].value
    assert full["flops.step"].value > none["flops.step"].value
