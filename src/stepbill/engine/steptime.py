"""Step time on one rank: a roofline of compute and HBM traffic, the pipeline bubble, communication and offload
traffic, and the MFU / HFU that result. Every result is a Line with its derivation; seconds and FLOP/s are SI.

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
from functools import lru_cache

from stepbill.engine import comm
from stepbill.engine import flops as fl
from stepbill.engine.line import Line
from stepbill.engine.parallel import RankClass
from stepbill.engine.parallel.collectives import Collective, rank_param_elements
from stepbill.engine.parallel.layout import stage_layer_kinds
from stepbill.engine.params import ParamInventory, param_inventory
from stepbill.engine.precision_time import precision_time_lines
from stepbill.engine.quant import gemm_weight_bytes
from stepbill.engine.recompute import RecomputePlan
from stepbill.engine.timing.comm_time import comm_timing
from stepbill.engine.timing.constants import NCCL_EFFICIENCY_SOURCE, NCCL_SOURCE
from stepbill.engine.timing.step import stage_compute
from stepbill.spec.hardware import GPU
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import LoRA, Recipe

DEFAULT_EFFICIENCY = None  # None: the per-op model (engine/timing); a float: the --efficiency override

#: CPU Adam throughput of one host (parameters updated per second, all cores), shared by the ranks of a node.
#: An assumption of the right order: ZeRO-Offload's CPU-Adam (arXiv 2101.06840 §6) takes about a quarter of a
#: second per billion parameters on a two-socket Xeon host — a figure recalled from the paper, not re-measured.
CPU_ADAM_PARAMS_PER_S = 4e9
CPU_ADAM_SOURCE = "assumed 4e9 params/s per host (order of ZeRO-Offload's CPU-Adam, arXiv 2101.06840 §6)"

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


def _hbm_traffic(recipe: Recipe, worst: RankClass, unsharded_weight_bytes: float,
                 recompute_share: float) -> tuple[float, dict[str, float]]:
    """HBM bytes one rank moves per step: its (ZeRO-unsharded) weights read in forward, backward (twice: input
    and weight gradients; once under LoRA, whose frozen weights get no gradient) and by the recompute (its share
    of a forward), activations written once and read once per micro-batch, optimizer shard read and written once."""
    m = recipe.parallel.micro_batches
    mem = worst.memory
    reads = (2 if recipe.lora is not None else 3) + recompute_share
    parts = {
        "weights": reads * m * unsharded_weight_bytes,
        "activations": 2 * m * mem["activations"] / max(worst.in_flight, 1.0),
        "optimizer": 2 * mem["optimizer"] + mem["grads"] + mem["weights"],
    }
    return sum(parts.values()), parts


def _owned_trainable(spec: ModelSpec, recipe: Recipe, inv: ParamInventory) -> float:
    """Trainable elements whose optimizer step this rank runs (its ZeRO shard; all it holds without ZeRO)."""
    par = recipe.parallel
    held = rank_param_elements(spec, recipe, inv)
    dense_div = par.zero_group if par.zero >= 1 else 1
    expert_div = par.expert_zero_group if par.zero >= 1 else 1
    return held["dense_grads"] / dense_div + held["expert_grads"] / max(expert_div, 1)


def offload_lines(spec: ModelSpec, recipe: Recipe, inv: ParamInventory, worst: RankClass,
                  gpu: GPU) -> tuple[list[Line], float, float]:
    """PCIe traffic and CPU time of offload, per rank per step: (lines, exposed s, hideable s)."""
    par, p = recipe.parallel, recipe.precision
    pcie = gpu.pcie_bytes_per_s
    lines: list[Line] = []
    exposed = hideable = 0.0
    if par.offload_optimizer:
        owned = _owned_trainable(spec, recipe, inv)
        down, up = owned * p.grads, owned * p.weights
        per_node = min(par.world, gpu.gpus_per_node)
        cpu_s = owned * per_node / CPU_ADAM_PARAMS_PER_S
        lines += [
            Line("time.offload_grads_down", down / pcie, "s", "{params} params × {bytes} B grads / {bw} B/s PCIe",
                 {"params": owned, "bytes": p.grads, "bw": pcie}, convention="hideable: streamed during the backward"),
            Line("time.offload_cpu_optimizer", cpu_s, "s",
                 "{params} params × {ranks} ranks sharing the host / {rate} params/s",
                 {"params": owned, "ranks": per_node, "rate": CPU_ADAM_PARAMS_PER_S}, CPU_ADAM_SOURCE,
                 "exposed: between the backward and the next forward"),
            Line("time.offload_weights_up", up / pcie, "s", "{params} params × {bytes} B weights / {bw} B/s PCIe",
                 {"params": owned, "bytes": p.weights, "bw": pcie},
                 convention="exposed: the next forward needs them"),
        ]
        hideable += down / pcie
        exposed += cpu_s + up / pcie
    if par.offload_activations:
        kept = worst.cpu.get("activations", 0.0) / max(worst.in_flight, 1.0)
        moved = 2 * kept * par.micro_batches
        lines.append(Line("time.offload_activations", moved / pcie, "s",
                          "2 × {kept} B kept per micro-batch × {m} micro-batches / {bw} B/s PCIe",
                          {"kept": kept, "m": par.micro_batches, "bw": pcie},
                          convention="hideable: down in the forward, back up in the backward"))
        hideable += moved / pcie
    return lines, exposed, hideable


def slowest_stage(spec: ModelSpec, inv: ParamInventory, recipe: Recipe,
                  plan: RecomputePlan | None) -> tuple[int, float, float]:
    """(stage, executed FLOPs of one micro-batch, recompute FLOPs of one micro-batch) of the pipeline stage with
    the most work: its layers (uneven stages included), the LM head on the last stage (flops.stage_step_flops).
    Memoised, with the model's own inventory, on exactly what it reads: the sequence, the micro-batch, each stage's
    layer kinds, the plan's recompute FLOPs per layer kind, LoRA and whether the policy checkpoints whole layers."""
    per_token = tuple((k, lp.recompute_flops) for k, lp in plan.layers.items()) if plan is not None else ()
    whole_layers = plan is not None and plan.policy.kind in ("full", "every")
    kinds = tuple(tuple(k.items()) for k in stage_layer_kinds(spec, recipe.parallel))
    args = (recipe.seq_len, recipe.micro_batch, kinds, per_token, recipe.lora, whole_layers)
    if inv is param_inventory(spec):
        return _busiest_stage_memo(spec, *args)
    return _busiest_stage(spec, inv, *args)


@lru_cache(maxsize=4096)
def _busiest_stage_memo(spec: ModelSpec, seq_len: int, micro_batch: int, kinds: tuple[tuple[tuple[str, int], ...], ...],
                        per_token: tuple[tuple[str, float], ...], lora: LoRA | None,
                        whole_layers: bool) -> tuple[int, float, float]:
    return _busiest_stage(spec, param_inventory(spec), seq_len, micro_batch, kinds, per_token, lora, whole_layers)


def _busiest_stage(spec: ModelSpec, inv: ParamInventory, seq_len: int, micro_batch: int,
                   kinds: tuple[tuple[tuple[str, int], ...], ...], per_token: tuple[tuple[str, float], ...],
                   lora: LoRA | None, whole_layers: bool) -> tuple[int, float, float]:
    recompute_per_token = dict(per_token)
    last = len(kinds) - 1
    best = (0, -1.0, 0.0)
    seen: set[tuple[tuple[bool, bool], tuple[tuple[str, int], ...]]] = set()
    for stage, stage_items in enumerate(kinds):
        ends = (stage == 0, stage == last)
        if (ends, stage_items) in seen:
            continue  # the same layers and ends as an earlier stage: the same work, never strictly more
        seen.add((ends, stage_items))
        stage_kinds = dict(stage_items)
        work = fl.stage_step_flops(spec, inv, seq_len, micro_batch, stage_kinds, stage == 0, stage == last,
                                   recompute_per_token, lora, whole_layers)
        if work > best[1]:
            rc = sum(n * recompute_per_token.get(k, 0.0) for k, n in stage_kinds.items()) * (micro_batch * seq_len)
            best = (stage, work, rc)
    return best


def step_time(spec: ModelSpec, inv: ParamInventory, recipe: Recipe, worst: RankClass, collectives: list[Collective],
              gpu: GPU, flops: dict[str, Line], efficiency: float | None = None,
              dtype: str | None = None, plan: RecomputePlan | None = None) -> StepTime:
    """Step time, bubble, MFU and HFU on `gpu`: compute is the slowest pipeline stage's (its FLOPs over tp·cp
    ranks), timed per op (engine/timing: GEMMs by shape, attention, memory-bound ops, alpha-beta collectives with
    their overlap rules) — or, when `efficiency` is given, as executed FLOPs / (peak × efficiency) with an HBM
    roofline (the explicit override). `flops` holds the bill's one-micro-batch FLOPs lines (engine/flops.py:
    flops.step, flops.model, ...); `plan` the recompute plan (its per-layer rebuild); `dtype` defaults to the
    recipe's compute dtype."""
    par = recipe.parallel
    dtype = dtype or recipe.precision.compute
    peak = gpu.peak_flops(dtype)
    per_rank = par.micro_batches * par.dp / par.world  # one micro-batch's FLOPs → one rank's share of the step
    model = flops["flops.model"].value * par.micro_batches * par.dp
    model_causal = flops["flops.model_causal"].value * par.micro_batches * par.dp
    recompute_square = flops["flops.recompute_full_square"].value * per_rank
    stage, stage_mb, stage_rc = slowest_stage(spec, inv, recipe, plan)
    split = par.tp * par.cp  # a stage's ranks of one replica share its micro-batch's work
    executed = stage_mb * par.micro_batches / split
    recompute = stage_rc * par.micro_batches / split
    rank_model = model / par.world
    held = rank_param_elements(spec, recipe, inv)
    unsharded = (held["dense_weights"] + held["expert_weights"]) * gemm_weight_bytes(recipe.precision)
    forward = flops["flops.forward"].value
    traffic, parts = _hbm_traffic(recipe, worst, unsharded, flops["flops.recompute"].value / forward)
    t_memory = traffic / gpu.hbm_bytes_per_s
    bubble = float(comm.pipeline_bubble(par.pp, par.micro_batches * par.vpp))
    off_lines, off_exposed, off_hideable = offload_lines(spec, recipe, inv, worst, gpu)
    timed = [c for c in collectives if c.seconds is not None]
    L = Line
    if efficiency is not None:  # the explicit override: one efficiency on every FLOP, an HBM roofline
        t_compute = executed / (peak * efficiency)
        prec_lines, t_precision = precision_time_lines(spec, inv, recipe, flops, gpu, efficiency, stage)
        t_rank = max(t_compute, t_memory) + t_precision  # dequantisation / fp8's bf16 share (precision_time.py)
        t_pipe = t_rank / (1 - bubble)
        exposed = sum(c.seconds for c in timed if c.overlap != "yes")  # type: ignore[misc]
        hideable = sum(c.seconds for c in timed if c.overlap == "yes")  # type: ignore[misc]
        spill = max(0.0, max(hideable, off_hideable) - t_rank)
        t_step = t_pipe + exposed + off_exposed + spill
        model_lines = [
            L("time.compute", t_compute, "s", "{flops} FLOPs / ({peak} FLOP/s × {eff})",
              {"flops": executed, "peak": peak, "eff": efficiency},
              convention=f"--efficiency override; {COMPUTE_DTYPE_NOTE.get(dtype, dtype)} of {gpu.display}"),
            *prec_lines,
            L("time.roofline", t_rank, "s", "max(compute {c} s, memory {m} s) + precision {p} s",
              {"c": t_compute, "m": t_memory, "p": t_precision}),
            L("time.pipeline", t_pipe, "s", "{t} s / (1 − {b})", {"t": t_rank, "b": bubble}),
            L("time.comm_exposed", exposed, "s", "sum of collectives that cannot hide (overlap no / partly)", {}),
            L("time.comm_hideable", hideable, "s", "sum of collectives that overlap compute", {}),
        ]
        spill_line = L("time.comm_spill", spill, "s", "max(0, max(network {h} s, PCIe {o} s) − compute {t} s)",
                       {"h": hideable, "o": off_hideable, "t": t_rank})
        step_line = L("time.step", t_step, "s",
                      "pipeline {p} s + exposed comm {e} s + exposed offload {o} s + spill {s} s",
                      {"p": t_pipe, "e": exposed, "o": off_exposed, "s": spill})
    else:
        t_step, model_lines, spill_line, step_line = _per_op(spec, inv, recipe, worst, timed, gpu, peak, dtype,
                                                             stage, executed, recompute, held, bubble, off_exposed,
                                                             off_hideable, flops)
    lines = [
        L("time.model_flops", model, "FLOPs", "flops.model {mb} FLOPs × {m} micro-batches × {dp} dp",
          {"mb": flops["flops.model"].value, "m": par.micro_batches, "dp": par.dp},
          flops["flops.model"].provenance, "PaLM appendix B: full attention square"),
        L("time.model_flops_causal", model_causal, "FLOPs", "flops.model_causal × {m} micro-batches × {dp} dp",
          {"m": par.micro_batches, "dp": par.dp}, convention="attention term halved (causal)"),
        L("time.rank_flops", executed, "FLOPs",
          "stage {stage} (the busiest): {stage_mb} FLOPs per micro-batch × {m} micro-batches / (tp {tp} × cp {cp})",
          {"stage": stage, "stage_mb": stage_mb, "m": par.micro_batches, "tp": par.tp, "cp": par.cp},
          convention="executed: causal attention, the recompute policy's rebuild included; its layers and, on the "
          "last stage, the LM head"),
        L("time.recompute_flops", recompute, "FLOPs", "stage {stage}'s recompute × {m} micro-batches / {split}",
          {"stage": stage, "m": par.micro_batches, "split": split}, convention="causal; per rank"),
        L("time.peak", peak, "FLOP/s", "{dtype} peak of {gpu}", {"dtype": dtype, "gpu": gpu.display},
          f"catalog: {gpu.peaks_source}", COMPUTE_DTYPE_NOTE.get(dtype, dtype)),
        L("time.hbm_traffic", traffic, "bytes", "weights {weights} + activations {activations} + optimizer {optimizer}",
          parts),
        L("time.memory", t_memory, "s", "{bytes} B / {bw} B/s", {"bytes": traffic, "bw": gpu.hbm_bytes_per_s}),
        L("time.bubble", bubble, "1", "(p − 1)/(v·m + p − 1), p={p} v={v} m={m}",
          {"p": par.pp, "v": par.vpp, "m": par.micro_batches}, "cited: GPipe, arXiv 1811.06965; seed §07"),
        *model_lines,
        *off_lines,
        L("time.offload_exposed", off_exposed, "s", "CPU optimizer + weights up (offload)", {}),
        L("time.offload_hideable", off_hideable, "s", "grads down + activations down and up (offload)", {}),
        spill_line,
        step_line,
        L("time.mfu", rank_model / (t_step * peak), "1", "{flops} model FLOPs per GPU / ({t} s × {peak} FLOP/s)",
          {"flops": rank_model, "t": t_step, "peak": peak}, flops["flops.model"].provenance,
          "PaLM appendix B: model FLOPs with the full attention square"),
        L("time.mfu_causal", model_causal / par.world / (t_step * peak), "1",
          "time.model_flops_causal / {world} / ({t} s × {peak} FLOP/s)", {"world": par.world, "t": t_step, "peak": peak},
          convention="attention term halved (causal)"),
        L("time.hfu", (rank_model + recompute_square) / (t_step * peak), "1",
          "({flops} + recompute {r}) FLOPs per GPU / ({t} s × {peak} FLOP/s)",
          {"flops": rank_model, "r": recompute_square, "t": t_step, "peak": peak}, flops["flops.model"].provenance,
          "PaLM appendix B: hardware FLOPs = model FLOPs + rematerialisation, full attention square"),
        L("time.tokens_per_s", recipe.tokens_per_step / t_step, "tokens/s", "{tokens} tokens / {t} s",
          {"tokens": recipe.tokens_per_step, "t": t_step}),
        L("time.tokens_per_s_per_gpu", recipe.tokens_per_step / t_step / par.world, "tokens/s",
          "{tokens} tokens / {t} s / {world} GPUs", {"tokens": recipe.tokens_per_step, "t": t_step, "world": par.world}),
    ]
    return StepTime({x.name: x for x in lines})


def _per_op(spec: ModelSpec, inv: ParamInventory, recipe: Recipe, worst: RankClass, timed: list[Collective],
            gpu: GPU, peak: float, dtype: str, stage: int, executed: float, recompute: float, held: dict[str, float],
            bubble: float, off_exposed: float, off_hideable: float,
            flops: dict[str, Line]) -> tuple[float, list[Line], Line, Line]:
    """The per-op model (engine/timing): (step seconds, its lines, the spill line, the step line). A quantised or
    fp8 recipe's own kernels (engine/precision_time.py) run serially with the rank's kernels; fp8's bf16 share is
    charged at the GEMMs' achieved efficiency."""
    par = recipe.parallel
    kinds = stage_layer_kinds(spec, par)[stage]
    sc = stage_compute(spec, recipe, worst, gpu, peak, kinds, stage == par.pp - 1, executed, recompute,
                       held["dense_weights"] + held["expert_weights"])
    prec_lines, t_precision = precision_time_lines(spec, inv, recipe, flops, gpu, sc.gemm_efficiency or 1.0, stage)
    kernels = sc.kernels + t_precision
    ct = comm_timing(timed, gpu.gpus_per_node, par.zero, par.micro_batches, max(sum(kinds.values()), 1),
                     sc.forward, sc.backward, sc.attention)
    t_compute = kernels + sc.optimizer
    t_pipe = (kernels + ct.critical_per_step) / (1 - bubble) + sc.optimizer
    spill = max(ct.hidden_spill, off_hideable - kernels)
    t_step = t_pipe + ct.exposed_once + off_exposed + spill
    L = Line
    note = f"{COMPUTE_DTYPE_NOTE.get(dtype, dtype)} of {gpu.display}"
    lines = [
        *sc.lines,
        *prec_lines,
        L("time.compute", t_compute, "s", "GEMMs {g} s + attention {a} s + memory-bound {m} s + "
          + ("precision {p} s + " if prec_lines else "") + "optimizer {o} s",
          {"g": sc.gemm, "a": sc.attention, "m": sc.memory_bound, "o": sc.optimizer,
           **({"p": t_precision} if prec_lines else {})},
          convention=f"per-op model (engine/timing); {note}"),
        L("time.roofline", kernels, "s", "per op: every kernel is its own roofline; GEMMs + attention + "
          "memory-bound" + (" + precision" if prec_lines else "") + " = {t} s", {"t": kernels}),
        L("time.comm_critical", ct.critical_per_step, "s",
          "TP {tp} s + EP {ep} s + PP {pp} s, every micro-batch (alpha-beta: NCCL latency + bytes / (link × "
          "efficiency))", {k: ct.critical_by_axis.get(k, 0.0) for k in ("tp", "ep", "pp")}, NCCL_SOURCE,
          f"on the critical path; {NCCL_EFFICIENCY_SOURCE}"),
        L("time.pipeline", t_pipe, "s", "(kernels {k} s + critical comm {c} s) / (1 − {b}) + optimizer {o} s",
          {"k": kernels, "c": ct.critical_per_step, "b": bubble, "o": sc.optimizer}),
        L("time.comm_exposed", ct.critical_per_step + ct.exposed_once, "s",
          "critical {c} s (inside the pipeline) + weight all-gather after the optimizer {w} s",
          {"c": ct.critical_per_step, "w": ct.exposed_once}, NCCL_SOURCE),
        L("time.comm_hideable", ct.hideable, "s",
          "DP / ZeRO / CP collectives that overlap compute (bucketed, prefetched)", {}, NCCL_SOURCE),
    ]
    spill_line = L("time.comm_spill", spill, "s",
                   "max(network not hidden {h} s (last bucket, first gather, excess over its window), PCIe {o} s − "
                   "kernels {t} s)", {"h": ct.hidden_spill, "o": off_hideable, "t": kernels})
    step_line = L("time.step", t_step, "s",
                  "pipeline {p} s + weight all-gather {e} s + exposed offload {o} s + spill {s} s",
                  {"p": t_pipe, "e": ct.exposed_once, "o": off_exposed, "s": spill})
    return t_step, lines, spill_line, step_line
