"""What AdamW costs in memory: the 16-byte ledger per parameter, resident GiB, FSDP sharding, per-step traffic.

Units: bytes per parameter (B/param); GiB = 2**30 B. Mixed-precision layout: bf16 weight and gradient (2 + 2),
fp32 master weight, m and v (4 + 4 + 4).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from stepbill.lab import _check

GIB = 2**30
# Source: seed 002 §02 and seed 000 §3.1: 4 B are the model (bf16 w + g), 12 B the optimizer (master, m, v).
ADAMW_BYTES = {"weight (bf16)": 2, "gradient (bf16)": 2, "master (fp32)": 4, "m (fp32)": 4, "v (fp32)": 4}
MODEL_KEYS = ("weight (bf16)", "gradient (bf16)")


def bytes_split() -> tuple[int, int]:
    """(model, optimizer) bytes per parameter: (4, 12). Source: seed 002 §02."""
    model = sum(ADAMW_BYTES[k] for k in MODEL_KEYS)
    return model, sum(ADAMW_BYTES.values()) - model


def resident_gib(params: npt.ArrayLike, bytes_per_param: float = 16.0, shards: int = 1) -> np.ndarray | float:
    """Weights + gradients + optimizer state per GPU, in GiB: bytes·P/N (N = FSDP shards; 1 = no sharding).

    Source: seed 002 §02 (7B: 104 GiB; 70B: 1,043 GiB; FSDP over 2: 52.2 GiB).
    """
    shards = _check.count("shards", shards)
    out = np.asarray(params, dtype=float) * bytes_per_param / shards / GIB
    return float(out) if out.ndim == 0 else out


def optimizer_step_traffic() -> dict[str, int]:
    """Bytes per parameter the fused AdamW step moves: reads g, master, m, v (2+4+4+4) and writes master, m, v
    and the bf16 working copy (4+4+4+2) = 28; the forward reads only the bf16 weight = 2. Source: seed 002 §08."""
    reads = ADAMW_BYTES["gradient (bf16)"] + 4 + 4 + 4
    writes = 4 + 4 + 4 + ADAMW_BYTES["weight (bf16)"]
    return {"optimizer_read": reads, "optimizer_write": writes, "optimizer": reads + writes, "forward": 2}
