"""QLoRA's frozen base: 4-bit NF4 weights with double-quantised constants, as bitsandbytes stores them, and what
dequantising them costs in memory and time (recipe `qlora-nf4`).

Sources: QLoRA (Dettmers et al. 2023, arXiv 2305.14314) §3 — NF4 storage type, blocksize 64, double quantisation
of the absmax constants (8-bit, blocksize 256): 8/64 + 32/(64·256) = 0.127 bits per parameter instead of 32/64 =
0.5; bitsandbytes 0.50 `functional.quantize_4bit` / `nn.Linear4bit` (blocksize 64; compress_statistics=True is the
double quantisation; the nested blocksize is 256) — its defaults quant_type "fp4" and, in transformers'
BitsAndBytesConfig, no double quantisation are not QLoRA's: this recipe is the paper's (NF4, double quantisation,
bf16 compute).

Storage of one quantised weight of n elements (checked against a real Linear4bit's quant_state in tests):
    codes            ceil(n/2) B                           two 4-bit codes per uint8
    absmax (8-bit)   ceil(n/64) B                          one per 64-element block
    absmax2 (fp32)   4·ceil(ceil(n/64)/256) B              one per 256 blocks
    per tensor       256·4 (nested code) + 16·4 (NF4 code) + 4 (absmax offset) = 1,092 B

Which weights: every nn.Linear of the decoder layers. transformers' bitsandbytes integration leaves the output
layer out (`get_keys_to_not_convert`: the LM head), embeddings and norms are not Linears: they stay in the load
dtype, bf16 here. PEFT's `prepare_model_for_kbit_training` would upcast those to fp32 — not this recipe's
reading (a note line says how much it adds).

Dequantisation (bitsandbytes autograd MatMul4Bit): for training-sized inputs (more than 1,536 rows on CUDA) the
forward runs `dequantize_4bit` then `F.linear` on the bf16 copy; the backward dequantises again for the input
gradient (no weight gradient: frozen). Each use reads the stored bytes and writes 2 B per element; the bf16 copy of
one Linear's weight is alive while its matmul runs (a transient, freed after).
"""

from __future__ import annotations

import math

from stepbill.engine.line import Line, cited
from stepbill.engine.params import ParamInventory, ParamTensor
from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import Precision

QLORA = cited("QLoRA, arXiv 2305.14314 §3; bitsandbytes 0.50 functional.quantize_4bit (blocksize 64, nested 256)")
BLOCKSIZE = 64  # elements per absmax (bitsandbytes Linear4bit default, QLoRA §3)
NESTED_BLOCKSIZE = 256  # absmax values per second-level fp32 constant (QLoRA §3: "blocksize of 256")
CODE_BYTES = 0.5  # one NF4 code is 4 bits
NESTED_CODE_BYTES = 256 * 4  # the 8-bit dynamic map of the absmax quantisation, fp32, per tensor
NF4_CODE_BYTES = 16 * 4  # the 16 NF4 levels, fp32, per tensor
OFFSET_BYTES = 4  # mean of the absmax subtracted before their 8-bit quantisation, fp32, per tensor
PER_TENSOR_BYTES = NESTED_CODE_BYTES + NF4_CODE_BYTES + OFFSET_BYTES
DEQUANT_BYTES = 2  # the dequantised copy is bf16 (the compute dtype)
GEMM_WEIGHT_BYTES = 2  # what a GEMM reads per weight element under QLoRA: the bf16 copy (or the bf16 rest)


def is_quantised(t: ParamTensor) -> bool:
    """Whether bitsandbytes stores `t` in 4 bits: a Linear weight of the decoder layers (not the embedding, not the
    LM head, not norms or biases)."""
    return len(t.shape) == 2 and t.component not in ("embedding", "lm_head")


def code_bytes(numel: int) -> int:
    """Bytes of the packed 4-bit codes of one tensor of `numel` elements."""
    return math.ceil(numel / 2)


def constant_bytes(numel: int, double_quant: bool = True) -> int:
    """Bytes of one tensor's quantisation constants. Double quantisation: 8-bit absmax per 64 elements, an fp32
    second-level absmax per 256 blocks, and the per-tensor code tables and offset; without it, an fp32 absmax per
    64 elements and the NF4 code."""
    blocks = math.ceil(numel / BLOCKSIZE)
    if not double_quant:
        return 4 * blocks + NF4_CODE_BYTES
    return blocks + 4 * math.ceil(blocks / NESTED_BLOCKSIZE) + PER_TENSOR_BYTES


def constant_bits_per_param(double_quant: bool = True) -> float:
    """Asymptotic bits of constants per parameter (QLoRA §3): 32/64 = 0.5 without, 8/64 + 32/(64·256) = 0.127 with
    double quantisation (per-tensor tables left out)."""
    if not double_quant:
        return 32 / BLOCKSIZE
    return 8 / BLOCKSIZE + 32 / (BLOCKSIZE * NESTED_BLOCKSIZE)


def row_bytes(t: ParamTensor) -> tuple[int, int]:
    """(code bytes, constant bytes) of every copy of row `t` (each copy is its own quantised tensor)."""
    return code_bytes(t.numel) * t.copies, constant_bytes(t.numel) * t.copies


def frozen_lines(inventory: ParamInventory, precision: Precision, provenance: str) -> list[Line]:
    """The frozen base under QLoRA: NF4 codes and constants of the quantised Linears, the rest in bf16."""
    quantised = [t for t in inventory.tensors if is_quantised(t)]
    rest = sum(t.total for t in inventory.tensors if not is_quantised(t))
    n_quant = sum(t.total for t in quantised)
    codes = sum(row_bytes(t)[0] for t in quantised)
    consts = sum(row_bytes(t)[1] for t in quantised)
    tensors = sum(t.copies for t in quantised)
    blocks = sum(math.ceil(t.numel / BLOCKSIZE) * t.copies for t in quantised)
    nested = sum(math.ceil(math.ceil(t.numel / BLOCKSIZE) / NESTED_BLOCKSIZE) * t.copies for t in quantised)
    bf16 = precision.frozen or precision.weights
    return [
        Line("weights.nf4", codes, "bytes", "{params} params of {tensors} Linear weights × {bytes} B (4-bit NF4 codes)",
             {"params": n_quant, "tensors": tensors, "bytes": CODE_BYTES}, QLORA,
             "every Linear of the layers; the LM head stays bf16 (transformers' get_keys_to_not_convert)"),
        Line("weights.nf4_constants", consts, "bytes",
             "{blocks} blocks of 64 × 1 B (8-bit absmax) + {nested} × 4 B (fp32 absmax of 256 blocks) + {tensors} "
             "tensors × {per_tensor} B (code tables, offset) = {bits_per_param} bits/param",
             {"blocks": blocks, "nested": nested, "tensors": tensors, "per_tensor": PER_TENSOR_BYTES,
              "bits_per_param": 8 * consts / n_quant if n_quant else 0.0,
              "bytes": consts / n_quant if n_quant else 0.0}, QLORA,
             "double quantisation (QLoRA §3: 0.127 bits/param)"),
        Line("weights.frozen", rest * bf16, "bytes",
             "{params} params not quantised (embeddings, LM head, norms, biases) × {bytes} B (bf16)",
             {"params": rest, "bytes": bf16}, provenance,
             "the load dtype; PEFT's prepare_model_for_kbit_training would upcast them to fp32"),
    ]


def largest_dequant_bytes(inventory: ParamInventory) -> int:
    """Bytes of the largest bf16 copy one dequantised Linear makes (alive while its matmul runs)."""
    return max((t.numel * DEQUANT_BYTES for t in inventory.tensors if is_quantised(t)), default=0)


def dequant_transient_line(inventory: ParamInventory) -> Line:
    """The transient of dequantisation at its largest, for the bill's lines."""
    big = max((t for t in inventory.tensors if is_quantised(t)), key=lambda t: t.numel, default=None)
    shape = "×".join(map(str, big.shape)) if big is not None else "-"
    return Line("transient.dequant", largest_dequant_bytes(inventory), "bytes",
                "bf16 copy of the largest quantised Linear ({name}, {shape}) × {bytes} B, while its matmul runs",
                {"name": big.name if big is not None else "-", "shape": shape, "bytes": DEQUANT_BYTES}, QLORA,
                "bitsandbytes MatMul4Bit: dequantize_4bit then F.linear, forward and input-gradient backward")


def dequant_time_line(inventory: ParamInventory, uses: float, hbm_bytes_per_s: float) -> Line:
    """Seconds of dequantising every quantised weight `uses` times per step (forward, backward's input gradient,
    each recompute of a forward): HBM reads of codes and constants, writes of the bf16 copy, memory-bound."""
    stored = sum(sum(row_bytes(t)) for t in inventory.tensors if is_quantised(t))
    written = sum(t.total for t in inventory.tensors if is_quantised(t)) * DEQUANT_BYTES
    moved = uses * (stored + written)
    return Line("time.dequant", moved / hbm_bytes_per_s, "s",
                "{uses} uses × (read {stored} B codes + constants + write {written} B bf16) / {bw} B/s HBM",
                {"uses": uses, "stored": stored, "written": written, "bw": hbm_bytes_per_s}, QLORA,
                "serial with the GEMMs (its own memory-bound kernel before each); uses = forward 1 + backward 1 "
                "(input gradient) + the recompute's share of a forward")


def upcast_note(inventory: ParamInventory, precision: Precision) -> Line:
    """What PEFT's prepare_model_for_kbit_training would add: the non-quantised base upcast from bf16 to fp32."""
    rest = sum(t.total for t in inventory.tensors if not is_quantised(t))
    bf16 = precision.frozen or precision.weights
    return Line("recipe.qlora_fp32_upcast", rest * (4 - bf16), "bytes",
                "not in this bill: PEFT's prepare_model_for_kbit_training upcasts the {params} non-quantised params "
                "to fp32 (+{extra} B each) and turns on gradient checkpointing (--recompute full)",
                {"params": rest, "extra": 4 - bf16}, "cited: peft.utils.other.prepare_model_for_kbit_training")


def gemm_weight_bytes(precision: Precision) -> int:
    """Bytes per weight element the GEMMs read: the bf16 dequantised copy under QLoRA, else the weight dtype."""
    return GEMM_WEIGHT_BYTES if precision.quant is not None else precision.weights


def check_supported(spec: ModelSpec, precision: Precision) -> None:
    """One line for what the quantised recipe does not model yet: MoE experts (transformers keeps routed experts as
    3-D parameters, which bitsandbytes' Linear replacement does not reach)."""
    if precision.quant is not None and spec.moe is not None:
        raise StepbillError(f"--recipe {precision.name} on a MoE model is not modelled yet (dense models only)")

