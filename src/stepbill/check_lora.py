"""`stepbill check --lora-rank`: the PEFT setup a LoRA check measures, what it refuses, and its notes (no torch).

The model is wrapped by PEFT's `get_peft_model` (stepbill.measure.lora); the bill is the LoRA recipe of the same
rank and targets under the eager convention.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from stepbill.errors import StepbillError

#: `check --recipe qlora-nf4`: bitsandbytes' NF4 kernels need CUDA, and check measures on CPU.
QLORA_REFUSED = ("check cannot measure --recipe qlora-nf4: bitsandbytes' NF4 base weights need a CUDA device and "
                 "check measures on CPU; check LoRA on an unquantized base with --lora-rank")


def lora_setup(spec: Any, recipe: str, recompute: str, sharded: bool, rank: int | None,
               targets: str | tuple[str, ...] | None, alpha: float | None, dropout: float | None) -> Any:
    """The PEFT setup (measure.lora.PeftLoRA) of `check --lora-rank`, or None without LoRA; what check cannot
    measure under LoRA yet is refused in one line."""
    if rank is None:
        if targets is not None or alpha is not None or dropout is not None:
            raise StepbillError("--lora-targets, --lora-alpha and --lora-dropout need --lora-rank")
        return None
    if sharded:
        raise StepbillError("check measures LoRA in one process only: --lora-rank with --dp/--zero/--launch is not "
                            "supported yet")
    if recipe not in LORA_RECIPES:
        raise StepbillError(f"check measures LoRA under --recipe {' | '.join(LORA_RECIPES)}; {recipe} is not "
                            "measured under LoRA yet")
    if recompute not in LORA_RECOMPUTES:
        raise StepbillError(f"check measures LoRA under --recompute {' | '.join(LORA_RECOMPUTES)}; {recompute} is not "
                            "measured under LoRA yet")
    from stepbill.inputs import check_lora
    from stepbill.measure.lora import PeftLoRA, require_peft
    from stepbill.spec.recipe import ALL_LINEAR, DEFAULT_LORA_TARGETS, LoRA

    names = tuple(t.strip() for t in targets.split(",") if t.strip()) if isinstance(targets, str) else targets
    unmodelled: tuple[str, ...] = ()
    if recompute == "full":
        full_refusal(spec)
        unmodelled = tuple(full_unmodelled(recipe, LoRA(rank, names or DEFAULT_LORA_TARGETS)))
    lora = replace(PeftLoRA.for_recipe(recipe, rank, names, alpha, dropout, checkpointing=recompute == "full"),
                   unmodelled=unmodelled)
    named = tuple(t for t in lora.targets if t != ALL_LINEAR)  # PEFT's alias is a target of every model
    if named:
        check_lora(spec, LoRA(rank, named))
    require_peft()
    return lora


#: the recipes a LoRA check measures (pure-bf16 with bf16 adapters: PEFT's autocast_adapter_dtype=False; amp-bf16:
#: fp32 base and adapters under CPU bf16 autocast, whose cache keeps only the adapters' casts)
LORA_RECIPES = ("fp32", "pure-bf16", "amp-bf16")
#: the recompute policies a LoRA check measures (full: transformers' per-layer checkpointing, as measure.session
#: enables it before PEFT wraps the model)
LORA_RECOMPUTES = ("none", "full")


def full_refusal(spec: Any) -> None:
    """What `check --lora-rank R --recompute full` cannot hold to a measurement yet, refused in one line: MoE layers
    (their LoRA rows are an over-count already without recompute)."""
    if spec.moe is not None:
        raise StepbillError("check measures LoRA under --recompute full on dense models only: MoE layers' LoRA rows "
                            "are not modelled yet under recompute (tiny Mixtral q,v fp32: backward peak -8 %)")


def full_unmodelled(recipe: str, lora: Any) -> list[str]:
    """The line `check --lora-rank R --recompute full` prints when amp-bf16 adapts down_proj (all-linear does): the
    rebuild's moment at down's adapter is not modelled (measured as configured)."""
    if recipe != "amp-bf16" or not lora.targets_matrix("mlp.down_proj.weight", "ffn"):
        return []
    return ["amp-bf16 + --recompute full with an adapter on down_proj: the rebuild's moment at that adapter (PEFT's "
            "fp32 upcast of down's input beside the rebuilt layer) is not modelled by the bill yet (tiny Llama "
            "all-linear: backward peak -6.3 %; Llama-3.2-1B: within 8,192 B, its peak elsewhere); measured as "
            "configured"]


def bill_lora(lora: Any) -> dict[str, Any]:
    """make_recipe's LoRA keywords for a PeftLoRA (none without LoRA)."""
    return {} if lora is None else {"lora_rank": lora.rank, "lora_targets": lora.targets}


def lora_unmodelled(lora: Any) -> list[str]:
    """One line when the adapters' dropout is on: the bill does not model it yet (it is measured as configured); and
    the setup's own lines (full_unmodelled)."""
    if lora is None:
        return []
    if lora.dropout == 0:
        return list(lora.unmodelled)
    return [*lora.unmodelled, f"--lora-dropout {lora.dropout:g}: not modelled by the bill yet (it assumes PEFT's default 0, an "
            "nn.Identity; PEFT's nn.Dropout keeps a mask and the dropped copy of every adapted Linear's input); "
            "measured as configured"]


def lora_header(lora: Any) -> str:
    """The line `check --lora-rank` prints first: what PEFT was asked for."""
    alpha = "PEFT's default" if lora.alpha is None else f"{lora.alpha:g}"
    dtype = "" if lora.autocast_adapter_dtype else "; adapters kept bf16 (autocast_adapter_dtype=False)"
    ckpt = f"; {CHECKPOINTING}" if lora.checkpointing else ""
    return (f"LoRA by PEFT get_peft_model: r {lora.rank}, targets {','.join(lora.targets)}, alpha {alpha}, "
            f"dropout {lora.dropout:g}; base frozen, AdamW over the adapters only{dtype}{ckpt}")


#: what `check --lora-rank R --recompute full` runs, said in its header: the HF/PEFT fine-tuning path
CHECKPOINTING = ("checkpointing by transformers' gradient_checkpointing_enable(use_reentrant=False) before "
                 "get_peft_model, which with PEFT makes the embedding output require grad (enable_input_require_grads)"
                 ": layer 0 is rebuilt and saves as every layer")
