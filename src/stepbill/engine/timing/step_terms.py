"""The numbers of one rank's step time, computed once: engine/steptime.py (whose docstring states the model) builds
its lines from them, and a caller that reads only numbers (the planner's floors, engine/plan/bounds.py) makes no
line at all. One model of time: every formula of the step time is here, none in the lines. Seconds and FLOP/s are
SI, bytes and FLOPs plain numbers.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

from stepbill.engine import comm
from stepbill.engine import flops as fl
from stepbill.engine.line import Line
from stepbill.engine.memo import Memo
from stepbill.engine.parallel import RankClass
from stepbill.engine.parallel.collectives import Collective, rank_param_elements
from stepbill.engine.parallel.layout import stage_layer_kinds
from stepbill.engine.params import ParamInventory, param_inventory
from stepbill.engine.precision_time import precision_time_lines
from stepbill.engine.quant import gemm_weight_bytes
from stepbill.engine.recompute import RecomputePlan
from stepbill.engine.timing.comm_time import CommTiming, comm_timing
from stepbill.engine.timing.constants import PCIE_COPY_EFFICIENCY
from stepbill.engine.timing.step import StageCompute, stage_compute
from stepbill.spec.hardware import GPU
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import LoRA, Recipe

#: CPU Adam throughput of one host (parameters updated per second, all cores), shared by the ranks of a node.
#: An assumption of the right order: ZeRO-Offload's CPU-Adam (arXiv 2101.06840 §6) takes about a quarter of a
#: second per billion parameters on a two-socket Xeon host — a figure recalled from the paper, not re-measured.
CPU_ADAM_PARAMS_PER_S = 4e9
CPU_ADAM_SOURCE = "assumed 4e9 params/s per host (order of ZeRO-Offload's CPU-Adam, arXiv 2101.06840 §6)"


class OffloadTerms(NamedTuple):
    """PCIe traffic and CPU time of offload, per rank per step (s); zeros for what the recipe does not offload."""

    owned: float = 0.0  # trainable elements whose optimizer step this rank runs on the host
    ranks_per_host: int = 0  # ranks sharing the host's CPU
    grads_down: float = 0.0  # hideable: streamed during the backward
    cpu_optimizer: float = 0.0  # exposed: between the backward and the next forward
    weights_up: float = 0.0  # exposed: the next forward needs them
    kept: float = 0.0  # activation bytes kept per micro-batch, copied down and back up
    activations: float = 0.0  # hideable: down in the forward, back up in the backward
    exposed: float = 0.0
    hideable: float = 0.0
    kept_convention: str = ""  # the convention of the rank class `kept` was read from


class StepTerms(NamedTuple):
    """Every number of the step-time lines (engine/steptime.py names each time.* line after its field here).

    FLOPs: `model_flops` / `model_flops_causal` of the whole step (all ranks), the rest per rank; seconds per rank
    per step. `stage_compute` and `comm` are the per-op model's parts (None under `--efficiency`). A NamedTuple,
    like OffloadTerms: immutable, and made once per planner candidate (a frozen dataclass of this many fields costs
    3× more to build)."""

    efficiency: float | None
    dtype: str
    peak: float  # FLOP/s of the compute dtype
    model_flops: float
    model_flops_causal: float
    rank_model_flops: float
    recompute_square: float  # recompute FLOPs per rank, full square (HFU)
    stage: int  # the busiest pipeline stage
    stage_flops: float  # its executed FLOPs of one micro-batch
    split: int  # tp · cp: the ranks sharing a stage's micro-batch
    executed: float  # the rank's executed FLOPs (time.rank_flops)
    recompute: float  # of which recompute (time.recompute_flops)
    hbm_bytes: float
    hbm_parts: dict[str, float]
    t_memory: float
    bubble: float
    offload: OffloadTerms
    precision_lines: list[Line]  # engine/precision_time.py's (quantised or fp8 recipes only)
    t_precision: float
    t_compute: float  # time.compute
    t_rank: float  # time.roofline: the rank's kernels (per op) or the roofline (--efficiency)
    t_pipe: float  # time.pipeline
    comm_critical: float  # TP / EP / PP on the critical path (per op; 0 under --efficiency)
    comm_exposed: float  # time.comm_exposed
    comm_hideable: float  # time.comm_hideable
    spill: float  # time.comm_spill
    t_step: float  # time.step
    mfu: float
    mfu_causal: float
    hfu: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    stage_compute: StageCompute | None
    comm: CommTiming | None


def hbm_traffic(recipe: Recipe, worst: RankClass, unsharded_weight_bytes: float,
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


def _owned_trainable(recipe: Recipe, held: dict[str, float]) -> float:
    """Trainable elements whose optimizer step this rank runs (its ZeRO shard; all it holds without ZeRO); `held`:
    rank_param_elements of the recipe."""
    par = recipe.parallel
    dense_div = par.zero_group if par.zero >= 1 else 1
    expert_div = par.expert_zero_group if par.zero >= 1 else 1
    return held["dense_grads"] / dense_div + held["expert_grads"] / max(expert_div, 1)


NO_OFFLOAD = OffloadTerms()


def pcie_copy_bytes_per_s(gpu: GPU) -> float:
    """What a host↔GPU copy moves per second (offload's traffic): the PCIe line rate × PCIE_COPY_EFFICIENCY."""
    return gpu.pcie_bytes_per_s * PCIE_COPY_EFFICIENCY


def offload_terms(recipe: Recipe, worst: RankClass, gpu: GPU, held: dict[str, float],
                  kept_convention: str = "") -> OffloadTerms:
    """PCIe traffic and CPU time of offload (ZeRO-Offload, arXiv 2101.06840 §4), per rank per step; `held`:
    rank_param_elements of the recipe; `worst`: the rank class whose kept activations the offload moves (of
    `kept_convention`: the eager convention's where the bill has one, what autograd really saves — engine/bill.py
    offload_rank)."""
    par, p = recipe.parallel, recipe.precision
    if not (par.offload_optimizer or par.offload_activations):
        return NO_OFFLOAD
    pcie = pcie_copy_bytes_per_s(gpu)
    owned = cpu_s = down = up = kept = moved = 0.0
    per_node = 0
    exposed = hideable = 0.0
    if par.offload_optimizer:
        owned = _owned_trainable(recipe, held)
        down, up = owned * p.grads, owned * p.weights
        per_node = min(par.world, gpu.gpus_per_node)
        cpu_s = owned * per_node / CPU_ADAM_PARAMS_PER_S
        hideable += down / pcie
        exposed += cpu_s + up / pcie
    if par.offload_activations:
        kept = worst.cpu.get("activations", 0.0) / max(worst.in_flight, 1.0)
        moved = 2 * kept * par.micro_batches
        hideable += moved / pcie
    return OffloadTerms(owned, per_node, down / pcie, cpu_s, up / pcie, kept, moved / pcie, exposed, hideable,
                        kept_convention if par.offload_activations else "")


def slowest_stage(spec: ModelSpec, inv: ParamInventory, recipe: Recipe,
                  plan: RecomputePlan | None) -> tuple[int, float, float]:
    """(stage, executed FLOPs of one micro-batch, recompute FLOPs of one micro-batch) of the pipeline stage with
    the most work: its layers (uneven stages included), the LM head on the last stage (flops.stage_step_flops).
    Memoised, with the model's own inventory, on exactly what it reads: the sequence, the micro-batch, the stages'
    split (pp, vpp, pp_layers: each stage's layer kinds), the plan's recompute FLOPs per layer kind, LoRA and
    whether the policy checkpoints whole layers."""
    per_token = tuple((k, lp.recompute_flops) for k, lp in plan.layers.items()) if plan is not None else ()
    whole_layers = plan is not None and plan.policy.kind in ("full", "every")
    par = recipe.parallel
    args = (recipe.seq_len, recipe.micro_batch, per_token, recipe.lora, whole_layers)
    if inv is param_inventory(spec):
        # each stage's layer kinds read the layout's pp, vpp and pp_layers only (parallel/layout._stage_layers)
        return _BUSIEST.get((spec, par.pp, par.vpp, par.pp_layers, *args), _busiest_of_layout, spec, inv, par, *args)
    return _busiest_of_layout(spec, inv, par, *args)


_BUSIEST = Memo(4096)


def _busiest_of_layout(spec: ModelSpec, inv: ParamInventory, par: Parallel, *args: Any) -> tuple[int, float, float]:
    return _busiest_stage(spec, inv, tuple(tuple(k.items()) for k in stage_layer_kinds(spec, par)), *args)


def _busiest_stage(spec: ModelSpec, inv: ParamInventory, kinds: tuple[tuple[tuple[str, int], ...], ...], seq_len: int,
                   micro_batch: int, per_token: tuple[tuple[str, float], ...], lora: LoRA | None,
                   whole_layers: bool) -> tuple[int, float, float]:
    recompute_per_token = dict(per_token)
    best = (0, -1.0, 0.0)
    for stage, work in stage_works(spec, inv, kinds, seq_len, micro_batch, recompute_per_token, lora, whole_layers):
        if work > best[1]:
            rc = sum(n * recompute_per_token.get(k, 0.0) for k, n in kinds[stage]) * (micro_batch * seq_len)
            best = (stage, work, rc)
    return best


def stage_works(spec: ModelSpec, inv: ParamInventory, kinds: tuple[tuple[tuple[str, int], ...], ...], seq_len: int,
                micro_batch: int, recompute_per_token: dict[str, float], lora: LoRA | None,
                whole_layers: bool) -> list[tuple[int, float]]:
    """(stage, executed FLOPs of one micro-batch: flops.stage_step_flops) of each pipeline stage, in stage order, as
    `slowest_stage` weighs them; `kinds`: each stage's (layer kind, count) pairs. A stage with the same ends and
    layers as an earlier one is left out: the same work, never strictly more."""
    last = len(kinds) - 1
    out = []
    seen: set[tuple[tuple[bool, bool], tuple[tuple[str, int], ...]]] = set()
    for stage, stage_items in enumerate(kinds):
        ends = (stage == 0, stage == last)
        if (ends, stage_items) in seen:
            continue
        seen.add((ends, stage_items))
        out.append((stage, fl.stage_step_flops(spec, inv, seq_len, micro_batch, dict(stage_items), stage == 0,
                                               stage == last, recompute_per_token, lora, whole_layers)))
    return out


@lru_cache(maxsize=4096)
def _bubble(pp: int, micro_batches: int) -> float:
    """comm.pipeline_bubble of plain ints as a float, memoised (its argument checks cost more than its formula)."""
    return float(comm.pipeline_bubble(pp, micro_batches))


def per_op_total(t_pipe: float, comm: CommTiming, t_rank: float, off: OffloadTerms) -> tuple[float, float]:
    """(time.comm_spill, time.step) of the per-op model from the pipeline time, the collectives' timing, the rank's
    kernels and the offload terms: the hideable collectives' spill or the offload traffic compute cannot cover,
    whichever is more, added to the pipeline, the exposed collectives and the exposed offload. The planner reads it
    alone for a candidate that differs from another in its offload terms only (engine/plan/bounds.py)."""
    spill = max(comm.hidden_spill, off.hideable - t_rank)
    return spill, t_pipe + comm.exposed_once + off.exposed + spill


def step_terms(spec: ModelSpec, inv: ParamInventory, recipe: Recipe, worst: RankClass, collectives: list[Collective],
               gpu: GPU, flops: dict[str, Line], efficiency: float | None = None,
               dtype: str | None = None, plan: RecomputePlan | None = None,
               offloaded: tuple[RankClass, str] | None = None) -> StepTerms:
    """The numbers of steptime.step_time (same arguments, same model: its docstring). `flops` holds the bill's
    one-micro-batch FLOPs lines (engine/flops.py: flops.step, flops.model, ...); `plan` the recompute plan;
    `dtype` defaults to the recipe's compute dtype; `offloaded`: the rank class whose kept activations activation
    offload moves, and its convention (None: `worst`, of the bill's)."""
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
    traffic, parts = hbm_traffic(recipe, worst, unsharded, flops["flops.recompute"].value / forward)
    t_memory = traffic / gpu.hbm_bytes_per_s
    bubble = _bubble(par.pp, par.micro_batches * par.vpp)
    moved_rank, kept_convention = offloaded if offloaded is not None else (worst, "")
    off = offload_terms(recipe, moved_rank, gpu, held, kept_convention)
    timed = [c for c in collectives if c.seconds is not None]
    sc = ct = None
    if efficiency is not None:  # the explicit override: one efficiency on every FLOP, an HBM roofline
        t_compute = executed / (peak * efficiency)
        prec_lines, t_precision = precision_time_lines(spec, inv, recipe, flops, gpu, efficiency, stage)
        t_rank = max(t_compute, t_memory) + t_precision  # dequantisation / fp8's bf16 share (precision_time.py)
        t_pipe = t_rank / (1 - bubble)
        critical = 0.0
        exposed = sum(c.seconds for c in timed if c.overlap != "yes")  # type: ignore[misc]
        hideable = sum(c.seconds for c in timed if c.overlap == "yes")  # type: ignore[misc]
        spill = max(0.0, max(hideable, off.hideable) - t_rank)
        t_step = t_pipe + exposed + off.exposed + spill
    else:  # the per-op model (engine/timing); a quantised or fp8 recipe's own kernels run serially with the rank's
        kinds = stage_layer_kinds(spec, par)[stage]
        sc = stage_compute(spec, recipe, worst, gpu, peak, kinds, stage == par.pp - 1, executed, recompute,
                           held["dense_weights"] + held["expert_weights"])
        # fp8's bf16 share is charged at the GEMMs' achieved efficiency
        prec_lines, t_precision = precision_time_lines(spec, inv, recipe, flops, gpu, sc.gemm_efficiency or 1.0,
                                                       stage, attention_timed=True)
        t_rank = sc.kernels + t_precision
        ct = comm_timing(timed, par.zero, par.micro_batches, max(sum(kinds.values()), 1),
                         sc.forward, sc.backward, sc.attention)
        t_compute = t_rank + sc.optimizer
        t_pipe = (t_rank + ct.critical_per_step) / (1 - bubble) + sc.optimizer
        critical, exposed, hideable = ct.critical_per_step, ct.critical_per_step + ct.exposed_once, ct.hideable
        spill, t_step = per_op_total(t_pipe, ct, t_rank, off)
    tokens = recipe.tokens_per_step
    return StepTerms(
        efficiency, dtype, peak, model, model_causal, rank_model, recompute_square, stage, stage_mb, split, executed,
        recompute, traffic, parts, t_memory, bubble, off, prec_lines, t_precision, t_compute, t_rank, t_pipe,
        critical, exposed, hideable, spill, t_step,
        rank_model / (t_step * peak), model_causal / par.world / (t_step * peak),
        (rank_model + recompute_square) / (t_step * peak), tokens / t_step, tokens / t_step / par.world, sc, ct)
