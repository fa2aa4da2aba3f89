"""The one error type stepbill raises for bad input; the CLI turns it into one line and exit 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class StepbillError(ValueError):
    """Bad input from the user: unknown name, malformed file, impossible size. Message is one line."""


def unknown_name(kind: str, name: str, known: Iterable[str]) -> StepbillError:
    """An error for an unknown `name` that suggests the nearest valid one."""
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return StepbillError(f"unknown {kind} {name!r}{hint} (known: {', '.join(known)})")
