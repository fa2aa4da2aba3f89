"""What a quantised or fp8 recipe adds to one rank's step time, as lines step_time adds after its roofline:
QLoRA's dequantisation kernels (engine/quant.py) and, under fp8, the share of the work that stays at the bf16 peak
(engine/fp8.py). Kept apart from engine/steptime.py so any time model can call it."""

from __future__ import annotations

from stepbill.engine import fp8, quant
from stepbill.engine.line import Line
from stepbill.engine.parallel.layout import stage_layer_kinds
from stepbill.engine.params import ParamInventory
from stepbill.spec.hardware import GPU
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import Recipe


def precision_time_lines(spec: ModelSpec, inv: ParamInventory, recipe: Recipe, flops: dict[str, Line], gpu: GPU,
                         efficiency: float, stage: int = 0, attention_timed: bool = False) -> tuple[list[Line], float]:
    """(lines, seconds added to the rank's compute) of the recipe's precision on pipeline `stage` (the busiest).
    `flops` holds the bill's one-micro-batch FLOPs lines. `attention_timed`: the per-op model already timed the
    attention core at the bf16 peak (timing/step.stage_compute), so fp8's bf16 share is the LM head's alone."""
    p, par = recipe.precision, recipe.parallel
    lines: list[Line] = []
    if p.quant is not None:
        recompute_share = flops["flops.recompute"].value / flops["flops.forward"].value
        uses = par.micro_batches * (2 + recompute_share)
        lines.append(quant.dequant_time_line(inv, uses, gpu.hbm_bytes_per_s))
    if p.fp8 is not None:
        fp8.require_fp8(p, gpu)
        kinds = stage_layer_kinds(spec, par)[stage]
        layer_share = sum(kinds.values()) / spec.n_layers
        passes = 3  # forward + input gradient + weight gradient (the attention core's backward is 2× its forward)
        attention = 0.0 if attention_timed else passes * flops["flops.attention"].value * layer_share
        head_passes = passes - (1 if recipe.lora is not None else 0)  # a frozen LM head has no weight gradient
        head = head_passes * flops["flops.lm_head"].value if stage == par.pp - 1 else 0.0
        bf16_flops = (attention + head) * par.micro_batches / (par.tp * par.cp)
        lines.append(fp8.bf16_share_line(bf16_flops, gpu, efficiency, attention_timed))
    return lines, sum(x.value for x in lines)
