"""Dense feed-forward sub-blocks under the eager convention (the norm in front of them included).

SwiGLU (`down(silu(gate(x)) · up(x))`): SiLU saves its input (gate's output), the product saves both factors
(SiLU's output and up's output), down saves its input (the product): 4·f numbers per token in the compute dtype.
GELU-MLP: GPT-2's `gelu_new` is the tanh formula written as elementwise ops, which save four f-wide tensors
(x for x³, tanh's output, and both factors of 0.5·x·(1+t)); GPT-NeoX's exact `gelu` (one op) saves its input
only; the down projection saves the activation's output.
"""

from __future__ import annotations

from stepbill.engine.activations.eager.attention import pre_norm
from stepbill.engine.activations.eager.dtypes import dt_of
from stepbill.engine.activations.eager.norms import linear_inputs
from stepbill.engine.activations.rows import ActTensor, Recompute, _residual_mid
from stepbill.engine.kinds import Split
from stepbill.spec.model import ModelSpec

GELU_TANH_FAMILIES = ("gpt2",)


def ffn_norm(prefix: str, spec: ModelSpec, param: int, block: str) -> list[ActTensor]:
    """The norm in front of the FFN: it reads the residual after attention, or — with GPT-NeoX's parallel
    residual — the layer input again, which the attention norm has saved already (only its stats are new)."""
    return pre_norm(prefix, spec, param, block, _residual_mid(spec), input_saved=not spec.parallel_residual)


def swiglu_core(prefix: str, d: int, f: int, x_bytes: int, act: int, block: str,
                consumers: tuple[str, ...] | None = None, split: Split = Split.TP) -> list[ActTensor]:
    """gate/up inputs (shared, or autocast casts), gate output, SiLU output, up output, product; the FFN-wide
    rows divide as `split` (dense and shared experts: tp)."""
    dt = dt_of(act)
    c = dt.compute
    rows = [] if consumers == () else linear_inputs(
        prefix, consumers or ("gate_proj", "up_proj"), d, x_bytes, dt, block, Recompute("elementwise", n=d))
    return [
        *rows,
        ActTensor(f"{prefix}.gate", f, c, "SiLU backward (its input)", Recompute("linear", d, f), block, split=split),
        ActTensor(f"{prefix}.silu", f, c, "the product (grad of up)", Recompute("elementwise", n=f), block,
                  split=split),
        ActTensor(f"{prefix}.up", f, c, "the product (grad of SiLU output)", Recompute("linear", d, f), block,
                  split=split),
        ActTensor(f"{prefix}.product", f, c, "down projection weight grad", Recompute("elementwise", n=f), block,
                  split=split),
    ]


def swiglu_rows(spec: ModelSpec, act: int) -> list[ActTensor]:
    dt = dt_of(act)
    rows = ffn_norm("mlp", spec, dt.param, "swiglu")
    if spec.ffn.fused_gate_up:
        return rows + fused_gate_up_core(spec, act)
    return rows + swiglu_core("mlp", spec.hidden_size, spec.ffn.intermediate_size, dt.param, act, "swiglu")


def fused_gate_up_core(spec: ModelSpec, act: int) -> list[ActTensor]:
    """Phi-3's MLP (modeling_phi3.py): `gate, up = gate_up_proj(x).chunk(2)`; `up · act(gate)`. The activation
    saves gate and the product saves up — two views of the one fused output (2f) —, the product also saves
    act(gate), down saves the product: 4·f numbers as in the unfused SwiGLU, but one input for one linear."""
    dt = dt_of(act)
    d, f, c, b = spec.hidden_size, spec.ffn.intermediate_size, dt.compute, "swiglu"
    return [
        *linear_inputs("mlp", ("gate_up_proj",), d, dt.param, dt, b, Recompute("elementwise", n=d)),
        ActTensor("mlp.gate_up", 2 * f, c, "SiLU backward (gate) and the product (up): views of one output",
                  Recompute("linear", d, 2 * f), b, split=Split.TP),
        ActTensor("mlp.silu", f, c, "the product (grad of up)", Recompute("elementwise", n=f), b, split=Split.TP),
        ActTensor("mlp.product", f, c, "down projection weight grad", Recompute("elementwise", n=f), b,
                  split=Split.TP),
    ]


def gelu_rows(spec: ModelSpec, act: int) -> list[ActTensor]:
    dt = dt_of(act)
    d, f, c, b = spec.hidden_size, spec.ffn.intermediate_size, dt.compute, "gelu_mlp"
    up = "c_fc" if spec.family == "gpt2" else "dense_h_to_4h" if spec.family == "gpt_neox" else "up_proj"
    rows = ffn_norm("mlp", spec, dt.param, b)
    rows += linear_inputs("mlp", (up,), d, dt.param, dt, b, Recompute("elementwise", n=d))
    rows.append(ActTensor("mlp.up_out", f, c, "GELU backward (its input; gelu_new: x for x³)",
                          Recompute("linear", d, f), b, split=Split.TP))
    if spec.family in GELU_TANH_FAMILIES:
        rows += [
            ActTensor("mlp.gelu_tanh", f, c, "gelu_new: tanh output (tanh' = 1 − t²)", Recompute("elementwise", n=f),
                      b, "mlp.gelu", split=Split.TP),
            ActTensor("mlp.gelu_half_x", f, c, "gelu_new: 0.5·x factor of the product", Recompute("elementwise", n=f),
                      b, "mlp.gelu", split=Split.TP),
            ActTensor("mlp.gelu_one_plus_t", f, c, "gelu_new: (1 + t) factor of the product",
                      Recompute("elementwise", n=f), b, "mlp.gelu", split=Split.TP),
        ]
    rows.append(ActTensor("mlp.act_out", f, c, "down projection weight grad (GELU output)",
                          Recompute("elementwise", n=f), b, "mlp.gelu", split=Split.TP))
    return rows


def ffn_weights(spec: ModelSpec) -> int:
    d, f = spec.hidden_size, spec.ffn.intermediate_size
    return (3 if spec.ffn.kind == "swiglu" else 2) * d * f
