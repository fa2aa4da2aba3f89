"""Memory through one step, item by item: forward layer by layer, backward layer by layer, optimizer step.

Definitions (the same moments issue 4's `check` measures with MemTracker):
- weights and the optimizer side (master copy + states) are alive the whole step;
- gradients do not exist at the start (zero_grad(set_to_none=True) after the previous step); a layer's
  weight gradients appear during its backward, while its activations are still alive; the LM head's
  first, the embedding's last (tied embeddings: with the LM head);
- activations follow the recompute plan (recompute.py): a layer's dropped tensors exist while its forward
  runs and again while its backward runs; everything is freed by the end of the backward;
- the optimizer step holds weights + grads + states (fused-kernel convention: no temporaries).

The peak is the largest total over these moments; `peak_forward` / `peak_backward` the largest within each
phase; `activations` the activation bytes at the forward peak. Summing curves of different shapes, the
total's peak need not sit on any single item's peak — so the dominant item at the peak is reported with the
seed's advice (activations → recompute / context parallel; states → ZeRO / FSDP).

Every rank's timeline comes from the same builder: `RankView` says what one rank holds (its weights, optimizer
states, gradient shares, which ends of the model, micro-batches in flight, the layout's buffers); the plan and
the eager terms it is given are already the rank's (rows divided by their Split). The one-GPU bill is world
size 1 of the same code (engine/parallel.one_gpu_timeline).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from stepbill.engine.kinds import Part, Phase
from stepbill.engine.line import Line
from stepbill.engine.memory.eager import EagerTerms
from stepbill.engine.recompute import RecomputePlan

ADVICE = {
    "temporaries": "temporaries dominate (logits' gradients, optimizer update): chunk the loss, use a fused "
    "optimizer",
    "inputs": "inputs dominate: shorten the micro-batch",
    "autocast_cache": "autocast's bf16 weight copies dominate: keep bf16 weights (pure-bf16 or mixed-bf16)",
    "activations": "activations dominate: recompute (stepbill recompute MODEL) or context parallelism",
    "optimizer": "optimizer states dominate: shard them (ZeRO-1/2/3, FSDP)",
    "weights": "weights dominate: shard parameters (ZeRO-3 / FSDP) or lower their precision",
    "grads": "gradients dominate: shard them (ZeRO-2/3, FSDP)",
    "dequant": "the dequantised copy of a 4-bit Linear dominates: smaller Linears or a fused 4-bit GEMM",
    "buffers": "the layout's buffers dominate (gathered parameters, reduce-scatter input, buckets): smaller "
    "FSDP units or fewer in flight",
}


@dataclass(frozen=True)
class Moment:
    """One instant of the step: bytes of each item (integers) and their total. Its identity is typed (phase,
    part, layer index); `label` is for display only."""

    phase: Phase
    part: Part
    items: dict[str, int]
    layer: int | None = None  # the layer index for layer parts
    kind: str | None = None  # the layer's kind ("dense" / "moe"), for the label
    total: int = field(init=False, compare=False)  # summed once: the peaks compare it many times

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", sum(self.items.values()))

    @property
    def dominant(self) -> str:
        return max(self.items, key=lambda k: self.items[k])

    @cached_property
    def label(self) -> str:
        """Display text, e.g. "backward, layer 11 (dense)"; never used as a key."""
        part = self.part
        if part is Part.STEP:
            return "optimizer step"
        if self.layer is None:
            return f"{self.phase.value}, {part.value}"
        where = f"layer {self.layer} ({self.kind})"
        if part is Part.LAYER:
            return f"{self.phase.value}, {where}"
        if part is Part.LAYER_INNER:
            return f"{self.phase.value}, inside {where}"
        if part is Part.LAYER_NORM:
            return f"{self.phase.value}, {where}, FFN input norm"
        return f"{self.phase.value}, {where} {part.value}"


@dataclass(frozen=True)
class Timeline:
    moments: tuple[Moment, ...]

    @cached_property
    def _peaks(self) -> dict[Phase | None, Moment]:
        """The first moment of the largest total overall (key None) and per phase, in one pass."""
        best: dict[Phase | None, Moment] = {}
        for m in self.moments:
            for key in (None, m.phase):
                if key not in best or m.total > best[key].total:  # first of equal totals: the earliest
                    best[key] = m
        return best

    @property
    def peak(self) -> Moment:
        return self._peaks[None]

    @property
    def peak_forward(self) -> Moment:
        return self._peaks[Phase.FORWARD]

    @property
    def peak_backward(self) -> Moment:
        return self._peaks[Phase.BACKWARD]

    @property
    def peak_optimizer(self) -> Moment:
        return self._peaks[Phase.OPTIMIZER]

    @cached_property
    def _index(self) -> dict[tuple[Phase, Part, int | None], list[Moment]]:
        index: dict[tuple[Phase, Part, int | None], list[Moment]] = {}
        for m in self.moments:
            index.setdefault((m.phase, m.part, m.layer), []).append(m)
        return index

    def find(self, phase: Phase, part: Part, layer: int | None = None) -> list[Moment]:
        """The moments of one typed identity, in step order."""
        return self._index.get((phase, part, layer), [])

    @property
    def advice(self) -> str:
        return ADVICE[self.peak.dominant]

    def lines(self) -> dict[str, Line]:
        peak, fwd, bwd = self.peak, self.peak_forward, self.peak_backward
        note = "timeline peak: weights + optimizer states always, grads from the backward, activations per plan"
        return {
            "memory.peak": Line("memory.peak", peak.total, "bytes", "largest total over the step, at {moment}",
                                {"moment": peak.label, **peak.items}, convention=note),
            "memory.peak_forward": Line("memory.peak_forward", fwd.total, "bytes", "largest total in the forward, "
                                        "at {moment}", {"moment": fwd.label, **fwd.items}),
            "memory.peak_backward": Line("memory.peak_backward", bwd.total, "bytes", "largest total in the "
                                         "backward, at {moment}", {"moment": bwd.label, **bwd.items}),
            "memory.activations": Line("memory.activations",
                                       fwd.items["activations"] + fwd.items.get("autocast_cache", 0), "bytes",
                                       "activations alive at the forward peak ({moment})", {"moment": fwd.label},
                                       convention=note),
        }


#: The layout's own buffers alive at a moment (bytes), given the moment's phase, part and layer index.
Buffers = Callable[[Phase, Part, "int | None"], int]


@dataclass(frozen=True)
class RankView:
    """What one rank holds through the step, in bytes; the timeline builder's input besides the rank's plan.

    `grads_layers[i]` is the gradient share appearing with the backward of the i-th layer of the plan's order
    (the rank's stage); `grads_resting` the gradients alive before the backward starts (earlier micro-batches'
    accumulated gradients). `first` / `last`: the rank holds the embedding / the LM head (pipeline ends).
    `in_flight_bytes`: other micro-batches' kept activations alive on the stage (pipeline schedules).
    """

    weights: int
    optimizer: int
    grads_head: int
    grads_layers: tuple[int, ...]
    grads_embed: int
    grads_resting: int = 0
    first: bool = True
    last: bool = True
    in_flight_bytes: int = 0
    buffers: Buffers | None = None


def rank_timeline(view: RankView, plan: RecomputePlan, outside: float = 0,
                  eager: EagerTerms | None = None) -> Timeline:
    """The moments of one rank: `plan`, `outside` and `eager` are the rank's own (see RankView)."""
    moments = _eager_moments(view, plan, outside, eager) if eager is not None else _ideal_moments(view, plan, outside)
    return Timeline(tuple(moments))


def _with_buffers(items: dict[str, int], buffers: Buffers | None, phase: Phase, part: Part,
                  layer: int | None) -> dict[str, int]:
    """A moment's items with the layout's buffers at that moment added last (each moment is built once)."""
    if buffers is not None:
        items["buffers"] = buffers(phase, part, layer)
    return items


def _ideal_moments(view: RankView, plan: RecomputePlan, outside: float) -> list[Moment]:
    flight = view.in_flight_bytes

    def at(phase: Phase, part: Part, grads: int, activations: float, layer: int | None = None) -> Moment:
        kind = plan.order[layer] if layer is not None else None
        live = activations + (flight if phase is not Phase.OPTIMIZER else 0)
        items = {"weights": view.weights, "optimizer": view.optimizer, "grads": grads, "activations": round(live)}
        return Moment(phase, part, _with_buffers(items, view.buffers, phase, part, layer), layer, kind)

    fwd, bwd = plan.forward_live(), plan.backward_live()
    kept = plan.kept_after_forward()
    head_out = outside if view.last else 0
    moments = [at(Phase.FORWARD, Part.LAYER, view.grads_resting, fwd[i], i) for i in range(len(plan.order))]
    if view.last:
        moments.append(at(Phase.FORWARD, Part.HEAD, view.grads_resting, kept + head_out))
    grads = view.grads_resting + view.grads_head
    if view.last:
        moments.append(at(Phase.BACKWARD, Part.HEAD_BACKWARD, grads, kept + head_out))
    for i in reversed(range(len(plan.order))):
        grads += view.grads_layers[i]
        moments.append(at(Phase.BACKWARD, Part.LAYER, grads, bwd[i], i))
    grads += view.grads_embed
    if view.first:
        moments.append(at(Phase.BACKWARD, Part.EMBEDDING, grads, 0))
    moments.append(at(Phase.OPTIMIZER, Part.STEP, grads, 0))
    return moments


def _eager_moments(view: RankView, plan: RecomputePlan, outside: float, e: EagerTerms) -> list[Moment]:
    """The eager convention's moments: as the ideal ones, plus inputs, logits, loss and LM head gradients,
    the largest moment inside each layer's backward, optimizer temporaries and amp's weight-cast cache."""
    flight = view.in_flight_bytes
    casts = [e.cast_layer.get(k, 0) - (e.lora_first_cast if i == 0 and view.first else 0)
             for i, k in enumerate(plan.order)]
    cast_head = e.cast_head if view.last else 0
    # A checkpointed layer saves nothing in its forward (its rows, fixed ones and weight casts included); its
    # backward rebuilds them. Otherwise its fixed rows and casts live from its forward to its backward.
    ckpt = plan.policy.kind in ("full", "every")
    fixed = [0 if ckpt else e.layer_fixed.get(k, 0) for k in plan.order]
    # LoRA: a checkpointed layer's forward leaves only the adapters' casts in autocast's cache (lora_cast_layer)
    fwd_casts = [e.lora_cast_layer.get(k, c) for k, c in zip(plan.order, casts, strict=True)] if ckpt else casts
    cast_all = sum(fwd_casts) + cast_head

    def at(phase: Phase, part: Part, grads: int, activations: float, temporaries: int = 0, cast: int = 0,
           layer: int | None = None) -> Moment:
        kind = plan.order[layer] if layer is not None else None
        live = activations + (flight if phase is not Phase.OPTIMIZER else 0)
        items = {"weights": view.weights, "optimizer": view.optimizer, "grads": grads, "activations": round(live),
                 "inputs": e.constant, "temporaries": temporaries, "autocast_cache": cast}
        return Moment(phase, part, _with_buffers(items, view.buffers, phase, part, layer), layer, kind)

    resting = view.grads_resting
    embed_out = e.lora_embed_out if view.first else 0  # LoRA: the embedding output, named in the model's forward
    bwd = plan.backward_live()
    kept, cast, fix = 0.0, 0, 0
    moments = []
    for i, k in enumerate(plan.order):
        kept += plan.kept_bytes(i) * plan.tokens
        cast += fwd_casts[i]
        fix += fixed[i]
        if ckpt and e.layer_inner.get(k, 0):
            moments.append(at(Phase.FORWARD, Part.LAYER_INNER, resting, kept + fix + e.embed_locals
                              + e.layer_inner[k], cast=cast, layer=i))
        moments.append(at(Phase.FORWARD, Part.LAYER, resting, kept + fix + embed_out, cast=cast, layer=i))
    saved = plan.kept_after_forward() + (outside if view.last else 0) + fix
    # autocast's cache is cleared when the forward leaves autocast: what remains is what graphs saved.
    cast = cast_all if not ckpt else cast_head
    # LoRA under amp: layer 0's adapter A casts, cached but saved by nothing, go with the autocast cache
    cast -= e.lora_first_a_cast if view.first and not ckpt else 0
    if view.last:
        # the embedding output is no longer named once the decoder's forward returned (LoRA: the final norm's
        # output, which the frozen head does not save, is in forward_end instead)
        moments.append(at(Phase.FORWARD, Part.HEAD, resting, saved + e.forward_end, cast=cast_all))
        moments.append(at(Phase.BACKWARD, Part.LOSS, resting, saved + e.loss_act, e.loss_temp, cast))
        moments.append(at(Phase.BACKWARD, Part.HEAD_BACKWARD, resting, saved + e.head_act, e.head_temp, cast))
    cast -= cast_head
    grads = resting + view.grads_head
    for i in reversed(range(len(plan.order))):
        k = plan.order[i]
        mine = casts[i] if ckpt else 0  # the recomputed forward casts this layer's weights again
        live = bwd[i] + e.rope + fix + (e.layer_fixed.get(k, 0) if ckpt else 0)
        moments.append(at(Phase.BACKWARD, Part.LAYER, grads + e.layer_grad.get(k, 0), live + e.layer_act.get(k, 0),
                          e.layer_temp.get(k, 0), cast + mine, layer=i))
        if e.norm_temp:
            moments.append(at(Phase.BACKWARD, Part.LAYER_NORM, grads + e.norm_grad.get(k, 0),
                              live + e.norm_act.get(k, 0), e.norm_temp, cast + mine, layer=i))
        grads += view.grads_layers[i]
        fix -= fixed[i]
        cast -= 0 if ckpt else casts[i]
    grads += view.grads_embed
    if view.first:
        moments.append(at(Phase.BACKWARD, Part.EMBEDDING, grads, 0))
    moments.append(at(Phase.OPTIMIZER, Part.STEP, grads, 0, e.optimizer_temp))
    return moments
