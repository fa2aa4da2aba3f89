"""A line of the bill: a value with its unit, the formula that produced it, its inputs and provenance.

Lines are cheap plain objects; the formula is a template filled with the inputs only when asked
(`explain()`), so building a bill costs microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DERIVED = "derived"


def cited(source: str) -> str:
    """Provenance of a number taken from a paper or model card."""
    return f"cited: {source}"


@dataclass(frozen=True)
class Line:
    """One number of the bill.

    `unit` is one of "bytes", "FLOPs", "params", "B/param", "s", "cards", "numbers/token", "1" (a ratio).
    `formula` is a Python format string over `inputs` (e.g. "{params} × {bytes_per_param} B").
    """

    name: str
    value: float
    unit: str
    formula: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)
    provenance: str = DERIVED
    convention: str = ""  # e.g. "binary units", "causal-halved attention"

    def explain(self) -> str:
        """The formula with its inputs filled in, e.g. "125,226,240 params × 2 B"."""
        if not self.formula:
            return ""
        try:
            return self.formula.format(**{k: _fmt(v) for k, v in self.inputs.items()})
        except (KeyError, IndexError, ValueError):
            return self.formula

    def to_json(self) -> dict[str, Any]:
        """JSON form: integer bytes/FLOPs/params where the value is whole."""
        value: float | int = self.value
        if self.unit in ("bytes", "params", "FLOPs", "cards") and float(value).is_integer():
            value = int(value)
        out: dict[str, Any] = {
            "name": self.name,
            "value": value,
            "unit": self.unit,
            "formula": self.formula,
            "explain": self.explain(),
            "inputs": self.inputs,
            "provenance": self.provenance,
        }
        if self.unit == "bytes":
            out["bytes"] = value
        if self.convention:
            out["convention"] = self.convention
        return out


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if value.is_integer() and abs(value) >= 1000 else f"{value:.4g}"
    return str(value)
