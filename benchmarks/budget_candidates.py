"""Milliseconds per budget candidate of `stepbill plan` (recompute = the budget solver at the rank's free memory), and
the share of them spent in the solver's MILP (HiGHS).

For each request (Llama-3-70B × 64 H100, seq 8,192, 4,194,304-token batch; DeepSeek-V3 × 2,048 H100, seq 4,096,
3,840 × 4,096-token batch) the space is enumerated, the candidates the exact resident bound leaves are shuffled (seed
0) and the first N budget candidates taken; each goes through what engine/plan/search._decide does (resolve_recompute,
budget_drops_nothing, evaluate). Reported: CPU ms per candidate (process time, one core) and the MILP's share.

Run: python benchmarks/budget_candidates.py [--sample N] [--only NAME]. Compare with another checkout:
PYTHONPATH=<its src> python benchmarks/budget_candidates.py.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import time

from stepbill.engine.plan import PlanRequest
from stepbill.engine.plan.axes import BUDGET_AT_FREE
from stepbill.engine.plan.evaluate import budget_drops_nothing, evaluate, resolve_recompute
from stepbill.engine.plan.resident import budget_bytes, resident_bound
from stepbill.engine.plan.space import Candidate, Rejections, enumerate_space
from stepbill.engine.recompute import budget as solver
from stepbill.errors import StepbillError
from stepbill.spec.hardware import load_gpu
from stepbill.spec.presets import load_model

#: name → (model, gpus, seq, global batch tokens), on H100 SXM
REQUESTS = {
    "llama3-70b": ("llama3-70b", 64, 8192, 4_194_304),
    "deepseek-v3": ("deepseek-v3", 2048, 4096, 3840 * 4096),
}


def budget_sample(req: PlanRequest, n: int) -> list[Candidate]:
    """The first n budget candidates of the shuffled (seed 0) candidates the resident bound leaves."""
    survivors = []
    for g in enumerate_space(req, Rejections()):
        budget = budget_bytes(req, g.holdings_layout)
        if resident_bound(req, g.holdings_layout, g.offload_optimizer, budget) <= budget:
            survivors += [(g, v) for v in g.variants if v[-1] == BUDGET_AT_FREE]
    random.Random(0).shuffle(survivors)
    out: list[Candidate] = []
    for g, v in survivors:
        if len(out) == n:
            break
        with contextlib.suppress(StepbillError):
            out.append(g.candidate(v))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sample", type=int, default=100, help="budget candidates per request")
    parser.add_argument("--only", choices=sorted(REQUESTS), default=None)
    args = parser.parse_args()
    import scipy.optimize  # noqa: F401  (the solver's import, about 1.4 s, outside the timing)

    milp_s = [0.0]
    solve = solver.solve_milp

    def timed(problem: solver.Problem) -> solver.Solution:
        start = time.process_time()
        try:
            return solve(problem)
        finally:
            milp_s[0] += time.process_time() - start

    solver.solve_milp = timed
    for name, (model, gpus, seq, batch) in REQUESTS.items():
        if args.only not in (None, name):
            continue
        req = PlanRequest(load_model(model), load_gpu("h100-sxm"), "h100-sxm", (gpus,), seq, model,
                          global_batch_tokens=batch)
        cands = budget_sample(req, args.sample)
        milp_s[0] = 0.0
        start = time.process_time()
        for cand in cands:  # what search._decide does with each candidate
            with contextlib.suppress(StepbillError):
                resolved = resolve_recompute(req, cand)
                if not budget_drops_nothing(req, resolved):
                    evaluate(req, resolved)
        spent = time.process_time() - start
        print(f"{name} × {gpus:,} H100: {len(cands)} budget candidates, {spent / len(cands) * 1e3:.1f} ms each "
              f"(CPU), {milp_s[0] / spent:.0%} of it in the MILP (HiGHS)")


if __name__ == "__main__":
    main()
