"""The step timeline: items through forward, backward and optimizer; the peak, its moment and advice."""

from __future__ import annotations

import json

import pytest

from stepbill.engine.bill import make_bill
from stepbill.engine.params import param_inventory
from stepbill.engine.peak_items import peak_items
from stepbill.spec import load_preset
from stepbill.spec.recipe import make_recipe
from tests.conftest import GIB, run_cli

GPT = load_preset("gpt3-125m")
V3 = load_preset("deepseek-v3")


def test_gpt3_125m_activations_dominate_the_peak() -> None:
    """gpt3s-act-gt-resident: activations 2.11 GiB > resident 1.86 GiB, so the peak is activation-bound and
    the seed's advice is recompute / context parallel."""
    bill = make_bill(GPT, make_recipe(micro_batch=8, seq_len=1024))
    tl = bill.timeline
    assert tl is not None
    assert round(bill["memory.activations"].value / GIB, 2) == 2.11
    assert round(125e6 * 16 / GIB, 2) == 1.86 < 2.11
    assert tl.peak.dominant == "activations" and "recompute" in tl.advice and "context" in tl.advice
    # closed form: peak = weights + optimizer + all activations + grads of the LM head (tied) and the last layer
    inv = param_inventory(GPT)
    layer = sum(t.total for t in inv.tensors if t.layer_kind) // 12
    head = inv.total - 12 * layer
    expected = inv.total * (2 + 12) + 11_520 * 2 * 8192 * 12 + 2 * (head + layer)
    assert tl.peak.total == pytest.approx(expected, abs=2)
    assert tl.peak.phase == "backward" and tl.peak.label == "backward, layer 11 (dense)"


def test_items_over_time() -> None:
    bill = make_bill(GPT, make_recipe(micro_batch=8, seq_len=1024))
    moments = bill.timeline.moments
    fwd = [m for m in moments if m.phase == "forward"]
    bwd = [m for m in moments if m.phase == "backward"]
    assert all(m.items["grads"] == 0 for m in fwd)  # zero_grad(set_to_none=True): no grads in the forward
    acts = [m.items["activations"] for m in fwd[:-1]]
    assert acts == sorted(acts) and acts[0] == acts[-1] / 12  # one layer's worth per layer
    grads = [m.items["grads"] for m in bwd]
    assert grads == sorted(grads) and grads[-1] == bill["memory.grads"].value
    assert moments[-1].phase == "optimizer" and moments[-1].items["activations"] == 0
    assert sum(x.value for x in peak_items(bill)) == bill["memory.peak"].value


def test_states_dominate_with_small_activations() -> None:
    """Short sequence, fp32 AdamW: the optimizer side dominates → ZeRO/FSDP advice."""
    bill = make_bill(load_preset("llama2-7b"), make_recipe("fp32", seq_len=128))
    assert bill.timeline.peak.dominant == "optimizer" and "ZeRO" in bill.timeline.advice


def test_full_recompute_forward_peak_includes_working_set() -> None:
    """gpt3s-recompute-0.32: 12 layer inputs + one layer being computed; V3 106.75 GiB kept (+ one layer)."""
    bill = make_bill(GPT, make_recipe(micro_batch=8, seq_len=1024, recompute="full"))
    assert bill["memory.activations"].value == (12 * 768 + 11_520) * 2 * 8192
    v3 = make_bill(V3, make_recipe(seq_len=131_072, recompute="full"))
    names = {x.name: x.value for x in v3.activation_items}
    assert names["activations.layer_inputs"] / GIB == 106.75


def test_flops_in_bill() -> None:
    """flops.step = 3 × forward (+ recompute); the non-causal figure doubles the attention core."""
    bill = make_bill(V3, make_recipe(seq_len=131_072))
    fwd, attn = bill["flops.forward"].value, bill["flops.attention"].value
    assert bill["flops.step"].value == 3 * fwd
    assert bill["flops.step_noncausal"].value == 3 * (fwd + attn)
    assert round(bill["flops.step"].value / 1e15, 1) == 157.6  # bill-6nd-5.6x-160PF direct count
    full = make_bill(V3, make_recipe(seq_len=131_072, recompute="full"))
    assert full["flops.step"].value == pytest.approx(4 * fwd - 3 * bill["flops.lm_head"].value / 3)


def test_json_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["bill", "gpt3-125m", "--micro-batch", "8", "--seq", "1024", "--json",
                            "--recompute", "selective:core_attn,layernorm"], capsys)
    assert code == 0
    data = json.loads(out)
    mem = data["memory"]
    for key in ("peak", "peak_forward", "peak_backward", "activations"):
        assert isinstance(mem[key], int)
    assert mem["peak_phase"] in ("forward", "backward", "optimizer")
    assert sum(i["bytes"] for i in mem["items"]) == mem["peak"]
    assert data["flops"]["step_noncausal"] > data["flops"]["step"] > 0
    assert data["flops"]["recompute"] > 0
