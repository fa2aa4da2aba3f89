"""What the bill does not model yet about a model as configured, one line per field, and `--dropout 0`.

`check` builds the model exactly as its config says (dropout on, sliding windows in place); where the bill
assumes something else, `bill` and `check` print one of these lines and put it in their JSON (`unmodelled`),
instead of editing the model to fit the bill.
"""

from __future__ import annotations

import dataclasses

from stepbill.engine.activations.eager.dropout import attention_dropout_modelled
from stepbill.errors import StepbillError
from stepbill.spec.hf import SUPPORTED_MODEL_TYPES, dropout_config_key
from stepbill.spec.model import DROPOUT_FIELDS, ModelSpec

# What each dropout field drops (transformers' modules; see spec/hf_families.py).
_DROPPED = {
    "attention_dropout": "the attention probabilities",
    "hidden_dropout": "the attention and MLP outputs",
    "embedding_dropout": "the embedding output",
}


def _field_name(spec: ModelSpec, field: str) -> str:
    """The config key the user wrote (gpt2: attn_pdrop, ...), else the ModelSpec field."""
    return dropout_config_key(spec.family, field) if spec.family in SUPPORTED_MODEL_TYPES else field


def unmodelled(spec: ModelSpec) -> list[str]:
    """One line per configured field the bill does not model yet: the field, its value, what the bill assumes.

    Dropout is modelled by the eager convention (engine/activations/eager/dropout.py: masks, the dropped
    tensors kept, SDPA's kernel per device) except attention dropout in the attentions listed there as not
    modelled (MLA, transformers' eager attention, attention sinks); the ideal convention keeps no dropout masks
    by definition (its convention note says so)."""
    notes: list[str] = []
    fields: dict[str, str] = {}  # config key -> "key p (on what)"; GPT-NeoX's hidden_dropout covers two fields
    for field in DROPOUT_FIELDS:
        p = getattr(spec, field)
        key = _field_name(spec, field)
        if p > 0 and field == "attention_dropout" and not attention_dropout_modelled(spec):
            fields[key] = f"{key} {p:g} (on {_DROPPED[field]})"
    if fields:
        notes.append(f"{', '.join(fields.values())}: not modelled yet for {spec.family}'s attention, the bill "
                     "assumes no attention dropout (no mask, no dropped probabilities); --dropout 0 bills and "
                     "measures without dropout")
    # sliding_window: modelled (the eager convention's mask rows, engine/activations/eager/masks.py; windowed
    # attention FLOPs, engine/flops.py), so no line here.
    return notes


def apply_dropout_option(spec: ModelSpec, dropout: float | None, flag: str = "--dropout") -> ModelSpec:
    """`--dropout`: None keeps the configured probabilities; 0 sets every one to 0 (the only value accepted).
    `flag` spells the option in the message (``dropout`` for the Python API)."""
    if dropout is None:
        return spec
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or dropout != 0:
        raise StepbillError(f"{flag} takes only 0 (train without dropout), got {dropout!r}; without it the "
                            "config's own probabilities are used")
    return dataclasses.replace(spec, **dict.fromkeys(DROPOUT_FIELDS, 0.0))


DROPOUT_OFF_HEADER = "dropout: every probability set to 0 (--dropout 0), in the bill and the measured model"
