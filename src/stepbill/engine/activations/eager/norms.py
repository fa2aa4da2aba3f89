"""Norms and the linear inputs that follow them (eager PyTorch, transformers' modeling code).

RMSNorm (llama-style: `x.to(fp32)`, `pow(2).mean`, `rsqrt`, `x·r`, `weight · x̂.to(input dtype)`) saves
- x in fp32 (PowBackward0.self and MulBackward0.self; the input's own storage when it is fp32 already, else a
  new fp32 copy), 4·w B per token;
- 1/rms per row in fp32 (RsqrtBackward0.result, MulBackward0.other), 4 B per normalised row;
- x̂ in the input dtype (MulBackward0.other of `weight · x̂`: the weight's gradient needs it).
Its output (dtype of weight·x̂: the wider of parameter and input dtype) is saved by the linears that read it.

LayerNorm (aten.native_layer_norm) saves its input and the mean and 1/std per row in the input dtype (bf16
stats for a bf16 input on CPU; autocast runs it in fp32).
"""

from __future__ import annotations

from stepbill.engine.activations.eager.dtypes import FP32, Dt
from stepbill.engine.activations.rows import ActTensor, Recompute
from stepbill.engine.kinds import Split

# Families whose RMSNorm multiplies the weight in fp32 and casts after (OLMo2's and gpt-oss's
# `(w · x̂).to(dtype)`, Gemma's
# `(x̂ · (1 + w.float())).type_as(x)`): x̂ is saved in fp32 whatever the input dtype.
FP32_XHAT_FAMILIES = ("olmo2", "gemma2", "gemma3_text", "gpt_oss")


def rmsnorm(prefix: str, width: int, rows: int, in_bytes: int, block: str, source: Recompute,
            x_width: int | None = None, split: Split = Split.SEQ, xhat_bytes: int | None = None) -> list[ActTensor]:
    """RMSNorm over `width` numbers, `rows` normalised rows per token, input of `in_bytes`. `x_width`: the
    fp32 input's storage width when the input is an fp32 view of a wider tensor (MLA's kv_a output).
    `xhat_bytes`: x̂'s dtype where the weight multiplies in fp32 (FP32_XHAT_FAMILIES), else the input's."""
    stats = f"{prefix}.norm_stats"
    x = x_width if (x_width is not None and in_bytes == FP32) else width
    what = "the input itself (fp32 already)" if in_bytes == FP32 else "a new fp32 copy of the input"
    return [
        ActTensor(f"{prefix}.norm_x_fp32", x, FP32, f"RMSNorm pow and x·r: x in fp32 ({what})", source, block,
                  split=split),
        ActTensor(f"{prefix}.norm_rstd", rows, FP32, "RMSNorm 1/rms per row in fp32 (rsqrt backward, x·r)",
                  Recompute("elementwise", n=rows), block, stats, split=split),
        ActTensor(f"{prefix}.norm_xhat", width, xhat_bytes or in_bytes,
                  "RMSNorm weight grad (weight · x̂ saves x̂: input dtype, or fp32 where w multiplies in fp32)",
                  Recompute("elementwise", n=width), block, stats, split=split),
    ]


def layernorm(prefix: str, width: int, in_bytes: int, block: str, source: Recompute,
              input_saved: bool = True) -> list[ActTensor]:
    """LayerNorm: input (unless another norm saved the same input: GPT-NeoX's parallel residual), mean and
    1/std per token in the input dtype."""
    stats = f"{prefix}.norm_stats"
    rows = [ActTensor(f"{prefix}.norm_in", width, in_bytes, "LayerNorm backward recomputes x̂ from x", source,
                      block)] if input_saved else []
    return [
        *rows,
        ActTensor(f"{prefix}.norm_mean", 1, in_bytes, "LayerNorm mean per token (input dtype)",
                  Recompute("elementwise", n=width), block, stats),
        ActTensor(f"{prefix}.norm_rstd", 1, in_bytes, "LayerNorm 1/std per token (input dtype)",
                  Recompute("elementwise", n=width), block, stats),
    ]


def linear_inputs(prefix: str, consumers: tuple[str, ...], width: int, x_bytes: int, dt: Dt, block: str,
                  recompute: Recompute, name: str = "norm_out") -> list[ActTensor]:
    """The input a group of linears saves for their weight gradients (dW = xᵀ·dY).

    Without autocast they share one storage (the producer's output). Under autocast an input that is not in
    the compute dtype is cast by each linear on its own: one bf16 copy per consumer.
    """
    if dt.amp and x_bytes != dt.compute:
        return [ActTensor(f"{prefix}.{c}_in_cast", width, dt.compute,
                          f"{c} weight grad: autocast's own {dt.compute}-byte cast of its input", recompute, block)
                for c in consumers]
    users = ", ".join(consumers)
    return [ActTensor(f"{prefix}.{name}", width, x_bytes, f"weight grads of {users} (one shared input)",
                      recompute, block)]
