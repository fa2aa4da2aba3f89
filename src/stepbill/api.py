"""The public Python API: `stepbill.bill(...)` and friends, documented in docs/api.md.

    >>> import stepbill
    >>> b = stepbill.bill("llama3-8b", seq=8192, recipe="mixed-bf16", dp=8, zero=3, gpu="h100-sxm")
    >>> b.ranks[0].memory.peak < b.memory.peak
    True

`make_step_bill` is the one place where keyword options become a Recipe, a layout and an engine Bill: the CLI's
`bill` command calls it too, so the two cannot drift. Its own checks name the Python parameter
(`micro_batch must be a positive integer`); the CLI passes `cli_flag` so the same check names `--micro-batch`.
Those checks and the parsing of option values live in stepbill/api_options.py.
Everything heavy (the engine, torch) is imported inside the functions: `import stepbill` stays cheap.
The result types live in stepbill/result.py; `stepbill.check(...)` is the callable module stepbill/check.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stepbill.api_options import (
    MAX_PRICE_PER_GPU_HOUR,
    check_finite,
    check_options,
    data_parallel_of,
    lora_targets_of,
    micro_batches_of,
    parse_tokens,
    python_name,
    stage_layers_of,
)
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


def fit_from_options(result: EngineBill, gpu_mem_gib: float | None = None, reserve_gib: float | None = None,
                     name: Callable[[str], str] = python_name, host_mem_gib: float | None = None) -> Fit | None:
    """The fit verdict of a bill: on `result.gpu` or a card of `gpu_mem_gib` GiB (which wins), keeping
    `reserve_gib` GiB back (None: the default reserve), in a node of `host_mem_gib` GiB host memory (None: the
    catalog's reference node, unknown for --gpu-mem); None without a card. engine/fit.py's `judge` does the work."""
    from stepbill.engine.fit import Card, judge

    if gpu_mem_gib is not None:
        card = Card.from_gib(gpu_mem_gib, result.gpu)  # the card's memory given, its node the catalog GPU's
    elif result.gpu is not None:
        card = Card.from_gpu(result.gpu)
    elif reserve_gib is not None or host_mem_gib is not None:
        given = "reserve_gib" if reserve_gib is not None else "host_mem_gib"
        raise StepbillError(f"{name(given)} needs a card: give {name('gpu')} or {name('gpu_mem_gib')}")
    else:
        return None
    return judge(result, card.with_host(host_mem_gib), reserve_gib)


def kernels_of(device: str | None, gpu: str | None, gpu_mem_gib: float | None) -> str:
    """The device whose kernels the eager convention follows (spec/recipe.DEVICES): `device` when given, else CUDA's
    when the bill is for a GPU (`gpu` or `gpu_mem_gib` names a card: its fit verdict is judged on what that card
    runs), else the CPU's, what `stepbill check` measures."""
    if device is not None:
        return device
    return "cuda" if gpu is not None or gpu_mem_gib is not None else "cpu"


def make_step_bill(
    model: str | ModelSpec,
    *,
    seq: int = 2048,
    micro_batch: int = 1,
    recipe: str = "mixed-bf16",
    optimizer: str = "adamw",
    recompute: str = "none",
    optimizer_impl: str | None = None,
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
    device: str | None = None,
    name: Callable[[str], str] = python_name,
) -> BillRun:
    """The engine's Bill for `model` under these options, with its fit verdict (shared by `stepbill.bill` and
    `stepbill bill`).

    `name` spells a parameter in error messages: `python_name` for the API, `cli_flag` for the CLI.
    """
    check_options(dict(locals()), name)
    from dataclasses import replace

    from stepbill.engine.bill import make_bill
    from stepbill.engine.run import run_lines
    from stepbill.inputs import check_bill_inputs
    from stepbill.spec.hardware import load_gpu
    from stepbill.spec.model import ModelSpec
    from stepbill.spec.parallel import Parallel, validate_layout
    from stepbill.spec.recipe import default_optimizer_impl, make_recipe

    targets = lora_targets_of(lora_targets, name)
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
    dp, layout_note = data_parallel_of(dp, gpus, tp, pp, cp, name)
    global_batch = parse_tokens(global_batch_tokens, "global_batch_tokens", name)
    train = parse_tokens(train_tokens, "train_tokens", name)
    check_finite(price_per_gpu_hour, "price_per_gpu_hour", name, high=MAX_PRICE_PER_GPU_HOUR)
    if price_per_gpu_hour is not None and (train is None or gpu is None):
        raise StepbillError(f"{name('price_per_gpu_hour')} needs {name('train_tokens')} and {name('gpu')}")
    micro_batches = micro_batches_of(global_batch, micro_batches, dp, micro_batch, seq, name)
    layout = Parallel(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, sp=sp, zero=zero, shard_group=shard_group,
                      micro_batches=micro_batches, pp_schedule=pp_schedule, vpp=vpp,  # type: ignore[arg-type]
                      offload_optimizer=offload_optimizer, offload_activations=offload_activations,
                      pp_layers=stage_layers_of(pp_layers, name))
    validate_layout(spec, layout, seq, gpus)
    the_gpu = load_gpu(gpu) if gpu is not None else None
    kernels = kernels_of(device, gpu, gpu_mem_gib)
    impl = default_optimizer_impl(optimizer, kernels) if optimizer_impl is None else optimizer_impl
    the_recipe = make_recipe(recipe, optimizer, micro_batch, seq, recompute, lora_rank, targets, layout, impl,
                             kernels)
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
    optimizer_impl: str | None = None,
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
    device: str | None = None,
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
