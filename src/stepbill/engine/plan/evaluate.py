"""One candidate's numbers, from the same engine calls as `stepbill bill` (no second model of memory or time).

`evaluate` builds the candidate's recipe as `api.make_step_bill` does and calls `make_bill` (ideal convention, with
the GPU: the step time) and the fit verdict (`engine/fit.py`: the eager bill's rank peaks against usable memory −
reserve), so `stepbill bill` with the row's command prints the same peak, headroom and step time.

`resident_bound` is the exact lower bound the search prunes with: a rank's weights + gradients + optimizer states
(engine/parallel/holdings.rank_holdings, what the rank holds after the tp / ep split and ZeRO sharding; optimizer
side left out under optimizer offload) are all alive together at the end of the backward, so every rank class's
peak is at least that sum. When it exceeds the budget, no micro-batch, recompute policy, sp or activation-offload
choice can fit: each of those candidates is rejected with the same verdict a full bill gives (tested against full
bills in tests/test_plan_bounds.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepbill.engine.bill import make_bill, verdict_ranks
from stepbill.engine.fit import Card, Reserve, default_reserve, fit_of_ranks, fit_verdict, user_reserve
from stepbill.engine.parallel.holdings import rank_holdings
from stepbill.engine.plan.space import Candidate, PlanRequest
from stepbill.engine.run import run_lines
from stepbill.errors import StepbillError
from stepbill.spec.command import bill_command
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import Recipe, make_recipe

OPTIMIZER_SIDE = ("master", "optimizer.")


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

    @property
    def gpu_seconds_per_token(self) -> float:
        """GPU-seconds one token costs: step time × GPUs / tokens per step (the cost objective)."""
        return self.step_s * self.world / self.tokens_per_step


def recipe_for(req: PlanRequest, cand: Candidate) -> Recipe:
    """The recipe `stepbill bill` builds from the candidate's options (api.make_step_bill's make_recipe call)."""
    return make_recipe(req.recipe, req.optimizer, cand.micro_batch, req.seq, cand.recompute, None, None,
                       cand.parallel, "single")


def reserve_for(req: PlanRequest, parallel: Parallel) -> Reserve:
    """The reserve `stepbill bill` keeps for this layout: --reserve, else engine/fit.py's default."""
    if req.reserve_gib is not None:
        return user_reserve(req.reserve_gib)
    return default_reserve(Card.from_gpu(req.gpu), parallel)


def budget_bytes(req: PlanRequest, parallel: Parallel) -> float:
    """Usable memory − reserve (bytes): what a rank's peak must stay under."""
    return req.gpu.usable_bytes - reserve_for(req, parallel).total_bytes


def resident_bound(req: PlanRequest, holdings_layout: Parallel, offload_optimizer: bool,
                   stop_above: float = float("inf")) -> float:
    """The largest over pipeline stages of a rank's resident bytes on the GPU (weights + grads + master +
    optimizer states; the optimizer side on the CPU under offload): a lower bound of every rank class's peak.
    Stops at the first stage above `stop_above` (that stage alone decides the verdict)."""
    recipe = make_recipe(req.recipe, req.optimizer, 1, req.seq, "none", None, None, holdings_layout, "single")
    worst = 0.0
    pp = holdings_layout.pp
    for stage in sorted(range(pp), key=lambda s: (s in (0, pp - 1), s)):  # middle stages hold the most layers
        held = rank_holdings(req.spec, recipe, stage).held
        on_gpu = sum(v for k, v in held.items() if not (offload_optimizer and k.startswith(OPTIMIZER_SIDE)))
        worst = max(worst, on_gpu)
        if worst > stop_above:
            break
    return worst


def evaluate(req: PlanRequest, cand: Candidate) -> Row | None:
    """The candidate's row, or None when a rank's peak exceeds the budget (the fit verdict of `stepbill bill`)."""
    recipe = recipe_for(req, cand)
    card = Card.from_gpu(req.gpu)
    reserve = reserve_for(req, cand.parallel)
    try:  # the eager bill's rank classes, without its other lines (engine/bill.verdict_ranks)
        eager_ranks = verdict_ranks(req.spec, recipe, "eager", "sdpa")
        missing = ""
    except StepbillError as exc:  # no eager bill for this model: the verdict falls back to the ideal peaks
        eager_ranks, missing = None, str(exc)
    if eager_ranks is not None:
        budget = card.usable_bytes - reserve.total_bytes
        if max(c.memory["peak"] for c in eager_ranks) > budget:
            return None
    bill = make_bill(req.spec, recipe, req.gpu.usable_bytes, "ideal", "sdpa", gpu=req.gpu, efficiency=req.efficiency)
    if eager_ranks is None:
        fit = fit_verdict(bill, None, card, reserve, missing)
    else:
        fit = fit_of_ranks(eager_ranks, recipe, "eager", bill.convention, card, reserve)
    if not fit.fits:
        return None
    assert bill.time is not None
    time = bill.time
    run = run_lines(recipe, time, req.train_tokens, req.price_per_gpu_hour, req.global_batch_tokens)
    options = bill_options(req, cand)
    return Row(cand, cand.parallel.world, fit.worst.peak_bytes, fit.worst.headroom_bytes, fit.budget_bytes,
               time["time.step"].value, time["time.mfu"].value, time["time.tokens_per_s"].value,
               recipe.tokens_per_step, {k.removeprefix("run."): x.value for k, x in run.items()}, options,
               bill_command(req.model_name, options))


def bill_options(req: PlanRequest, cand: Candidate) -> dict[str, Any]:
    """The `stepbill.bill` keywords of the candidate (defaults left out, the layout always spelled)."""
    par = cand.parallel
    out: dict[str, Any] = {"seq": req.seq, "micro_batch": cand.micro_batch}
    if req.recipe != "mixed-bf16":
        out["recipe"] = req.recipe
    if req.optimizer != "adamw":
        out["optimizer"] = req.optimizer
    if cand.recompute != "none":
        out["recompute"] = cand.recompute
    out.update(gpu=req.gpu_name, gpus=par.world, dp=par.dp, tp=par.tp, pp=par.pp)
    for key, default in (("cp", 1), ("ep", 1), ("zero", 0), ("shard_group", None), ("sp", False),
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
    if req.efficiency is not None:
        out["efficiency"] = req.efficiency
    if req.train_tokens is not None:
        out["train_tokens"] = req.train_tokens
    if req.price_per_gpu_hour is not None:
        out["price_per_gpu_hour"] = req.price_per_gpu_hour
    return out


