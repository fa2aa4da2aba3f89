"""BLOCK_ROWS entries of the eager convention (kept apart from the package's __init__ so that
engine.activations can register them while it is being imported)."""

from __future__ import annotations

from collections.abc import Callable

from stepbill.engine.activations.eager.attention import mha_rows, mla_rows
from stepbill.engine.activations.eager.dropout import attention_dropout, residual_dropout
from stepbill.engine.activations.eager.eager_attention import eager_attention_forward_rows, eager_attention_modelled
from stepbill.engine.activations.eager.families import require_eager_rows
from stepbill.engine.activations.eager.ffn import gelu_rows, swiglu_rows
from stepbill.engine.activations.eager.gemma import (
    EAGER_ATTENTION_FAMILIES,
    eager_attention_rows,
    post_attention_norm,
    post_ffn_norm,
)
from stepbill.engine.activations.eager.gpt_oss import gpt_oss_moe_rows, sink_attention_rows
from stepbill.engine.activations.eager.moe import moe_rows
from stepbill.engine.activations.rows import ActTensor
from stepbill.spec.model import ModelSpec

Builder = Callable[[ModelSpec, int], list[ActTensor]]


def _modelled(builder: Builder) -> Builder:
    """`builder`, refusing (one line) the families whose eager rows are not modelled yet."""
    def rows(spec: ModelSpec, act: int) -> list[ActTensor]:
        require_eager_rows(spec)
        return builder(spec, act)

    rows.__name__ = rows.__qualname__ = builder.__name__
    rows.__doc__ = builder.__doc__
    return rows


def mha_with_post_norm(spec: ModelSpec, act: int) -> list[ActTensor]:
    """mha_rows (Gemma2: its eager attention), and Gemma's sandwich norm on the attention output (eager/gemma.py)."""
    if spec.attention.sinks:
        return sink_attention_rows(spec, act)
    core = eager_attention_rows if spec.family in EAGER_ATTENTION_FAMILIES else mha_rows
    rows = attention_dropout(spec, act, core(spec, act))  # CPU with attention dropout: SDPA's math path
    return rows + post_attention_norm(spec, act) + residual_dropout("attn", spec, act, "mha")


def mha_eager_attention(spec: ModelSpec, act: int) -> list[ActTensor]:
    """`--attention eager`: transformers' eager_attention_forward (eager/eager_attention.py) where modelled, else
    mha_with_post_norm's rows (SDPA's; the bill says so in a note)."""
    if not eager_attention_modelled(spec):
        return mha_with_post_norm(spec, act)
    return (eager_attention_forward_rows(spec, act) + post_attention_norm(spec, act)
            + residual_dropout("attn", spec, act, "mha"))


def moe_of_family(spec: ModelSpec, act: int) -> list[ActTensor]:
    """moe_rows, or gpt-oss's biased experts with the clamped SwiGLU (eager/gpt_oss.py)."""
    m = spec.moe
    gpt_oss = m is not None and (m.expert_bias or m.swiglu_limit is not None)
    return gpt_oss_moe_rows(spec, act) if gpt_oss else moe_rows(spec, act)


def swiglu_with_post_norm(spec: ModelSpec, act: int) -> list[ActTensor]:
    """swiglu_rows (GeGLU alike), and Gemma's sandwich norm on the MLP output (eager/gemma.py)."""
    return swiglu_rows(spec, act) + post_ffn_norm(spec, act, "swiglu") + residual_dropout("mlp", spec, act, "swiglu")


def gelu_with_dropout(spec: ModelSpec, act: int) -> list[ActTensor]:
    """gelu_rows, and the dropout on the MLP output (GPT-2 resid_pdrop, GPT-NeoX hidden_dropout)."""
    return gelu_rows(spec, act) + residual_dropout("mlp", spec, act, "gelu_mlp")


BLOCKS = {name: _modelled(builder) for name, builder in
          {"mha": mha_with_post_norm, "mla": mla_rows, "swiglu": swiglu_with_post_norm, "gelu_mlp": gelu_with_dropout,
           "moe": moe_of_family}.items()}
#: The eager convention's attention blocks under `--attention eager` (rows.layer_rows reads them under "eager_attention").
EAGER_ATTENTION_BLOCKS = {"mha": _modelled(mha_eager_attention)}
