"""BLOCK_ROWS entries of the eager convention (kept apart from the package's __init__ so that
engine.activations can register them while it is being imported)."""

from __future__ import annotations

from stepbill.engine.activations.eager.attention import mha_rows, mla_rows
from stepbill.engine.activations.eager.ffn import gelu_rows, swiglu_rows
from stepbill.engine.activations.eager.moe import moe_rows

BLOCKS = {"mha": mha_rows, "mla": mla_rows, "swiglu": swiglu_rows, "gelu_mlp": gelu_rows, "moe": moe_rows}
