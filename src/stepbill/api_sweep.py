"""`stepbill bill … --sweep AXIS=V1,V2,…` and `stepbill.sweep(...)`: one bill per value of one option, the others
held — the trend a user otherwise reads off a shell loop (the user trial's tasks d and h). Every row is the bill
`stepbill bill` prints with that value (api.make_step_bill, the same call), so its numbers are the bill's own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from stepbill.api import make_step_bill
from stepbill.api_options import python_name
from stepbill.errors import StepbillError
from stepbill.result import StepBill
from stepbill.spec.command import cli_flag

#: The options a sweep may vary (`stepbill bill`'s single-valued ones), by Python name, and the type of a value.
SWEEP_AXES: dict[str, type] = {
    "micro_batch": int, "seq": int, "micro_batches": int, "dp": int, "tp": int, "pp": int, "cp": int, "ep": int,
    "etp": int, "zero": int, "vpp": int, "shard_group": int, "lora_rank": int, "gpus": int, "recompute": str,
    "recipe": str, "optimizer": str, "gpu": str, "global_batch_tokens": str,
}
MAX_VALUES = 64  # bills one sweep makes at most (each ~0.1–1 s)


def parse_sweep(text: str, name: Callable[[str], str] = python_name) -> tuple[str, list[Any]]:
    """(axis, values) of `AXIS=V1,V2,…` — or, for a whole-number axis, `AXIS=LO..HI`: LO, 2·LO, 4·LO, … up to HI.
    AXIS is spelled as the flag (`micro-batch`, `--micro-batch`) or the Python name (`micro_batch`)."""
    axis, sep, spec = text.partition("=")
    key = axis.strip().lstrip("-").replace("-", "_")
    if not sep or key not in SWEEP_AXES:
        raise StepbillError(f"{name('sweep')} takes AXIS=V1,V2,... or AXIS=LO..HI with AXIS one of "
                            f"{', '.join(cli_flag(k).lstrip('-') for k in SWEEP_AXES)}; got {text!r}")
    kind = SWEEP_AXES[key]
    spec = spec.strip()
    if kind is int and ".." in spec:
        low, _, high = spec.partition("..")
        lo, hi = _whole(low, key, name), _whole(high, key, name)
        if lo < 1 or hi < lo:
            raise StepbillError(f"{name('sweep')} {key}={spec}: LO..HI needs 1 <= LO <= HI")
        values: list[Any] = []
        while lo <= hi and len(values) <= MAX_VALUES:
            values.append(lo)
            lo *= 2
    else:
        parts = [p.strip() for p in spec.split(",")]
        if not spec or any(not p for p in parts):
            raise StepbillError(f"{name('sweep')} {axis.strip()}=…: give values, e.g. {axis.strip()}=1,2,4")
        values = [_whole(p, key, name) for p in parts] if kind is int else parts
    if len(values) > MAX_VALUES:
        raise StepbillError(f"{name('sweep')}: at most {MAX_VALUES} values, got more")
    return key, values


def _whole(text: str, key: str, name: Callable[[str], str]) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise StepbillError(f"{name('sweep')}: {cli_flag(key)} takes whole numbers, got {text.strip()!r}") from None


@dataclass(frozen=True)
class SweepRow:
    """One value: its bill (what `stepbill.bill` returns with it), or why there is none (a value the layout or the
    model refuses)."""

    value: Any
    bill: StepBill | None
    error: str = ""


@dataclass(frozen=True)
class Sweep:
    """One bill per value of `axis`, in the order given."""

    model: str
    axis: str
    rows: tuple[SweepRow, ...]

    def to_json(self) -> dict[str, Any]:
        """What `stepbill bill … --sweep … --json` prints (schema `stepbill.sweep/1`)."""
        return {"schema": "stepbill.sweep/1", "model": self.model, "axis": self.axis, "flag": cli_flag(self.axis),
                "rows": [{"value": r.value, "error": r.error or None,
                          "bill": None if r.bill is None else r.bill.to_json()} for r in self.rows]}


def sweep(model: Any, axis: str, values: Sequence[Any], *, name: Callable[[str], str] = python_name,
          progress: Callable[[int, int], None] | None = None, **options: Any) -> Sweep:
    """One `stepbill.bill` per value of `axis` (a SWEEP_AXES name), the other keywords held (`stepbill.bill`'s). A
    value the bill refuses gives a row with its one-line reason; when every value is refused for the same reason
    (a bad model or option, not the value), that reason is raised instead."""
    if axis not in SWEEP_AXES:
        raise StepbillError(f"{name('axis')} must be one of {', '.join(SWEEP_AXES)}, got {axis!r}")
    if not values:
        raise StepbillError(f"{name('values')}: give at least one value")
    rows = []
    for i, value in enumerate(values):
        try:
            rows.append(SweepRow(value, StepBill(make_step_bill(model, name=name, **{**options, axis: value}))))
        except StepbillError as exc:
            rows.append(SweepRow(value, None, str(exc)))
        if progress is not None:
            progress(i + 1, len(values))
    if all(r.error == rows[0].error != "" for r in rows):  # not the values: the model or another option
        raise StepbillError(rows[0].error)
    label = model if isinstance(model, str) else getattr(model, "name", "model")
    return Sweep(label, axis, tuple(rows))
