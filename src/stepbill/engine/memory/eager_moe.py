"""The routed experts' backward inside a MoE layer, under the eager convention: the three moments where it holds
the most (transformers' `grouped_mm_experts_forward`, integrations/moe.py, run backward by autograd).

Traced op by op (MemTracker, torch 2.13 CPU, transformers 5.24; tiny Mixtral, Qwen2-MoE and DeepSeek-V3, fp32 /
pure-bf16 / amp-bf16, full recompute: the layer's rows are all rebuilt when its backward starts; and on fake tensors
at seq 4096, layer-reduced Mixtral-8x7B, DeepSeek-V3, DeepSeek-V2-Lite and Qwen3-30B-A3B: each moment to the byte
against the bill's other items). S = top_k · tokens rows:

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
gate's input) (modeling_qwen2_moe.py Qwen2MoeSparseMoeBlock.forward). DeepSeek adds its shared experts' output last
(`hidden_states + self.shared_experts(residuals)`, modeling_deepseek_v3.py DeepseekV3MoE.forward): their whole backward
runs first, freeing their rows (and amp's weight copies), making their weight gradients and leaving their input's
gradient (tokens·h) in autograd's buffer until the routed experts' arrives.
"""

from __future__ import annotations

from dataclasses import dataclass

from stepbill.engine.activations import eager
from stepbill.spec.model import ModelSpec

ROUTED_ROWS = ("moe.gate_up", "moe.silu", "moe.product", "moe.expert_out", "moe.perm_combine", "moe.routing_weights")
# what the routed experts' backward frees before each moment (rows of activations/eager/moe.py)
FREED_AT_DOWN = ("moe.expert_out", "moe.routing_weights", "moe.perm_combine")
FREED_AT_GATE_UP = (*FREED_AT_DOWN, "moe.product", "moe.silu", "moe.gate_up")
# families whose grouped experts' backward is traced: Mixtral and Qwen*-MoE run the routed experts last (Qwen2-MoE's
# shared gate aside), DeepSeek runs its shared experts after them (their backward first)
TRACED = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3")
SHARED_AFTER = ("deepseek_v2", "deepseek_v3")


@dataclass(frozen=True)
class InnerMoment:
    """One moment inside a layer's backward, against the layer's rebuilt rows (whole micro-batch, bytes)."""

    act: int  # activation change (rows freed)
    temps: int  # token-wide temporaries (gradients of activations)
    weight_temps: int  # weight gradients being made (a whole expert bank)
    grads: int  # the layer's weight gradients accumulated by then, but a routed expert bank's (bank_grads)
    casts: int = 0  # change of autocast's weight copies (the other branch's, freed by its backward)
    bank_grads: int = 0  # the routed expert banks' gradients accumulated by then (the down bank's, at gate_up)

    def divided(self, act: float, temps: float, weight_temps: float, grads: float, casts: float,
                bank_grads: float) -> InnerMoment:
        """This moment on one rank of a layout (EagerTerms.for_rank): each part divided as the tensors it stands for
        — an accumulated expert bank's gradient by `bank_grads` (the rank's experts, ep × etp, and the ZeRO shards
        a layer's gradients are divided by: a rank under ep holds its experts' gradients only, which tp's divisor
        of the other gradients, `grads`, would overstate by ep)."""
        return InnerMoment(round(self.act / act), round(self.temps / temps), round(self.weight_temps / weight_temps),
                           round(self.grads / grads), round(self.casts / casts), round(self.bank_grads / bank_grads))


def routed_backward(spec: ModelSpec, rows: list, width: int, grad_bytes: int, n: int, t: int) -> tuple[InnerMoment, ...]:
    """The combine, down and gate_up moments of a MoE layer's routed experts (module docstring); () for a layer
    without the grouped experts' rows (dense layers, gpt-oss's experts) or a family whose order is not traced."""
    names = {r.name for r in rows}
    m = spec.moe
    if m is None or not set(ROUTED_ROWS) <= names or spec.family not in TRACED:
        return ()
    dt = eager.dt_of(width)
    p = dt.param  # the experts run in the parameter dtype (autocast leaves grouped_mm alone)
    h, k, e, f = spec.hidden_size, m.top_k, m.n_routed_experts, m.expert_intermediate_size
    # the routing weights' dtype, as the router left them (activations/eager/moe.py `_router`: Mixtral's fp32,
    # DeepSeek's scores' dtype, Qwen's router logits' dtype)
    w = next(r.dtype_bytes for r in rows if r.name == "moe.routing_weights")
    combine = max(p, w)  # proj_out * routing weights: type promotion
    s = k * n

    first = _freed_first(spec, names)

    def freed(which: tuple[str, ...]) -> int:
        return -round(sum(r.bytes_at(t) for r in rows if r.name in (*first, *which)) * n)

    residual = dt.param * h * n  # the gradient of the layer's output (the residual stream's dtype)
    pending = _pending(spec, dt.compute, dt.param, n)
    early_grads = _grads_first(spec) * grad_bytes
    # amp: the other branch's linears saved their bf16 weight copies (for their input gradients), freed by then
    casts = -_grads_first(spec) * dt.compute if dt.amp else 0
    base = residual + pending
    combine_m = InnerMoment(freed(()), base + 3 * s * h * combine, 0, early_grads, casts)
    weights_grad = s * w  # the routing weights' gradient (sum over h of grad · expert output)
    down = InnerMoment(freed(FREED_AT_DOWN), base + weights_grad + s * h * p + s * f * p, e * h * f * grad_bytes,
                       early_grads, casts)
    gate_up = InnerMoment(freed(FREED_AT_GATE_UP), base + weights_grad + s * 2 * f * p + s * h * p,
                          e * 2 * f * h * grad_bytes, early_grads, casts, e * h * f * grad_bytes)
    return combine_m, down, gate_up


def _freed_first(spec: ModelSpec, names: set[str]) -> tuple[str, ...]:
    """Rows the MoE block's other branch freed in its backward before the routed experts' (module docstring)."""
    m = spec.moe
    assert m is not None
    if spec.family in SHARED_AFTER and m.shared_intermediate_size:
        # the shared experts' whole backward: their SwiGLU rows and, under autocast, their bf16 copies of the input;
        # the norm's output too where the router reads its own fp32 copy (bf16 weights: x.float()) and the dispatch
        # only indexes it (the shared experts' linears were its last savers)
        own_copy = ("moe.norm_out",) if "moe.router_in_fp32" in names else ()
        return ("moe.shared.gate", "moe.shared.silu", "moe.shared.up", "moe.shared.product",
                "moe.shared.gate_proj_in_cast", "moe.shared.up_proj_in_cast", *own_copy)
    if m.shared_expert_gate:
        # Qwen2-MoE: the shared gate's product and linear backwards (the sigmoid's output, the shared expert's output
        # and, under autocast, the gate's own bf16 copy of its input)
        return "moe.shared_gate", "moe.shared.out", "moe.shared_expert_gate_in_cast"
    return ()


def _grads_first(spec: ModelSpec) -> int:
    """Elements of the weight gradients the other branch made before the routed experts' backward (under autocast,
    of the weight copies its backward freed)."""
    m = spec.moe
    assert m is not None
    if spec.family in SHARED_AFTER:
        return 3 * spec.hidden_size * m.shared_intermediate_size  # the shared experts' gate, up and down
    return spec.hidden_size if m.shared_expert_gate else 0  # Qwen2-MoE: the shared gate's weight


def _pending(spec: ModelSpec, compute: int, param: int, n: int) -> int:
    """Gradients another branch of the MoE block made before the routed experts' backward (module docstring)."""
    m = spec.moe
    assert m is not None
    h = spec.hidden_size
    if spec.family in SHARED_AFTER and m.shared_intermediate_size:
        return param * h * n  # the shared experts' input gradient, waiting in autograd's buffer for the routed one
    if spec.family == "qwen2_moe" and m.shared_expert_gate and m.shared_intermediate_size:
        return compute * h * n + param * h * n  # the shared output's gradient, the gate input's gradient
    return 0
