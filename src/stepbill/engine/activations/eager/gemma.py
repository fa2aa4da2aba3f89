"""Gemma2 / Gemma3 blocks under the eager convention (modeling_gemma3.py, transformers 5.24; measured with
saved_tensors_hooks on tiny models, measure/tiny.py).

- Sandwich norms: besides the norms in front of attention and MLP, a norm on each block's output before the
  residual add (post_attention_layernorm on o_proj's output, post_feedforward_layernorm on down's output),
  each saving x in fp32, 1/rms per row and x̂ in fp32.
- Gemma's RMSNorm `(x̂ · (1 + w.float())).type_as(x)`: x̂ is kept in fp32 (norms.FP32_XHAT_FAMILIES), and each
  norm keeps `1 + w` (its width in fp32) for the grad of x̂ — a per-layer constant, not per token.
- GeGLU (gelu_pytorch_tanh: one aten.gelu op) saves what SwiGLU saves: gate's output, the activation's output,
  up's output and the product.
- Scaled embeddings: `embed(ids) · √hidden` keeps the scale (a scalar in the parameter dtype).
- Gemma3 rotates sliding-window and full layers with different bases (rope_local_base_freq): two cos/sin
  tables when the model has both kinds of layer (`rope_tables`).
"""

from __future__ import annotations

from stepbill.engine.activations.eager.dtypes import dt_of
from stepbill.engine.activations.eager.norms import rmsnorm
from stepbill.engine.activations.rows import FP32, ActTensor, Recompute
from stepbill.engine.flops import NO_SDPA_FAMILIES
from stepbill.spec.model import ModelSpec

GEMMA_FAMILIES = ("gemma2", "gemma3_text")


def post_attention_norm(spec: ModelSpec, act: int) -> list[ActTensor]:
    """Sandwich placement: the norm on o_proj's output (compute dtype) before the residual add."""
    if spec.norm_placement != "sandwich":
        return []
    a, dt = spec.attention, dt_of(act)
    return rmsnorm("attn.post", spec.hidden_size, 1, dt.compute, "mha",
                   Recompute("linear", a.n_heads * a.v_dim, spec.hidden_size), xhat_bytes=FP32)


def post_ffn_norm(spec: ModelSpec, act: int, block: str) -> list[ActTensor]:
    """Sandwich placement: the norm on the FFN's output (down_proj's, compute dtype) before the residual add."""
    if spec.norm_placement != "sandwich":
        return []
    dt = dt_of(act)
    width = spec.ffn.intermediate_size
    return rmsnorm("mlp.post", spec.hidden_size, 1, dt.compute, block,
                   Recompute("linear", width, spec.hidden_size), xhat_bytes=FP32)


def norm_weight_constants(spec: ModelSpec, where: str, param_bytes: int = FP32) -> list[ActTensor]:
    """Gemma's `1 + w.float()` kept by each norm (fp32, per layer or once outside): `where` "layer" or
    "outside" (the final norm and the embedding scale, in the parameter dtype: `param_bytes`)."""
    if not spec.norm_weight_offset:
        return []
    d, copy = spec.hidden_size, Recompute("copy")
    if where == "outside":
        rows = [ActTensor("final.norm_one_plus_w", d, FP32, "Gemma RMSNorm: 1 + w (fp32) for the grad of x̂", copy,
                          "outside", per="constant")]
        if spec.scaled_embeddings:
            rows.append(ActTensor("embed.scale", 1, param_bytes, "scaled embedding: the √hidden factor (a scalar)", copy,
                                  "outside", per="constant"))
        return rows
    a = spec.attention
    n_norms = {"pre": 2, "sandwich": 4, "post": 2}[spec.norm_placement]
    width = n_norms * d + (2 * a.qk_head_dim if a.qk_norm else 0)
    return [ActTensor("layer.norm_one_plus_w", width, FP32, "Gemma RMSNorms: 1 + w (fp32) of each of the layer's "
                      "norms, for the grad of x̂", copy, "layer", per="constant")]


def rope_tables(spec: ModelSpec) -> int:
    """How many RoPE cos/sin tables one forward keeps: Gemma3 has one per attention type present."""
    a = spec.attention
    if spec.family == "gemma3_text" and 0 < len(a.sliding_layers) < spec.n_layers:
        return 2
    return 1


# Families whose transformers class has no SDPA path (5.24: `_supports_sdpa = False`): CPU runs their
# `eager_attention_forward` (measure/build.effective_attention). One list, engine/flops.py's.
EAGER_ATTENTION_FAMILIES = NO_SDPA_FAMILIES


def eager_attention_rows(spec: ModelSpec, act: int) -> list[ActTensor]:
    """Gemma2's attention (modeling_gemma2.eager_attention_forward): the pre-norm and q/k/v inputs as
    elsewhere; then matmul(q, repeat_kv(k)ᵀ) keeps q (after RoPE) and k expanded to every query head; soft-
    capping keeps tanh's output (B·H·S², compute dtype); softmax in fp32 keeps its output, and — below fp32 —
    its cast to the compute dtype, which P·V keeps with v expanded to every head; the head-major output is
    copied token-major for o_proj. The additive mask is not kept by autograd."""
    from stepbill.engine.activations.eager.attention import pre_norm
    from stepbill.engine.activations.eager.norms import linear_inputs
    from stepbill.engine.activations.rows import _attn_core
    from stepbill.engine.kinds import Split

    dt = dt_of(act)
    a, d, c, b = spec.attention, spec.hidden_size, dt.compute, "mha"
    h, dh, dv = a.n_heads, a.qk_head_dim, a.v_dim
    core = _attn_core(spec)
    rows = pre_norm("attn", spec, dt.param, b, Recompute("input"))
    rows += linear_inputs("attn", ("q_proj", "k_proj", "v_proj"), d, dt.param, dt, b, Recompute("elementwise", n=d))
    rows += [
        ActTensor("attn.q", h * dh, c, "q·kᵀ (q after RoPE: a new tensor)", Recompute("linear", d, h * dh), b,
                  split=Split.TP),
        ActTensor("attn.k_rep", h * dh, c, "q·kᵀ: k after RoPE expanded to every query head (repeat_kv)",
                  Recompute("linear", d, a.kv_heads * dh), b, split=Split.TP),
    ]
    if a.logit_softcap is not None:
        rows.append(ActTensor("attn.softcap_tanh", h, c, "soft-capping: tanh's output (B·H·S²)", core, b,
                              "attn.core", per_token2=True, split=Split.TP))
    rows.append(ActTensor("attn.probs", h, FP32, "softmax (fp32) backward: its output P (B·H·S²)", core, b,
                          "attn.core", per_token2=True, split=Split.TP))
    if c != FP32:
        rows.append(ActTensor("attn.probs_cast", h, c, "P·V: P cast to the compute dtype (B·H·S²)", core, b,
                              "attn.core", per_token2=True, split=Split.TP))
    return [
        *rows,
        ActTensor("attn.v_rep", h * dv, c, "P·V: v expanded to every query head (repeat_kv)",
                  Recompute("linear", d, a.kv_heads * dv), b, split=Split.TP),
        ActTensor("attn.o_in", h * dv, c, "o_proj weight grad: token-major copy of the attention output", core, b,
                  "attn.core", split=Split.TP),
    ]


def final_softcap_rows(spec: ModelSpec, act: int) -> list[ActTensor]:
    """Gemma2's final logit soft-capping: tanh keeps its output (vocabulary wide, compute dtype)."""
    if spec.final_logit_softcap is None:
        return []
    return [ActTensor("loss.softcap_tanh", spec.vocab_size, dt_of(act).compute, "final logit soft-capping: tanh's "
                      "output", Recompute("linear", spec.hidden_size, spec.vocab_size), "outside")]
