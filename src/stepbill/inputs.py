"""Cross-field checks of one bill's inputs (model × recipe), run by the CLI before the engine.

The field rules live on each input's dataclass (spec/schema.py); what needs two inputs at once lives here:
the sequence against learned positions, LoRA targets against the model's matrices, the LoRA rank against the
width of each targeted matrix. It reads the parameter inventory (engine/params.py), so it sits above spec/.
"""

from __future__ import annotations

from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec
from stepbill.spec.recipe import ALL_LINEAR, DEFAULT_LORA_TARGETS, LoRA, Recipe


def check_seq(spec: ModelSpec, seq_len: int) -> None:
    """A model with learned positions has a table of max_position_embeddings rows: no token beyond it."""
    if spec.positions == "learned" and seq_len > spec.max_position_embeddings:
        raise StepbillError(f"--seq {seq_len:,} exceeds the {spec.max_position_embeddings:,} learned positions of "
                            f"{spec.name} (a learned position table has no row beyond it)")


def lora_matrices(spec: ModelSpec) -> dict[str, int]:
    """Every 2-D weight's short name (q_proj, c_fc, ...) → its narrowest side (the largest useful LoRA rank)."""
    from stepbill.engine.params import param_inventory

    widths: dict[str, int] = {}
    for t in param_inventory(spec).tensors:
        if len(t.shape) == 2 and t.name.endswith(".weight"):
            short = t.name.removesuffix(".weight").split(".")[-1]
            widths[short] = min(widths.get(short, min(t.shape)), min(t.shape))
    return widths


def check_lora(spec: ModelSpec, lora: LoRA) -> None:
    """Every target names a matrix of the model, and the rank is at most each targeted matrix's narrow side."""
    if ALL_LINEAR in lora.targets:  # PEFT's shorthand: a string of its own, every Linear but the output layer
        if len(lora.targets) > 1:
            raise StepbillError(f"--lora-targets {ALL_LINEAR} stands alone (PEFT's shorthand), got "
                                f"{','.join(lora.targets)}")
        _check_all_linear_rank(spec, lora)
        return
    widths = lora_matrices(spec)
    unknown = [t for t in lora.targets if t not in widths]
    if unknown:
        given = "the default --lora-targets" if lora.targets == DEFAULT_LORA_TARGETS else "--lora-targets"
        raise StepbillError(f"{given} {', '.join(unknown)}: no such matrix in {spec.name} "
                            f"(matrices: {', '.join(sorted(widths))}; pass --lora-targets)")
    for target in lora.targets:
        if lora.rank > widths[target]:
            raise StepbillError(f"--lora-rank {lora.rank:,} exceeds the width of {target} ({widths[target]:,}): "
                                "a rank above min(in, out) adds parameters without adding rank")


def _check_all_linear_rank(spec: ModelSpec, lora: LoRA) -> None:
    from stepbill.engine.params import param_inventory

    for t in param_inventory(spec).tensors:
        if len(t.shape) == 2 and lora.targets_matrix(t.name, t.component) and lora.rank > min(t.shape):
            raise StepbillError(f"--lora-rank {lora.rank:,} exceeds the width of {t.name.removesuffix('.weight')} "
                                f"({min(t.shape):,}): a rank above min(in, out) adds parameters without adding rank")


def check_bill_inputs(spec: ModelSpec, recipe: Recipe) -> None:
    """All cross-field checks of a bill's inputs."""
    check_seq(spec, recipe.seq_len)
    if recipe.lora is not None:
        check_lora(spec, recipe.lora)
