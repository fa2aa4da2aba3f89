"""Reading a transformers config.json: the typed, bounded reader of its fields (HFConfig: one StepbillError line naming
the key, the value and what is allowed) and the fields every family shares (sizes, dropout, sliding windows, head
widths, rotary fraction, soft-caps). The per-family builders are in hf.py and hf_newer.py."""

from __future__ import annotations

from typing import Any

from stepbill.errors import StepbillError, shown
from stepbill.spec.hf_families import (
    ALIASES,
    DEFAULTS,
    FULL_EVERY,
    QWEN_FAMILIES,
    REQUIRED,
    SUPPORTED_MODEL_TYPES,
)
from stepbill.spec.schema import (
    EXPERTS,
    EXPERTS_OR_ZERO,
    HEADS,
    LAYERS,
    TOKENS,
    VOCAB,
    WIDTH,
    WIDTH_OR_ZERO,
    Int,
    IntTuple,
    Rule,
)

_MISSING = object()


#: The bound of every integer field read from a config (spec/schema.py); a key not listed is a width (WIDTH).
FIELD_RULES: dict[str, Rule] = {
    "vocab_size": VOCAB,
    "num_hidden_layers": LAYERS, "n_layer": LAYERS, "decoder_sparse_step": LAYERS,
    "first_k_dense_replace": Int(0, LAYERS.high),
    "max_position_embeddings": TOKENS, "n_positions": TOKENS,
    "num_attention_heads": HEADS, "n_head": HEADS, "num_key_value_heads": HEADS,
    "num_local_experts": EXPERTS, "n_routed_experts": EXPERTS, "num_experts_per_tok": EXPERTS,
    "num_experts": EXPERTS_OR_ZERO, "n_shared_experts": EXPERTS_OR_ZERO,
    "shared_expert_intermediate_size": WIDTH_OR_ZERO,
    "max_window_layers": Int(0, LAYERS.high),  # Qwen: the first layer index that slides (0: every layer)
}


LAYER_LIST = IntTuple(LAYERS.high - 1, LAYERS.high)


# ModelSpec dropout field -> the family's config key (see hf_families: "Fields that change what the step keeps").
_DROPOUT_KEYS: dict[str, dict[str, str]] = {
    "gpt2": {"attention_dropout": "attn_pdrop", "hidden_dropout": "resid_pdrop", "embedding_dropout": "embd_pdrop"},
    "gpt_neox": {"attention_dropout": "attention_dropout", "hidden_dropout": "hidden_dropout",
                 "embedding_dropout": "hidden_dropout"},
}


class HFConfig:
    """Typed, defaulted access to one config dict; every failure is a one-line StepbillError."""

    def __init__(self, data: dict[str, Any], family: str) -> None:
        self.data = data
        self.family = family
        self.defaults = DEFAULTS[family]
        self.aliases = ALIASES.get(family, {})
        for key in REQUIRED[family]:
            if self._lookup(key) is _MISSING:
                raise StepbillError(f"{family} config is missing {key!r}")

    def _lookup(self, key: str) -> Any:
        if key in self.data:
            return self.data[key]
        alias = self.aliases.get(key)
        if alias is not None and alias in self.data:
            return self.data[alias]
        return _MISSING

    def raw(self, key: str) -> Any:
        """The value as written, else the config class's default."""
        value = self._lookup(key)
        return self.defaults.get(key) if value is _MISSING else value

    def _bad(self, key: str, what: str, value: Any) -> StepbillError:
        return StepbillError(f"{self.family} config: {key} must be {what}, got {shown(value)}")

    def integer(self, key: str, *, nullable: bool = False) -> Any:
        """An integer field within its FIELD_RULES bound; None passes through only when nullable."""
        value = self.raw(key)
        if value is None and nullable:
            return None
        rule = FIELD_RULES.get(key, WIDTH)
        if not rule.accepts(value):
            raise self._bad(key, rule.allowed + (" or null" if nullable else ""), value)
        return value

    def flag(self, key: str) -> bool:
        value = self.raw(key)
        if not isinstance(value, bool):
            raise self._bad(key, "true or false", value)
        return value

    def fraction(self, value: Any, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise self._bad(key, "a number in [0, 1]", value)
        return float(value)

    def int_list(self, key: str) -> tuple[int, ...]:
        value = self.raw(key)
        if value is None:
            return ()
        if not isinstance(value, list) or not LAYER_LIST.accepts(value):
            raise self._bad(key, LAYER_LIST.allowed, value)
        return tuple(value)


def read_base(c: HFConfig, name: str) -> dict[str, Any]:
    """Fields every family states the same way."""
    return {
        "name": name,
        "family": c.family,
        "vocab_size": c.integer("vocab_size"),
        "hidden_size": c.integer("hidden_size" if c.family != "gpt2" else "n_embd"),
        "n_layers": c.integer("num_hidden_layers" if c.family != "gpt2" else "n_layer"),
        "max_position_embeddings": c.integer("max_position_embeddings" if c.family != "gpt2" else "n_positions"),
        "tied_embeddings": c.flag("tie_word_embeddings"),
        **read_dropouts(c),
    }


def dropout_config_key(family: str, field: str) -> str:
    """The config key of `family` that sets ModelSpec's dropout `field` (e.g. gpt2 attention_dropout: attn_pdrop)."""
    return _DROPOUT_KEYS.get(family, {}).get(field, field)


def dropout_config_keys(family: str) -> tuple[str, ...]:
    """The config keys holding a dropout probability that `family`'s causal LM applies."""
    if family not in SUPPORTED_MODEL_TYPES:
        raise StepbillError(f"unsupported model_type {family!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    return tuple(dict.fromkeys(_DROPOUT_KEYS.get(family, {"attention_dropout": "attention_dropout"}).values()))


def read_dropouts(c: HFConfig) -> dict[str, float]:
    """The dropout probabilities the family reads (null counts as 0, as transformers' modules treat it)."""
    keys = _DROPOUT_KEYS.get(c.family, {"attention_dropout": "attention_dropout"})
    return {name: c.fraction(0.0 if c.raw(key) is None else c.raw(key), key) for name, key in keys.items()}


def read_sliding(c: HFConfig, n_layers: int) -> dict[str, Any]:
    """sliding_window / sliding_layers as transformers builds them (rules in hf_families' docstring)."""
    f = c.family
    if f in ("mistral", "mixtral"):
        return {"sliding_window": c.integer("sliding_window", nullable=True)}  # every layer
    if f not in QWEN_FAMILIES or not c.flag("use_sliding_window"):
        return {}
    window = c.integer("sliding_window", nullable=True)
    types = c.data.get("layer_types")
    if window is None:
        return {}
    if types is not None and f != "qwen3_moe":
        layers = sliding_of_layer_types(c, types, n_layers)
    elif f in ("qwen2", "qwen3"):
        layers = tuple(range(c.integer("max_window_layers"), n_layers))
    elif f == "qwen2_moe":
        first_full = c.integer("max_window_layers")
        layers = tuple(i for i in range(min(first_full, n_layers)) if (i + 1) % 2)
    else:  # qwen3_moe
        layers = tuple(range(n_layers))
    return {"sliding_window": window, "sliding_layers": layers} if layers else {}


def heads_divide(c: HFConfig, hidden: int, heads: int) -> int:
    """hidden // heads, for the families that derive the head width from it (and fail otherwise)."""
    if hidden % heads:
        raise StepbillError(f"{c.family} config: num_attention_heads ({heads}) must divide hidden_size ({hidden})")
    return hidden // heads


def read_rotary_fraction(c: HFConfig, legacy_key: str, default: float) -> float:
    """Share of each head that gets rotary: rope_parameters / rope_scaling, else the legacy top-level key."""
    for rope_key in ("rope_scaling", "rope_parameters"):
        rope = c.data.get(rope_key)
        if isinstance(rope, dict) and "partial_rotary_factor" in rope:
            return c.fraction(rope["partial_rotary_factor"], f"{rope_key}.partial_rotary_factor")
    if legacy_key in c.data:
        return c.fraction(c.data[legacy_key], legacy_key)
    return default


def read_cap(c: HFConfig, key: str) -> float | None:
    """A soft-capping constant: null (none) or a positive number."""
    value = c.raw(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise c._bad(key, "a positive number or null", value)
    return float(value)


def read_sliding_layers(c: HFConfig, n_layers: int, window: int | None) -> tuple[int, ...]:
    """Indices of the sliding-window layers: from ``layer_types`` when given, else the family's default pattern
    (configuration_<family>.py __post_init__). A null window means no layer slides (the attention's
    sliding_window is config.sliding_window)."""
    types = c.raw("layer_types")
    if types is None:
        every = c.integer("sliding_window_pattern") if c.family == "gemma3_text" else FULL_EVERY[c.family]
        sliding = tuple(i for i in range(n_layers) if (i + 1) % every)
    else:
        sliding = sliding_of_layer_types(c, types, n_layers)
    return sliding if window is not None else ()


def sliding_of_layer_types(c: HFConfig, types: Any, n_layers: int) -> tuple[int, ...]:
    """The sliding layers' indices of a config's ``layer_types``: a list of `n_layers` 'sliding_attention' /
    'full_attention', else one error naming the key."""
    allowed = ("sliding_attention", "full_attention")
    if not isinstance(types, list) or len(types) != n_layers or any(t not in allowed for t in types):
        raise c._bad("layer_types", f"a list of {n_layers} 'sliding_attention' / 'full_attention'", types)
    return tuple(i for i, t in enumerate(types) if t == "sliding_attention")


def head_dim_or_derived(c: HFConfig, d: int, heads: int) -> int:
    """head_dim when config.json states it (null or absent: hidden // heads), as modeling_<family>.py reads it."""
    return c.integer("head_dim", nullable=True) or heads_divide(c, d, heads)
