"""Assemble the bill of one training step from the engine's lines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import lru_cache
from operator import attrgetter
from typing import Any

from stepbill.engine import activations as act
from stepbill.engine import fp8, quant
from stepbill.engine.activation_lines import activation_lines, eager_activation_lines, window_lines
from stepbill.engine.activations.fp8 import Fp8Bytes
from stepbill.engine.flops import lora_step_terms
from stepbill.engine.flops_lines import flops_lines, matmul_params
from stepbill.engine.line import Line
from stepbill.engine.memory.dequant import with_dequant
from stepbill.engine.memory.eager import EagerTerms, eager_terms
from stepbill.engine.memory.optimizer_step import step_counter_text
from stepbill.engine.memory.timeline import Timeline
from stepbill.engine.parallel import RankClass, SingleRank, one_gpu_timeline, rank_classes
from stepbill.engine.parallel.collectives import Collective, step_collectives
from stepbill.engine.params import ParamInventory, param_inventory
from stepbill.engine.recompute import RecomputePlan, make_plan
from stepbill.engine.states import (
    Trainable,
    cards_needed,
    checkpoint_lines,
    export_line,
    is_model_item,
    resident_lines,
    trainable_split,
)
from stepbill.engine.steptime import DEFAULT_EFFICIENCY, StepTime, step_time
from stepbill.errors import StepbillError, unknown_name
from stepbill.spec.hardware import GPU
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import Parallel
from stepbill.spec.recipe import LoRA, Precision, Recipe

GIB = 2**30
FUSED_ATTENTION = "fused attention (no S×S scores)"
UNFUSED_ATTENTION = "un-fused attention (--attention eager: the B·H·S² softmax output kept per layer)"
CONVENTION_NOTE = {
    "ideal": f"ideal convention (the seed's): each kept tensor once, {FUSED_ATTENTION}, no logits, no dropout masks",
    "eager": "eager convention: what eager PyTorch + transformers keeps (fp32 upcasts, SDPA outputs, logits)",
    "megatron": "megatron convention: Korthikanti et al. 2022 Table 2, sbh(34 + 5as/h) per layer (1-byte dropout "
    "masks; un-fused attention, its a·s² tensors stored whatever --attention says)",
}


@dataclass(frozen=True)
class Bill:
    """The bill of one step: named lines (value, unit, formula, provenance) plus the detail tables."""

    model: ModelSpec
    recipe: Recipe
    inventory: ParamInventory
    lines: dict[str, Line]
    resident_items: list[Line]
    activation_items: list[Line]
    checkpoint_items: list[Line]
    layer_rows: dict[str, list[act.ActTensor]] = field(default_factory=dict)
    convention: str = "ideal"
    timeline: Timeline | None = None
    plan: RecomputePlan | None = None
    attention: str = "sdpa"
    ranks: list[RankClass] = field(default_factory=list)  # one class per distinct pipeline stage
    collectives: list[Collective] = field(default_factory=list)  # per rank, per step
    time: StepTime | None = None  # only with a GPU
    gpu: GPU | None = None
    eager: EagerTerms | None = None  # the eager convention's transients (None under ideal)
    run: dict[str, Line] = field(default_factory=dict)  # run totals (engine/run.py), set by the API's options

    @property
    def worst_rank(self) -> RankClass:
        """The rank class with the highest peak."""
        return max(self.ranks, key=lambda c: c.memory["peak"])

    def __getitem__(self, name: str) -> Line:
        return self.lines[name]


def _sum_line(name: str, parts: list[Line], unit: str = "bytes", note: str = "") -> Line:
    names = " + ".join(p.name for p in parts) or "0"
    return Line(name, sum(p.value for p in parts), unit, names, {}, convention=note)


def _flops_attention(spec: ModelSpec, a_bytes: int, convention: str, attention: str, device: str) -> str:
    """The attention kernel FlopCounterMode sees: the eager convention on CPU with attention dropout runs SDPA's
    math path ("sdpa-math": its backward reads the saved probabilities, no rebuilt QKᵀ; eager/dropout.py); on CUDA,
    q/k heads wider than v's (DeepSeek's MLA) take the memory-efficient kernel ("sdpa-efficient": flash needs one
    head width, PyTorch's sdp_utils.cpp `check_head_dim_size_flash`), whose backward rebuilds QKᵀ as flash's does,
    where the CPU runs them on the math path."""
    if convention == "eager" and attention == "sdpa":
        from stepbill.engine.activations.eager.dropout import uses_math_path

        if uses_math_path(spec, a_bytes):
            return "sdpa-math"
    if attention == "sdpa" and device == "cuda" and spec.attention.qk_head_dim != spec.attention.v_dim:
        return "sdpa-efficient"
    return attention


@dataclass(frozen=True)
class _Core:
    """What both the bill and the rank classes are made from: the inventory, the activation width, the recompute
    plan, the outside-layer bytes and the eager terms (None under ideal / megatron)."""

    inv: ParamInventory
    split: Trainable
    a_bytes: Any
    plan: RecomputePlan
    outside: float
    eager: EagerTerms | None
    outside_rows: Callable[[Callable[[act.ActTensor], float]], float] | None


def _core(spec: ModelSpec, recipe: Recipe, convention: str, attention: str, gpu: GPU | None) -> _Core:
    """make_bill's first steps (the checks of its input, then the engine calls every rank class reads)."""
    if convention not in act.CONVENTIONS:
        raise unknown_name("convention", convention, act.CONVENTIONS)
    if attention not in act.ATTENTIONS:
        raise unknown_name("attention implementation", attention, act.ATTENTIONS)
    fp8.require_fp8(recipe.precision, gpu)  # one line before any arithmetic: no fp8 tensor cores on this GPU
    if convention != "eager":  # no outside-layer rows by rank: the core reads no field of the layout
        return _one_gpu_core(spec, without_layout(recipe), convention, attention)
    return _make_core(spec, recipe, convention, attention)


def _make_core(spec: ModelSpec, recipe: Recipe, convention: str, attention: str) -> _Core:
    inv = param_inventory(spec)
    split = _own_trainable_split(spec, recipe.lora)  # raises when LoRA's targets match no matrix
    a_bytes, plan, outside, eager = _convention_terms(spec, without_layout(recipe), convention, attention)
    outside_rows = _outside_rows(spec, recipe, a_bytes) if convention == "eager" else None
    return _Core(inv, split, a_bytes, plan, outside, eager, outside_rows)


@lru_cache(maxsize=512)
def _one_gpu_core(spec: ModelSpec, one_gpu: Recipe, convention: str, attention: str) -> _Core:
    """_make_core of a convention without outside rows by rank (ideal, megatron), once per one-GPU recipe
    (`one_gpu`: without_layout(recipe)): a planner asks once per candidate. Shared: read it, never change it."""
    return _make_core(spec, one_gpu, convention, attention)


def _outside_rows(spec: ModelSpec, recipe: Recipe, a_bytes: Any) -> Callable[[Callable[[act.ActTensor], float]], float]:
    """The eager convention's outside-layer bytes on a rank, by its row divisor (the last stage's logits and loss
    inputs)."""
    from stepbill.engine.activations.eager import outside_bytes_on_rank

    def outside_rows(divisor: Callable[[act.ActTensor], float]) -> float:
        return outside_bytes_on_rank(spec, a_bytes, recipe.seq_len, recipe.micro_batch, divisor, recipe.parallel.cp,
                                     recipe.lora)
    return outside_rows


@lru_cache(maxsize=256)
def _own_trainable_split(spec: ModelSpec, lora: LoRA | None) -> Trainable:
    """trainable_split of the model's own inventory, once per model and LoRA (a planner's _core asks once per
    candidate). Shared: read it, never change it."""
    return trainable_split(param_inventory(spec), lora)


def activation_width(precision: Precision, device: str, convention: str) -> Any:
    """The activation width a convention's rows are priced at: eager, two widths under amp (bf16 compute, fp32
    params) and an int otherwise (activations/eager); ideal under fp8, Linear inputs cached in fp8
    (activations/fp8.py); else the recipe's activation bytes."""
    if convention == "eager":
        from stepbill.engine.activations.eager import from_precision

        return from_precision(precision, device)
    if precision.fp8 is not None and convention == "ideal":
        return Fp8Bytes(precision.activation, precision.fp8)
    return precision.activation


def without_layout(recipe: Recipe, micro_batches: int = 1) -> Recipe:
    """The recipe on one GPU (keeping only `micro_batches` of its layout): the memo key of a bill's parts that do
    not read the layout, so a planner makes them once per micro-batch and recompute policy, not once per layout.
    Memoised on the recipe's other fields: building a Recipe checks every field, and a planner's candidates (each
    its own layout) ask for the same few."""
    return _one_gpu_recipe(_NOT_LAYOUT_OF(recipe), micro_batches)


_NOT_LAYOUT = tuple(f.name for f in fields(Recipe) if f.name != "parallel")  # every field of Recipe but its layout
_NOT_LAYOUT_OF = attrgetter(*_NOT_LAYOUT)  # their values, a tuple


@lru_cache(maxsize=1024)
def _one_gpu_recipe(values: tuple[Any, ...], micro_batches: int) -> Recipe:
    return Recipe(**dict(zip(_NOT_LAYOUT, values, strict=True)), parallel=Parallel(micro_batches=micro_batches))


@lru_cache(maxsize=2048)  # a planner's bills in floor order revisit one-GPU recipes (~14,000 in DeepSeek-V3 × 2,048)
def _convention_terms(spec: ModelSpec, one_gpu: Recipe, convention: str,
                      attention: str) -> tuple[Any, RecomputePlan, float, EagerTerms | None]:
    """The activation width, recompute plan, outside-layer bytes and eager terms of a recipe: they read no field of
    the layout (`one_gpu` is `without_layout(recipe)`). Shared results: read them, never change them."""
    a_bytes = activation_width(one_gpu.precision, one_gpu.device, convention)
    seq_len, micro_batch, lora = one_gpu.seq_len, one_gpu.micro_batch, one_gpu.lora
    plan = make_plan(spec, one_gpu.recompute_policy, seq_len, micro_batch, a_bytes, convention, attention=attention,
                     lora=lora)
    outside = act.outside_bytes(spec, a_bytes, seq_len, micro_batch, convention, lora)
    eager = eager_terms(spec, one_gpu, param_inventory(spec), plan) if convention == "eager" else None
    return a_bytes, plan, outside, eager


@lru_cache(maxsize=256)
def _one_gpu_part(spec: ModelSpec, recipe: Recipe, convention: str, attention: str, gpu_mem_bytes: float | None
                  ) -> tuple[list[Line], Timeline, list[Line], list[Line], dict[str, Line], dict[str, list[act.ActTensor]]]:
    """make_bill's global part (one micro-batch as if one rank held it all): resident, activation and checkpoint
    lines, the one-GPU timeline, the bill's lines and the layer rows. It reads no field of the layout but its
    micro-batches (gradient accumulation): `recipe` is `without_layout(recipe, micro_batches)`, so a planner makes it
    once per micro-batch, recompute policy and micro-batch count. Shared: make_bill copies the containers."""
    inv = param_inventory(spec)
    split = trainable_split(inv, recipe.lora)
    a_bytes, plan, outside, eager = _convention_terms(spec, without_layout(recipe), convention, attention)
    resident = resident_lines(inv, recipe)
    timeline = one_gpu_timeline(spec, recipe, inv, plan, outside, eager)
    if recipe.precision.quant is not None:  # QLoRA: one Linear's dequantised bf16 copy inside each layer
        quant.check_supported(spec, recipe.precision)
        timeline = with_dequant(timeline, quant.largest_dequant_bytes(inv))
    time_lines = timeline.lines()
    activ = activation_lines(plan, time_lines["memory.activations"].value, a_bytes, spec.hidden_size, outside,
                             eager_activation_lines(eager, timeline) + window_lines(eager, plan))
    ckpt = checkpoint_lines(inv, recipe)

    lines: dict[str, Line] = {
        "params.total": Line("params.total", inv.total, "params", "sum of every parameter tensor"),
        "params.active": Line("params.active", inv.active, "params",
                              "total − routed experts a token does not visit" if spec.moe else "= total (dense)"),
        "params.trainable": Line("params.trainable", split.trainable_params, "params",
                                 "LoRA adapters only" if recipe.lora else "= total (full fine-tuning)"),
    }
    by_name = {line.name: line for line in resident}
    model_side = [x for x in resident if is_model_item(x.name)]
    optimizer_side = [x for x in resident if not is_model_item(x.name)]
    lines["memory.weights"] = _sum_line("memory.weights", [x for x in resident if x.name.startswith("weights")])
    lines["memory.grads"] = by_name["grads"]
    lines["memory.optimizer"] = _sum_line("memory.optimizer", optimizer_side, note="master copy + optimizer states")
    counters, counters_note, _ = step_counter_text(recipe.optimizer)
    if eager is not None and eager.step_counters:
        opt = lines["memory.optimizer"]
        lines["memory.optimizer"] = Line("memory.optimizer", opt.value + eager.step_counters, "bytes",
                                         opt.formula + counters, {}, convention=counters_note)
    lines["memory.model"] = _sum_line("memory.model", model_side, note="weights + grads")
    lines["memory.resident"] = _sum_line("memory.resident", resident)
    if eager is not None and eager.step_counters:  # the counters are resident too: model + optimizer = resident
        res = lines["memory.resident"]
        lines["memory.resident"] = Line("memory.resident", res.value + eager.step_counters, "bytes",
                                        res.formula + counters, {}, convention=counters_note)
    lines.update(time_lines)
    note = CONVENTION_NOTE[convention]
    if convention == "ideal" and attention == "eager":  # the rows then hold the softmax output (activations/rows.py)
        note = note.replace(FUSED_ATTENTION, UNFUSED_ATTENTION)
    if convention == "eager":  # which SDPA kernel and dropout masks the rows follow (eager/dropout.py)
        from stepbill.engine.activations.eager.dropout import kernel_note

        note += f"; {kernel_note(spec, recipe.device, recipe.recompute, attention)}"
    lines["memory.activations"] = Line("memory.activations", time_lines["memory.activations"].value, "bytes",
                                       " + ".join(x.name for x in activ) or "0", {},
                                       convention=f"{note}; at the forward peak")
    lines["checkpoint.bytes"] = _sum_line("checkpoint.bytes", ckpt)
    lines["checkpoint.weights_export"] = export_line(inv, recipe)
    lines.update(_flops_part(spec, without_layout(recipe), convention, attention))
    lines.update(_recipe_lines(inv, recipe))
    if gpu_mem_bytes:
        for key in ("memory.resident", "memory.peak"):
            total = lines[key].value
            lines[f"cards.{key.split('.')[1]}"] = Line(
                f"cards.{key.split('.')[1]}", cards_needed(total, gpu_mem_bytes), "cards",
                "ceil({bytes} B / {card} B per card)", {"bytes": int(total), "card": int(gpu_mem_bytes)})
    rows = {kind: act.layer_rows(spec, kind, a_bytes, convention, attention, recipe.lora)
            for kind in act.layer_kinds(spec)}
    return resident, timeline, activ, ckpt, lines, rows


@lru_cache(maxsize=512)
def _flops_part(spec: ModelSpec, one_gpu: Recipe, convention: str, attention: str) -> dict[str, Line]:
    """The bill's FLOPs lines (one micro-batch): they read no field of the layout (`one_gpu` is
    `without_layout(recipe)`). Shared: read them, never change them."""
    inv = param_inventory(spec)
    a_bytes, plan, _, _ = _convention_terms(spec, one_gpu, convention, attention)
    lora = None if one_gpu.lora is None else lora_step_terms(spec, inv, one_gpu.lora, one_gpu.seq_len,
                                                               one_gpu.micro_batch, plan.policy.kind in ("full", "every"))
    return flops_lines(spec, one_gpu.seq_len, one_gpu.micro_batch, inv.active, plan.recompute_flops(True),
                       plan.recompute_flops(False), _flops_attention(spec, a_bytes, convention, attention, one_gpu.device),
                       plan.recompute_flops_square(), matmul_params(spec, inv), lora)


def _step_time(spec: ModelSpec, core: _Core, recipe: Recipe, worst: RankClass, collectives: list[Collective], gpu: GPU,
               efficiency: float | None, convention: str, attention: str) -> StepTime:
    flops = _flops_part(spec, without_layout(recipe), convention, attention)
    offloaded = offloaded_rank(recipe, convention, worst, lambda: max(
        make_bill(spec, recipe, None, "eager", attention).ranks, key=lambda c: c.memory["peak"]))
    return step_time(spec, core.inv, recipe, worst, collectives, gpu, flops, efficiency, plan=core.plan,
                     offloaded=offloaded)


def offloaded_rank(recipe: Recipe, convention: str, worst: RankClass, eager_worst: Callable[[], RankClass]
                   ) -> tuple[RankClass, str] | None:
    """The rank class whose kept activations activation offload moves over PCIe, and its convention: the eager
    convention's worst class (`eager_worst()`: what autograd saves, each saved tensor once, as an offload hook such
    as torch.autograd.graph.save_on_cpu moves it; the ideal and megatron conventions leave tensors out), so the step
    time does not depend on the convention the bill is shown in; the bill's own `worst` where the model has no eager
    bill. None without activation offload."""
    if not recipe.parallel.offload_activations:
        return None
    if convention == "eager":
        return worst, "eager"
    try:
        return eager_worst(), "eager"
    except StepbillError:
        return worst, convention


def _time_inputs(spec: ModelSpec, recipe: Recipe, gpu: GPU, convention: str, attention: str
                 ) -> tuple[_Core, list[Collective], dict[str, Line]]:
    """What make_bill's step time reads besides the judged rank: the core, the collectives, the FLOPs lines
    (engine/bill_parts.py times a rank with them without making the bill)."""
    core = _core(spec, recipe, convention, attention, gpu)
    collectives = step_collectives(spec, recipe, core.inv, gpu, core.plan.rerun)
    return core, collectives, _flops_part(spec, without_layout(recipe), convention, attention)


def make_bill(spec: ModelSpec, recipe: Recipe, gpu_mem_bytes: float | None = None, convention: str = "ideal",
              attention: str = "sdpa", gpu: GPU | None = None, efficiency: float | None = DEFAULT_EFFICIENCY) -> Bill:
    """The bill of one training step of `spec` under `recipe`: global lines (one micro-batch, as if one rank held
    it all), the per-rank classes of `recipe.parallel`, the step's collectives, and with a `gpu` the step time."""
    core = _core(spec, recipe, convention, attention, gpu)
    inv, plan, eager = core.inv, core.plan, core.eager
    resident, timeline, activ, ckpt, lines, rows = _one_gpu_part(
        spec, without_layout(recipe, recipe.parallel.micro_batches), convention, attention, gpu_mem_bytes)
    resident, activ, ckpt, lines, rows = list(resident), list(activ), list(ckpt), dict(lines), dict(rows)
    one = SingleRank(spec, recipe, inv, plan, timeline, eager, convention, attention, lines, resident, activ,
                     core.outside_rows)
    ranks = rank_classes(one)
    collectives = step_collectives(spec, recipe, inv, gpu, plan.rerun)
    timing = None
    if gpu is not None:
        worst = max(ranks, key=lambda c: c.memory["peak"])
        timing = _step_time(spec, core, recipe, worst, collectives, gpu, efficiency, convention, attention)
    return Bill(spec, recipe, inv, lines, resident, activ, ckpt, rows, convention, timeline, plan, attention,
                ranks, collectives, timing, gpu, eager)


def _recipe_lines(inv: ParamInventory, recipe: Recipe) -> dict[str, Line]:
    """What a quantised or fp8 recipe adds to the bill's lines: its transient, what is fp8, what is left out."""
    p = recipe.precision
    out: list[Line] = []
    if p.quant is not None:
        out += [quant.dequant_transient_line(inv), quant.upcast_note(inv, p)]
    if p.fp8 is not None:
        out += fp8.recipe_lines(inv, p)
    return {x.name: x for x in out}
