"""Which families the eager convention models, and what is missing for the others (one line, never silent).

The eager rows are read off each family's transformers modeling code and held to MemTracker on tiny models
(tests/measure/test_eager_families.py). A family whose blocks have no measured rows yet raises a
StepbillError naming the family and the missing pieces, so `bill --convention eager` says so in one line
while the ideal convention and the parameter counts keep working.
"""

from __future__ import annotations

from stepbill.engine.activations.eager.gemma import EAGER_ATTENTION_FAMILIES
from stepbill.errors import StepbillError
from stepbill.spec.model import ModelSpec

# What each not-yet-modelled family's eager forward keeps that the measured families' rows do not describe
# (empty today: every family the loader reads has measured rows; a new family starts here).
MISSING: dict[str, str] = {}

# The issue-14 features, with the families whose transformers code the eager rows follow for each. A spec of
# another family (e.g. "custom") with one of them has no measured code path to follow.
FEATURE_FAMILIES: dict[str, tuple[str, ...]] = {
    "sandwich / post norm placement": ("gemma2", "gemma3_text", "olmo2"),
    "(1 + w) RMSNorm": ("gemma2", "gemma3_text"),
    "attention soft-capping": ("gemma2",),
    "final logit soft-capping": ("gemma2",),
    "attention sinks": ("gpt_oss",),
    "fused qkv / gate_up projections": ("phi3",),
    "biased experts / clamped SwiGLU": ("gpt_oss",),
    "whole-projection qk-norm": ("olmo2",),
    "GeGLU": ("gemma2", "gemma3_text"),
}


def _features(spec: ModelSpec) -> list[str]:
    a, m = spec.attention, spec.moe
    used = {
        "sandwich / post norm placement": spec.norm_placement != "pre",
        "(1 + w) RMSNorm": spec.norm_weight_offset,
        "attention soft-capping": a.logit_softcap is not None,
        "final logit soft-capping": spec.final_logit_softcap is not None,
        "attention sinks": a.sinks,
        "fused qkv / gate_up projections": a.fused_qkv or spec.ffn.fused_gate_up,
        "biased experts / clamped SwiGLU": m is not None and (m.expert_bias or m.swiglu_limit is not None),
        "whole-projection qk-norm": a.qk_norm and a.qk_norm_scope == "projection",
        "GeGLU": spec.ffn.kind == "swiglu" and spec.ffn.glu_act != "silu",
    }
    return [f for f, on in used.items() if on and spec.family not in FEATURE_FAMILIES[f]]


def require_eager_rows(spec: ModelSpec) -> None:
    """Raise a one-line StepbillError when `spec.family`'s eager rows are not modelled yet, or when a spec of
    another family uses a feature whose eager rows follow one family's transformers code."""
    missing = MISSING.get(spec.family)
    if missing:
        raise StepbillError(f"the eager convention does not model {spec.family} yet ({missing}); "
                            "use --convention ideal")
    foreign = _features(spec)
    if foreign:
        raise StepbillError(f"the eager convention models {', '.join(foreign)} only as transformers' code of "
                            f"{', '.join(sorted({x for f in foreign for x in FEATURE_FAMILIES[f]}))} does, not for "
                            f"family {spec.family!r}; use --convention ideal")


# The recompute policies the eager convention models for the eager-attention families: their masks' lifetimes
# (eager/masks.checkpoint_held) are traced without checkpoints and with transformers' one checkpoint a layer.
EAGER_ATTENTION_POLICIES = ("none", "full")


def require_modelled_step(spec: ModelSpec, seq_len: int, recompute: str) -> None:
    """The step-level checks of the eager convention (engine/memory/eager.eager_terms): for the eager-attention
    families (gemma2, gpt_oss), the recompute policies whose checkpoints are modelled with the attention masks they
    keep (none and full: eager/masks.py). every:K's runs (check measures a run's layers with its first layer's mask)
    and selective / budget checkpoints inside a layer (of eager attention, not SDPA's function) are not."""
    kind = recompute.split(":", 1)[0]
    if spec.family in EAGER_ATTENTION_FAMILIES and kind not in EAGER_ATTENTION_POLICIES:
        raise StepbillError(
            f"the eager convention models {spec.family} with recompute none or full only, not {recompute!r} (its "
            "eager attention's masks inside other checkpoints are not traced); use --convention ideal")
