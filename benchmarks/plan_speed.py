"""How fast `stepbill plan` decides layouts: candidates evaluated per second (full bills and exact-bound decisions),
on one core, and what DeepSeek-V3 on 2,048 GPUs with the whole space would take.

Run: python benchmarks/plan_speed.py [--deepseek-sample N]. The issue's target is 100,000 layouts/s and the whole
DeepSeek-V3 × 2,048-GPU space in under 5 s; this prints the real figures. Each plan request is searched twice, billing
every candidate (--exhaustive) and by branch and bound (the default), with the check that both give the same top 10
and fronts. The DeepSeek-V3 figure is measured in parts: the space's enumeration and the exact resident bound over
every group (measured in full), then the bills and the floors of a random sample of the remaining candidates, timed
after as many others warmed the caches a long search keeps warm (their rates measured, the totals extrapolated and
labelled so; branch and bound's own bills are not extrapolated). --deepseek-whole searches that whole space instead.
llm-analysis (`pip install llm-analysis` in its own venv, `--llm-analysis-python PATH`) is timed per layout in the
same run, in that interpreter.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import random
import time

from stepbill.engine.plan import PlanRequest, search
from stepbill.engine.plan.branch_bound import sharpen
from stepbill.engine.plan.evaluate import budget_drops_nothing, evaluate, resolve_recompute
from stepbill.engine.plan.floor_pass import floors
from stepbill.engine.plan.resident import budget_bytes, resident_bound
from stepbill.engine.plan.space import Group, Rejections, enumerate_space
from stepbill.errors import StepbillError
from stepbill.spec.hardware import load_gpu
from stepbill.spec.presets import load_model


def plan_rate(model: str, gpu: str, gpus: int, seq: int, batch_tokens: int, fix: tuple = (), jobs: int = 1) -> None:
    """The same request searched exhaustively and by branch and bound (the default): rates and bills, and whether
    the two give the same top 10 and fronts."""
    req = PlanRequest(load_model(model), load_gpu(gpu), gpu, (gpus,), seq, model, global_batch_tokens=batch_tokens,
                      fixed=fix)
    results = {}
    for exhaustive in (True, False):
        result = search(req, "time", 10, jobs=jobs, exhaustive=exhaustive)
        results[exhaustive] = result
        s = result.stats
        mode = "exhaustive" if exhaustive else "branch and bound"
        print(f"{model:>14} on {gpus:>5,} × {gpu}, {mode:>16}: {s.evaluated:>7,} evaluated in {s.cpu_seconds:7.2f} "
              f"CPU-s = {s.layouts_per_cpu_s:9,.0f} layouts/CPU-s ({s.seconds:.2f} s wall-clock in {s.jobs} process"
              f"{'es' if s.jobs > 1 else ''}; {s.by_bill:,} by bill, {s.by_bound:,} by a memory bound, "
              f"{s.by_floor:,} by the floors)")
    same = all([r.command for r in getattr(results[True], k)] == [r.command for r in getattr(results[False], k)]
               for k in ("top", "gpus_vs_time", "memory_vs_time"))
    speedup = results[True].stats.cpu_seconds / max(results[False].stats.cpu_seconds, 1e-9)
    print(f"{'':>14}   branch and bound: {speedup:.1f}× less CPU, same top 10 and fronts: {same}")


def deepseek_2048(sample: int) -> None:
    spec = load_model("deepseek-v3")
    req = PlanRequest(spec, load_gpu("h100-sxm"), "h100-sxm", (2048,), 4096, "deepseek-v3",
                      global_batch_tokens=3840 * 4096)
    start = time.process_time()
    rejected = Rejections()
    groups = list(enumerate_space(req, rejected))
    enumerated = time.process_time() - start
    survivors: list[tuple[Group, float]] = []
    pruned = 0
    for g in groups:
        budget = budget_bytes(req, g.holdings_layout)
        bound = resident_bound(req, g.holdings_layout, g.offload_optimizer, budget)
        if bound > budget:
            pruned += len(g.variants)
        else:
            survivors.append((g, bound))
    bounded = time.process_time() - start
    left = sum(len(g.variants) for g, _ in survivors)
    ends = list(itertools.accumulate(len(g.variants) for g, _ in survivors))
    rng = random.Random(0)
    drawn = []
    for index in rng.sample(range(left), min(2 * sample, left)):  # uniform over the candidates left, not the groups
        k = bisect.bisect_right(ends, index)
        group, bound = survivors[k]
        drawn.append((group, group.variants[index - (ends[k - 1] if k else 0)], bound))
    # The first half warms what a long search has warm after its first candidates (the budget solver's staircase of
    # each micro-batch, the one-GPU plans and FLOPs lines): its cost is paid once per search, not per candidate.
    warm, picked = drawn[:sample], drawn[sample:]
    for g, v, bound in warm:
        with contextlib.suppress(StepbillError):
            cand = resolve_recompute(req, g.candidate(v))
            if not budget_drops_nothing(req, cand):
                evaluate(req, cand)
            floors(req, [(0, _one(g, v), bound)], "time", None)
    t0 = time.process_time()
    for g, v, _ in picked:  # what search._decide does with each candidate (exhaustive)
        with contextlib.suppress(StepbillError):  # a variant that breaks a layout rule costs nothing
            cand = resolve_recompute(req, g.candidate(v))
            if not budget_drops_nothing(req, cand):
                evaluate(req, cand)
    per_bill = (time.process_time() - t0) / max(len(picked), 1)
    t0 = time.process_time()
    leads = []
    for g, v, bound in picked:  # what floor_pass.floors does with each candidate: its time floor
        with contextlib.suppress(StepbillError):
            one = _one(g, v)
            leads.append((one, floors(req, [(0, one, bound)], "time", None).leads))
    t1 = time.process_time()
    for one, found in leads:  # the exact peak floor bill_in_order computes for a lead it cannot skip (at most all)
        for lead in found:
            if not lead[6]:
                sharpen(req, [one], lead, "time")
    per_floor = (time.process_time() - t0) / max(len(picked), 1)
    per_sharpen = (time.process_time() - t1) / max(len(picked), 1)
    ruled = sum(rejected.counts.values())
    print(f"DeepSeek-V3 on 2,048 H100 (seq 4,096, 15.7M-token batch, whole space): {ruled + pruned + left:,} "
          f"candidates; {ruled:,} cut by the stated rules, enumerated in {enumerated:.1f} CPU-s; {pruned:,} decided by "
          f"the exact resident bound by {bounded:.1f} CPU-s; {left:,} left (uniform sample of {len(picked)}, after "
          f"{len(warm)} others warmed the caches): "
          f"exhaustive, bills at {per_bill * 1e3:.1f} ms each → about {bounded + per_bill * left:,.0f} CPU-s in all; "
          f"branch and bound, floors at {per_floor * 1e3:.2f} ms each (the time floor, and the exact peak floor "
          f"{per_sharpen * 1e3:.2f} ms, counted for every candidate though most are skipped on the resident bound) → "
          f"at most about {bounded + per_floor * left:,.0f} CPU-s before its bills (extrapolated)")


def deepseek_2048_whole(jobs: int) -> None:
    """The whole DeepSeek-V3 × 2,048-GPU space searched by branch and bound, measured, not extrapolated."""
    spec = load_model("deepseek-v3")
    req = PlanRequest(spec, load_gpu("h100-sxm"), "h100-sxm", (2048,), 4096, "deepseek-v3",
                      global_batch_tokens=3840 * 4096)
    result = search(req, "time", 10, jobs=jobs)
    s = result.stats
    best = result.best
    print(f"DeepSeek-V3 on 2,048 H100, whole space, branch and bound: {s.candidates:,} candidates, {s.evaluated:,} "
          f"evaluated ({s.by_bound:,} by a memory bound, {s.by_floor:,} by the floors, {s.by_bill:,} by bill) in "
          f"{s.cpu_seconds:,.0f} CPU-s ({s.seconds:,.0f} s wall-clock in {s.jobs} process"
          f"{'es' if s.jobs > 1 else ''}) = {s.layouts_per_cpu_s:,.0f} layouts/CPU-s; best "
          f"{best.step_s if best else float('nan'):.2f} s per step: {best.command if best else '-'}")


def _one(group: Group, variant: tuple) -> Group:
    """The group cut to one variant (what `floors` takes)."""
    return Group(group.holdings_layout, group.offload_optimizer, [variant])  # type: ignore[list-item]


def warm_up_solver() -> None:
    """Import scipy's MILP once before timing (the budget policy's solver; its import alone is about 1.4 s)."""
    with contextlib.suppress(ImportError):
        import scipy.optimize  # noqa: F401


#: llm-analysis's train() for one layout (Llama-2-7B from its own config table, 8 × A100 80GB, ZeRO-3, seq 2048),
#: timed in its own interpreter (it pins its own transformers); prints CPU seconds per layout.
PEER_SNIPPET = """
import contextlib, io, time
from llm_analysis.analysis import train
def run():
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        train(model_name="NousResearch_Llama-2-7b-hf", gpu_name="a100-sxm-80gb", seq_len=2048,
              batch_size_per_gpu=1, total_num_gpus=8, ds_zero=3, activation_recomputation=2,
              flops_efficiency=0.5, log_level="ERROR")
run()
start, n = time.process_time(), 50
for _ in range(n):
    run()
print((time.process_time() - start) / n)
"""


def llm_analysis_rate(python: str | None) -> None:
    """llm-analysis's per-layout rate, measured now in the interpreter `python` (its own venv: pip install
    llm-analysis), so the two rates come from the same run on the same machine."""
    if python is None:
        print("llm-analysis: give --llm-analysis-python PATH (a venv with pip install llm-analysis) for its rate")
        return
    import os
    import subprocess

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    out = subprocess.run([python, "-c", PEER_SNIPPET], capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        print(f"llm-analysis: failed in {python}: {out.stderr.strip().splitlines()[-1] if out.stderr else '?'}")
        return
    seconds = float(out.stdout.strip().splitlines()[-1])
    print(f"llm-analysis train() (Llama-2-7B, 8 × A100, ZeRO-3; one layout per call): {1 / seconds:,.0f} layouts/CPU-s "
          f"({seconds * 1e3:.2f} ms each; a closed-form estimate with no timeline and no eager terms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deepseek-sample", type=int, default=100, help="bills sampled for the DeepSeek-V3 figure")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes for the plan rates (wall-clock)")
    parser.add_argument("--deepseek-whole", action="store_true",
                        help="also search the whole DeepSeek-V3 × 2,048 space (tens of CPU-minutes)")
    parser.add_argument("--llm-analysis-python", default=None, help="python of a venv with llm-analysis installed")
    args = parser.parse_args()
    warm_up_solver()
    plan_rate("gpt3-125m", "h100-sxm", 8, 2048, 64 * 2048, jobs=args.jobs)
    plan_rate("llama3-8b", "h100-sxm", 8, 8192, 64 * 8192, (("schedule", "1f1b"), ("zero", 1)), jobs=args.jobs)
    plan_rate("llama3-70b", "h100-sxm", 64, 8192, 512 * 8192, (("offload_activations", False),
                                                                ("offload_optimizer", False), ("schedule", "1f1b")),
              jobs=args.jobs)
    deepseek_2048(args.deepseek_sample)
    if args.deepseek_whole:
        deepseek_2048_whole(args.jobs)
    llm_analysis_rate(args.llm_analysis_python)


if __name__ == "__main__":
    main()
