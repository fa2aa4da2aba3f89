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


def window_cut_flops(spec: ModelSpec, seq_len: Any, window: int) -> Any:
    """FLOPs of one layer's causal attention core (one sequence, causal-halved convention) that a sliding window
    removes: the triangle of keys more than `window` positions back, (S − w)²/2 query-key pairs × 2·H·(d_qk + d_v)
    (0 while S ≤ w). Mistral's window (transformers' sliding_window_overlay: kv > q − w) keeps w keys per query,
    so the band is S²/2 − (S − w)²/2 pairs in the halved convention of `attention_core_flops`."""
    a = spec.attention
    over = seq_len - window
    over = over * (over > 0)  # max(S − w, 0), for numpy arrays too
    return over * over * a.n_heads * (a.qk_head_dim + a.v_dim)


def windowed_attention_flops(spec: ModelSpec, seq_len: Any, micro_batch: Any = 1) -> Any:
    """Model FLOPs of the whole forward's attention cores with the model's sliding windows: each query's attended
    keys only (causal, and within the window on the sliding layers) — what the model needs, and what a kernel
    told the window executes (flash-attn's `window_size` skips the blocks outside the band, to block granularity)."""
    a = spec.attention
    total = attention_flops(spec, seq_len, micro_batch, True)
    if a.sliding_window is None:
        return total
    return total - len(a.sliding_layers) * micro_batch * window_cut_flops(spec, seq_len, a.sliding_window)


def masked_layers(spec: ModelSpec, seq_len: int) -> tuple[int, ...]:
    """Indices of the layers whose SDPA gets an explicit sliding-window mask at `seq_len`: transformers 5.24 skips
    the mask while S < window (masking_utils._ignore_causal_mask_sdpa) and the families with no SDPA path build
    eager attention's own mask instead (engine/activations/eager/masks.py has the measured facts)."""
    a = spec.attention
    if a.sliding_window is None or seq_len < a.sliding_window or spec.family in NO_SDPA_FAMILIES:
        return ()
    return tuple(a.sliding_layers)


def executed_attention_flops(spec: ModelSpec, seq_len: Any, micro_batch: Any, n_masked: int,
                             eager_attention: bool = False) -> Any:
    """Forward attention-core FLOPs the kernels execute: SDPA with an explicit mask (the `n_masked` sliding layers
    at seq ≥ window) computes the full S×S square — a mask never makes it skip a block — while SDPA with
    `is_causal` (every other layer) skips the upper triangle (causal-halved); eager attention (`eager_attention`:
    matmul, softmax, matmul) computes the full square on every layer."""
    full = attention_core_flops(spec, seq_len, False)
    if eager_attention:
        return spec.n_layers * micro_batch * full
    half = attention_core_flops(spec, seq_len, True)
    return micro_batch * (n_masked * full + (spec.n_layers - n_masked) * half)


# Families whose transformers class has no SDPA path (5.24: `_supports_sdpa = False`, soft-capping / sinks): they
# run their eager attention whatever is asked (measure/build.effective_attention), so no fused backward.
NO_SDPA_FAMILIES = ("gemma2", "gpt_oss")


def attention_backward_rescore(spec: ModelSpec, attention: str = "sdpa") -> bool:
    """Whether the attention backward rebuilds QKᵀ (a fused SDPA kernel) rather than reading saved
    probabilities (the math path: attention "eager", or SDPA on CPU with unequal q/k and v head widths, as
    DeepSeek's MLA has; and the families with no SDPA path at all). "sdpa-efficient" is CUDA's memory-efficient
    kernel, which takes those unequal widths (engine/bill._flops_attention) and rebuilds QKᵀ as flash does
    (torch/utils/flop_counter.py counts `_efficient_attention_backward` with `sdpa_backward_flop_count`, step 1:
    "We recompute the scores matrix")."""
    if spec.family in NO_SDPA_FAMILIES:
        return False
    a = spec.attention
    return attention == "sdpa-efficient" or (attention == "sdpa" and a.qk_head_dim == a.v_dim)


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
    shared experts or with a shared-expert gate rerun everything. Under residual dropout (GPT-2's resid_pdrop,
    `hidden_dropout` > 0) the down projection's output feeds a dropout whose mask the backward needs: the rebuild
    reruns the projection to draw it again, and nothing is skipped (gpt2, seq 512: FlopCounterMode's count under
    full recompute was 5.7 % above the bill's before this)."""
    if spec.norm_placement != "pre":  # Gemma's sandwich / OLMo2's post norm reads (and saves) the down output
        return []
    if spec.hidden_dropout > 0:  # the dropout after the MLP saves a mask: its input, the down output, is rebuilt
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


def lora_adapter_flops_per_token(inv: ParamInventory, lora: LoRA, layer_kind: str | None = None) -> int:
    """Forward FLOPs of the LoRA adapters one token goes through: A [k → r] then B [r → n] on every targeted
    (n, k) matrix, 2·r·(k + n) per pass, times the copies a token passes (layers; top_k routed experts). Their
    backward is 2× that (both A and B train). `layer_kind`: only that kind's layers."""
    return sum(2 * lora.rank * (t.shape[0] + t.shape[1]) * t.active_copies for t in inv.tensors
               if (layer_kind is None or t.layer_kind == layer_kind) and len(t.shape) == 2
               and lora.targets_matrix(t.name, t.component))


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


def lora_recompute_flops_per_token(inv: ParamInventory, lora: LoRA, layer_kind: str, n_layers: int,
                                   skip_trailing: bool) -> float:
    """Adapter FLOPs a checkpointed layer's rebuild reruns, per layer per token: every adapter's forward (A and B);
    with `skip_trailing` (transformers' non-reentrant checkpoint, as FlopCounterMode counts it) the rebuild stops
    once the layer's last saved tensor is packed, before the op that saves it runs: without an adapter on down_proj
    that is the frozen down projection (not rerun, as under full fine-tuning: layer_recompute_flops), with one it is
    B's matmul. Measured with FlopCounterMode on a PEFT-wrapped tiny Llama: q,v and all-linear exact."""
    total = lora_adapter_flops_per_token(inv, lora, layer_kind)
    if skip_trailing:
        for t in inv.tensors:
            if (t.layer_kind == layer_kind and len(t.shape) == 2 and t.name.endswith("down_proj.weight")
                    and t.component != "experts" and lora.targets_matrix(t.name, t.component)):
                out_dim, in_dim = t.shape
                # B's pack comes after the base down projection and A ran (PEFT: base first, then B(A(x))): those
                # two are rerun (the base one beyond layer_recompute_flops' count), only B is not
                total += 2 * (out_dim * in_dim - lora.rank * out_dim) * t.active_copies
    return total / max(n_layers, 1)


def lora_step_terms(spec: ModelSpec, inv: ParamInventory, lora: LoRA, seq_len: int, micro_batch: int,
                    input_requires_grad: bool = False) -> dict[str, int]:
    """What LoRA changes in one micro-batch's step FLOPs: the frozen base skips every weight-gradient GEMM (each
    costs what its forward costs: `frozen_wgrad` = the forward's matmuls with weights, LM head included —
    everything but the attention core), the first layer skips the input gradients nothing needs
    (`first_layer_dgrad`), and the adapters add 3 × their forward (`adapters`). Step ≈ 2/3 of full fine-tuning
    when the attention core is small. `input_requires_grad`: transformers' gradient checkpointing (and PEFT with it)
    calls enable_input_require_grads, so the embedding output requires grad and the first layer computes every
    input gradient (first_layer_dgrad 0; measured with FlopCounterMode on a PEFT-wrapped tiny Llama)."""
    tokens = seq_len * micro_batch
    linear = forward_flops(spec, seq_len, micro_batch, True) - attention_flops(spec, seq_len, micro_batch, True)
    adapter_fwd = lora_adapter_flops_per_token(inv, lora)
    return {"frozen_wgrad": int(linear), "adapters": 3 * tokens * adapter_fwd,
            "first_layer_dgrad": 0 if input_requires_grad else tokens * lora_first_layer_dgrad_per_token(spec, lora),
            "adapter_params_active": adapter_fwd // 2}


def lora_adapter_flops_per_layer_token(inv: ParamInventory, lora: LoRA, layer_kind: str, n_layers: int) -> float:
    """Forward FLOPs of the adapters of one layer of `layer_kind`, per token (lora_adapter_flops_per_token's share)."""
    return lora_adapter_flops_per_token(inv, lora, layer_kind) / max(n_layers, 1)


def stage_step_flops(spec: ModelSpec, inv: ParamInventory, seq_len: int, micro_batch: int, kinds: dict[str, int],
                     first: bool, last: bool, recompute_per_token: dict[str, float],
                     lora: LoRA | None = None, input_requires_grad: bool = False) -> float:
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
    if first and lora is not None and not input_requires_grad:  # checkpointing: see lora_step_terms
        total -= tokens * lora_first_layer_dgrad_per_token(spec, lora)
    return total


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


