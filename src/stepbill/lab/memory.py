"""What AdamW costs in memory, in the words of seed 002 §02/§08: the 4 | 12 split of the 16-byte ledger,
resident GiB (sharded over N GPUs), and the bytes one optimizer step moves per parameter.

The ledger itself is the engine's (stepbill.engine.states): this module only frames it for the lab.
Units: bytes per parameter (B/param); GiB = 2**30 B.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from stepbill.engine.states import bytes_per_param, resident_bytes
from stepbill.lab import _check
from stepbill.spec.recipe import precision

GIB = 2**30
MIXED = bytes_per_param(precision("mixed-bf16"), "adamw")  # weights 2, grads 2, master 4, m 4, v 4


def bytes_split() -> tuple[int, int]:
    """(model, optimizer) bytes per parameter: bf16 weight + grad = 4, fp32 master + m + v = 12."""
    model = MIXED["weights"] + MIXED["grads"]
    return int(model), int(sum(MIXED.values()) - model)


def resident_gib(params: npt.ArrayLike, bytes_per_parameter: float = 16.0, shards: int = 1) -> np.ndarray | float:
    """Weights + gradients + optimizer state per GPU, in GiB: bytes·P/N (N = FSDP shards; 1 = no sharding).

    Source: seed 002 §02 (7B: 104 GiB; 70B: 1,043 GiB; FSDP over 2: 52.2 GiB).
    """
    shards = _check.count("shards", shards)
    out = resident_bytes(np.asarray(params, dtype=float), bytes_per_parameter) / shards / GIB
    return float(out) if np.ndim(out) == 0 else out


def optimizer_step_traffic() -> dict[str, int]:
    """Bytes per parameter the fused AdamW step moves: reads g, master, m, v (2+4+4+4) and writes master, m, v
    and the bf16 working copy (4+4+4+2) = 28; the forward reads only the bf16 weight = 2. Source: seed 002 §08."""
    state = MIXED["master"] + MIXED["m"] + MIXED["v"]
    reads, writes = MIXED["grads"] + state, state + MIXED["weights"]
    return {"optimizer_read": int(reads), "optimizer_write": int(writes), "optimizer": int(reads + writes),
            "forward": int(MIXED["weights"])}
