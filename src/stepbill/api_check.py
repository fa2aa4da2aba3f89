"""`stepbill.check(...)`: measure a step in PyTorch and compare it with the bill, from Python (needs torch)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stepbill.errors import StepbillError

if TYPE_CHECKING:
    from stepbill.spec.model import ModelSpec

MEASURABLE_RECIPES = ("fp32", "pure-bf16", "amp-bf16")  # the recipes stepbill.measure builds


@dataclass(frozen=True)
class CheckResult:
    """`stepbill.check`'s answer: predicted vs measured per category, and the CLI's JSON.

    `rows` are `stepbill.check.CheckRow`s (one process) or the sharded rows of every rank measured (`dp` > 1, in
    `by_rank` per rank); `verdict` says how many categories are within 3 %; `mode` is "real" or "fake".
    """

    rows: list[Any]
    verdict: str
    mode: str
    json: dict[str, Any]
    note: str | None = None  # what the CLI prints on stderr first (e.g. a convention it switched to)
    by_rank: dict[int, list[Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The object `stepbill check --json` prints for the same inputs."""
        return self.json

    def __iter__(self) -> Iterator[Any]:
        return iter(self.rows)


def check(
    model: str | ModelSpec,
    *,
    seq: int = 128,
    micro_batch: int = 1,
    recipe: str = "fp32",
    optimizer_impl: str = "single",
    recompute: str = "none",
    mode: str = "auto",
    dp: int = 1,
    zero: int = 0,
    rank: int | None = None,
) -> CheckResult:
    """Measure a training step of `model` in PyTorch and compare it with the bill (needs the `measure` extra).

    `mode` is "auto" (real tensors when the predicted peak fits in RAM), "real" or "fake" (any size). With
    `dp` > 1 and `zero` 1-3 it measures one rank of `dp` (`rank`, or one per distinct predicted class) on a fake
    process group, like `stepbill check --dp N --zero Z`. Slow: it builds the model and runs two training steps.
    """
    from stepbill.report.check_json import sharded_check_json, single_check_json

    for key, value in (("seq", seq), ("micro_batch", micro_batch), ("dp", dp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise StepbillError(f"{key} must be a positive integer, got {value!r}")
    if recipe not in MEASURABLE_RECIPES:
        raise StepbillError(f"recipe must be one of {', '.join(MEASURABLE_RECIPES)} to be measured, got {recipe!r}")
    if mode not in ("auto", "real", "fake"):
        raise StepbillError(f"mode must be 'auto', 'real' or 'fake', got {mode!r}")
    sharded = dp > 1 or zero != 0
    if sharded and (dp < 2 or isinstance(zero, bool) or zero not in (1, 2, 3)):
        raise StepbillError(f"a sharded check needs dp >= 2 and zero 1, 2 or 3, got dp={dp!r}, zero={zero!r}")
    if rank is not None and (not sharded or isinstance(rank, bool) or not isinstance(rank, int)
                             or not 0 <= rank < dp):
        raise StepbillError(f"rank must be an integer in [0, dp) of a sharded check, got {rank!r}")
    try:
        from stepbill.measure.build import require_torch

        require_torch()
        from stepbill.measure.step import measure_step
    except ImportError as exc:
        raise StepbillError(f"stepbill.check needs PyTorch and transformers ({exc.name} is missing): "
                            "pip install 'stepbill[measure]'") from None
    from stepbill.check import choose_mode, compare, predict, predictions, verdict
    from stepbill.spec.hf import to_hf_config
    from stepbill.spec.model import ModelSpec
    from stepbill.spec.presets import load_model as _load
    from stepbill.spec.recipe import make_recipe

    spec = model if isinstance(model, ModelSpec) else _load(model)
    if sharded:
        results = measure_sharded(spec, seq, micro_batch, recipe, dp, zero, rank, mode)
        by_rank = {r: rows for r, _, _, _, rows in results}
        summary = "; ".join(f"rank {r}: {verdict(rows)}" for r, rows in by_rank.items())
        modes = ",".join(sorted({m for _, m, _, _, _ in results}))
        json_out = sharded_check_json(spec.name, dp, zero, results, [verdict(rows) for rows in by_rank.values()])
        return CheckResult([row for rows in by_rank.values() for row in rows], summary, modes, json_out,
                           by_rank=by_rank)
    engine_bill, note = predict(spec, make_recipe(recipe, "adamw", micro_batch, seq, recompute,
                                                  optimizer_impl=optimizer_impl))
    chosen = choose_mode(mode, engine_bill.lines["memory.peak"].value)
    measured = measure_step(to_hf_config(spec), mode=chosen, recipe=recipe, optimizer_impl=optimizer_impl,
                            micro_batch=micro_batch, seq_len=seq, recompute=recompute)
    rows = compare(predictions(engine_bill), measured)
    summary = verdict(rows)
    json_out = single_check_json(spec, chosen, engine_bill, measured, rows, summary)
    return CheckResult(rows, summary, chosen, json_out, note or None)


def measure_sharded(spec: Any, seq: int, micro_batch: int, recipe: str, dp: int, zero: int, rank: int | None,
                    requested: str) -> list[tuple[int, str, Any, Any, list]]:
    """(rank, mode, prediction, measurement, rows) for `rank`, or one rank per distinct predicted class."""
    from stepbill.check import choose_mode, compare_sharded
    from stepbill.engine.check_rank import predict_rank
    from stepbill.engine.parallel.fsdp2 import rank_classes
    from stepbill.spec.hf import to_hf_config

    def predict(r: int):
        return predict_rank(spec, dp, zero, r, micro_batch, seq, recipe)

    ranks = [rank] if rank is not None else [rs[0] for rs in rank_classes(predict, dp).values()]
    try:
        from stepbill.measure.build import require_torch
        from stepbill.measure.sharded import measure_rank
    except ImportError as exc:  # pragma: no cover - optional extra
        raise StepbillError(f"stepbill check needs PyTorch and transformers ({exc.name} is missing): "
                            "pip install 'stepbill[measure]'") from None
    require_torch()
    results = []
    for r in ranks:
        pred = predict(r)
        mode = choose_mode(requested, pred.peak)
        measured = measure_rank(to_hf_config(spec), world=dp, zero=zero, rank=r, micro_batch=micro_batch,
                                seq_len=seq, mode=mode, recipe=recipe)
        results.append((r, mode, pred, measured, compare_sharded(pred, measured)))
    return results
