"""`check` measures the model the user trains: no config field is overwritten between the file and the built
model (issue 11, item 1). Built on the meta device (milliseconds at any size)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepbill.check import model_and_config
from stepbill.engine.unmodelled import unmodelled

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from stepbill.measure.build import build_model  # noqa: E402

CONFIGS = sorted((Path(__file__).parents[1] / "data" / "hf_configs").glob("*.json"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_built_model_config_is_the_file(path: Path) -> None:
    """Every key of the file reads back from the built model as transformers itself makes of the file; the only
    field that differs from transformers' plain config is `dtype`, the recipe's parameter dtype (fp32 here)."""
    data = json.loads(path.read_text())
    _, config = model_and_config(str(path))
    assert config == data  # check hands the file over as given
    model = build_model(config, meta=True)
    kwargs = dict(data)
    plain = transformers.AutoConfig.for_model(kwargs.pop("model_type"), **kwargs)
    built, expected = model.config.to_dict(), plain.to_dict()
    assert built.pop("dtype") == "float32"
    expected.pop("dtype")
    assert built == expected
    for key in data:  # keys transformers renames (rope_theta) are compared through to_dict above
        if hasattr(plain, key) and key not in ("torch_dtype", "dtype"):
            assert getattr(model.config, key) == getattr(plain, key), key
    assert model.training  # dropout modules active, as in training


def test_dropout_modules_keep_the_configured_probability() -> None:
    path = next(p for p in CONFIGS if p.stem == "gpt2")
    _, config = model_and_config(str(path))
    model = build_model(config, meta=True)
    probs = sorted({m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)})
    assert probs == [0.1]  # attn_pdrop, resid_pdrop, embd_pdrop as in the file
    assert model.config.attn_pdrop == 0.1


def test_dropout_zero_option_sets_every_probability_to_zero() -> None:
    path = next(p for p in CONFIGS if p.stem == "gpt2")
    spec, config = model_and_config(str(path), dropout=0)
    assert (config["attn_pdrop"], config["resid_pdrop"], config["embd_pdrop"]) == (0.0, 0.0, 0.0)
    assert unmodelled(spec) == []
    model = build_model(config, meta=True)
    assert {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)} == {0.0}
    # only the dropout keys change
    assert {k for k in config if config[k] != json.loads(path.read_text()).get(k)} == {
        "attn_pdrop", "resid_pdrop", "embd_pdrop"}


def test_preset_config_emits_the_spec_dropout_and_window() -> None:
    """A preset goes through to_hf_config, which states the spec's dropout (0) instead of leaving the family's
    default (GPT-2: 0.1) to transformers."""
    _, config = model_and_config("gpt3-125m")
    assert (config["attn_pdrop"], config["resid_pdrop"], config["embd_pdrop"]) == (0.0, 0.0, 0.0)
    model = build_model(config, meta=True)
    assert {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)} == {0.0}
