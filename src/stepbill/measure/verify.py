"""An independent route to the step's memory: the CPU allocator's own events (real tensors only).

``torch.profiler`` with ``profile_memory=True`` records every allocation and free of the CPU allocator
(c10's ``reportMemoryUsage``), kernels' internal buffers included, without going through
``__torch_dispatch__``. Live bytes at any moment = the storages alive when profiling starts (parameters,
buffers, optimizer states, inputs: summed here by storage, not by MemTracker) + the running sum of the
recorded allocations. Its maximum over iteration 2 must equal MemTracker's peak if both are right.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepbill.measure.session import PHASES, Phase, StepSession


@dataclass(frozen=True)
class AllocatorTrace:
    """Allocator view of iteration 2; bytes."""

    baseline: int  #: live storage bytes when the step starts
    peak: int  #: baseline + largest running sum of allocations over the step
    phase_peaks: dict[str, int]  #: same, within each phase
    end_delta: int  #: bytes allocated minus freed over the step (0 in a steady state)


def live_storage_bytes(session: StepSession) -> int:
    """Bytes of the distinct storages of parameters, buffers, gradients, optimizer states and inputs."""
    import torch

    tensors: list[Any] = [*session.model.parameters(), *session.model.buffers(), session.input_ids]
    tensors += [p.grad for p in session.model.parameters() if p.grad is not None]
    for optimizer in session.optimizers:
        for state in optimizer.state.values():
            tensors += [v for v in state.values() if torch.is_tensor(v)]
    storages = {t.untyped_storage()._cdata: t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def allocator_trace(session: StepSession) -> AllocatorTrace:
    """Warm up one iteration, then profile the second with allocator events and phase markers."""
    from torch.autograd.profiler import record_function
    from torch.profiler import ProfilerActivity, profile

    session.iteration()
    baseline = live_storage_bytes(session)
    open_range: list[Any] = []

    def on_phase(phase: Phase) -> None:
        if open_range:
            open_range.pop().__exit__(None, None, None)
        marker = record_function(f"stepbill:{phase}")
        marker.__enter__()
        open_range.append(marker)

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        session.iteration(on_phase)
        open_range.pop().__exit__(None, None, None)
    events = list(prof.profiler.kineto_results.events())
    spans = {e.name().removeprefix("stepbill:"): (e.start_ns(), e.end_ns())
             for e in events if e.name().startswith("stepbill:")}
    # Events are recorded in order; a stable sort by time keeps that order for equal timestamps.
    memory = sorted((e for e in events if e.name() == "[memory]"), key=lambda e: e.start_ns())
    running, peak = 0, 0
    phase_peaks = dict.fromkeys(PHASES, 0)
    for phase in PHASES:  # the live total at the start of a phase counts towards its peak
        phase_peaks[phase] = baseline
    for event in memory:
        running += int(event.nbytes())
        peak = max(peak, running)
        for phase, (start, end) in spans.items():
            if start <= event.start_ns() <= end:
                phase_peaks[phase] = max(phase_peaks[phase], baseline + running)
    # A phase's starting total: the running sum just before its first event (e.g. grads alive at optimizer).
    return AllocatorTrace(baseline=baseline, peak=baseline + peak, phase_peaks=phase_peaks, end_delta=running)
