"""selective:core_attn under the eager convention on SDPA's math path (on CPU: attention dropout, or MLA's unequal
q·k and v head widths): what the checkpoint around the core holds, and what its rebuild reruns — as measured with `check --recompute
selective:core_attn` (docs/accuracy.md, session 32).

A non-reentrant checkpoint (torch.utils.checkpoint, use_reentrant=False; Megatron-LM's
`_checkpointed_attention_forward` likewise) saves the tensors it is handed: SDPA's q, k and v, in the dtype they
arrive in (the core output's: SDPA returns its inputs' dtype). On the math path the core's own saved tensors are
fp32 copies (q·√scale, kᵀ·√scale, v at every query head, the B·H·S² probabilities), all rebuilt; the checkpoint's
inputs replace them. Where q, k and v reach SDPA as new tensors or as views of a storage nothing else keeps, they
cost exactly their own numbers: GPT-2 (learned positions, MHA) splits c_attn's output into three views, which
together are that whole storage; MLA builds q and k anew (its v, a view of kv_b_proj's output, is a row of its
own either way). Rotary MHA / GQA families on the math path (a Llama or GPT-NeoX given
attention dropout; GPT-NeoX's v is a view of its fused qkv output) keep the stand-ins of recompute/plan.py's
`module_rows` and are said in one line (report/notes.py) until measured.

The rebuild stops early: the non-reentrant checkpoint stops once the last saved tensor the backward needs is saved
again, and P·V, the math path's last op, saves only its inputs (P dropped, v) before it computes — so
FlopCounterMode counts no P·V in the rebuild (gpt2 at seq 512: +1.17 % FLOPs before this; MLA's math path +0.37 %).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from stepbill.engine.activations import ActTensor
from stepbill.engine.activations.eager.dtypes import dt_of
from stepbill.spec.model import ModelSpec
from stepbill.spec.recompute_policy import RecomputePolicy

#: The math path's scaled q and k: a checkpoint around the core holds the unscaled q and k instead, of the same
#: shape — recompute/plan.module_rows keeps them as stand-ins where `held_inputs` does not know the held inputs.
CORE_INPUT_STAND_INS = ("attn.q_scaled", "attn.k_scaled")
#: The math path's rows a checkpoint around the core rebuilds and replaces by the inputs it holds.
MATH_PATH_INPUTS = (*CORE_INPUT_STAND_INS, "attn.v_math")
#: The core's output as the output projection saves it: its dtype is SDPA's inputs' dtype.
_CORE_OUTPUT = "attn.o_in"


def checkpoints_attention_core(policy: RecomputePolicy) -> bool:
    """Whether the policy checkpoints the attention core alone (selective with core_attn): the question this module
    answers for the rows (recompute/plan.make_plan) and the eager timeline (memory/eager.eager_terms)."""
    return policy.kind == "selective" and "core_attn" in policy.modules


def held_inputs(spec: ModelSpec, rows: list[ActTensor], act: Any) -> tuple[list[ActTensor], tuple[str, ...]]:
    """(the rows of what the checkpoint holds, the rows they replace: rebuilt inside the core) where both are known
    (module docstring), `act` the activation bytes (eager/dtypes.dt_of). SDPA's math path: GPT-2's q, k and v (MHA,
    learned positions: three views of c_attn's output, each the math copy's width), MLA's q and k (new tensors; its
    v row, a view of kv_b_proj's output or its fp32 copy, stays as it is), in the core output's dtype. Rotary
    families under amp: q and k in the residual's dtype (fp32: RoPE's cos and sin take it), whose bf16 casts SDPA
    saves — autocast makes those inside the checkpoint, so they are rebuilt. ([], ()) elsewhere."""
    a = spec.attention
    by_name = {t.name: t for t in rows}
    dt = dt_of(act)
    if _CORE_OUTPUT in by_name and all(n in by_name for n in CORE_INPUT_STAND_INS):
        if a.kind == "mla":
            replaced: tuple[str, ...] = CORE_INPUT_STAND_INS
        elif spec.positions != "rotary" and (a.n_kv_heads or a.n_heads) == a.n_heads and "attn.v_math" in by_name:
            replaced = MATH_PATH_INPUTS
        else:
            return [], ()
        dtype = by_name[_CORE_OUTPUT].dtype_bytes
    elif spec.positions == "rotary" and dt.param != dt.compute and {"attn.q", "attn.k"} <= by_name.keys():
        replaced, dtype = ("attn.q", "attn.k"), dt.param
    else:
        return [], ()
    why = "the core's checkpoint (selective:core_attn): the SDPA input it was handed"
    return [replace(by_name[n], name=n.replace("_scaled", "").replace("_math", "") + "_held", dtype_bytes=dtype,
                    saved_for=why, op="attn.core_in") for n in replaced], replaced


def rebuild_skips_pv(rows: list[ActTensor], dropped: list[ActTensor]) -> bool:
    """Whether the rebuild of `dropped` (eager convention) stops before P·V: the core is rebuilt on SDPA's math
    path (its scaled q is a row; transformers' eager attention, whose last matmul would stop the same way, is not
    measured under core_attn: `check` refuses it)."""
    return "attn.q_scaled" in {t.name for t in rows} and any(t.op_id == "attn.core" for t in dropped)


def pv_flops_per_token(spec: ModelSpec, seq_len: int) -> float:
    """P·V of one token, full square (what FlopCounterMode counts): 2 · S · H · d_v."""
    a = spec.attention
    return 2.0 * seq_len * a.n_heads * a.v_dim
