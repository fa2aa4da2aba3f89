"""FSDP2 per-rank bill under gloo's collectives (engine/parallel/fsdp2_moments.py, backend "gloo") against the
figures measured on real ranks: `stepbill check tests/data/tiny-llama.json --launch N --zero Z --seq 32`,
FSDPMemTracker on every rank with measure/gloo.py's settled reduce-scatter (torch 2.13 CPU, gloo), the same
bytes on every rank and on every one of 5 runs (docs/accuracy.md "Real ranks"). Fast: no torch."""

from __future__ import annotations

import pytest

from stepbill.engine.check_rank import predict_rank, sharded_context
from stepbill.spec.presets import load_model

TINY = "tests/data/tiny-llama.json"

# (world, zero): measured (forward peak, backward peak, optimizer peak) in bytes, every rank
MEASURED_ON_GLOO = {
    (2, 3): (1_038_884, 1_268_636, 920_596),
    (2, 2): (1_186_852, 1_268_636, 920_596),
    (4, 3): (718_436, 911_196, 460_500),
    (4, 2): (866_404, 911_196, 460_500),
}


@pytest.mark.parametrize(("world", "zero"), sorted(MEASURED_ON_GLOO))
def test_gloo_bill_equals_the_measured_ranks(world: int, zero: int) -> None:
    """The forward and backward peaks to the byte; the optimizer step within 0.02 % (as on the fake group)."""
    spec = load_model(TINY)
    forward, backward, optimizer = MEASURED_ON_GLOO[(world, zero)]
    for rank in range(world):
        p = predict_rank(spec, world, zero, rank, 1, 32, backend="gloo")
        assert (p.peak_forward, p.peak_backward) == (forward, backward), rank
        assert p.peak_optimizer == pytest.approx(optimizer, rel=2e-4)


def test_gloo_adds_one_cloned_reduce_scatter_input_per_unit() -> None:
    """gloo's reduce-scatter moment: the unit's fp32 input twice (input and gloo's clone) and its output shard,
    after its unsharded parameters and bf16 gradients are freed. The nccl (and fake-group) bill has no such
    moment; its backward peak is the fake group's measured 1,194,524 B (tests/test_sharded.py)."""
    spec = load_model(TINY)
    ctx = sharded_context(spec, 3, 1, 32, backend="gloo")
    p = predict_rank(spec, 2, 3, 0, 1, 32, context=ctx)
    nccl = predict_rank(spec, 2, 3, 0, 1, 32, backend="nccl")
    labels = [label for label, _ in p.moments]
    assert [label for label in labels if "gloo" in label] == [
        "backward, layer 1 reduce-scatter (gloo: input cloned)",
        "backward, layer 0 reduce-scatter (gloo: input cloned)",
        "backward, root reduce-scatter (gloo: input cloned)"]
    assert not any("gloo" in label for label, _ in nccl.moments)
    assert nccl.peak_backward == 1_194_524
    # layer 1 of tiny llama: 9 tensors, 36,992 elements; padded over 2 ranks the same: rs = 147,968 B fp32
    assert p.transient["reduce_scatter_clone_gloo"] == 147_968
    assert p.peak_backward - nccl.peak_backward == 1_268_636 - 1_194_524


def test_unknown_backend_is_refused() -> None:
    spec = load_model(TINY)
    with pytest.raises(ValueError, match="nccl or gloo"):
        predict_rank(spec, 2, 3, 0, 1, 32, backend="mpi")
