"""A rank's share of the one-GPU bill: how many micro-batches of a stage's activations are alive at once, how many
ways each kept tensor is divided (engine/kinds.Split: cp, tp under sp or for head/FFN/vocab-wide rows, etp for
expert width), and the one-GPU recompute plan and eager terms as one rank of the layout holds them — what the
per-rank timelines (ranks.py), the worst stage (worst_stage.py) and the planner's floors (engine/plan/bounds.py)
read. All values are bytes or counts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from stepbill.engine.activations import ActTensor
from stepbill.engine.kinds import Split
from stepbill.engine.memory.eager import EagerTerms
from stepbill.engine.parallel.holdings import Held, one_gpu_states
from stepbill.engine.params import ParamInventory
from stepbill.engine.recompute import RecomputePlan
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import Recipe


def in_flight_microbatches(recipe: Recipe, stage: int) -> float:
    """Micro-batches' worth of the stage's activations alive at its peak.

    GPipe keeps all m; 1F1B keeps min(p − s, m) on stage s (Narayanan et al. 2021); interleaved with v chunks
    keeps min(2(p − s − 1) + (v − 1)p + 1, m·v) chunk-micro-batches of 1/v of the stage's layers (Megatron's
    warm-up count), i.e. p(1 + (p − 1)/(p·v)) on stage 0 (Korthikanti et al. 2022 §4.2.3). No pipeline: 1.
    """
    par = recipe.parallel
    m, p, v = par.micro_batches, par.pp, par.vpp
    if p == 1:
        return 1.0
    if par.pp_schedule == "gpipe":
        return float(m)
    if par.pp_schedule == "1f1b":
        return float(min(p - stage, m))
    return min(2 * (p - stage - 1) + (v - 1) * p + 1, m * v) / v


def row_divisor(recipe: Recipe) -> Callable[[ActTensor], float]:
    """How many ways one rank's share of a kept tensor is divided (see engine/kinds.Split)."""
    par = recipe.parallel
    seq = par.cp * (par.tp if par.sp else 1)
    by_split = {Split.SEQ: seq, Split.TP: par.cp * par.tp, Split.EXPERT: seq * par.expert_tp}

    def divisor(t: ActTensor) -> float:
        return by_split[t.split]

    return divisor


def rank_plan(one_plan: RecomputePlan, recipe: Recipe, order: tuple[str, ...]) -> RecomputePlan:
    """The one-GPU plan as one rank of `recipe`'s layout holds it for a stage running `order`: rows divided by their
    Split (row_divisor), checkpointed inputs by cp (× tp under sp), recompute FLOPs by tp·cp."""
    par = recipe.parallel
    key = (id(one_plan), par.cp, par.tp, par.sp, par.expert_tp, order)  # all that row_divisor and the divisors read
    found = _RANK_PLANS.get(key)
    if found is not None and found[0] is one_plan:
        return found[1]
    plan = one_plan.for_rank(row_divisor(recipe), par.cp * (par.tp if par.sp else 1), par.cp * par.tp, order)
    _remember(_RANK_PLANS, key, (one_plan, plan))
    return plan


#: Memos of rank_plan and rank_eager, keyed on the layout's divisors and the one-GPU object (its id, or for eager
#: terms some of their numbers; the object is kept beside its result and checked the same or equal on a hit): a
#: candidate's verdicts, and candidates that share a recompute plan, ask for the same few. Shared results: read
#: them, never change them.
_RANK_PLANS: dict[tuple[Any, ...], tuple[RecomputePlan, RecomputePlan]] = {}
_RANK_EAGER: dict[tuple[Any, ...], tuple[EagerTerms, EagerTerms]] = {}
MEMO_ENTRIES = 4096  # entries a memo keeps before it starts over


def _remember(memo: dict[Any, Any], key: Any, value: Any) -> None:
    if len(memo) >= MEMO_ENTRIES:
        memo.clear()
    memo[key] = value


def optimizer_divisor(spec: ModelSpec, recipe: Recipe, held: Held) -> float:
    """What the one GPU's optimizer-step temporaries are divided by on a rank holding `held`. The multi-tensor path
    (foreach) makes one temporary of each local state tensor at once (torch/optim/adamw.py `_multi_tensor_adamw`:
    `torch._foreach_sqrt(device_exp_avg_sqs)`), so the rank's temporaries are the one GPU's × the share of the
    optimizer states it holds — every split at once: tp, the pipeline stage's layers, the experts under ep × etp,
    the ZeRO shards (before this, foreach divided by tp × ZeRO shards only: Qwen3-30B-A3B on 8 GPUs at ep 8 held
    the whole model's 113.74 GiB of temporaries on each rank, 19.24 GiB once divided). The for-loop path (single)
    holds a few tensors at a time, the largest ones; those are divided by tp × ZeRO shards, approximately (a stage
    or an expert split keeps whole tensors of the one GPU's sizes)."""
    par = recipe.parallel
    if recipe.optimizer_impl == "foreach":
        mine = sum(v for k, v in held.held.items() if k.startswith("optimizer."))
        one = one_gpu_states(spec, recipe)
        if mine > 0 and one > 0:
            return one / mine
    return par.tp * (par.zero_group if par.zero >= 1 else 1)


def eager_divisors(par: Parallel) -> tuple[int, int, int]:
    """What EagerTerms.for_rank divides the one-GPU eager terms by on a rank of `par`: residual-stream-wide tensors
    (cp, × tp under sequence parallelism), head / FFN-wide ones (cp × tp), a routed expert bank (ep × etp: the
    rank's experts, their width)."""
    return par.cp * (par.tp if par.sp else 1), par.cp * par.tp, par.ep * par.expert_tp


def rank_eager(eager: EagerTerms, recipe: Recipe, held: Held, inv: ParamInventory, spec: ModelSpec) -> EagerTerms:
    """The one-GPU eager terms as one rank of `recipe`'s layout holding `held` sees them (EagerTerms.for_rank)."""
    par = recipe.parallel
    seq, width, experts = eager_divisors(par)
    unsharded = held.unsharded.get("grads", 0.0)
    grad_div = unsharded / held.held["grads"] if held.held.get("grads") else 1.0
    counters = held.params_share  # AdamW keeps one step tensor per parameter tensor: the rank's share of them
    opt_div = optimizer_divisor(spec, recipe, held)
    # keyed on a few of the one-GPU terms' numbers, checked equal whole on a hit: a budget candidate's verdicts
    # each have their own terms (one per policy), mostly equal in value
    key = (eager.constant, eager.forward_end, eager.head_temp, eager.optimizer_temp, seq, width, par.tp, grad_div,
           counters, opt_div, par.offload_optimizer, experts)
    found = _RANK_EAGER.get(key)
    if found is not None and (found[0] is eager or found[0] == eager):
        return found[1]
    one = eager
    if par.offload_optimizer:
        eager = replace(eager, optimizer_temp=0, step_counters=0)
    mine = eager.for_rank(seq, width, width, par.tp * grad_div, min(counters, 1.0), opt_div, par.tp, experts)
    _remember(_RANK_EAGER, key, (one, mine))
    return mine
