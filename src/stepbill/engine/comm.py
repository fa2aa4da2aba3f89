"""Communication and parallelism formulas: ring all-reduce, parameter server, TP, PP, ZeRO.

Pure functions; every argument may be a Python scalar or a numpy array (results broadcast). Byte arguments and
results are plain bytes (no unit conversion here: callers divide by 2**30 for GiB). "Per link" means the bytes
that cross the busiest single link during one collective.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from stepbill.errors import StepbillError

ArrayLike = npt.ArrayLike
# A scalar in, a float out; an array in, an array out (see `_out`).
FloatOrArray = float | np.ndarray

# Megatron splits each transformer block into an (f, g) pair of conjugate operators; a layer has two blocks
# (attention, MLP), so two all-reduces in the forward and two in the backward.  Source: seed 002 §07,
# Shoeybi et al. 2019 (Megatron-LM) §3.
TP_ALLREDUCES_PER_LAYER = 4


def _out(x: np.ndarray) -> FloatOrArray:
    """0-d results become plain floats so scalar callers never see numpy scalars in JSON or f-strings."""
    arr = np.asarray(x)
    return float(arr) if arr.ndim == 0 else arr


def _plain(*values: object) -> bool:
    """Whether every argument is a plain Python int or float: the scalar path then computes the same IEEE
    operations in the same order without numpy's 0-d arrays (a planner's step time calls these per candidate)."""
    return all(type(v) in (int, float) for v in values)


def _check_at_least(name: str, value: object, low: int) -> None:
    if (value < low) if _plain(value) else np.any(np.asarray(value) < low):  # type: ignore[operator]
        raise StepbillError(f"{name} must be >= {low}, got {value}")


def ring_allreduce_link_bytes(n: ArrayLike, message_bytes: ArrayLike) -> FloatOrArray:
    """Bytes each ring link carries in one all-reduce of `message_bytes` over `n` ranks: 2(N−1)/N · M.

    Reduce-scatter then all-gather, each N−1 hops of an M/N chunk. Tends to 2M as N grows, so it is flat in N.
    Source: seed 002 §07; Patarasuk & Yuan 2009.
    """
    _check_at_least("N (ranks)", n, 2)
    if _plain(n, message_bytes):
        return 2.0 * (n - 1.0) / n * float(message_bytes)  # type: ignore[operator]
    n_arr = np.asarray(n, dtype=float)
    return _out(2.0 * (n_arr - 1.0) / n_arr * np.asarray(message_bytes, dtype=float))


def central_server_link_bytes(n: ArrayLike, message_bytes: ArrayLike) -> FloatOrArray:
    """Bytes through a central parameter server's link per all-reduce: 2NM.

    N pushes of M in and N pulls of M out all cross the server's one link.

    Source: seed 002 §07.
    """
    _check_at_least("N (ranks)", n, 2)
    return _out(2.0 * np.asarray(n, dtype=float) * np.asarray(message_bytes, dtype=float))


def ring_allreduce_phases(n: int) -> list[np.ndarray]:
    """Chunk ownership after each of the 2(N−1) stages of a ring all-reduce (reduce-scatter, then all-gather).

    Returns a list of length 2(N−1)+1 (the initial state first) of int arrays `c[g, k]`: how many ranks'
    contributions to chunk k rank g holds. In stage s (0-based) of the reduce-scatter rank g sends
    its partial sum of chunk (g − s) mod N to rank g+1, which adds its own; after N−1 stages rank g
    holds chunk (g+1) mod N reduced over all N ranks. The all-gather then forwards finished chunks.
    Source: seed 002 §07 (N = 4: every rank holds one finished chunk "by stage 3").
    """
    _check_at_least("N (ranks)", n, 2)
    held = np.ones((n, n), dtype=int)  # everyone starts with only its own contribution to every chunk
    states = [held.copy()]
    ranks = np.arange(n)
    for s in range(n - 1):  # reduce-scatter: receiver adds the incoming partial sum to its own contribution
        chunk = (ranks - s) % n
        incoming = held[ranks, chunk].copy()
        held[(ranks + 1) % n, chunk] += incoming
        states.append(held.copy())
    for s in range(n - 1):  # all-gather: forward the finished chunk; receiver overwrites its partial
        chunk = (ranks + 1 - s) % n
        incoming = held[ranks, chunk].copy()
        held[(ranks + 1) % n, chunk] = incoming
        states.append(held.copy())
    return states


def tp_layer_params(hidden: ArrayLike, tp: ArrayLike = 1) -> FloatOrArray:
    """Parameters of one transformer layer per tensor-parallel rank: 12h²/t.

    4h² attention + 8h² MLP with a 4h FFN; biases and norms ignored.
    Source: seed 002 §07 (h = 4096: 201M, t = 8: 25.2M)."""
    _check_at_least("TP degree", tp, 1)
    h = np.asarray(hidden, dtype=float)
    return _out(12.0 * h * h / np.asarray(tp, dtype=float))


def tp_activation_bytes(tokens: ArrayLike, hidden: ArrayLike, bytes_per_value: float = 2.0) -> FloatOrArray:
    """Bytes of one [tokens, h] activation (bf16 = 2 B): the message of each TP all-reduce.

    Source: seed 002 §07 (8,192 tokens × 4096 × 2 B = 64 MiB)."""
    return _out(np.asarray(tokens, dtype=float) * np.asarray(hidden, dtype=float) * bytes_per_value)


def tp_layer_traffic_bytes(
    tokens: ArrayLike, hidden: ArrayLike, tp: ArrayLike, bytes_per_value: float = 2.0
) -> FloatOrArray:
    """Per-rank bytes sent for one layer in one iteration under t-way TP: 4 · 2(t−1)/t · tokens · h · bytes.

    Four activation all-reduces (TP_ALLREDUCES_PER_LAYER), each a ring all-reduce of the activation.
    Source: seed 002 §07 (t = 8, 8,192 tokens, h = 4096: 448 MiB against a 64 MiB activation).
    """
    _check_at_least("TP degree", tp, 2)
    act = tp_activation_bytes(tokens, hidden, bytes_per_value)
    return _out(TP_ALLREDUCES_PER_LAYER * ring_allreduce_link_bytes(tp, act))


def pipeline_bubble(stages: ArrayLike, microbatches: ArrayLike) -> FloatOrArray:
    """Idle fraction of a GPipe/1F1B pipeline: (p−1)/(m+p−1).

    Source: seed 002 §07 (p = 4: m = 1 → 75 %, m = 16 → 16 %); Huang et al. 2019 (GPipe)."""
    _check_at_least("pipeline stages", stages, 1)
    _check_at_least("micro-batches", microbatches, 1)
    if _plain(stages, microbatches):
        p_plain = float(stages)  # type: ignore[arg-type]
        return (p_plain - 1.0) / (float(microbatches) + p_plain - 1.0)  # type: ignore[arg-type]
    p = np.asarray(stages, dtype=float)
    return _out((p - 1.0) / (np.asarray(microbatches, dtype=float) + p - 1.0))


def pipeline_grid(stages: int, microbatches: int) -> np.ndarray:
    """Forward-pass schedule as an int grid [stage, time slot]: micro-batch index, or −1 when idle.

    Stage s can start micro-batch j only after stage s−1 finished it, so it runs j at slot s + j; the grid has
    m + p − 1 slots. Its idle share equals `pipeline_bubble` (an independent route to the same number).
    """
    _check_at_least("pipeline stages", stages, 1)
    _check_at_least("micro-batches", microbatches, 1)
    grid = -np.ones((stages, microbatches + stages - 1), dtype=int)
    for s in range(stages):
        grid[s, s : s + microbatches] = np.arange(microbatches)
    return grid


def parallel_world_size(dp: ArrayLike, tp: ArrayLike, pp: ArrayLike) -> FloatOrArray:
    """GPUs in a 3-D layout: dp × tp × pp. Source: seed 002 §07 (32 × 8 × 4 = 1,024)."""
    for name, v in (("DP degree", dp), ("TP degree", tp), ("PP degree", pp)):
        _check_at_least(name, v, 1)
    return _out(np.asarray(dp) * np.asarray(tp) * np.asarray(pp))


def zero_comm_volume(stage: int, psi: ArrayLike) -> FloatOrArray:
    """Per-rank communication volume of one step under ZeRO stage 0–3, in the units of Ψ.

    Stages 0, 1, 2 → 2Ψ (reduce-scatter + all-gather, same as plain DP); stage 3 → 3Ψ (an extra parameter
    all-gather). Source: seed 000 §4.2; Rajbhandari et al. 2020 §7.2."""
    if stage not in (0, 1, 2, 3):
        raise StepbillError(f"ZeRO stage must be 0, 1, 2 or 3, got {stage}")
    factor = 3.0 if stage == 3 else 2.0
    return _out(factor * np.asarray(psi, dtype=float))


def ring_half_link_bytes(n: ArrayLike, message_bytes: ArrayLike) -> FloatOrArray:
    """Bytes each ring link carries in one reduce-scatter or one all-gather of a full `message_bytes` buffer
    over `n` ranks: (N−1)/N · M, half an all-reduce. Source: seed 002 §07 (the two halves of the ring)."""
    if _plain(n, message_bytes):
        return 0.5 * ring_allreduce_link_bytes(n, message_bytes)  # type: ignore[operator]
    return _out(0.5 * np.asarray(ring_allreduce_link_bytes(n, message_bytes)))


def all_to_all_link_bytes(n: ArrayLike, send_bytes: ArrayLike) -> FloatOrArray:
    """Bytes a rank sends off-rank in one all-to-all of `send_bytes` spread evenly over `n` ranks: (N−1)/N · S
    (the 1/N addressed to itself stays local). Used for MoE dispatch and combine."""
    _check_at_least("N (ranks)", n, 1)
    if _plain(n, send_bytes):
        return (n - 1.0) / n * float(send_bytes)  # type: ignore[operator]
    n_arr = np.asarray(n, dtype=float)
    return _out((n_arr - 1.0) / n_arr * np.asarray(send_bytes, dtype=float))
