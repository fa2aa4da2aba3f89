"""What the eager convention keeps outside the decoder layers, and the rows that do not grow per token.

Per token: the final norm (as in the layers), the LM head's input, the fp32 log-softmax of the logits
(transformers upcasts them for the loss: 4·V B per token in every recipe) and the shifted labels (int64).
Not per token (`per` "position" or "constant"):
- RoPE cos/sin tables: per position, in the parameter dtype (computed in fp32, cast to the hidden states'
  dtype), rotary width (head_dim·rotary_fraction; MLA: qk_rope_head_dim); built once per forward and shared by
  the batch and every layer. Under full recompute the checkpoints hold no tables.
  DeepSeek-V2 rotates with complex numbers: one complex64 table of rope/2 entries (8 B each) per position.
- GPT-2's learned positions: the position ids (int64 per position) saved by the position embedding.
- At micro-batch 1 the shifted labels are a view of the (T+1)-long padded labels: one more int64.
- The loss's count of non-ignored tokens (a 4-byte scalar).
- amp: autocast's bf16 copy of every linear weight, saved by the linear (LM head included, tied or not).
Token ids themselves are the step's input, not an activation.
"""

from __future__ import annotations

from stepbill.engine.activations.eager.attention import pre_norm
from stepbill.engine.activations.eager.dropout import embedding_dropout
from stepbill.engine.activations.eager.dtypes import INT64, dt_of
from stepbill.engine.activations.eager.gemma import final_softcap_rows, norm_weight_constants, rope_tables
from stepbill.engine.activations.eager.norms import linear_inputs
from stepbill.engine.activations.rows import FP32, ActTensor, Recompute
from stepbill.engine.kinds import Split
from stepbill.spec.model import ModelSpec

# gpt-oss rotates the two halves of each head (`_apply_rotary_emb`): its cos/sin tables are rotary width / 2.
HALF_ROPE_TABLE_FAMILIES = ("gpt_oss",)


#: Under LoRA the LM head is frozen (PEFT never wraps the output layer), so autograd keeps no input for it, and the
#: final RMSNorm's x̂ (saved by weight · x̂ only for the frozen weight's gradient) goes too; measured with
#: saved_tensors_hooks on a PEFT-wrapped Llama (tests/measure/test_lora_check.py).
LORA_FROZEN_OUTSIDE = ("final.norm_out", "final.lm_head_in_cast", "final.norm_xhat")


def outside_rows(spec: ModelSpec, act: int, lora: object | None = None) -> list[ActTensor]:
    """Per-token rows outside the layers; with `lora` (a LoRA recipe) the frozen LM head's input and the final
    RMSNorm's x̂ are not kept (LORA_FROZEN_OUTSIDE)."""
    rows = _outside_rows(spec, act)
    if lora is None:
        return rows
    frozen = [n for n in LORA_FROZEN_OUTSIDE if spec.norm == "rmsnorm" or not n.endswith("norm_xhat")]
    return [r for r in rows if r.name not in frozen]


def _outside_rows(spec: ModelSpec, act: int) -> list[ActTensor]:
    dt = dt_of(act)
    d, b = spec.hidden_size, "outside"
    return [
        *embedding_dropout(spec, act),
        *pre_norm("final", spec, dt.param, b, Recompute("input")),
        *linear_inputs("final", ("lm_head",), d, dt.param, dt, b, Recompute("elementwise", n=d)),
        *final_softcap_rows(spec, act),
        ActTensor("loss.log_softmax_fp32", spec.vocab_size, FP32, "cross-entropy (logits upcast to fp32)",
                  Recompute("linear", d, spec.vocab_size), b, split=Split.TP),
        ActTensor("loss.labels", 1, INT64, "NLL gradient (shifted labels, int64)", Recompute("copy"), b),
    ]


def rope_width(spec: ModelSpec) -> int:
    a = spec.attention
    if spec.positions != "rotary":
        return 0
    if a.kind == "mla":
        return a.qk_rope_head_dim
    return int(a.qk_head_dim * spec.rotary_fraction)


def rope_table_width(spec: ModelSpec) -> int:
    """Numbers per position of the cos and sin tables the rotary embedding hands every layer, both together (the
    model's one pair; Gemma3 one per attention type; gpt-oss half width)."""
    width = 2 * rope_width(spec) * rope_tables(spec)
    return width // 2 if spec.family in HALF_ROPE_TABLE_FAMILIES else width


def rope_buffer_bytes(spec: ModelSpec) -> int:
    """RoPE's module buffers: transformers keeps `inv_freq` and `original_inv_freq` (for dynamic-RoPE resets),
    both fp32 of rotary width / 2. The only buffers of the rotary families."""
    return 2 * (rope_width(spec) // 2) * 4


def outside_fixed_rows(spec: ModelSpec, act: int, micro_batch: int, recompute: str = "none",
                       with_casts: bool = True) -> list[ActTensor]:
    """Rows outside the layers that do not grow per token (`per`: position or constant)."""
    dt = dt_of(act)
    b, copy = "outside", Recompute("copy")
    rows: list[ActTensor] = []
    rope = rope_width(spec)
    if rope and recompute == "none" and spec.family == "deepseek_v2":
        rows.append(ActTensor("rope.freqs_cis", rope // 2, 8, "RoPE as a complex product (view_as_complex): one "
                              "complex64 table per position, in every recipe", copy, b, per="position"))
    elif rope and recompute == "none":
        rows.append(ActTensor("rope.cos_sin", rope_table_width(spec), dt.param, "RoPE backward (q·cos, "
                              "rotate_half(q)·sin): the tables, per position, shared by the batch and every layer "
                              "(Gemma3: one pair per attention type)", copy, b, per="position"))
    if spec.positions == "learned":
        rows.append(ActTensor("embed.position_ids", 1, INT64, "position embedding backward (int64 ids)", copy, b,
                              per="position"))
    if micro_batch == 1:
        rows.append(ActTensor("loss.labels_pad", 1, INT64, "B=1: the shifted labels are a view of T+1 labels",
                              copy, b, per="constant"))
    rows.append(ActTensor("loss.total_weight", 1, FP32, "NLL: count of non-ignored tokens (scalar)", copy, b,
                          per="constant"))
    rows += norm_weight_constants(spec, "outside", dt.param)
    if dt.amp and with_casts:
        rows.append(ActTensor("lm_head.weight_cast", spec.vocab_size * spec.hidden_size, dt.compute,
                              "LM head input grad: autocast's bf16 copy of the weight", copy, b, per="constant",
                              split=Split.TP))
    return rows
