"""Properties of the per-GPU bill (issue: one bill for every GPU). Each rank's timeline comes from the one-GPU
plan and timeline builder, so:

- a data-parallel ZeRO-0 rank IS the one-GPU bill plus DDP's gradient buckets (a copy of every gradient,
  PyTorch's default), for every recompute policy,
  convention, attention kind and LoRA setting;
- a rank never keeps more activations than the one-GPU bill times its micro-batches in flight;
- a policy that lowers the one-GPU peak lowers (never raises) every rank's peak, for layouts that split tensors
  the same way for every row kind (dp, cp, tp with sp);
- summing the shards each rank owns over all ranks gives the global resident items.

Examples: STEPBILL_PROPERTY_EXAMPLES (default 2,000 in all) spread over the tests below.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from stepbill.engine.bill import make_bill
from stepbill.engine.states import resident_lines
from stepbill.errors import StepbillError
from stepbill.spec.parallel import Parallel
from stepbill.spec.presets import load_model
from stepbill.spec.recipe import make_recipe

TOTAL_EXAMPLES = int(os.environ.get("STEPBILL_PROPERTY_EXAMPLES", "2000"))
SHARE = {"zero0": 0.4, "activations": 0.25, "policy": 0.15, "owned": 0.2}
MODELS = ["tests/data/tiny-llama.json", "gpt3-125m", "tests/data/hf_configs/qwen3-0.6b.json",
          "tests/data/hf_configs/pythia-160m.json", "tests/data/hf_configs/gpt2.json",
          "tests/data/hf_configs/qwen1.5-moe-a2.7b.json", "examples/configs/deepseek-v2-lite/config.json",
          "mixtral-8x7b", "llama3-8b"]
POLICIES = ["none", "full", "every:2", "every:auto", "selective:core_attn", "selective:core_attn,mlp",
            "selective:moe_act"]
RECIPES = ["mixed-bf16", "fp32", "pure-bf16", "amp-bf16"]


def _settings(share: str):  # type: ignore[no-untyped-def]
    return settings(max_examples=max(10, int(TOTAL_EXAMPLES * SHARE[share])), deadline=None,
                    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])


def _bill(model: str, parallel: Parallel, policy: str, convention: str, attention: str, precision: str = "mixed-bf16",
          lora: bool = False, seq: int = 256, micro_batch: int = 1):  # type: ignore[no-untyped-def]
    spec = load_model(model)
    recipe = make_recipe(precision, "adamw", micro_batch, seq, policy, 8 if lora else None, None, parallel)
    return make_bill(spec, recipe, convention=convention, attention=attention)


def _try(*args, **kwargs):  # type: ignore[no-untyped-def]
    """A bill, or None when the combination is refused with a one-line StepbillError (e.g. a selective module
    the model does not have, eager rows a family lacks)."""
    try:
        return _bill(*args, **kwargs)
    except StepbillError:
        return None


@_settings("zero0")
@given(model=st.sampled_from(MODELS), policy=st.sampled_from(POLICIES), convention=st.sampled_from(["ideal", "eager"]),
       attention=st.sampled_from(["sdpa", "eager"]), precision=st.sampled_from(RECIPES), lora=st.booleans(),
       dp=st.sampled_from([2, 4, 64]), micro_batches=st.sampled_from([1, 1, 4]), micro_batch=st.sampled_from([1, 2]))
def test_dp_zero0_rank_is_the_one_gpu_bill_plus_its_bucket(model: str, policy: str, convention: str, attention: str,
                                                           precision: str, lora: bool, dp: int, micro_batches: int,
                                                           micro_batch: int) -> None:
    one = _try(model, Parallel(micro_batches=micro_batches), policy, convention, attention, precision, lora,
               micro_batch=micro_batch)
    assume(one is not None)
    many = _bill(model, Parallel(dp=dp, micro_batches=micro_batches), policy, convention, attention, precision, lora,
                 micro_batch=micro_batch)
    (rank,) = many.ranks
    assert rank.ranks == dp
    buckets = one.lines["memory.grads"].value  # DDP's buckets: a copy of every gradient
    for key in ("peak", "peak_forward", "peak_backward"):
        assert rank.memory[key] == pytest.approx(one.lines[f"memory.{key}"].value + buckets, rel=1e-9, abs=64)
    assert rank.memory["activations"] == pytest.approx(one.lines["memory.activations"].value, rel=1e-9, abs=64)


LAYOUTS = st.fixed_dictionaries({
    "dp": st.sampled_from([1, 2, 8]), "tp": st.sampled_from([1, 2, 4]), "pp": st.sampled_from([1, 2, 4]),
    "cp": st.sampled_from([1, 2]), "sp": st.booleans(), "zero": st.sampled_from([0, 1, 2, 3]),
    "micro_batches": st.sampled_from([1, 4, 8]), "pp_schedule": st.sampled_from(["gpipe", "1f1b"]),
})


def _layout(d: dict) -> Parallel | None:
    try:
        return Parallel(**{**d, "sp": d["sp"] and d["tp"] > 1})
    except StepbillError:
        return None


@_settings("activations")
@given(model=st.sampled_from(MODELS), policy=st.sampled_from(POLICIES), convention=st.sampled_from(["ideal", "eager"]),
       attention=st.sampled_from(["sdpa", "eager"]), layout=LAYOUTS)
def test_rank_activations_never_exceed_the_one_gpu_bill_in_flight(model: str, policy: str, convention: str,
                                                                    attention: str, layout: dict) -> None:
    par = _layout(layout)
    assume(par is not None)
    many = _try(model, par, policy, convention, attention, seq=512)
    assume(many is not None)
    one = _bill(model, Parallel(), policy, convention, attention, seq=512)
    for c in many.ranks:
        assert c.memory["activations"] <= c.in_flight * one.lines["memory.activations"].value * (1 + 1e-9) + 64


@_settings("policy")
@given(model=st.sampled_from(MODELS), policy=st.sampled_from(POLICIES[1:]), convention=st.sampled_from(["ideal", "eager"]),
       dp=st.sampled_from([1, 2, 8]), cp=st.sampled_from([1, 2]), tp_sp=st.sampled_from([1, 2, 4]),
       zero=st.sampled_from([0, 1, 3]))
def test_a_policy_that_lowers_the_one_gpu_peak_lowers_every_rank(model: str, policy: str, convention: str, dp: int,
                                                                   cp: int, tp_sp: int, zero: int) -> None:
    par = _layout({"dp": dp, "tp": tp_sp, "pp": 1, "cp": cp, "sp": True, "zero": zero, "micro_batches": 1,
                   "pp_schedule": "1f1b"})
    assume(par is not None and par.world > 1)
    one_none = _try(model, Parallel(), "none", convention, "sdpa", seq=512)
    one = _try(model, Parallel(), policy, convention, "sdpa", seq=512)
    assume(one is not None and one_none is not None)
    assume(one.lines["memory.peak"].value < one_none.lines["memory.peak"].value)
    many_none = _try(model, par, "none", convention, "sdpa", seq=512)
    many = _try(model, par, policy, convention, "sdpa", seq=512)
    assume(many is not None and many_none is not None)
    assume(many.ranks[0].model == many_none.ranks[0].model)  # same per-rank model on both sides
    for lo, hi in zip(many.ranks, many_none.ranks, strict=True):
        assert lo.memory["peak"] <= hi.memory["peak"] * (1 + 1e-9)


@_settings("owned")
@given(model=st.sampled_from(MODELS), layout=LAYOUTS, convention=st.sampled_from(["ideal", "eager"]),
       lora=st.booleans(), ep=st.sampled_from([1, 2, 4]))
def test_owned_shards_sum_to_the_global_items(model: str, layout: dict, convention: str, lora: bool,
                                              ep: int) -> None:
    par = _layout({**layout, "ep": ep} if load_model(model).moe is not None else layout)
    assume(par is not None)
    bill = _try(model, par, "none", convention, "sdpa", lora=lora)
    assume(bill is not None)
    if any(c.model == "measured-exact" for c in bill.ranks):  # owned in the FSDP2/ZeRO-1 split (fp32 shards)
        return
    for line in resident_lines(bill.inventory, bill.recipe):
        total = sum(c.ranks * c.owned.get(line.name, 0.0) for c in bill.ranks)
        assert total == pytest.approx(line.value, rel=1e-9)
