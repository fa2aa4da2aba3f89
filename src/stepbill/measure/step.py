"""Measure one steady-state training step with PyTorch's MemTracker and FlopCounterMode.

Definitions (bytes of live tensor storage, no allocator rounding on CPU):

- iteration 1 warms up (the optimizer creates its states: AdamW's moments, SGD's momentum buffers, Adafactor's
  row / column variances, all made at the first step); iteration 2 is measured.
- ``peak``: largest total of live tensor bytes during iteration 2 (MemTracker's peak Total);
  ``peak_phase`` the phase it falls in; ``peak_forward`` / ``peak_backward`` / ``peak_optimizer`` the
  largest total within each phase (forward = model forward and loss, under autocast for amp-bf16;
  backward = ``loss.backward()``; optimizer = ``step()`` and ``zero_grad(set_to_none=True)``).
- ``activations``: MemTracker's ACT (tensors made in forward and still alive) at the forward peak.
- ``params``, ``buffers``, ``inputs``: PARAM, BUFFER, OTH (the input ids) at the start of iteration 2;
  ``grads``: GRAD when backward ends; ``optimizer_states``: OPT after the step (the persistent states).
- ``flops``: FlopCounterMode's global forward+backward total (attention full square), separate pass.
"""

from __future__ import annotations

from collections.abc import Callable
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any

from stepbill.measure.build import Attention, Mode
from stepbill.measure.flops import count_flops
from stepbill.measure.session import PHASES, OptimizerImpl, Phase, Recipe, Recompute, StepSession

# MemTracker's category names -> ours.
CATEGORY_NAMES: dict[str, str] = {
    "Parameter": "params",
    "Buffer": "buffers",
    "Gradient": "grads",
    "Activation": "activations",
    "Temp": "temp",
    "Optstate": "optimizer",
    "Other": "inputs",
    "Total": "total",
}


@dataclass(frozen=True)
class StepMeasurement:
    """Measured bill of one training step; every memory figure in bytes, ``flops`` in FLOPs."""

    params: int
    buffers: int
    inputs: int
    grads: int
    optimizer_states: int
    peak: int
    peak_phase: Phase
    peak_forward: int
    peak_backward: int
    peak_optimizer: int
    activations: int
    flops: int
    #: category -> bytes at the step peak (keys: params, buffers, grads, activations, temp, optimizer,
    #: inputs, total).
    breakdown: dict[str, int] = field(default_factory=dict)
    #: phase -> category -> bytes at that phase's peak.
    phase_breakdown: dict[str, dict[str, int]] = field(default_factory=dict)
    #: aten op -> FLOPs (forward + backward).
    flops_by_op: dict[str, int] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    #: under LoRA: the trainable parameters as PEFT counts them (get_nb_trainable_parameters); None otherwise.
    trainable_params: int | None = None


def _flatten(snapshot: dict[Any, dict[Any, int]]) -> dict[str, int]:
    """Sum a MemTracker snapshot over devices (one here: CPU) and rename its categories."""
    out = dict.fromkeys(CATEGORY_NAMES.values(), 0)
    for dev_snap in snapshot.values():
        for key, value in dev_snap.items():
            name = CATEGORY_NAMES.get(str(getattr(key, "value", key)))
            if name is not None:
                out[name] += int(value)
    return out


class PhasePeaks:
    """Splits MemTracker's running peak into one peak per phase.

    MemTracker keeps one peak (``_peak_mem`` / ``_peak_mem_snap``, updated after every op). At each phase
    boundary we store the finished phase's peak snapshot and restart the peak from the current snapshot,
    so each phase's peak is the maximum over its own ops, the live total at its start included.
    """

    def __init__(self, tracker: Any, flatten: Callable[[Any], dict[str, int]] | None = None) -> None:
        self.tracker = tracker
        self.flatten = flatten or _flatten  # sharded runs pass one that keeps FSDP's categories
        self.current: Phase | None = None
        self.peaks: dict[str, dict[str, int]] = {}
        self.marks: dict[str, dict[str, int]] = {}

    def restart(self) -> None:
        snap = self.tracker.get_tracker_snapshot("current")
        self.tracker._peak_mem_snap = deepcopy(snap)
        self.tracker._peak_mem = {dev: s.get("Total", 0) for dev, s in snap.items()}

    def close(self) -> None:
        if self.current is not None:
            self.peaks[self.current] = self.flatten(self.tracker.get_tracker_snapshot("peak"))
            self.marks[f"end:{self.current}"] = self.flatten(self.tracker.get_tracker_snapshot("current"))
        self.current = None

    def __call__(self, phase: Phase) -> None:
        self.close()
        self.marks[f"start:{phase}"] = self.flatten(self.tracker.get_tracker_snapshot("current"))
        self.current = phase
        self.restart()


def track_step(session: StepSession) -> PhasePeaks:
    """Warm up one iteration and track the second with MemTracker; returns the per-phase peaks."""
    from torch.distributed._tools.mem_tracker import MemTracker

    # The warm-up runs untracked (MemTracker costs ~15 s per 7B iteration): afterwards model, AdamW states
    # and inputs exist and are registered as PARAM/BUFFER, OPT and OTH, which is all that iteration 1
    # leaves behind (zero_grad(set_to_none=True) freed the grads).
    session.iteration()
    tracker = MemTracker()
    tracker.track_external(session.model, *session.optimizers, session.input_ids)
    if session.lora is not None:
        from stepbill.measure.lora import skip_frozen_grad_hooks

        skip_frozen_grad_hooks(tracker, session.model)
    phases = PhasePeaks(tracker)
    with tracker:
        session.iteration(phases)
        phases.close()
    return phases


def measure_step(
    config_dict: dict[str, Any],
    *,
    recipe: Recipe = "fp32",
    optimizer_impl: OptimizerImpl = "single",
    micro_batch: int = 1,
    seq_len: int = 128,
    recompute: Recompute = "none",
    mode: Mode = "real",
    attention: Attention = "sdpa",
    flops: bool = True,
    lora: Any = None,
    optimizer: str = "adamw",
) -> StepMeasurement:
    """Run the transformers training step of ``config_dict`` and measure it (see the module docstring).

    ``config_dict`` is a transformers config dict (``model_type`` plus its keys). ``mode="fake"`` runs on
    fake tensors: no memory or compute is used and the byte counts equal a real run's. ``flops=False``
    skips the FLOP-counting pass (``flops`` is then 0). ``lora`` (a measure.lora.PeftLoRA) wraps the model
    with PEFT's LoRA first (frozen base, the optimizer over the adapters). ``optimizer``: the bill's optimizer name,
    run as torch.optim runs it (measure/optimizers.py).
    """
    settings = {
        "recipe": recipe, "optimizer_impl": optimizer_impl, "micro_batch": micro_batch, "seq_len": seq_len,
        "recompute": recompute, "mode": mode, "attention": attention, "optimizer": optimizer,
    } | ({} if lora is None else lora.settings())
    session = StepSession(config_dict, recipe=recipe, optimizer_impl=optimizer_impl, micro_batch=micro_batch,
                          seq_len=seq_len, recompute=recompute, mode=mode, attention=attention, lora=lora,
                          optimizer_name=optimizer)
    with session:
        phases = track_step(session)
        total_flops, by_op = count_flops(session.forward_backward) if flops else (0, {})
        trainable = None
        if lora is not None:
            from stepbill.measure.lora import trainable_parameters

            trainable = trainable_parameters(session.model)[0]
    peaks = phases.peaks
    totals = {p: peaks[p]["total"] for p in PHASES}
    # Ties go to the earliest phase: the moment the total is first reached.
    peak_phase: Phase = max(PHASES, key=lambda p: (totals[p], -PHASES.index(p)))
    start = phases.marks["start:forward"]
    return StepMeasurement(
        params=start["params"],
        buffers=start["buffers"],
        inputs=start["inputs"],
        grads=phases.marks["end:backward"]["grads"],
        optimizer_states=phases.marks["end:optimizer"]["optimizer"],
        peak=totals[peak_phase],
        peak_phase=peak_phase,
        peak_forward=totals["forward"],
        peak_backward=totals["backward"],
        peak_optimizer=totals["optimizer"],
        activations=peaks["forward"]["activations"],
        flops=total_flops,
        breakdown=dict(peaks[peak_phase]),
        phase_breakdown={p: dict(peaks[p]) for p in PHASES},
        flops_by_op=by_op,
        settings=settings,
        trainable_params=trainable,
    )
