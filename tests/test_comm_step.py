"""Communication per step and step time: seed facts and closed forms (claim ids in docstrings; GiB = 2^30)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepbill.engine import comm
from stepbill.engine.bill import make_bill
from stepbill.engine.parallel.collectives import step_collectives
from stepbill.engine.params import param_inventory
from stepbill.errors import StepbillError
from stepbill.spec import load_preset
from stepbill.spec.hardware import load_gpu
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import make_recipe
from tests.conftest import GIB, TIB

MIB = 2**20


def test_ring_vs_server() -> None:
    """ring-allreduce-22.8-26.0, central-server-209-13.0: M = 14e9 B (7B bf16 grads); ring 2(N−1)/N·M is
    22.8 GiB at N = 8 and 26.0 GiB at 512; a central server carries 2NM: 209 GiB and 13.0 TiB."""
    m = 14e9
    assert round(comm.ring_allreduce_link_bytes(8, m) / GIB, 1) == 22.8
    assert round(comm.ring_allreduce_link_bytes(512, m) / GIB, 1) == 26.0
    assert round(comm.central_server_link_bytes(8, m) / GIB) == 209
    assert round(comm.central_server_link_bytes(512, m) / TIB, 1) == 13.0


def test_dp_allreduce_of_a_7b_step() -> None:
    """dp-grad-comm-batch-independent: pure DP moves 2(N−1)/N × params × 2 B per step, whatever the batch."""
    spec = load_preset("llama2-7b")
    inv = param_inventory(spec)
    for micro_batch in (1, 8):
        r = make_recipe(micro_batch=micro_batch, parallel=Parallel(dp=8, micro_batches=4))
        (c,) = step_collectives(spec, r, inv)
        assert c.op == "all-reduce" and c.bytes == pytest.approx(2 * 7 / 8 * inv.total * 2)


@pytest.mark.parametrize(("zero", "psi_factor"), [(0, 2), (1, 2), (2, 2), (3, 3)])
def test_zero_comm_2_2_3(zero: int, psi_factor: int) -> None:
    """zero-comm-2-2-3: per-rank volume 2Ψ / 2Ψ / 3Ψ (Ψ = params × 2 B) at one micro-batch, ring factor (N−1)/N."""
    spec = load_preset("llama2-7b")
    inv = param_inventory(spec)
    n = 64
    r = make_recipe(parallel=Parallel(dp=n, zero=zero))
    total = sum(c.bytes for c in step_collectives(spec, r, inv))
    psi = inv.total * 2
    assert total == pytest.approx(psi_factor * psi * (n - 1) / n)
    assert comm.zero_comm_volume(zero, psi) == pytest.approx(total * n / (n - 1))


def test_tp_layer_seed() -> None:
    """tp-layer-201M, tp-4-allreduces, tp-448-vs-64MiB: h = 4096 layer 201M → 25.2M per rank at t = 8; four
    all-reduces per layer per iteration; 448 MiB of traffic against a 64 MiB activation at 8,192 tokens."""
    assert round(comm.tp_layer_params(4096) / 1e6) == 201
    assert round(comm.tp_layer_params(4096, 8) / 1e6, 1) == 25.2
    assert comm.tp_activation_bytes(8192, 4096) == 64 * MIB
    assert comm.tp_layer_traffic_bytes(8192, 4096, 8) == 448 * MIB


def test_tp_traffic_in_the_step_matches_the_seed_per_layer() -> None:
    """A 4096-wide model, tp = 8, 8,192 tokens per micro-batch: 448 MiB per layer per micro-batch, with or
    without sequence parallelism (all-gather + reduce-scatter carry the same volume as all-reduce)."""
    spec = load_preset("llama2-7b")
    inv = param_inventory(spec)
    for sp in (False, True):
        r = make_recipe(micro_batch=2, seq_len=4096, parallel=Parallel(tp=8, sp=sp))
        tp_bytes = sum(c.bytes for c in step_collectives(spec, r, inv) if c.axis == "tp")
        assert tp_bytes == pytest.approx(448 * MIB * spec.n_layers)
        assert sum(c.calls for c in step_collectives(spec, r, inv) if c.axis == "tp") == 4 * spec.n_layers * (2 if sp else 1)


def test_bubble_75_16() -> None:
    """pp-bubble-75-16: (p−1)/(m+p−1), 4 stages: m = 1 → 75 %, m = 16 → 16 %; the step time uses it."""
    assert comm.pipeline_bubble(4, 1) == 0.75
    assert round(100 * comm.pipeline_bubble(4, 16)) == 16
    spec = load_preset("llama2-7b")
    for m, printed in ((1, 75), (16, 16)):
        bill = make_bill(spec, make_recipe(parallel=Parallel(pp=4, micro_batches=m)), gpu=load_gpu("h100-sxm"))
        assert bill.time is not None and round(100 * bill.time["time.bubble"].value) == printed


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 100_000), st.integers(1, 10_000), st.floats(0, 1e15, allow_nan=False))
def test_plain_numbers_take_the_numpy_path_bit_for_bit(n: int, m: int, message: float) -> None:
    """comm.py's plain-number path (no 0-d arrays: a planner's step time per candidate) gives the very floats its
    numpy path gives (same IEEE operations, same order), ints and floats alike."""
    arr = np.asarray
    for got, want in ((comm.pipeline_bubble(n, m), comm.pipeline_bubble(arr(n), arr(m))),
                      (comm.all_to_all_link_bytes(n, message), comm.all_to_all_link_bytes(arr(n), arr(message)))):
        assert type(got) is float and got == float(want)
    if n >= 2:
        for fn in (comm.ring_allreduce_link_bytes, comm.ring_half_link_bytes):
            for size in (message, m):
                got = fn(n, size)
                assert type(got) is float and got == float(fn(arr(n), arr(size)))
    else:
        with pytest.raises(StepbillError, match="must be >= 2"):
            comm.ring_allreduce_link_bytes(n, message)


def test_mfu_is_efficiency_when_compute_bound_without_comm() -> None:
    """One GPU, compute-bound, no comm, no bubble: MFU is the assumed efficiency scaled by model FLOPs (PaLM's,
    full attention square) over executed FLOPs (causal attention); with the causal model FLOPs it is the
    efficiency up to the norm and bias parameters PaLM's 6N counts (closed form)."""
    spec = load_preset("llama2-7b")
    bill = make_bill(spec, make_recipe(seq_len=4096, micro_batch=4), gpu=load_gpu("h100-sxm"), efficiency=0.4)
    assert bill.time is not None
    assert bill.time["time.mfu"].value == pytest.approx(0.4 * bill["flops.model"].value / bill["flops.step"].value)
    assert bill.time["time.mfu_causal"].value == pytest.approx(0.4, rel=1e-4)
    assert bill.time["time.model_flops"].value > 6 * 6e9 * 4 * 4096


def test_link_classes_follow_placement() -> None:
    """tp = 8 inside a node (NVLink), dp across nodes (InfiniBand); PCIe where the part has no NVLink."""
    spec = load_preset("llama2-7b")
    inv = param_inventory(spec)
    r = make_recipe(parallel=Parallel(dp=4, tp=8))
    links = {c.axis: c.link for c in step_collectives(spec, r, inv, load_gpu("h100-sxm"))}
    assert links == {"dp": "infiniband", "tp": "nvlink"}
    links = {c.axis: c.link for c in step_collectives(spec, make_recipe(parallel=Parallel(tp=4)), inv, load_gpu("l40s"))}
    assert links == {"tp": "pcie"}


@settings(max_examples=30, deadline=None)
@given(ep=st.sampled_from([2, 4, 8]), m=st.integers(1, 4), cp=st.sampled_from([1, 2]))
def test_ep_all_to_all_closed_form(ep: int, m: int, cp: int) -> None:
    """EP: 4 all-to-alls per MoE layer per micro-batch, each (ep−1)/ep × tokens/cp × top-k × h × 2 B."""
    spec = load_preset("mixtral-8x7b")
    r = make_recipe(seq_len=4096, parallel=Parallel(dp=8, ep=ep, cp=cp, micro_batches=m))
    (a2a,) = [c for c in step_collectives(spec, r, param_inventory(spec)) if c.axis == "ep"]
    expected = 4 * spec.n_moe_layers * m * (ep - 1) / ep * 4096 / cp * 2 * spec.hidden_size * 2
    assert a2a.bytes == pytest.approx(expected)


def _via_bill(spec_name: str, recompute: str, parallel: Parallel, seq_len: int = 4096) -> dict[str, tuple[int, float]]:
    """{axis: (calls, bytes)} of the bill's collectives (make_bill passes the plan's Rerun)."""
    bill = make_bill(load_preset(spec_name), make_recipe(seq_len=seq_len, recompute=recompute, parallel=parallel),
                     gpu=load_gpu("h100-sxm"))
    out: dict[str, tuple[int, float]] = {}
    for c in bill.collectives:
        calls, total = out.get(c.axis, (0, 0.0))
        out[c.axis] = (calls + c.calls, total + c.bytes)
    return out


@pytest.mark.parametrize("recompute", ["full", "every:4"])
def test_rebuilt_layers_rerun_their_tp_collectives(recompute: str) -> None:
    """Full / every-K recompute reruns each layer's forward inside its backward (Megatron-LM's
    tensor_parallel.CheckpointFunction.backward calls the wrapped forward): its 2 forward all-reduces run again,
    6 per layer per micro-batch instead of 4 — the seed's 448 MiB per layer at tp 8 and 8,192 tokens becomes 672."""
    spec = load_preset("llama2-7b")
    calls, total = _via_bill("llama2-7b", recompute, Parallel(tp=8, micro_batches=2))["tp"]
    assert calls == 6 * spec.n_layers * 2
    # 4,096 tokens per micro-batch (half the seed's 8,192) × 2 micro-batches: 672 MiB per layer
    assert total == pytest.approx(672 * MIB * spec.n_layers)
    assert _via_bill("llama2-7b", "none", Parallel(tp=8, micro_batches=2))["tp"][0] == 4 * spec.n_layers * 2


def test_selective_core_attention_reruns_the_cp_ring_not_tp() -> None:
    """selective:core_attn rebuilds only the attention core: no TP collective runs again, but under context
    parallelism its K/V ring does (cp − 1 more hops per layer): 4(cp − 1) per layer per micro-batch, not 3(cp − 1)."""
    spec = load_preset("llama2-7b")
    par = Parallel(tp=2, cp=4)
    none, selective = (_via_bill("llama2-7b", r, par) for r in ("none", "selective:core_attn"))
    assert selective["tp"] == none["tp"]
    assert none["cp"][0] == 3 * 3 * spec.n_layers and selective["cp"][0] == 4 * 3 * spec.n_layers
    assert selective["cp"][1] == pytest.approx(none["cp"][1] * 4 / 3)


def test_rebuilt_moe_layers_rerun_their_all_to_alls() -> None:
    """Under full recompute a MoE layer's dispatch + combine run again: 6 all-to-alls per MoE layer per
    micro-batch (test_ep_all_to_all_closed_form's 4, plus the rebuilt forward's 2)."""
    spec = load_preset("mixtral-8x7b")
    calls, total = _via_bill("mixtral-8x7b", "full", Parallel(dp=8, ep=4))["ep"]
    assert calls == 6 * spec.n_moe_layers
    assert total == pytest.approx(6 * spec.n_moe_layers * 3 / 4 * 4096 * 2 * spec.hidden_size * 2)


def test_collectives_memo_keys_leave_out_only_unread_fields() -> None:
    """step_collectives is memoised in two parts: the gradient syncs on grad_sync_key (no tokens, recompute, sp,
    offload, optimizer implementation or device) and the activation traffic on activation_key and the rerun (no
    optimizer, LoRA, recompute, ZeRO, shard group or offload). Recipes that share a key get the same unmemoised
    part; a field a part reads changes its key; the memoised list equals the unmemoised one for every recipe (the
    memo warmed by its key-mates first), and each caller gets its own list."""
    from stepbill.engine.parallel.collectives import (
        _activation_traffic,
        _grad_syncs,
        _step_collectives,
        activation_key,
        grad_sync_key,
    )
    from stepbill.engine.recompute import NO_RERUN, Rerun

    spec = load_preset("mixtral-8x7b")
    inv, gpu = param_inventory(spec), load_gpu("h100-sxm")
    par = Parallel(dp=8, tp=2, pp=4, cp=2, ep=4, sp=True, zero=3, shard_group=4, micro_batches=8,
                   pp_schedule="interleaved", vpp=2, offload_optimizer=True)
    base = make_recipe(micro_batch=2, seq_len=4096, parallel=par)
    same_grad_syncs = [
        make_recipe(micro_batch=1, seq_len=8192, recompute="full", parallel=par, optimizer_impl="fused", device="cuda"),
        make_recipe(micro_batch=2, seq_len=4096, parallel=replace(par, sp=False, offload_optimizer=False,
                                                                   offload_activations=True)),
    ]
    same_traffic = [
        make_recipe(micro_batch=2, seq_len=4096, recompute="full", optimizer="sgd", lora_rank=8, parallel=replace(
            par, zero=1, shard_group=None, offload_optimizer=False, offload_activations=True), optimizer_impl="fused",
            device="cuda"),
    ]
    want_syncs, want_traffic = _grad_syncs(spec, base, inv, gpu), _activation_traffic(spec, base, gpu, NO_RERUN)
    assert len(want_syncs) >= 3 and len(want_traffic) >= 4
    for r in same_grad_syncs:
        assert grad_sync_key(r) == grad_sync_key(base) and _grad_syncs(spec, r, inv, gpu) == want_syncs
    for r in same_traffic:
        assert activation_key(r) == activation_key(base)
        assert _activation_traffic(spec, r, gpu, NO_RERUN) == want_traffic
    # a field each part reads is in its key (and changes the collectives)
    fewer = make_recipe(micro_batch=2, seq_len=4096, parallel=replace(par, micro_batches=4))
    assert grad_sync_key(fewer) != grad_sync_key(base) and _grad_syncs(spec, fewer, inv, gpu) != want_syncs
    longer = make_recipe(micro_batch=2, seq_len=8192, parallel=par)
    assert activation_key(longer) != activation_key(base)
    assert _activation_traffic(spec, longer, gpu, NO_RERUN) != want_traffic
    zero2 = make_recipe(micro_batch=2, seq_len=4096, parallel=replace(par, zero=2))
    assert grad_sync_key(zero2) != grad_sync_key(base) and _grad_syncs(spec, zero2, inv, gpu) != want_syncs
    rerun = Rerun(frozenset({"moe"}), frozenset({"moe"}))
    assert _activation_traffic(spec, base, gpu, rerun) != want_traffic
    for r in [base, *same_grad_syncs, *same_traffic, fewer, longer, zero2]:
        for rr in (NO_RERUN, rerun):
            got, again = step_collectives(spec, r, inv, gpu, rr), step_collectives(spec, r, inv, gpu, rr)
            assert got == again == _step_collectives(spec, r, inv, gpu, rr) and got is not again


@pytest.mark.parametrize("lora", [None, 8])
def test_rank_param_elements_own_rows_match_any_inventory(lora: int | None) -> None:
    """rank_param_elements with the model's own inventory (per-row elements memoised per model and recipe, slices
    per layout) gives the floats the row-by-row path gives for an equal inventory that is not the model's own."""
    from stepbill.engine.parallel.collectives import rank_param_elements

    spec = load_preset("mixtral-8x7b")
    inv = param_inventory(spec)
    copy = type(inv)(tuple(inv.tensors))
    for par in (Parallel(dp=4, tp=2, pp=4, ep=8, zero=1), Parallel(dp=2, tp=4, pp=2, ep=2, etp=2, pp_layers=(20, 12))):
        recipe = make_recipe(lora_rank=lora, parallel=par)
        assert rank_param_elements(spec, recipe, inv) == rank_param_elements(spec, recipe, copy)
