"""Hardware: the GPU catalog (presets/hardware/gpus.json) as frozen, validated records.

The catalog is data; this module only reads and checks it. Every rate is converted to SI base units here
(bytes, FLOP/s, B/s) so the engine never sees TB/s or TFLOP/s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from stepbill.errors import StepbillError, unknown_name
from stepbill.spec.schema import NOTE, Int, Real, check_value, hash_once

GIB = 2**30
MEMORY_UNITS = {"GiB": GIB, "GB": 10**9}
LINK_CLASSES = ("nvlink", "pcie", "infiniband")

_ENTRY_KEYS = {
    "display", "memory", "usable", "bf16_dense_tflops", "fp8_dense_tflops", "tf32_dense_tflops", "fp32_tflops",
    "peaks_source", "hbm_tb_s", "nvlink_gb_s", "pcie_gb_s", "infiniband_gb_s", "gpus_per_node", "source",
}
#: Optional keys of an entry: the reference node's host (CPU) memory, {"gib": whole GiB, "source": "..."}; an entry
#: without it has no host figure, and a host-memory verdict needs --host-mem.
_OPTIONAL_KEYS = {"host_memory"}
_HOST_KEYS = {"gib", "source"}
#: Compute dtypes with a peak in the catalog. "fp16" shares bf16's tensor-core rate on every catalog part.
COMPUTE_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
_MEMORY_KEYS = {"value", "unit", "note"}
_USABLE_KEYS = {"mib", "source"}


@hash_once
@dataclass(frozen=True)
class GPU:
    """One accelerator: memory in bytes, dense peaks in FLOP/s, bandwidths in bytes/s per direction.

    `memory_bytes` is the datasheet figure ("80GB" read as the catalog entry says); `usable_bytes` is the total the
    driver reports (nvidia-smi's memory.total, rocm-smi on AMD: H100 SXM 81,559 MiB = 79.65 GiB), with its source
    in `usable_source`. Fit verdicts use `usable_bytes` minus a reserve (engine/fit.py).

    `nvlink_bytes_per_s` is the scale-up fabric (NVLink, or Infinity Fabric on AMD); 0 where there is none, in
    which case intra-node collectives go over PCIe. `fp8_flops` is None on parts without fp8 tensor cores.
    Peaks are dense (the vendors' 2:4-sparse figures, 2× these, are left out); `fp32_flops` is the non-tensor-core
    FP32 rate, `tf32_flops` the TF32 tensor-core rate; their source is `peaks_source`.
    """

    name: str
    display: str
    memory_bytes: float
    memory_note: str
    usable_bytes: float
    usable_source: str
    bf16_flops: float
    fp8_flops: float | None
    tf32_flops: float
    fp32_flops: float
    peaks_source: str
    hbm_bytes_per_s: float
    nvlink_bytes_per_s: float
    pcie_bytes_per_s: float
    infiniband_bytes_per_s: float
    gpus_per_node: int
    source: str
    #: the host (CPU) memory of the vendor's reference node of `gpus_per_node` GPUs, bytes (None: not in the
    #: catalog), which the GPUs' processes share for what they offload (engine/fit.py's host verdict)
    host_memory_bytes: float | None = None
    host_memory_source: str = ""

    def link_bytes_per_s(self, link: str) -> float:
        """Per-direction bandwidth of a link class ("nvlink", "pcie", "infiniband"); 0 = not present."""
        if link not in LINK_CLASSES:
            raise unknown_name("link class", link, LINK_CLASSES)
        return {"nvlink": self.nvlink_bytes_per_s, "pcie": self.pcie_bytes_per_s,
                "infiniband": self.infiniband_bytes_per_s}[link]

    @property
    def intra_node_link(self) -> str:
        """The link a collective inside one node uses: NVLink where present, else PCIe."""
        return "nvlink" if self.nvlink_bytes_per_s > 0 else "pcie"

    def peak_flops(self, dtype: str = "bf16") -> float:
        """Dense peak in FLOP/s for a compute dtype (COMPUTE_DTYPES): "fp32" (CUDA cores), "tf32", "bf16" / "fp16",
        "fp8" (tensor cores)."""
        if dtype in ("bf16", "fp16"):
            return self.bf16_flops
        if dtype == "tf32":
            return self.tf32_flops
        if dtype == "fp32":
            return self.fp32_flops
        if dtype == "fp8":
            if self.fp8_flops is None:
                raise StepbillError(f"{self.display} has no fp8 tensor cores")
            return self.fp8_flops
        raise unknown_name("compute dtype", dtype, COMPUTE_DTYPES)


#: Catalog rates: TFLOP/s, TB/s and GB/s up to 10^6 (a thousand times any part made), memory up to 2^20 GiB.
RATE = Real(0.0, 1e6, low_open=True)
RATE_OR_ZERO = Real(0.0, 1e6)
MEMORY = Real(0.0, 2.0**20, low_open=True)
GPUS_PER_NODE = Int(1, 1024)


def _number(owner: str, key: str, value: Any, rule: Real = RATE, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    return float(check_value(rule, f"{owner}.{key}", value))


def gpu_from_dict(name: str, data: Any) -> GPU:
    """Validate one catalog entry (unknown or missing keys are errors) and convert to SI units."""
    owner = f"gpu {name!r}"
    if not isinstance(data, dict):
        raise StepbillError(f"{owner} must be a JSON object")
    for key in data:
        if key not in _ENTRY_KEYS | _OPTIONAL_KEYS:
            raise unknown_name(f"key in {owner}", key, _ENTRY_KEYS | _OPTIONAL_KEYS)
    missing = sorted(_ENTRY_KEYS - set(data))
    if missing:
        raise StepbillError(f"{owner} is missing {', '.join(missing)}")
    mem = data["memory"]
    if not isinstance(mem, dict) or set(mem) != _MEMORY_KEYS:
        raise StepbillError(f"{owner}.memory must have exactly the keys {', '.join(sorted(_MEMORY_KEYS))}")
    if mem["unit"] not in MEMORY_UNITS:
        raise unknown_name(f"memory unit in {owner}", str(mem["unit"]), MEMORY_UNITS)
    per_node = check_value(GPUS_PER_NODE, f"{owner}.gpus_per_node", data["gpus_per_node"])
    for key in ("display", "source"):
        check_value(NOTE, f"{owner}.{key}", data[key])
    check_value(NOTE, f"{owner}.memory.note", mem["note"])
    fp8 = _number(owner, "fp8_dense_tflops", data["fp8_dense_tflops"], allow_none=True)
    return GPU(
        name=name,
        display=str(data["display"]),
        memory_bytes=_number(owner, "memory.value", mem["value"], MEMORY) * MEMORY_UNITS[mem["unit"]],
        memory_note=str(mem["note"]),
        bf16_flops=_number(owner, "bf16_dense_tflops", data["bf16_dense_tflops"]) * 1e12,
        fp8_flops=None if fp8 is None else fp8 * 1e12,
        tf32_flops=_number(owner, "tf32_dense_tflops", data["tf32_dense_tflops"]) * 1e12,
        fp32_flops=_number(owner, "fp32_tflops", data["fp32_tflops"]) * 1e12,
        peaks_source=_source(owner, "peaks_source", data["peaks_source"]),
        hbm_bytes_per_s=_number(owner, "hbm_tb_s", data["hbm_tb_s"]) * 1e12,
        nvlink_bytes_per_s=_number(owner, "nvlink_gb_s", data["nvlink_gb_s"], RATE_OR_ZERO) * 1e9,
        pcie_bytes_per_s=_number(owner, "pcie_gb_s", data["pcie_gb_s"]) * 1e9,
        infiniband_bytes_per_s=_number(owner, "infiniband_gb_s", data["infiniband_gb_s"], RATE_OR_ZERO) * 1e9,
        gpus_per_node=per_node,
        source=str(data["source"]),
        **_usable(owner, data["usable"], mem),  # after memory_bytes: the memory figure is checked first
        **_host(owner, data.get("host_memory")),
    )


def _host(owner: str, host: Any) -> dict[str, Any]:
    """`host_memory_bytes` and `host_memory_source` of an entry's optional `host_memory` (None: absent)."""
    if host is None:
        return {}
    if not isinstance(host, dict) or set(host) != _HOST_KEYS:
        raise StepbillError(f"{owner}.host_memory must have exactly the keys {', '.join(sorted(_HOST_KEYS))}")
    gib = host["gib"]
    if isinstance(gib, bool) or not isinstance(gib, int) or not 0 < gib <= 2**20:
        raise StepbillError(f"{owner}.host_memory.gib must be a whole number of GiB in [1, 1,048,576], got {gib!r}")
    return {"host_memory_bytes": float(gib * GIB), "host_memory_source": _source(owner, "host_memory.source",
                                                                                   host["source"])}


def _source(owner: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise StepbillError(f"{owner}.{key} must say where the figures come from")
    return value


MIB = 2**20
# usable / datasheet size must lie in this band (H200 is 1.07, A100 80GB 1.00): catches a figure written in
# another unit than MiB (GiB, KB, bytes); MB vs MiB (5 %) stays inside it
USABLE_RATIO_BAND = (0.9, 1.1)


def _usable(owner: str, usable: Any, mem: dict[str, Any]) -> dict[str, Any]:
    """`usable_bytes` (the driver-reported total) and `usable_source` of an entry: a whole positive MiB count near
    the datasheet size `mem` (already validated), with a source."""
    memory_bytes = float(mem["value"]) * MEMORY_UNITS[mem["unit"]]
    if not isinstance(usable, dict) or set(usable) != _USABLE_KEYS:
        raise StepbillError(f"{owner}.usable must have exactly the keys {', '.join(sorted(_USABLE_KEYS))}")
    mib = usable["mib"]
    if isinstance(mib, bool) or not isinstance(mib, int) or mib <= 0:
        raise StepbillError(f"{owner}.usable.mib must be a positive whole number of MiB, got {mib!r}")
    source = usable["source"]
    if not isinstance(source, str) or not source.strip():
        raise StepbillError(f"{owner}.usable.source must say where the figure comes from")
    low, high = USABLE_RATIO_BAND
    ratio = mib * MIB / memory_bytes
    if not low <= ratio <= high:
        raise StepbillError(f"{owner}.usable.mib {mib:,} MiB is {ratio:.2f}× the datasheet memory; expected "
                            f"{low}–{high}× (a figure in another unit than MiB?)")
    return {"usable_bytes": float(mib * MIB), "usable_source": source}


@cache
def _raw_catalog() -> dict[str, Any]:
    path = resources.files("stepbill") / "presets" / "hardware" / "gpus.json"
    return json.loads(path.read_text())


@cache
def gpu_catalog() -> dict[str, GPU]:
    """Every GPU of the built-in catalog, by name."""
    return {name: gpu_from_dict(name, entry) for name, entry in _raw_catalog()["gpus"].items()}


@cache
def gpu_aliases() -> dict[str, str]:
    """Short names (lower case) → catalog names, e.g. "h100" → "h100-sxm"; every target is a catalog name."""
    catalog = gpu_catalog()
    aliases = {str(k).lower(): str(v) for k, v in _raw_catalog().get("aliases", {}).items()}
    for alias, target in aliases.items():
        if target not in catalog:
            raise unknown_name(f"target of gpu alias {alias!r}", target, catalog)
        if alias in catalog:
            raise StepbillError(f"gpu alias {alias!r} shadows a catalog name")
    return aliases


def gpu_names() -> tuple[str, ...]:
    """Names of the catalog's GPUs, in catalog order."""
    return tuple(gpu_catalog())


def resolve_gpu_name(name: str) -> str:
    """The catalog name for `name`, matched case-insensitively, through the aliases ("H100" → "h100-sxm")."""
    catalog = gpu_catalog()
    key = name.strip().lower()
    if key in catalog:
        return key
    aliases = gpu_aliases()
    if key in aliases:
        return aliases[key]
    raise unknown_name("gpu", name, [*catalog, *aliases])


def load_gpu(name: str) -> GPU:
    """The catalog GPU `name` (e.g. "h100-sxm", "H100", "a100", "mi300x"): case-insensitive, aliases allowed."""
    return gpu_catalog()[resolve_gpu_name(name)]
