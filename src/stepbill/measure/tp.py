"""Measure one rank of a tensor-parallel (and sequence-parallel) step, in one process.

A fake process group (``FakeStore``, backend ``fake``: every collective returns at once and moves no data) with
``init_device_mesh("cpu", (tp,))`` makes this process rank ``r`` of ``tp``; ``parallelize_module`` turns the
weights into DTensors holding rank r's slice, so the model, its gradients, the AdamW states and the step's
activations are what rank r would allocate. Fake tensors for large models, real ones for tiny.

The plan is torchtitan's Llama plan (torchtitan/models/llama3/infra/parallelize.py ``apply_tp``) with
transformers' LlamaForCausalLM module names:
- every decoder layer: ``self_attn.{q,k,v}_proj`` and ``mlp.{gate,up}_proj`` ColwiseParallel,
  ``self_attn.o_proj`` and ``mlp.down_proj`` RowwiseParallel;
- ``model.embed_tokens`` RowwiseParallel(input_layouts=Replicate()) (vocabulary rows split);
- ``lm_head`` ColwiseParallel with a Replicate output by default: the logits are all-gathered to the full
  vocabulary on every rank and transformers' loss (``ForCausalLMLoss``) runs on plain tensors. With
  ``loss_parallel=True`` (torchtitan's default) the head's output stays a ``Shard(-1)`` DTensor (this rank's
  vocabulary slice of the logits) and forward and backward run under torch's ``loss_parallel()``, which makes
  transformers' cross-entropy vocabulary-parallel;
- with ``sp`` (sequence parallel), as torchtitan: the embedding's output, every RMSNorm
  (``input_layernorm``, ``post_attention_layernorm``, ``model.norm``) and every residual stream are split along
  the sequence (``Shard(1)``, SequenceParallel on the norms), ``PrepareModuleInput`` all-gathers the
  attention's and the MLP's input (Shard(1) → Replicate), ``o_proj`` / ``down_proj`` reduce-scatter back to
  Shard(1) and the LM head's input is Shard(1). ``position_ids`` (0..T−1) are passed explicitly, because
  transformers would otherwise count positions from the rank's local sequence slice.
Without ``sp`` the norms stay replicated plain tensors and the row-parallel outputs are all-reduced.

MoE experts are not split: transformers 5 stores them grouped (3-D ``experts.gate_up_proj`` /
``experts.down_proj``) and torch ships no ParallelStyle for grouped expert weights (torchtitan's
``TensorParallel`` / ``ExpertParallel`` styles for them are its own code).

Iteration 1 warms up (AdamW states created); iteration 2 is tracked with ``MemTracker`` (``PhasePeaks`` as in
step.py). Recipes: fp32 and pure-bf16 (parameters, gradients and AdamW states in that dtype, single-tensor
AdamW).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from stepbill.errors import StepbillError
from stepbill.measure.build import Mode, build_model, hf_patches, new_fake_mode, require_torch
from stepbill.measure.sharded import MeasuredMemory, _flatten, fake_process_group, measured_fields
from stepbill.measure.step import PhasePeaks

TP_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")  # transformers' LlamaForCausalLM module names
TP_RECIPES = ("fp32", "pure-bf16")


@dataclass(frozen=True, kw_only=True)
class TPRankMeasurement(MeasuredMemory):
    """One rank of a tensor-parallel step: ``params`` / ``buffers`` / ``inputs`` are its DTensor slices plus the
    replicated parameters; the breakdowns are MemTracker's categories."""

    rank: int
    tp: int
    sp: bool


def tp_plan(model: Any, sp: bool, loss_parallel: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """torchtitan's Llama plan in transformers' names: (root plan, per-decoder-layer plan). `loss_parallel`:
    the LM head keeps its vocabulary shard of the logits (Shard(-1) DTensor) for torch's loss_parallel()."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    seq = Shard(1)
    root: dict[str, Any] = {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq if sp else Replicate()),
        "lm_head": ColwiseParallel(input_layouts=seq if sp else Replicate(),
                                   output_layouts=Shard(-1) if loss_parallel else Replicate(),
                                   use_local_output=not loss_parallel),
    }
    layer: dict[str, Any] = {
        "self_attn.q_proj": ColwiseParallel(),
        "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(),
        "self_attn.o_proj": RowwiseParallel(output_layouts=seq if sp else Replicate()),
        "mlp.gate_proj": ColwiseParallel(),
        "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(output_layouts=seq if sp else Replicate()),
    }
    if sp:
        root["model.norm"] = SequenceParallel()
        layer |= {
            "input_layernorm": SequenceParallel(),
            "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": seq},
                                            desired_input_kwarg_layouts={"hidden_states": Replicate()}),
            "post_attention_layernorm": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),)),
        }
        if hasattr(model.model.layers[0].self_attn, "q_norm"):  # qwen3: per-head norms on local heads
            layer |= {"self_attn.q_norm": SequenceParallel(use_local_output=True),
                      "self_attn.k_norm": SequenceParallel(use_local_output=True)}
    return root, layer


def _validate(config: dict[str, Any], tp: int, rank: int, seq_len: int, sp: bool, recipe: str) -> None:
    family = config.get("model_type")
    if family not in TP_FAMILIES:
        raise StepbillError(f"tensor-parallel measurement covers {', '.join(TP_FAMILIES)}, got {family!r}")
    if recipe not in TP_RECIPES:
        raise StepbillError(f"tensor-parallel measurement runs recipes {' and '.join(TP_RECIPES)}, got {recipe!r}")
    if tp < 2:
        raise StepbillError(f"tensor-parallel measurement needs --tp >= 2, got {tp}")
    if not 0 <= rank < tp:
        raise StepbillError(f"--rank must be in 0..{tp - 1}, got {rank}")
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    if heads % tp or kv % tp:
        raise StepbillError(f"--tp {tp} must divide the attention heads ({heads}) and kv heads ({kv})")
    if sp and seq_len % tp:
        raise StepbillError(f"--sp needs --seq ({seq_len}) divisible by --tp ({tp})")


def _config_dict(config_or_spec: Any) -> dict[str, Any]:
    if isinstance(config_or_spec, dict):
        return config_or_spec
    from stepbill.spec.hf import to_hf_config

    return to_hf_config(config_or_spec)


def measure_tp_rank(
    config_or_spec: Any,
    tp: int,
    sp: bool = False,
    micro_batch: int = 1,
    seq_len: int = 128,
    recipe: str = "fp32",
    *,
    rank: int = 0,
    mode: Mode = "real",
    loss_parallel: bool = False,
    lr: float = 1e-4,
) -> TPRankMeasurement:
    """Measure rank `rank` of a `tp`-way tensor-parallel step (sequence parallel with `sp`); see the module
    docstring. `config_or_spec`: a transformers config dict or a ModelSpec."""
    require_torch()
    import torch

    config = _config_dict(config_or_spec)
    _validate(config, tp, rank, seq_len, sp, recipe)
    settings = {"tp": tp, "sp": sp, "rank": rank, "micro_batch": micro_batch, "seq_len": seq_len, "mode": mode,
                "recipe": recipe, "lm_head_output": "Shard(-1), loss_parallel" if loss_parallel else "Replicate"}
    with contextlib.ExitStack() as stack:
        mesh = stack.enter_context(fake_process_group(rank, tp))
        fake_mode = new_fake_mode() if mode == "fake" else None
        model = build_model(config, dtype="bf16" if recipe == "pure-bf16" else "fp32", fake_mode=fake_mode)
        stack.enter_context(hf_patches(force_grouped_mm_fallback=False))
        if fake_mode is not None:
            stack.enter_context(fake_mode)
        from torch.distributed.tensor.parallel import loss_parallel as vocab_parallel_loss
        from torch.distributed.tensor.parallel import parallelize_module

        root, layer = tp_plan(model, sp, loss_parallel)
        loss_context = vocab_parallel_loss if loss_parallel else contextlib.nullcontext
        for block in model.model.layers:
            parallelize_module(block, mesh, layer)
        parallelize_module(model, mesh, root)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, foreach=False, fused=False)
        vocab = int(model.config.vocab_size)
        gen = torch.Generator().manual_seed(0) if fake_mode is None else None
        input_ids = torch.randint(0, vocab, (micro_batch, seq_len), generator=gen)
        position_ids = torch.arange(seq_len).unsqueeze(0) if sp else None

        def iteration(on_phase: Any = lambda p: None) -> None:
            with loss_context():
                on_phase("forward")
                loss = model(input_ids=input_ids, labels=input_ids, position_ids=position_ids, use_cache=False).loss
                on_phase("backward")
                loss.backward()
                del loss
            on_phase("optimizer")
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        iteration()
        from torch.distributed._tools.mem_tracker import MemTracker

        tracker = MemTracker()
        tracker.track_external(model, optimizer, input_ids, *(() if position_ids is None else (position_ids,)))
        phases = PhasePeaks(tracker, flatten=_flatten)
        with tracker:
            iteration(phases)
            phases.close()
    return TPRankMeasurement(rank=rank, tp=tp, sp=sp, **measured_fields(phases), settings=settings)
