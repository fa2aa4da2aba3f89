"""The base of every JSON output schema: strict types, finite numbers, no undeclared keys, and keys that are left out
(never null) when they do not apply."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

Number = int | float  # a finite JSON number (float fields refuse NaN and Infinity)


JsonScalar = str | int | float | bool | None


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def Absent(description: str) -> Any:
    """A key the output leaves out when it does not apply (never null): optional, no default in the schema."""
    return Field(None, description=description, json_schema_extra=_no_default)


class Strict(BaseModel):
    """Base of every schema: strict types, finite numbers, no undeclared keys."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)
