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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

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


#: One moment before it is made a Moment: (phase, part, layer, kind, item bytes in the timeline's key order).
Row = tuple[Phase, Part, "int | None", "str | None", tuple[int, ...]]


@dataclass(frozen=True)
class Timeline:
    """The moments of one step. Built from rows (`from_rows`), a Moment object is made only when it is read: the
    peaks read three, the planner reads nothing else; `moments` makes them all (the same objects the peaks are)."""

    _moments: tuple[Moment, ...] | None = None
    _keys: tuple[str, ...] = field(default=(), repr=False)
    _rows: Sequence[Row] = field(default=(), repr=False)  # a tuple, or a template's rows (_InFlightRows)
    _totals: tuple[int, ...] = field(default=(), repr=False)  # Moment.total of each row
    _phases: dict[Phase, Sequence[int]] | None = field(default=None, repr=False, compare=False)  # rows of each phase

    @classmethod
    def from_rows(cls, keys: tuple[str, ...], rows: list[Row] | Sequence[Row], totals: list[int] | None = None,
                  phases: dict[Phase, Sequence[int]] | None = None) -> Timeline:
        """A timeline whose moment i has items dict(zip(keys, rows[i][4])) (made on demand); `totals` (each row's
        sum, in its order) and `phases` (row indices of each phase) when the builder has them already."""
        if totals is None:
            totals = [sum(row[4]) for row in rows]  # Moment.total: the same numbers summed in the same order
        return cls(None, keys, tuple(rows) if isinstance(rows, list) else rows, tuple(totals), phases)

    @cached_property
    def _made(self) -> dict[int, Moment]:
        return {}

    def _moment(self, index: int) -> Moment:
        made = self._made
        if index not in made:
            phase, part, layer, kind, values = self._rows[index]
            made[index] = Moment(phase, part, dict(zip(self._keys, values, strict=True)), layer, kind)
        return made[index]

    @cached_property
    def moments(self) -> tuple[Moment, ...]:
        if self._moments is not None:
            return self._moments
        return tuple(self._moment(i) for i in range(len(self._rows)))

    @cached_property
    def _peaks(self) -> dict[Phase | None, Moment]:
        """The first moment of the largest total overall (key None) and per phase, in one pass (built from moments
        given whole; a timeline built from rows makes each peak's Moment when it is read: `_peak`)."""
        best: dict[Phase | None, Moment] = {}
        for m in self.moments:
            for key in (None, m.phase):
                if key not in best or m.total > best[key].total:  # first of equal totals: the earliest
                    best[key] = m
        return best

    @cached_property
    def _peak_rows(self) -> dict[Phase | None, int]:
        """The row index of each peak (`_peaks`' moments) of a timeline built from rows: the first of equal totals."""
        rows, totals = self._rows, self._totals
        peaks = {None: totals.index(max(totals))}  # index: the first of equal totals
        by_phase = self._phases
        if by_phase is None:
            by_phase = {}
            for i, row in enumerate(rows):
                by_phase.setdefault(row[0], []).append(i)
        for phase, indices in by_phase.items():
            if isinstance(indices, range) and indices.step == 1:  # a run of rows: the first largest in a slice
                run = totals[indices.start:indices.stop]
                peaks[phase] = indices.start + run.index(max(run))
            else:
                peaks[phase] = max(indices, key=totals.__getitem__)
        return peaks

    def _peak(self, key: Phase | None) -> Moment:
        if self._moments is not None:
            return self._peaks[key]
        return self._moment(self._peak_rows[key])

    @property
    def peak(self) -> Moment:
        return self._peak(None)

    def peak_value(self, phase: Phase | None = None, item: str | None = None) -> int:
        """Bytes of the peak moment (`phase` None: the step's, else that phase's): its total, or one item's (0 where
        the timeline has no such item) — the peak Moment's numbers, without making the Moment."""
        if self._moments is not None:
            moment = self._peaks[phase]
            return moment.total if item is None else moment.items.get(item, 0)
        index = self._peak_rows[phase]
        if item is None:
            return self._totals[index]
        if index in self._made:  # the Moment is made already
            return self._made[index].items.get(item, 0)
        keys = self._keys
        return self._rows[index][4][keys.index(item)] if item in keys else 0

    @property
    def peak_forward(self) -> Moment:
        return self._peak(Phase.FORWARD)

    @property
    def peak_backward(self) -> Moment:
        return self._peak(Phase.BACKWARD)

    @property
    def peak_optimizer(self) -> Moment:
        return self._peak(Phase.OPTIMIZER)

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
    `grads_offloaded`: a layer's share leaves the GPU once made (optimizer offload: DeepSpeed ZeRO-Offload's
    copy_grads_in_partition sets `param.grad = None` after the copy to its host buffer; FSDP2's CPUOffloadPolicy frees
    the GPU shard after the reduce-scatter's D2H copy) — a layer's backward holds its own share, the layers' shares
    do not accumulate; the LM head's and embedding's stay to the end of the backward (FSDP2 reduces the root unit
    last), and none is left at the optimizer step.
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
    grads_offloaded: bool = False


def rank_timeline(view: RankView, plan: RecomputePlan, outside: float = 0,
                  eager: EagerTerms | None = None) -> Timeline:
    """The moments of one rank: `plan`, `outside` and `eager` are the rank's own (see RankView)."""
    flight = view.in_flight_bytes
    rows = eager_moments(view, plan, outside, eager, flight) if eager is not None else \
        ideal_moments(view, plan, outside, flight)
    return Timeline.from_rows(moment_keys(view, eager), rows, None, phase_runs(rows))  # type: ignore[arg-type]


def phase_runs(rows: list[Row] | tuple[TemplateRow, ...]) -> dict[Phase, Sequence[int]]:
    """Row indices of each phase, in order of first appearance: a range when the phase's rows are contiguous (the
    builders' order: forward, backward, optimizer step), else a list."""
    phases = [row[0] for row in rows]
    out: dict[Phase, Sequence[int]] = {}
    for phase in dict.fromkeys(phases):
        first, last = phases.index(phase), len(phases) - 1 - phases[::-1].index(phase)
        out[phase] = range(first, last + 1) if last - first + 1 == phases.count(phase) else \
            [i for i, p in enumerate(phases) if p is phase]
    return out


#: A moment before the other micro-batches' kept activations are added: (phase, part, layer, kind, the items before
#: activations, the activation bytes (unrounded), the items after).
TemplateRow = tuple[Phase, Part, "int | None", "str | None", tuple[int, ...], float, tuple[int, ...]]


def moment_keys(view: RankView, eager: EagerTerms | None) -> tuple[str, ...]:
    keys = EAGER_KEYS if eager is not None else IDEAL_KEYS
    return (*keys, "buffers") if view.buffers is not None else keys  # the layout's buffers, added last


#: The items of a moment, in order (each row's values follow it; "buffers" last when the layout has any).
IDEAL_KEYS = ("weights", "optimizer", "grads", "activations")
EAGER_KEYS = (*IDEAL_KEYS, "inputs", "temporaries", "autocast_cache")


def ideal_moments(view: RankView, plan: RecomputePlan, outside: float,
                   flight: int | None = None) -> list[TemplateRow] | list[Row]:
    """Template rows, or with `flight` (the in-flight bytes) the timeline's rows."""
    weights, optimizer, buffers, order = view.weights, view.optimizer, view.buffers, plan.order
    optimizer_step = Phase.OPTIMIZER

    def at(phase: Phase, part: Part, grads: int, activations: float, layer: int | None = None) -> Any:
        kind = order[layer] if layer is not None else None
        if flight is not None:
            live = round(activations + (flight if phase is not optimizer_step else 0))
            if buffers is None:
                return phase, part, layer, kind, (weights, optimizer, grads, live)
            return phase, part, layer, kind, (weights, optimizer, grads, live, buffers(phase, part, layer))
        tail = () if buffers is None else (buffers(phase, part, layer),)
        return phase, part, layer, kind, (weights, optimizer, grads), activations, tail

    fwd, bwd = plan.forward_live(), plan.backward_live()
    kept = plan.kept_after_forward()
    head_out = outside if view.last else 0
    moments = [at(Phase.FORWARD, Part.LAYER, view.grads_resting, fwd[i], i) for i in range(len(plan.order))]
    if view.last:
        moments.append(at(Phase.FORWARD, Part.HEAD, view.grads_resting, kept + head_out))
    resting, gone = view.grads_resting, view.grads_offloaded
    grads = before = resting + view.grads_head
    if view.last:
        moments.append(at(Phase.BACKWARD, Part.HEAD_BACKWARD, grads, kept + head_out))
    for i in reversed(range(len(plan.order))):
        grads = (before if gone else grads) + view.grads_layers[i]
        moments.append(at(Phase.BACKWARD, Part.LAYER, grads, bwd[i], i))
    grads = (before if gone else grads) + view.grads_embed
    if view.first:
        moments.append(at(Phase.BACKWARD, Part.EMBEDDING, grads, 0))
    moments.append(at(Phase.OPTIMIZER, Part.STEP, resting if gone else grads, 0))
    return moments


def eager_moments(view: RankView, plan: RecomputePlan, outside: float, e: EagerTerms,
                   flight: int | None = None) -> list[TemplateRow] | list[Row]:
    """The eager convention's moments: as the ideal ones, plus inputs, logits, loss and LM head gradients,
    the largest moment inside each layer's backward, optimizer temporaries and amp's weight-cast cache. Template
    rows, or with `flight` (the in-flight bytes) the timeline's rows."""
    casts = [e.cast_layer.get(k, 0) - (e.lora_first_cast if i == 0 and view.first else 0)
             for i, k in enumerate(plan.order)]
    cast_head = e.cast_head if view.last else 0
    # A checkpointed layer saves nothing in its forward (its rows, fixed ones and weight casts included); its
    # backward rebuilds them. Otherwise its fixed rows and casts live from its forward to its backward.
    ckpt = plan.policy.kind in ("full", "every")
    fixed = [0 if ckpt else e.layer_fixed.get(k, 0) for k in plan.order]
    # LoRA: a checkpointed layer's forward leaves only the adapters' casts in autocast's cache (lora_cast_layer)
    fwd_casts = [e.lora_cast_layer.get(k, c) for k, c in zip(plan.order, casts, strict=True)] if ckpt else casts
    # amp: the linear biases' copies, in the cache while the forward runs, saved by no op
    biases = [e.cast_bias.get(k, 0) for k in plan.order]
    fwd_casts = [c + bias for c, bias in zip(fwd_casts, biases, strict=True)]
    cast_all = sum(fwd_casts) + cast_head

    weights, optimizer, buffers, order, constant = view.weights, view.optimizer, view.buffers, plan.order, e.constant
    optimizer_step = Phase.OPTIMIZER

    def at(phase: Phase, part: Part, grads: int, activations: float, temporaries: int = 0, cast: int = 0,
           layer: int | None = None) -> Any:
        kind = order[layer] if layer is not None else None
        if flight is not None:
            live = round(activations + (flight if phase is not optimizer_step else 0))
            if buffers is None:
                return phase, part, layer, kind, (weights, optimizer, grads, live, constant, temporaries, cast)
            return phase, part, layer, kind, (weights, optimizer, grads, live, constant, temporaries, cast,
                                              buffers(phase, part, layer))
        tail = (constant, temporaries, cast) if buffers is None else (constant, temporaries, cast,
                                                                      buffers(phase, part, layer))
        return phase, part, layer, kind, (weights, optimizer, grads), activations, tail

    resting = view.grads_resting
    embed_out = e.lora_embed_out if view.first else 0  # LoRA: the embedding output, named in the model's forward
    bwd = plan.backward_live()
    kept, cast, fix = 0.0, 0, 0
    moments = []
    masks = e.decoder_masks  # named by the decoder's forward while its layers run (eager/masks.decoder_masks)
    for i, k in enumerate(plan.order):
        kept += plan.kept_bytes(i) * plan.tokens
        cast += fwd_casts[i]
        fix += fixed[i]
        if ckpt and e.layer_inner.get(k, 0):
            moments.append(at(Phase.FORWARD, Part.LAYER_INNER, resting, kept + fix + e.embed_locals + masks
                              + e.layer_inner[k], 0, cast, i))
        if not ckpt and (peak := e.attn_fwd.get(k)) and peak.act:  # the attention's largest op (eager_mla)
            moments.append(at(Phase.FORWARD, Part.LAYER_INNER, resting, kept + fix + embed_out + masks + peak.act, 0,
                              cast + peak.casts, i))
        moments.append(at(Phase.FORWARD, Part.LAYER, resting, kept + fix + embed_out + masks, 0, cast, i))
    saved = plan.kept_after_forward() + (outside if view.last else 0) + fix
    # autocast's cache is cleared when the forward leaves autocast: what remains is what graphs saved.
    cast = cast_all - sum(biases) if not ckpt else cast_head
    # LoRA under amp: layer 0's adapter A casts, cached but saved by nothing, go with the autocast cache
    cast -= e.lora_first_a_cast if view.first and not ckpt else 0
    if view.last:
        # the embedding output is no longer named once the decoder's forward returned (LoRA: the final norm's
        # output, which the frozen head does not save, is in forward_end instead)
        # the decoder has returned: of its masks, what the checkpoints hold (and their position ids) remains
        held = e.held_at(None)
        moments.append(at(Phase.FORWARD, Part.HEAD, resting, saved + held + e.forward_end, 0, cast_all))
        moments.append(at(Phase.BACKWARD, Part.LOSS, resting, saved + held + e.loss_act, e.loss_temp, cast))
        moments.append(at(Phase.BACKWARD, Part.HEAD_BACKWARD, resting, saved + held + e.head_act, e.head_temp, cast))
    cast -= cast_head
    gone = view.grads_offloaded
    grads = resting + view.grads_head
    for i in reversed(range(len(plan.order))):
        k = plan.order[i]
        # the rebuild reruns the forward of the run's layers up to this one (every:K: a run of K; full: this one):
        # each casts its weights again and makes its fixed rows (a helper's trace, llama3-8b amp every:4: one
        # layer's casts more at each earlier layer of a run)
        run = range(i - i % plan.segment, i + 1) if ckpt else range(0)
        mine = sum(casts[j] for j in run)
        live = bwd[i] + e.rope + e.held_at(i, view.first) + fix + sum(e.layer_fixed.get(plan.order[j], 0) for j in run)
        rebuild = e.layer_rebuild.get(k)
        if rebuild is not None:  # full recompute: the rebuild's peak, before any of the layer's gradients
            moments.append(at(Phase.BACKWARD, Part.LAYER_INNER, grads, live + rebuild.act, rebuild.temps,
                              cast + mine + rebuild.casts, i))
        moments.append(at(Phase.BACKWARD, Part.LAYER, grads + e.layer_grad.get(k, 0), live + e.layer_act.get(k, 0),
                          e.layer_temp.get(k, 0), cast + mine + e.layer_cast.get(k, 0), i))
        for inner in e.inner_backward.get(k, ()):  # grouped-GEMM (eager_moe.py), MLA softmax (eager_mla.py) backwards
            # the rows they free are the layer's; under activation offload fewer of them are on the GPU (never < 0)
            moments.append(at(Phase.BACKWARD, Part.LAYER_INNER, grads + inner.grads + inner.bank_grads,
                              max(0, live + inner.act),
                              inner.temps + inner.weight_temps, cast + mine + inner.casts, i))
        if e.norm_temp:
            moments.append(at(Phase.BACKWARD, Part.LAYER_NORM, grads + e.norm_grad.get(k, 0),
                              live + e.norm_act.get(k, 0), e.norm_temp, cast + mine, i))
        if e.attn_temp.get(k, 0):  # --attention eager: the softmax backward (eager.eager_attention_backward)
            moments.append(at(Phase.BACKWARD, Part.LAYER_INNER, grads + e.attn_grad[k], live + e.attn_act[k],
                              e.attn_temp[k], cast + mine, i))
        grads += 0 if gone else view.grads_layers[i]
        fix -= fixed[i]
        cast -= 0 if ckpt else casts[i]
    grads += view.grads_embed
    if view.first:  # tied embeddings on one rank: the shared weight's gradient summed (eager.tied_gradient_sum)
        moments.append(at(Phase.BACKWARD, Part.EMBEDDING, grads, 0,
                          (e.tied_sum if view.last else 0) + e.embed_grad_in))
    moments.append(at(Phase.OPTIMIZER, Part.STEP, resting if gone else grads, 0, e.optimizer_temp))
    return moments
