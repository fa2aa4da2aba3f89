"""MLA on CPU SDPA's math path (q/k and v head widths differ: `_scaled_dot_product_attention_math`, aten
native/transformers/attention.cpp) in a step that keeps every row (no recompute), under the eager convention: the
largest op of a layer's forward and of its attention's backward, as InnerMoments against the layer's end / its
backward's rows. `forward_attention_peak` also serves `--attention eager`'s scores / softmax
(eager_layer.eager_attention_forward_peak): EagerTerms.attn_fwd holds one per layer kind.

Traced op by op (tiny deepseek_v3, torch 2.13 CPU, transformers 5.x, recompute none; fp32, pure-bf16, amp-bf16; seq
256 / 512 / 1024, B = 1 and 2; a TorchDispatchMode keeping every live storage, matching MemTracker's totals):

- forward: the peak is the last layer's mask addition — the math path adds its causal mask to Q·Kᵀ out of place, a
  second B·H·T² fp32 tensor while the `bmm`'s is alive — once H·T² outgrows the logits; the softmax right after
  holds the same bytes (the masked scores and P). Beside the rows made so far, the layer names what
  modeling_deepseek_v3.py's DeepseekV3Attention.forward holds up to SDPA (eager_layer.mla_math_locals), the math
  path's fp32 copies of q and k in bf16 / amp (`query_.to(at::kFloat)`; v's is the attn.v row) and its causal mask
  (`where(tril(ones))`, T×T fp32, shared by the batch); the model's forward names RoPE's cos / sin, the position ids
  and (bf16 weights) the layer's input and the embedding output (_named_outside).
- backward: the peak is the attention core's softmax backward (`_softmax_backward_data`): dP (`bmm` of dO and vᵀ)
  and dS, both B·H·T² fp32, with dV (Pᵀ·dO, fp32) and the residual stream's gradient (tokens·h, the residual's
  dtype); P·V's backward has freed v and o_proj's backward its input, the FFN / MoE block's backward all its rows
  (and, at B=1 in fp32, kv_b_proj's output the v row viewed; MoE: grouped_mm's offsets) and made its weight
  gradients, o_proj's and the post-attention norm's.
"""

from __future__ import annotations

from stepbill.engine import activations as act
from stepbill.engine.activations import eager
from stepbill.engine.activations.eager.attention import mla_uses_math_path
from stepbill.engine.activations.eager.dtypes import Dt
from stepbill.engine.activations.eager.moe import grouped_mm_offsets
from stepbill.engine.activations.eager.outside import rope_width
from stepbill.engine.memory.eager_layer import eager_attention_forward_peak, later_casts, mla_math_locals
from stepbill.engine.memory.eager_moe import InnerMoment
from stepbill.engine.params import ParamInventory
from stepbill.spec.model import ModelSpec

FP32 = 4
INT64 = 8
# parameter components whose gradients exist when a layer's attention core runs backward (with o_proj's and the
# post-attention norm's): the FFN / MoE block's
BACKWARD_FIRST = ("ffn", "experts", "shared_experts", "router")


def attention_backward_peak(spec: ModelSpec, kind: str, rows: list, width: object, inventory: ParamInventory,
                            count: int, grad_bytes: int, n: int, t: int, keeps_all: bool) -> tuple[InnerMoment, ...]:
    """MLA on the math path, every row kept: its softmax backward against the layer's rows (module doc); () where
    MLA does not take the math path. `rows`: the layer's rows in forward order; `count`: the plan's layers of `kind`
    (the inventory's totals span them)."""
    dt = eager.dt_of(width)
    names = [r.name for r in rows]
    attn, ffn = act.layer_blocks(spec, kind)
    if not keeps_all or attn != "mla" or not mla_uses_math_path(spec, dt.device) or "attn.probs" not in names:
        return ()
    a, heads = spec.attention, spec.attention.n_heads
    # freed by the backwards run so far: v (P·V's), o_proj's input and everything the FFN / MoE block saved
    freed = round(sum(r.bytes_at(t) for r in rows[names.index("attn.v"):]) * n)
    if dt.compute == FP32 and not dt.amp and n == t:  # B=1, fp32: v viewed kv_b_proj's whole output (a fixed row)
        freed += FP32 * heads * a.qk_nope_head_dim * t
    if kind == "moe":  # grouped_mm's offsets (a fixed row), freed with the routed experts' backward
        freed += grouped_mm_offsets(spec, width)
    # the residual stream's gradient (its dtype: bf16 in pure-bf16, fp32 in fp32 / amp), dV (Pᵀ·dO, fp32: the math
    # path's dtype), dP and dS (B·H·T² fp32 each)
    temps = (dt.param * spec.hidden_size + FP32 * heads * a.v_head_dim + 2 * FP32 * heads * t) * n
    done = sum(x.total for x in inventory.tensors if x.layer_kind == kind and (
        x.component in BACKWARD_FIRST or x.name in ("attn.o_proj.weight", "post_attn_norm.0")))
    return (InnerMoment(-freed, temps, 0, done // count * grad_bytes, -later_casts(spec, ffn) if dt.amp else 0),)


def forward_attention_peak(spec: ModelSpec, kind: str, rows: list, width: object, n: int, t: int, b: int,
                           keeps_all: bool) -> InnerMoment:
    """The layer's largest forward attention op against its end (whole micro-batch); zero where none is modelled.
    `rows`: the layer's rows in forward order; `keeps_all`: the plan keeps every row (MLA's moment is traced so; a
    checkpointed core's forward is recompute/core_attn's)."""
    mla = mla_math_forward_saving(spec, kind, rows, width, n, t) if keeps_all else None
    if mla is not None:
        return mla
    return InnerMoment(eager_attention_forward_peak(spec, rows, width, n, t, b), 0, 0, 0)


def mla_math_forward_saving(spec: ModelSpec, kind: str, rows: list, width: object, n: int,
                            t: int) -> InnerMoment | None:
    """MLA on the math path in a forward that keeps its rows: at the mask's addition (Q·Kᵀ and the masked scores,
    both B·H·T² fp32; P and the rows after it not made yet) or at P·V (P's bf16 copy in bf16 / amp, the fp32 P·V
    and its cast: o_proj's input and the FFN's rows not made yet). None where MLA does not take the math path."""
    dt = eager.dt_of(width)
    names = [r.name for r in rows]
    attn, ffn = act.layer_blocks(spec, kind)
    if attn != "mla" or not mla_uses_math_path(spec, dt.device) or "attn.probs" not in names:
        return None
    a, c, heads = spec.attention, dt.compute, spec.attention.n_heads
    low = dt.amp or c != FP32

    def not_yet(first: str) -> float:  # per token: the rows made from `first` on
        return sum(r.bytes_at(t) for r in rows[names.index(first):])

    unsaved = sum(size for name, size in mla_math_locals(spec, dt, n // t).items() if name not in names)
    # bf16 / amp: the math path's fp32 q and k (`query_.to(at::kFloat)`), alive to its end; fp32: no copy. The attn.v
    # row exists before Q·Kᵀ as v's fp32 copy (bf16 / amp) or, at B=1 in fp32, as kv_b_proj's output; in fp32 at B > 1
    # it is the copy P·V's bmm makes of the expanded v (traced)
    upcast = FP32 * heads * 2 * a.qk_head_dim if low else 0
    v_early = rows[names.index("attn.v")].bytes_at(t) if low or n == t else 0
    at_mask = 2 * FP32 * heads * t - not_yet("attn.probs") + v_early
    # P·V (`matmul(attn, value)`): bf16 / amp also make P's bf16 copy and cast the fp32 output back (as the rebuild's
    # trace found it: eager_layer.mla_math_rebuild_low); the larger only at sequences shorter than a few head widths
    at_pv = (c * heads * t if low else 0) + (FP32 + (c if low else 0)) * heads * a.v_head_dim - not_yet("attn.o_in")
    change = round((unsaved + upcast + max(at_mask, at_pv)) * n) + FP32 * t * t + _named_outside(spec, dt, n, t)
    if kind == "moe":  # aten._grouped_mm's offsets (a fixed row of the layer) are made after the attention
        change -= grouped_mm_offsets(spec, width)
    # amp: o_proj's and the FFN / MoE block's weight casts are made after the attention's core
    return InnerMoment(change, 0, 0, 0, -later_casts(spec, ffn) if dt.amp else 0)


def _named_outside(spec: ModelSpec, dt: Dt, n: int, t: int) -> int:
    """What the model's forward names while a layer runs that the layers' end moments leave out: RoPE's cos / sin
    (`position_embeddings`, the hidden states' dtype, per position; saved, an outside row), the position ids
    (`cache_position`, T int64) and, where the attention's RMSNorm saves an fp32 copy of its input (bf16 weights),
    the layer's input (`residual`) and the embedding output (`inputs_embeds`, named through the layers; in layer 0
    the same tensor as its input: that layer's moment counts it twice, never the forward's peak)."""
    rope = 2 * rope_width(spec) * dt.param * t
    copies = 2 * dt.param * spec.hidden_size * n if dt.param != FP32 else 0
    return rope + INT64 * t + copies
