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

# What each not-yet-modelled family's eager forward keeps that the measured families' rows do not describe.
MISSING: dict[str, str] = {
    "gpt_oss": "attention sinks, biased experts with the clamped SwiGLU, the router bias and the sliding-window "
               "mask",
}


def require_eager_rows(spec: ModelSpec) -> None:
    """Raise a one-line StepbillError when `spec.family`'s eager rows are not modelled yet."""
    missing = MISSING.get(spec.family)
    if missing:
        raise StepbillError(f"the eager convention does not model {spec.family} yet ({missing}); "
                            "use --convention ideal")


def require_no_window_mask(spec: ModelSpec, seq_len: int) -> None:
    """Raise a one-line StepbillError where a sliding window is shorter than the sequence.

    Measured on CPU (transformers 5.24, phi3, window 16 < seq 64): the window then becomes an explicit mask,
    and SDPA keeps it (B × 1 × S × S in the compute dtype, shared by the layers of one attention type) and
    GQA-expanded copies of k and v instead of the kv-head views — not modelled yet. Below the window the mask
    is skipped (masking_utils._ignore_causal_mask_sdpa: kv_length < local_attention_size) and the rows are
    those of full causal attention."""
    a = spec.attention
    if spec.family in EAGER_ATTENTION_FAMILIES:
        return  # eager attention always builds the mask and never keeps it (recompute none): nothing changes
    if a.sliding_layers and a.sliding_window is not None and seq_len >= a.sliding_window:
        raise StepbillError(
            f"the eager convention does not model {spec.family}'s sliding-window mask yet (seq {seq_len} ≥ "
            f"sliding_window {a.sliding_window}: SDPA keeps a B·S² mask and GQA-expanded k/v); use --convention "
            f"ideal or seq < {a.sliding_window}")


def require_modelled_step(spec: ModelSpec, seq_len: int, recompute: str) -> None:
    """The step-level checks of the eager convention (engine/memory/eager.eager_terms): the sliding-window mask,
    and — for the eager-attention families — the attention masks that checkpoints keep under recompute."""
    require_no_window_mask(spec, seq_len)
    if spec.family in EAGER_ATTENTION_FAMILIES and recompute != "none":
        raise StepbillError(
            f"the eager convention does not model {spec.family} with recompute {recompute!r} yet (its checkpoints "
            "keep eager attention's B·S² masks); use --convention ideal or recompute none")
