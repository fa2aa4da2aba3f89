"""Assemble the bill of one training step from the engine's lines."""

from __future__ import annotations

from dataclasses import dataclass, field

from stepbill.engine import activations as act
from stepbill.engine.comm_step import Collective, step_collectives
from stepbill.engine.line import Line
from stepbill.engine.parallel import RankClass, rank_classes
from stepbill.engine.params import ParamInventory, param_inventory
from stepbill.engine.states import (
    cards_needed,
    checkpoint_lines,
    is_model_item,
    resident_lines,
    trainable_split,
)
from stepbill.engine.time import DEFAULT_EFFICIENCY, StepTime, step_time
from stepbill.errors import unknown_name
from stepbill.spec.hardware import GPU
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import Recipe

GIB = 2**30
CONVENTION_NOTE = (
    "ideal convention (the seed's): each kept tensor once, fused attention (no S×S scores), no logits, "
    "no dropout masks; peak = resident state + activations at the end of the forward"
)


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
    ranks: list[RankClass] = field(default_factory=list)  # one class per distinct pipeline stage
    collectives: list[Collective] = field(default_factory=list)  # per rank, per step
    time: StepTime | None = None  # only with a GPU
    gpu: GPU | None = None

    @property
    def worst_rank(self) -> RankClass:
        """The rank class with the highest peak."""
        return max(self.ranks, key=lambda c: c.memory["peak"])

    def __getitem__(self, name: str) -> Line:
        return self.lines[name]


def _sum_line(name: str, parts: list[Line], unit: str = "bytes", note: str = "") -> Line:
    names = " + ".join(p.name for p in parts) or "0"
    return Line(name, sum(p.value for p in parts), unit, names, {}, convention=note)


def activation_lines(spec: ModelSpec, recipe: Recipe, convention: str = "ideal") -> list[Line]:
    """Activation bytes of the whole micro-batch: per layer kind, or the full-recompute kept set."""
    a_bytes, tokens = recipe.precision.activation, recipe.tokens
    if recipe.recompute == "full":
        kept = spec.n_layers * spec.hidden_size * a_bytes * tokens
        working = max(act.layer_bytes_per_token(spec, k, a_bytes, convention) for k in act.layer_kinds(spec)) * tokens
        return [
            Line("activations.layer_inputs", kept, "bytes", "{layers} layers × {hidden} × {bytes} B × {tokens} tokens",
                 {"layers": spec.n_layers, "hidden": spec.hidden_size, "bytes": a_bytes, "tokens": tokens}),
            Line("activations.working_set", working, "bytes",
                 "one layer rebuilt during its backward: {width_bytes} B/token × {tokens} tokens",
                 {"width_bytes": working // tokens, "tokens": tokens}),
        ]
    lines = []
    for kind, n_layers in act.layer_kinds(spec).items():
        per_token = act.layer_bytes_per_token(spec, kind, a_bytes, convention)
        lines.append(Line(f"activations.{kind}_layers", n_layers * per_token * tokens, "bytes",
                          "{layers} layers × {per_token} B/token × {tokens} tokens",
                          {"layers": n_layers, "per_token": per_token, "tokens": tokens}))
    return lines


def make_bill(spec: ModelSpec, recipe: Recipe, gpu_mem_bytes: float | None = None, convention: str = "ideal",
              gpu: GPU | None = None, efficiency: float = DEFAULT_EFFICIENCY) -> Bill:
    """The bill of one training step of `spec` under `recipe`: global lines (one micro-batch, as if one rank held
    it all), the per-rank classes of `recipe.parallel`, the step's collectives, and with a `gpu` the step time."""
    if convention not in act.CONVENTIONS:
        raise unknown_name("convention", convention, act.CONVENTIONS)
    inv = param_inventory(spec)
    split = trainable_split(inv, recipe.lora)
    resident = resident_lines(inv, recipe)
    activ = activation_lines(spec, recipe, convention)
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
    lines["memory.model"] = _sum_line("memory.model", model_side, note="weights + grads")
    lines["memory.resident"] = _sum_line("memory.resident", resident)
    lines["memory.activations"] = _sum_line("memory.activations", activ, note=CONVENTION_NOTE)
    peak = Line("memory.peak", lines["memory.resident"].value + lines["memory.activations"].value, "bytes",
                "memory.resident + memory.activations", {}, convention=CONVENTION_NOTE)
    lines["memory.peak"] = peak
    lines["checkpoint.bytes"] = _sum_line("checkpoint.bytes", ckpt)
    if gpu_mem_bytes:
        for key in ("memory.resident", "memory.peak"):
            total = lines[key].value
            lines[f"cards.{key.split('.')[1]}"] = Line(
                f"cards.{key.split('.')[1]}", cards_needed(total, gpu_mem_bytes), "cards",
                "ceil({bytes} B / {card} B per card)", {"bytes": int(total), "card": int(gpu_mem_bytes)})
    rows = {kind: act.layer_rows(spec, kind, recipe.precision.activation, convention) for kind in act.layer_kinds(spec)}
    ranks = rank_classes(spec, recipe, inv, convention)
    collectives = step_collectives(spec, recipe, inv, gpu)
    timing = None
    if gpu is not None:
        worst = max(ranks, key=lambda c: c.memory["peak"])
        timing = step_time(spec, inv, recipe, worst, collectives, gpu, efficiency)
    return Bill(spec, recipe, inv, lines, resident, activ, ckpt, rows, convention, ranks, collectives, timing, gpu)


def peak_phase(bill: Bill) -> str:
    """When the peak happens under the bill's convention."""
    return "end of forward"
