"""`--fix`: the planner's axes a user pins, parsed from `tp=8,pp=16` strings or a mapping (engine/plan/space.py
searches what is left)."""

from __future__ import annotations

from collections.abc import Mapping

from stepbill.engine.plan.axes import BUDGET_AT_FREE, EVERY_SEARCHED
from stepbill.errors import StepbillError

__all__ = ["FIX_ALIASES", "FIX_KEYS", "parse_fix"]

#: Fixable axes (`--fix key=value`) and the type of their value.
FIX_KEYS: dict[str, type] = {
    "dp": int, "tp": int, "pp": int, "cp": int, "ep": int, "etp": int, "zero": int, "shard_group": int, "vpp": int,
    "pp_layers": tuple, "micro_batch": int, "micro_batches": int, "sp": bool, "schedule": str, "recompute": str,
    "offload_optimizer": bool, "offload_activations": bool,
}
FIX_ALIASES = {"mb": "micro_batch", "m": "micro_batches", "pp_schedule": "schedule"}

def parse_fix(texts: list[str] | tuple[str, ...] | Mapping[str, object] | None) -> tuple[tuple[str, object], ...]:
    """`["tp=8,pp=16", "zero=1"]` (or a mapping) → sorted (axis, value) pairs; unknown axes and bad values raise."""
    if not texts:
        return ()
    pairs: list[tuple[str, str | object]] = []
    if isinstance(texts, Mapping):
        pairs = list(texts.items())
    else:
        for text in texts:
            for part in str(text).split(","):
                if not part.strip():
                    continue
                key, sep, value = part.partition("=")
                if not sep and pairs and pairs[-1][0].replace("-", "_") == "pp_layers":  # pp_layers=7,8,8,7
                    pairs[-1] = (pairs[-1][0], f"{pairs[-1][1]},{part.strip()}")
                    continue
                if not sep:
                    raise StepbillError(f"--fix takes axis=value pairs such as tp=8,pp=16, got {part.strip()!r}")
                pairs.append((key.strip(), value.strip()))
    out: dict[str, object] = {}
    for key, value in pairs:
        key = FIX_ALIASES.get(key.replace("-", "_"), key.replace("-", "_"))
        if key not in FIX_KEYS:
            raise StepbillError(f"--fix: unknown axis {key!r}; axes: {', '.join(FIX_KEYS)}")
        out[key] = _fix_value(key, value)
    return tuple(sorted(out.items()))


def _fix_value(key: str, value: object) -> object:
    kind = FIX_KEYS[key]
    if kind is bool:
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("1", "true", "on", "yes"):
            return True
        if str(value).lower() in ("0", "false", "off", "no"):
            return False
        raise StepbillError(f"--fix {key} takes on or off, got {value!r}")
    if kind is int:
        text = str(value)
        if isinstance(value, bool) or not text.isdigit() or int(text) < (0 if key == "zero" else 1):
            raise StepbillError(f"--fix {key} takes a positive integer, got {value!r}")
        if key == "zero" and int(text) > 3:
            raise StepbillError(f"--fix zero takes 0, 1, 2 or 3, got {value!r}")
        return int(text)
    if kind is tuple:
        return _fix_split(value)
    if key == "schedule" and value not in ("1f1b", "interleaved", "gpipe"):
        raise StepbillError(f"--fix schedule takes 1f1b, interleaved or gpipe, got {value!r}")
    if key == "recompute":
        if str(value) in (EVERY_SEARCHED, "budget", BUDGET_AT_FREE):  # the searched K / the rank's free memory
            return EVERY_SEARCHED if str(value) == EVERY_SEARCHED else BUDGET_AT_FREE
        from stepbill.spec.recompute_policy import parse_recompute

        parse_recompute(str(value))
    return str(value)


def _fix_split(value: object) -> tuple[int, ...] | None:
    """`--fix pp_layers=7,8,8,7` (or a sequence of ints) → the stage split; `default` → None (the bill's split)."""
    if value is None or str(value).strip() == "default":
        return None
    parts = [str(v).strip() for v in value] if isinstance(value, (tuple, list)) else str(value).split(",")
    if not parts or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise StepbillError(f"--fix pp_layers takes positive layer counts such as 7,8,8,7 (or default), got {value!r}")
    return tuple(int(p) for p in parts)
