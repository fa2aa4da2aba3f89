"""The planner's space (engine/plan/space.py, axes.py, fix.py): the newer axes' values (GPipe, every interleaving
chunk count, the second stage split, etp, every:K, the budget at the rank's free memory), the group-wise counting
(fixing an axis partitions the space; the rules change no count of candidates), the variants, and `--fix` for
the new axes. The brute-force and command-reproduction checks of these axes are in tests/test_plan.py."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from stepbill.engine.plan import PlanRequest, parse_fix
from stepbill.engine.plan.axes import (
    BUDGET_AT_FREE,
    chunk_counts,
    ends_lighter,
    every_segments,
    expert_tp_degrees,
)
from stepbill.engine.plan.evaluate import budget_drops_nothing, budget_policy, resolve_recompute
from stepbill.engine.plan.space import Rejections, Variants, enumerate_space
from stepbill.errors import StepbillError
from stepbill.spec.hardware import load_gpu
from stepbill.spec.parallel import pipeline_stage_layers
from stepbill.spec.presets import load_preset
from stepbill.spec.recompute_policy import parse_recompute

GIB = 2**30


def space(model: str, gpus: int, seq: int, batch: int, fix: dict, cross_node: bool = False, layers: int = 0):
    spec = load_preset(model)
    if layers:
        spec = dataclasses.replace(spec, n_layers=layers)
    req = PlanRequest(spec, load_gpu("h100-sxm"), "h100-sxm", (gpus,), seq, model, global_batch_tokens=batch,
                      fixed=parse_fix(fix), cross_node=cross_node)
    rejected = Rejections()
    groups = list(enumerate_space(req, rejected))
    return req, groups, rejected


def size(groups: list, rejected: Rejections) -> int:
    return sum(len(g.variants) for g in groups) + sum(rejected.counts.values())


def test_axis_values() -> None:
    # one layer from each end to the lightest middle stages; Megatron's split is the start
    assert pipeline_stage_layers(12, 4) == (3, 3, 3, 3) and ends_lighter(12, 4) == (2, 4, 4, 2)
    assert ends_lighter(80, 8) == (9, 11, 11, 10, 10, 10, 10, 9) and sum(ends_lighter(80, 8) or ()) == 80
    assert ends_lighter(12, 2) is None and ends_lighter(6, 4) is None  # no middle stage / an end of one layer
    assert chunk_counts(12, 2) == [2, 3, 6] and chunk_counts(80, 4) == [2, 4, 5, 10, 20] and chunk_counts(61, 16) == []
    assert every_segments(12) == [3, 4] and every_segments(80) == [8, 10] and every_segments(16) == [4, 8]
    assert every_segments(61) == [7, 8] and every_segments(3) == [2] and every_segments(2) == []  # prime: ⌊√n⌋, ⌈√n⌉
    assert expert_tp_degrees(8, 2) == [1, 2, 4] and expert_tp_degrees(6, 2) == [1]


def test_new_axes_are_in_the_space() -> None:
    """A 12-layer dense model on 8 GPUs: GPipe, interleaved at v 2, 3 and 6, the second split, every:K and the
    budget all occur; Mixtral on 8 GPUs: etp 2, 4, 8 with ep·etp dividing dp·cp·tp."""
    _, groups, _ = space("gpt3-125m", 8, 1024, 64 * 1024, {"tp": 1, "cp": 1})
    layouts = {(g.holdings_layout.pp, g.holdings_layout.pp_schedule, g.holdings_layout.vpp, g.holdings_layout.pp_layers)
               for g in groups}
    assert {(2, "gpipe", 1, None), (2, "interleaved", 2, None), (2, "interleaved", 3, None),
            (2, "interleaved", 6, None), (4, "1f1b", 1, (2, 4, 4, 2)), (4, "gpipe", 1, (2, 4, 4, 2))} <= layouts
    assert not any(s == "interleaved" and split is not None for _, s, _, split in layouts)
    policies = {v[4] for g in groups for v in g.variants}
    assert {"every:3", "every:4", "every:2", BUDGET_AT_FREE} <= policies  # pp 1: 12 layers; pp 4: 3
    assert not any(v[3] and (v[4].startswith("every:") or v[4] == BUDGET_AT_FREE) for g in groups for v in g.variants)
    _, groups, _ = space("mixtral-8x7b", 8, 4096, 64 * 4096, {"pp": 1, "cp": 1, "zero": 1})
    pairs = {(g.holdings_layout.ep, g.holdings_layout.expert_tp) for g in groups}
    assert {(1, 8), (2, 4), (4, 2), (8, 1)} <= pairs and all(ep * etp <= 8 for ep, etp in pairs)
    _, _, wide = space("mixtral-8x7b", 16, 4096, 64 * 4096, {"pp": 1, "cp": 1, "zero": 1, "ep": 1})
    assert wide.counts["etp_outside_node"] > 0  # etp 16 spans two 8-GPU nodes


def test_fixing_an_axis_partitions_the_space_and_rules_change_no_count() -> None:
    """Counts are made group-wise (products, not candidates): the candidates of the free space equal the sum over
    each value of the axis fixed, and allowing cross-node groups moves candidates between reasons, not the total."""
    base = {"tp": 2, "pp": 2, "offload_activations": False}  # pp > 1: a fixed schedule is taken at pp 1 too
    _, groups, rejected = space("mixtral-8x7b", 32, 4096, 64 * 4096, base, layers=8)
    total = size(groups, rejected)
    by_schedule = sum(size(*space("mixtral-8x7b", 32, 4096, 64 * 4096, {**base, "schedule": s}, layers=8)[1:])
                      for s in ("1f1b", "gpipe", "interleaved"))
    assert by_schedule == total
    by_policy = sum(size(*space("mixtral-8x7b", 32, 4096, 64 * 4096, {**base, "recompute": p}, layers=8)[1:])
                    for p in ("none", "selective:core_attn", "full", "every", "budget"))
    assert by_policy == total
    _, groups_x, rejected_x = space("mixtral-8x7b", 32, 4096, 64 * 4096, base, cross_node=True, layers=8)
    assert size(groups_x, rejected_x) == total and "etp_outside_node" not in rejected_x.counts
    assert len(groups_x) > len(groups)


def test_variants_nest_batches_sp_then_policy_pairs() -> None:
    variants = Variants([(1, 8), (2, 4)], [False, True], [(False, "none"), (True, "full"), (False, "every:2")])
    listed = list(variants)
    assert len(variants) == len(listed) == 12 and [variants[i] for i in range(12)] == listed
    assert variants[-1] == listed[-1] == (True, 2, 4, False, "every:2") and list(variants[2:5]) == listed[2:5]
    with pytest.raises(IndexError):
        variants[12]
    copy = pickle.loads(pickle.dumps(variants))  # the planner's workers receive groups pickled
    assert type(copy) is Variants and copy == variants


def test_fix_pins_the_new_axes() -> None:
    assert parse_fix(["pp_layers=2,4,4,2,tp=1", "etp=2"]) == (("etp", 2), ("pp_layers", (2, 4, 4, 2)), ("tp", 1))
    assert parse_fix({"pp_layers": [3, 3], "recompute": "budget"}) == (("pp_layers", (3, 3)),
                                                                      ("recompute", BUDGET_AT_FREE))
    assert parse_fix(["pp_layers=default,recompute=every"]) == (("pp_layers", None), ("recompute", "every"))
    with pytest.raises(StepbillError, match="pp_layers"):
        parse_fix(["pp_layers=3,x"])
    _, groups, _ = space("gpt3-125m", 4, 1024, 16 * 1024, {"pp": 4, "pp_layers": "2,4,4,2", "recompute": "every"})
    assert {g.holdings_layout.pp_layers for g in groups} == {(2, 4, 4, 2)}
    assert {g.holdings_layout.pp_schedule for g in groups} == {"1f1b", "gpipe"}  # interleaving takes no split
    assert {v[4] for g in groups for v in g.variants} == {"every:2"}  # largest stage: 4 layers
    _, groups, _ = space("gpt3-125m", 4, 1024, 16 * 1024, {"pp": 2, "vpp": 3, "schedule": "interleaved"})
    assert {g.holdings_layout.vpp for g in groups} == {3}


def test_budget_at_free_memory_is_a_policy_the_bill_reads() -> None:
    """The budget stand-in resolves to `budget:<GiB>`: at or above the solver's floor, rounded to 0.01 GiB; on a
    roomy layout it is above the activations' need (drops nothing), on a tight one it binds."""
    req, groups, _ = space("llama3-8b", 8, 4096, 64 * 4096,
                           {"tp": 8, "pp": 1, "zero": 1, "sp": True, "offload_optimizer": False,
                            "recompute": "budget", "micro_batch": 1})
    cand = groups[0].candidate(groups[0].variants[0])
    text = budget_policy(req, cand)
    assert text.startswith("budget:") and text.endswith("GiB") and parse_recompute(text).kind == "budget"
    assert resolve_recompute(req, cand).recompute == text
    assert budget_drops_nothing(req, cand)  # 8B over tp 8 at mb 1: the rank's free memory dwarfs the activations
    req, groups, _ = space("llama3-8b", 1, 8192, 8 * 8192,
                           {"zero": 0, "offload_optimizer": True, "recompute": "budget", "micro_batch": 4})
    cand = groups[0].candidate(groups[0].variants[0])
    assert not budget_drops_nothing(req, cand)
    assert 0 < parse_recompute(budget_policy(req, cand)).budget_bytes < 80 * GIB


def test_budget_at_free_memory_fits_and_beats_full_recompute() -> None:
    """Llama-3-70B on 16 H100s (tp 8, pp 2, sp, ZeRO-1, seq 8K, micro-batch 1): the budget at the rank's free
    memory fits, recomputes less than full and so steps faster — the reason the axis is searched."""
    from stepbill.engine.plan import search

    pinned = {"tp": 8, "pp": 2, "zero": 1, "sp": True, "micro_batch": 1, "schedule": "1f1b", "pp_layers": "default",
              "offload_optimizer": False, "offload_activations": False}
    rows = {}
    for policy in ("budget", "full"):
        req, _, _ = space("llama3-70b", 16, 8192, 1024 * 1024, {**pinned, "recompute": policy})
        result = search(req, "time", 1)
        assert result.best is not None, policy
        rows[policy] = result.best
    budget = rows["budget"]
    assert budget.candidate.recompute.startswith("budget:") and budget.headroom_bytes >= 0
    assert budget.command.count("--recompute budget:") == 1
    assert budget.step_s < rows["full"].step_s * 0.95


def test_budget_correction_brings_an_overshooting_budget_under_the_card() -> None:
    """DeepSeek-V3 at DeepSeek's layout (2,048 GPUs, pp 16, ep 64, ZeRO-3, micro-batch 1): the scaled free memory X₀
    overshoots (the solver sees no buffers, working set nor eager logits); the corrected budget's eager peak fits."""
    from stepbill.engine.plan.evaluate import _budget_gib, _eager_peak, _spelled
    from stepbill.engine.plan.resident import budget_bytes

    req, groups, _ = space("deepseek-v3", 2048, 4096, 15360 * 4096,
                           {"tp": 1, "pp": 16, "ep": 64, "cp": 1, "etp": 1, "zero": 3,
                            "micro_batch": 1, "schedule": "1f1b", "pp_layers": "default", "recompute": "budget",
                            "offload_optimizer": False, "offload_activations": False}, cross_node=True)
    cand = groups[0].candidate(groups[0].variants[0])
    scaled, floor_gib, _, _ = _budget_gib(req, cand)
    budget = budget_bytes(req, cand.parallel)
    first = _eager_peak(req, cand, _spelled(scaled, floor_gib))
    assert first is not None and first > budget
    corrected = parse_recompute(budget_policy(req, cand)).budget_bytes / GIB
    peak = _eager_peak(req, cand, corrected)
    assert peak is not None and peak <= budget and corrected < scaled


def test_the_budget_solver_writes_nothing_to_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    """Nothing of a budget solve reaches stdout, which would corrupt `stepbill plan --json` (HiGHS, the solver once,
    printed a debug line to the C-level stdout on this solve)."""
    from stepbill.api import make_step_bill

    make_step_bill("deepseek-v3", seq=4096, recompute="budget:51.79GiB", convention="eager")
    out, _ = capfd.readouterr()
    assert out == ""
