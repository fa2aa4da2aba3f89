"""What a bill's peak moment holds, item by item (they sum to memory.peak), and when it happens: read off a made
Bill by the report and the API."""

from __future__ import annotations

from stepbill.engine.bill import Bill
from stepbill.engine.line import Line
from stepbill.engine.memory.optimizer_step import step_counter_text
from stepbill.engine.states import is_model_item

EXTRA_PEAK_ITEMS = {
    "inputs": "input ids (int64) and module buffers",
    "temporaries": "backward / optimizer temporaries",
    "autocast_cache": "autocast's bf16 weight copies",
    "dequant": "one 4-bit Linear's dequantised bf16 copy (QLoRA)",
}


def peak_items(bill: Bill) -> list[Line]:
    """The items at the peak moment; they sum to memory.peak exactly."""
    assert bill.timeline is not None
    peak = bill.timeline.peak
    items = [x for x in bill.resident_items if x.name != "grads"]
    items.append(Line("grads", peak.items["grads"], "bytes", "gradients that exist at {moment}",
                      {"moment": peak.label}))
    items.append(Line("activations", peak.items["activations"], "bytes", "activations alive at {moment}",
                      {"moment": peak.label}))
    for name, what in EXTRA_PEAK_ITEMS.items():
        if peak.items.get(name):
            items.append(Line(name, peak.items[name], "bytes", what + " at {moment}", {"moment": peak.label},
                              convention="eager"))
    if "optimizer" in peak.items:  # eager: the optimizer item also holds the optimizer's step counters
        extra = peak.items["optimizer"] - round(sum(x.value for x in bill.resident_items
                                                    if not is_model_item(x.name)))
        if extra:
            what = step_counter_text(bill.recipe.optimizer)[2]
            items.append(Line("optimizer.step_counters", extra, "bytes", what, {}, convention="eager"))
    rounded = [Line(x.name, round(x.value), x.unit, x.formula, x.inputs, x.provenance, x.convention) for x in items]
    return rounded


def peak_phase(bill: Bill) -> str:
    """When the peak happens: forward, backward or optimizer."""
    assert bill.timeline is not None
    return bill.timeline.peak.phase
