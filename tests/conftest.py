"""Shared test helpers."""

from __future__ import annotations

import pytest

GIB = 2**30
TIB = 2**40
KIB = 2**10


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run `stepbill argv` in-process; returns (exit code, stdout, stderr)."""
    from stepbill.cli import main

    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err
