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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from stepbill.engine.line import Line
from stepbill.engine.params import ParamInventory
from stepbill.engine.recompute import RecomputePlan
from stepbill.engine.transients import EagerTerms

ITEMS = ("weights", "optimizer", "grads", "activations")
ADVICE = {
    "temporaries": "temporaries dominate (logits' gradients, optimizer update): chunk the loss, use a fused "
    "optimizer",
    "inputs": "inputs dominate: shorten the micro-batch",
    "autocast_cache": "autocast's bf16 weight copies dominate: keep bf16 weights (pure-bf16 or mixed-bf16)",
    "activations": "activations dominate: recompute (stepbill recompute MODEL) or context parallelism",
    "optimizer": "optimizer states dominate: shard them (ZeRO-1/2/3, FSDP)",
    "weights": "weights dominate: shard parameters (ZeRO-3 / FSDP) or lower their precision",
    "grads": "gradients dominate: shard them (ZeRO-2/3, FSDP)",
}


@dataclass(frozen=True)
class Moment:
    """One instant of the step: bytes of each item (integers) and their total."""

    phase: str  # "forward" | "backward" | "optimizer"
    label: str
    items: dict[str, int]
    total: int = field(init=False, compare=False)  # summed once: the peaks compare it many times

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", sum(self.items.values()))

    @property
    def dominant(self) -> str:
        return max(self.items, key=lambda k: self.items[k])


@dataclass(frozen=True)
class Timeline:
    moments: tuple[Moment, ...]

    @cached_property
    def _peaks(self) -> dict[str | None, Moment]:
        """The first moment of the largest total overall (key None) and per phase, in one pass."""
        best: dict[str | None, Moment] = {}
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
        return self._peaks["forward"]

    @property
    def peak_backward(self) -> Moment:
        return self._peaks["backward"]

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


def _grad_shares(inventory: ParamInventory, grads_total: int, order: tuple[str, ...]) -> tuple[int, list[int], int]:
    """Grad bytes appearing with the LM head (+ final norm, + tied embedding), per layer, and with the
    embedding, split in proportion to parameters (exact for full training; LoRA adapters spread alike)."""
    total = inventory.total
    per_kind: dict[str, int] = {}
    head = embed = 0
    for t in inventory.tensors:
        if t.layer_kind:
            per_kind[t.layer_kind] = per_kind.get(t.layer_kind, 0) + t.total
        elif t.component == "embedding":
            embed += t.total
        else:
            head += t.total
    counts = {k: order.count(k) for k in per_kind}

    def share(params: float) -> int:
        return round(grads_total * params / total)

    layers = [share(per_kind[k] / counts[k]) for k in order]
    head_bytes = share(head)
    return head_bytes, layers, grads_total - head_bytes - sum(layers)


def build_timeline(inventory: ParamInventory, resident: list[Line], plan: RecomputePlan,
                   tied_embeddings: bool = False, outside: float = 0, eager: EagerTerms | None = None) -> Timeline:
    """The moments of one step (forward L layers, LM head, backward L layers, embedding, optimizer).
    `outside`: activation bytes kept outside the layers (eager: final norm, LM head input, fp32 loss),
    alive from the LM head's forward to its backward. `eager`: the transients eager PyTorch adds (then the
    moments are those MemTracker sees; see transients.py)."""
    if eager is not None:
        return _eager_timeline(inventory, resident, plan, tied_embeddings, outside, eager)
    weights = round(sum(x.value for x in resident if x.name.startswith("weights")))
    grads_total = round(sum(x.value for x in resident if x.name == "grads"))
    optimizer = round(sum(x.value for x in resident if not x.name.startswith("weights") and x.name != "grads"))
    head, per_layer, embed = _grad_shares(inventory, grads_total, plan.order)
    if tied_embeddings:
        head, embed = head + embed, 0

    def at(phase: str, label: str, grads: int, activations: float) -> Moment:
        return Moment(phase, label, {"weights": weights, "optimizer": optimizer, "grads": grads,
                                     "activations": round(activations)})

    fwd, bwd = plan.forward_live(), plan.backward_live()
    kept = plan.kept_after_forward()
    moments = [at("forward", f"forward, layer {i} ({k})", 0, fwd[i]) for i, k in enumerate(plan.order)]
    moments.append(at("forward", "forward, LM head and loss", 0, kept + outside))
    grads = head
    moments.append(at("backward", "backward, LM head", grads, kept + outside))
    for i in reversed(range(len(plan.order))):
        grads += per_layer[i]
        moments.append(at("backward", f"backward, layer {i} ({plan.order[i]})", grads, bwd[i]))
    grads += embed
    moments.append(at("backward", "backward, embedding", grads, 0))
    moments.append(at("optimizer", "optimizer step", grads, 0))
    return Timeline(tuple(moments))


def _eager_timeline(inventory: ParamInventory, resident: list[Line], plan: RecomputePlan, tied_embeddings: bool,
                    outside: float, e: EagerTerms) -> Timeline:
    """The eager convention's moments: as build_timeline, plus inputs, logits, loss and LM head gradients,
    the largest moment inside each layer's backward, optimizer temporaries and amp's weight-cast cache."""
    weights = round(sum(x.value for x in resident if x.name.startswith("weights")))
    grads_total = round(sum(x.value for x in resident if x.name == "grads"))
    optimizer = round(sum(x.value for x in resident if not x.name.startswith("weights") and x.name != "grads"))
    optimizer += e.step_counters
    head, per_layer, embed = _grad_shares(inventory, grads_total, plan.order)
    if tied_embeddings:
        # the LM head's backward makes the tied token embedding's gradient; learned position embeddings
        # (GPT-2's wpe) get theirs at the embedding's backward
        emb = [x.total for x in inventory.tensors if x.component == "embedding"]
        tokens = sum(x.total for x in inventory.tensors if x.name == "embed_tokens.weight")
        moved = round(embed * tokens / sum(emb)) if sum(emb) else embed
        head, embed = head + moved, embed - moved
    casts = [e.cast_layer.get(k, 0) for k in plan.order]
    cast_all = sum(casts) + e.cast_head
    # A checkpointed layer saves nothing in its forward (its rows, fixed ones and weight casts included); its
    # backward rebuilds them. Otherwise its fixed rows and casts live from its forward to its backward.
    ckpt = plan.policy.kind in ("full", "every")
    fixed = [0 if ckpt else e.layer_fixed.get(k, 0) for k in plan.order]

    def at(phase: str, label: str, grads: int, activations: float, temporaries: int = 0, cast: int = 0) -> Moment:
        return Moment(phase, label, {"weights": weights, "optimizer": optimizer, "grads": grads,
                                     "activations": round(activations), "inputs": e.constant,
                                     "temporaries": temporaries, "autocast_cache": cast})

    bwd = plan.backward_live()
    kept, cast, fix = 0.0, 0, 0
    moments = []
    for i, k in enumerate(plan.order):
        kept += plan.kept_bytes(i) * plan.tokens
        cast += casts[i]
        fix += fixed[i]
        if ckpt and e.layer_inner.get(k, 0):
            moments.append(at("forward", f"forward, inside layer {i} ({k})", 0,
                              kept + fix + e.embed_locals + e.layer_inner[k], cast=cast))
        moments.append(at("forward", f"forward, layer {i} ({k})", 0, kept + fix, cast=cast))
    saved = plan.kept_after_forward() + outside + fix
    moments.append(at("forward", "forward, LM head and loss", 0, saved + e.forward_end, cast=cast_all))
    # autocast's cache is cleared when the forward leaves autocast: what remains is what graphs saved.
    cast = cast_all if not ckpt else e.cast_head
    moments.append(at("backward", "backward, loss (log-softmax gradient)", 0, saved + e.loss_act, e.loss_temp,
                      cast))
    moments.append(at("backward", "backward, LM head", 0, saved + e.head_act, e.head_temp, cast))
    cast -= e.cast_head
    grads = head
    for i in reversed(range(len(plan.order))):
        k = plan.order[i]
        mine = casts[i] if ckpt else 0  # the recomputed forward casts this layer's weights again
        live = bwd[i] + e.rope + fix + (e.layer_fixed.get(k, 0) if ckpt else 0)
        moments.append(at("backward", f"backward, layer {i} ({k}), FFN", grads + e.layer_grad.get(k, 0),
                          live + e.layer_act.get(k, 0), e.layer_temp.get(k, 0), cast + mine))
        if e.norm_temp:
            moments.append(at("backward", f"backward, layer {i} ({k}), FFN input norm",
                              grads + e.norm_grad.get(k, 0), live + e.norm_act.get(k, 0), e.norm_temp,
                              cast + mine))
        grads += per_layer[i]
        fix -= fixed[i]
        cast -= 0 if ckpt else casts[i]
    grads += embed
    moments.append(at("backward", "backward, embedding", grads, 0))
    moments.append(at("optimizer", "optimizer step", grads, 0, e.optimizer_temp))
    return Timeline(tuple(moments))
