"""Properties of the bill over random models and recipes (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stepbill.engine.bill import make_bill
from stepbill.engine.params import param_inventory
from stepbill.engine.peak_items import peak_items
from stepbill.spec.model import AttentionSpec, FFNSpec, ModelSpec, MoESpec
from stepbill.spec.recipe import PRECISIONS, make_recipe

OPTIMIZERS = ["adamw", "sgd-momentum", "lion", "adafactor", "muon"]


@st.composite
def specs(draw: st.DrawFn, layers: int | None = None, heads_dim: tuple[int, int] | None = None) -> ModelSpec:
    n_heads, head_dim = heads_dim or (draw(st.sampled_from([2, 4, 8])), draw(st.sampled_from([16, 32, 64])))
    hidden = n_heads * head_dim
    moe = None
    if draw(st.booleans()):
        experts = draw(st.integers(2, 16))
        moe = MoESpec(experts, draw(st.integers(1, experts)), draw(st.sampled_from([32, 64, 128])))
    return ModelSpec(
        name="random",
        vocab_size=draw(st.integers(16, 5000)),
        hidden_size=hidden,
        n_layers=layers or draw(st.integers(1, 8)),
        attention=AttentionSpec(n_heads=n_heads, n_kv_heads=draw(st.sampled_from([1, n_heads]))),
        ffn=FFNSpec(draw(st.sampled_from([64, 256])), draw(st.sampled_from(["gelu_mlp", "swiglu"]))),
        moe=moe,
        norm=draw(st.sampled_from(["layernorm", "rmsnorm"])),
        positions=draw(st.sampled_from(["learned", "rotary"])),
        tied_embeddings=draw(st.booleans()),
    )


recipes = st.fixed_dictionaries(
    {
        "recipe": st.sampled_from(sorted(n for n, p in PRECISIONS.items() if p.quant is None)),  # qlora: LoRA only
        "optimizer": st.sampled_from(OPTIMIZERS),
        "micro_batch": st.integers(1, 8),
        "seq_len": st.integers(1, 4096),
        "recompute": st.sampled_from(["none", "full"]),
    }
)


@settings(max_examples=60, deadline=None)
@given(specs(), recipes)
def test_totals_equal_the_sum_of_items(spec: ModelSpec, recipe: dict) -> None:
    bill = make_bill(spec, make_recipe(**recipe))
    assert bill["memory.resident"].value == sum(x.value for x in bill.resident_items)
    assert bill["memory.activations"].value == sum(x.value for x in bill.activation_items)
    # The timeline's peak is one moment: never more than everything at once, never less than what is always there.
    assert bill["memory.peak"].value == sum(x.value for x in peak_items(bill))
    assert bill["memory.peak"].value <= bill["memory.resident"].value + bill["memory.activations"].value
    assert bill["memory.peak"].value >= bill["memory.resident"].value - bill["memory.grads"].value
    assert bill["memory.model"].value + bill["memory.optimizer"].value == bill["memory.resident"].value
    assert bill["checkpoint.bytes"].value == sum(x.value for x in bill.checkpoint_items)
    by_comp = bill.inventory.by_component()
    assert sum(total for total, _ in by_comp.values()) == bill["params.total"].value
    assert bill["params.active"].value <= bill["params.total"].value


@settings(max_examples=40, deadline=None)
@given(st.data(), recipes, st.integers(1, 6), st.integers(1, 6))
def test_memory_is_monotone_in_layers(data: st.DataObject, recipe: dict, layers: int, extra: int) -> None:
    base = data.draw(specs(layers=layers))
    deeper = ModelSpec.from_dict({**base.to_dict(), "n_layers": layers + extra})
    r = make_recipe(**recipe)
    assert make_bill(deeper, r)["memory.peak"].value > make_bill(base, r)["memory.peak"].value


@settings(max_examples=40, deadline=None)
@given(st.data(), recipes, st.sampled_from([2, 4]), st.sampled_from([16, 32]))
def test_memory_is_monotone_in_hidden(data: st.DataObject, recipe: dict, heads: int, head_dim: int) -> None:
    base = data.draw(specs(heads_dim=(heads, head_dim)))
    wider = ModelSpec.from_dict(
        {**base.to_dict(), "hidden_size": base.hidden_size * 2,
         "attention": {**base.to_dict()["attention"], "head_dim": head_dim * 2}}
    )
    r = make_recipe(**recipe)
    assert make_bill(wider, r)["memory.peak"].value > make_bill(base, r)["memory.peak"].value


@settings(max_examples=40, deadline=None)
@given(specs(), recipes, st.integers(1, 4), st.integers(1, 4))
def test_memory_is_monotone_in_tokens(spec: ModelSpec, recipe: dict, more_seq: int, more_batch: int) -> None:
    small = make_bill(spec, make_recipe(**recipe))
    longer = make_bill(spec, make_recipe(**{**recipe, "seq_len": recipe["seq_len"] + more_seq}))
    bigger = make_bill(spec, make_recipe(**{**recipe, "micro_batch": recipe["micro_batch"] + more_batch}))
    assert longer["memory.activations"].value > small["memory.activations"].value
    assert bigger["memory.activations"].value > small["memory.activations"].value
    assert longer["memory.resident"].value == small["memory.resident"].value


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(specs(), recipes, st.integers(1, 64), st.sampled_from([("q_proj",), ("q_proj", "v_proj"), ("o_proj", "down_proj")]))
def test_lora_never_costs_more_than_full_fine_tuning(spec: ModelSpec, recipe: dict, rank: int, targets: tuple) -> None:
    """For a low rank (adapter at most half of each targeted matrix: r ≤ in·out / 2(in+out)), LoRA's resident
    state and checkpoint never exceed full fine-tuning's."""
    targeted = [t.shape for t in param_inventory(spec).tensors
                if len(t.shape) == 2 and t.name.removesuffix(".weight").split(".")[-1] in targets]
    assume(all(rank <= out * inp / (2 * (out + inp)) for out, inp in targeted))
    full = make_bill(spec, make_recipe(**recipe))
    lora = make_bill(spec, make_recipe(**recipe, lora_rank=rank, lora_targets=targets))
    assert lora["memory.resident"].value <= full["memory.resident"].value
    assert lora["checkpoint.bytes"].value <= full["checkpoint.bytes"].value
    assert lora["memory.peak"].value <= full["memory.peak"].value
