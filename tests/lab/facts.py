"""The seed values the lab tests check, loaded from tests/data/seed_facts_lab.json (copied from the catalog)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FACTS: dict[str, Any] = json.loads((Path(__file__).parent.parent / "data" / "seed_facts_lab.json").read_text())


def fact(claim_id: str) -> dict[str, Any]:
    """One claim by its catalog id."""
    return FACTS[claim_id]
