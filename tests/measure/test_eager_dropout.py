"""Dropout under the eager convention (engine/activations/eager/dropout.py) against PyTorch on CPU: the rows
tensor by tensor and in total against saved_tensors_hooks, and every memory category of the step against
MemTracker, on tiny real models with dropout > 0 (GPT-2: attn/resid/embd_pdrop; GPT-NeoX: attention_dropout and
hidden_dropout; the llama-like families: attention_dropout). The real-size runs (fake tensors) are marked slow."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")

from stepbill.check import compare, predictions
from stepbill.engine.activations import layer_rows
from stepbill.engine.activations.eager import EagerBytes, saved_bytes
from stepbill.engine.bill import make_bill
from stepbill.measure.saved import SavedTensor, saved_tensors, total_bytes
from stepbill.measure.step import measure_step
from stepbill.measure.tiny import TINY_CONFIGS
from stepbill.spec.hf import from_hf_config
from stepbill.spec.recipe import make_recipe

BYTES = {"fp32": EagerBytes(4, 4), "pure-bf16": EagerBytes(2, 2), "amp-bf16": EagerBytes(2, 4)}
DROPOUT = {
    "gpt2": {"attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1},
    "gpt_neox": {"attention_dropout": 0.1, "hidden_dropout": 0.1},
}
MEMORY = ("memory.weights", "memory.grads", "memory.optimizer", "memory.activations", "memory.peak_forward",
          "memory.peak_backward", "memory.peak")
CFG = Path(__file__).resolve().parent.parent / "data" / "hf_configs"


def _config(family: str, part: str = "all") -> dict:
    """The tiny config with dropout 0.1: every field, or only attention ("attn") or only the others ("resid")."""
    drops = DROPOUT.get(family, {"attention_dropout": 0.1})
    if part != "all":
        drops = {k: (v if ("attn" in k or "attention" in k) == (part == "attn") else 0.0) for k, v in drops.items()}
    return {**TINY_CONFIGS[family], **drops}


@pytest.mark.parametrize("family", ["gpt2", "gpt_neox"])
@pytest.mark.parametrize("part", ["all", "attn", "resid"])
@pytest.mark.parametrize(("recipe", "micro_batch", "seq"), [("fp32", 2, 64), ("pure-bf16", 1, 96),
                                                            ("amp-bf16", 2, 48)])
def test_saved_bytes_with_dropout_exact(family: str, part: str, recipe: str, micro_batch: int, seq: int) -> None:
    """Masks (input dtype on CPU), embedding dropout, and SDPA's math path: to the byte."""
    config = _config(family, part)
    measured = total_bytes(saved_tensors(config, recipe=recipe, micro_batch=micro_batch, seq_len=seq))
    assert saved_bytes(from_hf_config(config, family), BYTES[recipe], seq, micro_batch) == measured


@pytest.mark.parametrize("family", ["llama", "qwen3", "phi3", "mixtral"])
def test_attention_dropout_math_path_other_families(family: str) -> None:
    """attention_dropout on the llama-like families (GQA: k and v expanded to every head on the math path)."""
    config = _config(family)
    measured = total_bytes(saved_tensors(config, recipe="pure-bf16", micro_batch=2, seq_len=48))
    assert saved_bytes(from_hf_config(config, family), BYTES["pure-bf16"], 48, 2) == measured


LAYER0 = {"gpt2": "transformer.h.0", "gpt_neox": "gpt_neox.layers.0", "llama": "model.layers.0"}


@pytest.mark.parametrize("family", ["gpt2", "gpt_neox", "llama"])
@pytest.mark.parametrize("recipe", ["fp32", "amp-bf16"])
def test_layer_rows_tensor_by_tensor(family: str, recipe: str) -> None:
    """Layer 0's saved storages (bytes each) are exactly the layer's rows at this size; the RoPE tables
    (per position, shared by every layer) are outside rows and autocast's weight casts (amp) fixed rows, both
    left out here."""
    b, t = 2, 64
    config = _config(family)
    layer = LAYER0[family]

    def cast(s: SavedTensor) -> bool:
        return s.node in ("AddmmBackward0", "MmBackward0") and s.argument == "mat2"

    measured = Counter(s.bytes for s in saved_tensors(config, recipe=recipe, micro_batch=b, seq_len=t)
                       if s.kind == "activation" and s.module.startswith(layer + ".") and s.shape[:2] != (1, 1)
                       and not cast(s))
    rows = layer_rows(from_hf_config(config, family), "dense", BYTES[recipe], "eager")
    predicted = Counter(round(r.bytes_at(t) * b * t) for r in rows)
    assert predicted == measured


@pytest.mark.parametrize("family", ["gpt2", "gpt_neox", "llama"])
@pytest.mark.parametrize("recipe", ["fp32", "pure-bf16", "amp-bf16"])
def test_step_memory_with_dropout_within_three_percent(family: str, recipe: str) -> None:
    """Every memory category of the step (peaks included) within 3 % of MemTracker (measured: ≤ 2.1 %)."""
    config = _config(family)
    bill = make_bill(from_hf_config(config, "tiny"), make_recipe(recipe, "adamw", 2, 64), convention="eager")
    measured = measure_step(config, recipe=recipe, micro_batch=2, seq_len=64, flops=False)
    errors = {r.line: r.error for r in compare(predictions(bill), measured) if r.line in MEMORY}
    assert all(abs(e) <= 0.03 for e in errors.values()), errors


@pytest.mark.slow
@pytest.mark.parametrize(("source", "override", "recipe", "micro_batch", "seq"), [
    ("gpt2-xl.json", {}, "fp32", 1, 1024),  # GPT-2 1.5B as published: attn/resid/embd_pdrop 0.1
    ("pythia-1.4b.json", {"attention_dropout": 0.1, "hidden_dropout": 0.1}, "pure-bf16", 1, 2048),
])
def test_real_size_with_dropout_within_three_percent(source: str, override: dict, recipe: str, micro_batch: int,
                                                    seq: int) -> None:
    """Real sizes on fake tensors (minutes each on a 2-core machine): every memory category within 3 %."""
    config = {**json.loads((CFG / source).read_text()), **override}
    bill = make_bill(from_hf_config(config, source), make_recipe(recipe, "adamw", micro_batch, seq),
                     convention="eager")
    measured = measure_step(config, recipe=recipe, micro_batch=micro_batch, seq_len=seq, mode="fake", flops=False)
    errors = {r.line: r.error for r in compare(predictions(bill), measured) if r.line in MEMORY}
    assert all(abs(e) <= 0.03 for e in errors.values()), errors


def test_flops_on_the_math_path_exact() -> None:
    """SDPA's math path (attention dropout on CPU) rebuilds no QKᵀ in its backward: FlopCounterMode's count
    drops by that much, and the bill follows it to the FLOP."""
    config = _config("gpt2")
    bill = make_bill(from_hf_config(config, "tiny"), make_recipe("fp32", "adamw", 2, 64), convention="eager")
    measured = measure_step(config, recipe="fp32", micro_batch=2, seq_len=64)
    flops = [r for r in compare(predictions(bill), measured) if r.line == "flops.step_noncausal"]
    assert len(flops) == 1 and flops[0].error == 0


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_full_recompute_with_attention_dropout_known_gap(family: str) -> None:
    """Full recompute on CPU's math path: the step peak (in the backward) within 3 %; the forward peak, inside a
    recomputed layer's S² temporaries, is under-billed (not modelled yet; the bill's convention note says so).
    Measured: gpt2 fp32 forward −0.9 %, llama fp32 −5.8 %; step +0.6 %, +1.1 %."""
    config = _config(family)
    bill = make_bill(from_hf_config(config, "tiny"), make_recipe("fp32", "adamw", 2, 64, "full"), convention="eager")
    measured = measure_step(config, recipe="fp32", micro_batch=2, seq_len=64, recompute="full", flops=False)
    errors = {r.line: r.error for r in compare(predictions(bill), measured) if r.line in MEMORY}
    assert abs(errors["memory.peak"]) <= 0.03 and errors["memory.peak_forward"] < 0, errors
    assert "not modelled yet" in bill.lines["memory.activations"].convention


PEAKS = ("rank.peak_forward", "rank.peak_backward", "rank.peak")


def _fsdp_errors(config: dict, world: int, zero: int, seq: int, mode: str) -> dict[str, float]:
    from stepbill.check_ranks import compare_sharded
    from stepbill.engine.check_rank import predict_rank
    from stepbill.measure.sharded import measure_rank

    pred = predict_rank(from_hf_config(config, "x"), world, zero, 0, 1, seq)
    measured = measure_rank(config, world=world, zero=zero, rank=0, seq_len=seq, mode=mode)
    return {r.line: r.error for r in compare_sharded(pred, measured) if r.error is not None}


@pytest.mark.parametrize("family", ["gpt2", "gpt_neox"])
def test_fsdp2_rank_with_dropout(family: str) -> None:
    """FSDP2 ZeRO-2, one rank of 2 on `check`'s fake process group (bf16 compute: bf16 masks, fp32 math path):
    resident state exact, every peak within 3 % (measured: exact)."""
    errors = _fsdp_errors(_config(family), 2, 2, 128, "real")
    assert all(abs(errors[k]) <= 0.03 for k in PEAKS), errors
    assert errors["rank.params"] == errors["rank.optimizer_states"] == 0


@pytest.mark.slow
def test_fsdp2_real_size_with_dropout() -> None:
    """Pythia-1.4B with attention and hidden dropout 0.1, ZeRO-3 rank 0 of 8, seq 2048, fake tensors (minutes):
    every peak within 3 % (measured: exact)."""
    config = {**json.loads((CFG / "pythia-1.4b.json").read_text()), "attention_dropout": 0.1, "hidden_dropout": 0.1}
    errors = _fsdp_errors(config, 8, 3, 2048, "fake")
    assert all(abs(errors[k]) <= 0.03 for k in PEAKS), errors
