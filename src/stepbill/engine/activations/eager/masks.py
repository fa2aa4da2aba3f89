"""Sliding-window attention under the eager convention: the explicit mask SDPA then gets, and what it keeps.

What transformers 5.24 builds (masking_utils.py, read and measured with saved_tensors_hooks on tiny mistral,
phi3 and gemma3_text models, torch 2.13 CPU):

- `create_sliding_window_causal_mask` → `sdpa_mask` returns None (SDPA then runs with `is_causal=True` and no
  mask) while the sequence is shorter than the window (`_ignore_causal_mask_sdpa`: kv_length <
  local_attention_size); at seq ≥ window it builds a boolean mask, one 1×1×S×S storage (1 B per element)
  expanded to B×1×S×S (a view), shared by every sliding layer and alive until the decoder's forward returns.
  Full-attention layers of the same model (Gemma3's every 6th) still get None.
- `sdpa_attention_forward` with a mask: `use_gqa_in_sdpa` is False (CPU and CUDA need "no mask"), so k and v go
  through `repeat_kv` — new B×H×S×d copies at query-head width — instead of SDPA's `enable_gqa` on the kv-head
  tensors, and `is_causal` is False.
- `torch.nn.functional.scaled_dot_product_attention` converts the boolean mask to the query's dtype
  (`convert_boolean_attn_mask`: 0 / −inf, a new B×1×S×S tensor, every layer its own) and passes it to the kernel.
  On CPU that is the flash kernel (`_scaled_dot_product_flash_attention_for_cpu` takes a mask), which saves
  q, the expanded k and v, its output, the fp32 logsumexp and the converted mask for backward (measured: one
  B·S² storage in the compute dtype per masked layer; bf16 under amp). On CUDA (not measured here: this machine
  has no GPU) PyTorch's `sdp_utils.cpp` keeps the flash kernel off when a mask is given (`check_for_attn_mask`)
  and takes the memory-efficient kernel, which saves the same q, k, v, output and mask (as its `attn_bias`,
  last dimension padded to a multiple of 16) and a logsumexp padded to 32 positions; the math path (S² scores)
  runs only where neither fused kernel is allowed. The bill models the CPU flash kernel; on CUDA its rows hold
  at sequences that are multiples of 32.
- Families with no SDPA path (gemma2, gpt_oss: engine/flops.NO_SDPA_FAMILIES) run eager attention, whose
  additive mask autograd does not keep: their rows do not change. Their decoder builds one additive mask per
  attention type (`decoder_masks`, below), which checkpoints do keep.

Per masked layer the eager rows therefore change by: + the converted mask (B·S² in the compute dtype) + k and v
at H heads instead of what full attention keeps for them (k at kv-head width; v a view of v_proj's output, or
Phi-3's whole fused qkv output). `masked_layers` says which layers; `window_layer_bytes` what one keeps extra.
The layer rows of the engine are per layer kind, so a model mixing masked and full layers (Gemma3) spreads the
extra evenly over the layers of a kind (`window_fixed_bytes`): exact at the end of the forward, within one
layer's extra while the backward frees them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepbill.engine.activations.eager.attention import mha_rows
from stepbill.engine.activations.eager.dtypes import INT64, dt_of
from stepbill.engine.activations.rows import ActTensor, Recompute, _attn_core
from stepbill.engine.flops import NO_SDPA_FAMILIES, masked_layers
from stepbill.engine.kinds import Split
from stepbill.spec.model import ModelSpec

__all__ = ["DecoderMask", "decoder_masks", "masked_layer_rows", "masked_layers", "window_fixed_bytes",
           "window_layer_bytes", "window_total_bytes"]


def masked_layer_rows(spec: ModelSpec, act: int) -> tuple[list[ActTensor], tuple[str, ...]]:
    """What one masked layer saves instead of the full-attention rows: (rows added, names of the mha rows they
    replace). The mask row is B·S² (`per_token2`, one "head")."""
    dt = dt_of(act)
    a, c, b = spec.attention, dt.compute, "mha"
    core = _attn_core(spec)
    rows = [ActTensor("attn.window_mask", 1, c, "SDPA backward: the sliding-window mask converted to the compute "
                      "dtype (B·1·S·S, one per layer)", core, b, "attn.core", per_token2=True)]
    if a.kv_heads == a.n_heads:
        return rows, ()
    d = spec.hidden_size
    rows += [
        ActTensor("attn.k_rep", a.n_heads * a.qk_head_dim, c, "SDPA k: repeat_kv's copy at query-head width (a mask "
                  "turns enable_gqa off)", Recompute("linear", d, a.kv_heads * a.qk_head_dim), b, split=Split.TP),
        ActTensor("attn.v_rep", a.n_heads * a.v_dim, c, "SDPA v: repeat_kv's copy at query-head width",
                  Recompute("linear", d, a.kv_heads * a.v_dim), b, split=Split.TP),
    ]
    return rows, ("attn.k", "attn.qkv" if a.fused_qkv else "attn.v")


def window_layer_bytes(spec: ModelSpec, act: int, seq_len: Any, micro_batch: Any) -> Any:
    """Bytes one masked layer saves beyond the full-attention rows, over a micro-batch (B·S tokens)."""
    added, replaced = masked_layer_rows(spec, act)
    gone = sum(r.bytes_per_token for r in mha_rows(spec, act) if r.name in replaced)
    per_token = sum(r.bytes_at(seq_len) for r in added) - gone
    return per_token * seq_len * micro_batch


def window_total_bytes(spec: ModelSpec, act: int, seq_len: int, micro_batch: int) -> int:
    """Bytes every masked layer of the model saves beyond the full-attention rows (0 below the window)."""
    n = len(masked_layers(spec, seq_len))
    return n * window_layer_bytes(spec, act, seq_len, micro_batch) if n else 0


def window_fixed_bytes(spec: ModelSpec, layer_kind: str, act: int, seq_len: int, micro_batch: int) -> int:
    """The masked layers' extra bytes spread evenly over the layers of `layer_kind` (per layer, rounded)."""
    masked = masked_layers(spec, seq_len)
    kinds = [i for i in range(spec.n_layers) if ("moe" if spec.is_moe_layer(i) else "dense") == layer_kind]
    mine = sum(1 for i in kinds if i in masked)
    if not mine:
        return 0
    return round(mine * window_layer_bytes(spec, act, seq_len, micro_batch) / len(kinds))


@dataclass(frozen=True)
class DecoderMask:
    """One attention mask transformers' decoder forward builds before its layers run: its bytes (whole
    micro-batch) and the layers it is handed to (every one of them, or none: then only the decoder names it)."""

    bytes: int
    layers: tuple[int, ...]


def decoder_masks(spec: ModelSpec, act: int, seq_len: int, micro_batch: int) -> tuple[DecoderMask, ...]:
    """The masks the decoder's forward names while its layers run (transformers 5.24, use_cache=False, no padding).

    - SDPA families: the boolean sliding-window mask at seq ≥ window (1×1×S×S, 1 B, expanded: a view; module
      docstring), handed to the masked layers; none below the window.
    - Families with no SDPA path (gemma2, gpt_oss): `Gemma2Model.forward` / `GptOssModel.forward` build
      `causal_mask_mapping = {"full_attention": create_causal_mask(...), "sliding_attention":
      create_sliding_window_causal_mask(...)}` whatever the layers use; for the "eager" implementation both go
      through masking_utils.eager_mask, which calls sdpa_mask with allow_is_causal_skip=False (a mask at every
      length, below the window too) and then `torch.where(mask, 0, finfo(dtype).min)` on the 1×1×S×S boolean
      expanded to B×1×S×S: a new B·S² tensor in `inputs_embeds.dtype` (the parameter dtype: fp32 under amp,
      whose embedding runs outside autocast's cast list); the boolean is freed. Each layer gets the mask of its
      type (`causal_mask_mapping[config.layer_types[i]]`). Traced op by op (tiny gemma2 and gpt_oss, torch 2.13
      CPU): two `where` outputs of B·1·S·S, nothing else S²-sized outside the layers.

    Alive while the decoder's forward runs (`causal_mask_mapping` is its local, freed when it returns); a
    checkpointed layer holds its mask to the end of its backward (`checkpoint_held`)."""
    if spec.family not in NO_SDPA_FAMILIES:
        masked = masked_layers(spec, seq_len)
        return (DecoderMask(seq_len * seq_len, masked),) if masked else ()
    additive = micro_batch * seq_len * seq_len * dt_of(act).param
    sliding = spec.attention.sliding_layers
    full = DecoderMask(additive, tuple(i for i in range(spec.n_layers) if i not in sliding))
    if spec.attention.sliding_window is None:  # no window configured: transformers builds the causal one alone
        return (full,)
    return full, DecoderMask(additive, sliding)


def checkpoint_held(spec: ModelSpec, act: int, seq_len: int, micro_batch: int, *, segment: int,
                    core_attn: bool) -> tuple[tuple[int, int], ...]:
    """What the checkpoints of a recompute hold beyond their inputs and the RoPE tables, as (layer index, bytes):
    freed once the backward of that layer ends.

    Non-reentrant torch.utils.checkpoint keeps the function it reruns and its arguments (`recompute_fn` in
    torch/utils/checkpoint.py's _checkpoint_without_reentrant_generator closes over `fn`, `args`, `kwargs`); its
    frame is referenced by the unpack hooks of every tensor the checkpointed region saved, so it lives until
    the last of those is released at the end of the region's backward. transformers' GradientCheckpointingLayer
    (modeling_layers.py) checkpoints `partial(forward, self, **kwargs)`: the layer's `attention_mask` and
    `position_ids` kwargs stay with it. `segment` K > 0 (full: 1, every:K: K layers a checkpoint): each
    checkpoint's mask (a mask shared by several layers is one storage, held until the backward of the run
    holding the lowest of them) and the position ids (int64 · S, every layer's: freed with layer 0; GPT-2's
    position embedding saves them anyway); 0: no layer checkpoints. `core_attn` (selective:core_attn): the
    attention function's checkpoint holds the mask and the position ids (the attention module hands its `**kwargs`
    on to the attention function; Llama-3.2-1B fake, seq 512: −4,096 B → 0). Traced op by op (tiny gemma2 fp32, full
    recompute):
    gemma2's full-attention mask is freed after layer 1's backward, its sliding mask and the position ids after
    layer 0's."""
    if not (segment or core_attn):
        return ()
    run = max(segment, 1)
    held = tuple((min(m.layers) // run * run, m.bytes) for m in decoder_masks(spec, act, seq_len, micro_batch)
                 if m.layers)
    # learned positions (GPT-2): the position embedding's backward saves the ids already (an outside row)
    ids = spec.positions != "learned"
    return (*held, (0, INT64 * seq_len)) if ids else held
