"""The routed experts' backward inside a MoE layer, under the eager convention: the three moments where it holds
the most (transformers' `grouped_mm_experts_forward`, integrations/moe.py, run backward by autograd).

Traced op by op (MemTracker, torch 2.13 CPU, transformers 5.24; tiny Mixtral and Qwen2-MoE, fp32 / pure-bf16 /
amp-bf16, full recompute: the layer's rows are all rebuilt when its backward starts). S = top_k · tokens rows:

- combine: `weighted_out[inv_perm]`'s backward (`index_put`). The gradient of the MoE output is expanded over the
  top-k (`.view(tokens, top_k, h).sum(1)`), whose view of an expanded tensor is a copy (`clone`, S·h), then the index
  backward makes zeros (S·h) and scatters into a new tensor (S·h), all in the combine's dtype (the promotion of the
  experts' outputs and the routing weights: Mixtral's fp32 weights make it fp32 under bf16 experts). Every row of the
  layer is alive; no weight gradient of the routed experts exists yet.
- down: the down projection's grouped GEMM backward (`aten._grouped_mm`, twice: dW then dX; or transformers'
  `grouped_mm_fallback_backward`, both at once). The weighted product's backward freed the expert outputs, the sorted
  routing weights (its saved tensors) and the inverse permutation; it made the expert outputs' gradient (S·h, the
  experts' dtype) and the routing weights' (S, their dtype). dW is the whole E·h·f bank, made at once; dX is S·f.
- gate_up: the gate_up projection's grouped GEMM backward. The down bank's gradient is accumulated; the product (down's
  input), SiLU's output and gate_up's output are freed; SiLU·up's backward left gate_up's gradient (S·2f, one `cat`);
  dW is the whole E·2f·h bank, dX is S·h. The routing weights' gradient waits for the router's backward.

Beside these, the residual stream's gradient (tokens·h, the residual's dtype) is alive, and what the MoE block's other
branch made first (`pending`): Qwen2-MoE runs its gated shared expert before the routed ones but multiplies it by the
gate last, so the gate's product backward runs first and leaves the shared expert's output gradient (tokens·h, compute
dtype) and the gate linear's input gradient (tokens·h, the norm output's dtype) alive through the routed backward,
and frees what the product and the gate saved (the sigmoid's output, the shared expert's output, amp's cast of the
gate's input) (modeling_qwen2_moe.py Qwen2MoeSparseMoeBlock.forward).
"""

from __future__ import annotations

from dataclasses import dataclass

from stepbill.engine.activations import eager
from stepbill.engine.activations.eager.moe import FP32_ROUTER
from stepbill.spec.model import ModelSpec

FP32 = 4
ROUTED_ROWS = ("moe.gate_up", "moe.silu", "moe.product", "moe.expert_out", "moe.perm_combine")
# what the routed experts' backward frees before each moment (rows of activations/eager/moe.py)
FREED_AT_DOWN = ("moe.expert_out", "moe.routing_weights", "moe.perm_combine")
FREED_AT_GATE_UP = (*FREED_AT_DOWN, "moe.product", "moe.silu", "moe.gate_up")
# families whose MoE block runs the routed experts last (their backward first): no other branch's gradient pending
ROUTED_LAST = ("mixtral", "qwen2_moe", "qwen3_moe")


@dataclass(frozen=True)
class InnerMoment:
    """One moment inside a layer's backward, against the layer's rebuilt rows (whole micro-batch, bytes)."""

    act: int  # activation change (rows freed)
    temps: int  # token-wide temporaries (gradients of activations)
    weight_temps: int  # weight gradients being made (a whole expert bank)
    grads: int  # the layer's weight gradients accumulated by then


def routing_weight_bytes(spec: ModelSpec, compute: int, amp: bool) -> int:
    """The routing weights' dtype (activations/eager/moe.py `_router`): Mixtral's fp32, DeepSeek's scores' dtype,
    Qwen's router logits' (compute) dtype."""
    if spec.family == "mixtral":
        return FP32
    if spec.family in FP32_ROUTER and not amp:
        return FP32
    return compute


def routed_backward(spec: ModelSpec, rows: list, width: int, grad_bytes: int, n: int, t: int) -> tuple[InnerMoment, ...]:
    """The combine, down and gate_up moments of a MoE layer's routed experts (module docstring); () for a layer
    without the grouped experts' rows (dense layers, gpt-oss's experts) or a family whose order is not traced."""
    names = {r.name for r in rows}
    m = spec.moe
    if m is None or not set(ROUTED_ROWS) <= names or spec.family not in ROUTED_LAST:
        return ()
    dt = eager.dt_of(width)
    p = dt.param  # the experts run in the parameter dtype (autocast leaves grouped_mm alone)
    h, k, e, f = spec.hidden_size, m.top_k, m.n_routed_experts, m.expert_intermediate_size
    w = routing_weight_bytes(spec, dt.compute, dt.amp)
    combine = max(p, w)  # proj_out * routing weights: type promotion
    s = k * n

    # Qwen2-MoE: the shared gate's product and linear backwards ran first and freed what they saved (the sigmoid's
    # output, the shared expert's output and, under autocast, the gate's own bf16 copy of its input; its h-element
    # weight cast is left in the cache item: h·2 bytes)
    first = ("moe.shared_gate", "moe.shared.out", "moe.shared_expert_gate_in_cast") if m.shared_expert_gate else ()

    def freed(which: tuple[str, ...]) -> int:
        return -round(sum(r.bytes_at(t) for r in rows if r.name in (*first, *which)) * n)

    residual = dt.param * h * n  # the gradient of the layer's output (the residual stream's dtype)
    pending = _pending(spec, dt.compute, dt.param, n)
    early_grads = (h if m.shared_expert_gate else 0) * grad_bytes  # Qwen2-MoE: the shared gate's weight
    base = residual + pending
    combine_m = InnerMoment(freed(()), base + 3 * s * h * combine, 0, early_grads)
    weights_grad = s * w  # the routing weights' gradient (sum over h of grad · expert output)
    down = InnerMoment(freed(FREED_AT_DOWN), base + weights_grad + s * h * p + s * f * p, e * h * f * grad_bytes,
                       early_grads)
    gate_up = InnerMoment(freed(FREED_AT_GATE_UP), base + weights_grad + s * 2 * f * p + s * h * p,
                          e * 2 * f * h * grad_bytes, early_grads + e * h * f * grad_bytes)
    return combine_m, down, gate_up


def _pending(spec: ModelSpec, compute: int, param: int, n: int) -> int:
    """Gradients another branch of the MoE block made before the routed experts' backward (module docstring)."""
    m = spec.moe
    assert m is not None
    if spec.family == "qwen2_moe" and m.shared_expert_gate and m.shared_intermediate_size:
        h = spec.hidden_size
        return compute * h * n + param * h * n  # the shared output's gradient, the gate input's gradient
    return 0
