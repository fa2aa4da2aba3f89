"""The web API (`stepbill serve`): the CLI's JSON for the same inputs, one-line 4xx errors, no paths, limits."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed: pip install 'stepbill[web]'")
pytest.importorskip("httpx", reason="fastapi's TestClient needs httpx")

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepbill.web import api
from stepbill.web.app import MAX_BODY_BYTES, create_app
from tests.conftest import run_cli

DATA = Path(__file__).parents[1] / "data"


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app())


def cli_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> object:
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize(("argv", "options"), [
    (["bill", "gpt3-125m", "--seq", "1024", "--micro-batch", "8"], {"model": "gpt3-125m", "seq": 1024, "micro-batch": 8}),
    (["bill", "llama3-8b", "--seq", "4096", "--dp", "2", "--tp", "2", "--pp", "2", "--micro-batches", "4",
      "--gpu", "h100-sxm", "--recompute", "selective:core_attn", "--zero", "1"],
     {"model": "llama3-8b", "seq": "4096", "dp": "2", "tp": 2, "pp": "2", "micro-batches": "4", "gpu": "h100-sxm",
      "recompute": "selective:core_attn", "zero": "1"}),
    (["bill", "llama2-7b", "--lora-rank", "16", "--recipe", "pure-bf16", "--convention", "eager", "--sp", "--tp", "2"],
     {"model": "llama2-7b", "lora-rank": 16, "recipe": "pure-bf16", "convention": "eager", "sp": True, "tp": 2}),
])
def test_bill_route_returns_the_cli_json(client: TestClient, capsys: pytest.CaptureFixture[str], argv: list[str],
                                         options: dict[str, object]) -> None:
    want = cli_json([*argv, "--json"], capsys)
    assert client.post("/api/bill", json=options).json() == want
    query = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()}
    assert client.get("/api/bill", params=query).json() == want
    assert client.post("/api/view", json=options).json()["bill"] == want


def test_bill_from_config_content_equals_the_cli_reading_the_file(client: TestClient, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "llama-3-8b"
    folder.mkdir()
    shutil.copy(DATA / "hf_configs" / "llama-3-8b.json", folder / "config.json")
    want = cli_json(["bill", str(folder / "config.json"), "--seq", "1024", "--json"], capsys)
    text = (folder / "config.json").read_text()
    got = client.post("/api/bill", json={"model": "config", "config": text, "config-name": "llama-3-8b", "seq": 1024})
    assert got.json() == want
    # a ModelSpec JSON sent as an object
    want = cli_json(["bill", str(DATA / "tiny-llama.json"), "--json"], capsys)
    assert client.post("/api/bill", json={"config": json.loads((DATA / "tiny-llama.json").read_text())}).json() == want


@pytest.mark.slow  # the budget solver and two lab topics: ~3 s
def test_recompute_models_and_lab_routes_return_the_cli_json(client: TestClient,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    want = cli_json(["recompute", "gpt3-125m", "--seq", "1024", "--budget", "1GiB", "--threshold", "2", "--json"], capsys)
    # bill-only options (the page sends one state to both routes) are ignored here
    got = client.post("/api/recompute", json={"model": "gpt3-125m", "seq": 1024, "budget": "1GiB", "threshold": 2,
                                              "dp": 4, "gpu": "h100-sxm"})
    assert got.json() == want
    assert client.get("/api/models").json() == cli_json(["models", "--json"], capsys)
    for topic in ("adam", "collectives"):
        assert client.get(f"/api/lab/{topic}").json() == cli_json(["lab", topic, "--json"], capsys)


def test_view_has_the_cli_command_and_full_time_lines(client: TestClient, capsys: pytest.CaptureFixture[str]) -> None:
    options = {"model": "llama3-8b", "seq": 4096, "tp": 2, "gpu": "h100-sxm", "efficiency": 0.4, "sp": True}
    view = client.post("/api/view", json=options).json()
    assert view["command"] == "stepbill bill llama3-8b --seq 4096 --tp 2 --sp --gpu h100-sxm --efficiency 0.4"
    assert cli_json([*view["command"].split()[1:], "--json"], capsys) == view["bill"]
    assert view["recompute_command"] == "stepbill recompute llama3-8b --seq 4096"
    options["threshold"] = 2
    view = client.post("/api/view", json=options).json()
    assert view["recompute_command"] == "stepbill recompute llama3-8b --seq 4096 --threshold 2"
    assert cli_json([*view["recompute_command"].split()[1:], "--json"], capsys) == \
        client.post("/api/recompute", json=options).json()
    step = view["time_lines"]["step"]
    assert step["value"] == view["bill"]["time"]["step"]["value"]
    assert set(step) >= {"formula", "inputs", "provenance", "explain"}


@pytest.mark.parametrize(("argv", "options"), [
    (["bill", "nope"], {"model": "nope"}),
    (["bill", "--seq", "abc"], {"seq": "abc"}),
    (["bill", "--recipe", "fp33"], {"recipe": "fp33"}),
    (["bill", "--recompute", "every:0"], {"recompute": "every:0"}),
    (["bill", "llama3-8b", "--tp", "3"], {"model": "llama3-8b", "tp": 3}),
    (["bill", "--gpu", "h200x"], {"gpu": "h200x"}),
    (["bill", "--efficiency", "2"], {"efficiency": 2}),
    (["recompute", "gpt3-125m", "--seq", "1024", "--budget", "1MiB"], {"model": "gpt3-125m", "seq": 1024,
                                                                        "budget": "1MiB"}),
])
def test_bad_input_is_a_400_with_the_cli_message(client: TestClient, capsys: pytest.CaptureFixture[str],
                                                 argv: list[str], options: dict[str, object]) -> None:
    code, _, err = run_cli(argv, capsys)
    assert code == 2
    route = "/api/recompute" if argv[0] == "recompute" else "/api/bill"
    got = client.post(route, json=options)
    assert got.status_code == 400
    assert f"stepbill: error: {got.json()['error']}\n" == err


@pytest.mark.parametrize("argv", [["--gpu-mem", "inf"], ["--gpu-mem", "1e300"], ["--efficiency", "nan"],
                                  ["--reserve", "inf"]])
def test_non_finite_numbers_get_the_cli_message(client: TestClient, capsys: pytest.CaptureFixture[str],
                                                argv: list[str]) -> None:
    code, _, err = run_cli(["bill", *argv], capsys)
    got = client.get("/api/bill", params={argv[0][2:]: argv[1]})
    assert code == 2 and got.status_code == 400 and f"stepbill: error: {got.json()['error']}\n" == err


def test_a_nan_cut_is_refused_where_the_cli_would_print_nan(client: TestClient) -> None:
    got = client.get("/api/recompute", params={"model": "gpt3-125m", "seq": 1024, "threshold": "nan"})
    assert got.status_code == 400
    assert got.json()["error"] == "--threshold must be a finite number (TFLOP per GiB), got nan"


def test_a_config_too_deep_for_one_request_is_refused_at_once(client: TestClient, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    config = json.loads((DATA / "hf_configs" / "llama-3-8b.json").read_text())
    config["num_hidden_layers"] = 10**12  # would take hours: the bill is linear in layers
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, _, err = run_cli(["bill", str(tmp_path / "config.json")], capsys)
    got = client.post("/api/bill", json={"config": config})
    assert code == 2 and got.status_code == 400 and f"stepbill: error: {got.json()['error']}\n" == err


def test_no_route_reads_a_path(client: TestClient, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text((DATA / "tiny-llama.json").read_text())
    got = client.get("/api/bill", params={"model": str(path)})
    assert got.status_code == 400 and got.json()["error"].startswith("unknown model preset")
    got = client.post("/api/bill", json={"model": "config", "config": str(path)})
    assert got.status_code == 400 and "not valid JSON" in got.json()["error"]
    assert client.get("/api/lab/clip", params={"trace": str(path)}).json()["settings"]["trace"].startswith("synthetic")


def test_limits_and_unknown_routes(client: TestClient) -> None:
    big = client.post("/api/bill", content=b" " * (MAX_BODY_BYTES + 1), headers={"content-type": "application/json"})
    assert big.status_code == 413 and "\n" not in big.json()["error"]
    config = json.dumps({"model_type": "llama", "pad": "x" * (1 << 20)})
    assert client.post("/api/bill", json={"config": config}).status_code == 413
    plan = client.get("/api/plan", params={"model": "gpt3-125m", "gpus": "2", "seq": "1024"})
    assert plan.status_code == 400 and plan.json()["error"] == "--gpu is required for the planner: pick a GPU"
    assert client.get("/api/nothing").status_code == 404
    assert client.get("/api/lab/nope").status_code == 400
    assert client.post("/api/bill", content=b"[1, 2]").status_code == 400
    assert client.post("/api/bill", content=b"{").status_code == 400
    assert client.post("/api/bill", json={"seq": 1024, "sq": 2}).json()["error"].startswith("unknown option 'sq'")


def test_page_and_its_files_are_served_by_the_package(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    for src in ("/static/app.js", "/static/charts.js", "/static/style.css"):
        assert src in page.text
        assert client.get(src).status_code == 200
    assert "http://" not in page.text and "https://" not in page.text  # nothing from a CDN
    for src in ("/static/app.js", "/static/charts.js"):
        assert "https://" not in client.get(src).text


def test_choices_name_what_the_cli_accepts(client: TestClient) -> None:
    from stepbill.cli import DEFAULT_MODEL

    choices = client.get("/api/choices").json()
    assert choices["default_model"] == DEFAULT_MODEL
    assert choices["default_model"] in choices["models"]
    assert "mixed-bf16" in choices["recipes"] and "h100-sxm" in [g["name"] for g in choices["gpus"]]
    assert {o["name"] for o in choices["bill_options"]} == {o.name for o in api.BILL_OPTIONS}


_text = st.one_of(st.text(max_size=12), st.sampled_from(["", "0", "-1", "1", "2", "8", "1e9", "nan", "inf", "true",
                                                         "full", "every:2", "budget:1GiB", "h100-sxm", "gpt3-125m"]))
_value = st.one_of(_text, st.integers(-3, 10**7), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                   st.none(), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(),
                                                                                   max_size=2))
_keys = st.sampled_from([o.name for o in api.BILL_OPTIONS] + [o.name for o in api.RECOMPUTE_OPTIONS]
                        + ["model", "config", "config-name", "bogus"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(["/api/bill", "/api/view", "/api/recompute"]),
       options=st.dictionaries(_keys, _value, max_size=5))
def test_fuzz_no_5xx_and_every_error_is_one_line(client: TestClient, route: str, options: dict[str, object]) -> None:
    options.setdefault("model", "gpt3-125m")
    if route == "/api/recompute":
        options.setdefault("seq", 1024)
    got = client.post(route, content=json.dumps(options), headers={"content-type": "application/json"})  # NaN too
    assert got.status_code < 500, got.text
    if got.status_code != 200:
        error = got.json()["error"]
        assert error and "\n" not in error and "Traceback" not in error


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=st.dictionaries(st.sampled_from(["model_type", "vocab_size", "hidden_size", "num_hidden_layers",
                                               "num_attention_heads", "intermediate_size", "name", "family",
                                               "n_layers", "attention", "ffn"]),
                              _value, max_size=6))
def test_fuzz_configs_no_5xx(client: TestClient, config: dict[str, object]) -> None:
    got = client.post("/api/bill", content=json.dumps({"config": config}), headers={"content-type": "application/json"})
    assert got.status_code < 500, got.text


_small = st.sampled_from([0, 1, 2, 3, 4, 8, 16, -1])
_well_typed = st.fixed_dictionaries({}, optional={
    "model": st.sampled_from(["gpt3-125m", "llama3-8b", "llama3-70b", "deepseek-v3", "mixtral-8x7b", "gpt3-175b"]),
    "seq": st.sampled_from([1, 7, 128, 1024, 4096, 32768, 1 << 20]),
    "micro-batch": st.sampled_from([1, 2, 3, 64, 0]),
    "recipe": st.sampled_from(["mixed-bf16", "fp32", "amp-bf16", "bf16-moments", "adamw-8bit", "pure-bf16"]),
    "optimizer": st.sampled_from(["adamw", "sgd", "lion", "adafactor", "muon"]),
    "recompute": st.sampled_from(["none", "full", "every:2", "every:auto", "selective:core_attn,mlp", "budget:1GiB",
                                  "budget:1TiB"]),
    "convention": st.sampled_from(["ideal", "eager"]),
    "attention": st.sampled_from(["sdpa", "eager"]),
    "lora-rank": st.sampled_from([1, 64]),
    "dp": _small, "tp": _small, "pp": _small, "cp": _small, "ep": _small, "zero": st.sampled_from([0, 1, 2, 3]),
    "shard-group": _small, "sp": st.booleans(), "pp-schedule": st.sampled_from(["gpipe", "1f1b", "interleaved"]),
    "vpp": st.sampled_from([1, 2]), "micro-batches": st.sampled_from([1, 8]),
    "offload-optimizer": st.booleans(), "offload-activations": st.booleans(),
    "gpu": st.sampled_from(["h100-sxm", "a100-80gb", "mi300x"]), "gpu-mem": st.sampled_from([0.5, 80, "inf", "1e300"]),
    "threshold": st.sampled_from([0, 3, 100, "nan", "1e308"]), "group": st.sampled_from(["op", "seed"]),
    "budget": st.sampled_from(["1GiB", "100GiB"]),
})


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(["/api/view", "/api/recompute"]), options=_well_typed)
def test_fuzz_well_typed_layouts_reach_the_engine_without_5xx(client: TestClient, capsys: pytest.CaptureFixture[str],
                                                              route: str, options: dict[str, object]) -> None:
    got = client.post(route, json=options)
    assert got.status_code in (200, 400), got.text
    if got.status_code == 400:
        assert "\n" not in got.json()["error"]
    elif route == "/api/view":  # "copy as CLI command" prints the very same bill
        view = got.json()
        assert cli_json([*shlex.split(view["command"])[1:], "--json"], capsys) == view["bill"]


def test_a_computation_is_abandoned_after_the_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from stepbill.web import app as app_module

    monkeypatch.setattr(app_module, "REQUEST_SECONDS", 0.2)
    monkeypatch.setattr(api, "bill_json", lambda given: time.sleep(1.0))
    got = TestClient(create_app()).get("/api/bill")
    assert got.status_code == 503 and got.json()["error"] == "computation took longer than 0.2 s and was abandoned"


_CONFIGS = sorted((DATA / "hf_configs").glob("*.json"))
_weird = st.sampled_from([0, -1, 1, 2, 3, 7, 10**9, 10**18, 0.5, 1e308, "x", None, True, [], {}, [1, 2]])


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(_CONFIGS), data=st.data())
def test_fuzz_mutated_real_configs_no_5xx_and_bounded(client: TestClient, path: Path, data: st.DataObject) -> None:
    import time

    config = json.loads(path.read_text())
    for _ in range(data.draw(st.integers(1, 3))):
        config[data.draw(st.sampled_from(sorted(config)))] = data.draw(_weird)
    start = time.perf_counter()
    got = client.post("/api/view", content=json.dumps({"config": config, "seq": 128}),
                      headers={"content-type": "application/json"})
    assert got.status_code in (200, 400), got.text
    assert time.perf_counter() - start < 5
    if got.status_code == 400:
        assert "\n" not in got.json()["error"]


PLAN_QUERY = {"model": "gpt3-125m", "gpu": "h100", "gpus": "2", "seq": "1024", "global-batch-tokens": "8192",
              "fix": "zero=1,offload_optimizer=off,offload_activations=off"}


def test_plan_is_the_cli_json_and_its_points(client: TestClient, capsys: pytest.CaptureFixture[str]) -> None:
    """/api/plan answers `stepbill plan --json` for the same options (search timings aside), plus the scatter's
    points (every fitting layout, best first, the front marked) and the CLI command that reproduces the search."""
    from tests.conftest import run_cli

    got = client.get("/api/plan", params=PLAN_QUERY)
    assert got.status_code == 200, got.text
    data = got.json()
    assert data["command"] == ("stepbill plan gpt3-125m --gpu h100 --gpus 2 --seq 1024 --global-batch-tokens 8192 "
                               "--fix zero=1,offload_optimizer=off,offload_activations=off --exhaustive")
    code, out, err = run_cli([*data["command"].split()[1:], "--json"], capsys)
    assert code == 0, err
    cli = json.loads(out)
    timing = ("seconds", "layouts_per_s", "cpu_seconds", "layouts_per_cpu_s", "jobs")  # how, not what
    for d in (cli, data["plan"]):
        for key in timing:
            d["search"].pop(key)
    assert data["plan"] == cli
    points = data["points"]
    assert len(points) == cli["fits"] and [p["rank"] for p in points] == list(range(1, len(points) + 1))
    assert points[0]["command"] == cli["top"][0]["command"]
    front = {p["command"] for p in points if p["front"]}
    assert front == {r["command"] for r in cli["pareto"]["gpus_vs_time"] + cli["pareto"]["memory_vs_time"]}


@pytest.mark.parametrize(("query", "message"), [
    ({"objective": "fastest"}, "unknown objective"),
    ({"gpus": "0"}, "--gpus must be"),
    ({"fix": "tp=three"}, "tp"),
    ({"gpu": "h1000"}, "unknown gpu"),
])
def test_plan_bad_input_is_one_line(client: TestClient, query: dict[str, str], message: str) -> None:
    got = client.get("/api/plan", params={**PLAN_QUERY, **query})
    assert got.status_code == 400 and message in got.json()["error"] and "\n" not in got.json()["error"]


def test_plan_search_is_bounded_in_time(monkeypatch: pytest.MonkeyPatch, client: TestClient) -> None:
    """A search past the page's deadline stops and says how many candidates it left (never a 503 mid-search)."""
    from stepbill.web import api

    monkeypatch.setattr(api, "PLAN_SECONDS", 0.0)
    data = client.get("/api/plan", params={k: v for k, v in PLAN_QUERY.items() if k != "fix"}).json()
    search = data["plan"]["search"]
    assert search["complete"] is False and search["not_searched"] > 0
