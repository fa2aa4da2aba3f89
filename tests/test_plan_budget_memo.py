"""The budget candidates' memos (engine/plan/evaluate.py: `_solver_gib`, `_worst_resident`, `_eager_verdict`) change
no answer: on sampled budget candidates, `budget_policy` spells the same `budget:<GiB>` as the algorithm restated
here from the engine's own calls without any memo (the code before the memos), `budget_drops_nothing` agrees, and
`evaluate` gives the same Row whether the eager verdict is reused from the budget's correction or made afresh."""

from __future__ import annotations

import math
import random

import pytest

from stepbill.engine.bill import activation_width
from stepbill.engine.bill_parts import verdict_ranks
from stepbill.engine.parallel.layout import stage_layer_indices
from stepbill.engine.parallel.rank_share import in_flight_microbatches
from stepbill.engine.plan import evaluate as ev
from stepbill.engine.plan.axes import BUDGET_AT_FREE
from stepbill.engine.plan.fix import parse_fix
from stepbill.engine.plan.space import Candidate, PlanRequest, Rejections, enumerate_space
from stepbill.engine.recompute.budget import floor, peak_of, problem_for_spec
from stepbill.errors import StepbillError
from stepbill.spec.hardware import load_gpu
from stepbill.spec.presets import load_preset
from stepbill.spec.recipe import make_recipe
from stepbill.spec.recompute_policy import parse_recompute

GIB = 2**30


def _reference_budget_gib(req: PlanRequest, cand: Candidate) -> tuple[float, float, float, float]:
    par = cand.parallel
    recipe = make_recipe(req.recipe, req.optimizer, cand.micro_batch, req.seq, "none", None, None, par, req.optimizer_impl,
                         req.device)
    free = ev.budget_bytes(req, par) - ev.resident_bound(req, par, par.offload_optimizer)
    loads = [len(layers) * in_flight_microbatches(recipe, s)
             for s, layers in enumerate(stage_layer_indices(req.spec, par))]
    problems = [problem_for_spec(req.spec, 1.0, req.seq, recipe.micro_batch,
                                 activation_width(recipe.precision, recipe.device, convention), convention)
                for convention in ("ideal", "eager")]
    scale = req.spec.n_layers * par.tp * par.cp / max(loads)
    return (free * scale / GIB, max(floor(p) for p in problems) / GIB, max(peak_of(p, set()) for p in problems) / GIB,
            scale)


def _reference_eager_peak(req: PlanRequest, cand: Candidate, budget_gib: float) -> float | None:
    recipe = make_recipe(req.recipe, req.optimizer, cand.micro_batch, req.seq, f"budget:{budget_gib:.2f}GiB", None,
                         None, cand.parallel, req.optimizer_impl, req.device)
    try:
        ranks = verdict_ranks(req.spec, recipe, "eager", "sdpa")
    except StepbillError:
        return None
    return max(c.memory["peak"] for c in ranks)


def _spelled(budget_gib: float, floor_gib: float) -> float:
    if budget_gib <= floor_gib:
        return math.ceil(floor_gib * 100 * (1 + 1e-9)) / 100
    return math.floor(budget_gib * 100) / 100


def _reference_policy(req: PlanRequest, cand: Candidate) -> tuple[str, bool]:
    """budget_policy and budget_drops_nothing as they were before the memos (commit 3abe940), with the secant gain
    (ev._gib_per_byte) and the request's device of session 33."""
    scaled, floor_gib, none_gib, scale = _reference_budget_gib(req, cand)
    budget = ev.budget_bytes(req, cand.parallel)
    x, fitting = _spelled(scaled, floor_gib), None
    last: tuple[float, float] | None = None
    for _ in range(ev.BUDGET_STEPS):
        if x >= none_gib:
            break
        peak = _reference_eager_peak(req, cand, x)
        if peak is None:
            break
        if peak <= budget:
            fitting = x if fitting is None else max(fitting, x)
            if x != _spelled(scaled, floor_gib):
                break
        step = _spelled(x + ev._gib_per_byte(scale, last, x, peak) * (budget - peak), floor_gib)
        if step == x:
            break
        last, x = (x, peak), step
    policy = f"budget:{(fitting if fitting is not None else x):.2f}GiB"
    return policy, parse_recompute(policy).budget_bytes >= none_gib * GIB


def _sample(model: str, gpus: int, seq: int, batch: int, fix: dict, n: int) -> tuple[PlanRequest, list[Candidate]]:
    """n budget candidates the resident bound leaves, drawn at random (seed 0), in their groups' order."""
    req = PlanRequest(load_preset(model), load_gpu("h100-sxm"), "h100-sxm", (gpus,), seq, model,
                      global_batch_tokens=batch, fixed=parse_fix({**fix, "recompute": "budget"}), cross_node=True)
    found = []
    for group in enumerate_space(req, Rejections()):
        budget = ev.budget_bytes(req, group.holdings_layout)
        if ev.resident_bound(req, group.holdings_layout, group.offload_optimizer, budget) > budget:
            continue
        for variant in group.variants:
            try:
                cand = group.candidate(variant)
            except StepbillError:
                continue
            assert cand.recompute == BUDGET_AT_FREE
            found.append(cand)
    picked = sorted(random.Random(0).sample(range(len(found)), min(n, len(found))))
    return req, [found[i] for i in picked]


def _check_same_answers(req: PlanRequest, cands: list[Candidate]) -> None:
    ev._eager_verdict.cache_clear()
    reused = rows = 0
    for cand in cands:
        policy, drops = _reference_policy(req, cand)
        assert ev.budget_policy(req, cand) == policy, cand
        resolved = ev.resolve_recompute(req, cand)
        assert resolved.recompute == policy
        assert ev.budget_drops_nothing(req, resolved) == drops == ev.budget_drops_nothing(req, cand), cand
        if drops:
            continue
        hits = ev._eager_verdict.cache_info().hits
        row = ev.evaluate(req, resolved)  # its eager verdict, when the correction judged this budget: reused
        reused += ev._eager_verdict.cache_info().hits > hits
        ev._eager_verdict.cache_clear()
        assert ev.evaluate(req, resolved) == row, cand  # the verdict made afresh
        rows += row is not None
    assert reused > 0  # the memo is read, not only filled


def test_budget_memos_change_no_answer_llama3_8b() -> None:
    req, cands = _sample("llama3-8b", 8, 4096, 4_194_304, {"schedule": "1f1b"}, 16)
    assert len(cands) == 16
    _check_same_answers(req, cands)


@pytest.mark.slow
def test_budget_memos_change_no_answer_llama3_70b_and_deepseek_v3() -> None:
    req, cands = _sample("llama3-70b", 64, 8192, 4_194_304, {"offload_optimizer": False}, 16)
    _check_same_answers(req, cands)
    req, cands = _sample("deepseek-v3", 2048, 4096, 3840 * 4096,
                         {"tp": 1, "cp": 1, "schedule": "1f1b", "pp_layers": "default", "offload_optimizer": False,
                          "offload_activations": False, "pp": 16}, 16)
    assert len(cands) == 16
    _check_same_answers(req, cands)
