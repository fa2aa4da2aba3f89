"""LoRA's activation rule: a frozen nn.Linear keeps no input for backward unless an adapter on it needs one.

PyTorch saves a Linear's input only for its weight gradient (dW = xᵀ·dY); with the weight frozen
(requires_grad False) autograd saves nothing for it — the input gradient needs only W. PEFT's LoRA layer runs
`base(x) + B(A(dropout(x))) · scale`; with lora_dropout 0 (PEFT's default, an nn.Identity) A's input is x
itself, so a targeted Linear keeps x (for A's weight gradient) plus A's r-wide output (for B's). Checked with
torch.autograd.graph.saved_tensors_hooks on a frozen Linear with and without an A/B pair
(tests/measure/test_lora_saved.py).

So under LoRA a row kept *only* as the input of frozen Linears is dropped unless one of those Linears carries an
adapter, and every adapter adds one r-wide row. Rows other ops also read (the attention output, which SDPA's
backward needs; the SwiGLU gate and up, which the product needs) stay. Mapped rows: every row of the ideal
convention; under the eager convention the dense blocks' Linear inputs of families with separate q/k/v
projections (Llama-like), autocast's per-Linear casts included; and, eager, RMSNorm's x̂ (saved by weight · x̂
for the weight's gradient only: the norm weights are frozen too). Measured on a tiny Llama with q,v adapters:
layer 1 keeps exactly these rows (tests/measure/test_lora_saved.py). Layer 0, whose input (the frozen
embedding's output) needs no gradient, keeps even less: its input RMSNorm saves nothing (eager: recompute/plan.py
`first_unsaved`); outside the layers the frozen LM head keeps no input and the final norm no x̂
(eager/outside.py). A PEFT-wrapped Llama matches the eager LoRA bill to the byte (tests/measure/test_lora_check.py).
Not modelled yet: eager MoE rows and fused-QKV families keep their inputs (an over-count).
"""

from __future__ import annotations

from stepbill.engine.activations.rows import ActTensor, Recompute
from stepbill.engine.params import param_inventory
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import LoRA

# (block kind, row name) → the inventory's weight names whose weight gradient is the row's only reader
_ATTN = ("attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight")
_GATE_UP = ("mlp.gate_proj.weight", "mlp.up_proj.weight")
_IDEAL: dict[tuple[str, str], tuple[str, ...]] = {
    ("mha", "attn.norm_out"): _ATTN,
    ("mla", "attn.q_down_norm"): ("attn.q_b_proj.weight",),
    ("mla", "attn.kv_down_norm"): ("attn.kv_b_proj.weight",),
    ("gelu_mlp", "mlp.norm_out"): ("mlp.up_proj.weight",),
    ("gelu_mlp", "mlp.act_out"): ("mlp.down_proj.weight",),
    ("swiglu", "mlp.norm_out"): _GATE_UP,
    ("swiglu", "mlp.product"): ("mlp.down_proj.weight",),
    ("moe", "moe.norm_out"): ("moe.router.weight",),
    ("moe", "moe.dispatched"): ("moe.experts.gate_proj.weight", "moe.experts.up_proj.weight"),
    ("moe", "moe.product"): ("moe.experts.down_proj.weight",),
    ("moe", "moe.shared.input"): ("moe.shared.gate_proj.weight", "moe.shared.up_proj.weight"),
    ("moe", "moe.shared.product"): ("moe.shared.down_proj.weight",),
}
_EAGER: dict[tuple[str, str], tuple[str, ...]] = {
    ("mha", "attn.norm_out"): _ATTN,
    ("swiglu", "mlp.norm_out"): _GATE_UP,
    ("swiglu", "mlp.product"): ("mlp.down_proj.weight",),
}
_FUSED_QKV = ("gpt2", "gpt_neox")


def _readers(spec: ModelSpec, block: str, row: ActTensor, convention: str) -> tuple[str, ...] | None:
    """The frozen Linears whose weight gradient is the only reader of `row`; None if something else reads it."""
    if convention == "ideal":
        if (block, row.name) == ("mla", "attn.norm_out"):
            q = "attn.q_a_proj.weight" if spec.attention.q_lora_rank is not None else "attn.q_proj.weight"
            return (q, "attn.kv_a_proj_with_mqa.weight")
        return _IDEAL.get((block, row.name))
    if spec.family in _FUSED_QKV or block not in ("mha", "swiglu"):
        return None
    if row.name.endswith("_in_cast"):  # autocast's own cast of one Linear's input: "mlp.gate_proj_in_cast"
        prefix, _, tail = row.name.rpartition(".")
        return (f"{prefix}.{tail.removesuffix('_in_cast')}.weight",)
    return _EAGER.get((block, row.name))


def adapter_rows(spec: ModelSpec, layer_kind: str, lora: LoRA, compute_bytes: int) -> list[ActTensor]:
    """One r-wide row per targeted matrix of the layer: A's output, which B's weight gradient reads (× top_k for
    routed experts: one per copy a token passes)."""
    inv = param_inventory(spec)
    n_layers = spec.n_moe_layers if layer_kind == "moe" else spec.n_dense_layers
    rows = []
    for t in inv.tensors:
        if t.layer_kind != layer_kind or len(t.shape) != 2 or not lora.targets_matrix(t.name, t.component):
            continue
        copies = t.active_copies // max(n_layers, 1)
        in_dim = t.shape[1]  # (out, in)
        block = spec.attention.kind if t.name.startswith("attn.") else "moe" if layer_kind == "moe" else spec.ffn.kind
        rows.append(ActTensor(f"lora.{t.name.removesuffix('.weight')}.a_out", lora.rank * copies, compute_bytes,
                              "LoRA B weight grad (A's output)", Recompute("linear", in_dim, lora.rank * copies),
                              block))
    return rows


def amp_adapter_copies(spec: ModelSpec, block_rows: list[ActTensor], lora: LoRA, compute_bytes: int,
                       param_bytes: int) -> list[ActTensor]:
    """Under autocast (fp32 weights, bf16 compute), the bf16 copy of the attention output that o_proj's adapter keeps
    beside SDPA's own saved output: PEFT's LoRA layer casts its input to A's dtype (fp32: `_cast_input_dtype`) and
    autocast casts it back to bf16 for A's matmul, which saves that new copy for A's weight gradient (measured with
    saved_tensors_hooks on a PEFT-wrapped tiny Llama, all-linear). The fp32 norm outputs q/k/v/gate/up read are
    cast once per adapter as well: the `_in_cast` rows, kept by A instead of the frozen base; down_proj's copy
    replaces the SwiGLU product, which nothing else keeps (the `mlp.product` row stands for it)."""
    if param_bytes <= compute_bytes or spec.family in _FUSED_QKV or not lora.targets_matrix("attn.o_proj.weight"):
        return []
    core = next((r for r in block_rows if r.name == "attn.core_out"), None)
    if core is None:
        return []
    return [ActTensor("lora.attn.o_proj_in_cast", core.width, compute_bytes,
                      "LoRA A weight grad (autocast's bf16 copy of PEFT's fp32 upcast of o_proj's input)",
                      Recompute("copy"), core.block, split=core.split)]


def apply_lora(spec: ModelSpec, layer_kind: str, rows: list[ActTensor], lora: LoRA, compute_bytes: int,
               convention: str, param_bytes: int = 0) -> list[ActTensor]:
    """`rows` of one layer under LoRA: frozen-only Linear inputs dropped, adapter rows added (eager under autocast:
    o_proj's adapter input copy, amp_adapter_copies; `param_bytes` the weights' dtype bytes)."""
    copies = amp_adapter_copies(spec, rows, lora, compute_bytes, param_bytes) if convention == "eager" else []
    out = []
    for row in rows:
        if convention == "eager" and row.name.endswith("norm_xhat"):
            continue  # RMSNorm's x̂ feeds only its (frozen) weight's gradient: weight · x̂ saves x̂ for dW
        readers = _readers(spec, row.block, row, convention)
        if readers is not None and not any(lora.targets_matrix(name) for name in readers):
            continue
        out.append(row)
    return out + copies + adapter_rows(spec, layer_kind, lora, compute_bytes)
