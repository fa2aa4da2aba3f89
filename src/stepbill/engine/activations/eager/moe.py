"""The MoE sub-block under the eager convention (transformers' grouped experts; the norm in front included).

Router (per family, transformers' code and config defaults, which `to_hf_config` leaves in place):
- mixtral, qwen2_moe, qwen3_moe: a linear in the compute dtype, `softmax(dtype=float)` (E fp32 scores per
  token, saved as its result), `topk` (its int64 ids saved); mixtral always renormalises the top-k (the
  division saves the k values and their sum, fp32) and keeps fp32 routing weights; qwen*_moe renormalise only
  with `norm_topk_prob` (default False) and cast the weights to the router logits' dtype.
- deepseek_v2 / v3: `linear(x.float(), w.float())` (an fp32 copy of the input unless it is fp32 already;
  autocast makes it bf16 again); v3: sigmoid scores (saved result), top-k ids from a gather (int64),
  renormalisation (`norm_topk_prob`, default True); v2: fp32 softmax and top-k, no renormalisation (default);
  both multiply by routed_scaling_factor (a new tensor in the scores' dtype: the routing weights).
Dispatch (every family): the token↔expert permutation (int64, top_k per token) is saved three times as
separate storages, the dispatched copy of the hidden states (top_k·h), the gate_up output (top_k·2f, whose
chunks SiLU and the product read), SiLU's output, the product (down's input), the routing weights and the
expert outputs before the weighted combine (top_k·h). Experts run in the parameter dtype (autocast does not
touch grouped_mm: fp32 under amp). bf16 experts use `aten._grouped_mm`, which also saves its per-expert int32
offsets (E·4 B per layer, a constant row); fp32 experts use transformers' fallback, which does not.

Data: every token picks exactly top_k distinct experts, so although the rows per expert vary with the data
(the router), every dispatch tensor holds tokens·top_k rows in total: the bytes do not depend on the data.
"""

from __future__ import annotations

from stepbill.engine.activations.eager.dtypes import INT64, Dt, dt_of
from stepbill.engine.activations.eager.ffn import ffn_norm, swiglu_core
from stepbill.engine.activations.eager.norms import linear_inputs
from stepbill.engine.activations.rows import FP32, ActTensor, Recompute
from stepbill.engine.kinds import Split
from stepbill.spec.model import ModelSpec

SIGMOID_ROUTER = ("deepseek_v3",)
FP32_ROUTER = ("deepseek_v2", "deepseek_v3")  # linear(x.float(), w.float())
# transformers' defaults of norm_topk_prob (mixtral has no flag: it always renormalises)
RENORMALISE = {"mixtral": True, "qwen2_moe": False, "qwen3_moe": False, "deepseek_v3": True, "deepseek_v2": False}


def _router_logits_bytes(spec: ModelSpec, dt: Dt) -> int:
    if spec.family in FP32_ROUTER and not dt.amp:
        return FP32  # x.float() @ w.float()
    return dt.compute


def _router(spec: ModelSpec, dt: Dt, b: str) -> list[ActTensor]:
    m = spec.moe
    assert m is not None
    k, e = m.top_k, m.n_routed_experts
    rd = _router_logits_bytes(spec, dt)
    logits = Recompute("linear", spec.hidden_size, e)
    if spec.family in SIGMOID_ROUTER:
        scores, sd = ActTensor("moe.router_scores", e, rd, "sigmoid backward (its result) and the top-k gather",
                               logits, b, "moe.router"), rd
    else:
        scores, sd = ActTensor("moe.router_scores", e, FP32, "softmax(dtype=float) backward (its result)",
                               logits, b, "moe.router"), FP32
    rows = [scores, ActTensor("moe.topk_ids", k, INT64, "top-k backward scatters grads to the chosen experts",
                              logits, b, "moe.router")]
    if RENORMALISE.get(spec.family, True):
        rows += [
            ActTensor("moe.topk_values", k, sd, "renormalisation (division: grad of the sum)", logits, b, "moe.router"),
            ActTensor("moe.topk_sum", 1, sd, "renormalisation denominator", logits, b, "moe.router"),
        ]
    # mixtral keeps the fp32 top-k values; deepseek scales them (a new tensor in the scores' dtype); qwen casts
    # them to the router logits' dtype.
    w = FP32 if spec.family == "mixtral" else sd if spec.family in FP32_ROUTER else rd
    rows.append(ActTensor("moe.routing_weights", k, w, "weighted combine (grad of the expert outputs)", logits, b,
                          "moe.router"))
    return rows


def moe_rows(spec: ModelSpec, act: int) -> list[ActTensor]:
    dt = dt_of(act)
    m = spec.moe
    assert m is not None
    d, k, f, sf, p, b = spec.hidden_size, m.top_k, m.expert_intermediate_size, m.shared_intermediate_size, dt.param, "moe"
    rows = ffn_norm("moe", spec, p, b)
    # Linears reading the normed hidden states as they are (one shared storage, or one autocast cast each).
    readers: list[str] = []
    qwen_shared_first = spec.family == "qwen2_moe"
    if sf and qwen_shared_first:
        readers += ["shared.gate_proj", "shared.up_proj"]
    if spec.family in FP32_ROUTER and not dt.amp and p != FP32:
        rows.append(ActTensor("moe.router_in_fp32", d, FP32, "router weight grad (x.float() copy of its input)",
                              Recompute("elementwise", n=d), b))
    else:
        readers.append("router")
    if m.shared_expert_gate:
        readers.append("shared_expert_gate")
    if sf and not qwen_shared_first:
        readers += ["shared.gate_proj", "shared.up_proj"]
    rows += linear_inputs("moe", tuple(readers), d, p, dt, b, Recompute("elementwise", n=d))
    rows += _router(spec, dt, b)
    rows += [
        ActTensor("moe.perm_gather", k, INT64, "index backward: scatters the dispatched grads back (int64 ids)",
                  Recompute("copy"), b, "moe.dispatch"),
        ActTensor("moe.perm_sort", k, INT64, "index backward of the expert-sorted order (int64 ids)",
                  Recompute("copy"), b, "moe.dispatch"),
        ActTensor("moe.dispatched", k * d, p, "experts' gate_up weight grads (expert-sorted copy of the tokens)",
                  Recompute("copy"), b, "moe.dispatch"),
        ActTensor("moe.gate_up", 2 * k * f, p, "SiLU (gate half) and the product (up half): one storage",
                  Recompute("linear", d, 2 * k * f), b, split=Split.EXPERT),
        ActTensor("moe.silu", k * f, p, "the product (grad of up)", Recompute("elementwise", n=k * f), b,
                  split=Split.EXPERT),
        ActTensor("moe.product", k * f, p, "experts' down weight grads", Recompute("elementwise", n=k * f), b,
                  split=Split.EXPERT),
        ActTensor("moe.expert_out", k * d, p, "weighted combine (grad of the routing weights)",
                  Recompute("linear", f, k * d), b),
        ActTensor("moe.perm_combine", k, INT64, "index backward of the combine (int64 ids)", Recompute("copy"), b,
                  "moe.dispatch"),
    ]
    if sf:
        rows += swiglu_core("moe.shared", d, sf, p, act, b, consumers=())
    if m.shared_expert_gate:
        rows += [
            ActTensor("moe.shared_gate", 1, dt.compute, "sigmoid backward (its result) and the gated product",
                      Recompute("linear", d, 1), b),
            ActTensor("moe.shared.out", d, dt.compute, "the gated product (grad of the gate)",
                      Recompute("linear", sf, d), b),
        ]
    return rows


def grouped_mm_offsets(spec: ModelSpec, act: int) -> int:
    """Bytes per MoE layer of aten._grouped_mm's int32 offsets (bf16 experts only)."""
    assert spec.moe is not None
    return 4 * spec.moe.n_routed_experts if dt_of(act).param == 2 else 0


def moe_cast_weights(spec: ModelSpec) -> int:
    """Elements of the MoE block's linears that autocast casts (router, shared experts, shared gate; not the
    grouped experts)."""
    m = spec.moe
    assert m is not None
    d = spec.hidden_size
    return d * m.n_routed_experts + 3 * d * m.shared_intermediate_size + (d if m.shared_expert_gate else 0)
