"""`stepbill check`: predict the step with the bill, measure it in PyTorch, and compare per category.

The comparison is pure (predicted and measured numbers in, rows with errors out); torch is imported only by
`stepbill.measure`, and only when a measurement is actually run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from stepbill.engine.bill import Bill
from stepbill.errors import StepbillError

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
    ("peak of the step", "memory.peak", "peak", "bytes"),
    ("FLOPs (fwd+bwd, full-square attention)", "flops.step_noncausal", "flops", "FLOPs"),
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
    return [
        CheckRow(category, unit, predicted.get(line), float(getattr(measured, field)), line)
        for category, line, field, unit in CATEGORIES
    ]


def predictions(bill: Bill) -> dict[str, float]:
    """The bill's values for the lines `check` compares (those it has)."""
    return {line: bill.lines[line].value for _, line, _, _ in CATEGORIES if line in bill.lines}


def predict(spec: Any, recipe: Any) -> tuple[Bill, str]:
    """The bill `check` holds to the measurement: the `eager` convention (what eager PyTorch + transformers
    keep, with their transients), or `ideal` with a note where the family has no eager rows yet."""
    from stepbill.engine.bill import make_bill

    try:
        return make_bill(spec, recipe, convention="eager"), ""
    except StepbillError as exc:
        note = f"note: no eager convention for {spec.name} ({exc}); predicting with the ideal convention"
        return make_bill(spec, recipe, convention="ideal"), note


def model_and_config(model: str, dropout: float | None = None) -> tuple[Any, dict[str, Any]]:
    """The ModelSpec the bill reads and the config dict `check` builds, for a MODEL argument.

    An HF config.json is measured as given (every field, dropout and sliding windows included); a preset or
    ModelSpec JSON through `to_hf_config`, which emits the spec's dropout and window. `dropout=0`
    (``--dropout 0``) sets every dropout probability to 0 in both.
    """
    from pathlib import Path

    from stepbill.engine.unmodelled import apply_dropout_option
    from stepbill.spec.hf import dropout_config_keys, from_hf_config, to_hf_config
    from stepbill.spec.presets import load_model, read_json_file

    path = Path(model)
    data = read_json_file(path) if (model.endswith(".json") or path.exists()) else None
    if data is not None and "model_type" in data:
        spec = from_hf_config(data, name=path.parent.name or path.stem)
        config = dict(data)
    else:
        spec = load_model(model)
        config = to_hf_config(spec)
    spec = apply_dropout_option(spec, dropout)
    if dropout is not None:
        config |= dict.fromkeys(dropout_config_keys(str(config["model_type"])), 0.0)
    return spec, config


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


def verdict(rows: list[CheckRow]) -> str:
    """One line: how many predicted categories are within tolerance."""
    judged = [r for r in rows if r.error is not None]
    good = sum(r.verdict == "ok" for r in judged)
    return f"{good} of {len(judged)} predicted categories within {TOLERANCE:.0%} of PyTorch's measurement"


# (category, RankPrediction / RankMeasurement field) for a sharded check (one rank of N).
SHARDED_CATEGORIES: tuple[tuple[str, str], ...] = (
    ("params (this rank's shard)", "params"),
    ("grads (this rank's shard)", "grads"),
    ("optimizer states (this rank)", "optimizer_states"),
    ("activations (at forward peak)", "activations"),
    ("peak of the forward", "peak_forward"),
    ("peak of the backward", "peak_backward"),
    ("peak of the optimizer step", "peak_optimizer"),
    ("peak of the step", "peak"),
)


def compare_sharded(predicted: Any, measured: Any) -> list[CheckRow]:
    """Rows for one rank: `predicted` a RankPrediction, `measured` a RankMeasurement (both bytes)."""
    return [CheckRow(category, "bytes", float(getattr(predicted, name)), float(getattr(measured, name)),
                     f"rank.{name}") for category, name in SHARDED_CATEGORIES]


def ddp_prediction(bill: Bill, world: int, rank: int) -> tuple[Any, float]:
    """One DDP rank: the single-rank bill plus DDP's gradient buckets; returns (RankPrediction, bucket bytes).

    DDP (``gradient_as_bucket_view=False``, its default) allocates flat buckets holding a copy of every gradient
    (25 MiB each, the first 1 MiB; rebuilt once in iteration 2 in the order gradients arrived) and keeps them
    for the whole run: their bytes equal the gradients' (same dtype, no padding on CPU), resident at every
    moment of the step. Measured: DDP's own ``bucket_sizes`` sum to the parameter bytes (tiny llama fp32,
    2 ranks: 1,264,128 B in 2 rebuilt buckets).
    """
    from stepbill.engine.sharded import RankPrediction

    buckets = bill.lines["memory.grads"].value
    assert bill.timeline is not None
    moments = bill.timeline.moments

    def phase_peak(phase: str) -> float:
        totals = [m.total for m in moments if m.phase == phase]
        return (max(totals) if totals else bill.lines["memory.resident"].value) + buckets

    lines = bill.lines
    pred = RankPrediction(
        rank=rank, world=world, zero=0, params=lines["memory.weights"].value, grads=lines["memory.grads"].value,
        optimizer_states=lines["memory.optimizer"].value, buffers=0.0, inputs=0.0,
        activations=lines["memory.activations"].value, peak_forward=phase_peak("forward"),
        peak_backward=phase_peak("backward"), peak_optimizer=phase_peak("optimizer"), convention=bill.convention)
    return pred, buckets


def compare_launched(spec: Any, measured: list[Any], *, zero: int, micro_batch: int, seq: int,
                     recipe: str) -> list[tuple[Any, Any, list[CheckRow]]]:
    """(prediction, measurement, rows) for every rank of a launched run; ZeRO-1/2/3 from engine/sharded.py's
    predict_rank, DDP from the single-rank eager bill plus its gradient buckets (``ddp_prediction``)."""
    from stepbill.engine.sharded import predict_rank

    world = len(measured)
    out = []
    bill = None
    for m in measured:
        if zero == 0:
            if bill is None:
                from stepbill.spec.recipe import make_recipe

                bill, _ = predict(spec, make_recipe(recipe, "adamw", micro_batch, seq))
            pred, buckets = ddp_prediction(bill, world, m.rank)
            rows = compare_sharded(pred, m)
            rows.append(CheckRow("DDP gradient buckets (resident)", "bytes", buckets,
                                 float(m.extra.get("ddp_buckets", 0)), "ddp.buckets"))
        else:
            pred = predict_rank(spec, world, zero, m.rank, micro_batch, seq, recipe)
            rows = compare_sharded(pred, m)
        if "reserved_peak" in m.extra:  # CUDA: the caching allocator's reserve, beside the bill
            rows.append(CheckRow("reserved at peak (allocator; not billed)", "bytes", None,
                                 float(m.extra["reserved_peak"]), "cuda.reserved"))
        out.append((pred, m, rows))
    return out
