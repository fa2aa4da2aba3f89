"""A missing optional extra is one line naming it (CLI: exit 2), never a traceback or ModuleNotFoundError.

Simulated by hiding the module (sys.modules[name] = None makes `import name` fail), not by uninstalling.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from stepbill.errors import StepbillError, require_extra
from tests.conftest import run_cli


@pytest.fixture
def hide(monkeypatch: pytest.MonkeyPatch):
    """hide("scipy") makes scipy and its submodules import as missing for this test only."""

    def _hide(*names: str) -> None:
        for name in names:
            for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                monkeypatch.delitem(sys.modules, loaded)
            monkeypatch.setitem(sys.modules, name, None)

    return _hide


def _one_line(code: int, out: str, err: str, extra: str) -> None:
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"pip install 'stepbill[{extra}]'" in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [
    ["bill", "gpt3-125m", "--recompute", "budget:1GiB"],
    ["bill", "gpt3-125m", "--recompute", "budget:1", "--json"],
    ["recompute", "llama3-8b", "--seq", "1024", "--budget", "10GiB"],
])
def test_budget_needs_no_scipy(argv: list[str], hide, capsys) -> None:
    """The budget solver is exact without a MILP library (engine/recompute/budget.solve_exact)."""
    hide("scipy")
    code, out, err = run_cli(argv, capsys)
    assert code == 0 and out and not err, err


def test_budget_recipe_from_python_without_scipy(hide) -> None:
    from stepbill.spec.recipe import make_recipe

    hide("scipy")
    assert make_recipe(recompute="budget:1GiB").recompute_policy.kind == "budget"


def test_plot_without_matplotlib_names_the_plot_extra(hide, tmp_path: Path, capsys) -> None:
    hide("matplotlib")
    target = tmp_path / "adam.png"
    _one_line(*run_cli(["lab", "adam", "--plot", str(target)], capsys), "plot")
    assert not target.exists()


@pytest.mark.parametrize("module", ["torch", "transformers"])
def test_check_without_torch_names_the_measure_extra(module: str, hide, capsys) -> None:
    hide(module)
    code, out, err = run_cli(["check", "gpt3-125m", "--fake"], capsys)
    _one_line(code, out, err, "measure")
    assert module in err


@pytest.mark.parametrize("module", ["torch", "transformers"])
def test_library_measurement_without_torch_raises_stepbill_error(module: str, hide) -> None:
    """measure_step / saved_tensors / StepSession: a StepbillError, not a raw ModuleNotFoundError."""
    from stepbill.measure.saved import saved_tensors
    from stepbill.measure.session import StepSession
    from stepbill.measure.step import measure_step

    hide(module)
    config = {"model_type": "llama", "vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 1,
              "num_attention_heads": 2, "intermediate_size": 32}
    for call in (lambda: measure_step(config), lambda: saved_tensors(config), lambda: StepSession(config).__enter__()):
        with pytest.raises(StepbillError, match=r"stepbill\[measure\]"):
            call()


@pytest.mark.parametrize(("module", "extra"), [("fastapi", "web"), ("scipy", "solve"), ("matplotlib", "plot"),
                                               ("torch", "measure")])
def test_require_extra_names_the_extra(module: str, extra: str, hide) -> None:
    hide(module)
    with pytest.raises(StepbillError, match=rf"^stepbill serve needs {module}, which is not installed: "
                                            rf"pip install 'stepbill\[{extra}\]'$"):
        require_extra(module, "stepbill serve")
