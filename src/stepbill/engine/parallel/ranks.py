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
from dataclasses import replace
from typing import Any, NamedTuple

from stepbill.engine.activations import ActTensor
from stepbill.engine.kinds import Phase
from stepbill.engine.line import Line
from stepbill.engine.memo import Memo
from stepbill.engine.memory.eager import EagerTerms
from stepbill.engine.memory.timeline import Buffers, RankView, Timeline, rank_timeline
from stepbill.engine.memory.timeline_template import timeline_template
from stepbill.engine.parallel.buffers import layout_buffers
from stepbill.engine.parallel.fsdp2_ranks import exact_classes, exact_reason
from stepbill.engine.parallel.holdings import Held, rank_holdings
from stepbill.engine.parallel.layout import (
    representative_stage,
    stage_layer_indices,
    stage_layer_kinds,
    tp_embedding_note,
)
from stepbill.engine.parallel.rank_class import (
    APPROXIMATE,
    IDEAL,
    MEASURED_EXACT,
    MEMORY_KEYS,
    RankClass,
    SingleRank,
)
from stepbill.engine.parallel.rank_share import MEMO_ENTRIES, in_flight_microbatches, rank_eager, rank_plan, row_divisor
from stepbill.engine.params import ParamInventory
from stepbill.engine.recompute import RecomputePlan
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import validate_layout
from stepbill.spec.recipe import Recipe

OPTIMIZER_SIDE = ("master", "optimizer.")


def _rank_view(recipe: Recipe, held: Held, order: tuple[str, ...], stage: int, eager: EagerTerms | None,
               tied: bool, flight_bytes: float, buffers: Buffers | None) -> tuple[RankView, dict[str, float]]:
    """The RankView of one rank of `stage`, and what it keeps in CPU memory (offload)."""
    par = recipe.parallel
    weights = sum(v for k, v in held.held.items() if k.startswith("weights"))
    optimizer = sum(v for k, v in held.held.items() if k.startswith(OPTIMIZER_SIDE))
    if eager is not None:
        optimizer += eager.step_counters
    cpu = _cpu_items(held, par)
    if par.offload_optimizer:
        optimizer = 0.0
    counts = {k: order.count(k) for k in set(order)}
    layers = [held.grads.get(f"layer.{k}", 0.0) / counts[k] for k in order]
    head, embed = held.grads.get("head", 0.0), held.grads.get("embed", 0.0)
    if tied:  # the LM head's backward makes the tied token embedding's gradient (as timeline.grad_shares)
        moved = embed * (held.token_embedding_share if eager is not None else 1.0)
        head, embed = head + moved, embed - moved
    grads_total = sum(held.grads.values())
    first, last = stage == 0, stage == par.pp - 1
    if par.micro_batches > 1 and not par.offload_optimizer:
        # gradient accumulation: the earlier micro-batches' gradients exist already
        view = RankView(round(weights), round(optimizer), 0, tuple(0 for _ in order), 0, round(grads_total), first,
                        last, round(flight_bytes), buffers)
    else:  # under optimizer offload the gradients accumulate in host memory (RankView.grads_offloaded)
        view = RankView(round(weights), round(optimizer), round(head), tuple(round(x) for x in layers), round(embed),
                        0, first, last, round(flight_bytes), buffers, par.offload_optimizer)
    return view, cpu


def kept_by_kind(plan: RecomputePlan) -> tuple[tuple[str, int, float], ...]:
    """Per layer kind of the rank's plan: its layers on the stage and the bytes per token each keeps on average
    (what `_activation_lines` prints; made once per stage class, read by each of its stages)."""
    out = []
    for kind in plan.layers:
        n = plan.order.count(kind)
        per_token = sum(plan.kept_bytes(i) for i, k in enumerate(plan.order) if k == kind) / n if n else 0.0
        out.append((kind, n, per_token))
    return tuple(out)


def _activation_lines(plan: RecomputePlan, kept_by_kind: tuple[tuple[str, int, float], ...], tl: Timeline,
                      flight: float, outside: float) -> list[Line]:
    """The rank's activations at its forward peak, split into what its layers keep (× micro-batches in flight;
    `kept_by_kind`: `kept_by_kind(plan)`), outside-layer tensors and the working set of the layer being computed."""
    tokens = plan.tokens
    lines: list[Line] = []
    for kind, n, per_token in kept_by_kind:
        if n and per_token:
            lines.append(Line(f"activations.{kind}_layers", n * per_token * tokens * flight, "bytes",
                              "{layers} layers × {per_token} B/token × {tokens} tokens × {in_flight} micro-batches "
                              "in flight", {"layers": n, "per_token": per_token, "tokens": tokens,
                                            "in_flight": flight}))
    if outside:
        lines.append(Line("activations.outside", outside, "bytes",
                          "final norm, LM head input, fp32 log-softmax, labels, RoPE tables (eager)", {}))
    total = tl.peak_value(Phase.FORWARD, "activations") + tl.peak_value(Phase.FORWARD, "autocast_cache")
    rest = total - sum(x.value for x in lines)
    if rest > 0:
        lines.append(Line("activations.working_set", rest, "bytes",
                          "at the forward peak beyond the kept tensors: the layer being computed, logits and loss "
                          "(eager), autocast's copies, sliding-window masks (eager)", {}))
    return lines


def _memory(tl: Timeline, weights: float, optimizer: float, grads: float) -> dict[str, float]:
    value, forward = tl.peak_value, Phase.FORWARD
    memory = {
        "weights": weights,
        "grads": grads,
        "optimizer": optimizer,
        "model": weights + grads,
        "resident": weights + grads + optimizer,
        "activations": float(value(forward, "activations") + value(forward, "autocast_cache")),
        "transient": float(value(None, "buffers") + value(None, "dequant")),
        "peak": float(value()),
        "peak_forward": float(value(forward)),
        "peak_backward": float(value(Phase.BACKWARD)),
    }
    return {k: float(memory[k]) for k in MEMORY_KEYS}


def one_gpu_timeline(spec: ModelSpec, recipe: Recipe, inv: ParamInventory, plan: RecomputePlan, outside: float,
                     eager: EagerTerms | None) -> Timeline:
    """The one-GPU timeline: world size 1 of the per-rank model (everything held, nothing divided, no buffers),
    with the recipe's micro-batches (gradient accumulation)."""
    from stepbill.spec.parallel import Parallel

    single = replace(recipe, parallel=Parallel(micro_batches=recipe.parallel.micro_batches))
    held = rank_holdings(spec, single, 0)
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
    return stage_classes(spec, recipe, one.inventory, one.plan, one.eager, one.outside_rows, reason)


class StagePart(NamedTuple):
    """What the stages of one key (the rows they hold and their layer order) share: all but their micro-batches in
    flight."""

    held: Held
    plan: RecomputePlan  # the rank's (under activation offload, RecomputePlan.offloaded)
    kept: float  # activation bytes a micro-batch keeps after the forward
    eager: EagerTerms | None
    transient: list[Line]  # the layout's buffers' lines
    outside: float  # outside-layer bytes (the last stage's, eager)
    base: RankView  # less the in-flight bytes
    cpu: dict[str, float]
    resident_key: tuple[Any, ...]  # the layout key of its resident lines (`_resident_part`)
    counters: float  # the rank's AdamW step counters (eager)


def stage_parts(spec: ModelSpec, recipe: Recipe, inventory: ParamInventory, one_plan: RecomputePlan,
                one_eager: EagerTerms | None, outside_rows: Callable[[Callable[[ActTensor], float]], float] | None
                ) -> tuple[list[tuple[int, tuple[str, ...]]], dict[tuple[int, tuple[str, ...]], StagePart]]:
    """Each stage's key (the rows it holds, representative_stage, and its layer order) and, per key, what its stages
    share (StagePart), each made once per call."""
    par = recipe.parallel
    indices = stage_layer_indices(spec, par)
    divisor = row_divisor(recipe)
    orders = [tuple(one_plan.order[i] for i in indices[stage]) for stage in range(par.pp)]
    keys = [(representative_stage(spec, par, stage), orders[stage]) for stage in range(par.pp)]
    parts: dict[tuple[int, tuple[str, ...]], StagePart] = {}
    for stage, key in enumerate(keys):
        if key in parts:
            continue
        order = orders[stage]
        held = rank_holdings(spec, recipe, stage)
        plan = rank_plan(one_plan, recipe, order)
        kept = plan.kept_after_forward()
        if par.offload_activations:
            plan = plan.offloaded()
        eager = rank_eager(one_eager, recipe, held, inventory, spec) if one_eager is not None else None
        base, cpu, transient, resident, counters, outside = _stage_frame(
            spec, recipe, held, order, stage, key, eager, outside_rows, divisor)
        parts[key] = StagePart(held, plan, kept, eager, transient, outside, base, cpu, resident, counters)
    return keys, parts


def in_flight_bytes(recipe: Recipe, stage: int, kept: float) -> int:
    """The RankView's in_flight_bytes of `stage`: the other micro-batches' kept activations (none on the GPU under
    activation offload)."""
    flight = in_flight_microbatches(recipe, stage)
    return round(0.0 if recipe.parallel.offload_activations else (flight - 1) * kept)


def stage_class(spec: ModelSpec, recipe: Recipe, stage: int, part: StagePart, tl: Timeline,
                 by_kind: tuple[tuple[str, int, float], ...], reason: str) -> RankClass:
    """The class of one stage of `recipe`'s layout alone, from its key's part (`stage_parts`) and its timeline."""
    par = recipe.parallel
    gpu_items, weights, optimizer, grads = _resident_part(part.resident_key, part.held, par)
    optimizer += part.counters  # the rank's AdamW step counters (eager)
    flight = in_flight_microbatches(recipe, stage)
    last = stage == par.pp - 1
    cpu = dict(part.cpu)
    if par.offload_activations:
        cpu_act = part.kept * flight
        if cpu_act:
            cpu["activations"] = cpu_act
    memory = _memory(tl, weights, optimizer, grads)
    activ = _activation_lines(part.plan, by_kind, tl, flight, part.outside)
    tags = [t for t, on in (("first", stage == 0), ("last", last)) if on and par.pp > 1]
    name = "all ranks" if par.pp == 1 else f"stage {stage}" + (f" ({', '.join(tags)})" if tags else "")
    return RankClass(name, (stage,), par.dp * par.tp * par.cp, stage_layer_kinds(spec, par)[stage], flight,
                     list(gpu_items), activ, list(part.transient), memory, cpu, part.held.owned, APPROXIMATE,
                     (reason, *tp_embedding_note(spec, recipe.precision.grads, par, stage)), tl)


def stage_classes(spec: ModelSpec, recipe: Recipe, inventory: ParamInventory, one_plan: RecomputePlan,
                  one_eager: EagerTerms | None, outside_rows: Callable[[Callable[[ActTensor], float]], float] | None,
                  reason: str) -> list[RankClass]:
    """The approximate per-stage model (`rank_classes` when the measured rules do not cover the layout): one class
    per pipeline stage, identical stages merged, from the one-GPU plan and eager terms (nothing else of the one-GPU
    bill: `engine.bill_parts.verdict_ranks` calls it without making one)."""
    par = recipe.parallel
    kinds = stage_layer_kinds(spec, par)
    per_stage = par.dp * par.tp * par.cp
    classes: list[RankClass] = []
    # Stages that hold the same rows (representative_stage) and run the same layer order share everything but
    # their micro-batches in flight (stage_parts); a key of several stages builds its timelines from one template.
    keys, parts = stage_parts(spec, recipe, inventory, one_plan, one_eager, outside_rows)
    templates: dict[tuple[int, tuple[str, ...]], Any] = {}
    by_kind: dict[tuple[int, tuple[str, ...]], tuple[tuple[str, int, float], ...]] = {}
    for stage, key in enumerate(keys):
        part = parts[key]
        if key not in by_kind:
            by_kind[key] = kept_by_kind(part.plan)
            # a template when other stages share it; a stage of its own builds its timeline directly
            templates[key] = timeline_template(part.base, part.plan, part.outside, part.eager) \
                if keys.count(key) > 1 else None
        template = templates[key]
        flight_bytes = in_flight_bytes(recipe, stage, part.kept)
        if template is not None:
            tl = template.timeline(flight_bytes)  # the RankView's in_flight_bytes
        else:
            tl = rank_timeline(replace(part.base, in_flight_bytes=flight_bytes), part.plan, part.outside, part.eager)
        mine = stage_class(spec, recipe, stage, part, tl, by_kind[key], reason)
        same = next((c for c in classes if c.memory == mine.memory and c.layers == kinds[stage]), None)
        if same is not None:  # identical stages form one class
            stages = (*same.stages, stage)
            classes[classes.index(same)] = replace(same, name="stages " + ",".join(map(str, stages)), stages=stages,
                                                   ranks=same.ranks + per_stage)
            continue
        classes.append(mine)
    return classes


def _stage_frame(spec: ModelSpec, recipe: Recipe, held: Held, order: tuple[str, ...], stage: int, key: Any,
                 eager: EagerTerms | None, outside_rows: Callable[[Callable[[ActTensor], float]], float] | None,
                 divisor: Callable[[ActTensor], float]) -> tuple[Any, ...]:
    """What a stage's rank class holds whatever the recompute plan: its RankView less the in-flight bytes (the
    layout's buffers in it), CPU items, the buffers' lines, the key of its resident lines (`_resident_part`), its
    eager step counters, the outside-layer bytes (the last stage's, eager). Memoised on the model, the recipe but its recompute
    policy and the stage's rows and order (`key`): the layout's part once, the view's part per eager step counters
    and outside rows, so a budget candidate's corrections, its verdict and its ideal verdict share them (shared:
    read them, never change them)."""
    first, last = stage == 0, stage == recipe.parallel.pp - 1
    layout_key = (spec, recipe.precision, recipe.optimizer, recipe.micro_batch, recipe.seq_len, recipe.lora,
                  recipe.parallel, recipe.optimizer_impl, recipe.device, key, first, last)
    view_key = ("view", layout_key, None if eager is None else eager.step_counters, outside_rows is None)
    return _FRAMES.get(view_key, _view_part, spec, recipe, held, order, stage, eager, outside_rows, divisor,
                       layout_key)


def _view_part(spec: ModelSpec, recipe: Recipe, held: Held, order: tuple[str, ...], stage: int,
               eager: EagerTerms | None, outside_rows: Callable[[Callable[[ActTensor], float]], float] | None,
               divisor: Callable[[ActTensor], float], layout_key: tuple[Any, ...]) -> tuple[Any, ...]:
    """_stage_frame's value (its docstring); the layout's buffers memoised on `layout_key` alone."""
    last = stage == recipe.parallel.pp - 1
    buffers, transient = _FRAMES.get(layout_key, layout_buffers, spec, recipe, order, held)
    base, cpu = _rank_view(recipe, held, order, stage, eager, spec.tied_embeddings, 0.0, buffers)
    outside = outside_rows(divisor) if (outside_rows is not None and last) else 0.0
    return base, cpu, transient, layout_key, eager.step_counters if eager is not None else 0, outside


def _resident_part(layout_key: tuple[Any, ...], held: Held, par: Any) -> tuple[list[Line], float, float, float]:
    """A stage's resident lines and their weights / optimizer (without eager step counters) / grads sums, made when
    a class is made (a fit verdict's peak reads none of them); memoised with `_stage_frame`'s layout part."""
    return _FRAMES.get(("resident", layout_key), _resident_sums, held, par)


def _resident_sums(held: Held, par: Any) -> tuple[list[Line], float, float, float]:
    gpu_items = _resident_lines(held, par, _cpu_items(held, par))
    return (gpu_items, sum(x.value for x in gpu_items if x.name.startswith("weights")),
            sum(x.value for x in gpu_items if x.name.startswith(OPTIMIZER_SIDE)),
            sum(x.value for x in gpu_items if x.name == "grads"))


_FRAMES = Memo(MEMO_ENTRIES)  # _stage_frame's and _resident_part's memo (keys start with the layout key's model)


def _cpu_items(held: Held, par: Any) -> dict[str, float]:
    """What a rank keeps in CPU memory under optimizer offload: the optimizer side (master + states), moved off the
    GPU, and `grads`: the gradients of the elements whose optimizer step it runs, sent down for the CPU step (the
    time model's offload_grads_down: its ZeRO shard, all it holds without ZeRO) in the gradients' dtype — ZeRO-Offload
    (arXiv 2101.06840 §4.1) keeps fp16 gradients and fp32 states on the CPU, 2 + 12 B a parameter of mixed-bf16
    AdamW. The GPU keeps no gradient shard (RankView.grads_offloaded: each layer's leaves as its backward makes
    it). DeepSpeed adds an fp32 copy of those gradients (18 B a parameter in all), FSDP2's CPUOffloadPolicy holds
    fp32 gradients instead (16 B): this bill counts what the step cannot do without."""
    if not par.offload_optimizer:
        return {}
    out = {k: v for k, v in held.held.items() if k.startswith(OPTIMIZER_SIDE)}
    grads = held.held.get("grads", 0.0) if par.zero == 0 else held.owned.get("grads", 0.0)
    if grads:
        out["grads"] = grads
    return out


def _resident_lines(held: Held, par: Any, cpu: dict[str, float]) -> list[Line]:
    lines = []
    for item, b in held.held.items():
        on_cpu = item in cpu  # moved off the GPU: the optimizer side, and the gradients as they are made
        lines.append(Line(item, 0.0 if on_cpu else b, "bytes",
                          "{unsharded} B of this stage after the tp/ep split, ÷ {divisor} effective ZeRO-{zero} "
                          "sharding" + (", on CPU" if on_cpu else ""),
                          {"unsharded": held.unsharded[item], "zero": par.zero,
                           "divisor": held.unsharded[item] / b if b else 1.0}))
    return lines


def worst_rank(classes: list[RankClass]) -> RankClass:
    """The class with the highest peak (first one on ties)."""
    return max(classes, key=lambda c: c.memory["peak"])
