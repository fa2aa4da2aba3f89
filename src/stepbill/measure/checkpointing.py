"""The recompute policies `check` measures beyond none and full, in PyTorch, as the bill models them; each a
non-reentrant activation checkpoint (torch.utils.checkpoint, use_reentrant=False).

every:K — the decoder layers in runs of K, each run one checkpoint: its input kept, its K layers rebuilt together in
the backward. Megatron-LM's uniform method (`--recompute-method uniform --recompute-num-layers K`); K = 1 is
transformers' gradient_checkpointing_enable, one checkpoint a layer.

The decoder loop of a transformers model still calls every layer: the first of a run calls the run's K layers
inside the checkpoint, with the arguments the loop gives it, and the others hand their input back. A run's layers
therefore take the first one's arguments — right when every layer gets the same (one attention mask, one rotary
table); a model whose layers differ in what they are given (sliding-window layers beside full ones: each gets its
own mask) is refused rather than measured with the wrong masks.

selective:core_attn — the attention core alone checkpointed (Megatron-LM's default `--recompute-modules core_attn`:
`_checkpointed_attention_forward`): transformers' SDPA attention function, looked up by every attention module in
ALL_ATTENTION_FUNCTIONS, is wrapped in a checkpoint for the step. Its inputs q, k, v stay (their producers save them
anyway) and so does its output, which the output projection saves; the core's own saved tensors (SDPA's logsumexp)
are rebuilt.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from stepbill.errors import StepbillError
from stepbill.measure.build import decoder_layers


def checkpoint_every(model: Any, k: int) -> None:
    """Make `model`'s decoder layers run in checkpointed runs of `k` (the last run shorter when k does not divide
    the layers). Changes the layer instances' forward only; parameters, modules and config stay as built."""
    import torch.utils.checkpoint as cp

    layers = decoder_layers(model)
    kinds = set(_layer_types(model.config)) | ({getattr(layer, "attention_type", None) for layer in layers} - {None})
    if len(kinds) > 1:
        raise StepbillError(f"check measures every:K on models whose layers all get the same inputs; "
                            f"{type(model).__name__}'s layers mix {' and '.join(sorted(map(str, kinds)))} (each "
                            "its own mask): measure --recompute full or none")
    for start in range(0, len(layers), k):
        run = layers[start:start + k]
        forwards = [layer.forward for layer in run]  # bound before any is replaced

        def first(hidden_states: Any, *args: Any, _forwards: list[Any] = forwards, **kwargs: Any) -> Any:
            def rebuilt(hidden: Any, *a: Any, **kw: Any) -> Any:
                for forward in _forwards:
                    hidden = forward(hidden, *a, **kw)
                return hidden

            return cp.checkpoint(rebuilt, hidden_states, *args, use_reentrant=False, **kwargs)

        run[0].forward = first
        for layer in run[1:]:
            layer.forward = _handed_on


def _layer_types(config: Any) -> list[str]:
    """transformers' per-layer attention types (config.layer_types: "full_attention", "sliding_attention", ...), of
    the text model's config where the model has one; [] when the config has none."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return list(getattr(text, "layer_types", None) or [])


def _handed_on(hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
    """A layer its run's first layer already ran: its input, which is that run's output."""
    return hidden_states


@contextlib.contextmanager
def attention_core_checkpointed() -> Iterator[None]:
    """selective:core_attn for the step: transformers' "sdpa" attention function wrapped in a non-reentrant
    checkpoint while the block runs, restored on exit (models built with attn_implementation="sdpa")."""
    import torch.utils.checkpoint as cp
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]

    def checkpointed(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
        return cp.checkpoint(sdpa, module, query, key, value, attention_mask, use_reentrant=False, **kwargs)

    ALL_ATTENTION_FUNCTIONS["sdpa"] = checkpointed
    try:
        yield
    finally:
        ALL_ATTENTION_FUNCTIONS["sdpa"] = sdpa
