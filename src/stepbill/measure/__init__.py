"""Measurement of the real training step in PyTorch (optional extra ``stepbill[measure]``).

The only package that imports torch / transformers, always lazily: importing ``stepbill.measure`` works
without them, and calling into it without them raises a one-line StepbillError naming the extra.

- ``measure_step`` (step.py): MemTracker bill of a steady-state step and FlopCounterMode FLOPs.
- ``saved_tensors`` (saved.py): what autograd saves in the forward, per storage, with module and op.
- ``allocator_trace`` (verify.py): the independent allocator route for real runs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["allocator_trace", "measure_step", "saved_tensors"]


def __getattr__(name: str) -> Any:
    # Lazy re-exports: the submodules import torch only inside functions, but keep even them out of
    # ``import stepbill.measure``.
    if name == "measure_step":
        from stepbill.measure.step import measure_step

        return measure_step
    if name == "saved_tensors":
        from stepbill.measure.saved import saved_tensors

        return saved_tensors
    if name == "allocator_trace":
        from stepbill.measure.verify import allocator_trace

        return allocator_trace
    raise AttributeError(name)
