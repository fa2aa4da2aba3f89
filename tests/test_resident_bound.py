"""The planner's resident bound (engine/plan/resident.resident_bound) and budget (budget_bytes), memoised on what
they read of a layout (engine/parallel/holdings.held_key, the NCCL communicators), equal to the bound computed
from each group's own layout (rank_holdings' held items on the GPU, the largest over stages; the reserve of
engine/fit.py) exactly (==), over random groups of dense, MoE, MLA, tied-embedding and pipelined spaces; and the
held items the bound sums (holdings.stage_held) equal to rank_holdings' own."""

from __future__ import annotations

import dataclasses
import random
from collections import defaultdict

import pytest

from stepbill.engine.fit import Card, default_reserve
from stepbill.engine.parallel.holdings import held_key, rank_holdings, stage_held
from stepbill.engine.parallel.ranks import OPTIMIZER_SIDE
from stepbill.engine.plan import PlanRequest
from stepbill.engine.plan.resident import budget_bytes, resident_bound
from stepbill.engine.plan.space import Group, Rejections, enumerate_space
from stepbill.errors import StepbillError
from stepbill.spec.hardware import load_gpu
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import Parallel, validate_layout
from stepbill.spec.presets import load_preset
from stepbill.spec.recipe import make_recipe

SPACES = {  # (preset, GPUs, seq, recipe, optimizer): dense, MoE, MLA + MoE + uneven stages, tied embeddings
    "llama3-8b": ("llama3-8b", 8, 4096, "mixed-bf16", "adamw"),
    "llama3-70b": ("llama3-70b", 64, 8192, "mixed-bf16", "adamw"),
    "mixtral": ("mixtral-8x7b", 64, 4096, "mixed-bf16", "adamw"),
    "deepseek-v3": ("deepseek-v3", 128, 4096, "bf16-moments", "adamw"),
    "gpt3-125m": ("gpt3-125m", 8, 2048, "fp32", "sgd-momentum"),
}


def reference_bound(req: PlanRequest, layout: Parallel, offload: bool, stop_above: float = float("inf")) -> float:
    """The bound as it was computed before its memo: the group's own recipe and rank_holdings per stage."""
    recipe = make_recipe(req.recipe, req.optimizer, 1, req.seq, "none", None, None, layout, "single")
    worst = 0.0
    pp = layout.pp
    for stage in sorted(range(pp), key=lambda s: (s in (0, pp - 1), s)):
        held = rank_holdings(req.spec, recipe, stage).held
        # under optimizer offload the optimizer side and the gradients are in host memory
        worst = max(worst, sum(v for k, v in held.items()
                               if not (offload and (k.startswith(OPTIMIZER_SIDE) or k == "grads"))))
        if worst > stop_above:
            break
    return worst


def sampled_groups(name: str, keys: int, per_key: int, seed: int) -> tuple[PlanRequest, list[Group]]:
    """Up to `per_key` groups for each of `keys` random memo keys of the space (groups that share an entry), shuffled."""
    model, gpus, seq, recipe, optimizer = SPACES[name]
    req = PlanRequest(load_preset(model), load_gpu("h100-sxm"), "h100-sxm", (gpus,), seq, model,
                      global_batch_tokens=4 * 2**20, recipe=recipe, optimizer=optimizer)
    by_key: dict[tuple, list[Group]] = defaultdict(list)
    for group in enumerate_space(req, Rejections()):
        by_key[(held_key(group.holdings_layout), group.offload_optimizer)].append(group)
    rng = random.Random(seed)
    chosen = rng.sample(sorted(by_key, key=repr), min(keys, len(by_key)))
    out = [g for key in chosen for g in rng.sample(by_key[key], min(per_key, len(by_key[key])))]
    rng.shuffle(out)
    return req, out


@pytest.mark.parametrize("name", sorted(SPACES))
def test_resident_bound_equals_each_layouts_own(name: str) -> None:
    req, groups = sampled_groups(name, keys=40, per_key=4, seed=12)
    assert len({g.holdings_layout for g in groups}) > 60  # the memo is shared by distinct layouts
    for group in groups:
        layout, offload = group.holdings_layout, group.offload_optimizer
        budget = budget_bytes(req, layout)
        assert budget == req.gpu.usable_bytes - default_reserve(Card.from_gpu(req.gpu), layout).total_bytes
        assert resident_bound(req, layout, offload) == reference_bound(req, layout, offload)
        for stop in (budget, budget / 4, 0.0):  # the early stop returns the same stage's value
            assert resident_bound(req, layout, offload, stop) == reference_bound(req, layout, offload, stop)


def test_budget_with_user_reserve() -> None:
    req, groups = sampled_groups("llama3-8b", keys=10, per_key=2, seed=1)
    req = dataclasses.replace(req, reserve_gib=3.5)
    for group in groups:
        assert budget_bytes(req, group.holdings_layout) == req.gpu.usable_bytes - 3.5 * 2**30


MODELS = ["gpt3-125m", "llama3-8b", "mixtral-8x7b", "deepseek-v3", "deepseek-v3-12"]


def model_spec(model: str) -> ModelSpec:
    if model == "deepseek-v3-12":  # 3 dense + 9 MoE layers: interleaved stages hold other kinds than 1f1b's
        return dataclasses.replace(load_preset("deepseek-v3"), n_layers=12)
    return load_preset(model)


def random_layouts(spec: ModelSpec, n: int, seed: int) -> list[Parallel]:
    """Valid layouts of a small space (so that many share a held_key): hybrid shards, etp, uneven and interleaved
    pipelines, the dp / cp split, schedules, sp, micro-batches, offload."""
    rng = random.Random(seed)
    moe = spec.moe is not None
    out = []
    for _ in range(n):
        tp, pp, cp, dp = rng.choice([1, 2]), rng.choice([1, 2, 3, 4]), rng.choice([1, 2]), rng.choice([1, 2, 4])
        zero = rng.choice([0, 1, 2, 3]) if dp * cp > 1 else 0
        schedule = rng.choice(["1f1b", "gpipe", "interleaved"]) if pp > 1 else "1f1b"
        fields = dict(dp=dp, tp=tp, pp=pp, cp=cp, zero=zero, pp_schedule=schedule,
                      ep=rng.choice([1, 2, 4]) if moe else 1, etp=rng.choice([None, 2]) if moe else None,
                      shard_group=rng.choice([None, 2]) if zero and (dp * cp) % 2 == 0 else None,
                      vpp=2 if schedule == "interleaved" else 1, sp=tp > 1 and rng.random() < 0.5,
                      micro_batches=pp * rng.choice([1, 2]), offload_optimizer=rng.random() < 0.5)
        if schedule != "interleaved" and pp > 1 and rng.random() < 0.3:
            fields["pp_layers"] = (spec.n_layers - pp + 1, *[1] * (pp - 1))
        try:
            layout = Parallel(**fields)
            validate_layout(spec, layout, 4096)
        except StepbillError:
            continue
        out.append(layout)
    return out


@pytest.mark.parametrize("model", MODELS)
def test_held_key_names_all_held_reads(model: str) -> None:
    """Random layouts grouped by held_key: each group's layouts hold the same items, in the same order, to the
    bit, on every stage."""
    spec = model_spec(model)
    by_key: dict[tuple, list[Parallel]] = defaultdict(list)
    for layout in random_layouts(spec, 1500, seed=7):
        by_key[held_key(layout)].append(layout)
    compared = 0
    for layouts in by_key.values():
        held = _held_by_stage(spec, layouts[0])
        for other in layouts[1:4]:
            assert _held_by_stage(spec, other) == held, (layouts[0], other)
            compared += 1
    assert compared > 50


RECIPES = [("mixed-bf16", "adamw", None), ("fp32", "sgd-momentum", None), ("bf16-moments", "adamw", None),
           ("fp8", "adamw", None), ("mixed-bf16", "muon", None), ("mixed-bf16", "adamw", 16)]


@pytest.mark.parametrize("model", MODELS)
def test_stage_held_equals_rank_holdings(model: str) -> None:
    """holdings.stage_held (the planner's) gives rank_holdings' held items, in order, to the bit, for random
    layouts and recipes (precisions, optimizers, LoRA)."""
    spec = model_spec(model)
    rng = random.Random(3)
    for layout in random_layouts(spec, 120, seed=11):
        name, optimizer, lora_rank = rng.choice(RECIPES)
        recipe = make_recipe(name, optimizer, 1, 4096, "none", lora_rank, None, layout, "single")
        for stage in range(layout.pp):
            expected = list(rank_holdings(spec, recipe, stage).held.items())
            got = stage_held(spec, recipe.precision, recipe.optimizer, recipe.lora, layout, stage)
            assert list(got.items()) == expected, (layout, recipe, stage)


def _held_by_stage(spec: ModelSpec, layout: Parallel) -> list[list[tuple[str, float]]]:
    recipe = make_recipe("mixed-bf16", "adamw", 1, 4096, "none", None, None, layout, "single")
    return [list(rank_holdings(spec, recipe, stage).held.items()) for stage in range(layout.pp)]
