"""Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (arXiv 2205.05198).

Their per-layer activation formula for a GPT block with fp16 activations, dropout masks and an eager
attention that stores the a·s² scores: s·b·h·(34 + 5·a·s/h) bytes. Selective recompute drops the 5·a·s/h
part (softmax, its dropout, scores) and pays the attention core again: s/(6h + s) of the step in their
(full-square) accounting, s/(12h + s) causal-halved. Their numbers, reproduced: GPT-3 175B saves 70 % for
2.7 %, MT-NLG 530B 65 % for 1.6 %.
"""

from __future__ import annotations

from typing import Any

from stepbill.engine.line import Line, cited

PROVENANCE = cited("Korthikanti et al., arXiv 2205.05198 §4 (Table 2, eq. 1-2)")


def activation_bytes_per_layer(seq_len: Any, micro_batch: Any, hidden: Any, heads: Any) -> Any:
    """s·b·h·(34 + 5·a·s/h) bytes: their per-layer activations without parallelism or recompute."""
    return seq_len * micro_batch * hidden * (34 + 5 * heads * seq_len / hidden)


def selective_saving(seq_len: Any, hidden: Any, heads: Any) -> Any:
    """Share of activation memory selective recompute removes: (5as/h) / (34 + 5as/h)."""
    x = 5 * heads * seq_len / hidden
    return x / (34 + x)


def selective_overhead(seq_len: Any, hidden: Any, causal: bool = False) -> Any:
    """Extra step compute of recomputing the attention core: its share of the layer's forward,
    s/(6h + s) in the paper's full-square count, s/(12h + s) causal-halved."""
    return seq_len / ((12 if causal else 6) * hidden + seq_len)


def korthikanti_lines(seq_len: int, hidden: int, heads: int) -> list[Line]:
    inputs = {"s": seq_len, "h": hidden, "a": heads}
    return [
        Line("korthikanti.selective_saving", selective_saving(seq_len, hidden, heads), "1",
             "(5as/h) / (34 + 5as/h)", inputs, PROVENANCE),
        Line("korthikanti.selective_overhead", selective_overhead(seq_len, hidden), "1", "s / (6h + s)",
             inputs, PROVENANCE, "full-square attention (the paper's)"),
        Line("korthikanti.selective_overhead_causal", selective_overhead(seq_len, hidden, True), "1",
             "s / (12h + s)", inputs, PROVENANCE, "causal-halved attention"),
    ]
