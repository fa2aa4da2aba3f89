"""`stepbill plan`: the planner's best equals the best of brute-force `bill` calls for every objective (dense, MoE,
MLA); every printed row's command reproduces its numbers; the exact resident bound never rejects a layout that
fits; the CLI, the API and the JSON schema agree; bad input is one line, exit 2."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import shlex

import pytest

from stepbill.api import make_step_bill
from stepbill.engine.plan import PlanRequest, parse_fix, search
from stepbill.engine.plan.evaluate import bill_options, budget_drops_nothing, resolve_recompute
from stepbill.engine.plan.resident import resident_bound
from stepbill.engine.plan.space import Rejections, enumerate_space
from stepbill.spec.hardware import load_gpu
from stepbill.spec.model import ModelSpec
from stepbill.spec.presets import load_preset
from tests.conftest import run_cli

GIB = 2**30


def small_moe() -> ModelSpec:
    """Mixtral-8x7B cut to 2 layers: 8 experts, top-2, GQA."""
    return dataclasses.replace(load_preset("mixtral-8x7b"), n_layers=2)


def small_mla() -> ModelSpec:
    """DeepSeek-V3 cut to 3 layers (one dense, two MoE) and 16 routed experts: MLA attention, shared expert."""
    spec = load_preset("deepseek-v3")
    moe = dataclasses.replace(spec.moe, n_routed_experts=16, dense_layers=(0,))
    return dataclasses.replace(spec, n_layers=3, moe=moe)


def request(spec: ModelSpec, gpu: str, gpus: int, seq: int, batch: int, fix: dict) -> PlanRequest:
    return PlanRequest(spec, load_gpu(gpu), gpu, (gpus,), seq, spec.name, global_batch_tokens=batch,
                       fixed=parse_fix(fix))


CASES = {
    # dense: resident states overflow a 24 GB card without sharding (the bound decides those), peaks reject more
    "dense": (lambda: load_preset("gpt3-1.3b"), "rtx-4090", 2, 2048, 8 * 2048,
              {"schedule": "1f1b", "offload_activations": False, "recompute": "none"}),
    "moe": (small_moe, "a100-40gb", 4, 4096, 8 * 4096,
            {"schedule": "1f1b", "offload_activations": False, "offload_optimizer": False, "sp": False,
             "recompute": "full"}),
    "mla": (small_mla, "l40s", 4, 4096, 8 * 4096,
            {"schedule": "1f1b", "offload_activations": False, "offload_optimizer": False, "sp": False,
             "zero": 1}),
    # pipelines: GPipe, interleaved at v 2, 3 and 6, the second stage split (2, 4, 4, 2), every:K, the budget
    "pipeline": (lambda: load_preset("gpt3-125m"), "rtx-4090", 4, 2048, 16 * 2048,
                 {"tp": 1, "cp": 1, "zero": 1, "sp": False, "offload_activations": False,
                  "offload_optimizer": False}),
}
#: The newer axes each case's space must hold (so the brute-force equality covers them).
COVERS = {"moe": {"etp"}, "mla": {"etp", "every", "budget"},
          "pipeline": {"gpipe", "vpp>2", "pp_layers", "every", "budget"}}


def features(req: PlanRequest) -> set[str]:
    """The newer axes present in a request's space: etp > 1, GPipe, more than 2 chunks, an explicit stage split,
    every:K and the budget."""
    out: set[str] = set()
    for group in enumerate_space(req, Rejections()):
        par = group.holdings_layout
        out |= {name for name, on in (("etp", par.expert_tp > 1), ("gpipe", par.pp_schedule == "gpipe"),
                                      ("vpp>2", par.vpp > 2), ("pp_layers", par.pp_layers is not None)) if on}
        out |= {v[4].split(":")[0] for v in group.variants} & {"every", "budget"}
    return out


@pytest.mark.parametrize("case", sorted(COVERS))
def test_brute_force_cases_cover_the_newer_axes(case: str) -> None:
    make, gpu, gpus, seq, batch, fix = CASES[case]
    assert COVERS[case] <= features(request(make(), gpu, gpus, seq, batch, fix))


def brute_force(req: PlanRequest) -> list[dict]:
    """Every candidate of the space through `stepbill.bill`'s own path (make_step_bill), no bound, no planner."""
    rows = []
    for group in enumerate_space(req, Rejections()):
        for cand in group.candidates:
            run = make_step_bill(req.spec, **bill_options(req, cand))
            assert run.fit is not None
            step = run.bill.time["time.step"].value  # type: ignore[index]
            rows.append({"fits": run.fit.fits, "peak": run.fit.worst.peak_bytes, "step": step,
                         "gpus": cand.parallel.world,
                         "cost": step * cand.parallel.world / run.bill.recipe.tokens_per_step,
                         "twin": budget_drops_nothing(req, resolve_recompute(req, cand))})
    return rows


BEST = {  # the objective's value of a row, minimised (ties on it broken by step time)
    "time": lambda r: (r["step"],),
    "gpus": lambda r: (r["gpus"], r["step"]),
    "cost": lambda r: (r["cost"], r["step"]),
    "memory": lambda r: (r["peak"], r["step"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_best_equals_brute_force_for_every_objective(case: str) -> None:
    make, gpu, gpus, seq, batch, fix = CASES[case]
    req = request(make(), gpu, gpus, seq, batch, fix)
    truth = brute_force(req)
    fitting = [r for r in truth if r["fits"]]
    assert fitting and len(fitting) < len(truth), "the case should have layouts that fit and layouts that do not"
    for objective, key in BEST.items():
        result = search(req, objective, 3, exhaustive=True)
        twins = sum(r["twin"] for r in truth)  # budgets that drop nothing: their `none` twin stands for them
        assert len(result.rows) == sum(r["fits"] and not r["twin"] for r in truth)
        assert result.stats.evaluated == len(truth) - twins
        assert result.stats.rejected.get("budget_drops_nothing", 0) == twins
        # branch and bound: the same top K and fronts, every candidate accounted for, fewer bills
        pruned = search(req, objective, 3)
        assert [r.command for r in pruned.top] == [r.command for r in result.top], objective
        for front in ("gpus_vs_time", "memory_vs_time"):
            assert [r.command for r in getattr(pruned, front)] == [r.command for r in getattr(result, front)]
        assert pruned.stats.evaluated + pruned.stats.rejected.get("budget_drops_nothing", 0) == len(truth)
        assert pruned.stats.by_bill <= result.stats.by_bill
        for run in (result, pruned):
            best = run.best
            assert best is not None
            mine = {"time": (best.step_s,), "gpus": (best.world, best.step_s),
                    "cost": (best.gpu_seconds_per_token, best.step_s), "memory": (best.peak_bytes, best.step_s)}
            assert mine[objective] == pytest.approx(min(key(r) for r in fitting), rel=1e-12), objective


def test_small_dense_plan_matches_brute_force_and_counts_every_candidate() -> None:
    req = request(load_preset("gpt3-125m"), "h100-sxm", 2, 1024, 8 * 1024,
                  {"schedule": "1f1b", "offload_activations": False, "offload_optimizer": False, "zero": 1,
                   "sp": False})
    result = search(req, "time", 5)
    truth = brute_force(req)
    assert result.stats.candidates == len(truth) + sum(
        n for k, n in result.stats.rejected.items()
        if k not in ("peak_over_budget", "resident_over_budget", "budget_drops_nothing", "outranked"))
    assert result.best is not None
    assert result.best.step_s == pytest.approx(min(r["step"] for r in truth if r["fits"]), rel=1e-12)


@pytest.mark.slow
def test_resident_bound_never_exceeds_a_peak() -> None:
    """The bound the search prunes with (the largest stage's resident bytes) is below the worst rank class's peak,
    eager (what the verdict judges) and ideal, and each stage's resident bytes below that stage's peak, on random
    layouts."""
    rng = random.Random(12)
    for make, gpu, gpus, seq, batch, _ in CASES.values():
        req = request(make(), gpu, gpus, seq, batch, {})
        groups = list(enumerate_space(req, Rejections()))
        for group in rng.sample(groups, min(6, len(groups))):
            bound = resident_bound(req, group.holdings_layout, group.offload_optimizer)
            for cand in rng.sample(group.candidates, min(3, len(group.candidates))):
                run = make_step_bill(req.spec, **bill_options(req, cand))
                assert run.fit is not None
                assert bound <= max(r.peak_bytes for r in run.fit.ranks) * (1 + 1e-12)
                assert bound <= max(c.memory["peak"] for c in run.bill.ranks) * (1 + 1e-12)
                for rank_class in run.bill.ranks:
                    assert rank_class.memory["resident"] <= rank_class.memory["peak"] * (1 + 1e-12)


def test_printed_commands_reproduce_peak_and_step_time(capsys: pytest.CaptureFixture[str]) -> None:
    """Random rows of a plan, run as `stepbill bill … --json`: the same judged peak, headroom and step time."""
    code, out, err = run_cli(["plan", "gpt3-125m", "--gpu", "a100-40gb", "--gpus", "4", "--seq", "2048",
                              "--global-batch-tokens", "32Ki", "--fix", "schedule=interleaved,offload_activations=off",
                              "--fix", "zero=1,sp=on,micro_batch=1", "--top", "50", "--json"], capsys)
    assert code == 0, err
    plan = json.loads(out)
    rows = random.Random(7).sample(plan["top"], 4)
    for row in rows:
        argv = shlex.split(row["command"])
        assert argv[:2] == ["stepbill", "bill"]
        code, out, err = run_cli([*argv[1:], "--json"], capsys)
        assert code == 0, err
        bill = json.loads(out)
        fit = bill["fit"]
        worst = min(fit["ranks"], key=lambda r: r["headroom_bytes"])
        assert worst["peak_bytes"] == row["peak_bytes"]
        assert worst["headroom_bytes"] == row["headroom_bytes"]
        assert bill["time"]["step"]["value"] == pytest.approx(row["step_s"], rel=1e-12)


NEWER_AXES = {"etp": "--etp ", "gpipe": "--pp-schedule gpipe", "vpp>2": "--vpp 3", "pp_layers": "--pp-layers ",
              "every": "--recompute every:", "budget": "--recompute budget:"}


@pytest.mark.parametrize("argv", [
    ["gpt3-350m", "--gpu", "rtx-4090", "--gpus", "4", "--seq", "2048", "--global-batch-tokens", "64Ki",
     "--fix", "tp=1,cp=1,zero=1,micro_batch=8,offload_optimizer=off,offload_activations=off"],
    ["mixtral-8x7b", "--gpu", "h100", "--gpus", "8", "--seq", "4096", "--global-batch-tokens", "32Ki",
     "--fix", "tp=2,pp=1,cp=1,zero=3,sp=on,micro_batch=1,offload_optimizer=on,offload_activations=off,recompute=full"],
], ids=["pipeline-recompute", "moe-etp"])
def test_printed_commands_reproduce_the_newer_axes(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """One row per newer axis present (etp, GPipe, 3 chunks, an explicit stage split, every:K, the budget), its
    command run as `stepbill bill … --json`: the same judged peak, headroom and step time."""
    code, out, err = run_cli(["plan", *argv, "--top", "500", "--json"], capsys)
    assert code == 0, err
    rows = json.loads(out)["top"]
    picked = {axis: next(r for r in rows if flag in r["command"]) for axis, flag in NEWER_AXES.items()
              if any(flag in r["command"] for r in rows)}
    assert set(picked) >= ({"etp"} if "mixtral-8x7b" in argv else {"gpipe", "vpp>2", "pp_layers", "every", "budget"})
    for row in picked.values():
        code, out, err = run_cli([*shlex.split(row["command"])[1:], "--json"], capsys)
        assert code == 0, err
        bill = json.loads(out)
        worst = min(bill["fit"]["ranks"], key=lambda r: r["headroom_bytes"])
        assert (worst["peak_bytes"], worst["headroom_bytes"]) == (row["peak_bytes"], row["headroom_bytes"])
        assert bill["time"]["step"]["value"] == pytest.approx(row["step_s"], rel=1e-12)


def test_plan_json_is_schema_valid_and_equals_the_api(capsys: pytest.CaptureFixture[str]) -> None:
    import stepbill
    from stepbill.report.schema import validate

    argv = ["plan", "gpt3-125m", "--gpu", "h100", "--gpus", "2", "--seq", "1024", "--global-batch-tokens", "8Ki",
            "--fix", "zero=1,schedule=1f1b,offload_activations=off,offload_optimizer=off,recompute=none",
            "--top", "3", "--train-tokens", "1B", "--price-per-gpu-hour", "2", "--json"]
    code, out, err = run_cli(argv, capsys)
    assert code == 0 and not err
    data = json.loads(out)
    validate("plan", data)
    api = stepbill.plan("gpt3-125m", gpu="h100", gpus=2, seq=1024, global_batch_tokens="8Ki", top=3,
                        fix="zero=1,schedule=1f1b,offload_activations=off,offload_optimizer=off,recompute=none",
                        train_tokens="1B", price_per_gpu_hour=2).to_json()
    for part in (data, api):
        part["search"].pop("seconds")
        for key in ("layouts_per_s", "cpu_seconds", "layouts_per_cpu_s"):
            part["search"].pop(key)
    assert api == data
    assert data["top"][0]["run"]["cost"] > 0 and data["search"]["evaluated"] >= data["fits"]


def test_terminal_output_has_table_fronts_rejections_and_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["plan", "gpt3-125m", "--gpu", "h100", "--max-gpus", "2", "--seq", "1024",
                            "--global-batch-tokens", "8Ki", "--fix", "zero=1,schedule=1f1b,offload_activations=off",
                            "--fix", "offload_optimizer=off,recompute=none,sp=off", "--top", "2"], capsys)
    assert code == 0
    for text in ("Top 2 by time", "Pareto front: GPUs vs step time", "Pareto front: per-GPU peak vs step time",
                 "rejected", "stepbill bill gpt3-125m --seq 1024", "search:"):
        assert text in out, text


@pytest.mark.parametrize("argv, message", [
    (["--gpu", "h100", "--seq", "1024", "--micro-batch", "1"], "give --gpus or --max-gpus"),
    (["--gpu", "h100", "--gpus", "2", "--seq", "1024"], "give --global-batch-tokens or --micro-batch"),
    (["--gpu", "h100", "--gpus", "2", "--seq", "1024", "--micro-batch", "1", "--objective", "speed"], "objective"),
    (["--gpu", "h100", "--gpus", "2", "--seq", "1024", "--micro-batch", "1", "--fix", "tq=2"], "unknown axis"),
    (["--gpu", "h100", "--gpus", "2", "--seq", "1024", "--micro-batch", "1", "--fix", "zero=7"], "0, 1, 2 or 3"),
    (["--gpu", "h9000", "--gpus", "2", "--seq", "1024", "--micro-batch", "1"], "gpu"),
    (["--gpu", "h100", "--gpus", "2", "--seq", "1000", "--global-batch-tokens", "4Ki"], "whole number of sequences"),
    (["--gpu", "h100", "--gpus", "2", "--seq", "1024", "--micro-batch", "1", "--max-seconds", "-1"], "--max-seconds"),
    (["--gpu", "h100", "--gpus", "2", "--seq", "1024", "--micro-batch", "1", "--jobs", "0"], "--jobs"),
])
def test_bad_input_is_one_line_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["plan", "gpt3-125m", *argv], capsys)
    assert code == 2 and not out and message in err and err.count("\n") == 1


def test_progress_bar_writes_one_line_to_stderr_after_its_delay(capsys: pytest.CaptureFixture[str]) -> None:
    from stepbill.cli_plan import ProgressBar

    quiet = ProgressBar(after_s=3600)
    quiet(5, 10)
    quiet.close()
    bar = ProgressBar(after_s=0)
    bar(5, 10)
    bar(10, 10)
    bar.close()
    out, err = capsys.readouterr()
    assert not out and "5/10 candidates" in err and "10/10 candidates" in err and err.endswith("\n")
    assert err.count("\n") == 1


def test_memoised_holdings_equal_the_unmemoised_ones() -> None:
    """rank_holdings and rank_param_elements are memoised on the layout's slicing fields only: for layouts that
    differ in sp, micro-batches and offload they equal the computation on the layout itself."""
    from stepbill.engine.parallel.collectives import _rank_param_elements, rank_param_elements
    from stepbill.engine.parallel.holdings import _resident_cached, rank_holdings
    from stepbill.engine.params import param_inventory
    from stepbill.spec.parallel import Parallel
    from stepbill.spec.recipe import make_recipe

    spec = small_mla()
    inv = param_inventory(spec)
    for layout in (Parallel(dp=2, tp=2, pp=3, ep=4, zero=1, sp=True, micro_batches=6, offload_optimizer=True),
                   Parallel(dp=2, tp=2, pp=3, ep=4, zero=1, micro_batches=1),
                   Parallel(dp=4, tp=1, pp=1, cp=2, ep=8, zero=3, shard_group=4, offload_activations=True)):
        recipe = make_recipe("mixed-bf16", "adamw", 2, 4096, "full", parallel=layout)
        assert rank_param_elements(spec, recipe, inv) == _rank_param_elements(spec, recipe, inv)
        for stage in range(layout.pp):
            mine = rank_holdings(spec, recipe, stage)
            direct = _resident_cached.__wrapped__(spec, recipe.precision, recipe.optimizer, recipe.lora, layout,
                                                  stage)
            assert mine == direct


@pytest.mark.slow
def test_worker_processes_give_the_same_answer() -> None:
    """jobs=2 spreads the groups over two processes; the answer (top, fronts) is the same as one process. Branch and
    bound's partitions (partition.bound_part) each prune against their rows and those the others have billed so far
    (peers.py), so the rows billed may differ; the exhaustive search bills the same candidates either way."""
    req = request(load_preset("gpt3-125m"), "h100-sxm", 4, 1024, 16 * 1024,
                  {"offload_activations": False, "offload_optimizer": False, "schedule": "1f1b", "recompute": "none"})
    reports: list[tuple[int, int]] = []
    one, two = search(req, "time", 5), search(req, "time", 5, jobs=2, progress=lambda d, t: reports.append((d, t)))
    assert two.stats.jobs == 2 and one.stats.jobs == 1
    # the workers' progress, read off shared counters: the floors' candidates, then the leads, each to its total
    assert reports[-1][0] == reports[-1][1] > 0
    for (d0, t0), (d1, t1) in itertools.pairwise(reports):
        assert d0 <= d1 if t0 == t1 else d1 <= t1
    assert [r.command for r in two.top] == [r.command for r in one.top]
    assert [r.step_s for r in two.top] == [r.step_s for r in one.top]
    for front in ("memory_vs_time", "gpus_vs_time"):
        assert [r.command for r in getattr(two, front)] == [r.command for r in getattr(one, front)]
    assert two.stats.by_bound == one.stats.by_bound and two.stats.evaluated == one.stats.evaluated
    assert two.stats.cpu_seconds > 0
    every_one, every_two = search(req, "time", 5, exhaustive=True), search(req, "time", 5, jobs=2, exhaustive=True)
    assert [r.command for r in every_two.rows] == [r.command for r in every_one.rows]
    assert (every_two.stats.by_bill, every_two.stats.by_bound, every_two.stats.rejected) == (
        every_one.stats.by_bill, every_one.stats.by_bound, every_one.stats.rejected)


def test_a_deadline_says_how_much_of_the_space_was_searched(capsys: pytest.CaptureFixture[str]) -> None:
    """--max-seconds stops the search; the output says it is incomplete and how much was searched."""
    code, out, _ = run_cli(["plan", "llama3-8b", "--gpu", "h100", "--gpus", "8", "--seq", "4096",
                            "--global-batch-tokens", "1Mi", "--max-seconds", "0.3", "--jobs", "1"], capsys)
    assert code == 0
    assert "incomplete: the deadline stopped the search with" in out and "of those the stated rules leave" in out
    code, out, _ = run_cli(["plan", "llama3-8b", "--gpu", "h100", "--gpus", "8", "--seq", "4096",
                            "--global-batch-tokens", "1Mi", "--max-seconds", "0.3", "--jobs", "1", "--json"], capsys)
    data = json.loads(out)
    assert data["search"]["complete"] is False and data["search"]["not_searched"] > 0


def test_a_deadline_leaves_the_bills_their_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under branch and bound a deadline stops the floors pass at partition.FLOORS_SHARE of the time left, and the
    second pass decides the sample's best candidates in the rest (it used to find the deadline passed and decide
    none: no row). A fake clock, each read 1 ms after the last, makes the cut deterministic: the floors read it once
    a group, the second pass once a step of a lead."""
    import time

    from stepbill.engine.plan import partition

    clock = itertools.count()
    monkeypatch.setattr(time, "time", lambda: next(clock) * 1e-3)
    req = PlanRequest(load_preset("llama3-8b"), load_gpu("h100-sxm"), "h100-sxm", (8,), 4096, "llama3-8b",
                      global_batch_tokens=2**20)
    groups = sum(1 for _ in enumerate_space(req, Rejections()))
    deadline = 0.4 * groups * 1e-3 / partition.FLOORS_SHARE  # the floors reach about 40 % of the groups
    result = search(req, "time", 5, deadline_s=deadline)
    stats = result.stats
    assert not stats.complete and stats.not_searched > 0
    # decided by the second pass: billed, outranked, or over the budget by a peak floor
    assert stats.by_bill + stats.by_floor + stats.rejected.get("peak_floor_over_budget", 0) > 0
    whole = search(req, "time", 5)  # the clock runs on: no deadline
    assert whole.stats.complete and result.stats.evaluated < whole.stats.evaluated


def test_an_incomplete_search_without_rows_does_not_say_nothing_fits(capsys: pytest.CaptureFixture[str]) -> None:
    """A deadline that decides nothing past the rules is no proof that nothing fits: the output says the part
    searched had none and how to search more (it used to say "no layout fits")."""
    code, out, _ = run_cli(["plan", "gpt3-125m", "--gpu", "h100", "--gpus", "8", "--seq", "512",
                            "--global-batch-tokens", "64Ki", "--max-seconds", "0", "--jobs", "1"], capsys)
    text = " ".join(out.split())
    assert code == 0 and "no layout found that fits in the part searched: a longer --max-seconds" in text
    assert "no layout fits" not in text and "(0.0% of those the stated rules leave decided" in text


def test_without_a_global_batch_the_fronts_use_time_per_token(capsys: pytest.CaptureFixture[str]) -> None:
    """--micro-batch only: steps carry different token counts, so the fronts (as the ranking) compare tokens/s."""
    req = PlanRequest(load_preset("gpt3-125m"), load_gpu("h100-sxm"), "h100-sxm", (1, 2), 1024, "gpt3-125m",
                      micro_batch=1, fixed=parse_fix({"zero": 1, "schedule": "1f1b", "offload_optimizer": False,
                                                      "offload_activations": False, "recompute": "none"}))
    result = search(req, "time", 3)
    for front, x in ((result.gpus_vs_time, lambda r: r.world), (result.memory_vs_time, lambda r: r.peak_bytes)):
        assert front
        for row in front:  # no fitting row is at least as good on both axes and better on one
            assert not any(x(o) <= x(row) and o.tokens_per_s >= row.tokens_per_s
                           and (x(o) < x(row) or o.tokens_per_s > row.tokens_per_s) for o in result.rows)
    code, out, _ = run_cli(["plan", "gpt3-125m", "--gpu", "h100", "--max-gpus", "2", "--seq", "1024",
                            "--micro-batch", "1", "--fix", "zero=1,schedule=1f1b,recompute=none", "--jobs", "1"],
                           capsys)
    assert code == 0 and "Pareto front: GPUs vs time per token (1 / tokens/s)" in out


@pytest.mark.slow
def test_search_makes_no_reference_cycles_and_restores_the_collector() -> None:
    """search pauses Python's cyclic garbage collector (search.collector_paused): safe only while no cycle is made
    — after a branch-and-bound search over a MoE space with every recompute policy (the budget solver's included),
    gc.collect() finds nothing to free. Run in a fresh interpreter: in this one, objects other tests left in cycles
    (autograd graphs) become garbage when a memo lets go of them, which the search did not make. The collector is
    back as it was."""
    import subprocess
    import sys

    code = """
import gc
from stepbill.engine.plan import search
from tests.test_plan import request, small_moe
req = request(small_moe(), "a100-40gb", 4, 4096, 8 * 4096, {})
gc.collect()
result = search(req, "time", 5)
assert gc.isenabled() and result.stats.by_bill > 0
gc.disable()
search(req, "memory", 5)
print(gc.collect(), gc.isenabled())
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.split() == ["0", "False"], done.stdout + done.stderr
