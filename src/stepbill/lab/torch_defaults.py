"""Framework defaults the seeds quote, read from (or measured on) the installed PyTorch.

- torch.utils.checkpoint preserves the RNG state by default (seed 000 §2.6): measured — dropout inside a
  checkpointed block gives the same gradients as without checkpointing under the same seed.
- DDP's default bucket is 25 MiB (seed 000 §7): read from torch.nn.parallel.distributed.
- The selective-checkpoint API names exist (seed 000 §7), and CheckpointPolicy's members in this version.

Needs torch (the `measure` extra); fails in one line without it.
"""

from __future__ import annotations

from typing import Any

from stepbill.errors import StepbillError

TORCH_MISSING = "lab torch-defaults reads the installed PyTorch: pip install 'stepbill[measure]'"


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise StepbillError(TORCH_MISSING) from None
    return torch


def checkpoint_preserves_rng(seed: int = 0) -> bool:
    """True when a checkpointed block with dropout, recomputed in backward, reproduces the forward's masks
    (its gradients equal the plain run's under the same seed): torch.utils.checkpoint's default behaviour."""
    torch = _torch()
    from torch.utils.checkpoint import checkpoint

    def grads(use_checkpoint: bool) -> Any:
        torch.manual_seed(seed)
        lin = torch.nn.Linear(16, 16)
        x = torch.randn(8, 16, requires_grad=True)

        def block(t: Any) -> Any:
            return torch.nn.functional.dropout(lin(t), p=0.5, training=True)

        y = checkpoint(block, x, use_reentrant=False) if use_checkpoint else block(x)
        y.square().sum().backward()
        return x.grad

    return bool(torch.equal(grads(True), grads(False)))


def ddp_bucket_cap_mib() -> float:
    """DistributedDataParallel's default bucket_cap_mb (MiB) in the installed torch."""
    _torch()
    import torch.nn.parallel.distributed as ddp

    return float(ddp._DEFAULT_BUCKET_CAP_MB)  # the value used when bucket_cap_mb=None


def checkpoint_api() -> dict[str, Any]:
    """Names of torch's activation-checkpoint API present in this version, and CheckpointPolicy's members."""
    torch = _torch()
    import torch.utils.checkpoint as ckpt

    policy = getattr(ckpt, "CheckpointPolicy", None)
    return {
        "torch_version": str(torch.__version__),
        "checkpoint": hasattr(ckpt, "checkpoint"),
        "create_selective_checkpoint_contexts": hasattr(ckpt, "create_selective_checkpoint_contexts"),
        "CheckpointPolicy": policy is not None,
        "checkpoint_policy_members": list(policy.__members__) if policy is not None else [],
    }
