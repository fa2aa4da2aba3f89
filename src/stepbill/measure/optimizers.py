"""The torch.optim optimizer(s) a measured step runs for each optimizer the bill names, at the hyperparameters the
bill assumes (spec/recipe.py, after OPTIMIZERS): torch.optim's defaults, sgd-momentum's momentum 0.9 (torch's
default is 0), and for "muon" torch.optim.Muon on the hidden 2-D matrices with torch.optim.AdamW on the rest (the
split engine/states.optimizer_state_elements bills, ParamTensor.is_matrix: embeddings and the LM head go to AdamW).

`measurable` refuses in one line, without torch, what torch.optim cannot run: Lion (no torch.optim.Lion), an
implementation an optimizer lacks (Adafactor's fused); `build` refuses Muon on 3-D expert banks.
"""

from __future__ import annotations

from typing import Any

from stepbill.errors import StepbillError, unknown_name
from stepbill.spec.recipe import OPTIMIZERS, TORCH_OPTIMIZER_IMPLS, require_torch_path

#: sgd-momentum's momentum factor (the buffer's bytes do not depend on it; torch.optim.SGD's default is 0).
SGD_MOMENTUM = 0.9


def measurable(optimizer: str, impl: str) -> None:
    """Refuse in one StepbillError line an optimizer or implementation torch.optim cannot run."""
    if optimizer not in OPTIMIZERS:
        raise unknown_name("optimizer", optimizer, OPTIMIZERS)
    impls = TORCH_OPTIMIZER_IMPLS[optimizer]
    if not impls:
        raise StepbillError(f"torch.optim has no {optimizer.capitalize()}, so check cannot measure it; "
                            f"`stepbill bill --optimizer {optimizer}` bills it (its step temporaries unmeasured)")
    require_torch_path(optimizer, impl)


def refuse_optimizer(optimizer: str, impl: str, sharded: bool, drop: str) -> None:
    """`measurable`, and one line for an optimizer other than AdamW beyond one process: the sharded and launched
    measurements step AdamW (measure/sharded.py, measure/distributed.py); `drop` names their options."""
    measurable(optimizer, impl)
    if sharded and optimizer != "adamw":
        raise StepbillError(f"--optimizer {optimizer} is measured in one process (the sharded runs step AdamW); "
                            f"drop {drop}")


def describe(optimizer: str, impl: str) -> str:
    """One line naming what a check of `optimizer` runs (its torch.optim classes, settings and path)."""
    path = {"single": "foreach=False", "foreach": "foreach=True", "fused": "fused=True"}[impl]
    return {
        "adamw": f"torch.optim.AdamW ({path})",
        "adam": f"torch.optim.Adam ({path})",
        "sgd": f"torch.optim.SGD ({path}; no momentum, no weight decay)",
        "sgd-momentum": f"torch.optim.SGD (momentum {SGD_MOMENTUM}, {path})",
        "adafactor": f"torch.optim.Adafactor ({path})",
        "muon": f"torch.optim.Muon on the hidden 2-D matrices, torch.optim.AdamW ({path}) on the rest",
    }[optimizer] + ", torch's defaults otherwise"


def torch_flags(optimizer: str, impl: str) -> dict[str, bool]:
    """The foreach / fused keywords of `optimizer`'s torch.optim class for the path `impl` names (single is
    foreach=False, the CPU's default)."""
    measurable(optimizer, impl)
    if optimizer == "adafactor":  # no `fused` keyword
        return {"foreach": impl == "foreach"}
    return {"foreach": impl == "foreach", "fused": impl == "fused"}


def muon_matrices(model: Any, params: list[Any]) -> list[Any]:
    """The parameters Muon steps: 2-D, and not an embedding table or the LM head (ParamTensor.is_matrix)."""
    import torch

    tables = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        tables.add(id(head.weight))
    return [p for p in params if p.ndim == 2 and id(p) not in tables]


def build(optimizer: str, impl: str, model: Any, params: list[Any], lr: float) -> tuple[Any, ...]:
    """The torch.optim optimizers stepping `params` of `model` as the bill's `optimizer` with path `impl`, in the
    order they step (Muon first, then AdamW on the rest: torch.optim.Muon's docstring example)."""
    import torch

    flags = torch_flags(optimizer, impl)
    if optimizer == "adamw":
        return (torch.optim.AdamW(params, lr=lr, **flags),)
    if optimizer == "adam":
        return (torch.optim.Adam(params, lr=lr, **flags),)
    if optimizer == "sgd":
        return (torch.optim.SGD(params, lr=lr, **flags),)
    if optimizer == "sgd-momentum":
        return (torch.optim.SGD(params, lr=lr, momentum=SGD_MOMENTUM, **flags),)
    if optimizer == "adafactor":
        return (torch.optim.Adafactor(params, lr=lr, **flags),)
    assert optimizer == "muon"
    if any(p.ndim > 2 for p in params):
        raise StepbillError("torch.optim.Muon takes 2-D parameters only; this model's routed experts are 3-D banks, "
                            "which the bill gives Muon one matrix per expert: not measurable")
    matrices = muon_matrices(model, params)
    ids = {id(p) for p in matrices}
    rest = [p for p in params if id(p) not in ids]
    return (torch.optim.Muon(matrices, lr=lr),) + ((torch.optim.AdamW(rest, lr=lr, **flags),) if rest else ())
