"""Run totals: from one step to a training run — steps, wall-clock seconds, GPU-hours, cost, tokens/s per GPU.

    steps      = ceil(train tokens / tokens per step)        (the last step is a whole step)
    seconds    = steps × time.step
    GPU-hours  = seconds × GPUs / 3600
    cost       = GPU-hours × price per GPU-hour

Nothing else is charged: no evaluation, checkpoint writes, restarts or failures (Llama 3's 405B run lost about
10 % of its time to interruptions — this is the step model's ideal run, not a schedule).
"""

from __future__ import annotations

import math

from stepbill.engine.line import Line
from stepbill.engine.steptime import StepTime
from stepbill.spec.recipe import Recipe

IDEAL_RUN = "steps × step time only: no evaluation, checkpoint writes, restarts or failures"


def _batch_convention(per_step: int, requested: int | None) -> str:
    """Where the micro-batch count came from; a requested global batch that is not a whole number of micro-batches
    is rounded to the nearest count, and the convention says by how much."""
    if not requested:
        return "from the layout's micro-batches"
    if per_step == requested:
        return "micro-batches derived from --global-batch-tokens"
    return (f"micro-batches derived from --global-batch-tokens {requested:,}, rounded to the nearest whole count of "
            f"micro-batches: {per_step:,} tokens per step ({(per_step / requested - 1) * 100:+.1f} %)")


def run_lines(recipe: Recipe, time: StepTime | None, train_tokens: int | None = None,
              price_per_gpu_hour: float | None = None, global_batch_tokens: int | None = None) -> dict[str, Line]:
    """The run's lines (run.*): the global batch always; steps with `train_tokens`; seconds, days, GPU-hours and
    tokens/s per GPU with a step time too; cost with a price. Money is in the price's currency (say USD)."""
    par = recipe.parallel
    per_step = recipe.tokens_per_step
    out: dict[str, Line] = {}
    out["run.global_batch_tokens"] = Line(
        "run.global_batch_tokens", per_step, "tokens",
        "dp {dp} × micro-batches {m} × micro-batch {b} × seq {seq}",
        {"dp": par.dp, "m": par.micro_batches, "b": recipe.micro_batch, "seq": recipe.seq_len},
        convention=_batch_convention(per_step, global_batch_tokens))
    if time is not None:
        out["run.tokens_per_s_per_gpu"] = Line(
            "run.tokens_per_s_per_gpu", per_step / time["time.step"].value / par.world, "tokens/s",
            "{tokens} tokens / {t} s / {gpus} GPUs", {"tokens": per_step, "t": time["time.step"].value,
                                                      "gpus": par.world})
    if train_tokens is None:
        return out
    steps = math.ceil(train_tokens / per_step)
    out["run.train_tokens"] = Line("run.train_tokens", train_tokens, "tokens", "as given", {})
    out["run.steps"] = Line("run.steps", steps, "steps", "ceil({train} tokens / {per_step} tokens per step)",
                            {"train": train_tokens, "per_step": per_step})
    if time is None:
        return out
    step_s = time["time.step"].value
    seconds = steps * step_s
    gpu_hours = seconds * par.world / 3600
    out["run.seconds"] = Line("run.seconds", seconds, "s", "{steps} steps × {t} s per step",
                              {"steps": steps, "t": step_s}, convention=IDEAL_RUN)
    out["run.days"] = Line("run.days", seconds / 86400, "days", "{s} s / 86,400 s per day", {"s": seconds},
                           convention=IDEAL_RUN)
    out["run.gpu_hours"] = Line("run.gpu_hours", gpu_hours, "GPU-hours", "{s} s × {gpus} GPUs / 3,600 s per hour",
                                {"s": seconds, "gpus": par.world}, convention=IDEAL_RUN)
    if price_per_gpu_hour is not None:
        out["run.cost"] = Line("run.cost", gpu_hours * price_per_gpu_hour, "currency",
                               "{h} GPU-hours × {price} per GPU-hour", {"h": gpu_hours, "price": price_per_gpu_hour},
                               convention="in the price's currency; " + IDEAL_RUN)
    return out
