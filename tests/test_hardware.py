"""GPU catalog: loads, holds the seed's H100 number, and rejects malformed entries with one clear error."""

from __future__ import annotations

import copy

import pytest

from stepbill.errors import StepbillError
from stepbill.spec.hardware import GIB, MIB, gpu_aliases, gpu_catalog, gpu_from_dict, gpu_names, load_gpu

GOOD = {
    "display": "test gpu", "memory": {"value": 80, "unit": "GiB", "note": "n"},
    "usable": {"mib": 81559, "source": "nvidia-smi"},
    "bf16_dense_tflops": 100, "fp8_dense_tflops": None, "tf32_dense_tflops": 50, "fp32_tflops": 10,
    "peaks_source": "datasheet", "hbm_tb_s": 1, "nvlink_gb_s": 0,
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


def test_per_dtype_peaks() -> None:
    """h100-989-495-67: the seed's H100 SXM figures, dense: bf16 989, tf32 495, fp32 (CUDA cores) 67 TFLOPS;
    fp8 is twice bf16 and tf32 half of it on every NVIDIA tensor-core part of the catalog, with a source."""
    h100 = load_gpu("h100-sxm")
    assert [round(h100.peak_flops(d) / 1e12) for d in ("bf16", "fp16", "tf32", "fp32", "fp8")] == [989, 989, 495, 67, 1979]
    for gpu in gpu_catalog().values():
        assert gpu.fp32_flops <= gpu.tf32_flops < gpu.bf16_flops, gpu.name
        assert gpu.peaks_source.strip()
        if gpu.name != "rtx-4090" and gpu.fp8_flops is not None:
            assert gpu.fp8_flops == pytest.approx(2 * gpu.bf16_flops, rel=0.02), gpu.name
        if not gpu.display.startswith("AMD"):
            assert gpu.tf32_flops == pytest.approx(gpu.bf16_flops / 2, rel=0.02), gpu.name
    with pytest.raises(StepbillError, match="no fp8 tensor cores"):
        load_gpu("a100-80gb").peak_flops("fp8")
    with pytest.raises(StepbillError, match="compute dtype"):
        h100.peak_flops("int4")


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


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [("mib", 81559.5, "whole number of MiB"),
     ("mib", 85_520_809, "expected 0.9–1.1×"),  # KB, not MiB
     ("mib", 80, "expected 0.9–1.1×"),  # GiB, not MiB
     ("source", " ", "must say where")],
)
def test_bad_usable_entries(key: str, value: object, message: str) -> None:
    entry = copy.deepcopy(GOOD)
    entry["usable"][key] = value  # type: ignore[index]
    with pytest.raises(StepbillError, match=message):
        gpu_from_dict("x", entry)


def test_usable_memory_is_what_nvidia_smi_shows() -> None:
    """W14 of the user trial: an H100 SXM shows 81,559 MiB = 79.65 GiB, not 80.00 GiB; A100 80GB 81,920 MiB."""
    assert load_gpu("h100-sxm").usable_bytes == 81_559 * MIB
    assert round(load_gpu("h100-sxm").usable_bytes / GIB, 2) == 79.65
    assert load_gpu("a100-80gb").usable_bytes == 81_920 * MIB
    assert round(load_gpu("h200").usable_bytes / GIB, 2) == 140.40
    assert load_gpu("mi300x").usable_bytes == 206_141_652_992  # rocm-smi's VRAM Total Memory (B)


def test_every_usable_figure_has_a_source() -> None:
    for gpu in gpu_catalog().values():
        assert gpu.usable_source.strip()
        assert 0.9 <= gpu.usable_bytes / gpu.memory_bytes <= 1.1
    assert "no nvidia-smi total found" in load_gpu("h800").usable_source  # derived, and it says so


@pytest.mark.parametrize(("name", "expected"), [("h100", "h100-sxm"), ("H100", "h100-sxm"), ("H100-SXM", "h100-sxm"),
                                                ("a100", "a100-80gb"), ("A100", "a100-80gb"), ("MI300X", "mi300x"),
                                                ("4090", "rtx-4090")])
def test_aliases_case_insensitive(name: str, expected: str) -> None:
    """User trial §3 item 13: `--gpu h100` / `H100` / `a100` work, and h100 never becomes h800."""
    assert load_gpu(name).name == expected


def test_alias_targets_exist_and_do_not_shadow() -> None:
    aliases = gpu_aliases()
    assert set(aliases.values()) <= set(gpu_names())
    assert not set(aliases) & set(gpu_names())
