"""Shared test helpers and the test tiers.

Tiers (see tests/README.md):
The markers are declared in pyproject.toml.
- `slow`: over about a second, or needing torch. `pytest -m "not slow"` is the development tier: no torch
  needed, under a minute.
- `torch`: needs torch and transformers (the `measure` extra). Applied here to whole modules (TORCH_MODULES)
  and by `@pytest.mark.torch` to single tests; every `torch` test is also `slow`, and is skipped with a reason
  naming the extra when torch or transformers is missing.
- `needs("scipy")` / `needs("matplotlib")`: skipped, naming the extra, when that module is missing.

`STEPBILL_HIDE=torch,scipy pytest ...` hides modules from the whole run (they import as missing), to check the
skips and the product's one-line errors without a second environment.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from stepbill.errors import EXTRAS, has_module

GIB = 2**30
TIB = 2**40
KIB = 2**10

TESTS = Path(__file__).parent
#: Modules whose every test builds a model or a step in PyTorch.
TORCH_MODULES = {
    "measure",  # the whole folder
    "test_eager_saved.py",
    "test_eager_saved_more.py",
    "test_params_vs_transformers.py",
    "test_sharded.py",
}

#: Folders whose every test is slow without torch (the fuzz suite: minutes of examples).
SLOW_MODULES = {"fuzz"}


def hide_modules(names: list[str]) -> None:
    """Make `names` (and their submodules) import as missing for the rest of the process."""
    for name in names:
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[loaded]
        sys.modules[name] = None  # type: ignore[assignment]  # `import name` raises ImportError


# No per-example deadline: this machine is shared and loaded, and a deadline turns load into flaky failures. The
# fuzz suite bounds each example itself (tests/fuzz).
settings.register_profile("stepbill", deadline=None)
# CI (CI=true): the same examples every run (derandomize), so a red CI is a regression, never a new random draw;
# developers' runs keep exploring (random seeds) and any failure they find becomes a regression test.
settings.register_profile("stepbill-ci", deadline=None, derandomize=True, database=None)
settings.load_profile("stepbill-ci" if os.environ.get("CI") else "stepbill")

if os.environ.get("STEPBILL_HIDE"):
    hide_modules([n.strip() for n in os.environ["STEPBILL_HIDE"].split(",") if n.strip()])


def extra_reason(module: str) -> str:
    """The skip reason for a test that needs `module`: the extra that installs it."""
    return f"needs {module}: pip install 'stepbill[{EXTRAS.get(module, 'dev')}]'"


def _in_torch_module(item: pytest.Item) -> bool:
    rel = Path(str(item.fspath)).relative_to(TESTS)
    return rel.parts[0] in TORCH_MODULES


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    missing_torch = next((m for m in ("torch", "transformers") if not has_module(m)), None)
    for item in items:
        if Path(str(item.fspath)).relative_to(TESTS).parts[0] in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
        if _in_torch_module(item) and not item.get_closest_marker("torch"):
            item.add_marker(pytest.mark.torch)
        if item.get_closest_marker("torch"):
            item.add_marker(pytest.mark.slow)
            if missing_torch:
                item.add_marker(pytest.mark.skip(reason=extra_reason(missing_torch)))
        for mark in item.iter_markers("needs"):
            for module in mark.args:
                if not has_module(module):
                    item.add_marker(pytest.mark.skip(reason=extra_reason(module)))


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
