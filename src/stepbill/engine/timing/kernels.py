"""One layer's kernels on one rank, timed by class: its GEMMs by shape (gemm.py), the fused attention kernel by
FLOPs, and the memory-bound ops (norms, residual adds, rotary, activation functions, MoE permutes) by HBM bytes.

Shapes on a rank (Megatron's splits): T = seq · micro-batch / cp tokens reach every GEMM (sequence parallelism
all-gathers the sequence before a column-parallel GEMM); column-parallel matrices (q, k, v, gate / up) split N by
tp, row-parallel ones (o, down) split K; routers and MLA's low-rank down projections stay whole; routed experts
split by etp and receive T · top_k · ep · etp / (E · tp) tokens each (balanced routing; the tp ranks of a replica
share its tokens' expert work), E / ep of them per rank. The backward
of every GEMM is two GEMMs of the same FLOPs: dX (M × K × N) and dW (K × N × M); a frozen weight (LoRA) has no dW.

Attention: FlashAttention's own FLOP count (Dao 2023, arXiv 2307.08691 §4: forward 4·S²·H·d full square, halved
causal; backward 2.5× the forward, its recomputed QKᵀ included), each pass at a fitted share of dense peak.

Memory-bound bytes per token per layer, forward (a = activation bytes; /tp where tensor parallelism splits the
tensor, h-wide tensors only under sequence parallelism): 2 norms (read + write h), 2 residual adds (2 reads + 1
write of h), rotary on q and k (read + write), the activation function (SwiGLU: read 2f, write f; GELU: read f,
write f), MoE dispatch and combine (top_k copies of h, gathered and scattered). The backward of each reads its
saved input and the incoming gradient and writes one gradient: 2× the forward's bytes (an analytic rule).
Bias adds are fused into GEMM epilogues (0 bytes). Dropout, softmax and the attention's own traffic are not
counted here (attention is FLOP-bound in fused kernels).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from stepbill.engine import flops as fl
from stepbill.engine.timing.gemm import GemmDevice, gemm_seconds
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import Parallel

#: FlashAttention counts its backward as 2.5× its forward (arXiv 2307.08691 §4.1: "the backward pass … 2.5×").
ATTENTION_BWD_FACTOR = 2.5
#: Each memory-bound op's backward moves about twice its forward's bytes (reads input and gradient, writes one).
MEMORY_BWD_FACTOR = 2.0


@dataclass(frozen=True)
class LayerKernels:
    """One layer (or the LM head) on one rank for one micro-batch: FLOPs and seconds of its GEMMs and attention,
    forward and backward, and the HBM bytes of its memory-bound ops."""

    gemm_fwd_flops: float
    gemm_fwd_s: float
    gemm_bwd_flops: float
    gemm_bwd_s: float
    attn_fwd_flops: float
    attn_fwd_s: float
    attn_bwd_flops: float
    attn_bwd_s: float
    memory_fwd_bytes: float
    memory_bwd_bytes: float


def _split(name: str) -> str:
    """How tensor parallelism cuts a matrix: "row" (K), "column" (N) or "none"."""
    if name in ("moe.router", "moe.shared_expert_gate") or name.endswith("_a_proj"):
        return "none"
    if name.endswith(("o_proj", ".down")):
        return "row"
    return "column"


def gemm_shapes(spec: ModelSpec, kind: str, par: Parallel, tokens: int) -> list[tuple[int, int, int, int]]:
    """(M, N, K, count) of the forward GEMMs of one layer of `kind` on one rank, `tokens` = T."""
    out = []
    for op in fl.layer_linear_ops(spec, kind):
        routed = op.name.startswith("moe.experts")
        div = par.expert_tp if routed else par.tp
        k, n = op.k, op.n
        split = _split(op.name)
        if split == "row":
            k = max(1, k // div)
        elif split == "column":
            n = max(1, n // div)
        if routed:
            assert spec.moe is not None
            experts = spec.moe.n_routed_experts
            # the tp ranks of a replica share its tokens' expert work (executed FLOPs are split by tp, as here)
            m = max(1, round(tokens * op.copies * par.ep * par.expert_tp / (experts * par.tp)))
            out.append((m, n, k, max(1, experts // par.ep)))
        else:
            out.append((tokens, n, k, 1))
    return out


def _gemm_pass(shapes: list[tuple[int, int, int, int]], dev: GemmDevice, frozen: bool,
               value_bytes: float = 2.0) -> tuple[float, float, float, float]:
    f_fwd = t_fwd = f_bwd = t_bwd = 0.0
    for m, n, k, count in shapes:
        flops = 2.0 * m * n * k * count
        f_fwd += flops
        t_fwd += count * gemm_seconds(m, n, k, dev, value_bytes)
        f_bwd += flops * (1 if frozen else 2)
        t_bwd += count * (gemm_seconds(m, k, n, dev, value_bytes)
                          + (0.0 if frozen else gemm_seconds(k, n, m, dev, value_bytes)))
    return f_fwd, t_fwd, f_bwd, t_bwd


def memory_bound_bytes_per_token(spec: ModelSpec, kind: str, par: Parallel, act_bytes: float) -> float:
    """Forward HBM bytes of one layer's memory-bound ops per token on one rank (see the module docstring)."""
    a, h = act_bytes, spec.hidden_size
    h_div = par.tp if par.sp else 1
    total = (2 * 2 * h + 2 * 3 * h) * a / h_div
    att = spec.attention
    if spec.positions == "rotary":
        total += 2 * (att.n_heads + att.kv_heads) * att.qk_head_dim * spec.rotary_fraction * a / par.tp
    if kind == "moe" and spec.moe is not None:
        moe = spec.moe
        total += moe.top_k * 3 * moe.expert_intermediate_size * a / par.expert_tp
        total += 3 * moe.shared_intermediate_size * a / par.tp
        total += 4 * moe.top_k * h * a / h_div
    else:
        f = spec.ffn.intermediate_size
        total += (3 if spec.ffn.kind == "swiglu" else 2) * f * a / par.tp
    return total


@lru_cache(maxsize=1 << 14)  # a whole DeepSeek-V3 × 2,048 search reads ~11,000
def layer_kernels(spec: ModelSpec, kind: str, par: Parallel, seq_len: int, micro_batch: int, dev: GemmDevice,
                  attn_fwd_eff: float, attn_bwd_eff: float, act_bytes: float, frozen: bool,
                  attn_peak: float | None = None) -> LayerKernels:
    """One layer of `kind` on one rank, one micro-batch; its attention core at `attn_peak` FLOP/s (default the
    GEMMs' peak: fp8 recipes keep the attention core in bf16, engine/fp8.py). Memoised (stages with other counts of
    the same layer kinds share it: step.stage_kernels' keys differ, its layers do not)."""
    tokens = max(1, seq_len * micro_batch // par.cp)
    f_fwd, t_fwd, f_bwd, t_bwd = _gemm_pass(gemm_shapes(spec, kind, par, tokens), dev, frozen, act_bytes)
    attn = float(fl.attention_core_flops(spec, seq_len, True)) * micro_batch / (par.tp * par.cp)
    mem = memory_bound_bytes_per_token(spec, kind, par, act_bytes) * tokens
    peak = dev.peak_flops if attn_peak is None else attn_peak
    return LayerKernels(f_fwd, t_fwd, f_bwd, t_bwd,
                        attn, attn / (peak * attn_fwd_eff),
                        2 * attn, ATTENTION_BWD_FACTOR * attn / (peak * attn_bwd_eff),
                        mem, MEMORY_BWD_FACTOR * mem)


def head_kernels(spec: ModelSpec, par: Parallel, seq_len: int, micro_batch: int, dev: GemmDevice,
                 act_bytes: float, frozen: bool) -> LayerKernels:
    """The LM head on the last stage: its GEMM (vocabulary split by tp) and the cross-entropy over the logits
    (read the logits, write fp32 probabilities forward; read them, write the logits' gradient backward)."""
    tokens = max(1, seq_len * micro_batch // par.cp)
    vocab = max(1, spec.vocab_size // par.tp)
    f_fwd, t_fwd, f_bwd, t_bwd = _gemm_pass([(tokens, vocab, spec.hidden_size, 1)], dev, frozen, act_bytes)
    ce = tokens * vocab * (act_bytes + 4)
    return LayerKernels(f_fwd, t_fwd, f_bwd, t_bwd, 0.0, 0.0, 0.0, 0.0, ce, ce)
