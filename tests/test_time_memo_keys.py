"""The step time's memo keys (what a planner's time floor reuses across candidates): recipes that share a key get
the same unmemoised value, a field the value reads is in its key, and the memoised value is the unmemoised one."""

from __future__ import annotations

from dataclasses import replace

from stepbill.engine.bill import _core, _make_core, without_layout
from stepbill.engine.parallel.collectives import (
    _rank_param_elements,
    _stage_counts,
    rank_param_elements,
    step_collectives,
)
from stepbill.engine.params import param_inventory
from stepbill.engine.recompute import NO_RERUN, Rerun
from stepbill.engine.timing.comm_time import _classed, collective_seconds, comm_timing, overlap_class
from stepbill.engine.timing.step_terms import _busiest_of_layout, slowest_stage
from stepbill.spec import load_preset
from stepbill.spec.hardware import load_gpu
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import make_recipe

SPEC = load_preset("deepseek-v3")
INV = param_inventory(SPEC)
H100 = load_gpu("h100-sxm")
#: every field away from its default: what the keys below leave out varies among these
BASE = Parallel(dp=4, tp=2, pp=4, cp=2, ep=4, etp=2, sp=True, zero=3, shard_group=4, micro_batches=8,
                offload_optimizer=True, pp_layers=(14, 16, 16, 15))
#: the same stage split, tp and ep·etp; other dp, cp, ZeRO, shard group, sp, offload, micro-batches, ep and etp
SAME_SPLIT = replace(BASE, dp=8, cp=1, ep=8, etp=1, sp=False, zero=1, shard_group=None, micro_batches=4,
                     offload_optimizer=False, offload_activations=True)


def test_rank_param_elements_key_is_what_the_fractions_read() -> None:
    """rank_param_elements is memoised on the precision, optimizer, LoRA, the stage split, tp and ep·etp: two
    layouts that share those get the same unmemoised elements; tp, ep·etp and the split each change them."""
    base, same = make_recipe(parallel=BASE), make_recipe(micro_batch=2, recompute="full", parallel=SAME_SPLIT)
    want = _rank_param_elements(SPEC, base, INV)
    assert _rank_param_elements(SPEC, same, INV) == want
    assert rank_param_elements(SPEC, same, INV) == rank_param_elements(SPEC, base, INV) == want
    for other in (replace(BASE, tp=4, dp=2), replace(BASE, etp=None), replace(BASE, pp_layers=(14, 17, 15, 15))):
        recipe = make_recipe(parallel=other)
        assert _rank_param_elements(SPEC, recipe, INV) != want
        assert rank_param_elements(SPEC, recipe, INV) == _rank_param_elements(SPEC, recipe, INV)


def test_stage_counts_and_busiest_stage_keys_are_the_stage_split() -> None:
    """The activation collectives' layer counts and slowest_stage are memoised on the stage split (pp, vpp,
    pp_layers) with the rerun / the per-token recompute: layouts sharing the split share them, another split
    changes them."""
    full = Rerun(frozenset({"dense", "moe"}), frozenset({"dense", "moe"}))
    for rerun in (NO_RERUN, full):
        assert _stage_counts(SPEC, BASE, rerun) == _stage_counts(SPEC, SAME_SPLIT, rerun)
        assert _stage_counts(SPEC, replace(BASE, pp_layers=(14, 17, 15, 15)), rerun) != _stage_counts(SPEC, BASE, rerun)
    args = (4096, 1, (("dense", 1e6), ("moe", 2e6)), None, True)
    base, same = (make_recipe(seq_len=4096, recompute="full", parallel=p) for p in (BASE, SAME_SPLIT))
    assert _busiest_of_layout(SPEC, INV, BASE, *args) == _busiest_of_layout(SPEC, INV, SAME_SPLIT, *args)
    assert _busiest_of_layout(SPEC, INV, replace(BASE, pp_layers=(14, 17, 15, 15)), *args) != \
        _busiest_of_layout(SPEC, INV, BASE, *args)
    copy = type(INV)(tuple(INV.tensors))  # not the model's own: the unmemoised path
    plan = _core(SPEC, base, "ideal", "sdpa", H100).plan
    assert slowest_stage(SPEC, INV, same, plan) == slowest_stage(SPEC, copy, same, plan) == \
        slowest_stage(SPEC, INV, base, plan)


def test_one_gpu_core_is_the_core_of_any_layout() -> None:
    """bill._core without outside rows by rank (ideal, megatron) is made once per one-GPU recipe: the core of a
    recipe with a layout equals the one made from the recipe itself; the eager core (outside rows read cp) is
    made per recipe."""
    par = Parallel(dp=2, tp=2, pp=2, cp=2, sp=True, zero=1, micro_batches=4)
    for model, convention in (("llama3-8b", "ideal"), ("gpt3-125m", "megatron")):
        spec = load_preset(model)
        recipe = make_recipe(seq_len=2048, recompute="selective:core_attn", parallel=par)
        got, want = _core(spec, recipe, convention, "sdpa", H100), _make_core(spec, recipe, convention, "sdpa")
        assert got == want and got is _core(spec, without_layout(recipe), convention, "sdpa", None)
    eager = make_recipe(seq_len=2048, parallel=par)
    assert _core(load_preset("llama3-8b"), eager, "eager", "sdpa", H100).outside_rows is not None


def test_a_collective_is_classed_per_zero() -> None:
    """comm_timing keeps each collective's (seconds, class, bucket share) on the collective by ZeRO stage (its
    seconds read the collective alone: its link and its ranks per node were set when it was made): classed under
    one stage, it is classed afresh under another, and the timing of a list is the same before and after (from the
    memo)."""
    recipe = make_recipe(seq_len=4096, parallel=BASE)
    timed = [c for c in step_collectives(SPEC, recipe, INV, H100) if c.seconds is not None]
    first = comm_timing(timed, 3, 8, 15, 1.0, 2.0, 0.5)
    for zero in (3, 1, 0):
        for c in timed:
            t, cls, _ = _classed(c, zero)
            assert (t, cls) == (collective_seconds(c), overlap_class(c, zero))
    assert comm_timing(timed, 3, 8, 15, 1.0, 2.0, 0.5) == first
    assert comm_timing(timed, 1, 8, 15, 1.0, 2.0, 0.5) != first  # ZeRO-1's reduce-scatter hides differently
