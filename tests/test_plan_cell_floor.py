"""A cell's least step-time floor known without its other policies' floors (engine/plan/cell_floor.py): the spill's
rate of fall is its derivative and bounds its fall over any step (convexity), and where the `none` floor rises
with the recompute on one busiest stage, no explicit policy of the cell has a lower floor — over real planner spaces
(dense, MoE, MLA-MoE, the --efficiency override) and through the floors pass's nodes."""

from __future__ import annotations

import random

import pytest

from stepbill.engine.bill_parts import bill_plan
from stepbill.engine.parallel.collectives import step_collectives
from stepbill.engine.parallel.layout import stage_layer_kinds
from stepbill.engine.params import param_inventory
from stepbill.engine.plan import PlanRequest, floor_pass
from stepbill.engine.plan.axes import BUDGET_AT_FREE
from stepbill.engine.plan.bounds import floor_offload_terms, time_floor, time_floor_terms
from stepbill.engine.plan.cell_floor import busiest_stage_dominates, none_floor_rises, same_busiest_stage
from stepbill.engine.plan.evaluate import recipe_for, resolve_recompute
from stepbill.engine.plan.search import _shuffled
from stepbill.engine.plan.space import Group, Rejections, enumerate_space
from stepbill.engine.timing.comm_time import comm_timing, spill_shrink_rate
from stepbill.engine.timing.step import StageCompute
from stepbill.errors import StepbillError
from stepbill.spec.hardware import load_gpu
from stepbill.spec.presets import load_preset
from tests.test_plan_bounds import SPACES


def space(name: str) -> tuple[PlanRequest, list[Group]]:
    model, gpus, seq, batch, efficiency = SPACES[name]
    req = PlanRequest(load_preset(model), load_gpu("h100-sxm"), "h100-sxm", (gpus,), seq, model,
                      global_batch_tokens=batch, efficiency=efficiency)
    return req, list(enumerate_space(req, Rejections()))


def cells(req: PlanRequest, groups: list[Group], n: int, seed: int):
    """`n` random cells with a `none` policy and another explicit one: (the none candidate, the others)."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        group = rng.choice(groups)
        variants = group.variants
        v = rng.randrange(len(variants))
        cell = [w for w in variants if w[:4] == variants[v][:4] and w[4] != BUDGET_AT_FREE]
        none = next((w for w in cell if w[4] == "none"), None)
        if none is None or len(cell) < 2:
            continue
        try:
            out.append((group, group.candidate(none), [group.candidate(w) for w in cell if w is not none]))
        except StepbillError:
            continue
    return out


@pytest.mark.parametrize("name", ["moe", "mla-moe"])
def test_spill_shrink_rate_is_the_spills_fall(name: str) -> None:
    """comm_time.spill_shrink_rate is the right derivative of comm_timing's hidden_spill along the recompute's
    window growth (finite difference over a tiny step, relative 1e-6) and bounds its fall over every larger step."""
    req, groups = space(name)
    falling = 0
    for _, cand, _ in cells(req, groups, 60, seed=1):
        terms = time_floor_terms(req, cand)
        sc = terms.stage_compute
        assert sc is not None
        recipe = recipe_for(req, cand)
        par = recipe.parallel
        timed = [c for c in step_collectives(req.spec, recipe, param_inventory(req.spec), req.gpu,
                                             bill_plan(req.spec, recipe).rerun) if c.seconds is not None]
        args = (timed, par.zero, par.micro_batches,
                max(sum(stage_layer_kinds(req.spec, par)[terms.stage].values()), 1))

        assert terms.comm is not None
        rate = spill_shrink_rate(terms.comm, par.micro_batches, sc.forward, sc.backward, sc.attention, sc.rebuild,
                                 sc.rebuild_attention)
        at_zero = _spill(args, sc, 0.0)
        assert at_zero == terms.comm.hidden_spill  # type: ignore[union-attr]
        tiny = 1e-6 * max(at_zero, 1e-3) / max(sc.rebuild, 1e-12)
        assert (at_zero - _spill(args, sc, tiny)) / tiny == pytest.approx(rate, rel=1e-6, abs=1e-9)
        for x in (0.01, 0.1, 1.0, 10.0):
            assert at_zero - _spill(args, sc, x) <= rate * x + 1e-12 * at_zero  # rounding: ~1e-15 of the sums
        falling += rate > 0
    assert falling >= 5


def _spill(args: tuple, sc: StageCompute, x: float) -> float:
    """comm_timing's hidden spill with x forwards of recompute added to the windows."""
    return comm_timing(*args, sc.forward, sc.backward + x * sc.rebuild,
                       sc.attention + x * sc.rebuild_attention).hidden_spill


@pytest.mark.parametrize("name", ["dense", "moe", "override", "mla-moe"])
def test_a_rising_none_floor_is_its_cells_least(name: str) -> None:
    """Where the `none` floor rises with the recompute (and, per-op, every policy of the cell has its busiest
    stage), every explicit policy of the cell has a floor at least the `none` one, to the last digits (the floors
    pass then computes only that one: floor_pass.floors, its nodes' keys ROUNDING_SLACK lower). Where it does not
    rise, a policy may well be faster: on the MoE space some are (the test is not vacuous)."""
    req, groups = space(name)
    verdicts = {True: 0, False: 0}
    strictly = faster = 0
    slack = 1 - floor_pass.ROUNDING_SLACK
    for group, none, others in cells(req, groups, 150, seed=7):
        terms = time_floor_terms(req, none)
        rises = none_floor_rises(req, none, terms, floor_offload_terms(req, recipe_for(req, none)))
        policies = tuple(sorted({c.recompute for c in others}))
        least = rises and (req.efficiency is not None
                           or same_busiest_stage(req, group.holdings_layout, none.micro_batch, policies))
        verdicts[least] += 1
        floors = [time_floor(req, other) for other in others]
        if least:
            assert min(floors) >= terms.t_step * slack, none
            strictly += sum(f > terms.t_step for f in floors)
        else:
            faster += min(floors) < terms.t_step * slack
    assert verdicts[True] >= 50 and strictly >= 50
    if name == "moe":
        assert faster
    if name == "override":  # --efficiency: the `none` floor is always the least
        assert not verdicts[False]


@pytest.mark.parametrize("name", ["dense", "moe", "mla-moe"])
def test_a_dominant_stage_keeps_the_budget_solvers_floor_above_none(name: str) -> None:
    """Where the `none` floor rises and its busiest stage dominates (cell_floor.busiest_stage_dominates), the budget
    solver's candidate, its policy solved (`budget:<GiB>`, what its bill runs), has that busiest stage and a time
    floor at least the `none` one; on the MLA-MoE space (uneven dense / MoE stages) the stage does not always
    dominate."""
    req, groups = space(name)
    rng = random.Random(11)
    checked = undecided = 0
    for _ in range(400):
        group = rng.choice(groups)
        budget = [v for v in group.variants if v[4] == BUDGET_AT_FREE]
        if not budget:
            continue
        variant = rng.choice(budget)
        try:
            cand = group.candidate(variant)
            none = group.candidate((*variant[:4], "none"))
        except StepbillError:
            continue
        terms = time_floor_terms(req, none)
        if not none_floor_rises(req, none, terms, floor_offload_terms(req, recipe_for(req, none))):
            continue
        if not busiest_stage_dominates(req, group.holdings_layout, none.micro_batch):
            undecided += 1
            continue
        solved = resolve_recompute(req, cand)
        assert time_floor_terms(req, solved).stage == terms.stage, solved
        assert time_floor(req, solved) >= terms.t_step * (1 - floor_pass.ROUNDING_SLACK), solved
        checked += 1
        if checked == 25:
            break
    assert checked >= 10
    if name == "mla-moe":
        assert undecided


def test_a_node_never_outranks_its_waiting_floors() -> None:
    """Through the floors pass (dense space, every group): each candidate whose floor waits for its node — an explicit
    policy's time floor or the budget solver's budget floor — has a floor, computed alone, at least its node's key
    (a budget candidate's with its policy solved too); and the pass leaves many waiting."""
    req, groups = space("dense")
    groups = _shuffled(groups)
    found = floor_pass.floors(req, [(i, g, 0.0) for i, g in enumerate(groups)], "time", None)
    waiting = [(lead, v) for lead in found.leads if lead[5] < 0
               for v, step in zip(*found.nodes[-lead[5] - 1], strict=True) if step is None]
    assert len(waiting) >= 200
    budgets = 0
    for lead, v in random.Random(5).sample(waiting, 200):
        group = groups[lead[4]]
        cand = group.candidate(group.variants[v])
        if cand.recompute == BUDGET_AT_FREE:  # the policy its bill runs
            budgets += 1
            cand = resolve_recompute(req, cand)
        assert time_floor(req, cand) >= lead[7], cand
    assert budgets
    assert found.decided == sum(len(g.variants) for g in groups)
