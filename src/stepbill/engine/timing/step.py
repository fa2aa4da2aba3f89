"""The per-op compute of one rank's step (the busiest pipeline stage, all its micro-batches), by kernel class:

    t_gemm      = Σ GEMMs by shape on the curve (gemm.py), scaled to the exact executed FLOPs of engine/flops.py
    t_attention = fused attention forward + backward (kernels.py)
    t_memory    = memory-bound bytes / (HBM × efficiency): layers' norms, adds, rotary, activations (backward 2×,
                  the recompute's share of a forward again), the LM head's cross-entropy, autocast's weight casts
    t_optimizer = the optimizer step's bytes (read and write the states and master copy, read the grads, write
                  the weights) / (HBM × efficiency)

Recompute is charged for every policy: its FLOPs (the plan's rebuild) at the forward's blend of GEMM and attention
rates, its bytes as that share of the forward's memory-bound traffic. Under LoRA the frozen weights have no dW GEMM.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import NamedTuple

from stepbill.engine.line import Line
from stepbill.engine.memo import Memo, fields_except
from stepbill.engine.parallel import RankClass
from stepbill.engine.timing.constants import (
    DEFAULT_SMS,
    MEMORY_BOUND_EFFICIENCY,
    MEMORY_BOUND_SOURCE,
    SMS,
    Generation,
    generation,
)
from stepbill.engine.timing.gemm import GemmDevice
from stepbill.engine.timing.kernels import LayerKernels, head_kernels, layer_kernels
from stepbill.spec.hardware import GPU
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import Recipe


class StageCompute(NamedTuple):
    """Seconds of one rank's kernels over the step, by class, and the numbers their lines show
    (`stage_compute_lines`). A NamedTuple: immutable, and made several times per planner candidate (a frozen
    dataclass of this many fields costs 3× more to build)."""

    gemm: float
    attention: float
    memory_bound: float
    optimizer: float
    forward: float  # forward kernels (all micro-batches), the window that hides ZeRO-3's forward gathers
    backward: float  # backward kernels + recompute, the window of gradient reductions
    gemm_efficiency: float  # achieved share of dense peak on the GEMMs (time.gemm_efficiency)
    peak: float  # FLOP/s the GEMMs are timed against
    scale: float  # exact executed FLOPs over the shapes' FLOPs (≈ 1)
    recompute_forwards: float  # the recompute as a number of forwards
    gemm_flops: float  # GEMM FLOPs of the step, recompute included
    attention_forward_flops: float  # fused attention's forward FLOPs of one micro-batch
    micro_batches: int
    memory_bound_layer_bytes: float  # norms / adds / rotary / activations / cross-entropy
    memory_bound_cast_bytes: float  # autocast's weight casts
    memory_bound_bytes_per_s: float  # HBM × MEMORY_BOUND_EFFICIENCY
    optimizer_parts: tuple[float, float, float]  # the rank's optimizer, grads and weights bytes
    generation: tuple[str, Generation, str]  # constants.generation of the GPU
    #: what one more forward of recompute (`recompute_forwards` + 1) adds: to the kernels and the backward window
    #: (gemm_fwd_s + attn_fwd_s + memory_fwd_bytes / bandwidth, one micro-batch's forward unscaled: the recompute's
    #: terms below), and to the attention window (attn_fwd_s). Every other number of the stage reads no recompute.
    rebuild: float
    rebuild_attention: float
    attention_peak: float = 0.0  # FLOP/s the attention kernels are timed against (the bf16 peak under fp8)

    @property
    def kernels(self) -> float:
        """Kernels inside the pipeline (everything but the optimizer step)."""
        return self.gemm + self.attention + self.memory_bound


def _sum(parts: list[tuple[int, LayerKernels]]) -> dict[str, float]:
    keys = LayerKernels.__dataclass_fields__
    return {k: sum(n * getattr(lk, k) for n, lk in parts) for k in keys}


def kernel_layout(par: Parallel) -> Parallel:
    """`par` with the fields one layer's kernels on a rank never read reset (the pipeline, micro-batches, ZeRO,
    offload, and dp: set to ep · etp, the least that keeps the layout valid): the memo key of `stage_kernels`, so a
    planner times a stage's kernels once per (tp, cp, sp, ep, etp) and not once per dp, micro-batch count, ZeRO stage
    or offload. Only what is known unread is reset: a new field of Parallel stays in the key (tests/test_timing.py
    checks the sums on `par` and on this key agree). Memoised on the fields it keeps (no Parallel made per lookup)."""
    return _KERNEL_LAYOUTS.get(_KERNEL_FIELDS(par), _kernel_layout, par)


_KERNEL_FIELDS = fields_except(Parallel, {"dp", "pp", "vpp", "pp_schedule", "pp_layers", "micro_batches", "zero",
                                          "shard_group", "offload_optimizer", "offload_activations"})
_KERNEL_LAYOUTS = Memo(4096)


def _kernel_layout(par: Parallel) -> Parallel:
    return replace(par, dp=par.ep * par.expert_tp, pp=1, vpp=1, pp_schedule="1f1b", pp_layers=None, micro_batches=1,
                   zero=0, shard_group=None, offload_optimizer=False, offload_activations=False)


@lru_cache(maxsize=1 << 17)  # whole spaces: DeepSeek-V3 × 64 holds ~13,000 (layout, stage) pairs, × 2,048 ~73,000
def stage_kernels(spec: ModelSpec, par: Parallel, seq_len: int, micro_batch: int, dev: GemmDevice,
                  params: Generation, act_bytes: float, frozen: bool, stage_kinds: tuple[tuple[str, int], ...],
                  last: bool, attn_peak: float | None = None) -> dict[str, float]:
    """LayerKernels' fields summed over a stage's layers (`stage_kinds`: (kind, count) pairs) and, on the last
    stage, the LM head: one micro-batch on one rank; the attention core at `attn_peak` (None: the GEMMs' peak).
    Memoised (`par` is `kernel_layout(parallel)`): shared, read it, never change it."""
    parts = [(n, layer_kernels(spec, kind, par, seq_len, micro_batch, dev, params.attention_fwd,
                               params.attention_bwd, act_bytes, frozen, attn_peak)) for kind, n in stage_kinds]
    if last:
        parts.append((1, head_kernels(spec, par, seq_len, micro_batch, dev, act_bytes, frozen)))
    return _sum(parts)


@lru_cache(maxsize=256)
def _device(gpu_name: str, peak: float, hbm_bytes_per_s: float) -> tuple[tuple[str, Generation, str], GemmDevice]:
    """The GPU's generation (constants.generation) and the GemmDevice its GEMMs are timed on at `peak` FLOP/s:
    memoised, a planner's stage_compute asks once per stage of every candidate."""
    gen = generation(gpu_name)
    return gen, GemmDevice(peak, hbm_bytes_per_s, SMS.get(gpu_name, DEFAULT_SMS), gen[1].gemm_plateau)


def stage_compute(spec: ModelSpec, recipe: Recipe, worst: RankClass, gpu: GPU, peak: float, stage_kinds: dict[str, int],
                  last: bool, executed: float, recompute: float, held_weight_elements: float) -> StageCompute:
    """Per-op compute of the busiest stage on one rank: `executed` / `recompute` are its exact FLOPs (all
    micro-batches, per rank), `held_weight_elements` the unsharded weights it computes with."""
    par, prec = recipe.parallel, recipe.precision
    (gen, params, gen_source), dev = _device(gpu.name, peak, gpu.hbm_bytes_per_s)
    frozen = recipe.lora is not None
    act = prec.activation
    # fp8 recipes run the Linears' GEMMs at the fp8 peak and keep the attention core in bf16 (engine/fp8.py)
    attn_peak = gpu.peak_flops("bf16") if prec.fp8 is not None else None
    s = stage_kernels(spec, kernel_layout(par), recipe.seq_len, recipe.micro_batch, dev, params, act, frozen,
                      tuple(stage_kinds.items()), last, attn_peak)
    m = par.micro_batches
    fwd_flops = s["gemm_fwd_flops"] + s["attn_fwd_flops"]
    modelled = m * (fwd_flops + s["gemm_bwd_flops"] + s["attn_bwd_flops"])
    scale = (executed - recompute) / modelled if modelled else 0.0  # exact FLOPs over the shapes' FLOPs (≈ 1)
    rc_share = recompute / fwd_flops if fwd_flops else 0.0  # recompute as a number of forwards
    gemm_fwd = scale * m * s["gemm_fwd_s"] + rc_share * s["gemm_fwd_s"]
    attn_fwd = scale * m * s["attn_fwd_s"] + rc_share * s["attn_fwd_s"]
    t_gemm = gemm_fwd + scale * m * s["gemm_bwd_s"]
    t_attn = attn_fwd + scale * m * s["attn_bwd_s"]
    bw = gpu.hbm_bytes_per_s * MEMORY_BOUND_EFFICIENCY
    layer_bytes = m * (s["memory_fwd_bytes"] + s["memory_bwd_bytes"]) + rc_share * s["memory_fwd_bytes"]
    casts = 6.0 * held_weight_elements * m if prec.weights == 4 and prec.compute in ("bf16", "fp16") else 0.0
    t_mem = (layer_bytes + casts) / bw
    mem = worst.memory
    opt_bytes = 2 * mem["optimizer"] + mem["grads"] + mem["weights"]
    t_opt = opt_bytes / bw
    gemm_flops = scale * m * (s["gemm_fwd_flops"] + s["gemm_bwd_flops"]) + rc_share * s["gemm_fwd_flops"]
    gemm_eff = gemm_flops / (t_gemm * peak) if t_gemm else 0.0
    fwd_s = m * scale * (s["gemm_fwd_s"] + s["attn_fwd_s"]) + m * s["memory_fwd_bytes"] / bw
    bwd_s = t_gemm + t_attn + t_mem - fwd_s
    return StageCompute(t_gemm, t_attn, t_mem, t_opt, fwd_s, bwd_s, gemm_eff, peak, scale, rc_share, gemm_flops,
                        s["attn_fwd_flops"], m, layer_bytes, casts, bw,
                        (mem["optimizer"], mem["grads"], mem["weights"]), (gen, params, gen_source),
                        s["gemm_fwd_s"] + s["attn_fwd_s"] + s["memory_fwd_bytes"] / bw, s["attn_fwd_s"],
                        peak if attn_peak is None else attn_peak)


def stage_compute_lines(sc: StageCompute, gpu: GPU) -> list[Line]:
    """The lines of `sc` (time.gemm, time.gemm_efficiency, time.attention, time.memory_bound, time.optimizer_step)
    on `gpu`, made from its numbers."""
    gen, params, gen_source = sc.generation
    peak, bw = sc.peak, sc.memory_bound_bytes_per_s
    optimizer, grads, weights = sc.optimizer_parts
    L = Line
    gen_note = f"{gen} ({gpu.display}): {gen_source}"
    return [
        L("time.gemm", sc.gemm, "s",
          "GEMMs by shape (M × N × K per op, forward, dX, dW) at plateau {plateau} × tile/wave × K-fill of {peak} "
          "FLOP/s, scaled to the executed FLOPs (× {scale}); recompute {rc} forwards",
          {"plateau": params.gemm_plateau, "peak": peak, "scale": sc.scale, "rc": sc.recompute_forwards}, gen_note,
          "each GEMM max(FLOPs / rate, bytes / HBM); cuBLAS tiles 256×128 / 128×256 / 128×128 (NVIDIA Matrix "
          "Multiplication Background guide §2.3, §3)"),
        L("time.gemm_efficiency", sc.gemm_efficiency, "1", "{flops} GEMM FLOPs / ({t} s × {peak} FLOP/s)",
          {"flops": sc.gemm_flops, "t": sc.gemm, "peak": peak}, convention="achieved share of dense peak on the GEMMs"),
        L("time.attention", sc.attention, "s",
          "fused attention: forward {fwd} FLOPs at {ef} of {peak} FLOP/s, backward 2.5 × forward at {eb} (× {m} "
          "micro-batches, recompute included)", {"fwd": sc.attention_forward_flops, "ef": params.attention_fwd,
                                                 "peak": sc.attention_peak, "eb": params.attention_bwd,
                                                 "m": sc.micro_batches}, gen_note,
          "FlashAttention's FLOP count (arXiv 2307.08691 §4), causal"
          + ("; at the bf16 peak under fp8 (the attention core stays bf16: engine/fp8.py)"
             if sc.attention_peak != peak else "")),
        L("time.memory_bound", sc.memory_bound, "s",
          "({layers} B norms / adds / rotary / activations / cross-entropy + {casts} B autocast casts) / ({bw} B/s)",
          {"layers": sc.memory_bound_layer_bytes, "casts": sc.memory_bound_cast_bytes, "bw": bw}, MEMORY_BOUND_SOURCE,
          "backward 2× the forward's bytes; recompute a share of a forward"),
        L("time.optimizer_step", sc.optimizer, "s", "(2 × optimizer {o} B + grads {g} B + weights {w} B) / ({bw} B/s)",
          {"o": optimizer, "g": grads, "w": weights, "bw": bw}, MEMORY_BOUND_SOURCE,
          "once per step, after the last backward"),
    ]
