"""The host half of the fit verdict (engine/fit_host.py): what a node's GPUs offload against its host memory — the
catalog's reference nodes, the rank-to-node placement, the bill's verdict and its independent value (ZeRO-Offload's
12 bytes a parameter), `fit --max`, the planner (its best equals brute-force bills), and bad input."""

from __future__ import annotations

import copy
import json
import random

import pytest

import stepbill
from stepbill.api import make_step_bill
from stepbill.engine.fit_host import fullest_node
from stepbill.engine.plan import PlanRequest, parse_fix, search
from stepbill.engine.plan.evaluate import bill_options, budget_drops_nothing, resolve_recompute
from stepbill.engine.plan.host_floor import host_floor
from stepbill.engine.plan.resident import host_bound, host_budget_exceeded
from stepbill.engine.plan.space import Rejections, enumerate_space
from stepbill.errors import StepbillError
from stepbill.spec.hardware import gpu_catalog, gpu_from_dict, load_gpu
from stepbill.spec.presets import load_preset
from tests.conftest import run_cli
from tests.test_hardware import GOOD

GIB = 2**30
#: transformers' LlamaForCausalLM parameter count for Llama-3-70B (tests/test_params_vs_transformers.py)
LLAMA3_70B_PARAMS = 70_553_706_624


def test_reference_nodes_in_the_catalog() -> None:
    """DGX H100 / H200 / A100 640GB / B200: 2 TiB for 8 GPUs; DGX A100 320GB: 1 TiB; parts with no single
    reference node carry no figure (the verdict is then unchecked, and says so)."""
    host = {name: gpu.host_memory_bytes for name, gpu in gpu_catalog().items()}
    assert host == {"h100-sxm": 2048 * GIB, "h200": 2048 * GIB, "a100-80gb": 2048 * GIB, "a100-40gb": 1024 * GIB,
                    "b200": 2048 * GIB, "h100-pcie": None, "h800": None, "mi300x": None, "l40s": None,
                    "rtx-4090": None}
    for gpu in gpu_catalog().values():
        assert (gpu.host_memory_bytes is None) == (not gpu.host_memory_source)


@pytest.mark.parametrize(("host", "message"), [
    ({"gib": 0, "source": "s"}, r"host_memory.gib must be a whole number"),
    ({"gib": 1.5, "source": "s"}, r"host_memory.gib must be a whole number"),
    ({"gib": 64}, "must have exactly the keys gib, source"),
    ({"gib": 64, "source": " "}, "must say where the figures come from"),
])
def test_bad_host_memory_entries_are_rejected(host: dict, message: str) -> None:
    entry = copy.deepcopy(GOOD)
    entry["host_memory"] = host
    with pytest.raises(StepbillError, match=message):
        gpu_from_dict("x", entry)
    assert gpu_from_dict("x", GOOD).host_memory_bytes is None


@pytest.mark.parametrize(("per_stage", "ranks_per_stage", "per_node", "expected"), [
    ([5.0], 8, 8, (40.0, 0)),  # one stage fills the node
    ([1.0, 5.0, 3.0, 2.0], 2, 8, (22.0, 0)),  # a node holds all four stages: 2 × (1 + 5 + 3 + 2)
    ([1.0, 5.0, 3.0, 2.0], 4, 8, (24.0, 0)),  # stages 0–1 on node 0 (4 + 20), 2–3 on node 1 (12 + 8)
    ([1.0, 2.0, 3.0, 4.0], 4, 8, (28.0, 8)),  # the fullest node is the second
    ([1.0, 1.0, 9.0, 1.0], 3, 8, (24.0, 0)),  # 3 + 3 + 2 × 9 on node 0; 9 + 3 on node 1 (4 ranks)
    ([2.0, 7.0], 16, 8, (56.0, 16)),  # each stage spans two nodes
    ([4.0], 4, 4, (16.0, 0)),  # a world smaller than a node: the caller passes G = world
])
def test_fullest_node(per_stage: list[float], ranks_per_stage: int, per_node: int,
                      expected: tuple[float, int]) -> None:
    """Ranks numbered tp fastest, pp slowest (Megatron-LM's 'tp-cp-ep-dp-pp'): node sums by hand."""
    assert fullest_node(per_stage, ranks_per_stage, per_node) == expected


def test_optimizer_offload_puts_fourteen_bytes_a_parameter_on_the_node() -> None:
    """ZeRO-3 over the node's 8 GPUs with optimizer offload: the node's host holds every parameter's fp32 master,
    momentum and variance and its bf16 gradient, 12 + 2 B (ZeRO-Offload, arXiv 2101.06840 §4.1: fp32 states and
    fp16 gradients on the CPU), for transformers' 70,553,706,624 — within the shards' rounding — and the DGX H100's
    2 TiB holds it."""
    run = make_step_bill("llama3-70b", seq=8192, gpu="h100", gpus=8, zero=3, offload_optimizer=True,
                         recompute="full")
    assert run.fit is not None
    host = run.fit.host
    assert host is not None and host.checked and host.fits and run.fit.fits
    assert host.node_bytes == pytest.approx(14 * LLAMA3_70B_PARAMS, rel=1e-8)
    cpu = run.bill.ranks[0].cpu
    assert cpu["grads"] == pytest.approx(2 * LLAMA3_70B_PARAMS / 8, rel=1e-8)
    down = run.bill.time["time.offload_grads_down"].value  # type: ignore[index]
    assert cpu["grads"] == pytest.approx(down * 0.8 * load_gpu("h100").pcie_bytes_per_s, rel=1e-12)  # copies at 0.8
    assert (host.gpus, host.first_rank, host.budget_bytes) == (8, 0, 2048 * GIB)
    assert run.fit.lines["fit.host_node"].value == host.node_bytes


def test_activation_offload_over_the_node_does_not_fit() -> None:
    """The user trial's Llama-3-70B on 8 H100 with both offloads: every rank fits its card (34.18 GiB), but the
    node's eight ranks offload 2,861.20 GiB of optimizer states, gradients and eager activations > the DGX H100's
    2,048 GiB; with --host-mem 4096 it fits. The activations are the eager bill's kept ones per micro-batch (what
    `check` measures on the GPU without offload), the optimizer states and gradients 14 B a parameter."""
    options = dict(seq=8192, gpu="h100", gpus=8, zero=3, offload_optimizer=True, offload_activations=True,
                   micro_batches=4)
    run = stepbill.bill("llama3-70b", **options)
    fit = run.fit
    assert all(r.fits for r in fit.ranks) and not fit.host_fits and not fit.fits
    assert fit.host is not None and fit.host.node_bytes > 2048 * GIB
    eager = make_step_bill("llama3-70b", convention="eager", **options).bill
    assert fit.host.node_bytes == pytest.approx(8 * sum(eager.ranks[0].cpu.values()), rel=1e-12)
    assert "host memory" in fit.advice
    roomy = stepbill.bill("llama3-70b", host_mem_gib=4096, **options).fit
    assert roomy.fits and roomy.host is not None and roomy.host.source == "--host-mem 4096 GiB"


def test_pipeline_stages_share_a_node_by_rank_order() -> None:
    """gpt3-1.3b on 8 GPUs, pp 4 × dp 2 with optimizer offload: the node holds all four stages, two ranks each —
    the sum of every class's host bytes times its ranks."""
    run = make_step_bill("gpt3-1.3b", seq=2048, gpu="h100", gpus=8, pp=4, dp=2, offload_optimizer=True,
                         convention="eager")
    classes = run.bill.ranks
    assert len(classes) > 1
    assert run.fit is not None and run.fit.host is not None
    expected = sum(c.ranks * sum(c.cpu.values()) for c in classes)
    assert run.fit.host.node_bytes == pytest.approx(expected, rel=1e-12)


def test_an_unknown_node_is_not_checked_and_says_so() -> None:
    """H800 has no reference-node figure: the verdict stands on the GPUs, the host line says it was not checked."""
    fit = stepbill.bill("llama2-7b", seq=4096, gpu="h800", gpus=8, zero=3, offload_optimizer=True).fit
    assert fit.host is not None and not fit.host.checked and fit.host.fits
    assert "not checked" in fit.host.summary()
    assert stepbill.bill("llama2-7b", seq=4096, gpu="h100", gpus=8, zero=3).fit.host is None  # nothing offloaded


@pytest.mark.parametrize(("argv", "message"), [
    (["bill", "llama2-7b", "--gpu", "h100", "--offload-optimizer", "--host-mem", "0"], "--host-mem must be > 0"),
    (["bill", "llama2-7b", "--host-mem", "512"], "--host-mem needs a card"),
    (["plan", "llama2-7b", "--gpu", "h100", "--gpus", "8", "--seq", "4096", "--micro-batch", "1", "--host-mem",
      "-1"], "--host-mem must be > 0"),
])
def test_bad_host_mem_is_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_fit_max_stops_where_the_host_runs_out(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3-8B at seq 8K on 8 H100 with activation offload and a 1,000 GiB node: the largest micro-batch is set
    by the host memory, not the cards; the answer's bill fits and one more does not, on the host."""
    code, out, err = run_cli(["fit", "llama3-8b", "--gpu", "h100", "--gpus", "8", "--zero", "3", "--seq", "8192",
                              "--offload-activations", "--host-mem", "1000", "--max", "micro-batch", "--json"], capsys)
    assert code == 0, err
    answer = json.loads(out)
    largest, limit = answer["largest"], answer["host_limit"]
    assert limit is not None and limit["value"] == largest + 1
    options = dict(seq=8192, gpu="h100", gpus=8, zero=3, offload_activations=True, host_mem_gib=1000)
    assert stepbill.bill("llama3-8b", micro_batch=largest, **options).fit.fits
    over = stepbill.bill("llama3-8b", micro_batch=largest + 1, **options).fit
    assert all(r.fits for r in over.ranks) and not over.host_fits
    assert f"--micro-batch {largest}" in answer["command"] and "--host-mem 1000" in answer["command"]


@pytest.mark.slow
def test_planner_best_equals_brute_force_under_a_host_limit() -> None:
    """A space where the host memory decides: gpt3-1.3b on 8 A100-40GB with activation offload and a 64 GiB node.
    The planner's best and fronts (branch and bound and exhaustive) equal the best of brute-force `bill` calls, and
    it counts the candidates the host rejects."""
    spec = load_preset("gpt3-1.3b")
    req = PlanRequest(spec, load_gpu("a100-40gb"), "a100-40gb", (8,), 2048, spec.name,
                      global_batch_tokens=64 * 2048, host_mem_gib=64.0,
                      fixed=parse_fix({"schedule": "1f1b", "offload_activations": True, "tp": 1, "cp": 1,
                                       "recompute": "none"}))
    truth = []
    for group in enumerate_space(req, Rejections()):
        for cand in group.candidates:
            if budget_drops_nothing(req, resolve_recompute(req, cand)):
                continue
            run = make_step_bill(spec, **bill_options(req, cand))
            assert run.fit is not None
            cards = all(r.fits for r in run.fit.ranks)
            truth.append((run.fit.fits, cards and not run.fit.host_fits,
                          run.bill.time["time.step"].value))  # type: ignore[index]
    assert any(fits for fits, _, _ in truth) and any(host_only for _, host_only, _ in truth)
    best = min(step for fits, _, step in truth if fits)
    exhaustive = search(req, "time", 3, exhaustive=True)
    pruned = search(req, "time", 3)
    for result in (exhaustive, pruned):
        assert result.best is not None and result.best.step_s == pytest.approx(best, rel=1e-12)
    assert exhaustive.stats.rejected["host_over_budget"] == sum(host_only for _, host_only, _ in truth)
    assert [r.command for r in pruned.top] == [r.command for r in exhaustive.top]
    assert [r.command for r in pruned.memory_vs_time] == [r.command for r in exhaustive.memory_vs_time]
    assert all("--host-mem 64" in r.command for r in exhaustive.top)


@pytest.mark.parametrize(("gpu", "says"), [("h100", "on a node of 2,048 GiB (NVIDIA DGX H100"),
                                           ("h800", "not checked: no host memory figure")])
def test_plan_says_which_host_memory_its_offload_rows_were_judged_on(gpu: str, says: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3-8B at seq 8K on one card: the rows shown offload the optimizer; the output names the node's host
    memory they were judged on, or that there is none to judge on (H800: no reference node in the catalog)."""
    code, out, err = run_cli(["plan", "llama3-8b", "--gpu", gpu, "--gpus", "1", "--seq", "8192",
                              "--global-batch-tokens", "64Ki", "--top", "3", "--jobs", "1"], capsys)
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("host memory:"))
    assert says in " ".join(out.split()) and "offload rows above put up to" in line


@pytest.mark.parametrize(("model", "gpus", "host_gib"), [("llama3-8b", 16, 96.0), ("mixtral-8x7b", 16, 300.0)])
def test_host_bound_is_below_every_candidates_host_bytes(model: str, gpus: int, host_gib: float) -> None:
    """The planner's host bound (resident.host_bound: each rank's offloaded optimizer side summed over the fullest
    node) is at most the host bytes `stepbill bill` finds for any candidate of the group (its gradients and offloaded
    activations only add), so a group it rejects has no candidate whose node fits; and it does reject some here."""
    spec = load_preset(model)
    req = PlanRequest(spec, load_gpu("h100-sxm"), "h100-sxm", (gpus,), 4096, model, global_batch_tokens=2**20,
                      host_mem_gib=host_gib)
    groups = [g for g in enumerate_space(req, Rejections()) if g.offload_optimizer]
    for group in random.Random(7).sample(groups, 12):
        cand = resolve_recompute(req, group.candidates[len(group.variants) // 2])
        run = make_step_bill(spec, **bill_options(req, cand))
        assert run.fit is not None and run.fit.host is not None
        assert host_bound(req, group.holdings_layout) <= run.fit.host.node_bytes * (1 + 1e-12)
        if host_budget_exceeded(req, group):
            assert not run.fit.host.fits
    assert 0 < sum(host_budget_exceeded(req, g) for g in groups) < len(groups)


@pytest.mark.parametrize(("model", "gpus"), [("llama3-8b", 16), ("mixtral-8x7b", 16), ("gpt3-1.3b", 8)])
def test_host_floor_is_below_every_activation_offload_bill(model: str, gpus: int) -> None:
    """plan/host_floor.py: for candidates with activation offload (explicit policies and the budget solver's, with and
    without optimizer offload, pipelines included) the floor is at most the host bytes `stepbill bill` finds — the
    eager kept activations × micro-batches in flight and the optimizer side, summed over the fullest node."""
    spec = load_preset(model)
    req = PlanRequest(spec, load_gpu("h100-sxm"), "h100-sxm", (gpus,), 2048, model, global_batch_tokens=2**19)
    cands = [c for g in enumerate_space(req, Rejections()) for c in g.candidates if c.parallel.offload_activations]
    rng = random.Random(11)
    checked = 0
    for cand in rng.sample(cands, 40):
        try:
            cand = resolve_recompute(req, cand)
        except StepbillError:
            continue
        run = make_step_bill(spec, **bill_options(req, cand))
        assert run.fit is not None and run.fit.host is not None
        floor = host_floor(req, cand)
        assert 0 < floor <= run.fit.host.node_bytes * (1 + 1e-12)
        checked += 1
    assert checked >= 30


def _fullest_by_every_node(per_stage: list[float], ranks_per_stage: int, per_node: int) -> tuple[float, int]:
    """fullest_node by weighing every node (its first form: O(nodes))."""
    world = ranks_per_stage * len(per_stage)
    best, best_first = -1.0, 0
    for first in range(0, world, per_node):
        total = sum(per_stage[r // ranks_per_stage] for r in range(first, min(first + per_node, world)))
        if total > best:
            best, best_first = total, first
    return best, best_first


def test_fullest_node_weighs_only_the_stage_ends() -> None:
    """fullest_node weighs O(stages) nodes (the fuzzer's find: a plan over 2^24 GPUs weighed all 2^21 nodes per
    layout and ran for minutes past --max-seconds); the same answer as weighing every node, ties to the first."""
    import random

    rng = random.Random(7)
    for _ in range(2000):
        stages = rng.randint(1, 9)
        per_stage = [float(rng.choice((1, 2, 3, 5))) for _ in range(stages)]
        ranks, node = rng.randint(1, 20), rng.randint(1, 12)
        assert fullest_node(per_stage, ranks, node) == _fullest_by_every_node(per_stage, ranks, node)
