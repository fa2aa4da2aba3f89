"""FlopCounterMode with the formulas PyTorch lacks on CPU, and the counted forward+backward pass.

``torch.utils.flop_counter`` has no formula for the CPU SDPA kernel
(``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward), for ``aten._grouped_mm`` (MoE
experts) nor for transformers' ``grouped_mm_fallback`` custom op (used for fp32 experts); without them a
step's attention and expert FLOPs silently count as zero. Counts are FLOPs (2 per multiply-add), attention
as the full square (non-causal), as FlopCounterMode does for every attention kernel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def _prod(shape: Sequence[int]) -> int:
    return math.prod(int(s) for s in shape)


def grouped_mm_flop(a_shape: Sequence[int], b_shape: Sequence[int], *args: Any, out_shape: Any = None,
                    **kwargs: Any) -> int:
    """FLOPs of ``aten._grouped_mm``: groups partition one dimension, so each row meets one weight.

    2-D × 3-D (tokens (S, K) × experts (E, K, N) → (S, N)) and 3-D × 3-D (batched) cost
    2·|out|·K; 2-D × 2-D (the weight gradient (K, S) × (S, N) → (E, K, N)) costs 2·K·S·N because the
    groups split S.
    """
    if len(a_shape) == 2 and len(b_shape) == 2:
        return 2 * int(a_shape[0]) * int(a_shape[1]) * int(b_shape[1])
    return 2 * _prod(out_shape) * int(a_shape[-1])


def grouped_mm_fallback_flop(input_shape: Sequence[int], weight_shape: Sequence[int], *args: Any,
                             out_shape: Any = None, **kwargs: Any) -> int:
    """transformers' fallback: input (S, K) × per-expert weight (E, K, N) → (S, N): 2·S·K·N."""
    return 2 * int(input_shape[0]) * int(input_shape[1]) * int(weight_shape[2])


def grouped_mm_fallback_backward_flop(input_shape: Sequence[int], weight_shape: Sequence[int], *args: Any,
                                      out_shape: Any = None, **kwargs: Any) -> int:
    """Backward of the fallback: grad_input and grad_weight, 2·S·K·N each."""
    return 2 * grouped_mm_fallback_flop(input_shape, weight_shape)


def cpu_sdpa_flop(query_shape: Sequence[int], key_shape: Sequence[int], value_shape: Sequence[int],
                  *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """CPU flash SDPA forward: the CUDA kernels' formula (QKᵀ and PV, full square, GQA-aware)."""
    from torch.utils.flop_counter import sdpa_flop_count

    return int(sdpa_flop_count(query_shape, key_shape, value_shape))


def cpu_sdpa_backward_flop(grad_out_shape: Sequence[int], query_shape: Sequence[int],
                           key_shape: Sequence[int], value_shape: Sequence[int], *args: Any,
                           out_shape: Any = None, **kwargs: Any) -> int:
    """CPU flash SDPA backward: the CUDA kernels' formula (scores recomputed, then 4 matmuls)."""
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return int(sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape))


def custom_flop_mapping() -> dict[Any, Any]:
    """The ``custom_mapping`` for FlopCounterMode: CPU SDPA, grouped_mm and transformers' fallback."""
    import torch

    aten = torch.ops.aten
    mapping: dict[Any, Any] = {
        # The CPU flash kernel has the (query, key, value, ...) signature of the CUDA ones; the registered
        # formulas are already shape-wrapped, so our own thin functions call their shape counters.
        aten._scaled_dot_product_flash_attention_for_cpu: cpu_sdpa_flop,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: cpu_sdpa_backward_flop,
        aten._grouped_mm: grouped_mm_flop,
    }
    # Importing the module registers the custom ops (it is imported by the MoE models anyway).
    import transformers.integrations.moe  # noqa: F401

    ops = torch.ops.transformers
    if hasattr(ops, "grouped_mm_fallback"):
        mapping[ops.grouped_mm_fallback] = grouped_mm_fallback_flop
    if hasattr(ops, "grouped_mm_fallback_backward"):
        mapping[ops.grouped_mm_fallback_backward] = grouped_mm_fallback_backward_flop
    return mapping


def flop_counter_mode() -> Any:
    """A FlopCounterMode (no display, no module depth) with ``custom_flop_mapping``."""
    from torch.utils.flop_counter import FlopCounterMode

    return FlopCounterMode(display=False, custom_mapping=custom_flop_mapping())


def count_flops(run: Any) -> tuple[int, dict[str, int]]:
    """Run ``run()`` (a forward+backward) under the counter; return (global total, per-op totals).

    The global total is read, not the root module's: FlopCounterMode attributes backward FLOPs to modules
    unreliably, while its "Global" entry counts every op once.
    """
    counter = flop_counter_mode()
    with counter:
        run()
    per_op = {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return int(counter.get_total_flops()), per_op
