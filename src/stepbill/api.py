"""The public Python API: `stepbill.bill(...)` and friends, documented in docs/api.md.

    >>> import stepbill
    >>> b = stepbill.bill("llama3-8b", seq=8192, recipe="mixed-bf16", dp=8, zero=3, gpu="h100-sxm")
    >>> b.ranks[0].memory.peak < b.memory.peak
    True

`make_step_bill` is the one place where keyword options become a Recipe, a layout and an engine Bill: the CLI's
`bill` command calls it too, so the two cannot drift. Its own checks name the Python parameter
(`micro_batch must be a positive integer`); the CLI passes `cli_flag` so the same check names `--micro-batch`.
Everything heavy (the engine, torch) is imported inside the functions: `import stepbill` stays cheap.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, make_dataclass
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any

from stepbill.errors import StepbillError

if TYPE_CHECKING:
    from stepbill.engine.bill import Bill as EngineBill
    from stepbill.engine.line import Line
    from stepbill.spec.hardware import GPU
    from stepbill.spec.model import ModelSpec

GIB = 2**30
_CLI_FLAGS = {"gpu_mem_gib": "--gpu-mem"}  # where the CLI flag is not "--" + the parameter with dashes
_POSITIVE_INTS = ("seq", "micro_batch", "dp", "tp", "pp", "cp", "ep", "vpp", "micro_batches")
_OPTIONAL_POSITIVE_INTS = ("etp", "shard_group", "gpus", "lora_rank")
_STRINGS = ("recipe", "optimizer", "recompute", "optimizer_impl", "convention", "attention", "pp_schedule")
_FLAGS = ("sp", "offload_optimizer", "offload_activations")
_INTEGER_UNITS = ("bytes", "params", "FLOPs", "cards")  # values the JSON prints as integers
_ATTR_ALIASES = {"6nd": "six_nd", "6nd_ratio": "step_over_6nd"}  # line suffixes that are not identifiers


def python_name(param: str) -> str:
    """How the API's own checks name a parameter: as it is spelled in Python."""
    return param


def cli_flag(param: str) -> str:
    """How the CLI's checks name a parameter: its flag (`micro_batch` → `--micro-batch`)."""
    return _CLI_FLAGS.get(param, "--" + param.replace("_", "-"))


def _check_options(options: Mapping[str, Any], name: Callable[[str], str]) -> None:
    """Types and ranges of the plain options, before anything is built: one StepbillError naming the option."""
    for key in _POSITIVE_INTS + _OPTIONAL_POSITIVE_INTS:
        value = options[key]
        if value is None and key in _OPTIONAL_POSITIVE_INTS:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise StepbillError(f"{name(key)} must be a positive integer, got {value!r}")
    zero = options["zero"]
    if isinstance(zero, bool) or not isinstance(zero, int) or zero not in (0, 1, 2, 3):
        raise StepbillError(f"{name('zero')} must be 0, 1, 2 or 3, got {zero!r}")
    for key in _STRINGS:
        if not isinstance(options[key], str):
            raise StepbillError(f"{name(key)} must be a string, got {options[key]!r}")
    for key in _FLAGS:
        if not isinstance(options[key], bool):
            raise StepbillError(f"{name(key)} must be True or False, got {options[key]!r}")
    gpu_mem, efficiency = options["gpu_mem_gib"], options["efficiency"]
    if gpu_mem is not None and (not _is_number(gpu_mem) or not math.isfinite(gpu_mem) or gpu_mem <= 0):
        raise StepbillError(f"{name('gpu_mem_gib')} must be positive and finite (GiB), got {gpu_mem!r}")
    if not _is_number(efficiency) or not 0 < efficiency <= 1:
        raise StepbillError(f"{name('efficiency')} must lie in (0, 1], got {efficiency!r}")
    gpu = options["gpu"]
    if gpu is not None and not isinstance(gpu, str):
        raise StepbillError(f"{name('gpu')} must be a catalog GPU name, got {gpu!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _lora_targets(targets: str | Sequence[str] | None, name: Callable[[str], str]) -> tuple[str, ...] | None:
    if targets is None:
        return None
    if isinstance(targets, str):
        return tuple(t.strip() for t in targets.split(",") if t.strip())
    if not all(isinstance(t, str) for t in targets):
        raise StepbillError(f"{name('lora_targets')} must be names of matrices, got {targets!r}")
    return tuple(t.strip() for t in targets if t.strip())


def make_step_bill(
    model: str | ModelSpec,
    *,
    seq: int = 2048,
    micro_batch: int = 1,
    recipe: str = "mixed-bf16",
    optimizer: str = "adamw",
    recompute: str = "none",
    optimizer_impl: str = "single",
    convention: str = "ideal",
    attention: str = "sdpa",
    lora_rank: int | None = None,
    lora_targets: str | Sequence[str] | None = None,
    gpu_mem_gib: float | None = None,
    dp: int = 1,
    tp: int = 1,
    pp: int = 1,
    cp: int = 1,
    ep: int = 1,
    etp: int | None = None,
    zero: int = 0,
    shard_group: int | None = None,
    sp: bool = False,
    pp_schedule: str = "1f1b",
    vpp: int = 1,
    micro_batches: int = 1,
    offload_optimizer: bool = False,
    offload_activations: bool = False,
    gpu: str | None = None,
    gpus: int | None = None,
    efficiency: float = 0.5,
    name: Callable[[str], str] = python_name,
) -> EngineBill:
    """The engine's Bill for `model` under these options (shared by `stepbill.bill` and `stepbill bill`).

    `name` spells a parameter in error messages: `python_name` for the API, `cli_flag` for the CLI.
    """
    _check_options(dict(locals()), name)
    from stepbill.engine.bill import make_bill
    from stepbill.spec.hardware import load_gpu
    from stepbill.spec.model import ModelSpec
    from stepbill.spec.parallel import Parallel, validate_layout
    from stepbill.spec.recipe import make_recipe

    targets = _lora_targets(lora_targets, name)
    if targets and lora_rank is None:
        raise StepbillError(f"{name('lora_targets')} needs {name('lora_rank')}")
    if isinstance(model, ModelSpec):
        spec = model
    elif isinstance(model, str):
        spec = load_model(model)
    else:
        raise StepbillError(f"{name('model')} must be a preset name, a path, a Hub id or a ModelSpec, got {model!r}")
    layout = Parallel(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, sp=sp, zero=zero, shard_group=shard_group,
                      micro_batches=micro_batches, pp_schedule=pp_schedule, vpp=vpp,  # type: ignore[arg-type]
                      offload_optimizer=offload_optimizer, offload_activations=offload_activations)
    validate_layout(spec, layout, seq, gpus)
    the_gpu = load_gpu(gpu) if gpu is not None else None
    the_recipe = make_recipe(recipe, optimizer, micro_batch, seq, recompute, lora_rank, targets, layout,
                             optimizer_impl)
    card = gpu_mem_gib * GIB if gpu_mem_gib else (the_gpu.memory_bytes if the_gpu else None)
    return make_bill(spec, the_recipe, card, convention, attention, gpu=the_gpu, efficiency=efficiency)


# ---------------------------------------------------------------------------------------------------------------
# Typed views of a bill: one frozen dataclass per section, generated from the Line names.


class Section:
    """Base of the generated section types (`b.memory`, `b.flops`, ...): values by attribute, typo-safe."""

    _section: str = ""

    def __getattr__(self, attr: str) -> Any:  # only called when normal lookup fails: a typo
        valid = ", ".join(f.name for f in fields(self))  # type: ignore[arg-type]
        raise AttributeError(f"{self._section} has no {attr!r}; valid: {valid}")

    def as_dict(self) -> dict[str, float | int]:
        """{attribute: value} in the order of the bill's lines."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]


def _attr(suffix: str) -> str:
    attr = _ATTR_ALIASES.get(suffix, re.sub(r"\W", "_", suffix))
    return attr if attr.isidentifier() and not attr[0].isdigit() else f"_{attr}"


@cache
def _section_type(section: str, attrs: tuple[str, ...]) -> type:
    cls_name = "".join(part.capitalize() for part in re.split(r"\W|_", section) if part) or "Section"
    return make_dataclass(cls_name, [(a, float) for a in attrs], bases=(Section,), frozen=True,
                          namespace={"_section": section})


def _section(section: str, values: Mapping[str, float | int]) -> Section:
    """A frozen `section` object with one attribute per key of `values` (line suffixes)."""
    attrs = {_attr(k): v for k, v in values.items()}
    return _section_type(section, tuple(attrs))(**attrs)


def _number(line: Line) -> float | int:
    """The value as the JSON prints it: bytes, params, FLOPs and cards as integers."""
    return round(line.value) if line.unit in _INTEGER_UNITS else line.value


class RankView:
    """One rank class of the per-GPU bill: `memory` (bytes), `cpu` (offloaded bytes) and its JSON keys.

    Built from that class's entry in `to_json()["ranks"]`, so every key the bill's JSON has (`ranks`,
    `pp_stages`, `layers`, `fits`, ...) is an attribute here too (`class` is spelled `name`).
    """

    def __init__(self, entry: dict[str, Any]) -> None:
        self._entry = entry
        self.memory = _section("ranks[].memory", entry["memory"])
        self.cpu = dict(entry.get("cpu", {}))

    @property
    def name(self) -> str:
        """The class's label, e.g. "all ranks" or "pp stage 0"."""
        return str(self._entry["class"])

    def to_json(self) -> dict[str, Any]:
        """This class's entry of the bill's JSON."""
        return self._entry

    def __getattr__(self, attr: str) -> Any:
        entry = self.__dict__.get("_entry", {})
        if attr in entry:
            return entry[attr]
        valid = ", ".join(sorted({"name", "memory", "cpu", *entry} - {"class"}))
        raise AttributeError(f"a rank class has no {attr!r}; valid: {valid}")

    def __repr__(self) -> str:
        return f"RankView({self.name!r}, peak={self.memory.peak:,} B)"


class StepBill:
    """The bill of one training step, as returned by `stepbill.bill`.

    Sections hold the bill's lines by name: `memory`, `params`, `flops`, `checkpoint` always; `cards` when a
    card size is known (`gpu_mem_gib` or `gpu`), `time` when a `gpu` is given (else None). Bytes, params,
    FLOPs and cards are integers (as in the JSON); ratios are floats. `engine` is the engine's own Bill.
    """

    def __init__(self, engine_bill: EngineBill) -> None:
        self.engine = engine_bill

    def _lines_of(self, section: str) -> dict[str, Line]:
        prefix = f"{section}."
        return {k.removeprefix(prefix): v for k, v in self.lines.items() if k.startswith(prefix)}

    def _section_or_none(self, section: str) -> Section | None:
        lines = self._lines_of(section)
        return _section(section, {k: _number(v) for k, v in lines.items()}) if lines else None

    @cached_property
    def lines(self) -> dict[str, Line]:
        """Every named line of the bill (time.* included with a GPU), by name."""
        extra = self.engine.time.lines if self.engine.time is not None else {}
        return {**self.engine.lines, **extra}

    @cached_property
    def memory(self) -> Section:
        """memory.* lines in bytes: weights, grads, optimizer, model, resident, activations, peak, ..."""
        return _section("memory", {k: _number(v) for k, v in self._lines_of("memory").items()})

    @cached_property
    def params(self) -> Section:
        """params.* lines: total, active, trainable (counts)."""
        return _section("params", {k: _number(v) for k, v in self._lines_of("params").items()})

    @cached_property
    def flops(self) -> Section:
        """flops.* lines: step, forward, attention, ... (FLOPs, 2 per multiply-add); six_nd, step_over_6nd."""
        return _section("flops", {k: _number(v) for k, v in self._lines_of("flops").items()})

    @cached_property
    def checkpoint(self) -> Section:
        """checkpoint.* lines: bytes of a resumable checkpoint."""
        return _section("checkpoint", {k: _number(v) for k, v in self._lines_of("checkpoint").items()})

    @cached_property
    def cards(self) -> Section | None:
        """cards.resident and cards.peak (whole cards) when a card size is known; else None."""
        return self._section_or_none("cards")

    @cached_property
    def time(self) -> Section | None:
        """time.* lines (seconds, ratios, tokens/s) when a `gpu` was given; else None."""
        return self._section_or_none("time")

    @cached_property
    def _json(self) -> dict[str, Any]:
        from stepbill.report.bill_json import bill_to_json

        return bill_to_json(self.engine)

    def to_json(self) -> dict[str, Any]:
        """Exactly the object `stepbill bill --json` prints for the same inputs (a fresh copy)."""
        import copy

        return copy.deepcopy(self._json)

    @cached_property
    def ranks(self) -> tuple[RankView, ...]:
        """The per-GPU bill: one entry per distinct rank class (a single one without a parallel layout)."""
        return tuple(RankView(entry) for entry in self._json["ranks"])

    @property
    def worst_rank(self) -> RankView:
        """The rank class with the highest peak."""
        return max(self.ranks, key=lambda r: r.memory.peak)

    def line(self, name: str) -> Line:
        """The Line `name` ("memory.peak", "flops.six_nd" or "flops.6nd", ...): value, unit, formula, inputs."""
        if name in self.lines:
            return self.lines[name]
        section, _, attr = name.partition(".")
        for key, line in self._lines_of(section).items():
            if _attr(key) == attr:
                return line
        from stepbill.errors import unknown_name

        raise unknown_name("line", name, self.lines)

    def explain(self, name: str) -> str:
        """The line's value, formula with its inputs filled in, and provenance (what `--explain` prints)."""
        line = self.line(name)
        text = [f"{line.name} = {_fmt_value(line)}"]
        if line.formula:
            text.append(f"  formula: {line.formula}")
            text.append(f"  = {line.explain()}")
        text.append(f"  provenance: {line.provenance}")
        if line.convention:
            text.append(f"  convention: {line.convention}")
        return "\n".join(text)

    def __repr__(self) -> str:
        spec, recipe = self.engine.model, self.engine.recipe
        return (f"StepBill({spec.name!r}, {recipe.precision.name}, micro-batch {recipe.micro_batch} × seq "
                f"{recipe.seq_len}: peak {self.memory.peak:,} B)")


def _fmt_value(line: Line) -> str:
    from stepbill.report.units import fmt_bytes

    if line.unit == "bytes":
        return f"{round(line.value):,} B ({fmt_bytes(line.value)})"
    if line.unit in _INTEGER_UNITS:
        return f"{round(line.value):,} {line.unit}"
    return f"{line.value:.6g} {line.unit}" if line.unit != "1" else f"{line.value:.6g}"


# ---------------------------------------------------------------------------------------------------------------
# The functions `import stepbill` exports.


def bill(
    model: str | ModelSpec = "gpt3-125m",
    *,
    seq: int = 2048,
    micro_batch: int = 1,
    recipe: str = "mixed-bf16",
    optimizer: str = "adamw",
    recompute: str = "none",
    optimizer_impl: str = "single",
    convention: str = "ideal",
    attention: str = "sdpa",
    lora_rank: int | None = None,
    lora_targets: str | Sequence[str] | None = None,
    gpu_mem_gib: float | None = None,
    dp: int = 1,
    tp: int = 1,
    pp: int = 1,
    cp: int = 1,
    ep: int = 1,
    etp: int | None = None,
    zero: int = 0,
    shard_group: int | None = None,
    sp: bool = False,
    pp_schedule: str = "1f1b",
    vpp: int = 1,
    micro_batches: int = 1,
    offload_optimizer: bool = False,
    offload_activations: bool = False,
    gpu: str | None = None,
    gpus: int | None = None,
    efficiency: float = 0.5,
) -> StepBill:
    """The bill of one training step of `model` (preset, ModelSpec/config.json path, Hub id or ModelSpec).

    The keywords are `stepbill bill`'s options with Python names (`--micro-batch` → `micro_batch`,
    `--gpu-mem` → `gpu_mem_gib`); defaults are the CLI's. Bad input raises StepbillError naming the parameter.
    """
    options = {k: v for k, v in locals().items() if k != "model"}
    return StepBill(make_step_bill(model, **options))


def load_model(path_or_id: str) -> ModelSpec:
    """A ModelSpec from a preset name, a ModelSpec JSON, a Hugging Face config.json (or its folder) or a Hub id
    (`org/name`, needs the `hub` extra)."""
    from stepbill.spec.presets import load_model as _load

    if not isinstance(path_or_id, str):
        raise StepbillError(f"path_or_id must be a string, got {path_or_id!r}")
    return _load(path_or_id)


@dataclass(frozen=True)
class ModelInfo:
    """One built-in preset as `stepbill models` lists it (params as counts)."""

    name: str
    family: str
    params_total: int
    params_active: int
    layers: int
    hidden: int
    attention: str
    moe: bool


def models() -> list[ModelInfo]:
    """The built-in model presets with total and active parameters (what `stepbill models` lists)."""
    from stepbill.engine.params import param_inventory
    from stepbill.spec.presets import load_preset, preset_names

    rows = []
    for preset in preset_names():
        spec = load_preset(preset)
        inv = param_inventory(spec)
        rows.append(ModelInfo(preset, spec.family, inv.total, inv.active, spec.n_layers, spec.hidden_size,
                              spec.attention.kind, spec.moe is not None))
    return rows


def gpus() -> list[GPU]:
    """The GPU catalog (memory in bytes, peaks in FLOP/s, bandwidths in B/s), in catalog order."""
    from stepbill.spec.hardware import gpu_catalog

    return list(gpu_catalog().values())


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
    from stepbill.cli_check import MEASURABLE_RECIPES, measure_sharded, sharded_check_json, single_check_json

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
    from stepbill.spec.recipe import make_recipe

    spec = model if isinstance(model, ModelSpec) else load_model(model)
    if sharded:
        results = measure_sharded(spec, seq, micro_batch, recipe, dp, zero, rank, mode)
        by_rank = {r: rows for r, _, _, _, rows in results}
        summary = "; ".join(f"rank {r}: {verdict(rows)}" for r, rows in by_rank.items())
        modes = ",".join(sorted({m for _, m, _, _, _ in results}))
        return CheckResult([row for rows in by_rank.values() for row in rows], summary, modes,
                           sharded_check_json(spec.name, dp, zero, results), by_rank=by_rank)
    engine_bill, note = predict(spec, make_recipe(recipe, "adamw", micro_batch, seq, recompute,
                                                  optimizer_impl=optimizer_impl))
    chosen = choose_mode(mode, engine_bill.lines["memory.peak"].value)
    measured = measure_step(to_hf_config(spec), mode=chosen, recipe=recipe, optimizer_impl=optimizer_impl,
                            micro_batch=micro_batch, seq_len=seq, recompute=recompute)
    rows = compare(predictions(engine_bill), measured)
    summary = verdict(rows)
    json_out = single_check_json(spec, chosen, engine_bill, measured, rows, summary)
    return CheckResult(rows, summary, chosen, json_out, note or None)
