"""One candidate's numbers, from the same engine calls as `stepbill bill` (no second model of memory or time).

`evaluate` builds the candidate's recipe as `api.make_step_bill` does and calls `make_bill` (ideal convention, with
the GPU: the step time) and the fit verdict (`engine/fit.py`: the eager bill's rank peaks against usable memory −
reserve), so `stepbill bill` with the row's command prints the same peak, headroom and step time.

Budgets and the resident and host bounds the search prunes with: engine/plan/resident.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from stepbill.engine.bill import activation_width, make_bill
from stepbill.engine.bill_parts import bill_time, verdict_peak, verdict_ranks
from stepbill.engine.fit import (
    fit_verdict,
    rank_fit,
)
from stepbill.engine.fit_host import host_fit
from stepbill.engine.parallel import RankClass, worst_rank
from stepbill.engine.parallel.holdings import slicing_layout
from stepbill.engine.parallel.layout import stage_layer_indices
from stepbill.engine.parallel.rank_share import in_flight_microbatches
from stepbill.engine.plan.axes import BUDGET_AT_FREE
from stepbill.engine.plan.resident import budget_bytes, card_for, reserve_for, resident_bound
from stepbill.engine.plan.space import Candidate, PlanRequest
from stepbill.engine.recompute.budget import floor, peak_of, problem_for_spec
from stepbill.engine.run import run_lines
from stepbill.errors import StepbillError
from stepbill.spec.command import bill_command
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import Recipe, default_optimizer_impl, make_recipe
from stepbill.spec.recompute_policy import parse_recompute

GIB = 2**30
BUDGET_STEPS = 3  # eager bills the budget's correction may make (budget_policy)


@dataclass(frozen=True)
class Row:
    """A candidate that fits, with the numbers `stepbill bill` prints for it.

    peak_bytes / headroom_bytes: the judged (eager-convention) worst rank class and budget − its peak; step_s:
    time.step (s); mfu: time.mfu (PaLM model FLOPs, ratio); tokens_per_s: time.tokens_per_s (whole cluster);
    run: run.* line values (days, GPU-hours, cost with --train-tokens / --price-per-gpu-hour)."""

    candidate: Candidate
    world: int
    peak_bytes: float
    headroom_bytes: float
    budget_bytes: float
    step_s: float
    mfu: float
    tokens_per_s: float
    tokens_per_step: int
    run: dict[str, float]
    options: dict[str, Any]  # `stepbill.bill` keywords that reproduce the row
    command: str  # the `stepbill bill …` command that reproduces the row
    host_node_bytes: float | None = None  # under offload: what the fullest node's GPUs offload (engine/fit_host.py)

    @property
    def gpu_seconds_per_token(self) -> float:
        """GPU-seconds one token costs: step time × GPUs / tokens per step (the cost objective)."""
        return self.step_s * self.world / self.tokens_per_step


def recipe_for(req: PlanRequest, cand: Candidate) -> Recipe:
    """The recipe `stepbill bill` builds from the candidate's options (api.make_step_bill's make_recipe call):
    that call's recipe on one GPU, memoised per micro-batch and policy, put on the candidate's layout
    (Recipe.on_layout: equal to it, without checking every field again for each candidate)."""
    cand = resolve_recompute(req, cand)
    return _one_gpu(req.recipe, req.optimizer, cand.micro_batch, req.seq, cand.recompute, req.optimizer_impl,
                    req.device).on_layout(cand.parallel)


@lru_cache(maxsize=4096)
def _one_gpu(recipe: str, optimizer: str, micro_batch: int, seq: int, recompute: str, impl: str,
             device: str) -> Recipe:
    return make_recipe(recipe, optimizer, micro_batch, seq, recompute, None, None, None, impl, device)


def evaluate(req: PlanRequest, cand: Candidate) -> Row | None:
    """The candidate's row, or None when it does not fit (the fit verdict of `stepbill bill`)."""
    return judged(req, cand)[1]


def judged(req: PlanRequest, cand: Candidate) -> tuple[str, Row | None]:
    """("", the candidate's row) when it fits; ("peak_over_budget", None) when a rank's peak exceeds the budget,
    ("host_over_budget", None) when the ranks fit but a node's host memory cannot hold what they offload — the fit
    verdict of `stepbill bill` (engine/fit.py, engine/fit_host.py)."""
    cand = resolve_recompute(req, cand)
    recipe = recipe_for(req, cand)
    par = recipe.parallel
    # under offload the host verdict reads every eager rank class (their offloaded bytes): made once, their largest
    # peak the verdict's; else the worst class's peak alone (engine/bill_parts.verdict_peak, no class made)
    classes: list[RankClass] | None = None
    try:
        if par.offload_optimizer or par.offload_activations:
            classes = verdict_ranks(req.spec, recipe, "eager", "sdpa")
            eager_peak: float | None = max(c.memory["peak"] for c in classes)
        else:
            eager_peak = _eager_verdict(req.spec, recipe)
        missing = ""
    except StepbillError as exc:  # no eager bill for this model: the verdict falls back to the ideal peaks
        eager_peak, missing = None, str(exc)
    if eager_peak is None:
        bill = make_bill(req.spec, recipe, req.gpu.usable_bytes, "ideal", "sdpa", gpu=req.gpu,
                         efficiency=req.efficiency)
        fit = fit_verdict(bill, None, card_for(req), reserve_for(req, cand.parallel), missing)
        if not fit.fits:
            return ("host_over_budget" if all(r.fits for r in fit.ranks) else "peak_over_budget"), None
        time, peak, headroom, budget = bill.time, fit.worst.peak_bytes, fit.worst.headroom_bytes, fit.budget_bytes
        host = fit.host
    else:  # engine/fit.fit_of_ranks' verdict: all classes fit or not as the one of least headroom, the largest peak
        budget = budget_bytes(req, cand.parallel)
        worst = rank_fit("worst", 0, eager_peak, budget)
        if not worst.fits:
            return "peak_over_budget", None
        card = card_for(req)
        host = None if classes is None else host_fit(classes, par, card.gpus_per_node, card.host_bytes,
                                                     card.host_source)
        if host is not None and not host.fits:
            return "host_over_budget", None
        peak, headroom = worst.peak_bytes, worst.headroom_bytes
        # the time (make_bill's without its other lines: engine/bill_parts.bill_time) only for a row that fits
        eager_worst = None if classes is None else worst_rank(classes)
        time = bill_time(req.spec, recipe, req.gpu, req.efficiency, "ideal", "sdpa", eager_worst)
    assert time is not None
    run = run_lines(recipe, time, req.train_tokens, req.price_per_gpu_hour, req.global_batch_tokens)
    options = bill_options(req, cand)
    return "", Row(cand, cand.parallel.world, peak, headroom, budget,
                   time["time.step"].value, time["time.mfu"].value, time["time.tokens_per_s"].value,
                   recipe.tokens_per_step, {k.removeprefix("run."): x.value for k, x in run.items()}, options,
                   bill_command(req.model_name, options), None if host is None else host.node_bytes)


def bill_options(req: PlanRequest, cand: Candidate) -> dict[str, Any]:
    """The `stepbill.bill` keywords of the candidate (defaults left out, the layout always spelled)."""
    cand = resolve_recompute(req, cand)
    par = cand.parallel
    out: dict[str, Any] = {"seq": req.seq, "micro_batch": cand.micro_batch}
    if req.recipe != "mixed-bf16":
        out["recipe"] = req.recipe
    if req.optimizer != "adamw":
        out["optimizer"] = req.optimizer
    if cand.recompute != "none":
        out["recompute"] = cand.recompute
    out.update(gpu=req.gpu_name, gpus=par.world, dp=par.dp, tp=par.tp, pp=par.pp)
    for key, default in (("pp_layers", None), ("cp", 1), ("ep", 1), ("etp", None), ("zero", 0), ("shard_group", None), ("sp", False),
                         ("pp_schedule", "1f1b"), ("vpp", 1), ("offload_optimizer", False),
                         ("offload_activations", False)):
        if getattr(par, key) != default:
            out[key] = getattr(par, key)
    if req.global_batch_tokens is not None:
        out["global_batch_tokens"] = req.global_batch_tokens
    elif par.micro_batches != 1:
        out["micro_batches"] = par.micro_batches
    if req.reserve_gib is not None:
        out["reserve_gib"] = req.reserve_gib
    if req.host_mem_gib is not None:
        out["host_mem_gib"] = req.host_mem_gib
    if req.efficiency is not None:
        out["efficiency"] = req.efficiency
    if req.train_tokens is not None:
        out["train_tokens"] = req.train_tokens
    if req.price_per_gpu_hour is not None:
        out["price_per_gpu_hour"] = req.price_per_gpu_hour
    if req.optimizer_impl != default_optimizer_impl(req.optimizer, req.device):  # bill's default on the device
        out["optimizer_impl"] = req.optimizer_impl
    if req.device != "cuda":  # bill's default with --gpu (api.kernels_of)
        out["device"] = req.device
    return out




def resolve_recompute(req: PlanRequest, cand: Candidate) -> Candidate:
    """The candidate with the space's "budget solver at the rank's free memory" spelled as the `budget:<GiB>` policy
    `stepbill bill --recompute` reads (`budget_policy`); any other candidate unchanged."""
    if cand.recompute != BUDGET_AT_FREE:
        return cand
    return replace(cand, recompute=budget_policy(req, cand))


def budget_policy(req: PlanRequest, cand: Candidate) -> str:
    """`budget:<GiB>` for the candidate: the rank's free memory in the solver's units.

    The rank's free memory F = usable − reserve − the worst stage's resident bytes (`resident_bound`). The solver's
    budget is the activation peak of the whole model on one GPU, one micro-batch (engine/recompute/budget.py); a rank
    holds about 1/(tp·cp) of each layer's rows and, on stage s, n_s layers × f_s micro-batches in flight
    (engine/parallel/rank_share.in_flight_microbatches), so F is scaled by k = L·tp·cp / max_s(n_s·f_s): X₀ = k·F. That
    leaves out what the solver does not see (buffers, the working set, the eager convention's logits and loss; rows
    tp does not split without sp), so while X binds it is corrected by the verdict's own peak, Newton-like, at most
    BUDGET_STEPS eager bills: P = the worst rank's peak at X, X ← X + g·(usable − reserve − P), g = k / GiB at first,
    then the secant's ΔX / ΔP through the last two bills when that is positive (a rank does not hold all the solver
    drops, so P moves by less than ΔX / k: DeepSeek-V3's own layout on CUDA kernels, 1 GiB of X moves P by 0.55 GiB,
    and k alone needed a fourth bill); it stops at the first
    corrected X that fits, and the largest X that fitted is kept (X₀ fitting: one step up is tried). Each X is rounded
    down to 0.01 GiB and raised to the solver's floor (every droppable tensor dropped, under both the ideal and the
    eager convention) so the command always runs; the bill of the spelled budget judges the candidate like any
    other."""
    scaled, floor_gib, none_gib, scale = _budget_gib(req, cand)  # once per candidate (the solver's part memoised)
    budget = budget_bytes(req, cand.parallel)
    x, fitting = _spelled(scaled, floor_gib), None
    last: tuple[float, float] | None = None  # the previous (X, P)
    for _ in range(BUDGET_STEPS):
        if x >= none_gib:  # drops nothing: the none twin, judged as it is
            break
        peak = _eager_peak(req, cand, x)
        if peak is None:  # no eager bill for this model: keep the scaled budget
            break
        if peak <= budget:
            fitting = x if fitting is None else max(fitting, x)
            if x != _spelled(scaled, floor_gib):  # a corrected budget that fits
                break
        step = _spelled(x + _gib_per_byte(scale, last, x, peak) * (budget - peak), floor_gib)
        if step == x:
            break
        last, x = (x, peak), step
    return f"budget:{(fitting if fitting is not None else x):.2f}GiB"


def _gib_per_byte(scale: float, last: tuple[float, float] | None, x: float, peak: float) -> float:
    """The correction's gain (GiB of budget per byte of peak): the secant through the previous bill `last` (X, P) and
    this one when it is positive, else the scale k (`budget_policy`)."""
    if last is not None and peak != last[1]:
        secant = (x - last[0]) / (peak - last[1])
        if secant > 0:
            return secant
    return scale / GIB


def _eager_peak(req: PlanRequest, cand: Candidate, budget_gib: float) -> float | None:
    """The worst rank's peak of the verdict's eager bill with `budget:<budget_gib>GiB` (None: no eager bill)."""
    recipe = make_recipe(req.recipe, req.optimizer, cand.micro_batch, req.seq, f"budget:{budget_gib:.2f}GiB", None,
                         None, cand.parallel, req.optimizer_impl, req.device)
    try:
        return _eager_verdict(req.spec, recipe)
    except StepbillError:
        return None


@lru_cache(maxsize=BUDGET_STEPS + 1)
def _eager_verdict(spec: ModelSpec, recipe: Recipe) -> float:
    """`verdict_peak(spec, recipe, "eager", "sdpa")` — the worst rank class's peak of the eager bill, all its fit
    verdict reads — the last few memoised: the budget's correction (`budget_policy`) judges the budgets it tries,
    and `evaluate` then judges the one it spelled — the same recipe, so a budget candidate's verdict is made once,
    not twice (pure in its arguments). A StepbillError is not memoised: it is raised again."""
    return verdict_peak(spec, recipe, "eager", "sdpa")


def _spelled(budget_gib: float, floor_gib: float) -> float:
    """GiB rounded down to 0.01, or the floor rounded up when the budget is below it."""
    if budget_gib <= floor_gib:
        return math.ceil(floor_gib * 100 * (1 + 1e-9)) / 100
    return math.floor(budget_gib * 100) / 100


def budget_drops_nothing(req: PlanRequest, cand: Candidate) -> bool:
    """Whether the candidate's budget (`budget_policy`) is at or above the model's activation peak with nothing
    dropped under both conventions: the solver then drops nothing and the candidate is its `none` twin."""
    if cand.recompute != BUDGET_AT_FREE and not cand.recompute.startswith("budget:"):
        return False
    policy = budget_policy(req, cand) if cand.recompute == BUDGET_AT_FREE else cand.recompute
    return parse_recompute(policy).budget_bytes >= _solver_gib(req.spec, req.recipe, req.optimizer, req.seq,
                                                               cand.micro_batch, req.device)[1] * GIB


def _budget_gib(req: PlanRequest, cand: Candidate) -> tuple[float, float, float, float]:
    """(F scaled to the solver's units, the solver's floor, the peak with nothing dropped) in GiB, and the scale k;
    floor and peak the larger of the ideal and the eager convention's, with the activation widths make_bill gives
    each (`_solver_gib`, memoised: they read no field of the layout)."""
    par = cand.parallel
    recipe = make_recipe(req.recipe, req.optimizer, cand.micro_batch, req.seq, "none", None, None, par,
                         req.optimizer_impl, req.device)
    free = budget_bytes(req, par) - _worst_resident(req, slicing_layout(par), par.offload_optimizer)
    loads = [len(layers) * in_flight_microbatches(recipe, s)
             for s, layers in enumerate(stage_layer_indices(req.spec, par))]
    floor_gib, none_gib = _solver_gib(req.spec, req.recipe, req.optimizer, req.seq, recipe.micro_batch, req.device)
    scale = req.spec.n_layers * par.tp * par.cp / max(loads)
    return free * scale / GIB, floor_gib, none_gib, scale


@lru_cache(maxsize=256)
def _solver_gib(spec: ModelSpec, recipe_name: str, optimizer: str, seq: int, micro_batch: int, device: str
                ) -> tuple[float, float]:
    """(the solver's floor, its peak with nothing dropped) in GiB, the larger of the ideal and the eager
    convention's: they read the precision, the sequence and the micro-batch, no field of the layout (the recipe's
    precision comes from its name alone: spec/recipe.make_recipe)."""
    recipe = make_recipe(recipe_name, optimizer, micro_batch, seq, "none", None, None, None, "single", device)
    problems = [problem_for_spec(spec, 1.0, seq, recipe.micro_batch,
                                 activation_width(recipe.precision, recipe.device, convention), convention)
                for convention in ("ideal", "eager")]
    return max(floor(p) for p in problems) / GIB, max(peak_of(p, set()) for p in problems) / GIB


@lru_cache(maxsize=1024)
def _worst_resident(req: PlanRequest, slicing: Parallel, offload_optimizer: bool) -> float:
    """`resident_bound` of a layout whose slicing fields (engine/parallel/holdings.slicing_layout) are `slicing`,
    memoised: rank_holdings and the stage split read nothing else of the layout (slicing_layout is its memo key),
    so the candidates of one group (sp, micro-batch, offload and recompute variants) share one entry."""
    return resident_bound(req, slicing, offload_optimizer)
