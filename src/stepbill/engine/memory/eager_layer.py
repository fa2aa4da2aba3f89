"""What a layer holds inside itself beyond the rows it saves, under the eager convention: the largest op of a
checkpointed layer's forward (its working set, as torch runs it: FFN activations, MoE's fp32 fallback, MLA's math
path) and, under `--attention eager`, the scores / softmax moment of the forward and the softmax backward's dP / dS
moment. Split out of engine/memory/eager.py (which assembles them into EagerTerms) to keep that module small.
"""

from __future__ import annotations

from stepbill.engine import activations as act
from stepbill.engine.activations import eager
from stepbill.engine.activations.eager.attention import mla_uses_math_path
from stepbill.engine.activations.eager.dtypes import Dt
from stepbill.engine.activations.eager.ffn import GELU_TANH_FAMILIES, ffn_weights
from stepbill.engine.activations.eager.gemma import EAGER_ATTENTION_FAMILIES
from stepbill.engine.activations.eager.moe import RENORMALISE, moe_cast_weights
from stepbill.engine.activations.eager.outside import rope_width
from stepbill.engine.memory.eager_moe import SHARED_AFTER, InnerMoment
from stepbill.engine.params import ParamInventory
from stepbill.spec.model import ModelSpec

FP32 = 4
INT64 = 8

AMP_CAST = 2  # autocast's bf16 weight copies
FALLBACK_MOE_FAMILIES = ("mixtral", "qwen2_moe")  # in-layer MoE forward traced (transformers' fp32 fallback)
GROUPED_BIAS_MOE_FAMILIES = ("gpt_oss",)  # biased grouped experts with a clamped SwiGLU (gpt_oss_moe_forward)
SHARED_FIRST = ("qwen2_moe",)  # the shared expert runs before the routed ones: its output is alive meanwhile


def in_layer_forward(spec: ModelSpec, kind: str, width: int, n: int, t: int) -> int:
    """Bytes a checkpointed layer's forward (no tensors saved) holds at its largest op, beyond its input.

    GPT-2's `gelu_new` (`0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, written as elementwise ops) holds
    four FFN-wide tensors at once: the up projection's output x, `0.5·x`, `x³` and `0.044715·x³`; the block
    keeps alive the attention's output (`attn_output`, a local the block reuses for the residual add), the
    residual sum and `ln_2`'s output (the MLP's input). 0: no in-layer model for this layer (see module doc).
    Under autocast the moment's weight casts are those made so far (the result can be net of the later ones).
    """
    dt = eager.dt_of(width)
    d, f = spec.hidden_size, spec.ffn.intermediate_size
    attn, ffn = act.layer_blocks(spec, kind)
    attn_peak = mla_math_forward(spec, dt, n, t) if attn == "mla" else 0
    if spec.family in EAGER_ATTENTION_FAMILIES:
        attn_peak = eager_attention_in_layer(spec, dt, n, t)
    if attn_peak and dt.amp:  # the casts of o_proj and of the FFN / MoE linears are made after the attention's core
        attn_peak -= later_casts(spec, ffn) + later_bias_casts(spec, kind, width)
    if ffn == "moe" and spec.family in GROUPED_BIAS_MOE_FAMILIES:
        return max(attn_peak, gpt_oss_moe_forward(spec, dt, n, t))
    return max(attn_peak, _ffn_forward(spec, dt, ffn, d, f, n))


def eager_attention_in_layer(spec: ModelSpec, dt: Dt, n: int, t: int) -> int:
    """Gemma2's / gpt-oss's eager attention inside a checkpointed layer's forward (nothing saved), at its largest op:
    what the layer names by then beyond its input (whole micro-batch, bytes).

    Traced op by op (tiny gemma2 and gpt_oss, fp32 / pure-bf16 / amp, full recompute, seq 160, torch 2.13 CPU: the
    forward's peak, to the byte). Named: the input norm's output (the residual's dtype), v_proj's output, q and k
    after RoPE (`q * cos + rotate_half(q) * sin` with cos / sin in the hidden states' dtype: fp32 under amp) and,
    under GQA, repeat_kv's copies of k and v at query-head width. Each B·H·S² step holds its input and its output:
    modeling_gemma2.eager_attention_forward's scores and scaled copy, the soft-cap's ÷, tanh and ×, the mask's
    addition (in the mask's dtype, eager/masks.decoder_masks: fp32 under amp), then `softmax(..., dtype=float32)`
    with its fp32 copy of bf16 scores beside the masked scores and P. modeling_gpt_oss.eager_attention_forward
    concatenates the sink column (S + 1 keys) and subtracts the row max while the masked scores stay named; under
    autocast its `.to(value_states.dtype)` copy of P is made beside the fp32 P and the masked scores."""
    a, h, p, c = spec.attention, spec.hidden_size, dt.param, dt.compute
    heads, kv = a.n_heads, a.kv_heads
    rotated = p  # RoPE's products: q, k (compute dtype) times cos / sin (hidden states' dtype)
    expanded = rotated * heads * a.qk_head_dim + c * heads * a.v_dim if kv != heads else 0  # repeat_kv's copies
    named = p * h + c * kv * a.v_dim + rotated * (heads + kv) * a.qk_head_dim + expanded
    masked = max(c, p)  # the scores plus the additive mask (the embedding's dtype)
    if spec.attention.sinks:  # gpt-oss: S + 1 columns from the sink's concatenation on
        at_max = masked * (t + 2 * (t + 1) + 1)  # masked scores, the concatenation, its row max, the difference
        at_cast = masked * (t + 2 * (t + 1)) + (c * t if dt.amp else 0)  # … the difference, P and P's bf16 copy
        per_query = max(2 * c * t, at_max, at_cast)
    else:  # gemma2: the scores' steps two at a time, or the masked scores with softmax's fp32 copy and P
        per_query = max(2 * c * t, (masked + (FP32 if masked != FP32 else 0) + FP32) * t)
    return (named + heads * per_query) * n


def later_bias_casts(spec: ModelSpec, kind: str, width: int) -> int:
    """amp: bytes of a layer's bias casts made after its attention's core: all of eager.layer_bias_cast_bytes but
    q / k / v's."""
    a, c = spec.attention, eager.dt_of(width).compute
    first = c * (a.n_heads + 2 * a.kv_heads) * a.qk_head_dim if a.qkv_bias and a.kind != "mla" else 0
    return max(0, eager.layer_bias_cast_bytes(spec, kind, width) - first)


def mla_math_forward(spec: ModelSpec, dt: Dt, n: int, t: int) -> int:
    """MLA on SDPA's math path (q/k and v head widths differ), at its Q·Kᵀ (`bmm`): everything the attention
    has named so far plus the math path's own copies (bf16 and amp: mla_math_forward_low)."""
    if not mla_uses_math_path(spec, dt.device):
        return 0
    if dt.amp or dt.compute != FP32:
        return mla_math_forward_low(spec, dt, n, t)
    a, d, c = spec.attention, spec.hidden_size, dt.compute
    heads, qk, rope = a.n_heads, a.qk_head_dim, a.qk_rope_head_dim
    norm_out = c * d  # input_layernorm's output, the attention's input
    q_states = c * heads * qk  # q_b_proj(q_a_layernorm(q_a_proj(x))): q_pass is a view of it
    compressed_kv = c * (a.kv_lora_rank + rope)  # kv_a_proj_with_mqa's output (k_pass and k_rot views)
    kv_normed = c * a.kv_lora_rank  # kv_a_layernorm(k_pass), named until kv_b_proj
    rotated = c * (heads * rope + rope)  # q_rot and k_rot after RoPE
    query = c * heads * qk  # cat(q_pass, q_rot)
    kv_b = c * heads * (a.qk_nope_head_dim + a.v_head_dim)  # kv_b_proj's output: k_pass and value_states views
    key = c * heads * qk  # cat(k_pass, k_rot expanded to every head)
    scaled = c * heads * qk  # the math path's q·√scale (and k·√scale)
    scores = c * heads * t  # Q·Kᵀ: heads × T scores per token
    mask = c * t * t  # the causal mask built by the math path (where(tril(ones)), T×T, shared by the batch)
    # the largest of: at Q·Kᵀ (both scaled copies and the scores), and at the mask's addition (a second scores
    # tensor, q·√scale released)
    core = scaled + max(scaled + scores, 2 * scores)
    return (norm_out + q_states + compressed_kv + kv_normed + rotated + query + kv_b + key + core) * n + mask


def _mla_low_locals(spec: ModelSpec, dt: Dt) -> dict[str, int]:
    """Per-token bytes of what MLA's forward names up to SDPA in bf16 / amp (mla_math_forward_low), keyed by the row
    name where the layer also saves that tensor (bf16: the norm outputs the next linears read)."""
    a, d, c, pr = spec.attention, spec.hidden_size, dt.compute, dt.param
    heads, qk, rope = a.n_heads, a.qk_head_dim, a.qk_rope_head_dim
    return {
        "attn.norm_out": pr * d,  # input_layernorm's output
        "q_states": c * heads * qk,  # q_b_proj's output (q_pass a view of it)
        "compressed_kv": c * (a.kv_lora_rank + rope),  # kv_a_proj_with_mqa's output
        "attn.kv_a.norm_out": pr * a.kv_lora_rank,  # kv_a_layernorm's output
        "rotated": pr * (heads * rope + rope),  # q_rot and k_rot after RoPE
        "query": pr * heads * qk,  # cat(q_pass, q_rot)
        "kv_b": c * heads * (a.qk_nope_head_dim + a.v_head_dim),  # kv_b_proj's output
        "key": c * heads * qk,  # k_pass.new_empty, k_rot copied in
        "query_cast": c * heads * qk if dt.amp else 0,  # autocast's bf16 copy of the fp32 query
    }


def mla_math_locals(spec: ModelSpec, dt: Dt, b: int) -> dict[str, int]:
    """Per-token bytes of what MLA's forward names up to SDPA (modeling_deepseek_v3.py DeepseekV3Attention.forward),
    keyed by the row name where the layer also saves that tensor: bf16 / amp as _mla_low_locals; fp32 (traced, tiny
    deepseek_v3, recompute none) keeps kv_a_proj's output as its norm's input row, and at B=1 the math path's v is a
    view of kv_b_proj's output (the attn.v row with its fixed extra), at B > 1 that output is a local."""
    if dt.amp or dt.compute != FP32:
        return _mla_low_locals(spec, dt)
    a, c = spec.attention, dt.compute
    heads, qk, rope = a.n_heads, a.qk_head_dim, a.qk_rope_head_dim
    return {
        "attn.norm_out": c * spec.hidden_size,  # input_layernorm's output
        "q_states": c * heads * qk,  # q_b_proj's output (q_pass a view of it)
        "attn.kv_a.norm_x_fp32": c * (a.kv_lora_rank + rope),  # kv_a_proj_with_mqa's output
        "attn.kv_a.norm_out": c * a.kv_lora_rank,  # kv_a_layernorm's output
        "rotated": c * (heads * rope + rope),  # q_rot and k_rot after RoPE
        "query": c * heads * qk,  # cat(q_pass, q_rot)
        "kv_b": c * heads * (a.qk_nope_head_dim + a.v_head_dim) if b > 1 else 0,  # kv_b_proj's output
        "key": c * heads * qk,  # k_pass.new_empty, k_rot copied in
    }


def mla_math_forward_low(spec: ModelSpec, dt: Dt, n: int, t: int) -> int:
    """MLA on CPU SDPA's math path in bf16 (pure-bf16, amp), at its largest op (all the layer's casts counted).

    Traced op by op (tiny deepseek_v3, full recompute, torch 2.13 CPU): `_scaled_dot_product_attention_math` upcasts
    q, k and v to fp32 (`query_.to(at::kFloat)`, attention.cpp), scales q and k (fp32 copies), builds the fp32 causal
    mask (T×T), and returns `matmul(attn, value_acc).to(origin_dtype)` with `attn.to(origin_dtype)`: beside the fp32
    softmax it makes the weights' bf16 copy, v expanded for the bmm (an fp32 clone) and the fp32 output; the largest of
    Q·Kᵀ (both scaled copies and the scores), the mask's addition (a second scores tensor) and P·V is the peak.
    Under autocast the norm outputs are fp32 (fp32 norm weights), cos/sin are fp32 (the hidden states' dtype), so the
    rotary products and the query they are concatenated into are fp32; SDPA's autocast casts that query to bf16."""
    a, c = spec.attention, dt.compute
    heads, qk, v = a.n_heads, a.qk_head_dim, a.v_head_dim
    named = sum(_mla_low_locals(spec, dt).values())
    upcast = FP32 * heads * (2 * qk + v)  # the math path's fp32 q, k, v
    scaled, scores = FP32 * heads * qk, FP32 * heads * t
    at_qk = 2 * scaled + scores
    at_mask = scaled + 2 * scores
    at_pv = scaled + scores + c * heads * t + 2 * FP32 * heads * v  # P (fp32), its bf16 copy, v expanded, P·V
    mask = FP32 * t * t  # where(tril(ones)), T×T, shared by the batch
    return (named + upcast + max(at_qk, at_mask, at_pv)) * n + mask


def later_casts(spec: ModelSpec, ffn: str) -> int:
    """amp: bytes of a layer's weight casts made after its attention's core (o_proj's, the FFN's or MoE block's)."""
    return AMP_CAST * (spec.hidden_size * spec.attention.n_heads * spec.attention.v_dim
                       + (moe_cast_weights(spec) if ffn == "moe" else ffn_weights(spec)))


def mla_math_rebuild_low(spec: ModelSpec, kind: str, width: int, rows: list, n: int, t: int) -> InnerMoment | None:
    """The rebuild of a checkpointed MLA layer at the start of its backward (full recompute), at its math path's
    softmax or P·V in bf16 / amp: None elsewhere. Against the layer's rows: the rows from v's clone (softmax) or o_proj's
    input (P·V) on are not made yet; beside the rows made so far, the forward's unsaved locals (_mla_low_locals), the
    fp32 q, k, v, the masked scores (softmax) or the weights' bf16 copy, the fp32 P·V and its bf16 cast (P·V) and the
    T×T fp32 mask are alive, with the layer output's gradient (tokens·h, the residual's dtype; amp: and its bf16 copy
    for a bf16 branch) and every later layer's weight gradients. Traced op by op (tiny deepseek_v3 pure-bf16 and amp,
    full recompute: the backward peak, in the first layer's rebuild, at P·V; fake DeepSeek-V3 at seq 4096: at the
    softmax, each layer's within the bill's other items)."""
    dt = eager.dt_of(width)
    names = [r.name for r in rows]
    attn, ffn = act.layer_blocks(spec, kind)
    if attn != "mla" or not mla_uses_math_path(spec, dt.device) or not (dt.amp or dt.compute != FP32) \
            or "attn.o_in" not in names:
        return None
    a, c, heads = spec.attention, dt.compute, spec.attention.n_heads

    def not_yet(first: str) -> float:  # the rows made from `first` on
        return sum(r.bytes_at(t) for r in rows[names.index(first):])

    unsaved = sum(b for name, b in _mla_low_locals(spec, dt).items() if name not in names)
    upcast = FP32 * heads * (2 * a.qk_head_dim + a.v_head_dim)  # the math path's fp32 q, k, v
    # at the softmax: the masked scores beside P (v's clone not made yet); at P·V: P's bf16 copy, the fp32 P·V and its
    # bf16 cast (the largest at short sequences, the softmax at long ones)
    at_softmax = FP32 * heads * t - not_yet("attn.v")
    at_pv = c * heads * t + (FP32 + c) * heads * a.v_head_dim - not_yet("attn.o_in")
    change = round((unsaved + upcast + max(at_softmax, at_pv)) * n) + FP32 * t * t
    # the layer output's gradient; under autocast the block's last addend is bf16 (a dense FFN's down projection, or
    # DeepSeek's shared experts added after the fp32 routed ones), so the add's backward, run before the rebuild, also
    # made a bf16 copy of that gradient for its branch
    bf16_last = ffn != "moe" or (spec.family in SHARED_AFTER and spec.moe is not None
                                 and spec.moe.shared_intermediate_size > 0)
    grad_out = dt.param * spec.hidden_size * n + (c * spec.hidden_size * n if dt.amp and bf16_last else 0)
    return InnerMoment(change, grad_out, 0, 0, -later_casts(spec, ffn) if dt.amp else 0)


def gpt_oss_moe_forward(spec: ModelSpec, dt: Dt, n: int, t: int) -> int:
    """gpt-oss's MoE block inside a checkpointed layer's forward (nothing saved), at its largest op: the clamped
    SwiGLU's last product or the combine's reorder, beyond the layer's input (whole micro-batch, bytes).

    Traced op by op (tiny gpt_oss fp32 and amp, full recompute, torch 2.13 CPU: the forward's peak, in layer 1 at
    the combine's `weighted_out[inv_perm]`, to 16 bytes; the gate's moment to 16 bytes too). Named by the layer's
    forward meanwhile: the residual sum and post_attention_layernorm's output (the residual's dtype); the attention's
    weights, which modeling_gpt_oss.GptOssDecoderLayer keeps in `hidden_states, _ = self.self_attn(...)` until it
    returns: its eager_attention_forward returns `dropout(probs[..., :-1]).to(value_states.dtype)`, a view of the
    softmax's output over S + 1 keys, or under autocast (fp32 softmax, bf16 values) its bf16 copy over S keys; the
    router's logits (GptOssMLP's `_, router_scores, router_indices = self.router(...)`), top-k ids and scores.
    transformers' grouped_mm_experts_forward (integrations/moe.py; fp32 experts run the same steps through its
    grouped_mm_fallback op) then holds the sorted expert ids and their order (int64), the dispatched tokens (top-k
    rows per token), the routing weights in that order, the ids' fp32 copy for histc (and the per-expert counts and
    offsets); `_grouped_linear` adds the gathered per-row bias in place into the grouped GEMM's output. At
    GptOssExperts._apply_gate's last op the gate_up bias rows and output (2f wide) are alive with the clamped gate
    and up, σ·gate, up + 1 and their product (f wide each); at the combine the down bias rows, down's output, its
    weighted copy, the inverse order and the reordered copy (h wide each). gpt-oss-20b (h = f = 2880): the gate's."""
    m = spec.moe
    assert m is not None
    a, h, p, c = spec.attention, spec.hidden_size, dt.param, dt.compute
    k, e, f = m.top_k, m.n_routed_experts, m.expert_intermediate_size
    weights = c * a.n_heads * (t if dt.amp else t + 1)  # the attention weights (see above)
    layer = 2 * p * h + weights  # residual sum, norm output; the attention's weights
    router = c * e + INT64 * k + c * k  # logits, top-k ids, their softmax
    dispatch = 2 * INT64 * k + p * k * h + c * k + FP32 * k  # sorted ids and order, tokens, weights, ids' fp32 copy
    counts = FP32 * e + 4 * e  # histc's counts (fp32) and the int32 offsets: per layer
    gate = p * k * (2 * 2 * f + 5 * f)  # gate_up's bias rows and output; five f-wide tensors of the clamped SwiGLU
    combine = p * k * 4 * h + INT64 * k  # down's bias rows, output, weighted and reordered copies; inverse order
    return (layer + router + dispatch + max(gate, combine)) * n + counts


def gpt_oss_rebuild(spec: ModelSpec, kind: str, width: int, rows: list, n: int, t: int) -> InnerMoment | None:
    """gpt-oss under full recompute: the rebuild of a checkpointed MoE layer at the start of its backward, beside the
    layer output's gradient and its copy over the top-k that the combine's sum backward made (`clone`, top-k rows per
    token, the experts' dtype) before the first unpack set the rebuild off; the larger of two moments, against the
    layer's rows. Traced op by op (tiny gpt_oss fp32 / pure-bf16 / amp, seq 64-512: the step's backward peak):

    - the attention's largest op (eager_attention_in_layer's sink steps; seq 512): the rows from P on not made yet
      but v's expansion, v_proj's output and k after RoPE named beside repeat_kv's saved copies (under amp also the
      input norm's fp32 output, q after RoPE and k's fp32 expansion, which the matmuls save as bf16 casts), the
      rebuild's q / k / v bias casts in autocast's cache;
    - the combine's reorder (`inv_perm[perm] = arange(...)`, the rebuild's last saving op: every row made; seq 64-160):
      the forward's unsaved locals then (gpt_oss_moe_forward: the router's logits, the ids' fp32 copy for histc and
      the expert counts and offsets, down's gathered bias rows, the weighted output and the arange; in bf16 the
      residual sum; under amp the post-attention norm's fp32 output, which the router saves as its bf16 cast).

    None for other layers."""
    if kind != "moe" or spec.family not in GROUPED_BIAS_MOE_FAMILIES or spec.moe is None:
        return None
    dt = eager.dt_of(width)
    m, a, h, p, c = spec.moe, spec.attention, spec.hidden_size, dt.param, dt.compute
    k, e = m.top_k, m.n_routed_experts
    temps = (p * h + p * k * h) * n  # the layer output's gradient, its top-k copy
    names = [r.name for r in rows]
    # P and the rows after it not made yet, but v expanded (repeat_kv runs before Q·Kᵀ)
    not_made = sum(r.bytes_at(t) for r in rows[names.index("attn.probs"):] if r.name != "attn.v_rep") \
        if "attn.probs" in names else 0
    gqa = a.kv_heads != a.n_heads
    kv_locals = c * a.kv_heads * a.v_dim + p * a.kv_heads * a.qk_head_dim if gqa else 0
    if dt.amp:  # autocast's bf16 casts are what the linears and Q·Kᵀ save: the norm's fp32 output, q after RoPE and
        # k's fp32 expansion stay named beside them
        kv_locals += p * h + p * a.n_heads * a.qk_head_dim * (2 if gqa else 1)
    masked = max(c, p)
    per_query = max(2 * c * t, masked * (t + 2 * (t + 1) + 1), masked * (t + 2 * (t + 1)) + (c * t if dt.amp else 0))
    attention = round((kv_locals + a.n_heads * per_query - not_made) * n)
    qkv_bias = c * (a.n_heads + 2 * a.kv_heads) * a.qk_head_dim if a.qkv_bias and dt.amp else 0
    later = later_casts(spec, "moe") if dt.amp else 0  # o_proj's and the router's weight casts, not made yet
    locals_ = c * e + FP32 * k + 2 * p * k * h + INT64 * k  # logits, histc's input, down's bias rows, weighted; arange
    locals_ += p * h if p != FP32 else 0  # bf16: the residual sum (its norm saves an fp32 copy)
    locals_ += p * h if dt.amp else 0  # amp: the post-attention norm's fp32 output
    combine = locals_ * n + FP32 * e + 4 * e  # … and histc's counts, the int32 offsets
    if attention - later > combine:
        return InnerMoment(attention, temps, 0, 0, qkv_bias - later)
    return InnerMoment(combine, temps, 0, 0, eager.layer_bias_cast_bytes(spec, kind, width))


def _ffn_forward(spec: ModelSpec, dt: Dt, ffn: str, d: int, f: int, n: int) -> int:
    if ffn == "gelu_mlp" and spec.parallel_residual:
        # GPT-NeoX (modeling_gpt_neox.GPTNeoXLayer, use_parallel_residual): at the MLP's GELU (one aten.gelu op) the
        # layer names the attention's output (dense's, for the final sum), post_attention_layernorm's output of the
        # layer input, dense_h_to_4h's output and the GELU's (traced op by op, tiny gpt_neox fp32 full: the forward's
        # peak, to the byte). Autocast: dense_4h_to_h's cast (weight and bias) is made after the GELU.
        down_cast = AMP_CAST * (f * d + d) if dt.amp else 0
        return (dt.compute * d + dt.param * d + 2 * dt.compute * f) * n - down_cast
    if ffn == "gelu_mlp" and spec.family in GELU_TANH_FAMILIES:
        attn_output = dt.compute * d  # c_proj's output, still named by the block
        residual = dt.param * d  # attn_output + residual: the stream the MLP's output is added to
        ln_2_out = dt.param * d  # the MLP's input
        up_out = dt.compute * f  # c_fc's output x
        gelu_temps = 3 * dt.compute * f  # 0.5·x, x³, 0.044715·x³
        # autocast: the layer's moment counts all its weight casts; the down projection's (c_proj, f×d weight
        # and d bias) is made after the GELU, so it is not there yet.
        down_cast = AMP_CAST * (f * d + d) if dt.amp else 0
        return (attn_output + residual + ln_2_out + up_out + gelu_temps) * n - down_cast
    if ffn == "moe" and spec.family in FALLBACK_MOE_FAMILIES and spec.moe is not None and dt.param == FP32:
        # fp32 experts (fp32, and amp: autocast leaves grouped_mm alone) run transformers' per-expert fallback;
        # its largest op is either the product of SiLU(gate) and up over all top_k·tokens dispatched rows, or
        # the combine (down outputs, their weighted copies and the rows put back in token order).
        m = spec.moe
        k, e, fe = m.top_k, m.n_routed_experts, m.expert_intermediate_size
        residual = dt.param * d  # residual + attention output: the stream the MoE output is added to
        norm_out = dt.param * d  # post_attention_layernorm's output (the router's and experts' input)
        shared = dt.param * d if spec.family in SHARED_FIRST and m.shared_intermediate_size else 0  # its output
        router = dt.compute * e + FP32 * k + INT64 * k  # router logits; top-k weights (fp32) and ids
        renormalised = FP32 * k if RENORMALISE.get(spec.family) else 0  # the top-k weights divided by their sum
        permutation = 2 * INT64 * k  # sort of the flat expert ids: values and order
        token_index = INT64 * k  # order // top_k: the token of each dispatched row
        dispatched = dt.param * k * d  # the gathered hidden states, top_k rows per token
        before = residual + norm_out + shared + router + renormalised + permutation + token_index + dispatched
        gate_up = dt.param * k * 2 * fe  # gate_up projection of every dispatched row
        silu_and_product = 2 * dt.param * k * fe  # SiLU(gate), SiLU(gate)·up
        down_and_weighted = 2 * dt.param * k * d  # down projection's outputs and their routing-weighted copies
        inverse = INT64 * k  # the inverse permutation
        combined = dt.param * k * d  # the weighted rows in token order (summed over top_k next)
        return (before + max(gate_up + silu_and_product, down_and_weighted + inverse + combined)) * n
    return 0


def eager_attention_backward(spec: ModelSpec, rows: list, width: object, inventory: ParamInventory, kind: str,
                             count: int, grad_bytes: int, n: int, t: int, mla: bool = True) -> tuple[int, int, int]:
    """--attention eager (activations/eager/eager_attention.py): the moment of a layer's softmax backward, as
    (activation change, temporaries, gradients), bytes for the whole micro-batch; (0, 0, 0) for other rows.

    Traced op by op on tiny llama (torch 2.13 CPU, transformers 5.24): the FFN's rows, o_proj's input, v expanded
    and P's cast are freed (their backwards ran); P·V's backward made dP (B·H·S²) — cast to the softmax's dtype —
    and `_softmax_backward_data` makes dS (B·H·S², the softmax's dtype); the residual gradient and the gradient of
    the attention output are alive; the FFN's and o_proj's weight gradients exist. Tiny llama and gpt2, seq 256-512,
    fp32 and pure-bf16: the backward peak within 0.03 %. `mla`: MLA's math path takes this moment too (a checkpointed
    layer; where every row is kept, eager_mla.attention_backward_peak's traced moment stands instead)."""
    from stepbill.engine.activations.eager.eager_attention import eager_attention_modelled

    names = {r.name for r in rows}  # SDPA's math path (attention dropout on CPU) keeps attn.probs too: not this one
    # MLA's math path (unequal head widths, no dropout) reaches the same moment: P·V's backward made dP, the
    # softmax's makes dS, both fp32 beside the kept fp32 P (a helper's trace: _softmax_backward_data holds three
    # fp32 B·H·S² tensors on deepseek-v2-lite under full recompute, the backward peak)
    mla_math = mla and spec.attention.kind == "mla" and "attn.q_scaled" in names
    # Gemma2's own eager attention reaches the same moment (soft-capping's tanh output stays for its backward, next);
    # gpt-oss's sink column's backward is not traced yet
    own = spec.family in EAGER_ATTENTION_FAMILIES and not spec.attention.sinks
    eager_attention = "attn.q_scaled" not in names and (eager_attention_modelled(spec) or own)
    if "attn.probs" not in names or not (mla_math or eager_attention):
        return 0, 0, 0
    a = spec.attention
    dt = eager.dt_of(width)
    probs = next(r for r in rows if r.name == "attn.probs")
    ffn_block = rows[-1].block
    # sandwich placement: the post-attention norm's rows too (its backward ran before o_proj's)
    freed = sum(r.bytes_at(t) for r in rows if r.block == ffn_block or r.name.startswith("attn.post.")
                or r.name in ("attn.o_in", "attn.v_rep", "attn.v", "attn.probs_cast"))
    s2 = a.n_heads * t  # B·H·S² elements per token
    # dP (cast to the softmax's dtype) and dS; the residual gradient; the attention output's gradient (GPT-2: a
    # token-major and a head-major copy; the llama family: one, measured)
    grad_out = (2 if spec.family == "gpt2" else 1) * dt.compute * a.n_heads * a.v_dim
    temps = 2 * probs.dtype_bytes * s2 + dt.param * spec.hidden_size + grad_out
    ffn = sum(x.total for x in inventory.tensors if x.layer_kind == kind and x.component == "ffn")
    o_proj = spec.hidden_size * a.n_heads * a.v_dim
    norms = (3 if spec.norm_placement == "sandwich" else 1) * spec.hidden_size  # the FFN's input norm (and post norms)
    return -round(freed * n), round(temps * n), (ffn // count + norms + o_proj) * grad_bytes


def eager_attention_forward_peak(spec: ModelSpec, rows: list, width: object, n: int, t: int, b: int) -> int:
    """--attention eager: bytes a layer's forward holds at its largest attention op, against the moment after its
    forward (whole micro-batch); 0 for other rows. Traced op by op on tiny llama (torch 2.13 CPU): the rows from P
    on do not exist yet; the scores and their scaled copy (2 × B·H·S², compute dtype) or, when softmax upcasts, the
    masked scores, their fp32 copy and P; the additive mask (B·S², compute dtype) is alive through the forward.
    Measured: tiny llama fp32 seq 512-1024 exact; pure-bf16 −0.7 to −1.8 %, gpt2 −1.3 % (locals not traced yet)."""
    from stepbill.engine.activations.eager.eager_attention import eager_attention_modelled

    names = [r.name for r in rows]
    # Gemma2's own eager attention (no sinks) too: its mask is in EagerTerms.decoder_masks, its scores' steps as
    # eager_attention_in_layer traced them (the masked scores in the mask's dtype: fp32 under amp)
    own = spec.family in EAGER_ATTENTION_FAMILIES and not spec.attention.sinks
    if "attn.probs" not in names or "attn.q_scaled" in names or not (eager_attention_modelled(spec) or own):
        return 0
    dt = eager.dt_of(width)
    c = dt.compute
    at = names.index("attn.probs")
    probs = rows[at]
    # P and what follows it do not exist yet, but v expanded (repeat_kv runs first)
    later = sum(r.bytes_at(t) for r in rows[at:] if r.name not in ("attn.v_rep", "attn.v"))
    sb = probs.dtype_bytes
    a = spec.attention
    s2 = a.n_heads * t * n
    m = max(c, dt.param) if own else c
    transient = max(2 * c, m + (sb if sb != m else 0) + sb) * s2
    # the attention's locals: k after RoPE and v at kv-head width (under GQA the matmuls save their expansions)
    kv_locals = c * a.kv_heads * (a.qk_head_dim + a.v_dim) * n if a.kv_heads != a.n_heads and spec.family != "gpt2" \
        else 0
    rope = 2 * rope_width(spec) * c * t + INT64 * t if spec.positions == "rotary" else 0  # cos, sin; position ids
    # the additive mask (B·S², compute dtype) and, at B > 1, the boolean mask it was made from (B·S², 1 B)
    masks = 0 if own else b * t * t * c + (b * t * t if b > 1 else 0)
    if own:  # Gemma2 (traced, tiny gemma2 none seq 512): q after RoPE stays named beside the matmul's contiguous copy;
        # below fp32 the layer's input (`residual`) and the embedding output (`inputs_embeds`, named by the decoder)
        # beside the norms' saved fp32 copies (eager_mla._named_outside's rule); of the layer's fixed `1 + w` rows only
        # the input norm's exists yet (eager/gemma.norm_weight_constants)
        kv_locals += c * a.n_heads * a.qk_head_dim * n
        kv_locals += 2 * dt.param * spec.hidden_size * n if dt.param != FP32 else 0
        kv_locals -= FP32 * 3 * spec.hidden_size if spec.norm_weight_offset and spec.norm_placement == "sandwich" else 0
    return round(transient - later * n) + kv_locals + rope + masks


POST_FFN = "mlp.post."  # sandwich placement: the rows of the norm on the FFN's output (eager/gemma.post_ffn_norm)


def split_post_ffn(rows: list) -> tuple[list, list]:
    """A layer's rows without the post-FFN norm's, and the post-FFN norm's (sandwich placement: after down's input,
    the last rows of the layer; empty elsewhere)."""
    post = [r for r in rows if r.name.startswith(POST_FFN)]
    return [r for r in rows if r not in post], post


def post_ffn_norm_backward(spec: ModelSpec, rows: list, width: int, n: int, t: int,
                           grad_bytes: int) -> InnerMoment | None:
    """Sandwich placement (Gemma's `post_feedforward_layernorm` on down's output, the layer's last op): its backward
    is the layer's first, with every row rebuilt and none freed but its own x̂ and 1/rms. Gemma's RMSNorm
    (modeling_gemma2.Gemma2RMSNorm: `self._norm(x.float()) * (1.0 + self.weight.float())`, then `.type_as(x)`) runs
    backward as autograd's ops in fp32: beside the layer output's gradient (the residual's dtype), five fp32 hidden-wide
    gradients at once (at the x̂ = x·rsqrt(mean(x²) + ε) chain's last mul), the weight's gradient made; the norm's
    x̂, 1/rms and its fp32 `1 + w` are freed by then. Traced op by op (tiny gemma2 fp32 and pure-bf16, full recompute:
    the step's backward peak, in layer 0's backward). None without the post-FFN norm's rows."""
    post = {r.name: r for r in rows if r.name.startswith(POST_FFN)}
    if f"{POST_FFN}norm_xhat" not in post:
        return None
    h = spec.hidden_size
    freed = sum(post[name].bytes_at(t) for name in (f"{POST_FFN}norm_xhat", f"{POST_FFN}norm_rstd") if name in post)
    one_plus_w = FP32 * h if spec.norm_weight_offset else 0  # its `1 + w` (fp32, a fixed row of the layer)
    dt = eager.dt_of(width)
    temps = (dt.param + 5 * FP32) * h * n  # the layer output's gradient, the norm's five fp32 gradients
    return InnerMoment(-round(freed * n) - one_plus_w, temps, 0, h * grad_bytes)
