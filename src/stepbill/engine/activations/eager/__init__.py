"""The `eager` convention: what eager PyTorch + transformers' modeling code keeps for backward.

Rows are read off transformers' modeling files and PyTorch's derivatives, per block kind (norms, attention,
ffn, moe, outside), and checked byte for byte against `torch.autograd.graph.saved_tensors_hooks`
(measure/saved.py; docs/eager-saved-tensors.md) on tiny models of every supported family, for the recipes
fp32, pure-bf16 and amp-bf16 (pass `EagerBytes(compute, param)`, see `from_precision`), with recompute none
and full. CPU kernel choices are modelled (that is what `check` measures): SDPA's flash kernel where head
widths match, its math path (fp32 S² probabilities) for MLA.

Per-token rows go to the engine's BLOCK_ROWS; rows that do not grow per token (`ActTensor.per`: RoPE tables
and position ids per position, autocast weight casts and grouped_mm offsets per layer, B=1 views) are in
`layer_fixed_rows` / `outside_fixed_rows` and counted by `saved_bytes`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stepbill.engine.activations.eager.attention import attention_weights, mla_uses_math_path
from stepbill.engine.activations.eager.blocks import BLOCKS
from stepbill.engine.activations.eager.dropout import fixed_rows as dropout_fixed_rows
from stepbill.engine.activations.eager.dtypes import FP32, EagerBytes, dt_of, from_precision
from stepbill.engine.activations.eager.ffn import ffn_weights
from stepbill.engine.activations.eager.gemma import norm_weight_constants
from stepbill.engine.activations.eager.masks import window_total_bytes
from stepbill.engine.activations.eager.moe import grouped_mm_offsets, moe_cast_weights
from stepbill.engine.activations.eager.outside import outside_fixed_rows, outside_rows
from stepbill.engine.activations.rows import ActTensor, Recompute, layer_kinds, layer_rows
from stepbill.engine.params import param_inventory
from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec

__all__ = [
    "BLOCKS",
    "EagerBytes",
    "amp_weight_cast_bytes",
    "fixed_bytes",
    "from_precision",
    "layer_bias_cast_bytes",
    "layer_cast_bytes",
    "layer_fixed_rows",
    "outside_bytes",
    "outside_bytes_on_rank",
    "outside_fixed_rows",
    "outside_rows",
    "saved_bytes",
]

RECOMPUTE = ("none", "full")


def layer_fixed_rows(spec: ModelSpec, layer_kind: str, act: int, micro_batch: int,
                     with_casts: bool = True) -> list[ActTensor]:
    """Rows of one layer that do not grow per token (no recompute)."""
    dt = dt_of(act)
    b, copy = "layer", Recompute("copy")
    rows: list[ActTensor] = []
    a = spec.attention
    if a.kind == "mla" and mla_uses_math_path(spec, dt.device) and micro_batch == 1 and dt.compute == FP32:
        rows.append(ActTensor("attn.v_view_extra", a.n_heads * a.qk_nope_head_dim, FP32,
                              "B=1, fp32: math SDPA's v is a view of kv_b_proj's whole output (k_nope part too)",
                              copy, "mla", per="position"))
    if layer_kind == "moe":
        offs = grouped_mm_offsets(spec, act)
        if offs:
            rows.append(ActTensor("moe.grouped_mm_offs", offs // 4, 4, "aten._grouped_mm: per-expert row offsets "
                                  "(int32)", copy, "moe", per="constant"))
    rows += norm_weight_constants(spec, "layer")
    rows += dropout_fixed_rows(spec, act, micro_batch)
    if dt.amp and with_casts:
        elems = attention_weights(spec) + (moe_cast_weights(spec) if layer_kind == "moe" else ffn_weights(spec))
        rows.append(ActTensor("amp.weight_casts", elems, dt.compute, "each linear's input grad: autocast's bf16 "
                              "copy of its weight (also the autocast cache)", copy, b, per="constant"))
    return rows


def fixed_bytes(rows: list[ActTensor], seq_len: Any) -> Any:
    """Bytes of `per` position / constant rows at `seq_len`."""
    return sum(r.bytes_per_token * (seq_len if r.per == "position" else 1) for r in rows)


def amp_weight_cast_bytes(spec: ModelSpec, act: int) -> int:
    """amp: bytes of autocast's bf16 weight copies that linears save (every layer + LM head); 0 otherwise."""
    dt = dt_of(act)
    if not dt.amp:
        return 0
    total = spec.vocab_size * spec.hidden_size
    for kind, n in layer_kinds(spec).items():
        total += n * (attention_weights(spec) + (moe_cast_weights(spec) if kind == "moe" else ffn_weights(spec)))
    return total * dt.compute


def layer_cast_bytes(spec: ModelSpec, layer_kind: str, act: int) -> int:
    """amp: bytes of autocast's bf16 copies of one layer's linear weights (the autocast cache); 0 otherwise."""
    dt = dt_of(act)
    if not dt.amp:
        return 0
    return (attention_weights(spec) + (moe_cast_weights(spec) if layer_kind == "moe" else ffn_weights(spec))) \
        * dt.compute


def layer_bias_cast_bytes(spec: ModelSpec, layer_kind: str, act: int) -> int:
    """amp: bytes of autocast's bf16 copies of one layer's linear biases (attention, dense FFN, router, shared
    experts; not the routed experts' banks, which are not cast, nor LayerNorm's); 0 otherwise. Autocast casts every
    floating argument of a cast-list op, F.linear's bias as its weight, and caches the copies of leaves that require
    grad; no op saves a bias's copy (addmm's backward reads none), so they go when the cache is cleared, as the
    forward leaves autocast. Measured (MemTracker, tiny gpt2, gpt_neox, qwen2_moe and gpt_oss, amp, recompute none):
    the forward's peak holds one bf16 copy of each linear bias per layer, the backward's none."""
    dt = dt_of(act)
    if not dt.amp:
        return 0
    return dt.compute * sum(t.numel for t in param_inventory(spec).tensors if t.layer_kind == layer_kind
                            and t.name.endswith(".bias") and t.component not in ("experts", "norms"))


def outside_bytes(spec: ModelSpec, act: int, seq_len: Any, micro_batch: Any, recompute: str = "none",
                  lora: Any = None) -> Any:
    """Bytes outside the layers for one micro-batch (per-token rows + fixed rows; amp's LM head weight cast
    left out: it is part of `amp_weight_cast_bytes`, the autocast cache); `lora`: the LoRA rows (outside_rows)."""
    per_token = sum(r.bytes_per_token for r in outside_rows(spec, act, lora))
    fixed = fixed_bytes(outside_fixed_rows(spec, act, int(micro_batch), recompute, with_casts=False), seq_len)
    return per_token * seq_len * micro_batch + fixed


def outside_bytes_on_rank(spec: ModelSpec, act: int, seq_len: int, micro_batch: int,
                          divisor: Callable[[ActTensor], float], tokens_divisor: float, lora: Any = None) -> float:
    """outside_bytes on one rank of a layout: each per-token row ÷ its Split divisor, the per-position rows
    ÷ `tokens_divisor` (cp)."""
    per_token = sum(r.bytes_per_token / divisor(r) for r in outside_rows(spec, act, lora))
    fixed = fixed_bytes(outside_fixed_rows(spec, act, micro_batch, "none", with_casts=False), seq_len)
    return per_token * seq_len * micro_batch + fixed / tokens_divisor


def saved_bytes(spec: ModelSpec, act: int, seq_len: Any, micro_batch: int = 1, recompute: str = "none") -> Any:
    """What saved_tensors_hooks counts for one forward of the training step (each storage once, kind
    "activation"): layers (rows × tokens + fixed rows) + outside the layers + amp weight casts.
    Full recompute (non-reentrant checkpoints per layer): each layer keeps only its input (hidden wide,
    residual stream = parameter dtype); the rest is rebuilt in the backward. Layers with an explicit
    sliding-window mask add what eager/masks.py says they keep."""
    if recompute not in RECOMPUTE:
        raise StepbillError(f"eager saved bytes model recompute none or full, got {recompute!r}")
    dt = dt_of(act)
    tokens = seq_len * micro_batch
    total = outside_bytes(spec, act, seq_len, micro_batch, recompute) + amp_weight_cast_bytes(spec, act)
    if recompute == "full":
        return total - _layer_casts(spec, act) + spec.n_layers * tokens * spec.hidden_size * dt.param
    for kind, n in layer_kinds(spec).items():
        rows = layer_rows(spec, kind, act, "eager")
        fixed = fixed_bytes(layer_fixed_rows(spec, kind, act, micro_batch, with_casts=False), seq_len)
        total = total + n * (tokens * sum(r.bytes_at(seq_len) for r in rows) + fixed)
    return total + window_total_bytes(spec, act, seq_len, micro_batch)  # sliding-window masks (eager/masks.py)


def _layer_casts(spec: ModelSpec, act: int) -> int:
    """amp weight casts inside the layers (the part of amp_weight_cast_bytes a full checkpoint does not keep)."""
    dt = dt_of(act)
    return amp_weight_cast_bytes(spec, act) - (spec.vocab_size * spec.hidden_size * dt.compute if dt.amp else 0)
