"""Which slice of each parameter tensor one rank holds: pipeline stage, tensor/expert split, ZeRO shard.

Rules (Megatron-LM conventions, the seed's §07 and ZeRO §5):
- Pipeline: stage s holds a contiguous block of layers (n_layers/pp, or the uneven split of
  spec.parallel.pipeline_stage_layers; interleaved: chunks s, s+pp, … of
  n_layers/(pp·vpp) layers); the embedding sits on the first stage, final norm and LM head on the last; with tied
  embeddings and pp > 1 the last stage keeps its own copy of the embedding for the output layer.
- Tensor parallel: Q/K/V, gate/up (column-parallel) and O, down (row-parallel) matrices, the vocab dimension of
  embedding and LM head, and column-parallel biases are split by tp; row-parallel biases, norms, the router and
  MLA's down-projections (q_a, kv_a) are replicated across tp.
- Experts: routed experts split by ep (whole experts) and by etp (expert width); shared experts split by tp.
- ZeRO stage z shards an item over its data-parallel group when z ≥ 1 (master + optimizer states), z ≥ 2
  (grads), z = 3 (weights): ZeRO paper §5.1–5.3. Shards are even (flat-buffer padding, < group elements, ignored).

Elements are floats (exact fractions), so per-rank numbers sum back to the global ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from stepbill.engine.params import ParamTensor, param_inventory
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import Parallel, pipeline_stage_layers

# Suffixes of weights split by tp (column- or row-parallel); biases of row-parallel layers (o, down) are
# replicated because the all-reduce happens before the bias is added.
TP_SPLIT_MATRICES = ("q_proj", "k_proj", "v_proj", "o_proj", "q_b_proj", "kv_b_proj", "gate_proj", "up_proj",
                     "down_proj", "embed_tokens", "lm_head")
TP_ROW_PARALLEL = ("o_proj", "down_proj")

# First ZeRO stage that shards each resident item (ZeRO §5: P_os, P_os+g, P_os+g+p).
ZERO_FIRST_STAGE = {"weights": 3, "weights.frozen": 3, "grads": 2, "master": 1}
# QLoRA's 4-bit base and TE's fp8 weight copies are weights too (engine/quant.py, engine/fp8.py)
ZERO_FIRST_STAGE.update({"weights.nf4": 3, "weights.nf4_constants": 3, "weights.fp8": 3})
OPTIMIZER_FIRST_STAGE = 1


def zero_first_stage(item: str) -> int:
    """The lowest ZeRO stage that shards resident `item` (optimizer.* states: 1)."""
    return ZERO_FIRST_STAGE.get(item, OPTIMIZER_FIRST_STAGE)


def zero_divisor(item: str, stage: int, group: int) -> int:
    """How many ways ZeRO stage `stage` splits `item` over a data-parallel group of `group` ranks."""
    return group if stage >= zero_first_stage(item) else 1


def zero_item_bytes(item_bytes: dict[str, float], stage: int, group: int) -> dict[str, float]:
    """Per-rank bytes of each resident item under ZeRO `stage` over `group` ranks.

    ZeRO Figure 1 (Ψ = 7.5e9, K = 12, Nd = 64): {weights 2Ψ, grads 2Ψ, optimizer 12Ψ} → 120 / 31.4 / 16.6 /
    1.9 GB (decimal) for stages 0–3. Item names: weights, grads, master, optimizer.* (or "optimizer").
    """
    return {name: value / zero_divisor(name, stage, group) for name, value in item_bytes.items()}


def stage_layer_indices(spec: ModelSpec, parallel: Parallel) -> list[list[int]]:
    """Layer indices (0-based) held by each pipeline stage, in execution order of its chunks (uneven stages:
    spec.parallel.pipeline_stage_layers). Shared (memoised on what it reads): read it, never change it."""
    return _stage_layers(spec, parallel.pp, parallel.vpp, parallel.pp_layers)[0]


def stage_layer_kinds(spec: ModelSpec, parallel: Parallel) -> list[dict[str, int]]:
    """{layer kind: count} on each pipeline stage. Shared (memoised): read it, never change it."""
    return _stage_layers(spec, parallel.pp, parallel.vpp, parallel.pp_layers)[1]


def representative_stage(spec: ModelSpec, parallel: Parallel, stage: int) -> int:
    """The first pipeline stage that holds exactly what `stage` holds of every parameter row: the same layer
    kinds and counts, and the same ends of the model (first: the embedding; last: final norm and LM head).
    `row_slice` reads a stage through nothing else, so per-stage holdings can be computed once per class."""
    return _stage_layers(spec, parallel.pp, parallel.vpp, parallel.pp_layers)[2][stage]


@lru_cache(maxsize=4096)
def _stage_layers(spec: ModelSpec, pp: int, vpp: int, pp_layers: tuple[int, ...] | None
                  ) -> tuple[list[list[int]], list[dict[str, int]], tuple[int, ...]]:
    if vpp == 1:
        counts = pipeline_stage_layers(spec.n_layers, pp, pp_layers)
        starts = [sum(counts[:s]) for s in range(pp)]
        indices = [list(range(start, start + n)) for start, n in zip(starts, counts, strict=True)]
    else:
        chunks = pp * vpp
        per_chunk = spec.n_layers // chunks
        indices = [[] for _ in range(pp)]
        for chunk in range(chunks):
            indices[chunk % pp] += list(range(chunk * per_chunk, (chunk + 1) * per_chunk))
    kinds = []
    for layers in indices:
        moe = sum(1 for i in layers if spec.is_moe_layer(i))
        kinds.append({k: n for k, n in (("dense", len(layers) - moe), ("moe", moe)) if n})
    first_of: dict[tuple, int] = {}
    reps = tuple(first_of.setdefault((s == 0, s == pp - 1, tuple(sorted(kinds[s].items()))), s) for s in range(pp))
    return indices, kinds, reps


@dataclass(frozen=True)
class Slice:
    """What one rank of a stage holds of a parameter row before ZeRO.

    `fraction`: share of the row's total elements held by the rank; `holders`: how many ranks (over all stages)
    hold that same slice; `zero_group`: ranks its ZeRO shards spread over.
    """

    fraction: float
    holders: int
    zero_group: int


def _is_tp_split(t: ParamTensor) -> bool:
    base, _, kind = t.name.rpartition(".")
    if base.split(".")[-1] not in TP_SPLIT_MATRICES:
        return False
    return kind == "weight" or base.split(".")[-1] not in TP_ROW_PARALLEL


def layers_of_kind(spec: ModelSpec, kind: str) -> int:
    return spec.n_dense_layers if kind == "dense" else spec.n_moe_layers


def row_slice(spec: ModelSpec, parallel: Parallel, t: ParamTensor, stage: int,
              kinds: list[dict[str, int]] | None = None) -> Slice:
    """The slice of row `t` held by one rank of pipeline `stage` (fraction 0 if the stage holds none of it)."""
    kinds = kinds if kinds is not None else stage_layer_kinds(spec, parallel)
    last = parallel.pp - 1
    dense_dp = parallel.dp * parallel.cp
    if t.layer_kind:
        on_stage = kinds[stage].get(t.layer_kind, 0) / layers_of_kind(spec, t.layer_kind)
        stages_holding = 1
    elif t.component == "embedding":
        tied_copy = spec.tied_embeddings and parallel.pp > 1 and t.name == "embed_tokens.weight"
        on_stage = 1.0 if stage == 0 or (tied_copy and stage == last) else 0.0
        stages_holding = 2 if tied_copy else 1
    else:  # final norm, LM head
        on_stage = 1.0 if stage == last else 0.0
        stages_holding = 1
    if t.component == "experts":
        split = parallel.ep * parallel.expert_tp
        return Slice(on_stage / split, parallel.edp * stages_holding, parallel.expert_zero_group)
    if _is_tp_split(t):
        return Slice(on_stage / parallel.tp, dense_dp * stages_holding, parallel.zero_group)
    return Slice(on_stage, dense_dp * parallel.tp * stages_holding, parallel.zero_group)


def stage_slices(spec: ModelSpec, parallel: Parallel, stage: int) -> tuple[Slice, ...]:
    """`row_slice` of every row of the model's own inventory (param_inventory(spec).tensors, in order) on `stage`.
    Memoised per layout and class of identical stages (representative_stage): shared, read it only."""
    return _stage_slices(spec, parallel, representative_stage(spec, parallel, stage))


@lru_cache(maxsize=2048)
def _stage_slices(spec: ModelSpec, parallel: Parallel, stage: int) -> tuple[Slice, ...]:
    kinds = stage_layer_kinds(spec, parallel)
    return tuple(row_slice(spec, parallel, t, stage, kinds) for t in param_inventory(spec).tensors)


def stage_fractions(spec: ModelSpec, parallel: Parallel, stage: int) -> tuple[float, ...]:
    """`row_slice(...).fraction` of every row of the model's inventory on `stage` (share of the row's elements one
    rank holds, before ZeRO). Memoised on what the fraction reads of the layout — the stage split (pp, vpp,
    pp_layers, through the stage's class: representative_stage), tp and ep·etp — so layouts that differ in dp,
    cp, ZeRO or the schedule share one entry. Shared: read it, never change it."""
    rep = representative_stage(spec, parallel, stage)
    key = (spec, parallel.pp, parallel.vpp, parallel.pp_layers, parallel.tp, parallel.ep * parallel.expert_tp, rep)
    found = _FRACTIONS.get(key)
    if found is None:
        if len(_FRACTIONS) >= FRACTION_ENTRIES:
            _FRACTIONS.clear()
        kinds = stage_layer_kinds(spec, parallel)
        found = _FRACTIONS[key] = tuple(row_slice(spec, parallel, t, rep, kinds).fraction
                                        for t in param_inventory(spec).tensors)
    return found


#: Entries of stage_fractions' memo before it starts over.
FRACTION_ENTRIES = 4096
_FRACTIONS: dict[tuple, tuple[float, ...]] = {}


def tp_embedding_note(spec: ModelSpec, grad_bytes: int, parallel: Parallel, stage: int) -> tuple[str, ...]:
    """The convention the first stage's gradients take under tp > 1, in one line with what the other one costs: the
    token embedding is split by vocabulary rows (`row_slice`, Megatron-LM's VocabParallelEmbedding), while torch
    2.13's RowwiseParallel embedding (torchtitan's plan) keeps a whole (V, h) gradient on every rank — measured at
    dp 1 on a tiny Llama, tp 2 and 4 (tests/measure/test_tp.py, docs/accuracy.md)."""
    if parallel.tp == 1 or stage != 0:
        return ()
    v, h, tp = spec.vocab_size, spec.hidden_size, parallel.tp
    more = v * h * grad_bytes * (tp - 1) / tp
    return (f"tp {tp}: the token embedding's gradient is billed vocab-parallel ({v // tp:,} of {v:,} rows a rank, "
            f"Megatron-LM's); torch 2.13's RowwiseParallel embedding keeps the whole ({v:,} × {h:,}) gradient on "
            f"every rank: {more:,.0f} B ({more / 2**30:.2f} GiB) more = {v:,} × {h:,} × {grad_bytes} B × (tp − 1)/tp, "
            "not billed",)
