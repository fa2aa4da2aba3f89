"""QLoRA's dequantisation transient on the timeline: one Linear's bf16 copy inside each layer (engine/quant.py)."""

from __future__ import annotations

from stepbill.engine.kinds import Part, Phase
from stepbill.engine.memory.timeline import Moment, Timeline

DEQUANT_PARTS = (Part.LAYER, Part.LAYER_INNER, Part.LAYER_NORM)


def with_dequant(timeline: Timeline, transient_bytes: int) -> Timeline:
    """`timeline` with the dequantised bf16 copy of one Linear (`transient_bytes`, item "dequant") alive at every
    moment inside a layer's forward or backward: a layer's forward end is its last matmul (the FFN's down
    projection), its backward runs one Linear's input gradient at a time."""
    if not transient_bytes:
        return timeline
    return Timeline(tuple(
        Moment(m.phase, m.part, {**m.items, "dequant": transient_bytes}, m.layer, m.kind)
        if m.part in DEQUANT_PARTS and m.phase is not Phase.OPTIMIZER else m for m in timeline.moments))
