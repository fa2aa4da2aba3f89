"""Resolve a MODEL argument: a preset name, a ModelSpec JSON file, or a Hugging Face config.json."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from stepbill.errors import StepbillError, unknown_name
from stepbill.spec.model import ModelSpec


def _preset_dir() -> Any:
    return resources.files("stepbill") / "presets" / "models"


@cache
def preset_names() -> tuple[str, ...]:
    """Names of the built-in model presets, sorted."""
    return tuple(sorted(p.name[: -len(".json")] for p in _preset_dir().iterdir() if p.name.endswith(".json")))


@cache
def load_preset(name: str) -> ModelSpec:
    """The built-in preset `name` (e.g. "gpt3-125m", "llama3-8b", "deepseek-v3")."""
    if name not in preset_names():
        raise unknown_name("model preset", name, preset_names())
    data = json.loads((_preset_dir() / f"{name}.json").read_text())
    return ModelSpec.from_dict(data)


def read_json_file(path: Path) -> dict[str, Any]:
    """Read a JSON object from `path`, turning every failure into one StepbillError line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise StepbillError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StepbillError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict):
        raise StepbillError(f"{path} must hold a JSON object")
    return data


def load_model(model: str) -> ModelSpec:
    """A preset name, a path to a ModelSpec JSON, a Hugging Face config.json (or a folder holding one), or a
    Hub id `org/name` that is not a local path (its config.json only, through huggingface_hub)."""
    path = Path(model)
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    if model.endswith(".json") or path.exists():
        data = read_json_file(path)
        if "model_type" in data:
            from stepbill.spec.hf import from_hf_config

            return from_hf_config(data, name=path.parent.name or path.stem)
        return ModelSpec.from_dict(data)
    from stepbill.spec.hub import looks_like_hub_id

    if model not in preset_names() and looks_like_hub_id(model):
        from stepbill.spec.hf import from_hf_config
        from stepbill.spec.hub import download_config

        data = read_json_file(download_config(model))
        if "model_type" not in data:
            raise StepbillError(f"the config.json of Hub id {model!r} has no model_type: not a transformers model")
        return from_hf_config(data, name=model.split("/", 1)[1])
    return load_preset(model)
