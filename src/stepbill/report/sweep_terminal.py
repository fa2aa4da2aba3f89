"""The terminal table of `stepbill bill … --sweep`: one row per value (api_sweep.py), the bill's own numbers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text

from stepbill.report.units import fmt_bytes
from stepbill.spec.command import cli_flag

if TYPE_CHECKING:
    from stepbill.api_sweep import Sweep


def render_sweep(sweep: Sweep) -> Group:
    """The table — per value: the peak the verdict judges (the worst rank's, eager convention, with a card; else
    the bill's own peak), the headroom and verdict with a card, the step time, MFU and tokens/s with a GPU — and
    how to reproduce a row."""
    bills = [r.bill for r in sweep.rows if r.bill is not None]
    card = any(b.fit is not None for b in bills)
    timed = any(b.engine.time is not None for b in bills)
    flag = cli_flag(sweep.axis)
    peak_words = "the fit verdict's worst rank, eager convention" if card else "the bill's peak, its convention"
    table = Table(title=f"{sweep.model}: one bill per {flag} (peak: {peak_words}; GiB = 2^30 B)", title_justify="left")
    columns = [flag, "peak", *(["headroom", "fits"] if card else []), *(["step s", "MFU", "tokens/s"] if timed else [])]
    for col in columns:
        table.add_column(col, justify="right")
    for row in sweep.rows:
        if row.bill is None:
            table.add_row(str(row.value), Text(f"refused: {row.error}", style="yellow"), *[""] * (len(columns) - 2))
            continue
        bill, fit = row.bill.engine, row.bill.fit
        peak = fit.worst.peak_bytes if fit is not None else bill.worst_rank.memory["peak"]
        cells = [str(row.value), fmt_bytes(peak)]
        if card:
            cells += ["", ""] if fit is None else [fmt_bytes(fit.worst.headroom_bytes), "yes" if fit.fits else "NO"]
        if timed:
            t = bill.time
            cells += ["", "", ""] if t is None else [f"{t['time.step'].value:.3f}", f"{t['time.mfu'].value:.1%}",
                                                     f"{t['time.tokens_per_s'].value:,.0f}"]
        table.add_row(*cells)
    return Group(table, Text(f"each row: this command with {flag} VALUE in place of --sweep prints its whole bill",
                             style="dim"))
