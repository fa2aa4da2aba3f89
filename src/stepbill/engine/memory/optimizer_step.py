"""What an optimizer's step holds beyond its states, for any set of tensors it steps: one GPU's every parameter
(eager.eager_terms), LoRA's adapters (eager_lora), one FSDP2 / ZeRO-1 rank's shards (parallel/fsdp2).

One rule per optimizer, read off torch.optim 2.13 at the hyperparameters the bill assumes (spec/recipe.py, after
OPTIMIZERS) and measured with MemTracker on tiny Llamas (tests/measure/test_optimizers.py); `state_bytes` is a state
element's bytes, which is also the gradient's and parameter's in every recipe torch.optim runs as is (fp32, amp-bf16,
pure-bf16). Bytes throughout; a tensor's temporaries are freed by the next tensor's at the latest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

#: Muon's Newton–Schulz iteration runs in bf16 whatever the gradient's dtype (torch/optim/_muon.py:55
#: `grad.bfloat16()`).
NS_BYTES = 2
#: Adam's, AdamW's and Adafactor's `step`: a 0-d fp32 tensor per parameter tensor (torch/optim/adam.py
#: `_init_group`, _adafactor.py:98).
STEP_BYTES = 4


@dataclass(frozen=True)
class Stepped:
    """One tensor an optimizer steps, as torch holds it: its shape, and whether Muon orthogonalises it (a hidden
    matrix; AdamW steps the rest). A 3-D expert bank that Muon takes stands for one matrix per expert."""

    shape: tuple[int, ...]
    muon: bool = False

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def step_temporaries(optimizer: str, impl: str, state_bytes: int, tensors: Sequence[Stepped]) -> int:
    """Peak bytes `optimizer`'s step (path `impl`) holds beyond its states over `tensors`, in the order it steps
    them. Lion, which torch.optim lacks, is billed with AdamW's rule (lion-pytorch's update makes one clone and one
    sum per tensor, as AdamW's for-loop its sqrt and division); unmeasured."""
    if optimizer in ("sgd", "sgd-momentum"):
        return 0
    if optimizer == "adafactor":
        return adafactor_step_temporaries(impl, state_bytes, tensors)
    if optimizer == "muon":
        rest = [t.numel for t in tensors if not t.muon]
        return max(muon_step_temporaries(state_bytes, [t for t in tensors if t.muon]),
                   adamw_step_temporaries(impl, state_bytes, rest))
    return adamw_step_temporaries(impl, state_bytes, [t.numel for t in tensors])


def step_counter_bytes(optimizer: str, tensors: Sequence[Stepped]) -> int:
    """Bytes of the optimizer's `step` tensors over `tensors`: Adam, AdamW and Adafactor keep one per tensor, the
    AdamW beside Muon one per tensor it steps; SGD, Muon itself (torch/optim/_muon.py `_init_group`: a momentum
    buffer only) and Lion none."""
    if optimizer in ("adam", "adamw", "adafactor"):
        return STEP_BYTES * len(tensors)
    if optimizer == "muon":
        return STEP_BYTES * sum(1 for t in tensors if not t.muon)
    return 0


#: How the bill's lines say the `step` counters of each optimizer (step_counter_bytes): the formula tail of
#: memory.optimizer, its convention, the peak item's formula. Adam / AdamW's is the default.
_COUNTER_TEXT = {
    "adafactor": (" + Adafactor step counters (4 B per parameter tensor)",
                  "eager: PyTorch's Adafactor keeps a 4-byte `step` per tensor",
                  "Adafactor `step`: 4 B per parameter tensor"),
    "muon": (" + AdamW step counters (4 B per tensor AdamW steps beside Muon)",
             "eager: PyTorch's AdamW keeps a 4-byte `step` per tensor (Muon none)",
             "AdamW `step` (beside Muon): 4 B per tensor it steps"),
}
_ADAMW_COUNTER_TEXT = (" + AdamW step counters (4 B per parameter tensor)",
                       "eager: PyTorch's AdamW keeps a 4-byte `step` per tensor",
                       "AdamW `step`: 4 B per parameter tensor")


def step_counter_text(optimizer: str) -> tuple[str, str, str]:
    """(formula tail of memory.optimizer, its convention, the peak item's formula) for `optimizer`'s counters."""
    return _COUNTER_TEXT.get(optimizer, _ADAMW_COUNTER_TEXT)


def adamw_step_temporaries(impl: str, state_bytes: int, step_order: Sequence[int]) -> int:
    """Bytes AdamW's update holds beyond its states over tensors of `step_order` elements, in the order it steps them
    (torch/optim/adam.py; AdamW is Adam with decoupled weight decay, and Adam's default weight decay is 0, so neither
    copies a gradient): the for-loop path (`single`, foreach=False) makes `exp_avg_sq.sqrt()` and its division by the
    bias correction for one tensor while the previous tensor's `denom` is still referenced (adam.py:544),
    2·s_j + s_{j−1}; the multi-tensor path (`foreach`) `_foreach_sqrt` of every second moment at once (adam.py:762);
    the fused kernel none. Measured exact against MemTracker on one GPU, under LoRA and per FSDP2 / ZeRO-1 rank
    (tests/test_sharded.py)."""
    if impl == "fused" or state_bytes == 0:
        return 0
    if impl == "foreach":
        return state_bytes * sum(step_order)
    return state_bytes * max((2 * cur + prev for prev, cur in pairwise([0, *step_order])), default=0)


def _factored(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(matrices, rows, columns) of a tensor Adafactor factors: its leading dimensions count the matrices."""
    return math.prod(shape[:-2]), shape[-2], shape[-1]


def adafactor_step_temporaries(impl: str, s: int, tensors: Sequence[Stepped]) -> int:
    """Bytes torch.optim.Adafactor's step holds beyond its states (elements of `s` bytes).

    `single` (_single_tensor_adafactor) is followed name by name: each Python name keeps its tensor until it is bound
    again, so a tensor's `update` (its `var_estimate`, updated in place) lives until the next tensor's update is
    bound (_adafactor.py:413), its `row_mean` / `col_mean` (a matrix's, 394 and 399) until the next matrix's, its
    `grad_squared` (a vector's, 407) until the next vector's. The moments: `param.norm(2)` (381: a 0-d tensor),
    the row and column means, `row_var @ col_var` (402: the full-size estimate) and its row mean (403: one element
    per matrix), a vector's `grad * grad` and `variance.clone()` (407, 410), `update.norm(2)` (415).

    `foreach` (_multi_tensor_adafactor) steps the matrices and the vectors as two groups, in the order their first
    tensor comes (_group_tensors_by_device_dtype_and_is_multidim); a group's `var_estimates` (564 or 586) are its
    updates, alive until the next group binds `updates` (592): every row mean, then every column mean (547, 556:
    deleted after), every estimate with its row-var means (564, 570); every `grad * grad` (581, deleted), then every
    clone (586)."""
    if impl == "foreach":
        return _adafactor_foreach(s, tensors)
    live: dict[str, int] = {"update": 0, "row_mean": 0, "col_mean": 0, "grad_squared": 0}
    peak = 0

    def made(name: str | None, nbytes: int) -> None:  # a tensor of `nbytes` made, then bound to `name` (or dropped)
        nonlocal peak
        peak = max(peak, sum(live.values()) + nbytes)
        if name is not None:
            live[name] = nbytes

    for t in tensors:
        made(None, s)  # 381: param.norm(2)
        if len(t.shape) > 1:
            lead, rows, cols = _factored(t.shape)
            made("row_mean", s * lead * rows)
            made("col_mean", s * lead * cols)
            peak = max(peak, sum(live.values()) + s * t.numel + s * lead)  # 402-403: the estimate and its row mean
            estimate = s * t.numel
        else:
            made("grad_squared", s * t.numel)
            peak = max(peak, sum(live.values()) + s * t.numel)  # 410: variance.clone()
            estimate = s * t.numel
        live["update"] = estimate  # 413: `update` bound to this tensor's estimate; the previous one freed
        made(None, s)  # 415: update.norm(2)
    return peak


def _adafactor_foreach(s: int, tensors: Sequence[Stepped]) -> int:
    groups: dict[bool, list[Stepped]] = {}
    for t in tensors:
        groups.setdefault(len(t.shape) > 1, []).append(t)
    peak, previous = 0, 0
    for is_matrix, group in groups.items():
        updates = s * sum(t.numel for t in group)
        moments = [s]  # the alphas' param.norm(2), one at a time (531)
        if is_matrix:
            factored = [_factored(t.shape) for t in group]
            moments += [s * sum(lead * rows for lead, rows, _ in factored),
                        s * sum(lead * cols for lead, _, cols in factored),
                        updates + s * sum(lead for lead, _, _ in factored)]
        else:
            moments += [updates, updates]  # every grad * grad, then every clone
        peak = max(peak, previous + max(moments), updates + s)  # 595: update.norm(2) once `updates` is bound
        previous = updates
    return peak


def muon_step_temporaries(s: int, matrices: Sequence[Stepped]) -> int:
    """Bytes torch.optim.Muon's step holds beyond its momentum (_single_tensor_muon, its only path) over `matrices`
    of `s`-byte elements, Nesterov on (its default). Per (r, c) matrix, m = min(r, c): the Nesterov update
    `grad.lerp(buf)` (_muon.py:334, s·rc) is made while the previous matrix's orthogonalised update (bf16, bound to
    `update` until then) lives; inside the Newton–Schulz iteration (31-70), besides that s·rc update: the old and the
    new bf16 iterate (66: `addmm` binds `ortho_grad` after making the new one, 2·2·rc) and the bf16 m×m Gram matrix
    and its update (62-63, 2·2·m²) — in fp32 the first iterate is the bf16 copy (55), in bf16 the update itself, the
    same bytes at the later steps: s·rc + 4·rc + 4·m². A 3-D expert bank counts as its matrices, one after another
    (torch.optim.Muon takes 2-D parameters only: unmeasured)."""
    peak, previous = 0, 0
    for t in matrices:
        lead, rows, cols = _factored(t.shape) if len(t.shape) > 2 else (1, *t.shape)
        rc, m = rows * cols, min(rows, cols)
        for _ in range(min(lead, 2)):  # a bank's later matrices repeat its second's moments
            peak = max(peak, previous + s * rc, s * rc + 2 * NS_BYTES * rc + 2 * NS_BYTES * m * m)
            previous = NS_BYTES * rc
    return peak
