"""Per-rank sharding (FSDP2 ZeRO-3/2, ZeRO-1) predicted vs measured on a fake process group (tiny real models).

Resident state (params, grads, optimizer states) exact on every configuration; forward / backward / step peaks
within 3 % on dense, MoE and MLA configurations from N = 2 to 64 (docs/parallel.md lists the cases still
outside 3 % and why)."""

from __future__ import annotations

import pytest

from stepbill.engine.check_rank import predict_rank
from stepbill.engine.parallel.fsdp2 import chunk_rows, hf_tensors, local_rows, zero1_partition
from stepbill.measure.tiny import TINY_CONFIGS
from stepbill.spec.hf import from_hf_config

SEQ = 128
RESIDENT = ("params", "grads", "optimizer_states", "inputs")
PEAKS = ("peak_forward", "peak_backward", "peak_optimizer", "peak")


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
    """Every family: the same tensor shapes as transformers builds, as stored (GPT-2's Conv1D (in, out)), in the
    same FSDP unit (decoder layer, or the root)."""
    torch = pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")
    from transformers import AutoModelForCausalLM

    from stepbill.measure.build import make_config
    from stepbill.measure.sharded import decoder_layers

    for name in (*TINY_CONFIGS, "phi3", "olmo2", "gemma2", "gemma3_text", "gpt_oss"):
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(make_config(TINY_CONFIGS[name]))
        layers = decoder_layers(model)
        in_layer = {id(p): i for i, layer in enumerate(layers) for p in layer.parameters()}
        want = sorted((in_layer.get(id(p), -1), tuple(p.shape)) for p in model.parameters())
        got = sorted((t.unit, t.shape) for t in hf_tensors(from_hf_config(TINY_CONFIGS[name])))
        assert got == want, name


def _measure(name: str, world: int, zero: int, rank: int, layers: int = 2, impl: str = "single"):
    pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")
    from stepbill.measure.sharded import measure_rank

    cfg = _cfg(name, layers)
    measured = measure_rank(cfg, world=world, zero=zero, rank=rank, seq_len=SEQ, optimizer_impl=impl)
    predicted = predict_rank(from_hf_config(cfg), world, zero, rank, 1, SEQ, optimizer_impl=impl)
    return predicted, measured


@pytest.mark.parametrize("impl", ["single", "foreach", "fused"])
def test_zero1_every_rank_exact_n4(impl: str):
    """ZeRO-1 (ZeroRedundancyOptimizer), N = 4: every rank's resident state and peaks exact (llama), the optimizer
    step too under each AdamW path — its local optimizer steps the rank's partition, largest first: single's
    2·cur + prev over that order (session 33; the one-GPU step's moment had stood in for it, +1.7 % on rank 2),
    foreach's sqrt of every second moment of the partition, fused's nothing."""
    for rank in range(4):
        predicted, measured = _measure("llama", 4, 1, rank, impl=impl)
        for key in RESIDENT:
            assert getattr(predicted, key) == getattr(measured, key), (rank, key)
        for key in ("peak_forward", "peak_backward", "peak_optimizer"):
            assert getattr(predicted, key) == pytest.approx(getattr(measured, key), rel=1e-6), (rank, key)


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_fsdp_optimizer_step_exact_for_each_adamw_path(impl: str):
    """FSDP2 ZeRO-3, N = 4: foreach's temporaries are the sqrt of every local second moment (the rank's unpadded
    rows), fused's none — the optimizer step's peak exact, as single's is."""
    for rank in (0, 3):
        predicted, measured = _measure("llama", 4, 3, rank, impl=impl)
        assert predicted.peak_optimizer == pytest.approx(measured.peak_optimizer, rel=1e-6), rank


def test_zero1_moe_resident_exact_last_rank():
    predicted, measured = _measure("mixtral", 8, 1, 7)
    for key in RESIDENT:
        assert getattr(predicted, key) == getattr(measured, key), key


# (family, N, ZeRO, rank, layers): per-rank forward / backward / step peaks within 3 % of FSDPMemTracker.
FSDP_CASES = [("llama", 2, 3, 0, 3), ("llama", 64, 2, 63, 2), ("qwen3", 8, 3, 7, 2), ("mixtral", 8, 3, 5, 2),
              ("mixtral", 64, 3, 0, 2), ("qwen2_moe", 2, 2, 1, 2), ("qwen2_moe", 64, 3, 0, 2),
              ("deepseek_v3", 2, 2, 0, 2), ("deepseek_v3", 64, 3, 0, 2)]


@pytest.mark.parametrize(("name", "world", "zero", "rank", "layers"), FSDP_CASES)
def test_fsdp_rank_within_3_percent(name, world, zero, rank, layers):
    predicted, measured = _measure(name, world, zero, rank, layers)
    for key in RESIDENT:
        assert getattr(predicted, key) == getattr(measured, key), key
    for key in PEAKS:
        assert getattr(predicted, key) == pytest.approx(getattr(measured, key), rel=0.03), key


# Fused q/k/v, LayerNorm with biases, GELU MLP (GPT-2: Conv1D weights (in, out), tied head; GPT-NeoX: untied).
FUSED_CASES = [(name, world, zero, rank) for name in ("gpt2", "gpt_neox")
               for world, zero, rank in ((2, 3, 0), (8, 3, 7), (8, 2, 0), (2, 1, 1), (8, 1, 7))]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "world", "zero", "rank"), FUSED_CASES)
def test_fused_qkv_families_resident_exact(name, world, zero, rank):
    """GPT-2 / GPT-NeoX per-rank params, grads and optimizer states exact against FSDPMemTracker (ZeRO-3/2) and
    MemTracker (ZeRO-1). Their peaks are not asserted: −1.9 % to +4.8 % (gpt_neox ZeRO-1 backward) at seq 128,
    listed by benchmarks/sharded_accuracy.py."""
    predicted, measured = _measure(name, world, zero, rank)
    for key in RESIDENT:
        assert getattr(predicted, key) == getattr(measured, key), key


def test_accuracy_doc_sections_keep_each_other(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from accuracy_doc import SHARDED_BEGIN, write_section

    doc = tmp_path / "accuracy.md"
    write_section(doc, "# single v1\n| a |")
    write_section(doc, "## sharded v1", sharded=True)
    write_section(doc, "# single v2")
    assert doc.read_text() == f"# single v2\n\n{SHARDED_BEGIN}\n## sharded v1\n<!-- sharded:end -->\n"
    write_section(doc, "## sharded v2", sharded=True)
    assert "sharded v1" not in doc.read_text() and doc.read_text().startswith("# single v2\n")


def test_sharded_benchmark_reads_rank_class_names():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from sharded_accuracy import class_ranks

    assert class_ranks("all ranks", 3) == [0, 1, 2]
    assert class_ranks("rank 7", 8) == [7]
    assert class_ranks("ranks 0–2,5,7–8", 9) == [0, 1, 2, 5, 7, 8]


def test_per_rank_doc_table_is_todays_engine_on_the_stored_measurements():
    """docs/accuracy.md's per-rank table is one row per case, its errors today's engine's predictions against the
    stored measurements (benchmarks/out/sharded_accuracy.jsonl: fake-tensor ranks, which no engine change moves;
    the TP rows as last repredicted). After a change that moves a rank's bill: `python
    benchmarks/sharded_accuracy.py --repredict --doc`."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from sharded_accuracy import DOC, case_table, doc_block, repredicted_records

    assert doc_block(DOC.read_text()) == case_table(repredicted_records())
