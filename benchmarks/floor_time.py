"""CPU milliseconds per step-time floor of the planner (engine/plan/bounds.py: time_floor, budget_floor), on the
planner's own candidates in its own order.

For each request (Llama-3-70B × 64 H100, seq 8,192, 512 × 8,192-token batch; DeepSeek-V3 × 2,048 H100, seq 4,096,
3,840 × 4,096-token batch) the space is enumerated (engine/plan/space.py), the groups whose resident bound fits
(partition.resident_fits) are shuffled (seed 0) and taken whole until they hold `--sample` candidates, and each
candidate gets its time floor (an explicit policy) or its budget floor (budget at free memory), as
floor_pass.floors calls them (a variant's activation-offload twin reuses its floor), from empty caches. The
resident bounds and recipes are not timed. Reported: CPU ms (time.process_time) per time floor and per budget
floor, best of `--repeat` passes — cold (every stepbill cache emptied first: what a planner pays on layouts it has
not seen) and warm (only the floors' own memo emptied: the step-time arithmetic itself, every engine cache hit). `--dump FILE` writes every floor (JSON) so that two checkouts can be compared
number for number; `--profile` prints cProfile's top functions of one pass.

Run: python benchmarks/floor_time.py [--sample N] [--repeat N] [--dump FILE] [--profile] [--only NAME]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import random
import time

from bill_profile import clear_engine_caches, print_profile

from stepbill.engine.plan import PlanRequest
from stepbill.engine.plan.axes import BUDGET_AT_FREE
from stepbill.engine.plan.bounds import empty_rank_time, time_floor
from stepbill.engine.plan.budget_bound import budget_floor
from stepbill.engine.plan.evaluate import recipe_for
from stepbill.engine.plan.partition import resident_fits
from stepbill.engine.plan.space import Candidate, Rejections, enumerate_space
from stepbill.errors import StepbillError
from stepbill.spec.hardware import load_gpu
from stepbill.spec.presets import load_model

#: name → (model, gpu, gpus, seq, global batch tokens)
REQUESTS = {
    "llama3-70b": ("llama3-70b", "h100-sxm", 64, 8192, 512 * 8192),
    "deepseek-v3": ("deepseek-v3", "h100-sxm", 2048, 4096, 3840 * 4096),
}


def request(name: str) -> PlanRequest:
    model, gpu, gpus, seq, batch = REQUESTS[name]
    return PlanRequest(load_model(model), load_gpu(gpu), gpu, (gpus,), seq, model, global_batch_tokens=batch)


def sample(req: PlanRequest, n: int) -> list[list[tuple[tuple, Candidate]]]:
    """Whole groups whose resident bound fits, shuffled (seed 0), until they hold n candidates: per group its
    (variant, candidate) pairs in the planner's order."""
    groups = [g for g in enumerate_space(req, Rejections()) if resident_fits(req, g) is not None]
    random.Random(0).shuffle(groups)
    out, count = [], 0
    for g in groups:
        if count >= n:
            break
        pairs = []
        for v in g.variants:
            with contextlib.suppress(StepbillError):
                pairs.append((v, g.candidate(v)))
        out.append(pairs)
        count += len(pairs)
    return out


def one_pass(req: PlanRequest, groups: list[list[tuple[tuple, Candidate]]],
             cold: bool = True) -> tuple[float, int, float, int, list]:
    """(CPU s in time floors, their count, CPU s in budget floors, their count, every floor in order), from empty
    caches (`cold`) or with only the floors' memo (bounds.empty_rank_time) emptied."""
    if cold:
        clear_engine_caches()
    else:
        empty_rank_time.cache_clear()
    t_time = t_budget = 0.0
    n_time = n_budget = 0
    values: list = []
    for pairs in groups:
        steps: dict[tuple, float] = {}
        for variant, cand in pairs:
            if cand.recompute == BUDGET_AT_FREE:
                start = time.process_time()
                step = budget_floor(req, cand)
                t_budget += time.process_time() - start
                n_budget += 1
            else:
                recipe = recipe_for(req, cand)
                twin = (*variant[:3], False, *variant[4:])
                if twin in steps:
                    step = steps[twin]
                else:
                    start = time.process_time()
                    step = time_floor(req, cand, recipe)
                    t_time += time.process_time() - start
                    n_time += 1
                steps[variant] = step
            values.append([repr(cand), step.hex()])
    return t_time, n_time, t_budget, n_budget, values


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sample", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=list(REQUESTS), action="append")
    ap.add_argument("--dump", help="write every floor (float.hex) to this JSON file")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    dump = {}
    for name in args.only or list(REQUESTS):
        req = request(name)
        groups = sample(req, args.sample)
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            one_pass(req, groups)
            prof.disable()
            print_profile(prof, name, args.top)
            continue
        for cold in (True, False):
            best_t = best_b = float("inf")
            for _ in range(args.repeat):
                t_time, n_time, t_budget, n_budget, values = one_pass(req, groups, cold)
                best_t, best_b = min(best_t, t_time / max(n_time, 1)), min(best_b, t_budget / max(n_budget, 1))
            dump[name] = values
            print(f"{name:>12}: {best_t * 1e3:6.3f} ms per time floor ({n_time}), {best_b * 1e3:6.3f} ms per budget "
                  f"floor ({n_budget}); {len(groups)} groups, CPU time, best of {args.repeat}, "
                  + ("from empty caches" if cold else "engine caches warm"))
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump(dump, f, indent=0)


if __name__ == "__main__":
    main()
