"""Byte widths the eager rows need: the parameter dtype (weights, the residual stream, RoPE tables, MoE experts
under amp) and the compute dtype (matmul outputs). They differ only under autocast (amp-bf16: fp32 weights,
bf16 matmuls), and the rest of the engine passes a single int (`Precision.activation`), so `EagerBytes` is that
int (the compute bytes) carrying the parameter bytes along; a plain int means both are equal. It also carries the
device whose kernels the rows follow (`device`: "cpu", what `check` measures, or "cuda"; eager/dropout.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepbill.engine.activations.tagged import TaggedInt

FP32 = 4
INT64 = 8
INT32 = 4


class EagerBytes(TaggedInt):
    """The compute dtype's bytes (its int value) with `param`, the parameter dtype's bytes, and `device`; equal to
    another only with the same tags (tagged.TaggedInt)."""

    TAGS = ("param", "device")

    param: int
    device: str

    def __new__(cls, compute: int, param: int | None = None, device: str = "cpu") -> EagerBytes:
        obj = super().__new__(cls, compute)
        obj.param = int(param if param is not None else compute)
        obj.device = device
        return obj

    def __repr__(self) -> str:
        return f"EagerBytes(compute={int(self)}, param={self.param}, device={self.device!r})"


def from_precision(precision: Any, device: str = "cpu") -> EagerBytes:
    """EagerBytes of a recipe's Precision: activations in `activation` bytes, weights in `weights` bytes
    (amp-bf16: 2 and 4; fp32: 4 and 4; pure-bf16 and mixed-bf16, whose eager model is a bf16 module: 2 and 2),
    on `device` (cpu | cuda: which dropout and attention kernels run, eager/dropout.py)."""
    frozen = getattr(precision, "frozen", None)  # QLoRA: the module is bf16 (its fp32 adapters are not the stream)
    return EagerBytes(precision.activation, frozen if frozen is not None else precision.weights, device)


@dataclass(frozen=True)
class Dt:
    """param: weights, residual stream, norms' output dtype; compute: matmul outputs (bf16 under autocast)."""

    param: int
    compute: int
    device: str = "cpu"

    @property
    def amp(self) -> bool:
        """Autocast: every linear casts its input and its weight to the compute dtype (new storages)."""
        return self.param != self.compute


def dt_of(act: Any) -> Dt:
    return Dt(int(getattr(act, "param", act)), int(act), getattr(act, "device", "cpu"))
