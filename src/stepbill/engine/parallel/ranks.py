"""The bill per GPU: each rank class's timeline, built by the one-GPU timeline's builder from the same recompute
plan, with every tensor divided by how that rank holds it, plus the layout's own buffers at the moments they live.

Who holds what (engine/parallel/layout.py's slicing rules for parameters; engine/kinds.Split for kept tensors):
- resident items: the stage's parameters after the tp / ep / etp split, ÷ the ZeRO group for the items the ZeRO
  stage shards (ZeRO §5); optimizer offload moves master + states to CPU memory;
- kept tensors: ÷ cp always, ÷ tp for head/FFN/vocab-wide rows (and for residual-stream rows under sequence
  parallelism, Korthikanti et al. 2022), ÷ etp for routed-expert width; balanced routing (a rank's experts see as
  many token-expert pairs as its own tokens make); the policy's choice of what to keep is the model's, so it is
  the same on every rank;
- pipeline: the stage's layers in execution order; the embedding on the first stage, LM head and loss on the last;
  other micro-batches' kept activations in flight per schedule (`in_flight_microbatches`);
- gradient accumulation (micro-batches > 1): earlier micro-batches' gradients are alive from the start;
- buffers (`layout_buffers`): DDP's gradient buckets (ZeRO-0: PyTorch DDP's default `gradient_as_bucket_view=False`
  keeps a flat copy of every gradient, measured by `check --launch`; ZeRO-1: one 25 MiB bucket, the seed §1.8,
  as a distributed optimizer's contiguous gradient buffer leaves no copy), ZeRO-3's gathered units (current +
  prefetched) and the root, the reduce-scatter input of one unit (ZeRO-2/3), CP's incoming K/V block, the
  sequence-parallel all-gathered layer input, EP's all-to-all receive buffer.

Data-parallel FSDP2 / ZeRO-1 layouts the measured rules cover use engine/parallel/fsdp2.py's buffer model on the same
one-GPU timeline (`ranks[].model` = "measured-exact"); every other layout is "approximate" and says why.
All values are bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from stepbill.engine.activations import ActTensor
from stepbill.engine.kinds import Part, Phase, Split
from stepbill.engine.line import Line
from stepbill.engine.memory.eager import EagerTerms
from stepbill.engine.memory.timeline import Buffers, RankView, Timeline, rank_timeline
from stepbill.engine.parallel.fsdp2_ranks import exact_classes, exact_reason
from stepbill.engine.parallel.layout import Slice, row_slice, stage_layer_indices, stage_layer_kinds, zero_divisor
from stepbill.engine.parallel.rank_class import (
    APPROXIMATE,
    IDEAL,
    MEASURED_EXACT,
    MEMORY_KEYS,
    RankClass,
    SingleRank,
)
from stepbill.engine.params import ParamInventory, ParamTensor
from stepbill.engine.recompute import RecomputePlan
from stepbill.engine.states import lora_adapter_groups, optimizer_state_elements
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import validate_layout
from stepbill.spec.recipe import LoRA, Recipe

MIB = 2**20
DDP_BUCKET_BYTES = 25 * MIB  # torch DDP bucket_cap_mb default, cited in the seed §1.8
OPTIMIZER_SIDE = ("master", "optimizer.")
LAYER_PARTS = (Part.LAYER, Part.LAYER_INNER, Part.LAYER_NORM)
HEAD_PARTS = (Part.HEAD, Part.LOSS, Part.HEAD_BACKWARD)


def row_item_elements(t: ParamTensor, recipe: Recipe | _ResidentRecipe) -> dict[str, float]:
    """Elements of each resident item over all copies of row `t` (LoRA: adapters trainable, base frozen).
    The result is shared (memoised): read it, never change it."""
    return _row_item_elements(t, recipe.optimizer, recipe.lora, bool(recipe.precision.master))


@lru_cache(maxsize=8192)  # pure in its arguments; a bill asks once per tensor row per rank class
def _row_item_elements(t: ParamTensor, optimizer: str, lora: LoRA | None, has_master: bool) -> dict[str, float]:
    if lora is None:
        groups = [(t.shape, t.copies, t.is_matrix)]
        out: dict[str, float] = {"weights": t.total}
    else:
        groups = list(lora_adapter_groups(ParamInventory((t,)), lora))
        out = {"weights.frozen": t.total, "weights": sum(s[0] * s[1] * c for s, c, _ in groups)}
    trained = out["weights"]
    out["grads"] = trained
    if has_master:
        out["master"] = trained
    for name, elements in optimizer_state_elements(optimizer, groups).items():
        out[f"optimizer.{name}"] = elements
    return out


def item_bytes_per_element(item: str, recipe: Recipe | _ResidentRecipe) -> int:
    p = recipe.precision
    if item.startswith("weights"):
        return p.weights
    return {"grads": p.grads, "master": p.master}.get(item, p.state)


def in_flight_microbatches(recipe: Recipe, stage: int) -> float:
    """Micro-batches' worth of the stage's activations alive at its peak.

    GPipe keeps all m; 1F1B keeps min(p − s, m) on stage s (Narayanan et al. 2021); interleaved with v chunks
    keeps min(2(p − s − 1) + (v − 1)p + 1, m·v) chunk-micro-batches of 1/v of the stage's layers (Megatron's
    warm-up count), i.e. p(1 + (p − 1)/(p·v)) on stage 0 (Korthikanti et al. 2022 §4.2.3). No pipeline: 1.
    """
    par = recipe.parallel
    m, p, v = par.micro_batches, par.pp, par.vpp
    if p == 1:
        return 1.0
    if par.pp_schedule == "gpipe":
        return float(m)
    if par.pp_schedule == "1f1b":
        return float(min(p - stage, m))
    return min(2 * (p - stage - 1) + (v - 1) * p + 1, m * v) / v


def row_divisor(recipe: Recipe) -> Callable[[ActTensor], float]:
    """How many ways one rank's share of a kept tensor is divided (see engine/kinds.Split)."""
    par = recipe.parallel
    seq = par.cp * (par.tp if par.sp else 1)
    by_split = {Split.SEQ: seq, Split.TP: par.cp * par.tp, Split.EXPERT: seq * par.expert_tp}

    def divisor(t: ActTensor) -> float:
        return by_split[t.split]

    return divisor


@dataclass(frozen=True)
class _ResidentRecipe:
    """The parts of a Recipe resident state depends on (hashable: the memo key of _resident)."""

    precision: Any
    optimizer: str
    lora: LoRA | None
    parallel: Any


@dataclass
class _Held:
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


def _resident(spec: ModelSpec, recipe: Recipe, stage: int) -> _Held:
    """What one rank of `stage` holds (shared, memoised: read it, never change it). It does not depend on the
    sequence, the micro-batch or the recompute policy, which a planner varies most."""
    return _resident_cached(spec, recipe.precision, recipe.optimizer, recipe.lora, recipe.parallel, stage)


@lru_cache(maxsize=1024)
def _resident_cached(spec: ModelSpec, precision: Any, optimizer: str, lora: LoRA | None, par: Any,
                     stage: int) -> _Held:
    from stepbill.engine.params import param_inventory

    recipe = _ResidentRecipe(precision, optimizer, lora, par)
    inv = param_inventory(spec)
    kinds = stage_layer_kinds(spec, par)
    out = _Held()
    params = embeddings = token_embedding = 0.0
    for t in inv.tensors:
        sl: Slice = row_slice(spec, par, t, stage, kinds)
        if sl.fraction == 0:
            continue
        params += t.total * sl.fraction
        if t.component == "embedding":
            embeddings += t.total * sl.fraction
            token_embedding += t.total * sl.fraction if t.name == "embed_tokens.weight" else 0.0
        elements = row_item_elements(t, recipe)
        unit = f"layer.{t.layer_kind}" if t.layer_kind else "root"
        per_unit = kinds[stage][t.layer_kind] if t.layer_kind else 1
        out.unit_weights[unit] = out.unit_weights.get(unit, 0.0) + sum(
            v for k, v in elements.items() if k.startswith("weights")) * sl.fraction / per_unit
        out.unit_grads[unit] = out.unit_grads.get(unit, 0.0) + elements["grads"] * sl.fraction / per_unit
        group = unit if t.layer_kind else ("embed" if t.component == "embedding" else "head")
        for item, n in elements.items():
            b = n * item_bytes_per_element(item, recipe) * sl.fraction
            mine = b / zero_divisor(item, par.zero, sl.zero_group)
            out.held[item] = out.held.get(item, 0.0) + mine
            out.unsharded[item] = out.unsharded.get(item, 0.0) + b
            out.owned[item] = out.owned.get(item, 0.0) + b / sl.holders
            if item == "grads":
                out.grads[group] = out.grads.get(group, 0.0) + mine
                out.unit_grads_held[unit] = out.unit_grads_held.get(unit, 0.0) + mine / per_unit
    out.params_share = params / inv.total if inv.total else 0.0
    out.token_embedding_share = token_embedding / embeddings if embeddings else 1.0
    return out


def layout_buffers(spec: ModelSpec, recipe: Recipe, order: tuple[str, ...], held: _Held) -> tuple[Buffers, list[Line]]:
    """The layout's own buffers at each moment, and one Line per buffer kind (its largest size)."""
    par, p = recipe.parallel, recipe.precision
    lines: list[Line] = []
    # One FSDP unit per layer: its parameters gathered (weight dtype) and its gradients before the reduce-scatter
    # (grad dtype), per layer kind; the rank's own shard of them is already counted in its grads.
    gather_of = {k: held.unit_weights.get(f"layer.{k}", 0.0) * p.weights for k in set(order)}
    # the unit's unsharded grads beyond the shard the rank keeps (experts shard over edp, the rest over dp·cp)
    scatter_of = {k: held.unit_grads.get(f"layer.{k}", 0.0) * p.grads - held.unit_grads_held.get(f"layer.{k}", 0.0)
                  for k in set(order)} if par.zero >= 2 else dict.fromkeys(set(order), 0.0)
    gather = max(gather_of.values(), default=0.0)
    scatter = max(scatter_of.values(), default=0.0)
    root = held.unit_weights.get("root", 0.0) * p.weights
    grads_held = sum(held.grads.values())
    ddp_copies = par.zero == 0 and par.zero_group > 1  # PyTorch DDP: its buckets copy every gradient
    bucket = grads_held if ddp_copies else (min(DDP_BUCKET_BYTES, grads_held) if par.zero == 1 and par.zero_group > 1
                                            else 0)
    seq_tokens = recipe.tokens / par.cp
    if ddp_copies:
        lines.append(Line("transient.ddp_buckets", bucket, "bytes", "DDP's gradient buckets: a flat copy of every "
                          "gradient ({grads} B), the whole step (gradient_as_bucket_view=False, PyTorch's default; "
                          "True makes the gradients views of the buckets)", {"grads": grads_held},
                          "measured: check --launch (DDP, gloo), docs/accuracy.md"))
    elif bucket:
        lines.append(Line("transient.grad_bucket", bucket, "bytes", "one gradient bucket: min(25 MiB, the rank's "
                          "{grads} B of grads), the whole step (a distributed optimizer's contiguous gradient buffer: "
                          "no copy)", {"grads": grads_held},
                          "cited: torch DDP bucket_cap_mb default; seed §1.8"))
    gathers = par.zero == 3 and par.zero_group > 1  # one rank holds its whole shard: nothing to gather
    if gathers:
        lines.append(Line("transient.zero3_allgather", 2 * gather, "bytes",
                          "2 units (current + prefetched) × {elements} elements × {bytes} B, during a layer",
                          {"elements": gather / p.weights, "bytes": p.weights}))
        lines.append(Line("transient.zero3_root", root, "bytes", "the root unit (embedding, final norm, LM head) "
                          "gathered: {elements} elements × {bytes} B, at the LM head", {"elements": root / p.weights,
                                                                                          "bytes": p.weights}))
    if par.zero >= 2:
        lines.append(Line("transient.zero_reduce_scatter", scatter, "bytes", "one unit's unsharded grads beyond "
                          "the rank's shard ({shard} B kept of {unsharded} B), during its backward",
                          {"unsharded": scatter + max(held.unit_grads_held.values(), default=0.0),
                           "shard": max(held.unit_grads_held.values(), default=0.0)}))
    kv_block = 0.0
    if par.cp > 1:
        a = spec.attention
        kv_width = a.kv_heads * (a.qk_head_dim + a.v_dim) / par.tp
        kv_block = seq_tokens * kv_width * p.activation
        lines.append(Line("transient.cp_kv_block", kv_block, "bytes",
                          "incoming K/V block: {tokens} tokens × {width} × {bytes} B, during attention",
                          {"tokens": seq_tokens, "width": kv_width, "bytes": p.activation}))
    gathered_input = seq_tokens * spec.hidden_size * p.activation if par.sp else 0.0
    if gathered_input:
        lines.append(Line("transient.sp_allgather", gathered_input, "bytes",
                          "sequence-parallel layer input all-gathered for a column-parallel linear: {tokens} tokens "
                          "× {hidden} × {bytes} B", {"tokens": seq_tokens, "hidden": spec.hidden_size,
                                                     "bytes": p.activation}))
    dispatch = 0.0
    if par.ep > 1 and spec.moe is not None:
        dispatch = seq_tokens / (par.tp if par.sp else 1) * spec.moe.top_k * spec.hidden_size * p.activation
        lines.append(Line("transient.ep_all_to_all", dispatch, "bytes",
                          "all-to-all receive buffer: {tokens} tokens × top-{k} × {hidden} × {bytes} B, in a MoE layer",
                          {"tokens": seq_tokens / (par.tp if par.sp else 1), "k": spec.moe.top_k,
                           "hidden": spec.hidden_size, "bytes": p.activation}))

    def buffers(phase: Phase, part: Part, layer: int | None) -> int:
        total = float(bucket)
        in_layer = part in LAYER_PARTS and layer is not None
        kind = order[layer] if in_layer and layer is not None else None
        if gathers and phase is not Phase.OPTIMIZER:
            if kind is not None:
                total += 2 * gather_of[kind]  # current + prefetched unit
            elif part in HEAD_PARTS:
                total += root + (gather if phase is Phase.BACKWARD else 0.0)
        if par.zero >= 2 and phase is Phase.BACKWARD and kind is not None:
            total += scatter_of[kind]
        if in_layer:
            total += kv_block + gathered_input
            if dispatch and kind == "moe":
                total += dispatch
        return round(total)

    return buffers, lines


def _rank_view(recipe: Recipe, held: _Held, order: tuple[str, ...], stage: int, eager: EagerTerms | None,
               tied: bool, flight_bytes: float, buffers: Buffers | None) -> tuple[RankView, dict[str, float]]:
    """The RankView of one rank of `stage`, and what it keeps in CPU memory (offload)."""
    par = recipe.parallel
    cpu: dict[str, float] = {}
    weights = sum(v for k, v in held.held.items() if k.startswith("weights"))
    optimizer = sum(v for k, v in held.held.items() if k.startswith(OPTIMIZER_SIDE))
    if eager is not None:
        optimizer += eager.step_counters
    if par.offload_optimizer:
        cpu = {k: v for k, v in held.held.items() if k.startswith(OPTIMIZER_SIDE)}
        optimizer = 0.0
    counts = {k: order.count(k) for k in set(order)}
    layers = [held.grads.get(f"layer.{k}", 0.0) / counts[k] for k in order]
    head, embed = held.grads.get("head", 0.0), held.grads.get("embed", 0.0)
    if tied:  # the LM head's backward makes the tied token embedding's gradient (as timeline.grad_shares)
        moved = embed * (held.token_embedding_share if eager is not None else 1.0)
        head, embed = head + moved, embed - moved
    grads_total = sum(held.grads.values())
    first, last = stage == 0, stage == par.pp - 1
    if par.micro_batches > 1:  # gradient accumulation: the earlier micro-batches' gradients exist already
        view = RankView(round(weights), round(optimizer), 0, tuple(0 for _ in order), 0, round(grads_total), first,
                        last, round(flight_bytes), buffers)
    else:
        view = RankView(round(weights), round(optimizer), round(head), tuple(round(x) for x in layers), round(embed),
                        0, first, last, round(flight_bytes), buffers)
    return view, cpu


def _rank_eager(eager: EagerTerms, recipe: Recipe, held: _Held, inv: ParamInventory) -> EagerTerms:
    par = recipe.parallel
    seq = par.cp * (par.tp if par.sp else 1)
    width = par.cp * par.tp
    unsharded = held.unsharded.get("grads", 0.0)
    grad_div = unsharded / held.held["grads"] if held.held.get("grads") else 1.0
    counters = held.params_share  # AdamW keeps one step tensor per parameter tensor: the rank's share of them
    opt_div = par.tp * (par.zero_group if par.zero >= 1 else 1)
    if par.offload_optimizer:
        eager = replace(eager, optimizer_temp=0, step_counters=0)
    return eager.for_rank(seq, width, width, par.tp * grad_div, min(counters, 1.0), opt_div, par.tp)


def _activation_lines(plan: RecomputePlan, tl: Timeline, flight: float, outside: float) -> list[Line]:
    """The rank's activations at its forward peak, split into what its layers keep (× micro-batches in flight),
    outside-layer tensors and the working set of the layer being computed."""
    tokens = plan.tokens
    lines: list[Line] = []
    for kind in plan.layers:
        n = plan.order.count(kind)
        per_token = sum(plan.kept_bytes(i) for i, k in enumerate(plan.order) if k == kind) / n if n else 0.0
        if n and per_token:
            lines.append(Line(f"activations.{kind}_layers", n * per_token * tokens * flight, "bytes",
                              "{layers} layers × {per_token} B/token × {tokens} tokens × {in_flight} micro-batches "
                              "in flight", {"layers": n, "per_token": per_token, "tokens": tokens,
                                            "in_flight": flight}))
    if outside:
        lines.append(Line("activations.outside", outside, "bytes",
                          "final norm, LM head input, fp32 log-softmax, labels, RoPE tables (eager)", {}))
    fwd = tl.peak_forward.items
    total = fwd["activations"] + fwd.get("autocast_cache", 0)
    rest = total - sum(x.value for x in lines)
    if rest > 0:
        lines.append(Line("activations.working_set", rest, "bytes",
                          "at the forward peak beyond the kept tensors: the layer being computed, logits and loss "
                          "(eager), autocast's copies", {}))
    return lines


def _memory(tl: Timeline, weights: float, optimizer: float, grads: float) -> dict[str, float]:
    fwd = tl.peak_forward.items
    memory = {
        "weights": weights,
        "grads": grads,
        "optimizer": optimizer,
        "model": weights + grads,
        "resident": weights + grads + optimizer,
        "activations": float(fwd["activations"] + fwd.get("autocast_cache", 0)),
        "transient": float(tl.peak.items.get("buffers", 0)),
        "peak": float(tl.peak.total),
        "peak_forward": float(tl.peak_forward.total),
        "peak_backward": float(tl.peak_backward.total),
    }
    return {k: float(memory[k]) for k in MEMORY_KEYS}


def one_gpu_timeline(spec: ModelSpec, recipe: Recipe, inv: ParamInventory, plan: RecomputePlan, outside: float,
                     eager: EagerTerms | None) -> Timeline:
    """The one-GPU timeline: world size 1 of the per-rank model (everything held, nothing divided, no buffers),
    with the recipe's micro-batches (gradient accumulation)."""
    from stepbill.spec.parallel import Parallel

    single = replace(recipe, parallel=Parallel(micro_batches=recipe.parallel.micro_batches))
    held = _resident(spec, single, 0)
    view, _ = _rank_view(single, held, plan.order, 0, eager, spec.tied_embeddings, 0.0, None)
    return rank_timeline(view, plan, outside, eager)


def one_gpu_class(one: SingleRank) -> RankClass:
    """The trivial layout (one GPU, nothing sharded): world size 1 of the per-rank model, its timeline the bill's."""
    from stepbill.engine.activations import layer_kinds

    resident = one.resident
    weights = sum(x.value for x in resident if x.name.startswith("weights"))
    grads = sum(x.value for x in resident if x.name == "grads")
    optimizer = sum(x.value for x in resident if x.name.startswith(OPTIMIZER_SIDE))
    optimizer += one.eager.step_counters if one.eager is not None else 0
    memory = _memory(one.timeline, weights, optimizer, grads)
    held = {x.name: x.value for x in resident}
    model = MEASURED_EXACT if one.convention == "eager" else IDEAL
    return RankClass("all ranks", (0,), 1, layer_kinds(one.model), 1.0, list(resident), list(one.activation_items),
                     [], memory, {}, held, model, (), one.timeline)


def approximate_reason(one: SingleRank) -> str:
    """Why the layout's per-rank numbers come from the approximate model ('' when the measured rules apply)."""
    return exact_reason(one.model, one.recipe, one.convention)


def rank_classes(one: SingleRank) -> list[RankClass]:
    """One RankClass per distinct rank: pipeline stages (identical stages merged) under the approximate model,
    or classes of ranks with identical shards under the measured FSDP2 / ZeRO-1 rules."""
    spec, recipe = one.model, one.recipe
    par = recipe.parallel
    if par.is_trivial:
        return [one_gpu_class(one)]
    validate_layout(spec, par, recipe.seq_len)
    reason = approximate_reason(one)
    if not reason:
        return exact_classes(one)
    kinds = stage_layer_kinds(spec, par)
    indices = stage_layer_indices(spec, par)
    divisor = row_divisor(recipe)
    input_divisor = par.cp * (par.tp if par.sp else 1)
    per_stage = par.dp * par.tp * par.cp
    classes: list[RankClass] = []
    for stage in range(par.pp):
        held = _resident(spec, recipe, stage)
        order = tuple(one.plan.order[i] for i in indices[stage])
        plan = one.plan.for_rank(divisor, input_divisor, par.cp * par.tp, order)
        flight = in_flight_microbatches(recipe, stage)
        last = stage == par.pp - 1
        outside = one.outside_rows(divisor) if (one.outside_rows is not None and last) else 0.0
        eager = _rank_eager(one.eager, recipe, held, one.inventory) if one.eager is not None else None
        cpu_act = 0.0
        if par.offload_activations:  # kept tensors go to CPU after each layer: only the running layer stays
            cpu_act = plan.kept_after_forward() * flight
            plan = replace(plan, layers={k: replace(lp, dropped_bytes=lp.kept_bytes + lp.dropped_bytes + lp.checkpoint_bytes,
                                                     kept_bytes=0.0, checkpoint_bytes=0.0)
                                         for k, lp in plan.layers.items()}, segment=1)
            flight_bytes = 0.0
        else:
            flight_bytes = (flight - 1) * plan.kept_after_forward()
        buffers, transient = layout_buffers(spec, recipe, order, held)
        view, cpu = _rank_view(recipe, held, order, stage, eager, spec.tied_embeddings, flight_bytes, buffers)
        if cpu_act:
            cpu["activations"] = cpu_act
        tl = rank_timeline(view, plan, outside, eager)
        gpu_items = _resident_lines(held, par, cpu)
        weights = sum(x.value for x in gpu_items if x.name.startswith("weights"))
        optimizer = sum(x.value for x in gpu_items if x.name.startswith(OPTIMIZER_SIDE)) + (
            eager.step_counters if eager is not None else 0)
        grads = sum(x.value for x in gpu_items if x.name == "grads")
        memory = _memory(tl, weights, optimizer, grads)
        activ = _activation_lines(plan, tl, flight, outside)
        tags = [t for t, on in (("first", stage == 0), ("last", last)) if on and par.pp > 1]
        name = "all ranks" if par.pp == 1 else f"stage {stage}" + (f" ({', '.join(tags)})" if tags else "")
        same = next((c for c in classes if c.memory == memory and c.layers == kinds[stage]), None)
        if same is not None:  # identical stages form one class
            stages = (*same.stages, stage)
            classes[classes.index(same)] = replace(same, name="stages " + ",".join(map(str, stages)), stages=stages,
                                                   ranks=same.ranks + per_stage)
            continue
        classes.append(RankClass(name, (stage,), per_stage, kinds[stage], flight, gpu_items, activ, transient, memory,
                                 cpu, held.owned, APPROXIMATE, (reason,), tl))
    return classes


def _resident_lines(held: _Held, par: Any, cpu: dict[str, float]) -> list[Line]:
    lines = []
    for item, b in held.held.items():
        on_cpu = item in cpu
        lines.append(Line(item, 0.0 if on_cpu else b, "bytes",
                          "{unsharded} B of this stage after the tp/ep split, ÷ {divisor} effective ZeRO-{zero} "
                          "sharding" + (", on CPU" if on_cpu else ""),
                          {"unsharded": held.unsharded[item], "zero": par.zero,
                           "divisor": held.unsharded[item] / b if b else 1.0}))
    return lines


def worst_rank(classes: list[RankClass]) -> RankClass:
    """The class with the highest peak (first one on ties)."""
    return max(classes, key=lambda c: c.memory["peak"])
