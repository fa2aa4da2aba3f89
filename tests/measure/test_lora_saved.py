"""LoRA's activation rule measured with torch.autograd.graph.saved_tensors_hooks (engine/activations/lora.py): a
frozen nn.Linear saves no input for backward; a PEFT-style adapter on it (base(x) + B(A(x))·scale, lora_dropout 0)
saves x for A's weight gradient and A's r-wide output for B's."""

from __future__ import annotations

import pytest
import torch
from torch import nn

D, F, R, T = 64, 256, 8, 32


class LoRALinear(nn.Module):
    """PEFT's LoRA layer, reduced: a frozen base Linear plus A [in → r] and B [r → out], dropout = Identity."""

    def __init__(self, base: nn.Linear, rank: int) -> None:
        super().__init__()
        self.base = base
        self.lora_A = nn.Linear(base.in_features, rank, bias=False)
        self.lora_B = nn.Linear(rank, base.out_features, bias=False)
        self.scaling = 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scaling


def saved_activation_bytes(model: nn.Module, x: torch.Tensor) -> int:
    """Bytes of the distinct non-parameter storages autograd saves during the forward."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x).sum().backward()
    return sum(seen.values())


def block(frozen: bool, adapter_on_first: bool = False) -> nn.Module:
    torch.manual_seed(0)
    up, down = nn.Linear(D, F, bias=False), nn.Linear(F, D, bias=False)
    for p in (*up.parameters(), *down.parameters()):
        p.requires_grad_(not frozen)
    first: nn.Module = LoRALinear(up, R) if adapter_on_first else up
    return nn.Sequential(first, nn.SiLU(), down)


def test_frozen_linears_keep_no_input() -> None:
    """Linear–SiLU–Linear, the input requiring grad (an upstream layer trains): trainable weights keep x, the
    SiLU input and the SiLU output; frozen ones keep only the SiLU input. The difference is exactly the two
    Linears' inputs (the user trial's W7 demo)."""
    x = torch.randn(T, D, requires_grad=True)
    trainable = saved_activation_bytes(block(False), x)
    frozen = saved_activation_bytes(block(True), x)
    four = 4  # fp32
    assert trainable == T * (D + F + F) * four
    assert frozen == T * F * four
    assert trainable - frozen == T * (D + F) * four


def test_adapter_keeps_its_input_and_a_rank_wide_output() -> None:
    """A LoRA pair on the frozen first Linear brings back its input x (A's weight gradient reads it) and adds A's
    output, r wide (B's weight gradient); the second Linear, frozen without adapter, still keeps nothing."""
    x = torch.randn(T, D, requires_grad=True)
    frozen = saved_activation_bytes(block(True), x)
    lora = saved_activation_bytes(block(True, adapter_on_first=True), x)
    assert lora - frozen == T * (D + R) * 4


def _tiny_llama_layer_bytes_per_token(recipe: str, lora: bool, layer: int = 1) -> int:
    """Activation bytes per token autograd saves in one decoder layer of the tiny Llama, with q,v adapters (r 8)
    on a frozen base when `lora`."""
    from stepbill.measure.saved import collect
    from stepbill.measure.session import StepSession
    from stepbill.measure.tiny import TINY_CONFIGS

    b, t = 2, 64
    with StepSession(TINY_CONFIGS["llama"], recipe=recipe, micro_batch=b, seq_len=t, mode="real") as s:
        if lora:
            for p in s.model.parameters():
                p.requires_grad_(False)
            for block in s.model.model.layers:
                for name in ("q_proj", "v_proj"):
                    base = getattr(block.self_attn, name)
                    setattr(block.self_attn, name, LoRALinear(base, R).to(base.weight.dtype))
        rows = collect(s)
    prefix = f"model.layers.{layer}."
    return sum(r.bytes for r in rows if r.kind == "activation" and r.module.startswith(prefix)) // (b * t)


@pytest.mark.parametrize("recipe", ["fp32", "pure-bf16"])
def test_tiny_llama_lora_layer_matches_the_eager_rows(recipe: str) -> None:
    """A transformers Llama with PEFT-style q,v adapters on a frozen base: a middle layer keeps exactly the eager
    rows under the LoRA rule (gate/up's and down's inputs and both RMSNorm x̂ gone, two r-wide A outputs added).
    (amp-bf16 is left out: its saved bf16 weight casts are the autocast cache, billed outside the layer rows.)"""
    from stepbill.engine.activations import layer_rows
    from stepbill.engine.activations.eager.dtypes import from_precision
    from stepbill.measure.tiny import TINY_CONFIGS
    from stepbill.spec.hf import from_hf_config
    from stepbill.spec.recipe import LoRA, precision

    spec = from_hf_config(TINY_CONFIGS["llama"])
    width = from_precision(precision(recipe))
    for lora in (None, LoRA(R, ("q_proj", "v_proj"))):
        predicted = sum(r.bytes_per_token for r in layer_rows(spec, "dense", width, "eager", lora=lora))
        assert _tiny_llama_layer_bytes_per_token(recipe, lora is not None) == predicted


@pytest.mark.parametrize("targets", [("q_proj", "v_proj"), ("all-linear",)])
def test_tiny_llama_lora_flops_exactly(targets: tuple[str, ...]) -> None:
    """FlopCounterMode on the tiny Llama with adapters on a frozen base equals the bill's flops.step_noncausal
    exactly: no weight gradient for frozen weights, no input gradient for layer 0's q/k/v (and their A), the
    adapters' forward and backward added."""
    from stepbill.engine.bill import make_bill
    from stepbill.measure.flops import count_flops
    from stepbill.measure.session import StepSession
    from stepbill.measure.tiny import TINY_CONFIGS
    from stepbill.spec.hf import from_hf_config
    from stepbill.spec.recipe import make_recipe

    names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj") \
        if targets == ("all-linear",) else targets
    b, t = 2, 64
    with StepSession(TINY_CONFIGS["llama"], recipe="fp32", micro_batch=b, seq_len=t, mode="real") as s:
        for p in s.model.parameters():
            p.requires_grad_(False)
        for block in s.model.model.layers:
            for parent in (block.self_attn, block.mlp):
                for name in names:
                    if hasattr(parent, name):
                        setattr(parent, name, LoRALinear(getattr(parent, name), R))
        measured, _ = count_flops(s.forward_backward)
    spec = from_hf_config(TINY_CONFIGS["llama"])
    bill = make_bill(spec, make_recipe("fp32", seq_len=t, micro_batch=b, lora_rank=R, lora_targets=targets),
                     convention="eager")
    assert bill["flops.step_noncausal"].value == measured
