"""The public Python API: `stepbill.bill(...)` and friends, documented in docs/api.md.

    >>> import stepbill
    >>> b = stepbill.bill("llama3-8b", seq=8192, recipe="mixed-bf16", dp=8, zero=3, gpu="h100-sxm")
    >>> b.ranks[0].memory.peak < b.memory.peak
    True

`make_step_bill` is the one place where keyword options become a Recipe, a layout and an engine Bill: the CLI's
`bill` command calls it too, so the two cannot drift. Its own checks name the Python parameter
(`micro_batch must be a positive integer`); the CLI passes `cli_flag` so the same check names `--micro-batch`.
Everything heavy (the engine, torch) is imported inside the functions: `import stepbill` stays cheap.
The result types live in stepbill/result.py; `stepbill.check(...)` is the callable module stepbill/check.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stepbill.errors import StepbillError
from stepbill.result import BillRun, RankView, Section, StepBill
from stepbill.spec.command import cli_flag

if TYPE_CHECKING:
    from stepbill.engine.bill import Bill as EngineBill
    from stepbill.engine.fit import Fit
    from stepbill.engine.recompute.budget import Solution
    from stepbill.engine.recompute.ranking import Crossover, Ranking
    from stepbill.spec.hardware import GPU
    from stepbill.spec.model import ModelSpec

GIB = 2**30
_POSITIVE_INTS = ("seq", "micro_batch", "tp", "pp", "cp", "ep", "vpp", "micro_batches")
_OPTIONAL_POSITIVE_INTS = ("dp", "etp", "shard_group", "gpus", "lora_rank")
_STRINGS = ("recipe", "optimizer", "recompute", "optimizer_impl", "convention", "attention", "pp_schedule", "device")
_FLAGS = ("sp", "offload_optimizer", "offload_activations")


def python_name(param: str) -> str:
    """How the API's own checks name a parameter: as it is spelled in Python."""
    return param


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
    from stepbill.spec.schema import EFFICIENCY, GPU_MEM_GIB, WORLD, check_value

    if options["gpu_mem_gib"] is not None:  # the rules are spec/schema.py's, declared once
        check_value(GPU_MEM_GIB, f"{name('gpu_mem_gib')} (GiB)", options["gpu_mem_gib"])
    if options["efficiency"] is not None:  # None: the per-op time model; a number overrides its GEMM rate
        check_value(EFFICIENCY, name("efficiency"), options["efficiency"])
    if options["gpus"] is not None:
        check_value(WORLD, name("gpus"), options["gpus"])
    reserve = options["reserve_gib"]
    if reserve is not None and (not _is_number(reserve) or not math.isfinite(reserve) or reserve < 0):
        raise StepbillError(f"{name('reserve_gib')} must be >= 0 and finite (GiB), got {reserve!r}")
    check_host_mem(options["host_mem_gib"], name)
    gpu = options["gpu"]
    if gpu is not None and not isinstance(gpu, str):
        raise StepbillError(f"{name('gpu')} must be a catalog GPU name, got {gpu!r}")


def check_host_mem(host_mem_gib: Any, name: Callable[[str], str]) -> None:
    """A node's host memory in GiB (`--host-mem`): a finite number > 0, or None."""
    if host_mem_gib is not None and (not _is_number(host_mem_gib) or not math.isfinite(host_mem_gib)
                                     or host_mem_gib <= 0):
        raise StepbillError(f"{name('host_mem_gib')} must be > 0 and finite (GiB per node), got {host_mem_gib!r}")


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


TOKEN_SUFFIXES = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12,
                  "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}


def parse_tokens(value: int | str | None, param: str, name: Callable[[str], str] = python_name) -> int | None:
    """A token count from an int or a string with a suffix: decimal K / M / B (or G) / T (4M = 4,000,000;
    2T = 2e12; 1.5T allowed when whole), binary Ki / Mi / Gi / Ti (4Mi = 4,194,304). None stays None."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        count = value
    elif isinstance(value, str):
        text = value.strip().replace(",", "").replace("_", "")
        digits = text.rstrip("KkMmBbGgTtIi")
        suffix = text[len(digits):].upper()
        try:
            number = float(digits)
        except ValueError:
            number = math.nan
        if suffix not in TOKEN_SUFFIXES or not math.isfinite(number) or number * TOKEN_SUFFIXES[suffix] % 1:
            raise StepbillError(f"{name(param)} takes a whole token count such as 4M, 2T or 4Mi (binary), "
                                f"got {value!r}")
        count = int(number * TOKEN_SUFFIXES[suffix])
    else:
        raise StepbillError(f"{name(param)} must be a token count such as 4M or 2T, got {value!r}")
    if count < 1:
        raise StepbillError(f"{name(param)} must be at least 1 token, got {value!r}")
    return count


def _micro_batches(global_batch: int | None, micro_batches: int, dp: int, micro_batch: int, seq: int,
                   name: Callable[[str], str]) -> int:
    """Micro-batches per step from the global batch: global batch ÷ (dp·micro-batch·seq), rounded to the nearest
    whole count (at least 1) — "4M tokens" in papers is a round figure (Llama 3's is 512 × 8,192 = 4,194,304);
    the run's lines state the requested and the effective batch (engine/run.py)."""
    if global_batch is None:
        return micro_batches
    if micro_batches != 1:
        raise StepbillError(f"give {name('global_batch_tokens')} or {name('micro_batches')}, not both")
    unit = dp * micro_batch * seq
    return max(1, math.floor(global_batch / unit + 0.5))


def _stage_layers(value: str | Sequence[int] | None, name: Callable[[str], str]) -> tuple[int, ...] | None:
    """Layers per pipeline stage from "7,8,8,7" or (7, 8, 8, 7); None stays None."""
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",")] if isinstance(value, str) else list(value)
    if isinstance(value, str) and parts and all(p.isascii() and p.isdigit() for p in parts):
        return tuple(int(p) for p in parts)
    if not isinstance(value, str) and parts and all(isinstance(p, int) and not isinstance(p, bool) and p > 0
                                                    for p in parts):
        return tuple(parts)
    raise StepbillError(f"{name('pp_layers')} takes comma-separated positive integers, got {value!r}")


def _data_parallel(dp: int | None, gpus: int | None, tp: int, pp: int, cp: int,
                   name: Callable[[str], str]) -> tuple[int, str]:
    """dp as given; without it, gpus ÷ (tp·pp·cp) when gpus is given (said in the header), else 1."""
    if dp is not None:
        return dp, ""
    if gpus is None:
        return 1, ""
    model_parallel = tp * pp * cp
    if gpus % model_parallel:
        raise StepbillError(f"{name('gpus')} {gpus} is not a multiple of tp·pp·cp = {tp}·{pp}·{cp} = "
                            f"{model_parallel}; give {name('dp')}")
    dp = gpus // model_parallel
    return dp, f"dp {dp} = {name('gpus')} {gpus} ÷ tp·pp·cp {model_parallel} (no {name('dp')} given)"


def fit_from_options(result: EngineBill, gpu_mem_gib: float | None = None, reserve_gib: float | None = None,
                     name: Callable[[str], str] = python_name, host_mem_gib: float | None = None) -> Fit | None:
    """The fit verdict of a bill: on `result.gpu` or a card of `gpu_mem_gib` GiB (which wins), keeping
    `reserve_gib` GiB back (None: the default reserve), in a node of `host_mem_gib` GiB host memory (None: the
    catalog's reference node, unknown for --gpu-mem); None without a card. engine/fit.py's `judge` does the work."""
    from dataclasses import replace

    from stepbill.engine.fit import Card, judge

    if gpu_mem_gib is not None:
        card = Card.from_gib(gpu_mem_gib)
        if result.gpu is not None:  # the card's memory given, its node the catalog GPU's
            node = Card.from_gpu(result.gpu)
            card = replace(card, gpus_per_node=node.gpus_per_node, host_bytes=node.host_bytes,
                           host_source=node.host_source)
    elif result.gpu is not None:
        card = Card.from_gpu(result.gpu)
    elif reserve_gib is not None or host_mem_gib is not None:
        given = "reserve_gib" if reserve_gib is not None else "host_mem_gib"
        raise StepbillError(f"{name(given)} needs a card: give {name('gpu')} or {name('gpu_mem_gib')}")
    else:
        return None
    return judge(result, card.with_host(host_mem_gib), reserve_gib)


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
    reserve_gib: float | None = None,
    host_mem_gib: float | None = None,
    dp: int | None = None,
    tp: int = 1,
    pp: int = 1,
    pp_layers: str | Sequence[int] | None = None,
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
    efficiency: float | None = None,
    dropout: float | None = None,
    global_batch_tokens: int | str | None = None,
    train_tokens: int | str | None = None,
    price_per_gpu_hour: float | None = None,
    device: str = "cpu",
    name: Callable[[str], str] = python_name,
) -> BillRun:
    """The engine's Bill for `model` under these options, with its fit verdict (shared by `stepbill.bill` and
    `stepbill bill`).

    `name` spells a parameter in error messages: `python_name` for the API, `cli_flag` for the CLI.
    """
    _check_options(dict(locals()), name)
    from dataclasses import replace

    from stepbill.engine.bill import make_bill
    from stepbill.engine.run import run_lines
    from stepbill.inputs import check_bill_inputs
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
    from stepbill.engine.unmodelled import apply_dropout_option

    spec = apply_dropout_option(spec, dropout, name("dropout"))  # 0: no dropout; None: the config's
    dp, layout_note = _data_parallel(dp, gpus, tp, pp, cp, name)
    global_batch = parse_tokens(global_batch_tokens, "global_batch_tokens", name)
    train = parse_tokens(train_tokens, "train_tokens", name)
    if price_per_gpu_hour is not None and (not _is_number(price_per_gpu_hour) or not math.isfinite(price_per_gpu_hour)
                                           or price_per_gpu_hour < 0):
        raise StepbillError(f"{name('price_per_gpu_hour')} must be >= 0 and finite, got {price_per_gpu_hour!r}")
    if price_per_gpu_hour is not None and (train is None or gpu is None):
        raise StepbillError(f"{name('price_per_gpu_hour')} needs {name('train_tokens')} and {name('gpu')}")
    micro_batches = _micro_batches(global_batch, micro_batches, dp, micro_batch, seq, name)
    layout = Parallel(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, sp=sp, zero=zero, shard_group=shard_group,
                      micro_batches=micro_batches, pp_schedule=pp_schedule, vpp=vpp,  # type: ignore[arg-type]
                      offload_optimizer=offload_optimizer, offload_activations=offload_activations,
                      pp_layers=_stage_layers(pp_layers, name))
    validate_layout(spec, layout, seq, gpus)
    the_gpu = load_gpu(gpu) if gpu is not None else None
    the_recipe = make_recipe(recipe, optimizer, micro_batch, seq, recompute, lora_rank, targets, layout,
                             optimizer_impl, device)
    check_bill_inputs(spec, the_recipe)  # cross-field: seq vs learned positions, LoRA targets and rank
    card = gpu_mem_gib * GIB if gpu_mem_gib else (the_gpu.usable_bytes if the_gpu else None)
    result = make_bill(spec, the_recipe, card, convention, attention, gpu=the_gpu, efficiency=efficiency)
    notes = _seed_notes(model, seq, micro_batch, recompute, (recipe, optimizer, convention, attention, lora_rank),
                        layout) if isinstance(model, str) else []
    result = replace(result, run=run_lines(the_recipe, result.time, train, price_per_gpu_hour, global_batch))
    return BillRun(result, fit_from_options(result, gpu_mem_gib, reserve_gib, name, host_mem_gib), layout_note,
                   tuple(notes), None if dropout is None else float(dropout))


def _seed_notes(model: str, seq: int, micro_batch: int, recompute: str, options: tuple, layout: object) -> list[str]:
    """Where this bill is one of seed 000's worked examples, the seed's differing numbers and why (lab seed-checks).
    `options` is (recipe, optimizer, convention, attention, LoRA rank); the seed's are the defaults."""
    from stepbill.spec.parallel import Parallel

    if options != ("mixed-bf16", "adamw", "ideal", "sdpa", None) or layout != Parallel():
        return []
    from stepbill.lab.seed_checks import bill_notes

    return bill_notes(model, seq, micro_batch, recompute)


def ranking_from_options(
    spec: ModelSpec, *, seq: int = 131_072, micro_batch: int = 1, recipe: str = "mixed-bf16",
    layer_kind: str | None = None, group: str = "op", row7: str = "seed", threshold: float = 3.0,
    budget: str | None = None, convention: str = "ideal", attention: str = "sdpa",
) -> tuple[str, Ranking, list[Crossover], float, tuple[Solution, Solution] | None]:
    """`stepbill recompute`'s computation: (layer kind, ranking, crossovers, attention slope, budget solutions).

    Shared by the `recompute` command and the web API (`stepbill serve`), so the two cannot drift.
    """
    from stepbill.engine import activations as act
    from stepbill.engine import flops as fl
    from stepbill.engine.recompute import budget as rb
    from stepbill.engine.recompute.ranking import attention_crossovers, rank_layer
    from stepbill.errors import unknown_name
    from stepbill.inputs import check_seq
    from stepbill.spec.recipe import make_recipe
    from stepbill.spec.recompute_policy import parse_size
    from stepbill.spec.schema import THRESHOLD, check_value

    check_value(THRESHOLD, "--threshold (TFLOP/GiB)", threshold)
    the_recipe = make_recipe(recipe, micro_batch=micro_batch, seq_len=seq)
    check_seq(spec, seq)
    if convention not in act.CONVENTIONS:
        raise unknown_name("convention", convention, act.CONVENTIONS)
    if attention not in act.ATTENTIONS:
        raise unknown_name("attention implementation", attention, act.ATTENTIONS)
    if row7 not in ("seed", "label"):  # checked even under --group op: a typo is never silently ignored
        raise unknown_name("--row7 reading", row7, ("seed", "label"))
    budget_bytes = None
    if budget is not None:
        budget_bytes = parse_size(budget)
    kind = layer_kind or ("moe" if spec.n_moe_layers else "dense")
    a_bytes = the_recipe.precision.activation
    ranking = rank_layer(spec, kind, seq, micro_batch, a_bytes, convention, attention, group, row7, threshold)
    slope = fl.attention_slope(spec)
    crossings = attention_crossovers(spec, ranking)
    solved = None
    if budget_bytes is not None:
        problem = rb.problem_for_spec(spec, budget_bytes, seq, micro_batch, a_bytes, convention, attention)
        solved = (rb.solve_exact(problem), rb.solve_greedy(problem))
    return kind, ranking, crossings, slope, solved


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
    reserve_gib: float | None = None,
    host_mem_gib: float | None = None,
    dp: int | None = None,
    tp: int = 1,
    pp: int = 1,
    pp_layers: str | Sequence[int] | None = None,
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
    efficiency: float | None = None,
    dropout: float | None = None,
    global_batch_tokens: int | str | None = None,
    train_tokens: int | str | None = None,
    price_per_gpu_hour: float | None = None,
    device: str = "cpu",
) -> StepBill:
    """The bill of one training step of `model` (preset, ModelSpec/config.json path, Hub id or ModelSpec).

    The keywords are `stepbill bill`'s options with Python names (`--micro-batch` → `micro_batch`,
    `--gpu-mem` → `gpu_mem_gib`); defaults are the CLI's. Bad input raises StepbillError naming the parameter.
    Token counts (`global_batch_tokens`, `train_tokens`) take ints or "4M" / "2T" (decimal), "4Mi" (binary); the
    run totals (steps, seconds, GPU-hours, cost) are in `.run`.
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
                              attention_kind(spec), spec.moe is not None))
    return rows


def attention_kind(spec: ModelSpec) -> str:
    """mla, mha (kv heads = heads), mqa (one kv head) or gqa (groups of query heads share a kv head)."""
    a = spec.attention
    if a.kind == "mla":
        return "mla"
    if a.kv_heads == a.n_heads:
        return "mha"
    return "mqa" if a.kv_heads == 1 else f"gqa ({a.kv_heads} kv heads)"


def gpus() -> list[GPU]:
    """The GPU catalog (memory in bytes, peaks in FLOP/s, bandwidths in B/s), in catalog order."""
    from stepbill.spec.hardware import gpu_catalog

    return list(gpu_catalog().values())


__all__ = ["BillRun", "ModelInfo", "RankView", "Section", "StepBill", "bill", "cli_flag", "fit_from_options", "gpus",
           "load_model", "make_step_bill", "models", "parse_tokens", "python_name", "ranking_from_options"]
