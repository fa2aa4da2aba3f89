"""The `eager` convention: what eager PyTorch + transformers' modeling code keeps for backward.

Read off transformers' modeling files and PyTorch's derivatives, and checked against
`torch.autograd.graph.saved_tensors_hooks` counts (measure/saved.py, docs/eager-saved-tensors.md; each
storage once). Llama family (llama, mistral, qwen2: RMSNorm + MHA/GQA with RoPE + SwiGLU), SDPA on CPU,
recipes whose parameters are in the compute dtype (fp32, pure-bf16; `activation` bytes = that dtype):

- RMSNorm upcasts to fp32: saves x in fp32 (4 B, a new storage unless x is fp32 already), 1/rms per token
  (fp32) and x̂ in the parameter dtype (`weight · x̂.to(dtype)`); its output is saved once by the next
  projections (q/k/v, gate/up share it);
- SDPA (flash on CPU) saves q and k after RoPE (new storages), v (a view of v_proj's output), the output
  (also o_proj's input) and logsumexp in fp32 (4 B per head per token); no S² tensor;
- SwiGLU saves the gate output (SiLU input), the SiLU output, the up output and the product (down's input);
- outside the layers: the final norm (as above), the LM head input, the fp32 log-softmax of the logits
  (transformers upcasts them for the loss: 4·V B per token), the shifted labels (int64), and the RoPE cos/sin
  tables (per position, shared by the batch and every layer).

Not modelled here (raise): MLA, MoE, GELU-MLP/LayerNorm families, qk-norm, amp autocast (weight casts).
"""

from __future__ import annotations

from typing import Any

from stepbill.engine.activations import FP32, ActTensor, Recompute, _attn_core, _residual_mid
from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec

INT64 = 8


def _norm(prefix: str, spec: ModelSpec, act: int, block: str, source: Recompute) -> list[ActTensor]:
    d = spec.hidden_size
    return [
        ActTensor(f"{prefix}.norm_x_fp32", d, FP32, "RMSNorm pow and x·r (input upcast to fp32)", source, block),
        ActTensor(f"{prefix}.norm_rstd", 1, FP32, "RMSNorm 1/rms (rsqrt backward)", Recompute("elementwise", n=1), block,
                  f"{prefix}.norm_stats"),
        ActTensor(f"{prefix}.norm_xhat", d, act, "RMSNorm weight grad (weight · x̂)", Recompute("elementwise", n=d),
                  block, f"{prefix}.norm_stats"),
        ActTensor(f"{prefix}.norm_out", d, act, "projections' weight grads (shared input)",
                  Recompute("elementwise", n=d), block),
    ]


def _check(spec: ModelSpec) -> None:
    if spec.norm != "rmsnorm" or spec.attention.qk_norm:
        raise StepbillError(f"the eager convention models RMSNorm families without qk-norm; {spec.name} "
                            f"({spec.family}) is not covered yet — use --convention ideal")


def _mha_eager(spec: ModelSpec, act: int) -> list[ActTensor]:
    _check(spec)
    a, d = spec.attention, spec.hidden_size
    q, kv, out = a.n_heads * a.qk_head_dim, a.kv_heads * a.qk_head_dim, a.n_heads * a.v_dim
    return [
        *_norm("attn", spec, act, "mha", Recompute("input")),
        ActTensor("attn.q", q, act, "SDPA (q after RoPE)", Recompute("linear", d, q), "mha"),
        ActTensor("attn.k", kv, act, "SDPA (k after RoPE, kv-head width)", Recompute("linear", d, kv), "mha"),
        ActTensor("attn.v", a.kv_heads * a.v_dim, act, "SDPA (a view of v_proj's output)",
                  Recompute("linear", d, a.kv_heads * a.v_dim), "mha"),
        ActTensor("attn.logsumexp", a.n_heads, FP32, "SDPA backward rebuilds P from it", _attn_core(spec), "mha",
                  "attn.core"),
        ActTensor("attn.core_out", out, act, "SDPA backward and o_proj weight grad", _attn_core(spec), "mha",
                  "attn.core"),
    ]


def _swiglu_eager(spec: ModelSpec, act: int) -> list[ActTensor]:
    _check(spec)
    d, ff = spec.hidden_size, spec.ffn.intermediate_size
    return [
        *_norm("mlp", spec, act, "swiglu", _residual_mid(spec)),
        ActTensor("mlp.gate", ff, act, "SiLU backward (its input)", Recompute("linear", d, ff), "swiglu"),
        ActTensor("mlp.silu", ff, act, "the product (grad of up)", Recompute("elementwise", n=ff), "swiglu"),
        ActTensor("mlp.up", ff, act, "the product (grad of SiLU output)", Recompute("linear", d, ff), "swiglu"),
        ActTensor("mlp.product", ff, act, "down projection weight grad", Recompute("elementwise", n=ff), "swiglu"),
    ]


def outside_rows(spec: ModelSpec, act: int) -> list[ActTensor]:
    """Per-token tensors outside the decoder layers: final norm, LM head input, loss."""
    _check(spec)
    return [
        *_norm("final", spec, act, "outside", Recompute("input")),
        ActTensor("loss.log_softmax_fp32", spec.vocab_size, FP32, "cross-entropy (logits upcast to fp32)",
                  Recompute("linear", spec.hidden_size, spec.vocab_size), "outside"),
        ActTensor("loss.labels", 1, INT64, "NLL gradient (shifted labels, int64)", Recompute("copy"), "outside"),
    ]


def outside_bytes(spec: ModelSpec, act: int, seq_len: Any, micro_batch: Any) -> Any:
    """Bytes outside the layers for one micro-batch: per-token rows, RoPE cos/sin per position, the loss's
    token count (a 4-byte scalar)."""
    per_token = sum(r.bytes_per_token for r in outside_rows(spec, act))
    rope = 2 * spec.attention.qk_head_dim * act if spec.positions == "rotary" else 0
    # At micro-batch 1 the shifted labels are a view of the (T+1)-long padded labels: one more int64.
    labels_view = INT64 * (micro_batch == 1)
    return per_token * seq_len * micro_batch + rope * seq_len + FP32 + labels_view
