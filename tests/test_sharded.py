"""Per-rank sharding (FSDP2 ZeRO-3/2, ZeRO-1) predicted vs measured on a fake process group (tiny real models).

Resident state (params, grads, optimizer states) must be exact on every configuration; peaks within 3 % where
the single-rank eager timeline covers the family (llama-like); backward peaks carry the timeline's missing
backward temporaries (see docs/parallel.md)."""

from __future__ import annotations

import pytest

from stepbill.engine.sharded import chunk_rows, hf_tensors, local_rows, predict_rank, zero1_partition
from stepbill.measure.tiny import TINY_CONFIGS
from stepbill.spec.hf import from_hf_config

SEQ = 128
RESIDENT = ("params", "grads", "optimizer_states", "inputs")


def _cfg(name: str, layers: int = 2) -> dict:
    return {**TINY_CONFIGS[name], "num_hidden_layers": layers}


def test_fsdp_chunks_pad_dim0():
    assert chunk_rows(4, 8) == 1 and [local_rows(4, 8, r) for r in range(8)] == [1, 1, 1, 1, 0, 0, 0, 0]
    assert [local_rows(10, 4, r) for r in range(4)] == [3, 3, 3, 1]


def test_zero1_partition_is_greedy_and_complete():
    tensors = hf_tensors(from_hf_config(_cfg("llama")))
    parts = zero1_partition(tensors, 4)
    assert sum(len(p) for p in parts) == len(tensors)
    sizes = [sum(t.numel for t in p) for p in parts]
    assert max(sizes) - min(sizes) <= max(t.numel for t in tensors)


def test_hf_tensors_match_transformers():
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    from stepbill.measure.build import make_config

    for name in ("llama", "mixtral", "qwen2_moe", "deepseek_v3"):
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(make_config(TINY_CONFIGS[name]))
        want = sorted(tuple(p.shape) for p in model.parameters())
        got = sorted(t.shape for t in hf_tensors(from_hf_config(TINY_CONFIGS[name])))
        assert got == want, name


def _measure(name: str, world: int, zero: int, rank: int, layers: int = 2):
    pytest.importorskip("torch")
    from stepbill.measure.sharded import measure_rank

    cfg = _cfg(name, layers)
    measured = measure_rank(cfg, world=world, zero=zero, rank=rank, seq_len=SEQ)
    predicted = predict_rank(from_hf_config(cfg), world, zero, rank, 1, SEQ)
    return predicted, measured


@pytest.mark.parametrize("name", ["llama", "mixtral"])
@pytest.mark.parametrize("world", [2, 4, 8])
def test_zero1_resident_exact_every_rank(name, world):
    ranks = sorted({0, world - 1})
    for rank in ranks:
        predicted, measured = _measure(name, world, 1, rank)
        for key in RESIDENT:
            assert getattr(predicted, key) == getattr(measured, key), (name, world, rank, key)


FSDP_CASES = [("llama", 2, 3, 0), ("llama", 8, 3, 7), ("llama", 64, 3, 0), ("llama", 8, 2, 3),
              ("qwen3", 8, 3, 5), ("mixtral", 8, 3, 5), ("mixtral", 64, 2, 63), ("qwen2_moe", 2, 3, 1),
              ("deepseek_v3", 8, 3, 0)]


@pytest.mark.parametrize(("name", "world", "zero", "rank"), FSDP_CASES)
def test_fsdp_resident_exact(name, world, zero, rank):
    predicted, measured = _measure(name, world, zero, rank)
    for key in RESIDENT:
        assert getattr(predicted, key) == getattr(measured, key), key
    assert predicted.peak_optimizer == pytest.approx(measured.peak_optimizer, rel=0.01)


@pytest.mark.parametrize(("world", "zero", "rank"), [(2, 3, 0), (8, 3, 7), (64, 3, 0), (8, 2, 3), (2, 2, 1)])
def test_fsdp_peak_within_3_percent_llama(world, zero, rank):
    predicted, measured = _measure("llama", world, zero, rank, layers=3)
    assert predicted.activations == pytest.approx(measured.activations, rel=1e-5)
    assert predicted.peak_forward == pytest.approx(measured.peak_forward, rel=1e-5)
    assert predicted.peak == pytest.approx(measured.peak, rel=0.03)
