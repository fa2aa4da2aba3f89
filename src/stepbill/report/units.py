"""Human units: binary for memory (KiB = 2^10 B … TiB = 2^40 B), decimal for FLOPs and counts."""

from __future__ import annotations

_BINARY = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def fmt_bytes(n: float, unit: str | None = None) -> str:
    """`n` bytes in binary units, e.g. "1.86 GiB"; `unit` forces one of KiB/MiB/GiB/TiB."""
    for name, size in _BINARY:
        if name == unit or (unit is None and abs(n) >= size):
            return f"{n / size:,.2f} {name}"
    return f"{n:,.0f} B"


def fmt_count(n: float) -> str:
    """A count in decimal units, e.g. 6.74B, 125.2M."""
    for suffix, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:,.2f}{suffix}"
    return f"{n:,.0f}"


def fmt_flops(n: float) -> str:
    """FLOPs in decimal units (TFLOP = 1e12, PFLOP = 1e15)."""
    for suffix, size in (("EFLOP", 1e18), ("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {suffix}"
    return f"{n:,.0f} FLOP"
