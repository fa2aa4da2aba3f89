"""Invariants of the engine (stepbill.engine.bill.make_bill) over random models, recipes and layouts.

- totals are the sums of their items (resident, activations, peak, checkpoint; model + optimizer = resident);
- memory is monotone in sequence length, micro-batch and layers;
- a higher ZeRO stage never raises the resident bytes of any rank;
- the bytes each rank owns, summed over all ranks, equal the global items.

Example counts (FUZZ_SCALE multiplies them): 2,000 + 1,200 + 800 + 600 + 1,000 = 5,600.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from stepbill.engine.bill import make_bill
from stepbill.engine.peak_items import peak_items
from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import Parallel, validate_layout
from stepbill.spec.recipe import PRECISIONS, make_recipe
from tests.fuzz.test_cli_fuzz import examples
from tests.test_bill_properties import specs

recipes = st.fixed_dictionaries({
    "recipe": st.sampled_from(sorted(PRECISIONS)),
    "optimizer": st.sampled_from(["adamw", "adam", "sgd", "sgd-momentum", "lion", "adafactor", "muon"]),
    "micro_batch": st.integers(1, 8),
    "seq_len": st.integers(1, 4096),
    "recompute": st.sampled_from(["none", "full", "every:1", "every:2", "every:3", "every:auto",
                                  "selective:core_attn", "selective:core_attn,mlp", "selective:layernorm"]),
})
conventions = st.sampled_from(["ideal", "eager"])
attentions = st.sampled_from(["sdpa", "eager"])


def bill_or_reject(spec: ModelSpec, recipe: dict, convention: str = "ideal", attention: str = "sdpa", **kw):
    """The bill, or a rejected example when the inputs are refused in one line (e.g. a module with no tensor)."""
    try:
        return make_bill(spec, make_recipe(**recipe, **kw), None, convention, attention)
    except StepbillError:
        assume(False)
        raise


def sum_of(lines) -> float:
    return sum(x.value for x in lines)


@examples(2000)
@given(specs(), recipes, conventions, attentions)
def test_totals_are_sums_of_their_items(spec: ModelSpec, recipe: dict, convention: str, attention: str) -> None:
    bill = bill_or_reject(spec, recipe, convention, attention)
    lines = bill.lines
    assert all(math.isfinite(line.value) for line in lines.values())
    assert lines["memory.model"].value + lines["memory.optimizer"].value == lines["memory.resident"].value
    # Everything resident is an item, except AdamW's step counters under eager (counted in memory.optimizer).
    counters = lines["memory.resident"].value - sum_of(bill.resident_items)
    assert counters >= 0 and (convention == "eager" or counters == 0)
    assert lines["memory.activations"].value == sum_of(bill.activation_items)
    assert lines["memory.peak"].value == sum_of(peak_items(bill))
    assert lines["checkpoint.bytes"].value == sum_of(bill.checkpoint_items)
    assert lines["memory.peak"].value >= lines["memory.resident"].value - lines["memory.grads"].value


@examples(1200)
@given(specs(), recipes, conventions, st.integers(1, 2048), st.integers(1, 4))
def test_memory_is_monotone_in_seq_and_micro_batch(spec: ModelSpec, recipe: dict, convention: str, more_seq: int,
                                                   more_batch: int) -> None:
    base = bill_or_reject(spec, recipe, convention)
    longer = bill_or_reject(spec, {**recipe, "seq_len": recipe["seq_len"] + more_seq}, convention)
    bigger = bill_or_reject(spec, {**recipe, "micro_batch": recipe["micro_batch"] + more_batch}, convention)
    for key in ("memory.activations", "memory.peak"):
        assert longer[key].value >= base[key].value, key
        assert bigger[key].value >= base[key].value, key
    assert longer["memory.resident"].value == base["memory.resident"].value


@examples(800)
@given(st.data(), recipes, conventions, st.integers(1, 6), st.integers(1, 6))
def test_memory_is_monotone_in_layers(data: st.DataObject, recipe: dict, convention: str, layers: int,
                                      extra: int) -> None:
    base = data.draw(specs(layers=layers))
    deeper = ModelSpec.from_dict({**base.to_dict(), "n_layers": layers + extra})
    shallow, deep = bill_or_reject(base, recipe, convention), bill_or_reject(deeper, recipe, convention)
    for key in ("memory.resident", "memory.activations", "memory.peak", "checkpoint.bytes"):
        assert deep[key].value >= shallow[key].value, key


def _layout(data: st.DataObject, spec: ModelSpec, zero: int) -> Parallel:
    dp = data.draw(st.sampled_from([2, 4, 8]), label="dp")
    tp = data.draw(st.sampled_from([1, 2]), label="tp")
    pp = data.draw(st.sampled_from([1, 2]), label="pp")
    ep = data.draw(st.sampled_from([1, 2]), label="ep") if spec.moe is not None else 1
    try:
        parallel = Parallel(dp=dp, tp=tp, pp=pp, ep=ep, zero=zero, micro_batches=pp)
        validate_layout(spec, parallel, 1024)
    except StepbillError:
        assume(False)
        raise
    return parallel


@examples(600)
@given(st.data(), specs(layers=4), recipes)
def test_zero_stage_never_raises_resident_per_rank(data: st.DataObject, spec: ModelSpec, recipe: dict) -> None:
    recipe = {**recipe, "seq_len": 1024}
    base = _layout(data, spec, 0)
    worst = []
    for zero in (0, 1, 2, 3):
        parallel = Parallel(dp=base.dp, tp=base.tp, pp=base.pp, ep=base.ep, zero=zero, micro_batches=base.pp)
        bill = bill_or_reject(spec, recipe, parallel=parallel)
        by_stage = {c.stages: c.memory["resident"] for c in bill.ranks}
        worst.append(max(by_stage.values()))
    assert all(hi <= lo * (1 + 1e-12) for lo, hi in itertools.pairwise(worst)), worst


@examples(1000)
@given(st.data(), specs(layers=4), recipes, st.integers(0, 3))
def test_owned_shards_sum_to_the_global_items(data: st.DataObject, spec: ModelSpec, recipe: dict, zero: int) -> None:
    parallel = _layout(data, spec, zero)
    bill = bill_or_reject(spec, {**recipe, "seq_len": 1024}, parallel=parallel)
    owned: dict[str, float] = {}
    for rank_class in bill.ranks:
        for item, value in rank_class.owned.items():
            owned[item] = owned.get(item, 0.0) + value * rank_class.ranks
    for item in bill.resident_items:
        assert owned.get(item.name, 0.0) == pytest.approx(item.value, rel=1e-9), item.name
