"""Per-rank bill: seed facts (ZeRO Figure 1, FSDP halves) and conservation / monotonicity properties.

Seed values copied from ../shared/spec/seed-facts.md (claim ids in docstrings). ZeRO Figure 1 is in decimal GB
(1e9 B) as the paper prints it; everything else in GiB = 2^30 B.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepbill.engine.parallel import in_flight_microbatches, worst_rank
from stepbill.engine.parallel.layout import zero_item_bytes
from stepbill.engine.parallel.ranks import OPTIMIZER_SIDE
from stepbill.engine.params import param_inventory
from stepbill.engine.states import resident_lines
from stepbill.errors import StepbillError
from stepbill.spec import load_preset
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import make_recipe
from tests.conftest import GIB

GB = 1e9


def rank_classes(spec, recipe, inv=None, convention="ideal"):  # type: ignore[no-untyped-def]
    """The per-rank classes of a bill (the per-rank model is built inside make_bill, from its own timeline)."""
    from stepbill.engine.bill import make_bill

    return make_bill(spec, recipe, convention=convention).ranks


@pytest.mark.parametrize(("stage", "printed_gb"), [(0, 120), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_figure1(stage: int, printed_gb: float) -> None:
    """zero-fig1-baseline / -stage1-os / -stage2-os-g / -stage3-os-g-p: Ψ = 7.5e9, K = 12, Nd = 64 →
    120 / 31.4 / 16.6 / 1.9 GB (decimal)."""
    psi = 7.5e9
    per_rank = zero_item_bytes({"weights": 2 * psi, "grads": 2 * psi, "optimizer": 12 * psi}, stage, 64)
    assert round(sum(per_rank.values()) / GB, 1) == printed_gb


def test_fsdp_two_way_halves() -> None:
    """mem-7b-104GiB, fsdp-2way-52.2: 16P with P = 7e9 is 104 GiB; FSDP over N = 2 holds 16P/N = 52.2 GiB."""
    p = 7e9
    items = {"weights": 2 * p, "grads": 2 * p, "master": 4 * p, "optimizer.m": 4 * p, "optimizer.v": 4 * p}
    assert round(sum(items.values()) / GIB) == 104
    assert round(sum(zero_item_bytes(items, 3, 2).values()) / GIB, 1) == 52.2


def test_fsdp_two_way_on_a_real_model() -> None:
    """16Ψ/N on the llama2-7b preset under --dp 2 --zero 3: resident per rank is exactly half the global."""
    spec = load_preset("llama2-7b")
    inv = param_inventory(spec)
    (only,) = rank_classes(spec, make_recipe(parallel=Parallel(dp=2, zero=3)), inv)
    assert only.memory["resident"] == pytest.approx(16 * inv.total / 2)


def test_bubble_pipeline_in_flight() -> None:
    """1F1B keeps p − s micro-batches on stage s; interleaved keeps p(1 + (p−1)/(p·v)) on stage 0
    (Korthikanti et al. 2022 §4.2.3); GPipe keeps all m."""
    r = make_recipe(parallel=Parallel(dp=1, pp=4, micro_batches=8))
    assert [in_flight_microbatches(r, s) for s in range(4)] == [4, 3, 2, 1]
    r = make_recipe(parallel=Parallel(pp=4, micro_batches=8, pp_schedule="interleaved", vpp=2))
    assert in_flight_microbatches(r, 0) == pytest.approx(4 * (1 + 3 / 8))
    r = make_recipe(parallel=Parallel(pp=4, micro_batches=8, pp_schedule="gpipe"))
    assert in_flight_microbatches(r, 3) == 8


def test_tp_splits_layer_matrices_not_norms() -> None:
    """A tp = 8 rank of llama2-7b holds 1/8 of every attention/MLP matrix and whole norms."""
    spec = load_preset("llama2-7b")
    inv = param_inventory(spec)
    (only,) = rank_classes(spec, make_recipe(recipe="fp32", optimizer="sgd", parallel=Parallel(tp=8)), inv)
    comps = inv.by_component()
    expected = (comps["attention"][0] + comps["ffn"][0] + comps["embedding"][0] + comps["lm_head"][0]) / 8 \
        + comps["norms"][0]
    assert only.memory["weights"] == pytest.approx(4 * expected)


def test_tp_embedding_gradient_convention_is_noted_on_the_first_stage() -> None:
    """tp > 1: the stage holding the embedding names the gradient convention (vocab-parallel billed, torch's
    RowwiseParallel whole table not) with V·h·grad bytes·(tp − 1)/tp; no other stage and no tp = 1 layout does."""
    spec = load_preset("llama2-7b")
    inv = param_inventory(spec)
    recipe = make_recipe(recipe="mixed-bf16", optimizer="adamw", parallel=Parallel(tp=4, pp=2, micro_batches=2))
    first, last = rank_classes(spec, recipe, inv)
    (note,) = [n for n in first.notes if "RowwiseParallel" in n]
    assert f"{32000 * 4096 * 2 * 3 // 4:,} B" in note and "8,000 of 32,000 rows" in note
    assert not any("RowwiseParallel" in n for n in last.notes)
    (only,) = rank_classes(spec, make_recipe(recipe="mixed-bf16", parallel=Parallel(dp=2, zero=1)), inv)
    assert not any("RowwiseParallel" in n for n in only.notes)


def test_experts_split_by_ep() -> None:
    """mixtral-8x7b with ep = 8: each rank holds one expert per layer (1/8 of the expert parameters)."""
    spec = load_preset("mixtral-8x7b")
    inv = param_inventory(spec)
    (only,) = rank_classes(spec, make_recipe(recipe="fp32", optimizer="sgd", parallel=Parallel(dp=8, ep=8)), inv)
    comps = inv.by_component()
    assert only.memory["weights"] == pytest.approx(4 * (inv.total - comps["experts"][0] * 7 / 8))


def test_first_and_last_stage_hold_embedding_and_head() -> None:
    spec = load_preset("llama2-7b")
    inv = param_inventory(spec)
    classes = rank_classes(spec, make_recipe(recipe="fp32", optimizer="sgd", parallel=Parallel(pp=4)), inv)
    vocab_rows = 32000 * 4096 * 4
    first, middle, last = classes[0], classes[1], classes[-1]
    assert first.memory["weights"] - middle.memory["weights"] == pytest.approx(vocab_rows)
    assert last.memory["weights"] - middle.memory["weights"] == pytest.approx(vocab_rows + 4096 * 4)
    assert first.name == "stage 0 (first)" and last.name == "stage 3 (last)"


LAYOUTS = st.fixed_dictionaries({
    "dp": st.sampled_from([1, 2, 4, 8]), "tp": st.sampled_from([1, 2, 4]), "pp": st.sampled_from([1, 2, 4]),
    "cp": st.sampled_from([1, 2]), "ep": st.sampled_from([1, 2, 4, 8]), "sp": st.booleans(),
    "micro_batches": st.sampled_from([1, 4, 8]), "pp_schedule": st.sampled_from(["gpipe", "1f1b"]),
    "offload_optimizer": st.booleans(),
})
MODELS = st.sampled_from(["llama2-7b", "mixtral-8x7b", "gpt3-125m", "llama3-8b"])


def _classes(model: str, layout: dict, zero: int, recipe: str = "mixed-bf16", optimizer: str = "adamw"):
    spec = load_preset(model)
    if spec.moe is None:
        layout = {**layout, "ep": 1}
    if layout["tp"] == 1:
        layout = {**layout, "sp": False}
    try:
        par = Parallel(**layout, zero=zero)
        r = make_recipe(recipe=recipe, optimizer=optimizer, seq_len=4096, parallel=par)
        return spec, r, rank_classes(spec, r, param_inventory(spec))
    except StepbillError:
        return spec, None, None


@settings(max_examples=60, deadline=None)
@given(layout=LAYOUTS, model=MODELS, zero=st.integers(0, 3), optimizer=st.sampled_from(["adamw", "muon", "sgd"]))
def test_owned_shards_sum_to_global(layout: dict, model: str, zero: int, optimizer: str) -> None:
    """Every resident item: summing each rank's owned share over all ranks gives the global bill's line."""
    spec, r, classes = _classes(model, layout, zero, optimizer=optimizer)
    if classes is None:
        return
    for line in resident_lines(param_inventory(spec), r):
        total = sum(c.ranks * c.owned.get(line.name, 0.0) for c in classes)
        assert total == pytest.approx(line.value, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(layout=LAYOUTS, model=MODELS)
def test_zero3_without_tp_shards_sum_to_global(layout: dict, model: str) -> None:
    """ZeRO-3 with tp = 1 and untied embeddings replicates nothing: per-rank held bytes sum to the global."""
    spec, r, classes = _classes(model, {**layout, "tp": 1}, 3)
    if classes is None or spec.tied_embeddings:
        return
    for line in resident_lines(param_inventory(spec), r):
        moved = line.name.startswith(OPTIMIZER_SIDE) or line.name == "grads"  # offload moves these to the host
        held = sum(c.ranks * (sum(x.value for x in c.resident_items if x.name == line.name)
                              + (c.cpu.get(line.name, 0.0) if moved else 0.0)) for c in classes)
        assert held == pytest.approx(line.value, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(layout=LAYOUTS, model=MODELS)
def test_raising_zero_never_raises_memory(layout: dict, model: str) -> None:
    """Per-rank resident memory never grows with the ZeRO stage; nor does the peak from stage 0 to 2. (Stage 3
    adds gathered-layer buffers, which at small dp can outweigh what it saves; that is real, so not asserted.)"""
    by_stage = []
    for zero in range(4):
        _, _, classes = _classes(model, layout, zero)
        if classes is None:
            return
        by_stage.append([c.memory for c in classes])
    for zero in range(3):
        for lo, hi in zip(by_stage[zero], by_stage[zero + 1], strict=True):
            assert hi["resident"] <= lo["resident"] * (1 + 1e-12)
            if zero + 1 < 3:
                assert hi["peak"] <= lo["peak"] * (1 + 1e-12)


def test_worst_rank_is_first_stage_under_1f1b() -> None:
    spec = load_preset("llama2-7b")
    classes = rank_classes(spec, make_recipe(seq_len=4096, parallel=Parallel(pp=4, micro_batches=8)),
                           param_inventory(spec))
    assert worst_rank(classes).stages == (0,)


@pytest.mark.parametrize("model", ["tests/data/tiny-llama.json", "mixtral-8x7b"])
@pytest.mark.parametrize("dp", [2, 8, 64])
def test_exact_dp_classes_sum_and_monotonic(model: str, dp: int) -> None:
    """Eager, data-parallel sharding alone (engine/parallel/fsdp2.py's exact classes: ZeRO-1 on fp32, FSDP2 on its
    mixed-bf16 setup): every rank counted once, owned unpadded shards sum to the global fp32 bytes, raising the ZeRO stage 1 → 2 → 3 never raises the worst
    rank's resident memory, nor 2 → 3 its peak. (FSDP2's ZeRO-2 keeps every layer unsharded in bf16, padded per
    dim-0 chunk: with 8 experts over 64 ranks that is 8× the experts, above ZeRO-1's peak — real, not asserted.)"""
    from stepbill.spec.presets import load_model

    spec = load_model(model)
    inv = param_inventory(spec)
    worst = []
    for zero in (1, 2, 3):
        precision = "fp32" if zero == 1 else "mixed-bf16"
        r = make_recipe(recipe=precision, seq_len=512, parallel=Parallel(dp=dp, zero=zero))
        classes = rank_classes(spec, r, inv, "eager")
        assert sum(c.ranks for c in classes) == dp
        assert {c.model for c in classes} == {"measured-exact"}
        for item, per_param in (("weights", 4), ("grads", 4), ("optimizer", 8)):
            assert sum(c.ranks * c.owned[item] for c in classes) == pytest.approx(per_param * inv.total)
        worst.append(max(c.memory["resident"] for c in classes))
        worst.append(max(c.memory["peak"] for c in classes))
    assert worst[2] <= worst[0] and worst[4] <= worst[2]  # resident
    assert worst[5] <= worst[3]  # peak, ZeRO-2 → 3


@pytest.mark.parametrize(("model", "layout"), [
    ("llama3-70b", {"tp": 8, "pp": 2}),
    ("qwen3-30b-a3b", {"dp": 8, "ep": 8}),
    ("mixtral-8x7b", {"dp": 4, "tp": 2, "ep": 2, "zero": 1}),
])
def test_foreach_step_temporaries_are_the_ranks_own_second_moments(model: str, layout: dict) -> None:
    """torch.optim's multi-tensor AdamW (foreach: PyTorch's default on CUDA) makes one temporary of each local
    second moment at once (`torch._foreach_sqrt(device_exp_avg_sqs)`): on a rank that is the second moments it
    holds, whatever splits them — tp, the stage's layers, the experts under ep, ZeRO's shards (before, only tp and
    ZeRO divided the one GPU's: Qwen3-30B-A3B at ep 8 held the whole model's 113.74 GiB on each rank)."""
    from stepbill.engine.activations.eager import from_precision
    from stepbill.engine.memory.eager import eager_terms
    from stepbill.engine.parallel.holdings import rank_holdings
    from stepbill.engine.parallel.rank_share import rank_eager
    from stepbill.engine.recompute import make_plan

    spec = load_preset(model)
    recipe = make_recipe("mixed-bf16", "adamw", 1, 4096, parallel=Parallel(**layout), optimizer_impl="foreach",
                         device="cuda")
    one = make_recipe("mixed-bf16", "adamw", 1, 4096, optimizer_impl="foreach", device="cuda")
    inv = param_inventory(spec)
    act = from_precision(one.precision, "cuda")
    plan = make_plan(spec, one.recompute_policy, 4096, 1, act, "eager")
    one_gpu = eager_terms(spec, one, inv, plan)
    assert one_gpu.optimizer_temp == pytest.approx(rank_holdings(spec, one, 0).held["optimizer.v"], rel=1e-9)
    for stage in range(recipe.parallel.pp):
        held = rank_holdings(spec, recipe, stage)
        mine = rank_eager(one_gpu, recipe, held, inv, spec)
        assert mine.optimizer_temp == pytest.approx(held.held["optimizer.v"], rel=1e-6)
