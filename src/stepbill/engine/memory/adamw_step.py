"""What AdamW's step holds beyond its states, for any set of tensors it steps: one GPU's every parameter
(eager.optimizer_temporaries), LoRA's adapters (eager_lora), one FSDP2 / ZeRO-1 rank's shards (parallel/fsdp2)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise


def adamw_step_temporaries(impl: str, state_bytes: int, step_order: Sequence[int], total: int | None = None) -> int:
    """Bytes AdamW's update holds beyond its states over tensors of `step_order` elements, in the order it steps them
    (torch/optim/adam.py; AdamW is Adam with decoupled weight decay; `state_bytes` a state element's): the for-loop
    path (`single`, foreach=False) makes `exp_avg_sq.sqrt()` and its division by the bias correction for one tensor
    while the previous tensor's `denom` is still referenced, 2·s_j + s_{j−1}; the multi-tensor path (`foreach`)
    `_foreach_sqrt` of every second moment at once, `total` elements (default: them all); the fused kernel none.
    Measured exact against MemTracker on one GPU, under LoRA and per FSDP2 / ZeRO-1 rank (tests/test_sharded.py)."""
    if impl == "fused" or state_bytes == 0:
        return 0
    if impl == "foreach":
        return state_bytes * (sum(step_order) if total is None else total)
    return state_bytes * max((2 * cur + prev for prev, cur in pairwise([0, *step_order])), default=0)
