"""docs/api.md runs as written (doctest), and `stepbill.bill`'s keywords are exactly `stepbill bill`'s options."""

from __future__ import annotations

import doctest
import inspect
import os
from pathlib import Path
from typing import get_type_hints

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_api_md_examples_run_as_doctests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the examples read examples/configs/...
    result = doctest.testfile(os.fspath(ROOT / "docs" / "api.md"), module_relative=False,
                              optionflags=doctest.ELLIPSIS, raise_on_error=False, verbose=False)
    assert result.attempted > 20 and result.failed == 0


def test_api_keywords_mirror_the_cli_options() -> None:
    """Every `stepbill bill` option is a keyword of `stepbill.bill` (flag = cli_flag(keyword)), same default;
    `--sweep` is `stepbill.sweep` (tests/test_sweep.py), the output flags none."""
    import stepbill
    from stepbill import cli
    from stepbill.api import cli_flag

    cli_params = inspect.signature(cli.bill).parameters
    hints = get_type_hints(cli.bill, include_extras=True)
    cli_options = {}
    for name, param in cli_params.items():
        info = hints[name].__metadata__[0]
        decls = (info.default, *(info.param_decls or ()))  # typer keeps Annotated's first flag in `default`
        flags = [d for d in decls if isinstance(d, str) and d.startswith("--")]
        if flags and flags[0] not in ("--json", "--explain", "--quiet", "--sweep"):
            cli_options[flags[0]] = param.default
    api_params = inspect.signature(stepbill.bill).parameters
    api_options = {cli_flag(name): p.default for name, p in api_params.items() if name != "model"}
    assert api_options == cli_options
    assert api_params["model"].default == cli_params["model"].default


def test_readme_python_api_example_prints_what_the_readme_shows() -> None:
    import contextlib
    import io
    import re

    readme = (ROOT / "README.md").read_text()
    code = re.search(r"## Python API.*?```python\n(.*?)```", readme, re.S)
    shown = re.search(r"<!-- out:api -->\n```text\n(.*?)\n```", readme, re.S)
    assert code and shown
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.group(1), "README.md", "exec"), {})
    assert out.getvalue().rstrip() == shown.group(1)
