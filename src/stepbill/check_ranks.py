"""`stepbill check` on data-parallel ranks: one rank of N on a fake process group (ZeRO-1/2/3) and every rank of a
torchrun-launched run (DDP, ZeRO-1/2/3) — each rank's prediction (engine/check_rank.py, the per-rank eager class)
against its measurement, category by category (stepbill/check.py holds the rows, the verdict and the one-process
check)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepbill.check_rows import CheckRow, choose_mode, predict
from stepbill.errors import StepbillError

if TYPE_CHECKING:
    from stepbill.engine.bill import Bill


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


def measure_sharded(spec: Any, seq: int, micro_batch: int, recipe: str | None, dp: int, zero: int, rank: int | None,
                    requested: str, config: dict[str, Any] | None = None, optimizer_impl: str = "single"
                    ) -> list[tuple[int, str, Any, Any, list]]:
    """(rank, mode, prediction, measurement, rows) for `rank`, or one rank per distinct predicted class.
    `config`: the config dict to build (default: to_hf_config(spec)); `recipe` None: the stage's default;
    `optimizer_impl`: AdamW's path (single | foreach | fused), measured and predicted."""
    from stepbill.engine.check_rank import predict_rank
    from stepbill.engine.parallel.fsdp2 import rank_classes
    from stepbill.measure.sharded import measured_recipe
    from stepbill.spec.hf import to_hf_config

    recipe = measured_recipe(zero, recipe)
    config = to_hf_config(spec) if config is None else config

    def predict(r: int):
        return predict_rank(spec, dp, zero, r, micro_batch, seq, recipe, optimizer_impl=optimizer_impl)

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
        measured = measure_rank(config, world=dp, zero=zero, rank=r, micro_batch=micro_batch,
                                seq_len=seq, mode=mode, recipe=recipe, optimizer_impl=optimizer_impl)
        results.append((r, mode, pred, measured, compare_sharded(pred, measured)))
    return results


def ddp_prediction(bill: Bill, world: int, rank: int) -> tuple[Any, float]:
    """One DDP rank as the engine bills it: the per-rank class of `Parallel(dp=world)` — the single-rank bill plus
    DDP's gradient buckets, a copy of every gradient (``gradient_as_bucket_view=False``, its default; allocated at
    construction, rebuilt once in iteration 2 and kept: measured by `check --launch`); returns (RankPrediction,
    bucket bytes)."""
    from dataclasses import replace

    from stepbill.engine.bill import make_bill
    from stepbill.engine.parallel.fsdp2 import RankPrediction
    from stepbill.spec.parallel import Parallel

    ranked = make_bill(bill.model, replace(bill.recipe, parallel=Parallel(dp=world)), convention=bill.convention,
                       attention=bill.attention)
    (cls,) = ranked.ranks
    buckets = sum(x.value for x in cls.transient_items if x.name == "transient.ddp_buckets")
    memory, lines = cls.memory, bill.lines
    assert cls.timeline is not None
    pred = RankPrediction(
        rank=rank, world=world, zero=0, params=lines["memory.weights"].value, grads=lines["memory.grads"].value,
        optimizer_states=lines["memory.optimizer"].value, buffers=0.0, inputs=0.0,
        activations=lines["memory.activations"].value, peak_forward=memory["peak_forward"],
        peak_backward=memory["peak_backward"], peak_optimizer=float(cls.timeline.peak_optimizer.total),
        convention=bill.convention)
    return pred, buckets


def compare_launched(spec: Any, measured: list[Any], *, zero: int, micro_batch: int, seq: int,
                     recipe: str, backend: str = "gloo", device: str = "cpu", optimizer_impl: str = "single"
                     ) -> list[tuple[Any, Any, list[CheckRow]]]:
    """(prediction, measurement, rows) for every rank of a launched run; ZeRO-1/2/3 from engine/check_rank.py's
    predict_rank, DDP from the single-rank eager bill plus its gradient buckets (``ddp_prediction``). `backend`:
    the run's process group, "gloo" (CPU: FSDP2's reduce-scatter clones its input, billed) or "nccl";
    `optimizer_impl`: AdamW's path in the run (the bill's too: the card's default would not be what ran)."""
    from stepbill.engine.check_rank import predict_rank

    world = len(measured)
    out = []
    bill = None
    for m in measured:
        if zero == 0:
            if bill is None:
                from stepbill.spec.recipe import make_recipe

                bill, _ = predict(spec, make_recipe(recipe, "adamw", micro_batch, seq, device=device,
                                                    optimizer_impl=optimizer_impl))
            pred, buckets = ddp_prediction(bill, world, m.rank)
            rows = compare_sharded(pred, m)
            rows.append(CheckRow("DDP gradient buckets (resident)", "bytes", buckets,
                                 float(m.extra.get("ddp_buckets", 0)), "ddp.buckets"))
        else:
            pred = predict_rank(spec, world, zero, m.rank, micro_batch, seq, recipe, backend=backend, device=device,
                                optimizer_impl=optimizer_impl)
            rows = compare_sharded(pred, m)
        if "reserved_peak" in m.extra:  # CUDA: the caching allocator's reserve, beside the bill
            rows.append(CheckRow("reserved at peak (allocator; not billed)", "bytes", None,
                                 float(m.extra["reserved_peak"]), "cuda.reserved"))
        out.append((pred, m, rows))
    return out
