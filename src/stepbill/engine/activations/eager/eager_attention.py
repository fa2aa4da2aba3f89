"""`--attention eager` under the eager convention: what transformers' `eager_attention_forward` keeps per layer.

modeling_llama.eager_attention_forward (transformers 5.24; Mistral, Qwen2/3, Mixtral, Qwen2-MoE, OLMo2 and Gemma3
share it):

    key_states = repeat_kv(key, n_rep); value_states = repeat_kv(value, n_rep)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    attn_weights = attn_weights + attention_mask
    attn_weights = softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = dropout(attn_weights, p=attention_dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()

What autograd keeps (the same reading as eager/gemma.eager_attention_rows, measured for Gemma2): Q·Kᵀ's batched
matmul saves q (after RoPE) and k expanded to every query head (repeat_kv's copy; without GQA the matmul's own
contiguous copy of k: the same bytes); the scaling and the additive mask save nothing; softmax in fp32 saves its
output P (B·H·S², fp32); below fp32, P·V saves P's cast to the compute dtype (B·H·S² more); with attention dropout on
CPU the dropout saves its noise and P·V the dropped P instead (both in the compute dtype; CUDA: a bool mask); P·V
saves v expanded to every head; o_proj saves the token-major copy of the output.

modeling_gpt2.eager_attention_forward: q, k and v are head-major views of c_attn's output; the matmuls save their
own contiguous copies of q, k and v (the fused output is no longer kept); softmax runs in the compute dtype (fp32
under autocast, which lists softmax among its fp32 ops; `.type(value.dtype)` then casts P to bf16 for P·V) and
saves its output; the dropout (attn_pdrop) as above; c_proj saves the token-major copy of the output.

Other attention kinds (GPT-NeoX, Phi-3's fused qkv, MLA, sinks) are not modelled yet: their rows stay SDPA's and
the bill says so in one line (report/notes.py, `eager_attention_modelled`).
"""

from __future__ import annotations

from stepbill.engine.activations.eager.attention import pre_norm, qkv_projection_rows
from stepbill.engine.activations.eager.dropout import eager_attention_modelled as eager_attention_modelled
from stepbill.engine.activations.eager.dropout import mask_bytes
from stepbill.engine.activations.eager.dtypes import FP32, Dt, dt_of
from stepbill.engine.activations.eager.norms import linear_inputs
from stepbill.engine.activations.rows import ActTensor, Recompute, _attn_core
from stepbill.engine.kinds import Split
from stepbill.spec.model import ModelSpec


def _probabilities(spec: ModelSpec, dt: Dt, softmax_bytes: int) -> list[ActTensor]:
    """softmax's saved output, and what P·V saves of P: its cast (below fp32 when softmax ran in fp32) or, with
    attention dropout, the dropout's noise and the dropped P."""
    h, c, b, core = spec.attention.n_heads, dt.compute, "mha", _attn_core(spec)

    def s2(name: str, dtype_bytes: int, why: str) -> ActTensor:
        return ActTensor(name, h, dtype_bytes, why, core, b, "attn.core", per_token2=True, split=Split.TP)

    rows = [s2("attn.probs", softmax_bytes, f"softmax backward: its output P ({softmax_bytes} B, B·H·S²)")]
    if spec.attention_dropout > 0:
        return [*rows, s2("attn.probs_dropout_mask", mask_bytes(dt, c), "attention dropout backward: its mask "
                          "(B·H·S²)"), s2("attn.probs_dropped", c, "P·V: the dropped P (B·H·S²)")]
    if softmax_bytes != c:
        rows.append(s2("attn.probs_cast", c, "P·V: P cast to the compute dtype (B·H·S²)"))
    return rows


def eager_attention_forward_rows(spec: ModelSpec, act: int) -> list[ActTensor]:
    """The attention block's rows under transformers' eager attention (module docstring), in forward order."""
    dt = dt_of(act)
    a, d, c, b = spec.attention, spec.hidden_size, dt.compute, "mha"
    h, kv, dh, dv = a.n_heads, a.kv_heads, a.qk_head_dim, a.v_dim
    core = _attn_core(spec)
    rows = pre_norm("attn", spec, dt.param, b, Recompute("input"))
    if spec.family == "gpt2":
        width = h * (2 * dh + dv)
        rows += linear_inputs("attn", ("c_attn",), d, dt.param, dt, b, Recompute("elementwise", n=d))
        rows += [
            ActTensor("attn.q", h * dh, c, "q·kᵀ: the matmul's contiguous copy of q", Recompute("linear", d, width),
                      b, split=Split.TP),
            ActTensor("attn.k", h * dh, c, "q·kᵀ: the matmul's contiguous copy of kᵀ", Recompute("linear", d, width),
                      b, split=Split.TP),
            *_probabilities(spec, dt, FP32 if dt.amp else c),  # CPU autocast runs softmax in fp32
            ActTensor("attn.v", h * dv, c, "P·V: the matmul's contiguous copy of v", Recompute("linear", d, width), b,
                      split=Split.TP),
        ]
    else:
        rows += qkv_projection_rows(spec, dt)  # as eager/attention.mha_rows, whatever the kernel
        rows += [
            ActTensor("attn.q", h * dh, c, "q·kᵀ: q after RoPE (the matmul's contiguous copy)",
                      Recompute("linear", d, h * dh), b, split=Split.TP),
            ActTensor("attn.k_rep", h * dh, c, "q·kᵀ: k after RoPE expanded to every query head (repeat_kv)",
                      Recompute("linear", d, kv * dh), b, split=Split.TP),
            *_probabilities(spec, dt, FP32),
            ActTensor("attn.v_rep", h * dv, c, "P·V: v expanded to every query head (repeat_kv)",
                      Recompute("linear", d, kv * dv), b, split=Split.TP),
        ]
    return [*rows, ActTensor("attn.o_in", h * dv, c, "output projection weight grad: token-major copy of the "
                             "attention output", core, b, "attn.core", split=Split.TP)]
