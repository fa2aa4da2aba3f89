"""Hub ids as MODEL (`stepbill bill Qwen/Qwen2.5-7B`): from a local Hugging Face cache fixture, never the network."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli

NEEDS_HUB = "Hub ids need the hub extra: pip install 'stepbill[hub]'"
QWEN_CONFIG = Path(__file__).resolve().parent.parent / "examples" / "configs" / "qwen2.5-7b" / "config.json"
COMMIT = "a09a35458c702b33eeacc393d103063234e8bc28"


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache in tmp_path, offline mode on (env and huggingface_hub's constants, which it
    read at import time)."""
    constants = pytest.importorskip("huggingface_hub.constants", reason=NEEDS_HUB)

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def warm(cache: Path, repo_id: str, config_text: str) -> None:
    """What a previous `hf_hub_download(repo_id, "config.json")` leaves in the cache."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    (repo / "snapshots" / COMMIT).mkdir(parents=True)
    (repo / "snapshots" / COMMIT / "config.json").write_text(config_text)


def test_bill_of_a_hub_id_from_a_warm_cache(hf_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    warm(hf_cache, "Qwen/Qwen2.5-7B", QWEN_CONFIG.read_text())
    code, out, err = run_cli(["bill", "Qwen/Qwen2.5-7B", "--json"], capsys)
    assert code == 0, err
    from stepbill.spec.presets import load_model

    data = json.loads(out)
    assert data["model"]["name"] == "Qwen2.5-7B"
    assert data["model"]["params_total"] == 7_615_616_512  # transformers' count for Qwen2.5-7B
    local = load_model(str(QWEN_CONFIG)).to_dict()
    assert {**data["model"]["spec"], "name": local["name"]} == local  # the same spec as the local config.json


def test_api_reads_hub_ids_too(hf_cache: Path) -> None:
    import stepbill

    warm(hf_cache, "Qwen/Qwen2.5-7B", QWEN_CONFIG.read_text())
    assert stepbill.load_model("Qwen/Qwen2.5-7B").hidden_size == 3584


def test_offline_with_a_cold_cache_is_one_line(hf_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["bill", "Qwen/Qwen2.5-7B"], capsys)
    assert code == 2 and not out
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "not in the Hugging Face cache" in err and "HF_HUB_OFFLINE is set" in err


def test_a_config_without_model_type_is_refused(hf_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    warm(hf_cache, "someone/not-a-model", json.dumps({"hello": 1}))
    code, _, err = run_cli(["bill", "someone/not-a-model"], capsys)
    assert code == 2 and "has no model_type" in err and err.count("\n") == 1


@pytest.mark.parametrize(("error", "needle"), [
    ("GatedRepoError", "is gated: accept its terms on huggingface.co, then set HF_TOKEN"),
    ("RepositoryNotFoundError", "no such repository on the Hub, or it is private"),
    ("RemoteEntryNotFoundError", "the repository has no config.json"),
])
def test_hub_refusals_are_one_line(error: str, needle: str, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    huggingface_hub = pytest.importorskip("huggingface_hub", reason=NEEDS_HUB)
    import huggingface_hub.utils as hub_utils
    from huggingface_hub import errors

    exc_type = getattr(errors, error, None) or getattr(hub_utils, error.removeprefix("Remote"))
    response = type("Response", (), {"status_code": 404, "headers": {}, "request": None, "url": ""})()

    def refuse(*args: object, **kwargs: object) -> str:
        raise exc_type("refused\nwith a second line", response=response)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    code, out, err = run_cli(["bill", "meta-llama/Llama-3.1-8B"], capsys)
    assert code == 2 and not out
    assert needle in err and err.count("\n") == 1


def test_missing_huggingface_hub_names_the_extra(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    code, _, err = run_cli(["bill", "Qwen/Qwen2.5-7B"], capsys)
    assert code == 2 and "pip install 'stepbill[hub]'" in err and err.count("\n") == 1


def test_local_paths_and_presets_win_over_hub_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stepbill.spec.hub import looks_like_hub_id
    from stepbill.spec.presets import load_model

    (tmp_path / "org" / "name").mkdir(parents=True)
    (tmp_path / "org" / "name" / "config.json").write_text(QWEN_CONFIG.read_text())
    monkeypatch.chdir(tmp_path)
    assert load_model("org/name").name == "name"  # a local folder, not the Hub
    assert looks_like_hub_id("Qwen/Qwen2.5-7B") and looks_like_hub_id("meta-llama/Llama-3.1-8B")
    assert not looks_like_hub_id("llama3-8b") and not looks_like_hub_id("a/b/c") and not looks_like_hub_id("a/b.json")


@pytest.fixture
def unreachable(hf_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache fixture with offline mode off and every TCP connection refused (no network touched)."""
    import socket

    from huggingface_hub import constants

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("no route")

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(socket, "create_connection", refuse)
    return hf_cache


def test_an_unreachable_hub_reads_the_cache(unreachable: Path) -> None:
    """No HF_HUB_OFFLINE, no network: the warm cache answers at once (huggingface_hub's retries take ~25 s)."""
    import stepbill

    warm(unreachable, "Qwen/Qwen2.5-7B", QWEN_CONFIG.read_text())
    assert stepbill.load_model("Qwen/Qwen2.5-7B").hidden_size == 3584


def test_an_unreachable_hub_with_a_cold_cache_is_one_line(unreachable: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["bill", "Qwen/Qwen2.5-7B"], capsys)
    assert code == 2 and not out and err.count("\n") == 1
    assert "not in the Hugging Face cache" in err and "cannot be reached" in err


def test_a_proxy_leaves_the_connection_to_huggingface_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from stepbill.spec.hub import hub_reachable

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("no route")

    monkeypatch.setattr(socket, "create_connection", refuse)
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert not hub_reachable("https://huggingface.co")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert hub_reachable("https://huggingface.co")


def test_shipped_hub_presets_need_no_network_nor_cache(hf_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Hub id stepbill ships the config.json of (presets/hub) is read from that copy: a cold cache, offline,
    in any letter case; its preset name gives the same model, and its notes say where the file came from."""
    from stepbill.spec.presets import load_model

    code, out, err = run_cli(["bill", "Qwen/Qwen3-8B", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["model"]["name"] == "qwen3-8b"
    assert data["model"]["params_total"] == 8_190_735_360  # transformers' count for Qwen3-8B
    assert load_model("qwen/qwen3-8b") == load_model("qwen3-8b") == load_model("Qwen/Qwen3-8B")
    assert "Qwen/Qwen3-8B's config.json, shipped with stepbill" in load_model("qwen3-8b").notes


def test_every_hub_preset_is_its_shipped_config() -> None:
    """Each Hub preset is its config.json read as a user's file would be (from_hf_config), listed among the presets,
    and `check` measures that file as it is, not a config rebuilt from the spec."""
    from stepbill.check import model_and_config
    from stepbill.spec.hf import from_hf_config
    from stepbill.spec.presets import hub_presets, load_preset, preset_names, shipped_config

    assert set(hub_presets()) <= set(preset_names())
    for name, hub_id in hub_presets().items():
        shipped = shipped_config(hub_id)
        assert shipped is not None and shipped[1] == name
        config, _ = shipped
        spec = load_preset(name)
        assert spec.to_dict() | {"notes": ""} == from_hf_config(config, name=name).to_dict() | {"notes": ""}
        assert model_and_config(name)[1] == config
