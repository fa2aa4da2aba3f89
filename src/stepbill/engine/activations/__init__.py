"""What a layer keeps for its backward: activation rows per block kind and convention (the registry), and the
bytes outside the layers. `rows` holds the types and the ideal (seed) rows; `eager` the eager convention's rows,
registered here, so rows never imports eager and eager only imports rows."""

from __future__ import annotations

from typing import Any

from stepbill.engine.activations import eager as _eager
from stepbill.engine.activations.eager.blocks import BLOCKS, EAGER_ATTENTION_BLOCKS
from stepbill.engine.activations.fp8 import apply_fp8
from stepbill.engine.activations.lora import apply_lora
from stepbill.engine.activations.megatron import BLOCKS as MEGATRON_BLOCKS
from stepbill.engine.activations.rows import (
    ATTENTIONS,
    BLOCK_ROWS,
    CONVENTIONS,
    ELEMENTWISE_FLOPS,
    FP32,
    ActTensor,
    Recompute,
    eager_attention_rows,
    full_recompute_bytes_per_token,
    layer_blocks,
    layer_bytes_per_token,
    layer_kinds,
    layer_order,
)
from stepbill.engine.activations.rows import layer_rows as _layer_rows
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import LoRA

__all__ = [
    "ATTENTIONS",
    "BLOCK_ROWS",
    "CONVENTIONS",
    "ELEMENTWISE_FLOPS",
    "FP32",
    "ActTensor",
    "Recompute",
    "eager_attention_rows",
    "full_recompute_bytes_per_token",
    "layer_blocks",
    "layer_bytes_per_token",
    "layer_kinds",
    "layer_order",
    "layer_rows",
    "outside_bytes",
    "saved_bytes",
]

for _block, _builder in BLOCKS.items():
    BLOCK_ROWS[("eager", _block)] = _builder
for _block, _builder in EAGER_ATTENTION_BLOCKS.items():  # --attention eager (eager/eager_attention.py)
    BLOCK_ROWS[("eager_attention", _block)] = _builder
for _block, _builder in MEGATRON_BLOCKS.items():  # Korthikanti et al. 2022 Table 2 (activations/megatron.py)
    BLOCK_ROWS[("megatron", _block)] = _builder


def layer_rows(spec: ModelSpec, layer_kind: str, activation_bytes: Any, convention: str = "ideal",
               attention: str = "sdpa", lora: LoRA | None = None) -> list[ActTensor]:
    """Every tensor one layer of `layer_kind` keeps, in forward order (rows.layer_rows); with `lora` the frozen
    Linears keep no input unless an adapter needs it and each adapter keeps its r-wide A output (lora.py)."""
    # Memoised: a bill asks for the same rows several times, a planner thousands. The key spells out both widths
    # (an EagerBytes equals its compute width as an int, so the int alone would confuse amp with pure bf16), and
    # the device whose kernels the eager rows follow.
    key = (spec, layer_kind, int(activation_bytes), getattr(activation_bytes, "param", None),
           getattr(activation_bytes, "compute", None), getattr(activation_bytes, "device", None), convention,
           attention, lora, getattr(activation_bytes, "fp8", None))
    cached = _ROWS_CACHE.get(key)
    if cached is None:
        rows = _layer_rows(spec, layer_kind, activation_bytes, convention, attention)
        if lora is not None:
            rows = apply_lora(spec, layer_kind, rows, lora, getattr(activation_bytes, "compute", activation_bytes),
                              convention, int(getattr(activation_bytes, "param", 0)))
        if getattr(activation_bytes, "fp8", None) and convention == "ideal":  # Linear inputs cached in fp8 (fp8.py)
            rows = apply_fp8(spec, rows, activation_bytes.fp8)  # type: ignore[attr-defined]
        if len(_ROWS_CACHE) > 4096:
            _ROWS_CACHE.clear()
        cached = _ROWS_CACHE[key] = tuple(rows)
    return list(cached)


_ROWS_CACHE: dict[tuple, tuple[ActTensor, ...]] = {}


def outside_bytes(spec: ModelSpec, activation_bytes: int, seq_len: Any, micro_batch: Any,
                  convention: str = "ideal", lora: LoRA | None = None) -> Any:
    """Bytes kept outside the decoder layers (final norm, LM head input, loss). The seed's `ideal`
    accounting counts none; `eager` counts what transformers keeps (activations_eager.outside_bytes)."""
    if convention != "eager":
        return 0
    return _eager.outside_bytes(spec, activation_bytes, seq_len, micro_batch, lora=lora)


def saved_bytes(spec: ModelSpec, activation_bytes: int, seq_len: Any, micro_batch: Any = 1,
                convention: str = "ideal", attention: str = "sdpa") -> Any:
    """Bytes autograd keeps from one forward with no recompute (what saved_tensors_hooks counts, each
    storage once): every layer's rows + what lives outside the layers (eager: engine.eager.saved_bytes, which
    also counts the rows that do not grow per token)."""
    if convention == "eager" and attention == "sdpa":
            return _eager.saved_bytes(spec, activation_bytes, seq_len, micro_batch)
    tokens = seq_len * micro_batch
    total = outside_bytes(spec, activation_bytes, seq_len, micro_batch, convention)
    for kind, n in layer_kinds(spec).items():
        rows = layer_rows(spec, kind, activation_bytes, convention, attention)
        total = total + n * tokens * sum(r.bytes_at(seq_len) for r in rows)
    return total
