"""`stepbill fit MODEL --max micro-batch|seq` (engine/fit_max.py): the answer fits by the bill's own verdict and the
next value does not (each checked by calling the bill), per rank class; the search; one-line errors; the JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

import stepbill
from stepbill.api import make_step_bill
from stepbill.engine.fit_max import search, seq_step
from stepbill.report.schema import validate
from tests.conftest import run_cli

QWEN = "examples/configs/qwen2.5-7b/config.json"

# (model, axis, held axis, options): one GPU, a sharded layout, pipeline stages with different answers, LoRA
CASES = [
    ("gpt3-350m", "micro_batch", {"seq": 2048}, {"gpu": "h100-sxm"}),
    (QWEN, "micro_batch", {"seq": 4096}, {"gpu": "h100-sxm", "lora_rank": 16, "recompute": "full"}),
    ("llama3-8b", "seq", {}, {"gpu": "h100-sxm", "lora_rank": 16}),
    ("llama3-8b", "micro_batch", {"seq": 8192}, {"gpu": "a100-80gb", "dp": 8, "zero": 3, "recompute": "full"}),
    ("llama2-13b", "seq", {"micro_batch": 2}, {"gpu_mem_gib": 80, "tp": 4, "sp": True, "pp": 2,
                                                "micro_batches": 4, "recompute": "full", "reserve_gib": 3}),
]


@pytest.mark.parametrize(("model", "axis", "held", "options"), CASES)
def test_the_answer_fits_and_the_next_value_does_not(model: str, axis: str, held: dict, options: dict) -> None:
    """For every rank class: the bill at its answer fits that class, the bill one step above does not; at the
    overall answer every class fits (all by `stepbill.bill`'s own fit verdict)."""
    run = stepbill.fit_max(model, axis=axis, **held, **options)
    result = run.result

    def verdict(value: int) -> object:
        return make_step_bill(model, **{**held, axis: value}, **options).fit

    assert verdict(run.largest).fits  # type: ignore[attr-defined]
    for c in result.classes:
        assert c.largest is not None and c.headroom_bytes >= 0
        here = verdict(c.largest).for_class(c.rank_class)  # type: ignore[attr-defined]
        assert here.fits and here.peak_bytes == pytest.approx(c.peak_bytes, rel=1e-12)
        assert c.next_value == c.largest + result.step
        above = verdict(c.next_value).for_class(c.rank_class)  # type: ignore[attr-defined]
        assert not above.fits and above.peak_bytes == pytest.approx(c.next_peak_bytes, rel=1e-12)
    assert run.largest == min(c.largest for c in result.classes if c.largest is not None)


def test_pipeline_stages_have_their_own_answers() -> None:
    """Stages hold different layers and in-flight micro-batches: each class gets its own largest seq; the answer is
    the smallest; under --sp with tp 4 the values are multiples of 4 (and of --multiple-of)."""
    run = stepbill.fit_max("llama2-13b", axis="seq", gpu_mem_gib=80, tp=4, sp=True, pp=2, micro_batches=4,
                           recompute="full", multiple_of=256)
    largest = [c.largest for c in run.result.classes]
    assert len(largest) == 2 and len(set(largest)) == 2 and run.result.step == 256
    assert all(v is not None and v % 256 == 0 for v in largest)


def test_the_limit_is_said_when_memory_is_not_what_stops() -> None:
    """GPT-3 125M's 2,048 learned positions end the search before the card does."""
    run = stepbill.fit_max("gpt3-125m", axis="seq", gpu="h100-sxm")
    data = run.to_json()
    assert run.largest == 2048 and data["limited_by"] == "limit" and "learned positions" in data["limit_reason"]
    assert "next_value" not in data["classes"][0] and data["classes"][0]["headroom_bytes"] > 0


def test_the_reproduce_command_gives_the_answer(capsys: pytest.CaptureFixture[str]) -> None:
    run = stepbill.fit_max("gpt3-350m", axis="micro_batch", seq=2048, gpu="h100-sxm", recompute="full")
    argv = run.command.split()[1:]
    assert argv[:2] == ["bill", "gpt3-350m"] and f"--micro-batch {run.largest}" in run.command
    code, out, _ = run_cli([*argv, "--json"], capsys)
    assert code == 0 and json.loads(out)["fit"]["fits"] is True


@dataclass(frozen=True)
class _Rank:
    rank_class: str
    peak_bytes: float
    headroom_bytes: float
    ranks: int = 1

    @property
    def fits(self) -> bool:
        return self.headroom_bytes >= 0


@dataclass(frozen=True)
class _Fit:
    ranks: tuple[_Rank, ...]
    host_fits: bool = True  # nothing offloaded

    def for_class(self, name: str) -> _Rank:
        return next(r for r in self.ranks if r.rank_class == name)


@dataclass(frozen=True)
class _Probe:
    value: int
    fit: _Fit


@pytest.mark.parametrize("answers", [(1, 1), (5, 300), (1023, 1024), (7, 2**20)])
def test_search_finds_each_class_answer_in_few_probes(answers: tuple[int, int]) -> None:
    """On two classes with peaks linear in the value (budget 0 at their answer), the search returns each class's
    exact bracket with O(log) probes."""
    limit = 2**20

    def probe(v: int) -> _Probe:
        return _Probe(v, _Fit(tuple(_Rank(f"c{i}", v, a - v) for i, a in enumerate(answers))))

    probes = search(probe, 1, limit)  # type: ignore[arg-type]
    for i, a in enumerate(answers):
        assert probes[a].fit.ranks[i].fits
        assert a == limit or not probes[a + 1].fit.ranks[i].fits
    assert len(probes) <= 2 * 21 + 2


def test_sequence_granularity_follows_the_layout() -> None:
    assert seq_step(1, False, 1) == 1 and seq_step(4, True, 1) == 4 and seq_step(4, False, 2) == 4
    assert seq_step(8, True, 3) == 24


@pytest.mark.parametrize(("argv", "needle"), [
    (["fit", QWEN, "--max", "micro-batch", "--seq", "4096", "--gpu", "h100"], "resident state alone"),
    (["fit", "gpt3-125m", "--max", "seq"], "needs a card"),
    (["fit", "gpt3-125m", "--max", "sek", "--gpu", "h100"], "did you mean 'seq'"),
    (["fit", "gpt3-125m", "--max", "seq", "--seq", "512", "--gpu", "h100"], "--seq is what --max seq searches"),
    (["fit", "gpt3-125m", "--max", "seq", "--gpu", "h100", "--multiple-of", "0"], "--multiple-of"),
    (["fit", "gpt3-125m", "--max", "seq", "--gpu", "h100", "--multiple-of", "4096"], "no seq is a multiple"),
    (["fit", "gpt3-125m", "--max", "micro-batch", "--gpu", "h100", "--tp", "5"], "tp"),
])
def test_bad_input_is_one_line(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and not out and needle in err and err.count("\n") == 1, err


def test_nothing_fits_names_the_resident_memory() -> None:
    """Qwen2.5-7B full fine-tuning (16 B/param) on one H100: 113.48 GiB resident before any activation."""
    with pytest.raises(stepbill.StepbillError, match=r"resident state alone .* 113\.48 GiB"):
        stepbill.fit_max(QWEN, axis="micro-batch", seq=4096, gpu="h100-sxm")


def test_json_is_schema_valid_and_matches_the_api(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["fit", "llama3-8b", "--max", "seq", "--gpu", "h100", "--lora-rank", "16", "--multiple-of", "1024"]
    code, out, _ = run_cli([*argv, "--json"], capsys)
    data = json.loads(out)
    validate("fit", data)
    api = stepbill.fit_max("llama3-8b", axis="seq", gpu="h100", lora_rank=16, multiple_of=1024).to_json()
    assert code == 0 and data == api and data["largest"] % 1024 == 0 and data["limited_by"] == "memory"
    code, text, _ = run_cli(argv, capsys)
    assert code == 0 and f"{data['largest']:,} tokens" in text and "reproduce: stepbill bill llama3-8b" in text


def test_a_peak_that_falls_is_refused_in_one_line() -> None:
    """The search's premise is checked on every evaluated value: a peak that falls as the value grows is an error."""
    from stepbill.engine.fit_max import check_monotone

    def probe(v: int, peak: float) -> _Probe:
        return _Probe(v, _Fit((_Rank("all ranks", peak, 10 - peak),)))

    check_monotone({1: probe(1, 1.0), 2: probe(2, 1.0), 4: probe(4, 3.0)}, "seq")  # type: ignore[dict-item]
    with pytest.raises(stepbill.StepbillError, match="not monotone"):
        check_monotone({1: probe(1, 2.0), 2: probe(2, 1.0)}, "micro_batch")  # type: ignore[dict-item]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gpt3-350m", "llama2-7b", "mixtral-8x7b", "deepseek-v3"])
def test_over_random_cards_the_answer_fits_and_one_step_more_does_not(model: str) -> None:
    """Random cards, reserves, recipes and layouts (hypothesis): wherever an answer exists, the bill says it fits and
    one step above does not."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    layouts = [{}, {"dp": 8, "zero": 3}, {"tp": 2, "sp": True}, {"pp": 2, "micro_batches": 4}]
    if model in ("mixtral-8x7b", "deepseek-v3"):
        layouts = [{"dp": 8, "ep": 8, "zero": 1}, {"dp": 16, "ep": 8, "zero": 3, "pp": 2, "micro_batches": 2}]

    @settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
    @given(axis=st.sampled_from(["micro_batch", "seq"]), layout=st.sampled_from(layouts),
           recompute=st.sampled_from(["none", "full", "every:2"]), gib=st.sampled_from([24, 40, 80, 141, 192]),
           reserve=st.sampled_from([None, 0, 2.5]))
    def check(axis: str, layout: dict, recompute: str, gib: int, reserve: float | None) -> None:
        held = {"seq": 1024} if axis == "micro_batch" else {"micro_batch": 1}
        options = {**layout, "recompute": recompute, "gpu_mem_gib": gib, "reserve_gib": reserve}
        try:
            run = stepbill.fit_max(model, axis=axis, **held, **options)
        except stepbill.StepbillError as exc:
            assert "nothing fits" in str(exc)
            return
        fit = make_step_bill(model, **{**held, axis: run.largest}, **options).fit
        assert fit is not None and fit.fits
        if run.result.limited_by_memory:
            above = make_step_bill(model, **{**held, axis: run.largest + run.result.step}, **options).fit
            assert above is not None and not above.fits

    check()
