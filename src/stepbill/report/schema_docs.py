"""docs/json.md's key tables, generated from the JSON Schema of each command (report/schema.py).

`key_table("bill")` walks the schema: one row per key (dotted path, `[]` for list items, `.*` for map values),
its JSON type and its description. A type defined once (a Line, say) is expanded where it first appears and
referred to after that. scripts/refresh_docs.py writes the tables between `<!-- schema:COMMAND -->` markers.
"""

from __future__ import annotations

from typing import Any

from stepbill.report.schema import json_schema

_SCALARS = {"integer": "integer", "number": "number", "string": "string", "boolean": "boolean", "null": "null"}


def _def_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _branches(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The alternatives of a node (anyOf / oneOf), or the node itself."""
    for key in ("anyOf", "oneOf"):
        if key in node:
            return list(node[key])
    return [node]


def _type_of(node: dict[str, Any], defs: dict[str, Any]) -> str:
    parts = []
    for branch in _branches(node):
        if "$ref" in branch:
            parts.append(_def_name(branch["$ref"]))
        elif "const" in branch:
            parts.append(f'"{branch["const"]}"')
        elif "enum" in branch:
            parts.append(" or ".join(f'"{v}"' for v in branch["enum"]))
        elif branch.get("type") == "array":
            parts.append(f"list of {_type_of(branch.get('items', {}), defs)}")
        elif branch.get("type") == "object":
            extra = branch.get("additionalProperties")
            parts.append(f"map of {_type_of(extra, defs)}" if isinstance(extra, dict) and extra else "object")
        elif "type" in branch:
            parts.append(_SCALARS.get(branch["type"], str(branch["type"])))
        else:
            parts.append("any")
    if "integer" in parts and "number" in parts:
        parts.remove("integer")
    return " or ".join(parts)


def _object_def(node: dict[str, Any], defs: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(definition name, definition) when the node (or one of its branches) is an object with properties."""
    for branch in _branches(node):
        if "$ref" in branch:
            name = _def_name(branch["$ref"])
            if "properties" in defs[name]:
                return name, defs[name]
    return None


def _children(node: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(suffix, child node) for a list's items or a map's values."""
    for branch in _branches(node):
        if branch.get("type") == "array" and isinstance(branch.get("items"), dict):
            return "[]", branch["items"]
        extra = branch.get("additionalProperties")
        if branch.get("type") == "object" and isinstance(extra, dict) and extra:
            return ".*", extra
    return None


def _rows(obj: dict[str, Any], defs: dict[str, Any], prefix: str, seen: dict[str, str]) -> list[tuple[str, str, str]]:
    rows = []
    required = set(obj.get("required", ()))
    for name, node in obj.get("properties", {}).items():
        key = f"{prefix}.{name}" if prefix else name
        text = node.get("description", "")
        if name not in required:
            text = f"{text} (key absent otherwise)" if text else "(key may be absent)"
        rows.append((key, _type_of(node, defs), text))
        rows += _expand(node, defs, key, seen)
    extra = obj.get("additionalProperties")
    if isinstance(extra, dict) and extra and obj.get("properties"):  # declared keys plus data keys (a moment's items)
        rows.append((f"{prefix}.*" if prefix else "*", _type_of(extra, defs), "every other key: a name and its value"))
    return rows


def _expand(node: dict[str, Any], defs: dict[str, Any], key: str, seen: dict[str, str]) -> list[tuple[str, str, str]]:
    found = _object_def(node, defs)
    if found is not None:
        name, definition = found
        if name in seen:
            return []
        seen[name] = key
        return _rows(definition, defs, key, seen)
    child = _children(node)
    if child is not None:
        suffix, inner = child
        return _expand(inner, defs, key + suffix, seen)
    return []


def key_rows(command: str) -> list[tuple[str, str, str]]:
    """(key, JSON type, meaning) for every key of `stepbill COMMAND --json`; a union (check) lists each form."""
    schema = json_schema(command)
    defs = schema.get("$defs", {})
    if "properties" in schema:
        return _rows(schema, defs, "", {})
    forms = [b for b in _branches(schema) if "$ref" in b and "properties" in defs[_def_name(b["$ref"])]]
    if len(forms) > 1:
        rows = []
        for form in forms:
            definition = defs[_def_name(form["$ref"])]
            rows.append(("(one form)", "object", definition.get("description", "")))
            rows += _rows(definition, defs, "", {})
        return rows
    return [("(top level)", _type_of(schema, defs), schema.get("description", "")), *_expand(schema, defs, "", {})]


def key_table(command: str) -> str:
    """The markdown table of `key_rows(command)`; a type seen before says where it was expanded."""
    lines = ["| key | type | meaning |", "|---|---|---|"]
    for key, kind, text in key_rows(command):
        cells = (f"`{key or '(item)'}`", kind, text)
        lines.append("| " + " | ".join(cell.replace("|", r"\|") for cell in cells) + " |")
    return "\n".join(lines)
