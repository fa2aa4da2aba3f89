"""FLOPs of one training step: per op, per layer, per model; 6·N·D beside the direct count.

Conventions (the seed's): 2 FLOPs per multiply-add; only matmuls count (norms, activations, softmax are
left out of the step count); a linear [tokens, k] × [k, n] costs 2·k·n per token. The attention core
(QKᵀ and A·V, no weights) costs 2·S²·H·(d_qk + d_v) per sequence as a full square — what PyTorch's
`FlopCounterMode` counts — and half that causal-halved, the figure the bill reports as `flops.step`.
The backward is 2× the forward; recompute adds the FLOPs of what it rebuilds.

What PyTorch's `FlopCounterMode` counts for the same step (`flops.step_noncausal`, "counted" convention)
differs from that in two places, both modelled here:

- a fused SDPA kernel's backward (flash / memory-efficient / cuDNN, and our CPU flash formula, which copies
  theirs) first rebuilds the scores QKᵀ, then runs 4 matmuls: 2·S²·H·(3·d_qk + 2·d_v), one QKᵀ more than
  2× the forward. The math path (eager attention; MLA on CPU, whose q/k and v heads differ in width) runs
  bmm's whose backward is exactly 2× the forward.
- full recompute with transformers' non-reentrant checkpoint stops rebuilding a layer as soon as the last
  tensor its backward needs is saved again (PyTorch's early stop): the layer's trailing matmul, whose output
  nothing saves — the MLP's down projection, DeepSeek's shared-expert down projection — is not rerun.

Embedding lookups (gathers) and their backward (a scatter-add) count 0 in both conventions; the LM head's
matmul counts 1× forward + 2× backward in both.

Functions take `seq_len` / `micro_batch` as scalars or numpy arrays (broadcasting), so the planner can
evaluate many shapes at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from stepbill.engine.line import Line
from stepbill.engine.params import ParamInventory
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import LoRA

BACKWARD_FACTOR = 2  # backward = grad w.r.t. inputs + grad w.r.t. weights, each as costly as the forward


@dataclass(frozen=True)
class LinearOp:
    """A matmul every token goes through `copies` times (routed experts: top_k): [k] → [n]."""

    name: str
    k: int
    n: int
    copies: int = 1

    @property
    def flops_per_token(self) -> int:
        return 2 * self.k * self.n * self.copies


def attention_linear_ops(spec: ModelSpec) -> list[LinearOp]:
    """The projections of one attention block (MHA/GQA or MLA)."""
    a, d = spec.attention, spec.hidden_size
    if a.kind == "mla":
        kv_a = a.kv_lora_rank + a.qk_rope_head_dim
        ops = []
        if a.q_lora_rank is None:
            ops.append(LinearOp("attn.q_proj", d, a.n_heads * a.qk_head_dim))
        else:
            ops += [LinearOp("attn.q_a_proj", d, a.q_lora_rank),
                    LinearOp("attn.q_b_proj", a.q_lora_rank, a.n_heads * a.qk_head_dim)]
        return [
            *ops,
            LinearOp("attn.kv_a_proj", d, kv_a),
            LinearOp("attn.kv_b_proj", a.kv_lora_rank, a.n_heads * (a.qk_nope_head_dim + a.v_head_dim)),
            LinearOp("attn.o_proj", a.n_heads * a.v_head_dim, d),
        ]
    return [
        LinearOp("attn.q_proj", d, a.n_heads * a.qk_head_dim),
        LinearOp("attn.k_proj", d, a.kv_heads * a.qk_head_dim),
        LinearOp("attn.v_proj", d, a.kv_heads * a.v_dim),
        LinearOp("attn.o_proj", a.n_heads * a.v_dim, d),
    ]


def ffn_linear_ops(spec: ModelSpec, layer_kind: str) -> list[LinearOp]:
    """The matmuls of the FFN of a "dense" or "moe" layer (router, top_k routed experts, shared experts)."""
    d = spec.hidden_size
    if layer_kind == "moe":
        moe = spec.moe
        assert moe is not None
        ef, sf = moe.expert_intermediate_size, moe.shared_intermediate_size
        ops = [LinearOp("moe.router", d, moe.n_routed_experts),
               LinearOp("moe.experts.gate_up", d, 2 * ef, moe.top_k),
               LinearOp("moe.experts.down", ef, d, moe.top_k)]
        if sf:
            ops += [LinearOp("moe.shared.gate_up", d, 2 * sf), LinearOp("moe.shared.down", sf, d)]
        if moe.shared_expert_gate:
            ops.append(LinearOp("moe.shared_expert_gate", d, 1))
        return ops
    f = spec.ffn
    up = 2 * f.intermediate_size if f.kind == "swiglu" else f.intermediate_size
    return [LinearOp("mlp.gate_up" if f.kind == "swiglu" else "mlp.up", d, up),
            LinearOp("mlp.down", f.intermediate_size, d)]


def layer_linear_ops(spec: ModelSpec, layer_kind: str) -> list[LinearOp]:
    return attention_linear_ops(spec) + ffn_linear_ops(spec, layer_kind)


def lm_head_op(spec: ModelSpec) -> LinearOp:
    return LinearOp("lm_head", spec.hidden_size, spec.vocab_size)


def attention_core_flops(spec: ModelSpec, seq_len: Any, causal: bool = True) -> Any:
    """FLOPs of one layer's attention core for one sequence: QKᵀ (2·S²·H·d_qk) + A·V (2·S²·H·d_v) as a full
    square, halved when causal (only the lower triangle is computed)."""
    a = spec.attention
    full = 2 * seq_len * seq_len * a.n_heads * (a.qk_head_dim + a.v_dim)
    return full // 2 if causal else full  # full is even: exact integer halving, arrays too


# Families whose transformers class has no SDPA path (5.24: `_supports_sdpa = False`, soft-capping / sinks): they
# run their eager attention whatever is asked (measure/build.effective_attention), so no fused backward.
NO_SDPA_FAMILIES = ("gemma2", "gpt_oss")


def attention_backward_rescore(spec: ModelSpec, attention: str = "sdpa") -> bool:
    """Whether the attention backward rebuilds QKᵀ (a fused SDPA kernel) rather than reading saved
    probabilities (the math path: attention "eager", or SDPA on CPU with unequal q/k and v head widths, as
    DeepSeek's MLA has; and the families with no SDPA path at all)."""
    a = spec.attention
    return attention == "sdpa" and a.qk_head_dim == a.v_dim and spec.family not in NO_SDPA_FAMILIES


def attention_rescore_flops(spec: ModelSpec, seq_len: Any, causal: bool = True, attention: str = "sdpa") -> Any:
    """FLOPs a fused SDPA backward spends beyond 2× the forward, one layer, one sequence: the rebuilt QKᵀ,
    2·S²·H·d_qk as a full square (halved causal); 0 on the math path."""
    if not attention_backward_rescore(spec, attention):
        return 0 * seq_len
    full = 2 * seq_len * seq_len * spec.attention.n_heads * spec.attention.qk_head_dim
    return full // 2 if causal else full


def checkpoint_skipped_ops(spec: ModelSpec, layer_kind: str) -> list[LinearOp]:
    """The trailing matmuls of a layer that non-reentrant checkpointing does not rerun (early stop): a layer's
    recompute ends when the last tensor its backward needs is saved again, and a matmul that saves only its
    input and weight is stopped before it runs. That is the FFN's down projection when its output goes
    straight into the residual add — the dense MLP (every family), and DeepSeek's shared experts, which
    transformers runs after the routed ones. Routed experts' outputs are scaled by the routing weights
    (which saves them) and Qwen2-MoE's shared expert is gated by a sigmoid (likewise), so MoE layers without
    shared experts or with a shared-expert gate rerun everything."""
    if spec.norm_placement != "pre":  # Gemma's sandwich / OLMo2's post norm reads (and saves) the down output
        return []
    if layer_kind != "moe":
        return [op for op in ffn_linear_ops(spec, layer_kind) if op.name == "mlp.down"]
    moe = spec.moe
    assert moe is not None
    if moe.shared_intermediate_size and not moe.shared_expert_gate:
        return [op for op in ffn_linear_ops(spec, layer_kind) if op.name == "moe.shared.down"]
    return []


@lru_cache(maxsize=256)  # a pure function of the frozen spec; every FLOPs line asks for it
def layer_linear_flops_per_token(spec: ModelSpec, layer_kind: str) -> int:
    return sum(op.flops_per_token for op in layer_linear_ops(spec, layer_kind))


def layer_forward_flops(spec: ModelSpec, layer_kind: str, seq_len: Any, micro_batch: Any = 1,
                        causal: bool = True) -> Any:
    """Forward FLOPs of one layer over a micro-batch: B·S·Σ 2kn + B·attention core."""
    return micro_batch * (seq_len * layer_linear_flops_per_token(spec, layer_kind)
                          + attention_core_flops(spec, seq_len, causal))


def layer_recompute_flops(spec: ModelSpec, layer_kind: str, seq_len: Any, micro_batch: Any = 1,
                          causal: bool = True, early_stop: bool = False) -> Any:
    """FLOPs of rebuilding one layer's forward over a micro-batch: the whole forward (the seed's convention),
    or with `early_stop` less the trailing matmuls non-reentrant checkpointing does not rerun (what
    FlopCounterMode counts under transformers' gradient checkpointing)."""
    total = layer_forward_flops(spec, layer_kind, seq_len, micro_batch, causal)
    if early_stop:
        total = total - micro_batch * seq_len * sum(op.flops_per_token for op in checkpoint_skipped_ops(spec, layer_kind))
    return total


def layer_attention_share(spec: ModelSpec, layer_kind: str, seq_len: Any, causal: bool = True) -> Any:
    """Share of one layer's forward FLOPs spent in the attention core (82.1 % for a V3 MoE layer at 128K)."""
    core = attention_core_flops(spec, seq_len, causal)
    return core / (core + seq_len * layer_linear_flops_per_token(spec, layer_kind))


def layer_counts(spec: ModelSpec) -> dict[str, int]:
    return {k: n for k, n in (("dense", spec.n_dense_layers), ("moe", spec.n_moe_layers)) if n}


def forward_flops(spec: ModelSpec, seq_len: Any, micro_batch: Any = 1, causal: bool = True) -> Any:
    """Forward FLOPs of the whole model over a micro-batch: every layer plus the LM head (embedding
    lookups are gathers, 0 FLOPs)."""
    total = micro_batch * seq_len * lm_head_op(spec).flops_per_token
    for kind, n in layer_counts(spec).items():
        total = total + n * layer_forward_flops(spec, kind, seq_len, micro_batch, causal)
    return total


def attention_flops(spec: ModelSpec, seq_len: Any, micro_batch: Any = 1, causal: bool = True) -> Any:
    """Attention-core FLOPs of the whole forward."""
    return spec.n_layers * micro_batch * attention_core_flops(spec, seq_len, causal)


def step_flops(spec: ModelSpec, seq_len: Any, micro_batch: Any = 1, causal: bool = True,
               recompute: Any = 0) -> Any:
    """One step: forward 1× + backward 2× + whatever recompute rebuilds."""
    return (1 + BACKWARD_FACTOR) * forward_flops(spec, seq_len, micro_batch, causal) + recompute


def backward_flops(spec: ModelSpec, seq_len: Any, micro_batch: Any = 1, causal: bool = True,
                   attention: str | None = None) -> Any:
    """Backward FLOPs of the whole model: 2× the forward (the seed's convention, `attention` None), plus with
    `attention` ("sdpa" / "eager") the QKᵀ a fused SDPA backward rebuilds in every layer (FlopCounterMode's)."""
    total = BACKWARD_FACTOR * forward_flops(spec, seq_len, micro_batch, causal)
    if attention is not None:
        total = total + spec.n_layers * micro_batch * attention_rescore_flops(spec, seq_len, causal, attention)
    return total


def counted_step_flops(spec: ModelSpec, seq_len: Any, micro_batch: Any = 1, recompute: Any = 0,
                       attention: str = "sdpa") -> Any:
    """One step as FlopCounterMode counts it: forward + backward (a fused SDPA kernel's rebuilt QKᵀ
    included), attention as a full square, plus `recompute` (give it in the same convention:
    `layer_recompute_flops(..., causal=False, early_stop=True)` per layer for full recompute)."""
    return (forward_flops(spec, seq_len, micro_batch, False)
            + backward_flops(spec, seq_len, micro_batch, False, attention) + recompute)


def six_nd(n_active: Any, tokens: Any) -> Any:
    """The 6·N·D rule: 2 (forward) + 4 (backward) FLOPs per active parameter per token. It counts only
    products with weights, so it misses the attention core (29.1 PFLOP for 37e9 × 131,072)."""
    return 6 * n_active * tokens


def lora_adapter_flops_per_token(inv: ParamInventory, lora: LoRA) -> int:
    """Forward FLOPs of the LoRA adapters one token goes through: A [k → r] then B [r → n] on every targeted
    (n, k) matrix, 2·r·(k + n) per pass, times the copies a token passes (layers; top_k routed experts). Their
    backward is 2× that (both A and B train)."""
    return sum(2 * lora.rank * (t.shape[0] + t.shape[1]) * t.active_copies
               for t in inv.tensors if len(t.shape) == 2 and lora.targets_matrix(t.name, t.component))


_INVENTORY_NAME = {"attn.kv_a_proj": "attn.kv_a_proj_with_mqa"}  # LinearOp name → the inventory's weight name
_READS_LAYER_INPUT = ("attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.q_a_proj", "attn.kv_a_proj")


def lora_first_layer_dgrad_per_token(spec: ModelSpec, lora: LoRA) -> int:
    """Input-gradient FLOPs per token that autograd never runs under LoRA: with the embedding frozen, the first
    layer's input needs no gradient, so the projections that read it (q / k / v; MLA's q_a or q and kv_a) skip
    their dX GEMM (2·k·n), and so do the A matrices of adapters on them (2·k·r). Measured exactly with
    FlopCounterMode on a tiny Llama (tests/measure/test_lora_saved.py). Not modelled: GPT-NeoX's parallel
    residual, whose first MLP reads the layer input too."""
    skipped = 0
    for op in attention_linear_ops(spec):
        if op.name not in _READS_LAYER_INPUT:
            continue
        skipped += op.flops_per_token
        if lora.targets_matrix(_INVENTORY_NAME.get(op.name, op.name) + ".weight"):
            skipped += 2 * op.k * lora.rank
    return skipped


def lora_step_terms(spec: ModelSpec, inv: ParamInventory, lora: LoRA, seq_len: int, micro_batch: int) -> dict[str, int]:
    """What LoRA changes in one micro-batch's step FLOPs: the frozen base skips every weight-gradient GEMM (each
    costs what its forward costs: `frozen_wgrad` = the forward's matmuls with weights, LM head included —
    everything but the attention core), the first layer skips the input gradients nothing needs
    (`first_layer_dgrad`), and the adapters add 3 × their forward (`adapters`). Step ≈ 2/3 of full fine-tuning
    when the attention core is small."""
    tokens = seq_len * micro_batch
    linear = forward_flops(spec, seq_len, micro_batch, True) - attention_flops(spec, seq_len, micro_batch, True)
    adapter_fwd = lora_adapter_flops_per_token(inv, lora)
    return {"frozen_wgrad": int(linear), "adapters": 3 * tokens * adapter_fwd,
            "first_layer_dgrad": tokens * lora_first_layer_dgrad_per_token(spec, lora),
            "adapter_params_active": adapter_fwd // 2}


def lora_adapter_flops_per_layer_token(inv: ParamInventory, lora: LoRA, layer_kind: str, n_layers: int) -> float:
    """Forward FLOPs of the adapters of one layer of `layer_kind`, per token (lora_adapter_flops_per_token's share)."""
    total = sum(2 * lora.rank * (t.shape[0] + t.shape[1]) * t.active_copies for t in inv.tensors
                if t.layer_kind == layer_kind and len(t.shape) == 2 and lora.targets_matrix(t.name, t.component))
    return total / max(n_layers, 1)


def stage_step_flops(spec: ModelSpec, inv: ParamInventory, seq_len: int, micro_batch: int, kinds: dict[str, int],
                     first: bool, last: bool, recompute_per_token: dict[str, float],
                     lora: LoRA | None = None) -> float:
    """Executed FLOPs of one pipeline stage for one micro-batch (causal attention, as flops.step counts them):
    its layers' forward + backward + recompute (`recompute_per_token`: per layer per token, by kind), the LM head
    on the last stage; under LoRA no weight gradients, no input gradient for the first layer's q/k/v, adapters
    added. Summed over the stages it is flops.step."""
    tokens = seq_len * micro_batch
    total = 0.0
    for kind, n in kinds.items():
        layer = layer_forward_flops(spec, kind, seq_len, micro_batch, True)
        total += n * ((1 + BACKWARD_FACTOR) * layer + recompute_per_token.get(kind, 0.0) * tokens)
        if lora is not None:
            n_kind = layer_counts(spec).get(kind, 0)
            total += n * tokens * (3 * lora_adapter_flops_per_layer_token(inv, lora, kind, n_kind)
                                   - layer_linear_flops_per_token(spec, kind))
    if last:
        head = tokens * lm_head_op(spec).flops_per_token
        total += (1 + BACKWARD_FACTOR) * head - (head if lora is not None else 0)
    if first and lora is not None:
        total -= tokens * lora_first_layer_dgrad_per_token(spec, lora)
    return total


PALM = "cited: PaLM, arXiv 2204.02311 appendix B (model FLOPs 6N + 12·L·H·Q·T per token)"


def matmul_params(spec: ModelSpec, inv: ParamInventory) -> int:
    """N of PaLM appendix B and nanoGPT's `estimate_mfu`: the active parameters a token multiplies — active minus
    the embedding lookups (gathers: 0 FLOPs; GPT's position table too), plus the LM head when it is tied to the
    token embedding (nanoGPT's `get_num_params()` for a tied GPT-2: all but `wpe`)."""
    embedding = inv.by_component().get("embedding", (0, 0))[1]
    tied_head = spec.vocab_size * spec.hidden_size if spec.tied_embeddings else 0
    return inv.active - embedding + tied_head


def palm_flops_per_token(spec: ModelSpec, n_matmul: Any, seq_len: Any, causal: bool = False,
                         n_adapters: int | None = None) -> Any:
    """Model FLOPs of one token of one step (forward + backward), PaLM appendix B: 6·N + 12·L·H·Q·T, with the
    attention term written 6·L·H·(d_qk + d_v)·T so that MLA's unequal head widths fit (= 12·L·H·Q·T when
    d_qk = d_v = Q). PaLM counts the full S×S square (`causal` False); causal halves the attention term.
    With LoRA (`n_adapters`: adapter parameters a token passes) the frozen N needs no weight gradient:
    4·N + 6·N_adapters (our extension of PaLM's count: the FLOPs the step needs, nothing more)."""
    a = spec.attention
    attn = 6 * spec.n_layers * a.n_heads * (a.qk_head_dim + a.v_dim) * seq_len
    weights = 6 * n_matmul if n_adapters is None else 4 * n_matmul + 6 * n_adapters
    return weights + (attn // 2 if causal else attn)


def attention_slope(spec: ModelSpec, causal: bool = True) -> float:
    """Recompute FLOPs per byte of the attention output, divided by S (bf16): S²·H·(d_qk+d_v) / (S·H·d_v·2)
    = S·(d_qk+d_v)/(2·d_v) causal; doubled full-square. 1.25 for V3 (192/128), 1.00 for GPT-3."""
    a = spec.attention
    slope = (a.qk_head_dim + a.v_dim) / (2 * a.v_dim)
    return slope if causal else 2 * slope


def crossover_seq_len(k: Any, slope: float) -> Any:
    """Sequence length above which recomputing the attention output costs more per byte than a linear
    layer of input width `k` (whose cost per byte is k): S* = k / slope (5,734 for k = 7,168 on V3)."""
    return k / slope


def _kernel(spec: ModelSpec, attention: str) -> str:
    if attention_backward_rescore(spec, attention):
        return "fused SDPA"
    return "math path: eager attention" if attention != "sdpa" else "math path: q/k and v heads differ in width"


def flops_lines(spec: ModelSpec, seq_len: int, micro_batch: int, n_active: int,
                recompute_causal: float = 0, recompute_full: float = 0, attention: str = "sdpa",
                recompute_square: float | None = None, n_matmul: int | None = None,
                lora: dict[str, int] | None = None) -> dict[str, Line]:
    """The FLOPs lines of the bill, one micro-batch (decimal units on output; TFLOP = 1e12). `recompute_causal`
    is in the seed's convention (whole layer forwards, causal-halved attention); `recompute_full` in
    FlopCounterMode's (full square; full recompute's early stop); `recompute_square` the causal figure's rebuild
    with the attention as a full square (defaults to `recompute_full`), as `RecomputePlan` gives them. With
    `n_matmul` (matmul_params) the PaLM model FLOPs lines `flops.model` / `flops.model_causal` are added. With
    `lora` (lora_step_terms) every step figure drops the frozen weight-gradient GEMMs and adds the adapters."""
    tokens = seq_len * micro_batch
    if recompute_square is None:
        recompute_square = recompute_full
    fwd = forward_flops(spec, seq_len, micro_batch, True)
    fwd_full = forward_flops(spec, seq_len, micro_batch, False)
    attn = attention_flops(spec, seq_len, micro_batch, True)
    head = tokens * lm_head_op(spec).flops_per_token
    step = step_flops(spec, seq_len, micro_batch, True, recompute_causal)
    bwd_full = backward_flops(spec, seq_len, micro_batch, False, attention)
    rescore = bwd_full - BACKWARD_FACTOR * fwd_full
    step_full = counted_step_flops(spec, seq_len, micro_batch, recompute_full, attention)
    nd = six_nd(n_active, tokens)
    causal_note = "causal-halved attention (the seed's convention)"
    square_note = "full-square attention (what FlopCounterMode counts)"
    counted_note = ("FlopCounterMode's: full-square attention, fused SDPA backward rebuilds QKᵀ, full recompute "
                    "stops before each layer's trailing down projection (non-reentrant checkpoint's early stop)")
    step_square = step_flops(spec, seq_len, micro_batch, False, recompute_square)
    delta = 0 if lora is None else lora["adapters"] - lora["frozen_wgrad"] - lora["first_layer_dgrad"]
    step, step_square, bwd_full, step_full = step + delta, step_square + delta, bwd_full + delta, step_full + delta
    extra: dict[str, Line] = {}
    lora_terms, lora_inputs = "", {}
    if lora is not None:
        lora_terms = " − frozen weight grads {wgrad} − first layer's input grads {dgrad} + LoRA adapters {adapters}"
        lora_inputs = {"wgrad": lora["frozen_wgrad"], "dgrad": lora["first_layer_dgrad"], "adapters": lora["adapters"]}
        extra["flops.lora_frozen_wgrad"] = Line(
            "flops.lora_frozen_wgrad", lora["frozen_wgrad"], "FLOPs",
            "weight-gradient GEMMs the frozen base skips: = the forward's matmuls with weights", {},
            convention="subtracted from every step figure")
        extra["flops.lora_first_layer_dgrad"] = Line(
            "flops.lora_first_layer_dgrad", lora["first_layer_dgrad"], "FLOPs",
            "input-gradient GEMMs of the first layer's q/k/v (and their adapters' A) that nothing needs: the frozen "
            "embedding's output needs no gradient", {}, convention="subtracted from every step figure")
        extra["flops.lora_adapters"] = Line(
            "flops.lora_adapters", lora["adapters"], "FLOPs", "3 × 2·r·(k + n) per targeted matrix per token × tokens",
            {}, convention="added to every step figure (forward + backward of A and B)")
    extra |= {
        "flops.step_full_square": Line("flops.step_full_square", step_square, "FLOPs",
                                       "3 × {forward} + recompute {recompute}" + lora_terms,
                                       {"forward": fwd_full, "recompute": recompute_square, **lora_inputs},
                                       convention="full-square attention, every rebuilt op rerun: flops.step's "
                                       "count with the whole S×S attention square (never below flops.step)"),
        "flops.recompute_full_square": Line("flops.recompute_full_square", recompute_square, "FLOPs",
                                            "flops.recompute with the attention core as a full square", {},
                                            convention=square_note),
    }
    if n_matmul is not None:
        a = spec.attention
        n_ad = None if lora is None else lora["adapter_params_active"]
        for name, causal in (("flops.model", False), ("flops.model_causal", True)):
            per_token = palm_flops_per_token(spec, n_matmul, seq_len, causal, n_ad)
            extra[name] = Line(name, per_token * tokens, "FLOPs",
                               ("(6 × {n} matmul params" if n_ad is None else
                                "(4 × {n} frozen matmul params + 6 × {adapters} adapter params") +
                               " + {attn} × 6 × {layers} × {heads} × ({d_qk} + {d_v}) × {seq}) × {tokens} tokens",
                               {"n": n_matmul, "adapters": n_ad or 0, "attn": 0.5 if causal else 1, "layers": spec.n_layers,
                                "heads": a.n_heads, "d_qk": a.qk_head_dim, "d_v": a.v_dim, "seq": seq_len,
                                "tokens": tokens}, PALM,
                               convention="causal: attention term halved" if causal else
                               "PaLM's: full S×S attention square (what MFU divides)")
    return extra | {
        "flops.forward": Line("flops.forward", fwd, "FLOPs", "Σ layers (B·S·Σ 2kn + attention core) + LM head {head}",
                              {"head": head}, convention=causal_note),
        "flops.forward_noncausal": Line("flops.forward_noncausal", fwd_full, "FLOPs", "as flops.forward, attention "
                                        "core as a full square", {}, convention=square_note),
        "flops.attention": Line("flops.attention", attn, "FLOPs", "{layers} layers × B × S²·H·(d_qk+d_v)",
                                {"layers": spec.n_layers}, convention=causal_note),
        "flops.lm_head": Line("flops.lm_head", head, "FLOPs", "2 × {tokens} tokens × {d} × {vocab}",
                              {"tokens": tokens, "d": spec.hidden_size, "vocab": spec.vocab_size}),
        "flops.recompute": Line("flops.recompute", recompute_causal, "FLOPs",
                                "FLOPs of the tensors the recompute policy rebuilds", {}, convention=causal_note),
        "flops.step": Line("flops.step", step, "FLOPs", "3 × {forward} + recompute {recompute}" + lora_terms,
                           {"forward": fwd, "recompute": recompute_causal, **lora_inputs}, convention=causal_note),
        "flops.backward_noncausal": Line("flops.backward_noncausal", bwd_full, "FLOPs",
                                         "2 × flops.forward_noncausal + {rescore} QKᵀ rebuilt by a fused SDPA "
                                         "backward ({kernel})",
                                         {"rescore": rescore, "kernel": _kernel(spec, attention)},
                                         convention=counted_note),
        "flops.recompute_noncausal": Line("flops.recompute_noncausal", recompute_full, "FLOPs",
                                          "FLOPs of what the recompute policy reruns (full: each layer's forward "
                                          "less its trailing down projection)", {}, convention=counted_note),
        "flops.step_noncausal": Line("flops.step_noncausal", step_full, "FLOPs",
                                     "{forward} forward + {backward} backward + recompute {recompute}",
                                     {"forward": fwd_full, "backward": bwd_full, "recompute": recompute_full},
                                     convention=counted_note),
        "flops.6nd": Line("flops.6nd", nd, "FLOPs", "6 × {n_active} active params × {tokens} tokens",
                          {"n_active": n_active, "tokens": tokens},
                          "cited: Kaplan et al., arXiv 2001.08361 (C ≈ 6ND)"),
        "flops.attention_share": Line("flops.attention_share", attn / fwd, "1", "flops.attention / flops.forward",
                                      {}, convention=causal_note),
        "flops.6nd_ratio": Line("flops.6nd_ratio", (step - recompute_causal) / nd, "1",
                                "3 × flops.forward / flops.6nd (how far 6ND undercounts)", {}),
    }
