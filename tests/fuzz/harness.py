"""Run the CLI in-process with a time limit and check its contract: exit 0 with one valid JSON document (no NaN or
Infinity), or exit 2 with exactly one line on stderr and nothing on stdout. Anything else is a failure."""

from __future__ import annotations

import contextlib
import io
import json
import signal
from collections.abc import Iterator
from typing import Any

from stepbill.cli import main

#: Seconds one example may take before it counts as a hang (a bill takes milliseconds; a cold scipy import ~1 s).
EXAMPLE_LIMIT_S = 10


class Hang(Exception):
    """An example ran past EXAMPLE_LIMIT_S."""


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def alarm(*_: Any) -> None:
        raise Hang(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} in JSON output")


def run(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `stepbill argv`; an exception escaping main propagates (a traceback)."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with time_limit(EXAMPLE_LIMIT_S), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def _non_finite_strings(obj: Any) -> list[str]:
    """Values written as the strings "nan"/"inf" (a JSON-safe spelling of a number that is not one)."""
    if isinstance(obj, str):
        return [obj] if obj.strip().lower().lstrip("+-") in ("nan", "inf", "infinity") else []
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _non_finite_strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _non_finite_strings(v)]
    return []


def check_contract(argv: list[str]) -> tuple[int, Any]:
    """Run `argv` and assert the contract; returns (exit code, parsed JSON or the error line)."""
    code, out, err = run(argv)
    if code == 0:
        assert err == "", f"{argv!r}: exit 0 but stderr {err[:300]!r}"
        data = json.loads(out, parse_constant=_no_constant)
        # The lab writes a non-finite result of a number format as the string "nan"/"inf" on purpose (fp8_e4m3
        # overflowing to NaN is the lesson); the bill's numbers are all finite.
        if argv[0] != "lab":
            assert not _non_finite_strings(data), f"{argv!r}: non-finite numbers written as strings"
        return 0, data
    assert code == 2, f"{argv!r}: exit {code}, stderr {err[:300]!r}"
    assert out == "", f"{argv!r}: exit 2 but stdout {out[:200]!r}"
    assert err.count("\n") == 1 and err.endswith("\n") and err.startswith("stepbill: error: "), \
        f"{argv!r}: stderr is not one line: {err[:300]!r}"
    return 2, err
