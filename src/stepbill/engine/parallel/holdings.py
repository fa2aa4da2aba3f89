"""Who holds what of the resident state: each resident item's elements per parameter row, and what one rank of a
pipeline stage holds, owns and keeps per FSDP unit after the tp / ep / etp split and ZeRO sharding (layout.py's
slicing rules). Memoised per (spec, precision, optimizer, LoRA, layout, stage): a planner varies the rest."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from stepbill.engine.fp8 import WEIGHT_CACHE_BYTES, is_fp8_gemm_weight
from stepbill.engine.parallel.layout import (
    representative_stage,
    stage_fractions,
    stage_layer_kinds,
    stage_slices,
    zero_first_stage,
)
from stepbill.engine.params import ParamInventory, ParamTensor
from stepbill.engine.quant import is_quantised
from stepbill.engine.quant import row_bytes as quant_row_bytes
from stepbill.engine.states import lora_adapter_groups, optimizer_state_elements
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import LoRA, Recipe


def row_item_elements(t: ParamTensor, recipe: Recipe | ResidentRecipe) -> dict[str, float]:
    """Elements of each resident item over all copies of row `t` (LoRA: adapters trainable, base frozen).
    The result is shared (memoised): read it, never change it."""
    p = recipe.precision
    return _row_item_elements(t, recipe.optimizer, recipe.lora, bool(p.master), p.quant, p.fp8)


@lru_cache(maxsize=8192)  # pure in its arguments; a bill asks once per tensor row per rank class
def _row_item_elements(t: ParamTensor, optimizer: str, lora: LoRA | None, has_master: bool,
                       quant: str | None = None, fp8: str | None = None) -> dict[str, float]:
    if lora is None:
        groups = [(t.shape, t.copies, t.is_matrix)]
        out: dict[str, float] = {"weights": t.total}
    else:
        groups = list(lora_adapter_groups(ParamInventory((t,)), lora))
        out = {"weights.frozen": t.total, "weights": sum(s[0] * s[1] * c for s, c, _ in groups)}
        if quant is not None and is_quantised(t):  # NF4 codes and constants, counted in bytes (1 B "elements")
            codes, consts = quant_row_bytes(t)
            del out["weights.frozen"]
            out = {"weights.nf4": codes, "weights.nf4_constants": consts, **out}
    if fp8 == "te" and is_fp8_gemm_weight(t):
        out["weights.fp8"] = t.total  # Transformer Engine's fp8 copy + transpose (engine/fp8.py)
    trained = out["weights"]
    out["grads"] = trained
    if has_master:
        out["master"] = trained
    for name, elements in optimizer_state_elements(optimizer, groups).items():
        out[f"optimizer.{name}"] = elements
    return out


def item_bytes_per_element(item: str, recipe: Recipe | ResidentRecipe) -> int:
    p = recipe.precision
    if item in ("weights.nf4", "weights.nf4_constants"):
        return 1  # counted in bytes already (engine/quant.py)
    if item == "weights.fp8":
        return WEIGHT_CACHE_BYTES
    if item == "weights.frozen" and p.frozen is not None:
        return p.frozen
    if item.startswith("weights"):
        return p.weights
    return {"grads": p.grads, "master": p.master}.get(item, p.state)


@dataclass(frozen=True)
class ResidentRecipe:
    """The parts of a Recipe resident state depends on (hashable: the memo key of rank_holdings)."""

    precision: Any
    optimizer: str
    lora: LoRA | None
    parallel: Any


@dataclass
class Held:
    """Bytes one rank of a stage holds of each resident item, and the shares the timeline needs."""

    held: dict[str, float] = field(default_factory=dict)
    owned: dict[str, float] = field(default_factory=dict)
    unsharded: dict[str, float] = field(default_factory=dict)
    grads: dict[str, float] = field(default_factory=dict)  # held grads per group: head, embed, layer.<kind>
    unit_weights: dict[str, float] = field(default_factory=dict)  # elements of one FSDP unit (layer of a kind, root)
    unit_grads: dict[str, float] = field(default_factory=dict)
    unit_grads_held: dict[str, float] = field(default_factory=dict)  # bytes of one unit's grads the rank keeps
    params_share: float = 0.0  # of the model's parameters, the share this rank holds (before ZeRO)
    token_embedding_share: float = 1.0  # of the embedding grads on this rank, the token embedding's


def rank_holdings(spec: ModelSpec, recipe: Recipe, stage: int) -> Held:
    """What one rank of `stage` holds (shared, memoised: read it, never change it). It does not depend on the
    sequence, the micro-batch, the recompute policy, sp or offload, which a planner varies most: the memo key is
    the layout with those fields set to one value (`slicing_layout`), and stages that hold the same rows share one
    entry (`representative_stage`: same layer kinds, same ends of the model)."""
    par = slicing_layout(recipe.parallel)
    return _resident_cached(spec, recipe.precision, recipe.optimizer, recipe.lora, par,
                            representative_stage(spec, par, stage))


def held_key(parallel: Any) -> tuple[Any, ...]:
    """What `Held.held` of every stage reads of a layout (a memo key finer than `slicing_layout`): layouts with the
    same key hold the same bytes of every resident item on every stage, bit for bit, for one model and recipe.

    `_resident_cached` adds, per row in inventory order, item bytes × `Slice.fraction` / (`Slice.zero_group` when
    zero ≥ the item's first sharding stage, else 1). The fraction reads the stage split (pp, vpp, pp_layers), tp and
    the product ep·etp (row_slice); zero_group is the layout's zero_group or expert_zero_group, read only when
    zero ≥ 1 (every item's first sharding stage is ≥ 1: layout.ZERO_FIRST_STAGE). dp and cp apart (read only
    through the shard groups), sp, micro-batches, the schedule 1f1b / gpipe and offload change `holders` (owned
    bytes) or nothing, not `held`."""
    zero = parallel.zero
    return (parallel.pp, parallel.vpp, parallel.pp_layers, parallel.tp, parallel.ep * parallel.expert_tp, zero,
            parallel.zero_group if zero else 1, parallel.expert_zero_group if zero else 1)


def stage_held(spec: ModelSpec, precision: Any, optimizer: str, lora: LoRA | None, parallel: Any,
               stage: int) -> dict[str, float]:
    """`rank_holdings(...).held` alone — bytes one rank of `stage` holds of each resident item — by the same
    arithmetic in the same order as `_resident_cached` (per row in inventory order: item bytes × the row's
    fraction / its ZeRO divisor, added to the item's sum), without the owned, unsharded and per-unit sums and
    with the fractions memoised per stage split and tp / ep·etp (layout.stage_fractions): what the planner's
    resident bound needs, for a fraction of the cost. Equal to rank_holdings' held, bit for bit and in order
    (tests/test_resident_bound.py)."""
    zero = parallel.zero
    dense_group, expert_group = parallel.zero_group, parallel.expert_zero_group  # row_slice's Slice.zero_group
    held: dict[str, float] = {}
    rows = zip(stage_fractions(spec, parallel, stage), _row_is_expert(spec),
               _row_terms(spec, precision, optimizer, lora), strict=True)
    for fraction, is_expert, (_, _, items) in rows:
        if fraction == 0:
            continue
        group = expert_group if is_expert else dense_group
        for item, item_bytes, zero_from in items:
            held[item] = held.get(item, 0.0) + item_bytes * fraction / (group if zero >= zero_from else 1)
    return held


@lru_cache(maxsize=64)
def _row_is_expert(spec: ModelSpec) -> tuple[bool, ...]:
    """Per row of the inventory: whether its ZeRO shards spread over the expert group (row_slice's rule)."""
    from stepbill.engine.params import param_inventory

    return tuple(t.component == "experts" for t in param_inventory(spec).tensors)


@lru_cache(maxsize=1 << 17)  # a whole DeepSeek-V3 × 2,048 search reads ~130,000, in floor order
def slicing_layout(parallel: Any) -> Any:
    """`parallel` with only what slices parameters (dp, tp, pp, cp, ep, etp, zero, shard_group, vpp, pp_layers,
    schedule) kept: sp off, no offload, micro-batches = pp (valid under every schedule). A memo key; memoised itself
    (a layout hashes once: spec.schema.hash_once), since making it validates a new Parallel."""
    return replace(parallel, sp=False, micro_batches=parallel.pp, offload_optimizer=False, offload_activations=False)


@lru_cache(maxsize=16384)  # a planner's peak floors and bills visit layouts in floor order, not group by group
def _resident_cached(spec: ModelSpec, precision: Any, optimizer: str, lora: LoRA | None, par: Any,
                     stage: int) -> Held:
    from stepbill.engine.params import param_inventory

    inv = param_inventory(spec)
    kinds = stage_layer_kinds(spec, par)
    out = Held()
    params = embeddings = token_embedding = 0.0
    rows = zip(inv.tensors, stage_slices(spec, par, stage), _row_terms(spec, precision, optimizer, lora), strict=True)
    for t, sl, (weight_elements, grad_elements, items) in rows:
        if sl.fraction == 0:
            continue
        params += t.total * sl.fraction
        if t.component == "embedding":
            embeddings += t.total * sl.fraction
            token_embedding += t.total * sl.fraction if t.name == "embed_tokens.weight" else 0.0
        unit = f"layer.{t.layer_kind}" if t.layer_kind else "root"
        per_unit = kinds[stage][t.layer_kind] if t.layer_kind else 1
        out.unit_weights[unit] = out.unit_weights.get(unit, 0.0) + weight_elements * sl.fraction / per_unit
        out.unit_grads[unit] = out.unit_grads.get(unit, 0.0) + grad_elements * sl.fraction / per_unit
        group = unit if t.layer_kind else ("embed" if t.component == "embedding" else "head")
        for item, item_bytes, zero_from in items:
            b = item_bytes * sl.fraction
            mine = b / (sl.zero_group if par.zero >= zero_from else 1)  # zero_divisor
            out.held[item] = out.held.get(item, 0.0) + mine
            out.unsharded[item] = out.unsharded.get(item, 0.0) + b
            out.owned[item] = out.owned.get(item, 0.0) + b / sl.holders
            if item == "grads":
                out.grads[group] = out.grads.get(group, 0.0) + mine
                out.unit_grads_held[unit] = out.unit_grads_held.get(unit, 0.0) + mine / per_unit
    out.params_share = params / inv.total if inv.total else 0.0
    out.token_embedding_share = token_embedding / embeddings if embeddings else 1.0
    return out


def one_gpu_states(spec: ModelSpec, recipe: Any) -> float:
    """Bytes of the optimizer's states (items optimizer.*) on one GPU holding the whole model under `recipe`'s
    precision, optimizer and LoRA: what a rank's held states are a share of (rank_share.rank_eager)."""
    return _one_gpu_states(spec, recipe.precision, recipe.optimizer, recipe.lora)


@lru_cache(maxsize=256)  # a planner asks once per rank's eager terms: the sum is the model's, not the layout's
def _one_gpu_states(spec: ModelSpec, precision: Any, optimizer: str, lora: LoRA | None) -> float:
    rows = _row_terms(spec, precision, optimizer, lora)
    return sum(b for _, _, items in rows for item, b, _ in items if item.startswith("optimizer."))


@lru_cache(maxsize=256)
def _row_terms(spec: ModelSpec, precision: Any, optimizer: str, lora: LoRA | None
               ) -> tuple[tuple[float, float, tuple[tuple[str, float, int], ...]], ...]:
    """Per parameter row of the model's inventory: its weight elements (every weights* item), its grad elements, and
    for each resident item (item, elements × bytes per element, first ZeRO stage that shards it): what
    _resident_cached multiplies by a rank's slice, computed once per model and recipe."""
    from stepbill.engine.params import param_inventory

    recipe = ResidentRecipe(precision, optimizer, lora, None)
    out = []
    for t in param_inventory(spec).tensors:
        elements = row_item_elements(t, recipe)
        items = tuple((item, n * item_bytes_per_element(item, recipe), zero_first_stage(item))
                      for item, n in elements.items())
        out.append((sum(v for k, v in elements.items() if k.startswith("weights")), elements["grads"], items))
    return tuple(out)
