"""Build a transformers causal LM from a plain config dict, real or under FakeTensorMode.

The dict is what a transformers ``config.json`` holds (``model_type`` plus the family's keys); the
``stepbill.spec.hf.to_hf_config`` converter produces one from a ModelSpec. torch and transformers are
imported inside the functions so that ``import stepbill.measure`` works without the ``measure`` extra.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

from stepbill.errors import StepbillError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

Mode = Literal["real", "fake"]
Attention = Literal["sdpa", "eager"]
DType = Literal["fp32", "bf16"]

def require_torch() -> None:
    """Raise a one-line StepbillError when the optional ``measure`` extra is missing."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise StepbillError(
            f"measurement needs torch and transformers ({exc.name} missing): pip install 'stepbill[measure]'"
        ) from exc


def torch_dtype(dtype: DType) -> torch.dtype:
    """The torch dtype for a stepbill dtype name."""
    import torch

    table = {"fp32": torch.float32, "bf16": torch.bfloat16}
    if dtype not in table:
        raise StepbillError(f"unknown dtype {dtype!r}; choose fp32 or bf16")
    return table[dtype]


@contextlib.contextmanager
def hf_patches(*, force_grouped_mm_fallback: bool) -> Iterator[None]:
    """Patch transformers for a measurable step; everything is restored on exit.

    - ``masking_utils.find_packed_sequence_indices`` returns None: under fake tensors transformers cannot
      see that position ids are unpacked and builds a full 4-D mask; our batches are never packed, so
      None is also what the real run computes (this makes fake equal real to the byte).
    - ``integrations.moe._can_use_grouped_mm`` returns False when ``force_grouped_mm_fallback``: the
      ``aten._grouped_mm`` fake kernel only accepts bf16, so fp32 MoE experts use transformers' fallback
      (applied in real mode too so that both modes run the same code).
    """
    import transformers.masking_utils as masking_utils

    saved: list[tuple[Any, str, Any]] = [
        (masking_utils, "find_packed_sequence_indices", masking_utils.find_packed_sequence_indices)
    ]
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    if force_grouped_mm_fallback:
        import transformers.integrations.moe as moe

        saved.append((moe, "_can_use_grouped_mm", moe._can_use_grouped_mm))
        moe._can_use_grouped_mm = lambda *args, **kwargs: False
    try:
        yield
    finally:
        for module, name, value in reversed(saved):
            setattr(module, name, value)


def make_config(config_dict: dict[str, Any]) -> Any:
    """The transformers PretrainedConfig of a config dict, as given: no field is changed.

    Dropout, sliding windows and every other key keep the values the user trains with (``--dropout 0`` is
    applied to the dict before, by ``stepbill.check.model_and_config``). The KV cache is switched off per call
    (``use_cache=False`` in the forward) and the attention kernel chosen at build time, not by editing the
    config.
    """
    require_torch()
    from transformers import AutoConfig

    kwargs = dict(config_dict)
    model_type = kwargs.pop("model_type", None)
    if not model_type:
        raise StepbillError("config dict needs a 'model_type' (e.g. 'llama')")
    try:
        return AutoConfig.for_model(model_type, **kwargs)
    except ValueError as exc:
        raise StepbillError(f"transformers cannot build model_type {model_type!r}: {exc}") from exc


def effective_attention(config: Any, attention: Attention) -> Attention:
    """The attention transformers runs: "sdpa" falls back to "eager" for the classes that have no SDPA path
    (gemma2, gpt_oss in 5.24: soft-capping / sinks), as transformers' own default selection does."""
    if attention != "sdpa":
        return attention
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    cls = getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(config.model_type, ""), None)
    return "eager" if cls is not None and not getattr(cls, "_supports_sdpa", True) else "sdpa"


def build_model(
    config_dict: dict[str, Any],
    *,
    dtype: DType = "fp32",
    attention: Attention = "sdpa",
    fake_mode: FakeTensorMode | None = None,
    seed: int = 0,
    meta: bool = False,
    device: str = "cpu",
) -> torch.nn.Module:
    """Build ``AutoModelForCausalLM.from_config`` of the config as given, in training mode (dropout on).

    With ``fake_mode`` the parameters are fake tensors (no memory, any size); call inside ``hf_patches``
    only for the step, building needs no patch. ``meta=True`` builds on the meta device, in milliseconds at any
    size: for reading the built model back (its config, its parameter shapes), never for measuring (SDPA takes
    another path on meta). ``device`` (e.g. ``"cuda:0"``) builds real tensors there.
    """
    require_torch()
    import torch
    from transformers import AutoModelForCausalLM

    config = make_config(config_dict)
    torch.manual_seed(seed)
    ctx: Any = (torch.device("meta") if meta else fake_mode if fake_mode is not None
                else torch.device(device) if device != "cpu" else contextlib.nullcontext())
    with ctx:
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype(dtype),
                                                 attn_implementation=effective_attention(config, attention))
    if getattr(model, "loss_type", "") is None:  # GPT2LMHeadModel: transformers warns, then uses ForCausalLM
        model.loss_type = "ForCausalLM"  # the same loss, said up front: no warning leaks into check's output
    model.train()
    return model


def new_fake_mode() -> FakeTensorMode:
    """A FakeTensorMode that accepts real tensors created outside it (e.g. transformers' constants)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)


def decoder_layers(model: Any) -> list[Any]:
    """The decoder layers of a transformers causal LM (model.model.layers, or transformer.h / gpt_neox.layers)."""
    for path in ("model.layers", "transformer.h", "gpt_neox.layers"):
        obj = model
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        return list(obj)
    raise StepbillError(f"cannot find the decoder layers of {type(model).__name__}")
