"""`stepbill check`: predict the step with the bill, measure it in PyTorch, and compare per category.

The comparison is pure (predicted and measured numbers in, rows with errors out); torch is imported only by
`stepbill.measure`, and only when a measurement is actually run. Data-parallel ranks (one of N, or every rank of a
launched run): stepbill/check_ranks.py.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

# CATEGORIES is re-exported (importers read it from here); the rest check.py uses, and importers of
# `from stepbill.check import compare, predictions, ...` keep working
from stepbill.check_rows import CATEGORIES as CATEGORIES
from stepbill.check_rows import TOLERANCE, CheckRow, choose_mode, compare, predict, predictions
from stepbill.errors import StepbillError

if TYPE_CHECKING:
    from stepbill.spec.model import ModelSpec


def model_and_config(model: str, dropout: float | None = None) -> tuple[Any, dict[str, Any]]:
    """The ModelSpec the bill reads and the config dict `check` builds, for a MODEL argument.

    An HF config.json (a file, a folder holding one, a Hub id) is measured as given: every field, dropout and
    sliding windows included, and so is a Hub preset's shipped config.json; a ModelSpec preset or JSON goes through
    `to_hf_config`, which emits the spec's dropout and window. `dropout=0` (``--dropout 0``) sets every dropout probability to 0 in both.
    """
    from pathlib import Path

    from stepbill.engine.unmodelled import apply_dropout_option
    from stepbill.spec.hf import dropout_config_keys, from_hf_config, to_hf_config
    from stepbill.spec.presets import config_name, load_model, preset_names, read_json_file, shipped_config

    path = Path(model)
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    data, name = None, ""
    shipped = None
    if model.endswith(".json") or path.exists():
        data, name = read_json_file(path), config_name(path)
    elif (shipped := shipped_config(model)) is not None:  # a Hub preset: its config.json as the Hub has it
        data, name = shipped
    elif model not in preset_names():
        from stepbill.spec.hub import download_config, looks_like_hub_id

        if looks_like_hub_id(model):
            data, name = read_json_file(download_config(model)), model.split("/", 1)[1]
    if shipped is not None:  # the preset's spec (its notes name the file's source), the file as it is
        spec, config = load_model(name), dict(shipped[0])
    elif data is not None and "model_type" in data:
        spec = from_hf_config(data, name=name)
        config = dict(data)
    else:
        spec = load_model(model)
        config = to_hf_config(spec)
    spec = apply_dropout_option(spec, dropout)
    if dropout is not None:
        config |= dict.fromkeys(dropout_config_keys(str(config["model_type"])), 0.0)
    return spec, config


def verdict(rows: list[CheckRow]) -> str:
    """One line: how many predicted categories are within tolerance."""
    judged = [r for r in rows if r.error is not None]
    good = sum(r.verdict == "ok" for r in judged)
    return f"{good} of {len(judged)} predicted categories within {TOLERANCE:.0%} of PyTorch's measurement"


# ---------------------------------------------------------------------------------------------------------------
# `stepbill.check(...)`: this module is callable (the package exports it as `stepbill.check`), so the same name is
# the API function and the module of its parts (`from stepbill.check import compare` keeps working).


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


def measure_and_compare(
    model: str | ModelSpec,
    *,
    seq: int = 128,
    micro_batch: int = 1,
    recipe: str | None = None,
    optimizer_impl: str = "single",
    recompute: str = "none",
    mode: str = "auto",
    optimizer: str = "adamw",
    dp: int = 1,
    zero: int = 0,
    rank: int | None = None,
    dropout: float | None = None,
    lora_rank: int | None = None,
    lora_targets: str | tuple[str, ...] | None = None,
    lora_alpha: float | None = None,
    lora_dropout: float | None = None,
    attention: str = "sdpa",
) -> CheckResult:
    """Measure a training step of `model` in PyTorch and compare it with the bill (needs the `measure` extra).

    `mode` is "auto" (real tensors when the predicted peak fits in RAM), "real" or "fake" (any size). With
    `dp` > 1 and `zero` 1-3 it measures one rank of `dp` (`rank`, or one per distinct predicted class) on a fake
    process group, like `stepbill check --dp N --zero Z`. Slow: it builds the model and runs two training steps.
    `recipe` None is the stage's default (fp32; FSDP2's fsdp-mixed-bf16 under zero 2/3); one the stage cannot
    measure is refused. A config file is measured as given (`dropout=0`: without dropout, in bill and model).
    `lora_rank` (with `lora_targets`, default q_proj,v_proj, or "all-linear"; `lora_alpha`, `lora_dropout`: PEFT's
    defaults when None) measures the model wrapped by PEFT's `get_peft_model` (the `measure` extra's peft).
    `attention` "eager" builds the model with transformers' eager attention and bills `--attention eager` (one
    process, no LoRA). `recompute`: "none", "full" (transformers' gradient checkpointing, every layer) or "every:K"
    (each run of K layers one checkpoint) or "selective:core_attn" (the attention core checkpointed;
    measure/checkpointing.py; both in one process). `optimizer`: the bill's optimizer as torch.optim runs it at the
    bill's hyperparameters (measure/optimizers.py: adamw, adam, sgd, sgd-momentum, adafactor, muon; one process),
    `optimizer_impl` its path where torch.optim has it (Adafactor: no fused; Muon: the AdamW beside it).
    """
    from stepbill.report.check_json import sharded_check_json, single_check_json

    for key, value in (("seq", seq), ("micro_batch", micro_batch), ("dp", dp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise StepbillError(f"{key} must be a positive integer, got {value!r}")
    from stepbill.measure.sharded import measured_recipe

    if isinstance(zero, bool) or zero not in (0, 1, 2, 3):
        raise StepbillError(f"zero must be 0, 1, 2 or 3, got {zero!r}")
    from stepbill.check_lora import QLORA_REFUSED, bill_lora, lora_setup, lora_unmodelled

    if recipe == "qlora-nf4":
        raise StepbillError(QLORA_REFUSED)
    recipe = measured_recipe(zero, recipe, flag="recipe")
    if attention not in ("sdpa", "eager"):
        raise StepbillError(f"attention must be 'sdpa' or 'eager', got {attention!r}")
    if attention != "sdpa" and (dp > 1 or zero or lora_rank is not None):
        raise StepbillError("attention='eager' is measured in one process without LoRA")
    if mode not in ("auto", "real", "fake"):
        raise StepbillError(f"mode must be 'auto', 'real' or 'fake', got {mode!r}")
    sharded = dp > 1 or zero != 0
    from stepbill.measure.optimizers import refuse_optimizer

    refuse_optimizer(optimizer, optimizer_impl, sharded, "dp/zero")
    from stepbill.measure.session import refuse_beyond_one_process

    refuse_beyond_one_process(recompute, sharded, "recompute", "dp/zero")
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
    from stepbill.engine.unmodelled import apply_dropout_option
    from stepbill.spec.hf import to_hf_config
    from stepbill.spec.model import ModelSpec
    from stepbill.spec.recipe import make_recipe

    if isinstance(model, ModelSpec):
        spec = apply_dropout_option(model, dropout)
        config = to_hf_config(spec)
    else:
        spec, config = model_and_config(model, dropout)
    lora = lora_setup(spec, recipe, recompute, sharded, lora_rank, lora_targets, lora_alpha, lora_dropout)
    if sharded:
        from stepbill.check_ranks import measure_sharded

        results = measure_sharded(spec, seq, micro_batch, recipe, dp, zero, rank, mode, config, optimizer_impl)
        by_rank = {r: rows for r, _, _, _, rows in results}
        summary = "; ".join(f"rank {r}: {verdict(rows)}" for r, rows in by_rank.items())
        modes = ",".join(sorted({m for _, m, _, _, _ in results}))
        json_out = sharded_check_json(spec.name, dp, zero, results, [verdict(rows) for rows in by_rank.values()])
        json_out |= notes_json(spec, recipe, dropout, bill_command(
            model if isinstance(model, str) else spec.name, seq=seq, micro_batch=micro_batch, recipe=recipe,
            convention="eager", optimizer_impl=optimizer_impl, dp=dp, zero=zero, dropout=dropout))
        return CheckResult([row for rows in by_rank.values() for row in rows], summary, modes, json_out,
                           by_rank=by_rank)
    engine_bill, note = predict(spec, make_recipe(recipe, optimizer, micro_batch, seq, recompute,
                                                  optimizer_impl=optimizer_impl, **bill_lora(lora)), attention)
    chosen = choose_mode(mode, engine_bill.lines["memory.peak"].value)
    measured = measure_step(config, mode=chosen, recipe=recipe, optimizer_impl=optimizer_impl,
                            micro_batch=micro_batch, seq_len=seq, recompute=recompute, lora=lora,
                            attention=attention, optimizer=optimizer)
    rows = compare(predictions(engine_bill), measured)
    summary = verdict(rows)
    command = bill_command(model if isinstance(model, str) else spec.name, seq=seq, micro_batch=micro_batch,
                           recipe=recipe, convention=engine_bill.convention, recompute=recompute,
                           optimizer_impl=optimizer_impl, dropout=dropout, attention=attention, lora=lora,
                           optimizer=optimizer)
    json_out = single_check_json(spec, chosen, engine_bill, measured, rows, summary) | notes_json(spec, recipe,
                                                                                                  dropout, command)
    json_out["unmodelled"] += lora_unmodelled(lora)
    from stepbill.report.notes import attention_unmodelled

    json_out["unmodelled"] += attention_unmodelled(engine_bill)  # --attention eager where not modelled yet
    return CheckResult(rows, summary, chosen, json_out, note or None)


def notes_json(spec: Any, recipe: str, dropout: float | None, command: str | None = None) -> dict[str, Any]:
    """What every `check --json` adds: the recipe measured (FSDP's mixed precision spelled out), `--dropout`,
    the configured fields the bill does not model yet, and the `stepbill bill` command of the prediction
    (`bill_command`; None for a launched run)."""
    from stepbill.engine.unmodelled import unmodelled
    from stepbill.measure.sharded import FSDP_RECIPE, FSDP_SETUP

    return {"recipe": recipe, "mixed_precision": dict(FSDP_SETUP) if recipe == FSDP_RECIPE else None,
            "dropout_option": None if dropout is None else float(dropout), "unmodelled": unmodelled(spec),
            "bill_command": command}


def bill_command(model: str, *, seq: int, micro_batch: int, recipe: str, convention: str, recompute: str = "none",
                 optimizer_impl: str = "single", dp: int = 1, zero: int = 0, dropout: float | None = None,
                 attention: str = "sdpa", lora: Any = None, optimizer: str = "adamw") -> str:
    """The `stepbill bill` command whose numbers `check` compares with the measurement (spelled by
    spec/command.bill_command, as every printed command): its per-rank eager class under `--dp N --zero Z`
    (FSDP2's mixed precision, check's fsdp-mixed-bf16, is the bill's mixed-bf16 under ZeRO-2/3:
    engine/parallel/fsdp2_ranks.FSDP_RECIPES), else its one-GPU lines."""
    from stepbill.measure.sharded import FSDP_RECIPE
    from stepbill.spec.command import bill_command as spelled

    sharded = dp > 1 or zero != 0
    return spelled(model, {
        "seq": seq, "micro_batch": micro_batch, "recipe": "mixed-bf16" if recipe == FSDP_RECIPE else recipe,
        "optimizer": None if optimizer == "adamw" else optimizer,
        "recompute": None if recompute == "none" else recompute,
        "optimizer_impl": None if optimizer_impl == "single" else optimizer_impl,
        "dp": dp if sharded else None, "zero": zero if sharded else None,
        "lora_rank": None if lora is None else lora.rank, "lora_targets": None if lora is None else lora.targets,
        "attention": None if attention == "sdpa" else attention, "dropout": dropout, "convention": convention})


class _CallableModule(types.ModuleType):
    """Calling the module calls `measure_and_compare`: `stepbill.check(model, ...)`."""

    def __call__(self, *args: Any, **kwargs: Any) -> CheckResult:
        return measure_and_compare(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
