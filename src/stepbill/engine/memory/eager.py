"""What eager PyTorch holds besides weights, states and saved tensors: the `eager` convention's transients.

The moments are those `stepbill check` measures with MemTracker (second iteration of transformers' training
step, `model(input_ids, labels=input_ids, use_cache=False)`, `loss.backward()`, `optimizer.step()`,
`zero_grad(set_to_none=True)`). Traced op by op on tiny llama models (torch 2.13 CPU, transformers 5.24):

- always alive: the input ids (int64, B·T; the labels are the same tensor), the module buffers (RoPE
  `inv_freq` and `original_inv_freq`, fp32, head_dim/2 each) and the optimizer's `step` counters (Adam, AdamW,
  Adafactor: a 4-byte fp32 tensor per parameter tensor; Muon: per tensor of the AdamW beside it);
- end of the forward (`nll_loss`): besides every saved tensor, the logits (compute dtype, B·T·V), their fp32
  upcast when they are not fp32 already (`ForCausalLMLoss`: `logits.float()`), the padded labels
  (B·(T+1) int64; at B = 1 they are the saved shifted labels' storage, counted there) and the loss;
- loss backward (`_log_softmax_backward_data`): NLL's gradient and log-softmax's gradient, both fp32 B·T·V;
  the labels and token count are released, the loss and its seed gradient are alive;
- LM head backward: the log-softmax is freed; dlogits (compute dtype), the head's weight gradient and the
  gradient of its input are alive;
- inside a decoder layer's backward the largest moment is the FFN's first elementwise backward (SwiGLU: the
  product's two factor gradients being made while its incoming gradient lives): the layer's rows minus the
  down projection's input, the residual gradient (hidden wide) and three FFN-wide gradients; the weight
  gradients of every later layer and of the layer's down projection exist; in low precision the FFN's input
  norm backward can top it (RMSNorm works in fp32: five fp32 hidden-wide temporaries, with the FFN's rows
  freed but for the norm's fp32 input, and all the FFN's weight gradients made); a MoE layer's largest are its
  routed experts' backward moments instead (eager_moe.py: the combine, and each grouped GEMM's whole bank gradient);
- optimizer step: each optimizer's temporaries over the tensors as torch holds them (optimizer_step.py); AdamW's
  `single` (foreach=False) makes `exp_avg_sq.sqrt()` and its division by the bias correction for one tensor while
  the previous tensor's `denom` is still referenced: max over consecutive tensors of 2·s_j + s_{j-1} bytes;
  `foreach` builds `_foreach_sqrt` of every state at once: one more copy of all states; `fused`: none; SGD none;
  Adafactor its full-size variance estimate per tensor (single) or of every tensor (foreach); Muon its Newton–Schulz
  iterates;
- amp-bf16: autocast caches a bf16 copy of every linear weight at its first use in the forward; a layer's
  copies live until its backward frees the graph nodes that saved them (LM head's until the head backward).

Family-independent: sizes come from the eager rows (layer_rows), the ModelSpec and the ParamInventory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache

from stepbill.engine import activations as act
from stepbill.engine.activations import eager
from stepbill.engine.activations.eager.dropout import embedding_dropout
from stepbill.engine.activations.eager.families import require_modelled_step
from stepbill.engine.activations.eager.masks import (
    checkpoint_held,
    decoder_masks,
    window_fixed_bytes,
    window_total_bytes,
)
from stepbill.engine.activations.eager.outside import rope_buffer_bytes, rope_table_width
from stepbill.engine.activations.eager.torch_params import TorchTensor, torch_tensors
from stepbill.engine.memory.eager_layer import (
    AMP_CAST,
    eager_attention_backward,
    gpt_oss_rebuild,
    in_layer_forward,
    mla_math_rebuild_low,
    post_ffn_norm_backward,
    split_post_ffn,
)
from stepbill.engine.memory.eager_lora import first_layer_adapter_a_casts, lora_stepped
from stepbill.engine.memory.eager_mla import attention_backward_peak, forward_attention_peak
from stepbill.engine.memory.eager_moe import InnerMoment, routed_backward
from stepbill.engine.memory.optimizer_step import Stepped, step_counter_bytes, step_temporaries
from stepbill.engine.params import ParamInventory
from stepbill.engine.recompute import RecomputePlan
from stepbill.engine.recompute.core_attn import checkpoints_attention_core
from stepbill.engine.states import lora_adapter_groups
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import Recipe

FP32 = 4
INT64 = 8


@dataclass(frozen=True)
class EagerTerms:
    """Bytes the eager timeline adds to the ideal one (whole micro-batch)."""

    constant: int  # input ids + module buffers, alive the whole step
    step_counters: int  # the optimizer's `step` tensors (counted with the optimizer states)
    forward_end: int  # logits (+ fp32 upcast) + padded labels + loss, on top of the saved tensors
    loss_act: int  # activation change at the loss backward (labels and token count freed, loss + seed alive)
    loss_temp: int  # NLL and log-softmax gradients (fp32)
    head_act: int  # activation change at the LM head backward (log-softmax freed as well)
    head_temp: int  # dlogits + head weight gradient + gradient of the head input
    rope: int  # outside bytes that live through the layers' backward (RoPE tables)
    layer_act: dict[str, int] = field(default_factory=dict)  # per layer kind: − the down projection's input
    layer_temp: dict[str, int] = field(default_factory=dict)  # per layer kind: residual + FFN gradients
    layer_grad: dict[str, int] = field(default_factory=dict)  # per layer kind: its last matrix's gradient
    # The FFN's input norm backward (RMSNorm upcast to fp32: five fp32 hidden-wide temporaries), after the
    # FFN's rows are freed and its weight gradients made: activation change, temporaries, gradients.
    norm_act: dict[str, int] = field(default_factory=dict)
    norm_temp: int = 0
    norm_grad: dict[str, int] = field(default_factory=dict)
    optimizer_temp: int = 0
    cast_layer: dict[str, int] = field(default_factory=dict)  # amp: bf16 weight copies of one layer
    #: amp: bf16 copies of one layer's linear biases, cached in the forward and saved by no op (freed with the cache)
    cast_bias: dict[str, int] = field(default_factory=dict)
    cast_head: int = 0  # amp: the LM head's bf16 copy
    # per layer kind: saved rows that do not grow per token (grouped_mm offsets, B=1 views; engine.eager), and the
    # sliding-window masks and k/v copies of the masked layers spread over the kind's layers (eager/masks.py)
    layer_fixed: dict[str, int] = field(default_factory=dict)
    # Checkpointed layers (full recompute): per layer kind, the bytes its forward holds at its largest op
    # beyond its saved input (in_layer_forward); 0 where no in-layer model exists (then the layer's end is
    # its forward moment). `embed_locals`: the model's embedding locals alive while the layers run.
    layer_inner: dict[str, int] = field(default_factory=dict)
    embed_locals: int = 0
    # What the masked sliding-window layers keep beyond full attention, all layers (also inside layer_fixed).
    window: int = 0
    #: LoRA: the embedding output, which layer 0 no longer saves (plan.first_unsaved) but the model's forward keeps
    #: named (`inputs_embeds`) while the layers run
    lora_embed_out: int = 0
    #: LoRA under amp: layer 0's q/k/v weight casts, which no matmul saves (their input needs no gradient)
    lora_first_cast: int = 0
    #: LoRA under amp: the A weight casts of layer 0's q/k/v adapters — cached by autocast (A requires grad) but
    #: saved by no matmul (A's input, the frozen embedding's normed output, needs no gradient): alive through the
    #: forward, freed when the forward leaves autocast
    lora_first_a_cast: int = 0
    #: LoRA under amp, per layer kind: the adapters' share of cast_layer (A and B of each adapter), the only casts
    #: autocast caches (leaves that require grad); a checkpointed layer's forward keeps these alone, its frozen
    #: weights' casts being saved by matmuls whose saves the checkpoint discards
    lora_cast_layer: dict[str, int] = field(default_factory=dict)
    #: tied embeddings: the shared weight's extra gradient copies at the embedding's backward (tied_gradient_sum)
    tied_sum: int = 0
    #: the embedding output's gradient (B·T·h in the residual's dtype), alive while the embedding's backward makes
    #: its V·h weight gradient (untied; measured on llama3-8b: MemTracker's peak at embedding_dense_backward)
    embed_grad_in: int = 0
    #: --attention eager (eager_attention_backward): per layer kind, the softmax backward's moment inside the layer's
    #: backward: activation change, temporaries, gradients made by then
    attn_act: dict[str, int] = field(default_factory=dict)
    attn_temp: dict[str, int] = field(default_factory=dict)
    attn_grad: dict[str, int] = field(default_factory=dict)
    #: per layer kind, a layer's largest forward attention op against the moment after its forward (eager_mla:
    #: --attention eager's scores or softmax, MLA's math path without recompute)
    attn_fwd: dict[str, InnerMoment] = field(default_factory=dict)
    #: per layer kind, moments inside its backward: a MoE layer's routed down and gate_up grouped-GEMM backwards
    #: (eager_moe.py; the combine's is the kind's layer moment), MLA's math-path softmax backward (eager_mla.py)
    inner_backward: dict[str, tuple[InnerMoment, ...]] = field(default_factory=dict)
    #: per layer kind: the change of autocast's weight copies at the layer moment (the MoE combine's: eager_moe.py)
    layer_cast: dict[str, int] = field(default_factory=dict)
    #: full recompute, per layer kind: the rebuild's peak at the start of its backward (eager_layer.mla_math_rebuild_low)
    layer_rebuild: dict[str, InnerMoment] = field(default_factory=dict)
    #: the attention masks the decoder's forward names while its layers run (eager/masks.decoder_masks), any policy
    decoder_masks: int = 0
    #: what checkpoints hold beyond their inputs (masks, position ids: eager/masks.checkpoint_held), from the forward's
    #: end on, as (layer index, bytes): freed once that layer's backward ends
    checkpoint_held: tuple[tuple[int, int], ...] = ()

    def held_at(self, layer: int | None, first: bool = True) -> int:
        """Bytes of `checkpoint_held` alive at the backward of `layer` (None: before the layers' backward). `first`:
        the rank's layer indices are the model's (one GPU, the first pipeline stage); elsewhere a stage's
        checkpoints hold theirs through its backward."""
        return sum(b for j, b in self.checkpoint_held if layer is None or not first or j <= layer)

    def for_rank(self, tokens: float, width: float, vocab: float, grads: float, counters: float = 1.0,
                 optimizer: float = 1.0, weights: float = 1.0, experts: float = 1.0) -> EagerTerms:
        """These terms on one rank of a layout (approximate: each term divided as the tensors it stands for).

        `tokens`: the divisor of residual-stream-wide tensors (cp, × tp under sequence parallelism); `width`:
        of head/FFN-wide tensors (cp × tp); `vocab`: of the logits and loss (cp × tp: vocab-parallel
        cross-entropy, Megatron-LM); `grads`: of one layer's weight gradients (tp, × ZeRO-2/3 shards);
        `counters`: the share of parameter tensors the rank holds; `optimizer`: of the optimizer's largest
        state tensor (tp, × ZeRO shards); `weights`: of autocast's weight copies (tp); `experts`: of a routed expert
        bank's gradient while its grouped GEMM's backward makes it whole (ep × etp: the rank's experts, their width)."""

        def per(mapping: dict[str, int], divisor: float) -> dict[str, int]:
            return {k: round(v / divisor) for k, v in mapping.items()}

        return replace(
            self,
            constant=round(self.constant / tokens),
            step_counters=round(self.step_counters * counters),
            forward_end=round(self.forward_end / vocab),
            loss_act=round(self.loss_act / vocab),
            loss_temp=round(self.loss_temp / vocab),
            head_act=round(self.head_act / vocab),
            head_temp=round(self.head_temp / vocab),
            rope=round(self.rope / tokens),
            layer_act=per(self.layer_act, width),
            layer_temp=per(self.layer_temp, width),
            layer_grad=per(self.layer_grad, grads),
            norm_act=per(self.norm_act, width),
            norm_temp=round(self.norm_temp / tokens),
            norm_grad=per(self.norm_grad, grads),
            optimizer_temp=round(self.optimizer_temp / optimizer),
            cast_layer=per(self.cast_layer, weights),
            cast_bias=per(self.cast_bias, weights),
            lora_cast_layer=per(self.lora_cast_layer, weights),
            cast_head=round(self.cast_head / weights),
            layer_fixed=per(self.layer_fixed, tokens),
            layer_inner=per(self.layer_inner, width),
            embed_locals=round(self.embed_locals / tokens),
            window=round(self.window / tokens),
            lora_embed_out=round(self.lora_embed_out / tokens),
            lora_first_cast=round(self.lora_first_cast / weights),
            lora_first_a_cast=round(self.lora_first_a_cast / weights),
            tied_sum=round(self.tied_sum / vocab),
            embed_grad_in=round(self.embed_grad_in / tokens),
            attn_act=per(self.attn_act, width),
            attn_temp=per(self.attn_temp, width),
            attn_grad=per(self.attn_grad, grads),
            attn_fwd={k: x.divided(width, tokens, 1, 1, weights, 1) for k, x in self.attn_fwd.items()},
            # a bank's accumulated gradient: the rank's experts, and the ZeRO shards of `grads` (grads ÷ tp = weights)
            inner_backward={k: tuple(x.divided(width, width, experts, grads, weights, experts * grads / weights)
                                     for x in v) for k, v in self.inner_backward.items()},
            layer_cast=per(self.layer_cast, weights),
            layer_rebuild={k: x.divided(width, tokens, 1, 1, weights, 1) for k, x in self.layer_rebuild.items()},
            decoder_masks=round(self.decoder_masks / tokens),
            checkpoint_held=tuple((j, round(b / tokens)) for j, b in self.checkpoint_held),
        )


def embedding_locals(spec: ModelSpec, width: int, b: int, t: int) -> int:
    """Learned positions (GPT-2): `inputs_embeds` (B·T·h) and `position_embeds` (T·h, batch-broadcast) stay
    named in the model's forward until the final norm; rotary models' embedding output is layer 0's input,
    their cos/sin tables (the hidden states' dtype, per position) and the position ids they were made from (int64,
    handed to every layer) are the locals alive through the layers."""
    p = eager.dt_of(width).param
    if spec.positions == "rotary":  # the cos/sin tables (position_embeddings), shared by every layer
        return rope_table_width(spec) * p * t + INT64 * t
    if spec.positions != "learned":
        return 0
    return p * spec.hidden_size * (b * t + t)


@lru_cache(maxsize=64)  # a pure function of the frozen spec; the planner asks for it many times
def stepped_tensors(spec: ModelSpec) -> list[Stepped]:
    """Every parameter tensor as torch holds and steps it (eager.torch_params), in registration order; Muon's are
    the hidden matrices as the bill's states count them (ParamTensor.is_matrix): a decoder layer's 2-D weights (a
    router's among them) and its 3-D expert banks — not a bias, an embedding table or the LM head. Shared
    (memoised): read it, never change it."""
    return [Stepped(t.shape, muon_takes(t)) for t in torch_tensors(spec)]


def muon_takes(t: TorchTensor) -> bool:
    """Whether the bill's Muon steps torch tensor `t` (stepped_tensors), else the AdamW beside it."""
    return t.unit >= 0 and len(t.shape) in (2, 3) and not t.name.endswith("bias")


def _first_layer_unsaved_casts(inventory: ParamInventory, plan: RecomputePlan, compute_bytes: int) -> int:
    """amp under LoRA: bytes of layer 0's q/k/v weight casts (one layer's share of each), which autocast does not
    cache (frozen) and no matmul saves (the frozen embedding's output needs no gradient)."""
    if not plan.order:
        return 0
    first = plan.order[0]
    n = max(1, plan.order.count(first))
    return sum(x.total // n for x in inventory.tensors if x.layer_kind == first
               and x.name in ("attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight")) * compute_bytes


def tied_gradient_sum(spec: ModelSpec, recipe: Recipe) -> int:
    """Tied embeddings: bytes beyond the gradients alive at the token embedding's backward.

    The LM head and the embedding feed one AccumulateGrad node (one Parameter); autograd's engine sums the two
    contributions in the node's input buffer before it runs (torch/csrc/autograd/input_buffer.cpp). The head's
    contribution (billed as the head's gradient) is buffered first; the embedding's backward then makes its own
    V·h gradient, and the head's is a transposed view (linear's weight.t()), which the buffer cannot add into in
    place: the sum is a third V·h tensor. Measured (MemTracker, gpt3-125m fp32 seq 128): the backward peak holds
    3 × V·h·4 B besides the other gradients, 2 × V·h·4 B above the bill's grads. 0 without tied embeddings or
    under LoRA (frozen embedding)."""
    if not spec.tied_embeddings or recipe.lora is not None:
        return 0
    return 2 * spec.vocab_size * spec.hidden_size * recipe.precision.grads


def eager_terms(spec: ModelSpec, recipe: Recipe, inventory: ParamInventory, plan: RecomputePlan) -> EagerTerms:
    """The eager convention's extra bytes for one micro-batch of `recipe`."""
    require_modelled_step(spec, recipe.seq_len, recipe.recompute)
    p = recipe.precision
    width = eager.from_precision(p, recipe.device)  # compute bytes, with the parameter bytes (amp: 2 and 4)
    a = p.activation
    b, t = recipe.micro_batch, recipe.seq_len
    n = b * t
    v, h = spec.vocab_size, spec.hidden_size
    buffers = rope_buffer_bytes(spec)
    stepped = stepped_tensors(spec) if recipe.lora is None else lora_stepped(inventory, recipe.lora, plan.order)
    logits = a * v * n + (FP32 * v * n if a != FP32 else 0)
    padded = INT64 * b * (t + 1) if b > 1 else 0
    labels_saved = INT64 * n + (INT64 if b == 1 else 0)
    loss_and_seed = 2 * FP32
    loss_act = -labels_saved - FP32 + loss_and_seed  # labels and the token count freed
    lora = recipe.lora
    # Under LoRA the base is frozen: no base gradient is ever made (LM head, layer matrices, norms), and the optimizer
    # steps the adapters only (A and B of each: lora_stepped), their `step` counters and temporaries alone.
    head_grad = 0 if lora is not None else v * h * p.grads
    amp = recipe.precision.name == "amp-bf16"
    if amp and lora is None:
        # the head's matmul backward holds dlogits, dX and the bf16 weight gradient; dlogits and dX are freed before
        # that gradient is cast to the fp32 .grad (a helper's op trace on qwen3-8b: one B·T·(V + h) bf16 over)
        head_temp = max(a * v * n + a * h * n, head_grad) + AMP_CAST * v * h
    else:
        head_temp = a * v * n + head_grad + a * h * n + (AMP_CAST * v * h if amp else 0)
    layer_act: dict[str, int] = {}
    layer_temp: dict[str, int] = {}
    layer_grad: dict[str, int] = {}
    cast_layer: dict[str, int] = {}
    cast_bias: dict[str, int] = {}
    lora_cast_layer: dict[str, int] = {}
    norm_act: dict[str, int] = {}
    norm_grad: dict[str, int] = {}
    layer_fixed: dict[str, int] = {}
    layer_inner: dict[str, int] = {}
    attn_act: dict[str, int] = {}
    attn_temp: dict[str, int] = {}
    attn_grad: dict[str, int] = {}
    attn_fwd: dict[str, InnerMoment] = {}
    inner_backward: dict[str, tuple[InnerMoment, ...]] = {}
    layer_cast: dict[str, int] = {}
    layer_rebuild: dict[str, InnerMoment] = {}
    # selective:core_attn checkpoints the attention function, which makes a masked layer's converted mask and
    # repeat_kv copies inside: rebuilt, not kept; the checkpoint holds the boolean mask and k, v as handed (the
    # full-attention rows' own), so a masked layer keeps nothing beyond full attention (measured: gemma-3-1b)
    core_ckpt = checkpoints_attention_core(plan.policy)
    for kind in plan.layers:
        layer_inner[kind] = in_layer_forward(spec, kind, width, n, t)
        count = max(1, plan.order.count(kind))
        rows = act.layer_rows(spec, kind, width, "eager")
        # what the layer keeps (under LoRA fewer rows): only a kept row is freed in its backward; the FFN's output
        # dropout mask (eager/dropout.py) follows the down projection's input in forward order; its backward comes
        # first, so both are freed at the FFN's first elementwise backward
        kept = {r.name for r in act.layer_rows(spec, kind, width, "eager", lora=lora)} if lora else None
        masks = [r for r in rows if r.name == "mlp.dropout_mask"]
        # sandwich placement: the post-FFN norm's rows follow down's input; its backward ran first (freeing them)
        body, post = split_post_ffn([r for r in rows if r not in masks])
        last = sum(r.bytes_at(t) for r in [*body[-1:], *post] if kept is None or r.name in kept)
        layer_act[kind] = -round((last + sum(r.bytes_at(t) for r in masks)) * n)
        # the FFN's gradients are as wide as down's input whether or not LoRA keeps that row (freed unsaved when down
        # has no adapter): the product's gradient and its two factors' (measured, tiny Llama q,v)
        ffn_wide = body[-1].bytes_at(t) if body else 0
        # a single-op GELU MLP (GPT-NeoX's nn.GELU: gelu_backward) holds two: the activation output's gradient and
        # the pre-activation's (measured by a helper on pythia-1.4b: one FFN-wide tensor above PyTorch with three)
        single_gelu = sum(1 for r in body if r.op_id == "mlp.gelu") == 1
        layer_temp[kind] = round((a * h + (2 if single_gelu else 3) * ffn_wide) * n)
        mats = [x for x in inventory.tensors if x.layer_kind == kind and x.is_matrix]
        post_grad = h * p.grads if post and lora is None else 0  # the post-FFN norm's weight (sandwich)
        layer_grad[kind] = mats[-1].total // count * p.grads + post_grad if mats and lora is None else 0
        routed = routed_backward(spec, rows, width, p.grads, n, t) if lora is None else ()
        if routed:  # the MoE output's first backward is the routed combine's, not a SwiGLU product's
            combine, *inner_backward[kind] = routed
            layer_act[kind], layer_temp[kind], layer_grad[kind] = combine.act, combine.temps, combine.grads
            layer_cast[kind] = combine.casts
        keeps_all = lora is None and not plan.layers[kind].dropped  # every row saved: eager_mla's MLA moments
        mla_bwd = attention_backward_peak(spec, kind, rows, width, inventory, count, p.grads, n, t, keeps_all)
        post_norm = post_ffn_norm_backward(spec, rows, width, n, t, p.grads) if lora is None else None
        inner_backward[kind] = (*inner_backward.get(kind, ()), *mla_bwd, *([post_norm] if post_norm else []))
        if plan.policy.kind == "full" and lora is None and (rebuild := mla_math_rebuild_low(spec, kind, width, rows, n, t)
                                                            or gpt_oss_rebuild(spec, kind, width, rows, n, t)):
            layer_rebuild[kind] = rebuild
        ffn_block = rows[-1].block if rows else ""
        # the FFN's rows but its input norm's fp32 input (the residual stream, alive for that norm's backward)
        freed = sum(r.bytes_at(t) for r in rows if r.block == ffn_block and not (r.name.endswith("norm_x_fp32")
                    and r not in post) and (kept is None or r.name in kept))
        norm_act[kind] = -round(freed * n)
        ffn_params = sum(x.total for x in inventory.tensors if x.layer_kind == kind and x.component == "ffn")
        norm_grad[kind] = 0 if lora is not None else (ffn_params // count + h) * p.grads + post_grad
        cast_layer[kind] = eager.layer_cast_bytes(spec, kind, width)
        cast_bias[kind] = eager.layer_bias_cast_bytes(spec, kind, width) if lora is None else 0  # frozen: not cached
        # --attention eager: the plan's rows hold P (not SDPA's math path: q_scaled); the layer's rows in forward
        # order (the plan splits them into kept and dropped)
        planned = [*plan.layers[kind].kept, *plan.layers[kind].dropped]
        names = {r.name for r in planned}
        eager_attn = "attn.probs" in names and "attn.q_scaled" not in names
        ordered = act.layer_rows(spec, kind, width, "eager", "eager", lora=lora) if eager_attn else planned
        attn_fwd[kind] = forward_attention_peak(spec, kind, ordered, width, n, t, b, keeps_all)
        attn_act[kind], attn_temp[kind], attn_grad[kind] = eager_attention_backward(
            spec, ordered, width, inventory, kind, count, p.grads, n, t, mla=not keeps_all)
        if lora is not None and amp:
            # autocast caches casts of leaf tensors that require grad only: the adapters' A and B. A frozen weight's
            # cast is not cached but saved by its matmul for the input gradient: the same bytes, freed in that
            # layer's backward (measured with saved_tensors_hooks on a PEFT-wrapped Llama)
            mine = ParamInventory(tuple(x for x in inventory.tensors if x.layer_kind == kind))
            lora_cast_layer[kind] = sum(math.prod(shape) * c for shape, c, _ in lora_adapter_groups(mine, lora)) \
                // count * a
            cast_layer[kind] += lora_cast_layer[kind]
        layer_fixed[kind] = (eager.fixed_bytes(eager.layer_fixed_rows(spec, kind, width, b, with_casts=False), t)
                             + (0 if core_ckpt else window_fixed_bytes(spec, kind, width, t, b)))
    # Checkpointed layers hold their arguments for the rebuild, transformers' masks and position ids among them
    # (eager/masks.checkpoint_held): alive at the loss and through the backward, each to its lowest layer's.
    ckpt = plan.policy.kind in ("full", "every")
    held = checkpoint_held(spec, width, t, b, segment=plan.segment if ckpt else 0, core_attn=core_ckpt)
    return EagerTerms(
        constant=INT64 * n + buffers,
        step_counters=step_counter_bytes(recipe.optimizer, stepped),
        # amp: the final norm's fp32 output is alive until the causal LM's forward returns (the LM head saves
        # its bf16 cast instead); LoRA: the same output, which the frozen LM head does not save (outside.py
        # LORA_FROZEN_OUTSIDE); otherwise it is the LM head's saved input, counted in the outside rows.
        forward_end=logits + padded + FP32 + (width.param * h * n if amp or lora is not None else 0),
        loss_act=loss_act,
        loss_temp=2 * FP32 * v * n,
        head_act=loss_act - FP32 * v * n,
        head_temp=head_temp,
        # the cos and sin tables (eager/outside.rope_table_width; the hidden states' dtype: fp32 under amp); the
        # embedding dropout's mask (its backward is the last)
        rope=rope_table_width(spec) * width.param * t
        + round(sum(r.bytes_per_token for r in embedding_dropout(spec, width)) * n),
        layer_act=layer_act,
        layer_temp=layer_temp,
        layer_grad=layer_grad,
        norm_act=norm_act,
        norm_temp=(a + 5 * FP32) * h * n if spec.norm == "rmsnorm" else 0,
        norm_grad=norm_grad,
        optimizer_temp=step_temporaries(recipe.optimizer, recipe.optimizer_impl, p.state, stepped),
        cast_layer=cast_layer,
        cast_bias=cast_bias,
        layer_fixed=layer_fixed,
        cast_head=AMP_CAST * v * h if amp else 0,
        layer_inner=layer_inner,
        embed_locals=embedding_locals(spec, width, b, t),
        window=0 if core_ckpt else window_total_bytes(spec, width, t, b),
        lora_embed_out=width.param * h * n if plan.first_unsaved else 0,
        lora_cast_layer=lora_cast_layer,
        # under checkpointing transformers makes the embedding output require grad (enable_input_require_grads), so
        # the recomputed layer 0 saves its q/k/v casts like any layer
        lora_first_cast=_first_layer_unsaved_casts(inventory, plan, a) if lora is not None and amp and not ckpt else 0,
        lora_first_a_cast=first_layer_adapter_a_casts(inventory, plan, lora, a) if lora is not None and amp else 0,
        tied_sum=tied_gradient_sum(spec, recipe),
        embed_grad_in=0 if spec.tied_embeddings or lora is not None else width.param * h * n,
        attn_act=attn_act,
        attn_temp=attn_temp,
        attn_grad=attn_grad,
        attn_fwd=attn_fwd,
        inner_backward={k: tuple(v) for k, v in inner_backward.items()},
        layer_cast=layer_cast,
        layer_rebuild=layer_rebuild,
        decoder_masks=sum(m.bytes for m in decoder_masks(spec, width, t, b)),
        checkpoint_held=held,
    )
