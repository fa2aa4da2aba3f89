"""Convention `megatron`: Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", arXiv 2205.05198, §4.1 and Table 2), byte for byte, as activation rows of one GPT layer.

The paper's accounting, per layer, s = sequence, b = micro-batch, h = hidden, a = heads, 16-bit activations
(2 bytes) and 1-byte dropout masks, un-fused attention (the a·s² score tensors are stored):

  attention block   11·sbh + 5·as²b   QKV input 2sbh; Q and K for QKᵀ 4sbh; softmax output 2as²b; its dropout
                                      mask as²b; the dropped probabilities (input of the A·V matmul) 2as²b;
                                      V 2sbh; output-projection input 2sbh; output dropout mask sbh
  MLP block         19·sbh            first linear input 2sbh; GeLU input 8sbh (4h wide); second linear input
                                      8sbh; dropout mask sbh
  two LayerNorms     4·sbh            each stores its input, 2sbh
  total             sbh·(34 + 5as/h)                                                   (their eq. 1)

Parallel variants (Table 2): tensor parallelism over t splits what lives inside the column/row-parallel
region — Q, K, V, the projection input, the GeLU and second-linear inputs (24·sbh) and all of 5as²b — but not
the LayerNorm inputs, the two sub-block inputs and the two dropout masks (10·sbh): sbh·(10 + 24/t + 5as/(ht))
(eq. 2). Sequence parallelism splits those 10·sbh along the sequence as well: sbh/t·(34 + 5as/h) (eq. 4).
Selective recompute drops the 5as²b (softmax, its mask, its dropout output; `selective:core_attn`): 34·sbh,
34·sbh/t with TP+SP. Full recompute keeps the layer input only: 2·sbh.

Each row says which of those it is: `SPLIT[name]` is "tp" (divided by t under tensor parallelism) or "sp"
(divided by t only with sequence parallelism). The per-rank division itself belongs to the parallel bill;
`layer_bytes` here applies Table 2 for tests and for checking the rows against the paper's closed forms.
Widths follow the model (GQA K/V, an FFN that is not 4h): for the paper's GPT models they are its numbers.
"""

from __future__ import annotations

from typing import Any

from stepbill.engine.activations.rows import ActTensor, Recompute
from stepbill.spec.model import ModelSpec

MASK_BYTES = 1  # Megatron keeps dropout masks as bytes (torch.bool / uint8)

#: Row name -> "tp" (split by tensor parallelism) or "sp" (split only by sequence parallelism).
SPLIT: dict[str, str] = {
    "attn.ln_in": "sp",
    "attn.qkv_in": "sp",
    "attn.q": "tp",
    "attn.k": "tp",
    "attn.softmax_out": "tp",
    "attn.softmax_dropout_mask": "tp",
    "attn.softmax_dropout_out": "tp",
    "attn.v": "tp",
    "attn.proj_in": "tp",
    "attn.dropout_mask": "sp",
    "mlp.ln_in": "sp",
    "mlp.fc1_in": "sp",
    "mlp.gelu_in": "tp",
    "mlp.fc2_in": "tp",
    "mlp.dropout_mask": "sp",
}


def _core(spec: ModelSpec) -> Recompute:
    """QKᵀ, softmax, dropout and A·V: S·k FLOPs per token causal-halved (activations._attn_core's)."""
    a = spec.attention
    return Recompute("attention", k=a.n_heads * (a.qk_head_dim + a.v_dim))


def _mha(spec: ModelSpec, act: int) -> list[ActTensor]:
    """Attention block with its input LayerNorm: 2sbh + 11sbh + 5as²b (Table 2, no parallelism)."""
    a, d = spec.attention, spec.hidden_size
    q, kv, out = a.n_heads * a.qk_head_dim, a.kv_heads * a.qk_head_dim, a.n_heads * a.v_dim
    heads, b = a.n_heads, "mha"
    return [
        ActTensor("attn.ln_in", d, act, "input LayerNorm (2sbh: the layer input)", Recompute("input"), b),
        ActTensor("attn.qkv_in", d, act, "QKV linear (2sbh)", Recompute("elementwise", n=d), b),
        ActTensor("attn.q", q, act, "QKᵀ (Q and K: 4sbh)", Recompute("linear", d, q), b, "attn.qkv"),
        ActTensor("attn.k", kv, act, "QKᵀ (Q and K: 4sbh)", Recompute("linear", d, kv), b, "attn.qkv"),
        ActTensor("attn.softmax_out", heads, act, "softmax backward (2as²b)", _core(spec), b, "attn.core",
                  per_token2=True),
        ActTensor("attn.softmax_dropout_mask", heads, MASK_BYTES, "attention dropout (mask: as²b)", _core(spec), b,
                  "attn.core", per_token2=True),
        ActTensor("attn.softmax_dropout_out", heads, act, "A·V (dropped probabilities: 2as²b)", _core(spec), b,
                  "attn.core", per_token2=True),
        ActTensor("attn.v", kv, act, "A·V (V: 2sbh)", Recompute("linear", d, kv), b, "attn.qkv"),
        ActTensor("attn.proj_in", out, act, "output projection (2sbh)", _core(spec), b, "attn.context"),
        ActTensor("attn.dropout_mask", d, MASK_BYTES, "output dropout (mask: sbh)", Recompute("elementwise", n=d), b),
    ]


def _gelu_mlp(spec: ModelSpec, act: int) -> list[ActTensor]:
    """MLP block with its LayerNorm: 2sbh + 19sbh for an FFN 4h wide (Table 2, no parallelism)."""
    a, d, ff = spec.attention, spec.hidden_size, spec.ffn.intermediate_size
    b = "gelu_mlp"
    return [
        ActTensor("mlp.ln_in", d, act, "post-attention LayerNorm (2sbh)",
                  Recompute("linear", a.n_heads * a.v_dim, d), b),
        ActTensor("mlp.fc1_in", d, act, "first linear (2sbh)", Recompute("elementwise", n=d), b),
        ActTensor("mlp.gelu_in", ff, act, "GeLU (8sbh at 4h)", Recompute("linear", d, ff), b),
        ActTensor("mlp.fc2_in", ff, act, "second linear (8sbh at 4h)", Recompute("elementwise", n=ff), b),
        ActTensor("mlp.dropout_mask", d, MASK_BYTES, "MLP dropout (mask: sbh)", Recompute("elementwise", n=d), b),
    ]


#: Block kind -> row builder, registered as ("megatron", kind) in activations.rows.BLOCK_ROWS. The paper bills
#: GPT layers only: other block kinds have no megatron rows (make_bill says so in one line).
BLOCKS = {"mha": _mha, "gelu_mlp": _gelu_mlp}


def layer_bytes(spec: ModelSpec, seq_len: Any, micro_batch: Any = 1, activation_bytes: int = 2, tp: int = 1,
                sp: bool = False, selective: bool = False) -> Any:
    """Bytes one layer keeps on one rank under Table 2's layout: rows tagged "tp" divided by `tp`, rows tagged
    "sp" divided by `tp` only with `sp`; `selective` drops the attention core's rows (op attn.core)."""
    total: Any = 0
    for row in (*_mha(spec, activation_bytes), *_gelu_mlp(spec, activation_bytes)):
        if selective and row.op_id == "attn.core":
            continue
        divisor = tp if SPLIT[row.name] == "tp" or sp else 1
        part = seq_len * micro_batch * row.bytes_at(seq_len)
        total = total + (part if divisor == 1 else part / divisor)  # integers stay exact
    return total
