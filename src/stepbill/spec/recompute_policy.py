"""The recompute policy of a recipe, parsed from one string (what the CLI and the API take).

    none                      keep every activation
    full                      keep each layer's input, rebuild the whole layer in its backward
    every:K | every:auto      keep the input of every K-th layer (segments of K layers); auto = the best K (≈ √L)
    selective:M1,M2,...       rebuild the tensors of Megatron's --recompute-modules names
    budget:SIZE               drop the tensors that fit the activation peak under SIZE (e.g. 40GiB, 512MiB,
                              2.5e10 bytes) at minimum recompute FLOPs (exact MILP)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stepbill.errors import StepbillError, unknown_name

POLICY_KINDS = ("none", "full", "every", "selective", "budget")

# Megatron-LM's --recompute-modules vocabulary (megatron/core/transformer/transformer_config.py).
MEGATRON_MODULES = ("core_attn", "layernorm", "mlp", "moe_act", "mla_up_proj", "shared_experts", "moe")

_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
          "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}


@dataclass(frozen=True)
class RecomputePolicy:
    """A parsed policy. `every` 0 means "choose K"; `budget_bytes` is the activation-peak budget."""

    kind: str
    every: int = 0
    modules: tuple[str, ...] = ()
    budget_bytes: float = 0.0

    def __str__(self) -> str:
        if self.kind == "every":
            return f"every:{self.every or 'auto'}"
        if self.kind == "selective":
            return "selective:" + ",".join(self.modules)
        if self.kind == "budget":
            return f"budget:{self.budget_bytes / 2**30:g}GiB"
        return self.kind


def parse_size(text: str) -> float:
    """"40GiB" → 40·2^30 bytes; binary (KiB…TiB) and decimal (KB…TB) units, bare numbers are bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise StepbillError(f"cannot read memory size {text!r}; write e.g. 40GiB, 512MiB or a byte count")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0:
        raise StepbillError(f"memory budget must be positive, got {text!r}")
    return value


def parse_recompute(text: str) -> RecomputePolicy:
    """Parse a policy string; bad input is a one-line StepbillError."""
    kind, sep, arg = text.strip().partition(":")
    if kind not in POLICY_KINDS:
        raise unknown_name("recompute policy", text, POLICY_KINDS)
    if kind in ("none", "full"):
        if sep:
            raise StepbillError(f"recompute policy {kind!r} takes no argument, got {text!r}")
        return RecomputePolicy(kind)
    if not arg:
        raise StepbillError(f"recompute policy {kind!r} needs an argument, e.g. "
                            + {"every": "every:4", "selective": "selective:core_attn,mlp",
                               "budget": "budget:40GiB"}[kind])
    if kind == "every":
        if arg == "auto":
            return RecomputePolicy(kind, every=0)
        if not arg.isdigit() or int(arg) <= 0:
            raise StepbillError(f"every:K needs a positive integer K (or auto), got {arg!r}")
        return RecomputePolicy(kind, every=int(arg))
    if kind == "selective":
        modules = tuple(dict.fromkeys(m.strip() for m in arg.split(",") if m.strip()))
        for m in modules:
            if m not in MEGATRON_MODULES:
                raise unknown_name("recompute module", m, MEGATRON_MODULES)
        if not modules:
            raise StepbillError("selective: needs at least one module name")
        return RecomputePolicy(kind, modules=modules)
    return RecomputePolicy(kind, budget_bytes=parse_size(arg))
