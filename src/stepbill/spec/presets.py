"""Resolve a MODEL argument: a preset name, a ModelSpec JSON file, or a Hugging Face config.json."""

from __future__ import annotations

import dataclasses
import json
import math
import stat
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from stepbill.errors import StepbillError, one_line, shown, unknown_name
from stepbill.spec.model import ModelSpec


def _preset_dir() -> Any:
    return resources.files("stepbill") / "presets" / "models"


def _hub_dir() -> Any:
    return resources.files("stepbill") / "presets" / "hub"


@cache
def hub_presets() -> dict[str, str]:
    """The presets shipped as a Hugging Face config.json, copied from the Hub: preset name → its Hub id."""
    ids: dict[str, str] = json.loads((_hub_dir() / "hub_ids.json").read_text())
    return ids


@cache
def preset_names() -> tuple[str, ...]:
    """Names of the built-in model presets, sorted: the ModelSpec presets and the shipped Hub configs."""
    specs = [p.name[: -len(".json")] for p in _preset_dir().iterdir() if p.name.endswith(".json")]
    return tuple(sorted([*specs, *hub_presets()]))


def hub_preset_name(model: str) -> str | None:
    """The Hub preset `model` names — by its preset name or its Hub id (letter case aside: the Hub's ids are
    case-insensitive) — or None."""
    ids = hub_presets()
    return model if model in ids else next((n for n, i in ids.items() if i.lower() == model.lower()), None)


def shipped_config(model: str) -> tuple[dict[str, Any], str] | None:
    """The shipped config.json of the Hub preset `model` names (hub_preset_name) and the preset's name; None for any
    other model. Read with no network and no Hugging Face cache: a copy of the Hub's file (presets/hub/hub_ids.json
    names each one's source)."""
    name = hub_preset_name(model)
    if name is None:
        return None
    return json.loads((_hub_dir() / f"{name}.json").read_text()), name


@cache
def load_preset(name: str) -> ModelSpec:
    """The built-in preset `name` (e.g. "gpt3-125m", "llama3-8b", "deepseek-v3", "qwen3-8b")."""
    if name not in preset_names():
        raise unknown_name("model preset", name, preset_names())
    shipped = shipped_config(name)
    if shipped is not None:
        return _from_shipped(*shipped)
    data = json.loads((_preset_dir() / f"{name}.json").read_text())
    return ModelSpec.from_dict(data)


def _from_shipped(config: dict[str, Any], name: str) -> ModelSpec:
    from stepbill.spec.hf import from_hf_config

    spec = from_hf_config(config, name=name)
    source = f"{hub_presets()[name]}'s config.json, shipped with stepbill"
    return dataclasses.replace(spec, notes=f"{source}; {spec.notes}" if spec.notes else source)


#: Largest model file read: 4 MiB (a transformers config.json is a few KiB; DeepSeek-V3's is 1.7 KiB).
MAX_FILE_BYTES = 4 * 2**20
#: Deepest nesting of JSON arrays/objects accepted (a config nests 3 levels; 50,000 used to crash the parser).
MAX_JSON_DEPTH = 64
#: Longest integer literal accepted in a JSON file (20 digits holds any 64-bit count).
MAX_INT_DIGITS = 20


def _json_depth(text: str) -> int:
    """Deepest nesting of [ and { in JSON `text`, outside strings (a linear scan, no recursion)."""
    depth = deepest = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def _parse_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise StepbillError(f"an integer of {len(literal):,} digits (at most {MAX_INT_DIGITS} allowed)")
    return int(literal)


def _parse_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise StepbillError(f"{shown(literal)} overflows a finite number")
    return value


def _parse_constant(name: str) -> Any:
    raise StepbillError(f"{name} is not a JSON number (numbers must be finite)")


def read_text_file(path: Path, what: str = "") -> str:
    """The UTF-8 text of the regular file `path` (at most MAX_FILE_BYTES), or one StepbillError line.

    A FIFO, /dev/zero or a directory is refused before it is opened (reading one would block or never end)."""
    where = (what + " " if what else "") + one_line(str(path))
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise StepbillError(f"cannot read {where}: not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise StepbillError(f"cannot read {where}: {info.st_size:,} bytes (at most {MAX_FILE_BYTES:,})")
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except StepbillError:  # already one line (StepbillError is a ValueError: keep it out of the clause below)
        raise
    except OSError as exc:
        raise StepbillError(f"cannot read {where}: {exc.strerror or exc}") from None
    except ValueError as exc:  # an embedded NUL in the path
        raise StepbillError(f"cannot read {where}: {exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise StepbillError(f"cannot read {where}: over {MAX_FILE_BYTES:,} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StepbillError(f"{where} is not UTF-8 text (byte {exc.start:,})") from None


def read_json_file(path: Path) -> dict[str, Any]:
    """Read a JSON object from `path`, turning every failure into one StepbillError line.

    Only a regular file of at most MAX_FILE_BYTES, UTF-8, nested at most MAX_JSON_DEPTH deep, with integers of at
    most MAX_INT_DIGITS digits and no NaN/Infinity.
    """
    where = one_line(str(path))
    text = read_text_file(path)
    if _json_depth(text) > MAX_JSON_DEPTH:
        raise StepbillError(f"{where} nests JSON deeper than {MAX_JSON_DEPTH} levels")
    try:
        data = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)
    except json.JSONDecodeError as exc:
        raise StepbillError(f"{where} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    except StepbillError as exc:
        raise StepbillError(f"{where}: {exc}") from None
    if not isinstance(data, dict):
        raise StepbillError(f"{where} must hold a JSON object")
    return data


def config_name(path: Path) -> str:
    """The model name of a Hugging Face config file: its folder's for a `config.json` (the Hub's layout,
    `Llama-3-8B/config.json`), else the file's stem (`llama65b.json` → llama65b)."""
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return one_line(name)[:200]


def load_model(model: str) -> ModelSpec:
    """A preset name, a path to a ModelSpec JSON, a Hugging Face config.json (or a folder holding one), or a
    Hub id `org/name` that is not a local path: a shipped preset's (`shipped_config`: no network), else its
    config.json only, through huggingface_hub."""
    if not isinstance(model, str) or not model or "\x00" in model or len(model) > 4096:
        raise StepbillError(f"MODEL must be a preset name, a file path or a Hub id, got {shown(model)}")
    path = Path(model)
    try:
        if path.is_dir() and (path / "config.json").is_file():
            path = path / "config.json"
        is_file = model.endswith(".json") or path.exists()
    except OSError:  # a name the file system refuses (a component over 255 bytes): a file only if it says .json
        is_file = model.endswith(".json")
    if is_file:
        data = read_json_file(path)
        if "model_type" in data:
            from stepbill.spec.hf import from_hf_config

            return from_hf_config(data, name=config_name(path))
        return ModelSpec.from_dict(data)
    from stepbill.spec.hub import looks_like_hub_id

    name = hub_preset_name(model)
    if name is not None:  # a Hub preset, by its name or its Hub id: the shipped copy, no network
        return load_preset(name)
    if model not in preset_names() and looks_like_hub_id(model):
        from stepbill.spec.hf import from_hf_config
        from stepbill.spec.hub import download_config

        data = read_json_file(download_config(model))
        if "model_type" not in data:
            raise StepbillError(f"the config.json of Hub id {model!r} has no model_type: not a transformers model")
        return from_hf_config(data, name=model.split("/", 1)[1])
    return load_preset(model)
