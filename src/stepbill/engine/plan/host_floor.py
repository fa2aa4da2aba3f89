"""An exact lower bound of what the fullest node's GPUs offload under activation offload, for one candidate: the
branch and bound's last check before it bills one (branch_bound.bill_lead).

The host verdict (engine/fit_host.host_fit) sums each rank's offloaded bytes over the fullest node: its optimizer
side and gradients under optimizer offload, and under activation offload its kept activations per micro-batch ×
the micro-batches in flight on its stage (parallel/ranks.stage_class: the eager rank plan's kept_after_forward,
bounds.stage_rows' `kept` without offload). The floor sums the same kept bytes (a budget candidate's: the rows no
drop set can drop, bounds.least_kept) and the optimizer side (resident.optimizer_side_per_stage), leaving out the
gradients (≥ 0), on the same placement (fit_host.layout_fullest_node). On DeepSeek-V3 × 64 H100, 890 of the search's
1,809 bills were activation-offload candidates the host rejected.
"""

from __future__ import annotations

from dataclasses import replace

from stepbill.engine.bill import without_layout
from stepbill.engine.bill_parts import bill_eager_parts
from stepbill.engine.fit_host import layout_fullest_node
from stepbill.engine.parallel.layout import stage_layer_indices
from stepbill.engine.parallel.rank_share import in_flight_microbatches
from stepbill.engine.plan.bounds import stage_rows
from stepbill.engine.plan.evaluate import recipe_for
from stepbill.engine.plan.resident import card_for, optimizer_side_per_stage
from stepbill.engine.plan.space import Candidate, PlanRequest
from stepbill.errors import StepbillError
from stepbill.spec.recompute_policy import parse_recompute


def host_floor(req: PlanRequest, cand: Candidate) -> float:
    """A lower bound (bytes) of the fullest node's host bytes under `stepbill bill` for a candidate with activation
    offload (its recompute resolved: an explicit policy or budget:SIZE); 0.0 where the model has no eager bill (the
    verdict then reads the bill's own convention)."""
    solved = parse_recompute(cand.recompute).kind == "budget"
    if solved:
        cand = replace(cand, recompute="none")  # its rows: the none policy's, less what any drop set may drop
    recipe = recipe_for(req, cand)
    try:
        plan = bill_eager_parts(req.spec, recipe)[0]
    except StepbillError:
        return 0.0
    par = recipe.parallel
    kept_recipe = replace(recipe, parallel=replace(par, offload_activations=False))  # what a rank would keep
    rows_key = (req.spec, without_layout(recipe), solved, par.cp, par.tp, par.sp, par.expert_tp)
    indices = stage_layer_indices(req.spec, par)
    side = optimizer_side_per_stage(req, par) if par.offload_optimizer else [0.0] * par.pp
    per_stage = []
    for stage in range(par.pp):
        order = tuple(plan.order[i] for i in indices[stage])
        kept = stage_rows(rows_key, plan, kept_recipe, order)[0] if order else 0.0
        per_stage.append(side[stage] + kept * in_flight_microbatches(recipe, stage))
    return layout_fullest_node(per_stage, par, card_for(req).gpus_per_node)[0]


def host_floor_exceeded(req: PlanRequest, cand: Candidate) -> bool:
    """The candidate offloads its activations and the node's host memory (catalog or --host-mem; unknown: never)
    cannot hold its host_floor: no bill of it can fit (engine/fit_host.HostFit.fits)."""
    if not cand.parallel.offload_activations:
        return False
    budget = card_for(req).host_bytes
    return budget is not None and host_floor(req, cand) > budget
