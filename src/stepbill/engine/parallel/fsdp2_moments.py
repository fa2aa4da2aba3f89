"""The moments of one FSDP2 step on one rank (ZeRO-3 / ZeRO-2), built on the single-rank eager timeline.

FSDP2's buffers (torch 2.13, `_fsdp_param_group.py`, traced with FSDPMemTracker's per-module snapshots on tiny
llama and mixtral, N = 2 … 64). A unit is a decoder layer or the root (embedding, final norm, LM head); `flat(u)`
is its bf16 all-gather buffer (N padded shards), `out(u)` its unsharded bf16 parameters (padded per tensor, the
same bytes), `rs(u)` its fp32 reduce-scatter input (padded), `grad(u)` its bf16 unsharded gradients (unpadded).

Forward: a unit's pre-forward all-gathers `flat(u)` and copies it out into `out(u)`; the previous unit's flat
buffer is freed only after that copy-out (implicit prefetch), so the copy-out holds two flat buffers. ZeRO-3
frees `out(u)` after the layer's forward (root included), ZeRO-2 keeps every layer's until its backward. The
root's post-forward (after the loss) frees the last flat buffer.
Backward: the root's pre-backward re-gathers the root (ZeRO-3) and prefetches the last layer's flat buffer;
each layer's pre-backward copies out (flat + out alive), frees its flat buffer and prefetches the next layer's
(ZeRO-3). A layer's post-backward reshards `out(u)`, frees the previous reduce-scatter input (one kept in
flight), casts `grad(u)` into `rs(u)` and keeps the fp32 sharded gradient. The LM head's and final norm's bf16
gradients live until the root's post-backward, after the embedding's backward.

Activations between the timeline's moments (measured, eager, bf16): before layer 0 the embedding output, the
RoPE tables and the position ids (`pre`); at a layer's end the timeline's kept bytes + `pre` + one hidden-wide
tensor per finished layer up to two; between two layers' backwards the kept bytes of the layers still to go +
the RoPE tables + the loss and its seed + the residual gradient. A layer's forward working set (its
transients) is not in the timeline: FSDP moments inside a layer's forward use its end.

Collectives' own buffers (`backend`). "nccl" (the default, and the fake process group `check --dp N` measures on
one process): a reduce-scatter reads its input in place and allocates nothing. "gloo" (`check --launch N` on
CPU): ProcessGroupGloo has no native reduce-scatter; `reduce_scatter_tensor_coalesced` (torch 2.13) clones the
whole input, all-reduces the clone and copies this rank's chunk out, so each unit's reduce-scatter adds a
moment holding its input twice, `2·rs(u)`, with the output `shard(u)` beside it, after the unit's unsharded
parameters were resharded and its bf16 gradients copied in (freed but for the last one autograd produced: the
input norm's for a layer, the token embedding's for the root, measured on tiny llama). The previous unit's
reduce-scatter input is freed before. gloo's all-gather copies through a flat output-sized buffer on its worker
thread: no tracker on the main thread sees it, and it is not billed (docs/accuracy.md "Real ranks").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stepbill.engine.kinds import Part, Phase

INT64, LOSS_AND_SEED, BF16 = 8, 8, 2


@dataclass(frozen=True)
class Units:
    """Bytes per unit (-1: root; i: layer i)."""

    gathered: dict[int, float]  # flat(u) = out(u): bf16, padded
    reduce_scatter: dict[int, float]  # rs(u): fp32, padded
    shard_grad: dict[int, float]  # the rank's fp32 padded sharded gradient
    grad_bf16: dict[int, float]  # unsharded bf16 gradients
    head_grad_bf16: float  # final norm + LM head (root tensors but the embedding)
    #: bf16 gradient autograd produces last in a unit (a layer's input norm, the root's token embedding): still
    #: alive while the unit's reduce-scatter runs (the gloo moment)
    last_grad_bf16: dict[int, float] = field(default_factory=dict)


def _live(m: Any) -> float:
    items = m.items
    return items["activations"] + items.get("temporaries", 0) + items.get("autocast_cache", 0)


def fsdp_moments(bill: Any, units: Units, zero: int, base: float, rope: int,
                 backend: str = "nccl", masks: int = 0) -> list[tuple[str, str, float]]:
    """(phase, label, bytes) of one rank; `base`: sharded params + optimizer states + inputs + buffers;
    `backend`: "nccl" or "gloo" (gloo's reduce-scatter clones its input: module docstring); `masks`: the decoder's
    masks, in the timeline's forward layer moments (EagerTerms.decoder_masks), taken out of the kept bytes."""
    spec, recipe = bill.model, bill.recipe
    a = recipe.precision.activation
    n = recipe.micro_batch * recipe.seq_len
    hidden = a * spec.hidden_size * n
    layers = spec.n_layers
    g, rs, done, full = units.gathered, units.reduce_scatter, units.shard_grad, units.grad_bf16
    timeline = bill.timeline
    fwd = [timeline.find(Phase.FORWARD, Part.LAYER, i)[0] for i in range(layers)]
    kept = [m.items["activations"] - masks for m in fwd]
    pre = hidden + rope + INT64 * n
    out: list[tuple[str, str, float]] = []
    z3 = zero == 3
    if backend not in ("nccl", "gloo"):
        raise ValueError(f"backend must be nccl or gloo, got {backend!r}")
    gloo, last = backend == "gloo", units.last_grad_bf16

    def add(phase: str, label: str, *parts: float) -> None:
        out.append((phase, label, base + sum(parts)))

    # prefix sums over layers: Σ_{j<i} g[j], Σ_{j<i} done[j], Σ_{j<i} full[j]
    g_before, done_before, full_before = [0.0], [0.0], [0.0]
    for j in range(layers):
        g_before.append(g_before[-1] + g[j])
        done_before.append(done_before[-1] + done[j])
        full_before.append(full_before[-1] + full[j])

    # forward
    add("forward", "forward, root all-gather", 2 * g[-1])
    for i in range(layers):
        held = 0 if z3 else g_before[i]
        prev = g[i - 1] if i else g[-1]
        before = pre if i == 0 else kept[i - 1] + pre + hidden * min(i, 2)
        add("forward", f"forward, layer {i} all-gather", g[-1], held, prev, 2 * g[i], before)
        add("forward", fwd[i].label, g[-1], held, 2 * g[i], kept[i] + pre + hidden * min(i + 1, 2))
    held_all = 0 if z3 else g_before[layers]
    loss = timeline.find(Phase.FORWARD, Part.HEAD)[0]
    add("forward", loss.label, g[-1], held_all, g[layers - 1], _live(loss))
    # backward: loss and LM head (root re-gathered under ZeRO-3; last layer's flat buffer prefetched)
    prefetch_last = g[layers - 1] if z3 else 0
    for part in (Part.LOSS, Part.HEAD_BACKWARD):
        for m in timeline.find(Phase.BACKWARD, part):
            add("backward", m.label, g[-1], held_all, prefetch_last, _live(m))
    head = units.head_grad_bf16
    for i in reversed(range(layers)):
        finished = done_before[layers] - done_before[i + 1]
        rs_prev = rs[i + 1] if i + 1 < layers else 0
        others = g_before[i] if not z3 else 0  # ZeRO-2: earlier layers still unsharded
        between = kept[i] + rope + LOSS_AND_SEED + hidden
        if z3:
            add("backward", f"backward, layer {i} copy-out", g[-1], 2 * g[i], rs_prev, finished, head, between)
        nxt = g[i - 1] if (z3 and i) else 0
        grads_before = head + full_before[layers] - full_before[i + 1]  # single-rank bf16 grads so far
        for m in timeline.find(Phase.BACKWARD, Part.LAYER, i) + timeline.find(Phase.BACKWARD, Part.LAYER_NORM, i):
            partial = m.items["grads"] - grads_before
            add("backward", m.label, g[-1], others, g[i], nxt, rs_prev, finished, head, partial, _live(m))
        after = (kept[i - 1] + rope if i else 0) + LOSS_AND_SEED + hidden
        add("backward", f"backward, layer {i} post-backward", g[-1], others, g[i], nxt, rs_prev, finished, head,
            full[i], after)
        if gloo:  # resharded, bf16 grads copied into rs(i) and freed, rs_prev freed: rs(i), its clone, the shard
            add("backward", f"backward, layer {i} reduce-scatter (gloo: input cloned)", g[-1], others, nxt,
                finished, head, 2 * rs[i], done[i], last.get(i, 0), after)
    finished = done_before[layers]
    # tied embeddings: the shared weight's LM head contribution, the embedding's and their sum, bf16 and unsharded
    # (engine/memory/eager.tied_gradient_sum; here full[-1] counts one of them)
    tied = 2 * BF16 * spec.vocab_size * spec.hidden_size if spec.tied_embeddings and recipe.lora is None else 0
    add("backward", "backward, embedding and root post-backward", g[-1], rs[0], finished, full[-1],
        LOSS_AND_SEED, tied)
    if gloo:  # the root resharded, rs[0] freed: the root's input, its clone and its shard
        add("backward", "backward, root reduce-scatter (gloo: input cloned)", finished, 2 * rs[-1], done[-1],
            last.get(-1, 0), LOSS_AND_SEED)
    return out
