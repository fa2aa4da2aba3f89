"""The layout's own buffers at the moments they live (DDP buckets, ZeRO-3 gathered units, the reduce-scatter input,
CP's K/V block, SP's all-gathered input, EP's all-to-all buffer), as a function of (phase, part, layer) for the
timeline builder, and one Line per buffer kind."""

from __future__ import annotations

from stepbill.engine.kinds import Part, Phase
from stepbill.engine.line import Line
from stepbill.engine.memory.timeline import Buffers
from stepbill.engine.parallel.holdings import Held
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import Recipe

MIB = 2**20
DDP_BUCKET_BYTES = 25 * MIB  # torch DDP bucket_cap_mb default, cited in the seed §1.8
LAYER_PARTS = (Part.LAYER, Part.LAYER_INNER, Part.LAYER_NORM)
HEAD_PARTS = (Part.HEAD, Part.LOSS, Part.HEAD_BACKWARD)


def layout_buffers(spec: ModelSpec, recipe: Recipe, order: tuple[str, ...], held: Held) -> tuple[Buffers, list[Line]]:
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
    # PyTorch DDP: its buckets copy every gradient; not under optimizer offload (ZeRO-Offload's gradients go down to
    # the host as they are made, through DeepSpeed's own buckets: RankView.grads_offloaded)
    ddp_copies = par.zero == 0 and par.zero_group > 1 and not par.offload_optimizer
    # ZeRO-1's gradient bucket; under offload at ZeRO-0 too (the gradients reduce through a bucket on their way down)
    bucketed = par.zero == 1 or (par.zero == 0 and par.offload_optimizer)
    bucket = grads_held if ddp_copies else (min(DDP_BUCKET_BYTES, grads_held) if bucketed and par.zero_group > 1
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

    made: dict[tuple[Phase, Part, str | None, bool], int] = {}  # a layer counts through its kind only

    def buffers(phase: Phase, part: Part, layer: int | None) -> int:
        key = (phase, part, None if layer is None else order[layer], layer is None)
        if key not in made:
            made[key] = _buffers_at(phase, part, layer)
        return made[key]

    def _buffers_at(phase: Phase, part: Part, layer: int | None) -> int:
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
