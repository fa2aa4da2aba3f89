"""The page of `stepbill serve` in a real headless Chromium: controls change the charts and numbers, numbers open
their derivation, the URL reproduces the view. Screenshots land in test-artifacts/web/ (gitignored)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

DATA = Path(__file__).parents[1] / "data"


def renders(page: Any) -> int:
    return int(page.evaluate("Number(document.body.dataset.renders || 0)"))


def settle(page: Any, after: int) -> None:
    """Wait until the page has drawn a state newer than render `after` and every request is answered."""
    page.wait_for_function(f"Number(document.body.dataset.renders || 0) > {after} && document.body.dataset.state === 'idle'",
                           timeout=20_000)


def open_page(page: Any, url: str) -> None:
    page.goto(url)
    settle(page, 0)


def text(page: Any, testid: str) -> str:
    return str(page.get_by_test_id(testid).inner_text())


def change(page: Any, action: Any) -> None:
    before = renders(page)
    action()
    settle(page, before)


def test_controls_update_numbers_and_charts(page: Any, server_url: str, artifacts: Path) -> None:
    open_page(page, server_url)
    assert text(page, "num-params") == "125.23M"  # gpt3-125m, the CLI's default model
    peak0, memory0 = text(page, "num-peak"), page.inner_html("#memory-chart")

    change(page, lambda: page.get_by_test_id("model").select_option("llama3-8b"))
    assert text(page, "num-params") == "8.03B"
    assert text(page, "num-peak") != peak0 and page.inner_html("#memory-chart") != memory0

    peak1 = text(page, "num-peak")
    change(page, lambda: page.get_by_test_id("micro-batch").fill("4"))
    peak2 = text(page, "num-peak")
    assert peak2 != peak1
    timeline = page.inner_html("#timeline-chart")
    change(page, lambda: page.get_by_test_id("recompute").fill("full"))
    assert text(page, "num-peak") != peak2 and page.inner_html("#timeline-chart") != timeline
    assert float(page.evaluate("document.body.dataset.latencyMs")) < 1000  # drawn well within a second

    assert "Choose a GPU" in page.inner_text("#time-chart")
    for testid, value in (("dp", "2"), ("tp", "2"), ("pp", "2"), ("micro-batches", "4")):
        change(page, lambda t=testid, v=value: page.get_by_test_id(t).fill(v))
    change(page, lambda: page.get_by_test_id("gpu").select_option("h100-sxm"))
    assert page.locator("#memory-chart svg text.label").count() == 2  # two rank classes: first and last stage
    assert text(page, "num-rank-peak").endswith("GiB")
    assert page.locator("#comm-table tbody tr").count() == 3  # dp grad all-reduce, tp all-reduce, pp p2p
    assert page.locator("[data-testid=comm-chart] rect.bar").count() == 3
    assert text(page, "num-step-time").endswith(("ms", " s"))
    assert page.get_by_test_id("time-compute").count() == 1
    assert text(page, "cli-command") == ("stepbill bill llama3-8b --micro-batch 4 --recompute full --dp 2 --tp 2 "
                                         "--pp 2 --micro-batches 4 --gpu h100-sxm")
    page.screenshot(path=str(artifacts / "controls.png"), full_page=True)


def test_a_number_opens_its_formula_inputs_and_provenance(page: Any, server_url: str, artifacts: Path) -> None:
    open_page(page, f"{server_url}/?model=llama3-8b&seq=4096&tp=2&gpu=h100-sxm")
    assert page.get_by_test_id("explain").is_hidden()
    page.get_by_test_id("num-params").click()
    assert page.get_by_test_id("explain").is_visible()
    assert page.inner_text("#explain-name") == "params.total"

    page.get_by_test_id("mem-0-0").click()  # first item of the first rank class: its weights
    assert page.inner_text("#explain-name") == "weights"
    assert "÷" in text(page, "explain-filled") and "ZeRO" in text(page, "explain-filled")
    assert page.locator("#explain-inputs tr").count() >= 2

    page.get_by_test_id("num-step-time").click()
    assert page.inner_text("#explain-name") == "time.step"
    assert "pipeline" in text(page, "explain-filled")

    page.get_by_test_id("timeline-peak").click()
    assert page.inner_text("#explain-name") == "memory.peak"
    page.get_by_test_id("moment-0").click(force=True)  # one moment of the step: what is alive there
    assert page.inner_text("#explain-name").startswith("moment: forward")
    assert "weights" in text(page, "explain-filled")
    page.get_by_test_id("comm-bytes-0").click()
    assert "calls" in page.inner_text("#explain-formula")
    page.get_by_test_id("num-fit").click()  # the fit verdict: peak + reserve against usable memory
    assert page.inner_text("#explain-name") == "fit" and "usable" in text(page, "explain-filled")
    page.get_by_test_id("num-mfu").click()
    assert text(page, "explain-provenance").startswith("cited: PaLM")
    page.screenshot(path=str(artifacts / "explain.png"), full_page=False)


def test_the_url_reproduces_the_view(page: Any, browser: Any, server_url: str) -> None:
    open_page(page, server_url)
    change(page, lambda: page.get_by_test_id("model").select_option("llama2-7b"))
    change(page, lambda: page.get_by_test_id("seq").fill("8192"))
    change(page, lambda: page.get_by_test_id("zero").select_option("3"))
    change(page, lambda: page.get_by_test_id("dp").fill("8"))
    change(page, lambda: page.get_by_test_id("threshold").fill("5"))
    page.get_by_test_id("lab-schedule").click()
    page.wait_for_function("document.querySelector('#lab-view').dataset.topic === 'schedule'")
    url = page.url
    assert "model=llama2-7b" in url and "seq=8192" in url and "lab=schedule" in url
    shown = {t: text(page, t) for t in ("num-peak", "num-rank-peak", "cli-command", "recompute-note")}

    other = browser.new_page()
    try:
        other.goto(url)
        settle(other, 0)
        other.wait_for_function("document.querySelector('#lab-view').dataset.topic === 'schedule'")
        assert {t: text(other, t) for t in shown} == shown
        assert other.get_by_test_id("seq").input_value() == "8192"
        assert other.locator("#lab-tabs button.active").inner_text() == "schedule"
    finally:
        other.close()


def test_host_memory_is_part_of_the_verdict(page: Any, server_url: str) -> None:
    """Llama-3-70B at seq 8K on 8 H100 with ZeRO-3 and both offloads: every card fits, the DGX H100's 2 TiB host
    does not hold what the node offloads — "fits? no", its derivation says why; a 4,096 GiB node fits."""
    open_page(page, server_url)
    change(page, lambda: page.get_by_test_id("model").select_option("llama3-70b"))
    for testid, value in (("seq", "8192"), ("dp", "8"), ("micro-batches", "4")):
        change(page, lambda t=testid, v=value: page.get_by_test_id(t).fill(v))
    change(page, lambda: page.get_by_test_id("zero").select_option("3"))
    change(page, lambda: page.get_by_test_id("offload-optimizer").check())
    change(page, lambda: page.get_by_test_id("offload-activations").check())
    change(page, lambda: page.get_by_test_id("gpu").select_option("h100-sxm"))
    assert text(page, "num-fit") == "no"
    page.get_by_test_id("num-fit").click()
    assert "host memory per node" in page.inner_text("#explain")
    change(page, lambda: page.get_by_test_id("host-mem").fill("4096"))
    assert text(page, "num-fit") == "yes"
    assert "--host-mem 4096" in text(page, "cli-command")


def test_recompute_ranking_cut_and_budget_solver(page: Any, server_url: str, artifacts: Path) -> None:
    open_page(page, f"{server_url}/?model=llama3-8b&seq=4096")
    chart = page.get_by_test_id("recompute-chart")
    assert chart.locator("rect.bar").count() > 5 and chart.locator("line.cut").count() == 1
    below = chart.locator("rect.below-cut").count()
    change(page, lambda: page.get_by_test_id("threshold").fill("10"))
    assert chart.locator("rect.below-cut").count() > below  # a higher cut keeps more rows below it
    before = page.evaluate("Number(document.body.dataset.rankings || 0)")
    page.get_by_test_id("budget").fill("10GiB")
    page.wait_for_function(f"Number(document.body.dataset.rankings || 0) > {before} && "
                           "document.querySelector('[data-testid=num-budget-0]') !== null", timeout=20_000)
    assert "tensors dropped" in text(page, "num-budget-0")
    assert chart.locator("rect.dropped").count() >= 1
    page.get_by_test_id("rc-row-0").click()
    assert "TFLOP/GiB" in page.inner_text("#explain-value")
    page.screenshot(path=str(artifacts / "recompute.png"), full_page=True)


def test_config_pasted_or_uploaded_as_content_and_errors_in_one_line(page: Any, server_url: str, artifacts: Path,
                                                                      tmp_path: Path) -> None:
    open_page(page, server_url)
    page.get_by_test_id("model").select_option("config")
    page.get_by_test_id("config-text").fill((DATA / "hf_configs" / "qwen3-0.6b.json").read_text())
    change(page, lambda: page.get_by_test_id("config-use").click())
    assert page.get_by_test_id("error").is_hidden()
    assert "custom" in page.inner_text("#summary") and text(page, "num-params") == "596.05M"
    assert text(page, "cli-command").startswith("stepbill bill config.json")

    config = json.loads((DATA / "hf_configs" / "qwen3-0.6b.json").read_text())
    del config["vocab_size"]
    page.get_by_test_id("config-text").fill(json.dumps(config))
    page.get_by_test_id("config-use").click()
    page.wait_for_selector("[data-testid=error]:not([hidden])")
    error = text(page, "error")
    assert error.startswith("stepbill: error: ") and "vocab_size" in error and "\n" not in error
    page.screenshot(path=str(artifacts / "config-error.png"), full_page=False)

    # an uploaded file is read by the page and sent as content, named after the file
    upload = tmp_path / "tiny-llama.json"
    upload.write_text((DATA / "tiny-llama.json").read_text())
    change(page, lambda: page.get_by_test_id("config-file").set_input_files(str(upload)))
    assert page.get_by_test_id("error").is_hidden() and "tiny-llama" in page.inner_text("#summary")


def test_copy_as_cli_command(browser: Any, server_url: str) -> None:
    context = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    page = context.new_page()
    try:
        open_page(page, f"{server_url}/?model=llama3-8b&seq=4096&recompute=full&tp=2&sp=true")
        page.get_by_test_id("copy-cli").click()
        page.wait_for_function("document.querySelector('[data-testid=copy-cli]').textContent !== 'copy as CLI command'")
        copied = page.evaluate("navigator.clipboard.readText()")
        assert copied == "stepbill bill llama3-8b --seq 4096 --recompute full --tp 2 --sp"
    finally:
        context.close()


def test_labs_are_figures(page: Any, server_url: str, artifacts: Path) -> None:
    open_page(page, server_url)
    topics = page.eval_on_selector_all("#lab-tabs button", "bs => bs.map(b => b.dataset.topic)")
    assert {"adam", "warmup", "schedule", "clip", "formats", "collectives", "decay"} <= set(topics)
    for topic in topics:
        page.get_by_test_id(f"lab-{topic}").click()
        page.wait_for_function(f"document.querySelector('#lab-view').dataset.topic === '{topic}'")
        assert page.locator("#lab-view svg").count() >= 1, topic
    page.get_by_test_id("lab-collectives").click()
    page.wait_for_function("document.querySelector('#lab-view').dataset.topic === 'collectives'")
    page.get_by_test_id("lab-view").screenshot(path=str(artifacts / "lab-collectives.png"))


def test_planner_scatter_front_and_loading_a_point(page: Any, server_url: str, artifacts: Path) -> None:
    """The planner searches this model's layouts at the page's GPU count and tokens per step, draws them (peak vs
    step time, the Pareto front in red), lists the top rows with their commands, and loads a clicked point into the
    controls, which redraw the bill of that layout."""
    open_page(page, server_url + "/?seq=1024&dp=2&micro-batches=4")
    page.get_by_test_id("plan-run").click()
    assert "pick a GPU" in text(page, "plan-note")
    change(page, lambda: page.get_by_test_id("gpu").select_option("h100-sxm"))
    page.get_by_test_id("plan-fix").fill("offload_optimizer=off,offload_activations=off")
    page.get_by_test_id("plan-run").click()
    page.wait_for_function("document.body.dataset.plan === 'done'", timeout=60_000)
    assert page.locator("#plan-chart svg circle").count() >= 10
    assert page.locator("#plan-chart svg path.front").count() == 1
    assert "candidates fit" in text(page, "plan-note")
    assert text(page, "plan-command").startswith("stepbill plan gpt3-125m --gpu h100-sxm --gpus 2 --seq 1024 "
                                                 "--global-batch-tokens 8192")
    page.get_by_test_id("planner").screenshot(path=str(artifacts / "planner.png"))
    first = page.locator("table.plan tr").nth(1).inner_text()
    change(page, lambda: page.get_by_test_id("plan-load-1").click())
    assert page.evaluate("document.body.dataset.planLoaded") == "1"
    command = text(page, "cli-command")
    assert command.startswith("stepbill bill gpt3-125m --seq 1024") and "--gpu h100-sxm" in command
    assert "--optimizer-impl fused" in command  # the plan's AdamW, as its rows' commands say
    for axis in ("dp", "tp", "pp"):  # the row's layout is now the page's
        value = page.get_by_test_id(axis).input_value() or "1"
        assert f"{axis}{value}" in first or (axis != "dp" and value == "1"), (axis, value, first)
    point = page.locator("#plan-chart svg circle.clickable").last  # drawn last: on top of the others
    rank = point.get_attribute("data-testid").removeprefix("plan-point-")
    change(page, lambda: point.dispatch_event("click"))
    assert page.evaluate("document.body.dataset.planLoaded") == rank
