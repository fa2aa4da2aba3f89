"""The bill's activation lines: what is alive at the forward peak, split into what the layers keep, what lives
outside them (the eager convention's logits, masks, autocast cache, sliding-window copies) and the working set of
the layer being computed. Split out of engine/bill.py, which assembles them with the other lines."""

from __future__ import annotations

from stepbill.engine.kinds import Part
from stepbill.engine.line import Line
from stepbill.engine.memory.eager import EagerTerms
from stepbill.engine.memory.timeline import Timeline
from stepbill.engine.recompute import RecomputePlan


def activation_lines(plan: RecomputePlan, forward_peak_activations: float, activation_bytes: int,
                     hidden: int, outside: float = 0, extra: list[Line] | None = None) -> list[Line]:
    """The activations at the forward peak, split into what the layers keep and the working set of the
    layer being computed (rows the policy drops: alive while that layer runs)."""
    tokens = plan.tokens
    lines: list[Line] = []
    if plan.policy.kind in ("full", "every"):
        n_ckpt = sum(1 for i in range(len(plan.order)) if plan.kept_bytes(i))
        lines.append(Line("activations.layer_inputs", plan.kept_after_forward(), "bytes",
                          "{layers} checkpointed layer inputs × {hidden} × {bytes} B × {tokens} tokens",
                          {"layers": n_ckpt, "hidden": hidden, "bytes": activation_bytes, "tokens": tokens}))
    else:
        for kind, layer in plan.layers.items():
            n_layers = plan.order.count(kind)
            lines.append(Line(f"activations.{kind}_layers", n_layers * layer.kept_bytes * tokens, "bytes",
                              "{layers} layers × {per_token} B/token × {tokens} tokens",
                              {"layers": n_layers, "per_token": layer.kept_bytes, "tokens": tokens}))
    if outside:
        lines.append(Line("activations.outside", outside, "bytes",
                          "final norm, LM head input, fp32 log-softmax, labels, RoPE tables (eager)", {}))
    lines += extra or []
    working = forward_peak_activations - sum(x.value for x in lines)
    if working > 0:
        lines.append(Line("activations.working_set", working, "bytes",
                          "tensors the policy drops, alive while their layer runs: {per_token} B/token × {tokens}",
                          {"per_token": working / tokens, "tokens": tokens}))
    return lines


def eager_activation_lines(eager: EagerTerms | None, timeline: Timeline) -> list[Line]:
    """Forward-made tensors the eager convention adds at the forward peak: logits and loss, autocast's cache."""
    if eager is None:
        return []
    out = [Line("activations.logits_and_loss", eager.forward_end, "bytes",
                "logits (compute dtype) + their fp32 upcast (unless fp32) + padded labels + loss", {},
                convention="eager: transformers' ForCausalLMLoss; alive at the end of the forward")]
    # the attention masks: the decoder's while its layers run; once it has returned, what the checkpoints hold of them
    # and the position ids (engine/activations/eager/masks.py)
    if timeline.peak_forward.part is Part.HEAD and eager.held_at(None):
        out.append(Line("activations.checkpoint_held", eager.held_at(None), "bytes", "transformers' attention masks "
                        "and position ids the checkpoints hold for the rebuild", {},
                        convention="eager: non-reentrant checkpoints keep their layer's kwargs to its backward"))
    elif timeline.peak_forward.part is not Part.HEAD and eager.decoder_masks:
        out.append(Line("activations.attention_masks", eager.decoder_masks, "bytes", "transformers' attention masks "
                        "the decoder names while its layers run", {},
                        convention="eager: masking_utils' masks, one storage per attention type"))
    cache = timeline.peak_forward.items.get("autocast_cache", 0)
    if cache:
        out.append(Line("activations.autocast_cache", cache, "bytes", "bf16 copy of every linear weight (2 B each)",
                        {}, convention="amp-bf16: autocast's weight-cast cache"))
    return out


def window_lines(eager: EagerTerms | None, plan: RecomputePlan) -> list[Line]:
    """The sliding-window masks and k/v copies the masked layers keep (eager; none inside checkpoints)."""
    if eager is None or not eager.window or plan.policy.kind in ("full", "every"):
        return []
    return [Line("activations.sliding_window", eager.window, "bytes", "masked layers × (B·S² mask in the compute "
                 "dtype + k and v at query-head width − the kv-head k and v)", {},
                 convention="eager: SDPA with transformers' explicit sliding-window mask at seq ≥ window "
                 "(engine/activations/eager/masks.py)")]
