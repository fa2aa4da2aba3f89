"""The recompute policy of a recipe, parsed from one string (what the CLI and the API take).

    none                      keep every activation
    full                      keep each layer's input, rebuild the whole layer in its backward
    every:K | every:auto      keep the input of every K-th layer (segments of K layers); auto = the best K (≈ √L)
    selective:M1,M2,...       rebuild the tensors of Megatron's --recompute-modules names; a bare `selective` is
                              Megatron-LM's default set, core_attn (TransformerConfig.__post_init__: recompute_modules
                              None → ["core_attn"]; Korthikanti et al., arXiv 2205.05198)
    budget:SIZE               drop the tensors that fit the activation peak under SIZE (e.g. 40GiB, 512MiB,
                              2.5e10B; a bare number is GiB: budget:10 = 10 GiB) at minimum recompute FLOPs
                              (exact: engine/recompute/budget.py)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stepbill.errors import StepbillError, shown, unknown_name
from stepbill.spec.schema import LAYERS

POLICY_KINDS = ("none", "full", "every", "selective", "budget")

# Megatron-LM's --recompute-modules vocabulary (megatron/core/transformer/transformer_config.py).
MEGATRON_MODULES = ("core_attn", "layernorm", "mlp", "moe_act", "mla_up_proj", "shared_experts", "moe")

_UNITS = {"": 2**30, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
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


#: Largest memory size accepted: 2^60 bytes (1 EiB).
MAX_SIZE_BYTES = 2**60


def parse_size(text: str) -> float:
    """"40GiB" → 40·2^30 bytes: binary (KiB…TiB) and decimal (KB…TB) units, B for bytes; a bare number is GiB."""
    m = re.fullmatch(r"\s*([0-9]{0,30}\.?[0-9]{1,30}(?:[eE][+-]?[0-9]{1,3})?)\s*([a-zA-Z]{0,3})\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise StepbillError(f"cannot read memory size {shown(text)}; write e.g. 40GiB, 512MiB, 2.5e10B "
                            "(a bare number is GiB)")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not 0 < value <= MAX_SIZE_BYTES:
        raise StepbillError(f"memory size {shown(text)} must lie in (0, 2^60] bytes (1 EiB)")
    return value


def parse_recompute(text: str) -> RecomputePolicy:
    """Parse a policy string; bad input is a one-line StepbillError."""
    kind, sep, arg = text.strip().partition(":")
    if kind not in POLICY_KINDS:
        raise unknown_name("recompute policy", text, POLICY_KINDS)
    if kind in ("none", "full"):
        if sep:
            raise StepbillError(f"recompute policy {kind!r} takes no argument, got {shown(text)}")
        return RecomputePolicy(kind)
    if kind == "selective" and not sep:  # Megatron-LM's --recompute-granularity selective alone
        arg = "core_attn"
    if not arg:
        raise StepbillError(f"recompute policy {kind!r} needs an argument, e.g. "
                            + {"every": "every:4", "selective": "selective:core_attn,mlp",
                               "budget": "budget:40GiB"}[kind])
    if kind == "every":
        if arg == "auto":
            return RecomputePolicy(kind, every=0)
        if not re.fullmatch(r"[0-9]{1,5}", arg) or not 0 < int(arg) <= LAYERS.high:
            raise StepbillError(f"every:K needs an integer K in [1, {LAYERS.high:,}] (or auto), got {shown(arg)}")
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
