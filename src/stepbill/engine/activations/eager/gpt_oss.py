"""gpt-oss blocks under the eager convention (modeling_gpt_oss.py, transformers 5.24; measured with
saved_tensors_hooks on the tiny model of measure/tiny.py).

Attention: transformers has no SDPA path for gpt-oss, so CPU runs its `eager_attention_forward`: q (after
RoPE) and k, v expanded to every query head (repeat_kv); the learned sink logit is concatenated as one more
key column, `max` keeps its int64 indices (one per head and query), the softmax — in the compute dtype — keeps
its output over S + 1 columns (B·H·S² plus the sink column), which P·V reads through a view (amp: softmax
runs in fp32 and P·V reads a bf16 cast, B·H·S² more); the head-major
output is copied token-major for o_proj. The mask is not kept.

MoE (every layer): the router is a biased linear; `topk` on the logits keeps its int64 ids, the softmax over the
k chosen logits keeps its result (compute dtype), the routing weights are gathered again (k per token). The
experts (grouped, parameter dtype) keep the dispatched tokens (k·h), the biased gate_up output (k·2f, which
both clamps read through strided views), and for the clamped SwiGLU `(up + 1) · gate · σ(α·gate)` four f-wide
tensors per routed token — σ's output, the clamped gate, up + 1, their product — plus down's input; then the
expert outputs (k·h) for the weighted combine. The permutation ids are kept four times (int64, k per token).
"""

from __future__ import annotations

from stepbill.engine.activations.eager.attention import pre_norm
from stepbill.engine.activations.eager.dtypes import INT64, dt_of
from stepbill.engine.activations.eager.ffn import ffn_norm
from stepbill.engine.activations.eager.norms import linear_inputs
from stepbill.engine.activations.rows import FP32, ActTensor, Recompute, _attn_core
from stepbill.engine.kinds import Split
from stepbill.spec.model import ModelSpec


def sink_attention_rows(spec: ModelSpec, act: int) -> list[ActTensor]:
    dt = dt_of(act)
    a, d, c, b = spec.attention, spec.hidden_size, dt.compute, "mha"
    h, dh, dv = a.n_heads, a.qk_head_dim, a.v_dim
    core = _attn_core(spec)
    sm = FP32 if dt.amp else c  # autocast runs softmax in fp32; else softmax(dtype=logits' dtype)
    return [
        *pre_norm("attn", spec, dt.param, b, Recompute("input")),
        *linear_inputs("attn", ("q_proj", "k_proj", "v_proj"), d, dt.param, dt, b, Recompute("elementwise", n=d)),
        ActTensor("attn.q", h * dh, c, "q·kᵀ (q after RoPE: a new tensor)", Recompute("linear", d, h * dh), b,
                  split=Split.TP),
        ActTensor("attn.k_rep", h * dh, c, "q·kᵀ: k after RoPE expanded to every query head (repeat_kv)",
                  Recompute("linear", d, a.kv_heads * dh), b, split=Split.TP),
        ActTensor("attn.max_ids", h, INT64, "max over the keys and the sink (int64 indices per head)", core, b,
                  "attn.core", split=Split.TP),
        ActTensor("attn.probs", h, sm, "softmax backward (and P·V without amp): its output (B·H·S²)", core, b,
                  "attn.core", per_token2=True, split=Split.TP),
        ActTensor("attn.probs_sink", h, sm, "the softmax output's sink column (one per head and query)", core, b,
                  "attn.core", split=Split.TP),
        *([ActTensor("attn.probs_cast", h, c, "amp: P·V reads P cast to bf16 (B·H·S²)", core, b, "attn.core",
                     per_token2=True, split=Split.TP)] if dt.amp else []),
        ActTensor("attn.v_rep", h * dv, c, "P·V: v expanded to every query head (repeat_kv)",
                  Recompute("linear", d, a.kv_heads * dv), b, split=Split.TP),
        ActTensor("attn.o_in", h * dv, c, "o_proj weight grad: token-major copy of the attention output", core, b,
                  "attn.core", split=Split.TP),
    ]


def gpt_oss_moe_rows(spec: ModelSpec, act: int) -> list[ActTensor]:
    dt = dt_of(act)
    m = spec.moe
    assert m is not None
    d, k, f, p, c, b = spec.hidden_size, m.top_k, m.expert_intermediate_size, dt.param, dt.compute, "moe"
    logits = Recompute("linear", d, m.n_routed_experts)
    perm = Recompute("copy")
    experts = Split.EXPERT
    return [
        *ffn_norm("moe", spec, p, b),
        *linear_inputs("moe", ("router",), d, p, dt, b, Recompute("elementwise", n=d)),
        ActTensor("moe.topk_ids", k, INT64, "top-k backward scatters grads to the chosen logits", logits, b,
                  "moe.router"),
        ActTensor("moe.topk_softmax", k, c, "softmax over the k chosen logits (its result)", logits, b, "moe.router"),
        ActTensor("moe.perm_ids", 4 * k, INT64, "index backwards of the dispatch and the combine (four int64 id "
                  "tensors)", perm, b, "moe.dispatch"),
        ActTensor("moe.dispatched", k * d, p, "experts' gate_up weight grads (expert-sorted copy of the tokens)",
                  perm, b, "moe.dispatch"),
        ActTensor("moe.gate_up", 2 * k * f, p, "the clamps of gate and up (strided views of one biased output)",
                  Recompute("linear", d, 2 * k * f), b, split=experts),
        ActTensor("moe.glu_parts", 4 * k * f, p, "clamped SwiGLU: σ(α·gate), the clamped gate, up + 1 and "
                  "gate·σ(α·gate)", Recompute("elementwise", n=4 * k * f), b, split=experts),
        ActTensor("moe.product", k * f, p, "experts' down weight grads", Recompute("elementwise", n=k * f), b,
                  split=experts),
        ActTensor("moe.routing_weights", k, c, "weighted combine (grad of the expert outputs)", logits, b,
                  "moe.router"),
        ActTensor("moe.expert_out", k * d, p, "weighted combine (grad of the routing weights)",
                  Recompute("linear", f, k * d), b),
    ]
