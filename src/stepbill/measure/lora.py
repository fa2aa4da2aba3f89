"""A transformers model wrapped with PEFT's LoRA, as `peft.get_peft_model` builds it (the `measure` extra).

`check --lora-rank R` measures this model: the base frozen by PEFT (every parameter but the adapters has
requires_grad False), an A [in → r] and B [r → out] pair on every targeted Linear, AdamW over the adapters only.
Nothing in PEFT's `LoraConfig` is changed but what the user gives (rank, targets, alpha, dropout); PEFT's own
defaults hold otherwise (peft 0.21: lora_alpha 8, lora_dropout 0.0, bias "none", adapters upcast to fp32 when the
base is bf16/fp16, `autocast_adapter_dtype=True`), except that `--recipe pure-bf16` keeps its adapters bf16
(`autocast_adapter_dtype=False`), as the recipe says.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from stepbill.errors import StepbillError, require_extra
from stepbill.spec.recipe import ALL_LINEAR, DEFAULT_LORA_TARGETS


@dataclass(frozen=True)
class PeftLoRA:
    """What `check` asks PEFT for: rank, target module names (or PEFT's "all-linear"), alpha (None: PEFT's
    default) and the adapters' dropout probability (PEFT's default 0.0: an nn.Identity)."""

    rank: int
    targets: tuple[str, ...] = DEFAULT_LORA_TARGETS
    alpha: float | None = None
    dropout: float = 0.0
    #: PEFT's get_peft_model(autocast_adapter_dtype=...): True (its default) upcasts bf16/fp16 adapters to fp32;
    #: `check --recipe pure-bf16` passes False so that the adapters, their grads and AdamW states are bf16 as the
    #: recipe says.
    autocast_adapter_dtype: bool = True
    #: `check --recompute full`: the model's gradient checkpointing is on when PEFT wraps it (measure.session calls
    #: transformers' gradient_checkpointing_enable(use_reentrant=False) first); both transformers and PEFT's
    #: get_peft_model then call enable_input_require_grads, a hook that makes the embedding output require grad —
    #: what a PEFT + Trainer fine-tuning run does. Recorded for the header and JSON settings.
    checkpointing: bool = False
    #: what the bill does not model in this setup, one line each (check_lora.full_unmodelled); printed as notes
    unmodelled: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise StepbillError(f"--lora-rank must be a positive integer, got {self.rank!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise StepbillError(f"--lora-dropout must be in [0, 1), got {self.dropout!r}")
        if self.alpha is not None and not 0 < self.alpha < float("inf"):
            raise StepbillError(f"--lora-alpha must be positive, got {self.alpha!r}")

    @classmethod
    def for_recipe(cls, recipe: str, rank: int, targets: tuple[str, ...] | None = None, alpha: float | None = None,
                   dropout: float | None = None, checkpointing: bool = False) -> PeftLoRA:
        """The PEFT setup `check --recipe RECIPE --lora-rank R` measures (pure-bf16: bf16 adapters)."""
        return cls(rank, targets or DEFAULT_LORA_TARGETS, alpha, 0.0 if dropout is None else float(dropout),
                   autocast_adapter_dtype=recipe != "pure-bf16", checkpointing=checkpointing)

    def settings(self) -> dict[str, Any]:
        """The flat JSON settings of a LoRA check (scalars only)."""
        return {"lora_rank": self.rank, "lora_targets": ",".join(self.targets), "lora_alpha": self.alpha,
                "lora_dropout": self.dropout, "peft_autocast_adapter_dtype": self.autocast_adapter_dtype,
                "peft_input_require_grads": self.checkpointing}


def require_peft() -> None:
    """One line naming the `measure` extra when peft is missing."""
    require_extra("peft", "check --lora-rank (a PEFT-wrapped model)")


def lora_config(lora: PeftLoRA) -> Any:
    """PEFT's LoraConfig for `lora`: only the given fields are set."""
    require_peft()
    from peft import LoraConfig

    targets: Any = ALL_LINEAR if ALL_LINEAR in lora.targets else list(lora.targets)
    kwargs: dict[str, Any] = {"r": lora.rank, "target_modules": targets, "lora_dropout": lora.dropout}
    if lora.alpha is not None:
        kwargs["lora_alpha"] = lora.alpha
    return LoraConfig(**kwargs)


def wrap(model: Any, lora: PeftLoRA, fake_mode: Any = None) -> Any:
    """`peft.get_peft_model(model, LoraConfig(...))`; under `fake_mode` the adapters are fake tensors too."""
    config = lora_config(lora)
    from peft import get_peft_model

    with contextlib.ExitStack() as stack:
        if fake_mode is not None:
            stack.enter_context(fake_mode)
            stack.enter_context(_cast_adapters_in_place())
        try:
            peft_model = get_peft_model(model, config, autocast_adapter_dtype=lora.autocast_adapter_dtype)
        except ValueError as exc:  # e.g. a target module that does not exist
            raise StepbillError(f"peft cannot wrap the model: {str(exc).splitlines()[0]}") from None
    peft_model.train()
    return peft_model


@contextlib.contextmanager
def _cast_adapters_in_place() -> Iterator[None]:
    """Under fake tensors `nn.Module.to` must swap every parameter (``torch.utils.swap_tensors``), which fails on
    a fake one ("Couldn't swap Linear.weight"); PEFT calls it to give a new adapter (and the LoRA layer replacing
    a Linear) the base layer's device and dtype. While wrapping, a `to` that keeps the device (the CPU: fake
    tensors live there too) casts floating tensors through ``tensor.data`` instead, so the adapters end with the
    dtypes a real run gives them (PEFT's fp32 upcast of bf16 adapters, autocast_adapter_dtype, follows as usual);
    any other `to` runs unchanged."""
    import torch
    from torch import nn

    original = nn.Module.to

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        device, dtype, *_ = torch._C._nn._parse_to(*args, **kwargs)
        tensors = [*self.parameters(), *self.buffers()]
        if device is not None and any(t.device != torch.device(device) for t in tensors):
            return original(self, *args, **kwargs)
        for t in tensors:
            if dtype is not None and t.is_floating_point() and t.dtype != dtype:
                t.data = t.data.to(dtype)
        return self

    nn.Module.to = to  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.to = original  # type: ignore[method-assign]


def trainable_parameters(model: Any) -> tuple[int, int]:
    """(trainable, all) parameters as PEFT counts them (`PeftModel.get_nb_trainable_parameters`)."""
    trainable, total = model.get_nb_trainable_parameters()
    return int(trainable), int(total)


class _NoHook:
    """A hook handle with nothing to remove."""

    def remove(self) -> None:
        return None


def skip_frozen_grad_hooks(tracker: Any, model: Any) -> None:
    """MemTracker registers a gradient hook on every parameter of a module it enters, which raises for a frozen
    one ("cannot register a hook on a tensor that doesn't require gradient"); a frozen parameter never gets a
    gradient, so it is marked as hooked already (its PARAM bytes are still tracked)."""
    for param in model.parameters():
        if not param.requires_grad:
            tracker._param_to_grad_hook_handles[param] = (_NoHook(), _NoHook())
