"""MemTracker's peak against an independent route: the CPU allocator's own events."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")

from stepbill.measure.session import StepSession
from stepbill.measure.step import measure_step
from stepbill.measure.tiny import TINY_CONFIGS
from stepbill.measure.verify import allocator_trace

SHAPE = {"micro_batch": 2, "seq_len": 64}


@pytest.mark.parametrize(("family", "recipe", "impl"), [
    ("llama", "fp32", "single"), ("llama", "amp-bf16", "foreach"), ("llama", "pure-bf16", "fused"),
    ("qwen3", "fp32", "single"),
])
def test_memtracker_peak_equals_allocator(family: str, recipe: str, impl: str) -> None:
    kw = {"recipe": recipe, "optimizer_impl": impl, **SHAPE}
    m = measure_step(TINY_CONFIGS[family], flops=False, **kw)
    with StepSession(TINY_CONFIGS[family], **kw) as session:
        trace = allocator_trace(session)
    assert trace.end_delta == 0  # steady state: the step frees what it allocates
    assert trace.baseline == m.params + m.buffers + m.inputs + m.optimizer_states
    assert trace.peak == m.peak
    assert trace.phase_peaks["forward"] == m.peak_forward
    assert trace.phase_peaks["backward"] == m.peak_backward
    # The optimizer's scalar temporaries (lr/step as 0-d tensors) bypass dispatch: a few bytes.
    assert abs(trace.phase_peaks["optimizer"] - m.peak_optimizer) <= 64


def test_recompute_gap_is_the_rng_state() -> None:
    """Checkpointing saves torch.get_rng_state() per layer (5056 B on CPU) outside dispatch."""
    kw = {"recipe": "fp32", "recompute": "full", **SHAPE}
    m = measure_step(TINY_CONFIGS["llama"], flops=False, **kw)
    with StepSession(TINY_CONFIGS["llama"], **kw) as session:
        trace = allocator_trace(session)
    rng_state = 5056
    assert trace.phase_peaks["forward"] - m.peak_forward == 2 * rng_state  # two checkpointed layers
    assert 0 <= trace.peak - m.peak <= 2 * rng_state
