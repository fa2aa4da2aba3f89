"""The bill per GPU: what each rank holds of weights, grads, master, optimizer states, activations and
transient buffers under a parallel layout, per pipeline stage (one rank class per distinct stage).

Resident items follow engine/shard.py's slicing rules. Activations (ideal convention) divide by cp (each rank
holds seq/cp tokens), by tp for head/width-split tensors (and for the residual-stream ones too under sequence
parallelism, Korthikanti et al. 2022), and are multiplied by the micro-batches in flight on the stage under the
pipeline schedule. Expert activations assume balanced routing: after the all-to-all a rank processes as many
token-expert pairs as its own micro-batch produced. Transient buffers: ZeRO-3 gathers a whole layer (current +
prefetched) in the weight dtype and reduce-scatters one layer's grads; stages 0–2 keep one gradient bucket
(DDP's default bucket_cap_mb = 25 MiB, the seed's §1.8); CP keeps one incoming K/V block per attention.
All values are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

from stepbill.engine import activations as act
from stepbill.engine.line import Line
from stepbill.engine.parallel_exact import exact_applies, exact_classes
from stepbill.engine.params import ParamInventory, ParamTensor
from stepbill.engine.shard import Slice, row_slice, stage_layer_kinds, zero_divisor
from stepbill.engine.states import lora_adapter_groups, optimizer_state_elements
from stepbill.engine.timeline import Timeline
from stepbill.spec.model import ModelSpec
from stepbill.spec.parallel import validate_layout
from stepbill.spec.recipe import LoRA, Recipe

MIB = 2**20
DDP_BUCKET_BYTES = 25 * MIB  # torch DDP bucket_cap_mb default, cited in the seed §1.8
OPTIMIZER_SIDE = ("master", "optimizer.")
# Activation rows whose width is split across tp (heads or FFN width); the rest are residual-stream wide and
# split only under sequence parallelism.
TP_WIDTH_ROWS = frozenset({"attn.q", "attn.k", "attn.v", "attn.core_out", "attn.q_up", "attn.kv_up",
                           "attn.logsumexp", "mlp.up_out", "mlp.act_out", "mlp.gate", "mlp.up", "mlp.product"})
MEMORY_KEYS = ("weights", "grads", "optimizer", "model", "resident", "activations", "transient", "peak",
               "peak_forward", "peak_backward")


@dataclass(frozen=True)
class RankClass:
    """One class of identical ranks (a pipeline stage): its per-item lines and memory totals, in bytes."""

    name: str
    stages: tuple[int, ...]
    ranks: int
    layers: dict[str, int]
    in_flight: float
    resident_items: list[Line]
    activation_items: list[Line]
    transient_items: list[Line]
    memory: dict[str, float]
    cpu: dict[str, float] = field(default_factory=dict)
    owned: dict[str, float] = field(default_factory=dict)  # item bytes / holders: sums over all ranks to global


def row_item_elements(t: ParamTensor, recipe: Recipe) -> dict[str, float]:
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


def item_bytes_per_element(item: str, recipe: Recipe) -> int:
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


def rank_layer_bytes_per_token(spec: ModelSpec, kind: str, recipe: Recipe, convention: str = "ideal") -> float:
    """Bytes one layer of `kind` keeps per token of the micro-batch on one rank (tp/sp/cp/etp splits applied)."""
    par = recipe.parallel
    total = 0.0
    for r in act.layer_rows(spec, kind, recipe.precision.activation, convention):
        divisor = par.cp * (par.tp if (r.name in TP_WIDTH_ROWS or par.sp) else 1)
        if r.name == "moe.gate_up_product":
            divisor *= par.expert_tp
        total += r.bytes_per_token / divisor
    return total


def _resident(spec: ModelSpec, recipe: Recipe, inv: ParamInventory, stage: int,
              kinds: list[dict[str, int]]) -> tuple[dict[str, float], dict[str, float], dict[str, float],
                                                    dict[str, float]]:
    """(bytes held per item, bytes owned per item, largest FSDP unit's elements as {weights, grads},
    bytes per item before ZeRO sharding)."""
    par = recipe.parallel
    held: dict[str, float] = {}
    unsharded: dict[str, float] = {}
    owned: dict[str, float] = {}
    units: dict[str, dict[str, float]] = {}
    for t in inv.tensors:
        sl: Slice = row_slice(spec, par, t, stage, kinds)
        if sl.fraction == 0:
            continue
        elements = row_item_elements(t, recipe)
        unit = f"layer.{t.layer_kind}" if t.layer_kind else "root"
        per_unit = kinds[stage][t.layer_kind] if t.layer_kind else 1
        u = units.setdefault(unit, {"weights": 0.0, "grads": 0.0})
        u["weights"] += sum(v for k, v in elements.items() if k.startswith("weights")) * sl.fraction / per_unit
        u["grads"] += elements["grads"] * sl.fraction / per_unit
        for item, n in elements.items():
            b = n * item_bytes_per_element(item, recipe) * sl.fraction
            held[item] = held.get(item, 0.0) + b / zero_divisor(item, par.zero, sl.zero_group)
            unsharded[item] = unsharded.get(item, 0.0) + b
            owned[item] = owned.get(item, 0.0) + b / sl.holders
    largest = max(units.values(), key=lambda u: u["weights"], default={"weights": 0.0, "grads": 0.0})
    return held, owned, largest, unsharded


def _activations(spec: ModelSpec, recipe: Recipe, layers: dict[str, int], flight: float,
                 convention: str) -> tuple[list[Line], float]:
    """Activation lines on one rank of a stage and the one-layer working set (bytes of one micro-batch)."""
    par, tokens = recipe.parallel, recipe.tokens
    per_layer = {k: rank_layer_bytes_per_token(spec, k, recipe, convention) for k in layers}
    working = max(per_layer.values(), default=0.0) * tokens
    if recipe.recompute == "full":
        width = spec.hidden_size * recipe.precision.activation / (par.cp * (par.tp if par.sp else 1))
        n = sum(layers.values())
        kept = Line("activations.layer_inputs", n * width * tokens * flight, "bytes",
                    "{layers} layers × {bytes_per_token} B/token × {tokens} tokens × {in_flight} in flight",
                    {"layers": n, "bytes_per_token": width, "tokens": tokens, "in_flight": flight})
        work = Line("activations.working_set", working, "bytes", "one layer rebuilt: {bytes} B",
                    {"bytes": working})
        return [kept, work], working
    lines = [
        Line(f"activations.{k}_layers", n * per_layer[k] * tokens * flight, "bytes",
             "{layers} layers × {per_token} B/token × {tokens} tokens × {in_flight} micro-batches in flight",
             {"layers": n, "per_token": per_layer[k], "tokens": tokens, "in_flight": flight})
        for k, n in layers.items()
    ]
    return lines, working


def _transient(spec: ModelSpec, recipe: Recipe, unit: dict[str, float], layers: dict[str, int]) -> list[Line]:
    par, p = recipe.parallel, recipe.precision
    out = []
    if par.zero == 3:
        out.append(Line("transient.zero3_allgather", 2 * unit["weights"] * p.weights, "bytes",
                        "2 units (current + prefetched) × {elements} elements × {bytes} B",
                        {"elements": unit["weights"], "bytes": p.weights}))
        out.append(Line("transient.zero3_reduce_scatter", unit["grads"] * p.grads, "bytes",
                        "one unit's unsharded grads: {elements} elements × {bytes} B",
                        {"elements": unit["grads"], "bytes": p.grads}))
    elif par.world > 1:
        out.append(Line("transient.grad_bucket", DDP_BUCKET_BYTES, "bytes", "one gradient bucket of 25 MiB (DDP)"))
    if par.cp > 1 and layers:
        a = spec.attention
        kv_width = a.kv_heads * (a.qk_head_dim + a.v_dim) / par.tp
        block = recipe.tokens / par.cp * kv_width * p.activation
        out.append(Line("transient.cp_kv_block", block, "bytes",
                        "incoming K/V block: {tokens} tokens × {width} × {bytes} B",
                        {"tokens": recipe.tokens / par.cp, "width": kv_width, "bytes": p.activation}))
    return out


def _sum(lines: list[Line], prefix: tuple[str, ...] | str = "") -> float:
    return sum(x.value for x in lines if x.name.startswith(prefix))


def _peaks_on_timeline(timeline: Timeline, memory: dict[str, float]) -> dict[str, float]:
    """The rank's peaks read off the global timeline: at each moment the rank holds its own weights, optimizer
    states and transient buffers, and its share of that moment's gradients and activations (the rank's grads
    and activations over the global ones: 1/tp, 1/cp, ZeRO shards, micro-batches in flight)."""
    global_grads = max(m.items["grads"] for m in timeline.moments)
    global_act = max(m.items["activations"] for m in timeline.moments if m.phase == "forward")
    grad_share = memory["grads"] / global_grads if global_grads else 0.0
    act_share = memory["activations"] / global_act if global_act else 0.0
    base = memory["weights"] + memory["optimizer"] + memory["transient"]
    best: dict[str, float] = {}
    for m in timeline.moments:
        # inputs, temporaries and autocast copies (eager) scale with the rank's tokens like its activations
        other = sum(v for k, v in m.items.items() if k not in ("weights", "optimizer", "grads", "activations"))
        total = base + grad_share * m.items["grads"] + act_share * (m.items["activations"] + other)
        best[m.phase] = max(best.get(m.phase, 0.0), total)
    return {"peak": max(best.values()), "peak_forward": best.get("forward", 0.0),
            "peak_backward": best.get("backward", 0.0)}


def rank_classes(spec: ModelSpec, recipe: Recipe, inv: ParamInventory, convention: str = "ideal",
                 timeline: Timeline | None = None) -> list[RankClass]:
    """One RankClass per pipeline stage, identical stages merged; ranks per class = dp·tp·cp per stage.
    Data-parallel sharding alone under the eager convention: engine/sharded.py's exact classes instead
    (parallel_exact.py)."""
    par = recipe.parallel
    validate_layout(spec, par, recipe.seq_len)
    kinds = stage_layer_kinds(spec, par)
    if not par.is_trivial and exact_applies(spec, recipe, convention):
        return exact_classes(spec, recipe, kinds[0])
    per_stage = par.dp * par.tp * par.cp
    classes: list[RankClass] = []
    for stage in range(par.pp):
        held, owned, unit, unsharded = _resident(spec, recipe, inv, stage, kinds)
        gpu_items, cpu = [], {}
        for item, b in held.items():
            if par.offload_optimizer and item.startswith(OPTIMIZER_SIDE):
                cpu[item] = b
                b = 0.0
            gpu_items.append(Line(item, b, "bytes",
                                  "{unsharded} B of this stage after the tp/ep split, ÷ {divisor} effective ZeRO-{zero} sharding"
                                  + (", on CPU" if b == 0 and item in cpu else ""),
                                  {"unsharded": unsharded[item], "zero": par.zero,
                                   "divisor": unsharded[item] / held[item] if held[item] else 1.0}))
        flight = in_flight_microbatches(recipe, stage)
        activ, working = _activations(spec, recipe, kinds[stage], flight, convention)
        if par.offload_activations:
            total = _sum(activ)
            cpu["activations"] = max(total - working, 0.0)
            activ = [Line("activations.on_gpu", min(working, total), "bytes",
                          "offloaded; one layer of one micro-batch stays on the GPU", {})]
        transient = _transient(spec, recipe, unit, kinds[stage])
        memory = {
            "weights": _sum(gpu_items, "weights"),
            "grads": _sum(gpu_items, "grads"),
            "optimizer": _sum(gpu_items, OPTIMIZER_SIDE),
            "activations": _sum(activ),
            "transient": _sum(transient),
        }
        memory["model"] = memory["weights"] + memory["grads"]
        memory["resident"] = memory["model"] + memory["optimizer"]
        if timeline is not None:
            memory.update(_peaks_on_timeline(timeline, memory))
        else:  # no timeline: everything at once (an upper bound)
            memory["peak"] = memory["resident"] + memory["activations"] + memory["transient"]
            memory["peak_forward"] = memory["peak"] - memory["grads"]
            memory["peak_backward"] = memory["peak"]
        memory = {k: memory[k] for k in MEMORY_KEYS}
        tags = [t for t, on in (("first", stage == 0), ("last", stage == par.pp - 1)) if on and par.pp > 1]
        name = "all ranks" if par.pp == 1 else f"stage {stage}" + (f" ({', '.join(tags)})" if tags else "")
        same = next((c for c in classes if c.memory == memory and c.layers == kinds[stage]), None)
        if same is not None:  # identical stages form one class
            stages = (*same.stages, stage)
            classes[classes.index(same)] = replace(same, name="stages " + ",".join(map(str, stages)), stages=stages,
                                                   ranks=same.ranks + per_stage)
            continue
        classes.append(RankClass(name, (stage,), per_stage, kinds[stage], flight, gpu_items, activ, transient, memory,
                                 cpu, owned))
    return classes


def single_rank_class(spec: ModelSpec, lines: dict[str, Line], resident: list[Line],
                      activations: list[Line]) -> RankClass:
    """The trivial layout (one GPU, nothing sharded): the rank is the global bill, timeline peaks included."""
    memory = {key: lines[f"memory.{key}"].value for key in MEMORY_KEYS if f"memory.{key}" in lines}
    memory["transient"] = 0.0
    memory = {k: float(memory[k]) for k in MEMORY_KEYS}
    held = {x.name: x.value for x in resident}
    return RankClass("all ranks", (0,), 1, act.layer_kinds(spec), 1.0, list(resident), list(activations), [], memory,
                     {}, held)


def worst_rank(classes: list[RankClass]) -> RankClass:
    """The class with the highest peak (first one on ties)."""
    return max(classes, key=lambda c: c.memory["peak"])
