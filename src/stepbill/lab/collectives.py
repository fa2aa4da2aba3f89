"""Data, tensor and pipeline parallelism as numbers: a ring all-reduce stage by stage, ring vs central server,
tensor-parallel layer size and traffic, the pipeline grid and bubble, a 3-D layout.

The formulas live in `stepbill.engine.comm` (the bill reuses them); this module adds the seed's defaults, a
byte-level ring simulation whose totals are checked against the closed form, and table rows.
Units: bytes in, GiB/TiB/MiB (2^30/2^40/2^20) only at the presentation edge.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepbill.engine import comm
from stepbill.lab import _check

GIB, TIB, MIB = 2**30, 2**40, 2**20
# Seed 002 §07: "13 GiB of bf16 gradients" is a 7B model's 7e9 × 2 B = 14e9 B = 13.04 GiB; the printed
# 209 GiB needs this exact value (13 GiB flat gives 208).
SEED_GRAD_BYTES = 7e9 * 2


@dataclass(frozen=True)
class RingRun:
    """A simulated ring all-reduce: chunk ownership per stage and the bytes each link carried."""

    n: int
    phases: list[np.ndarray]  # phases[s][g, k]: contributions to chunk k held by rank g after stage s
    link_bytes: np.ndarray  # bytes sent on link g → g+1, summed over all stages
    result_ok: bool  # every rank ends with the true element-wise sum


def simulate_ring(n: int, message_bytes: float, seed: int = 0) -> RingRun:
    """Run a ring all-reduce on real numbers: N ranks, each with N chunks; count the bytes on every link.

    Independent of `comm.ring_allreduce_link_bytes`: bytes are added up stage by stage (each send is one chunk
    of M/N bytes) and the reduced values are checked against a direct sum.
    """
    n = _check.count("N (ranks)", n, 2)
    _check.positive("message bytes", message_bytes)
    data = np.random.default_rng(seed).integers(0, 100, size=(n, n))  # data[rank, chunk]; ints: exact sums
    want = data.sum(axis=0)
    buf = data.copy()
    sent = np.zeros(n)
    chunk_bytes = message_bytes / n
    ranks = np.arange(n)
    for s in range(n - 1):  # reduce-scatter
        chunk = (ranks - s) % n
        incoming = buf[ranks, chunk].copy()
        buf[(ranks + 1) % n, chunk] += incoming
        sent += chunk_bytes
    for s in range(n - 1):  # all-gather
        chunk = (ranks + 1 - s) % n
        buf[(ranks + 1) % n, chunk] = buf[ranks, chunk]
        sent += chunk_bytes
    ok = bool(np.all(buf == want[None, :]))
    return RingRun(n=n, phases=comm.ring_allreduce_phases(n), link_bytes=sent, result_ok=ok)


def finished_chunks(phase: np.ndarray) -> list[list[int]]:
    """For one stage, the chunks each rank holds fully reduced (contributions == N)."""
    n = phase.shape[0]
    return [[int(k) for k in np.flatnonzero(row == n)] for row in phase]


def ring_vs_server(ns: list[int] | np.ndarray, message_bytes: float = SEED_GRAD_BYTES) -> dict[str, np.ndarray]:
    """Busiest-link bytes of a ring (2(N−1)/N·M) and a central server (2NM) for each N.

    Source: seed 002 §07 (13 GiB: 22.8 / 26.0 GiB ring, 209 GiB / 13.0 TiB server at N = 8 / 512)."""
    n = np.asarray(ns, dtype=float)
    return {
        "n": n,
        "ring": np.asarray(comm.ring_allreduce_link_bytes(n, message_bytes)),
        "server": np.asarray(comm.central_server_link_bytes(n, message_bytes)),
    }


def tensor_parallel(hidden: int = 4096, tp: int = 8, tokens: int = 8192, bytes_per_value: float = 2.0) -> dict:
    """One layer under t-way TP: params per layer and per rank, activation size, per-iteration traffic.

    Source: seed 002 §07 (h = 4096, t = 8, 8,192 tokens: 201M → 25.2M params; 448 MiB vs 64 MiB)."""
    hidden = _check.count("hidden size", hidden)
    tp = _check.count("TP degree", tp, 2)
    tokens = _check.count("tokens", tokens)
    return {
        "hidden": hidden,
        "tp": tp,
        "tokens": tokens,
        "layer_params": comm.tp_layer_params(hidden),
        "params_per_rank": comm.tp_layer_params(hidden, tp),
        "allreduces_per_layer": comm.TP_ALLREDUCES_PER_LAYER,
        "activation_bytes": comm.tp_activation_bytes(tokens, hidden, bytes_per_value),
        "traffic_bytes": comm.tp_layer_traffic_bytes(tokens, hidden, tp, bytes_per_value),
    }


def pipeline(stages: int = 4, microbatches: int = 16) -> dict:
    """Pipeline grid and bubble, from the grid (idle cells / all cells) and from (p−1)/(m+p−1).

    Source: seed 002 §07 (p = 4: 75 % at m = 1, 16 % at m = 16)."""
    grid = comm.pipeline_grid(stages, microbatches)
    return {
        "stages": stages,
        "microbatches": microbatches,
        "grid": grid,
        "bubble_from_grid": float(np.mean(grid < 0)),
        "bubble": comm.pipeline_bubble(stages, microbatches),
    }
