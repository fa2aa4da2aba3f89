"""One-line notes the bill's terminal and JSON output add where an option and a convention meet in a way the
engine's own convention notes do not say (no arithmetic: they read the bill's lines)."""

from __future__ import annotations

from stepbill.engine.activations.eager.eager_attention import eager_attention_modelled
from stepbill.engine.bill import Bill
from stepbill.engine.fit import Fit

#: `--attention eager` under the eager convention for the families eager/eager_attention.py does not model yet
#: (GPT-NeoX, Phi-3's fused qkv, MLA, sinks): their eager rows follow SDPA's kernels (activations/eager/attention.py).
EAGER_ATTENTION_UNMODELLED = (
    "--attention eager: {where} follows SDPA's kernels, not transformers' eager attention; the softmax output "
    "that attention keeps (B·H·S² per layer) is not modelled there yet (the ideal convention's figures include it)")


def attention_unmodelled(bill: Bill, fit: Fit | None = None) -> list[str]:
    """The `--attention eager` limitation of the eager convention, when this bill shows a figure made on it: its own
    rows (`--convention eager`) or the fit verdict (always judged on the eager convention when it can be)."""
    if bill.attention != "eager" or eager_attention_modelled(bill.model):  # eager/eager_attention.py models it
        return []
    if bill.convention == "eager":
        return [EAGER_ATTENTION_UNMODELLED.format(where="the eager convention")]
    if fit is not None and fit.convention == "eager":
        return [EAGER_ATTENTION_UNMODELLED.format(where="the fit verdict (judged on the eager convention)")]
    return []


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


def budget_note(bill: Bill) -> str:
    """What `--recompute budget:X` bounds when a parallel layout is given: the solver (engine/recompute) bounds the
    single-GPU view's activation peak of one micro-batch, which a rank's peak under tp / pp / cp is not."""
    recipe = bill.recipe
    if not recipe.recompute.startswith("budget:") or recipe.parallel.is_trivial:
        return ""
    return (f"recompute {recipe.recompute}: bounds the whole model's activations of one micro-batch on one GPU (the "
            "table above), not a GPU's peak under this layout (a rank keeps its stage's layers, about 1/(tp·cp) of "
            "each row, for every micro-batch in flight; see docs/plan.md 'budget')")
