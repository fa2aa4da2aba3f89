"""`stepbill.plan(...)`: the layouts that fit a model on a cluster, ranked — shared by the API and `stepbill plan`.

    >>> import stepbill
    >>> p = stepbill.plan("llama3-8b", gpu="h100-sxm", gpus=8, seq=8192, global_batch_tokens="512Ki",
    ...                   fix={"zero": 1, "recompute": "none"})   # doctest: +SKIP
    >>> p.best.command                                            # doctest: +SKIP
    'stepbill bill llama3-8b --seq 8192 --micro-batch 1 --gpu h100-sxm --gpus 8 --dp 8 --tp 1 --pp 1 ...'

The engine does the search (engine/plan/); this module turns keyword options into a PlanRequest and checks them
(one StepbillError naming the parameter, or the CLI flag when called by the CLI).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stepbill.api import load_model
from stepbill.api_options import MAX_PRICE_PER_GPU_HOUR, check_finite, parse_tokens, python_name
from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec

if TYPE_CHECKING:
    from stepbill.engine.plan.evaluate import Row
    from stepbill.engine.plan.search import PlanResult


@dataclass(frozen=True)
class PlanRun:
    """What `stepbill plan` computes: the engine's PlanResult and a note on the space searched."""

    result: PlanResult
    space_note: str

    @property
    def rows(self) -> list[Row]:
        """Every layout that fits, best first under the objective."""
        return self.result.rows

    @property
    def top(self) -> list[Row]:
        return self.result.top

    @property
    def best(self) -> Row | None:
        return self.result.best

    def to_json(self) -> dict[str, Any]:
        """The `stepbill plan --json` object (the CLI prints the same)."""
        from stepbill.report.plan_json import plan_to_json

        return plan_to_json(self.result, self.space_note)


def worlds_for(gpus: int | None, max_gpus: int | None, name: Callable[[str], str]) -> tuple[int, ...]:
    """GPU counts to search: (gpus,), or every power of two ≤ max_gpus and max_gpus itself."""
    from stepbill.spec.schema import WORLD, check_value

    if (gpus is None) == (max_gpus is None):
        raise StepbillError(f"give {name('gpus')} or {name('max_gpus')} (one of them)")
    count = gpus if gpus is not None else max_gpus
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise StepbillError(f"{name('gpus' if gpus is not None else 'max_gpus')} must be a positive integer, "
                            f"got {count!r}")
    check_value(WORLD, name("gpus" if gpus is not None else "max_gpus"), count)
    if gpus is not None:
        return (gpus,)
    from stepbill.engine.plan.space import powers_of_two

    return tuple(sorted({*powers_of_two(count), count}))


def plan(
    model: str | ModelSpec,
    *,
    gpu: str,
    seq: int,
    gpus: int | None = None,
    max_gpus: int | None = None,
    global_batch_tokens: int | str | None = None,
    micro_batch: int | None = None,
    recipe: str = "mixed-bf16",
    optimizer: str = "adamw",
    train_tokens: int | str | None = None,
    price_per_gpu_hour: float | None = None,
    objective: str = "time",
    top: int = 10,
    reserve_gib: float | None = None,
    host_mem_gib: float | None = None,
    fix: str | Sequence[str] | Mapping[str, object] | None = None,
    cross_node: bool = False,
    efficiency: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    name: Callable[[str], str] = python_name,
    deadline_s: float | None = None,
    jobs: int = 1,
    exhaustive: bool = False,
    device: str = "cuda",
) -> PlanRun:
    """The layouts of `model` that fit `gpus` (or up to `max_gpus`) × `gpu` at `seq` tokens with a global batch of
    `global_batch_tokens` (or a fixed `micro_batch`), ranked by `objective` (time | gpus | cost | memory); `fix`
    pins axes ("tp=8,pp=16" or {"tp": 8}). Every row carries the `stepbill bill` command that reproduces it.
    `progress(done, total)` is called as the search goes (candidates); `deadline_s` stops the search after that many
    wall-clock seconds (what was left is `search.not_searched`); `jobs` worker processes share the search (the
    answer does not depend on it; `available_jobs()` is every core this process may use). By default the search is a
    branch and bound that bills only the candidates whose exact floors can reach the top K or a Pareto front;
    `exhaustive` bills every candidate and lists every layout that fits. `model` may also be a ModelSpec (its rows'
    commands then name it `config.json`, the file it would be saved to). `device` names the kernels the eager
    convention judges on (spec/recipe.DEVICES): "cuda" by default, the GPUs' — "cpu" judges as `stepbill check`
    measures; then the rows' commands carry `--device cpu` (bill's default with a GPU is "cuda": api.kernels_of)."""
    from stepbill.engine.plan import PlanRequest, parse_fix, search
    from stepbill.engine.plan.rank import OBJECTIVES
    from stepbill.errors import unknown_name
    from stepbill.inputs import check_seq
    from stepbill.spec.hardware import load_gpu, resolve_gpu_name
    from stepbill.spec.recipe import make_recipe
    from stepbill.spec.schema import EFFICIENCY, check_value

    for key, value in (("seq", seq), ("top", top), ("micro_batch", micro_batch), ("jobs", jobs)):
        if value is None and key == "micro_batch":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise StepbillError(f"{name(key)} must be a positive integer, got {value!r}")
    if not isinstance(gpu, str):
        raise StepbillError(f"{name('gpu')} must be a catalog GPU name, got {gpu!r}")
    if objective not in OBJECTIVES:
        raise unknown_name("objective", objective, OBJECTIVES)
    check_finite(deadline_s, "deadline_s", name, "seconds")
    if efficiency is not None:
        check_value(EFFICIENCY, name("efficiency"), efficiency)
    check_finite(reserve_gib, "reserve_gib", name, "GiB")
    check_finite(price_per_gpu_hour, "price_per_gpu_hour", name, high=MAX_PRICE_PER_GPU_HOUR)
    check_finite(host_mem_gib, "host_mem_gib", name, "GiB per node", positive=True)
    worlds = worlds_for(gpus, max_gpus, name)
    batch = parse_tokens(global_batch_tokens, "global_batch_tokens", name)
    train = parse_tokens(train_tokens, "train_tokens", name)
    if batch is None and micro_batch is None:
        raise StepbillError(f"give {name('global_batch_tokens')} or {name('micro_batch')}")
    if batch is not None and batch % seq:
        low, high = batch // seq * seq, (batch // seq + 1) * seq
        near = f"{low:,} or {high:,}" if low else f"{high:,}"
        raise StepbillError(f"{name('global_batch_tokens')} {batch:,} is not a whole number of sequences of "
                            f"{seq:,} tokens (nearest: {near}); the planner keeps one global batch for every "
                            "layout, so it does not round it as `bill` does")
    if price_per_gpu_hour is not None and train is None:
        raise StepbillError(f"{name('price_per_gpu_hour')} needs {name('train_tokens')}")
    if isinstance(model, ModelSpec):
        spec, model = model, "config.json"
    elif not isinstance(model, str):
        raise StepbillError(f"{name('model')} must be a preset name, a path or a Hub id, got {model!r}")
    else:
        spec = load_model(model)
    check_seq(spec, seq)
    if not isinstance(device, str):
        raise StepbillError(f"{name('device')} must be a string, got {device!r}")
    # recipe, optimizer and device names checked before the search
    make_recipe(recipe, optimizer, micro_batch or 1, seq, device=device)
    fixed = parse_fix([fix] if isinstance(fix, str) else fix)
    gpu_name = resolve_gpu_name(gpu)
    req = PlanRequest(spec, load_gpu(gpu), gpu_name, worlds, seq, model, batch, micro_batch, recipe, optimizer,
                      None if reserve_gib is None else float(reserve_gib), None if efficiency is None else float(efficiency), fixed, cross_node, train,
                      None if price_per_gpu_hour is None else float(price_per_gpu_hour),
                      None if host_mem_gib is None else float(host_mem_gib), device)
    from stepbill.engine.fit import check_reserve
    from stepbill.engine.plan.resident import card_for
    from stepbill.engine.plan.space import __doc__ as space_doc

    check_reserve(card_for(req), req.reserve_gib, name("reserve_gib"))

    return PlanRun(search(req, objective, top, progress, deadline_s, jobs, exhaustive), space_note(space_doc or ""))


def available_jobs() -> int:
    """The cores this process may run on (its CPU affinity where the platform reports it)."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS / Windows: no affinity call
        return max(1, os.cpu_count() or 1)


def space_note(doc: str) -> str:
    """The one-paragraph note on what the space does not search yet (engine/plan/space.py's docstring)."""
    tail = doc.split("Not searched yet", 1)
    return ("not searched yet" + tail[1]).replace("\n", " ").strip() if len(tail) == 2 else ""
