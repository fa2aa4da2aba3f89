"""Dropout under the eager convention: what PyTorch keeps for backward when a model trains with dropout > 0.

Measured with saved_tensors_hooks on tiny gpt2, gpt_neox and llama models (torch 2.13 CPU, transformers 5.24;
tests/measure/test_eager_dropout.py) and read off PyTorch's sources for CUDA (no GPU measured here):

- A dropout module keeps its mask; its dropped output is a new tensor, kept only where the next op saves it
  (GPT-2's and GPT-NeoX's residual dropouts feed an add, which saves nothing; the embedding dropout's output is
  layer 0's input, which its norm saves in place of the undropped sum).
  - CPU: `at::dropout` takes its fused kernel only on CUDA/XPU (aten/src/ATen/native/Dropout.cpp,
    `is_fused_kernel_acceptable`); elsewhere it computes `input * (bernoulli(1 − p) / (1 − p))` and the product
    saves the noise tensor, in the input's dtype (fp32 4 B, bf16 2 B per element).
  - CUDA: `native_dropout` saves a bool mask (1 B per element; derivatives.yaml: native_dropout_backward).
- Attention-probability dropout inside SDPA:
  - CPU: the flash kernel refuses dropout (sdp_utils_cpp.cpp, `use_flash_attention_cpp`: check_for_dropout),
    so SDPA runs `_scaled_dot_product_attention_math`, which upcasts to fp32 on CPU and keeps q·√scale,
    kᵀ·√scale (k expanded to every query head under GQA), the softmax probabilities P, the dropout noise and
    the dropped P (three fp32 B·H·S² tensors), v (an fp32 copy, every head) and, for the output projection,
    a token-major copy of the head-major output. The flash kernel's q, k, v, output and logsumexp are no
    longer kept (nor the projections' outputs they were views of).
  - CUDA: flash (fp16/bf16) and memory-efficient (fp32 too) attention take dropout_p > 0
    (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp: neither `use_flash_attention` nor
    `use_mem_efficient_attention` gates on dropout); they regenerate the mask from the Philox seed and offset
    they save (two 8-byte scalars per call): the rows stay those of the fused kernel, no S² tensor.
  - Families whose attention is transformers' eager attention (Gemma2, gpt-oss) or MLA are not modelled with
    attention dropout yet (engine/unmodelled.py says so in one line).

The ideal convention keeps no dropout masks (activations/rows.py); the megatron convention has its 1-byte masks.
"""

from __future__ import annotations

from stepbill.engine.activations.eager.attention import FUSED_QKV, mla_uses_math_path
from stepbill.engine.activations.eager.dtypes import FP32, INT64, Dt, dt_of
from stepbill.engine.activations.eager.gemma import EAGER_ATTENTION_FAMILIES
from stepbill.engine.activations.rows import ActTensor, Recompute, _attn_core
from stepbill.engine.kinds import Split
from stepbill.spec.model import ModelSpec

DEVICES = ("cpu", "cuda")
BOOL = 1  # CUDA's native_dropout mask

# The flash kernel's rows (eager/attention.py) that the math path does not keep: SDPA's own q/k/v/output/
# logsumexp, the fused projection outputs they were views of, and the output projection's copy, which the math
# path's rows hold again as attn.o_in.
FLASH_ONLY = frozenset({"attn.q", "attn.k", "attn.v", "attn.qkv", "attn.logsumexp", "attn.core_out",
                        "attn.dense_in", "attn.o_in"})


def mask_bytes(dt: Dt, input_bytes: int) -> int:
    """Bytes per element of a dropout mask: the input's dtype on CPU (the noise tensor), a bool on CUDA."""
    return BOOL if dt.device == "cuda" else input_bytes


def eager_attention_modelled(spec: ModelSpec) -> bool:
    """Whether `--attention eager` changes the eager rows of this family (else they stay SDPA's, said in a note).
    (Here, not in eager_attention.py, which imports
    this module.) The families that always run eager attention (Gemma2, gpt-oss) have their own rows already."""
    a = spec.attention
    if a.kind != "mha" or a.sinks or spec.family in EAGER_ATTENTION_FAMILIES:
        return False
    return spec.family == "gpt2" or (spec.family != "gpt_neox" and not a.fused_qkv)


def attention_dropout_modelled(spec: ModelSpec) -> bool:
    """Whether the eager rows follow attention-probability dropout for this family (SDPA, MHA/GQA)."""
    a = spec.attention
    return a.kind == "mha" and not a.sinks and spec.family not in EAGER_ATTENTION_FAMILIES


def uses_math_path(spec: ModelSpec, act: int) -> bool:
    """CPU SDPA with attention dropout > 0: the math path (the flash kernel takes no dropout)."""
    return spec.attention_dropout > 0 and dt_of(act).device == "cpu" and attention_dropout_modelled(spec)


def residual_dropout(prefix: str, spec: ModelSpec, act: int, block: str) -> list[ActTensor]:
    """The mask of the dropout on a sub-block's output (GPT-2 resid_pdrop, GPT-NeoX hidden_dropout), hidden wide
    in the output's dtype (the compute dtype: a linear's output). Empty without hidden dropout."""
    if spec.hidden_dropout <= 0:
        return []
    dt = dt_of(act)
    return [ActTensor(f"{prefix}.dropout_mask", spec.hidden_size, mask_bytes(dt, dt.compute),
                      "output dropout backward (its mask; the dropped output feeds an add, not kept)",
                      Recompute("elementwise", n=spec.hidden_size), block)]


def embedding_dropout(spec: ModelSpec, act: int) -> list[ActTensor]:
    """The embedding dropout's mask (GPT-2 embd_pdrop, GPT-NeoX hidden_dropout), hidden wide in the parameter
    dtype (the embedding's output). Empty without it."""
    if spec.embedding_dropout <= 0:
        return []
    dt = dt_of(act)
    return [ActTensor("embed.dropout_mask", spec.hidden_size, mask_bytes(dt, dt.param),
                      "embedding dropout backward (its mask)", Recompute("elementwise", n=spec.hidden_size),
                      "outside")]


def attention_dropout(spec: ModelSpec, act: int, rows: list[ActTensor]) -> list[ActTensor]:
    """The attention block's rows with attention-probability dropout: unchanged on CUDA (the fused kernels take
    dropout; their Philox state is in `fixed_rows`) and without dropout; on CPU the math path's rows replace
    the flash kernel's (module docstring)."""
    if not uses_math_path(spec, act):
        return rows
    dt = dt_of(act)
    a, c, b = spec.attention, dt.compute, "mha"
    h, dqk, dv = a.n_heads, a.qk_head_dim, a.v_dim
    core = _attn_core(spec)
    kept = [r for r in rows if r.name not in FLASH_ONLY]
    return [
        *kept,
        ActTensor("attn.q_scaled", h * dqk, FP32, "math SDPA: q·√scale (fp32 on CPU) for dK", core, b, "attn.core",
                  split=Split.TP),
        ActTensor("attn.k_scaled", h * dqk, FP32, "math SDPA: kᵀ·√scale (fp32, every query head) for dQ", core, b,
                  "attn.core", split=Split.TP),
        ActTensor("attn.probs", h, FP32, "math SDPA: softmax output P (fp32, B·H·S²) for its backward", core, b,
                  "attn.core", per_token2=True, split=Split.TP),
        ActTensor("attn.probs_dropout_mask", h, mask_bytes(dt, FP32), "math SDPA: dropout noise on P (fp32, "
                  "B·H·S²)", core, b, "attn.core", per_token2=True, split=Split.TP),
        ActTensor("attn.probs_dropped", h, FP32, "math SDPA: dropped P (fp32, B·H·S²) for dV", core, b, "attn.core",
                  per_token2=True, split=Split.TP),
        ActTensor("attn.v_math", h * dv, FP32, "math SDPA: v (fp32 copy, every query head) for dP", core, b,
                  "attn.core", split=Split.TP),
        ActTensor("attn.o_in", h * dv, c, "output projection weight grad (token-major copy of the output)",
                  Recompute("copy"), b, split=Split.TP),
    ]


def fixed_rows(spec: ModelSpec, act: int, micro_batch: int) -> list[ActTensor]:
    """Per-layer rows that do not grow per token.

    CUDA's fused attention with dropout saves its Philox seed and offset (two 8-byte scalars). On CPU's math
    path at B = 1 in fp32 (no upcast copy) without GQA expansion, v's reshape for the batched matmul is a view of
    the fused projection's output (GPT-2, GPT-NeoX, Phi-3's qkv), which therefore stays whole: its other
    numbers are kept per position beyond `attn.v_math`."""
    if spec.attention_dropout <= 0 or not attention_dropout_modelled(spec):
        return []
    dt = dt_of(act)
    if dt.device == "cuda":
        return [ActTensor("attn.philox_seed_offset", 2, INT64, "fused SDPA dropout backward regenerates the mask "
                          "(Philox seed and offset)", Recompute("copy"), "layer", per="constant")]
    a = spec.attention
    if micro_batch != 1 or dt.compute != FP32 or dt.amp or a.kv_heads != a.n_heads:
        return []
    fused = a.n_heads * (2 * a.qk_head_dim + a.v_dim) if spec.family in FUSED_QKV or a.fused_qkv else 0
    if not fused:
        return []
    return [ActTensor("attn.qkv_view_extra", fused - a.n_heads * a.v_dim, FP32, "B=1, fp32: math SDPA's v is a "
                      "view of the fused qkv output (q and k parts kept too)", Recompute("copy"), "mha",
                      per="position")]


def kernel_note(spec: ModelSpec, device: str, recompute: str = "none", attention: str = "sdpa") -> str:
    """Which SDPA kernel and dropout masks the eager rows assume on `device` (one clause, for the bill's
    activation convention); under recompute on CPU's math path, what is not modelled yet. `attention` "eager":
    transformers' eager attention where eager/eager_attention.py models it."""
    p = spec.attention_dropout
    masks = "bool masks (1 B)" if device == "cuda" else "masks in the input's dtype"
    dropped = any(getattr(spec, f) > 0 for f in ("hidden_dropout", "embedding_dropout"))
    if attention == "eager" and eager_attention_modelled(spec):
        # tiny llama, MemTracker, recompute none, seq 64-1024: every peak within 0.6 % (fp32 exact), amp +2.3 %
        kernel = ("--attention eager: transformers' eager attention (S² probabilities kept; the scores, softmax and "
                  "its backward's dP and dS billed at their moments; not modelled yet: the additive mask that "
                  "checkpoints keep under recompute)")
    elif p > 0 and attention_dropout_modelled(spec):
        kernel = (f"attention dropout {p:g} on SDPA's flash / memory-efficient kernel (no S² kept)" if device == "cuda"
                  else f"attention dropout {p:g} sends SDPA to its math path (fp32 S² probabilities, mask and "
                  "dropped copy kept; CPU's flash kernel takes no dropout)")
    elif spec.family in EAGER_ATTENTION_FAMILIES or spec.attention.sinks:
        kernel = "transformers' eager attention (S² probabilities kept)"
    elif spec.attention.kind == "mla" and mla_uses_math_path(spec, device):
        kernel = "SDPA's math path (MLA: q/k and v head widths differ; as measured on CPU)"
    elif spec.attention.kind == "mla" and device == "cuda":
        kernel = "SDPA's memory-efficient kernel (MLA's unequal head widths; no S² kept; not measured: no GPU)"
    else:
        kernel = "SDPA's flash kernel"
    gap = ""
    if recompute != "none" and device == "cpu" and p > 0 and attention_dropout_modelled(spec):
        # measured on tiny models: activations at the forward peak −4 % to −32 %, step peak within 1.1 %
        gap = ("; not modelled yet: the math path's B·H·S² temporaries inside a recomputed layer's forward (the "
               "forward peak is under-billed)")
    return f"device {device}: {kernel}" + (f"; dropout {masks}" if dropped or p > 0 else "") + gap
