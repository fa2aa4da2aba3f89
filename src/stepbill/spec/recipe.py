"""Recipe: how the model is trained — precision of each resident item, optimizer, batch, recompute, LoRA."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from stepbill.errors import StepbillError, unknown_name
from stepbill.spec.parallel import Parallel
from stepbill.spec.recompute_policy import RecomputePolicy, parse_recompute
from stepbill.spec.schema import BATCH, TOKENS, WIDTH, Names, check_fields, hash_once, unchecked_replace


@hash_once
@dataclass(frozen=True)
class Precision:
    """Bytes per parameter of each resident item. `master` 0 means no separate fp32 copy."""

    name: str
    weights: int
    grads: int
    master: int
    state: int  # bytes per element of each optimizer state (m, v, momentum ...)
    activation: int  # bytes per element of the tensors kept for backward
    description: str
    provenance: str = "derived"
    compute: str = "bf16"  # the GEMMs' dtype, whose peak times them (spec/hardware.py COMPUTE_DTYPES)
    frozen: int | None = None  # bytes per element of frozen, unquantised weights under LoRA; None: `weights`
    quant: str | None = None  # "nf4": frozen Linear weights stored 4-bit (engine/quant.py); LoRA required
    fp8: str | None = None  # "te" / "deepseek": whose fp8 convention the memory bill follows (engine/fp8.py)


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("mixed-bf16", 2, 2, 4, 4, 2,
                  "bf16 weights and grads, fp32 master and optimizer states (ZeRO's 2Ψ+2Ψ+12Ψ)",
                  "cited: ZeRO, arXiv 1910.02054"),
        Precision("fp32", 4, 4, 0, 4, 4, "everything fp32; the weights are the master copy", compute="fp32"),
        Precision("amp-bf16", 4, 4, 0, 4, 2,
                  "fp32 weights, grads and states; bf16 autocast for compute (casts are transient)"),
        Precision("fp32-grad-accum", 2, 4, 4, 4, 2, "mixed-bf16 with an fp32 gradient accumulator (18 B with AdamW)"),
        Precision("bf16-moments", 2, 4, 4, 2, 2,
                  "DeepSeek-V3: bf16 weights, fp32 grads and master, AdamW moments in bf16",
                  "cited: DeepSeek-V3 technical report, arXiv 2412.19437 §3.3"),
        Precision("adamw-8bit", 2, 2, 4, 1, 2, "mixed-bf16 with 8-bit optimizer states (block-wise quantised)",
                  "cited: 8-bit Optimizers, arXiv 2110.02861"),
        Precision("pure-bf16", 2, 2, 0, 2, 2, "bf16 weights, grads and states, no master (a bf16 model in plain PyTorch)"),
        # QLoRA: the frozen Linears in 4-bit NF4 with double-quantised constants, everything else of the base in
        # bf16, bf16 compute; the trainable adapters (weights / grads / states here) in fp32, PEFT's default
        # (get_peft_model autocast_adapter_dtype=True upcasts bf16 adapters to fp32). No master: fp32 already.
        Precision("qlora-nf4", 4, 4, 0, 4, 2,
                  "QLoRA: frozen Linears 4-bit NF4 + double-quantised constants, rest of the base bf16, fp32 LoRA "
                  "adapters (PEFT's default) with fp32 grads and AdamW states, bf16 compute",
                  "cited: QLoRA, arXiv 2305.14314 §3; bitsandbytes Linear4bit (blocksize 64)", frozen=2, quant="nf4"),
        # FP8 GEMMs, bf16 elsewhere, fp32 master. `fp8`: Transformer Engine's defaults (DelayedScaling, HYBRID:
        # E4M3 forward, E5M2 gradients, per-tensor scales); `fp8-deepseek`: DeepSeek-V3's (E4M3 everywhere, 1×128
        # activation tiles and 128×128 weight blocks, fp32 grads and master, bf16 AdamW moments).
        Precision("fp8", 2, 2, 4, 4, 2,
                  "Transformer Engine fp8 (DelayedScaling, HYBRID: E4M3 forward, E5M2 grads, per-tensor scaling): "
                  "fp8 GEMMs, bf16 weights and grads, fp32 master and states, an fp8 copy + transpose of each GEMM "
                  "weight",
                  "cited: Transformer Engine recipe.DelayedScaling defaults; Micikevicius et al., arXiv 2209.05433",
                  compute="fp8", fp8="te"),
        Precision("fp8-deepseek", 2, 4, 4, 2, 2,
                  "DeepSeek-V3 fp8: E4M3 GEMMs with 1×128 activation tiles and 128×128 weight blocks, bf16 weights, "
                  "fp32 grads and master, bf16 AdamW moments",
                  "cited: DeepSeek-V3 technical report, arXiv 2412.19437 §3.3", compute="fp8", fp8="deepseek"),
    )
}

OPTIMIZERS: dict[str, str] = {
    "adamw": "AdamW: first and second moment per parameter",
    "adam": "Adam: first and second moment per parameter",
    "sgd": "plain SGD: no state",
    "sgd-momentum": "SGD with momentum: one buffer per parameter",
    "lion": "Lion: one momentum per parameter",
    "adafactor": "Adafactor without momentum: second moment factored into row + column sums for matrices",
    "muon": "Muon on 2-D hidden matrices (one momentum), AdamW on the rest",
}
#: The bill's optimizers are torch.optim's at its default hyperparameters (what `stepbill check --optimizer` runs,
#: measure/optimizers.py): AdamW and Adam as torch defaults them (AdamW's decoupled weight decay 0.01, Adam's 0), SGD
#: without weight decay, sgd-momentum with momentum 0.9 (torch's default is 0) and neither dampening nor Nesterov,
#: Adafactor's (beta2_decay −0.8, no weight decay), Muon's (momentum 0.95, Nesterov, decoupled weight decay 0.1,
#: five Newton–Schulz steps in bf16) with AdamW's on the rest. Only the in-gradient (L2) weight decay of SGD and Adam
#: would change the step's temporaries (a weight-decayed copy of each gradient); at these defaults there is none.

DEFAULT_LORA_TARGETS = ("q_proj", "v_proj")
#: PEFT's alias (peft.utils.constants.INCLUDE_LINEAR_LAYERS_SHORTHAND): every linear layer but the output layer.
ALL_LINEAR = "all-linear"

#: How PyTorch runs an optimizer's update (torch.optim's foreach=False / foreach=True / fused=True). Only the eager
#: convention's timeline tells them apart (their temporaries during optimizer.step(): engine/memory/optimizer_step.py).
OPTIMIZER_IMPLS: dict[str, str] = {
    "single": "one parameter at a time (foreach=False): the temporaries of one tensor (and the previous one's) at a time",
    "foreach": "multi-tensor (foreach=True): temporaries of every tensor at once (AdamW: one copy of every state)",
    "fused": "fused kernel (fused=True): no temporaries",
}

#: The implementations torch.optim has for each optimizer the bill names (torch 2.13): SGD has all three
#: (torch/optim/sgd.py `_single_tensor_sgd`, `_multi_tensor_sgd`, `_fused_sgd`), Adafactor no fused kernel
#: (torch/optim/_adafactor.py), Muon one path (torch/optim/_muon.py `_single_tensor_muon`): for "muon" the
#: implementation names the AdamW that steps the rest; torch.optim has no Lion (empty).
TORCH_OPTIMIZER_IMPLS: dict[str, tuple[str, ...]] = {
    "adamw": ("single", "foreach", "fused"),
    "adam": ("single", "foreach", "fused"),
    "sgd": ("single", "foreach", "fused"),
    "sgd-momentum": ("single", "foreach", "fused"),
    "adafactor": ("single", "foreach"),
    "muon": ("single", "foreach", "fused"),
    "lion": (),
}
#: The optimizers torch.optim runs multi-tensor on CUDA when the user names no implementation: those whose functional
#: form asks `_default_to_fused_or_foreach` (torch/optim/optimizer.py) — Adam, AdamW, SGD, and the AdamW beside Muon.
#: Adafactor's runs foreach only when asked (torch/optim/_adafactor.py `adafactor`: `if foreach:`, None is False).
TORCH_CUDA_FOREACH = ("adam", "adamw", "sgd", "sgd-momentum", "muon")


def require_torch_path(optimizer: str, impl: str) -> None:
    """Refuse in one line an implementation torch.optim lacks for `optimizer` (Adafactor's fused); Lion, which
    torch.optim lacks altogether, is billed on any."""
    paths = TORCH_OPTIMIZER_IMPLS.get(optimizer, ())
    if paths and impl not in paths:
        raise StepbillError(f"torch.optim's {optimizer} has no {impl} implementation; choose "
                            f"--optimizer-impl {' or '.join(paths)}")


def default_optimizer_impl(optimizer: str, device: str) -> str:
    """How PyTorch runs `optimizer` when the user names no implementation, on `device`'s kernels: the multi-tensor
    path (foreach) when every parameter is on a device with foreach kernels — CUDA, not the CPU
    (torch/utils/_foreach_utils.py `_get_foreach_kernels_supported_devices`) — for the optimizers whose default asks
    for it (TORCH_CUDA_FOREACH; Muon: the AdamW beside it, Muon itself having one path), the for-loop one (single)
    else. Lion, which torch.optim lacks, keeps single (its temporaries are billed as AdamW's, unmeasured)."""
    return "foreach" if device == "cuda" and optimizer in TORCH_CUDA_FOREACH else "single"


#: The devices whose kernels the eager convention tells apart (engine/activations/eager/dropout.py).
DEVICES: dict[str, str] = {
    "cpu": "CPU kernels, what `stepbill check` measures: dropout keeps its mask in the input's dtype; attention "
    "dropout sends SDPA to its math path (fp32 S×S probabilities, mask and dropped copy kept)",
    "cuda": "CUDA kernels (not measured here): dropout keeps a 1-byte bool mask; SDPA's flash / memory-efficient "
    "kernels take attention dropout (no S×S tensor kept)",
}


@dataclass(frozen=True)
class LoRA:
    """Low-rank adapters of rank `rank` on every matrix whose name ends with one of `targets`."""

    rank: Annotated[int, WIDTH]
    targets: Annotated[tuple[str, ...], Names()] = DEFAULT_LORA_TARGETS

    def __post_init__(self) -> None:
        if isinstance(self.targets, list):  # a list from Python: kept as a tuple (the bill hashes its recipe)
            object.__setattr__(self, "targets", tuple(self.targets))
        check_fields(self, "lora", {"rank": "--lora-rank", "targets": "--lora-targets"})

    def targets_matrix(self, name: str, component: str = "") -> bool:
        """Whether the adapter wraps the weight matrix `name` (e.g. "attn.q_proj.weight"): its last name part is
        a target, or the targets are PEFT's "all-linear" (every nn.Linear but the output layer: not the embedding
        lookups, not the LM head; in transformers 5 MoE routers (TopKRouter modules) and routed experts (3-D
        parameters) are no nn.Linear either, so PEFT's tuners_utils._maybe_include_all_linear_layers skips them)."""
        if not name.endswith(".weight"):
            return False
        if ALL_LINEAR in self.targets:
            return component not in ("embedding", "lm_head", "norms", "experts", "router")
        return name.removesuffix(".weight").split(".")[-1] in self.targets


@hash_once
@dataclass(frozen=True)
class Recipe:
    """How one step is run: precision, optimizer, tokens per micro-batch, recompute, LoRA."""

    precision: Precision
    optimizer: str = "adamw"
    micro_batch: Annotated[int, BATCH] = 1
    seq_len: Annotated[int, TOKENS] = 2048
    recompute: str = "none"  # none | full | every:K | every:auto | selective:M1,M2 | budget:40GiB
    lora: LoRA | None = None
    parallel: Parallel = field(default_factory=Parallel)  # all-1: one GPU holds everything
    optimizer_impl: str = "single"  # single | foreach | fused (OPTIMIZER_IMPLS)
    # The device whose kernels the eager convention follows (dropout masks, SDPA with dropout: eager/dropout.py);
    # cpu by default, what `stepbill check` measures.
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_fields(self, "recipe", {"seq_len": "--seq", "micro_batch": "--micro-batch"})
        if self.optimizer not in OPTIMIZERS:
            raise unknown_name("optimizer", self.optimizer, OPTIMIZERS)
        if self.optimizer_impl not in OPTIMIZER_IMPLS:
            raise unknown_name("optimizer implementation", self.optimizer_impl, OPTIMIZER_IMPLS)
        require_torch_path(self.optimizer, self.optimizer_impl)
        if self.device not in DEVICES:
            raise unknown_name("device", self.device, DEVICES)
        parse_recompute(self.recompute)  # validates: none | full | every:K | selective:M,... | budget:SIZE
        if self.precision.quant is not None and self.lora is None:
            raise StepbillError(f"--recipe {self.precision.name} trains LoRA adapters on a frozen quantised base: "
                                "give --lora-rank (e.g. --lora-rank 16)")
        self._check_layout(self.parallel)

    def _check_layout(self, parallel: Parallel) -> None:
        """The one rule of a Recipe that reads its layout with another field."""
        if self.precision.quant is not None and not parallel.is_trivial:
            raise StepbillError(f"--recipe {self.precision.name} with a parallel layout is not modelled yet "
                                "(one GPU only)")

    def on_layout(self, parallel: Parallel) -> Recipe:
        """This recipe with `parallel` for its layout: equal to the Recipe built with every field again, without
        checking again the fields it keeps (checked when this one was made; a Parallel checks its own when it is
        made), only the rule that reads the layout with them. What a planner does for each candidate, millions of
        times: make_recipe costs about 3 µs, this copy about 1.2 µs (timeit, this machine)."""
        self._check_layout(parallel)
        return unchecked_replace(self, parallel=parallel)

    @property
    def recompute_policy(self) -> RecomputePolicy:
        """The parsed recompute policy (see spec/recompute_policy.py for the grammar)."""
        return parse_recompute(self.recompute)

    @property
    def tokens(self) -> int:
        """Tokens in one micro-batch."""
        return self.micro_batch * self.seq_len

    @property
    def tokens_per_step(self) -> int:
        """Tokens in one optimizer step: dp replicas × micro-batches per step × tokens per micro-batch."""
        return self.parallel.dp * self.parallel.micro_batches * self.tokens


def precision(name: str) -> Precision:
    """The named precision recipe."""
    if name not in PRECISIONS:
        raise unknown_name("recipe", name, PRECISIONS)
    return PRECISIONS[name]


def make_recipe(
    recipe: str = "mixed-bf16",
    optimizer: str = "adamw",
    micro_batch: int = 1,
    seq_len: int = 2048,
    recompute: str = "none",
    lora_rank: int | None = None,
    lora_targets: tuple[str, ...] | None = None,
    parallel: Parallel | None = None,
    optimizer_impl: str = "single",
    device: str = "cpu",
) -> Recipe:
    """A Recipe from plain names and numbers (what the CLI and the API take)."""
    lora = None
    if lora_rank is not None:
        lora = LoRA(lora_rank, DEFAULT_LORA_TARGETS if lora_targets is None else tuple(lora_targets))
    elif lora_targets is not None:
        raise StepbillError("--lora-targets needs --lora-rank")
    return Recipe(precision(recipe), optimizer, micro_batch, seq_len, recompute, lora, parallel or Parallel(),
                  optimizer_impl, device)
