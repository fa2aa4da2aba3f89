"""A check's rows and how it runs: the categories it compares, a row's error and verdict, the bill's prediction and
real-or-fake tensors by free RAM — what the one-process check (check.py) and the data-parallel one (check_ranks.py)
share. Pure: torch is imported by stepbill.measure only."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stepbill.errors import StepbillError

if TYPE_CHECKING:
    from stepbill.engine.bill import Bill


MEASURABLE_RECIPES = ("fp32", "pure-bf16", "amp-bf16")  # the recipes stepbill.measure builds
TOLERANCE = 0.03  # the accuracy the issue holds `check` to: 3 % per category
REAL_RAM_SHARE = 0.5  # refuse a real run whose predicted peak exceeds this share of free RAM

# (category, bill line predicting it, StepMeasurement field, unit)
CATEGORIES: tuple[tuple[str, str, str, str], ...] = (
    ("params", "memory.weights", "params", "bytes"),
    ("grads", "memory.grads", "grads", "bytes"),
    ("optimizer states", "memory.optimizer", "optimizer_states", "bytes"),
    ("activations (at forward peak)", "memory.activations", "activations", "bytes"),
    ("peak of the forward", "memory.peak_forward", "peak_forward", "bytes"),
    ("peak of the backward", "memory.peak_backward", "peak_backward", "bytes"),
    # the optimizer's states and the temporaries of its step (engine/memory/optimizer_step.py), on the bill's
    # timeline (predictions: no bill line of its own)
    ("peak of the optimizer step", "memory.peak_optimizer", "peak_optimizer", "bytes"),
    ("peak of the step", "memory.peak", "peak", "bytes"),
    ("FLOPs (fwd+bwd, full-square attention)", "flops.step_noncausal", "flops", "FLOPs"),
)
#: The rows a LoRA check adds (the StepMeasurement field is None without LoRA).
LORA_CATEGORIES: tuple[tuple[str, str, str, str], ...] = (
    ("trainable params (PEFT's get_nb_trainable_parameters)", "params.trainable", "trainable_params", "params"),
)


@dataclass(frozen=True)
class CheckRow:
    """One category: what the bill predicted, what PyTorch measured, and the relative error."""

    category: str
    unit: str
    predicted: float | None
    measured: float
    line: str

    @property
    def error(self) -> float | None:
        """(predicted − measured) / measured; None when the bill has no prediction for this category."""
        if self.predicted is None:
            return None
        if self.measured == 0:
            return 0.0 if self.predicted == 0 else float("inf")
        return (self.predicted - self.measured) / self.measured

    @property
    def verdict(self) -> str:
        err = self.error
        if err is None:
            return "not predicted"
        return "ok" if abs(err) <= TOLERANCE else "off"


def compare(predicted: dict[str, float], measured: Any) -> list[CheckRow]:
    """Rows for every category; `predicted` maps bill line names to values, `measured` is a StepMeasurement."""
    rows = [
        CheckRow(category, unit, predicted.get(line), float(getattr(measured, field)), line)
        for category, line, field, unit in CATEGORIES
    ]
    rows += [CheckRow(category, unit, predicted.get(line), float(getattr(measured, field)), line)
             for category, line, field, unit in LORA_CATEGORIES if getattr(measured, field, None) is not None]
    return rows


def predictions(bill: Bill) -> dict[str, float]:
    """The bill's values for the lines `check` compares (those it has); the optimizer step's peak is read off the
    bill's timeline (memory.peak_optimizer)."""
    out = {line: bill.lines[line].value for _, line, _, _ in CATEGORIES + LORA_CATEGORIES if line in bill.lines}
    if bill.timeline is not None:
        out["memory.peak_optimizer"] = bill.timeline.peak_optimizer.total
    return out


def predict(spec: Any, recipe: Any, attention: str = "sdpa") -> tuple[Bill, str]:
    """The bill `check` holds to the measurement: the `eager` convention (what eager PyTorch + transformers
    keep, with their transients), or `ideal` with a note where the family has no eager rows yet. `attention`:
    the attention implementation the model is built with (sdpa, or eager: transformers' eager attention)."""
    from stepbill.engine.bill import make_bill

    try:
        return make_bill(spec, recipe, convention="eager", attention=attention), ""
    except StepbillError as exc:
        note = f"note: no eager convention for {spec.name} ({exc}); predicting with the ideal convention"
        return make_bill(spec, recipe, convention="ideal", attention=attention), note


def available_ram_bytes() -> int:
    """Memory the kernel says is available (MemAvailable), or total physical memory where unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for row in meminfo:
                if row.startswith("MemAvailable:"):
                    return int(row.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def choose_mode(requested: str, predicted_peak: float, free_bytes: int | None = None) -> str:
    """`real` when asked and it fits in REAL_RAM_SHARE of free RAM; `fake` when asked; `auto` picks."""
    free = available_ram_bytes() if free_bytes is None else free_bytes
    fits = predicted_peak <= REAL_RAM_SHARE * free
    if requested == "fake":
        return "fake"
    if requested == "real":
        if not fits:
            raise StepbillError(
                f"--real refused: the predicted peak ({predicted_peak / 2**30:.1f} GiB) exceeds "
                f"{REAL_RAM_SHARE:.0%} of free RAM ({free / 2**30:.1f} GiB); use --fake"
            )
        return "real"
    if requested == "auto":
        return "real" if fits else "fake"
    raise StepbillError(f"unknown mode {requested!r}; choose real, fake or auto")
