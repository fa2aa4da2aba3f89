"""How the Python API reads its keyword options: the checks every `stepbill.bill` / `stepbill.plan` keyword gets
before anything is built (one StepbillError naming the option — the Python name, or the flag under the CLI), and
the option values that need parsing (token counts, stage splits, LoRA targets, dp from the GPU count, the
micro-batches of a global batch). Pure: no engine, no I/O."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stepbill.errors import StepbillError

_POSITIVE_INTS = ("seq", "micro_batch", "tp", "pp", "cp", "ep", "vpp", "micro_batches")
_OPTIONAL_POSITIVE_INTS = ("dp", "etp", "shard_group", "gpus", "lora_rank")
_STRINGS = ("recipe", "optimizer", "recompute", "convention", "attention", "pp_schedule")
_OPTIONAL_STRINGS = ("optimizer_impl", "device")  # None: the device's default (api.kernels_of, default_optimizer_impl)
_FLAGS = ("sp", "offload_optimizer", "offload_activations")


def python_name(param: str) -> str:
    """How the API's own checks name a parameter: as it is spelled in Python."""
    return param


def check_options(options: Mapping[str, Any], name: Callable[[str], str]) -> None:
    """Types and ranges of the plain options, before anything is built: one StepbillError naming the option."""
    for key in _POSITIVE_INTS + _OPTIONAL_POSITIVE_INTS:
        value = options[key]
        if value is None and key in _OPTIONAL_POSITIVE_INTS:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise StepbillError(f"{name(key)} must be a positive integer, got {value!r}")
    zero = options["zero"]
    if isinstance(zero, bool) or not isinstance(zero, int) or zero not in (0, 1, 2, 3):
        raise StepbillError(f"{name('zero')} must be 0, 1, 2 or 3, got {zero!r}")
    for key in _STRINGS:
        if not isinstance(options[key], str):
            raise StepbillError(f"{name(key)} must be a string, got {options[key]!r}")
    for key in _OPTIONAL_STRINGS:
        if options[key] is not None and not isinstance(options[key], str):
            raise StepbillError(f"{name(key)} must be a string, got {options[key]!r}")
    for key in _FLAGS:
        if not isinstance(options[key], bool):
            raise StepbillError(f"{name(key)} must be True or False, got {options[key]!r}")
    from stepbill.spec.schema import EFFICIENCY, GPU_MEM_GIB, WORLD, check_value

    if options["gpu_mem_gib"] is not None:  # the rules are spec/schema.py's, declared once
        check_value(GPU_MEM_GIB, f"{name('gpu_mem_gib')} (GiB)", options["gpu_mem_gib"])
    if options["efficiency"] is not None:  # None: the per-op time model; a number overrides its GEMM rate
        check_value(EFFICIENCY, name("efficiency"), options["efficiency"])
    if options["gpus"] is not None:
        check_value(WORLD, name("gpus"), options["gpus"])
    check_finite(options["reserve_gib"], "reserve_gib", name, "GiB")
    check_finite(options["host_mem_gib"], "host_mem_gib", name, "GiB per node", positive=True)
    gpu = options["gpu"]
    if gpu is not None and not isinstance(gpu, str):
        raise StepbillError(f"{name('gpu')} must be a catalog GPU name, got {gpu!r}")


def check_finite(value: Any, param: str, name: Callable[[str], str], unit: str = "", positive: bool = False,
                 high: float = math.inf) -> None:
    """An optional number option (a reserve, a price, a deadline, a node's host memory): None, or a finite number
    ≥ 0 (> 0 when `positive`) and ≤ `high`; else one StepbillError naming the option and its unit."""
    if value is None:
        return
    if (not is_number(value) or not math.isfinite(value) or value < 0 or (positive and value == 0)
            or value > high):
        bound = "> 0" if positive else ">= 0"
        top = f" and at most {high:,g}" if math.isfinite(high) else ""
        raise StepbillError(f"{name(param)} must be {bound}{top} and finite{f' ({unit})' if unit else ''}, "
                            f"got {value!r}")


#: The largest price per GPU-hour taken: far above any cloud's (tens of dollars), small enough that a run's cost
#: stays a finite number (a price of 1e308 made it inf).
MAX_PRICE_PER_GPU_HOUR = 1e9
#: The largest token count taken (--train-tokens, --global-batch-tokens): 1e18, a million times a 2026 frontier
#: run's; a larger count made the run's seconds inf.
MAX_TOKENS = 10**18


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def lora_targets_of(targets: str | Sequence[str] | None, name: Callable[[str], str]) -> tuple[str, ...] | None:
    if targets is None:
        return None
    if isinstance(targets, str):
        return tuple(t.strip() for t in targets.split(",") if t.strip())
    if not all(isinstance(t, str) for t in targets):
        raise StepbillError(f"{name('lora_targets')} must be names of matrices, got {targets!r}")
    return tuple(t.strip() for t in targets if t.strip())


TOKEN_SUFFIXES = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12,
                  "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}


def parse_tokens(value: int | str | None, param: str, name: Callable[[str], str] = python_name) -> int | None:
    """A token count from an int or a string with a suffix: decimal K / M / B (or G) / T (4M = 4,000,000;
    2T = 2e12; 1.5T allowed when whole), binary Ki / Mi / Gi / Ti (4Mi = 4,194,304). None stays None."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        count = value
    elif isinstance(value, str):
        text = value.strip().replace(",", "").replace("_", "")
        digits = text.rstrip("KkMmBbGgTtIi")
        suffix = text[len(digits):].upper()
        try:
            number = float(digits)
        except ValueError:
            number = math.nan
        if suffix not in TOKEN_SUFFIXES or not math.isfinite(number) or number * TOKEN_SUFFIXES[suffix] % 1:
            raise StepbillError(f"{name(param)} takes a whole token count such as 4M, 2T or 4Mi (binary), "
                                f"got {value!r}")
        count = int(number * TOKEN_SUFFIXES[suffix])
    else:
        raise StepbillError(f"{name(param)} must be a token count such as 4M or 2T, got {value!r}")
    if count < 1:
        raise StepbillError(f"{name(param)} must be at least 1 token, got {value!r}")
    if count > MAX_TOKENS:
        raise StepbillError(f"{name(param)} must be at most {MAX_TOKENS:.0e} tokens, got {value!r}")
    return count


def micro_batches_of(global_batch: int | None, micro_batches: int, dp: int, micro_batch: int, seq: int,
                   name: Callable[[str], str]) -> int:
    """Micro-batches per step from the global batch: global batch ÷ (dp·micro-batch·seq), rounded to the nearest
    whole count (at least 1) — "4M tokens" in papers is a round figure (Llama 3's is 512 × 8,192 = 4,194,304);
    the run's lines state the requested and the effective batch (engine/run.py)."""
    if global_batch is None:
        return micro_batches
    if micro_batches != 1:
        raise StepbillError(f"give {name('global_batch_tokens')} or {name('micro_batches')}, not both")
    unit = dp * micro_batch * seq
    return max(1, math.floor(global_batch / unit + 0.5))


def stage_layers_of(value: str | Sequence[int] | None, name: Callable[[str], str]) -> tuple[int, ...] | None:
    """Layers per pipeline stage from "7,8,8,7" or (7, 8, 8, 7); None stays None."""
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",")] if isinstance(value, str) else list(value)
    if isinstance(value, str) and parts and all(p.isascii() and p.isdigit() for p in parts):
        return tuple(int(p) for p in parts)
    if not isinstance(value, str) and parts and all(isinstance(p, int) and not isinstance(p, bool) and p > 0
                                                    for p in parts):
        return tuple(parts)
    raise StepbillError(f"{name('pp_layers')} takes comma-separated positive integers, got {value!r}")


def data_parallel_of(dp: int | None, gpus: int | None, tp: int, pp: int, cp: int,
                   name: Callable[[str], str]) -> tuple[int, str]:
    """dp as given; without it, gpus ÷ (tp·pp·cp) when gpus is given (said in the header), else 1."""
    if dp is not None:
        return dp, ""
    if gpus is None:
        return 1, ""
    model_parallel = tp * pp * cp
    if gpus % model_parallel:
        raise StepbillError(f"{name('gpus')} {gpus} is not a multiple of tp·pp·cp = {tp}·{pp}·{cp} = "
                            f"{model_parallel}; give {name('dp')}")
    dp = gpus // model_parallel
    return dp, f"dp {dp} = {name('gpus')} {gpus} ÷ tp·pp·cp {model_parallel} (no {name('dp')} given)"
