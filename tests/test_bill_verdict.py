"""The planner's fit verdict from `verdict_ranks` (the eager bill's rank classes without its other lines) is the
verdict of the full eager bill: the same rank classes or the same error, and the same planner rows, on candidates
drawn from the planner's own spaces (dense, MoE, pipeline, ZeRO, offload, every recompute policy it searches)."""

from __future__ import annotations

import functools
import random

import pytest

from stepbill.engine.bill import make_bill
from stepbill.engine.bill_parts import bill_time, verdict_peak, verdict_ranks, verdict_worst
from stepbill.engine.fit import Card, fit_verdict
from stepbill.engine.plan import PlanRequest
from stepbill.engine.plan.evaluate import Row, evaluate, recipe_for
from stepbill.engine.plan.resident import reserve_for
from stepbill.engine.plan.space import Candidate, Rejections, enumerate_space
from stepbill.errors import StepbillError
from stepbill.spec.hardware import load_gpu
from stepbill.spec.parallel import Parallel
from stepbill.spec.presets import load_model
from stepbill.spec.recipe import Recipe, make_recipe

SPACES = [("gpt3-125m", 8, 2048, 2048 * 64), ("mixtral-8x7b", 8, 4096, 4096 * 32), ("llama3-8b", 16, 4096, 4096 * 64)]


@functools.lru_cache(maxsize=16)  # each test of a space draws from one enumeration
def _space(model: str, gpus: int, seq: int, batch: int) -> tuple[PlanRequest, list[Candidate]]:
    req = PlanRequest(load_model(model), load_gpu("h100-sxm"), "h100-sxm", (gpus,), seq, model,
                      global_batch_tokens=batch)
    cands = []
    for group in enumerate_space(req, Rejections()):
        for variant in group.variants:
            try:
                cands.append(group.candidate(variant))
            except StepbillError:
                continue
    return req, cands


def _candidates(model: str, gpus: int, seq: int, batch: int, n: int) -> tuple[PlanRequest, list[Candidate]]:
    req, cands = _space(model, gpus, seq, batch)
    return req, random.Random(1).sample(cands, min(n, len(cands)))


def _outcome(fn):  # type: ignore[no-untyped-def]
    try:
        return fn()
    except StepbillError as exc:
        return f"error: {exc}"


def _full_bill_evaluate(req: PlanRequest, cand: Candidate) -> Row | None:
    """evaluate as it was: the full eager bill for the verdict, then fit_verdict on both bills."""
    recipe = recipe_for(req, cand)
    card, reserve = Card.from_gpu(req.gpu), reserve_for(req, cand.parallel)
    try:
        eager, missing = make_bill(req.spec, recipe, None, "eager", "sdpa"), ""
    except StepbillError as exc:
        eager, missing = None, str(exc)
    if eager is not None and max(c.memory["peak"] for c in eager.ranks) > card.usable_bytes - reserve.total_bytes:
        return None
    bill = make_bill(req.spec, recipe, req.gpu.usable_bytes, "ideal", "sdpa", gpu=req.gpu, efficiency=req.efficiency)
    fit = fit_verdict(bill, eager, card, reserve, missing)
    row = evaluate(req, cand)
    assert (row is not None) == fit.fits
    if row is not None:
        assert (row.peak_bytes, row.headroom_bytes, row.budget_bytes) == (fit.worst.peak_bytes,
                                                                         fit.worst.headroom_bytes, fit.budget_bytes)
        assert bill.time is not None  # the row's time: bill_time, make_bill's time without its other lines
        assert (row.step_s, row.mfu, row.tokens_per_s) == (bill.time["time.step"].value, bill.time["time.mfu"].value,
                                                           bill.time["time.tokens_per_s"].value)
    return row


@pytest.mark.parametrize("space", SPACES, ids=[s[0] for s in SPACES])
def test_verdict_ranks_equal_the_eager_bills(space: tuple) -> None:  # type: ignore[type-arg]
    req, cands = _candidates(*space, n=12)
    for cand in cands:
        recipe = recipe_for(req, cand)
        fast = _outcome(lambda recipe=recipe: verdict_ranks(req.spec, recipe, "eager", "sdpa"))
        full = _outcome(lambda recipe=recipe: make_bill(req.spec, recipe, None, "eager", "sdpa").ranks)
        assert fast == full, cand
        _full_bill_evaluate(req, cand)


@pytest.mark.parametrize("space", SPACES, ids=[s[0] for s in SPACES])
def test_bill_time_equals_the_bills_time(space: tuple) -> None:  # type: ignore[type-arg]
    """engine/bill_parts.bill_time: every time line of make_bill's, to the last digit and the same derivation."""
    req, cands = _candidates(*space, n=8)
    gpu = req.gpu
    for cand in cands:
        recipe = recipe_for(req, cand)
        full = _outcome(lambda recipe=recipe: make_bill(req.spec, recipe, None, "ideal", "sdpa", gpu=gpu).time)
        fast = _outcome(lambda recipe=recipe: bill_time(req.spec, recipe, gpu))
        if isinstance(full, str):
            assert fast == full, cand
        else:
            assert repr(fast.lines) == repr(full.lines), cand


def _pipelines() -> list[tuple[str, Recipe]]:
    """Layouts whose stages share keys and differ in micro-batches in flight: each schedule, activation offload,
    sp, uneven micro-batch counts, every recompute kind."""
    out = []
    for model, par, recompute in [
        ("llama3-8b", Parallel(dp=1, tp=2, pp=4, micro_batches=8), "none"),
        ("llama3-8b", Parallel(dp=1, tp=2, pp=4, micro_batches=3), "selective:core_attn,mlp"),
        ("llama3-8b", Parallel(dp=2, tp=1, pp=4, micro_batches=8, pp_schedule="gpipe"), "full"),
        ("llama3-8b", Parallel(dp=1, tp=2, pp=4, micro_batches=8, pp_schedule="interleaved", vpp=2), "budget:3GiB"),
        ("llama3-8b", Parallel(dp=1, tp=2, sp=True, pp=4, micro_batches=8, offload_activations=True), "none"),
        ("mixtral-8x7b", Parallel(dp=2, ep=2, pp=4, micro_batches=16, zero=1), "budget:20GiB"),
        ("gpt3-125m", Parallel(dp=2, pp=3, micro_batches=6, zero=3), "every:2"),
    ]:
        out.append((model, make_recipe("mixed-bf16", "adamw", 1, 2048, recompute, None, None, par, "single")))
    return out


def test_verdict_peak_and_worst_are_the_bills() -> None:
    """engine/bill_parts.verdict_peak (ranks.stage_peak: one timeline per stage key, the most in flight) is the
    largest peak of make_bill's rank classes, under both conventions, or the same error; verdict_worst
    (ranks.stage_worst) is make_bill's worst_rank, its numbers and lines."""
    cases = [(load_model(m), r) for m, r in _pipelines()]
    for space in SPACES:
        req, cands = _candidates(*space, n=6)
        cases += [(req.spec, _outcome(lambda c=c, req=req: recipe_for(req, c))) for c in cands]
    for spec, recipe in cases:
        if isinstance(recipe, str):
            continue
        for convention in ("eager", "ideal"):
            fast = _outcome(lambda s=spec, r=recipe, c=convention: verdict_peak(s, r, c, "sdpa"))
            full = _outcome(lambda s=spec, r=recipe, c=convention: max(x.memory["peak"] for x in
                                                                   make_bill(s, r, None, c, "sdpa").ranks))
            assert fast == full, (spec.name, recipe.parallel, recipe.recompute, convention)
            if isinstance(full, str):
                continue
            worst, judged = verdict_worst(spec, recipe, convention, "sdpa"), \
                make_bill(spec, recipe, None, convention, "sdpa").worst_rank
            assert worst.stages[0] == judged.stages[0]  # the class's first stage: its numbers and lines
            for field in ("layers", "in_flight", "resident_items", "activation_items", "transient_items", "memory",
                          "cpu", "owned", "model", "notes"):
                assert getattr(worst, field) == getattr(judged, field), field
