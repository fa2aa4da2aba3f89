"""Recompute policies: which tensors each layer keeps, which it rebuilds, what that costs.

The model (one micro-batch, per token unless said otherwise). Layer l keeps `kept_l` bytes after its
forward; the `dropped_l` bytes it does not keep exist transiently while its forward runs and again while its
backward runs (rebuilt). With segments (every-K), a segment's backward first rebuilds all its layers. So
the live activation bytes are

    forward, layer l:    Σ_{j≤l} kept_j + dropped_l
    backward, layer l:   Σ_{j≤l} kept_j + Σ_{j in segment(l), j≤l} dropped_j

`full` keeps the layer input (hidden wide) and drops every row, so its peak is L inputs + one layer's rows
(the seed's 125M figure, 0.32 GiB; its V3 figure 61 × 1.75 GiB leaves the working set out — see
activations.full_recompute_bytes_per_token). Every rebuilt op is run once; tensors of one op (attention
output + logsumexp) are rebuilt together, so the cost of a drop set is the sum over its distinct ops.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from stepbill.engine import activations as act
from stepbill.engine import flops as fl
from stepbill.engine.activations import ActTensor, layer_order
from stepbill.engine.params import param_inventory
from stepbill.engine.recompute.budget import solve_for_spec
from stepbill.engine.recompute.core_attn import (
    CORE_INPUT_STAND_INS,
    checkpoints_attention_core,
    held_inputs,
    pv_flops_per_token,
    rebuild_skips_pv,
)
from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import LoRA
from stepbill.spec.recompute_policy import RecomputePolicy

# Megatron module name → predicate on (layer kind, tensor). Megatron recomputes a module's internals and
# keeps its input; its output is the next op's input and stays (rc-megatron-modules-map).
_MODULE_ROWS = {
    "core_attn": lambda kind, t: t.op_id == "attn.core",
    "layernorm": lambda kind, t: t.name.endswith(".norm_out"),
    "mlp": lambda kind, t: kind == "dense" and t.name.startswith("mlp.")
    and t.name != "mlp.down_out" and not t.name.startswith("mlp.norm_"),  # the norm in front: "layernorm"'s
    "moe_act": lambda kind, t: t.name in ("moe.product", "moe.shared.product"),
    "mla_up_proj": lambda kind, t: t.name in ("attn.q_up", "attn.kv_up"),
    "shared_experts": lambda kind, t: t.name.startswith("moe.shared."),
    "moe": lambda kind, t: t.name.startswith("moe.") and t.name not in ("moe.norm_in", "moe.norm_out"),
}


#: The attention core's output: the output projection's input, which that projection saves for its weight gradient.
CORE_OUTPUTS = ("attn.core_out", "attn.o_in")
#: An output projection input saved as its own storage (GPT-NeoX merges the heads into a copy).
SEPARATE_OUTPUT_INPUTS = frozenset({"attn.dense_in"})


def module_rows(module: str, layer_kind: str, rows: list[ActTensor], convention: str = "ideal") -> list[ActTensor]:
    """The tensors of one layer that Megatron's recompute module `module` rebuilds. Under the eager convention (what
    PyTorch keeps) core_attn leaves the core's output kept: Megatron-LM checkpoints the core attention with
    tensor_parallel.checkpoint (transformer/attention.py `_checkpointed_attention_forward`), whose output the
    output projection then saves, as torch.utils.checkpoint around SDPA does — only the core's own saved tensors
    (SDPA's logsumexp; the eager path's probabilities) are rebuilt (measured: tests/measure/test_checkpointing.py). The
    ideal convention keeps the seed's accounting, in which recomputing the core rebuilds its output."""
    pick = _MODULE_ROWS[module]
    keep: tuple[str, ...] = ()
    if module == "core_attn" and convention == "eager":
        names = {t.name for t in rows}
        # the output stays where it is the output projection's input too (one storage); a family whose projection
        # saves its own copy (GPT-NeoX's attn.dense_in) frees the core's. The math path's scaled q and k go, but the
        # checkpoint holds the unscaled q and k it was given, of the same shape and dtype: their bytes stay.
        keep = (*(CORE_OUTPUTS if not names & SEPARATE_OUTPUT_INPUTS else ()), *CORE_INPUT_STAND_INS)
    return [t for t in rows if t.recompute.droppable and pick(layer_kind, t) and t.name not in keep]


@dataclass(frozen=True)
class LayerPlan:
    """What one layer kind keeps and rebuilds under a policy (bytes per token at `seq_len`)."""

    kind: str
    kept: tuple[ActTensor, ...]
    dropped: tuple[ActTensor, ...]
    kept_bytes: float  # per token
    dropped_bytes: float  # per token
    recompute_flops: float  # per token, causal-halved attention
    recompute_flops_noncausal: float
    checkpoint_bytes: float = 0.0  # per token: the layer input a checkpoint holds (full / every-K)
    # per token, full-square attention, every rebuilt op rerun (no early stop): the causal figure's twin, so
    # that full square ≥ causal always holds (recompute_flops_noncausal is FlopCounterMode's, with early stop)
    recompute_flops_square: float = 0.0
    # per token, FlopCounterMode's: what the rebuild of a checkpointed run ending with this layer does not rerun
    # (non-reentrant checkpointing's early stop: its trailing down projection, flops.checkpoint_skipped_ops).
    # every-K only — a run of K layers stops early once, after its last layer; full's per-layer checkpoints have
    # it in recompute_flops_noncausal already.
    early_stop_flops: float = 0.0
    # per token, eager convention, full / every-K: the checkpointed input's bytes that the rebuilt rows also count —
    # the pre-norm's saved input, the same storage as the checkpoint's (LayerNorm saves it as is; RMSNorm's
    # x.to(float32) is a no-op on an fp32 residual stream: fp32 and amp). Counted once at the run's first layer.
    input_alias: float = 0.0


@dataclass(frozen=True)
class Rerun:
    """What a policy's backward reruns per layer kind, as the step's collectives see it: the whole forward of a
    checkpointed layer (full / every-K: Megatron-LM's tensor_parallel.CheckpointFunction.backward calls the
    wrapped forward again, its TP / EP collectives included), or only the attention core (a drop set holding the
    core attention's output: under context parallelism its K/V ring runs again). Hashable, so the collectives of
    a layout can be memoised on it."""

    forward: frozenset[str] = frozenset()
    attention_core: frozenset[str] = frozenset()


NO_RERUN = Rerun()


@dataclass(frozen=True)
class RecomputePlan:
    """A policy applied to a model: one LayerPlan per layer kind, segment length, and layer order."""

    policy: RecomputePolicy
    layers: dict[str, LayerPlan]
    order: tuple[str, ...]  # layer kind of each layer index
    segment: int  # layers per checkpointed segment (1 unless every-K)
    tokens: int
    seq_len: int
    #: rows layer 0 does not keep although its kind does (LoRA: the frozen embedding's output needs no gradient,
    #: so layer 0's input RMSNorm saves nothing), and their bytes per token (on a rank: divided as its rows are)
    first_unsaved: tuple[ActTensor, ...] = ()
    first_unsaved_bytes: float = 0.0

    @cached_property
    def rerun(self) -> Rerun:
        """The layer kinds whose forward, or whose attention core, the backward reruns (Rerun)."""
        whole = frozenset(self.layers) if self.policy.kind in ("full", "every") else frozenset()
        core = frozenset(k for k, lp in self.layers.items() if any(t.op_id == "attn.core" for t in lp.dropped))
        return Rerun(whole, whole | core)

    def kept_bytes(self, index: int) -> float:
        """Bytes per token layer `index` keeps after its forward."""
        return self._kept[index]

    @cached_property
    def _kept(self) -> tuple[float, ...]:
        """kept_bytes of every layer, computed once: the timelines of every rank class read them per layer."""
        out = []
        for index, kind in enumerate(self.order):
            plan = self.layers[kind]
            if self.segment > 1:
                out.append(plan.checkpoint_bytes if index % self.segment == 0 else 0.0)
            else:
                out.append(plan.kept_bytes + plan.checkpoint_bytes - (self.first_unsaved_bytes if index == 0 else 0.0))
        return tuple(out)

    def dropped_bytes(self, index: int) -> float:
        return self.layers[self.order[index]].dropped_bytes

    def forward_live(self) -> list[float]:
        """Activation bytes (whole micro-batch) alive at the end of each layer's forward."""
        return list(self._forward_live)

    @cached_property
    def _forward_live(self) -> tuple[float, ...]:
        out, kept = [], 0.0
        for i in range(len(self.order)):
            kept += self._kept[i]
            out.append((kept + self.dropped_bytes(i)) * self.tokens)
        return tuple(out)

    def backward_live(self) -> list[float]:
        """Activation bytes alive while each layer's backward runs (index order; backward runs L-1 … 0)."""
        return list(self._backward_live)

    @cached_property
    def _backward_live(self) -> tuple[float, ...]:
        out, kept, seg_dropped = [], 0.0, 0.0
        for i in range(len(self.order)):
            kept += self._kept[i]
            first = i % self.segment == 0
            seg_dropped = (0.0 if first else seg_dropped) + self.dropped_bytes(i) \
                - (self.layers[self.order[i]].input_alias if first else 0.0)
            out.append((kept + seg_dropped) * self.tokens)
        return tuple(out)

    def kept_after_forward(self) -> float:
        return self._kept_after_forward

    @cached_property
    def _kept_after_forward(self) -> float:
        return sum(self._kept) * self.tokens

    def peak_activations(self) -> float:
        return max(max(self.forward_live()), max(self.backward_live()))

    def recompute_flops(self, causal: bool = True) -> float:
        """FLOPs the policy adds to one step (whole micro-batch); not `causal`: FlopCounterMode's count, less each
        every-K run's early stop (`LayerPlan.early_stop_flops` of the layer that ends it)."""
        per_token = sum((p.recompute_flops if causal else p.recompute_flops_noncausal) * self.order.count(k)
                        for k, p in self.layers.items())
        if not causal and self.policy.kind == "every":
            ends = self.order[self.segment - 1::self.segment] + ((self.order[-1],) if len(self.order) % self.segment
                                                                 else ())
            per_token -= sum(self.layers[k].early_stop_flops for k in ends if k in self.layers)
        return per_token * self.tokens

    def recompute_flops_square(self) -> float:
        """FLOPs the policy adds to one step (whole micro-batch), attention as a full square and every rebuilt op
        rerun: the same rebuild as `recompute_flops(True)`, so never below it (PaLM's HFU convention)."""
        per_token = sum(p.recompute_flops_square * self.order.count(k) for k, p in self.layers.items())
        return per_token * self.tokens

    @cached_property
    def _row_bytes(self) -> dict[str, tuple[tuple[tuple[ActTensor, float], ...], tuple[tuple[ActTensor, float], ...]]]:
        """Per layer kind, its kept and its dropped rows with their bytes per token at the plan's sequence (what
        for_rank divides, per rank), made once per plan."""
        return {kind: (tuple((t, t.bytes_at(self.seq_len)) for t in lp.kept),
                       tuple((t, t.bytes_at(self.seq_len)) for t in lp.dropped)) for kind, lp in self.layers.items()}

    def offloaded(self) -> RecomputePlan:
        """The plan under activation offload: kept tensors go to CPU after each layer, so only the running layer's
        stay on the GPU (each layer's rows count as rebuilt in its own backward: segment 1). Layer 0's rows that
        LoRA leaves unsaved (`first_unsaved_bytes`) were taken off its kept bytes; with nothing kept they would
        make every layer's GPU bytes negative, so they count with its running rows here — an upper bound at layer
        0's own moment only (llama3-8b: 16 KiB a token), and the host copy (kept_after_forward, before this) is
        exact."""
        return replace(self, layers={k: replace(lp, dropped_bytes=lp.kept_bytes + lp.dropped_bytes
                                                + lp.checkpoint_bytes - lp.input_alias, kept_bytes=0.0,
                                                checkpoint_bytes=0.0, input_alias=0.0)
                                     for k, lp in self.layers.items()}, segment=1, first_unsaved_bytes=0.0)

    def for_rank(self, row_divisor: Callable[[ActTensor], float], input_divisor: float, work_divisor: float,
                 order: tuple[str, ...] | None = None) -> RecomputePlan:
        """The same policy on one rank of a layout: the same tensors kept and dropped (the choice is the
        model's), each row's bytes divided by how the rank holds it (`row_divisor`: tp / sp / cp / etp
        splits), the checkpointed layer input by `input_divisor`, recompute FLOPs by `work_divisor`, and the
        layers of the rank's pipeline stage (`order`)."""
        order = self.order if order is None else order
        layers = {}
        row_bytes = self._row_bytes
        for kind, lp in self.layers.items():
            if order and kind not in order:
                continue  # not on this stage: left out below in any case
            kept_rows, dropped_rows = row_bytes[kind]
            kept = sum(b / row_divisor(t) for t, b in kept_rows)
            dropped = sum(b / row_divisor(t) for t, b in dropped_rows)
            layers[kind] = LayerPlan(  # replace(lp, ...) without its introspection: every field given
                kind=lp.kind, kept=lp.kept, dropped=lp.dropped, kept_bytes=kept, dropped_bytes=dropped,
                recompute_flops=lp.recompute_flops / work_divisor,
                recompute_flops_noncausal=lp.recompute_flops_noncausal / work_divisor,
                checkpoint_bytes=lp.checkpoint_bytes / input_divisor,
                recompute_flops_square=lp.recompute_flops_square / work_divisor,
                early_stop_flops=lp.early_stop_flops / work_divisor,
                input_alias=lp.input_alias / input_divisor)
        first = sum(t.bytes_at(self.seq_len) / row_divisor(t) for t in self.first_unsaved) \
            if tuple(order) == tuple(self.order) else 0.0  # a later pipeline stage does not hold layer 0
        return replace(self, layers=layers, order=order,
                       first_unsaved_bytes=first)


def input_alias(spec: ModelSpec, rows: list[ActTensor], seq_len: int, input_bytes: float) -> float:
    """LayerPlan.input_alias of a layer kind's eager rows: its first pre-norm's saved input when that is the layer
    input itself (hidden wide, in the checkpoint's dtype: `input_bytes` per token) — measured by a helper with
    saved_tensors_hooks on a one-layer Llama (two views of the input's storage in fp32 and amp, none in bf16)."""
    first = next((t for t in rows if t.name in ("attn.norm_in", "attn.norm_x_fp32")), None)
    if first is None or first.width != spec.hidden_size or first.bytes_at(seq_len) != input_bytes:
        return 0.0
    return float(input_bytes)


def op_flops(rows: tuple[ActTensor, ...] | list[ActTensor], seq_len: Any, causal: bool = True) -> Any:
    """FLOPs per token to rebuild `rows`: each distinct producing op once."""
    ops: dict[str, Any] = {}
    for t in rows:
        ops[t.op_id] = t.recompute.flops_per_token(seq_len, causal)
    return sum(ops.values())


def _plan(kind: str, rows: list[ActTensor], dropped: list[ActTensor], seq_len: int,
          checkpoint: float = 0.0, rebuild: tuple[float, float, float] | None = None,
          early_stop: float = 0.0) -> LayerPlan:
    """`rebuild`: (causal, FlopCounterMode's, full-square) recompute FLOPs per token; from the dropped ops if None.
    `early_stop`: LayerPlan.early_stop_flops."""
    names = {t.name for t in dropped}
    kept = tuple(t for t in rows if t.name not in names)
    if rebuild is None:
        square = op_flops(dropped, seq_len, False)
        rebuild = (op_flops(dropped, seq_len), square, square)
    return LayerPlan(kind, kept, tuple(dropped), sum(t.bytes_at(seq_len) for t in kept),
                     sum(t.bytes_at(seq_len) for t in dropped), rebuild[0], rebuild[1], checkpoint, rebuild[2],
                     early_stop)


def make_plan(spec: ModelSpec, policy: RecomputePolicy, seq_len: int, micro_batch: int, activation_bytes: int,
              convention: str = "ideal", drop: dict[str, tuple[str, ...]] | None = None,
              attention: str = "sdpa", lora: LoRA | None = None) -> RecomputePlan:
    """Apply `policy` to `spec`. `drop` ({layer kind: tensor names}) overrides the choice (budget solver). With
    `lora` the layers' rows are LoRA's (frozen Linears keep no input unless an adapter needs it); the budget
    solver still ranks the full fine-tuning rows (not modelled yet under LoRA)."""
    order = layer_order(spec)
    rows = {k: act.layer_rows(spec, k, activation_bytes, convention, attention, lora) for k in act.layer_kinds(spec)}
    tokens = seq_len * micro_batch
    segment, layers = 1, {}
    # A checkpoint keeps the layer input: the residual stream, in the parameter dtype (fp32 under amp).
    input_bytes = spec.hidden_size * getattr(activation_bytes, "param", activation_bytes)
    if policy.kind in ("full", "every"):
        for k, r in rows.items():
            # Rebuilding a layer reruns its whole forward: matmuls + attention core (matmul-only count; the
            # seed's convention). The non-causal figure is FlopCounterMode's: under full recompute
            # (transformers' non-reentrant per-layer checkpoint) the trailing down projection is not rerun.
            per_tok = (fl.layer_forward_flops(spec, k, seq_len, 1, True) / seq_len,
                       fl.layer_recompute_flops(spec, k, seq_len, 1, False, policy.kind == "full") / seq_len,
                       fl.layer_forward_flops(spec, k, seq_len, 1, False) / seq_len)
            # every-K: a run's rebuild stops early once, after its last layer (RecomputePlan.recompute_flops)
            stop = 0.0 if policy.kind == "full" else \
                sum(op.flops_per_token for op in fl.checkpoint_skipped_ops(spec, k))
            if lora is not None:  # the rebuild reruns the adapters' forward too (flops.lora_recompute_flops_per_token)
                inv, n_kind = param_inventory(spec), max(1, order.count(k))
                every = fl.lora_recompute_flops_per_token(inv, lora, k, n_kind, False)
                per_tok = (per_tok[0] + every,
                           per_tok[1] + fl.lora_recompute_flops_per_token(inv, lora, k, n_kind, policy.kind == "full"),
                           per_tok[2] + every)
                if policy.kind == "every":
                    stop += every - fl.lora_recompute_flops_per_token(inv, lora, k, n_kind, True)
            alias = input_alias(spec, r, seq_len, input_bytes) if convention == "eager" else 0.0
            layers[k] = replace(_plan(k, r, r, seq_len, input_bytes, per_tok, stop), input_alias=alias)
        if policy.kind == "every":
            segment = policy.every or best_segment(spec, seq_len, micro_batch, activation_bytes, convention, lora)
            segment = min(segment, spec.n_layers)
    elif policy.kind == "none" and drop is None:
        layers = {k: _plan(k, r, [], seq_len) for k, r in rows.items()}
        if lora is not None and convention == "eager" and spec.norm == "rmsnorm" and order:
            # LoRA freezes the embedding: layer 0's input needs no gradient, so its input RMSNorm (frozen weight)
            # saves nothing (measured with saved_tensors_hooks on a PEFT-wrapped Llama, test_lora_check.py)
            first = tuple(t for t in rows[order[0]] if t.name in ("attn.norm_x_fp32", "attn.norm_rstd"))
            return RecomputePlan(policy, layers, order, segment, tokens, seq_len, first,
                                 sum(t.bytes_at(seq_len) for t in first))
    elif policy.kind == "selective" or drop is not None:
        for k, r in rows.items():
            if drop is not None:
                names = set(drop.get(k, ()))
                chosen = [t for t in r if t.name in names]
            else:
                chosen = [t for m in policy.modules for t in module_rows(m, k, r, convention)]
            dropped = list({t.name: t for t in chosen}.values())
            held, replaced = held_inputs(spec, r, activation_bytes) if convention == "eager" \
                and checkpoints_attention_core(policy) and drop is None else ([], ())
            # the rebuild's FLOPs are the chosen ops' (the replaced rows are SDPA's input copies and casts)
            square = op_flops(dropped, seq_len, False)
            skip = pv_flops_per_token(spec, seq_len) if convention == "eager" and drop is None \
                and rebuild_skips_pv(r, dropped) else 0.0
            rebuild = (op_flops(dropped, seq_len), square - skip, square)
            # the checkpoint's inputs replace those copies, rebuilt inside the core (recompute/core_attn.py)
            dropped += [t for t in r if t.name in replaced and t not in dropped]
            layers[k] = _plan(k, [*r, *held], dropped, seq_len, rebuild=rebuild)
        if drop is None and not any(p.dropped for p in layers.values()):
            raise StepbillError(f"recompute modules {', '.join(policy.modules)} match no tensor of {spec.name}")
    else:  # budget: solved elsewhere, then planned with `drop`
        solution = solve_for_spec(spec, policy.budget_bytes, seq_len, micro_batch, activation_bytes, convention,
                                  attention)
        return make_plan(spec, policy, seq_len, micro_batch, activation_bytes, convention, solution.drop, attention,
                         lora)
    return RecomputePlan(policy, layers, order, segment, tokens, seq_len)


def best_segment(spec: ModelSpec, seq_len: int, micro_batch: int, activation_bytes: int,
                 convention: str = "ideal", lora: LoRA | None = None) -> int:
    """The K of every-K with the lowest activation peak (scan 1…L); near √L when a layer's rows dwarf its
    input, as the seed's L/k + k picture says (rc-sqrt-L-segments).

    One plan is built; each K is then scored in closed form. Under every-K the backward live bytes dominate
    the forward ones (a segment rebuilds at least the layer that runs), and inside segment s they grow to its
    last layer, so peak(K) = max_s [Σ_{t≤s} input(tK) + Σ_{j in segment s} dropped_j]: O(L/K) per K with prefix
    sums, O(L log L) for the scan (it was a plan per K, quadratic: 4,000 layers took 15 s).
    """
    from stepbill.spec.recompute_policy import RecomputePolicy as P

    plan = make_plan(spec, P("every", every=1), seq_len, micro_batch, activation_bytes, convention, lora=lora)
    n = len(plan.order)
    dropped_prefix = [0.0]
    for i in range(n):
        dropped_prefix.append(dropped_prefix[-1] + plan.dropped_bytes(i))
    best, best_peak = 1, math.inf
    for k in range(1, n + 1):
        inputs, peak = 0.0, -math.inf
        for start in range(0, n, k):
            layer = plan.layers[plan.order[start]]
            inputs += layer.checkpoint_bytes + (layer.kept_bytes if k == 1 else 0.0)
            peak = max(peak, inputs + dropped_prefix[min(start + k, n)] - dropped_prefix[start])
        if peak < best_peak:
            best, best_peak = k, peak
    return best


def sqrt_l_optimum(n_layers: float) -> tuple[float, float]:
    """The seed's closed form: keeping L/k segment inputs + k layers (all in layer units) is minimal at
    k = √L, where it is 2√L (rc-sqrt-L-segments: L = 61 → k ≈ 7.81, 15.62 units)."""
    k = math.sqrt(n_layers)
    return k, n_layers / k + k
