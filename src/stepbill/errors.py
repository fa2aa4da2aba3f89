"""The one error type stepbill raises for bad input; the CLI turns it into one line and exit 2."""

from __future__ import annotations

import difflib
import importlib.util
from collections.abc import Iterable
from typing import Any

#: Optional imports and the extra of pyproject.toml that installs each (`pip install 'stepbill[EXTRA]'`).
EXTRAS: dict[str, str] = {
    "torch": "measure",
    "transformers": "measure",
    "peft": "measure",
    "scipy": "solve",
    "matplotlib": "plot",
    "fastapi": "web",
    "uvicorn": "web",
    "huggingface_hub": "hub",
}


class StepbillError(ValueError):
    """Bad input from the user: unknown name, malformed file, impossible size. Message is one line."""


def unknown_name(kind: str, name: str, known: Iterable[str]) -> StepbillError:
    """An error for an unknown `name` that suggests the nearest valid one."""
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return StepbillError(f"unknown {kind} {shown(name)}{hint} (known: {', '.join(known)})")


def shown(value: Any, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters: control characters escaped, so a message stays one line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(text: str) -> str:
    """`text` with every control character (newline, carriage return, escape...) written as an escape."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def has_module(module: str) -> bool:
    """Whether `module` can be imported, without importing it (a module hidden as None counts as missing)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules[module] is None (blocked)
        return False


def require_extra(module: str, purpose: str) -> None:
    """Raise a one-line StepbillError naming the extra that installs `module` when it is missing.

    `purpose` completes "<purpose> needs <module>", e.g. "stepbill serve"."""
    if not has_module(module):
        extra = EXTRAS.get(module.split(".")[0], "dev")
        raise StepbillError(f"{purpose} needs {module}, which is not installed: pip install 'stepbill[{extra}]'")
