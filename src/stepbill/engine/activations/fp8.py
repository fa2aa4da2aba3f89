"""FP8 recipes' activation rule (ideal convention): the Linears cache their inputs for the weight-gradient GEMM in
fp8, not bf16.

- Transformer Engine (`fp8`): a te.Linear / LayerNormLinear / LayerNormMLP saves the fp8 cast of its input (1 B per
  element, one per-tensor scale) for wgrad. A row read only by Linear weight gradients (activations/lora.py's map:
  the norm outputs before QKV and gate/up, the SwiGLU product before down...) becomes 1 B. The attention output is
  also read by the fused attention's backward, which keeps it in bf16: the output projection's fp8 copy is one more
  1-B row. The MoE router is no te.Linear: its input stays bf16.
- DeepSeek-V3 (`fp8-deepseek`, arXiv 2412.19437 §3.3.2–3.3.3): "we cache the activations in FP8 format for the
  backward pass of the Linear operator", quantised per 1×128 tile (one fp32 scale per 128 elements: a scale row
  of ceil(width/128) × 4 B beside each fp8 row); the MoE SwiGLU's inputs (gate, up) are cached in fp8 and its output
  recomputed in the backward (the product row dropped; elementwise, no matmul FLOPs). Not modelled: the attention
  output's custom E5M6 format (kept at 2 B here, an over-count of 0.5 B per element); the gating (router) input
  stays bf16, as the report keeps MoE gating in its original precision.

The eager and megatron conventions are left as they are (they describe bf16 frameworks).
"""

from __future__ import annotations

import math
from dataclasses import replace

from stepbill.engine.activations.lora import _readers
from stepbill.engine.activations.rows import FP32, ActTensor, Recompute
from stepbill.engine.activations.tagged import TaggedInt
from stepbill.spec.model import ModelSpec

FP8 = 1
TILE = 128  # DeepSeek-V3's activation tile: 1 × 128 elements share one fp32 scale
_ROUTER = "moe.router.weight"
_MOE_SWIGLU_INPUTS = ("moe.gate", "moe.up")


class Fp8Bytes(TaggedInt):
    """The activation dtype's bytes (its int value, bf16's 2) carrying the fp8 convention ("te" / "deepseek"), so
    the rows of a layer know which Linear inputs are cached in fp8 (as EagerBytes carries the parameter width); equal
    to another, copied and pickled with it (tagged.TaggedInt)."""

    TAGS = ("fp8",)

    fp8: str

    def __new__(cls, activation: int, fp8: str) -> Fp8Bytes:
        obj = super().__new__(cls, activation)
        obj.fp8 = fp8
        return obj

    def __repr__(self) -> str:
        return f"Fp8Bytes({int(self)}, fp8={self.fp8!r})"

    def __str__(self) -> str:  # tables print the width, not the carrier
        return str(int(self))


def _scales(row: ActTensor) -> ActTensor:
    """The fp32 scales of a row quantised in 1×128 tiles."""
    return ActTensor(f"{row.name}_scales", math.ceil(row.width / TILE), FP32, f"{row.saved_for} (1×128 fp32 scales)",
                     Recompute("elementwise", n=row.width), row.block, row.op_id, row.per_token2, row.per, row.split)


def _to_fp8(row: ActTensor, fp8: str) -> list[ActTensor]:
    cast = replace(row, dtype_bytes=FP8, saved_for=f"{row.saved_for} — fp8")
    return [cast, _scales(cast)] if fp8 == "deepseek" else [cast]


def apply_fp8(spec: ModelSpec, rows: list[ActTensor], fp8: str) -> list[ActTensor]:
    """`rows` of one layer (ideal convention) under an fp8 recipe: Linear-only inputs cached in fp8."""
    out: list[ActTensor] = []
    for row in rows:
        readers = _readers(spec, row.block, row, "ideal")
        if fp8 == "deepseek" and row.name == "moe.product":
            continue  # recomputed from the cached fp8 gate and up (§3.3.3)
        if fp8 == "deepseek" and row.name in _MOE_SWIGLU_INPUTS:
            out += _to_fp8(replace(row, saved_for="SwiGLU (output recomputed in the backward)"), fp8)
        elif readers is not None and _ROUTER not in readers:
            out += _to_fp8(row, fp8)
        elif row.name == "attn.core_out" and fp8 == "te":  # bf16 for the attention backward + the proj's fp8 copy
            out += [row, replace(row, name="attn.core_out_fp8", dtype_bytes=FP8,
                                 saved_for="output projection (weight grad) — fp8 copy")]
        else:
            out.append(row)
    return out
