"""`stepbill.fit_max(...)` and `stepbill fit --max`: the largest micro-batch or sequence length that fits each rank
class on a card, by the bill's own fit verdict (engine/fit_max.py does the search).

    >>> import stepbill
    >>> r = stepbill.fit_max("llama3-8b", axis="seq", gpu="h100-sxm", recompute="full")  # doctest: +SKIP
    >>> r.largest, r.to_json()["classes"][0]["headroom_bytes"]                             # doctest: +SKIP

The options are `stepbill.bill`'s that shape memory (not the run totals); `make_step_bill` checks them and builds
the starting bill, so `fit` and `bill` cannot disagree on a recipe or a layout.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stepbill.api import make_step_bill
from stepbill.api_options import python_name
from stepbill.errors import StepbillError, unknown_name
from stepbill.spec.command import bill_command as format_bill_command

if TYPE_CHECKING:
    from stepbill.engine.fit_max import FitMax

AXES = {"micro-batch": "micro_batch", "micro_batch": "micro_batch", "seq": "seq"}  # = engine/fit_max.AXES

DEFAULT_SEQ = 2048  # `stepbill bill`'s default sequence length, held when the micro-batch is searched
_RUN_TOTALS = ("global_batch_tokens", "train_tokens", "price_per_gpu_hour")


@dataclass(frozen=True)
class FitMaxRun:
    """The search's result with the model's name and the `stepbill bill` command of the answer."""

    result: FitMax
    model: str
    command: str

    @property
    def largest(self) -> int:
        """The largest value (micro-batch in sequences, seq in tokens) at which every rank class fits."""
        assert self.result.largest is not None  # fit_max raises "nothing fits" instead
        return self.result.largest

    def to_json(self) -> dict[str, Any]:
        """Exactly what `stepbill fit MODEL --max ... --json` prints (schema `stepbill.fit/1`)."""
        from stepbill.report.fit_max_report import fit_max_to_json

        return fit_max_to_json(self.result, self.model, self.command)


def fit_max(model: Any, *, axis: str = "micro_batch", seq: int | None = None, micro_batch: int | None = None,
            multiple_of: int = 1, name: Any = python_name, **options: Any) -> FitMaxRun:
    """The largest `axis` ("micro_batch" / "micro-batch" or "seq") that fits each rank class of `model` on the card
    (`gpu` or `gpu_mem_gib`, with `reserve_gib`), the other axis held (seq default 2,048; micro-batch default 1).
    `multiple_of`: search only multiples of it (e.g. 1024 tokens). Other keywords are `stepbill.bill`'s memory
    options (recipe, optimizer, recompute, LoRA, layout). One-line
    StepbillError when nothing fits at the smallest value, naming the resident memory that exceeds the card."""
    from stepbill.engine.fit_max import largest_fitting, nothing_fits_message  # the engine loads on first use

    if axis not in AXES:
        raise unknown_name("--max axis", axis, ("micro-batch", "seq"))
    the_axis = AXES[axis]
    if isinstance(multiple_of, bool) or not isinstance(multiple_of, int) or not 1 <= multiple_of <= 2**24:
        raise StepbillError(f"{name('multiple_of')} must be an integer in [1, 2^24], got {multiple_of!r}")
    given = [k for k in _RUN_TOTALS if options.get(k) is not None]
    if given:
        raise StepbillError(f"fit --max takes no run totals ({', '.join(name(k) for k in given)}): they do not change "
                            "the memory of one step")
    searched = "seq" if the_axis == "seq" else "micro_batch"
    if (seq if the_axis == "seq" else micro_batch) is not None:
        raise StepbillError(f"{name(searched)} is what --max {axis} searches; give the other axis and the layout")
    if the_axis == "seq":
        seq = _smallest_seq(options)
    elif seq is None:
        seq = DEFAULT_SEQ
    start = make_step_bill(model, seq=seq, micro_batch=micro_batch or 1, name=name, **options)
    if start.fit is None:
        raise StepbillError(f"fit --max needs a card: give {name('gpu')} or {name('gpu_mem_gib')}")
    bill = start.bill
    result = largest_fitting(bill.model, bill.recipe, start.fit.card, the_axis,  # type: ignore[arg-type]
                             reserve_gib=options.get("reserve_gib"), convention=bill.convention,
                             attention=bill.attention, multiple_of=multiple_of)
    if result.largest is None:
        raise StepbillError(nothing_fits_message(result))
    answer = {"seq": seq, "micro_batch": micro_batch or 1, the_axis: result.largest}
    return FitMaxRun(result, bill.model.name, bill_command(model, answer, options))


def _smallest_seq(options: dict[str, Any]) -> int:
    """The smallest sequence the layout accepts (its granularity); 1 when the layout options are not yet valid
    (make_step_bill then names the bad option)."""
    from stepbill.engine.fit_max import seq_step

    tp, cp, sp = options.get("tp", 1), options.get("cp", 1), options.get("sp", False)
    if all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (tp, cp)) and isinstance(sp, bool):
        return seq_step(tp, sp, cp)
    return 1


def bill_command(model: Any, answer: dict[str, int], options: dict[str, Any]) -> str:
    """`stepbill bill MODEL --seq S --micro-batch B` plus every option that differs from `bill`'s default, in
    `bill`'s order (spec/command.py spells it)."""
    defaults = {k: p.default for k, p in inspect.signature(make_step_bill).parameters.items()}
    rest = {k: options[k] for k in defaults
            if k in options and k not in ("seq", "micro_batch") and options[k] != defaults[k]}
    return format_bill_command(str(getattr(model, "name", model)),
                               {"seq": answer["seq"], "micro_batch": answer["micro_batch"], **rest})
