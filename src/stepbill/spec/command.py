"""How a `stepbill bill` command spells its options: a parameter's flag, and a whole command from keywords.

One place for both, used by the API's error messages (api.cli_flag), the planner's rows (engine/plan) and
`stepbill fit`'s answer (api_fit), so every printed command is spelled the same way.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

#: Where the CLI flag is not "--" + the parameter with dashes.
CLI_FLAGS = {"gpu_mem_gib": "--gpu-mem", "reserve_gib": "--reserve", "host_mem_gib": "--host-mem",
             "deadline_s": "--max-seconds"}


def cli_flag(param: str) -> str:
    """The CLI flag of a keyword parameter (`micro_batch` → `--micro-batch`, `reserve_gib` → `--reserve`)."""
    return CLI_FLAGS.get(param, "--" + param.replace("_", "-"))


def bill_command(model: str, options: Mapping[str, Any]) -> str:
    """`stepbill bill MODEL --flag value …` for `options` in their order: True as a bare flag, False and None left
    out, sequences joined with commas, floats without a trailing `.0`."""
    parts = ["stepbill", "bill", shlex.quote(model)]
    for key, value in options.items():
        if value is None or value is False:
            continue
        if value is True:
            parts.append(cli_flag(key))
            continue
        if isinstance(value, (tuple, list)):
            text = ",".join(str(v) for v in value)
        else:
            text = (repr(value) if isinstance(value, float) else str(value)).removesuffix(".0")
        parts += [cli_flag(key), shlex.quote(text)]
    return " ".join(parts)
