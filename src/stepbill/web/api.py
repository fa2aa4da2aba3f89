"""The web API's computations, free of HTTP: options in (CLI names, strings or JSON values), JSON out.

Every function returns exactly what the matching CLI command prints with `--json` for the same inputs: it parses
the options into the same keyword arguments and calls the same functions (`stepbill.api.make_step_bill`,
`ranking_from_options`, `report.bill_json.bill_to_json`, ...). Bad input raises StepbillError with a one-line
message; no file path is ever read (a model is a preset name or a config sent as JSON content).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import math
import shlex
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, get_args

from stepbill.errors import StepbillError, unknown_name
from stepbill.spec.model import ModelSpec

MAX_CONFIG_BYTES = 1 << 20  # a pasted or uploaded config.json: 1 MiB, the same as the request body limit
CONFIG_MODEL = "config"  # the `model` value that means "the config sent with the request"
DEFAULT_MODEL = "gpt3-125m"  # `stepbill bill`'s default MODEL (stepbill.cli.DEFAULT_MODEL; a test keeps them equal)


@dataclass(frozen=True)
class Option:
    """One CLI option of a command as the API takes it: `name` is the CLI spelling without `--`."""

    name: str
    kwarg: str
    kind: type  # int, float, str or bool
    default: Any
    optional: bool = False  # None is allowed (the CLI option has no default value)


BILL_OPTIONS: tuple[Option, ...] = (  # `stepbill bill`'s options; kwarg: stepbill.api.make_step_bill's parameter
    Option("seq", "seq", int, 2048),
    Option("micro-batch", "micro_batch", int, 1),
    Option("recipe", "recipe", str, "mixed-bf16"),
    Option("optimizer", "optimizer", str, "adamw"),
    Option("recompute", "recompute", str, "none"),
    Option("optimizer-impl", "optimizer_impl", str, None, optional=True),
    Option("convention", "convention", str, "ideal"),
    Option("attention", "attention", str, "sdpa"),
    Option("lora-rank", "lora_rank", int, None, optional=True),
    Option("lora-targets", "lora_targets", str, None, optional=True),
    Option("gpu-mem", "gpu_mem_gib", float, None, optional=True),
    Option("reserve", "reserve_gib", float, None, optional=True),
    Option("host-mem", "host_mem_gib", float, None, optional=True),
    Option("dp", "dp", int, None, optional=True),
    Option("tp", "tp", int, 1),
    Option("pp", "pp", int, 1),
    Option("pp-layers", "pp_layers", str, None, optional=True),
    Option("cp", "cp", int, 1),
    Option("ep", "ep", int, 1),
    Option("etp", "etp", int, None, optional=True),
    Option("zero", "zero", int, 0),
    Option("shard-group", "shard_group", int, None, optional=True),
    Option("sp", "sp", bool, False),
    Option("pp-schedule", "pp_schedule", str, "1f1b"),
    Option("vpp", "vpp", int, 1),
    Option("micro-batches", "micro_batches", int, 1),
    Option("offload-optimizer", "offload_optimizer", bool, False),
    Option("offload-activations", "offload_activations", bool, False),
    Option("gpu", "gpu", str, None, optional=True),
    Option("gpus", "gpus", int, None, optional=True),
    Option("efficiency", "efficiency", float, None, optional=True),
)

RECOMPUTE_OPTIONS: tuple[Option, ...] = (
    Option("seq", "seq", int, 131_072),
    Option("micro-batch", "micro_batch", int, 1),
    Option("recipe", "recipe", str, "mixed-bf16"),
    Option("layer-kind", "layer_kind", str, None, optional=True),
    Option("group", "group", str, "op"),
    Option("row7", "row7", str, "seed"),
    Option("threshold", "threshold", float, 3.0),
    Option("budget", "budget", str, None, optional=True),
    Option("convention", "convention", str, "ideal"),
    Option("attention", "attention", str, "sdpa"),
)

PLAN_OPTIONS: tuple[Option, ...] = (  # `stepbill plan`'s options; kwarg: stepbill.plan's parameter
    Option("gpu", "gpu", str, None, optional=True),
    Option("gpus", "gpus", int, None, optional=True),
    Option("max-gpus", "max_gpus", int, None, optional=True),
    Option("seq", "seq", int, 2048),
    Option("global-batch-tokens", "global_batch_tokens", str, None, optional=True),
    Option("micro-batch", "micro_batch", int, None, optional=True),
    Option("recipe", "recipe", str, "mixed-bf16"),
    Option("optimizer", "optimizer", str, "adamw"),
    Option("objective", "objective", str, "time"),
    Option("top", "top", int, 10),
    Option("reserve", "reserve_gib", float, None, optional=True),
    Option("host-mem", "host_mem_gib", float, None, optional=True),
    Option("fix", "fix", str, None, optional=True),
    Option("cross-node", "cross_node", bool, False),
    Option("efficiency", "efficiency", float, None, optional=True),
)
PLAN_SECONDS = 8.0  # the web's planner stops searching after this long and says how much it left (under 10 s)
PLAN_POINTS = 2000  # fitting layouts sent for the scatter, best first

# Options of one command that the other ignores: the page sends one state to both routes.
RECOMPUTE_ONLY = tuple(o.name for o in RECOMPUTE_OPTIONS if o.name not in {b.name for b in BILL_OPTIONS})
BILL_ONLY = tuple(o.name for o in BILL_OPTIONS if o.name not in {r.name for r in RECOMPUTE_OPTIONS})

# Keys a request may carry besides a command's options: the model, a config sent as JSON content and its name.
MODEL_KEYS = ("model", "config", "config-name")


_TRUE = ("true", "1", "yes", "y", "on", "t")
_FALSE = ("false", "0", "no", "n", "off", "f")


def _coerce(option: Option, value: Any) -> Any:
    """`value` (a query-string text or a JSON value) as the option's type; else the CLI's wording (typer 0.2x)."""
    flag = f"--{option.name}"
    if value is None or (option.optional and value == ""):
        if option.optional:
            return None
        raise StepbillError(f"Invalid value for '{flag}': a value is required")
    if option.kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
            return value.strip().lower() in _TRUE
        raise StepbillError(f"Invalid value for '{flag}': {value!r} is not a valid boolean")
    if option.kind is str:
        if not isinstance(value, str):
            raise StepbillError(f"Invalid value for '{flag}': {json.dumps(value)} is not a string")
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    number = None
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = option.kind(value.strip())
    if number is not None:
        return number  # inf and nan pass, as on the command line: the CLI's own checks name them
    what = ("a valid integer, unable to parse string as an integer" if option.kind is int
            else "a valid number, unable to parse string as a number")
    raise StepbillError(f"Invalid value for '{flag}': Input should be {what}")


def parse_options(options: tuple[Option, ...], given: Mapping[str, Any], ignore: tuple[str, ...] = ()) -> dict[str, Any]:
    """Keyword arguments for the command's function: defaults, overridden by `given` (CLI names).

    An unknown key is an error naming the nearest known one (a typo is never silently ignored).
    """
    by_name = {o.name: o for o in options}
    kwargs = {o.kwarg: o.default for o in options}
    for key, value in given.items():
        if key in MODEL_KEYS or key in ignore:
            continue
        if key not in by_name:
            raise unknown_name("option", key, [*by_name, *MODEL_KEYS])
        option = by_name[key]
        kwargs[option.kwarg] = _coerce(option, value)
    return kwargs


def spec_from_config(config: Any, name: str = "custom") -> ModelSpec:
    """A ModelSpec from a config sent as JSON content: a Hugging Face config.json or a ModelSpec JSON.

    The same two readings as `stepbill.spec.presets.load_model` gives a file, without touching a file.
    """
    if isinstance(config, str):
        if len(config.encode()) > MAX_CONFIG_BYTES:
            raise StepbillError(f"config is larger than {MAX_CONFIG_BYTES:,} bytes")
        try:
            config = json.loads(config)
        except json.JSONDecodeError as exc:
            raise StepbillError(f"config is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(config, dict):
        raise StepbillError("config must hold a JSON object")
    if "model_type" in config:
        from stepbill.spec.hf import from_hf_config

        return from_hf_config(config, name=name)
    # sizes are bounded by the input schema (spec/schema.py: ≤ 10,000 layers, ...), which keeps a bill well under
    # a second: the bill is linear in layers and experts, and a worker thread cannot be killed
    return ModelSpec.from_dict(config)


def resolve_model(given: Mapping[str, Any], default: str) -> ModelSpec:
    """The request's model: a preset name (`model`), or `model=config` with `config` holding its JSON."""
    from stepbill.spec.presets import load_preset

    model = given.get("model")
    config = given.get("config")
    if model == CONFIG_MODEL or (model is None and config is not None):
        if config is None:
            raise StepbillError("model 'config' needs the config.json content in 'config'")
        name = given.get("config-name") or "custom"
        if not isinstance(name, str):
            raise StepbillError("config-name must be a string")
        return spec_from_config(config, name)
    if config is not None:
        raise StepbillError(f"give either model={model!r} or a config (model=config), not both")
    if model is None:
        model = default
    if not isinstance(model, str):
        raise StepbillError(f"model must be a preset name, got {model!r}")
    return load_preset(model)  # never load_model: that one reads paths


def _bill(given: Mapping[str, Any]) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """(engine bill, `stepbill bill --json`, parsed options) for the options in `given`: the CLI's own steps —
    stepbill.api.make_step_bill naming options by their flags, then BillRun.to_json."""
    from dataclasses import replace

    from stepbill.api import _seed_notes, cli_flag, make_step_bill

    kwargs = parse_options(BILL_OPTIONS, given, ignore=RECOMPUTE_ONLY)
    # a ModelSpec, never the name: make_step_bill reads a str as a path when such a file exists
    run = make_step_bill(resolve_model(given, DEFAULT_MODEL), **kwargs, name=cli_flag)
    model = given.get("model", DEFAULT_MODEL)
    if isinstance(model, str) and model != CONFIG_MODEL:  # seed 000's notes, as make_step_bill adds for a name
        notes = _seed_notes(model, kwargs["seq"], kwargs["micro_batch"], kwargs["recompute"],
                            tuple(kwargs[k] for k in ("recipe", "optimizer", "convention", "attention", "lora_rank")),
                            run.bill.recipe.parallel)
        run = replace(run, seed_notes=tuple(notes))
    return run.bill, run.to_json(), kwargs


def bill_json(given: Mapping[str, Any]) -> dict[str, Any]:
    """`stepbill bill MODEL [options] --json` for the options in `given` (CLI names)."""
    return _bill(given)[1]


def view_json(given: Mapping[str, Any]) -> dict[str, Any]:
    """What the page shows for one state: the bill (as `bill --json`), the time lines in full, the CLI commands."""
    bill, out, kwargs = _bill(given)
    try:  # a bad ranking option is the ranking panel's error (from /api/recompute), not the bill's
        recompute_command: str | None = cli_command("recompute", RECOMPUTE_OPTIONS,
                                                    parse_options(RECOMPUTE_OPTIONS, given, ignore=BILL_ONLY), given)
    except StepbillError:
        recompute_command = None
    return {
        "bill": out,
        # the CLI's JSON gives time lines as value + explain; the page shows their formula and inputs too
        "time_lines": {} if bill.time is None else {
            k.removeprefix("time."): v.to_json() for k, v in bill.time.lines.items()},
        "command": cli_command("bill", BILL_OPTIONS, kwargs, given),
        "recompute_command": recompute_command,  # the page's ranking panel, in a terminal
    }


def recompute_json(given: Mapping[str, Any], default_model: str = "deepseek-v3") -> dict[str, Any]:
    """`stepbill recompute MODEL [options] --json` for the options in `given` (bill-only options ignored)."""
    from stepbill.api import ranking_from_options
    from stepbill.report.recompute_table import ranking_to_json

    kwargs = parse_options(RECOMPUTE_OPTIONS, given, ignore=BILL_ONLY)
    if not math.isfinite(kwargs["threshold"]):  # the CLI prints NaN into its JSON; JSON has no NaN
        raise StepbillError(f"--threshold must be a finite number (TFLOP per GiB), got {kwargs['threshold']}")
    _, ranking, crossings, slope, solved = ranking_from_options(resolve_model(given, default_model), **kwargs)
    return ranking_to_json(ranking, crossings, slope, solved)


def plan_json(given: Mapping[str, Any]) -> dict[str, Any]:
    """`stepbill plan MODEL [options] --json` for the options in `given` (CLI names), searched for at most
    PLAN_SECONDS, exhaustive (the page's scatter shows every fitting layout, up to PLAN_POINTS, best first, as a point
    with its command and whether it sits on a Pareto front), and the CLI command of the search itself."""
    from stepbill.api import cli_flag
    from stepbill.api_plan import plan
    from stepbill.report.plan_json import row_to_json

    kwargs = parse_options(PLAN_OPTIONS, given)
    if kwargs["gpu"] is None:
        raise StepbillError("--gpu is required for the planner: pick a GPU")
    model = given.get("model", DEFAULT_MODEL)
    spec = resolve_model(given, DEFAULT_MODEL)
    run = plan(spec if model == CONFIG_MODEL or "config" in given else model, **kwargs, name=cli_flag,
               deadline_s=PLAN_SECONDS, exhaustive=True)  # the scatter shows every layout that fits
    front = {id(r) for r in (*run.result.gpus_vs_time, *run.result.memory_vs_time)}
    points = []
    for i, row in enumerate(run.rows[:PLAN_POINTS]):
        point = row_to_json(row, i + 1)
        point["front"] = id(row) in front
        points.append(point)
    return {"plan": run.to_json(), "points": points,
            "command": cli_command("plan", PLAN_OPTIONS, kwargs, given) + " --exhaustive"}


def cli_command(command: str, options: tuple[Option, ...], kwargs: Mapping[str, Any], given: Mapping[str, Any]) -> str:
    """The `stepbill COMMAND ...` line that prints the same numbers as `kwargs` (options at their default left out).

    A config sent as content appears as `config.json`: the file the user would save it to.
    """
    model = given.get("model", DEFAULT_MODEL)
    parts = ["stepbill", command, "config.json" if model == CONFIG_MODEL or "config" in given else str(model)]
    for o in options:
        value = kwargs[o.kwarg]
        if value is None or value == o.default:
            continue
        if o.kind is bool:
            parts.append(f"--{o.name}")
        elif isinstance(value, float):
            parts += [f"--{o.name}", f"{value:g}" if float(f"{value:g}") == value else repr(value)]
        else:
            parts += [f"--{o.name}", str(value)]
    return shlex.join(parts)


_capture_lock = threading.Lock()


def _cli_json(command: Callable[..., None], **overrides: Any) -> Any:
    """Run a CLI command function with `--json` (its declared defaults, then `overrides`) and parse what it prints.

    Used for the constant answers (models, lab topics) so they are the CLI's output byte for byte.
    """
    kwargs: dict[str, Any] = {}
    for name, param in inspect.signature(command).parameters.items():
        default = param.default
        kwargs[name] = getattr(default, "default", default)  # typer.Option(...) as a default holds the value
    kwargs.update(overrides, as_json=True)
    buffer = io.StringIO()
    with _capture_lock, contextlib.redirect_stdout(buffer):
        command(**kwargs)
    return json.loads(buffer.getvalue())


@cache
def models_json() -> list[dict[str, Any]]:
    """`stepbill models --json`: the same rows from stepbill.api.models()."""
    from dataclasses import asdict

    from stepbill.api import models

    return [asdict(info) for info in models()]


# the mechanics topics at their defaults (backprop is left out: its default checks import torch and take ~16 s;
# seed-checks is a table of claims, not a figure)
LAB_TOPICS = ("adam", "warmup", "schedule", "clip", "formats", "collectives", "decay", "descent", "memory")


@cache
def lab_json(topic: str) -> dict[str, Any]:
    """`stepbill lab TOPIC --json` with the command's defaults (the seeds' values)."""
    if topic not in LAB_TOPICS:
        raise unknown_name("lab topic", topic, LAB_TOPICS)
    from stepbill.lab import cli as lab_cli

    command = {c.name: c.callback for c in lab_cli.app.registered_commands}[topic]
    assert command is not None
    extra = {"plot": None} if "plot" in inspect.signature(command).parameters else {}
    if topic == "clip":
        extra["trace"] = None  # never a path from the web
    return _cli_json(command, **extra)


@cache
def gpus_json() -> list[dict[str, Any]]:
    """The GPU catalog: name, display name, memory (bytes), dense peaks (FLOP/s), bandwidths (B/s), source."""
    from dataclasses import asdict

    from stepbill.spec.hardware import gpu_catalog

    return [asdict(g) for g in gpu_catalog().values()]


@cache
def choices_json() -> dict[str, Any]:
    """The names the page's pickers offer (recipes, optimizers, ...): the same lists the CLI validates against."""
    from stepbill.engine.activations import ATTENTIONS, CONVENTIONS
    from stepbill.spec.parallel import ZERO_STAGES, PPSchedule
    from stepbill.spec.presets import preset_names
    from stepbill.spec.recipe import OPTIMIZER_IMPLS, OPTIMIZERS, PRECISIONS

    return {
        "models": list(preset_names()),
        "default_model": DEFAULT_MODEL,
        "recipes": list(PRECISIONS),
        "optimizers": list(OPTIMIZERS),
        "optimizer_impls": list(OPTIMIZER_IMPLS),
        "conventions": list(CONVENTIONS),
        "attentions": list(ATTENTIONS),
        "zero": list(ZERO_STAGES),
        "pp_schedules": list(get_args(PPSchedule)),
        "gpus": [{"name": g["name"], "display": g["display"]} for g in gpus_json()],
        "lab_topics": list(LAB_TOPICS),
        "bill_options": [{"name": o.name, "default": o.default} for o in BILL_OPTIONS],
        "recompute_options": [{"name": o.name, "default": o.default} for o in RECOMPUTE_OPTIONS],
        "max_config_bytes": MAX_CONFIG_BYTES,
    }
