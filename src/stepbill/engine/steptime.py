"""Step time on one rank: a roofline of compute and HBM traffic, the pipeline bubble, communication and offload
traffic, and the MFU / HFU that result. Every result is a Line with its derivation; seconds and FLOP/s are SI.
The numbers are computed once, by engine/timing/step_terms.py (`step_terms`, what the planner's floors read); this
module makes their lines.

Default: the per-op model of engine/timing (GEMMs by shape on an efficiency curve, fused attention, memory-bound
ops by HBM bytes, the optimizer step, alpha-beta collectives with an overlap rule each):
        t_pipe    = (kernels + TP/EP/PP collectives) / (1 − bubble) + optimizer step
        t_step    = t_pipe + ZeRO weight all-gather + exposed offload + max(network not hidden, PCIe − kernels)
With `--efficiency` (the explicit override) the single roofline below is used instead:

Model:  t_compute = executed FLOPs_rank / (peak(compute dtype) × efficiency)
        executed  = the busiest pipeline stage's FLOPs (forward + backward + the recompute policy's rebuild, causal
                    attention as fused kernels run it, the LM head on the last stage; LoRA: no weight-gradient
                    GEMM for frozen weights) × micro-batches / (tp · cp)
        t_rank    = max(t_compute, HBM bytes_rank / HBM bandwidth)                           (roofline)
        t_pipe    = t_rank / (1 − bubble),  bubble = (p − 1)/(v·m + p − 1)                   (GPipe / 1F1B / interleaved)
        t_step    = t_pipe + exposed (collectives that cannot hide, CPU optimizer, weights back up)
                    + max(0, max(hideable network, hideable PCIe) − t_rank)
        MFU       = model FLOPs_rank / (t_step × peak), model FLOPs = PaLM appendix B (6N + 12·L·H·Q·T per token,
                    full attention square; `time.mfu_causal` with the attention term halved)
        HFU       = (model FLOPs + recompute FLOPs, both full square)_rank / (t_step × peak)   (PaLM appendix B)

Overlap rule: the links (NVLink / InfiniBand / Ethernet for collectives, PCIe for offload) run beside compute and
beside each other; a link's traffic marked hideable costs only what exceeds the rank's compute time. Offload
(ZeRO-Offload, arXiv 2101.06840 §4): gradients stream down to the host during the backward (hideable); the CPU
optimizer step and the updated weights' copy back up sit between this step's backward and the next forward
(exposed: DeepSpeed's one-step delayed update, which would hide them, is off by default). Activation offload
copies each kept tensor down in the forward and back up in the backward (hideable).
"""

from __future__ import annotations

from dataclasses import dataclass

from stepbill.engine.line import Line, cited
from stepbill.engine.parallel import RankClass
from stepbill.engine.parallel.collectives import Collective
from stepbill.engine.params import ParamInventory
from stepbill.engine.recompute import RecomputePlan
from stepbill.engine.timing.constants import NCCL_EFFICIENCY_SOURCE, NCCL_SOURCE, PCIE_COPY_SOURCE
from stepbill.engine.timing.step import stage_compute_lines
from stepbill.engine.timing.step_terms import (
    CPU_ADAM_PARAMS_PER_S,
    CPU_ADAM_SOURCE,
    StepTerms,
    pcie_copy_bytes_per_s,
    step_terms,
)
from stepbill.engine.timing.step_terms import slowest_stage as slowest_stage  # re-exported: its home was here
from stepbill.spec.hardware import GPU
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import Recipe

DEFAULT_EFFICIENCY = None  # None: the per-op model (engine/timing); a float: the --efficiency override

#: Why fp32 recipes are timed at the FP32 (CUDA-core) peak: PyTorch keeps TF32 off for matmuls by default since
#: 1.12 (torch.backends.cuda.matmul.allow_tf32 = False), so an fp32 model runs its GEMMs in true fp32.
COMPUTE_DTYPE_NOTE = {
    "fp32": "fp32 recipe: FP32 CUDA-core peak (PyTorch's default keeps TF32 off for matmuls since 1.12)",
    "tf32": "TF32 tensor-core peak",
    "bf16": "dense bf16 tensor-core peak",
    "fp16": "dense fp16 tensor-core peak",
    "fp8": "dense fp8 tensor-core peak",
}


@dataclass(frozen=True)
class StepTime:
    """Lines of the step-time estimate, by name (time.*)."""

    lines: dict[str, Line]

    def __getitem__(self, name: str) -> Line:
        return self.lines[name]


def offload_lines(terms: StepTerms, recipe: Recipe, gpu: GPU) -> list[Line]:
    """The lines of offload's PCIe traffic and CPU time, per rank per step (none when nothing is offloaded)."""
    par, p, off = recipe.parallel, recipe.precision, terms.offload
    pcie = pcie_copy_bytes_per_s(gpu)  # PCIe line rate × PCIE_COPY_EFFICIENCY
    lines: list[Line] = []
    if par.offload_optimizer:
        lines += [
            Line("time.offload_grads_down", off.grads_down, "s", "{params} params × {bytes} B grads / {bw} B/s PCIe copies",
                 {"params": off.owned, "bytes": p.grads, "bw": pcie}, cited(PCIE_COPY_SOURCE),
                 "hideable: streamed during the backward"),
            Line("time.offload_cpu_optimizer", off.cpu_optimizer, "s",
                 "{params} params × {ranks} ranks sharing the host / {rate} params/s",
                 {"params": off.owned, "ranks": off.ranks_per_host, "rate": CPU_ADAM_PARAMS_PER_S}, CPU_ADAM_SOURCE,
                 "exposed: between the backward and the next forward"),
            Line("time.offload_weights_up", off.weights_up, "s", "{params} params × {bytes} B weights / {bw} B/s PCIe copies",
                 {"params": off.owned, "bytes": p.weights, "bw": pcie}, cited(PCIE_COPY_SOURCE),
                 "exposed: the next forward needs them"),
        ]
    if par.offload_activations:
        lines.append(Line("time.offload_activations", off.activations, "s",
                          "2 × {kept} B kept per micro-batch × {m} micro-batches / {bw} B/s PCIe copies",
                          {"kept": off.kept, "m": par.micro_batches, "bw": pcie}, cited(PCIE_COPY_SOURCE),
                          convention="hideable: down in the forward, back up in the backward; kept bytes of the "
                          + (f"{off.kept_convention} convention" if off.kept_convention else "bill's convention")
                          + (" (what autograd saves, as an offload hook moves it)"
                             if off.kept_convention == "eager" else "")))
    return lines


def step_time(spec: ModelSpec, inv: ParamInventory, recipe: Recipe, worst: RankClass, collectives: list[Collective],
              gpu: GPU, flops: dict[str, Line], efficiency: float | None = None,
              dtype: str | None = None, plan: RecomputePlan | None = None,
              offloaded: tuple[RankClass, str] | None = None) -> StepTime:
    """Step time, bubble, MFU and HFU on `gpu`: compute is the slowest pipeline stage's (its FLOPs over tp·cp
    ranks), timed per op (engine/timing: GEMMs by shape, attention, memory-bound ops, alpha-beta collectives with
    their overlap rules) — or, when `efficiency` is given, as executed FLOPs / (peak × efficiency) with an HBM
    roofline (the explicit override). `flops` holds the bill's one-micro-batch FLOPs lines (engine/flops.py:
    flops.step, flops.model, ...); `plan` the recompute plan (its per-layer rebuild); `dtype` defaults to the
    recipe's compute dtype; `offloaded` the rank class (and its convention) whose kept activations activation offload
    moves (None: `worst`). The numbers are engine/timing/step_terms.step_terms'; this makes their lines."""
    terms = step_terms(spec, inv, recipe, worst, collectives, gpu, flops, efficiency, dtype, plan, offloaded)
    return step_time_lines(terms, recipe, gpu, flops)


def step_time_lines(t: StepTerms, recipe: Recipe, gpu: GPU, flops: dict[str, Line]) -> StepTime:
    """The lines of step_time, made from its numbers `t` (step_terms of the same recipe, GPU and FLOPs lines)."""
    par, dtype, peak = recipe.parallel, t.dtype, t.peak
    off = t.offload
    L = Line
    if t.efficiency is not None:
        model_lines = [
            L("time.compute", t.t_compute, "s", "{flops} FLOPs / ({peak} FLOP/s × {eff})",
              {"flops": t.executed, "peak": peak, "eff": t.efficiency},
              convention=f"--efficiency override; {COMPUTE_DTYPE_NOTE.get(dtype, dtype)} of {gpu.display}"),
            *t.precision_lines,
            L("time.roofline", t.t_rank, "s", "max(compute {c} s, memory {m} s) + precision {p} s",
              {"c": t.t_compute, "m": t.t_memory, "p": t.t_precision}),
            L("time.pipeline", t.t_pipe, "s", "{t} s / (1 − {b})", {"t": t.t_rank, "b": t.bubble}),
            L("time.comm_exposed", t.comm_exposed, "s", "sum of collectives that cannot hide (overlap no / partly)", {}),
            L("time.comm_hideable", t.comm_hideable, "s", "sum of collectives that overlap compute", {}),
        ]
        spill_line = L("time.comm_spill", t.spill, "s", "max(0, max(network {h} s, PCIe {o} s) − compute {t} s)",
                       {"h": t.comm_hideable, "o": off.hideable, "t": t.t_rank})
        step_line = L("time.step", t.t_step, "s",
                      "pipeline {p} s + exposed comm {e} s + exposed offload {o} s + spill {s} s",
                      {"p": t.t_pipe, "e": t.comm_exposed, "o": off.exposed, "s": t.spill})
    else:
        model_lines, spill_line, step_line = _per_op_lines(t, gpu)
    rank_model, model_causal, recompute_square, t_step = t.rank_model_flops, t.model_flops_causal, t.recompute_square, \
        t.t_step
    lines = [
        L("time.model_flops", t.model_flops, "FLOPs", "flops.model {mb} FLOPs × {m} micro-batches × {dp} dp",
          {"mb": flops["flops.model"].value, "m": par.micro_batches, "dp": par.dp},
          flops["flops.model"].provenance, "PaLM appendix B: full attention square"),
        L("time.model_flops_causal", model_causal, "FLOPs", "flops.model_causal × {m} micro-batches × {dp} dp",
          {"m": par.micro_batches, "dp": par.dp}, convention="attention term halved (causal)"),
        L("time.rank_flops", t.executed, "FLOPs",
          "stage {stage} (the busiest): {stage_mb} FLOPs per micro-batch × {m} micro-batches / (tp {tp} × cp {cp})",
          {"stage": t.stage, "stage_mb": t.stage_flops, "m": par.micro_batches, "tp": par.tp, "cp": par.cp},
          convention="executed: causal attention, the recompute policy's rebuild included; its layers and, on the "
          "last stage, the LM head"),
        L("time.recompute_flops", t.recompute, "FLOPs", "stage {stage}'s recompute × {m} micro-batches / {split}",
          {"stage": t.stage, "m": par.micro_batches, "split": t.split}, convention="causal; per rank"),
        L("time.peak", peak, "FLOP/s", "{dtype} peak of {gpu}", {"dtype": dtype, "gpu": gpu.display},
          f"catalog: {gpu.peaks_source}", COMPUTE_DTYPE_NOTE.get(dtype, dtype)),
        L("time.hbm_traffic", t.hbm_bytes, "bytes",
          "weights {weights} + activations {activations} + optimizer {optimizer}", t.hbm_parts),
        L("time.memory", t.t_memory, "s", "{bytes} B / {bw} B/s", {"bytes": t.hbm_bytes, "bw": gpu.hbm_bytes_per_s}),
        L("time.bubble", t.bubble, "1", "(p − 1)/(v·m + p − 1), p={p} v={v} m={m}",
          {"p": par.pp, "v": par.vpp, "m": par.micro_batches}, "cited: GPipe, arXiv 1811.06965; seed §07"),
        *model_lines,
        *offload_lines(t, recipe, gpu),
        L("time.offload_exposed", off.exposed, "s", "CPU optimizer + weights up (offload)", {}),
        L("time.offload_hideable", off.hideable, "s", "grads down + activations down and up (offload)", {}),
        spill_line,
        step_line,
        L("time.mfu", t.mfu, "1", "{flops} model FLOPs per GPU / ({t} s × {peak} FLOP/s)",
          {"flops": rank_model, "t": t_step, "peak": peak}, flops["flops.model"].provenance,
          "PaLM appendix B: model FLOPs with the full attention square"),
        L("time.mfu_causal", t.mfu_causal, "1",
          "time.model_flops_causal / {world} / ({t} s × {peak} FLOP/s)", {"world": par.world, "t": t_step, "peak": peak},
          convention="attention term halved (causal)"),
        L("time.hfu", t.hfu, "1",
          "({flops} + recompute {r}) FLOPs per GPU / ({t} s × {peak} FLOP/s)",
          {"flops": rank_model, "r": recompute_square, "t": t_step, "peak": peak}, flops["flops.model"].provenance,
          "PaLM appendix B: hardware FLOPs = model FLOPs + rematerialisation, full attention square"),
        L("time.tokens_per_s", t.tokens_per_s, "tokens/s", "{tokens} tokens / {t} s",
          {"tokens": recipe.tokens_per_step, "t": t_step}),
        L("time.tokens_per_s_per_gpu", t.tokens_per_s_per_gpu, "tokens/s",
          "{tokens} tokens / {t} s / {world} GPUs", {"tokens": recipe.tokens_per_step, "t": t_step, "world": par.world}),
    ]
    return StepTime({x.name: x for x in lines})


def _per_op_lines(t: StepTerms, gpu: GPU) -> tuple[list[Line], Line, Line]:
    """The per-op model's lines (engine/timing): (its lines, the spill line, the step line). A quantised or fp8
    recipe's own kernels (engine/precision_time.py) run serially with the rank's kernels; fp8's bf16 share is
    charged at the GEMMs' achieved efficiency."""
    sc, ct, prec_lines = t.stage_compute, t.comm, t.precision_lines
    assert sc is not None and ct is not None  # the per-op model's terms
    kernels, off = t.t_rank, t.offload
    L = Line
    note = f"{COMPUTE_DTYPE_NOTE.get(t.dtype, t.dtype)} of {gpu.display}"
    lines = [
        *stage_compute_lines(sc, gpu),
        *prec_lines,
        L("time.compute", t.t_compute, "s", "GEMMs {g} s + attention {a} s + memory-bound {m} s + "
          + ("precision {p} s + " if prec_lines else "") + "optimizer {o} s",
          {"g": sc.gemm, "a": sc.attention, "m": sc.memory_bound, "o": sc.optimizer,
           **({"p": t.t_precision} if prec_lines else {})},
          convention=f"per-op model (engine/timing); {note}"),
        L("time.roofline", kernels, "s", "per op: every kernel is its own roofline; GEMMs + attention + "
          "memory-bound" + (" + precision" if prec_lines else "") + " = {t} s", {"t": kernels}),
        L("time.comm_critical", t.comm_critical, "s",
          "TP {tp} s + EP {ep} s + PP {pp} s, every micro-batch (alpha-beta: NCCL latency + bytes / (link × "
          "efficiency))", {k: ct.critical_by_axis.get(k, 0.0) for k in ("tp", "ep", "pp")}, NCCL_SOURCE,
          f"on the critical path; {NCCL_EFFICIENCY_SOURCE}"),
        L("time.pipeline", t.t_pipe, "s", "(kernels {k} s + critical comm {c} s) / (1 − {b}) + optimizer {o} s",
          {"k": kernels, "c": ct.critical_per_step, "b": t.bubble, "o": sc.optimizer}),
        L("time.comm_exposed", t.comm_exposed, "s",
          "critical {c} s (inside the pipeline) + weight all-gather after the optimizer {w} s",
          {"c": ct.critical_per_step, "w": ct.exposed_once}, NCCL_SOURCE),
        L("time.comm_hideable", t.comm_hideable, "s",
          "DP / ZeRO / CP collectives that overlap compute (bucketed, prefetched)", {}, NCCL_SOURCE),
    ]
    spill_line = L("time.comm_spill", t.spill, "s",
                   "max(network not hidden {h} s (last bucket, first gather, excess over its window), PCIe {o} s − "
                   "kernels {t} s)", {"h": ct.hidden_spill, "o": off.hideable, "t": kernels})
    step_line = L("time.step", t.t_step, "s",
                  "pipeline {p} s + weight all-gather {e} s + exposed offload {o} s + spill {s} s",
                  {"p": t.t_pipe, "e": ct.exposed_once, "o": off.exposed, "s": t.spill})
    return lines, spill_line, step_line
