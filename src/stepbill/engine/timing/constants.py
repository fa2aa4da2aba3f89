"""Constants of the per-op time model, each with its source. Seconds, bytes, FLOP/s are SI.

Two kinds: figures taken from a cited source (NCCL's latency table, the protocol efficiency NCCL's maintainer
states, SM counts, cuBLAS tile shapes), and the few global parameters set on the calibration runs of
docs/performance-model.md (`CALIBRATED`: per GPU generation, never per run; benchmarks/performance_model.py
`--fit` re-derives them and prints what it would set).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Streaming multiprocessors (AMD: compute units) per GPU, from the vendors' architecture whitepapers (A100: 108,
#: H100 SXM5: 132, H100 PCIe: 114, L40S: 142, RTX 4090: 128, B200: 148, MI300X: 304 CUs). Wave quantization of a
#: GEMM's output tiles is counted against these.
SMS = {"h100-sxm": 132, "h100-pcie": 114, "h200": 132, "h800": 132, "a100-40gb": 108, "a100-80gb": 108,
       "b200": 148, "mi300x": 304, "l40s": 142, "rtx-4090": 128}
GENERATION = {"h100-sxm": "hopper", "h100-pcie": "hopper", "h200": "hopper", "h800": "hopper",
              "a100-40gb": "ampere", "a100-80gb": "ampere", "b200": "blackwell", "mi300x": "cdna3",
              "l40s": "ada", "rtx-4090": "ada"}
DEFAULT_SMS = 108

#: Output tile shapes (M × N) cuBLAS uses for large half-precision GEMMs; the kernel heuristic picks the one that
#: wastes least. Source: NVIDIA, "Matrix Multiplication Background User's Guide" (DU-09799-001, 2023) §2.3 "Typical
#: tile dimensions in cuBLAS" (256×128, 128×256 and 128×128 the most efficient) and §3 (tile and wave quantization).
TILES = ((256, 128), (128, 256), (128, 128))
#: K-loop fill: a tile's main loop streams K in 64-wide slices through a multi-stage (3–4 deep) shared-memory
#: pipeline (CUTLASS's default sm80 / sm90 GEMMs), so about 4 × 64 = 256 of K pass before the first MMA and while
#: the epilogue drains; a GEMM of depth K runs at K / (K + K_FILL) of its tile rate. An analytic figure, not fitted.
K_FILL = 256

#: NCCL's latency model (src/graph/tuning.cc, Ring algorithm, Simple protocol): a base latency per call plus one
#: hardware latency per ring step, in seconds. NVLink 3.4 µs, PCIe 5.7 µs, network 14.0 µs; base 8.4 µs.
NCCL_BASE_LATENCY_S = 8.4e-6
NCCL_STEP_LATENCY_S = {"nvlink": 3.4e-6, "pcie": 5.7e-6, "infiniband": 14.0e-6, "ethernet": 14.0e-6}
NCCL_SOURCE = "NCCL src/graph/tuning.cc baseLat / hwLat (Ring, Simple): 8.4 µs + per step NVLink 3.4, PCIe 5.7, net 14 µs"
#: Share of a link's line rate NCCL's ring moves: "450GB/s is the line rate. With the protocol overhead (~20%) NCCL
#: can get an effective NVLink bandwidth of 370GB/s" (S. Jeaugey, NCCL maintainer, NVIDIA/nccl-tests#212, 2024).
#: nccl-tests on 8 × A100 SXM4 show busbw ≈ 200–230 GB/s of 300 (nccl-tests#149, #178): the same order.
NCCL_PROTOCOL_EFFICIENCY = 0.8
NCCL_EFFICIENCY_SOURCE = "effective 370 of 450 GB/s line rate (~20 % protocol overhead), NVIDIA/nccl-tests#212"

#: Share of the PCIe line rate a host↔GPU copy moves (offload's traffic): an H100 SXM moves 52.8 GB/s device → host
#: of PCIe Gen5 x16's 64 (NVIDIA/nvbandwidth#24, 8 GPUs of a node alike), an A100 25 of Gen4's 32 GB/s measured peak
#: (ZaidQureshi/bam#54): ~0.8, as NCCL's share of a link above.
PCIE_COPY_EFFICIENCY = 0.8
PCIE_COPY_SOURCE = ("H100 device→host 52.8 of 64 GB/s (NVIDIA/nvbandwidth#24); A100 25 of 32 GB/s measured peak "
                    "(ZaidQureshi/bam#54)")


#: Gradient bucket of PyTorch DDP (bucket_cap_mb default 25 MiB, torch.nn.parallel.DistributedDataParallel docs):
#: the last bucket's reduction starts only when the backward ends, so it cannot hide.
GRAD_BUCKET_BYTES = 25 * 2**20

#: Share of HBM bandwidth that memory-bound kernels (norms, activations, casts, optimizer) reach. An assumption:
#: STREAM-like copies reach ~90 % of the datasheet figure on A100 / H100, PyTorch's unfused elementwise kernels less.
MEMORY_BOUND_EFFICIENCY = 0.8
MEMORY_BOUND_SOURCE = "assumed 80 % of HBM bandwidth for elementwise / reduction kernels"


@dataclass(frozen=True)
class Generation:
    """The fitted parameters of one GPU generation: `gemm_plateau`, the share of dense peak a large, well-shaped
    GEMM reaches (before tile, wave and K-fill losses); `attention_fwd` / `attention_bwd`, the share of dense peak
    of the fused attention kernels' forward and backward (FLOPs counted as FlashAttention-2 counts them: 4·S²·H·d
    forward full square, halved causal; backward 2.5× the forward)."""

    gemm_plateau: float
    attention_fwd: float
    attention_bwd: float
    source: str


#: Set on the calibration runs (docs/performance-model.md). Published anchors to compare the attention figures with:
#: FlashAttention-2 reaches 50–73 % of A100's peak (Dao 2023, arXiv 2307.08691, abstract) and about 35 % of H100's
#: (FlashAttention-3, arXiv 2407.08608, abstract), FlashAttention-3 up to 75 % forward.
CALIBRATED = {
    "ampere": Generation(0.73, 0.45, 0.297, "fitted on the A100 calibration runs (docs/performance-model.md)"),
    "hopper": Generation(0.57, 0.25, 0.165, "fitted on the H100 calibration runs (docs/performance-model.md)"),
}
UNCALIBRATED_NOTE = "no published run of this generation billed: Hopper's fitted figures used"


def generation(gpu_name: str) -> tuple[str, Generation, str]:
    """(generation name, its parameters, provenance) of a catalog GPU; uncalibrated generations borrow Hopper's."""
    gen = GENERATION.get(gpu_name, "unknown")
    if gen in CALIBRATED:
        return gen, CALIBRATED[gen], CALIBRATED[gen].source
    return gen, CALIBRATED["hopper"], UNCALIBRATED_NOTE
