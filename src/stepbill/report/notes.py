"""One-line notes the bill's terminal and JSON output add where an option and a convention meet in a way the
engine's own convention notes do not say (no arithmetic: they read the bill's lines)."""

from __future__ import annotations

from stepbill.engine.activations.eager.eager_attention import eager_attention_modelled
from stepbill.engine.bill import Bill
from stepbill.engine.fit import Fit
from stepbill.engine.recompute.core_attn import checkpoints_attention_core
from stepbill.spec.recompute_policy import parse_recompute

#: `--attention eager` under the eager convention for the families eager/eager_attention.py does not model yet
#: (GPT-NeoX, Phi-3's fused qkv, MLA, sinks): their eager rows follow SDPA's kernels (activations/eager/attention.py).
EAGER_ATTENTION_UNMODELLED = (
    "--attention eager: {where} follows SDPA's kernels, not transformers' eager attention; the softmax output "
    "that attention keeps (B·H·S² per layer) is not modelled there yet (the ideal convention's figures include it)")


#: selective:core_attn under the eager convention: what PyTorch keeps with the attention core checkpointed was
#: measured equal to the rows (`check --recompute selective:core_attn`, docs/accuracy.md) on these families only;
#: on the others the checkpointed core may keep or free tensors the rows do not follow yet.
CORE_ATTN_MEASURED = ("llama", "qwen3", "mixtral", "gpt_neox", "gpt2", "deepseek_v2", "gemma3_text")
CORE_ATTN_UNMODELLED = (
    "--recompute {policy}: {where} drops the attention core's saved tensors as measured on "
    + ", ".join(CORE_ATTN_MEASURED[:-1]) + f" and {CORE_ATTN_MEASURED[-1]} (docs/accuracy.md); {{family}}'s "
    "checkpointed core may keep others — not measured yet")


def attention_unmodelled(bill: Bill, fit: Fit | None = None) -> list[str]:
    """The attention limitations of the eager convention, when this bill shows a figure made on it: its own rows
    (`--convention eager`) or the fit verdict (always judged on the eager convention when it can be): `--attention
    eager` where eager/eager_attention.py does not model it, selective:core_attn on a family it was not measured on."""
    if bill.convention == "eager":
        where = "the eager convention"
    elif fit is not None and fit.convention == "eager":
        where = "the fit verdict (judged on the eager convention)"
    else:
        return []
    notes = []
    if bill.attention == "eager" and not eager_attention_modelled(bill.model):
        notes.append(EAGER_ATTENTION_UNMODELLED.format(where=where))
    policy = parse_recompute(bill.recipe.recompute)  # as the bill read it: bare `selective` is core_attn
    if checkpoints_attention_core(policy) and bill.model.family not in CORE_ATTN_MEASURED:
        notes.append(CORE_ATTN_UNMODELLED.format(policy=bill.recipe.recompute, where=where, family=bill.model.family))
    return notes


def counted_flops_note(bill: Bill) -> str:
    """Why FlopCounterMode's count can fall below the causal figure: under full / every-K recompute PyTorch's
    non-reentrant checkpoint stops early and does not rerun the trailing matmul of each checkpointed layer (or run of
    layers) (engine/flops.py)."""
    lines = bill.lines
    counted, bill_recompute = lines["flops.recompute_noncausal"].value, lines["flops.recompute"].value
    if counted >= bill_recompute:
        return ""
    per = "run of layers" if bill.recipe.recompute.startswith("every") else "layer"
    return (f" (its recompute is smaller: the checkpoint's early stop does not rerun each {per}'s trailing down "
            "projection)")


def mfu_note(bill: Bill) -> str:
    """Why MFU can pass 100 %: it divides PaLM's model FLOPs (the whole S×S attention square) by the time of the
    step the rank executes (causal attention, half the square), so an `--efficiency` near 1 on an attention-heavy
    step reads above 100 % (gpt3-125m, --efficiency 1: 113.3 %, causal 100.1 %). Said, not clamped: both are the
    conventions' own numbers (engine/timing/step_terms.py)."""
    if bill.time is None or bill.time["time.mfu"].value <= 1.0:
        return ""
    return (f"MFU {bill.time['time.mfu'].value:.1%} is above 100 %: PaLM's model FLOPs count the whole attention "
            f"square, the step runs causal attention (half of it); causal MFU {bill.time['time.mfu_causal'].value:.1%}")


def budget_note(bill: Bill) -> str:
    """What `--recompute budget:X` bounds when a parallel layout is given: the solver (engine/recompute) bounds the
    single-GPU view's activation peak of one micro-batch, which a rank's peak under tp / pp / cp is not."""
    recipe = bill.recipe
    if not recipe.recompute.startswith("budget:") or recipe.parallel.is_trivial:
        return ""
    return (f"recompute {recipe.recompute}: bounds the whole model's activations of one micro-batch on one GPU (the "
            "table above), not a GPU's peak under this layout (a rank keeps its stage's layers, about 1/(tp·cp) of "
            "each row, for every micro-batch in flight; see docs/plan.md 'budget')")
