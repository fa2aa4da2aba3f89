"""One measurable training setup: model, optimizer (AdamW by default), inputs and the transformers training step.

Shared by ``step`` (MemTracker, FLOPs), ``saved`` (saved-tensor hooks) and ``verify`` (the allocator
route), so that every measurement runs exactly the same step.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from stepbill.errors import StepbillError
from stepbill.measure.build import Attention, Mode, build_model, hf_patches, new_fake_mode, require_torch
from stepbill.spec.recompute_policy import RecomputePolicy, parse_recompute

Recipe = Literal["fp32", "pure-bf16", "amp-bf16"]
OptimizerImpl = Literal["single", "foreach", "fused"]
Recompute = str  # a --recompute string check measures: `measured_policy`
Phase = Literal["forward", "backward", "optimizer"]

RECIPES: tuple[str, ...] = ("fp32", "pure-bf16", "amp-bf16")
OPTIMIZER_IMPLS: tuple[str, ...] = ("single", "foreach", "fused")
PHASES: tuple[Phase, ...] = ("forward", "backward", "optimizer")


#: The recompute policies check measures (beyond full: measure/checkpointing.py).
MEASURED = "none, full, every:K (K >= 1) or selective:core_attn"


def measured_policy(recompute: str) -> RecomputePolicy:
    """The policy of `recompute` as the bill reads it (spec/recompute_policy.parse_recompute) when check can measure
    it — none, full, every:K, selective:core_attn (bare `selective` is core_attn, Megatron's default) — else one
    StepbillError line."""
    try:
        policy = parse_recompute(recompute)
    except StepbillError as exc:
        raise StepbillError(f"check measures --recompute {MEASURED}; got {recompute!r} ({exc})") from None
    if (policy.kind in ("none", "full") or (policy.kind == "every" and policy.every)
            or (policy.kind == "selective" and policy.modules == ("core_attn",))):
        return policy
    raise StepbillError(f"check measures --recompute {MEASURED}; got {recompute!r}")


def refuse_beyond_one_process(recompute: str, sharded: bool, flag: str, drop: str) -> None:
    """Check `recompute` (measured_policy) and refuse every:K and selective:core_attn when the check is `sharded`:
    they are measured in one process; `flag` and `drop` name the options as the caller spells them."""
    if measured_policy(recompute).kind in ("every", "selective") and sharded:
        raise StepbillError(f"{flag} {recompute} is measured in one process; drop {drop} or use full")


def _noop(phase: Phase) -> None:
    return None


@dataclass
class StepSession:
    """Model, optimizer and input ids of one recipe, real or fake; ``iteration()`` runs one training step.

    Use as a context manager: it enters the FakeTensorMode (fake runs) and the transformers patches.
    """

    config_dict: dict[str, Any]
    recipe: Recipe = "fp32"
    optimizer_impl: OptimizerImpl = "single"
    micro_batch: int = 1
    seq_len: int = 128
    recompute: Recompute = "none"
    mode: Mode = "real"
    attention: Attention = "sdpa"
    lr: float = 1e-4
    #: the bill's optimizer name (spec/recipe.OPTIMIZERS) as torch.optim runs it (measure/optimizers.py)
    optimizer_name: str = "adamw"
    #: LoRA through PEFT (a measure.lora.PeftLoRA): the built model is wrapped by `get_peft_model`, AdamW gets the
    #: adapters only.
    lora: Any = None
    model: Any = field(init=False, default=None)
    #: the torch.optim optimizers in the order they step (two for muon: Muon, then AdamW on the rest)
    optimizers: tuple[Any, ...] = field(init=False, default=())
    input_ids: Any = field(init=False, default=None)
    _stack: contextlib.ExitStack = field(init=False, default_factory=contextlib.ExitStack)

    def __post_init__(self) -> None:
        _check_choice("recipe", self.recipe, RECIPES)
        _check_choice("optimizer_impl", self.optimizer_impl, OPTIMIZER_IMPLS)
        from stepbill.measure.optimizers import measurable

        measurable(self.optimizer_name, self.optimizer_impl)
        if self.optimizer_name == "adafactor" and self.mode == "fake":
            raise StepbillError("torch.optim.Adafactor reads values in its step (`.item()`: _adafactor.py:377), which "
                                "fake tensors do not have: measure it with real tensors (--real, a smaller model)")
        if measured_policy(self.recompute).kind == "selective" and self.attention != "sdpa":
            raise StepbillError("selective:core_attn is measured on SDPA attention (the attention function "
                                "transformers looks up); drop --attention eager")
        _check_choice("mode", self.mode, ("real", "fake"))
        _check_choice("attention", self.attention, ("sdpa", "eager"))
        if self.micro_batch < 1 or self.seq_len < 1:
            raise StepbillError(f"micro_batch and seq_len must be positive, got {self.micro_batch}, {self.seq_len}")

    @property
    def param_dtype(self) -> Literal["fp32", "bf16"]:
        """pure-bf16 keeps bf16 parameters (and so bf16 grads and AdamW states); the others fp32."""
        return "bf16" if self.recipe == "pure-bf16" else "fp32"

    def __enter__(self) -> StepSession:
        require_torch()  # one StepbillError line naming the `measure` extra, not a raw ModuleNotFoundError
        import torch

        fake_mode = new_fake_mode() if self.mode == "fake" else None
        self.model = build_model(
            self.config_dict, dtype=self.param_dtype, attention=self.attention, fake_mode=fake_mode
        )
        policy = measured_policy(self.recompute)
        if policy.kind == "full":
            # transformers 5 renames it activation_checkpointing_enable (FutureWarning); same behaviour.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        elif policy.kind == "every":
            from stepbill.measure.checkpointing import checkpoint_every

            checkpoint_every(self.model, policy.every)
        elif policy.kind == "selective":
            from stepbill.measure.checkpointing import attention_core_checkpointed

            self._stack.enter_context(attention_core_checkpointed())
        # fp32 MoE experts need transformers' grouped_mm fallback (aten._grouped_mm fakes bf16 only); amp
        # keeps fp32 expert weights too, since grouped_mm is not autocast-enabled.
        self._stack.enter_context(hf_patches(force_grouped_mm_fallback=self.param_dtype == "fp32"))
        if self.lora is not None:
            from stepbill.measure.lora import wrap

            self.model = wrap(self.model, self.lora, fake_mode)
        if fake_mode is not None:
            self._stack.enter_context(fake_mode)
        from stepbill.measure.optimizers import build

        trainable = [p for p in self.model.parameters() if p.requires_grad]  # all of them but under LoRA
        self.optimizers = build(self.optimizer_name, self.optimizer_impl, self.model, trainable, self.lr)
        vocab = int(self.model.config.vocab_size)
        gen = torch.Generator().manual_seed(0) if fake_mode is None else None
        self.input_ids = torch.randint(0, vocab, (self.micro_batch, self.seq_len), generator=gen)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """bf16 autocast for amp-bf16 (its weight-cast cache lives until the block exits), else nothing."""
        import torch

        if self.recipe == "amp-bf16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def forward_loss(self) -> Any:
        """The forward of transformers' training step; returns the loss, the outputs are dropped.

        Dropping ``outputs`` (logits) before backward is what the HF Trainer does (``compute_loss`` keeps
        only the loss), so logits live on only where the loss's graph saved them.
        """
        with self.autocast():
            outputs = self.model(input_ids=self.input_ids, labels=self.input_ids, use_cache=False)
            loss = outputs.loss
            del outputs
        return loss

    def iteration(self, on_phase: Callable[[Phase], None] = _noop) -> None:
        """One training step, the HF Trainer's: ``model.train()`` (dropout active, as configured), the forward
        keeping only the loss (``compute_loss``), ``loss.backward()``, then ``optimizer.step()`` and
        ``zero_grad(set_to_none=True)``; the Trainer's gradient clipping (``max_grad_norm``) and LR scheduler are
        not run. ``on_phase(p)`` is called at the start of each phase and never after the last (callers close
        the optimizer phase themselves)."""
        self.model.train()
        on_phase("forward")
        loss = self.forward_loss()
        on_phase("backward")
        loss.backward()
        del loss
        on_phase("optimizer")
        for optimizer in self.optimizers:
            optimizer.step()
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)

    def forward_backward(self) -> None:
        """Forward and backward only (the FLOPs pass); gradients are dropped afterwards."""
        loss = self.forward_loss()
        loss.backward()
        del loss
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)


def adamw_flags(impl: str) -> dict[str, bool]:
    """torch.optim.AdamW's flags for the path `impl` names: single is foreach=False (the CPU's default; CUDA's is
    foreach), foreach, fused."""
    _check_choice("optimizer_impl", impl, OPTIMIZER_IMPLS)
    from stepbill.measure.optimizers import torch_flags

    return torch_flags("adamw", impl)


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise StepbillError(f"unknown {name} {value!r}; choose one of {', '.join(choices)}")


@contextlib.contextmanager
def open_session(config_dict: dict[str, Any], **kwargs: Any) -> Iterator[StepSession]:
    """``with open_session(cfg, recipe=..., ...) as s:`` — a StepSession, entered."""
    session = StepSession(config_dict, **kwargs)
    with session:
        yield session
