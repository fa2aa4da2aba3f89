"""Attention sub-blocks under the eager convention: the pre-attention norm, the projections' inputs, what
SDPA keeps on CPU, and the output projection's input.

SDPA on CPU takes the flash kernel when q/k and v heads are equally wide: it saves q, k, v (GQA: k and v at
kv-head width, never expanded), its output and the logsumexp in fp32 (4 B per head per token) — no S² tensor.
It falls back to `_scaled_dot_product_attention_math` when they differ (DeepSeek MLA): that path upcasts
reduced-precision inputs to fp32 on CPU and saves q·√s, kᵀ·√s, the softmax probabilities (B·H·T², fp32) and v.

Which storages exist depends on transformers' modeling code of the family (ModelSpec.family):
- separate q/k/v projections (llama, mistral, qwen2, qwen3, mixtral, qwen*_moe): q and k after RoPE are new
  tensors in token-major layout, so SDPA's output is token-major and `transpose().reshape()` for o_proj is a
  view (one storage); v is a view of v_proj's output. Qwen3's qk-norm adds an RMSNorm per q and k head.
- GPT-2: one fused c_attn output (3 h per token) whose q, k, v views SDPA saves (one storage).
- GPT-NeoX: the fused qkv output is saved through the v view; q and k are `cat(rotary part, pass part)`, new
  head-major tensors, so SDPA's output is head-major and o_proj (`dense`) saves its own token-major copy.
"""

from __future__ import annotations

import dataclasses

from stepbill.engine.activations.eager.dtypes import Dt, dt_of
from stepbill.engine.activations.eager.norms import FP32_XHAT_FAMILIES, layernorm, linear_inputs, rmsnorm
from stepbill.engine.activations.rows import FP32, ActTensor, Recompute, _attn_core
from stepbill.engine.kinds import Split
from stepbill.spec.model import ModelSpec

FUSED_QKV = ("gpt2", "gpt_neox")


def pre_norm(prefix: str, spec: ModelSpec, param: int, block: str, source: Recompute,
             input_saved: bool = True) -> list[ActTensor]:
    """The norm in front of a sub-block, reading the residual stream (parameter dtype)."""
    if spec.norm == "layernorm":
        return layernorm(prefix, spec.hidden_size, param, block, source, input_saved)
    return rmsnorm(prefix, spec.hidden_size, 1, param, block, source, xhat_bytes=xhat_bytes(spec))


def xhat_bytes(spec: ModelSpec) -> int | None:
    """fp32 for the families whose RMSNorm multiplies its weight in fp32, else None (the input's dtype)."""
    return FP32 if spec.family in FP32_XHAT_FAMILIES else None


def qkv_projection_rows(spec: ModelSpec, dt: Dt) -> list[ActTensor]:
    """The separate q / k / v projections' saved input and, with qk-norm, the norms' rows — the same whatever the
    attention kernel (the norms run before RoPE): per head (Qwen3, Gemma3: one 1/rms per head) or over the whole
    projection (OLMo2: one)."""
    a, d, c, b = spec.attention, spec.hidden_size, dt.compute, "mha"
    h, kv, dh = a.n_heads, a.kv_heads, a.qk_head_dim
    rows = linear_inputs("attn", ("q_proj", "k_proj", "v_proj"), d, dt.param, dt, b, Recompute("elementwise", n=d))
    if a.qk_norm:
        whole = a.qk_norm_scope == "projection"
        xb = xhat_bytes(spec)
        rows += rmsnorm("attn.q", h * dh, 1 if whole else h, c, b, Recompute("linear", d, h * dh), split=Split.TP,
                        xhat_bytes=xb)
        rows += rmsnorm("attn.k", kv * dh, 1 if whole else kv, c, b, Recompute("linear", d, kv * dh),
                        split=Split.TP, xhat_bytes=xb)
    return rows


def mha_rows(spec: ModelSpec, act: int) -> list[ActTensor]:
    dt = dt_of(act)
    a, d, c = spec.attention, spec.hidden_size, dt.compute
    h, kv, dh, dv = a.n_heads, a.kv_heads, a.qk_head_dim, a.v_dim
    b = "mha"
    core = _attn_core(spec)
    rows = pre_norm("attn", spec, dt.param, b, Recompute("input"))
    lse = ActTensor("attn.logsumexp", h, FP32, "SDPA flash backward rebuilds P from it (fp32)", core, b, "attn.core", split=Split.TP)
    out = ActTensor("attn.core_out", h * dv, c, "SDPA backward (rowsum dO∘O) and o_proj weight grad (a view)",
                    core, b, "attn.core", split=Split.TP)
    if spec.family in FUSED_QKV:
        width = h * (2 * dh + dv)
        proj = "c_attn" if spec.family == "gpt2" else "query_key_value"
        rows += linear_inputs("attn", (proj,), d, dt.param, dt, b, Recompute("elementwise", n=d))
        rows.append(ActTensor("attn.qkv", width, c, "SDPA q/k/v: views of the fused projection's output"
                              if spec.family == "gpt2" else "SDPA v (a view of the fused projection's output)",
                              Recompute("linear", d, width), b, split=Split.TP))
        if spec.family == "gpt_neox":
            rows += [
                ActTensor("attn.q", h * dh, c, "SDPA q (cat of rotary and pass-through parts: a new tensor)",
                          Recompute("elementwise", n=h * dh), b, "attn.rope", split=Split.TP),
                ActTensor("attn.k", h * dh, c, "SDPA k (cat of rotary and pass-through parts: a new tensor)",
                          Recompute("elementwise", n=h * dh), b, "attn.rope", split=Split.TP),
                lse,
                ActTensor("attn.core_out", h * dv, c, "SDPA backward (rowsum dO∘O), head-major layout", core, b,
                          "attn.core", split=Split.TP),
                ActTensor("attn.dense_in", h * dv, c, "dense (o_proj) weight grad: token-major copy of the output",
                          Recompute("copy"), b, split=Split.TP),
            ]
            return rows
        return [*rows, lse, out]
    if a.fused_qkv:  # Phi-3
        return rows + phi3_attention(spec, dt, lse, out)
    rows += qkv_projection_rows(spec, dt)
    return [
        *rows,
        ActTensor("attn.q", h * dh, c, "SDPA q (after RoPE: a new tensor)", Recompute("linear", d, h * dh), b, split=Split.TP),
        ActTensor("attn.k", kv * dh, c, "SDPA k (after RoPE, kv-head width)", Recompute("linear", d, kv * dh), b, split=Split.TP),
        ActTensor("attn.v", kv * dv, c, "SDPA v (a view of v_proj's output)", Recompute("linear", d, kv * dv), b, split=Split.TP),
        lse,
        out,
    ]


def phi3_attention(spec: ModelSpec, dt: Dt, lse: ActTensor, out: ActTensor) -> list[ActTensor]:
    """Phi-3 (modeling_phi3.py): one qkv_proj; q, k, v are strided slices of its output. RoPE makes q and k new
    tensors; v stays a view, so SDPA keeps the whole fused output alive. RoPE of a strided head-major view
    gives head-major q and k, so SDPA's output is head-major and o_proj saves its own token-major copy."""
    a, d, c, b = spec.attention, spec.hidden_size, dt.compute, "mha"
    h, kv, dh = a.n_heads, a.kv_heads, a.qk_head_dim
    width = (h + 2 * kv) * dh
    return [
        *linear_inputs("attn", ("qkv_proj",), d, dt.param, dt, b, Recompute("elementwise", n=d)),
        ActTensor("attn.q", h * dh, c, "SDPA q (after RoPE: a new tensor)", Recompute("linear", d, h * dh), b,
                  split=Split.TP),
        ActTensor("attn.k", kv * dh, c, "SDPA k (after RoPE, kv-head width)", Recompute("linear", d, kv * dh), b,
                  split=Split.TP),
        ActTensor("attn.qkv", width, c, "SDPA v (a view of qkv_proj's whole output)", Recompute("linear", d, width),
                  b, split=Split.TP),
        lse,
        dataclasses.replace(out, saved_for="SDPA backward (rowsum dO∘O), head-major layout"),
        ActTensor("attn.o_in", h * a.v_dim, c, "o_proj weight grad: token-major copy of the output",
                  Recompute("copy"), b, split=Split.TP),
    ]


def mla_uses_math_path(spec: ModelSpec, device: str) -> bool:
    """CPU SDPA's flash kernel needs equal q/k and v head widths; MLA's differ in every released model. On CUDA the
    memory-efficient kernel takes unequal widths (PyTorch's sdp_utils: flash needs them equal, mem-efficient only
    q's and k's) and saves what the flash path's rows name — q, k, v, output, logsumexp — no S² tensor."""
    a = spec.attention
    return a.qk_head_dim != a.v_head_dim and device == "cpu"


def mla_rows(spec: ModelSpec, act: int) -> list[ActTensor]:
    dt = dt_of(act)
    a, d, c = spec.attention, spec.hidden_size, dt.compute
    h, dqk, dv, kvr, rope = a.n_heads, a.qk_head_dim, a.v_head_dim, a.kv_lora_rank, a.qk_rope_head_dim
    b = "mla"
    core = _attn_core(spec)
    rows = pre_norm("attn", spec, dt.param, b, Recompute("input"))
    q_first = "q_a_proj" if a.q_lora_rank else "q_proj"
    rows += linear_inputs("attn", (q_first, "kv_a_proj_with_mqa"), d, dt.param, dt, b, Recompute("elementwise", n=d))
    if a.q_lora_rank:
        r = a.q_lora_rank
        rows += rmsnorm("attn.q_a", r, 1, c, b, Recompute("linear", d, r))
        rows += linear_inputs("attn.q_a", ("q_b_proj",), r, dt.param, dt, b, Recompute("elementwise", n=r))
    # kv_a_layernorm reads the first kv_lora_rank numbers of kv_a's output (a view; fp32: its whole storage).
    rows += rmsnorm("attn.kv_a", kvr, 1, c, b, Recompute("linear", d, kvr + rope), x_width=kvr + rope)
    rows += linear_inputs("attn.kv_a", ("kv_b_proj",), kvr, dt.param, dt, b, Recompute("elementwise", n=kvr))
    if mla_uses_math_path(spec, dt.device):
        return [
            *rows,
            ActTensor("attn.q_scaled", h * dqk, FP32, "math SDPA: q·√scale (fp32 on CPU) for dK", core, b, "attn.core", split=Split.TP),
            ActTensor("attn.k_scaled", h * dqk, FP32, "math SDPA: kᵀ·√scale (fp32 on CPU) for dQ", core, b,
                      "attn.core", split=Split.TP),
            ActTensor("attn.probs", h, FP32, "math SDPA: softmax output P (fp32, B·H·T²) for softmax and P·V grads",
                      core, b, "attn.core", per_token2=True, split=Split.TP),
            ActTensor("attn.v", h * dv, FP32, "math SDPA: v (fp32 copy; at B=1 in fp32 a view of kv_b's output)",
                      Recompute("linear", kvr, h * dv), b, split=Split.TP),
            ActTensor("attn.o_in", h * dv, c, "o_proj weight grad (token-major copy of the attention output)",
                      core, b, "attn.core", split=Split.TP),
        ]
    # Equal head widths: the flash kernel; q and k are cat(nope, rope) (head-major, new), v a view of kv_b's output.
    return [
        *rows,
        ActTensor("attn.q", h * dqk, c, "SDPA q (cat of nope and rope parts)", Recompute("linear", kvr, h * dqk), b, split=Split.TP),
        ActTensor("attn.k", h * dqk, c, "SDPA k (cat of nope and rope parts)", Recompute("linear", kvr, h * dqk), b, split=Split.TP),
        ActTensor("attn.kv_up", h * (a.qk_nope_head_dim + dv), c, "SDPA v (a view of kv_b_proj's output)",
                  Recompute("linear", kvr, h * (a.qk_nope_head_dim + dv)), b, split=Split.TP),
        ActTensor("attn.logsumexp", h, FP32, "SDPA flash backward rebuilds P from it (fp32)", core, b, "attn.core", split=Split.TP),
        ActTensor("attn.core_out", h * dv, c, "SDPA backward (rowsum dO∘O), head-major layout", core, b, "attn.core", split=Split.TP),
        ActTensor("attn.o_in", h * dv, c, "o_proj weight grad (token-major copy)", Recompute("copy"), b, split=Split.TP),
    ]


def attention_weights(spec: ModelSpec) -> int:
    """Elements of the attention block's linear weights (autocast casts each to bf16 and the linear saves it)."""
    a, d = spec.attention, spec.hidden_size
    h = a.n_heads
    if a.kind == "mla":
        q = d * a.q_lora_rank + a.q_lora_rank * h * a.qk_head_dim if a.q_lora_rank else d * h * a.qk_head_dim
        kv = d * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank * h * (a.qk_nope_head_dim + a.v_head_dim)
        return q + kv + h * a.v_head_dim * d
    return d * (h * a.qk_head_dim + a.kv_heads * (a.qk_head_dim + a.v_dim)) + h * a.v_dim * d
