"""The five families added for issue 14 (gemma2, gemma3_text, phi3, olmo2, gpt_oss) through the bill: ideal
and eager conventions; where the eager rows are not modelled (a family marked missing, eager attention's masks
under a recompute other than none or full, a family feature on a custom spec) one line and exit 2."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from stepbill.engine.activations.eager.families import MISSING
from stepbill.engine.bill import make_bill
from stepbill.errors import StepbillError
from stepbill.spec.hf import from_hf_config
from stepbill.spec.recipe import make_recipe

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
NEW = {"gemma2": "gemma-2-9b", "gemma3_text": "gemma-3-1b", "phi3": "phi-3-mini-4k", "olmo2": "olmo-2-1124-7b",
       "gpt_oss": "gpt-oss-20b"}


def spec_of(family: str):
    return from_hf_config(json.loads((CONFIGS / f"{NEW[family]}.json").read_text()), NEW[family])


@pytest.mark.parametrize("family", sorted(NEW))
def test_ideal_bill_of_each_new_family(family: str) -> None:
    bill = make_bill(spec_of(family), make_recipe("mixed-bf16", "adamw", 1, 512, "none"))
    assert bill.lines["memory.peak"].value >= bill.lines["memory.resident"].value > 0
    assert bill.lines["memory.activations"].value > 0


def test_eager_refuses_a_family_marked_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mechanism a new family starts with: ideal works, eager says in one line what is missing."""
    monkeypatch.setitem(MISSING, "olmo2", "post-norms")
    spec, recipe = spec_of("olmo2"), make_recipe("mixed-bf16", "adamw", 1, 512, "none")
    make_bill(spec, recipe)
    with pytest.raises(StepbillError) as err:
        make_bill(spec, recipe, convention="eager")
    assert "\n" not in str(err.value) and "olmo2" in str(err.value) and "post-norms" in str(err.value)


@pytest.mark.parametrize("family", sorted(NEW))
def test_eager_bill_of_each_new_family(family: str) -> None:
    bill = make_bill(spec_of(family), make_recipe("pure-bf16", "adamw", 1, 128, "none"), convention="eager")
    assert bill.lines["memory.activations"].value > 0


def test_custom_spec_with_a_family_feature_is_refused_under_eager() -> None:
    spec = dataclasses.replace(spec_of("gpt_oss"), family="custom")
    with pytest.raises(StepbillError) as err:
        make_bill(spec, make_recipe("pure-bf16", "adamw", 1, 128, "none"), convention="eager")
    assert "\n" not in str(err.value) and "attention sinks" in str(err.value) and "gpt_oss" in str(err.value)


def test_cli_eager_refusal_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    from stepbill.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["bill", str(CONFIGS / "gemma-2-9b.json"), "--convention", "eager", "--recompute", "every:2"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "gemma2" in err


def test_eager_sliding_window_mask_is_billed() -> None:
    """phi3 (window 2047, MHA): below the window the mask is skipped (rows of full causal attention); from it on
    every layer's SDPA keeps the B·S² mask in the compute dtype (eager/masks.py; measured in
    tests/measure/test_window_saved.py) and nothing else changes (no kv heads to expand)."""
    from stepbill.engine.activations import eager

    spec = spec_of("phi3")  # sliding_window 2047, 32 layers
    no_window = dataclasses.replace(spec, attention=dataclasses.replace(spec.attention, sliding_window=None,
                                                                        sliding_layers=()))
    act = eager.from_precision(make_recipe("pure-bf16", "adamw", 1, 2046).precision)
    assert eager.saved_bytes(spec, act, 2046) == eager.saved_bytes(no_window, act, 2046)
    assert eager.saved_bytes(spec, act, 2047) - eager.saved_bytes(no_window, act, 2047) == 32 * 2047**2 * 2
    bill = make_bill(spec, make_recipe("pure-bf16", "adamw", 1, 2047, "none"), convention="eager")
    assert bill.lines["memory.activations"].value > 0


def test_gemma2_eager_attention_rows_and_recompute_refusal() -> None:
    """gemma2 runs eager attention on CPU (no SDPA in transformers): S² rows (soft-cap tanh, fp32 softmax, its
    bf16 cast); recompute none and full are billed (the checkpoints' masks: eager/masks.py), every:K and selective
    refused in one line."""
    from stepbill.engine.activations.rows import layer_rows

    spec = spec_of("gemma2")
    names = {r.name for r in layer_rows(spec, "dense", 2, "eager") if r.per_token2}
    assert names == {"attn.softcap_tanh", "attn.probs", "attn.probs_cast"}
    make_bill(spec, make_recipe("pure-bf16", "adamw", 1, 8192, "none"), convention="eager")  # window: no refusal
    make_bill(spec, make_recipe("pure-bf16", "adamw", 1, 512, "full"), convention="eager")
    for policy in ("every:2", "selective:mlp"):
        with pytest.raises(StepbillError) as err:
            make_bill(spec, make_recipe("pure-bf16", "adamw", 1, 512, policy), convention="eager")
        assert "\n" not in str(err.value) and "gemma2" in str(err.value) and policy in str(err.value)


@pytest.mark.parametrize(("recipe", "mask_bytes"), [("pure-bf16", 2), ("amp-bf16", 4)])
def test_gemma2_full_recompute_holds_two_masks(recipe: str, mask_bytes: int) -> None:
    """gemma-2-9b (42 layers, sliding and full attention alternating from layer 0), B = 2, seq 4096 under full
    recompute: its decoder builds one additive mask per attention type (B·S², the embedding's dtype: fp32 under amp),
    which the checkpoints hold with the position ids from the loss on: the full-attention mask until layer 1's
    backward ends, the sliding one and the ids until layer 0's. 2 × 2 × 4096² × 2 B = 128 MiB in bf16."""
    bill = make_bill(spec_of("gemma2"), make_recipe(recipe, "adamw", 2, 4096, "full"), convention="eager")
    assert bill.eager is not None
    mask = 2 * 4096**2 * mask_bytes
    assert bill.eager.decoder_masks == 2 * mask
    assert sorted(bill.eager.checkpoint_held) == [(0, 8 * 4096), (0, mask), (1, mask)]
    assert bill.eager.held_at(None) == bill.eager.held_at(1) == 2 * mask + 8 * 4096
    assert bill.eager.held_at(0) == mask + 8 * 4096
    items = {x.name: x.value for x in bill.activation_items}
    assert items["activations.checkpoint_held"] == 2 * mask + 8 * 4096  # the forward's peak is the loss's
