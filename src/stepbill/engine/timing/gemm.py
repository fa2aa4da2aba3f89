"""GEMM time by shape: the share of dense peak a GEMM of M × N × K reaches on a GPU.

    efficiency(M, N, K) = plateau(generation) × tile_wave(M, N) × K / (K + K_FILL)
    tile_wave(M, N)     = max over cuBLAS tiles (tm × tn) of   M·N / (⌈M/tm⌉·tm · ⌈N/tn⌉·tn)      (tile quantization)
                                                             × tiles / (⌈tiles / SMs⌉ · SMs)     (wave quantization)
    seconds             = max(2·M·N·K / (peak × efficiency), bytes(A, B, C) / (HBM × memory efficiency))

Tile and wave quantization: NVIDIA's "Matrix Multiplication Background User's Guide" §3 (a 256×128-tiled GEMM on
108 SMs runs 109 tiles in two waves, at about half the rate of 108). K_FILL: constants.py. The plateau is one fitted
figure per GPU generation (constants.CALIBRATED). Small and skinny GEMMs fall far below peak: an N = 16 LoRA
adapter fills 16/128 of each tile, and a GEMM whose operands outweigh its FLOPs is timed at HBM bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from stepbill.engine.timing.constants import K_FILL, MEMORY_BOUND_EFFICIENCY, TILES


@dataclass(frozen=True)
class GemmDevice:
    """What the GEMM curve reads of a GPU: dense peak (FLOP/s), HBM bandwidth (B/s), SMs, the fitted plateau."""

    peak_flops: float
    hbm_bytes_per_s: float
    sms: int
    plateau: float


@lru_cache(maxsize=16384)
def tile_wave_utilisation(m: int, n: int, sms: int) -> float:
    """Share of the tensor cores busy for an M × N output: the best cuBLAS tile's tile × wave utilisation. Memoised
    (three ints; a planner's layouts repeat the same few token counts and tp-split widths)."""
    best = 0.0
    for tm, tn in TILES:
        tiles_m, tiles_n = math.ceil(m / tm), math.ceil(n / tn)
        tiles = tiles_m * tiles_n
        tile_util = m * n / (tiles_m * tm * tiles_n * tn)
        wave_util = tiles / (math.ceil(tiles / sms) * sms)
        best = max(best, tile_util * wave_util)
    return best


def gemm_efficiency(m: int, n: int, k: int, dev: GemmDevice) -> float:
    """Share of dense peak a GEMM of M × N × K reaches (compute side, before the HBM roofline)."""
    return dev.plateau * tile_wave_utilisation(m, n, dev.sms) * k / (k + K_FILL)


def gemm_seconds(m: int, n: int, k: int, dev: GemmDevice, bytes_per_value: float = 2.0) -> float:
    """Seconds of one GEMM: its FLOPs at the curve's rate, or its operands and output at HBM bandwidth if slower."""
    if min(m, n, k) <= 0:
        return 0.0
    flops = 2.0 * m * n * k
    compute = flops / (dev.peak_flops * gemm_efficiency(m, n, k, dev))
    memory = bytes_per_value * (m * k + k * n + m * n) / (dev.hbm_bytes_per_s * MEMORY_BOUND_EFFICIENCY)
    return max(compute, memory)
