"""Milliseconds per bill on the planner's own candidates, and where they go (cProfile).

For each request (DeepSeek-V3 × 2,048 H100, seq 4,096, 15.7M-token batch; Llama-3-70B × 64; Mixtral-8x7B × 64;
GPT-3 125M × 8) the planner's space is enumerated (engine/plan/space.py), the candidates the exact resident bound
leaves are sampled at random (seed 0), and each sampled candidate goes through `evaluate` once (the eager bill for
the fit verdict, then the ideal bill with the GPU: what the planner pays per candidate). Reported: CPU ms per
candidate (process time; one core), for random candidates from empty caches and for whole groups in the planner's
order (each group after its resident bound, as engine/plan/search.py runs them); with --profile the top functions
by tottime and by cumtime.

With --time-path: CPU ms per candidate of the ideal bill's time path alone (step_collectives + step_time with the
GPU), each candidate after what `evaluate` makes before it (its eager verdict, then the ideal bill without the GPU,
untimed: that bill's collectives warm rank_param_elements), random candidates and the planner's order, from empty
caches.

Run: python benchmarks/bill_profile.py [--sample N] [--repeat N] [--profile] [--time-path] [--only NAME]. Compare
with another checkout: PYTHONPATH=<its src> python benchmarks/bill_profile.py.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import random
import sys
import time

from stepbill.engine.bill import make_bill
from stepbill.engine.bill_parts import verdict_ranks
from stepbill.engine.parallel.collectives import step_collectives
from stepbill.engine.plan import PlanRequest
from stepbill.engine.plan.evaluate import evaluate, recipe_for
from stepbill.engine.plan.resident import budget_bytes, resident_bound
from stepbill.engine.plan.space import Candidate, Group, Rejections, enumerate_space
from stepbill.engine.steptime import step_time
from stepbill.errors import StepbillError
from stepbill.spec.hardware import load_gpu
from stepbill.spec.presets import load_model

#: name → (model, gpu, gpus, seq, global batch tokens)
REQUESTS = {
    "deepseek-v3": ("deepseek-v3", "h100-sxm", 2048, 4096, 15_728_640),
    "llama3-70b": ("llama3-70b", "h100-sxm", 64, 4096, 4096 * 512),
    "mixtral": ("mixtral-8x7b", "h100-sxm", 64, 4096, 4096 * 512),
    "gpt3-125m": ("gpt3-125m", "h100-sxm", 8, 2048, 2048 * 256),
}


def request(name: str) -> PlanRequest:
    model, gpu, gpus, seq, batch = REQUESTS[name]
    return PlanRequest(load_model(model), load_gpu(gpu), gpu, (gpus,), seq, model, global_batch_tokens=batch)


def sample_candidates(req: PlanRequest, n: int) -> list[Candidate]:
    """n candidates the resident bound does not decide, drawn at random (seed 0) from the whole space."""
    survivors = []
    for g in enumerate_space(req, Rejections()):
        budget = budget_bytes(req, g.holdings_layout)
        if resident_bound(req, g.holdings_layout, g.offload_optimizer, budget) <= budget:
            survivors += [(g, v) for v in g.variants]
    out = []
    for g, v in random.Random(0).sample(survivors, min(n, len(survivors))):
        with contextlib.suppress(StepbillError):
            out.append(g.candidate(v))
    return out


def sample_groups(req: PlanRequest, n: int) -> list[tuple[Group, list[Candidate]]]:
    """Whole groups (one slicing layout, its micro-batch / recompute / sp / offload variants) the resident bound
    does not decide, drawn at random (seed 0) until they hold n candidates: the order the planner evaluates in."""
    groups = []
    for g in enumerate_space(req, Rejections()):
        budget = budget_bytes(req, g.holdings_layout)
        if resident_bound(req, g.holdings_layout, g.offload_optimizer, budget) <= budget:
            groups.append(g)
    random.Random(0).shuffle(groups)
    out, count = [], 0
    for g in groups:
        if count >= n:
            break
        cands = []
        for v in g.variants:
            with contextlib.suppress(StepbillError):
                cands.append(g.candidate(v))
        out.append((g, cands))
        count += len(cands)
    return out


def ms_planner_order(req: PlanRequest, groups: list[tuple[Group, list[Candidate]]], repeat: int = 1) -> float:
    """CPU ms per `evaluate` call when candidates come as the planner sends them: group by group, each group's
    resident bound first (untimed: the bound's cost, not the bill's), from empty caches; best of `repeat`."""
    best = float("inf")
    n = sum(len(c) for _, c in groups)
    for _ in range(repeat):
        clear_engine_caches()
        spent = 0.0
        for g, cands in groups:
            resident_bound(req, g.holdings_layout, g.offload_optimizer)
            start = time.process_time()
            for cand in cands:
                with contextlib.suppress(StepbillError):
                    evaluate(req, cand)
            spent += time.process_time() - start
        best = min(best, spent)
    return best / max(n, 1) * 1e3


def clear_engine_caches() -> None:
    """Empty every functools cache of stepbill's modules (param inventory, holdings, rows …): each repeat then
    starts as a planner does on its first candidates of a layout."""
    for name, module in list(sys.modules.items()):
        if name.startswith("stepbill"):
            for obj in list(vars(module).values()):
                if callable(getattr(obj, "cache_clear", None)):
                    obj.cache_clear()


def ms_per_candidate(req: PlanRequest, cands: list[Candidate], repeat: int = 1) -> float:
    """CPU milliseconds per `evaluate` call over the sample (each candidate once, as the planner does), the best
    of `repeat` passes, each from empty caches (the machine is shared: the minimum is the least disturbed)."""
    best = float("inf")
    for _ in range(repeat):
        clear_engine_caches()
        start = time.process_time()
        for cand in cands:
            with contextlib.suppress(StepbillError):
                evaluate(req, cand)
        best = min(best, time.process_time() - start)
    return best / max(len(cands), 1) * 1e3


def ms_time_path(req: PlanRequest, cands: list[Candidate], repeat: int = 1) -> float:
    """CPU ms per candidate of step_collectives + step_time with the GPU (the time path of the ideal bill), each
    candidate after its eager verdict and its ideal bill without the GPU (untimed); from empty caches, best of
    `repeat` passes."""
    best = float("inf")
    for _ in range(repeat):
        clear_engine_caches()
        spent, timed = 0.0, 0
        for cand in cands:
            try:
                recipe = recipe_for(req, cand)
                with contextlib.suppress(StepbillError):
                    verdict_ranks(req.spec, recipe, "eager", "sdpa")
                bill = make_bill(req.spec, recipe, req.gpu.usable_bytes, "ideal", "sdpa")
            except StepbillError:
                continue
            start = time.process_time()
            collectives = step_collectives(req.spec, recipe, bill.inventory, req.gpu)
            step_time(req.spec, bill.inventory, recipe, bill.worst_rank, collectives, req.gpu, bill.lines,
                      req.efficiency, plan=bill.plan)
            spent += time.process_time() - start
            timed += 1
        best = min(best, spent / max(timed, 1))
    return best * 1e3


def main() -> None:
    with contextlib.suppress(ImportError):  # the budget solver's first import (≈1.4 s) is not a bill's cost
        import scipy.optimize  # noqa: F401
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--profile", action="store_true", help="print cProfile's top functions by tottime and cumtime")
    ap.add_argument("--only", choices=list(REQUESTS), action="append")
    ap.add_argument("--time-path", action="store_true", help="time step_collectives + step_time alone (see above)")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3, help="passes over the sample (the best is reported)")
    args = ap.parse_args()
    for name in args.only or list(REQUESTS):
        req = request(name)
        cands = sample_candidates(req, args.sample)
        if args.time_path:
            in_order = [c for _, group in sample_groups(req, args.sample) for c in group]
            for label, sample in (("random candidates", cands), ("candidates in the planner's order", in_order)):
                print(f"{name:>12}: {ms_time_path(req, sample, args.repeat):6.3f} ms per candidate for the time path "
                      f"({len(sample)} {label}, CPU time, best of {args.repeat} from empty caches)")
            continue
        if not args.profile:
            print(f"{name:>12}: {ms_per_candidate(req, cands, args.repeat):6.2f} ms per candidate (eager + ideal bills, "
                  f"{len(cands)} random candidates, CPU time, best of {args.repeat} from empty caches)")
            groups = sample_groups(req, args.sample)
            print(f"{name:>12}: {ms_planner_order(req, groups, args.repeat):6.2f} ms per candidate in the planner's "
                  f"order ({sum(len(c) for _, c in groups)} candidates of {len(groups)} whole groups, each after its "
                  "resident bound)")
            continue
        prof = cProfile.Profile()
        prof.enable()
        ms_per_candidate(req, cands)
        prof.disable()
        print_profile(prof, name, args.top)


def print_profile(prof: cProfile.Profile, name: str, top: int) -> None:
    """cProfile's `top` functions by own and by cumulative time, headed by `name`."""
    for key in ("tottime", "cumtime"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(key).print_stats(top)
        print(f"--- {name}, by {key} ---")
        print("\n".join(out.getvalue().splitlines()[6:]))


if __name__ == "__main__":
    main()
