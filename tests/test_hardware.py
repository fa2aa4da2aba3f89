"""GPU catalog: loads, holds the seed's H100 number, and rejects malformed entries with one clear error."""

from __future__ import annotations

import copy

import pytest

from stepbill.errors import StepbillError
from stepbill.spec.hardware import gpu_from_dict, gpu_names, load_gpu

GOOD = {
    "display": "test gpu", "memory": {"value": 80, "unit": "GiB", "note": "n"},
    "bf16_dense_tflops": 100, "fp8_dense_tflops": None, "hbm_tb_s": 1, "nvlink_gb_s": 0,
    "pcie_gb_s": 32, "infiniband_gb_s": 25, "gpus_per_node": 8, "source": "s",
}


def test_catalog_names() -> None:
    """Issue 6 asks for these ten parts."""
    assert set(gpu_names()) == {"h100-sxm", "h100-pcie", "h200", "h800", "a100-40gb", "a100-80gb", "b200",
                                "mi300x", "l40s", "rtx-4090"}


def test_h100_bf16_peak() -> None:
    """h100-989-495-67: H100 SXM dense bf16 989 TFLOPS (NVIDIA datasheet 989.4)."""
    h100 = load_gpu("h100-sxm")
    assert round(h100.bf16_flops / 1e12) == 989
    assert h100.memory_bytes == 80 * 2**30
    assert h100.intra_node_link == "nvlink"
    assert load_gpu("l40s").intra_node_link == "pcie"


def test_unknown_gpu_suggests() -> None:
    with pytest.raises(StepbillError, match="did you mean 'h100-sxm'"):
        load_gpu("h100-sxn")


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("bf16_dense_tflops",), -1, r"bf16_dense_tflops must be a finite number in \(0, 1,000,000\], got -1"),
        (("bf16_dense_tflops",), float("nan"), "got nan"),
        (("nvlink_gb_s",), float("inf"), "got inf"),
        (("display",), "H100\nSXM", "must be a printable string"),
        (("memory", "unit"), "GBs", "unknown memory unit"),
        (("gpus_per_node",), 0, r"gpus_per_node must be an integer in \[1, 1,024\], got 0"),
        (("gpus_per_node",), True, "got True"),
        (("hbm_tb_s",), "fast", "hbm_tb_s must be a finite number"),
        (("nvlnk_gb_s",), 1, "did you mean 'nvlink_gb_s'"),
    ],
)
def test_bad_entries(path: tuple[str, ...], value: object, message: str) -> None:
    entry = copy.deepcopy(GOOD)
    target = entry
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(StepbillError, match=message):
        gpu_from_dict("x", entry)


def test_missing_key() -> None:
    entry = dict(GOOD)
    del entry["source"]
    with pytest.raises(StepbillError, match="missing source"):
        gpu_from_dict("x", entry)
