"""FP8 training recipes: which tensors are fp8, what the memory bill becomes, and how the time splits between the
fp8 GEMMs and the bf16 rest.

Two named conventions (spec/recipe.py):
- `fp8` — NVIDIA Transformer Engine's defaults: `recipe.DelayedScaling()` (fp8_format HYBRID: E4M3 in the forward,
  E5M2 for gradients; per-tensor scales from an amax history of 1,024 steps). The Linears of the layers run their
  three GEMMs (forward, input gradient, weight gradient) in fp8; embeddings, the LM head, norms, attention core,
  softmax and the optimizer stay bf16 / fp32. Weights stay bf16 with an fp32 master (Megatron-LM with TE); each
  te.Linear also keeps an fp8 copy of its weight and its transpose (the Hopper fp8 GEMM takes only the TN layout,
  so the backward needs W transposed) — 2 B per GEMM weight element, kept across micro-batches (Megatron passes
  `is_first_microbatch`), billed as resident `weights.fp8`.
- `fp8-deepseek` — DeepSeek-V3 (arXiv 2412.19437 §3.3): E4M3 for every fp8 tensor, fine-grained scales (1×128 tiles
  of activations, 128×128 blocks of weights), accumulation promoted to fp32 every 128 elements; embedding, output
  head, MoE gating, norms and attention stay bf16/fp32; master weights and gradients fp32, AdamW moments bf16. The
  weight blocks are quantised per use (no resident fp8 copy is stated).

Activations: both cache the Linears' inputs in fp8 for the backward (engine/activations/fp8.py, ideal convention:
1 B per element; DeepSeek's 1×128 tiles add an fp32 scale per 128). Not modelled yet (said in the output): the eager
convention (and so the fit verdict, judged on it) keeps them at bf16, an over-count; DeepSeek's E5M6 attention
output is kept at 2 B.

Layouts: `weights.fp8` is sliced and ZeRO-3-sharded like the weights it copies, and a ZeRO-3 gathered unit counts
it at the weights' 2 B — approximate (TE under FSDP builds the fp8 copy from the gathered unit; not measured).

Time: the GEMMs (every matmul with a weight) run at the GPU's dense fp8 peak, the attention core at the bf16 peak:
the per-op model times its kernels there (timing/step.stage_compute) and `time.fp8_bf16_share` adds the LM head's
GEMM at the bf16 peak; under `--efficiency` (one efficiency for every FLOP) the share adds both.
"""

from __future__ import annotations

from typing import Any

from stepbill.engine.line import Line, cited
from stepbill.engine.params import ParamInventory, ParamTensor
from stepbill.errors import StepbillError
from stepbill.spec.hardware import GPU
from stepbill.spec.recipe import Precision

TE = cited("Transformer Engine recipe.DelayedScaling defaults (HYBRID, amax_history_len 1024)")
DEEPSEEK = cited("DeepSeek-V3 technical report, arXiv 2412.19437 §3.3")
WEIGHT_CACHE_BYTES = 2  # fp8 copy (1 B) + its transpose (1 B) per GEMM weight element (TE on Hopper)

#: The stated choices of each convention, printed and tested (DeepSeek's from its §3.3, TE's from its API docs).
CONVENTIONS: dict[str, dict[str, Any]] = {
    "te": {
        "forward_format": "E4M3",
        "gradient_format": "E5M2",
        "scaling": "per-tensor, delayed (amax history of 1,024 steps)",
        "activation_tile": None,
        "weight_block": None,
        "fp8_gemms": "the Linears of the layers: forward, input-gradient and weight-gradient GEMMs",
        "high_precision": "embeddings, LM head, norms, attention core, softmax, optimizer",
        "weight_copies": "bf16 weights + fp32 master; an fp8 copy and its transpose per GEMM weight (2 B)",
        "moments": "fp32",
        "activation_scales": " (one per-tensor scale); the attention output kept in bf16 plus the projection's fp8 copy",
        "not_modelled": "",
        "provenance": TE,
    },
    "deepseek": {
        "forward_format": "E4M3",
        "gradient_format": "E4M3",
        "scaling": "fine-grained: 1×128 activation tiles, 128×128 weight blocks, fp32 accumulation every 128",
        "activation_tile": (1, 128),
        "weight_block": (128, 128),
        "fp8_gemms": "the Linears of the layers (dense FFN, experts, attention projections): Fprop, Dgrad, Wgrad",
        "high_precision": "embedding, output head, MoE gating, norms, attention operators",
        "weight_copies": "bf16 weights, fp32 master and gradients; weight blocks quantised per use",
        "moments": "bf16",
        "activation_scales": " + an fp32 scale per 1×128 tile; the MoE SwiGLU's gate and up in fp8, its output "
                             "recomputed",
        "not_modelled": "; the attention output's E5M6 format kept at 2 B",
        "provenance": DEEPSEEK,
    },
}


def is_fp8_gemm_weight(t: ParamTensor) -> bool:
    """Whether the GEMMs with weight `t` run in fp8: a Linear of the layers, not the router (MoE gating), not the
    embedding or the LM head."""
    return t.is_matrix and t.component != "router"


def require_fp8(precision: Precision, gpu: GPU | None) -> None:
    """One line when the GPU has no fp8 tensor cores (A100, RTX 3090...)."""
    if precision.fp8 is not None and gpu is not None and gpu.fp8_flops is None:
        raise StepbillError(f"--recipe {precision.name} needs fp8 tensor cores; {gpu.display} has none "
                            "(Hopper, Ada, Blackwell and MI300 do)")


def weight_cache_line(inventory: ParamInventory) -> Line:
    """Transformer Engine's fp8 weight copies: an fp8 copy and its transpose of every GEMM weight."""
    n = sum(t.total for t in inventory.tensors if is_fp8_gemm_weight(t))
    return Line("weights.fp8", n * WEIGHT_CACHE_BYTES, "bytes",
                "{params} GEMM weight params × {bytes} B (fp8 copy + fp8 transpose)",
                {"params": n, "bytes": WEIGHT_CACHE_BYTES}, TE,
                "kept across micro-batches (is_first_microbatch); beside the bf16 weights")


def recipe_lines(inventory: ParamInventory, precision: Precision) -> list[Line]:
    """What is fp8 under the recipe and what is not modelled yet, as lines of the bill (value: fp8 GEMM params)."""
    conv = CONVENTIONS[precision.fp8 or "te"]
    n = sum(t.total for t in inventory.tensors if is_fp8_gemm_weight(t))
    return [
        Line("recipe.fp8", n, "params",
             "fp8 GEMMs ({fwd} forward, {grad} gradients; {scaling}) on {gemms}; bf16/fp32: {high}; {copies}; "
             "AdamW moments {moments}",
             {"fwd": conv["forward_format"], "grad": conv["gradient_format"], "scaling": conv["scaling"],
              "gemms": conv["fp8_gemms"], "high": conv["high_precision"], "copies": conv["weight_copies"],
              "moments": conv["moments"]}, conv["provenance"], f"{n:,} weight params in fp8 GEMMs"),
        Line("recipe.fp8_activations", 0, "bytes",
             "the Linears' inputs cached in fp8 for the backward: 1 B per element{scales} in the ideal convention "
             "(rows marked fp8 in --explain); not modelled yet: the eager convention (and the fit verdict judged on "
             "it) keeps them at bf16{e5m6}", {"scales": conv["activation_scales"], "e5m6": conv["not_modelled"]},
             conv["provenance"]),
    ]


def bf16_share_line(bf16_flops: float, gpu: GPU, efficiency: float, attention_timed: bool = False) -> Line:
    """Seconds the bf16 matmuls add by running at the bf16 peak where the time model divided them by the fp8 peak:
    their FLOPs × (1/bf16 − 1/fp8) / efficiency — the attention core and the LM head under one `--efficiency`, the LM
    head alone where the per-op model timed the attention kernels at the bf16 peak already (`attention_timed`)."""
    bf16, fp8 = gpu.peak_flops("bf16"), gpu.peak_flops("fp8")
    what = "LM head" if attention_timed else "attention core + LM head"
    return Line("time.fp8_bf16_share", bf16_flops * (1 / bf16 - 1 / fp8) / efficiency, "s",
                what + " {flops} FLOPs at the bf16 peak, not fp8: {flops} × (1/{bf16} − 1/{fp8}) / {eff}",
                {"flops": bf16_flops, "bf16": bf16, "fp8": fp8, "eff": efficiency},
                convention="the Linears of the layers at the dense fp8 peak; attention core and LM head (bf16 in "
                "both conventions) at the dense bf16 peak" + (" (the attention kernels timed there: time.attention)"
                                                              if attention_timed else ""))
