"""Hugging Face config.json <-> ModelSpec for the families stepbill supports."""

from __future__ import annotations

from typing import Any

from stepbill.errors import StepbillError
from stepbill.spec.model import AttentionSpec, FFNSpec, ModelSpec

SUPPORTED_MODEL_TYPES = ("llama",)


def from_hf_config(config: dict[str, Any], name: str = "custom") -> ModelSpec:
    """ModelSpec from the dict of a transformers config.json."""
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise StepbillError(
            f"unsupported model_type {model_type!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    heads = config["num_attention_heads"]
    return ModelSpec(
        name=name,
        family=model_type,
        vocab_size=config["vocab_size"],
        hidden_size=config["hidden_size"],
        n_layers=config["num_hidden_layers"],
        attention=AttentionSpec(
            n_heads=heads,
            n_kv_heads=config.get("num_key_value_heads", heads),
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            qkv_bias=config.get("attention_bias", False),
            out_bias=config.get("attention_bias", False),
        ),
        ffn=FFNSpec(config["intermediate_size"], "swiglu", config.get("mlp_bias", False)),
        max_position_embeddings=config.get("max_position_embeddings", 2048),
        tied_embeddings=config.get("tie_word_embeddings", False),
    )


def to_hf_config(spec: ModelSpec) -> dict[str, Any]:
    """A transformers config dict that builds `spec` (used by `check` and the parameter-count tests)."""
    raise NotImplementedError("to_hf_config is written with the loader for each family")
